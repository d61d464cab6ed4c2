/* `cinfer router`: an OpenAI-compatible front for several `cinfer serve` replicas.  Generation requests
 * (/v1/chat/completions, /v1/completions, /v1/messages, /v1/embeddings, and /tokenize, /detokenize,
 * /v1/messages/count_tokens) go to one replica picked by router_policy.c (prefix-aware from
 * router_prompt.c's block keys, bounded by load); the answer, streamed or not, is passed through as the
 * replica sends it (status, content type, body bytes), while it arrives.  A request whose connection to its
 * replica fails before any byte of an answer came back goes to another replica (the failed one is marked
 * down until a health check finds it up again); with no replica left the client gets 503 and an
 * OpenAI-shaped error.  A client that hangs up aborts its request to the replica.  /v1/models and /metrics
 * gather every healthy replica's answer (models merged by id, each with the replicas serving it; metrics
 * with a replica="URL" label per sample, after the router's own); /health is 200 while one replica is up.
 *
 * Life: router_create starts the upstream and health threads; the HTTP server serves router_table() with
 * the router as its app; router_free after the HTTP server is gone. */
#ifndef CINFER_SERVER_ROUTER_H
#define CINFER_SERVER_ROUTER_H

#include "cinfer.h"
#include "core/status.h"
#include "server/http.h"
#include "server/router_policy.h"

struct router_config {
    const char *const *replicas; // n_replicas base URLs ("http://host:port", no trailing slash), copied
    int n_replicas;
    enum router_policy_kind policy;
    int block_size;         // the replicas' KV block size
    int table_entries;      // block keys remembered
    int balance_abs;        // see router_policy.h
    double kv_high;         // see router_policy.h
    double min_match;       // see router_policy.h
    int health_interval_ms; // between health checks
    int connect_timeout_ms; // to a replica
    // The replicas' vocabulary and chat template (NULL: keys over the prompt's bytes); the caller's,
    // outliving the router.
    const struct cinfer_model *m;
    const char *tmpl;
    const struct cinfer_template *jinja;
};

struct router;

enum ci_status router_create(const struct router_config *c, struct router **out, struct ci_err *err);
/* Waits (at most timeout_ms) for the first health checks; returns the replicas found up. */
int router_wait_health(struct router *r, int timeout_ms);
const struct http_route *router_table(int *n_routes);
void router_free(struct router *r);

#endif
