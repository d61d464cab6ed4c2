/* The offline benchmark, `cinfer bench`: the same seeded workload replayed in-process under each serving
 * policy (or a sweep of batch sizes or context lengths), with the table, CSV/JSON files and plots.  The
 * flags are cli/cmd_bench.c; bench/README.md documents both. */
#ifndef CINFER_BENCH_OFFLINE_H
#define CINFER_BENCH_OFFLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/report.h"
#include "bench/workload.h"

#define BENCH_MAX_RUNS     16 // policies of one comparison, or batch sizes of one sweep
#define BENCH_MAX_CONTEXTS 64 // context lengths of one sweep

enum bench_sweep { BENCH_SWEEP_NONE, BENCH_SWEEP_BATCH, BENCH_SWEEP_CONTEXT };

/* Lengths and ratios left at -1 take the workload's default (bench_workload_params_default). */
struct cinfer_tp;

struct bench_offline_opts {
    const char *model_path;
    const char *out_dir; // NULL: bench/out/<timestamp>
    const char *kv_type; // "f32", "f16" or "q8_0"
    enum bench_workload_kind kind;
    double rate; // Poisson arrivals per second; INFINITY: all at once
    enum bench_policy policies[BENCH_MAX_RUNS];
    int n_policies;
    bool compare; // the policies are a comparison (--compare), not one chosen policy
    enum bench_sweep sweep;
    int batch_sizes[BENCH_MAX_RUNS], n_batch_sizes; // BENCH_SWEEP_BATCH
    int contexts[BENCH_MAX_CONTEXTS], n_contexts;   // BENCH_SWEEP_CONTEXT
    int num_prompts, input_len, output_len, groups, prefix_len, suffix_len, long_len, long_output_len;
    float range_ratio, input_sigma, output_sigma, long_at, long_delay_ms, kv_mem_mib;
    uint64_t seed;
    int sweep_steps, threads, ctx, max_seqs, max_batch_tokens, block_size;
    bool quiet, no_plots;
    const char *spec;       // speculative decoding: "none" (NULL), "ngram" or "draft"
    int spec_k;             // longest proposal (0: 8)
    int spec_max_batch;     // speculate only while at most this many sequences decode (0: any number)
    const char *draft_path; // "draft": the draft model
    struct cinfer_tp *tp;   // --tp/--pp (cinfer_tp_init): rank 0 runs the benchmark, the others its shards
    uint64_t tp_options;    // the command line's hash the ranks compare
};

void bench_offline_opts_default(struct bench_offline_opts *o);
/* Runs the benchmark and prints its report; returns the process exit status (0 ok, 1 runtime failure, 2 a
 * setting that cannot work with this model). */
int bench_offline_run(struct bench_offline_opts *o);

#endif
