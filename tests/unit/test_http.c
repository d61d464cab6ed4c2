/* The HTTP layer (src/server/http.h) in-process, without a model: http_server_start on a free loopback port with
 * a small route table of the test's own, driven by libcurl and by raw sockets.  Routing (exact paths, path
 * prefixes, the query string ignored), 404 for an unknown path, 405 with the Allow header (RFC 9110 §15.5.6),
 * HEAD on GET routes, API-key authentication (401; the http_auth_ok table: RFC 6750's "Bearer" scheme,
 * case-insensitive), the request-body limit (413 from Content-Length, from a chunked body, at once for a claim
 * far past the limit), Retry-After, CORS preflight, deferred answers and streamed bodies woken from another
 * thread, the deadline for a whole request (a client that trickles or idles is disconnected), the
 * per-address connection limit, and the start-up errors.  Every error body has the OpenAI shape
 * {"error": {"message", "type", "param", "code"}}. */
#include "server/http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/mem.h"
#include "server/openai.h"
#include "test.h"

#define KEY       "sk-test-123"
#define BODY_MAX  1000
#define SECOND_NS 1000000000LL

/* ---- the routes --------------------------------------------------------------------------------------- */

static void h_ok(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    (void)req;
    res->static_body = "{\"ok\":true}";
}

/* Echoes the request body (text/plain), so the test sees exactly what the server buffered. */
static void h_echo(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    res->content_type = "text/plain";
    res->body = ci_malloc(req->body_len + 1);
    if (!res->body) {
        res->status = 500;
        return;
    }
    memcpy(res->body, req->body, req->body_len + 1); // the body is NUL-terminated
    res->body_len = req->body_len;
}

/* Echoes the path (prefix routes). */
static void h_path(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    res->content_type = "text/plain";
    res->body = ci_strdup(req->path);
    res->body_len = res->body ? strlen(res->body) : 0;
}

static void h_busy(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    (void)req;
    res->status = 429;
    res->retry_after_s = 3;
    res->static_body =
        "{\"error\":{\"message\":\"busy\",\"type\":\"rate_limit_error\",\"param\":null,\"code\":null}}";
}

/* A deferred answer or a streamed body, woken by a thread of the test: nothing is ready until the waker
 * thread has made it ready and called http_waker_wake. */
struct later {
    struct http_waker *w;
    pthread_t thread;
    atomic_int ready;  // poll: the answer; fill: chunks released so far
    int sent;          // fill: chunks written
    int n_chunks;      // fill
    atomic_int *freed; // set when the server frees the context
};

static atomic_int later_freed, stream_freed;

static void *waker_main(void *arg) {
    struct later *l = arg;
    int n = l->n_chunks > 0 ? l->n_chunks : 1;
    for (int i = 0; i < n; i++) {
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        atomic_fetch_add(&l->ready, 1);
        http_waker_wake(l->w);
    }
    return NULL;
}

static void later_free(void *ctx) {
    struct later *l = ctx;
    pthread_join(l->thread, NULL); // its wakes stay safe after the request ends; wait for it before freeing
    http_waker_release(l->w);
    atomic_store(l->freed, 1);
    ci_free(l);
}

static struct later *later_new(struct http_conn *c, int n_chunks, atomic_int *freed) {
    struct later *l = ci_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->w = http_conn_waker(c);
    l->n_chunks = n_chunks;
    l->freed = freed;
    atomic_init(&l->ready, 0);
    if (pthread_create(&l->thread, NULL, waker_main, l) != 0) {
        http_waker_release(l->w);
        ci_free(l);
        return NULL;
    }
    return l;
}

static bool later_poll(void *ctx, struct http_conn *c, struct http_response *res) {
    (void)c;
    struct later *l = ctx;
    if (!atomic_load(&l->ready))
        return false;
    res->content_type = "text/plain";
    res->static_body = "ready";
    return true;
}

static void h_later(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    struct later *l = later_new(req->conn, 0, &later_freed);
    if (!l) {
        res->status = 500;
        return;
    }
    res->poll = later_poll;
    res->poll_ctx = l;
    res->poll_free = later_free;
}

