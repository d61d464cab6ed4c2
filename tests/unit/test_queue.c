/* Unit tests for the request queue and the token channel: FIFO order across the ring's wraparound, capacity
 * and BUSY, close semantics, waits that time out or wake on push / wake / close, a multi-producer stress run
 * (every item received exactly once and in each producer's order), channel ordering and text splitting,
 * all-or-nothing sends, recv timeouts, cancellation seen by the producer, the final DONE/ERROR event, and
 * release in either order (memory returns to its starting count only after the second release).
 * Meant to run clean under ASan/UBSan and TSan. */
#include "core/queue.h" // first: the header must compile on its own

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/mem.h"
#include "test.h"

#define MS        1000000LL    // nanoseconds
#define LONG_WAIT (10000 * MS) // "forever" for a test: a wait that times out instead fails the check

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    nanosleep(&ts, NULL);
}

static void *item(uintptr_t v) {
    return (void *)v;
}

static struct ci_queue *make_queue(int capacity) {
    struct ci_queue *q = NULL;
    struct ci_err err = {0};
    if (ci_queue_create(capacity, &q, &err) != CI_OK)
        printf("ci_queue_create: %s\n", err.msg);
    return q;
}

static struct ci_channel *make_channel(int capacity) {
    struct ci_channel *ch = NULL;
    struct ci_err err = {0};
    if (ci_channel_create(capacity, &ch, &err) != CI_OK)
        printf("ci_channel_create: %s\n", err.msg);
    return ch;
}

/* ---- request queue ------------------------------------------------------------------------------------ */

TEST(queue_create_invalid) {
    struct ci_queue *q = (struct ci_queue *)&q;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_queue_create(0, &q, &err), CI_ERR_INVALID);
    ASSERT(q == NULL);
    CHECK(strstr(err.msg, "capacity 0") != NULL);
    ASSERT_STATUS(ci_queue_create(-5, &q, NULL), CI_ERR_INVALID);
    ASSERT_STATUS(ci_queue_create(CI_QUEUE_MAX_CAPACITY + 1, &q, NULL), CI_ERR_INVALID);
    // A limit just above what is in use now leaves no room for the ring.
    ci_mem_set_limit(ci_mem_in_use() + 16);
    enum ci_status st = ci_queue_create(1000, &q, &err);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(q == NULL);
}

TEST(queue_fifo_wraparound) {
    struct ci_queue *q = make_queue(3);
    ASSERT(q);
    ASSERT_EQ_I64(ci_queue_capacity(q), 3);
    // Push two, pop one, many times: head and tail go round the 3-slot ring again and again.
    uintptr_t next_in = 1, next_out = 1;
    for (int round = 0; round < 100; round++) {
        ASSERT_STATUS(ci_queue_push(q, item(next_in++)), CI_OK);
        ASSERT_STATUS(ci_queue_push(q, item(next_in++)), CI_OK);
        void *out[3];
        int n = -1;
        ASSERT_STATUS(ci_queue_pop_all(q, out, 1, &n), CI_OK);
        ASSERT_EQ_I64(n, 1);
        ASSERT_EQ_I64((uintptr_t)out[0], next_out++);
        if (ci_queue_len(q) == 2) { // drain so the next round fits
            ASSERT_STATUS(ci_queue_pop_all(q, out, 3, &n), CI_OK);
            ASSERT_EQ_I64(n, 2);
            ASSERT_EQ_I64((uintptr_t)out[0], next_out++);
            ASSERT_EQ_I64((uintptr_t)out[1], next_out++);
        }
    }
    ASSERT_EQ_I64(next_out + (uintptr_t)ci_queue_len(q), next_in);
    ci_queue_free(q);
}

TEST(queue_capacity_busy) {
    struct ci_queue *q = make_queue(4);
    ASSERT(q);
    for (uintptr_t i = 1; i <= 4; i++)
        ASSERT_STATUS(ci_queue_push(q, item(i)), CI_OK);
    ASSERT_STATUS(ci_queue_push(q, item(5)), CI_ERR_BUSY);
    ASSERT_EQ_I64(ci_queue_len(q), 4);
    void *out[10];
    int n = -1;
    ASSERT_STATUS(ci_queue_pop_all(q, out, 2, &n), CI_OK);
    ASSERT_EQ_I64(n, 2);
    ASSERT_EQ_I64((uintptr_t)out[0], 1);
    ASSERT_EQ_I64((uintptr_t)out[1], 2);
    ASSERT_EQ_I64(ci_queue_len(q), 2);
    ASSERT_STATUS(ci_queue_push(q, item(5)), CI_OK);
    ASSERT_STATUS(ci_queue_push(q, item(6)), CI_OK);
    ASSERT_STATUS(ci_queue_push(q, item(7)), CI_ERR_BUSY); // the refused item is not in the queue
    ASSERT_STATUS(ci_queue_pop_all(q, out, 10, &n), CI_OK);
    ASSERT_EQ_I64(n, 4);
    for (int i = 0; i < 4; i++)
        ASSERT_EQ_I64((uintptr_t)out[i], 3 + i);
    ASSERT_STATUS(ci_queue_pop_all(q, out, 10, &n), CI_OK); // empty but open
    ASSERT_EQ_I64(n, 0);
    ASSERT_STATUS(ci_queue_pop_all(q, NULL, 0, &n), CI_OK);
    ci_queue_free(q);
    ci_queue_free(NULL);
}

