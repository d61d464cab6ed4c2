/* Runtime selection of the dot-product table: a CPU probe at ci_kernels_init picks AVX2/FMA/F16C when the
 * CPU (and OS) support it, else the portable scalar table; CINFER_NO_SIMD=1 forces scalar.  The choice is an
 * atomic pointer, so a kernel reached before ci_kernels_init (from any thread) still runs the probe itself.
 */
#include "kernels/dot.h"
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static _Atomic(const struct ci_dot_table *) probed; // what the CPU probe and the environment chose
static _Atomic(const struct ci_dot_table *) active; // probed, or scalar while a test forces it

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

static const struct ci_dot_table *probe(void) {
    const char *env = getenv("CINFER_NO_SIMD");
    bool no_simd = env && env[0] && strcmp(env, "0") != 0;
    if (!no_simd && cpu_has_avx2_fma_f16c() && ci_dot_avx2_table())
        return ci_dot_avx2_table();
    return ci_dot_ref_table();
}

void ci_kernels_init(void) {
    const struct ci_dot_table *t = probe();
    atomic_store_explicit(&probed, t, memory_order_release);
    atomic_store_explicit(&active, t, memory_order_release);
}

static const struct ci_dot_table *current(void) {
    const struct ci_dot_table *t = atomic_load_explicit(&active, memory_order_acquire);
    if (!t) { // racing first calls all compute and store the same answer
        ci_kernels_init();
        t = atomic_load_explicit(&active, memory_order_acquire);
    }
    return t;
}

const char *ci_kernels_isa(void) {
    return current()->isa;
}

void ci_kernels_force_scalar(bool on) {
    if (!atomic_load_explicit(&probed, memory_order_acquire))
        ci_kernels_init();
    const struct ci_dot_table *t = on ? ci_dot_ref_table() : atomic_load(&probed);
    atomic_store_explicit(&active, t, memory_order_release);
}

ci_dot_fn ci_dot_select(uint32_t type) {
    const struct ci_dot_table *t = current();
    switch (type) {
    case CI_TYPE_F32:
        return t->f32;
    case CI_TYPE_F16:
        return t->f16;
    case CI_TYPE_BF16:
        return t->bf16;
    case CI_TYPE_Q8_0:
        return t->q8_0;
    case CI_TYPE_Q4_0:
        return t->q4_0;
    default:
        CI_ASSERT(!"ci_dot: type has no kernel (the loader must reject it)");
        return NULL;
    }
}

float ci_dot(uint32_t type, const void *row, const float *x, int64_t n) {
    CI_DASSERT(n >= 0 && n % ci_type_traits(type)->block_size == 0);
    return ci_dot_select(type)(row, x, n);
}
