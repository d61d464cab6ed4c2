/* cinfer bench hw: the machine's two roofline numbers, measured rather than looked up.
 *   - sustained memory READ bandwidth: a buffer much larger than the last-level cache, split into chunks that
 *     the kernel thread pool sums with 256-bit loads; best of several passes (the first pass, untimed, warms
 *     the pages and the TLB);
 *   - peak f32 FMA throughput: 12 independent register-resident FMA chains per thread (no memory traffic),
 *     on one thread and on all of the pool's threads; with 512-bit FMAs too where the CPU has AVX-512F.
 * Their ratio is the ridge point: a kernel whose FLOP/byte lies below it is bandwidth-bound (decode), above
 * it compute-bound (prefill).  Without AVX2 portable C loops are used and the report says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/perf.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"

#define GIB        (1024.0 * 1024.0 * 1024.0)
#define CHUNK_F    (1u << 20) // floats per bandwidth task: 4 MiB, so the pool balances the threads
#define FMA_CHAINS 12

static volatile float hw_sink; // every result lands here, so no loop can be optimised away

void bench_hw_opts_default(struct bench_hw_opts *o) {
    o->buf_bytes = 0;
    o->passes = 5;
    o->fma_s = 0.2;
    o->portable = false;
}

/* Portable loops: the same shapes as the AVX2 ones, left to the compiler (SSE2 at most on x86-64). */
static float sum_portable(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] += p[i + (size_t)j];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static float fma_portable(int64_t iters) {
    float c[FMA_CHAINS];
    for (int j = 0; j < FMA_CHAINS; j++)
        c[j] = 0.5f + 0.01f * (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < FMA_CHAINS; j++)
            c[j] = c[j] * 0.999999f + 1e-6f;
    float s = 0;
    for (int j = 0; j < FMA_CHAINS; j++)
        s += c[j];
    return s;
}

static size_t llc_bytes(void) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 > 0)
        return (size_t)l3;
    if (l2 > 0)
        return (size_t)l2;
    return (size_t)64 << 20; // unknown: assume a large one
}

struct bw_ctx {
    const float *buf;
    size_t n; // floats
    bool avx2;
    float *sums; // [n_tasks]
};

static void bw_task(void *vctx, int task, int thread) {
    (void)thread;
    struct bw_ctx *c = vctx;
    size_t from = (size_t)task * CHUNK_F, len = c->n - from < CHUNK_F ? c->n - from : CHUNK_F;
    c->sums[task] = c->avx2 ? bench_hw_sum_avx2(c->buf + from, len) : sum_portable(c->buf + from, len);
}

enum fma_kind { FMA_PORTABLE, FMA_AVX2, FMA_AVX512 };

struct fma_ctx {
    enum fma_kind kind;
    int64_t iters;
    float *sums; // [n_tasks]
};

static float fma_run(enum fma_kind kind, int64_t iters) {
    switch (kind) {
    case FMA_AVX2:
        return bench_hw_fma_avx2(iters);
    case FMA_AVX512:
        return bench_hw_fma_avx512(iters);
    case FMA_PORTABLE:
        break;
    }
    return fma_portable(iters);
}

static double fma_flops_per_iter(enum fma_kind kind) {
    return FMA_CHAINS * 2.0 * (kind == FMA_AVX512 ? 16 : kind == FMA_AVX2 ? 8 : 1);
}

static void fma_task(void *vctx, int task, int thread) {
    (void)thread;
    struct fma_ctx *c = vctx;
    c->sums[task] = fma_run(c->kind, c->iters);
}

/* Best GFLOP/s of `passes` runs on one thread (tp NULL) or on every thread of tp (one equal task each). */
static double fma_measure(struct ci_threadpool *tp, enum fma_kind kind, const struct bench_hw_opts *o,
                          float *sums) {
    // Calibrate on one thread so a pass lasts about fma_s.
    int64_t iters = 1 << 16;
    for (;;) {
        int64_t t0 = ci_now_ns();
        hw_sink = fma_run(kind, iters);
        double s = (double)(ci_now_ns() - t0) * 1e-9;
        if (s > 0.02 || iters > ((int64_t)1 << 40)) {
            double want = (double)iters * o->fma_s / (s > 0 ? s : 1e-9);
            iters = want < 1e3 ? 1000 : (int64_t)want;
            break;
        }
        iters *= 4;
    }
    int n = tp ? ci_threadpool_n_threads(tp) : 1;
    struct fma_ctx ctx = {kind, iters, sums};
    double best = 0;
    for (int p = 0; p < o->passes; p++) {
        int64_t t0 = ci_now_ns();
        if (tp)
            ci_threadpool_run(tp, fma_task, &ctx, n);
        else
            sums[0] = fma_run(kind, iters);
        double s = (double)(ci_now_ns() - t0) * 1e-9;
        for (int i = 0; i < n; i++)
            hw_sink = hw_sink + sums[i];
        double g = (double)iters * n * fma_flops_per_iter(kind) / s * 1e-9;
        if (g > best)
            best = g;
    }
    return best;
}

static double bw_measure(struct ci_threadpool *tp, struct bw_ctx *c, int passes) {
    int n_tasks = (int)((c->n + CHUNK_F - 1) / CHUNK_F);
    double best = 0;
    for (int p = 0; p <= passes; p++) { // pass 0 warms up, untimed
        int64_t t0 = ci_now_ns();
        if (tp)
            ci_threadpool_run(tp, bw_task, c, n_tasks);
        else
            for (int t = 0; t < n_tasks; t++)
                bw_task(c, t, 0);
        double s = (double)(ci_now_ns() - t0) * 1e-9;
        for (int t = 0; t < n_tasks; t++)
            hw_sink = hw_sink + c->sums[t];
        double g = (double)c->n * sizeof(float) / s * 1e-9;
        if (p > 0 && g > best)
            best = g;
    }
    return best;
}

