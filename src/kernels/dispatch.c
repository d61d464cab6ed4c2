/* Runtime selection of the kernel table: a CPU probe at ci_kernels_init picks AVX-512 (F/BW/VL/DQ + VNNI)
 * when the CPU and OS support it, else AVX2/FMA/F16C, else the portable scalar table.  CINFER_NO_SIMD=1
 * forces scalar, CINFER_NO_AVX512=1 stops at AVX2.  The choice is an atomic pointer, so a kernel reached
 * before ci_kernels_init (from any thread) still runs the probe itself. */
#include "kernels/dot.h"
#include "kernels/kernels.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

/* ---- per-CPU parameters --------------------------------------------------------------------------------- */

static struct ci_kernel_tune tune;
// the row's (or the environment's) f16_widen_min_tokens, which ci_kernels_force_f16_widen(-1) restores
static int tune_widen;
static bool tune_prefetch_l2; // and decode_prefetch_l2, which ci_kernels_force_decode_prefetch(-1) restores
static bool tune_attn_chunks; // and attn_prefetch_chunks, which ci_kernels_force_attn_prefetch(-1) restores
static pthread_once_t tune_once = PTHREAD_ONCE_INIT;

/* CPUID's vendor ("AuthenticAMD", "GenuineIntel") and display family and model; false off x86. */
static bool cpu_identity(char vendor[13], unsigned *family, unsigned *model) {
#ifdef HAVE_X86_PROBE
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
        return false;
    memcpy(vendor, &ebx, 4);
    memcpy(vendor + 4, &edx, 4);
    memcpy(vendor + 8, &ecx, 4);
    vendor[12] = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return false;
    unsigned base = eax >> 8 & 0xf;
    *family = base + (base == 0xf ? (eax >> 20 & 0xff) : 0);
    *model = (eax >> 4 & 0xf) | (base == 0x6 || base == 0xf ? (eax >> 16 & 0xf) << 4 : 0);
    return true;
#else
    (void)vendor, (void)family, (void)model;
    return false;
#endif
}

static void tune_probe(void) {
    char vendor[13] = "";
    unsigned family = 0, model = 0;
    bool known = cpu_identity(vendor, &family, &model);
    bool amd = known && strcmp(vendor, "AuthenticAMD") == 0,
         intel = known && strcmp(vendor, "GenuineIntel") == 0;
    if (known)
        snprintf(tune.cpu, sizeof tune.cpu, "%s family %u model %u",
                 amd     ? "AMD"
                 : intel ? "Intel"
                         : vendor,
                 family, model);
    else
        snprintf(tune.cpu, sizeof tune.cpu, "unknown");
    if (amd && family == 0x19) {
        // Zen 4 (Zen 3 has no AVX-512, the only table that widens): the tiles that convert in registers beat
        // widening at every token count measured, 9 to 512 (bench/KERNELS.md)
        tune.f16_widen_min_tokens = INT32_MAX;
        tune.why = "table row: AMD family 19h, Zen 3 and Zen 4";
    } else {
        // Unmeasured in this form (Intel, Zen 5): widening once pays where a block serves many tokens (Intel,
        // pp512: 262 -> 338 tokens/s); at a few tokens its separate, memory-bound conversion pass stalls the
        // FMAs (Zen 4, 9 tokens: 10.5 against 6.5 ms; speculative decoding 1.36x against 1.63x), so batches
        // up to 32 tokens (verification of drafts, small decode batches) convert in the tiles
        tune.f16_widen_min_tokens = 32;
        tune.why = "table row: default";
    }
    // Intel (family 6 model 167, 2 vCPUs): a T0 prefetch holds one of the core's few L1 fill buffers for a
    // whole DRAM round trip; into L2 the packed decode read 3072 x 8192 Q4_K at 23.0 against 15.5 GB/s, Q4_0
    // 24.4 against 17.0 (bench/gemv_read.c, bench/KERNELS.md); the AVX2 kernels (CINFER_NO_AVX512=1) Q4_K 21.4
    // against 16.1, F16 23.8 against 17.8.  AMD keeps T0, the prefetch it was measured with.
    tune.decode_prefetch_l2 = intel;
    // Intel (the same VM): the attention walk from memory, whole next chunks prefetched, 255-263 -> 212-239 us
    // a layer (bench/attn_decode.c 4096 2 f16 9 3 64 30; bench/RESULTS.md, stop 43).  AMD keeps the two lines
    // a head: on Zen 4 whole-chunk prefetches on top of the in-order stream made the walk slower (qwen3-0.6b's
    // 8 KV heads at 4096 positions: 810-910 against 1170-1270 us a layer; attn.c walk_block).
    tune.attn_prefetch_chunks = intel;
    if (intel)
        tune.why = "table row: Intel";
    const char *pf = getenv("CINFER_DECODE_PREFETCH");
    if (pf && (strcmp(pf, "l1") == 0 || strcmp(pf, "l2") == 0)) {
        tune.decode_prefetch_l2 = strcmp(pf, "l2") == 0;
        tune.why = "CINFER_DECODE_PREFETCH";
    }
    const char *apf = getenv("CINFER_ATTN_PREFETCH");
    if (apf && (strcmp(apf, "chunks") == 0 || strcmp(apf, "lines") == 0)) {
        tune.attn_prefetch_chunks = strcmp(apf, "chunks") == 0;
        tune.why = "CINFER_ATTN_PREFETCH";
    }
    const char *v = getenv("CINFER_F16_WIDEN_MIN");
    char *end = NULL;
    long n = v && v[0] ? strtol(v, &end, 10) : -1;
    if (v && v[0] && end && *end == 0 && n >= 0) {
        tune.f16_widen_min_tokens = n > INT32_MAX ? INT32_MAX : (int)n;
        tune.why = "CINFER_F16_WIDEN_MIN";
    }
    tune_widen = tune.f16_widen_min_tokens;
    tune_prefetch_l2 = tune.decode_prefetch_l2;
    tune_attn_chunks = tune.attn_prefetch_chunks;
}

const struct ci_kernel_tune *ci_kernels_tune(void) {
    pthread_once(&tune_once, tune_probe);
    return &tune;
}

void ci_kernels_force_f16_widen(int min_tokens) {
    pthread_once(&tune_once, tune_probe);
    tune.f16_widen_min_tokens = min_tokens >= 0 ? min_tokens : tune_widen;
}

void ci_kernels_force_decode_prefetch(int l2) {
    pthread_once(&tune_once, tune_probe);
    tune.decode_prefetch_l2 = l2 < 0 ? tune_prefetch_l2 : l2 > 0;
}

void ci_kernels_force_attn_prefetch(int chunks) {
    pthread_once(&tune_once, tune_probe);
    tune.attn_prefetch_chunks = chunks < 0 ? tune_attn_chunks : chunks > 0;
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

ci_rmsnorm_fn ci_rmsnorm_select(void) {
    for (const struct ci_dot_table *t = ci_kernels_table(); t; t = table_below(t))
        if (t->rmsnorm)
            return t->rmsnorm;
    return NULL;
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
