/* Prometheus text for `cinfer router`: reading one value out of a replica's /metrics, and merging the
 * replicas' /metrics into one exposition where every sample carries a replica="URL" label (each metric
 * family's HELP and TYPE once, its samples from every replica together, as the format requires). */
#ifndef CINFER_SERVER_ROUTER_METRICS_H
#define CINFER_SERVER_ROUTER_METRICS_H

#include <stdbool.h>
#include <stddef.h>

/* The value of the first sample named exactly `name` without labels; false when there is none. */
bool router_metrics_value(const char *text, size_t len, const char *name, double *out);

struct router_metrics_source {
    const char *text; // a replica's /metrics body (len bytes)
    size_t len;
    const char *replica; // the label's value
};

/* The merged exposition (ci_malloc'ed, NUL-terminated, *out_len bytes), with `prefix` (the router's own
 * metrics, may be NULL) first.  NULL when out of memory. */
char *router_metrics_merge(const struct router_metrics_source *src, int n, const char *prefix,
                           size_t *out_len);

#endif
