/* Request queue and token channel (see queue.h).  Both are a ring under one mutex with one condvar on
 * which the single consumer sleeps.  A mutex rather than a lock-free ring: every operation is a handful of
 * stores, producers (the engine included) hold the lock for a copy at most, the consumer needs the condvar
 * anyway to block, and TSan understands it without annotations.  Only the cancel flag and the per-side
 * release bits are atomics, because they are read outside the lock (the engine polls the flag every step;
 * the bits decide who frees). */
#include "core/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/mem.h"

_Static_assert(CI_EVENT_TEXT_MAX <= UINT8_MAX, "ci_event.n_text is a uint8_t");

/* ---- shared: monotonic timed waits -------------------------------------------------------------------- */

// Timed waits must follow CLOCK_MONOTONIC (ci_now_ns): a wall-clock step must not stretch or cut a timeout.
static int cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

struct deadline {
    int64_t timeout_ns; // < 0: none, 0: poll
    struct timespec at; // absolute CLOCK_MONOTONIC time, when timeout_ns > 0
    bool passed;
};

static void deadline_init(struct deadline *d, int64_t timeout_ns) {
    d->timeout_ns = timeout_ns;
    d->passed = timeout_ns == 0;
    if (timeout_ns > 0) {
        int64_t now = ci_now_ns();
        int64_t t = timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns; // saturate "forever-ish"
        d->at.tv_sec = (time_t)(t / 1000000000);
        d->at.tv_nsec = (long)(t % 1000000000);
    }
}

/* Sleeps on c (m held) once; marks the deadline passed when the timed wait expires.  The caller re-checks
 * its condition after every return (spurious wakeups, and a wake that raced the expiry). */
static void deadline_sleep(struct deadline *d, pthread_cond_t *c, pthread_mutex_t *m) {
    if (d->timeout_ns < 0) {
        pthread_cond_wait(c, m);
    } else if (pthread_cond_timedwait(c, m, &d->at) == ETIMEDOUT) {
        d->passed = true;
    }
}

/* ---- request queue ------------------------------------------------------------------------------------ */

struct ci_queue {
    pthread_mutex_t lock;
    pthread_cond_t ready; // the consumer sleeps here: item, wake, close
    int capacity;
    int head;  // oldest item
    int count; // items in the ring
    bool closed;
    bool woken;    // a ci_queue_wake not yet consumed by a wait
    void *items[]; // [capacity] ring
};

enum ci_status ci_queue_create(int capacity, struct ci_queue **out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    struct ci_queue *q = NULL;
    bool have_lock = false;
    size_t n_bytes;
    *out = NULL;
    if (capacity < 1 || capacity > CI_QUEUE_MAX_CAPACITY) {
        st = ci_err_set(err, CI_ERR_INVALID, "request queue capacity %d out of range [1, %d]", capacity,
                        CI_QUEUE_MAX_CAPACITY);
        goto fail;
    }
    if (!ci_mul_size((size_t)capacity, sizeof q->items[0], &n_bytes) ||
        !ci_add_size(n_bytes, sizeof *q, &n_bytes) || !(q = ci_calloc(1, n_bytes))) {
        st = ci_err_set(err, CI_ERR_NOMEM, "request queue: out of memory (capacity %d)", capacity);
        goto fail;
    }
    q->capacity = capacity;
    if (pthread_mutex_init(&q->lock, NULL) != 0) {
        st = ci_err_set(err, CI_ERR_INTERNAL, "request queue: cannot create its mutex");
        goto fail;
    }
    have_lock = true;
    if (cond_init_monotonic(&q->ready) != 0) {
        st = ci_err_set(err, CI_ERR_INTERNAL, "request queue: cannot create its condition variable");
        goto fail;
    }
    *out = q;
    return CI_OK;
fail:
    if (have_lock)
        pthread_mutex_destroy(&q->lock);
    ci_free(q);
    return st;
}

void ci_queue_free(struct ci_queue *q) {
    if (!q)
        return;
    pthread_cond_destroy(&q->ready);
    pthread_mutex_destroy(&q->lock);
    ci_free(q);
}

