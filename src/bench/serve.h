/* cinfer bench serve: a load generator for any OpenAI-compatible server, in the manner of `vllm bench serve`.
 *
 * It builds a seeded text workload (random | sharegpt-like | shared-prefix; the server tokenizes), sends it
 * to POST /v1/completions (or /v1/chat/completions) as streaming requests with Poisson arrivals (or all at
 * once) under an optional cap on in-flight requests, measures TTFT, every inter-chunk gap (ITL), TPOT and
 * E2EL from the SSE stream of each request, and prints vLLM's summary (throughput, goodput under --goodput
 * SLOs, mean/median/p90/p99 latencies).  It writes results.json (summary + per-request arrays) and gnuplot
 * PNGs (TTFT CDF, ITL histogram, E2EL against send time) into --out.  bench/serve.md documents the flags, the
 * definitions and the JSON fields.
 *
 * Nothing here is shared state: the command owns every buffer it allocates and frees it before returning. */
#ifndef CINFER_BENCH_SERVE_H
#define CINFER_BENCH_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bench_serve_dataset { BENCH_SERVE_RANDOM, BENCH_SERVE_SHAREGPT, BENCH_SERVE_SHARED_PREFIX };

struct bench_serve_slo {
    double ttft_ms, tpot_ms, e2el_ms; // < 0: not constrained
    bool any;
};

/* What `cinfer bench serve` was asked (cli/cmd_bench_serve.c parses the flags into it).  Lengths left at -1
 * take their dataset's default. */
struct bench_serve_opts {
    const char *url, *api_key, *model, *dataset_name, *rate_str, *out_dir, *endpoint;
    int num_prompts, max_concurrency, input_len, output_len, groups, prefix_len, suffix_len, max_len;
    float range_ratio, input_sigma, output_sigma, timeout_s, tokens_per_word;
    uint64_t seed;
    bool no_calibrate, no_ignore_eos, no_plots, quiet;
    // derived
    enum bench_serve_dataset dataset;
    double rate; // requests/s; INFINITY: all at once
    struct bench_serve_slo slo;
};

/* "ttft:500 tpot:50,e2el:2000" (space or comma separated KEY:MS) into *slo.  False with msg on a bad term. */
bool bench_serve_parse_goodput(const char *spec, struct bench_serve_slo *slo, char *msg, size_t msg_size);

/* Runs the benchmark and prints its report.  Returns the process exit status: 0 when the benchmark ran and
 * at least one request succeeded, 1 on a runtime failure (server unreachable, the initial test request
 * failed, no request succeeded, files could not be written), 2 on a bad URL. */
int bench_serve_run(struct bench_serve_opts *o);

#endif
