/* Attention chunk kernels for AVX2/FMA/F16C (this file, like every *_avx2.c, is built with -mavx2 -mfma
 * -mf16c; dispatch.c calls into it only after the CPU probe).  The f32 chunk is the vectorized online softmax
 * of dot.h (vectorized exp), with the score chains of 8 positions and the value FMAs of 8 dimension blocks
 * interleaved so a row runs at FMA rate out of L1.  The f16 chunks run the f32 chunk's operations on the
 * rows widened with F16C (exact), so each gives the f32 chunk's bits: V widened in registers where it is
 * loaded, once for two rows; K likewise for up to 4 rows, and widened once into a float copy for more (the
 * copy, stored and read back, cost more than the conversions at decode's few heads per KV head: 20-30% of an
 * f16 decode walk, bench/KERNELS.md).  The grouped chunks (prefill: several tokens x heads on the same K/V
 * rows) give each row the per-token chunk's bits; V is widened in registers for them too (a prompt's 8 tokens
 * x heads: measured no slower than one widened copy for all rows). */
#include "kernels/dot.h"

#include "kernels/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AI static inline __attribute__((always_inline))

#include "kernels/attn_simd8_inl.h"

/* The online-softmax chunk of dot.h: the grouped chunk below with every head's row seeing all n positions.
 * Per row: scores by one 8-lane FMA chain per position over head_dim, 8 positions' chains run side by side and
 * summed across lanes together (reduce8_ps); lanes past n get -inf, hence weight 0.  Weights by exp8, then per
 * 8 dimensions one rescale and n FMAs, 8 dimension blocks side by side.  head_dim not a multiple of 8 takes
 * the scalar reference. */
typedef void (*grp_chunk_fn)(const void *const *k, const void *const *v, const int *n, int nr,
                             const float *const *q, int hd, float scale, float *m, float *l, float *acc);

/* A decode chunk through a grouped one: every one of the ng rows sees all n positions, 8 rows a call. */
static void all_rows(grp_chunk_fn grp, const void *const *k, const void *const *v, int n,
                     const float *const *q, int ng, int hd, float scale, float *m, float *l, float *acc) {
    int nn[8];
    for (int g = 0; g < 8; g++)
        nn[g] = n;
    for (int g0 = 0; g0 < ng; g0 += 8) {
        int nr = ng - g0 < 8 ? ng - g0 : 8;
        grp(k, v, nn, nr, q + g0, hd, scale, m + g0, l + g0, acc + (size_t)g0 * (size_t)hd);
    }
}

void ci_avx2_attn_f32(const void *const *kr, const void *const *vr, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_f32(kr, vr, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    all_rows(ci_avx2_attn_grp_f32, kr, vr, n, q, ng, hd, scale, m, l, acc);
}

/* The rows of a chunk widened to float: kf/vf [n][hd] (hd a multiple of 8; of 32 for Q8_0). */
static void widen_rows(uint32_t type, const void *const *r, int n, int hd, float *out, const void **outp) {
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * (size_t)hd;
        if (type == CI_TYPE_F16) {
            const uint16_t *h = r[i];
            for (int d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d,
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + d))));
        } else {
            const struct ci_block_q8_0 *b = r[i];
            for (int j = 0; j < hd / CI_QK8_0; j++) {
                const __m256 vd = _mm256_set1_ps(_cvtsh_ss(b[j].d));
                for (int e = 0; e < CI_QK8_0; e += 8) {
                    __m256i qi =
                        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b[j].qs + e)));
                    _mm256_storeu_ps(o + j * CI_QK8_0 + e, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(qi)));
                }
            }
        }
        outp[i] = o;
    }
}

/* 8 floats of row r at dimension d: f16 rows widened in registers (vcvtph2ps, exact), so a chunk on f16 rows
 * runs the f32 chunk's operations on the same values. */
AI __m256 load8(const void *r, int d, bool f16) {
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)r + d)));
    return _mm256_loadu_ps((const float *)r + d);
}

/* Scores of 8 positions for one query row, exactly as the chunk above computes them: lane j is
 * reduce8(the 8-lane FMA chain of q . k[j] over head_dim) * scale, and -inf where j >= n (those k[j] need
 * only be readable: their lanes are discarded).  The 8 chains run interleaved.  k: float rows, or f16 rows
 * (f16) widened where they are loaded. */
