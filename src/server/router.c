/* `cinfer router`'s endpoints (router.h).  Each forwarded request is a struct fwd shared by the deferred
 * answer (poll: waits for the replica's status line, failing over to another replica when the connection
 * fails before any answer byte) and the stream that passes the body through (fill); /v1/models and /metrics
 * are a struct gather of one GET per healthy replica. */
#include "server/router.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"
#include "server/anthropic.h"
#include "server/openai.h"
#include "server/router_health.h"
#include "server/chat_prompt.h"
#include "server/router_metrics.h"
#include "server/router_prompt.h"
#include "server/router_upstream.h"

struct router {
    char **urls; // [n]
    int n;
    int connect_timeout_ms;
    struct router_policy *policy;
    struct upstream *up;
    struct router_health *health;
    struct router_prompt rp;
    atomic_llong n_unroutable; // requests answered 503: no replica up
};

/* The headers a replica needs from the client's request. */
static const char *const passed_headers[] = {"Authorization", "x-api-key", "anthropic-version",
                                             "Content-Type", "Accept"};
#define N_PASSED (sizeof passed_headers / sizeof passed_headers[0])

static void respond_error(struct http_response *res, bool anthropic, int status, const char *code,
                          const char *message) {
    struct openai_error e;
    openai_error_set(&e, status, NULL, code, "%s", message);
    res->status = status;
    res->content_type = "application/json";
    res->body = anthropic ? anthropic_error_json(&e, &res->body_len) : openai_error_json(&e, &res->body_len);
    if (!res->body) {
        res->status = 500;
        res->static_body = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
    }
    if (status == 503)
        res->retry_after_s = 1;
}

static void respond_no_replica(struct router *r, struct http_response *res, bool anthropic) {
    atomic_fetch_add(&r->n_unroutable, 1);
    respond_error(res, anthropic, 503, "no_replica",
                  "no replica is available: every replica is down or failed this request");
}

/* The content types cinfer serve answers with (the response keeps a static string), else octet-stream. */
static const char *static_content_type(const char *t) {
    static const char *const known[] = {"text/event-stream", "application/json", "text/plain; version=0.0.4",
                                        "text/html; charset=utf-8", "text/plain"};
    if (!t[0])
        return "application/json";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcasecmp(t, known[i]) == 0)
            return known[i];
    if (strncasecmp(t, "text/event-stream", 17) == 0)
        return known[0];
    if (strncasecmp(t, "application/json", 16) == 0)
        return known[1];
    return "application/octet-stream";
}

/* ---- forwarding ------------------------------------------------------------------------------------- */

struct fwd {
    atomic_int refs; // the poll and, once the answer streams, the fill
    struct router *r;
    char path[128];
    char *body;
    size_t body_len;
    char *hdrs[N_PASSED];
    int n_hdrs;
    uint64_t *keys; // [n_keys] the prompt's block keys
    int n_keys;
    uint64_t excluded; // replicas that failed this request
    int replica;       // -1: none holds it
    struct upstream_xfer *x;
    struct http_waker *w;
    bool anthropic;
};

static void fwd_unref(void *ctx) {
    struct fwd *f = ctx;
    if (atomic_fetch_sub(&f->refs, 1) > 1)
        return;
    upstream_xfer_release(f->x); // aborts the replica's request if it still runs
    if (f->replica >= 0)
        router_policy_done(f->r->policy, f->replica, false);
    http_waker_release(f->w);
    for (int i = 0; i < f->n_hdrs; i++)
        ci_free(f->hdrs[i]);
    ci_free(f->keys);
    ci_free(f->body);
    ci_free(f);
}

