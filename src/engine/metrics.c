#include "engine/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

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
    ci_sort_doubles(scratch, n - 1);
    out->tbt_p50_ms = ci_quantile(scratch, n - 1, 0.50);
    out->tbt_p99_ms = ci_quantile(scratch, n - 1, 0.99);
    out->tps = out->tbt_mean_ms > 0 ? 1000.0 / out->tbt_mean_ms : 0;
}

void histogram_init(struct histogram *h, const double *bounds, int n_bounds) {
    h->bounds = bounds;
    h->n_bounds = n_bounds < METRICS_MAX_BUCKETS ? n_bounds : METRICS_MAX_BUCKETS;
    for (int i = 0; i <= METRICS_MAX_BUCKETS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum_ns, 0);
    atomic_init(&h->count, 0);
}

void histogram_observe_ns(struct histogram *h, int64_t ns) {
    double s = (double)ns / 1e9;
    int b = 0;
    while (b < h->n_bounds && s > h->bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->counts[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

bool metrics_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = *len < cap ? vsnprintf(buf + *len, cap - *len, fmt, ap) : -1;
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *len)
        return false;
    *len += (size_t)n;
    return true;
}

bool histogram_format(const struct histogram *h, const char *name, const char *help, char *buf, size_t cap,
                      size_t *len) {
    if (!metrics_appendf(buf, cap, len, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name))
        return false;
    long long cum = 0;
    for (int b = 0; b <= h->n_bounds; b++) {
        cum += atomic_load_explicit(&h->counts[b], memory_order_relaxed);
        bool ok = b < h->n_bounds
                      ? metrics_appendf(buf, cap, len, "%s_bucket{le=\"%g\"} %lld\n", name, h->bounds[b], cum)
                      : metrics_appendf(buf, cap, len, "%s_bucket{le=\"+Inf\"} %lld\n", name, cum);
        if (!ok)
            return false;
    }
    return metrics_appendf(buf, cap, len, "%s_sum %.9g\n%s_count %lld\n", name,
                           (double)atomic_load(&h->sum_ns) / 1e9, name, cum);
}