enum ci_status ci_queue_push(struct ci_queue *q, void *item) {
    enum ci_status st;
    CI_ASSERT(item != NULL);
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        st = CI_ERR_CANCELLED;
    } else if (q->count == q->capacity) {
        st = CI_ERR_BUSY;
    } else {
        q->items[(q->head + q->count) % q->capacity] = item;
        q->count++;
        pthread_cond_signal(&q->ready); // one consumer
        st = CI_OK;
    }
    pthread_mutex_unlock(&q->lock);
    return st;
}

enum ci_status ci_queue_pop_all(struct ci_queue *q, void **out, int max, int *n) {
    enum ci_status st = CI_OK;
    CI_ASSERT(max >= 0 && (out || max == 0));
    pthread_mutex_lock(&q->lock);
    int k = q->count < max ? q->count : max;
    for (int i = 0; i < k; i++) {
        out[i] = q->items[q->head];
        q->items[q->head] = NULL;
        q->head = (q->head + 1) % q->capacity;
    }
    q->count -= k;
    if (k == 0 && q->count == 0 && q->closed)
        st = CI_ERR_CANCELLED;
    pthread_mutex_unlock(&q->lock);
    *n = k;
    return st;
}

enum ci_status ci_queue_wait(struct ci_queue *q, int64_t timeout_ns) {
    enum ci_status st;
    struct deadline d;
    deadline_init(&d, timeout_ns);
    pthread_mutex_lock(&q->lock);
    for (;;) {
        // Items first: those pushed before close must still be drained.
        if (q->count > 0) {
            st = CI_OK;
            break;
        }
        if (q->closed) {
            st = CI_ERR_CANCELLED;
            break;
        }
        if (q->woken) {
            st = CI_OK;
            break;
        }
        if (d.passed) {
            st = CI_ERR_BUSY;
            break;
        }
        deadline_sleep(&d, &q->ready, &q->lock);
    }
    q->woken = false;
    pthread_mutex_unlock(&q->lock);
    return st;
}

void ci_queue_wake(struct ci_queue *q) {
    pthread_mutex_lock(&q->lock);
    q->woken = true;
    pthread_cond_broadcast(&q->ready);
    pthread_mutex_unlock(&q->lock);
}

void ci_queue_close(struct ci_queue *q) {
    pthread_mutex_lock(&q->lock);
    q->closed = true;
    pthread_cond_broadcast(&q->ready);
    pthread_mutex_unlock(&q->lock);
}

int ci_queue_len(struct ci_queue *q) {
    pthread_mutex_lock(&q->lock);
    int n = q->count;
    pthread_mutex_unlock(&q->lock);
    return n;
}

int ci_queue_capacity(const struct ci_queue *q) {
    return q->capacity; // fixed at creation
}

/* ---- token channel ------------------------------------------------------------------------------------ */

#define SIDE_BIT(side) (1u << (unsigned)(side))
#define BOTH_SIDES     (SIDE_BIT(CI_CHANNEL_PRODUCER) | SIDE_BIT(CI_CHANNEL_CONSUMER))

struct ci_channel {
    pthread_mutex_t lock;
    pthread_cond_t readable; // the consumer sleeps here: event or close
    atomic_bool cancelled;   // set by the consumer, polled by the engine outside the lock
    atomic_uint released;    // SIDE_BIT of each side that has released; the second releaser frees
    int capacity;
    int head;  // oldest event
    int count; // events in the ring
    // The final outcome, valid once closed; kept outside the ring so closing never needs a free slot.
    bool closed;
    bool done; // the consumer has received the whole final event
    uint8_t finish;
    enum ci_status status;
    int64_t t_close_ns;
    size_t n_msg;   // bytes of msg (0 for DONE)
    size_t msg_off; // bytes of msg already handed to the consumer
    char msg[CI_CHANNEL_MSG_MAX + 1];
    ci_channel_notify_fn notify; // under lock
    void *notify_ctx;
    struct ci_event events[]; // [capacity] ring
};