/* Sends f to the best replica not yet excluded; false when there is none (or out of memory). */
static bool fwd_send(struct fwd *f) {
    struct router *r = f->r;
    for (;;) {
        int k = router_policy_pick(r->policy, f->keys, f->n_keys, f->excluded, NULL);
        if (k < 0)
            return false;
        char url[1200];
        snprintf(url, sizeof url, "%s%s", r->urls[k], f->path);
        struct upstream_request rq = {.url = url,
                                      .method = "POST",
                                      .body = f->body,
                                      .body_len = f->body_len,
                                      .headers = (const char *const *)f->hdrs,
                                      .n_headers = f->n_hdrs,
                                      .connect_timeout_ms = r->connect_timeout_ms,
                                      .notify = http_waker_wake,
                                      .notify_ctx = f->w};
        struct ci_err ce = {0};
        if (upstream_start(r->up, &rq, &f->x, &ce) == CI_OK) {
            f->replica = k;
            return true;
        }
        router_policy_done(r->policy, k, false);
        f->excluded |= 1ull << k;
    }
}

static ssize_t fwd_fill(void *ctx, struct http_conn *c, char *buf, size_t max) {
    struct fwd *f = ctx;
    if (http_conn_gone(c))
        return HTTP_FILL_ERROR; // fwd_unref then aborts the replica's request
    struct upstream_status st;
    upstream_xfer_status(f->x, &st); // before reading: DONE then means every byte is buffered
    size_t n = upstream_xfer_read(f->x, buf, max);
    if (n > 0)
        return (ssize_t)n;
    if (st.state == UPSTREAM_DONE)
        return 0;
    if (st.state == UPSTREAM_FAILED) { // cut off mid-answer: the client sees the connection end early
        fprintf(stderr, "cinfer router: replica %s failed mid-answer: %s\n", f->r->urls[f->replica],
                st.error);
        return HTTP_FILL_ERROR;
    }
    return HTTP_FILL_WAIT;
}

static bool fwd_poll(void *ctx, struct http_conn *c, struct http_response *res) {
    struct fwd *f = ctx;
    struct router *r = f->r;
    if (http_conn_gone(c)) {
        respond_error(res, f->anthropic, 503, NULL, "the client went away");
        return true;
    }
    struct upstream_status st;
    upstream_xfer_status(f->x, &st);
    if (st.state == UPSTREAM_PENDING)
        return false;
    if (st.state == UPSTREAM_FAILED) {
        int k = f->replica;
        if (st.got_bytes) { // the replica took the request and broke off: not safe to send it again
            fprintf(stderr, "cinfer router: replica %s broke off its answer: %s\n", r->urls[k], st.error);
            respond_error(res, f->anthropic, 502, "replica_failed", "the replica failed while answering");
            return true;
        }
        // Nothing came back: the request never got an answer, so it goes to another replica.
        fprintf(stderr, "cinfer router: replica %s failed (%s): marked down, request moved\n", r->urls[k],
                st.error);
        fflush(stderr);
        router_policy_set_healthy(r->policy, k, false);
        upstream_xfer_release(f->x);
        f->x = NULL;
        f->replica = -1;
        router_policy_done(r->policy, k, true);
        f->excluded |= 1ull << k;
        if (!fwd_send(f)) {
            respond_no_replica(r, res, f->anthropic);
            return true;
        }
        return false; // the new transfer wakes us
    }
    res->status = st.http_status;
    res->content_type = static_content_type(st.content_type);
    res->retry_after_s = st.retry_after_s;
    atomic_fetch_add(&f->refs, 1);
    res->fill = fwd_fill;
    res->fill_ctx = f;
    res->fill_free = fwd_unref;
    return true;
}

static enum router_endpoint endpoint_of(const char *path) {
    if (strcmp(path, "/v1/chat/completions") == 0)
        return ROUTER_EP_CHAT;
    if (strcmp(path, "/v1/completions") == 0)
        return ROUTER_EP_COMPLETIONS;
    if (strcmp(path, "/v1/messages") == 0)
        return ROUTER_EP_MESSAGES;
    return ROUTER_EP_OTHER;
}

