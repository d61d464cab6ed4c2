/* The SIMD loops of `cinfer bench hw` (this file alone is built with -mavx2 -mfma -mf16c; bench_hw.c calls
 * them only after bench_hw_have_avx2() / bench_hw_have_avx512() said yes).  The AVX-512 loop is compiled for
 * that one function through a target attribute, so the file needs no extra flags: llama.cpp's native build
 * uses AVX-512 where the CPU has it, and a roofline must use the machine's real peak. */
#include "bench/perf.h"

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) &&               \
    defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

bool bench_hw_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool bench_hw_have_avx512(void) {
    __builtin_cpu_init(); // __builtin_cpu_supports also checks that the OS saves the ZMM state
    return __builtin_cpu_supports("avx512f");
}

static float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float bench_hw_sum_avx2(const float *p, size_t n) {
    // One accumulator per load of a 256-byte step: the adds never wait on each other, only on memory.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
        a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
        a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
        a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
        a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    return hsum8(s);
}

float bench_hw_fma_avx2(int64_t iters) {
    // 12 chains cover the FMA latency (4-5 cycles) times the FMA ports (2) of current cores with room to
    // spare; acc = acc * a + b converges to b / (1 - a) = 1, so the values stay normal.
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
    __m256 c0 = _mm256_set1_ps(0.5f), c1 = _mm256_set1_ps(0.51f), c2 = _mm256_set1_ps(0.52f);
    __m256 c3 = _mm256_set1_ps(0.53f), c4 = _mm256_set1_ps(0.54f), c5 = _mm256_set1_ps(0.55f);
    __m256 c6 = _mm256_set1_ps(0.56f), c7 = _mm256_set1_ps(0.57f), c8 = _mm256_set1_ps(0.58f);
    __m256 c9 = _mm256_set1_ps(0.59f), c10 = _mm256_set1_ps(0.60f), c11 = _mm256_set1_ps(0.61f);
    for (int64_t i = 0; i < iters; i++) {
        c0 = _mm256_fmadd_ps(c0, a, b);
        c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b);
        c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b);
        c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b);
        c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b);
        c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b);
        c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    return hsum8(s);
}

__attribute__((target("avx512f"))) float bench_hw_fma_avx512(int64_t iters) {
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
    __m512 c0 = _mm512_set1_ps(0.5f), c1 = _mm512_set1_ps(0.51f), c2 = _mm512_set1_ps(0.52f);
    __m512 c3 = _mm512_set1_ps(0.53f), c4 = _mm512_set1_ps(0.54f), c5 = _mm512_set1_ps(0.55f);
    __m512 c6 = _mm512_set1_ps(0.56f), c7 = _mm512_set1_ps(0.57f), c8 = _mm512_set1_ps(0.58f);
    __m512 c9 = _mm512_set1_ps(0.59f), c10 = _mm512_set1_ps(0.60f), c11 = _mm512_set1_ps(0.61f);
    for (int64_t i = 0; i < iters; i++) {
        c0 = _mm512_fmadd_ps(c0, a, b);
        c1 = _mm512_fmadd_ps(c1, a, b);
        c2 = _mm512_fmadd_ps(c2, a, b);
        c3 = _mm512_fmadd_ps(c3, a, b);
        c4 = _mm512_fmadd_ps(c4, a, b);
        c5 = _mm512_fmadd_ps(c5, a, b);
        c6 = _mm512_fmadd_ps(c6, a, b);
        c7 = _mm512_fmadd_ps(c7, a, b);
        c8 = _mm512_fmadd_ps(c8, a, b);
        c9 = _mm512_fmadd_ps(c9, a, b);
        c10 = _mm512_fmadd_ps(c10, a, b);
        c11 = _mm512_fmadd_ps(c11, a, b);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
    return _mm512_reduce_add_ps(s);
}

#else

bool bench_hw_have_avx2(void) {
    return false;
}

bool bench_hw_have_avx512(void) {
    return false;
}

float bench_hw_sum_avx2(const float *p, size_t n) {
    (void)p;
    (void)n;
    return 0.0f;
}

float bench_hw_fma_avx2(int64_t iters) {
    (void)iters;
    return 0.0f;
}

float bench_hw_fma_avx512(int64_t iters) {
    (void)iters;
    return 0.0f;
}

#endif
