/* AVX-512 kernels (AVX512F/BW/VL/DQ and VNNI: Ice Lake, Sapphire Rapids, Zen 4 and later).  The Makefile
 * gives ISA flags only to *_avx2.c, so this file is built portably and every function carries a target
 * attribute; dispatch.c calls in only after the CPU probe.
 *
 * Float types: as dot_avx2.c with 16-lane accumulators.  This table's reduction order: one 16-lane
 * accumulator per element over steps of 16, the last partial step with zero-masked loads, then a fixed
 * horizontal sum.  Register tiles go up to 3 rows x 8 tokens or 4 x 6 (24 of the 32 registers accumulate);
 * prefill runs 4 x 6 tiles.  F16/BF16 prefill converts each row block to F32 once (exact) and runs the F32
 * tiles on it: the products and their order are the same, without a conversion per tile.  These are the
 * kernels of rows in the file's layout; F16/BF16 matrices that the loader packed run in fpack_avx512.c, with
 * the same bits.
 *
 * Quantized types keep the canonical order of dot.h, so they give the same bits as the scalar and AVX2
 * tables. Batches of VNNI_MIN_TOKENS or more: a task repacks 16 weight rows at a time (a slice of blocks)
 * into a "vertical" layout: per block, for each 4-byte chunk c, the 16 rows' chunk c side by side in one
 * 64-byte vector (values made unsigned: Q4_0 nibbles as they are, Q8_0 + 128), then the 16 row scales as
 * floats. One vpdpbusd of chunk c with a token's 4 activation bytes broadcast then adds 4 products to each of
 * 16 rows in 16 lanes; 8 of them are the rows' exact block dots, with no horizontal reduction.  The offset (8
 * or 128 times the sum of the token's block) is subtracted and each lane continues the canonical fma chain.
 * The repacking is paid once per 16 rows and slice and reused by up to 256 tokens.  Smaller batches (decode)
 * use the AVX2 kernels, which read each weight once without repacking. */
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/pack16.h"

#include "kernels/quant.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define AI   static inline __attribute__((always_inline)) T512
// Unoptimised builds (make VARIANT=debug) unroll nothing, and GCC rejects the annotation there.  24: the most
// accumulators of a float tile (RM x TN); a loop over them left rolled kept acc on the stack around the main
// loop and in the partial last unit's FMAs.
#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 24")
#else
#define UNROLL
#endif
#include "kernels/prefetch_inl.h" // needs AI
/* A value used by several FMAs is loaded once into a register: left alone, the compiler folds the load into
 * every FMA as a memory operand, and the tile becomes bound by load ports instead of FMA ports. */
#define KEEP_IN_REG(v) __asm__("" : "+v"(v))

// Float panels: weight bytes of a row block kept in L2, its row count cap (sizes the parked accumulators) and
// the bytes of a token group's activation slice kept in L1.
#define L2_BLOCK_BYTES (256 * 1024)
#define BLOCK_ROWS     64
#define L1_X_BYTES     (32 * 1024)
// Prefill token groups: 6 tokens against 4 rows (24 accumulators; 10 loads a step, tinyBLAS's shape), a few
// percent faster here than 8 x 3 (11 loads a step); row blocks are cut in multiples of TILE_ROWS.
#define TOKEN_GROUP 6
#define TILE_ROWS   4
// Prefill panels run their tokens in chunks of at most this many activation bytes (they stay in L2 while
// every row block of the panel streams over them; 1 MiB: half the L2 of the machines measured).
#define X_L2_BYTES (1024 * 1024)
// F16/BF16 panels of more than 8 tokens convert each row block to F32 once, into a stack buffer of this many
// bytes (rows of up to CVT_BYTES / 16 / TILE_ROWS elements), and the F32 tiles read that.
#define CVT_BYTES L2_BLOCK_BYTES

// Quantized batches from this many tokens take the repacked VNNI path.
#define VNNI_MIN_TOKENS  3
#define PACK_ROWS        16
#define PACK_BLOCKS      32            // blocks per repacked slice
#define PACK_BLOCK_BYTES (8 * 64 + 64) // 8 chunk vectors + 16 float scales
#define REPACK_AHEAD     16            // blocks prefetched ahead while repacking
#define PACK_TOKENS      256           // tokens sharing one repacked slice (bounds the parked accumulators)

AI float hsum16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hsum16 of a, b, c and d, in lanes 0..3, with hsum16's pairing (lane i with i + 8, then i + 4, i + 2, i + 1)
 * and so its bits, in 4 vectors' worth of shuffles instead of 16. */
AI __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee)); // i + 8
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd)); // i + 4
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4e));                                                 // i + 2
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xb1));                                                 // i + 1
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

/* ---- float types -------------------------------------------------------------------------------------- */

AI __m512 widen16(uint32_t type, __m256i h) {
    if (type == CI_TYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); // BF16
}

/* 16 weights from element i; partial: only the lanes of mask (others zero). */
AI __m512 load16(uint32_t type, const uint8_t *row, int64_t i) {
    if (type == CI_TYPE_F32)
        return _mm512_loadu_ps(row + 4 * i);
    return widen16(type, _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * i)));
}

AI __m512 load16_mask(uint32_t type, const uint8_t *row, int64_t i, __mmask16 mask) {
    if (type == CI_TYPE_F32)
        return _mm512_maskz_loadu_ps(mask, row + 4 * i);
    return widen16(type, _mm256_maskz_loadu_epi16(mask, row + 2 * i));
}

/* The reference order of this table. */
AI float dot1(uint32_t type, const void *row, const float *x, int64_t n) {
    const uint8_t *w = row;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(load16(type, w, i), _mm512_loadu_ps(x + i), acc);
    if (i < n) {
        __mmask16 mask = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(load16_mask(type, w, i, mask), _mm512_maskz_loadu_ps(mask, x + i), acc);
    }
    return hsum16(acc);
}

T512 static float dot_f32(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_F32, row, x, n);
}
T512 static float dot_f16(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_F16, row, x, n);
}
T512 static float dot_bf16(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_BF16, row, x, n);
}

/* Attention's q.k: two accumulators for short rows (not tied to the matmul order). */
T512 static float dot_f32_short(const void *row, const float *x, int64_t n) {
    const float *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 mask = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, w + i), _mm512_maskz_loadu_ps(mask, x + i), a0);
    }
    return hsum16(_mm512_add_ps(a0, a1));
}

/* A register tile over a k slice (units of 16 elements; the last unit of a row may be partial), as in
 * dot_avx2.c: accumulators parked between slices, exactly. */
struct tile_args {
    const struct ci_mm *m;
    const uint8_t *w; // row r's weights (of m or of a converted copy), rows wrb bytes apart
    size_t wrb;
    int64_t r;
    int nr;
    int t;
    int nt;
    int64_t k0, k1;
    bool first, last;
    bool stream; // the rows come from memory (the first token group of a block): prefetch the next tile's
    __m512 *acc;
};

/* Decode prefetches go to L2 (T1), not L1 (T0): a T0 prefetch holds one of the core's few L1 fill buffers
 * for a whole DRAM round trip, which capped a core at about 13.5 GB/s here (tinyllama F32, 1 thread: 3.1
 * tokens/s with T0, 3.7 with T1; T2 3.4), about what each of 2 threads needs to reach the machine's
 * bandwidth.  The L2 has more outstanding misses; the tile's own loads then hit L2. */
