/* The 16-row packed weight layouts (ci_pack) that the AVX-512 and AVX2 tables' packed matmuls read (F16 and
 * BF16: ci_pk_float_bytes below; the quantized types here): per
 * group of 16 rows, block after block, each block's bytes as "lane vectors" of 64 bytes whose 4-byte lane i
 * holds row i's 4 bytes (so one 64-byte vector, or each 32-byte half of it for 8 rows, serves a vector
 * instruction's rows side by side, with no horizontal reduction), then the block's per-row scales.  Q8_0,
 * Q4_0, Q5_0, IQ4_NL: dot_avx512.c's comment; the K-quants (Q4_K, Q5_K, Q6_K, IQ4_XS): pack16.c's.  The bytes
 * equal the rows' own, groups and blocks follow each other unpadded, and rows past the last whole group are
 * not packed (they stay in the file's layout). */
#ifndef CINFER_KERNELS_PACK16_H
#define CINFER_KERNELS_PACK16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

#define CI_PK_ROWS        16
#define CI_PK_SCALE_BYTES 32 // a 32-block's 16 fp16 scales, after its chunk vectors

/* A 16-row group's code bytes per block (its 32 bytes of scales follow them): Q5_0 adds one vector of qh. */
static inline size_t ci_pk_chunk_bytes(uint32_t type) {
    return type == CI_TYPE_Q8_0 ? 512 : type == CI_TYPE_Q5_0 ? 320 : 256;
}

static inline bool ci_pk_kquant(uint32_t type) {
    return type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K || type == CI_TYPE_Q6_K || type == CI_TYPE_IQ4_XS;
}

static inline int64_t ci_pk_block_elems(uint32_t type) {
    return ci_pk_kquant(type) ? 256 : 32;
}

/* A 16-row group's bytes per block: the rows' own bytes (16 x 34, 18, 22, 144, 176 or 210). */
static inline size_t ci_pk_block_bytes(uint32_t type) {
    switch (type) {
    case CI_TYPE_Q8_0:
        return 16 * sizeof(struct ci_block_q8_0);
    case CI_TYPE_Q4_0:
    case CI_TYPE_IQ4_NL:
        return 16 * sizeof(struct ci_block_q4_0);
    case CI_TYPE_Q5_0:
        return 16 * 22;
    case CI_TYPE_Q4_K:
        return 16 * 144;
    case CI_TYPE_Q5_K:
        return 16 * 176;
    case CI_TYPE_IQ4_XS:
        return 16 * 136;
    default: // Q6_K
        return 16 * 210;
    }
}

static inline size_t ci_pk_group_bytes(uint32_t type, int64_t nb) {
    return (size_t)nb * ci_pk_block_bytes(type);
}

/* The packing's bytes for a type and shape (0: the type has no packed layout, or n_in is not a whole number
 * of its blocks, or there is no whole group). */
size_t ci_pk_bytes(uint32_t type, int64_t n_in, int64_t n_out);
/* The float weights' packing (F16, BF16; fpack_avx512.c with R = 16 residues, fpack_avx2.c with R = 8), n_in
 * a multiple of 16: per 16-row group, for each residue j = 0..R-1, for each unit u = 0..n_in/R - 1, the 16
 * rows' 2-byte value of element Ru + j (one 32-byte vector).  A lane then sums exactly the products that lane
 * j of the row kernels' R-lane accumulator sums, in the same order, so the packed matmul keeps their bits.
 * Its bytes (0: not packed), and the groups [g0, g1) of it: the readable definition, which the tables pack
 * with fpack_avx2.c's transposes instead (ci_avx2_pk_float_rows, the same bytes). */
size_t ci_pk_float_bytes(uint32_t type, int64_t n_in, int64_t n_out);
void ci_pk_float_rows(int residues, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                      uint8_t *dst);
/* The activations that matmul reads, in the same order (struct ci_mm.xp): per block of CI_PK_FLOAT_TOKENS
 * tokens (t / CI_PK_FLOAT_TOKENS), for each residue j, for each unit u, the block's tokens' element Ru + j
 * side by side (CI_PK_FLOAT_TOKENS floats; in the last block, the lanes past the batch are never read).  A
 * tile's broadcasts then walk one residue's values in order instead of touching a cache line of every token
 * per value. */
#define CI_PK_FLOAT_TOKENS 12
size_t ci_pk_float_act_bytes(int64_t n_in, int n_tok);
/* Prefill over packed float rows (a batch of more than the CPU's f16_widen_min_tokens) on the AVX-512 table
 * (R = 16) widens row blocks of at most this many bytes back to F32 rows and runs the F32 tiles, which read
 * x itself, not xp.  The AVX2 table, like its row kernels, never widens. */
#define CI_PK_FLOAT_WIDEN_BYTES (256 * 1024)
static inline bool ci_pk_float_widens(int residues, int64_t n_in, int n_tok) {
    return residues == 16 && n_tok > ci_kernels_tune()->f16_widen_min_tokens &&
           (size_t)n_in * 4 * CI_PK_ROWS <= CI_PK_FLOAT_WIDEN_BYTES;
}
/* Tokens [t0, t1) of x [n_tok][n_in] (n_in a multiple of 16) into their places in xp, for R residues. */
void ci_pk_float_act(int residues, const float *x, int64_t n_in, int t0, int t1, float *xp);
/* The packed matmuls' tile tables hold a tile for each token count of a block, 1 to CI_PK_FLOAT_TOKENS: a tile
 * over nt tokens reads exactly their lanes (a wider tile's extra products would be wasted work, and a
 * speculative verification's k + 1 tokens take any count). */
static inline int ci_pk_float_tile_class(int nt) {
    return nt - 1;
}
/* The tokens from t (before t1) that share t's block: one tile's worth. */
static inline int ci_pk_float_block_tokens(int t, int t1) {
    const int rest = CI_PK_FLOAT_TOKENS - t % CI_PK_FLOAT_TOKENS;
    return t1 - t < rest ? t1 - t : rest;
}
/* Packs the groups [g0, g1) of the rows at w (row_bytes apart) where the whole packing starts at dst (the
 * types of ci_pk_bytes). */
void ci_pk_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                uint8_t *dst);

#endif
