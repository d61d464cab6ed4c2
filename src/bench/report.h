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

/* The gnuplot terminal for PNGs: "pngcairo" where gnuplot has it, else "png"; NULL when gnuplot is missing
 * (said once on stderr).  Probed once per process. */
const char *bench_gnuplot_terminal(void);
/* Runs gnuplot on script in dir; false (after a warning) when gnuplot is missing or fails. */
bool bench_gnuplot_run(const char *dir, const char *script);
/* The progress bar on stderr (a terminal): "label [####....] 12/32 requests, extra  3.4 s", redrawn in
 * place; bench_progress_clear erases it before other output. */
void bench_progress_draw(const char *label, int n_done, int n_total, const char *extra, int64_t elapsed_ns);
void bench_progress_clear(void);
/* Creates dir and its parents (mkdir -p). */
enum ci_status bench_mkdirs(const char *dir, struct ci_err *err);
/* Appends s to the C string buf[size] as a JSON string literal (quoted and escaped by cJSON); false when it
 * does not fit. */
bool bench_json_str(char *buf, size_t size, const char *s);
/* Writes s to f as a JSON string literal. */
void bench_json_fputs(FILE *f, const char *s);

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