AI void prefetch_lines(const uint8_t *p, const int n_lines) {
    UNROLL
    for (int l = 0; l < n_lines; l++)
        _mm_prefetch((const char *)(p + 64 * l), _MM_HINT_T1);
}

AI void ftile(uint32_t type, const int RM, const int TN, const struct tile_args *ta) {
    const struct ci_mm *m = ta->m;
    const int64_t n = m->n_in, full = n / 16;
    const uint8_t *wr[8];
    const float *xt[8];
    UNROLL
    for (int i = 0; i < RM; i++)
        wr[i] = ta->w + (size_t)(i < ta->nr ? i : ta->nr - 1) * ta->wrb;
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = m->x + (size_t)(ta->t + (j < ta->nt ? j : ta->nt - 1)) * (size_t)n;
    __m512 acc[24];
    UNROLL
    for (int k = 0; k < RM * TN; k++)
        acc[k] = ta->first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&ta->acc[k]);
    const int esize = type == CI_TYPE_F32 ? 4 : 2;
    const int step = RM * 16 * esize;
    // Rows read from memory (decode shapes, and the first token group over a row block) prefetch the next
    // tile's rows; the later groups find the block in L2, which the hardware prefetchers bring to L1 well
    // enough (explicit prefetches there only cost load slots and spilled pointer registers).
    const uint8_t *pf = ta->w + RM * ta->wrb + (size_t)ta->k0 * (size_t)step;
    int64_t u1 = ta->k1 < full ? ta->k1 : full;
    for (int64_t i = ta->k0 * 16; i < u1 * 16; i += 16) {
        if ((RM >= 4 && TN <= 2) || ta->stream) {
            prefetch_lines(pf, (step + 63) / 64);
            pf += step;
        }
        if (RM <= TN) {
            __m512 wv[8];
            UNROLL
            for (int a = 0; a < RM; a++)
                wv[a] = load16(type, wr[a], i);
            UNROLL
            for (int j = 0; j < TN; j++) {
                __m512 xv = _mm512_loadu_ps(xt[j] + i);
                KEEP_IN_REG(xv);
                UNROLL
                for (int a = 0; a < RM; a++)
                    acc[a * TN + j] = _mm512_fmadd_ps(wv[a], xv, acc[a * TN + j]);
            }
        } else {
            __m512 xv[8];
            UNROLL
            for (int j = 0; j < TN; j++)
                xv[j] = _mm512_loadu_ps(xt[j] + i);
            UNROLL
            for (int a = 0; a < RM; a++) {
                __m512 wv = load16(type, wr[a], i);
                KEEP_IN_REG(wv);
                UNROLL
                for (int j = 0; j < TN; j++)
                    acc[a * TN + j] = _mm512_fmadd_ps(wv, xv[j], acc[a * TN + j]);
            }
        }
    }
    if (ta->k1 > full) { // the row's partial last unit
        const int64_t i = full * 16;
        const __mmask16 mask = (__mmask16)((1u << (n - i)) - 1);
        UNROLL
        for (int j = 0; j < TN; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, xt[j] + i);
            UNROLL
            for (int a = 0; a < RM; a++)
                acc[a * TN + j] = _mm512_fmadd_ps(load16_mask(type, wr[a], i, mask), xv, acc[a * TN + j]);
        }
    }
    if (!ta->last) {
        UNROLL
        for (int k = 0; k < RM * TN; k++)
            _mm512_store_ps((float *)&ta->acc[k], acc[k]);
        return;
    }
    if (RM == 4) { // a token's 4 rows are 4 consecutive outputs: one transposed reduction, one store
        const __mmask8 rows = (__mmask8)((1u << ta->nr) - 1);
        UNROLL
        for (int j = 0; j < TN; j++) {
            if (j >= ta->nt)
                break;
            _mm_mask_storeu_ps(m->y + (size_t)(ta->t + j) * (size_t)m->n_out + (size_t)ta->r, rows,
                               hsum16x4(acc[0 * TN + j], acc[1 * TN + j], acc[2 * TN + j], acc[3 * TN + j]));
        }
        return;
    }
    UNROLL
    for (int a = 0; a < RM; a++) {
        if (a >= ta->nr)
            break;
        UNROLL
        for (int j = 0; j < TN; j++) {
            if (j >= ta->nt)
                break;
            m->y[(size_t)(ta->t + j) * (size_t)m->n_out + (size_t)(ta->r + a)] = hsum16(acc[a * TN + j]);
        }
    }
}

typedef void (*tile_fn)(const struct tile_args *ta);

#define FTILE(T, name, RM, TN)                                                                               \
    T512 static void name##_##RM##x##TN(const struct tile_args *ta) {                                        \
        ftile(T, RM, TN, ta);                                                                                \
    }
#define FTILES(T, name)                                                                                      \
    FTILE(T, name, 8, 1)                                                                                     \
    FTILE(T, name, 6, 2)                                                                                     \
    FTILE(T, name, 6, 3)                                                                                     \
    FTILE(T, name, 6, 4)                                                                                     \
    FTILE(T, name, 4, 5)                                                                                     \
    FTILE(T, name, 4, 6)                                                                                     \
    FTILE(T, name, 3, 7)                                                                                     \
    FTILE(T, name, 3, 8)                                                                                     \
    static const tile_fn name##_tiles[9] = {NULL,       name##_8x1, name##_6x2, name##_6x3, name##_6x4,      \
                                            name##_4x5, name##_4x6, name##_3x7, name##_3x8};

FTILES(CI_TYPE_F32, f32)
FTILES(CI_TYPE_F16, f16)
FTILES(CI_TYPE_BF16, bf16)

static const int ftile_rows[9] = {0, 8, 6, 6, 6, 4, 4, 3, 3}; // RM of the tile for TN tokens

/* F16/BF16 rows [r, r + nr) to F32 (exact) into cvt_buf, rows n_in floats apart. */
T512 static void convert_rows(const struct ci_mm *m, int64_t r, int64_t nr, float *cvt_buf) {
    const int64_t n = m->n_in;
    for (int64_t a = 0; a < nr; a++) {
        const uint8_t *src = m->w + (size_t)(r + a) * m->row_bytes;
        float *dst = cvt_buf + (size_t)a * (size_t)n;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, load16(m->type, src, i));
        if (i < n) {
            __mmask16 mask = (__mmask16)((1u << (n - i)) - 1);
            _mm512_mask_storeu_ps(dst + i, mask, load16_mask(m->type, src, i, mask));
        }
    }
}

/* Tokens [t0, t1) against rows [rb, re) (weights wb, rows wrb bytes apart): token groups of up to
 * TOKEN_GROUP; inside, k slices whose activations stay in L1; inside, the row tiles of the block.  stream:
 * wb is the file's rows, the first group reads them from memory.  Else wb is a widened copy in L2 and pf,
 * pf_bytes the next block's file rows, prefetched a share before each tile (L2: the next widening then
 * finds them there instead of stalling on memory). */
