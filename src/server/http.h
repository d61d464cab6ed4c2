/* The HTTP layer of `cinfer serve`: a libmicrohttpd daemon in thread-per-connection mode (a handler may
 * block on the engine's stream with a timeout, which libmicrohttpd allows only in that mode), routing by
 * exact path (or path prefix) and method, the request-body limit (enforced while receiving: over-limit
 * bodies are drained, never buffered), API-key authentication in constant time, optional CORS, and the
 * daemon's lifecycle.  It knows nothing of models or OpenAI beyond the error-body format.
 *
 * Ownership: the server owns each connection's state; a handler's response body (ci_malloc'ed) and its
 * streaming context pass to the server when the handler returns, which frees them (fill_free) when the
 * connection is done with them, whether the response completed or the client went away. */
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

/* Writes up to max bytes of a streaming body into buf; returns the count (> 0), 0 at the end, < 0 to abort
 * the connection.  Runs on the connection's thread and may block (briefly, checking http_conn_gone). */
typedef ssize_t (*http_fill_fn)(void *ctx, struct http_conn *c, char *buf, size_t max);

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
};

typedef void (*http_handler_fn)(void *app, const struct http_request *req, struct http_response *res);

struct http_route {
    const char *path;   // exact, or every path under it when it ends with '/' ("/" itself is exact)
    const char *method; // "GET" (HEAD is answered too) or "POST"
    bool auth;          // needs the API key (when one is set)
    http_handler_fn fn;
};

struct http_options {
    const char *host;         // a numeric address or a name to resolve ("127.0.0.1", "::1", "0.0.0.0")
    int port;                 // 0: any free port (http_server_port tells which)
    const char *api_key;      // NULL or "": no authentication
    int max_connections;      // concurrent connections (each one a thread)
    int timeout_s;            // idle connections are closed after this (not while a handler generates)
    size_t max_body_bytes;    // larger request bodies get 413
    const char *allow_origin; // NULL: no CORS headers; else Access-Control-Allow-Origin and OPTIONS replies
};

/* Binds and starts serving the routes (the table must outlive the server).  app is passed to handlers. */
enum ci_status http_server_start(const struct http_options *o, const struct http_route *routes, int n_routes,
                                 void *app, struct http_server **out, struct ci_err *err);
int http_server_port(const struct http_server *s);
/* Stops accepting connections and tells every handler and stream to finish (http_conn_gone turns true). */
void http_server_quiesce(struct http_server *s);
/* Closes every connection, waits for their threads, frees the server.  NULL is fine. */
void http_server_free(struct http_server *s);

/* True when the client has hung up or the server is shutting down: the caller should cancel its work. */
bool http_conn_gone(struct http_conn *c);
/* True once the server is shutting down (then http_conn_gone is true as well). */
bool http_conn_stopping(const struct http_conn *c);
/* busy: the idle timeout is suspended (a long prefill is not idleness); !busy: restored and restarted. */
void http_conn_set_busy(struct http_conn *c, bool busy);

/* A constant-time comparison of an Authorization header value with "Bearer <key>" (the scheme word is
 * case-insensitive).  Exposed for tests. */
bool http_auth_ok(const char *header, const char *key);

#endif
