/* AVX2/FMA/F16C dot products (this file alone is built with -mavx2 -mfma -mf16c; dispatch.c calls into it
 * only after the CPU probe).  Weights are widened to float and multiplied against float activations, as in
 * dot_ref.c; only the summation order differs (8 lanes, a few independent accumulators, fixed given n).
 * Activations are not quantized here: that trade of accuracy for speed belongs to a later issue. */
#include "kernels/dot.h"

#include "kernels/quant.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_f32(const void *row, const float *x, int64_t n) {
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

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static float dot_f16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(load_f16x8(w + i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += _cvtsh_ss(w[i]) * x[i];
    return sum;
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

static float dot_bf16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16x8(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_bf16x8(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_bf16x8(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        sum += ci_bf16_to_fp32(w[i]) * x[i];
    return sum;
}

static inline __m256 i8x8_to_f32(__m128i v) { // low 8 bytes of v
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* One block's sum of q[j] * x[j] for its 32 weights given as four vectors of 8 (elements 0-7, ..., 24-31). */
static inline __m256 block_sum(__m256 q0, __m256 q1, __m256 q2, __m256 q3, const float *x) {
    __m256 s01 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x + 8), _mm256_mul_ps(q0, _mm256_loadu_ps(x)));
    __m256 s23 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), _mm256_mul_ps(q2, _mm256_loadu_ps(x + 16)));
    return _mm256_add_ps(s01, s23);
}

static float dot_q8_0(const void *row, const float *x, int64_t n) {
    const struct ci_block_q8_0 *b = row;
    int64_t nb = n / CI_QK8_0;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; // even and odd blocks
    for (int64_t i = 0; i < nb; i++, x += CI_QK8_0) {
        const int8_t *q = b[i].qs;
        __m256 q0 = i8x8_to_f32(_mm_loadl_epi64((const __m128i *)q));
        __m256 q1 = i8x8_to_f32(_mm_loadl_epi64((const __m128i *)(q + 8)));
        __m256 q2 = i8x8_to_f32(_mm_loadl_epi64((const __m128i *)(q + 16)));
        __m256 q3 = i8x8_to_f32(_mm_loadl_epi64((const __m128i *)(q + 24)));
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        acc[i & 1] = _mm256_fmadd_ps(d, block_sum(q0, q1, q2, q3, x), acc[i & 1]);
    }
    return hsum(_mm256_add_ps(acc[0], acc[1]));
}

static float dot_q4_0(const void *row, const float *x, int64_t n) {
    const struct ci_block_q4_0 *b = row;
    int64_t nb = n / CI_QK4_0;
    const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i++, x += CI_QK4_0) {
        __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);                    // elements 0..15
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight); // elements 16..31
        __m256 q0 = i8x8_to_f32(lo), q1 = i8x8_to_f32(_mm_srli_si128(lo, 8));
        __m256 q2 = i8x8_to_f32(hi), q3 = i8x8_to_f32(_mm_srli_si128(hi, 8));
        __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        acc[i & 1] = _mm256_fmadd_ps(d, block_sum(q0, q1, q2, q3, x), acc[i & 1]);
    }
    return hsum(_mm256_add_ps(acc[0], acc[1]));
}

static const struct ci_dot_table avx2_table = {
    .isa = "avx2+fma+f16c",
    .f32 = dot_f32,
    .f16 = dot_f16,
    .bf16 = dot_bf16,
    .q8_0 = dot_q8_0,
    .q4_0 = dot_q4_0,
};

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return &avx2_table;
}

#else

const struct ci_dot_table *ci_dot_avx2_table(void) {
    return NULL;
}

#endif