T512 static void fblock(const struct ci_mm *m, const tile_fn *tiles, const uint8_t *wb, size_t wrb,
                        int64_t rb, int64_t re, int t0, int t1, bool stream, const uint8_t *pf,
                        size_t pf_bytes) {
    _Alignas(64) __m512 park[(BLOCK_ROWS + 2) * 8]; // ceil(64 / RM) tiles of RM x TN accumulators, at most
    const int64_t n_units = (m->n_in + 15) / 16;
    // a share of the lines per tile, over about the tiles of two token groups
    const size_t pf_per = pf_bytes / 64 / (size_t)(2 * ((re - rb + TILE_ROWS - 1) / TILE_ROWS)) + 1;
    for (int t = t0; t < t1;) {
        int tn = t1 - t < TOKEN_GROUP ? t1 - t : TOKEN_GROUP;
        int rm = ftile_rows[tn];
        int64_t slice = L1_X_BYTES / (64 * tn), n_slices = (n_units + slice - 1) / slice;
        slice = (n_units + n_slices - 1) / n_slices; // equal slices: no short tail slice
        struct tile_args ta = {.m = m, .wrb = wrb, .t = t, .nt = tn, .stream = stream && t == t0};
        for (int64_t k0 = 0; k0 < n_units; k0 += slice) {
            ta.k0 = k0;
            ta.k1 = n_units - k0 > slice ? k0 + slice : n_units;
            ta.first = k0 == 0;
            ta.last = ta.k1 == n_units;
            __m512 *acc = park;
            for (int64_t r = rb; r < re; r += rm) {
                ta.w = wb + (size_t)(r - rb) * wrb;
                ta.r = r;
                ta.nr = re - r < rm ? (int)(re - r) : rm;
                ta.acc = acc;
                for (size_t c = 0; c < pf_per && pf_bytes >= 64; c++, pf += 64, pf_bytes -= 64)
                    _mm_prefetch((const char *)pf, _MM_HINT_T1);
                tiles[tn](&ta);
                acc += rm * tn;
            }
        }
        t += tn;
    }
}

/* Token chunks whose activations stay in L2; inside, row blocks whose weights stay in L2 (fblock).  The
 * chunks and blocks of a panel are of equal sizes, the blocks a multiple of the prefill tile's rows where
 * possible: no short tile at the end of each. */
T512 static void fpanel(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1, const tile_fn *tiles,
                        const tile_fn *cvt_tiles, float *cvt_buf /* [CVT_BYTES / 4] or NULL */) {
    // Widening a block once costs a store and a reload per weight; converting in the tiles, one vcvtph2ps per
    // weight and token group.  Which is cheaper depends on the CPU (ci_kernels_tune).
    const bool convert = cvt_buf && t1 - t0 > ci_kernels_tune()->f16_widen_min_tokens &&
                         (size_t)m->n_in * 4 * TILE_ROWS <= CVT_BYTES;
    const size_t wrb = convert ? (size_t)m->n_in * 4 : m->row_bytes;
    int64_t block = (int64_t)(L2_BLOCK_BYTES / (wrb ? wrb : 1)); // converted: at most CVT_BYTES of rows
    block = block > BLOCK_ROWS ? BLOCK_ROWS : block;
    if (convert)
        block = block < TILE_ROWS ? TILE_ROWS : block;
    else
        block = block < CI_MM_ROW_ALIGN ? CI_MM_ROW_ALIGN : block / CI_MM_ROW_ALIGN * CI_MM_ROW_ALIGN;
    const int64_t n_blocks = (r1 - r0 + block - 1) / block;
    block = (r1 - r0 + n_blocks - 1) / n_blocks;
    const int64_t aligned = (block + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    if (aligned <= BLOCK_ROWS && (!convert || (size_t)aligned * wrb <= CVT_BYTES))
        block = aligned;
    const int64_t n_chunks = ((int64_t)(t1 - t0) * m->n_in * 4 + X_L2_BYTES - 1) / X_L2_BYTES;
    int chunk = (int)((t1 - t0 + n_chunks - 1) / n_chunks);
    chunk = (chunk + TOKEN_GROUP - 1) / TOKEN_GROUP * TOKEN_GROUP;
    for (int tc = t0; tc < t1; tc += chunk) {
        const int tce = t1 - tc > chunk ? tc + chunk : t1;
        for (int64_t rb = r0; rb < r1; rb += block) {
            const int64_t re = rb + block < r1 ? rb + block : r1;
            if (convert) {
                convert_rows(m, rb, re - rb, cvt_buf);
                const int64_t ne = re + block < r1 ? re + block : r1; // the next block's rows
                fblock(m, cvt_tiles, (const uint8_t *)cvt_buf, wrb, rb, re, tc, tce, false,
                       m->w + (size_t)re * m->row_bytes, (size_t)(ne - re) * m->row_bytes);
            } else {
                fblock(m, tiles, m->w + (size_t)rb * m->row_bytes, wrb, rb, re, tc, tce, true, NULL, 0);
            }
        }
    }
}

T512 static void mm_f32(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    fpanel(m, r0, r1, t0, t1, f32_tiles, NULL, NULL);
}
T512 static void mm_f16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    _Alignas(64) float cvt_buf[CVT_BYTES / 4];
    fpanel(m, r0, r1, t0, t1, f16_tiles, f32_tiles, cvt_buf);
}
T512 static void mm_bf16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    _Alignas(64) float cvt_buf[CVT_BYTES / 4];
    fpanel(m, r0, r1, t0, t1, bf16_tiles, f32_tiles, cvt_buf);
}

/* ---- quantized types: repacked VNNI ------------------------------------------------------------------- */

/* Index vectors of the 16 x 8 dword transpose (three vpermt2d stages, each swapping one bit of the register
 * index with one bit of the lane index; [stage][output bit]). */
static const int32_t transpose_idx[3][2][16] = {
    {{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
     {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}},
    {{0, 1, 4, 5, 16, 17, 20, 21, 8, 9, 12, 13, 24, 25, 28, 29},
     {2, 3, 6, 7, 18, 19, 22, 23, 10, 11, 14, 15, 26, 27, 30, 31}},
    {{0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30},
     {1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31}},
};

/* A block's 32 weights as unsigned bytes in element order (Q4_0: nibble values 0..15, low nibbles = elements
 * 0..15 first; Q8_0: w + 128). */
AI __m256i block_u8(uint32_t type, const uint8_t *blk) {
    if (type == CI_TYPE_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)),
                                _mm256_set1_epi8((char)0x80));
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(blk + 2)));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* Rows [r, r + nr) (missing rows repeat the last), blocks [b0, b1) -> pack. */
AI void repack(uint32_t type, const struct ci_mm *m, int64_t r, int nr, int64_t b0, int64_t b1,
               uint8_t *pack) {
    const size_t bb = type == CI_TYPE_Q8_0 ? sizeof(struct ci_block_q8_0) : sizeof(struct ci_block_q4_0);
    const uint8_t *wr[PACK_ROWS];
    for (int i = 0; i < PACK_ROWS; i++)
        wr[i] = m->w + (size_t)(r + (i < nr ? i : nr - 1)) * m->row_bytes;
    __m512i idx[3][2];
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 2; o++)
            idx[s][o] = _mm512_loadu_si512(transpose_idx[s][o]);
    for (int64_t b = b0; b < b1; b++) {
        const size_t off = (size_t)b * bb;
        uint8_t *dst = pack + (size_t)(b - b0) * PACK_BLOCK_BYTES;
        // 16 rows in lockstep from memory (decode-sized batches): keep REPACK_AHEAD blocks in flight per row
        UNROLL
        for (int i = 0; i < PACK_ROWS; i++)
            _mm_prefetch((const char *)(wr[i] + off + REPACK_AHEAD * bb), _MM_HINT_T0);
        // z[k]: rows 2k and 2k+1 (register bits r3 r2 r1, lane = r0 chunk); after the three stages
        // c[chunk]: lane = row.
        __m512i z[8], a[8], t[8];
        UNROLL
        for (int k = 0; k < 8; k++)
            z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(block_u8(type, wr[2 * k] + off)),
                                      block_u8(type, wr[2 * k + 1] + off), 1);
        UNROLL
        for (int k = 0; k < 4; k++) // pairs differing in r3 -> register bit 2 becomes chunk bit 2
            for (int o = 0; o < 2; o++)
                a[(o << 2) | k] = _mm512_permutex2var_epi32(z[k], idx[0][o], z[k | 4]);
        UNROLL
        for (int c2 = 0; c2 < 2; c2++) // pairs differing in r2 -> register bit 1 becomes chunk bit 1
            for (int r1 = 0; r1 < 2; r1++)
                for (int o = 0; o < 2; o++)
                    t[(c2 << 2) | (o << 1) | r1] =
                        _mm512_permutex2var_epi32(a[(c2 << 2) | r1], idx[1][o], a[(c2 << 2) | 2 | r1]);
        UNROLL
        for (int k = 0; k < 4; k++) // pairs differing in r1 -> register bit 0 becomes chunk bit 0
            for (int o = 0; o < 2; o++)
                _mm512_storeu_si512(dst + 64 * ((k << 1) | o),
                                    _mm512_permutex2var_epi32(t[k << 1], idx[2][o], t[(k << 1) | 1]));
        uint16_t h[PACK_ROWS];
        for (int i = 0; i < PACK_ROWS; i++)
            memcpy(&h[i], wr[i] + off, 2);
        _mm512_storeu_ps(dst + 512, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h)));
    }
}

