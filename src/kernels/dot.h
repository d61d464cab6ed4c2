/* Private to kernels/: the per-ISA kernel tables and the runtime selection between them.
 * dot_ref.c holds the portable scalar versions (the ground truth), dot_avx2.c the AVX2/FMA/F16C ones,
 * dot_avx512.c the AVX-512 (+VNNI) ones, and dispatch.c picks a table once at ci_kernels_init.
 *
 * Reduction orders (the invariance contract).  Every output element y[t][o] of ci_matmul is computed by one
 * thread, in an order that depends only on n_in and the selected table, never on the tile it sits in, the
 * thread count or the other tokens of the batch:
 *  - F32/F16/BF16 (float activations): the table's dot order.  Scalar: front to back.  AVX2: ONE 8-lane
 *    accumulator over the row in steps of 8 (lane j sums elements i = j mod 8 with FMA), a fixed horizontal
 *    sum, then the n mod 8 tail added front to back.  AVX-512: one 16-lane accumulator, the last partial step
 *    zero-masked, a fixed horizontal sum.  Register tiles of several rows x tokens give each element its own
 *    accumulator, so a 1x1 and a 3x8 tile produce the same bits.
 *  - Q8_0/Q4_0 (activations quantized to Q8, see struct ci_act_q8): per 32-block an exact int32 dot isum_b,
 *    then acc = fmaf(dw_b * dx_b, (float)isum_b, acc) over the blocks in order from acc = 0.  Integer sums
 * are exact in any order and every float operation is the same scalar operation in every implementation, so
 *    the scalar, AVX2 and AVX-512 tables give the SAME bits for the quantized types. */
#ifndef CINFER_KERNELS_DOT_H
#define CINFER_KERNELS_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef float (*ci_dot_fn)(const void *row, const float *x, int64_t n);

/* Activations of n_tok tokens quantized for the integer dots: each token's n_in values cut into 32-value
 * blocks; block b of token t has scale d = max|x| / 127 (float) and values q = x / d rounded to the nearest
 * integer (ties to even) as int8, and sum = the sum of those 32 q (the Q4_0 offset correction).
 * Scales and sums are stored token-minor so that 8 consecutive tokens' values are one vector load; the
 * tok_stride - n_tok padding entries repeat token n_tok - 1 (tiles that clamp to the last token read them).
 */
struct ci_act_q8 {
    int8_t *qs;     // [n_tok][n_in]
    float *d;       // [n_in / 32][tok_stride]
    int32_t *sum;   // [n_in / 32][tok_stride]
    int64_t n_in;   // a multiple of 32
    int n_tok;      // tokens quantized
    int tok_stride; // n_tok rounded up to a multiple of 8
};

/* Blocks whose max |x| is below this quantize to zero (d = 0): their contribution is below float resolution
 * next to any normal activation, and it keeps 1/d finite (x * (1/d) would overflow to inf for tiny d).
 * Non-finite activations give non-finite or unspecified (but memory-safe) results. */
#define ACT_MIN_AMAX 0x1p-100f

/* One token: x [n_in] -> qs [n_in], d[b * stride], sum[b * stride] for each block b. */
typedef void (*ci_quant_act_fn)(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum,
                                int64_t stride);

/* One matmul: W [n_out rows of row_bytes] times the activations of n_tok tokens into y [n_tok][n_out]. */
struct ci_mm {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_in, n_out;
    const float *x;            // [n_tok][n_in] float activations (F32/F16/BF16)
    const struct ci_act_q8 *q; // quantized activations (Q8_0/Q4_0)
    float *y;                  // [n_tok][n_out]
    int n_tok;
};

/* Computes y[t][o] for o in [r0, r1), t in [t0, t1): the kernel picks its register tiles and cache blocking
 * inside that panel; each element follows the reduction order above. */
typedef void (*ci_mm_fn)(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);

