/* cinfer bench hw: the machine's roofline numbers, measured rather than looked up.
 *   - sustained memory READ bandwidth: a buffer much larger than the last-level cache, read in 4 MiB chunks
 *     with 256-bit loads by the kernel thread pool (the first pass, untimed, warms the pages and the TLB);
 *   - peak f32 FMA throughput: 12 independent register-resident FMA chains per thread (no memory traffic);
 *     with 512-bit FMAs too where the CPU has AVX-512F;
 *   - peak int8 dot-product throughput, the same way: the AVX2 vpmaddubsw + vpmaddwd + vpaddd sequence of
 *     the Q8_0/Q4_0 kernels, on 512-bit registers too where the CPU has AVX-512BW, and vpdpbusd where it has
 *     AVX-VNNI (256-bit) or AVX512-VNNI (512-bit).  Quantized matmuls are bound by this peak, not the FMA
 *     one.
 * Each on one thread and on all of the pool's threads, every thread pinned to its own CPU, from many short
 * timed pieces of work (a chunk, a ~0.5 ms loop pass): see best_rate().  Their ratios to the bandwidth are
 * the ridge points: a kernel whose op/byte lies below its ridge is bandwidth-bound (decode), above it
 * compute-bound (prefill).  Without AVX2 portable C loops are used and the report says so. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/perf.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define CHUNK_F                                                                                              \
    (1u << 20)    // floats per bandwidth chunk: 4 MiB, long enough to time, short enough to be undisturbed
#define CHAINS 12 // independent chains of the portable peak loops
#define PASS_S 0.0005 // seconds of one peak pass: short, so that some passes run undisturbed

static volatile float hw_sink; // every result lands here, so no loop can be optimised away

void bench_hw_opts_default(struct bench_hw_opts *o) {
    o->buf_bytes = 0;
    o->passes = 5;
    o->peak_s = 0.5;
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
    float c[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        c[j] = 0.5f + 0.01f * (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < CHAINS; j++)
            c[j] = c[j] * 0.999999f + 1e-6f;
    float s = 0;
    for (int j = 0; j < CHAINS; j++)
        s += c[j];
    return s;
}

/* One u8 x s8 multiply-add into a 32-bit sum per chain step, the scalar kernels' operation (unsigned sums:
 * they wrap instead of overflowing). */
static int32_t dot_portable(int64_t iters) {
    uint32_t c[CHAINS];
    for (int j = 0; j < CHAINS; j++)
        c[j] = (uint32_t)j + 1;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < CHAINS; j++)
            c[j] += (uint32_t)((int32_t)(uint8_t)c[j] * (int32_t)(int8_t)-3);
    uint32_t s = 0;
    for (int j = 0; j < CHAINS; j++)
        s += c[j];
    return (int32_t)(s & 0x7fffffff);
}

static size_t llc_bytes(void) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 > 0)
        return (size_t)l3;
    if (l2 > 0)
        return (size_t)l2;
    return (size_t)64 << 20; // unknown: assume a large one
}

/* The timed pieces of work one thread did, in time order: piece k ran from t0[k] to t1[k] (ns). */
struct piece_log {
    int64_t *t0, *t1; // [cap]
    int n, cap;
    float sum; // of the pieces' results (hw_sink is written by one thread only)
};

static void log_piece(struct piece_log *lg, int64_t t0, int64_t t1) {
    if (lg->n < lg->cap) {
        lg->t0[lg->n] = t0;
        lg->t1[lg->n] = t1;
        lg->n++;
    }
}

/* Pins the calling thread to the index-th CPU it may run on, saving its mask in old; false where it cannot
 * (not Linux, or fewer CPUs than that).  Left alone, a scheduler may stack the pool's threads on one core
 * while other processes hold the rest (seen on a loaded 2-core VM): the roof of n cores needs n cores. */
#if defined(__linux__) && defined(CPU_SET)
typedef cpu_set_t cpu_mask;
static bool pin_to_cpu(int index, cpu_mask *old) {
    if (pthread_getaffinity_np(pthread_self(), sizeof *old, old) != 0)
        return false;
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, old) || seen++ < index)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
    }
    return false;
}
static void unpin(const cpu_mask *old) {
    (void)pthread_setaffinity_np(pthread_self(), sizeof *old, old);
}
#else
typedef int cpu_mask;
static bool pin_to_cpu(int index, cpu_mask *old) {
    (void)index;
    (void)old;
    return false;
}
static void unpin(const cpu_mask *old) {
    (void)old;
}
#endif

