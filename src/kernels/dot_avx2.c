/* AVX2/FMA/F16C kernels (this file alone is built with -mavx2 -mfma -mf16c; dispatch.c calls into it only
 * after the CPU probe).
 *
 * Float types: register tiles of RM weight rows x TN tokens, one 8-lane FMA accumulator per output element
 * (the order dot.h fixes), so every tile shape gives the bits of the 1x1 dot.  F16/BF16 rows are widened in
 * registers once per tile step and reused for the TN tokens.
 * Quantized types: 8 (row, token) pairs per tile (8x1 for decode, 1x8 for prefill, 4x2 / 2x4 between); per
 * block each pair's exact int32 dot (maddubs/madd on int8), a reduction of the 8 vectors into one vector of 8
 * block sums, then one 8-lane fma of the per-pair scale products: lane by lane exactly the scalar
 * acc = fmaf(dw * dx, isum, acc) of dot_ref.c.
 * Panels are walked row block by row block (a block's weights stay in L2), inside token group by token group
 * (a batch reads each weight from memory once), inside in k slices whose activations stay in L1 (tiles park
 * their accumulators between slices, exactly).  Decode tiles prefetch the next tile's rows: the hardware
 * prefetchers follow 8 short rows read in lockstep poorly.
 * Q8_0, Q4_0, Q4_K, Q5_K, Q6_K and IQ4_XS matrices are packed at load (pack16.h) and run through kpack_avx2.c; the
 * tiles here serve them when packing is off, and their rows past the last 16-row group.
 * Also here: the Q8 activation quantizer (bit-identical to the scalar one).  The attention chunk kernels
 * live in attn_avx2.c. */
#include "kernels/dot.h"

#include "kernels/pack16.h"
#include "kernels/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
// Tile loops have constant trip counts after inlining; unrolled, their accumulators stay in registers.
// Unoptimised builds (make VARIANT=debug) unroll nothing, and GCC rejects the annotation there.
#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 16")
#else
#define UNROLL
#endif
#include "kernels/prefetch_inl.h" // needs AI
/* A value used by several FMAs is loaded once into a register: left alone, the compiler folds the load into
 * every FMA as a memory operand, and the tile becomes bound by load ports instead of FMA ports. */
#define KEEP_IN_REG(v) __asm__("" : "+x"(v))

// Weight bytes of a row block that should stay in L2 while every token group of the panel streams over it.
#define L2_BLOCK_BYTES (256 * 1024)

AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Decode tiles walk several short rows in lockstep, which the hardware prefetchers follow poorly: while a
 * tile runs, each step of `step` weight bytes prefetches the same amount of the next tile's rows (the next RM
 * * row_bytes contiguous bytes), so the whole next tile is in flight by the time it starts. n_lines =
 * ceil(step / 64) lines from p cover [p, p + step) and, step after step, everything. */
AI void prefetch_lines(const uint8_t *p, const int n_lines, enum ci_prefetch where) {
    UNROLL
    for (int l = 0; l < n_lines; l++)
        ci_prefetch_line(p + 64 * l, where);
}

/* ---- float types -------------------------------------------------------------------------------------- */

AI __m256 load8(uint32_t type, const uint8_t *row, int64_t i) {
    if (type == CI_TYPE_F32)
        return _mm256_loadu_ps((const float *)(const void *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i));
    if (type == CI_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); // BF16
}

AI float load1(uint32_t type, const uint8_t *row, int64_t i) {
    if (type == CI_TYPE_F32) {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * i, 2);
    return type == CI_TYPE_F16 ? _cvtsh_ss(h) : ci_bf16_to_fp32(h);
}

/* The reference order: one 8-lane accumulator, fixed horizontal sum, front-to-back tail. */
AI float dot1(uint32_t type, const void *row, const float *x, int64_t n) {
    const uint8_t *w = row;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_fmadd_ps(load8(type, w, i), _mm256_loadu_ps(x + i), acc);
    float sum = hsum(acc);
    for (; i < n; i++)
        sum += load1(type, w, i) * x[i];
    return sum;
}

static float dot_f32(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_F32, row, x, n);
}
static float dot_f16(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_F16, row, x, n);
}
static float dot_bf16(const void *row, const float *x, int64_t n) {
    return dot1(CI_TYPE_BF16, row, x, n);
}

