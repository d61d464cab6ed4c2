/* The kernel thread pool (src/core/threadpool.h), by its contract: ci_threadpool_run(tp, fn, ctx, n) calls
 * fn(ctx, task, thread) exactly once for every task in [0, n) and returns only when all are done; thread is in
 * [0, n_threads), thread 0 is the calling thread, and no two tasks run at the same time with the same thread
 * index (kernels keep per-thread scratch by it).  Checked for a table of (n_threads, n_tasks) pairs with more
 * threads than tasks and the reverse, zero and negative task counts, jobs back to back (decode's pattern) and
 * after the workers have gone to sleep, two pools driven from two threads at once, pools nested inside a
 * pool's tasks, the creation limits, and every allocation of creation failing in turn. */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/mem.h"
#include "test.h"

#define MAX_TASKS 1000
#define MAX_POOL  16

struct job {
    atomic_int runs[MAX_TASKS]; // how often each task ran
    atomic_int busy[MAX_POOL];  // a task with this thread index is running
    atomic_int bad_thread;      // a thread index out of range
    atomic_int bad_task;        // a task index out of range
    atomic_int shared_index;    // two tasks ran at once with the same thread index
    atomic_int caller_mismatch; // thread 0 not on the caller, or another index on the caller
    atomic_int on_thread[MAX_POOL];
    pthread_t caller;
    int n_threads;
    int n_tasks;
    int spin; // busy work per task, so that tasks overlap
};

static void job_reset(struct job *j, int n_threads, int n_tasks, int spin) {
    for (int i = 0; i < n_tasks; i++)
        atomic_init(&j->runs[i], 0);
    for (int i = 0; i < MAX_POOL; i++) {
        atomic_init(&j->busy[i], 0);
        atomic_init(&j->on_thread[i], 0);
    }
    atomic_init(&j->bad_thread, 0);
    atomic_init(&j->bad_task, 0);
    atomic_init(&j->shared_index, 0);
    atomic_init(&j->caller_mismatch, 0);
    j->caller = pthread_self();
    j->n_threads = n_threads;
    j->n_tasks = n_tasks;
    j->spin = spin;
}

static void task(void *ctx, int t, int thread) {
    struct job *j = ctx;
    if (t < 0 || t >= j->n_tasks) {
        atomic_store(&j->bad_task, 1);
        return;
    }
    atomic_fetch_add(&j->runs[t], 1);
    if (thread < 0 || thread >= j->n_threads || thread >= MAX_POOL) {
        atomic_store(&j->bad_thread, 1);
        return;
    }
    if (atomic_exchange(&j->busy[thread], 1) != 0)
        atomic_store(&j->shared_index, 1);
    atomic_fetch_add(&j->on_thread[thread], 1);
    if ((thread == 0) != (pthread_equal(pthread_self(), j->caller) != 0))
        atomic_store(&j->caller_mismatch, 1);
    volatile unsigned x = 0;
    for (int i = 0; i < j->spin; i++)
        x += (unsigned)i;
    atomic_store(&j->busy[thread], 0);
}

/* Runs n tasks on tp and checks the contract; false (after one FAIL line) on a violation. */
static bool run_and_check(struct ci_threadpool *tp, struct job *j, int n, int spin, const char *what) {
    int n_threads = ci_threadpool_n_threads(tp);
    job_reset(j, n_threads, n > 0 ? n : 0, spin);
    ci_threadpool_run(tp, task, j, n);
    for (int i = 0; i < n; i++) {
        int runs =
            atomic_load(&j->runs[i]); // read once: ci_threadpool_run has returned, nothing may change it
        if (runs != 1) {
            FAIL_FIRST("%s: %d threads, %d tasks: task %d ran %d times", what, n_threads, n, i, runs);
            return false;
        }
    }
    if (atomic_load(&j->bad_task) || atomic_load(&j->bad_thread) || atomic_load(&j->shared_index) ||
        atomic_load(&j->caller_mismatch)) {
        FAIL_FIRST("%s: %d threads, %d tasks: task index out of range %d, thread index out of range %d, "
                   "shared %d, caller mismatch %d",
                   what, n_threads, n, atomic_load(&j->bad_task), atomic_load(&j->bad_thread),
                   atomic_load(&j->shared_index), atomic_load(&j->caller_mismatch));
        return false;
    }
    return true;
}

