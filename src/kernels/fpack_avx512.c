/* The AVX-512 table's matmul of F16/BF16 rows packed in pack16.h's float layout (ci_pk_float_bytes), with the
 * bits of the row kernels (dot_avx512.c).
 *
 * The row kernels give each output element a 16-lane accumulator over its row (lane j sums the products of
 * elements 16u + j, u in order) and then a fixed horizontal sum, so every (row, token) pair costs a vector
 * register and a reduction, and a row tile converts each weight once per token group.  Over a few tokens
 * (speculative verification: 9) on short rows (576 for a 135M model) that ran at 40% of the FMA peak on an
 * Intel Xeon.  Here a vector holds 16 rows instead: per residue j, a pass over the units u multiplies the 16
 * rows' element 16u + j by each token's element broadcast, so lane i of one accumulator is exactly lane j of
 * row i's accumulator in the row kernel.  The 16 passes' results then meet in hsum16's pairing (j with
 * j + 8, then + 4, + 2, + 1), the same IEEE additions.  Each weight is converted once for up to
 * CI_PK_FLOAT_TOKENS tokens and nothing is reduced across lanes.  Prefill above the CPU's widening threshold
 * turns row blocks back into F32 rows for dot_avx512.c's F32 tiles instead (ci_pk_float_widens). */
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/pack16.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)

#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define AI   static inline __attribute__((always_inline)) T512
#ifdef __OPTIMIZE__
// At least the most accumulators of a tile (G * TN <= 24): a loop over them left rolled keeps acc in memory
// (GCC zeroed it with rep stos and copied it out with rep movs on every residue's pass).
#define UNROLL _Pragma("GCC unroll 24")
#else
#define UNROLL
#endif
#include "kernels/prefetch_inl.h" // needs AI

// Bytes of each group's stream prefetched ahead of the tile (the groups are read front to back).
#define PREFETCH_AHEAD 2048
#define WIDEN_BYTES    CI_PK_FLOAT_WIDEN_BYTES // prefill's widened row blocks, on the stack

/* 16 rows' values of one element (32 bytes) as floats. */
AI __m512 widen_rows(uint32_t type, const uint8_t *p) {
    const __m256i h = _mm256_load_si256((const __m256i *)(const void *)p);
    if (type == CI_TYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); // BF16
}

/* G whole 16-row groups from gp (each group_bytes long) times tokens [t, t + nt) of one CI_PK_FLOAT_TOKENS
 * block (xb: the block's permuted activations); TN == nt.  Each residue's pass leaves its sums in part; the
 * 16 then meet as hsum16 pairs lanes (j with j + 8, then + 4, + 2, + 1). */
AI void fptile(uint32_t type, const int G, const int TN, const struct ci_mm *m, const uint8_t *gp,
               size_t group_bytes, int64_t r, const float *xb, int t, int nt, enum ci_prefetch pf) {
    const int64_t n_units = m->n_in / 16;
    const size_t pass_bytes = (size_t)n_units * 32;
    xb += t % CI_PK_FLOAT_TOKENS;     // token t + k at xb[k]
    _Alignas(64) __m512 part[16][24]; // [residue][G * TN <= 24]
    for (int j = 0; j < 16; j++) {
        const uint8_t *w[4];
        UNROLL
        for (int g = 0; g < G; g++)
            w[g] = gp + (size_t)g * group_bytes + (size_t)j * pass_bytes;
        const float *xu = xb + (size_t)j * (size_t)n_units * CI_PK_FLOAT_TOKENS;
        __m512 acc[24];
        UNROLL
        for (int k = 0; k < G * TN; k++)
            acc[k] = _mm512_setzero_ps();
        for (int64_t u = 0; u < n_units; u++, xu += CI_PK_FLOAT_TOKENS) {
            if (pf != CI_PREFETCH_NONE && (u & 1) == 0) {
                UNROLL
                for (int g = 0; g < G; g++)
                    ci_prefetch_line(w[g] + (size_t)u * 32 + PREFETCH_AHEAD, pf);
            }
            __m512 wv[4];
            UNROLL
            for (int g = 0; g < G; g++)
                wv[g] = widen_rows(type, w[g] + (size_t)u * 32);
            UNROLL
            for (int k = 0; k < TN; k++) {
                const __m512 b = _mm512_set1_ps(xu[k]);
                UNROLL
                for (int g = 0; g < G; g++)
                    acc[g * TN + k] = _mm512_fmadd_ps(wv[g], b, acc[g * TN + k]);
            }
        }
        UNROLL
        for (int k = 0; k < G * TN; k++)
            _mm512_store_ps((float *)&part[j][k], acc[k]);
    }
    for (int half = 8; half >= 1; half /= 2) { // part[j] += part[j + half], j < half: hsum16's tree
        for (int j = 0; j < half; j++) {
            UNROLL
            for (int k = 0; k < G * TN; k++)
                part[j][k] = _mm512_add_ps(part[j][k], part[j + half][k]);
        }
    }
    UNROLL
    for (int k = 0; k < TN; k++) {
        if (k >= nt)
            break;
        float *y = m->y + (size_t)(t + k) * (size_t)m->n_out + (size_t)r;
        UNROLL
        for (int g = 0; g < G; g++)
            _mm512_storeu_ps(y + 16 * g, part[0][g * TN + k]);
    }
}

