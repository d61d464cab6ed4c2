/* The HTTP layer of `cinfer serve`: a libmicrohttpd daemon, event-driven (epoll where available) on a small
 * pool of threads, so an idle or slow connection costs a socket and a few KB, not a thread.  Routing by
 * exact path (or path prefix) and method, the request-body limit (enforced while receiving: over-limit
 * bodies are drained, never buffered), API-key authentication in constant time, optional CORS, and the
 * daemon's lifecycle.  It knows nothing of models or OpenAI beyond the error-body format.
 *
 * Defences against clients that hold connections (docs/SECURITY.md): a deadline for receiving a complete
 * request (request_timeout_s, counted from the connection's opening or its previous answer: a client that
 * trickles its headers or body, or idles between requests, is disconnected when it passes), a limit of
 * connections per client address, the global connection limit, and the inactivity timeout while an
 * answer is written.
 *
 * Handlers never block.  One that cannot answer at once (a generation) hands back either a streaming body
 * whose fill function says HTTP_FILL_WAIT when it has nothing yet, or a poll function that says false
 * until the answer is ready; the connection is then suspended (no thread waits) until something calls
 * http_waker_wake on the request's waker (the engine, when an event is ready), the client hangs up, or
 * the server stops.
 *
 * Ownership: the server owns each connection's state; a handler's response body (ci_malloc'ed) and its
 * streaming or poll context pass to the server when the handler returns, which frees them (fill_free,
 * poll_free) when the connection is done with them, whether the response completed or the client went
 * away. */
#ifndef CINFER_SERVER_HTTP_H
#define CINFER_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/status.h"

struct http_server;
struct http_conn; // one client connection, valid while its handler or its stream's fill runs

struct http_request {
    const char *method;
    const char *path; // without the query string
    const char *body; // [body_len] bytes followed by a NUL
    size_t body_len;
    struct http_conn *conn;
};

#define HTTP_FILL_ERROR (-1) // abort the connection
#define HTTP_FILL_WAIT  (-2) // nothing to write yet: call again after a wake

/* Writes up to max bytes of a streaming body into buf; returns the count (> 0), 0 at the end,
 * HTTP_FILL_WAIT when nothing is ready yet (the connection sleeps until http_waker_wake), or
 * HTTP_FILL_ERROR to abort the connection.  Runs on an HTTP thread: it must never block.  Once
 * http_conn_gone is true it must end (0 or HTTP_FILL_ERROR) rather than wait. */
typedef ssize_t (*http_fill_fn)(void *ctx, struct http_conn *c, char *buf, size_t max);

struct http_response;
/* A deferred answer: returns true with res filled (a body, or a stream through fill) once the answer is known,
 * false when it is not ready yet (the connection sleeps until http_waker_wake).  Never blocks; once
 * http_conn_gone is true it must answer. */
typedef bool (*http_poll_fn)(void *ctx, struct http_conn *c, struct http_response *res);

struct http_response {
    int status;
    const char *content_type; // static; NULL: application/json
    char *body;               // ci_malloc'ed body (taken), or NULL
    size_t body_len;
    const char *static_body; // a body of static storage (not freed), used when body is NULL
    const char *allow;       // an Allow header (405)
    int retry_after_s;       // a Retry-After header when > 0 (429, 503)
    // A streaming body (chunked transfer): used when fill is set.  fill_free(fill_ctx) runs exactly once.
    http_fill_fn fill;
    void *fill_ctx;
    void (*fill_free)(void *ctx);
    // A deferred answer (handlers only): used when poll is set.  poll_free(poll_ctx) runs exactly once.
    http_poll_fn poll;
    void *poll_ctx;
    void (*poll_free)(void *ctx);
};

typedef void (*http_handler_fn)(void *app, const struct http_request *req, struct http_response *res);

struct http_route {
    const char *path;   // exact, or every path under it when it ends with '/' ("/" itself is exact)
    const char *method; // "GET" (HEAD is answered too) or "POST"
    bool auth;          // needs the API key (when one is set)
    http_handler_fn fn;
};

struct http_options {
    const char *host;           // a numeric address or a name to resolve ("127.0.0.1", "::1", "0.0.0.0")
    int port;                   // 0: any free port (http_server_port tells which)
    const char *api_key;        // NULL or "": no authentication
    int max_connections;        // concurrent connections in all
    int max_connections_per_ip; // concurrent connections from one client address (0: no limit)
    int timeout_s;              // a connection that moves no data for this long while answered is closed
    int request_timeout_s;      // a whole request must arrive within this (from connect or the last answer)
    int n_threads;              // HTTP threads (each serves many connections)
    size_t max_body_bytes;      // larger request bodies get 413
    const char *allow_origin;   // NULL: no CORS headers; else Access-Control-Allow-Origin and OPTIONS replies
};

/* Binds and starts serving the routes (the table must outlive the server).  app is passed to handlers. */
enum ci_status http_server_start(const struct http_options *o, const struct http_route *routes, int n_routes,
                                 void *app, struct http_server **out, struct ci_err *err);
int http_server_port(const struct http_server *s);
/* Connections closed so far for not delivering a whole request within request_timeout_s. */
long http_server_deadline_closed(const struct http_server *s);
/* Stops accepting connections and tells every handler and stream to finish (http_conn_gone turns true). */
void http_server_quiesce(struct http_server *s);
/* Closes every connection, waits for their threads, frees the server.  NULL is fine. */
void http_server_free(struct http_server *s);

/* True when the client has hung up or the server is shutting down: the caller should cancel its work. */
bool http_conn_gone(struct http_conn *c);
/* The value of the request's header `name` (case-insensitive), or NULL; valid while its handler runs. */
const char *http_conn_header(struct http_conn *c, const char *name);
/* True once the server is shutting down (then http_conn_gone is true as well). */
bool http_conn_stopping(const struct http_conn *c);

/* The wake-up handle of a request that waits (a fill or poll that said "not yet").  A new reference:
 * release it with http_waker_release.  It outlives the request safely: once the request is over, a wake
 * does nothing. */
struct http_waker;
struct http_waker *http_conn_waker(struct http_conn *c);
/* Any thread, quick, never blocks for long: the request's fill or poll runs again soon. */
void http_waker_wake(void *waker);
void http_waker_release(struct http_waker *w);

/* A constant-time comparison of an Authorization header value with "Bearer <key>" (the scheme word is
 * case-insensitive).  Exposed for tests. */
bool http_auth_ok(const char *header, const char *key);
/* The API-key check of every route that needs it: an Authorization header "Bearer <key>" (OpenAI) or an
 * x-api-key header "<key>" (Anthropic) holds the key; both compared in constant time.  NULL: absent. */
bool http_api_key_ok(const char *authorization, const char *x_api_key, const char *key);

#endif