/* Attention's q.k: four accumulators for short rows (not tied to the matmul order). */
static float dot_f32_short(const void *row, const float *x, int64_t n) {
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

/* One register tile over a slice of the row.  A panel is computed in k slices (units of 32 bytes of each
 * token's activations: 8 floats or one Q8 block) so that the tokens' slices stay in L1 while the weight rows
 * of a row block stream past; between slices a tile parks its accumulators in a caller buffer.  Storing and
 * reloading a vector is exact, so the order of every element's accumulation is unchanged. */
struct tile_args {
    const struct ci_mm *m;
    int64_t r; // first row; rows [r, r + nr), nr <= RM (missing rows repeat the last real one, not stored)
    int nr;
    int t; // first token; tokens [t, t + nt), nt <= TN (likewise)
    int nt;
    int64_t k0, k1;            // units [k0, k1) of this slice
    bool first;                // k0 == 0: start from zero
    bool last;                 // k1 == all units: finish and store y
    __m256 *acc;               // [RM * TN] (float) or [1] (quantized) parked accumulators
    enum ci_prefetch prefetch; // where a decode tile's prefetches of the next tile's rows go
};

/* Rows x tokens with an RM x TN register tile.  RM and TN are constants after inlining, so the accumulators
 * live in registers; each is one element's reference-order accumulator. */
AI void ftile(uint32_t type, const int RM, const int TN, const struct tile_args *ta) {
    const struct ci_mm *m = ta->m;
    const int64_t n = m->n_in;
    const uint8_t *wr[8];
    const float *xt[8];
    UNROLL
    for (int i = 0; i < RM; i++)
        wr[i] = m->w + (size_t)(ta->r + (i < ta->nr ? i : ta->nr - 1)) * m->row_bytes;
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = m->x + (size_t)(ta->t + (j < ta->nt ? j : ta->nt - 1)) * (size_t)n;
    __m256 acc[12];
    UNROLL
    for (int k = 0; k < RM * TN; k++)
        acc[k] = ta->first ? _mm256_setzero_ps() : _mm256_load_ps((const float *)&ta->acc[k]);
    const int esize = type == CI_TYPE_F32 ? 4 : 2;
    const int step = RM * 8 * esize; // weight bytes of one step of the RM rows
    const uint8_t *pf = m->w + (size_t)(ta->r + RM) * m->row_bytes + (size_t)ta->k0 * (size_t)step;
    _Pragma("GCC unroll 2") for (int64_t i = ta->k0 * 8; i < ta->k1 * 8; i += 8) {
        if (RM >= 4) { // decode shapes stream from memory; prefill tiles read a row block already in L2
            prefetch_lines(pf, (step + 63) / 64, ta->prefetch);
            pf += step;
        }
        if (RM <= TN) {
            __m256 wv[8];
            UNROLL
            for (int a = 0; a < RM; a++)
                wv[a] = load8(type, wr[a], i);
            UNROLL
            for (int j = 0; j < TN; j++) {
                __m256 xv = _mm256_loadu_ps(xt[j] + i);
                KEEP_IN_REG(xv);
                UNROLL
                for (int a = 0; a < RM; a++)
                    acc[a * TN + j] = _mm256_fmadd_ps(wv[a], xv, acc[a * TN + j]);
            }
        } else {
            __m256 xv[8];
            UNROLL
            for (int j = 0; j < TN; j++)
                xv[j] = _mm256_loadu_ps(xt[j] + i);
            UNROLL
            for (int a = 0; a < RM; a++) {
                __m256 wv = load8(type, wr[a], i);
                KEEP_IN_REG(wv);
                UNROLL
                for (int j = 0; j < TN; j++)
                    acc[a * TN + j] = _mm256_fmadd_ps(wv, xv[j], acc[a * TN + j]);
            }
        }
    }
    if (!ta->last) {
        UNROLL
        for (int k = 0; k < RM * TN; k++)
            _mm256_store_ps((float *)&ta->acc[k], acc[k]);
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
            float sum = hsum(acc[a * TN + j]);
            for (int64_t k = n / 8 * 8; k < n; k++)
                sum += load1(type, wr[a], k) * xt[j][k];
            m->y[(size_t)(ta->t + j) * (size_t)m->n_out + (size_t)(ta->r + a)] = sum;
        }
    }
}

typedef void (*tile_fn)(const struct tile_args *ta);

#define FTILE(T, name, RM, TN)                                                                               \
    static void name##_##RM##x##TN(const struct tile_args *ta) {                                             \
        ftile(T, RM, TN, ta);                                                                                \
    }
#define FTILES(T, name)                                                                                      \
    FTILE(T, name, 8, 1)                                                                                     \
    FTILE(T, name, 4, 2)                                                                                     \
    FTILE(T, name, 4, 3)                                                                                     \
    FTILE(T, name, 3, 4)                                                                                     \
    FTILE(T, name, 2, 5)                                                                                     \
    FTILE(T, name, 2, 6)                                                                                     \
    static const tile_fn name##_tiles[7] = {NULL,       name##_8x1, name##_4x2, name##_4x3,                  \
                                            name##_3x4, name##_2x5, name##_2x6};

FTILES(CI_TYPE_F32, f32)
FTILES(CI_TYPE_F16, f16)
FTILES(CI_TYPE_BF16, bf16)

static const int ftile_rows[7] = {0, 8, 4, 4, 3, 2, 2}; // RM of the tile for TN tokens

// Rows of one panel row block (bounded also by L2_BLOCK_BYTES): sizes the parked-accumulator buffer.
#define BLOCK_ROWS 128
// Bytes of the token group's activation slice kept in L1 (the k slice length follows from it).
#define L1_X_BYTES (16 * 1024)

/* Row blocks that stay in L2; inside, token groups of up to max_tn; inside, k slices whose activations stay
 * in L1; inside, the row tiles of the block. */
static void panel(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1, const tile_fn *tiles,
                  const int *tile_rows, int max_tn, int64_t n_units, bool per_element_acc) {
    _Alignas(32) __m256 park[BLOCK_ROWS * 6 + 16]; // worst case: ceil(128 / RM) tiles of RM x TN accumulators
    int64_t block = (int64_t)(L2_BLOCK_BYTES / (m->row_bytes ? m->row_bytes : 1));
    block = block > BLOCK_ROWS ? BLOCK_ROWS : block;
    block = block < CI_MM_ROW_ALIGN ? CI_MM_ROW_ALIGN : block / CI_MM_ROW_ALIGN * CI_MM_ROW_ALIGN;
    const enum ci_prefetch prefetch = ci_decode_prefetch();
    for (int64_t rb = r0; rb < r1; rb += block) {
        int64_t re = rb + block < r1 ? rb + block : r1;
        for (int t = t0; t < t1;) {
            int tn = t1 - t < max_tn ? t1 - t : max_tn;
            if (max_tn == 8 && tn < 8) // quantized tiles come in 1, 2, 4, 8 tokens
                tn = tn >= 4 ? 4 : tn >= 2 ? 2 : 1;
            int rm = tile_rows[tn];
            // Activation bytes per unit: 8 floats, or one block of int8 (32, or 256 for the K-quants).
            int64_t unit_bytes = per_element_acc || n_units == 0 ? 32 : m->n_in / n_units;
            int64_t slice = L1_X_BYTES / (unit_bytes * tn);
            slice = slice < 1 ? 1 : slice;
            struct tile_args ta = {.m = m, .t = t, .nt = tn, .prefetch = prefetch};
            int64_t k0 = 0;
            do { // once even when n_units is 0 (a float row shorter than 8: all tail)
                int64_t k1 = n_units - k0 > slice ? k0 + slice : n_units;
                ta.k0 = k0;
                ta.k1 = k1;
                ta.first = k0 == 0;
                ta.last = k1 == n_units;
                __m256 *acc = park;
                for (int64_t r = rb; r < re; r += rm) {
                    ta.r = r;
                    ta.nr = re - r < rm ? (int)(re - r) : rm;
                    ta.acc = acc;
                    tiles[tn](&ta);
                    acc += per_element_acc ? rm * tn : 1;
                }
                k0 = k1;
            } while (k0 < n_units);
            t += tn;
        }
    }
}