static ssize_t stream_fill(void *ctx, struct http_conn *c, char *buf, size_t max) {
    (void)c;
    struct later *l = ctx;
    if (l->sent == l->n_chunks)
        return 0;
    if (l->sent >= atomic_load(&l->ready))
        return HTTP_FILL_WAIT;
    int n = snprintf(buf, max, "data: chunk %d\n\n", l->sent);
    l->sent++;
    return n;
}

static void h_stream(void *app, const struct http_request *req, struct http_response *res) {
    (void)app;
    struct later *l = later_new(req->conn, 5, &stream_freed);
    if (!l) {
        res->status = 500;
        return;
    }
    res->content_type = "text/event-stream";
    res->fill = stream_fill;
    res->fill_ctx = l;
    res->fill_free = later_free;
}

static const struct http_route routes[] = {
    {"/", "GET", false, h_ok},         {"/get", "GET", false, h_ok},        {"/echo", "POST", false, h_echo},
    {"/secret", "GET", true, h_ok},    {"/files/", "GET", false, h_path},   {"/busy", "GET", false, h_busy},
    {"/later", "GET", false, h_later}, {"/stream", "GET", false, h_stream},
};
#define N_ROUTES ((int)(sizeof routes / sizeof routes[0]))

static struct http_options options(void) {
    return (struct http_options){.host = "127.0.0.1",
                                 .port = 0,
                                 .api_key = KEY,
                                 .max_connections = 32,
                                 .max_connections_per_ip = 0,
                                 .timeout_s = 10,
                                 .request_timeout_s = 10,
                                 .n_threads = 2,
                                 .max_body_bytes = BODY_MAX};
}

static struct http_server *start(const struct http_options *o) {
    struct http_server *s = NULL;
    struct ci_err err = {0};
    if (http_server_start(o, routes, N_ROUTES, NULL, &s, &err) != CI_OK) {
        TEST_FAILF("http_server_start: %s", err.msg);
        return NULL;
    }
    return s;
}

/* ---- a client ----------------------------------------------------------------------------------------- */

struct reply {
    long status; // 0: no HTTP answer (connection error)
    char body[65536];
    size_t len;
    char headers[8192];
    size_t hlen;
};

static size_t on_body(char *p, size_t size, size_t n, void *user) {
    struct reply *r = user;
    size_t add = size * n;
    if (r->len + add >= sizeof r->body)
        return 0;
    memcpy(r->body + r->len, p, add);
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

static size_t on_header(char *p, size_t size, size_t n, void *user) {
    struct reply *r = user;
    size_t add = size * n;
    if (r->hlen + add < sizeof r->headers) {
        memcpy(r->headers + r->hlen, p, add);
        r->hlen += add;
        r->headers[r->hlen] = '\0';
    }
    return add;
}

struct upload {
    const char *data;
    size_t len, off;
};

static size_t on_read(char *buf, size_t size, size_t n, void *user) {
    struct upload *u = user;
    size_t k = size * n;
    if (k > 100)
        k = 100; // small pieces: several chunks
    if (k > u->len - u->off)
        k = u->len - u->off;
    memcpy(buf, u->data + u->off, k);
    u->off += k;
    return k;
}

/* One request.  body: NULL for none; chunked: sent with Transfer-Encoding: chunked (no Content-Length). */
static void request(int port, const char *method, const char *path, const char *auth, const char *body,
                    size_t body_len, bool chunked, struct reply *r) {
    memset(r, 0, sizeof *r);
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *h = curl_easy_init();
    if (!h)
        return;
    struct curl_slist *hd = curl_slist_append(NULL, "Expect:"); // no 100-continue round trip
    char line[256];
    if (auth) {
        snprintf(line, sizeof line, "Authorization: %s", auth);
        hd = curl_slist_append(hd, line);
    }
    struct upload up = {body, body_len, 0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else if (body && chunked) {
        hd = curl_slist_append(hd, "Transfer-Encoding: chunked");
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &up);
    } else if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    if (strcmp(method, "HEAD") != 0 && strcmp(method, body ? "POST" : "GET") != 0)
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(h) == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
}

/* The value of a response header (name case-insensitive), or "" when absent. */
static const char *header(const struct reply *r, const char *name, char *out, size_t cap) {
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *l = r->headers; l && *l; l = strstr(l, "\r\n"), l = l ? l + 2 : NULL)
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)k, v);
            break;
        }
    return out;
}