AI int32_t load_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A vertical tile's block step: the 16 rows' integer dots acc[j] of token t + j, less the unsigned offset (2^shift
 * times the block's activation sum), continue each lane's canonical chain f[j] += (dw * dx) * isum. */
AI void vblock_fma(const int TN, const __m512i *acc, __m512 dw, const struct ci_act_q8 *q, int64_t b, int t,
                   int shift, __m512 *f) {
    const float *dx = q->d + b * q->tok_stride + t;
    const int32_t *xs = q->sum + b * q->tok_stride + t;
    UNROLL
    for (int j = 0; j < TN; j++) {
        __m512i s = _mm512_sub_epi32(acc[j], _mm512_set1_epi32(xs[j] * (1 << shift)));
        f[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[j])), _mm512_cvtepi32_ps(s), f[j]);
    }
}

/* A vertical tile's end of slice: park the accumulators, or after the last slice store the nr real rows. */
AI void vtile_finish(const int TN, const struct ci_mm *m, int64_t r, int nr, int t, bool last, __m512 *park,
                     const __m512 *f) {
    if (!last) {
        UNROLL
        for (int j = 0; j < TN; j++)
            _mm512_store_ps((float *)&park[j], f[j]);
        return;
    }
    const __mmask16 rows = (__mmask16)((1u << nr) - 1);
    UNROLL
    for (int j = 0; j < TN; j++)
        _mm512_mask_storeu_ps(m->y + (size_t)(t + j) * (size_t)m->n_out + (size_t)r, rows, f[j]);
}

/* 16 repacked rows x TN tokens over the pack's blocks [b0, b1); F (lanes = rows) parked between slices. */
AI void vtile(uint32_t type, const int TN, const struct ci_mm *m, const uint8_t *pack, int64_t b0, int64_t b1,
              int64_t r, int nr, int t, bool first, bool last, __m512 *park) {
    const struct ci_act_q8 *q = m->q;
    const int shift = type == CI_TYPE_Q8_0 ? 7 : 3; // the unsigned offset: 128 or 8 times sum(x)
    const int8_t *xt[8];
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = q->qs + (size_t)(t + j) * (size_t)m->n_in;
    __m512 f[8];
    UNROLL
    for (int j = 0; j < TN; j++)
        f[j] = first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&park[j]);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = pack + (size_t)(b - b0) * PACK_BLOCK_BYTES;
        __m512i acc[8];
        UNROLL
        for (int j = 0; j < TN; j++)
            acc[j] = _mm512_setzero_si512();
        UNROLL
        for (int c = 0; c < 8; c++) {
            __m512i w = _mm512_load_si512(p + 64 * c);
            UNROLL
            for (int j = 0; j < TN; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], w, _mm512_set1_epi32(load_i32(xt[j] + b * 32 + 4 * c)));
        }
        vblock_fma(TN, acc, _mm512_load_ps(p + 512), q, b, t, shift, f);
    }
    vtile_finish(TN, m, r, nr, t, last, park, f);
}

typedef void (*vtile_fn)(const struct ci_mm *m, const uint8_t *pack, int64_t b0, int64_t b1, int64_t r,
                         int nr, int t, bool first, bool last, __m512 *park);

#define VTILE(T, name, TN)                                                                                   \
    T512 static void name##_v##TN(const struct ci_mm *m, const uint8_t *pack, int64_t b0, int64_t b1,        \
                                  int64_t r, int nr, int t, bool first, bool last, __m512 *park) {           \
        vtile(T, TN, m, pack, b0, b1, r, nr, t, first, last, park);                                          \
    }
#define VTILES(T, name)                                                                                      \
    VTILE(T, name, 1)                                                                                        \
    VTILE(T, name, 2)                                                                                        \
    VTILE(T, name, 4)                                                                                        \
    VTILE(T, name, 8)                                                                                        \
    T512 static void name##_repack(const struct ci_mm *m, int64_t r, int nr, int64_t b0, int64_t b1,         \
                                   uint8_t *pack) {                                                          \
        repack(T, m, r, nr, b0, b1, pack);                                                                   \
    }                                                                                                        \
    static const vtile_fn name##_vtiles[9] = {NULL, name##_v1, name##_v2, NULL,     name##_v4,               \
                                              NULL, NULL,      NULL,      name##_v8};

VTILES(CI_TYPE_Q8_0, q8_0)
VTILES(CI_TYPE_Q4_0, q4_0)

typedef void (*repack_fn)(const struct ci_mm *m, int64_t r, int nr, int64_t b0, int64_t b1, uint8_t *pack);

/* 16-row groups; inside, up to PACK_TOKENS tokens; inside, slices of PACK_BLOCKS blocks repacked once;
 * inside, token groups of 8 (then 4, 2, 1). */
T512 static void vpanel(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1, repack_fn rp,
                        const vtile_fn *tiles) {
    _Alignas(64) uint8_t pack[PACK_BLOCKS * PACK_BLOCK_BYTES];
    _Alignas(64) __m512 park[PACK_TOKENS];
    const int64_t nb = m->n_in / 32;
    for (int64_t r = r0; r < r1; r += PACK_ROWS) {
        int nr = r1 - r < PACK_ROWS ? (int)(r1 - r) : PACK_ROWS;
        for (int tp = t0; tp < t1; tp += PACK_TOKENS) {
            int tp1 = t1 - tp < PACK_TOKENS ? t1 : tp + PACK_TOKENS;
            for (int64_t b0 = 0; b0 < nb; b0 += PACK_BLOCKS) {
                int64_t b1 = nb - b0 < PACK_BLOCKS ? nb : b0 + PACK_BLOCKS;
                rp(m, r, nr, b0, b1, pack);
                for (int t = tp; t < tp1;) {
                    int tn = tp1 - t >= 8 ? 8 : tp1 - t >= 4 ? 4 : tp1 - t >= 2 ? 2 : 1;
                    tiles[tn](m, pack, b0, b1, r, nr, t, b0 == 0, b1 == nb, park + (t - tp));
                    t += tn;
                }
            }
        }
    }
}