static void mm_f32(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    panel(m, r0, r1, t0, t1, f32_tiles, ftile_rows, 4, m->n_in / 8, true);
}
static void mm_f16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    panel(m, r0, r1, t0, t1, f16_tiles, ftile_rows, 4, m->n_in / 8, true);
}
static void mm_bf16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    panel(m, r0, r1, t0, t1, bf16_tiles, ftile_rows, 4, m->n_in / 8, true);
}

/* ---- quantized types ---------------------------------------------------------------------------------- */

/* Lane l of the result = the sum of the 8 int32 lanes of v[l]. */
AI __m256i reduce8(const __m256i *v) {
    __m256i a0 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[0], v[1]), _mm256_unpackhi_epi32(v[0], v[1]));
    __m256i a1 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2], v[3]), _mm256_unpackhi_epi32(v[2], v[3]));
    __m256i a2 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[4], v[5]), _mm256_unpackhi_epi32(v[4], v[5]));
    __m256i a3 = _mm256_add_epi32(_mm256_unpacklo_epi32(v[6], v[7]), _mm256_unpackhi_epi32(v[6], v[7]));
    __m256i b0 = _mm256_add_epi32(_mm256_unpacklo_epi64(a0, a1), _mm256_unpackhi_epi64(a0, a1));
    __m256i b1 = _mm256_add_epi32(_mm256_unpacklo_epi64(a2, a3), _mm256_unpackhi_epi64(a2, a3));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20), _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* 32 Q4_0 nibbles as bytes 0..15: low nibbles (elements 0..15) in the low half, high nibbles above. */
AI __m256i q4_bytes(const uint8_t *qs) {
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)qs));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

AI uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The TN consecutive floats at p repeated across the 8 lanes (lane l holds p[l % TN]). */
AI __m256 pattern_ps(const int TN, const float *p) {
    if (TN == 8)
        return _mm256_loadu_ps(p);
    if (TN == 4)
        return _mm256_castsi256_ps(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)));
    if (TN == 2) {
        long long q;
        memcpy(&q, p, 8);
        return _mm256_castsi256_ps(_mm256_set1_epi64x(q));
    }
    return _mm256_set1_ps(p[0]);
}

AI __m256i pattern_epi32(const int TN, const int32_t *p) {
    if (TN == 8)
        return _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (TN == 4)
        return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    if (TN == 2) {
        long long q;
        memcpy(&q, p, 8);
        return _mm256_set1_epi64x(q);
    }
    return _mm256_set1_epi32(p[0]);
}

/* The 32 bytes 0x10 or 0 of a Q5 block's 32 high bits (byte i: bit i of qh), element order as q4_bytes. */
AI __m256i q5_high(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                                     2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* The 16 signed values of a 4-bit table type (IQ4_NL, IQ4_XS, MXFP4) in both 128-bit lanes. */
AI __m256i value_table(const int8_t *values) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)values));
}

/* 8 MXFP4 E8M0 scales as floats 2^(e - 128) (ci_e8m0_half_to_fp32, lane by lane). */
AI __m256 e8m0_half8(const uint8_t *e8) {
    __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)e8));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, is_sub));
}

/* Bytes of one block of a 32-block quantized type. */
AI size_t block32_bytes(uint32_t type) {
    switch (type) {
    case CI_TYPE_Q8_0:
        return 34;
    case CI_TYPE_Q4_1:
        return 20;
    case CI_TYPE_Q5_0:
        return 22;
    case CI_TYPE_Q5_1:
        return 24;
    case CI_TYPE_MXFP4:
        return 17;
    default: // Q4_0, IQ4_NL
        return 18;
    }
}

/* The 32 weight codes of a block and whether they are signed (maddubs needs one unsigned operand: signed
 * codes go in as |w| with x carrying w's sign, which keeps a weight of -128 exact). */
AI __m256i block32_codes(uint32_t type, const uint8_t *blk, bool *is_signed) {
    *is_signed = false;
    switch (type) {
    case CI_TYPE_Q8_0:
        *is_signed = true;
        return _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    case CI_TYPE_Q4_0: // nibble values 0..15; the -8 is applied to the sum
        return q4_bytes(blk + 2);
    case CI_TYPE_Q4_1:
        return q4_bytes(blk + 4);
    case CI_TYPE_Q5_0: // 0..31; the -16 is applied to the sum
        return _mm256_or_si256(q4_bytes(blk + 6), q5_high(blk + 2));
    case CI_TYPE_Q5_1:
        return _mm256_or_si256(q4_bytes(blk + 8), q5_high(blk + 4));
    case CI_TYPE_IQ4_NL:
        *is_signed = true;
        return _mm256_shuffle_epi8(value_table(ci_iq4nl_values), q4_bytes(blk + 2));
    default: // MXFP4
        *is_signed = true;
        return _mm256_shuffle_epi8(value_table(ci_mxfp4_values), q4_bytes(blk + 1));
    }
}

/* The fp16 at byte `at` of the block at `off` in each lane's row (lane l: row l / TN). */
AI __m256 lane_f16(const int RM, const int TN, const uint8_t *const *wr, size_t off, size_t at) {
    if (RM == 1)
        return _mm256_set1_ps(_cvtsh_ss(load_u16(wr[0] + off + at)));
    uint16_t h[8];
    UNROLL
    for (int l = 0; l < 8; l++)
        h[l] = load_u16(wr[l / TN] + off + at);
    return _mm256_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3], (short)h[4],
                                          (short)h[5], (short)h[6], (short)h[7]));
}

/* A quantized tile's end of slice: park the 8 accumulators, or after the last slice store the real
 * (row, token) pairs of lane l = (l / TN, l % TN) into y. */
AI void qtile_finish(const int RM, const int TN, const struct tile_args *ta, __m256 acc) {
    if (!ta->last) {
        _mm256_store_ps((float *)ta->acc, acc);
        return;
    }
    const struct ci_mm *m = ta->m;
    const int64_t r = ta->r, t = ta->t;
    const int nr = ta->nr, nt = ta->nt;
    float out[8];
    _mm256_storeu_ps(out, acc);
    UNROLL
    for (int a = 0; a < RM && a < nr; a++)
        UNROLL
    for (int j = 0; j < TN && j < nt; j++)
        m->y[(size_t)(t + j) * (size_t)m->n_out + (size_t)(r + a)] = out[a * TN + j];
}