TEST(queue_close) {
    struct ci_queue *q = make_queue(8);
    ASSERT(q);
    ASSERT_STATUS(ci_queue_push(q, item(1)), CI_OK);
    ASSERT_STATUS(ci_queue_push(q, item(2)), CI_OK);
    ci_queue_close(q);
    ci_queue_close(q); // idempotent
    ASSERT_STATUS(ci_queue_push(q, item(3)), CI_ERR_CANCELLED);
    ASSERT_EQ_I64(ci_queue_len(q), 2);
    // Items accepted before the close are still delivered.
    ASSERT_STATUS(ci_queue_wait(q, LONG_WAIT), CI_OK);
    void *out[8];
    int n = -1;
    ASSERT_STATUS(ci_queue_pop_all(q, out, 1, &n), CI_OK);
    ASSERT_EQ_I64(n, 1);
    ASSERT_EQ_I64((uintptr_t)out[0], 1);
    ASSERT_STATUS(ci_queue_pop_all(q, out, 8, &n), CI_OK);
    ASSERT_EQ_I64(n, 1);
    ASSERT_EQ_I64((uintptr_t)out[0], 2);
    n = -1;
    ASSERT_STATUS(ci_queue_pop_all(q, out, 8, &n), CI_ERR_CANCELLED);
    ASSERT_EQ_I64(n, 0);
    int64_t t0 = ci_now_ns();
    ASSERT_STATUS(ci_queue_wait(q, LONG_WAIT), CI_ERR_CANCELLED);
    CHECK(ci_now_ns() - t0 < LONG_WAIT / 2); // returned at once, not at the timeout
    ci_queue_wake(q);                        // a wake does not hide the close
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_ERR_CANCELLED);
    ci_queue_free(q);
}

TEST(queue_wait_timeout) {
    struct ci_queue *q = make_queue(2);
    ASSERT(q);
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_ERR_BUSY);
    int64_t t0 = ci_now_ns();
    ASSERT_STATUS(ci_queue_wait(q, 20 * MS), CI_ERR_BUSY);
    CHECK(ci_now_ns() - t0 >= 20 * MS);
    ASSERT_STATUS(ci_queue_push(q, item(1)), CI_OK);
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_OK); // an item is waiting: no sleep at all
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_OK); // wait does not consume items
    ASSERT_EQ_I64(ci_queue_len(q), 1);
    ci_queue_free(q);
}

enum waker_action { WAKER_PUSH, WAKER_WAKE, WAKER_CLOSE };

struct waker {
    struct ci_queue *q;
    enum waker_action action;
};

static void *waker_main(void *arg) {
    struct waker *w = arg;
    sleep_ns(20 * MS); // let the main thread go to sleep in ci_queue_wait first
    if (w->action == WAKER_PUSH)
        ci_queue_push(w->q, item(42));
    else if (w->action == WAKER_WAKE)
        ci_queue_wake(w->q);
    else
        ci_queue_close(w->q);
    return NULL;
}

/* The main thread sleeps in ci_queue_wait with a long timeout while another thread acts; returns the wait's
 * status (a missed wakeup would show as CI_ERR_BUSY after LONG_WAIT). */
static enum ci_status wait_while(struct ci_queue *q, enum waker_action action) {
    struct waker w = {q, action};
    pthread_t t;
    if (pthread_create(&t, NULL, waker_main, &w) != 0)
        return CI_ERR_INTERNAL;
    enum ci_status st = ci_queue_wait(q, LONG_WAIT);
    pthread_join(t, NULL);
    return st;
}

TEST(queue_wait_wakes_on_push) {
    struct ci_queue *q = make_queue(2);
    ASSERT(q);
    ASSERT_STATUS(wait_while(q, WAKER_PUSH), CI_OK);
    void *out[2];
    int n = -1;
    ASSERT_STATUS(ci_queue_pop_all(q, out, 2, &n), CI_OK);
    ASSERT_EQ_I64(n, 1);
    ASSERT_EQ_I64((uintptr_t)out[0], 42);
    ci_queue_free(q);
}

TEST(queue_wait_wakes_on_wake) {
    struct ci_queue *q = make_queue(2);
    ASSERT(q);
    ASSERT_STATUS(wait_while(q, WAKER_WAKE), CI_OK);
    ASSERT_EQ_I64(ci_queue_len(q), 0);
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_ERR_BUSY); // the wake was consumed
    // A wake posted before the wait is not lost.
    ci_queue_wake(q);
    ci_queue_wake(q); // wakes do not accumulate
    ASSERT_STATUS(ci_queue_wait(q, LONG_WAIT), CI_OK);
    ASSERT_STATUS(ci_queue_wait(q, 0), CI_ERR_BUSY);
    ci_queue_free(q);
}

