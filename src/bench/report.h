/* cinfer bench: statistics over a replayed workload, the comparison table, CSV/JSON files and gnuplot plots.
 *
 * Definitions (as vLLM's benchmark_serving):
 *   TTFT = first token − arrival;  ITL (shown as TBT) = every gap between consecutive tokens of a request,
 *   pooled over all requests;  E2E = finish − arrival;  TPOT = (E2E − TTFT) / (output tokens − 1), mean over
 *   requests with at least two tokens;  throughput = tokens / (last finish − first arrival).
 * Percentiles use linear interpolation between closest ranks, numpy's default: for n sorted values and
 * q in [0, 100], h = (n − 1)·q/100 and p = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋ + 1] − x[⌊h⌋]).
 * KV waste = Σ over steps (allocated − used slots) / Σ allocated slots; peak KV = the most blocks referenced
 * at the end of any step × block bytes; prefix hit rate = prompt tokens served by the cache / prompt tokens.
 * Steps are prefill-heavy when they compute at least as many prompt (or recompute) tokens as decode tokens,
 * decode-heavy otherwise; achieved GFLOP/s, GB/s and arithmetic intensity use the engine's per-step
 * estimates (struct step_metrics) summed over each class. */
#ifndef CINFER_BENCH_REPORT_H
#define CINFER_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/workload.h"
#include "core/status.h"

/* Sorts x[0..n) ascending. */
void bench_sort(double *x, int n);
/* Linear-interpolation percentile (numpy's default) of sorted[0..n), q in [0, 100]; NAN when n == 0. */
double bench_percentile(const double *sorted, int n, double q);
/* tokens / (t_last_ns − t_first_ns) in tokens per second; 0 when the span is not positive. */
double bench_throughput(int64_t tokens, int64_t t_first_ns, int64_t t_last_ns);

struct bench_roofline {
    int64_t n_steps, n_tokens;
    double time_s, flops, bytes;
    double gflops_per_s, gbytes_per_s, intensity; // FLOP/byte
};

struct bench_summary {
    char label[32];
    int n_requests, n_completed;
    int64_t n_prompt_tokens, n_output_tokens;
    double ttft_ms[3], itl_ms[3], e2e_ms[3]; // p50, p90, p99
    double ttft_mean_ms, itl_mean_ms, e2e_mean_ms, tpot_mean_ms;
    double duration_s; // last finish − first arrival
    double output_tps, total_tps, requests_per_s;
    int64_t peak_kv_bytes;
    double kv_waste_pct;
    double prefix_hit_rate;
    int64_t n_preemptions, n_pad_tokens, n_steps, n_prefix_hit_tokens;
    int block_size, n_kv_blocks;
    int64_t kv_pool_bytes;
    struct bench_roofline prefill, decode;
};

/* CI_ERR_NOMEM only. */
enum ci_status bench_summarize(const struct bench_run *r, struct bench_summary *s, struct ci_err *err);

/* The comparison table (one row per run) and the roofline lines. */
void bench_print_table(FILE *f, const struct bench_summary *s, int n);
void bench_print_roofline(FILE *f, const struct bench_summary *s, int n);

/* Files in dir (which must exist): summary.csv (one row per run), requests.csv (one row per request per run),
 * steps_<label>.csv (one row per step), summary.json (config echo + summaries + per-request arrays).
 * config_json is a JSON object text written as "config" (may be NULL). */
enum ci_status bench_write_files(const char *dir, const struct bench_run *runs, const struct bench_summary *s,
                                 int n, const char *config_json, struct ci_err *err);

/* Creates dir and its parents (mkdir -p). */
enum ci_status bench_mkdirs(const char *dir, struct ci_err *err);
/* Appends s to a JSON text buffer as a quoted, escaped string.  False when it does not fit. */
bool bench_json_str(char *buf, size_t size, const char *s);

/* ---- plots (gnuplot) --------------------------------------------------------------------------------------
 * Each writes its data files and a .gp script into dir and runs gnuplot on it (pngcairo if available, else
 * png).  They return false (after a warning on stderr) when gnuplot is missing or fails; the data and script
 * stay in dir either way. */
bool bench_plot_ttft_cdf(const char *dir, const struct bench_run *runs, int n);
/* Every token gap of the short streams and every step's duration against time since the long prompt arrived
 * (runs of the long-prompt workload). */
bool bench_plot_tbt_timeline(const char *dir, const struct bench_run *runs, int n);
/* KV bytes allocated and used at each step, against time. */
bool bench_plot_kv_usage(const char *dir, const struct bench_run *runs, int n);

struct bench_sweep_point {
    double x;    // batch size or context length
    double y[4]; // series values (NAN: none)
};
/* A generic line plot of points (one column per series) for the sweeps. */
bool bench_plot_sweep(const char *dir, const char *stem, const char *title, const char *xlabel,
                      const char *ylabel, const char *const *series, int n_series,
                      const struct bench_sweep_point *pts, int n_pts, bool logx);

#endif