enum ci_status ci_channel_create(int capacity, struct ci_channel **out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    struct ci_channel *ch = NULL;
    bool have_lock = false;
    size_t n_bytes;
    *out = NULL;
    if (capacity < 1 || capacity > CI_CHANNEL_MAX_CAPACITY) {
        st = ci_err_set(err, CI_ERR_INVALID, "token channel capacity %d out of range [1, %d]", capacity,
                        CI_CHANNEL_MAX_CAPACITY);
        goto fail;
    }
    if (!ci_mul_size((size_t)capacity, sizeof ch->events[0], &n_bytes) ||
        !ci_add_size(n_bytes, sizeof *ch, &n_bytes) || !(ch = ci_calloc(1, n_bytes))) {
        st = ci_err_set(err, CI_ERR_NOMEM, "token channel: out of memory (capacity %d)", capacity);
        goto fail;
    }
    ch->capacity = capacity;
    atomic_init(&ch->cancelled, false);
    atomic_init(&ch->released, 0u);
    if (pthread_mutex_init(&ch->lock, NULL) != 0) {
        st = ci_err_set(err, CI_ERR_INTERNAL, "token channel: cannot create its mutex");
        goto fail;
    }
    have_lock = true;
    if (cond_init_monotonic(&ch->readable) != 0) {
        st = ci_err_set(err, CI_ERR_INTERNAL, "token channel: cannot create its condition variable");
        goto fail;
    }
    *out = ch;
    return CI_OK;
fail:
    if (have_lock)
        pthread_mutex_destroy(&ch->lock);
    ci_free(ch);
    return st;
}

static void channel_destroy(struct ci_channel *ch) {
    pthread_cond_destroy(&ch->readable);
    pthread_mutex_destroy(&ch->lock);
    ci_free(ch);
}

void ci_channel_release(struct ci_channel *ch, enum ci_channel_side side) {
    CI_ASSERT(side == CI_CHANNEL_PRODUCER || side == CI_CHANNEL_CONSUMER);
    if (side == CI_CHANNEL_PRODUCER) {
        pthread_mutex_lock(&ch->lock);
        bool closed = ch->closed;
        pthread_mutex_unlock(&ch->lock);
        if (!closed)
            ci_channel_close(ch, 0, CI_ERR_INTERNAL, "the engine ended the stream without a final event");
    } else {
        ci_channel_cancel(ch);
    }
    // acq_rel: everything this side did happens before the other side's free.
    unsigned old = atomic_fetch_or_explicit(&ch->released, SIDE_BIT(side), memory_order_acq_rel);
    CI_ASSERT(!(old & SIDE_BIT(side))); // released twice by the same side
    if ((old | SIDE_BIT(side)) == BOTH_SIDES)
        channel_destroy(ch);
}

enum ci_status ci_channel_send(struct ci_channel *ch, enum ci_event_kind kind, int32_t token, float logprob,
                               int64_t t_ns, const char *text, size_t n_text) {
    enum ci_status st;
    CI_ASSERT(kind == CI_EVENT_TOKEN || kind == CI_EVENT_TEXT);
    CI_ASSERT(text != NULL || n_text == 0);
    if (kind == CI_EVENT_TEXT) {
        token = -1;
        logprob = 0.0f;
    }
    size_t n_pieces = n_text == 0 ? 1 : (n_text - 1) / CI_EVENT_TEXT_MAX + 1;
    if (n_pieces > (size_t)ch->capacity)
        return CI_ERR_LIMIT;
    pthread_mutex_lock(&ch->lock);
    CI_ASSERT(!ch->closed); // the engine sent after closing
    // Read under the lock: once the consumer has cancelled and then received, no send can slip into the
    // slot that receive freed, so a cancelled stream stops within one ring's worth of events.
    if (atomic_load_explicit(&ch->cancelled, memory_order_acquire)) {
        st = CI_ERR_CANCELLED;
    } else if ((size_t)(ch->capacity - ch->count) < n_pieces) {
        st = CI_ERR_BUSY;
    } else {
        size_t off = 0;
        for (size_t i = 0; i < n_pieces; i++) {
            struct ci_event *ev = &ch->events[(ch->head + ch->count) % ch->capacity];
            size_t n = n_text - off < CI_EVENT_TEXT_MAX ? n_text - off : CI_EVENT_TEXT_MAX;
            memset(ev, 0, sizeof *ev);
            ev->t_ns = t_ns;
            ev->token = token;
            ev->logprob = logprob;
            ev->status = CI_OK;
            ev->kind = (uint8_t)kind;
            ev->flags = (uint8_t)((i > 0 ? CI_EVENT_F_CONT : 0) | (i + 1 < n_pieces ? CI_EVENT_F_MORE : 0));
            ev->n_text = (uint8_t)n;
            if (n)
                memcpy(ev->text, text + off, n);
            off += n;
            ch->count++;
        }
        pthread_cond_signal(&ch->readable);
        if (ch->notify)
            ch->notify(ch->notify_ctx);
        st = CI_OK;
    }
    pthread_mutex_unlock(&ch->lock);
    return st;
}