/* r[i] lane j -> r[j] lane i (a 16 x 16 transpose: pairs of rows interleaved, then 4 x 4 blocks within each
 * 128-bit lane, then the 128-bit lanes of each four vectors). */
AI void transpose16(__m512 r[16]) {
    __m512 t[16], s[16];
    UNROLL
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // s[4k + c], 128-bit lane L: rows 4k..4k + 3 of column 4L + c
    UNROLL
    for (int k = 0; k < 4; k++) {
        s[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        s[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xee);
        s[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        s[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xee);
    }
    UNROLL
    for (int c = 0; c < 4; c++) {
        const __m512 p0 = _mm512_shuffle_f32x4(s[c], s[4 + c], 0x44),
                     p1 = _mm512_shuffle_f32x4(s[c], s[4 + c], 0xee);
        const __m512 p2 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0x44);
        const __m512 p3 = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0xee);
        r[c] = _mm512_shuffle_f32x4(p0, p2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(p0, p2, 0xdd);
        r[8 + c] = _mm512_shuffle_f32x4(p1, p3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(p1, p3, 0xdd);
    }
}

/* Group gp's 16 rows back in the file's element order, widened: F32 rows n_in floats apart at dst. */
AI void widen_group(uint32_t type, const uint8_t *gp, int64_t n_in, float *dst) {
    const int64_t n_units = n_in / 16;
    for (int64_t u = 0; u < n_units; u++) {
        __m512 v[16];
        UNROLL
        for (int j = 0; j < 16; j++)
            v[j] = widen_rows(type, gp + (size_t)(j * n_units + u) * 32);
        transpose16(v);
        UNROLL
        for (int i = 0; i < 16; i++)
            _mm512_store_ps(dst + (size_t)i * (size_t)n_in + (size_t)u * 16, v[i]);
    }
}

typedef void (*fptile_fn)(const struct ci_mm *m, const uint8_t *gp, size_t group_bytes, int64_t r,
                          const float *xb, int t, int nt, enum ci_prefetch pf);

#define FPTILE(T, name, G, TN)                                                                               \
    T512 static void name##_g##G##t##TN(const struct ci_mm *m, const uint8_t *gp, size_t group_bytes,        \
                                        int64_t r, const float *xb, int t, int nt, enum ci_prefetch pf) {    \
        fptile(T, G, TN, m, gp, group_bytes, r, xb, t, nt, pf);                                              \
    }
// Tiles of G groups x TN tokens, one for each token count: 4 groups up to 6 tokens (4 to 24 accumulators: one
// token's FMAs alone would wait on their latency), then 2 groups up to 12; and the single groups of a panel's
// odd end.
#define FPTILES(T, name)                                                                                     \
    FPTILE(T, name, 4, 1)                                                                                    \
    FPTILE(T, name, 4, 2)                                                                                    \
    FPTILE(T, name, 4, 3)                                                                                    \
    FPTILE(T, name, 4, 4)                                                                                    \
    FPTILE(T, name, 4, 5)                                                                                    \
    FPTILE(T, name, 4, 6)                                                                                    \
    FPTILE(T, name, 2, 1)                                                                                    \
    FPTILE(T, name, 2, 2)                                                                                    \
    FPTILE(T, name, 2, 3)                                                                                    \
    FPTILE(T, name, 2, 4)                                                                                    \
    FPTILE(T, name, 2, 5)                                                                                    \
    FPTILE(T, name, 2, 6)                                                                                    \
    FPTILE(T, name, 2, 7)                                                                                    \
    FPTILE(T, name, 2, 8)                                                                                    \
    FPTILE(T, name, 2, 9)                                                                                    \
    FPTILE(T, name, 2, 10)                                                                                   \
    FPTILE(T, name, 2, 11)                                                                                   \
    FPTILE(T, name, 2, 12)                                                                                   \
    FPTILE(T, name, 1, 1)                                                                                    \
    FPTILE(T, name, 1, 2)                                                                                    \
    FPTILE(T, name, 1, 3)                                                                                    \
    FPTILE(T, name, 1, 4)                                                                                    \
    FPTILE(T, name, 1, 5)                                                                                    \
    FPTILE(T, name, 1, 6)                                                                                    \
    FPTILE(T, name, 1, 7)                                                                                    \
    FPTILE(T, name, 1, 8)                                                                                    \
    FPTILE(T, name, 1, 9)                                                                                    \
    FPTILE(T, name, 1, 10)                                                                                   \
    FPTILE(T, name, 1, 11)                                                                                   \
    FPTILE(T, name, 1, 12)                                                                                   \
    /* [groups 4, 2, 1][token class: nt - 1] (4 groups: up to 6 tokens) */                                   \
    static const fptile_fn name##_fptiles[3][CI_PK_FLOAT_TOKENS] = {                                         \
        {name##_g4t1, name##_g4t2, name##_g4t3, name##_g4t4, name##_g4t5, name##_g4t6},                      \
        {name##_g2t1, name##_g2t2, name##_g2t3, name##_g2t4, name##_g2t5, name##_g2t6, name##_g2t7,          \
         name##_g2t8, name##_g2t9, name##_g2t10, name##_g2t11, name##_g2t12},                                \
        {name##_g1t1, name##_g1t2, name##_g1t3, name##_g1t4, name##_g1t5, name##_g1t6, name##_g1t7,          \
         name##_g1t8, name##_g1t9, name##_g1t10, name##_g1t11, name##_g1t12}};

FPTILES(CI_TYPE_F16, f16)
FPTILES(CI_TYPE_BF16, bf16)

/* Prefill (ci_pk_float_widens): row blocks widened back to F32 rows once, then dot_avx512.c's F32 tiles, as
 * its unpacked F16 prefill does (the same products in the same order). */
T512 static void widened_packed(const struct ci_mm *m, int64_t r0, int64_t re, int t0, int t1) {
    _Alignas(64) float buf[WIDEN_BYTES / 4];
    const size_t group_bytes = (size_t)m->n_in * CI_PK_ROWS * 2;
    const int64_t block = (int64_t)(WIDEN_BYTES / ((size_t)m->n_in * 4)) / CI_PK_ROWS * CI_PK_ROWS;
    const ci_mm_fn f32 = ci_dot_avx512_table()->mm[CI_TYPE_F32];
    for (int64_t rb = r0; rb < re; rb += block) {
        const int64_t nr = re - rb < block ? re - rb : block;
        for (int64_t g = 0; g < nr / CI_PK_ROWS; g++)
            widen_group(m->type, m->packed + (size_t)(rb / CI_PK_ROWS + g) * group_bytes, m->n_in,
                        buf + (size_t)g * CI_PK_ROWS * (size_t)m->n_in);
        // the block as an F32 matrix whose row 0 is row rb (y keeps its stride, n_out)
        struct ci_mm w = *m;
        w.type = CI_TYPE_F32;
        w.w = (const uint8_t *)buf;
        w.row_bytes = (size_t)m->n_in * 4;
        w.y = m->y + rb;
        w.packed = NULL;
        w.xp = NULL;
        f32(&w, 0, nr, t0, t1);
    }
}

/* Rows [r0, r1) and tokens [t0, t1): row tiles outer, so a tile's later token blocks find its groups in
 * cache (only the first one streams them from memory, prefetching); rows past the last whole group go to the
 * row kernel (they stay in the file's layout). */
T512 static void fpanel_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1,
                               const fptile_fn (*tiles)[CI_PK_FLOAT_TOKENS]) {
    const int64_t packed_rows = m->n_out / CI_PK_ROWS * CI_PK_ROWS;
    const int64_t re = r1 < packed_rows ? r1 : packed_rows;
    const size_t group_bytes = (size_t)m->n_in * CI_PK_ROWS * 2;
    if (r0 < re && ci_pk_float_widens(16, m->n_in, m->n_tok)) { // the whole batch decides: xp is made or not
        widened_packed(m, r0, re, t0, t1);
        r0 = re;
    }
    const enum ci_prefetch stream = ci_decode_prefetch();
    for (int64_t r = r0; r < re;) {
        const int64_t left = (re - r) / CI_PK_ROWS;
        const int g = left >= 4 ? 4 : left >= 2 ? 2 : 1;
        const uint8_t *gp = m->packed + (size_t)(r / CI_PK_ROWS) * group_bytes;
        for (int t = t0; t < t1;) {
            const int nt = ci_pk_float_block_tokens(t, t1);
            const float *xb = m->xp + (size_t)(t / CI_PK_FLOAT_TOKENS) * CI_PK_FLOAT_TOKENS * (size_t)m->n_in;
            const int cls = ci_pk_float_tile_class(nt);
            const int gi = g == 4 && nt <= 6 ? 0 : g >= 2 ? 1 : 2;
            const int gn = gi == 0 ? 4 : gi == 1 ? 2 : 1;
            for (int k = 0; k < g; k += gn) // 4 groups over a wide token block: as two 2-group tiles
                tiles[gi][cls](m, gp + (size_t)k * group_bytes, group_bytes, r + (int64_t)k * CI_PK_ROWS, xb,
                               t, nt, t == t0 ? stream : CI_PREFETCH_NONE);
            t += nt;
        }
        r += (int64_t)g * CI_PK_ROWS;
    }
    if (r1 > packed_rows)
        ci_dot_avx512_table()->mm[m->type](m, r0 > packed_rows ? r0 : packed_rows, r1, t0, t1);
}

T512 void ci_avx512_mm_f16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    fpanel_packed(m, r0, r1, t0, t1, f16_fptiles);
}

T512 void ci_avx512_mm_bf16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    fpanel_packed(m, r0, r1, t0, t1, bf16_fptiles);
}

#endif