/* The error object of an OpenAI error body, when the body is one: {"error": {"message": non-empty string,
 * "type": string, "param", "code"}}; then *type and *code (NULL for null) are set. */
static bool openai_error_of(const struct reply *r, char *type, char *code, size_t cap) {
    cJSON *j = cJSON_Parse(r->body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    bool ok = cJSON_IsString(m) && m->valuestring[0] && cJSON_IsString(t) &&
              cJSON_HasObjectItem(e, "param") && (cJSON_IsString(c) || cJSON_IsNull(c)) &&
              cJSON_GetArraySize(j) == 1 && cJSON_GetArraySize(e) == 4;
    if (ok) {
        snprintf(type, cap, "%s", t->valuestring);
        snprintf(code, cap, "%s", cJSON_IsString(c) ? c->valuestring : "null");
    }
    cJSON_Delete(j);
    return ok;
}

/* ---- raw sockets (what curl will not do: send half a request, hold a connection) ---------------------- */

static int raw_connect(int port, int recv_timeout_ms) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool raw_send(int fd, const char *s) {
    size_t n = strlen(s);
    return send(fd, s, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* Reads one response (headers, then Content-Length bytes); its status, 0 when the connection closed or timed
 * out first. */
static int raw_response(int fd, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (;;) {
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(buf, "\r\ncontent-length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 17, NULL, 10) : 0);
            if (len >= want)
                break;
        }
        if (len + 1 >= cap)
            return 0;
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0)
            return 0;
        len += (size_t)k;
        buf[len] = '\0';
    }
    int status = 0;
    return sscanf(buf, "HTTP/1.%*d %d", &status) == 1 ? status : 0;
}

/* Whether the server closes fd (end of stream or reset) before the socket's receive timeout. */
static bool raw_closed(int fd) {
    char buf[512];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET))
            return true;
        if (k < 0)
            return false; // the timeout (EAGAIN): still open
    }
}

/* ---- tests -------------------------------------------------------------------------------------------- */

/* RFC 6750 §2.1: "Authorization: Bearer <token>", the scheme case-insensitive (RFC 9110 §11.1), the token
 * compared exactly. */
