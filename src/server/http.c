/* libmicrohttpd daemon, routing, body limit, authentication, waiting without threads, and the defences
 * against clients that hold connections.  See http.h.
 *
 * A request's life: the first access-handler call (headers only) picks the route and decides any early
 * error (404, 405, 401, 413 from Content-Length); the body calls either buffer the body (up to the limit)
 * or drain it; the last call runs the handler, or sends the error decided earlier.  Errors are sent only
 * after the body has been read, so a client that is still sending never meets a reset connection before it
 * reads the answer; a body far past the limit (DRAIN_FACTOR times) closes the connection instead.
 *
 * Waiting: a handler's poll, or a stream's fill, that has nothing yet suspends the connection under its
 * waker's lock; http_waker_wake resumes it (or, when it came before the suspension, makes the next
 * suspension a no-op), so a wake can never fall between "nothing yet" and the sleep.
 *
 * The watchdog thread, every WATCH_MS: closes (shutdown) connections that have not delivered a whole
 * request within request_timeout_s, and checks the sockets of suspended requests for a hang-up, which
 * libmicrohttpd does not watch while a connection is suspended, waking them so they cancel their work. */
#include "server/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "server/anthropic.h"
#include "server/openai.h"

#define DRAIN_FACTOR 16 // over-limit bytes drained before the connection is dropped, × the limit
#define STREAM_BLOCK (16 * 1024)
#define GRACE_MS     2000 // at shutdown, the longest wait for in-flight requests to answer
#define WATCH_MS     50   // the watchdog's period: how soon a hang-up or a passed deadline is acted on

struct http_waker {
    atomic_int refs;
    pthread_mutex_t lock;
    struct MHD_Connection *mc; // NULL once the request is over: wakes do nothing
    bool suspended;            // the connection sleeps; a wake resumes it
    bool woken;                // a wake came while it was not asleep: the next sleep is skipped
};

/* One client connection (its socket context), on the server's list from open to close. */
struct http_sock {
    struct http_sock *prev, *next;
    int fd;
    int64_t deadline_ns;   // a whole request must be in by then; 0 while a request is being answered
    struct http_conn *req; // the request being answered, or NULL
};

struct http_server {
    struct MHD_Daemon *d;
    struct http_options o;
    char *api_key; // NULL: no authentication
    char *allow_origin;
    const struct http_route *routes;
    int n_routes;
    void *app;
    int port;
    atomic_bool stopping;
    int quiesced_fd;      // the listening socket handed back by MHD_quiesce_daemon, closed after the stop
    atomic_int n_active;  // requests between their first call and their completion
    pthread_mutex_t lock; // socks, and each sock's fields
    struct http_sock *socks;
    int n_socks;
    struct pollfd *watch; // [watch_cap = max_connections] the watchdog's poll set
    int watch_cap;
    pthread_t watchdog;
    bool watchdog_started;
    pthread_cond_t watchdog_cv;    // signalled to stop it
    atomic_long n_deadline_closed; // connections closed for not sending a whole request in time
};

struct http_conn {
    struct http_server *srv;
    struct MHD_Connection *mc;
    struct http_sock *sock;
    struct http_waker *w; // this request's (one reference)
    atomic_bool gone;     // the watchdog saw the client hang up
    const struct http_route *route;
    struct openai_error early; // early.status != 0: the answer is decided, the body is drained
    const char *allow;
    bool options;   // a CORS preflight
    bool anthropic; // the path is /v1/messages or under it: errors in Anthropic's shape
    bool complete;  // the whole request is in
    bool handled;   // the route's handler has run
    char *body;     // [cap]
    size_t len, cap;
    uint64_t content_length; // the Content-Length header (0 if absent)
    uint64_t drained;
    http_poll_fn poll; // a deferred answer still to come
    void *poll_ctx;
    void (*poll_free)(void *ctx);
};

static const char oom_body[] =
    "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";

/* The state of every request whose own could not be allocated: its body is drained and it gets a static
 * 500 (never written to, so one object serves any number of connections). */
static struct http_conn oom_conn;

/* A streaming response's context, owned by the MHD response. */
struct stream_wrap {
    struct http_conn *conn;
    http_fill_fn fill;
    void *ctx;
    void (*free_fn)(void *ctx);
};