/* Rows [r, r + nr) x tokens [t, t + nt) with RM x TN = 8 (row, token) pairs, lane l = (l / TN, l % TN). */
AI void qtile(uint32_t type, const int RM, const int TN, const struct tile_args *ta) {
    const struct ci_mm *m = ta->m;
    const int64_t r = ta->r, t = ta->t;
    const int nr = ta->nr, nt = ta->nt;
    const struct ci_act_q8 *q = m->q;
    const size_t bb = block32_bytes(type);
    const int64_t stride = q->tok_stride;
    const uint8_t *wr[8];
    const int8_t *xt[8];
    UNROLL
    for (int i = 0; i < RM; i++)
        wr[i] = m->w + (size_t)(r + (i < nr ? i : nr - 1)) * m->row_bytes;
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = q->qs + (size_t)(t + (j < nt ? j : nt - 1)) * (size_t)m->n_in;
    const float *dx = q->d + t; // t + TN <= tok_stride: the padding repeats the last token
    const int32_t *xs = q->sum + t;
    const float *xm = q->s + t;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = ta->first ? _mm256_setzero_ps() : _mm256_load_ps((const float *)ta->acc);
    const uint8_t *pf = m->w + (size_t)(r + RM) * m->row_bytes + (size_t)ta->k0 * RM * bb;
    for (int64_t b = ta->k0; b < ta->k1; b++) {
        const size_t wo = (size_t)b * bb;
        if (RM >= 2) { // tiles of one row serve prefill, whose row block is already in L2
            prefetch_lines(pf, (int)((RM * bb + 63) / 64), ta->prefetch);
            pf += RM * bb;
        }
        __m256i v[8];
        UNROLL
        for (int a = 0; a < RM; a++) {
            bool sgn;
            __m256i wv = block32_codes(type, wr[a] + wo, &sgn);
            __m256i aw = sgn ? _mm256_sign_epi8(wv, wv) : wv;
            UNROLL
            for (int j = 0; j < TN; j++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xt[j] + b * 32));
                if (sgn)
                    xv = _mm256_sign_epi8(xv, wv);
                v[a * TN + j] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones);
            }
        }
        __m256i s = reduce8(v);
        if (type == CI_TYPE_Q4_0) // sum (q - 8) x = sum q x - 8 sum x
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(pattern_epi32(TN, xs + b * stride), 3));
        if (type == CI_TYPE_Q5_0) // sum (q - 16) x
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(pattern_epi32(TN, xs + b * stride), 4));
        __m256 dw;
        if (type == CI_TYPE_MXFP4) {
            uint8_t e[8];
            UNROLL
            for (int l = 0; l < 8; l++)
                e[l] = wr[l / TN][wo];
            dw = e8m0_half8(e);
        } else {
            dw = lane_f16(RM, TN, wr, wo, 0);
        }
        __m256 dxv = pattern_ps(TN, dx + b * stride);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, dxv), _mm256_cvtepi32_ps(s), acc);
        if (type == CI_TYPE_Q4_1 || type == CI_TYPE_Q5_1) // + m s
            acc = _mm256_fmadd_ps(lane_f16(RM, TN, wr, wo, 2), pattern_ps(TN, xm + b * stride), acc);
    }
    qtile_finish(RM, TN, ta, acc);
}

#define QTILE(T, name, RM, TN)                                                                               \
    static void name##_##RM##x##TN(const struct tile_args *ta) {                                             \
        qtile(T, RM, TN, ta);                                                                                \
    }
#define QTILES(T, name)                                                                                      \
    QTILE(T, name, 8, 1)                                                                                     \
    QTILE(T, name, 4, 2)                                                                                     \
    QTILE(T, name, 2, 4)                                                                                     \
    QTILE(T, name, 1, 8)                                                                                     \
    static const tile_fn name##_tiles[9] = {NULL, name##_8x1, name##_4x2, NULL,      name##_2x4,             \
                                            NULL, NULL,       NULL,       name##_1x8};

QTILES(CI_TYPE_Q8_0, q8_0)
QTILES(CI_TYPE_Q4_0, q4_0)
QTILES(CI_TYPE_Q4_1, q4_1)
QTILES(CI_TYPE_Q5_0, q5_0)
QTILES(CI_TYPE_Q5_1, q5_1)
QTILES(CI_TYPE_IQ4_NL, iq4_nl)
QTILES(CI_TYPE_MXFP4, mxfp4)

static const int qtile_rows[9] = {0, 8, 4, 0, 2, 0, 0, 0, 1};

#define MM_Q32(name)                                                                                         \
    static void mm_##name(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {                   \
        panel(m, r0, r1, t0, t1, name##_tiles, qtile_rows, 8, m->n_in / 32, false);                          \
    }
MM_Q32(q8_0)
MM_Q32(q4_0)
MM_Q32(q4_1)
MM_Q32(q5_0)
MM_Q32(q5_1)
MM_Q32(iq4_nl)
MM_Q32(mxfp4)

/* ---- 256-element super-block types (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) against Q8_K activations ------ */

/* A weight super-block's scales decoded once per row for its tokens: the scales of its sub-blocks (8 of 32
 * elements, or 16 of 16) and the 16 group scales and mins as vectors for the bsum terms.  The codes are
 * decoded from the block's bytes inside each (row, token) dot (kcode; a few shifts and masks, the bytes in
 * L1).  Then, exactly as qblock_ref.c:
 *   sumi = sum_c madd(maddubs(u_c, x_c), scale of chunk c) - off * madd(scales, bsum),
 *   summ = madd(mins, bsum). */
struct kscales {
    __m256i scales, mins; // per 16-element group (int16)
    // The sub-block scales as int16 in both 128-bit lanes, for one shuffle per chunk (kq_chunk_scale):
    // 32-element sub-blocks: lo = scales 0-7 twice; 16-element ones: lo = groups 0-7 twice, hi = 8-15 twice.
    __m256i lo, hi;
};