enum ci_status bench_hw_measure(struct ci_threadpool *tp, const struct bench_hw_opts *o, struct bench_hw *out,
                                struct ci_err *err) {
    memset(out, 0, sizeof *out);
    bool avx2 = !o->portable && bench_hw_have_avx2();
    bool avx512 = !o->portable && bench_hw_have_avx512();
    out->isa = avx2 ? "avx2+fma" : "portable C (no AVX2)";
    out->kernels_isa = ci_kernels_isa();
    out->n_threads = ci_threadpool_n_threads(tp);

    size_t bytes = o->buf_bytes;
    if (bytes == 0) {
        size_t four_llc;
        bytes = (size_t)GIB;
        if (ci_mul_size(llc_bytes(), 4, &four_llc) && four_llc > bytes)
            bytes = four_llc;
    }
    bytes -= bytes % ((size_t)CHUNK_F * sizeof(float));
    if (bytes == 0)
        bytes = (size_t)CHUNK_F * sizeof(float);
    out->buf_bytes = bytes;
    int n_tasks = (int)(bytes / sizeof(float) / CHUNK_F);
    int n_sums = n_tasks > out->n_threads ? n_tasks : out->n_threads;
    float *buf = ci_malloc_aligned(bytes), *sums = ci_calloc((size_t)n_sums, sizeof *sums);
    if (!buf || !sums) {
        ci_free_aligned(buf);
        ci_free(sums);
        return ci_err_set(err, CI_ERR_NOMEM, "bench hw: cannot allocate a %.2f GiB buffer",
                          (double)bytes / GIB);
    }
#ifdef MADV_HUGEPAGE
    { // huge pages where the kernel offers them: the TLB should not be what is measured
        long pg = sysconf(_SC_PAGESIZE);
        uintptr_t lo = (uintptr_t)buf, hi = lo + bytes;
        if (pg > 0) {
            lo = (lo + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
            if (hi > lo)
                (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
        }
    }
#endif
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        buf[i] = 1.0f;
    struct bw_ctx bc = {buf, n, avx2, sums};
    out->bw1_gbs = bw_measure(NULL, &bc, o->passes);
    out->bw_gbs = bw_measure(tp, &bc, o->passes);
    ci_free_aligned(buf);

    enum fma_kind k = avx2 ? FMA_AVX2 : FMA_PORTABLE;
    out->fma1_gflops = fma_measure(NULL, k, o, sums);
    out->fma_gflops = fma_measure(tp, k, o, sums);
    if (avx512) {
        out->fma512_1_gflops = fma_measure(NULL, FMA_AVX512, o, sums);
        out->fma512_gflops = fma_measure(tp, FMA_AVX512, o, sums);
    }
    ci_free(sums);
    out->peak_gflops = out->fma_gflops > out->fma512_gflops ? out->fma_gflops : out->fma512_gflops;
    out->ridge = out->bw_gbs > 0 ? out->peak_gflops / out->bw_gbs : 0;
    return CI_OK;
}

void bench_hw_print(const struct bench_hw *hw, bool json) {
    if (json) {
        printf(
            "{\"type\": \"hw\", \"isa\": \"%s\", \"kernels_isa\": \"%s\", \"n_threads\": %d, \"buf_bytes\": "
            "%zu, "
            "\"bw1_gbs\": %.3f, \"bw_gbs\": %.3f, \"fma1_gflops\": %.3f, \"fma_gflops\": %.3f, "
            "\"fma512_1_gflops\": %.3f, \"fma512_gflops\": %.3f, \"peak_gflops\": %.3f, \"ridge\": %.3f}\n",
            hw->isa, hw->kernels_isa, hw->n_threads, hw->buf_bytes, hw->bw1_gbs, hw->bw_gbs, hw->fma1_gflops,
            hw->fma_gflops, hw->fma512_1_gflops, hw->fma512_gflops, hw->peak_gflops, hw->ridge);
        return;
    }
    int n = hw->n_threads;
    printf("machine (loops: %s; cinfer kernels: %s)\n", hw->isa, hw->kernels_isa);
    printf("  memory read bandwidth   %8.2f GB/s (1 thread)  %8.2f GB/s (%d threads)   %.2f GiB buffer\n",
           hw->bw1_gbs, hw->bw_gbs, n, (double)hw->buf_bytes / GIB);
    printf("  f32 FMA peak, %-9s %8.1f GFLOP/s (1 thread) %8.1f GFLOP/s (%d threads)\n",
           strcmp(hw->isa, "avx2+fma") ? "portable" : "256-bit", hw->fma1_gflops, hw->fma_gflops, n);
    if (hw->fma512_gflops > 0)
        printf("  f32 FMA peak, 512-bit   %8.1f GFLOP/s (1 thread) %8.1f GFLOP/s (%d threads)\n",
               hw->fma512_1_gflops, hw->fma512_gflops, n);
    printf("  roofline (%d threads)   peak %.1f GFLOP/s, bandwidth %.2f GB/s, ridge point %.1f FLOP/byte\n",
           n, hw->peak_gflops, hw->bw_gbs, hw->ridge);
    printf(
        "  (a GEMV does 2 FLOPs per weight: 0.5 FLOP/byte for f32 weights, 1 for f16, 1.9 for q8_0, 3.6 for "
        "q4_0: decode sits below the ridge, bandwidth-bound)\n");
}