/* ---- wakers ------------------------------------------------------------------------------------------- */

static struct http_waker *waker_new(struct MHD_Connection *mc) {
    struct http_waker *w = ci_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (pthread_mutex_init(&w->lock, NULL) != 0) {
        ci_free(w);
        return NULL;
    }
    atomic_init(&w->refs, 1);
    w->mc = mc;
    return w;
}

struct http_waker *http_conn_waker(struct http_conn *c) {
    atomic_fetch_add(&c->w->refs, 1);
    return c->w;
}

void http_waker_release(struct http_waker *w) {
    if (w && atomic_fetch_sub(&w->refs, 1) == 1) {
        pthread_mutex_destroy(&w->lock);
        ci_free(w);
    }
}

void http_waker_wake(void *waker) {
    struct http_waker *w = waker;
    pthread_mutex_lock(&w->lock);
    if (w->mc && w->suspended) {
        w->suspended = false;
        MHD_resume_connection(w->mc);
    } else {
        w->woken = true;
    }
    pthread_mutex_unlock(&w->lock);
}

/* The request has nothing to say yet: suspends its connection, unless a wake came in the meantime or the
 * request must finish (client gone, server stopping).  false: do not sleep, look again now. */
static bool conn_sleep(struct http_conn *c) {
    struct http_waker *w = c->w;
    bool must_finish = atomic_load(&c->gone) || atomic_load(&c->srv->stopping);
    pthread_mutex_lock(&w->lock);
    bool sleep = !w->woken && !must_finish;
    w->woken = false;
    if (sleep) {
        MHD_suspend_connection(c->mc);
        w->suspended = true;
    }
    pthread_mutex_unlock(&w->lock);
    return sleep;
}

/* ---- connections (the watchdog's view) ---------------------------------------------------------------- */

static int64_t request_deadline(const struct http_server *s) {
    return ci_now_ns() + (int64_t)s->o.request_timeout_s * 1000000000ll;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    struct http_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct http_sock *k = ci ? ci_calloc(1, sizeof *k) : NULL;
        if (!k)
            return; // unwatched: only the inactivity timeout applies to it
        k->fd = ci->connect_fd;
        pthread_mutex_lock(&s->lock);
        k->deadline_ns = request_deadline(s);
        k->next = s->socks;
        if (s->socks)
            s->socks->prev = k;
        s->socks = k;
        s->n_socks++;
        pthread_mutex_unlock(&s->lock);
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        struct http_sock *k = *socket_context;
        pthread_mutex_lock(&s->lock); // the watchdog never touches a socket after this
        if (k->prev)
            k->prev->next = k->next;
        else
            s->socks = k->next;
        if (k->next)
            k->next->prev = k->prev;
        s->n_socks--;
        pthread_mutex_unlock(&s->lock);
        ci_free(k);
        *socket_context = NULL;
    }
}

static struct http_sock *sock_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* One pass: deadlines, then the hang-ups of sleeping requests (s->lock held). */
static void watch_once(struct http_server *s) {
    int64_t now = ci_now_ns();
    int n = 0;
    for (struct http_sock *k = s->socks; k; k = k->next) {
        if (k->deadline_ns && now > k->deadline_ns) {
            // libmicrohttpd sees the socket end and closes the connection; the fd stays valid until then.
            shutdown(k->fd, SHUT_RDWR);
            k->deadline_ns = 0;
            atomic_fetch_add(&s->n_deadline_closed, 1);
            CI_LOG_DEBUG("http: closed a connection that sent no complete request in %d s",
                         s->o.request_timeout_s);
        }
        if (k->req && !atomic_load(&k->req->gone) && n < s->watch_cap)
            s->watch[n++] = (struct pollfd){.fd = k->fd, .events = POLLRDHUP};
    }
    if (n == 0 || poll(s->watch, (nfds_t)n, 0) <= 0)
        return;
    int i = 0;
    for (struct http_sock *k = s->socks; k && i < n; k = k->next) {
        if (!k->req || atomic_load(&k->req->gone) || s->watch[i].fd != k->fd)
            continue;
        if (s->watch[i++].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
            atomic_store(&k->req->gone, true);
            http_waker_wake(k->req->w);
        }
    }
}