TEST(queue_wait_wakes_on_close) {
    struct ci_queue *q = make_queue(2);
    ASSERT(q);
    ASSERT_STATUS(wait_while(q, WAKER_CLOSE), CI_ERR_CANCELLED);
    ci_queue_free(q);
}

#define N_PRODUCERS 4
#define N_PER       10000

struct producer {
    struct ci_queue *q;
    int index;
    long n_busy; // pushes refused because the queue was full
    enum ci_status bad;
};

static void *producer_main(void *arg) {
    struct producer *p = arg;
    for (uintptr_t i = 0; i < N_PER; i++) {
        // Item value: producer index and sequence number, +1 so no item is NULL.
        void *it = item((uintptr_t)p->index * N_PER + i + 1);
        enum ci_status st;
        while ((st = ci_queue_push(p->q, it)) == CI_ERR_BUSY) {
            p->n_busy++;
            sched_yield();
        }
        if (st != CI_OK) {
            p->bad = st;
            break;
        }
    }
    return NULL;
}

TEST(queue_mpsc_stress) {
    struct ci_queue *q = make_queue(64);
    ASSERT(q);
    static unsigned char seen[N_PRODUCERS * N_PER];
    memset(seen, 0, sizeof seen);
    struct producer prod[N_PRODUCERS];
    pthread_t threads[N_PRODUCERS];
    for (int i = 0; i < N_PRODUCERS; i++) {
        prod[i] = (struct producer){q, i, 0, CI_OK};
        ASSERT(pthread_create(&threads[i], NULL, producer_main, &prod[i]) == 0);
    }
    int last[N_PRODUCERS]; // last sequence number seen from each producer
    for (int i = 0; i < N_PRODUCERS; i++)
        last[i] = -1;
    int received = 0, out_of_order = 0, bad_value = 0, idle_waits = 0;
    while (received < N_PRODUCERS * N_PER) {
        void *out[32];
        int n = 0;
        if (ci_queue_pop_all(q, out, 32, &n) != CI_OK)
            break;
        if (n == 0) {
            // Producers might all be done and the wait would time out: that only ends in a failed count.
            if (ci_queue_wait(q, 1000 * MS) == CI_ERR_BUSY && ++idle_waits > 5)
                break;
            continue;
        }
        for (int k = 0; k < n; k++) {
            uintptr_t v = (uintptr_t)out[k];
            if (v < 1 || v > N_PRODUCERS * N_PER) {
                bad_value++;
                continue;
            }
            seen[v - 1]++;
            int pi = (int)((v - 1) / N_PER), seq = (int)((v - 1) % N_PER);
            if (seq <= last[pi])
                out_of_order++;
            last[pi] = seq;
        }
        received += n;
    }
    for (int i = 0; i < N_PRODUCERS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < N_PRODUCERS; i++)
        CHECK(prod[i].bad == CI_OK);
    ASSERT_EQ_I64(bad_value, 0);
    ASSERT_EQ_I64(received, N_PRODUCERS * N_PER);
    int missing = 0, dup = 0;
    for (int i = 0; i < N_PRODUCERS * N_PER; i++) {
        missing += seen[i] == 0;
        dup += seen[i] > 1;
    }
    ASSERT_EQ_I64(missing, 0);
    ASSERT_EQ_I64(dup, 0);
    ASSERT_EQ_I64(out_of_order, 0); // each producer's items arrive in the order it pushed them
    ASSERT_EQ_I64(ci_queue_len(q), 0);
    ci_queue_free(q);
}

/* ---- token channel ------------------------------------------------------------------------------------ */

/* Receives with a long timeout; the test fails (status BUSY) if an event that should be there is not. */
static enum ci_status recv_one(struct ci_channel *ch, struct ci_event *ev) {
    return ci_channel_recv(ch, ev, LONG_WAIT);
}

static enum ci_status send_token(struct ci_channel *ch, int32_t token, const char *text) {
    return ci_channel_send(ch, CI_EVENT_TOKEN, token, -0.25f * (float)token, 1000 + token, text,
                           strlen(text));
}

TEST(channel_create_invalid) {
    struct ci_channel *ch = (struct ci_channel *)&ch;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_channel_create(0, &ch, &err), CI_ERR_INVALID);
    ASSERT(ch == NULL);
    CHECK(strstr(err.msg, "capacity 0") != NULL);
    ASSERT_STATUS(ci_channel_create(CI_CHANNEL_MAX_CAPACITY + 1, &ch, NULL), CI_ERR_INVALID);
    ci_mem_set_limit(ci_mem_in_use() + 16);
    enum ci_status st = ci_channel_create(16, &ch, NULL);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(ch == NULL);
}