static void on_forward(void *app, const struct http_request *req, struct http_response *res) {
    struct router *r = app;
    bool anthropic = anthropic_path(req->path);
    struct fwd *f = ci_calloc(1, sizeof *f);
    if (!f || strlen(req->path) >= sizeof f->path || !(f->body = ci_malloc(req->body_len + 1)) ||
        !(f->keys = ci_malloc(ROUTER_MAX_KEYS * sizeof *f->keys))) {
        if (f) {
            ci_free(f->body);
            ci_free(f);
        }
        respond_error(res, anthropic, 500, NULL, "out of memory");
        return;
    }
    atomic_init(&f->refs, 1);
    f->r = r;
    f->replica = -1;
    f->anthropic = anthropic;
    snprintf(f->path, sizeof f->path, "%s", req->path);
    memcpy(f->body, req->body, req->body_len);
    f->body[req->body_len] = '\0';
    f->body_len = req->body_len;
    bool ok = (f->w = http_conn_waker(req->conn)) != NULL;
    for (size_t i = 0; ok && i < N_PASSED; i++) {
        const char *v = http_conn_header(req->conn, passed_headers[i]);
        if (!v)
            continue;
        size_t n = strlen(passed_headers[i]) + strlen(v) + 3;
        if ((f->hdrs[f->n_hdrs] = ci_malloc(n)))
            snprintf(f->hdrs[f->n_hdrs++], n, "%s: %s", passed_headers[i], v);
        else
            ok = false;
    }
    if (!ok) {
        fwd_unref(f);
        respond_error(res, anthropic, 500, NULL, "out of memory");
        return;
    }
    enum router_endpoint ep = endpoint_of(req->path);
    if (ep != ROUTER_EP_OTHER)
        f->n_keys = router_prompt_keys(&r->rp, ep, f->body, f->body_len, f->keys);
    if (!fwd_send(f)) {
        fwd_unref(f);
        respond_no_replica(r, res, anthropic);
        return;
    }
    res->poll = fwd_poll;
    res->poll_ctx = f;
    res->poll_free = fwd_unref;
}

/* ---- gathering /v1/models and /metrics ---------------------------------------------------------------- */

struct gather {
    struct router *r;
    bool metrics; // else models
    char *model;  // GET /v1/models/NAME: that model's object only (else the list); owned
    int n;
    int replica[ROUTER_MAX_REPLICAS];
    struct upstream_xfer *x[ROUTER_MAX_REPLICAS];
    struct http_waker *w;
};

static void gather_free(void *ctx) {
    struct gather *g = ctx;
    for (int i = 0; i < g->n; i++)
        upstream_xfer_release(g->x[i]);
    http_waker_release(g->w);
    ci_free(g->model);
    ci_free(g);
}

/* The whole body of a finished 200 answer (ci_malloc'ed), else NULL. */
static char *gather_body(struct upstream_xfer *x, size_t *len) {
    struct upstream_status st;
    upstream_xfer_status(x, &st);
    if (st.state != UPSTREAM_DONE || st.http_status != 200)
        return NULL;
    char *b = ci_malloc(st.buffered + 1);
    if (!b)
        return NULL;
    *len = upstream_xfer_read(x, b, st.buffered);
    b[*len] = '\0';
    return b;
}