AI __m256 scores8(const float *q, const void *const *k, int hd, int n, float scale, bool f16) {
    const void *k0 = k[0], *k1 = k[1], *k2 = k[2], *k3 = k[3], *k4 = k[4], *k5 = k[5], *k6 = k[6], *k7 = k[7];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, load8(k0, d, f16), a0);
        a1 = _mm256_fmadd_ps(qv, load8(k1, d, f16), a1);
        a2 = _mm256_fmadd_ps(qv, load8(k2, d, f16), a2);
        a3 = _mm256_fmadd_ps(qv, load8(k3, d, f16), a3);
        a4 = _mm256_fmadd_ps(qv, load8(k4, d, f16), a4);
        a5 = _mm256_fmadd_ps(qv, load8(k5, d, f16), a5);
        a6 = _mm256_fmadd_ps(qv, load8(k6, d, f16), a6);
        a7 = _mm256_fmadd_ps(qv, load8(k7, d, f16), a7);
    }
    const __m256 dv[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    __m256 valid =
        _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps((float)n), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(reduce8_ps(dv), _mm256_set1_ps(scale)),
                            valid);
}

#define PV_FMA(t, off) t = _mm256_fmadd_ps(wi, load8(v[i], d + (off), f16), t)

/* a[d] = a[d] * c + sum_{i < n} w[i] v[i][d] for one row, in the chunk's order (per dimension: the rescale,
 * then one FMA per position, front to back); 8 (or 4) dimension blocks at a time. */
AI void pv_row(float *a, const void *const *v, const float *w, int n, int hd, float c, bool f16) {
    const __m256 vc = _mm256_set1_ps(c);
    int d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(a + d), vc),
               t1 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 8), vc),
               t2 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 16), vc),
               t3 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 24), vc),
               t4 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 32), vc),
               t5 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 40), vc),
               t6 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 48), vc),
               t7 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 56), vc);
        for (int i = 0; i < n; i++) {
            const __m256 wi = _mm256_broadcast_ss(&w[i]);
            PV_FMA(t0, 0);
            PV_FMA(t1, 8);
            PV_FMA(t2, 16);
            PV_FMA(t3, 24);
            PV_FMA(t4, 32);
            PV_FMA(t5, 40);
            PV_FMA(t6, 48);
            PV_FMA(t7, 56);
        }
        _mm256_storeu_ps(a + d, t0);
        _mm256_storeu_ps(a + d + 8, t1);
        _mm256_storeu_ps(a + d + 16, t2);
        _mm256_storeu_ps(a + d + 24, t3);
        _mm256_storeu_ps(a + d + 32, t4);
        _mm256_storeu_ps(a + d + 40, t5);
        _mm256_storeu_ps(a + d + 48, t6);
        _mm256_storeu_ps(a + d + 56, t7);
    }
    for (; d + 32 <= hd; d += 32) {
        __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(a + d), vc),
               t1 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 8), vc),
               t2 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 16), vc),
               t3 = _mm256_mul_ps(_mm256_loadu_ps(a + d + 24), vc);
        for (int i = 0; i < n; i++) {
            const __m256 wi = _mm256_broadcast_ss(&w[i]);
            PV_FMA(t0, 0);
            PV_FMA(t1, 8);
            PV_FMA(t2, 16);
            PV_FMA(t3, 24);
        }
        _mm256_storeu_ps(a + d, t0);
        _mm256_storeu_ps(a + d + 8, t1);
        _mm256_storeu_ps(a + d + 16, t2);
        _mm256_storeu_ps(a + d + 24, t3);
    }
    for (; d < hd; d += 8) {
        __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(a + d), vc);
        for (int i = 0; i < n; i++) {
            const __m256 wi = _mm256_broadcast_ss(&w[i]);
            PV_FMA(t0, 0);
        }
        _mm256_storeu_ps(a + d, t0);
    }
}

#undef PV_FMA

/* One row's online-softmax step from the scores of the chunk's positions 0..7 (sc0) and 8..15 (sc1; -inf past
 * its n): max, exp8 weights, lane sum, rescale and the value FMAs of its n positions. */