AI bool kq_sub32(uint32_t type) { // sub-blocks of 32 elements (else 16)
    return type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K || type == CI_TYPE_IQ4_XS;
}
AI int kq_off(uint32_t type) { // the codes are the values plus this (sum q x = sum u x - off sum x)
    return type == CI_TYPE_Q6_K ? 32 : type == CI_TYPE_Q3_K ? 4 : 0;
}
AI bool kq_has_mins(uint32_t type) {
    return type == CI_TYPE_Q2_K || type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K;
}
AI size_t kq_block_bytes(uint32_t type) {
    switch (type) {
    case CI_TYPE_Q2_K:
        return 84;
    case CI_TYPE_Q3_K:
        return 110;
    case CI_TYPE_Q4_K:
        return 144;
    case CI_TYPE_Q5_K:
        return 176;
    case CI_TYPE_Q6_K:
        return 210;
    default: // IQ4_XS
        return 136;
    }
}
AI size_t kq_d_at(uint32_t type) { // byte offset of the fp16 super-block scale d (dmin follows it)
    return type == CI_TYPE_Q2_K ? 80 : type == CI_TYPE_Q3_K ? 108 : type == CI_TYPE_Q6_K ? 208 : 0;
}

/* Sub-blocks of 16: 16 int8 scales -> the group vector and lo / hi. */
AI void ks_scales16(struct kscales *ks, __m128i sc8, bool is_signed) {
    ks->scales = is_signed ? _mm256_cvtepi8_epi16(sc8) : _mm256_cvtepu8_epi16(sc8);
    ks->lo = _mm256_permute4x64_epi64(ks->scales, 0x44);
    ks->hi = _mm256_permute4x64_epi64(ks->scales, 0xee);
}

/* 8 bytes (0-7 of v8) each duplicated: the 16 groups of 8 sub-blocks of 32. */
AI __m128i dup8(__m128i v8) {
    return _mm_shuffle_epi8(v8, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
}

/* Sub-blocks of 32 (Q4_K, Q5_K: no offset, so no group scales needed): the 8 scales (bytes 0-7 of sc8) ->
 * sc[8]. */
AI void ks_scales8(struct kscales *ks, __m128i sc8) {
    ks->lo = _mm256_permute4x64_epi64(_mm256_cvtepu8_epi16(sc8), 0x44);
}

AI __m256i load32(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* The scales of super-block w (the layouts of quant.c / qblock_ref.c). */
AI void ks_decode(uint32_t type, const uint8_t *w, struct kscales *ks) {
    switch (type) {
    case CI_TYPE_Q2_K: { // scales[16] @0: low nibble scale, high nibble min
        __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)w);
        ks_scales16(ks, _mm_and_si128(sc, _mm_set1_epi8(0x0f)), false);
        ks->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0f)));
        return;
    }
    case CI_TYPE_Q3_K: { // scales[12] @96: 16 6-bit scales biased by 32
        const uint8_t *sc = w + 96;
        int8_t s16[16];
        for (int k = 0; k < 16; k++) {
            int lo = k < 8 ? sc[k] & 0x0f : sc[k - 8] >> 4;
            int hi = sc[8 + k % 4] >> (2 * (k / 4)) & 3;
            s16[k] = (int8_t)((lo | hi << 4) - 32);
        }
        ks_scales16(ks, _mm_loadu_si128((const __m128i *)(const void *)s16), true);
        return;
    }
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K: { // scales[12] @4
        uint32_t w0, w1, w2;
        memcpy(&w0, w + 4, 4);
        memcpy(&w1, w + 8, 4);
        memcpy(&w2, w + 12, 4);
        // The 6-bit fields of kq_scale_min, four at a time: scales 0-3 and mins 0-3 are the low 6 bits of
        // bytes 0-3 and 4-7; scales 4-7 are the low nibbles of bytes 8-11 under the top 2 bits of bytes 0-3,
        // mins 4-7 their high nibbles under the top 2 bits of bytes 4-7.
        uint32_t f[4] = {w0 & 0x3f3f3f3fu, (w2 & 0x0f0f0f0fu) | (w0 >> 6 & 0x03030303u) << 4,
                         w1 & 0x3f3f3f3fu, (w2 >> 4 & 0x0f0f0f0fu) | (w1 >> 6 & 0x03030303u) << 4};
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)f); // scales 0-7, mins 0-7
        ks_scales8(ks, v);
        ks->mins = _mm256_cvtepu8_epi16(dup8(_mm_srli_si128(v, 8)));
        return;
    }
    case CI_TYPE_Q6_K: // scales[16] @192, int8
        ks_scales16(ks, _mm_loadu_si128((const __m128i *)(const void *)(w + 192)), true);
        return;
    default: { // IQ4_XS: scales_h @2, scales_l[4] @4: 6 bits biased by 32 (no offset, no mins)
        uint32_t l;
        memcpy(&l, w + 4, 4);
        __m256i lo = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32((int)l), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
            _mm256_set1_epi32(0x0f));
        __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w[2] | w[3] << 8),
                                                        _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
        __m256i v = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        ks->lo = _mm256_permute4x64_epi64(_mm256_packs_epi32(v, v), 0x88); // int16 scales 0-7, twice
        return;
    }
    }
}

/* The 32 codes of chunk c (elements 32c..32c+31) of super-block w: unsigned values plus kq_off (0..63), or
 * for IQ4_XS the signed table values.  c is a constant after unrolling, so loads shared by chunks merge. */
