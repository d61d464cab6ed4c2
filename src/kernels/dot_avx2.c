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
 * Also here: the Q8 activation quantizer (bit-identical to the scalar one).  The attention chunk kernels
 * live in attn_avx2.c. */
#include "kernels/dot.h"

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
AI void prefetch_lines(const uint8_t *p, const int n_lines) {
    UNROLL
    for (int l = 0; l < n_lines; l++)
        _mm_prefetch((const char *)(p + 64 * l), _MM_HINT_T0);
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
    int64_t k0, k1; // units [k0, k1) of this slice
    bool first;     // k0 == 0: start from zero
    bool last;      // k1 == all units: finish and store y
    __m256 *acc;    // [RM * TN] (float) or [1] (quantized) parked accumulators
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
            prefetch_lines(pf, (step + 63) / 64);
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
    for (int64_t rb = r0; rb < r1; rb += block) {
        int64_t re = rb + block < r1 ? rb + block : r1;
        for (int t = t0; t < t1;) {
            int tn = t1 - t < max_tn ? t1 - t : max_tn;
            if (max_tn == 8 && tn < 8) // quantized tiles come in 1, 2, 4, 8 tokens
                tn = tn >= 4 ? 4 : tn >= 2 ? 2 : 1;
            int rm = tile_rows[tn];
            int64_t slice = L1_X_BYTES / (32 * tn);
            struct tile_args ta = {.m = m, .t = t, .nt = tn};
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

/* Rows [r, r + nr) x tokens [t, t + nt) with RM x TN = 8 (row, token) pairs, lane l = (l / TN, l % TN). */
AI void qtile(uint32_t type, const int RM, const int TN, const struct tile_args *ta) {
    const struct ci_mm *m = ta->m;
    const int64_t r = ta->r, t = ta->t;
    const int nr = ta->nr, nt = ta->nt;
    const struct ci_act_q8 *q = m->q;
    const size_t bb = type == CI_TYPE_Q8_0 ? sizeof(struct ci_block_q8_0) : sizeof(struct ci_block_q4_0);
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
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = ta->first ? _mm256_setzero_ps() : _mm256_load_ps((const float *)ta->acc);
    const uint8_t *pf = m->w + (size_t)(r + RM) * m->row_bytes + (size_t)ta->k0 * RM * bb;
    for (int64_t b = ta->k0; b < ta->k1; b++) {
        const size_t wo = (size_t)b * bb;
        if (RM >= 2) { // tiles of one row serve prefill, whose row block is already in L2
            prefetch_lines(pf, (int)((RM * bb + 63) / 64));
            pf += RM * bb;
        }
        __m256i v[8];
        UNROLL
        for (int a = 0; a < RM; a++) {
            const uint8_t *blk = wr[a] + wo;
            if (type == CI_TYPE_Q8_0) {
                // |w| as unsigned times x carrying w's sign: maddubs needs one unsigned operand, and a weight
                // of -128 (legal in a file) stays exact this way round.
                __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
                __m256i aw = _mm256_sign_epi8(wv, wv);
                UNROLL
                for (int j = 0; j < TN; j++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xt[j] + b * 32));
                    v[a * TN + j] =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), ones);
                }
            } else {
                __m256i qv = q4_bytes(blk + 2); // nibble values 0..15; the -8 is applied to the sum below
                UNROLL
                for (int j = 0; j < TN; j++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xt[j] + b * 32));
                    v[a * TN + j] = _mm256_madd_epi16(_mm256_maddubs_epi16(qv, xv), ones);
                }
            }
        }
        __m256i s = reduce8(v);
        if (type == CI_TYPE_Q4_0) // sum (q - 8) x = sum q x - 8 sum x
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(pattern_epi32(TN, xs + b * stride), 3));
        __m256 dw;
        if (RM == 1) {
            dw = _mm256_set1_ps(_cvtsh_ss(load_u16(wr[0] + wo)));
        } else {
            uint16_t h[8];
            UNROLL
            for (int l = 0; l < 8; l++)
                h[l] = load_u16(wr[l / TN] + wo);
            dw = _mm256_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3],
                                                (short)h[4], (short)h[5], (short)h[6], (short)h[7]));
        }
        __m256 d = _mm256_mul_ps(dw, pattern_ps(TN, dx + b * stride));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    if (!ta->last) {
        _mm256_store_ps((float *)ta->acc, acc);
        return;
    }
    float out[8];
    _mm256_storeu_ps(out, acc);
    UNROLL
    for (int a = 0; a < RM && a < nr; a++)
        UNROLL
    for (int j = 0; j < TN && j < nt; j++)
        m->y[(size_t)(t + j) * (size_t)m->n_out + (size_t)(r + a)] = out[a * TN + j];
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

static const int qtile_rows[9] = {0, 8, 4, 0, 2, 0, 0, 0, 1};

static void mm_q8_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    panel(m, r0, r1, t0, t1, q8_0_tiles, qtile_rows, 8, m->n_in / 32, false);
}
static void mm_q4_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    panel(m, r0, r1, t0, t1, q4_0_tiles, qtile_rows, 8, m->n_in / 32, false);
}

/* Bit-identical to ci_ref_quant_act: max and integer sums are exact in any order, the scale arithmetic is the
 * same scalar code, and cvtps2dq rounds to nearest even as nearbyintf does in the default rounding mode. */
static void quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, int64_t stride) {
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
        float id = db != 0.0f ? 1.0f / db : 0.0f;
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
        d[b * stride] = db;
        sum[b * stride] = _mm_cvtsi128_si32(s4);
    }
}

/* ---- SwiGLU: dot_ref.c's silu_mul, 8 lanes, the tail through a zero-padded copy ---------------------- */

static inline __m256 silu8(__m256 g, __m256 u) {
    __m256 t = _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
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
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

static void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, silu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof(float));
        memcpy(u, up + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(g, silu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof(float));
    }
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
    .mm =
        {
            [CI_TYPE_F32] = mm_f32,
            [CI_TYPE_F16] = mm_f16,
            [CI_TYPE_BF16] = mm_bf16,
            [CI_TYPE_Q8_0] = mm_q8_0,
            [CI_TYPE_Q4_0] = mm_q4_0,
        },
    .silu_mul = silu_mul,
};

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return &avx2_table;
}

#else

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return NULL;
}

#endif