T512 static void mm_q8_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    if (t1 - t0 < VNNI_MIN_TOKENS) // bandwidth-bound: one pass over the weights, no repacking
        ci_dot_avx2_table()->mm[CI_TYPE_Q8_0](m, r0, r1, t0, t1);
    else
        vpanel(m, r0, r1, t0, t1, q8_0_repack, q8_0_vtiles);
}
T512 static void mm_q4_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    if (t1 - t0 < VNNI_MIN_TOKENS)
        ci_dot_avx2_table()->mm[CI_TYPE_Q4_0](m, r0, r1, t0, t1);
    else
        vpanel(m, r0, r1, t0, t1, q4_0_repack, q4_0_vtiles);
}

/* ---- quantized types: rows packed once at load ---------------------------------------------------------
 * pack16.h's layout: the same vertical layout as the repacked panels above, made once when the model loads (ci_pack), so decode
 * reads it straight from memory: per 16-row group, block after block, the block's chunk vectors (Q4_0: 4
 * vectors, vector c lane i = row i's 4 bytes qs[4c..4c+3], whose low nibbles are elements 4c..4c+3 and high
 * nibbles elements 16+4c..; Q8_0: 8 vectors of the values + 128) followed by its 16 fp16 scales.  The scales
 * sit beside their block rather than after all the group's blocks: one forward stream per thread instead of
 * two streams 16 KiB apart, which the hardware prefetchers follow far better (AMD Zen 5, one thread streaming
 * Q8_0 at 1024 wide: 24-26 GB/s with the scales apart, 34-38 with them inline, as fast as a plain read).
 * The bytes equal the rows' own (a group of Q4_0 is 16 x 18 bytes per block either way), and a block's 16
 * rows' dots come out in 16 lanes with no horizontal reduction.  Rows past the last whole group stay in the
 * file's layout and run the kernels above.  Blocks and groups follow each other unpadded, so the vectors are
 * not all 64-byte aligned (unaligned loads; measured no slower than a padded, aligned layout). */

#ifndef PK_PREFETCH
#define PK_PREFETCH 4096 // bytes ahead in a packed group's chunk stream that decode prefetches
#endif
#define PACK_K_BLOCKS 4 // super-blocks per prefill slice of the packed K-quants

/* IQ4_NL's 16 values plus 128 (unsigned for vpdpbusd; the dot then carries 128 sum(x)) in every 128-bit lane. */
AI __m512i iq4nl_table_u(void) {
    return _mm512_xor_si512(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)ci_iq4nl_values)),
        _mm512_set1_epi8((char)0x80));
}

/* 16 packed rows (group base gp) x TN tokens over blocks [b0, b1); F (lanes = rows) parked between slices.
 * stream: the blocks come from memory (the first token group over them), so prefetch ahead. */
AI void ptile(uint32_t type, const int TN, const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1,
              int64_t r, int nr, int t, bool first, bool last, enum ci_prefetch stream, __m512 *park) {
    const struct ci_act_q8 *q = m->q;
    const size_t cb = ci_pk_chunk_bytes(type), step = cb + CI_PK_SCALE_BYTES;
    // the unsigned offset: 128, 8 or 16 times sum(x)
    const int shift = type == CI_TYPE_Q8_0 || type == CI_TYPE_IQ4_NL ? 7 : type == CI_TYPE_Q5_0 ? 4 : 3;
    const __m512i low4 = _mm512_set1_epi8(0x0f), table = iq4nl_table_u();
    const int8_t *xt[8];
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = q->qs + (size_t)(t + j) * (size_t)m->n_in;
    __m512 f[8];
    UNROLL
    for (int j = 0; j < TN; j++)
        f[j] = first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&park[j]);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = gp + (size_t)b * step;
        if (stream) { // keep PK_PREFETCH bytes of the packing in flight: the lines of this block's span
            UNROLL
            for (size_t c = 0; c < (step + 63) / 64; c++)
                ci_prefetch_line(p + PK_PREFETCH + 64 * c, stream);
        }
        __m512i acc[8];
        UNROLL
        for (int j = 0; j < TN; j++)
            acc[j] = _mm512_setzero_si512();
        if (type == CI_TYPE_Q8_0) {
            UNROLL
            for (int c = 0; c < 8; c++) {
                __m512i w = _mm512_loadu_si512(p + 64 * c);
                UNROLL
                for (int j = 0; j < TN; j++)
                    acc[j] =
                        _mm512_dpbusd_epi32(acc[j], w, _mm512_set1_epi32(load_i32(xt[j] + b * 32 + 4 * c)));
            }
        } else {
            const __m512i qh = type == CI_TYPE_Q5_0 ? _mm512_loadu_si512(p + 256) : _mm512_setzero_si512();
            UNROLL
            for (int c = 0; c < 4; c++) {
                __m512i w = _mm512_loadu_si512(p + 64 * c);
                __m512i lo = _mm512_and_si512(w, low4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
                if (type == CI_TYPE_Q5_0) { // the 5th bits: qh bit 4c + k (lo) and 16 + 4c + k (hi) -> byte k
                    const __m512i base = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
                    const __m512i bits = _mm512_set1_epi32(c % 2 ? (int)0x80402010 : 0x08040201);
                    const __m512i sixteen = _mm512_set1_epi8(16);
                    const __mmask64 ml = _mm512_test_epi8_mask(
                        _mm512_shuffle_epi8(qh, _mm512_add_epi8(base, _mm512_set1_epi8((char)(c / 2)))),
                        bits);
                    const __mmask64 mh = _mm512_test_epi8_mask(
                        _mm512_shuffle_epi8(qh, _mm512_add_epi8(base, _mm512_set1_epi8((char)(2 + c / 2)))),
                        bits);
                    lo = _mm512_mask_add_epi8(lo, ml, lo, sixteen);
                    hi = _mm512_mask_add_epi8(hi, mh, hi, sixteen);
                }
                if (type == CI_TYPE_IQ4_NL) { // the table's values plus 128
                    lo = _mm512_shuffle_epi8(table, lo);
                    hi = _mm512_shuffle_epi8(table, hi);
                }
                UNROLL
                for (int j = 0; j < TN; j++) {
                    acc[j] =
                        _mm512_dpbusd_epi32(acc[j], lo, _mm512_set1_epi32(load_i32(xt[j] + b * 32 + 4 * c)));
                    acc[j] = _mm512_dpbusd_epi32(acc[j], hi,
                                                 _mm512_set1_epi32(load_i32(xt[j] + b * 32 + 16 + 4 * c)));
                }
            }
        }
        vblock_fma(TN, acc, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + cb))), q,
                   b, t, shift, f);
    }
    vtile_finish(TN, m, r, nr, t, last, park, f);
}

typedef void (*ptile_fn)(const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1, int64_t r, int nr,
                         int t, bool first, bool last, enum ci_prefetch stream, __m512 *park);

#define PTILE(T, name, TN)                                                                                   \
    T512 static void name##_p##TN(const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1,          \
                                  int64_t r, int nr, int t, bool first, bool last, enum ci_prefetch stream,  \
                                  __m512 *park) {                                                            \
        ptile(T, TN, m, gp, b0, b1, r, nr, t, first, last, stream, park);                                    \
    }
