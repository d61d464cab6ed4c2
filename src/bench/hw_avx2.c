/* The SIMD loops of `cinfer bench hw` (this file alone is built with -mavx2 -mfma -mf16c; bench_hw.c calls
 * them only after the matching bench_hw_have_*() said yes).  The AVX-512 and VNNI loops are compiled for
 * their one function each through a target attribute, so the file needs no extra flags: llama.cpp's native
 * build uses AVX-512 where the CPU has it, and a roofline must use the machine's real peak.
 *
 * Each loop is 12 independent chains in registers (no memory traffic): enough to cover the latency of its
 * instructions times the ports that run them on current cores, so the loops measure throughput. */
#include "bench/perf.h"

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) &&               \
    defined(__AVX2__) && defined(__FMA__)

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

bool bench_hw_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool bench_hw_have_avx512(void) {
    __builtin_cpu_init(); // __builtin_cpu_supports also checks that the OS saves the ZMM state
    return __builtin_cpu_supports("avx512f");
}

bool bench_hw_have_avx512bw(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

bool bench_hw_have_avx512vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}

// AVX-VNNI's intrinsics came with GCC 11 and clang 12; older compilers leave that loop out.
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define HAVE_AVXVNNI_INTRINSICS 1
#endif

bool bench_hw_have_avxvnni(void) {
#ifdef HAVE_AVXVNNI_INTRINSICS
    // CPUID.(7,1):EAX bit 4, read directly: clang 14's __builtin_cpu_supports does not know "avxvnni".  The
    // OS must save the YMM state, which the AVX2 probe checks.
    unsigned eax = 0, ebx, ecx, edx;
    return bench_hw_have_avx2() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
#else
    return false;
#endif
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

/* The int8 loops.  vpdpbusd chains like the FMAs (one instruction a step, operands in registers).  The AVX2
 * sequence is three dependent instructions (7-11 cycles), so its chains are fewer and each step adds two
 * independent products: 12 sequences stay in flight in the 16 YMM registers without spilling.  The chain
 * value is the u8 operand of the products, so nothing can be hoisted out of the loop; integer lanes wrap,
 * so any value is fine.  The chains are written out (as in the FMA loops) to stay in registers without
 * relying on the unroller. */
#define ON_6_CHAINS(STEP)                                                                                    \
    STEP(c0);                                                                                                \
    STEP(c1);                                                                                                \
    STEP(c2);                                                                                                \
    STEP(c3);                                                                                                \
    STEP(c4);                                                                                                \
    STEP(c5)
#define ON_12_CHAINS(STEP)                                                                                   \
    ON_6_CHAINS(STEP);                                                                                       \
    STEP(c6);                                                                                                \
    STEP(c7);                                                                                                \
    STEP(c8);                                                                                                \
    STEP(c9);                                                                                                \
    STEP(c10);                                                                                               \
    STEP(c11)

static int32_t hsum8_epi32(__m256i s) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

int32_t bench_hw_dot_avx2(int64_t iters) {
    // dot_avx2.c's sequence: vpmaddubsw (u8 x s8 products summed in pairs to int16), vpmaddwd with ones
    // (int16 pairs to int32), vpaddd into the accumulator; 32 multiply-adds each, two a step.
    const __m256i w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_set1_epi32(1), c1 = _mm256_set1_epi32(2), c2 = _mm256_set1_epi32(3);
    __m256i c3 = _mm256_set1_epi32(4), c4 = _mm256_set1_epi32(5), c5 = _mm256_set1_epi32(6);
#define DOT_AVX2_STEP(c)                                                                                     \
    c = _mm256_add_epi32(_mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(c, w0), ones)),          \
                         _mm256_madd_epi16(_mm256_maddubs_epi16(c, w1), ones))
    for (int64_t i = 0; i < iters; i++) {
        ON_6_CHAINS(DOT_AVX2_STEP);
    }
#undef DOT_AVX2_STEP
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(c4, c5));
    return hsum8_epi32(s);
}

/* The lanes' sum with wrapping adds: the chains overflow int32 by design, and _mm512_reduce_add_epi32 adds as
 * signed int (undefined on overflow, which UBSan reports). */
__attribute__((target("avx512f"))) static int32_t hsum16_wrap(__m512i s) {
    uint32_t lane[16], sum = 0;
    _mm512_storeu_si512((void *)lane, s);
    for (int i = 0; i < 16; i++)
        sum += lane[i];
    int32_t out;
    memcpy(&out, &sum, sizeof out);
    return out;
}