void ci_channel_close(struct ci_channel *ch, int finish, enum ci_status status, const char *msg) {
    CI_ASSERT(finish >= 0 && finish <= UINT8_MAX);
    int64_t now = ci_now_ns();
    pthread_mutex_lock(&ch->lock);
    CI_ASSERT(!ch->closed); // closed twice
    ch->closed = true;
    ch->finish = (uint8_t)finish;
    ch->status = status;
    ch->t_close_ns = now;
    ch->n_msg = 0;
    if (status != CI_OK && msg) {
        size_t n = strlen(msg);
        ch->n_msg = n < CI_CHANNEL_MSG_MAX ? n : CI_CHANNEL_MSG_MAX;
        memcpy(ch->msg, msg, ch->n_msg);
    }
    ch->msg[ch->n_msg] = '\0';
    pthread_cond_broadcast(&ch->readable);
    if (ch->notify)
        ch->notify(ch->notify_ctx);
    pthread_mutex_unlock(&ch->lock);
}

int ci_channel_n_free(struct ci_channel *ch) {
    pthread_mutex_lock(&ch->lock);
    int n = ch->capacity - ch->count;
    pthread_mutex_unlock(&ch->lock);
    return n;
}

bool ci_channel_cancelled(const struct ci_channel *ch) {
    return atomic_load_explicit(&ch->cancelled, memory_order_acquire);
}

// Fills *out with the next piece of the final event (ch->lock held, ring empty, closed, not done).
static void channel_final_piece(struct ci_channel *ch, struct ci_event *out) {
    size_t left = ch->n_msg - ch->msg_off;
    size_t n = left < CI_EVENT_TEXT_MAX ? left : CI_EVENT_TEXT_MAX;
    memset(out, 0, sizeof *out);
    out->t_ns = ch->t_close_ns;
    out->token = -1;
    out->status = (int32_t)ch->status;
    out->kind = ch->status == CI_OK ? CI_EVENT_DONE : CI_EVENT_ERROR;
    out->finish = ch->finish;
    out->flags = (uint8_t)((ch->msg_off > 0 ? CI_EVENT_F_CONT : 0) | (n < left ? CI_EVENT_F_MORE : 0));
    out->n_text = (uint8_t)n;
    if (n)
        memcpy(out->text, ch->msg + ch->msg_off, n);
    ch->msg_off += n;
    if (ch->msg_off == ch->n_msg)
        ch->done = true;
}

enum ci_status ci_channel_recv(struct ci_channel *ch, struct ci_event *out, int64_t timeout_ns) {
    enum ci_status st;
    struct deadline d;
    deadline_init(&d, timeout_ns);
    pthread_mutex_lock(&ch->lock);
    for (;;) {
        if (ch->count > 0) {
            *out = ch->events[ch->head];
            ch->head = (ch->head + 1) % ch->capacity;
            ch->count--;
            st = CI_OK;
            break;
        }
        if (ch->closed) {
            if (ch->done) {
                st = CI_ERR_CANCELLED;
            } else {
                channel_final_piece(ch, out);
                st = CI_OK;
            }
            break;
        }
        if (d.passed) {
            st = CI_ERR_BUSY;
            break;
        }
        deadline_sleep(&d, &ch->readable, &ch->lock);
    }
    pthread_mutex_unlock(&ch->lock);
    return st;
}

void ci_channel_cancel(struct ci_channel *ch) {
    atomic_store_explicit(&ch->cancelled, true, memory_order_release);
}

int ci_channel_capacity(const struct ci_channel *ch) {
    return ch->capacity; // fixed at creation
}

void ci_channel_set_notify(struct ci_channel *ch, ci_channel_notify_fn fn, void *ctx) {
    pthread_mutex_lock(&ch->lock);
    ch->notify = fn;
    ch->notify_ctx = fn ? ctx : NULL;
    bool ready = fn && (ch->count > 0 || (ch->closed && !ch->done));
    // Whatever arrived before the notifier was set is announced now, so nothing falls in between.
    if (ready)
        fn(ctx);
    pthread_mutex_unlock(&ch->lock);
}