static char *router_own_metrics(struct router *r) {
    size_t cap = 1024, n = 0;
    for (int k = 0; k < r->n; k++)
        cap += 6 * (strlen(r->urls[k]) + 96);
    char *s = ci_malloc(cap);
    if (!s)
        return NULL;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"replica_up", "gauge", "1 while the replica passes its health checks."},
        {"requests_in_flight", "gauge", "Requests sent to the replica and not finished."},
        {"requests_routed_total", "counter", "Requests sent to the replica."},
        {"requests_prefix_routed_total", "counter", "Of which by a prompt-prefix match."},
        {"failovers_total", "counter", "Requests moved away from the replica after a failed connection."},
        {"replica_kv_cache_usage_perc", "gauge", "The replica's KV usage at the last health check."},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        n += (size_t)snprintf(s + n, cap - n, "# HELP cinfer_router:%s %s\n# TYPE cinfer_router:%s %s\n",
                              m[i].name, m[i].help, m[i].name, m[i].type);
        for (int k = 0; k < r->n; k++) {
            struct router_replica_stats st;
            router_policy_stats(r->policy, k, &st);
            double v[] = {st.healthy,          st.in_flight,           (double)st.n_routed,
                          (double)st.n_prefix, (double)st.n_failovers, st.kv_usage};
            n += (size_t)snprintf(s + n, cap - n, "cinfer_router:%s{replica=\"%s\"} %.17g\n", m[i].name,
                                  r->urls[k], v[i]);
        }
    }
    n +=
        (size_t)snprintf(s + n, cap - n,
                         "# HELP cinfer_router:prefix_table_keys Block keys the prefix table holds.\n"
                         "# TYPE cinfer_router:prefix_table_keys gauge\ncinfer_router:prefix_table_keys %d\n"
                         "# HELP cinfer_router:requests_unroutable_total Requests answered 503: no replica.\n"
                         "# TYPE cinfer_router:requests_unroutable_total counter\n"
                         "cinfer_router:requests_unroutable_total %lld\n",
                         router_policy_table_size(r->policy), (long long)atomic_load(&r->n_unroutable));
    return s;
}

static void merged_metrics(struct gather *g, struct http_response *res) {
    struct router_metrics_source src[ROUTER_MAX_REPLICAS];
    char *bodies[ROUTER_MAX_REPLICAS];
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        size_t len = 0;
        if ((bodies[n] = gather_body(g->x[i], &len))) {
            src[n] = (struct router_metrics_source){bodies[n], len, g->r->urls[g->replica[i]]};
            n++;
        }
    }
    char *own = router_own_metrics(g->r);
    size_t len = 0;
    char *text = own ? router_metrics_merge(src, n, own, &len) : NULL;
    for (int i = 0; i < n; i++)
        ci_free(bodies[i]);
    ci_free(own);
    if (!text) {
        respond_error(res, false, 500, NULL, "out of memory");
        return;
    }
    res->status = 200;
    res->content_type = "text/plain; version=0.0.4";
    res->body = text;
    res->body_len = len;
}

/* Models merged by id; each gets "replicas": the URLs of the replicas that list it. */
static void merged_models(struct gather *g, struct http_response *res) {
    cJSON *list = cJSON_CreateObject();
    cJSON *data =
        list && cJSON_AddStringToObject(list, "object", "list") ? cJSON_AddArrayToObject(list, "data") : NULL;
    bool ok = data != NULL;
    int answered = 0;
    for (int i = 0; ok && i < g->n; i++) {
        size_t len = 0;
        char *b = gather_body(g->x[i], &len);
        cJSON *doc = b ? cJSON_ParseWithLength(b, len) : NULL;
        ci_free(b);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(doc, "data");
        answered += cJSON_IsArray(items);
        const cJSON *it;
        cJSON_ArrayForEach(it, items) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
            if (!cJSON_IsString(id))
                continue;
            cJSON *have = NULL, *m;
            cJSON_ArrayForEach(m, data) {
                if (strcmp(cJSON_GetObjectItemCaseSensitive(m, "id")->valuestring, id->valuestring) == 0)
                    have = m;
            }
            if (!have) {
                have = cJSON_Duplicate(it, true);
                if (!have || !cJSON_AddItemToArray(data, have) || !cJSON_AddArrayToObject(have, "replicas")) {
                    ok = false;
                    break;
                }
            }
            cJSON *reps = cJSON_GetObjectItemCaseSensitive(have, "replicas");
            cJSON *u = cJSON_CreateString(g->r->urls[g->replica[i]]);
            if (!cJSON_IsArray(reps) || !u || !cJSON_AddItemToArray(reps, u)) {
                cJSON_Delete(u);
                ok = false;
                break;
            }
        }
        cJSON_Delete(doc);
    }
    const cJSON *one = NULL; // GET /v1/models/NAME: the merged object whose id is NAME
    if (ok && answered > 0 && g->model) {
        const cJSON *m;
        cJSON_ArrayForEach(m, data) {
            if (strcmp(cJSON_GetObjectItemCaseSensitive(m, "id")->valuestring, g->model) == 0)
                one = m;
        }
        if (!one) {
            struct openai_error e;
            openai_error_set(&e, 404, "model", "model_not_found", "The model '%.200s' does not exist.",
                             g->model);
            res->status = 404;
            res->content_type = "application/json";
            res->body = openai_error_json(&e, &res->body_len);
            if (!res->body)
                respond_error(res, false, 500, NULL, "out of memory");
            cJSON_Delete(list);
            return;
        }
    }
    char *text = ok && answered > 0 ? cJSON_PrintUnformatted(one ? one : list) : NULL;
    cJSON_Delete(list);
    if (!ok || answered == 0) {
        if (answered == 0 && ok)
            respond_no_replica(g->r, res, false);
        else
            respond_error(res, false, 500, NULL, "out of memory");
        return;
    }
    size_t n = strlen(text);
    res->body = ci_malloc(n + 1);
    if (res->body) {
        memcpy(res->body, text, n + 1);
        res->body_len = n;
        res->status = 200;
        res->content_type = "application/json";
    } else {
        respond_error(res, false, 500, NULL, "out of memory");
    }
    cJSON_free(text);
}

