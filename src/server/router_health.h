/* The router's health checker: one thread that, every interval, asks each replica GET /health (200: up)
 * and GET /metrics (its KV usage and running/waiting sequences), and tells the policy.  A replica that
 * fails is marked down at once and checked again at the next round; one that answers again is marked up.
 * Transitions are logged. */
#ifndef CINFER_SERVER_ROUTER_HEALTH_H
#define CINFER_SERVER_ROUTER_HEALTH_H

#include <stdbool.h>

#include "core/status.h"
#include "server/router_policy.h"

struct router_health;

/* urls[0..n) (base URLs, kept by the caller), checked every interval_ms, each check bounded by timeout_ms. */
enum ci_status router_health_start(const char *const *urls, int n, int interval_ms, int timeout_ms,
                                   struct router_policy *p, struct router_health **out, struct ci_err *err);
/* Waits until the first round of checks is done (at most timeout_ms). */
void router_health_wait_first(struct router_health *h, int timeout_ms);
/* Stops the thread, frees.  NULL is fine. */
void router_health_stop(struct router_health *h);

#endif
