/* Thread-communication primitives of the serving engine: the request queue (many callers → the engine
 * thread) and the per-request token channel (the engine thread → one caller).
 *
 * struct ci_queue: a bounded MPSC queue of opaque pointers.  Any thread pushes; exactly one thread (the
 * engine) drains it with ci_queue_pop_all and sleeps in ci_queue_wait when it has nothing to do.  The queue
 * never owns its items: a pointer pushed with CI_OK belongs to the consumer once popped; on any other status
 * it stays with the producer.  A ring of pointers is allocated at creation; push and pop never allocate.
 *
 * struct ci_channel: a bounded SPSC stream of fixed-size struct ci_event from the engine (producer) to the
 * request's caller (consumer).  The engine must never be stalled by a slow client, so a send never blocks:
 * when the ring is full it returns CI_ERR_BUSY having sent nothing, and the engine keeps the token (or
 * skips the sequence) and tries again on a later step.  The stream ends with ci_channel_close, which never
 * fails and never blocks: the final outcome (finish reason, status, message) is stored beside the ring, not
 * in it, so a full ring cannot hold up the engine's finish path.  The consumer receives it after every
 * token event, as the last event (kind DONE or ERROR).
 *
 * Cancellation is per channel: the consumer sets an atomic flag (client gone, user stop) that the engine
 * polls once per step; there is no global flag.  Lifetime: the channel is created holding one reference for
 * each side, each side releases its own exactly once, and the last release frees it, so a client disconnect
 * and an engine finish in either order (or at the same time) are safe.
 *
 * Blocking calls use CLOCK_MONOTONIC deadlines (the ci_now_ns clock).  A timeout_ns < 0 waits without limit,
 * 0 polls.  There is no timeout status, so both waiting calls report "timed out, nothing yet" as
 * CI_ERR_BUSY, and "closed and nothing left" as CI_ERR_CANCELLED. */
#ifndef CINFER_CORE_QUEUE_H
#define CINFER_CORE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* ---- request queue ------------------------------------------------------------------------------------ */

struct ci_queue;

#define CI_QUEUE_MAX_CAPACITY (1 << 24)

/* capacity in [1, CI_QUEUE_MAX_CAPACITY]: CI_ERR_INVALID outside it, CI_ERR_NOMEM. */
enum ci_status ci_queue_create(int capacity, struct ci_queue **out, struct ci_err *err);
/* Frees the queue, not the items still in it: drain them first (close, then pop_all).  NULL is a no-op.
 * No thread may be using the queue. */
void ci_queue_free(struct ci_queue *q);

/* Any thread.  item must be non-NULL.  CI_OK: queued (and the consumer woken).  CI_ERR_BUSY: the queue is
 * full (the server answers 503/429).  CI_ERR_CANCELLED: the queue is closed. */
enum ci_status ci_queue_push(struct ci_queue *q, void *item);
/* Consumer, non-blocking: moves up to max items, oldest first, into out[0..*n).  Items pushed before
 * ci_queue_close are still delivered.  CI_OK (possibly *n == 0), or CI_ERR_CANCELLED when the queue is
 * closed and empty (*n == 0: nothing will ever arrive again). */
enum ci_status ci_queue_pop_all(struct ci_queue *q, void **out, int max, int *n);
/* Consumer: sleeps until the queue holds an item, ci_queue_wake is called, the queue is closed, or
 * timeout_ns passes.  CI_OK: an item is waiting or a wake was posted (a wake posted while nobody waits is
 * kept for the next wait, so it cannot fall between the engine's last check and its sleep; every return
 * consumes it).  CI_ERR_CANCELLED: closed and empty.  CI_ERR_BUSY: timed out. */
enum ci_status ci_queue_wait(struct ci_queue *q, int64_t timeout_ns);
/* Any thread: makes the current or next ci_queue_wait return CI_OK. */
void ci_queue_wake(struct ci_queue *q);
/* Any thread, idempotent: later pushes fail with CI_ERR_CANCELLED and waiters wake. */
void ci_queue_close(struct ci_queue *q);
/* Items waiting now (a snapshot). */
int ci_queue_len(struct ci_queue *q);
int ci_queue_capacity(const struct ci_queue *q);

/* ---- token channel ------------------------------------------------------------------------------------ */

struct ci_channel;

/* Inline text bytes per event.  Longer text travels as several events (see struct ci_event). */
#define CI_EVENT_TEXT_MAX 64
/* Longest final message kept by ci_channel_close (bytes, excluding the terminator); longer is truncated. */
#define CI_CHANNEL_MSG_MAX      255
#define CI_CHANNEL_MAX_CAPACITY (1 << 20)

enum ci_event_kind {
    CI_EVENT_TOKEN = 1, // a sampled token and the UTF-8 text it completed (possibly empty)
    CI_EVENT_TEXT,      // text tied to no new token (held-back bytes released at the end); token = -1
    CI_EVENT_DONE,      // final, status CI_OK: finish says why; no text
    CI_EVENT_ERROR,     // final, status != CI_OK; text is the error message
};

enum {
    CI_EVENT_F_MORE = 1, // the next event continues this one's text
    CI_EVENT_F_CONT = 2, // this event continues the previous one's text (same kind, token, logprob, t_ns)
};