/* The work lg did between times a and b: each piece's work spread evenly over its duration. */
static double work_within(const struct piece_log *lg, int64_t a, int64_t b, double work) {
    int lo = 0, hi = lg->n; // first piece that ends after a
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (lg->t1[mid] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    double done = 0;
    for (int k = lo; k < lg->n && lg->t0[k] < b; k++) {
        int64_t from = lg->t0[k] > a ? lg->t0[k] : a, to = lg->t1[k] < b ? lg->t1[k] : b;
        if (to > from && lg->t1[k] > lg->t0[k])
            done += work * (double)(to - from) / (double)(lg->t1[k] - lg->t0[k]);
    }
    return done;
}

/* The best rate (work per second) of n threads together, each of whose pieces did `work`: over the window
 * of each piece of any thread, the work all threads did inside it, so that the threads are counted only as
 * fast as they were together (sharing memory, clocks and, with SMT, execution ports).  Every thread's pieces
 * are windows: on a loaded machine one thread may take every chunk of a pass.  A roof is a property
 * of the machine: on a shared one, long timed runs also measure the other processes (on a loaded 2-core VM,
 * 0.2 s FMA passes gave a third to two thirds of the f32 peak, and whole passes over the bandwidth buffer
 * half the bandwidth of its chunks), while among many short pieces some run undisturbed. */
static double best_rate(const struct piece_log *logs, int n, double work) {
    double best = 0;
    for (int w = 0; w < n; w++)
        for (int k = 0; k < logs[w].n; k++) {
            int64_t a = logs[w].t0[k], b = logs[w].t1[k];
            if (b <= a)
                continue;
            double done = 0;
            for (int i = 0; i < n; i++)
                done += work_within(&logs[i], a, b, work);
            double rate = done / ((double)(b - a) * 1e-9);
            best = rate > best ? rate : best;
        }
    return best;
}

static void logs_reset(struct piece_log *logs, int n) {
    for (int i = 0; i < n; i++) {
        logs[i].n = 0;
        logs[i].sum = 0;
    }
}

/* ---- bandwidth ---- */

struct bw_ctx {
    const float *buf;
    size_t n_chunks;
    bool avx2, pin, log;
    atomic_size_t next;     // the next chunk to read
    struct piece_log *logs; // [n_tasks]
};

/* One thread's share of a pass: chunks taken in turn from the shared counter until none is left. */
static void bw_task(void *vctx, int task, int thread) {
    (void)thread;
    struct bw_ctx *c = vctx;
    struct piece_log *lg = &c->logs[task];
    cpu_mask old;
    bool pinned = c->pin && pin_to_cpu(task, &old);
    for (;;) {
        size_t k = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (k >= c->n_chunks)
            break;
        const float *p = c->buf + k * CHUNK_F;
        int64_t t0 = ci_now_ns();
        lg->sum += c->avx2 ? bench_hw_sum_avx2(p, CHUNK_F) : sum_portable(p, CHUNK_F);
        int64_t t1 = ci_now_ns();
        if (c->log)
            log_piece(lg, t0, t1);
    }
    if (pinned)
        unpin(&old);
}

/* GB/s of one thread (tp NULL) or of all of tp's threads, each on its own CPU, from the chunks of `passes`
 * timed passes over the buffer after an untimed one. */
static double bw_measure(struct ci_threadpool *tp, struct bw_ctx *c, int passes) {
    int n = tp ? ci_threadpool_n_threads(tp) : 1;
    logs_reset(c->logs, n);
    c->pin = n > 1;
    for (int p = 0; p <= passes; p++) {
        c->log = p > 0;
        atomic_store(&c->next, 0);
        if (tp)
            ci_threadpool_run(tp, bw_task, c, n);
        else
            bw_task(c, 0, 0);
    }
    for (int i = 0; i < n; i++)
        hw_sink = hw_sink + c->logs[i].sum;
    return best_rate(c->logs, n, (double)CHUNK_F * sizeof(float)) * 1e-9;
}

/* ---- peaks ---- */

/* The peak loops; ops per iteration count 2 per FMA lane and 2 per int8 multiply-add. */
enum peak_loop {
    FMA_PORTABLE,
    FMA_AVX2,
    FMA_AVX512,
    DOT_PORTABLE,
    DOT_AVX2,
    DOT_AVX512BW,
    VNNI_AVX,
    VNNI_AVX512,
};

struct peak_ctx {
    enum peak_loop loop;
    int64_t iters; // per pass
    double seconds;
    bool pin;
    struct piece_log *logs; // [n_tasks]
};

static float peak_run(enum peak_loop loop, int64_t iters) {
    switch (loop) {
    case FMA_PORTABLE:
        return fma_portable(iters);
    case FMA_AVX2:
        return bench_hw_fma_avx2(iters);
    case FMA_AVX512:
        return bench_hw_fma_avx512(iters);
    case DOT_PORTABLE:
        return (float)dot_portable(iters);
    case DOT_AVX2:
        return (float)bench_hw_dot_avx2(iters);
    case DOT_AVX512BW:
        return (float)bench_hw_dot_avx512bw(iters);
    case VNNI_AVX:
        return (float)bench_hw_vnni_avx(iters);
    case VNNI_AVX512:
        return (float)bench_hw_vnni_avx512(iters);
    }
    return 0;
}

static double ops_per_iter(enum peak_loop loop) {
    int madds = CHAINS; // the portable loops: one multiply-add per chain
    switch (loop) {
    case FMA_PORTABLE:
    case DOT_PORTABLE:
        break;
    case FMA_AVX2:
        madds = BENCH_HW_FMA_AVX2_MADDS;
        break;
    case FMA_AVX512:
        madds = BENCH_HW_FMA_AVX512_MADDS;
        break;
    case DOT_AVX2:
        madds = BENCH_HW_DOT_AVX2_MADDS;
        break;
    case DOT_AVX512BW:
        madds = BENCH_HW_DOT_AVX512_MADDS;
        break;
    case VNNI_AVX:
        madds = BENCH_HW_VNNI_AVX_MADDS;
        break;
    case VNNI_AVX512:
        madds = BENCH_HW_VNNI_AVX512_MADDS;
        break;
    }
    return 2.0 * madds;
}

/* One thread's passes for c->seconds (or until its log is full). */
static void peak_task(void *vctx, int task, int thread) {
    (void)thread;
    struct peak_ctx *c = vctx;
    struct piece_log *lg = &c->logs[task];
    cpu_mask old;
    bool pinned = c->pin && pin_to_cpu(task, &old);
    int64_t end = ci_now_ns() + (int64_t)(c->seconds * 1e9);
    while (lg->n < lg->cap) {
        int64_t t0 = ci_now_ns();
        lg->sum += peak_run(c->loop, c->iters);
        int64_t t1 = ci_now_ns();
        log_piece(lg, t0, t1);
        if (t1 >= end)
            break;
    }
    if (pinned)
        unpin(&old);
}

/* G(FL)OP/s of one thread (tp NULL) or of all of tp's threads, each thread running passes of about PASS_S
 * for about peak_s on its own CPU. */
static double peak_measure(struct ci_threadpool *tp, enum peak_loop loop, const struct bench_hw_opts *o,
                           struct piece_log *logs) {
    // Calibrate on one thread (best of 3 runs) so that a pass lasts about PASS_S.
    int64_t iters = 1 << 10;
    for (;;) {
        double best_s = 1e30;
        for (int k = 0; k < 3; k++) {
            int64_t t0 = ci_now_ns();
            hw_sink = peak_run(loop, iters);
            double s = (double)(ci_now_ns() - t0) * 1e-9;
            best_s = s < best_s ? s : best_s;
        }
        if (best_s > PASS_S / 8 || iters > ((int64_t)1 << 40)) {
            double want = (double)iters * PASS_S / (best_s > 0 ? best_s : 1e-9);
            iters = want < 1e3 ? 1000 : (int64_t)want;
            break;
        }
        iters *= 4;
    }
    int n = tp ? ci_threadpool_n_threads(tp) : 1;
    logs_reset(logs, n);
    struct peak_ctx ctx = {loop, iters, o->peak_s, n > 1, logs};
    if (tp)
        ci_threadpool_run(tp, peak_task, &ctx, n);
    else
        peak_task(&ctx, 0, 0);
    for (int i = 0; i < n; i++)
        hw_sink = hw_sink + logs[i].sum;
    return best_rate(logs, n, (double)iters * ops_per_iter(loop)) * 1e-9;
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
    size_t n_chunks = bytes / sizeof(float) / CHUNK_F;
    // Room for every chunk of every timed pass in one thread's log, or for peak passes a quarter of PASS_S
    // long (the calibration can be disturbed too).
    double cap = fmax((double)n_chunks * o->passes, 4 * o->peak_s / PASS_S + 16);
    int log_cap = cap > 1e7 ? (int)1e7 : (int)cap;
    float *buf = ci_malloc_aligned(bytes);
    struct piece_log *logs = ci_calloc((size_t)out->n_threads, sizeof *logs);
    int64_t *log_times = ci_calloc((size_t)out->n_threads * 2 * (size_t)log_cap, sizeof *log_times);
    if (!buf || !logs || !log_times) {
        ci_free_aligned(buf);
        ci_free(logs);
        ci_free(log_times);
        return ci_err_set(err, CI_ERR_NOMEM, "bench hw: cannot allocate a %.2f GiB buffer",
                          (double)bytes / GIB);
    }
    (void)ci_mem_advise_huge(buf, bytes); // the TLB should not be what is measured
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        buf[i] = 1.0f;
    for (int i = 0; i < out->n_threads; i++) {
        logs[i].t0 = log_times + (size_t)i * 2 * (size_t)log_cap;
        logs[i].t1 = logs[i].t0 + log_cap;
        logs[i].cap = log_cap;
    }

    struct bw_ctx bc = {.buf = buf, .n_chunks = n_chunks, .avx2 = avx2, .logs = logs};
    out->bw1_gbs = bw_measure(NULL, &bc, o->passes);
    out->bw_gbs = bw_measure(tp, &bc, o->passes);
    ci_free_aligned(buf);

    enum peak_loop fma = avx2 ? FMA_AVX2 : FMA_PORTABLE, dot = avx2 ? DOT_AVX2 : DOT_PORTABLE;
    out->fma1_gflops = peak_measure(NULL, fma, o, logs);
    out->fma_gflops = peak_measure(tp, fma, o, logs);
    if (avx512) {
        out->fma512_1_gflops = peak_measure(NULL, FMA_AVX512, o, logs);
        out->fma512_gflops = peak_measure(tp, FMA_AVX512, o, logs);
    }
    out->dot1_gops = peak_measure(NULL, dot, o, logs);
    out->dot_gops = peak_measure(tp, dot, o, logs);
    if (!o->portable && bench_hw_have_avx512bw()) {
        out->dot512_1_gops = peak_measure(NULL, DOT_AVX512BW, o, logs);
        out->dot512_gops = peak_measure(tp, DOT_AVX512BW, o, logs);
    }
    if (!o->portable && bench_hw_have_avxvnni()) {
        out->vnni1_gops = peak_measure(NULL, VNNI_AVX, o, logs);
        out->vnni_gops = peak_measure(tp, VNNI_AVX, o, logs);
    }
    if (!o->portable && bench_hw_have_avx512vnni()) {
        out->vnni512_1_gops = peak_measure(NULL, VNNI_AVX512, o, logs);
        out->vnni512_gops = peak_measure(tp, VNNI_AVX512, o, logs);
    }
    ci_free(logs);
    ci_free(log_times);
    out->peak_gflops = fmax(out->fma_gflops, out->fma512_gflops);
    out->ridge = out->bw_gbs > 0 ? out->peak_gflops / out->bw_gbs : 0;
    out->int8_peak_gops =
        fmax(fmax(out->dot_gops, out->dot512_gops), fmax(out->vnni_gops, out->vnni512_gops));
    out->int8_ridge = out->bw_gbs > 0 ? out->int8_peak_gops / out->bw_gbs : 0;
    return CI_OK;
}

enum bench_roof bench_roof_of_type(uint32_t type) {
    // matmul.c quantizes the activations of every quantized type to int8 blocks.
    return ci_type_quantized(type) ? BENCH_ROOF_INT8 : BENCH_ROOF_F32;
}

const char *bench_roof_name(enum bench_roof roof) {
    return roof == BENCH_ROOF_INT8 ? "int8" : "f32";
}

static void peak_line(const char *what, const char *unit, double one, double all, int n, const char *how) {
    printf("  %-24s %8.1f %s (1 thread) %8.1f %s (%d threads)   %s\n", what, one, unit, all, unit, n, how);
}

void bench_hw_print(const struct bench_hw *hw, bool json) {
    const struct ci_kernel_tune *tune = ci_kernels_tune();
    if (json) {
        printf("{\"type\": \"hw\", \"isa\": \"%s\", \"kernels_isa\": \"%s\", \"n_threads\": %d, "
               "\"buf_bytes\": %zu, \"bw1_gbs\": %.3f, \"bw_gbs\": %.3f, \"fma1_gflops\": %.3f, "
               "\"fma_gflops\": %.3f, \"fma512_1_gflops\": %.3f, \"fma512_gflops\": %.3f, "
               "\"peak_gflops\": %.3f, \"ridge\": %.3f, \"dot1_gops\": %.3f, \"dot_gops\": %.3f, "
               "\"dot512_1_gops\": %.3f, \"dot512_gops\": %.3f, \"vnni1_gops\": %.3f, \"vnni_gops\": %.3f, "
               "\"vnni512_1_gops\": %.3f, \"vnni512_gops\": %.3f, \"int8_peak_gops\": %.3f, "
               "\"int8_ridge\": %.3f, \"cpu\": \"%s\", \"f16_widen_min_tokens\": %d, "
               "\"decode_prefetch\": \"%s\", \"attn_prefetch\": \"%s\"}\n",
               hw->isa, hw->kernels_isa, hw->n_threads, hw->buf_bytes, hw->bw1_gbs, hw->bw_gbs,
               hw->fma1_gflops, hw->fma_gflops, hw->fma512_1_gflops, hw->fma512_gflops, hw->peak_gflops,
               hw->ridge, hw->dot1_gops, hw->dot_gops, hw->dot512_1_gops, hw->dot512_gops, hw->vnni1_gops,
               hw->vnni_gops, hw->vnni512_1_gops, hw->vnni512_gops, hw->int8_peak_gops, hw->int8_ridge,
               tune->cpu, tune->f16_widen_min_tokens, tune->decode_prefetch_l2 ? "l2" : "l1",
               tune->attn_prefetch_chunks ? "chunks" : "lines");
        return;
    }
    int n = hw->n_threads;
    bool simd = !strcmp(hw->isa, "avx2+fma");
    printf("machine (loops: %s; cinfer kernels: %s)\n", hw->isa, hw->kernels_isa);
    char widen[32] = "never";
    if (tune->f16_widen_min_tokens < INT32_MAX)
        snprintf(widen, sizeof widen, "above %d tokens", tune->f16_widen_min_tokens);
    printf("  kernel tuning            %s (%s): F16/BF16 weights widened to F32 blocks %s; decode prefetches "
           "into %s; the attention walk prefetches %s\n",
           tune->cpu, tune->why, widen, tune->decode_prefetch_l2 ? "L2" : "L1",
           tune->attn_prefetch_chunks ? "whole next chunks" : "two lines of each head's next run");
    printf(
        "  memory read bandwidth    %8.2f GB/s    (1 thread) %8.2f GB/s    (%d threads)   %.2f GiB buffer\n",
        hw->bw1_gbs, hw->bw_gbs, n, (double)hw->buf_bytes / GIB);
    peak_line(simd ? "f32 FMA peak, 256-bit" : "f32 FMA peak, portable", "GFLOP/s", hw->fma1_gflops,
              hw->fma_gflops, n, simd ? "vfmadd" : "C loop");
    if (hw->fma512_gflops > 0)
        peak_line("f32 FMA peak, 512-bit", "GFLOP/s", hw->fma512_1_gflops, hw->fma512_gflops, n,
                  "vfmadd zmm");
    peak_line(simd ? "int8 dot peak, 256-bit" : "int8 dot peak, portable", "GOP/s  ", hw->dot1_gops,
              hw->dot_gops, n, simd ? "vpmaddubsw+vpmaddwd+vpaddd (the AVX2 kernels)" : "C loop");
    if (hw->dot512_gops > 0)
        peak_line("int8 dot peak, 512-bit", "GOP/s  ", hw->dot512_1_gops, hw->dot512_gops, n,
                  "vpmaddubsw+vpmaddwd+vpaddd zmm (AVX-512BW)");
    if (hw->vnni_gops > 0)
        peak_line("int8 VNNI peak, 256-bit", "GOP/s  ", hw->vnni1_gops, hw->vnni_gops, n,
                  "vpdpbusd ymm (AVX-VNNI)");
    if (hw->vnni512_gops > 0)
        peak_line("int8 VNNI peak, 512-bit", "GOP/s  ", hw->vnni512_1_gops, hw->vnni512_gops, n,
                  "vpdpbusd zmm (AVX512-VNNI)");
    printf("  roofline (%d threads)    f32 peak %.1f GFLOP/s, int8 peak %.1f GOP/s, bandwidth %.2f GB/s;\n",
           n, hw->peak_gflops, hw->int8_peak_gops, hw->bw_gbs);
    printf("                           ridge points %.1f FLOP/byte (f32), %.1f op/byte (int8)\n", hw->ridge,
           hw->int8_ridge);
    printf(
        "  (1 f32 FMA = 2 FLOPs and 1 int8 multiply-add = 2 ops, so a GEMV does 2 per weight: 0.5 FLOP/byte\n"
        "   for f32 weights, 1 for f16, 1.9 int8 ops/byte for q8_0, 3.6 for q4_0; decode sits far below the\n"
        "   ridge points, bandwidth-bound)\n");
}