TEST(channel_events_and_done) {
    size_t base = ci_mem_in_use();
    struct ci_channel *ch = make_channel(8);
    ASSERT(ch);
    ASSERT_EQ_I64(ci_channel_capacity(ch), 8);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 8);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 5, -0.5f, 100, "ab", 2), CI_OK);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TEXT, 7, -9.0f, 200, "\xe2\x82\xac", 3), CI_OK);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 6, -1.5f, 300, NULL, 0), CI_OK);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 5);
    CHECK(!ci_channel_cancelled(ch));
    ci_channel_close(ch, 2, CI_OK, "a DONE carries no message");

    struct ci_event ev;
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_TOKEN);
    ASSERT_EQ_I64(ev.token, 5);
    ASSERT_NEAR(ev.logprob, -0.5, 0);
    ASSERT_EQ_I64(ev.t_ns, 100);
    ASSERT_EQ_I64(ev.status, CI_OK);
    ASSERT_EQ_I64(ev.flags, 0);
    ASSERT_EQ_I64(ev.n_text, 2);
    ASSERT(memcmp(ev.text, "ab", 2) == 0);

    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_TEXT);
    ASSERT_EQ_I64(ev.token, -1); // TEXT ignores the token and logprob passed
    ASSERT_NEAR(ev.logprob, 0, 0);
    ASSERT_EQ_I64(ev.t_ns, 200);
    ASSERT_EQ_I64(ev.n_text, 3);
    ASSERT(memcmp(ev.text, "\xe2\x82\xac", 3) == 0);

    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_TOKEN);
    ASSERT_EQ_I64(ev.token, 6);
    ASSERT_EQ_I64(ev.n_text, 0);
    ASSERT_EQ_I64(ev.flags, 0);

    int64_t t_before = ci_now_ns();
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_DONE);
    ASSERT_EQ_I64(ev.status, CI_OK);
    ASSERT_EQ_I64(ev.finish, 2);
    ASSERT_EQ_I64(ev.token, -1);
    ASSERT_EQ_I64(ev.n_text, 0);
    ASSERT_EQ_I64(ev.flags, 0);
    CHECK(ev.t_ns > 0 && ev.t_ns <= t_before); // stamped at close, on the ci_now_ns clock

    ASSERT_STATUS(ci_channel_recv(ch, &ev, LONG_WAIT), CI_ERR_CANCELLED); // over, at once
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_CANCELLED);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ASSERT_EQ_I64(ci_mem_in_use(), base);
}

TEST(channel_full_busy_then_drains) {
    struct ci_channel *ch = make_channel(4);
    ASSERT(ch);
    for (int i = 0; i < 4; i++)
        ASSERT_STATUS(send_token(ch, i, "x"), CI_OK);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 0);
    ASSERT_STATUS(send_token(ch, 4, "x"), CI_ERR_BUSY); // never blocks
    struct ci_event ev;
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 0);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 1);
    ASSERT_STATUS(send_token(ch, 4, "x"), CI_OK); // the retry of the refused token
    ASSERT_STATUS(send_token(ch, 5, "x"), CI_ERR_BUSY);
    for (int want = 1; want <= 4; want++) {
        ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
        ASSERT_EQ_I64(ev.token, want);
        ASSERT_EQ_I64(ev.t_ns, 1000 + want);
    }
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_BUSY); // empty, still open
    ASSERT_EQ_I64(ci_channel_n_free(ch), 4);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
}

