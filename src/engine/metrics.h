/* The seeds' per-request yardstick from token timestamps: TTFT (start → first token), TBT (gaps between
 * consecutive tokens: mean, p50, p99), TPS = 1 / mean TBT, and latency (start → last token, which equals
 * TTFT + (n - 1) · mean TBT). */
#ifndef CINFER_ENGINE_METRICS_H
#define CINFER_ENGINE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

struct token_timing {
    double ttft_ms;
    double tbt_mean_ms;
    double tbt_p50_ms;
    double tbt_p99_ms;
    double tps;
    double latency_ms;
};

/* t_token_ns: [n] sampling times.  scratch: [n] doubles (the gaps are sorted there; nothing is allocated). */
void metrics_token_timing(int64_t t_start_ns, const int64_t *t_token_ns, int n, double *scratch,
                          struct token_timing *out);

/* A Prometheus histogram of durations in seconds, updated by the engine thread and read by any thread
 * (atomic counters; the sum is kept in nanoseconds). */
#include <stdatomic.h>
#include <stddef.h>

#define METRICS_MAX_BUCKETS 24

struct histogram {
    const double *bounds; // [n_bounds] upper bounds in seconds, increasing (the +Inf bucket is implicit)
    int n_bounds;
    atomic_llong counts[METRICS_MAX_BUCKETS + 1]; // non-cumulative; last = above every bound
    atomic_llong sum_ns;
    atomic_llong count;
};

void histogram_init(struct histogram *h, const double *bounds, int n_bounds);
void histogram_observe_ns(struct histogram *h, int64_t ns);
/* printf into buf[*len..cap), advancing *len; false (nothing counted) if it did not fit. */
bool metrics_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Appends the Prometheus exposition of h as `name` (with # HELP/# TYPE lines) to buf[*len..cap); returns
 * false if it did not fit. */
bool histogram_format(const struct histogram *h, const char *name, const char *help, char *buf, size_t cap,
                      size_t *len);

#endif