AI void row_update(__m256 sc0, __m256 sc1, const float *const *v, int n, int hd, float *m, float *l,
                   float *acc) {
    _Alignas(32) float w[CI_ATTN_CHUNK];
    float c = softmax_step(sc0, sc1, m, l, w);
    pv_row(acc, (const void *const *)v, w, n, hd, c, false);
}

/* The grouped chunk of dot.h (and, with every row at n, the chunk itself: ci_avx2_attn_f32): per row the
 * scores, max, exp8 weights, lane sum, rescale and value FMAs of its n[r] positions, the chunk's K/V rows shared
 * in L1. */
void ci_avx2_attn_grp_f32(const void *const *kr, const void *const *vr, const int *n, int nr,
                          const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_grp_f32(kr, vr, n, nr, q, hd, scale, m, l, acc);
        return;
    }
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    if (nmax <= 0)
        return;
    const float *k[CI_ATTN_CHUNK]; // past nmax: the last row again (read, then masked out)
    for (int i = 0; i < CI_ATTN_CHUNK; i++)
        k[i] = kr[i < nmax ? i : nmax - 1];
    const float *const *v = (const float *const *)vr;
    for (int r = 0; r < nr; r++) {
        __m256 sc0 = scores8(q[r], (const void *const *)k, hd, n[r], scale, false);
        __m256 sc1 = nmax > 8 ? scores8(q[r], (const void *const *)(k + 8), hd, n[r] - 8, scale, false)
                              : _mm256_set1_ps(-INFINITY);
        row_update(sc0, sc1, v, n[r], hd, &m[r], &l[r], acc + (size_t)r * (size_t)hd);
    }
}

#define PV2_FMA(t, w, vv) t = _mm256_fmadd_ps(w, vv, t)

/* pv_row for two rows at once on f16 V rows, 32 dimensions a pass (8 accumulator chains): each 8 values of V
 * widened once, in registers, for both rows; per accumulator the rescale and then one FMA per position in
 * order, as pv_row, so the same bits.  hd a multiple of 32. */
AI void pv2_f16(float *a0, float *a1, const uint16_t *const *v, const float *w0, const float *w1, int n0,
                int n1, int hd, float c0, float c1) {
    const __m256 vc0 = _mm256_set1_ps(c0), vc1 = _mm256_set1_ps(c1);
    const int nlo = n0 < n1 ? n0 : n1;
    for (int d = 0; d < hd; d += 32) {
        __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(a0 + d), vc0),
               t1 = _mm256_mul_ps(_mm256_loadu_ps(a0 + d + 8), vc0),
               t2 = _mm256_mul_ps(_mm256_loadu_ps(a0 + d + 16), vc0),
               t3 = _mm256_mul_ps(_mm256_loadu_ps(a0 + d + 24), vc0);
        __m256 u0 = _mm256_mul_ps(_mm256_loadu_ps(a1 + d), vc1),
               u1 = _mm256_mul_ps(_mm256_loadu_ps(a1 + d + 8), vc1),
               u2 = _mm256_mul_ps(_mm256_loadu_ps(a1 + d + 16), vc1),
               u3 = _mm256_mul_ps(_mm256_loadu_ps(a1 + d + 24), vc1);
        int i = 0;
        for (; i < nlo; i++) {
            const __m256 x0 = load8(v[i], d, true), x1 = load8(v[i], d + 8, true),
                         x2 = load8(v[i], d + 16, true), x3 = load8(v[i], d + 24, true);
            const __m256 wa = _mm256_broadcast_ss(&w0[i]), wb = _mm256_broadcast_ss(&w1[i]);
            PV2_FMA(t0, wa, x0);
            PV2_FMA(u0, wb, x0);
            PV2_FMA(t1, wa, x1);
            PV2_FMA(u1, wb, x1);
            PV2_FMA(t2, wa, x2);
            PV2_FMA(u2, wb, x2);
            PV2_FMA(t3, wa, x3);
            PV2_FMA(u3, wb, x3);
        }
        for (int j = i; j < n0; j++) { // grouped chunks: one row sees more of the chunk than the other
            const __m256 wa = _mm256_broadcast_ss(&w0[j]);
            PV2_FMA(t0, wa, load8(v[j], d, true));
            PV2_FMA(t1, wa, load8(v[j], d + 8, true));
            PV2_FMA(t2, wa, load8(v[j], d + 16, true));
            PV2_FMA(t3, wa, load8(v[j], d + 24, true));
        }
        for (int j = i; j < n1; j++) {
            const __m256 wb = _mm256_broadcast_ss(&w1[j]);
            PV2_FMA(u0, wb, load8(v[j], d, true));
            PV2_FMA(u1, wb, load8(v[j], d + 8, true));
            PV2_FMA(u2, wb, load8(v[j], d + 16, true));
            PV2_FMA(u3, wb, load8(v[j], d + 24, true));
        }
        _mm256_storeu_ps(a0 + d, t0);
        _mm256_storeu_ps(a0 + d + 8, t1);
        _mm256_storeu_ps(a0 + d + 16, t2);
        _mm256_storeu_ps(a0 + d + 24, t3);
        _mm256_storeu_ps(a1 + d, u0);
        _mm256_storeu_ps(a1 + d + 8, u1);
        _mm256_storeu_ps(a1 + d + 16, u2);
        _mm256_storeu_ps(a1 + d + 24, u3);
    }
}