TEST(channel_long_text_split) {
    char text[150];
    for (int i = 0; i < 150; i++)
        text[i] = (char)('A' + i % 26);
    struct ci_channel *ch = make_channel(8);
    ASSERT(ch);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 9, -2.0f, 77, text, 150), CI_OK);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 5); // 150 bytes = 64 + 64 + 22: three slots
    int want_len[3] = {64, 64, 22};
    int want_flags[3] = {CI_EVENT_F_MORE, CI_EVENT_F_MORE | CI_EVENT_F_CONT, CI_EVENT_F_CONT};
    char got[150];
    size_t n_got = 0;
    for (int i = 0; i < 3; i++) {
        struct ci_event ev;
        ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
        ASSERT_EQ_I64(ev.kind, CI_EVENT_TOKEN);
        ASSERT_EQ_I64(ev.token, 9);
        ASSERT_EQ_I64(ev.t_ns, 77);
        ASSERT_NEAR(ev.logprob, -2.0, 0);
        ASSERT_EQ_I64(ev.n_text, want_len[i]);
        ASSERT_EQ_I64(ev.flags, want_flags[i]);
        memcpy(got + n_got, ev.text, ev.n_text);
        n_got += ev.n_text;
    }
    ASSERT_EQ_I64(n_got, 150);
    ASSERT(memcmp(got, text, 150) == 0);

    // Exactly one piece's worth is one event; one byte more is two.
    struct ci_event ev;
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TEXT, 0, 0, 1, text, CI_EVENT_TEXT_MAX), CI_OK);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TEXT, 0, 0, 2, text, CI_EVENT_TEXT_MAX + 1), CI_OK);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.n_text, CI_EVENT_TEXT_MAX);
    ASSERT_EQ_I64(ev.flags, 0);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.flags, CI_EVENT_F_MORE);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.flags, CI_EVENT_F_CONT);
    ASSERT_EQ_I64(ev.n_text, 1);
    ASSERT_EQ_I64(ev.text[0], text[CI_EVENT_TEXT_MAX]);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);

    // All or nothing: with 2 slots free a 3-piece text is refused whole, and goes once a slot frees.
    ch = make_channel(4);
    ASSERT(ch);
    ASSERT_STATUS(send_token(ch, 1, "a"), CI_OK);
    ASSERT_STATUS(send_token(ch, 2, "b"), CI_OK);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 3, 0, 0, text, 150), CI_ERR_BUSY);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 2);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 1);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 3, 0, 0, text, 150), CI_OK);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 2);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 3);
    ASSERT_EQ_I64(ev.flags, CI_EVENT_F_MORE);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);

    // A text needing more slots than the channel has can never go.
    ch = make_channel(2);
    ASSERT(ch);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 3, 0, 0, text, 150), CI_ERR_LIMIT);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 2);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
}

struct late_sender {
    struct ci_channel *ch;
    int64_t delay_ns;
};

static void *late_sender_main(void *arg) {
    struct late_sender *s = arg;
    sleep_ns(s->delay_ns);
    ci_channel_send(s->ch, CI_EVENT_TOKEN, 11, 0, 0, "late", 4);
    return NULL;
}

TEST(channel_recv_timeout) {
    struct ci_channel *ch = make_channel(4);
    ASSERT(ch);
    struct ci_event ev;
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_BUSY);
    int64_t t0 = ci_now_ns();
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 20 * MS), CI_ERR_BUSY);
    CHECK(ci_now_ns() - t0 >= 20 * MS);
    // A blocked recv wakes when the producer sends.
    struct late_sender s = {ch, 20 * MS};
    pthread_t t;
    ASSERT(pthread_create(&t, NULL, late_sender_main, &s) == 0);
    enum ci_status st = ci_channel_recv(ch, &ev, LONG_WAIT);
    pthread_join(t, NULL);
    ASSERT_STATUS(st, CI_OK);
    ASSERT_EQ_I64(ev.token, 11);
    ASSERT_EQ_I64(ev.n_text, 4);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER); // closes with an internal error: the producer never closed
    ASSERT_STATUS(ci_channel_recv(ch, &ev, LONG_WAIT), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_ERROR);
    ASSERT_EQ_I64(ev.status, CI_ERR_INTERNAL);
    CHECK(ev.n_text > 0);
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_CANCELLED);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
}

/* Reads the final event (possibly in pieces) into msg; returns its kind, or -1 on a malformed stream. */
static int recv_final(struct ci_channel *ch, struct ci_event *ev, char *msg, size_t cap, size_t *n_msg) {
    *n_msg = 0;
    for (int piece = 0;; piece++) {
        if (recv_one(ch, ev) != CI_OK)
            return -1;
        if (ev->kind != CI_EVENT_DONE && ev->kind != CI_EVENT_ERROR)
            return -1;
        if (((ev->flags & CI_EVENT_F_CONT) != 0) != (piece > 0) || *n_msg + ev->n_text > cap)
            return -1;
        memcpy(msg + *n_msg, ev->text, ev->n_text);
        *n_msg += ev->n_text;
        if (!(ev->flags & CI_EVENT_F_MORE))
            return ev->kind;
    }
}

TEST(channel_error_message) {
    char long_msg[301];
    for (int i = 0; i < 300; i++)
        long_msg[i] = (char)('a' + i % 23);
    long_msg[300] = '\0';
    char got[400];
    size_t n = 0;
    struct ci_event ev;

    struct ci_channel *ch = make_channel(2);
    ASSERT(ch);
    long_msg[200] = '\0'; // a 200-byte message: four pieces, more than the ring could hold
    ci_channel_close(ch, 1, CI_ERR_INVALID, long_msg);
    ASSERT_EQ_I64(recv_final(ch, &ev, got, sizeof got, &n), CI_EVENT_ERROR);
    ASSERT_EQ_I64(ev.status, CI_ERR_INVALID);
    ASSERT_EQ_I64(ev.finish, 1);
    ASSERT_EQ_I64(n, 200);
    ASSERT(memcmp(got, long_msg, 200) == 0);
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_CANCELLED);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);

    ch = make_channel(2);
    ASSERT(ch);
    long_msg[200] = 'x'; // 300 bytes: truncated
    ci_channel_close(ch, 0, CI_ERR_LIMIT, long_msg);
    ASSERT_EQ_I64(recv_final(ch, &ev, got, sizeof got, &n), CI_EVENT_ERROR);
    ASSERT_EQ_I64(n, CI_CHANNEL_MSG_MAX);
    ASSERT(memcmp(got, long_msg, CI_CHANNEL_MSG_MAX) == 0);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);

    ch = make_channel(2);
    ASSERT(ch);
    ci_channel_close(ch, 255, CI_ERR_NOMEM, NULL);
    ASSERT_EQ_I64(recv_final(ch, &ev, got, sizeof got, &n), CI_EVENT_ERROR);
    ASSERT_EQ_I64(n, 0);
    ASSERT_EQ_I64(ev.finish, 255);
    ASSERT_EQ_I64(ev.status, CI_ERR_NOMEM);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
}

