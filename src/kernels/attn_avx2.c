/* Attention chunk kernels for AVX2/FMA/F16C (this file, like every *_avx2.c, is built with -mavx2 -mfma
 * -mf16c; dispatch.c calls into it only after the CPU probe).  The f32 chunk is the vectorized online softmax
 * of dot.h (vectorized exp); the f16 and q8_0 chunks widen the chunk's K/V rows to float with F16C (f16) or
 * int8 -> float times the block scale (q8_0: the same single rounding as ci_dequantize_row) and run the f32
 * chunk on them, so each gives the f32 chunk's bits on the dequantized rows.  The widening is paid once per
 * chunk for the whole GQA group that reads the KV head. */
#include "kernels/dot.h"

#include "kernels/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define AI static inline __attribute__((always_inline))

AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x in 8 lanes: Cephes' range reduction and degree-6 polynomial (about 2 ulp); below -87.3 the result is
 * flushed to 0 (so is -inf), above 88.3 it saturates at e^88.3. */
AI __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lane l of the result = the sum of the 8 lanes of v[l] (a fixed order). */
AI __m256 reduce8_ps(const __m256 *v) {
    __m256 a0 = _mm256_add_ps(_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1]));
    __m256 a1 = _mm256_add_ps(_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3]));
    __m256 a2 = _mm256_add_ps(_mm256_unpacklo_ps(v[4], v[5]), _mm256_unpackhi_ps(v[4], v[5]));
    __m256 a3 = _mm256_add_ps(_mm256_unpacklo_ps(v[6], v[7]), _mm256_unpackhi_ps(v[6], v[7]));
    __m256 b0 =
        _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a0), _mm256_castps_pd(a1))),
                      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a0), _mm256_castps_pd(a1))));
    __m256 b1 =
        _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a2), _mm256_castps_pd(a3))),
                      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a2), _mm256_castps_pd(a3))));
    return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

/* The online-softmax chunk of dot.h.  Scores: one 8-lane FMA chain per position over head_dim, 8 positions'
 * chains summed across lanes together (reduce8_ps); lanes past n get -inf, hence weight 0.  Weights by exp8,
 * then per 8 dimensions one rescale and n FMAs.  head_dim not a multiple of 8 takes the scalar reference. */
void ci_avx2_attn_f32(const void *const *kr, const void *const *vr, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_f32(kr, vr, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    const float *const *k = (const float *const *)kr, *const *v = (const float *const *)vr;
    for (int g = 0; g < ng; g++) {
        _Alignas(32) float w[CI_ATTN_CHUNK];
        __m256 sc[CI_ATTN_CHUNK / 8];
        for (int h = 0; h < CI_ATTN_CHUNK / 8; h++) {
            __m256 dv[8];
            for (int j = 0; j < 8; j++) {
                int i = h * 8 + j;
                __m256 a = _mm256_setzero_ps();
                if (i < n)
                    for (int d = 0; d < hd; d += 8)
                        a = _mm256_fmadd_ps(_mm256_loadu_ps(q[g] + d), _mm256_loadu_ps(k[i] + d), a);
                dv[j] = a;
            }
            __m256 valid = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_ps((float)(n - h * 8)), _CMP_LT_OQ);
            sc[h] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY),
                                     _mm256_mul_ps(reduce8_ps(dv), _mm256_set1_ps(scale)), valid);
        }
        __m256 mv = _mm256_max_ps(sc[0], sc[1]);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float mx = _mm_cvtss_f32(m4) > m[g] ? _mm_cvtss_f32(m4) : m[g];
        float c =
            m[g] == -INFINITY ? 0.0f : _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_set1_ps(m[g] - mx))));
        __m256 vmx = _mm256_set1_ps(mx);
        __m256 w0 = exp8(_mm256_sub_ps(sc[0], vmx)), w1 = exp8(_mm256_sub_ps(sc[1], vmx));
        _mm256_store_ps(w, w0);
        _mm256_store_ps(w + 8, w1);
        l[g] = l[g] * c + hsum(_mm256_add_ps(w0, w1));
        float *a = acc + (size_t)g * (size_t)hd;
        const __m256 vc = _mm256_set1_ps(c);
        for (int d = 0; d < hd; d += 8) {
            __m256 t = _mm256_mul_ps(_mm256_loadu_ps(a + d), vc);
            for (int i = 0; i < n; i++)
                t = _mm256_fmadd_ps(_mm256_broadcast_ss(&w[i]), _mm256_loadu_ps(v[i] + d), t);
            _mm256_storeu_ps(a + d, t);
        }
        m[g] = mx;
    }
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

static void attn_widened(uint32_t type, const void *const *k, const void *const *v, int n,
                         const float *const *q, int ng, int hd, float scale, float *m, float *l, float *acc) {
    _Alignas(32) float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    _Alignas(32) float vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    widen_rows(type, k, n, hd, kf, kp);
    widen_rows(type, v, n, hd, vf, vp);
    ci_avx2_attn_f32(kp, vp, n, q, ng, hd, scale, m, l, acc);
}

void ci_avx2_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 8 != 0) {
        ci_ref_attn_f16(k, v, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    attn_widened(CI_TYPE_F16, k, v, n, q, ng, hd, scale, m, l, acc);
}

void ci_avx2_attn_q8_0(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                       int hd, float scale, float *m, float *l, float *acc) {
    attn_widened(CI_TYPE_Q8_0, k, v, n, q, ng, hd, scale, m, l, acc);
}

#endif
