/* The router's HTTP client: one thread drives every request to the replicas through libcurl's multi
 * interface, so a thousand streams cost no threads.  A transfer's response (status, a few headers, body
 * bytes) is collected into the transfer as it arrives and read by the HTTP thread that serves the client;
 * the owner's notify function is called (on the upstream thread) whenever there is something new.  A client
 * that reads slowly pauses its transfer (at most UPSTREAM_MAX_BUFFER bytes wait in memory) and resumes it
 * as it drains.
 *
 * Ownership: a transfer is shared by the upstream thread and its owner, and freed when both let go.
 * upstream_xfer_release aborts a transfer still running (the replica sees its connection close, which
 * cancels the generation) and guarantees that notify is not called after it returns. */
#ifndef CINFER_SERVER_ROUTER_UPSTREAM_H
#define CINFER_SERVER_ROUTER_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define UPSTREAM_MAX_BUFFER (1u << 20)

struct upstream;
struct upstream_xfer;

struct upstream_request {
    const char *url;    // the whole URL
    const char *method; // "GET" or "POST"
    const char *body;   // POST: body_len bytes (copied)
    size_t body_len;
    const char *const *headers; // n_headers "Name: value" lines (copied)
    int n_headers;
    long connect_timeout_ms; // 0: libcurl's default
    long timeout_ms;         // the whole transfer; 0: none
    void (*notify)(void *ctx);
    void *notify_ctx;
};

enum upstream_state {
    UPSTREAM_PENDING, // no complete response head yet
    UPSTREAM_BODY,    // status and headers known; body bytes arriving
    UPSTREAM_DONE,    // the whole response is in (the buffer may still hold unread bytes)
    UPSTREAM_FAILED,  // the transfer failed (error says why; got_bytes: after part of the response came)
};

struct upstream_status {
    enum upstream_state state;
    int http_status;       // from UPSTREAM_BODY on
    char content_type[96]; // "" when absent
    int retry_after_s;     // 0 when absent
    bool got_bytes;        // any byte of a response arrived
    size_t buffered;       // body bytes waiting to be read
    char error[160];       // UPSTREAM_FAILED
};

enum ci_status upstream_create(struct upstream **out, struct ci_err *err);
/* Aborts every transfer, stops the thread.  NULL is fine. */
void upstream_free(struct upstream *u);

enum ci_status upstream_start(struct upstream *u, const struct upstream_request *rq,
                              struct upstream_xfer **out, struct ci_err *err);
void upstream_xfer_status(struct upstream_xfer *x, struct upstream_status *out);
/* Moves up to max buffered body bytes into buf; returns how many (0: none buffered now). */
size_t upstream_xfer_read(struct upstream_xfer *x, char *buf, size_t max);
void upstream_xfer_release(struct upstream_xfer *x);

#endif