__attribute__((target("avx512f,avx512bw"))) int32_t bench_hw_dot_avx512bw(int64_t iters) {
    // The same sequence on 512-bit registers (64 multiply-adds each); 32 registers hold 12 chains.
    const __m512i w0 = _mm512_set1_epi8(3), w1 = _mm512_set1_epi8(-5), ones = _mm512_set1_epi16(1);
    __m512i c0 = _mm512_set1_epi32(1), c1 = _mm512_set1_epi32(2), c2 = _mm512_set1_epi32(3);
    __m512i c3 = _mm512_set1_epi32(4), c4 = _mm512_set1_epi32(5), c5 = _mm512_set1_epi32(6);
    __m512i c6 = _mm512_set1_epi32(7), c7 = _mm512_set1_epi32(8), c8 = _mm512_set1_epi32(9);
    __m512i c9 = _mm512_set1_epi32(10), c10 = _mm512_set1_epi32(11), c11 = _mm512_set1_epi32(12);
#define DOT_AVX512_STEP(c)                                                                                   \
    c = _mm512_add_epi32(_mm512_add_epi32(c, _mm512_madd_epi16(_mm512_maddubs_epi16(c, w0), ones)),          \
                         _mm512_madd_epi16(_mm512_maddubs_epi16(c, w1), ones))
    for (int64_t i = 0; i < iters; i++) {
        ON_12_CHAINS(DOT_AVX512_STEP);
    }
#undef DOT_AVX512_STEP
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                                 _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    return hsum16_wrap(s);
}

__attribute__((target("avx512f,avx512vnni"))) int32_t bench_hw_vnni_avx512(int64_t iters) {
    // vpdpbusd (dot_avx512.c's prefill kernel): 4 u8 x s8 products added into each int32 lane by one
    // instruction, 64 multiply-adds per step.
    const __m512i u = _mm512_set1_epi8(3), w = _mm512_set1_epi8(-2);
    __m512i c0 = _mm512_set1_epi32(1), c1 = _mm512_set1_epi32(2), c2 = _mm512_set1_epi32(3);
    __m512i c3 = _mm512_set1_epi32(4), c4 = _mm512_set1_epi32(5), c5 = _mm512_set1_epi32(6);
    __m512i c6 = _mm512_set1_epi32(7), c7 = _mm512_set1_epi32(8), c8 = _mm512_set1_epi32(9);
    __m512i c9 = _mm512_set1_epi32(10), c10 = _mm512_set1_epi32(11), c11 = _mm512_set1_epi32(12);
#define VNNI_AVX512_STEP(c) c = _mm512_dpbusd_epi32(c, u, w)
    for (int64_t i = 0; i < iters; i++) {
        ON_12_CHAINS(VNNI_AVX512_STEP);
    }
#undef VNNI_AVX512_STEP
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                                 _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    return hsum16_wrap(s);
}

#ifdef HAVE_AVXVNNI_INTRINSICS
__attribute__((target("avx2,avxvnni"))) int32_t bench_hw_vnni_avx(int64_t iters) {
    // AVX-VNNI's VEX-encoded vpdpbusd on 256-bit registers (CPUs without AVX-512): 32 multiply-adds per step.
    // cinfer's kernels do not use it, but the machine's int8 peak is what a roofline needs.
    const __m256i u = _mm256_set1_epi8(3), w = _mm256_set1_epi8(-2);
    __m256i c0 = _mm256_set1_epi32(1), c1 = _mm256_set1_epi32(2), c2 = _mm256_set1_epi32(3);
    __m256i c3 = _mm256_set1_epi32(4), c4 = _mm256_set1_epi32(5), c5 = _mm256_set1_epi32(6);
    __m256i c6 = _mm256_set1_epi32(7), c7 = _mm256_set1_epi32(8), c8 = _mm256_set1_epi32(9);
    __m256i c9 = _mm256_set1_epi32(10), c10 = _mm256_set1_epi32(11), c11 = _mm256_set1_epi32(12);
#define VNNI_AVX_STEP(c) c = _mm256_dpbusd_avx_epi32(c, u, w)
    for (int64_t i = 0; i < iters; i++) {
        ON_12_CHAINS(VNNI_AVX_STEP);
    }
#undef VNNI_AVX_STEP
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
    return hsum8_epi32(s);
}
#else
int32_t bench_hw_vnni_avx(int64_t iters) {
    (void)iters;
    return 0;
}
#endif

#else

bool bench_hw_have_avx2(void) {
    return false;
}

bool bench_hw_have_avx512(void) {
    return false;
}

bool bench_hw_have_avx512bw(void) {
    return false;
}

bool bench_hw_have_avx512vnni(void) {
    return false;
}

bool bench_hw_have_avxvnni(void) {
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

int32_t bench_hw_dot_avx2(int64_t iters) {
    (void)iters;
    return 0;
}

int32_t bench_hw_dot_avx512bw(int64_t iters) {
    (void)iters;
    return 0;
}

int32_t bench_hw_vnni_avx512(int64_t iters) {
    (void)iters;
    return 0;
}

int32_t bench_hw_vnni_avx(int64_t iters) {
    (void)iters;
    return 0;
}

#endif
