/* The router's libcurl multi thread (router_upstream.h).  Every curl call on a transfer's easy handle and on
 * the multi handle happens on the upstream thread; other threads only queue work under u->lock and wake it
 * (curl_multi_wakeup), and read a transfer's response under x->lock. */
#include "server/router_upstream.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/mem.h"

struct upstream_xfer {
    struct upstream *u;
    pthread_mutex_t lock;
    int refs;                   // the owner and the upstream thread
    bool released;              // the owner let go: abort, never notify again
    bool added;                 // in the multi handle (upstream thread only)
    bool paused, unpause;       // the write callback paused it; the reader drained it: resume
    struct upstream_xfer *next; // in u's list
    CURL *easy;
    struct curl_slist *hdrs;
    char *url, *body;
    size_t body_len;
    void (*notify)(void *ctx);
    void *notify_ctx;
    struct upstream_status st;
    char *buf; // [cap] body bytes not yet read: buf[off .. len)
    size_t off, len, cap;
    char curl_err[CURL_ERROR_SIZE];
};

struct upstream {
    pthread_t thread;
    bool started;
    CURLM *multi;
    pthread_mutex_t lock;
    struct upstream_xfer *list; // every transfer the thread holds
    bool stop;
};

static void notify(struct upstream_xfer *x) { // x->lock held
    if (!x->released && x->notify)
        x->notify(x->notify_ctx);
}

static void xfer_unref(struct upstream_xfer *x) {
    pthread_mutex_lock(&x->lock);
    int left = --x->refs;
    pthread_mutex_unlock(&x->lock);
    if (left > 0)
        return;
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdrs);
    pthread_mutex_destroy(&x->lock);
    ci_free(x->url);
    ci_free(x->body);
    ci_free(x->buf);
    ci_free(x);
}

static size_t on_header(char *data, size_t size, size_t n, void *ctx) {
    struct upstream_xfer *x = ctx;
    size_t len = size * n;
    pthread_mutex_lock(&x->lock);
    x->st.got_bytes = true;
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) { // a new head (after a 1xx one, the real one)
        const char *sp = memchr(data, ' ', len);
        x->st.http_status = sp ? atoi(sp + 1) : 0;
        x->st.content_type[0] = '\0';
        x->st.retry_after_s = 0;
    } else if (len <= 2 && (data[0] == '\r' || data[0] == '\n')) { // the head's end
        if (x->st.http_status >= 200 && x->st.state == UPSTREAM_PENDING) {
            x->st.state = UPSTREAM_BODY;
            notify(x);
        }
    } else {
        const char *colon = memchr(data, ':', len);
        size_t name = colon ? (size_t)(colon - data) : 0;
        if (colon) {
            const char *v = colon + 1, *end = data + len;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
                end--;
            size_t vn = (size_t)(end - v);
            if (name == 12 && strncasecmp(data, "content-type", 12) == 0 && vn < sizeof x->st.content_type) {
                memcpy(x->st.content_type, v, vn);
                x->st.content_type[vn] = '\0';
            } else if (name == 11 && strncasecmp(data, "retry-after", 11) == 0 && vn > 0 && vn < 8) {
                char t[8];
                memcpy(t, v, vn);
                t[vn] = '\0';
                x->st.retry_after_s = atoi(t);
            }
        }
    }
    pthread_mutex_unlock(&x->lock);
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
    struct upstream_xfer *x = ctx;
    size_t len = size * n, ret = len;
    pthread_mutex_lock(&x->lock);
    x->st.got_bytes = true;
    if (x->released) {
        ret = 0; // aborts the transfer
    } else if (x->len - x->off >= UPSTREAM_MAX_BUFFER) {
        x->paused = true; // the client reads slowly: curl keeps these bytes until resumed
        ret = CURL_WRITEFUNC_PAUSE;
    } else {
        if (x->off > 0 && x->off == x->len)
            x->off = x->len = 0;
        if (x->len + len > x->cap && x->off > 0) { // slide what is unread to the front first
            memmove(x->buf, x->buf + x->off, x->len - x->off);
            x->len -= x->off;
            x->off = 0;
        }
        if (x->len + len > x->cap) {
            size_t cap = x->cap ? x->cap : 4096;
            while (cap < x->len + len)
                cap *= 2;
            char *grown = ci_realloc(x->buf, cap);
            if (!grown) {
                snprintf(x->st.error, sizeof x->st.error, "out of memory buffering the replica's answer");
                pthread_mutex_unlock(&x->lock);
                return 0;
            }
            x->buf = grown;
            x->cap = cap;
        }
        memcpy(x->buf + x->len, data, len);
        x->len += len;
        if (x->st.state == UPSTREAM_PENDING)
            x->st.state = UPSTREAM_BODY; // a body without a head we understood
        x->st.buffered = x->len - x->off;
        notify(x);
    }
    pthread_mutex_unlock(&x->lock);
    return ret;
}