static struct job the_job; // large: not on the stack

TEST(every_task_once_for_each_pair) {
    const int threads[] = {1, 2, 3, 4, 8, 16};
    const int tasks[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000};
    for (size_t a = 0; a < sizeof threads / sizeof threads[0]; a++) {
        struct ci_threadpool *tp = NULL;
        ASSERT_STATUS(ci_threadpool_create(threads[a], &tp, NULL), CI_OK);
        ASSERT_EQ_I64(ci_threadpool_n_threads(tp), threads[a]);
        for (size_t b = 0; b < sizeof tasks / sizeof tasks[0]; b++)
            for (int spin = 0; spin <= 2000; spin += 2000)
                run_and_check(tp, &the_job, tasks[b], spin, "table");
        ci_threadpool_free(tp);
    }
}

/* Zero or a negative count runs nothing and returns at once, and the pool works afterwards. */
TEST(no_tasks) {
    for (int n_threads = 1; n_threads <= 3; n_threads++) {
        struct ci_threadpool *tp = NULL;
        ASSERT_STATUS(ci_threadpool_create(n_threads, &tp, NULL), CI_OK);
        const int counts[] = {0, -1, -1000};
        for (int i = 0; i < 3; i++) {
            job_reset(&the_job, n_threads, 8, 0);
            ci_threadpool_run(tp, task, &the_job, counts[i]);
            for (int k = 0; k < 8; k++)
                CHECK(atomic_load(&the_job.runs[k]) == 0);
        }
        run_and_check(tp, &the_job, 5, 0, "after empty jobs");
        ci_threadpool_free(tp);
    }
}

/* With more threads than tasks every task still runs once, and the idle workers never run one twice. */
TEST(more_threads_than_tasks) {
    struct ci_threadpool *tp = NULL;
    ASSERT_STATUS(ci_threadpool_create(MAX_POOL, &tp, NULL), CI_OK);
    for (int rep = 0; rep < 50; rep++)
        for (int n = 1; n < MAX_POOL; n++)
            if (!run_and_check(tp, &the_job, n, rep % 2 ? 3000 : 0, "fewer tasks"))
                break;
    ci_threadpool_free(tp);
}

/* One thread, or one task: everything runs on the calling thread, in task order, with thread index 0. */
static int order[MAX_TASKS], n_order;

static void record_order(void *ctx, int t, int thread) {
    const pthread_t *caller = ctx;
    if (thread != 0 || !pthread_equal(pthread_self(), *caller))
        t = -1 - t;
    order[n_order++] = t;
}

TEST(single_thread_runs_in_order_on_caller) {
    pthread_t self = pthread_self();
    struct ci_threadpool *tp = NULL;
    ASSERT_STATUS(ci_threadpool_create(1, &tp, NULL), CI_OK);
    n_order = 0;
    ci_threadpool_run(tp, record_order, &self, 100);
    ASSERT_EQ_I64(n_order, 100);
    for (int i = 0; i < 100; i++)
        if (order[i] != i) {
            TEST_FAILF("position %d ran task %d", i, order[i]);
            break;
        }
    ci_threadpool_free(tp);
    ASSERT_STATUS(ci_threadpool_create(4, &tp, NULL), CI_OK);
    n_order = 0;
    ci_threadpool_run(tp, record_order, &self, 1);
    CHECK(n_order == 1 && order[0] == 0);
    ci_threadpool_free(tp);
}

/* Many short jobs back to back (decode's pattern: workers join some jobs and are excused from others), and
 * jobs after a pause long enough for the spinning workers to go to sleep (the condition variable must wake
 * them): every job complete, every time. */