/* The engine's side of a cancelled stream: streams tokens 0, 1, 2, ... (retrying on BUSY) until the channel
 * says the consumer cancelled, then closes and releases. */
struct engine_sim {
    struct ci_channel *ch;
    int n_sent;
    bool saw_cancel_flag; // ci_channel_cancelled was true when send said CANCELLED
    enum ci_status bad;
};

static void *engine_sim_main(void *arg) {
    struct engine_sim *e = arg;
    for (;;) {
        char text[16];
        snprintf(text, sizeof text, "t%d", e->n_sent);
        enum ci_status st = send_token(e->ch, e->n_sent, text);
        if (st == CI_OK) {
            e->n_sent++;
        } else if (st == CI_ERR_BUSY) {
            sched_yield();
        } else if (st == CI_ERR_CANCELLED) {
            e->saw_cancel_flag = ci_channel_cancelled(e->ch);
            break;
        } else {
            e->bad = st;
            break;
        }
    }
    ci_channel_close(e->ch, 3, CI_ERR_CANCELLED, "cancelled by the client");
    ci_channel_release(e->ch, CI_CHANNEL_PRODUCER);
    return NULL;
}

TEST(channel_cancel) {
    size_t base = ci_mem_in_use();
    struct ci_channel *ch = make_channel(4);
    ASSERT(ch);
    CHECK(!ci_channel_cancelled(ch));
    ASSERT_STATUS(send_token(ch, 0, "a"), CI_OK);
    ci_channel_cancel(ch);
    ci_channel_cancel(ch); // idempotent
    CHECK(ci_channel_cancelled(ch));
    ASSERT_STATUS(send_token(ch, 1, "b"), CI_ERR_CANCELLED);
    ASSERT_EQ_I64(ci_channel_n_free(ch), 3); // nothing was sent
    ci_channel_close(ch, 0, CI_ERR_CANCELLED, NULL);
    struct ci_event ev;
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK); // what was sent before still arrives, then the final
    ASSERT_EQ_I64(ev.token, 0);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_ERROR);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);

    // Across threads: the consumer reads ten tokens, cancels, and reads on to the final event.
    ch = make_channel(4);
    ASSERT(ch);
    struct engine_sim e = {ch, 0, false, CI_OK};
    pthread_t t;
    ASSERT(pthread_create(&t, NULL, engine_sim_main, &e) == 0);
    int next = 0, wrong = 0;
    for (; next < 10; next++) {
        if (recv_one(ch, &ev) != CI_OK || ev.kind != CI_EVENT_TOKEN || ev.token != next)
            wrong++;
    }
    ci_channel_cancel(ch);
    for (;;) {
        if (recv_one(ch, &ev) != CI_OK) {
            wrong++;
            break;
        }
        if (ev.kind != CI_EVENT_TOKEN)
            break;
        char want[16];
        snprintf(want, sizeof want, "t%d", next);
        if (ev.token != next || ev.n_text != strlen(want) || memcmp(ev.text, want, ev.n_text) != 0)
            wrong++;
        next++;
    }
    pthread_join(t, NULL);
    ASSERT_EQ_I64(wrong, 0);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_ERROR);
    ASSERT_EQ_I64(ev.status, CI_ERR_CANCELLED);
    ASSERT_EQ_I64(ev.finish, 3);
    ASSERT_STATUS(e.bad, CI_OK);
    CHECK(e.saw_cancel_flag);
    ASSERT_EQ_I64(next, e.n_sent); // every token sent was received, none after the final event
    CHECK(e.n_sent <= 10 + 4);     // at most a full ring (4) was in flight when the consumer cancelled
    ASSERT_STATUS(ci_channel_recv(ch, &ev, 0), CI_ERR_CANCELLED);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ASSERT_EQ_I64(ci_mem_in_use(), base);
}