#define PTILES(T, name)                                                                                      \
    PTILE(T, name, 1)                                                                                        \
    PTILE(T, name, 2)                                                                                        \
    PTILE(T, name, 4)                                                                                        \
    PTILE(T, name, 8)                                                                                        \
    static const ptile_fn name##_ptiles[9] = {NULL, name##_p1, name##_p2, NULL,     name##_p4,               \
                                              NULL, NULL,      NULL,      name##_p8};

PTILES(CI_TYPE_Q8_0, q8_0)
PTILES(CI_TYPE_Q4_0, q4_0)
PTILES(CI_TYPE_Q5_0, q5_0)
PTILES(CI_TYPE_IQ4_NL, iq4_nl)

/* The K-quants' packed tile (pack_kq's layouts): per super-block and sub-block j an exact integer dot in each
 * lane (vpdpbusd of the unsigned codes with the token's 4 bytes broadcast), times the row's sub-block scale
 * (vpmulld), summed into sumi; Q4_K's summ = sum_j m_j (bsum[2j] + bsum[2j + 1]) by vpdpwssd (m_j < 64 in the
 * low half of each lane, the pair sum in the broadcast's low half); Q6_K's codes are the values plus 32, so
 * each sub-block's dot starts from -32 bsum_k.  Then the canonical float steps of dot.h on each lane. */
AI __m512i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Bitwise select: bits of a where mask m is set, else bits of b. */
AI __m512i sel(__m512i m, __m512i a, __m512i b) {
    return _mm512_ternarylogic_epi32(m, a, b, 0xca);
}

/* Where sub-block k's codes sit in the packed super-block p: 4-element chunk i (elements x + 4i..) is lane
 * vector lo + 64i (Q4_K: its nibbles from bit nsh; Q6_K: the low 4 bits of ql from bit nsh, and qh vector
 * hi + 64i, bits 2r.. of each byte rotated to bits 4-5 by rot).  Q4_K: 8 sub-blocks of 8 chunks, Q6_K: 16 of
 * 4 (k = 8h + 2r + s: elements 128h + 32r + 16s + 0..15).  k is a run-time value (the sub-block loop stays
 * rolled: unrolled, GCC spills the 8-token tiles), so the shift counts are too. */
struct ksrc {
    const uint8_t *lo, *hi;
    __m128i nsh;
    __m512i rot;
    int x;
};

AI struct ksrc ksrc_of(uint32_t type, const uint8_t *p, int k) {
    struct ksrc c;
    if (type != CI_TYPE_Q6_K) { // Q5_K: bit k of the qh vectors rotated to bit 4
        c.lo = p + 64 * 8 * (k / 2);
        c.hi = p + 2048;
        c.nsh = _mm_cvtsi32_si128(4 * (k % 2));
        c.rot = _mm512_set1_epi32((4 - k) & 31);
        c.x = 32 * k;
        return c;
    }
    const int h = k / 8, r = k % 8 / 2, s = k % 2;
    c.lo = p + 64 * (16 * h + 8 * (r % 2) + 4 * s);
    c.hi = p + 2048 + 64 * (8 * h + 4 * s);
    c.nsh = _mm_cvtsi32_si128(r >= 2 ? 4 : 0);
    c.rot = _mm512_set1_epi32((4 - 2 * r) & 31); // rotating each dword left by 4 - 2r (mod 32)
    c.x = 16 * k;
    return c;
}

AI __m512i ku(uint32_t type, const struct ksrc *c, const int i) {
    const __m512i m0f = _mm512_set1_epi8(0x0f);
    __m512i lo = _mm512_srl_epi16(_mm512_loadu_si512(c->lo + 64 * i), c->nsh);
    if (type == CI_TYPE_Q4_K)
        return _mm512_and_si512(lo, m0f);
    if (type == CI_TYPE_IQ4_XS)
        return _mm512_shuffle_epi8(iq4nl_table_u(), _mm512_and_si512(lo, m0f));
    __m512i hb = _mm512_rolv_epi32(_mm512_loadu_si512(c->hi + 64 * i), c->rot);
    return sel(m0f, lo, _mm512_and_si512(hb, _mm512_set1_epi8(type == CI_TYPE_Q5_K ? 0x10 : 0x30)));
}

/* Sub-blocks k0 and (pair) k1 = the one sharing k0's code bytes (Q4_K: 2c, 2c + 1; Q6_K: r and r + 2) for TN
 * tokens: each lane's exact dot, from 0 (Q6_K: -32 bsum_k, off), times the row's sub-block scale, into sumi. */
AI void ksub(uint32_t type, const int TN, const bool pair, const uint8_t *p, int k0, int k1,
             const int8_t *const *xb, const int32_t (*off)[16], __m512i sc0, __m512i sc1, __m512i *sumi) {
    const int nch = type == CI_TYPE_Q6_K ? 4 : 8;
    const struct ksrc c0 = ksrc_of(type, p, k0), c1 = ksrc_of(type, p, pair ? k1 : k0);
    __m512i i0[8], i1[8];
    UNROLL
    for (int j = 0; j < TN; j++) {
        const bool has_off = type == CI_TYPE_Q6_K || type == CI_TYPE_IQ4_XS;
        i0[j] = has_off ? _mm512_set1_epi32(off[j][k0]) : _mm512_setzero_si512();
        if (pair)
            i1[j] = has_off ? _mm512_set1_epi32(off[j][k1]) : _mm512_setzero_si512();
    }
    UNROLL
    for (int i = 0; i < nch; i++) {
        const __m512i u0 = ku(type, &c0, i);
        UNROLL
        for (int j = 0; j < TN; j++)
            i0[j] = _mm512_dpbusd_epi32(i0[j], u0, bcast32(xb[j] + c0.x + 4 * i));
        if (pair) {
            const __m512i u1 = ku(type, &c1, i);
            UNROLL
            for (int j = 0; j < TN; j++)
                i1[j] = _mm512_dpbusd_epi32(i1[j], u1, bcast32(xb[j] + c1.x + 4 * i));
        }
    }
    UNROLL
    for (int j = 0; j < TN; j++) {
        sumi[j] = _mm512_add_epi32(sumi[j], _mm512_mullo_epi32(i0[j], sc0));
        if (pair)
            sumi[j] = _mm512_add_epi32(sumi[j], _mm512_mullo_epi32(i1[j], sc1));
    }
}

/* Q4_K's 6-bit scales (mins) of the 8 sub-blocks from the lane vectors of their 12 bytes (kq_scale_min four at
 * a time): scales 0-3 are the low 6 bits of w0's bytes, 4-7 of f1's; mins 0-3 of w1's, 4-7 of f3's. */
AI __m512i k6(const __m512i lo4, const __m512i hi4, const int k) {
    return _mm512_and_si512(_mm512_srli_epi32(k < 4 ? lo4 : hi4, 8 * (k % 4)), _mm512_set1_epi32(0x3f));
}

