/* Where `cinfer router` sends each request: the replicas' health and load, and for the prefix policy a
 * bounded table from prompt block keys (the chain of core/hash.h, the engine prefix cache's keys) to the
 * replicas each block was sent to, forgotten least recently used first.
 *
 * Policies.  prefix: the replica that was sent the longest prefix of the request's blocks, when that
 * prefix is at least min_match of the request's blocks (SGLang's cache threshold: a match of a chat
 * template's preamble alone should not pull every conversation to one replica), unless it is loaded past
 * the bound (more than balance_abs requests in flight above the least loaded healthy
 * replica, or its KV cache fuller than kv_high), then the next best match (equal matches: the one with
 * fewer in flight), then the least loaded.  A request sent elsewhere for load adds that replica to its
 * blocks' entries, so a busy prefix spreads over several replicas instead of moving from one to another.
 * least-loaded: fewest requests in flight through the router, then the lower KV usage, then the fewer
 * sequences waiting (both read from the replica's /metrics), ties rotated.  round-robin: the next healthy one
 * in turn.  An unhealthy replica, or one the caller excludes (it just failed this request), is never picked.
 *
 * Thread-safe (one mutex): picks come from the HTTP threads, health and load from the health thread. */
#ifndef CINFER_SERVER_ROUTER_POLICY_H
#define CINFER_SERVER_ROUTER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

#define ROUTER_MAX_REPLICAS 64 // the exclusion set is a 64-bit mask

enum router_policy_kind { ROUTER_POLICY_PREFIX, ROUTER_POLICY_ROUND_ROBIN, ROUTER_POLICY_LEAST_LOADED };

struct router_policy_options {
    enum router_policy_kind kind;
    int n_replicas;    // 1 .. ROUTER_MAX_REPLICAS
    int table_entries; // block keys remembered (prefix)
    int balance_abs;   // a prefix match is taken only within this many in-flight requests of the least loaded
    double kv_high;    // nor when the replica's KV usage is above this (0..1]
    double min_match;  // nor when it covers less than this fraction of the request's blocks [0..1]
};

struct router_replica_stats {
    bool healthy;
    int in_flight;         // requests sent through the router and not finished
    double kv_usage;       // cinfer:kv_cache_usage_perc at the last scrape
    int n_running;         // cinfer:num_requests_running at the last scrape
    int n_waiting;         // cinfer:num_requests_waiting at the last scrape
    long long n_routed;    // requests sent to it
    long long n_prefix;    // of which by a prefix match
    long long n_failovers; // requests moved away from it after a failed connection
};

struct router_policy;

/* false when the name is none of prefix, round-robin, least-loaded. */
bool router_policy_parse(const char *name, enum router_policy_kind *out);
const char *router_policy_name(enum router_policy_kind k);

enum ci_status router_policy_create(const struct router_policy_options *o, struct router_policy **out,
                                    struct ci_err *err);
void router_policy_free(struct router_policy *p);

/* Picks a replica for a request whose prompt has the block keys keys[0..n_keys) (n_keys 0: no prefix to
 * go by), never one of `excluded` (bit r: replica r) or an unhealthy one; counts the request in flight there
 * and (prefix policy) records its keys as sent there.  Returns the replica, or -1 when none is available.
 * *matched_blocks (may be NULL): how many leading blocks the pick matched (0 when it went by load). */
int router_policy_pick(struct router_policy *p, const uint64_t *keys, int n_keys, uint64_t excluded,
                       int *matched_blocks);
/* The request sent to r is over.  failed_over: it did not reach r and goes elsewhere. */
void router_policy_done(struct router_policy *p, int r, bool failed_over);

void router_policy_set_healthy(struct router_policy *p, int r, bool healthy);
void router_policy_set_load(struct router_policy *p, int r, double kv_usage, int n_running, int n_waiting);
void router_policy_stats(struct router_policy *p, int r, struct router_replica_stats *out);
int router_policy_n_healthy(struct router_policy *p);
/* Block keys in the table now. */
int router_policy_table_size(struct router_policy *p);

#endif