AI __m256i kcode(uint32_t type, const uint8_t *w, const int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    switch (type) {
    case CI_TYPE_Q2_K: // qs[64] @16: element 128h + 32s + l in bits 2s.. of qs[32h + l]
        return _mm256_and_si256(_mm256_srli_epi16(load32(w + 16 + 32 * (c / 4)), 2 * (c % 4)), m2);
    case CI_TYPE_Q3_K: { // hmask[32] @0, qs[64] @32: the 2 low bits as Q2_K, bit 4h + s of hmask[l] adds 4
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(load32(w + 32 + 32 * (c / 4)), 2 * (c % 4)), m2);
        __m256i bit = _mm256_set1_epi8((char)(1 << c));
        __m256i hb = _mm256_cmpeq_epi8(_mm256_and_si256(load32(w), bit), bit);
        return _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
    }
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K: { // qs[128] @16 (Q5_K: @48, qh[32] @16): nibble c % 2 of qs[32 (c / 2) + l]
        bool q5 = type == CI_TYPE_Q5_K;
        __m256i q = load32(w + (q5 ? 48 : 16) + 32 * (c / 2));
        q = c % 2 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
        if (q5) { // bit c of qh[l] is the 5th bit
            __m256i bit = _mm256_set1_epi8((char)(1 << c));
            __m256i hb = _mm256_cmpeq_epi8(_mm256_and_si256(load32(w + 16), bit), bit);
            q = _mm256_or_si256(q, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
        }
        return q;
    }
    case CI_TYPE_Q6_K: { // ql[128], qh[64] @128: element 128h + 32r + l
        const int h = c / 4, r = c % 4;
        __m256i lo = load32(w + 64 * h + 32 * (r % 2));
        lo = r / 2 ? _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4) : _mm256_and_si256(lo, m4);
        // bits 2r, 2r + 1 of qh moved to bits 4-5 (16-bit shifts: what crosses a byte is masked off)
        __m256i qh = load32(w + 128 + 32 * h);
        qh = r == 0   ? _mm256_slli_epi16(qh, 4)
             : r == 1 ? _mm256_slli_epi16(qh, 2)
             : r == 3 ? _mm256_srli_epi16(qh, 2)
                      : qh;
        return _mm256_or_si256(lo, _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
    }
    default: // IQ4_XS: qs[128] @8, 16 bytes per 32-element sub-block laid out as IQ4_NL's block
        return _mm256_shuffle_epi8(value_table(ci_iq4nl_values), q4_bytes(w + 8 + 16 * c));
    }
}

/* Chunk c's scale vector for madd: lanes 0-7 (elements 0-15 of the chunk) group 2c's scale, lanes 8-15 group
 * 2c + 1's (the same sub-block's for 32-element sub-blocks). */
AI __m256i kq_chunk_scale(uint32_t type, const struct kscales *ks, const int c) {
    const int g0 = kq_sub32(type) ? c : 2 * c % 8, g1 = kq_sub32(type) ? c : (2 * c + 1) % 8;
    const char a0 = (char)(2 * g0), a1 = (char)(2 * g0 + 1), b0 = (char)(2 * g1), b1 = (char)(2 * g1 + 1);
    const __m256i pick = _mm256_setr_epi8(a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, b0,
                                          b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1);
    return _mm256_shuffle_epi8(kq_sub32(type) || c < 4 ? ks->lo : ks->hi, pick);
}

/* One (row, token) pair's integer vectors for super-block w: lanes of vs sum to sumi, lanes of vm to summ.
 * codes: w's codes decoded already (tiles of several tokens), or NULL to decode them here. */
AI void kpair(uint32_t type, const struct kscales *ks, const uint8_t *w, const __m256i *codes,
              const int8_t *x, const int16_t *bsum, __m256i *vs, __m256i *vm) {
    __m256i acc = _mm256_setzero_si256();
    UNROLL
    for (int c = 0; c < 8; c++) {
        __m256i u = codes ? codes[c] : kcode(type, w, c), xv = load32((const uint8_t *)(x + 32 * c));
        __m256i p = type == CI_TYPE_IQ4_XS
                        ? _mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(xv, u))
                        : _mm256_maddubs_epi16(u, xv);
        __m256i sv = kq_chunk_scale(type, ks, c);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, sv));
        KEEP_IN_REG(acc); // one running sum: left alone, GCC keeps the 8 products of every row on the stack
    }
    __m256i bs = load32((const uint8_t *)bsum);
    if (kq_off(type))
        acc = _mm256_sub_epi32(
            acc, _mm256_slli_epi32(_mm256_madd_epi16(ks->scales, bs), type == CI_TYPE_Q6_K ? 5 : 2));
    *vs = acc;
    if (kq_has_mins(type))
        *vm = _mm256_madd_epi16(ks->mins, bs);
}

/* Rows x tokens with RM x TN = 8 (row, token) pairs, as qtile; each row's super-block scales (and for 4 or 8
 * tokens its codes) are decoded once for the TN tokens. */
AI void ktile(uint32_t type, const int RM, const int TN, const struct tile_args *ta) {
    const struct ci_mm *m = ta->m;
    const int64_t r = ta->r, t = ta->t;
    const int nr = ta->nr, nt = ta->nt;
    const struct ci_act_q8k *q = m->qk;
    const size_t bb = kq_block_bytes(type); // a constant: the prefetch loop unrolls
    const int64_t nsb = m->n_in / 256;
    const uint8_t *wr[8];
    const int8_t *xt[8];
    const float *dt[8];
    const int16_t *st[8];
    UNROLL
    for (int i = 0; i < RM; i++)
        wr[i] = m->w + (size_t)(r + (i < nr ? i : nr - 1)) * m->row_bytes;
    UNROLL
    for (int j = 0; j < TN; j++) {
        int64_t tok = t + (j < nt ? j : nt - 1);
        xt[j] = q->qs + (size_t)tok * (size_t)m->n_in;
        dt[j] = q->d + (size_t)tok * (size_t)nsb;
        st[j] = q->bsum + (size_t)tok * (size_t)(nsb * 16);
    }
    const size_t d_at = kq_d_at(type);
    __m256 acc = ta->first ? _mm256_setzero_ps() : _mm256_load_ps((const float *)ta->acc);
    const uint8_t *pf = m->w + (size_t)(r + RM) * m->row_bytes + (size_t)ta->k0 * RM * bb;
    for (int64_t b = ta->k0; b < ta->k1; b++) {
        const size_t wo = (size_t)b * bb;
        if (RM >= 2) {
            prefetch_lines(pf, (int)((RM * bb + 63) / 64), ta->prefetch);
            pf += RM * bb;
        }
        __m256i vs[8], vm[8];
        UNROLL
        for (int a = 0; a < RM; a++) {
            struct kscales ks;
            ks_decode(type, wr[a] + wo, &ks);
            __m256i codes[8]; // decoded once for several tokens; a single token decodes in its dot
            UNROLL
            for (int c = 0; c < 8 && TN >= 4; c++)
                codes[c] = kcode(type, wr[a] + wo, c);
            UNROLL
            for (int j = 0; j < TN; j++)
                kpair(type, &ks, wr[a] + wo, TN >= 4 ? codes : NULL, xt[j] + b * 256, st[j] + b * 16,
                      &vs[a * TN + j], &vm[a * TN + j]);
        }
        float dxs[8];
        UNROLL
        for (int l = 0; l < 8; l++)
            dxs[l] = dt[l % TN][b];
        __m256 dxv = _mm256_loadu_ps(dxs);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(lane_f16(RM, TN, wr, wo, d_at), dxv),
                              _mm256_cvtepi32_ps(reduce8(vs)), acc);
        if (kq_has_mins(type)) { // - (dmin dx) summ
            __m256 dm = _mm256_mul_ps(lane_f16(RM, TN, wr, wo, d_at + 2), dxv);
            acc = _mm256_fmadd_ps(_mm256_xor_ps(dm, _mm256_set1_ps(-0.0f)), _mm256_cvtepi32_ps(reduce8(vm)),
                                  acc);
        }
    }
    qtile_finish(RM, TN, ta, acc);
}