static void *watchdog_main(void *arg) {
    struct http_server *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stopping)) {
        watch_once(s);
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_nsec += WATCH_MS * 1000000l;
        at.tv_sec += at.tv_nsec / 1000000000l;
        at.tv_nsec %= 1000000000l;
        pthread_cond_timedwait(&s->watchdog_cv, &s->lock, &at);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Wakes every request (shutdown: each sees http_conn_stopping and finishes). */
static void wake_all(struct http_server *s) {
    pthread_mutex_lock(&s->lock);
    for (struct http_sock *k = s->socks; k; k = k->next)
        if (k->req)
            http_waker_wake(k->req->w);
    pthread_mutex_unlock(&s->lock);
}

/* Every byte of the key is compared whatever the token holds: the time depends on the key's length only. */
static bool key_equal(const char *tok, const char *key) {
    size_t n_tok = strlen(tok), n_key = strlen(key);
    unsigned diff = n_tok != n_key;
    for (size_t i = 0; i < n_key; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < n_tok ? tok[i] : 0);
    return diff == 0;
}

bool http_auth_ok(const char *header, const char *key) {
    if (!key || !*key)
        return true;
    if (!header || strncasecmp(header, "Bearer ", 7) != 0)
        return false;
    const char *tok = header + 7;
    while (*tok == ' ')
        tok++;
    return key_equal(tok, key);
}

bool http_api_key_ok(const char *authorization, const char *x_api_key, const char *key) {
    if (!key || !*key)
        return true;
    // Both are compared, so the time does not tell which header was checked.
    bool bearer = http_auth_ok(authorization, key);
    bool plain = x_api_key && key_equal(x_api_key, key);
    return bearer || plain;
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    // Client hang-ups and resets are routine for a server: only worth seeing when debugging.
    CI_LOG_DEBUG("http: %s", line);
}

static const struct http_route *find_route(const struct http_server *s, const char *path) {
    for (int i = 0; i < s->n_routes; i++) {
        const struct http_route *r = &s->routes[i];
        size_t n = strlen(r->path);
        bool match = n > 1 && r->path[n - 1] == '/' ? strncmp(path, r->path, n) == 0 && path[n] != '\0'
                                                    : strcmp(path, r->path) == 0;
        if (match)
            return r;
    }
    return NULL;
}

static bool method_ok(const struct http_route *r, const char *method) {
    return strcmp(method, r->method) == 0 || (strcmp(r->method, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

static const char *allow_header(const struct http_route *r) {
    return strcmp(r->method, "GET") == 0 ? "GET, HEAD" : r->method;
}

/* streaming: the body is r's fill (which send_response has handed to the MHD response by now). */
static void add_headers(const struct http_server *s, struct MHD_Response *resp, const struct http_response *r,
                        bool streaming) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (r->allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", r->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (streaming) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no"); // proxies must not hold the stream back
    }
    if (s->allow_origin) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, s->allow_origin);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream_wrap *w = cls;
    for (;;) {
        ssize_t n = w->fill(w->ctx, w->conn, buf, max);
        if (n == HTTP_FILL_WAIT) {
            if (conn_sleep(w->conn))
                return 0; // resumed by a wake; libmicrohttpd asks again then
            continue;
        }
        if (n == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (n < 0) {
            // libmicrohttpd 0.9.75 closes the connection but frees it only when its event loop looks at it
            // again, and a connection that was suspended is in no epoll set: without a timeout of its own it
            // would wait for the inactivity timeout, its socket counting against the connection limits.
            // A connection with a timeout of its own (not the daemon's) is looked at on every pass of the loop.
            unsigned own = w->conn->srv->o.timeout_s == 1 ? 2u : 1u;
            MHD_set_connection_option(w->conn->mc, MHD_CONNECTION_OPTION_TIMEOUT, own);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        return n;
    }
}

static void stream_free(void *cls) {
    struct stream_wrap *w = cls;
    if (w->free_fn)
        w->free_fn(w->ctx);
    ci_free(w);
}

static void free_response_parts(struct http_response *r) {
    ci_free(r->body);
    r->body = NULL;
    if (r->fill && r->fill_free)
        r->fill_free(r->fill_ctx);
    r->fill = NULL;
    if (r->poll && r->poll_free)
        r->poll_free(r->poll_ctx);
    r->poll = NULL;
}

static enum MHD_Result send_response(struct http_conn *c, struct http_response *r) {
    struct MHD_Response *resp = NULL;
    struct stream_wrap *w = r->fill ? ci_calloc(1, sizeof *w) : NULL;
    if (r->fill && !w) { // no stream: the client gets a 500 rather than a closed connection
        free_response_parts(r);
        *r = (struct http_response){.status = 500, .static_body = oom_body};
    }
    bool streaming = r->fill != NULL;
    if (r->fill) {
        *w = (struct stream_wrap){c, r->fill, r->fill_ctx, r->fill_free};
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, w, stream_free);
        if (!resp)
            ci_free(w);
        else
            r->fill = NULL; // owned by the response now
    } else if (r->body) {
        resp = MHD_create_response_from_buffer_with_free_callback(r->body_len, r->body, ci_free);
        if (resp)
            r->body = NULL;
    } else {
        const char *b = r->static_body ? r->static_body : "";
        resp = MHD_create_response_from_buffer(strlen(b), (void *)(uintptr_t)b, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) {
        free_response_parts(r);
        return MHD_NO;
    }
    add_headers(c->srv, resp, r, streaming);
    free_response_parts(r);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* The 500 of a request that has no struct http_conn. */
static enum MHD_Result send_oom(struct http_server *s, struct MHD_Connection *mc) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        sizeof oom_body - 1, (void *)(uintptr_t)oom_body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    add_headers(s, resp, &(struct http_response){.status = 500}, false);
    enum MHD_Result ok = MHD_queue_response(mc, 500, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result send_error(struct http_conn *c, const struct openai_error *e, const char *allow) {
    struct http_response r = {.status = e->status, .allow = allow};
    r.body = c->anthropic ? anthropic_error_json(e, &r.body_len) : openai_error_json(e, &r.body_len);
    if (!r.body) {
        r.status = 500;
        r.static_body = oom_body;
    }
    return send_response(c, &r);
}

static bool body_append(struct http_conn *c, const char *data, size_t n) {
    size_t need;
    if (!ci_add_size(c->len, n, &need) || !ci_add_size(need, 1, &need))
        return false;
    if (need > c->cap) {
        size_t cap = c->cap ? c->cap : 1024;
        while (cap < need)
            cap *= 2;
        if (cap > c->srv->o.max_body_bytes + 1)
            cap = c->srv->o.max_body_bytes + 1;
        char *grown = ci_realloc(c->body, cap);
        if (!grown)
            return false;
        c->body = grown;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = '\0';
    return true;
}

/* Headers are in: pick the route and decide the answer when it is already known. */
static void first_call(struct http_conn *c, const char *url, const char *method) {
    struct http_server *s = c->srv;
    struct openai_error *e = &c->early;
    const char *len_hdr = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const struct http_route *r = c->route = find_route(s, url);
    c->content_length = len_hdr ? strtoull(len_hdr, NULL, 10) : 0;
    c->anthropic = anthropic_path(url);
    if (!r) {
        openai_error_set(e, 404, NULL, "not_found", "no route %.64s %.200s", method, url);
    } else if (s->allow_origin && strcmp(method, "OPTIONS") == 0) {
        c->options = true;
    } else if (!method_ok(r, method)) {
        c->allow = allow_header(r);
        openai_error_set(e, 405, NULL, "method_not_allowed", "%.16s is not allowed on %.200s (allowed: %s)",
                         method, url, c->allow);
    } else if (r->auth && s->api_key &&
               !http_api_key_ok(
                   MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                   MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "x-api-key"), s->api_key)) {
        openai_error_set(e, 401, NULL, "invalid_api_key",
                         "missing or wrong API key: send the header 'Authorization: Bearer <key>' or "
                         "'x-api-key: <key>'");
    } else if (c->content_length > s->o.max_body_bytes) {
        openai_error_set(e, 413, NULL, "request_too_large", "the request body is %s bytes, the limit is %zu",
                         len_hdr, s->o.max_body_bytes);
    }
}

/* The handler deferred its answer: asks its poll until it is ready, sleeping in between. */
static enum MHD_Result answer_when_ready(struct http_conn *c) {
    for (;;) {
        struct http_response res = {.status = 200};
        if (c->poll(c->poll_ctx, c, &res)) {
            c->poll = NULL;
            if (c->poll_free)
                c->poll_free(c->poll_ctx);
            res.poll = NULL; // a poll answers with a body or a stream, not another poll
            return send_response(c, &res);
        }
        if (conn_sleep(c))
            return MHD_YES; // called again after the wake
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    struct http_server *s = cls;
    struct http_conn *c = *con_cls;
    if (c == &oom_conn) { // drain the body, then answer 500 (an early answer could meet a reset)
        if (*upload_data_size > 0) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        return send_oom(s, mc);
    }
    if (!c) {
        if (!(c = ci_calloc(1, sizeof *c)) || !(c->w = waker_new(mc))) {
            ci_free(c);
            *con_cls = &oom_conn;
            return MHD_YES;
        }
        c->srv = s;
        c->mc = mc;
        c->sock = sock_of(mc);
        atomic_init(&c->gone, false);
        *con_cls = c;
        atomic_fetch_add(&s->n_active, 1);
        first_call(c, url, method);
        if (c->early.status && c->content_length > (uint64_t)DRAIN_FACTOR * s->o.max_body_bytes)
            return send_error(c, &c->early, NULL); // too much to drain: answer now, the connection closes
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->early.status || c->options) {
            c->drained += n;
        } else if (c->len + n > s->o.max_body_bytes) {
            openai_error_set(&c->early, 413, NULL, "request_too_large",
                             "the request body is over the limit of %zu bytes", s->o.max_body_bytes);
            c->drained = c->len + n;
            ci_free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
        } else if (!body_append(c, upload_data, n)) {
            openai_error_set(&c->early, 500, NULL, NULL, "out of memory");
        }
        if (c->drained > (uint64_t)DRAIN_FACTOR * s->o.max_body_bytes)
            return MHD_NO; // a body far past the limit: drop the connection
        return MHD_YES;
    }
    // The whole request is in: no deadline while it is answered; the watchdog watches for a hang-up.
    if (!c->complete) {
        c->complete = true;
        if (c->sock) {
            pthread_mutex_lock(&s->lock);
            c->sock->deadline_ns = 0;
            c->sock->req = c;
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (c->poll)
        return answer_when_ready(c);
    if (c->handled)
        return MHD_NO; // cannot happen: a handled request has queued its answer or deferred it
    c->handled = true;
    if (c->options) {
        struct http_response r = {.status = 204, .content_type = "text/plain"};
        return send_response(c, &r);
    }
    if (c->early.status)
        return send_error(c, &c->early, c->allow);
    struct http_request req = {method, url, c->body ? c->body : "", c->len, c};
    struct http_response res = {.status = 200};
    c->route->fn(s->app, &req, &res);
    if (res.poll) {
        c->poll = res.poll;
        c->poll_ctx = res.poll_ctx;
        c->poll_free = res.poll_free;
        res.poll = NULL;
        free_response_parts(&res);
        return answer_when_ready(c);
    }
    return send_response(c, &res);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)mc;
    (void)toe;
    struct http_server *s = cls;
    struct http_conn *c = *con_cls;
    *con_cls = NULL;
    if (!c || c == &oom_conn)
        return;
    // From now on a wake does nothing: the connection may go on to its next request, or close.
    pthread_mutex_lock(&c->w->lock);
    c->w->mc = NULL;
    pthread_mutex_unlock(&c->w->lock);
    if (c->sock) {
        pthread_mutex_lock(&s->lock);
        c->sock->req = NULL;
        c->sock->deadline_ns = request_deadline(s); // the next request on this connection, if any
        pthread_mutex_unlock(&s->lock);
    }
    if (c->poll && c->poll_free)
        c->poll_free(c->poll_ctx); // the client went away before the answer
    atomic_fetch_sub(&s->n_active, 1);
    http_waker_release(c->w);
    ci_free(c->body);
    ci_free(c);
    *con_cls = NULL;
}

const char *http_conn_header(struct http_conn *c, const char *name) {
    return MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, name);
}

bool http_conn_gone(struct http_conn *c) {
    if (atomic_load(&c->srv->stopping) || atomic_load(&c->gone))
        return true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

bool http_conn_stopping(const struct http_conn *c) {
    return atomic_load(&c->srv->stopping);
}

static void server_destroy(struct http_server *s) {
    pthread_cond_destroy(&s->watchdog_cv);
    pthread_mutex_destroy(&s->lock);
    ci_free(s->watch);
    ci_free(s->api_key);
    ci_free(s->allow_origin);
    ci_free(s);
}

enum ci_status http_server_start(const struct http_options *o, const struct http_route *routes, int n_routes,
                                 void *app, struct http_server **out, struct ci_err *err) {
    *out = NULL;
    enum ci_status st = CI_OK;
    struct addrinfo *ai = NULL;
    if (o->max_connections < 1 || o->max_connections_per_ip < 0 || o->timeout_s < 1 ||
        o->request_timeout_s < 1 || o->n_threads < 1)
        return ci_err_set(err, CI_ERR_INVALID, "HTTP limits must be positive");
    struct http_server *s = ci_calloc(1, sizeof *s);
    if (!s)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        ci_free(s);
        return ci_err_set(err, CI_ERR_INTERNAL, "cannot create a mutex");
    }
    if (pthread_cond_init(&s->watchdog_cv, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        ci_free(s);
        return ci_err_set(err, CI_ERR_INTERNAL, "cannot create a condition variable");
    }
    s->o = *o;
    s->routes = routes;
    s->n_routes = n_routes;
    s->app = app;
    atomic_init(&s->stopping, false);
    s->quiesced_fd = MHD_INVALID_SOCKET;
    atomic_init(&s->n_active, 0);
    atomic_init(&s->n_deadline_closed, 0);
    if ((o->api_key && *o->api_key && !(s->api_key = ci_strdup(o->api_key))) ||
        (o->allow_origin && !(s->allow_origin = ci_strdup(o->allow_origin)))) {
        st = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->o.api_key = s->api_key;
    s->o.allow_origin = s->allow_origin;
    s->watch_cap = o->max_connections; // libmicrohttpd never holds more sockets
    if (!(s->watch = ci_calloc((size_t)s->watch_cap, sizeof *s->watch))) {
        st = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai != 0) {
        st = ci_err_set(err, CI_ERR_INVALID, "--host '%s': %s", o->host, gai_strerror(gai));
        goto fail;
    }
    // Event-driven: a few threads serve every connection; a waiting request is a suspended connection.
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG |
                     (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL);
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->n_threads, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)o->max_connections_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)o->timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_EXTERNAL_LOGGER,
                            mhd_log, s, MHD_OPTION_END);
    if (!s->d) {
        st = ci_err_set(err, CI_ERR_IO,
                        "cannot listen on %s port %d (in use, or not an address of this host?)", o->host,
                        o->port);
        goto fail;
    }
    if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
        MHD_stop_daemon(s->d);
        st = ci_err_set(err, CI_ERR_INTERNAL, "cannot start the HTTP watchdog thread");
        goto fail;
    }
    s->watchdog_started = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    freeaddrinfo(ai);
    *out = s;
    return CI_OK;
fail:
    if (ai)
        freeaddrinfo(ai);
    server_destroy(s);
    return st;
}

int http_server_port(const struct http_server *s) {
    return s->port;
}

long http_server_deadline_closed(const struct http_server *s) {
    return atomic_load(&s->n_deadline_closed);
}

void http_server_quiesce(struct http_server *s) {
    if (!s || atomic_exchange(&s->stopping, true))
        return;
    // The listening socket is closed only after the daemon stops: its threads may still touch it until then.
    s->quiesced_fd = MHD_quiesce_daemon(s->d);
    wake_all(s); // each sleeping request sees the stop and finishes; none sleeps again
}

void http_server_free(struct http_server *s) {
    if (!s)
        return;
    http_server_quiesce(s);
    // Handlers see the stop at their next look and answer (503, or a stream cut short): give them a moment
    // to get that out before the daemon closes every socket.
    for (int i = 0; i < GRACE_MS / 10 && atomic_load(&s->n_active) > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->watchdog_cv);
    pthread_mutex_unlock(&s->lock);
    if (s->watchdog_started)
        pthread_join(s->watchdog, NULL);
    wake_all(s); // libmicrohttpd must not be stopped with a connection still suspended
    MHD_stop_daemon(s->d);
    if (s->quiesced_fd != MHD_INVALID_SOCKET)
        close(s->quiesced_fd);
    server_destroy(s);
}