TEST(jobs_back_to_back_and_after_sleep) {
    for (int n_threads = 2; n_threads <= 4; n_threads++) {
        struct ci_threadpool *tp = NULL;
        ASSERT_STATUS(ci_threadpool_create(n_threads, &tp, NULL), CI_OK);
        for (int rep = 0; rep < 5000; rep++)
            if (!run_and_check(tp, &the_job, 1 + rep % 7, 0, "back to back"))
                break;
        for (int rep = 0; rep < 3; rep++) {
            struct timespec ts = {0, 60 * 1000 * 1000}; // past the workers' 0.3 ms spin
            nanosleep(&ts, NULL);
            run_and_check(tp, &the_job, 64, 100, "after sleep");
        }
        ci_threadpool_free(tp);
    }
}

/* Results do not depend on the thread count: each task writes only its own output. */
static void square(void *ctx, int t, int thread) {
    (void)thread;
    long long *out = ctx;
    out[t] = (long long)t * t + 7;
}

TEST(same_result_for_any_thread_count) {
    static long long out[MAX_TASKS];
    for (int n_threads = 1; n_threads <= 5; n_threads++) {
        struct ci_threadpool *tp = NULL;
        ASSERT_STATUS(ci_threadpool_create(n_threads, &tp, NULL), CI_OK);
        memset(out, 0, sizeof out);
        ci_threadpool_run(tp, square, out, MAX_TASKS);
        long long sum = 0;
        for (int i = 0; i < MAX_TASKS; i++) {
            CHECK(out[i] == (long long)i * i + 7);
            sum += out[i];
        }
        // sum of i^2 for i < 1000 is 999 * 1000 * 1999 / 6 = 332833500, plus 7 * 1000.
        CHECK(sum == 332833500LL + 7000);
        ci_threadpool_free(tp);
    }
}

/* Two pools, each driven by its own thread at the same time (the engine's pool beside a benchmark's). */
struct driver {
    struct ci_threadpool *tp;
    struct job *j;
    int ok;
};

static struct job job_a, job_b;

static void *drive(void *arg) {
    struct driver *d = arg;
    d->ok = 1;
    for (int rep = 0; rep < 2000 && d->ok; rep++) {
        int n = 1 + rep % 33;
        job_reset(d->j, ci_threadpool_n_threads(d->tp), n, 0);
        ci_threadpool_run(d->tp, task, d->j, n);
        for (int i = 0; i < n; i++)
            if (atomic_load(&d->j->runs[i]) != 1)
                d->ok = 0;
        if (atomic_load(&d->j->bad_task) || atomic_load(&d->j->bad_thread) ||
            atomic_load(&d->j->shared_index) || atomic_load(&d->j->caller_mismatch))
            d->ok = 0;
    }
    return NULL;
}