/* Online-softmax attention over one chunk of n <= CI_ATTN_CHUNK key/value positions for ng query heads that
 * share a KV head: s_i = scale * q_g . k_i, m' = max(m_g, max_i s_i), c = e^(m_g - m') (0 while m_g = -inf),
 * l_g = l_g * c + sum_i e^(s_i - m'), acc_g = acc_g * c + sum_i e^(s_i - m') v_i, m_g = m'.
 * The caller cuts positions into chunks at fixed multiples of CI_ATTN_CHUNK (never at KV block edges), so
 * the order of operations depends only on the position, not on the block size or the batch. */
#define CI_ATTN_CHUNK 16
typedef void (*ci_attn_chunk_fn)(const float *const *k, const float *const *v, int n, const float *const *q,
                                 int ng, int hd, float scale, float *m, float *l, float *acc /* [ng][hd] */);

struct ci_dot_table {
    const char *isa; // "scalar", "avx2+fma+f16c", "avx512+vnni"
    // dot(row, float x): the reference order of each type (Q8_0/Q4_0 quantize x to Q8 block by block first)
    ci_dot_fn f32;
    ci_dot_fn f16;
    ci_dot_fn bf16;
    ci_dot_fn q8_0;
    ci_dot_fn q4_0;
    ci_dot_fn f32_short; // F32 dot for attention (q.k over head_dim): any fixed order, tuned for short n
    ci_attn_chunk_fn attn_chunk;
    ci_quant_act_fn quant_act;
    ci_mm_fn mm_f32;
    ci_mm_fn mm_f16;
    ci_mm_fn mm_bf16;
    ci_mm_fn mm_q8_0;
    ci_mm_fn mm_q4_0;
};

/* Longest head_dim ci_attention_paged supports (its per-thread accumulators live on the stack). */
#define CI_ATTN_MAX_HEAD_DIM 256

/* ci_matmul cuts row ranges at multiples of this: the most rows one register tile (or the AVX-512 repacked
 * quantized panel) spans. */
#define CI_MM_ROW_ALIGN 16

const struct ci_dot_table *ci_dot_ref_table(void);
/* NULL when the SIMD versions were not compiled in; only call the routines after a CPU probe said yes.
 * The AVX-512 table uses the AVX2 one for small quantized batches: it is only selected when both exist. */
const struct ci_dot_table *ci_dot_avx2_table(void);
const struct ci_dot_table *ci_dot_avx512_table(void);
/* Tables this CPU can run, best first (scalar last); returns how many were written (at most 3). */
int ci_kernels_tables(const struct ci_dot_table **out);

/* The selected table (runs the CPU probe on first use). */
const struct ci_dot_table *ci_kernels_table(void);
/* The routine of the selected table for a supported type (CI_ASSERTs the type). */
ci_dot_fn ci_dot_select(uint32_t type);
ci_mm_fn ci_mm_select(const struct ci_dot_table *t, uint32_t type);
/* Tests: true forces the scalar table, false restores what the CPU probe (and the environment) chose. */
void ci_kernels_force_scalar(bool on);
/* Tests: runs everything on table t (one of ci_kernels_tables()); NULL restores the probed choice. */
void ci_kernels_force_table(const struct ci_dot_table *t);

/* Scalar building blocks shared by the tables (dot_ref.c): the canonical quantized block dots. */
int32_t ci_ref_idot_q8_0(const void *wblock, const int8_t *xq);
int32_t ci_ref_idot_q4_0(const void *wblock, const int8_t *xq);
/* dot(row, float x) for quantized rows in the canonical order (bit-identical in every table). */
float ci_ref_dot_q8_0(const void *row, const float *x, int64_t n);
float ci_ref_dot_q4_0(const void *row, const float *x, int64_t n);
void ci_ref_quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, int64_t stride);
void ci_ref_attn_chunk(const float *const *k, const float *const *v, int n, const float *const *q, int ng,
                       int hd, float scale, float *m, float *l, float *acc);

#endif
