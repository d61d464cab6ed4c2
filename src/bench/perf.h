/* The kernel benchmarks of `cinfer bench`: `bench hw` measures the machine (sustained memory read bandwidth,
 * peak f32 FMA throughput, peak int8 dot-product throughput, their ratios to the bandwidth the ridge points)
 * and `bench kernels` measures the forward pass against it with llama-bench's definitions (pp512, tg128) and
 * llama-batched-bench's batched decode (S_TG), reporting each result as a fraction of the roofline of the
 * same machine measured in the same run: float-weight matmuls and attention against the f32 FMA peak,
 * int8-dot matmuls (Q8_0, Q4_0) against the int8 peak, both against the bandwidth.
 *
 * Units: a multiply-add counts as 2 ops, the multiply and the add.  One f32 FMA is 2 FLOPs, one int8
 * multiply-add (a u8 x s8 product added into an int32 sum) is 2 int8 ops, so a weight applied to a token
 * costs 2 ops whatever its type, and both peaks count the same way (GFLOP/s, GOP/s).
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
    int depth; // pp / tg: tokens of context already in the KV cache before the test (llama-bench -d)
    const char *kv_type; // KV cache element type (--kv-type): "f32", "f16" or "q8_0"
    int batches[BENCH_KERNELS_MAX_BATCHES], n_batches;
    float bw_gbs, peak_gflops, int8_peak_gops; // given roofs (0: measure)
    int hw_mib;
    bool json, no_warmup;
    uint64_t seed;
};
/* Runs the tests and prints their report; returns the process exit status (0 ok, 1 runtime failure). */
int bench_kernels_run(const struct bench_kernels_opts *o);

struct bench_hw_opts {
    size_t buf_bytes; // read-bandwidth buffer; 0 = max(1 GiB, 4 x the last-level cache)
    int passes;       // bandwidth: timed passes over the buffer (after an untimed one); >= 1
    double peak_s;    // seconds spent on each peak loop (FMA, int8 dot) and thread count
    bool portable;    // use the portable C loops even where AVX2 is available
};
void bench_hw_opts_default(struct bench_hw_opts *o);

/* Each peak is measured on 1 thread and on n_threads; the roofline uses the n_threads figures. */
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
    // int8 dot products, GOP/s (a u8 x s8 multiply-add into int32 is 2 ops):
    double dot1_gops;      // vpmaddubsw + vpmaddwd + vpaddd on 256-bit registers (dot_avx2.c's sequence), or
    double dot_gops;       // the portable C loop without AVX2; 1 thread, n_threads
    double dot512_1_gops;  // the same sequence on 512-bit registers where the CPU has AVX-512BW (0 otherwise)
    double dot512_gops;    // ... n_threads
    double vnni1_gops;     // vpdpbusd on 256-bit registers where the CPU has AVX-VNNI (0 otherwise)
    double vnni_gops;      // ... n_threads
    double vnni512_1_gops; // vpdpbusd on 512-bit registers where the CPU has AVX512-VNNI (0 otherwise)
    double vnni512_gops;   // ... n_threads
    double int8_peak_gops; // the machine's int8 peak at n_threads: the largest of the four
    double int8_ridge;     // int8_peak_gops / bw_gbs, op per byte
};

/* Measures the machine on tp's threads (and on one).  CI_ERR_NOMEM when the buffer cannot be allocated. */
enum ci_status bench_hw_measure(struct ci_threadpool *tp, const struct bench_hw_opts *o, struct bench_hw *out,
                                struct ci_err *err);
/* Prints the report (human table or one JSON line). */
void bench_hw_print(const struct bench_hw *hw, bool json);

/* Which peak bounds a matmul over weights of this type (enum ci_type): the int8 peak where the kernels
 * quantize the activations to int8 and multiply with integer dot products (Q8_0, Q4_0), the f32 FMA peak for
 * the float types (F32, F16 and BF16 are widened to f32 and multiplied with FMAs). */
enum bench_roof { BENCH_ROOF_F32, BENCH_ROOF_INT8 };
enum bench_roof bench_roof_of_type(uint32_t type);
const char *bench_roof_name(enum bench_roof roof); // "f32", "int8"

/* bench_hw_avx2.c.  Only call a loop after its bench_hw_have_*() returned true. */
bool bench_hw_have_avx2(void);       // compiled in, and the CPU and OS support AVX2 and FMA
bool bench_hw_have_avx512(void);     // compiled in, and the CPU and OS support AVX-512F
bool bench_hw_have_avx512bw(void);   // ... AVX-512F and BW
bool bench_hw_have_avx512vnni(void); // ... AVX-512F and VNNI
bool bench_hw_have_avxvnni(void);    // ... AVX2 and AVX-VNNI (the VEX-encoded vpdpbusd)
/* Sum of n floats (n a multiple of 64, p 64-byte aligned) with 256-bit loads. */
float bench_hw_sum_avx2(const float *p, size_t n);
/* The peak loops.  Each runs iters iterations of the multiply-adds below (FMA lanes, or u8 x s8 products
 * added into int32) in independent register-resident chains, and returns a value that depends on every
 * chain, so nothing can be optimised away. */
#define BENCH_HW_FMA_AVX2_MADDS    (12 * 8)      // 12 chains of 256-bit FMAs
#define BENCH_HW_FMA_AVX512_MADDS  (12 * 16)     // 12 chains of 512-bit FMAs
#define BENCH_HW_DOT_AVX2_MADDS    (6 * 2 * 32)  // 6 chains, 2 vpmaddubsw+vpmaddwd+vpaddd sequences a step
#define BENCH_HW_DOT_AVX512_MADDS  (12 * 2 * 64) // the same on 512-bit registers, 12 chains
#define BENCH_HW_VNNI_AVX_MADDS    (12 * 32)     // 12 chains of 256-bit vpdpbusd
#define BENCH_HW_VNNI_AVX512_MADDS (12 * 64)     // 12 chains of 512-bit vpdpbusd
float bench_hw_fma_avx2(int64_t iters);
float bench_hw_fma_avx512(int64_t iters);
int32_t bench_hw_dot_avx2(int64_t iters);     // vpmaddubsw + vpmaddwd + vpaddd, 256-bit (AVX2)
int32_t bench_hw_dot_avx512bw(int64_t iters); // the same, 512-bit (AVX-512BW)
int32_t bench_hw_vnni_avx(int64_t iters);     // vpdpbusd, 256-bit (AVX-VNNI)
int32_t bench_hw_vnni_avx512(int64_t iters);  // vpdpbusd, 512-bit (AVX512-VNNI)

#endif