TEST(two_pools_from_two_threads) {
    struct driver a = {.j = &job_a}, b = {.j = &job_b};
    ASSERT_STATUS(ci_threadpool_create(3, &a.tp, NULL), CI_OK);
    ASSERT_STATUS(ci_threadpool_create(2, &b.tp, NULL), CI_OK);
    pthread_t ta, tb;
    ASSERT(pthread_create(&ta, NULL, drive, &a) == 0);
    ASSERT(pthread_create(&tb, NULL, drive, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK(a.ok && b.ok);
    ci_threadpool_free(a.tp);
    ci_threadpool_free(b.tp);
}

/* A pool's tasks run jobs on inner pools, one per outer thread index (each inner pool is driven by one
 * thread at a time, as the contract asks): every inner task of every outer task runs once. */
#define OUTER_THREADS 3
#define OUTER_TASKS   12
#define INNER_TASKS   20

struct nest {
    struct ci_threadpool *inner[OUTER_THREADS];
    atomic_int runs[OUTER_TASKS][INNER_TASKS];
    atomic_int bad;
};

struct inner_ctx {
    struct nest *n;
    int outer;
};

static void inner_task(void *ctx, int t, int thread) {
    struct inner_ctx *c = ctx;
    if (thread < 0 || thread >= 2)
        atomic_store(&c->n->bad, 1);
    atomic_fetch_add(&c->n->runs[c->outer][t], 1);
}

static void outer_task(void *ctx, int t, int thread) {
    struct nest *n = ctx;
    if (thread < 0 || thread >= OUTER_THREADS || t < 0 || t >= OUTER_TASKS) {
        atomic_store(&n->bad, 1);
        return;
    }
    struct inner_ctx c = {n, t};
    ci_threadpool_run(n->inner[thread], inner_task, &c, INNER_TASKS);
}

TEST(nested_pools) {
    static struct nest n;
    atomic_init(&n.bad, 0);
    struct ci_threadpool *outer = NULL;
    ASSERT_STATUS(ci_threadpool_create(OUTER_THREADS, &outer, NULL), CI_OK);
    for (int i = 0; i < OUTER_THREADS; i++)
        ASSERT_STATUS(ci_threadpool_create(2, &n.inner[i], NULL), CI_OK);
    for (int rep = 0; rep < 20; rep++) {
        for (int o = 0; o < OUTER_TASKS; o++)
            for (int i = 0; i < INNER_TASKS; i++)
                atomic_init(&n.runs[o][i], 0);
        ci_threadpool_run(outer, outer_task, &n, OUTER_TASKS);
        for (int o = 0; o < OUTER_TASKS; o++)
            for (int i = 0; i < INNER_TASKS; i++)
                if (atomic_load(&n.runs[o][i]) != 1)
                    FAIL_FIRST("rep %d: outer task %d, inner task %d ran %d times", rep, o, i,
                               atomic_load(&n.runs[o][i]));
    }
    CHECK(atomic_load(&n.bad) == 0);
    for (int i = 0; i < OUTER_THREADS; i++)
        ci_threadpool_free(n.inner[i]);
    ci_threadpool_free(outer);
}

/* Thread counts outside [1, 512] are refused with a message; freeing NULL is a no-op. */
TEST(creation_limits) {
    const int bad[] = {0, -1, 513, 1 << 30};
    for (int i = 0; i < 4; i++) {
        struct ci_threadpool *tp = (struct ci_threadpool *)(uintptr_t)1;
        struct ci_err err = {0};
        CHECK(ci_threadpool_create(bad[i], &tp, &err) == CI_ERR_INVALID);
        CHECK(tp == NULL && strstr(err.msg, "512") != NULL);
    }
    ci_threadpool_free(NULL);
}

/* Every allocation of creating a 4-thread pool fails in turn: CI_ERR_NOMEM, nothing left allocated (the
 * threads already started are joined). */
TEST(creation_allocation_failures) {
    size_t base = ci_mem_in_use();
    uint64_t n = 1;
    for (; n < 100; n++) {
        struct ci_threadpool *tp = NULL;
        struct ci_err err = {0};
        ci_mem_fail_after(n);
        enum ci_status s = ci_threadpool_create(4, &tp, &err);
        ci_mem_fail_after(0);
        if (!ci_mem_fail_fired()) {
            ASSERT_STATUS(s, CI_OK);
            run_and_check(tp, &the_job, 10, 0, "after the failures");
            ci_threadpool_free(tp);
            break;
        }
        CHECK(s == CI_ERR_NOMEM && tp == NULL && err.msg[0] != '\0');
        CHECK(ci_mem_in_use() == base);
    }
    CHECK(n > 1 && n < 100); // it allocates at least once
    CHECK(ci_mem_in_use() == base);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(every_task_once_for_each_pair);
    RUN(no_tasks);
    RUN(more_threads_than_tasks);
    RUN(single_thread_runs_in_order_on_caller);
    RUN(jobs_back_to_back_and_after_sleep);
    RUN(same_result_for_any_thread_count);
    RUN(two_pools_from_two_threads);
    RUN(nested_pools);
    RUN(creation_limits);
    RUN(creation_allocation_failures);
    return test_exit_code();
}
