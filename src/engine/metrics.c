#include "engine/metrics.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double metrics_quantile(const double *sorted, int n, double q) {
    if (n <= 0)
        return 0;
    double pos = q * (n - 1);
    int lo = (int)pos;
    if (lo >= n - 1)
        return sorted[n - 1];
    double frac = pos - lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

void metrics_token_timing(int64_t t_start_ns, const int64_t *t_token_ns, int n, double *scratch,
                          struct token_timing *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0)
        return;
    out->ttft_ms = (double)(t_token_ns[0] - t_start_ns) / 1e6;
    out->latency_ms = (double)(t_token_ns[n - 1] - t_start_ns) / 1e6;
    if (n < 2)
        return;
    double sum = 0;
    for (int i = 1; i < n; i++) {
        scratch[i - 1] = (double)(t_token_ns[i] - t_token_ns[i - 1]) / 1e6;
        sum += scratch[i - 1];
    }
    out->tbt_mean_ms = sum / (n - 1);
    qsort(scratch, (size_t)n - 1, sizeof *scratch, cmp_double);
    out->tbt_p50_ms = metrics_quantile(scratch, n - 1, 0.50);
    out->tbt_p99_ms = metrics_quantile(scratch, n - 1, 0.99);
    out->tps = out->tbt_mean_ms > 0 ? 1000.0 / out->tbt_mean_ms : 0;
}
