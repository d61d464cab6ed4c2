/* Runtime selection of the kernel table: a CPU probe at ci_kernels_init picks AVX-512 (F/BW/VL/DQ + VNNI)
 * when the CPU and OS support it, else AVX2/FMA/F16C, else the portable scalar table.  CINFER_NO_SIMD=1
 * forces scalar, CINFER_NO_AVX512=1 stops at AVX2.  The choice is an atomic pointer, so a kernel reached
 * before ci_kernels_init (from any thread) still runs the probe itself. */
#include "kernels/dot.h"
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static _Atomic(const struct ci_dot_table *) probed; // what the CPU probe and the environment chose
static _Atomic(const struct ci_dot_table *) active; // probed, or what a test forces

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#define HAVE_X86_PROBE 1
#endif

static bool cpu_has_avx2_fma_f16c(void) {
#ifdef HAVE_X86_PROBE
    // __builtin_cpu_supports also checks that the OS saves YMM state; clang 14 does not know "f16c", so
    // that one bit (CPUID.1:ECX.F16C) is read directly.
    __builtin_cpu_init();
    unsigned eax, ebx, ecx = 0, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return false; // unknown compiler or architecture: the portable path is always correct
#endif
}

static bool cpu_has_avx512_vnni(void) {
#ifdef HAVE_X86_PROBE
    // These also check that the OS saves the ZMM and opmask state.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}

static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

int ci_kernels_tables(const struct ci_dot_table **out) {
    int n = 0;
    if (cpu_has_avx2_fma_f16c() && ci_dot_avx2_table()) {
        if (cpu_has_avx512_vnni() && ci_dot_avx512_table())
            out[n++] = ci_dot_avx512_table();
        out[n++] = ci_dot_avx2_table();
    }
    out[n++] = ci_dot_ref_table();
    return n;
}

static const struct ci_dot_table *probe(void) {
    const struct ci_dot_table *t[3];
    int n = ci_kernels_tables(t);
    if (env_on("CINFER_NO_SIMD"))
        return t[n - 1];
    if (env_on("CINFER_NO_AVX512") && t[0] == ci_dot_avx512_table())
        return t[1];
    return t[0];
}

void ci_kernels_init(void) {
    const struct ci_dot_table *t = probe();
    atomic_store_explicit(&probed, t, memory_order_release);
    atomic_store_explicit(&active, t, memory_order_release);
}

const struct ci_dot_table *ci_kernels_table(void) {
    const struct ci_dot_table *t = atomic_load_explicit(&active, memory_order_acquire);
    if (!t) { // racing first calls all compute and store the same answer
        ci_kernels_init();
        t = atomic_load_explicit(&active, memory_order_acquire);
    }
    return t;
}

const char *ci_kernels_isa(void) {
    return ci_kernels_table()->isa;
}

void ci_kernels_force_table(const struct ci_dot_table *t) {
    if (!atomic_load_explicit(&probed, memory_order_acquire))
        ci_kernels_init();
    atomic_store_explicit(&active, t ? t : atomic_load(&probed), memory_order_release);
}

void ci_kernels_force_scalar(bool on) {
    ci_kernels_force_table(on ? ci_dot_ref_table() : NULL);
}

/* The table below t in the fallback chain AVX-512 -> AVX2 -> scalar (NULL below scalar). */
static const struct ci_dot_table *table_below(const struct ci_dot_table *t) {
    if (t == ci_dot_ref_table())
        return NULL;
    if (t == ci_dot_avx512_table())
        return ci_dot_avx2_table();
    return ci_dot_ref_table();
}

ci_dot_fn ci_dot_select(uint32_t type) {
    CI_ASSERT(type < CI_TYPE_COUNT && ci_type_supported(type) && "ci_dot: type has no kernel");
    for (const struct ci_dot_table *t = ci_kernels_table(); t; t = table_below(t))
        if (t->dot[type])
            return t->dot[type];
    CI_UNREACHABLE();
}

ci_mm_fn ci_mm_select(const struct ci_dot_table *t, uint32_t type) {
    CI_ASSERT(type < CI_TYPE_COUNT && ci_type_supported(type) && "ci_matmul: type has no kernel");
    for (; t; t = table_below(t))
        if (t->mm[type])
            return t->mm[type];
    CI_UNREACHABLE();
}

ci_quant_act_k_fn ci_quant_act_k_select(const struct ci_dot_table *t) {
    for (; t; t = table_below(t))
        if (t->quant_act_k)
            return t->quant_act_k;
    CI_UNREACHABLE();
}

void ci_f32_to_f16_row(const float *x, uint16_t *h, int64_t n) {
    for (const struct ci_dot_table *t = ci_kernels_table(); t; t = table_below(t))
        if (t->f32_to_f16) {
            t->f32_to_f16(x, h, n);
            return;
        }
    for (int64_t i = 0; i < n; i++)
        h[i] = ci_fp32_to_fp16(x[i]);
}

float ci_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    CI_DASSERT(n >= 0 && n % ci_type_traits(type)->block_size == 0);
    return ci_dot_select(type)(row, x, n);
}