TEST(channel_release_orders) {
    size_t base = ci_mem_in_use();
    struct ci_event ev;

    // Engine finishes first: the events outlive the producer's release.
    struct ci_channel *ch = make_channel(4);
    ASSERT(ch);
    ASSERT_STATUS(send_token(ch, 0, "x"), CI_OK);
    ASSERT_STATUS(send_token(ch, 1, "y"), CI_OK);
    ci_channel_close(ch, 0, CI_OK, NULL);
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    CHECK(ci_mem_in_use() > base); // still alive for the consumer
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 0);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.token, 1);
    ASSERT_STATUS(recv_one(ch, &ev), CI_OK);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_DONE);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    ASSERT_EQ_I64(ci_mem_in_use(), base);

    // Client disconnects first: its release alone cancels, and the engine still finishes normally.
    ch = make_channel(4);
    ASSERT(ch);
    ASSERT_STATUS(send_token(ch, 0, "x"), CI_OK);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
    CHECK(ci_mem_in_use() > base);
    CHECK(ci_channel_cancelled(ch));
    ASSERT_STATUS(send_token(ch, 1, "y"), CI_ERR_CANCELLED);
    ci_channel_close(ch, 0, CI_ERR_CANCELLED, "client gone");
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ASSERT_EQ_I64(ci_mem_in_use(), base);
}

struct releaser {
    struct ci_channel *ch;
    enum ci_channel_side side;
};

static void *releaser_main(void *arg) {
    struct releaser *r = arg;
    if (r->side == CI_CHANNEL_PRODUCER) {
        send_token(r->ch, 0, "x");
        ci_channel_close(r->ch, 0, CI_OK, NULL);
    } else {
        struct ci_event ev;
        ci_channel_recv(r->ch, &ev, 0); // whatever is there, or nothing
    }
    ci_channel_release(r->ch, r->side);
    return NULL;
}

TEST(channel_release_race) {
    // Both sides finish at the same moment: exactly one of them frees (ASan/TSan would see a double free, a
    // use after free or a race; the count would see a leak).
    size_t base = ci_mem_in_use();
    for (int i = 0; i < 200; i++) {
        struct ci_channel *ch = make_channel(2);
        ASSERT(ch);
        struct releaser rp = {ch, CI_CHANNEL_PRODUCER}, rc = {ch, CI_CHANNEL_CONSUMER};
        pthread_t tp, tc;
        ASSERT(pthread_create(&tp, NULL, releaser_main, &rp) == 0);
        ASSERT(pthread_create(&tc, NULL, releaser_main, &rc) == 0);
        pthread_join(tp, NULL);
        pthread_join(tc, NULL);
    }
    ASSERT_EQ_I64(ci_mem_in_use(), base);
}

/* A stream across threads with a tiny ring: the producer hits BUSY often and retries; every token arrives
 * once, in order, with its text, then the final event. */
struct streamer {
    struct ci_channel *ch;
    int n_tokens;
    long n_busy;
};

static void *streamer_main(void *arg) {
    struct streamer *s = arg;
    for (int i = 0; i < s->n_tokens;) {
        char text[100];
        // Every 7th token carries a long text (two pieces), so multi-piece sends race with the reader too.
        int n = i % 7 == 0 ? snprintf(text, sizeof text, "%070d", i) : snprintf(text, sizeof text, "<%d>", i);
        enum ci_status st = ci_channel_send(s->ch, CI_EVENT_TOKEN, i, 0, i, text, (size_t)n);
        if (st == CI_OK) {
            i++;
        } else {
            s->n_busy++;
            sched_yield();
        }
    }
    ci_channel_close(s->ch, 0, CI_OK, NULL);
    ci_channel_release(s->ch, CI_CHANNEL_PRODUCER);
    return NULL;
}

TEST(channel_stream_order) {
    struct ci_channel *ch = make_channel(3);
    ASSERT(ch);
    struct streamer s = {ch, 5000, 0};
    pthread_t t;
    ASSERT(pthread_create(&t, NULL, streamer_main, &s) == 0);
    int next = 0, wrong = 0;
    char buf[100];
    size_t n_buf = 0;
    struct ci_event ev;
    for (;;) {
        if (recv_one(ch, &ev) != CI_OK) {
            wrong++;
            break;
        }
        if (ev.kind != CI_EVENT_TOKEN)
            break;
        if (ev.token != next || n_buf + ev.n_text > sizeof buf) {
            wrong++;
            break;
        }
        memcpy(buf + n_buf, ev.text, ev.n_text);
        n_buf += ev.n_text;
        if (ev.flags & CI_EVENT_F_MORE)
            continue;
        char want[100];
        int n = next % 7 == 0 ? snprintf(want, sizeof want, "%070d", next)
                              : snprintf(want, sizeof want, "<%d>", next);
        if (n_buf != (size_t)n || memcmp(buf, want, n_buf) != 0)
            wrong++;
        n_buf = 0;
        next++;
    }
    pthread_join(t, NULL);
    ASSERT_EQ_I64(wrong, 0);
    ASSERT_EQ_I64(next, 5000);
    ASSERT_EQ_I64(ev.kind, CI_EVENT_DONE);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
}