static void finish(struct upstream *u, struct upstream_xfer *x, CURLcode rc) {
    if (x->added)
        curl_multi_remove_handle(u->multi, x->easy);
    x->added = false;
    pthread_mutex_lock(&x->lock);
    if (rc == CURLE_OK && x->st.state != UPSTREAM_FAILED) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        if (x->st.http_status == 0)
            x->st.http_status = (int)code;
        x->st.state = UPSTREAM_DONE;
    } else {
        x->st.state = UPSTREAM_FAILED;
        if (!x->st.error[0])
            snprintf(x->st.error, sizeof x->st.error, "%.150s",
                     x->curl_err[0] ? x->curl_err : curl_easy_strerror(rc));
    }
    notify(x);
    pthread_mutex_unlock(&x->lock);
}

/* Takes x out of the list and drops the thread's reference. */
static void drop(struct upstream *u, struct upstream_xfer *x) {
    pthread_mutex_lock(&u->lock);
    for (struct upstream_xfer **l = &u->list; *l; l = &(*l)->next)
        if (*l == x) {
            *l = x->next;
            break;
        }
    pthread_mutex_unlock(&u->lock);
    xfer_unref(x);
}

/* New transfers join the multi handle; released ones leave it; drained paused ones resume. */
static void service(struct upstream *u) {
    for (;;) {
        struct upstream_xfer *gone = NULL;
        pthread_mutex_lock(&u->lock);
        for (struct upstream_xfer *x = u->list; x; x = x->next) {
            pthread_mutex_lock(&x->lock);
            bool released = x->released || u->stop, unpause = x->unpause;
            bool done = x->st.state == UPSTREAM_DONE || x->st.state == UPSTREAM_FAILED;
            x->unpause = false;
            pthread_mutex_unlock(&x->lock);
            if (released || (done && !x->added)) {
                gone = x;
                break;
            }
            if (!x->added && !done) {
                if (curl_multi_add_handle(u->multi, x->easy) == CURLM_OK) {
                    x->added = true;
                } else {
                    pthread_mutex_lock(&x->lock);
                    x->st.state = UPSTREAM_FAILED;
                    snprintf(x->st.error, sizeof x->st.error, "cannot start the transfer");
                    notify(x);
                    pthread_mutex_unlock(&x->lock);
                }
            } else if (unpause) {
                pthread_mutex_lock(&x->lock);
                x->paused = false;
                pthread_mutex_unlock(&x->lock);
                curl_easy_pause(x->easy, CURLPAUSE_CONT);
            }
        }
        pthread_mutex_unlock(&u->lock);
        if (!gone)
            return;
        if (gone->added)
            curl_multi_remove_handle(u->multi, gone->easy);
        gone->added = false;
        drop(u, gone);
    }
}

static void *run(void *arg) {
    struct upstream *u = arg;
    for (;;) {
        service(u);
        pthread_mutex_lock(&u->lock);
        bool stop = u->stop && !u->list;
        pthread_mutex_unlock(&u->lock);
        if (stop)
            break;
        int running = 0;
        curl_multi_perform(u->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(u->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            struct upstream_xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = m->data.result;
            if (x)
                finish(u, x, rc);
        }
        curl_multi_poll(u->multi, NULL, 0, 500, NULL);
    }
    return NULL;
}

enum ci_status upstream_create(struct upstream **out, struct ci_err *err) {
    *out = NULL;
    struct upstream *u = ci_calloc(1, sizeof *u);
    if (!u)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&u->lock, NULL);
    if (!(u->multi = curl_multi_init())) {
        upstream_free(u);
        return ci_err_set(err, CI_ERR_INTERNAL, "curl_multi_init failed");
    }
    if (pthread_create(&u->thread, NULL, run, u) != 0) {
        upstream_free(u);
        return ci_err_set(err, CI_ERR_INTERNAL, "cannot start the upstream thread");
    }
    u->started = true;
    *out = u;
    return CI_OK;
}