TEST(auth_ok_table) {
    static const struct {
        const char *header, *key;
        bool want;
    } cases[] = {
        {"Bearer sk-123", "sk-123", true},
        {"bearer sk-123", "sk-123", true},
        {"BEARER sk-123", "sk-123", true},
        {"Bearer  sk-123", "sk-123", true}, // extra spaces before the token
        {"Bearer sk-1234", "sk-123", false},
        {"Bearer sk-12", "sk-123", false},
        {"Bearer sk-123 ", "sk-123", false},
        {"Bearer SK-123", "sk-123", false},
        {"Bearer ", "sk-123", false},
        {"Bearer", "sk-123", false},
        {"Basic sk-123", "sk-123", false},
        {"Bearersk-123", "sk-123", false},
        {"sk-123", "sk-123", false},
        {"", "sk-123", false},
        {NULL, "sk-123", false},
        {"Bearer x", "x", true},
        // No key configured: everything passes.
        {NULL, NULL, true},
        {NULL, "", true},
        {"Bearer anything", "", true},
        {"garbage", NULL, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (http_auth_ok(cases[i].header, cases[i].key) != cases[i].want)
            TEST_FAILF("header '%s', key '%s': want %s", cases[i].header ? cases[i].header : "(none)",
                       cases[i].key ? cases[i].key : "(none)", cases[i].want ? "accepted" : "refused");
}

/* Anthropic's "x-api-key: <key>" (the key itself, compared exactly) is accepted as well as the Bearer
 * header: either one holding the key passes. */
TEST(api_key_ok_table) {
    static const struct {
        const char *authorization, *x_api_key, *key;
        bool want;
    } cases[] = {
        {NULL, "sk-123", "sk-123", true},
        {"Bearer sk-123", NULL, "sk-123", true},
        {"Bearer wrong", "sk-123", "sk-123", true},
        {"Bearer sk-123", "wrong", "sk-123", true},
        {NULL, "sk-1234", "sk-123", false},
        {NULL, "sk-12", "sk-123", false},
        {NULL, " sk-123", "sk-123", false},
        {NULL, "Bearer sk-123", "sk-123", false},
        {NULL, "SK-123", "sk-123", false},
        {NULL, "", "sk-123", false},
        {"Bearer wrong", "wrong", "sk-123", false},
        {NULL, NULL, "sk-123", false},
        {NULL, NULL, NULL, true},
        {NULL, "x", "", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (http_api_key_ok(cases[i].authorization, cases[i].x_api_key, cases[i].key) != cases[i].want)
            TEST_FAILF("case %zu: want %s", i, cases[i].want ? "accepted" : "refused");
}

static struct http_server *srv; // the shared server of the routing tests
static int port;

TEST(routing_table) {
    static const struct {
        const char *method, *path, *auth;
        long status;
        const char *allow; // the Allow header, or "" for none
        const char *type;  // the error type (NULL: not an error)
        const char *code;  // the error code
        const char *body;  // the whole body, for successes (NULL: not checked)
    } cases[] = {
        {"GET", "/get", NULL, 200, "", NULL, NULL, "{\"ok\":true}"},
        {"GET", "/get?x=1&y=2", NULL, 200, "", NULL, NULL, "{\"ok\":true}"}, // the query is not the path
        {"HEAD", "/get", NULL, 200, "", NULL, NULL, ""},                     // HEAD on a GET route, no body
        {"GET", "/", NULL, 200, "", NULL, NULL, "{\"ok\":true}"},
        {"GET", "/x", NULL, 404, "", "invalid_request_error", "not_found", NULL}, // "/" is exact
        {"GET", "/nope", NULL, 404, "", "invalid_request_error", "not_found", NULL},
        {"GET", "/get/", NULL, 404, "", "invalid_request_error", "not_found", NULL},
        {"POST", "/nope", NULL, 404, "", "invalid_request_error", "not_found", NULL},
        {"POST", "/get", NULL, 405, "GET, HEAD", "invalid_request_error", "method_not_allowed", NULL},
        {"DELETE", "/get", NULL, 405, "GET, HEAD", "invalid_request_error", "method_not_allowed", NULL},
        {"GET", "/echo", NULL, 405, "POST", "invalid_request_error", "method_not_allowed", NULL},
        {"PUT", "/echo", NULL, 405, "POST", "invalid_request_error", "method_not_allowed", NULL},
        {"GET", "/files/a/b.txt", NULL, 200, "", NULL, NULL, "/files/a/b.txt"}, // a prefix route
        {"GET", "/files/x", NULL, 200, "", NULL, NULL, "/files/x"},
        {"GET", "/files/", NULL, 404, "", "invalid_request_error", "not_found", NULL}, // nothing under it
        {"GET", "/files", NULL, 404, "", "invalid_request_error", "not_found", NULL},
        {"GET", "/filesx", NULL, 404, "", "invalid_request_error", "not_found", NULL},
        {"GET", "/secret", NULL, 401, "", "authentication_error", "invalid_api_key", NULL},
        {"GET", "/secret", "Bearer wrong", 401, "", "authentication_error", "invalid_api_key", NULL},
        {"GET", "/secret", "Basic " KEY, 401, "", "authentication_error", "invalid_api_key", NULL},
        {"GET", "/secret", "Bearer " KEY, 200, "", NULL, NULL, "{\"ok\":true}"},
        {"GET", "/secret", "bearer " KEY, 200, "", NULL, NULL, "{\"ok\":true}"},
        {"GET", "/get", "Bearer wrong", 200, "", NULL, NULL, "{\"ok\":true}"}, // a route without auth
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static struct reply r;
        request(port, cases[i].method, cases[i].path, cases[i].auth, NULL, 0, false, &r);
        char allow[128], ctype[128], type[64], code[64];
        header(&r, "Allow", allow, sizeof allow);
        header(&r, "Content-Type", ctype, sizeof ctype);
        const char *what = cases[i].path;
        if (r.status != cases[i].status) {
            TEST_FAILF("%s %s: status %ld, want %ld (%s)", cases[i].method, what, r.status, cases[i].status,
                       r.body);
            continue;
        }
        if (strcmp(allow, cases[i].allow) != 0)
            TEST_FAILF("%s %s: Allow '%s', want '%s'", cases[i].method, what, allow, cases[i].allow);
        if (cases[i].type) {
            if (!openai_error_of(&r, type, code, sizeof type))
                TEST_FAILF("%s %s: not an OpenAI error body: %s", cases[i].method, what, r.body);
            else if (strcmp(type, cases[i].type) != 0 || strcmp(code, cases[i].code) != 0)
                TEST_FAILF("%s %s: error %s/%s, want %s/%s", cases[i].method, what, type, code, cases[i].type,
                           cases[i].code);
            if (strcmp(ctype, "application/json") != 0)
                TEST_FAILF("%s %s: Content-Type '%s'", cases[i].method, what, ctype);
        }
        if (cases[i].body && strcmp(r.body, cases[i].body) != 0)
            TEST_FAILF("%s %s: body '%s', want '%s'", cases[i].method, what, r.body, cases[i].body);
    }
    // Retry-After with a 429 (RFC 9110 §10.2.3, RFC 6585 §4), and the default Content-Type.
    static struct reply r;
    char v[64];
    request(port, "GET", "/busy", NULL, NULL, 0, false, &r);
    CHECK(r.status == 429 && strcmp(header(&r, "Retry-After", v, sizeof v), "3") == 0);
    CHECK(strcmp(header(&r, "Content-Type", v, sizeof v), "application/json") == 0);
    request(port, "GET", "/files/q", NULL, NULL, 0, false, &r);
    CHECK(strcmp(header(&r, "Content-Type", v, sizeof v), "text/plain") == 0);
}

/* Bodies up to the limit arrive whole; one byte more is a 413, whether the client announces it
 * (Content-Length) or not (chunked); the server keeps serving. */
TEST(body_limit) {
    static char big[3 * BODY_MAX];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('a' + i % 26);
    static const struct {
        size_t len;
        bool chunked;
        long status;
    } cases[] = {
        {0, false, 200},
        {1, false, 200},
        {BODY_MAX - 1, false, 200},
        {BODY_MAX, false, 200},
        {BODY_MAX + 1, false, 413},
        {3 * BODY_MAX, false, 413},
        {1, true, 200},
        {BODY_MAX, true, 200},
        {BODY_MAX + 1, true, 413},
        {3 * BODY_MAX, true, 413},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static struct reply r;
        request(port, "POST", "/echo", NULL, big, cases[i].len, cases[i].chunked, &r);
        char type[64], code[64];
        if (r.status != cases[i].status) {
            TEST_FAILF("%zu bytes%s: status %ld, want %ld", cases[i].len, cases[i].chunked ? " chunked" : "",
                       r.status, cases[i].status);
        } else if (r.status == 200 && (r.len != cases[i].len || memcmp(r.body, big, r.len) != 0)) {
            TEST_FAILF("%zu bytes%s: echoed %zu bytes, not the same", cases[i].len,
                       cases[i].chunked ? " chunked" : "", r.len);
        } else if (r.status == 413 &&
                   (!openai_error_of(&r, type, code, sizeof type) ||
                    strcmp(type, "invalid_request_error") != 0 || strcmp(code, "request_too_large") != 0)) {
            TEST_FAILF("%zu bytes: 413 body %s", cases[i].len, r.body);
        }
    }
    // A claim far past the limit is answered at once: the server does not wait for a body it would drop.
    int fd = raw_connect(port, 5000);
    ASSERT(fd >= 0);
    int64_t t0 = ci_now_ns();
    ASSERT(raw_send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"));
    char buf[4096];
    CHECK(raw_response(fd, buf, sizeof buf) == 413);
    CHECK(ci_now_ns() - t0 < 4 * SECOND_NS);
    close(fd);
    static struct reply r;
    request(port, "GET", "/get", NULL, NULL, 0, false, &r);
    CHECK(r.status == 200);
}

/* A handler that answers later (poll), and a body streamed in chunks (fill), each waiting on wakes from
 * another thread: the whole answer arrives, and the server frees each context once. */
TEST(deferred_and_streamed_answers) {
    static struct reply r;
    atomic_store(&later_freed, 0);
    request(port, "GET", "/later", NULL, NULL, 0, false, &r);
    CHECK(r.status == 200 && strcmp(r.body, "ready") == 0);
    atomic_store(&stream_freed, 0);
    request(port, "GET", "/stream", NULL, NULL, 0, false, &r);
    char v[64];
    CHECK(r.status == 200);
    CHECK(strcmp(r.body,
                 "data: chunk 0\n\ndata: chunk 1\n\ndata: chunk 2\n\ndata: chunk 3\n\ndata: chunk 4\n\n") ==
          0);
    CHECK(strcmp(header(&r, "Content-Type", v, sizeof v), "text/event-stream") == 0);
    CHECK(strcmp(header(&r, "Cache-Control", v, sizeof v), "no-cache") == 0);
    CHECK(strcmp(header(&r, "X-Accel-Buffering", v, sizeof v), "no") == 0); // proxies must not buffer it
    CHECK(strcmp(header(&r, "Transfer-Encoding", v, sizeof v), "chunked") == 0);
    for (int i = 0; i < 200 && !(atomic_load(&later_freed) && atomic_load(&stream_freed)); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    CHECK(atomic_load(&later_freed) && atomic_load(&stream_freed));
}

/* A whole request must arrive within request_timeout_s of the connection's opening: a client that sends half
 * its headers, or nothing, is disconnected; one that sends a whole request in time is answered, and may idle
 * for as long again before its next one. */
TEST(request_deadline) {
    struct http_options o = options();
    o.request_timeout_s = 1;
    struct http_server *s = start(&o);
    ASSERT(s != NULL);
    int p = http_server_port(s);
    int half = raw_connect(p, 5000), idle = raw_connect(p, 5000), good = raw_connect(p, 5000);
    ASSERT(half >= 0 && idle >= 0 && good >= 0);
    int64_t t0 = ci_now_ns();
    ASSERT(raw_send(half, "GET /get HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    ASSERT(raw_send(good, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n"));
    char buf[4096];
    CHECK(raw_response(good, buf, sizeof buf) == 200);
    CHECK(raw_closed(half));
    double waited = (double)(ci_now_ns() - t0) / 1e9;
    CHECK(waited > 0.9 && waited < 4.5);
    CHECK(raw_closed(idle));
    CHECK(http_server_deadline_closed(s) >= 2);
    close(half);
    close(idle);
    close(good);
    http_server_free(s);
}

/* At most max_connections_per_ip connections from one address: a third is closed at once while two are held;
 * once one of them goes, a new one is served. */
TEST(per_address_limit) {
    struct http_options o = options();
    o.max_connections_per_ip = 2;
    struct http_server *s = start(&o);
    ASSERT(s != NULL);
    int p = http_server_port(s);
    char buf[4096];
    int a = raw_connect(p, 5000), b = raw_connect(p, 5000);
    ASSERT(a >= 0 && b >= 0);
    // A whole request on each (keep-alive): both are accepted and held.
    ASSERT(raw_send(a, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n") &&
           raw_send(b, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK(raw_response(a, buf, sizeof buf) == 200 && raw_response(b, buf, sizeof buf) == 200);
    int c = raw_connect(p, 3000);
    ASSERT(c >= 0);
    raw_send(c, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(raw_response(c, buf, sizeof buf) == 0); // closed without an answer
    close(c);
    // The two held ones still work.
    ASSERT(raw_send(a, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK(raw_response(a, buf, sizeof buf) == 200);
    close(a);
    bool served = false;
    for (int i = 0; i < 50 && !served; i++) { // the server notices a's close within its event loop
        int d = raw_connect(p, 3000);
        served = d >= 0 && raw_send(d, "GET /get HTTP/1.1\r\nHost: x\r\n\r\n") &&
                 raw_response(d, buf, sizeof buf) == 200;
        if (d >= 0)
            close(d);
        if (!served)
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    CHECK(served);
    close(b);
    http_server_free(s);
}

/* CORS: with an allowed origin, a preflight (OPTIONS) gets 204 and every answer the Allow-Origin header;
 * without one, OPTIONS is just another method the route does not allow. */
TEST(cors) {
    struct http_options o = options();
    o.allow_origin = "https://example.test";
    struct http_server *s = start(&o);
    ASSERT(s != NULL);
    static struct reply r;
    char v[128];
    request(http_server_port(s), "OPTIONS", "/echo", NULL, NULL, 0, false, &r);
    CHECK(r.status == 204);
    CHECK(strcmp(header(&r, "Access-Control-Allow-Origin", v, sizeof v), "https://example.test") == 0);
    CHECK(strstr(header(&r, "Access-Control-Allow-Methods", v, sizeof v), "POST") != NULL);
    CHECK(strstr(header(&r, "Access-Control-Allow-Headers", v, sizeof v), "Authorization") != NULL);
    CHECK(strstr(header(&r, "Access-Control-Allow-Headers", v, sizeof v), "x-api-key") !=
          NULL); // Anthropic clients
    request(http_server_port(s), "GET", "/get", NULL, NULL, 0, false, &r);
    CHECK(r.status == 200 &&
          strcmp(header(&r, "Access-Control-Allow-Origin", v, sizeof v), "https://example.test") == 0);
    http_server_free(s);
    request(port, "OPTIONS", "/echo", NULL, NULL, 0, false, &r);
    CHECK(r.status == 405 && strcmp(header(&r, "Allow", v, sizeof v), "POST") == 0);
    CHECK(strcmp(header(&r, "Access-Control-Allow-Origin", v, sizeof v), "") == 0);
}

/* Limits below 1, a host that is no address, a port already taken: errors with a message, nothing started. */
TEST(start_errors) {
    struct http_options bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = options();
    bad[0].max_connections = 0;
    bad[1].max_connections_per_ip = -1;
    bad[2].timeout_s = 0;
    bad[3].request_timeout_s = 0;
    bad[4].n_threads = 0;
    bad[5].host = "no such host.invalid";
    for (int i = 0; i < 6; i++) {
        struct http_server *s = (struct http_server *)(uintptr_t)1;
        struct ci_err err = {0};
        CHECK(http_server_start(&bad[i], routes, N_ROUTES, NULL, &s, &err) == CI_ERR_INVALID);
        CHECK(s == NULL && err.msg[0] != '\0');
    }
    struct http_options taken = options();
    taken.port = port;
    struct http_server *s = (struct http_server *)(uintptr_t)1;
    struct ci_err err = {0};
    CHECK(http_server_start(&taken, routes, N_ROUTES, NULL, &s, &err) == CI_ERR_IO);
    CHECK(s == NULL && strstr(err.msg, "listen") != NULL);
    http_server_free(NULL);
}

static size_t mem0;

/* Every connection's state, body, error body, stream and deferred context freed. */
TEST(no_leaks) {
    CHECK(ci_mem_in_use() == mem0);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    openai_init(); // cJSON through the counted allocator, as in the server
    curl_global_init(CURL_GLOBAL_DEFAULT);
    mem0 = ci_mem_in_use();
    RUN(auth_ok_table);
    RUN(api_key_ok_table);
    struct http_options o = options();
    if (!(srv = start(&o)))
        return 1;
    port = http_server_port(srv);
    if (port <= 0) {
        printf("FAIL setup: port %d\n", port);
        return 1;
    }
    RUN(routing_table);
    RUN(body_limit);
    RUN(deferred_and_streamed_answers);
    RUN(request_deadline);
    RUN(per_address_limit);
    RUN(cors);
    RUN(start_errors);
    http_server_free(srv);
    curl_global_cleanup();
    RUN(no_leaks);
    return test_exit_code();
}