#define KTILE(T, name, RM, TN)                                                                               \
    static void name##_##RM##x##TN(const struct tile_args *ta) {                                             \
        ktile(T, RM, TN, ta);                                                                                \
    }
#define KTILES(T, name)                                                                                      \
    KTILE(T, name, 8, 1)                                                                                     \
    KTILE(T, name, 4, 2)                                                                                     \
    KTILE(T, name, 2, 4)                                                                                     \
    KTILE(T, name, 1, 8)                                                                                     \
    static const tile_fn name##_tiles[9] = {NULL, name##_8x1, name##_4x2, NULL,      name##_2x4,             \
                                            NULL, NULL,       NULL,       name##_1x8};                       \
    static void mm_##name(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {                   \
        panel(m, r0, r1, t0, t1, name##_tiles, qtile_rows, 8, m->n_in / 256, false);                         \
    }

KTILES(CI_TYPE_Q2_K, q2_k)
KTILES(CI_TYPE_Q3_K, q3_k)
KTILES(CI_TYPE_Q4_K, q4_k)
KTILES(CI_TYPE_Q5_K, q5_k)
KTILES(CI_TYPE_Q6_K, q6_k)
KTILES(CI_TYPE_IQ4_XS, iq4_xs)

/* x rounded to half precision and back: F16C's conversion rounds to nearest even as ci_fp32_to_fp16 does (a
 * NaN, whose payload F16C keeps, takes the scalar routine).  One instruction pair instead of the bit-level
 * routine, which took about 2% of the main thread in a 135M Q4_0 decode (perf). */
static float round_f16(float x) {
    if (x != x)
        return ci_fp16_to_fp32(ci_fp32_to_fp16(x));
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT)));
}

/* Bit-identical to ci_ref_quant_act: max and integer sums are exact in any order, the scale arithmetic is the
 * same scalar code, and cvtps2dq rounds to nearest even as nearbyintf does in the default rounding mode. */
static void quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, float *s,
                      int64_t stride) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, abs_mask), _mm256_and_ps(v1, abs_mask)),
                                  _mm256_max_ps(_mm256_and_ps(v2, abs_mask), _mm256_and_ps(v3, abs_mask)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float db = amax < ACT_MIN_AMAX ? 0.0f : amax / 127.0f;
        float id = db != 0.0f ? 127.0f / amax : 0.0f;
        __m256 iv = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, iv)),
                i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, iv));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, iv)),
                i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, iv));
        // packs work within 128-bit lanes: the result holds dwords 0,4,1,5,2,6,3,7 of the wanted order
        __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        q8 = _mm256_permutevar8x32_epi32(q8, perm);
        _mm256_storeu_si256((__m256i *)(void *)(qs + b * 32), q8);
        __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q8); // exact: |pair sums| <= 256
        __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        d[b * stride] = round_f16(db);
        sum[b * stride] = _mm_cvtsi128_si32(s4);
        s[b * stride] = round_f16(db * (float)sum[b * stride]);
    }
}

/* Bit-identical to ci_ref_quant_act_k (Q8_K activations), as quant_act is to ci_ref_quant_act: one scale per
 * 256 values, then 32 values at a time rounded, packed and summed in 16s. */
static void quant_act_k(const float *x, int64_t n_in, int8_t *qs, float *d, int16_t *bsum) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n_in / 256; b++) {
        const float *xb = x + b * 256;
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < 256; i += 8)
            mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xb + i), abs_mask));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float id = amax < ACT_MIN_AMAX ? 0.0f : 127.0f / amax;
        float db = id != 0.0f ? 1.0f / id : 0.0f;
        __m256 iv = _mm256_set1_ps(id);
        for (int c = 0; c < 8; c++) {
            const float *xc = xb + 32 * c;
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc), iv));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 8), iv));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 16), iv));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xc + 24), iv));
            __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            q8 = _mm256_permutevar8x32_epi32(q8, perm);
            _mm256_storeu_si256((__m256i *)(void *)(qs + b * 256 + 32 * c), q8);
            // sums of 4 bytes per int32 lane, then of 4 lanes: lane 0 = bytes 0-15, lane 4 = bytes 16-31
            __m256i s =
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8), _mm256_set1_epi16(1));
            s = _mm256_hadd_epi32(s, s);
            s = _mm256_hadd_epi32(s, s);
            bsum[b * 16 + 2 * c] = (int16_t)_mm256_extract_epi32(s, 0);
            bsum[b * 16 + 2 * c + 1] = (int16_t)_mm256_extract_epi32(s, 4);
        }
        d[b] = db;
    }
}

/* ---- SwiGLU and GeGLU: dot_ref.c's silu_mul and gelu_mul, 8 lanes, the tail through a zero-padded copy -- */

