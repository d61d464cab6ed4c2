/* The seeds' per-request yardstick from token timestamps: TTFT (start → first token), TBT (gaps between
 * consecutive tokens: mean, p50, p99), TPS = 1 / mean TBT, and latency (start → last token, which equals
 * TTFT + (n - 1) · mean TBT). */
#ifndef CINFER_ENGINE_METRICS_H
#define CINFER_ENGINE_METRICS_H

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

/* Value at quantile q in [0, 1] of sorted[0..n) by linear interpolation between closest ranks (numpy's
 * default); 0 for n == 0. */
double metrics_quantile(const double *sorted, int n, double q);

#endif