#undef PV2_FMA

// Most rows for which a chunk's f16 K is widened where each row's scores load it; more share one widened copy.
#define K_IN_REGS_MAX_ROWS 4

/* The grouped chunk on f16 rows (hd a multiple of 32): V widened in registers where it is loaded, once per pass
 * for two rows (after their softmax steps), instead of into a copy that is stored and read back; K likewise
 * for up to K_IN_REGS_MAX_ROWS rows, and widened once into a copy for more.  A last odd row takes pv_row, V
 * again widened where it is loaded. */
static void attn_grp_f16_rows(const void *const *kr, const void *const *vr, const int *n, int nr,
                              const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    if (nmax <= 0)
        return;
    const bool k_in_regs = nr <= K_IN_REGS_MAX_ROWS;
    _Alignas(32) float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kw[CI_ATTN_CHUNK];
    if (!k_in_regs)
        widen_rows(CI_TYPE_F16, kr, nmax, hd, kf, kw);
    const void *k[CI_ATTN_CHUNK]; // past nmax: the last row again (read, then masked out)
    for (int i = 0; i < CI_ATTN_CHUNK; i++)
        k[i] = (k_in_regs ? kr : kw)[i < nmax ? i : nmax - 1];
    const uint16_t *const *v = (const uint16_t *const *)vr;
    _Alignas(32) float w[2][CI_ATTN_CHUNK];
    float c[2];
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const int rn = nr - r0 < 2 ? nr - r0 : 2;
        for (int r = 0; r < rn; r++) {
            const int nr_ = n[r0 + r];
            __m256 sc0 = k_in_regs ? scores8(q[r0 + r], k, hd, nr_, scale, true)
                                   : scores8(q[r0 + r], k, hd, nr_, scale, false);
            __m256 sc1 = nmax <= 8   ? _mm256_set1_ps(-INFINITY)
                         : k_in_regs ? scores8(q[r0 + r], k + 8, hd, nr_ - 8, scale, true)
                                     : scores8(q[r0 + r], k + 8, hd, nr_ - 8, scale, false);
            c[r] = softmax_step(sc0, sc1, &m[r0 + r], &l[r0 + r], w[r]);
        }
        float *a = acc + (size_t)r0 * (size_t)hd;
        if (rn == 2) {
            pv2_f16(a, a + hd, v, w[0], w[1], n[r0], n[r0 + 1], hd, c[0], c[1]);
        } else {
            pv_row(a, vr, w[0], n[r0], hd, c[0], true);
        }
    }
}

/* f16 rows with hd not a multiple of 32: both widened once into float copies, then the f32 chunk. */
static void attn_grp_f16_widened(const void *const *k, const void *const *v, const int *n, int nr,
                                 const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    _Alignas(32) float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    _Alignas(32) float vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    widen_rows(CI_TYPE_F16, k, nmax, hd, kf, kp);
    widen_rows(CI_TYPE_F16, v, nmax, hd, vf, vp);
    ci_avx2_attn_grp_f32(kp, vp, n, nr, q, hd, scale, m, l, acc);
}