static inline __m256 exp8(__m256 t) {
    t = _mm256_max_ps(t, _mm256_set1_ps(CI_EXP_LO));
    t = _mm256_min_ps(t, _mm256_set1_ps(CI_EXP_HI));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(CI_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-CI_EXP_LN2_HI), t);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(-CI_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(CI_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CI_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CI_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CI_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CI_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CI_EXP_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

static inline __m256 silu8(__m256 g, __m256 u) {
    __m256 e = exp8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static inline __m256 gelu8(__m256 g, __m256 u) {
    __m256 b = _mm256_mul_ps(_mm256_mul_ps(g, g), _mm256_set1_ps(CI_GELU_A));
    __m256 e = exp8(_mm256_mul_ps(_mm256_fmadd_ps(b, g, g), _mm256_set1_ps(CI_GELU_M2C)));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static inline void glu_rows(float *gate, const float *up, int64_t n, __m256 (*f)(__m256, __m256)) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, f(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(g, f(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof(float));
    }
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    glu_rows(gate, up, n, silu8);
}

static void gelu_mul(float *gate, const float *up, int64_t n) {
    glu_rows(gate, up, n, gelu8);
}

/* F16C's conversion rounds to nearest even as ci_fp32_to_fp16 does; a NaN keeps part of its payload there,
 * so a step holding one takes the scalar routine (the canonical quiet NaN). */
static void f32_to_f16(const float *x, uint16_t *h, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) == 0) {
            _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            continue;
        }
        for (int j = 0; j < 8; j++)
            h[i + j] = ci_fp32_to_fp16(x[i + j]);
    }
    for (; i < n; i++)
        h[i] = ci_fp32_to_fp16(x[i]);
}

/* ---- RMSNorm: norm.c's loop, sums 0-3 and 4-7 in two vectors of four doubles; the tail as norm.c's ------ */

static void rmsnorm(float *out, const float *x, const float *weight, int64_t n, float eps) {
    __m256d lo = _mm256_setzero_pd(), hi = lo;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    _Alignas(32) double p[8];
    _mm256_store_pd(p, lo);
    _mm256_store_pd(p + 4, hi);
    for (int64_t j = i; j < n; j++)
        p[j - i] += (double)x[j] * (double)x[j];
    const double ss = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    const double inv = 1.0 / sqrt(ss / (double)n + (double)eps);
    const __m256d vinv = _mm256_set1_pd(inv);
    for (i = 0; i + 4 <= n; i += 4) { // out may alias x: each 4 read before they are written
        const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), w = _mm256_cvtps_pd(_mm_loadu_ps(weight + i));
        _mm_storeu_ps(out + i, _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_mul_pd(v, vinv), w)));
    }
    for (; i < n; i++)
        out[i] = (float)((double)x[i] * inv * (double)weight[i]);
}

/* This table packs the K-quants, Q8_0 and Q4_0 (pack16.h's layout, read by kpack_avx2.c) and F16/BF16 (its
 * float layout with 8 residues, read by fpack_avx2.c); the other 32-block types stay as stored. */
static size_t kq_pack_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    if (type == CI_TYPE_F16 || type == CI_TYPE_BF16)
        return ci_pk_float_bytes(type, n_in, n_out);
    const bool packs = ci_pk_kquant(type) || type == CI_TYPE_Q8_0 || type == CI_TYPE_Q4_0;
    return packs ? ci_pk_bytes(type, n_in, n_out) : 0;
}

static void pack_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                      uint8_t *dst) {
    ci_avx2_pk_rows(8, type, w, row_bytes, n_in, g0, g1, dst);
}

static const struct ci_dot_table avx2_table = {
    .isa = "avx2+fma+f16c",
    .dot = {[CI_TYPE_F32] = dot_f32, [CI_TYPE_F16] = dot_f16, [CI_TYPE_BF16] = dot_bf16},
    .f32_short = dot_f32_short,
    .attn_f32 = ci_avx2_attn_f32,
    .attn_f16 = ci_avx2_attn_f16,
    .attn_q8_0 = ci_avx2_attn_q8_0,
    .attn_grp_f32 = ci_avx2_attn_grp_f32,
    .attn_grp_f16 = ci_avx2_attn_grp_f16,
    .attn_grp_q8_0 = ci_avx2_attn_grp_q8_0,
    .quant_act = quant_act,
    .quant_act_k = quant_act_k,
    .mm =
        {
            [CI_TYPE_F32] = mm_f32,
            [CI_TYPE_F16] = mm_f16,
            [CI_TYPE_BF16] = mm_bf16,
            [CI_TYPE_Q8_0] = mm_q8_0,
            [CI_TYPE_Q4_0] = mm_q4_0,
            [CI_TYPE_Q4_1] = mm_q4_1,
            [CI_TYPE_Q5_0] = mm_q5_0,
            [CI_TYPE_Q5_1] = mm_q5_1,
            [CI_TYPE_IQ4_NL] = mm_iq4_nl,
            [CI_TYPE_MXFP4] = mm_mxfp4,
            [CI_TYPE_Q2_K] = mm_q2_k,
            [CI_TYPE_Q3_K] = mm_q3_k,
            [CI_TYPE_Q4_K] = mm_q4_k,
            [CI_TYPE_Q5_K] = mm_q5_k,
            [CI_TYPE_Q6_K] = mm_q6_k,
            [CI_TYPE_IQ4_XS] = mm_iq4_xs,
        },
    .pack_bytes = kq_pack_bytes,
    .pack = pack_rows,
    .mm_packed = {[CI_TYPE_F16] = ci_avx2_mm_f16_packed, // fpack_avx2.c
                  [CI_TYPE_BF16] = ci_avx2_mm_bf16_packed,
                  [CI_TYPE_Q8_0] = ci_avx2_mm_kpacked,
                  [CI_TYPE_Q4_0] = ci_avx2_mm_kpacked,
                  [CI_TYPE_Q4_K] = ci_avx2_mm_kpacked,
                  [CI_TYPE_Q5_K] = ci_avx2_mm_kpacked,
                  [CI_TYPE_Q6_K] = ci_avx2_mm_kpacked,
                  [CI_TYPE_IQ4_XS] = ci_avx2_mm_kpacked},
    .float_residues = 8,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
    .f32_to_f16 = f32_to_f16,
    .rmsnorm = rmsnorm,
};

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return &avx2_table;
}

#else

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return NULL;
}

#endif