AI void kptile(uint32_t type, const int TN, const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1,
               int64_t r, int nr, int t, bool first, bool last, enum ci_prefetch stream, __m512 *park) {
    const struct ci_act_q8k *q = m->qk;
    const int64_t nsb = m->n_in / 256;
    const size_t bb = ci_pk_block_bytes(type);
    const __m512i m0f = _mm512_set1_epi8(0x0f);
    // Up to 4 tokens, two sub-blocks at a time (their code bytes loaded once, two dependency chains); 8
    // tokens fill the registers with one.
    const bool pair = TN <= 4;
    const bool q6 = type == CI_TYPE_Q6_K, xs = type == CI_TYPE_IQ4_XS, mins = !q6 && !xs;
    const size_t sc_at = type == CI_TYPE_Q5_K ? 2560 : 2048; // Q4_K, Q5_K: the scale bytes' vectors
    const int nsub = q6 ? 16 : 8;
    const int8_t *xt[8];
    const int16_t *st[8];
    const float *dt[8];
    UNROLL
    for (int j = 0; j < TN; j++) {
        xt[j] = q->qs + (size_t)(t + j) * (size_t)m->n_in;
        st[j] = q->bsum + (size_t)(t + j) * (size_t)(nsb * 16);
        dt[j] = q->d + (size_t)(t + j) * (size_t)nsb;
    }
    __m512 f[8];
    UNROLL
    for (int j = 0; j < TN; j++)
        f[j] = first ? _mm512_setzero_ps() : _mm512_load_ps((const float *)&park[j]);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = gp + (size_t)b * bb;
        const int8_t *xb[8];
        __m512i sumi[8];
        UNROLL
        for (int j = 0; j < TN; j++) {
            xb[j] = xt[j] + b * 256;
            sumi[j] = _mm512_setzero_si512();
        }
        _Alignas(64) __m512i sc[16]; // the sub-block scales as int32 lanes
        // Q6_K: -32 bsum_k of each token (its codes are the values plus 32); IQ4_XS: -128 times its sub-block's
        // sum (its codes are the table's values plus 128)
        _Alignas(64) int32_t off[8][16];
        __m512i w1 = _mm512_setzero_si512(), w2 = w1;
        if (xs) { // 6-bit scales: 4 bits of scales_l, 2 of scales_h, minus 32
            const __m512i l = _mm512_loadu_si512(p + 2048);
            const __m512i h =
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2112)));
            UNROLL
            for (int k = 0; k < 8; k++)
                sc[k] = _mm512_sub_epi32(
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi32(l, 4 * k), _mm512_set1_epi32(15)),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * k), _mm512_set1_epi32(3)),
                                          4)),
                    _mm512_set1_epi32(32));
            UNROLL
            for (int j = 0; j < TN; j++)
                _mm256_store_si256(
                    (__m256i *)(void *)off[j],
                    _mm256_sub_epi32(
                        _mm256_setzero_si256(),
                        _mm256_slli_epi32(
                            _mm256_madd_epi16(
                                _mm256_loadu_si256((const __m256i *)(const void *)(st[j] + b * 16)),
                                _mm256_set1_epi16(1)),
                            7)));
        } else if (mins) {
            const __m512i w0 = _mm512_loadu_si512(p + sc_at);
            w1 = _mm512_loadu_si512(p + sc_at + 64);
            w2 = _mm512_loadu_si512(p + sc_at + 128);
            const __m512i f1 = sel(m0f, w2, _mm512_srli_epi32(w0, 2));
            UNROLL
            for (int k = 0; k < 8; k++)
                sc[k] = k6(w0, f1, k);
        } else {
            UNROLL
            for (int k = 0; k < 16; k++)
                sc[k] =
                    _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 3072 + 16 * k)));
            UNROLL
            for (int j = 0; j < TN; j++)
                _mm512_store_si512(
                    off[j],
                    _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_slli_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256(
                                                           (const __m256i *)(const void *)(st[j] + b * 16))),
                                                       5)));
        }
        int n_steps = pair ? nsub / 2 : nsub;
        __asm__("" : "+r"(n_steps)); // a run-time trip count: the loop stays rolled
        const int n_lines = (int)((bb + 63) / 64), per_step = (n_lines + n_steps - 1) / n_steps;
        for (int s = 0; s < n_steps; s++) {
            if (stream) // the next blocks' lines, spread over the steps (a burst of them stalls the loads)
                for (int c = s * per_step; c < (s + 1) * per_step && c < n_lines; c++)
                    ci_prefetch_line(p + PK_PREFETCH + 64 * c, stream);
            // pairs: Q4_K, Q5_K, IQ4_XS (2s, 2s + 1); Q6_K (k, k + 4), k = 8 (s / 4) + s % 4
            const int k0 = !pair ? s : !q6 ? 2 * s : 8 * (s / 4) + s % 4;
            const int k1 = !q6 ? k0 + 1 : k0 + 4;
            ksub(type, TN, pair, p, k0, k1, xb, (const int32_t(*)[16])off, sc[k0], sc[pair ? k1 : k0], sumi);
        }
        if (mins) {
            const __m512i f3 = sel(m0f, _mm512_srli_epi32(w2, 4), _mm512_srli_epi32(w1, 2));
            const __m512 d =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + sc_at + 192)));
            const __m512 dmin =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + sc_at + 224)));
            UNROLL
            for (int j = 0; j < TN; j++) {
                // summ = sum_k m_k (bsum[2k] + bsum[2k + 1]): m_k < 64 in each lane's low half, the pair sum
                // (|.| <= 4096) in the broadcast's low half
                _Alignas(32) int32_t bs[8];
                _mm256_store_si256(
                    (__m256i *)(void *)bs,
                    _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(st[j] + b * 16)),
                                      _mm256_set1_epi16(1)));
                __m512i summ = _mm512_setzero_si512();
                UNROLL
                for (int k = 0; k < 8; k++)
                    summ = _mm512_dpwssd_epi32(summ, k6(w1, f3, k), _mm512_set1_epi32(bs[k]));
                const __m512 dx = _mm512_set1_ps(dt[j][b]);
                f[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sumi[j]), f[j]);
                f[j] = _mm512_fmadd_ps(_mm512_xor_ps(_mm512_mul_ps(dmin, dx), _mm512_set1_ps(-0.0f)),
                                       _mm512_cvtepi32_ps(summ), f[j]);
            }
        } else {
            const __m512 d =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + (xs ? 2144 : 3328))));
            UNROLL
            for (int j = 0; j < TN; j++)
                f[j] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dt[j][b])),
                                       _mm512_cvtepi32_ps(sumi[j]), f[j]);
        }
    }
    vtile_finish(TN, m, r, nr, t, last, park, f);
}

#define KPTILE(T, name, TN)                                                                                  \
    T512 static void name##_p##TN(const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1,          \
                                  int64_t r, int nr, int t, bool first, bool last, enum ci_prefetch stream,  \
                                  __m512 *park) {                                                            \
        kptile(T, TN, m, gp, b0, b1, r, nr, t, first, last, stream, park);                                   \
    }
#define KPTILES(T, name)                                                                                     \
    KPTILE(T, name, 1)                                                                                       \
    KPTILE(T, name, 2)                                                                                       \
    KPTILE(T, name, 4)                                                                                       \
    KPTILE(T, name, 8)                                                                                       \
    static const ptile_fn name##_ptiles[9] = {NULL, name##_p1, name##_p2, NULL,     name##_p4,               \
                                              NULL, NULL,      NULL,      name##_p8};

KPTILES(CI_TYPE_Q4_K, q4_k)
KPTILES(CI_TYPE_Q5_K, q5_k)
KPTILES(CI_TYPE_IQ4_XS, iq4_xs)
KPTILES(CI_TYPE_Q6_K, q6_k)

/* The packed groups inside [r0, r1) as vpanel walks them (decode: one pass over each group's blocks; prefill:
 * slices of PACK_BLOCKS blocks, their weights in L1/L2, under token groups of 8); rows past the last whole
 * group go to the file-layout kernel. */
