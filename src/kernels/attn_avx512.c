/* Attention chunk kernels of the AVX-512 table.  Like dot_avx512.c this file is built portably and every
 * function carries a target attribute; dispatch.c calls in only after the CPU probe.
 *
 * The f32 chunk is the AVX2 one (attn_avx2.c: at CI_ATTN_CHUNK = 16 positions and head_dim <= 256 its 8-lane
 * score chains and value FMAs are not the bottleneck).  The f16 and q8_0 chunks widen the chunk's K/V rows to
 * float 16 lanes at a time (vcvtph2ps; int8 -> float times the block scale, the single rounding of
 * ci_dequantize_row) and run that f32 chunk, so every table gives the same bits for a KV type on a given
 * f32 chunk. */
#include "kernels/dot.h"

#include "kernels/quant.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)

#include <immintrin.h>
#include <stddef.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

T512 void ci_avx512_attn_f32(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                             int hd, float scale, float *m, float *l, float *acc) {
    ci_dot_avx2_table()->attn_f32(k, v, n, q, ng, hd, scale, m, l, acc);
}

/* The rows of a chunk widened to float: out [n][hd] (hd a multiple of 16; of 32 for Q8_0). */
T512 static void widen_rows(uint32_t type, const void *const *r, int n, int hd, float *out,
                            const void **outp) {
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * (size_t)hd;
        if (type == CI_TYPE_F16) {
            const uint16_t *h = r[i];
            for (int d = 0; d < hd; d += 16)
                _mm512_storeu_ps(o + d,
                                 _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + d))));
        } else {
            const struct ci_block_q8_0 *b = r[i];
            for (int j = 0; j < hd / CI_QK8_0; j++) {
                const __m512 vd = _mm512_set1_ps(_cvtsh_ss(b[j].d));
                for (int e = 0; e < CI_QK8_0; e += 16) {
                    __m512i qi =
                        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b[j].qs + e)));
                    _mm512_storeu_ps(o + j * CI_QK8_0 + e, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(qi)));
                }
            }
        }
        outp[i] = o;
    }
}

T512 static void attn_widened(uint32_t type, const void *const *k, const void *const *v, int n,
                              const float *const *q, int ng, int hd, float scale, float *m, float *l,
                              float *acc) {
    _Alignas(64) float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    _Alignas(64) float vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    widen_rows(type, k, n, hd, kf, kp);
    widen_rows(type, v, n, hd, vf, vp);
    ci_dot_avx2_table()->attn_f32(kp, vp, n, q, ng, hd, scale, m, l, acc);
}

T512 void ci_avx512_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                             int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 16 != 0) {
        ci_dot_avx2_table()->attn_f16(k, v, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    attn_widened(CI_TYPE_F16, k, v, n, q, ng, hd, scale, m, l, acc);
}

T512 void ci_avx512_attn_q8_0(const void *const *k, const void *const *v, int n, const float *const *q,
                              int ng, int hd, float scale, float *m, float *l, float *acc) {
    attn_widened(CI_TYPE_Q8_0, k, v, n, q, ng, hd, scale, m, l, acc);
}

#endif