/* One event.  A text longer than CI_EVENT_TEXT_MAX is split into consecutive events: the first has F_MORE,
 * the middle ones F_MORE | F_CONT, the last F_CONT; all carry the same kind, token, logprob and t_ns.  A
 * consumer that only wants the text appends every event's text; one that counts tokens counts TOKEN events
 * without F_CONT.  Text pieces are cut at byte boundaries, so a piece may end inside a UTF-8 character; the
 * concatenation is what the engine sent. */
struct ci_event {
    int64_t t_ns;   // TOKEN/TEXT: when the engine produced it; DONE/ERROR: when the stream was closed
    int32_t token;  // TOKEN: the token id; otherwise -1
    float logprob;  // TOKEN: log-probability of the sampled token (0 when the engine does not compute it)
    int32_t status; // enum ci_status: CI_OK except for ERROR
    uint8_t kind;   // enum ci_event_kind
    uint8_t finish; // DONE/ERROR: the engine's finish reason (its own enum; opaque to the channel); else 0
    uint8_t flags;  // CI_EVENT_F_*
    uint8_t n_text; // bytes used in text
    char text[CI_EVENT_TEXT_MAX]; // [n_text] UTF-8, not NUL-terminated
};

enum ci_channel_side { CI_CHANNEL_PRODUCER, CI_CHANNEL_CONSUMER };

/* capacity: events in the ring, in [1, CI_CHANNEL_MAX_CAPACITY] (CI_ERR_INVALID outside it), CI_ERR_NOMEM.
 * The channel starts with two references, one per side. */
enum ci_status ci_channel_create(int capacity, struct ci_channel **out, struct ci_err *err);
/* Drops side's reference; each side calls it exactly once (twice is an internal bug and aborts) and must
 * not touch ch afterwards.  The last release frees the channel.  Releasing a side also ends its part:
 * the consumer's release cancels (a disconnected client need not call ci_channel_cancel first), and a
 * producer release before ci_channel_close closes with CI_ERR_INTERNAL, so a consumer never waits forever
 * on a stream whose producer has gone. */
void ci_channel_release(struct ci_channel *ch, enum ci_channel_side side);

/* Producer.  Sends one TOKEN or TEXT event carrying text[0..n_text), split into ceil(n_text /
 * CI_EVENT_TEXT_MAX) events (one when n_text is 0), all of them or none.  For TEXT, token and logprob are
 * ignored (sent as -1 and 0).  Never blocks.
 *   CI_OK              every piece is in the ring;
 *   CI_ERR_BUSY        not enough free slots now: nothing was sent, retry on a later step;
 *   CI_ERR_LIMIT       the text needs more slots than the channel has: it can never be sent whole;
 *   CI_ERR_CANCELLED   the consumer cancelled: nothing was sent; finish the request and close.
 * Sending after ci_channel_close is an internal bug (aborts). */
enum ci_status ci_channel_send(struct ci_channel *ch, enum ci_event_kind kind, int32_t token, float logprob,
                               int64_t t_ns, const char *text, size_t n_text);
/* Producer, exactly once: ends the stream.  status CI_OK gives a DONE event, anything else an ERROR event
 * carrying msg (may be NULL; truncated to CI_CHANNEL_MSG_MAX bytes).  finish is the engine's finish reason
 * (0..255), passed through untouched.  Never blocks and never fails. */
void ci_channel_close(struct ci_channel *ch, int finish, enum ci_status status, const char *msg);
/* Producer: free slots now (a lower bound: only the producer fills them).  Lets the engine check for room
 * before it decodes a sequence's next token. */
int ci_channel_n_free(struct ci_channel *ch);
/* Producer, once per step: true once the consumer has cancelled (or released). */
bool ci_channel_cancelled(const struct ci_channel *ch);

/* Consumer: takes the oldest event, waiting up to timeout_ns for one.  Token events come in the order sent,
 * then the final DONE/ERROR event (in pieces if its message is long).
 *   CI_OK              *out holds an event;
 *   CI_ERR_BUSY        timed out with nothing to read;
 *   CI_ERR_CANCELLED   the stream is over: the final event has already been returned. */
enum ci_status ci_channel_recv(struct ci_channel *ch, struct ci_event *out, int64_t timeout_ns);
/* Consumer (or any thread acting for it): asks the engine to stop this request.  Idempotent.  Events keep
 * arriving until the engine notices and closes the stream, and the final event still comes. */
void ci_channel_cancel(struct ci_channel *ch);
int ci_channel_capacity(const struct ci_channel *ch);

/* Any thread: fn(ctx) is called after every event the producer makes available (each send that succeeds,
 * and the close), so a consumer that does not block in ci_channel_recv (an event-driven server) learns
 * when to look again.  fn runs on the producer's thread under the channel's lock: it must be quick, must
 * not block and must not call back into this channel.  fn == NULL removes it; once that call returns, fn
 * is not running and will not be called again, so ctx may be freed. */
typedef void (*ci_channel_notify_fn)(void *ctx);
void ci_channel_set_notify(struct ci_channel *ch, ci_channel_notify_fn fn, void *ctx);

#endif