static bool gather_poll(void *ctx, struct http_conn *c, struct http_response *res) {
    struct gather *g = ctx;
    if (!http_conn_gone(c))
        for (int i = 0; i < g->n; i++) {
            struct upstream_status st;
            upstream_xfer_status(g->x[i], &st);
            if (st.state != UPSTREAM_DONE && st.state != UPSTREAM_FAILED)
                return false;
        }
    if (g->metrics)
        merged_metrics(g, res);
    else
        merged_models(g, res);
    return true;
}

static void start_gather(struct router *r, const struct http_request *req, struct http_response *res,
                         bool metrics, const char *model) {
    struct gather *g = ci_calloc(1, sizeof *g);
    if (!g || !(g->w = http_conn_waker(req->conn)) || (model && !(g->model = ci_strdup(model)))) {
        if (g)
            http_waker_release(g->w);
        ci_free(g);
        respond_error(res, false, 500, NULL, "out of memory");
        return;
    }
    g->r = r;
    g->metrics = metrics;
    for (int k = 0; k < r->n; k++) {
        struct router_replica_stats st;
        router_policy_stats(r->policy, k, &st);
        if (!st.healthy)
            continue;
        char url[1200];
        snprintf(url, sizeof url, "%s%s", r->urls[k], metrics ? "/metrics" : "/v1/models");
        const char *auth = http_conn_header(req->conn, "Authorization");
        char hdr[1100];
        const char *hs[1] = {hdr};
        if (auth)
            snprintf(hdr, sizeof hdr, "Authorization: %.1000s", auth);
        struct upstream_request rq = {.url = url,
                                      .method = "GET",
                                      .headers = hs,
                                      .n_headers = auth ? 1 : 0,
                                      .connect_timeout_ms = r->connect_timeout_ms,
                                      .timeout_ms = 10000,
                                      .notify = http_waker_wake,
                                      .notify_ctx = g->w};
        struct ci_err ce = {0};
        if (upstream_start(r->up, &rq, &g->x[g->n], &ce) == CI_OK)
            g->replica[g->n++] = k;
    }
    res->poll = gather_poll;
    res->poll_ctx = g;
    res->poll_free = gather_free;
}

static void on_models(void *app, const struct http_request *req, struct http_response *res) {
    start_gather(app, req, res, false, NULL);
}

