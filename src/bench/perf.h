/* The kernel benchmarks of `cinfer bench`: `bench hw` measures the machine (sustained memory read bandwidth,
 * peak FMA throughput, their ratio the ridge point) and `bench kernels` measures the forward pass against it
 * with llama-bench's definitions (pp512, tg128) and llama-batched-bench's batched decode (S_TG), reporting
 * each result as a fraction of the roofline of the same machine measured in the same run.
 *
 * hw.c owns the measurement; kernels.c the forward-pass tests; hw_avx2.c (the only file built with -mavx2
 * -mfma) holds the SIMD loops, called only after a CPU probe said yes.  Their flags are cli/cmd_bench_hw.c
 * and cli/cmd_bench_kernels.c. */
#ifndef CINFER_BENCH_PERF_H
#define CINFER_BENCH_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct ci_threadpool;

#define BENCH_KERNELS_MAX_BATCHES 16   // sequence counts of one batched-decode run
#define BENCH_KERNELS_MAX_REPS    1000 // repetitions of one test

/* What `cinfer bench kernels` was asked (cli/cmd_bench_kernels.c parses the flags into it). */
struct bench_kernels_opts {
    const char *model;
    int n_threads, n_prompt, n_gen, reps, batch_reps, batch_pp, batch_tg, ubatch, block_size;
    const char *kv_type; // KV cache element type (--kv-type): "f32", "f16" or "q8_0"
    int batches[BENCH_KERNELS_MAX_BATCHES], n_batches;
    float bw_gbs, peak_gflops;
    int hw_mib;
    bool json, no_warmup;
    uint64_t seed;
};
/* Runs the tests and prints their report; returns the process exit status (0 ok, 1 runtime failure). */
int bench_kernels_run(const struct bench_kernels_opts *o);

struct bench_hw_opts {
    size_t buf_bytes; // read-bandwidth buffer; 0 = max(1 GiB, 4 x the last-level cache)
    int passes;       // best of this many timed passes (bandwidth and FMA each); >= 1
    double fma_s;     // seconds one FMA pass should last, roughly (> 0)
    bool portable;    // use the portable C loops even where AVX2 is available
};
void bench_hw_opts_default(struct bench_hw_opts *o);

struct bench_hw {
    const char *isa;         // loops used: "avx2+fma" or "portable C (no AVX2)"
    const char *kernels_isa; // what cinfer's kernels run on (ci_kernels_isa())
    int n_threads;
    size_t buf_bytes;
    double bw1_gbs;         // read bandwidth, 1 thread, GB/s (1e9 bytes/s)
    double bw_gbs;          // read bandwidth, n_threads
    double fma1_gflops;     // f32 FMA peak of the ISA above, 1 thread, GFLOP/s (an FMA is 2 FLOPs)
    double fma_gflops;      // ... n_threads
    double fma512_1_gflops; // the same with 512-bit FMAs where the CPU has AVX-512F (0 otherwise)
    double fma512_gflops;   // ... n_threads
    double peak_gflops;     // the machine's f32 peak at n_threads: max(fma_gflops, fma512_gflops)
    double ridge;           // peak_gflops / bw_gbs, FLOP per byte
};

/* Measures the machine on tp's threads (and on one).  CI_ERR_NOMEM when the buffer cannot be allocated. */
enum ci_status bench_hw_measure(struct ci_threadpool *tp, const struct bench_hw_opts *o, struct bench_hw *out,
                                struct ci_err *err);
/* Prints the report (human table or one JSON line). */
void bench_hw_print(const struct bench_hw *hw, bool json);

/* bench_hw_avx2.c.  Only call the loops after bench_hw_have_avx2() (resp. _avx512()) returned true. */
bool bench_hw_have_avx2(void);   // compiled in, and the CPU and OS support AVX2 and FMA
bool bench_hw_have_avx512(void); // compiled in, and the CPU and OS support AVX-512F
/* Sum of n floats (n a multiple of 64, p 64-byte aligned) with 256-bit loads. */
float bench_hw_sum_avx2(const float *p, size_t n);
/* iters rounds of 12 independent 256-bit (resp. 512-bit) FMA chains: iters * 12 * 16 (resp. 32) FLOPs.
 * Returns a value that depends on every chain, so nothing can be optimised away. */
float bench_hw_fma_avx2(int64_t iters);
float bench_hw_fma_avx512(int64_t iters);

#endif