void upstream_free(struct upstream *u) {
    if (!u)
        return;
    if (u->started) {
        pthread_mutex_lock(&u->lock);
        u->stop = true;
        pthread_mutex_unlock(&u->lock);
        curl_multi_wakeup(u->multi);
        pthread_join(u->thread, NULL);
    }
    if (u->multi)
        curl_multi_cleanup(u->multi);
    pthread_mutex_destroy(&u->lock);
    ci_free(u);
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = ci_malloc(n + 1);
    if (d) {
        if (n)
            memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

enum ci_status upstream_start(struct upstream *u, const struct upstream_request *rq,
                              struct upstream_xfer **out, struct ci_err *err) {
    *out = NULL;
    struct upstream_xfer *x = ci_calloc(1, sizeof *x);
    if (!x)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&x->lock, NULL);
    x->refs = 2;
    x->u = u;
    x->notify = rq->notify;
    x->notify_ctx = rq->notify_ctx;
    bool post = strcmp(rq->method, "POST") == 0;
    x->url = dup_bytes(rq->url, strlen(rq->url));
    x->body = post ? dup_bytes(rq->body ? rq->body : "", rq->body_len) : NULL;
    x->body_len = rq->body_len;
    x->easy = curl_easy_init();
    bool ok = x->url && (!post || x->body) && x->easy;
    // No "Expect: 100-continue" round trip for larger bodies: the replica answers at once.
    struct curl_slist *h = ok ? curl_slist_append(NULL, "Expect:") : NULL;
    ok = ok && h;
    for (int i = 0; ok && i < rq->n_headers; i++) {
        struct curl_slist *more = curl_slist_append(h, rq->headers[i]);
        ok = more != NULL;
        if (more)
            h = more;
    }
    x->hdrs = h;
    CURL *e = x->easy;
    ok = ok && curl_easy_setopt(e, CURLOPT_URL, x->url) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)x) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)x) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)x) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
         // the body passes through as the replica sent it (no decoding of a Content-Encoding)
         curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms) == CURLE_OK &&
         curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, rq->timeout_ms) == CURLE_OK &&
         (!post || (curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body) == CURLE_OK &&
                    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len) == CURLE_OK));
    if (!ok) {
        x->refs = 1;
        xfer_unref(x);
        return ci_err_set(err, CI_ERR_NOMEM, "cannot set up a request to %s", rq->url);
    }
    pthread_mutex_lock(&u->lock);
    x->next = u->list;
    u->list = x;
    pthread_mutex_unlock(&u->lock);
    curl_multi_wakeup(u->multi);
    *out = x;
    return CI_OK;
}

void upstream_xfer_status(struct upstream_xfer *x, struct upstream_status *out) {
    pthread_mutex_lock(&x->lock);
    *out = x->st;
    out->buffered = x->len - x->off;
    pthread_mutex_unlock(&x->lock);
}

size_t upstream_xfer_read(struct upstream_xfer *x, char *buf, size_t max) {
    pthread_mutex_lock(&x->lock);
    size_t n = x->len - x->off;
    if (n > max)
        n = max;
    if (n > 0)
        memcpy(buf, x->buf + x->off, n);
    x->off += n;
    bool resume = x->paused && x->len - x->off < UPSTREAM_MAX_BUFFER / 2;
    if (resume)
        x->unpause = true;
    pthread_mutex_unlock(&x->lock);
    if (resume)
        curl_multi_wakeup(x->u->multi);
    return n;
}

void upstream_xfer_release(struct upstream_xfer *x) {
    if (!x)
        return;
    struct upstream *u = x->u;
    pthread_mutex_lock(&x->lock);
    x->released = true;
    x->notify = NULL;
    pthread_mutex_unlock(&x->lock);
    curl_multi_wakeup(u->multi);
    xfer_unref(x);
}