/* GET /v1/models/NAME: the replicas' lists gathered as for /v1/models, then that model's merged object (with
 * the replicas serving it), or the 404 cinfer serve gives for a name it does not serve. */
static void on_model(void *app, const struct http_request *req, struct http_response *res) {
    start_gather(app, req, res, false, req->path + strlen("/v1/models/"));
}

static void on_metrics(void *app, const struct http_request *req, struct http_response *res) {
    start_gather(app, req, res, true, NULL);
}

static void on_health(void *app, const struct http_request *req, struct http_response *res) {
    (void)req;
    struct router *r = app;
    int up = router_policy_n_healthy(r->policy);
    char *b = ci_malloc(96);
    if (!b) {
        respond_error(res, false, 500, NULL, "out of memory");
        return;
    }
    res->body_len = (size_t)snprintf(b, 96, "{\"status\":\"%s\",\"replicas_up\":%d,\"replicas\":%d}",
                                     up > 0 ? "ok" : "no replica", up, r->n);
    res->body = b;
    res->status = up > 0 ? 200 : 503;
    if (up == 0)
        res->retry_after_s = 1;
}

static const struct http_route table[] = {
    {"/v1/chat/completions", "POST", true, on_forward},
    {"/v1/completions", "POST", true, on_forward},
    {"/v1/embeddings", "POST", true, on_forward},
    {"/v1/messages", "POST", true, on_forward},
    {"/v1/messages/count_tokens", "POST", true, on_forward},
    {"/tokenize", "POST", true, on_forward},
    {"/detokenize", "POST", true, on_forward},
    {"/v1/models", "GET", true, on_models},
    {"/v1/models/", "GET", true, on_model},
    {"/health", "GET", false, on_health},
    {"/metrics", "GET", false, on_metrics},
};

const struct http_route *router_table(int *n_routes) {
    *n_routes = (int)(sizeof table / sizeof table[0]);
    return table;
}

enum ci_status router_create(const struct router_config *c, struct router **out, struct ci_err *err) {
    *out = NULL;
    openai_init();
    struct router *r = ci_calloc(1, sizeof *r);
    if (!r || !(r->urls = ci_calloc((size_t)c->n_replicas, sizeof *r->urls))) {
        ci_free(r);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    r->n = c->n_replicas;
    r->connect_timeout_ms = c->connect_timeout_ms;
    r->rp = (struct router_prompt){c->m, c->tmpl, c->jinja, c->block_size,
                                   c->jinja && c->m && chat_prompt_object_arguments(c->m, c->jinja)};
    atomic_init(&r->n_unroutable, 0);
    enum ci_status s = CI_OK;
    for (int k = 0; k < r->n && s == CI_OK; k++)
        if (!(r->urls[k] = ci_strdup(c->replicas[k])))
            s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    struct router_policy_options po = {c->policy,      c->n_replicas, c->table_entries,
                                       c->balance_abs, c->kv_high,    c->min_match};
    if (s == CI_OK)
        s = router_policy_create(&po, &r->policy, err);
    if (s == CI_OK)
        s = upstream_create(&r->up, err);
    if (s == CI_OK)
        s = router_health_start((const char *const *)r->urls, r->n, c->health_interval_ms,
                                c->connect_timeout_ms > 0 ? 2 * c->connect_timeout_ms : 2000, r->policy,
                                &r->health, err);
    if (s != CI_OK) {
        router_free(r);
        return s;
    }
    *out = r;
    return CI_OK;
}

int router_wait_health(struct router *r, int timeout_ms) {
    router_health_wait_first(r->health, timeout_ms);
    return router_policy_n_healthy(r->policy);
}

void router_free(struct router *r) {
    if (!r)
        return;
    router_health_stop(r->health);
    upstream_free(r->up);
    router_policy_free(r->policy);
    for (int k = 0; k < r->n; k++)
        ci_free(r->urls[k]);
    ci_free(r->urls);
    ci_free(r);
}