static void attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                         const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 32 == 0)
        attn_grp_f16_rows(k, v, n, nr, q, hd, scale, m, l, acc);
    else
        attn_grp_f16_widened(k, v, n, nr, q, hd, scale, m, l, acc);
}

void ci_avx2_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_f16(k, v, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    all_rows(attn_grp_f16, k, v, n, q, ng, hd, scale, m, l, acc);
}

void ci_avx2_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                          const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_grp_f16(k, v, n, nr, q, hd, scale, m, l, acc);
        return;
    }
    attn_grp_f16(k, v, n, nr, q, hd, scale, m, l, acc);
}

/* Q8_0 scores of 8 positions for one quantized query row (dot.h): per block, the 8 positions' exact integer
 * dots (|k| times sign-adjusted q by maddubs, pairs summed by madd, then the 8 lanes of each position summed
 * by an hadd tree, all exact), then acc = fma(dk * dq, isum, acc) lane by lane: the scalar reference's
 * operations, so the same bits.  Lanes j >= n get -inf (their k[j] need only be readable). */
AI __m256 scores8_q8(const struct ci_block_q8_0 *q, const struct ci_block_q8_0 *const *k, int nb, int n,
                     float scale) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)q[b].qs);
        __m256i s[8];
        for (int j = 0; j < 8; j++) {
            const __m256i kv = _mm256_loadu_si256((const __m256i *)(const void *)k[j][b].qs);
            s[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(qv, kv)),
                                     ones);
        }
        __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
        __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
        __m256i isum = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                        _mm256_permute2x128_si256(h0, h1, 0x31)); // lane j: position j
        const __m256 dk = _mm256_cvtph_ps(_mm_setr_epi16((short)k[0][b].d, (short)k[1][b].d, (short)k[2][b].d,
                                                         (short)k[3][b].d, (short)k[4][b].d, (short)k[5][b].d,
                                                         (short)k[6][b].d, (short)k[7][b].d));
        const __m256 dq = _mm256_set1_ps(_cvtsh_ss(q[b].d));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dk, dq), _mm256_cvtepi32_ps(isum), acc);
    }
    __m256 valid =
        _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps((float)n), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(acc, _mm256_set1_ps(scale)), valid);
}

/* The grouped Q8_0 chunk: the V rows widened once for all rows, then per row the integer scores and the f32
 * chunk's softmax and value FMAs (row_update), so each row gives the per-row chunk's bits. */
void ci_avx2_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                           const struct ci_block_q8_0 *const *q, int hd, float scale, float *m, float *l,
                           float *acc) {
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    if (nmax <= 0)
        return;
    const struct ci_block_q8_0 *kk[CI_ATTN_CHUNK]; // past nmax: the last row again (read, then masked out)
    for (int i = 0; i < CI_ATTN_CHUNK; i++)
        kk[i] = k[i < nmax ? i : nmax - 1];
    _Alignas(32) float vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *vp[CI_ATTN_CHUNK];
    widen_rows(CI_TYPE_Q8_0, v, nmax, hd, vf, vp);
    const float *const *vr = (const float *const *)vp;
    const int nb = hd / CI_QK8_0;
    for (int r = 0; r < nr; r++) {
        __m256 sc0 = scores8_q8(q[r], kk, nb, n[r], scale);
        __m256 sc1 = nmax > 8 ? scores8_q8(q[r], kk + 8, nb, n[r] - 8, scale) : _mm256_set1_ps(-INFINITY);
        row_update(sc0, sc1, vr, n[r], hd, &m[r], &l[r], acc + (size_t)r * (size_t)hd);
    }
}

/* The Q8_0 chunk: the grouped one with every head's row seeing all n positions, 8 heads per call. */
void ci_avx2_attn_q8_0(const void *const *k, const void *const *v, int n,
                       const struct ci_block_q8_0 *const *q, int ng, int hd, float scale, float *m, float *l,
                       float *acc) {
    int nn[8];
    for (int g = 0; g < 8; g++)
        nn[g] = n;
    for (int g0 = 0; g0 < ng; g0 += 8) {
        int nr = ng - g0 < 8 ? ng - g0 : 8;
        ci_avx2_attn_grp_q8_0(k, v, nn, nr, q + g0, hd, scale, m + g0, l + g0, acc + (size_t)g0 * (size_t)hd);
    }
}

#endif
