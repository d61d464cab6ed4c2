/* The router's health thread (router_health.h): blocking libcurl requests, one replica after the other,
 * on its own thread so no client request ever waits for a check. */
#include "server/router_health.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/mem.h"
#include "server/router_metrics.h"

struct router_health {
    const char *const *urls;
    int n, interval_ms, timeout_ms;
    struct router_policy *p;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop, first_done;
    bool up[ROUTER_MAX_REPLICAS]; // as last logged
};

struct body {
    char *p;
    size_t len;
    bool too_big;
};

static size_t collect(char *data, size_t size, size_t n, void *ctx) {
    struct body *b = ctx;
    size_t len = size * n;
    if (b->len + len > (8u << 20)) { // a /metrics this large is not a replica's
        b->too_big = true;
        return 0;
    }
    char *g = ci_realloc(b->p, b->len + len + 1);
    if (!g)
        return 0;
    b->p = g;
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

/* GET base+path: the status (0: no answer), the body into *b (the caller frees b->p). */
static long get(const struct router_health *h, const char *base, const char *path, struct body *b) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *e = curl_easy_init();
    long code = 0;
    if (!e)
        return 0;
    if (curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)b) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)h->timeout_ms) == CURLE_OK &&
        curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(e);
    return code;
}

static void check(struct router_health *h, int r) {
    struct body b = {0};
    bool up = get(h, h->urls[r], "/health", &b) == 200;
    ci_free(b.p);
    if (up) {
        struct body m = {0};
        double kv = 0, running = 0, waiting = 0;
        if (get(h, h->urls[r], "/metrics", &m) == 200 && m.p) {
            router_metrics_value(m.p, m.len, "cinfer:kv_cache_usage_perc", &kv);
            router_metrics_value(m.p, m.len, "cinfer:num_requests_running", &running);
            router_metrics_value(m.p, m.len, "cinfer:num_requests_waiting", &waiting);
        }
        ci_free(m.p);
        router_policy_set_load(h->p, r, kv, (int)running, (int)waiting);
    }
    router_policy_set_healthy(h->p, r, up);
    if (up != h->up[r]) {
        fprintf(stderr, "cinfer router: replica %s is %s\n", h->urls[r], up ? "up" : "DOWN");
        fflush(stderr);
        h->up[r] = up;
    }
}

static void *run(void *arg) {
    struct router_health *h = arg;
    for (;;) {
        for (int r = 0; r < h->n; r++)
            check(h, r);
        pthread_mutex_lock(&h->lock);
        h->first_done = true;
        pthread_cond_broadcast(&h->cond);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)h->interval_ms * 1000000LL;
        until.tv_sec += (time_t)(ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
        while (!h->stop && pthread_cond_timedwait(&h->cond, &h->lock, &until) == 0)
            ;
        bool stop = h->stop;
        pthread_mutex_unlock(&h->lock);
        if (stop)
            return NULL;
    }
}

enum ci_status router_health_start(const char *const *urls, int n, int interval_ms, int timeout_ms,
                                   struct router_policy *p, struct router_health **out, struct ci_err *err) {
    *out = NULL;
    struct router_health *h = ci_calloc(1, sizeof *h);
    if (!h)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    *h = (struct router_health){
        .urls = urls, .n = n, .interval_ms = interval_ms, .timeout_ms = timeout_ms, .p = p};
    for (int r = 0; r < n; r++)
        h->up[r] = true; // the policy's start: a replica down at start is logged
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    if (pthread_create(&h->thread, NULL, run, h) != 0) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        ci_free(h);
        return ci_err_set(err, CI_ERR_INTERNAL, "cannot start the health-check thread");
    }
    *out = h;
    return CI_OK;
}

void router_health_wait_first(struct router_health *h, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = until.tv_nsec + (long long)timeout_ms * 1000000LL;
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&h->lock);
    while (!h->first_done && pthread_cond_timedwait(&h->cond, &h->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&h->lock);
}

void router_health_stop(struct router_health *h) {
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    ci_free(h);
}