/* The notifier: called after every send and the close, announced at once when set over waiting events,
 * never called after it was removed; a consumer that only polls (timeout 0) on each notification sees
 * every event. */
struct notes {
    atomic_int n;
};
static void note(void *ctx) {
    atomic_fetch_add(&((struct notes *)ctx)->n, 1);
}

TEST(channel_notify) {
    struct ci_channel *ch = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_channel_create(8, &ch, &err), CI_OK);
    struct notes a = {0}, b = {0};
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 5, 0.0f, 1, "x", 1), CI_OK);
    ci_channel_set_notify(ch, note, &a);
    CHECK(atomic_load(&a.n) == 1); // an event was waiting
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 6, 0.0f, 2, "y", 1), CI_OK);
    CHECK(atomic_load(&a.n) == 2);
    ci_channel_set_notify(ch, note, &b);
    CHECK(atomic_load(&b.n) == 1);
    ci_channel_set_notify(ch, NULL, NULL);
    ASSERT_STATUS(ci_channel_send(ch, CI_EVENT_TOKEN, 7, 0.0f, 3, "z", 1), CI_OK);
    CHECK(atomic_load(&a.n) == 2 && atomic_load(&b.n) == 1);
    struct ci_event ev;
    for (int i = 0; i < 3; i++)
        CHECK(ci_channel_recv(ch, &ev, 0) == CI_OK);
    ci_channel_set_notify(ch, note, &a);
    CHECK(atomic_load(&a.n) == 2); // nothing waiting: no call
    ci_channel_close(ch, 0, CI_OK, NULL);
    CHECK(atomic_load(&a.n) == 3);
    ci_channel_set_notify(ch, note, &b);
    CHECK(atomic_load(&b.n) == 2); // the final event waits
    CHECK(ci_channel_recv(ch, &ev, 0) == CI_OK && ev.kind == CI_EVENT_DONE);
    ci_channel_set_notify(ch, note, &b);
    CHECK(atomic_load(&b.n) == 2); // everything taken
    ci_channel_release(ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(ch, CI_CHANNEL_CONSUMER);
}

struct notify_consumer {
    struct ci_channel *ch;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int pending; // notifications not yet acted on
    int tokens;
    bool done;
};
static void wake_consumer(void *ctx) {
    struct notify_consumer *c = ctx;
    pthread_mutex_lock(&c->lock);
    c->pending++;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->lock);
}
static void *notified_reader(void *arg) {
    struct notify_consumer *c = arg;
    while (!c->done) {
        pthread_mutex_lock(&c->lock);
        while (c->pending == 0)
            pthread_cond_wait(&c->cv, &c->lock);
        c->pending = 0;
        pthread_mutex_unlock(&c->lock);
        struct ci_event ev;
        while (ci_channel_recv(c->ch, &ev, 0) == CI_OK) { // only ever polls
            if (ev.kind == CI_EVENT_TOKEN)
                c->tokens++;
            else
                c->done = true;
        }
    }
    return NULL;
}

TEST(channel_notify_drives_a_polling_consumer) {
    struct notify_consumer c = {0};
    struct ci_err err = {0};
    ASSERT_STATUS(ci_channel_create(4, &c.ch, &err), CI_OK);
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cv, NULL);
    ci_channel_set_notify(c.ch, wake_consumer, &c);
    pthread_t t;
    ASSERT(pthread_create(&t, NULL, notified_reader, &c) == 0);
    int sent = 0;
    while (sent < 20000) {
        enum ci_status st = ci_channel_send(c.ch, CI_EVENT_TOKEN, sent, 0.0f, sent, "t", 1);
        if (st == CI_OK)
            sent++;
        else
            sched_yield();
    }
    ci_channel_close(c.ch, 0, CI_OK, NULL);
    pthread_join(t, NULL); // would hang if a notification were lost
    CHECK(c.tokens == 20000 && c.done);
    ci_channel_set_notify(c.ch, NULL, NULL);
    ci_channel_release(c.ch, CI_CHANNEL_PRODUCER);
    ci_channel_release(c.ch, CI_CHANNEL_CONSUMER);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.lock);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(queue_create_invalid);
    RUN(queue_fifo_wraparound);
    RUN(queue_capacity_busy);
    RUN(queue_close);
    RUN(queue_wait_timeout);
    RUN(queue_wait_wakes_on_push);
    RUN(queue_wait_wakes_on_wake);
    RUN(queue_wait_wakes_on_close);
    RUN(queue_mpsc_stress);
    RUN(channel_create_invalid);
    RUN(channel_events_and_done);
    RUN(channel_full_busy_then_drains);
    RUN(channel_long_text_split);
    RUN(channel_recv_timeout);
    RUN(channel_error_message);
    RUN(channel_cancel);
    RUN(channel_release_orders);
    RUN(channel_release_race);
    RUN(channel_stream_order);
    RUN(channel_notify);
    RUN(channel_notify_drives_a_polling_consumer);
    return test_exit_code();
}