T512 static void ppanel(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1, const ptile_fn *tiles,
                        ci_mm_fn rest) {
    _Alignas(64) __m512 park[PACK_TOKENS];
    const int64_t nb = m->n_in / ci_pk_block_elems(m->type), packed_rows = m->n_out / PACK_ROWS * PACK_ROWS;
    // one token group: no reuse to keep in L1; else slices of about 9-13 KiB of packed weights
    const int64_t slice = t1 - t0 <= 8 ? nb : ci_pk_kquant(m->type) ? PACK_K_BLOCKS : PACK_BLOCKS;
    const int64_t re = r1 < packed_rows ? r1 : packed_rows;
    // the first token group over a block reads it from memory: it prefetches ahead (the later ones find it cached)
    const enum ci_prefetch stream = ci_decode_prefetch();
    for (int64_t r = r0; r < re; r += PACK_ROWS) {
        const uint8_t *gp = m->packed + (size_t)(r / PACK_ROWS) * ci_pk_group_bytes(m->type, nb);
        for (int tp = t0; tp < t1; tp += PACK_TOKENS) {
            int tp1 = t1 - tp < PACK_TOKENS ? t1 : tp + PACK_TOKENS;
            for (int64_t b0 = 0; b0 < nb; b0 += slice) {
                int64_t b1 = nb - b0 < slice ? nb : b0 + slice;
                for (int t = tp; t < tp1;) {
                    int tn = tp1 - t >= 8 ? 8 : tp1 - t >= 4 ? 4 : tp1 - t >= 2 ? 2 : 1;
                    tiles[tn](m, gp, b0, b1, r, PACK_ROWS, t, b0 == 0, b1 == nb,
                              t == tp ? stream : CI_PREFETCH_NONE, park + (t - tp));
                    t += tn;
                }
            }
        }
    }
    if (r1 >
        packed_rows) { // rest NULL: this table has no unpacked kernel for the type, AVX2's serves the rows
        ci_mm_fn tail = rest ? rest : ci_dot_avx2_table()->mm[m->type];
        tail(m, r0 > packed_rows ? r0 : packed_rows, r1, t0, t1);
    }
}

T512 static void mm_q8_0_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q8_0_ptiles, mm_q8_0);
}
T512 static void mm_q4_0_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q4_0_ptiles, mm_q4_0);
}
T512 static void mm_q5_0_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q5_0_ptiles, NULL);
}
T512 static void mm_iq4_nl_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, iq4_nl_ptiles, NULL);
}
T512 static void mm_iq4_xs_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, iq4_xs_ptiles, NULL);
}
T512 static void mm_q4_k_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q4_k_ptiles, NULL);
}
T512 static void mm_q5_k_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q5_k_ptiles, NULL);
}
T512 static void mm_q6_k_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    ppanel(m, r0, r1, t0, t1, q6_k_ptiles, NULL);
}

T512 static void quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, float *s,
                           int64_t stride) {
    ci_dot_avx2_table()->quant_act(x, n_in, qs, d, sum, s, stride);
}

/* ---- SwiGLU and GeGLU: dot_ref.c's silu_mul and gelu_mul, 16 lanes, the tail zero-masked ---------------- */

AI __m512 exp16(__m512 t) {
    t = _mm512_max_ps(t, _mm512_set1_ps(CI_EXP_LO));
    t = _mm512_min_ps(t, _mm512_set1_ps(CI_EXP_HI));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(CI_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-CI_EXP_LN2_HI), t);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(-CI_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(CI_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CI_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CI_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CI_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CI_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CI_EXP_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

AI __m512 silu16(__m512 g, __m512 u) {
    __m512 e = exp16(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

AI __m512 gelu16(__m512 g, __m512 u) {
    __m512 b = _mm512_mul_ps(_mm512_mul_ps(g, g), _mm512_set1_ps(CI_GELU_A));
    __m512 e = exp16(_mm512_mul_ps(_mm512_fmadd_ps(b, g, g), _mm512_set1_ps(CI_GELU_M2C)));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

AI void glu_rows(float *gate, const float *up, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i);
        _mm512_storeu_ps(gate + i, gelu ? gelu16(g, u) : silu16(g, u));
    }
    if (i < n) {
        __mmask16 mask = (__mmask16)((1u << (n - i)) - 1);
        __m512 g = _mm512_maskz_loadu_ps(mask, gate + i), u = _mm512_maskz_loadu_ps(mask, up + i);
        _mm512_mask_storeu_ps(gate + i, mask, gelu ? gelu16(g, u) : silu16(g, u));
    }
}

T512 static void silu_mul(float *gate, const float *up, int64_t n) {
    glu_rows(gate, up, n, false);
}

T512 static void gelu_mul(float *gate, const float *up, int64_t n) {
    glu_rows(gate, up, n, true);
}

/* This table packs the quantized types of pack16.c's layout and F16/BF16 in its float layout. */
static size_t pack_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    return type == CI_TYPE_F16 || type == CI_TYPE_BF16 ? ci_pk_float_bytes(type, n_in, n_out)
                                                       : ci_pk_bytes(type, n_in, n_out);
}

static void pack_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                      uint8_t *dst) {
    ci_avx2_pk_rows(16, type, w, row_bytes, n_in, g0, g1, dst);
}

static const struct ci_dot_table avx512_table = {
    .isa = "avx512+vnni",
    .dot = {[CI_TYPE_F32] = dot_f32, [CI_TYPE_F16] = dot_f16, [CI_TYPE_BF16] = dot_bf16},
    .f32_short = dot_f32_short,
    .attn_f32 = ci_avx512_attn_f32, // attn_avx512.c
    .attn_f16 = ci_avx512_attn_f16,
    .attn_q8_0 = ci_avx512_attn_q8_0,
    .attn_grp_f32 = ci_avx512_attn_grp_f32,
    .attn_grp_f16 = ci_avx512_attn_grp_f16,
    .attn_grp_q8_0 = ci_avx512_attn_grp_q8_0,
    .quant_act = quant_act,
    .mm =
        {
            [CI_TYPE_F32] = mm_f32,
            [CI_TYPE_F16] = mm_f16,
            [CI_TYPE_BF16] = mm_bf16,
            [CI_TYPE_Q8_0] = mm_q8_0,
            [CI_TYPE_Q4_0] = mm_q4_0,
        },
    .pack_bytes = pack_bytes,
    .pack = pack_rows,
    .mm_packed = {[CI_TYPE_F16] = ci_avx512_mm_f16_packed, // fpack_avx512.c
                  [CI_TYPE_BF16] = ci_avx512_mm_bf16_packed,
                  [CI_TYPE_Q8_0] = mm_q8_0_packed,
                  [CI_TYPE_Q4_0] = mm_q4_0_packed,
                  [CI_TYPE_Q5_0] = mm_q5_0_packed,
                  [CI_TYPE_Q4_K] = mm_q4_k_packed,
                  [CI_TYPE_Q5_K] = mm_q5_k_packed,
                  [CI_TYPE_IQ4_NL] = mm_iq4_nl_packed,
                  [CI_TYPE_IQ4_XS] = mm_iq4_xs_packed,
                  [CI_TYPE_Q6_K] = mm_q6_k_packed},
    .float_residues = 16,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
};

const struct ci_dot_table *ci_dot_avx512_table(void) {
    return &avx512_table;
}

#else

const struct ci_dot_table *ci_dot_avx512_table(void) {
    return NULL;
}

#endif
