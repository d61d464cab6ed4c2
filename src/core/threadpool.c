#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/mem.h"

/* Decode issues many short jobs back to back (a few to a few hundred microseconds each, with serial gaps of
 * microseconds between them, and up to a few hundred between steps), so workers spin for a while before
 * sleeping: a spinning worker starts a job within a few hundred nanoseconds, a sleeping one only after a
 * futex wake-up (tens of microseconds on a busy host).  The spin is bounded in time, not polls (the pause
 * hint costs 10 to 150 cycles depending on the CPU), and short enough that idle pools do not starve busy
 * ones. */
#define SPIN_NS    300000
#define CACHE_LINE 64

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Participation in job g is decided once per worker: the worker joins it (claim: older -> g) when it sees the
 * job, or the caller excuses it (the same CAS) once the caller has run out of tasks.  The caller then waits
 * only for workers that joined, never for one that is asleep, preempted by another process or still waking
 * up: it has already run every task such a worker would have taken. */
struct worker {
    _Alignas(CACHE_LINE) atomic_uint claim; // newest generation whose participation is decided
    atomic_uint done;                       // newest generation this worker finished
    struct ci_threadpool *tp;
    int index;
    pthread_t thread;
};

/* Fields written by different parties live on different cache lines: the job description (written by the
 * caller once per job, then only read), the task counter (hammered by every thread) and the wake-up state. */
struct ci_threadpool {
    int n_threads;
    struct worker *workers; // [n_threads - 1], cache-line aligned
    pthread_mutex_t lock;
    pthread_cond_t wake;

    _Alignas(CACHE_LINE) ci_task_fn fn;
    void *ctx;
    int n_tasks;

    _Alignas(CACHE_LINE) atomic_uint generation; // bumped once per job (workers poll it)
    atomic_bool stop;
    atomic_int sleepers; // workers inside (or about to enter) the condvar wait

    _Alignas(CACHE_LINE) atomic_int next_task;
};

/* Generations wrap around: compare by difference. */
static bool newer(unsigned a, unsigned b) {
    return (int)(a - b) > 0;
}

static void work(struct ci_threadpool *tp, int thread) {
    ci_task_fn fn = tp->fn;
    void *ctx = tp->ctx;
    int n_tasks = tp->n_tasks;
    for (;;) {
        int task = atomic_fetch_add_explicit(&tp->next_task, 1, memory_order_relaxed);
        if (task >= n_tasks)
            break;
        fn(ctx, task, thread);
    }
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits until the generation differs from seen (or stop); returns the new generation. */
static unsigned wait_job(struct ci_threadpool *tp, unsigned seen) {
    unsigned gen;
    int64_t until = now_ns() + SPIN_NS;
    for (unsigned polls = 1;; polls++) {
        gen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        if (gen != seen || atomic_load_explicit(&tp->stop, memory_order_relaxed))
            return gen;
        CPU_RELAX();
        if (polls % 64 == 0 && now_ns() > until)
            break;
    }
    // The caller bumps generation and then reads sleepers (both seq_cst); we bump sleepers and then read
    // generation.  One of us sees the other's write, so either we see the new job here or it broadcasts.
    pthread_mutex_lock(&tp->lock);
    atomic_fetch_add(&tp->sleepers, 1);
    while ((gen = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
        pthread_cond_wait(&tp->wake, &tp->lock);
    atomic_fetch_sub(&tp->sleepers, 1);
    pthread_mutex_unlock(&tp->lock);
    return gen;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct ci_threadpool *tp = w->tp;
    unsigned seen =
        0; // generation starts at 0; reading it here would race with a first job posted before we run
    for (;;) {
        seen = wait_job(tp, seen);
        if (atomic_load(&tp->stop))
            return NULL;
        unsigned old = atomic_load(&w->claim);
        // Join job `seen` unless the caller already excused us from it (or from a later one).
        if (newer(seen, old) && atomic_compare_exchange_strong(&w->claim, &old, seen)) {
            work(tp, w->index);
            atomic_store_explicit(&w->done, seen, memory_order_release);
        }
    }
}

enum ci_status ci_threadpool_create(int n_threads, struct ci_threadpool **out, struct ci_err *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 512)
        return ci_err_set(err, CI_ERR_INVALID, "thread count %d out of range [1, 512]", n_threads);
    struct ci_threadpool *tp = ci_malloc_aligned(sizeof *tp);
    if (!tp)
        return ci_err_set(err, CI_ERR_NOMEM, "thread pool: out of memory");
    *tp = (struct ci_threadpool){.n_threads = n_threads};
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    atomic_init(&tp->generation, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->next_task, 0);
    if (n_threads > 1) {
        size_t bytes = ((size_t)n_threads - 1) * sizeof *tp->workers;
        tp->workers = ci_malloc_aligned(bytes);
        if (tp->workers)
            memset(tp->workers, 0, bytes);
        if (!tp->workers) {
            ci_threadpool_free(tp);
            return ci_err_set(err, CI_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct worker *w = &tp->workers[i];
        atomic_init(&w->claim, 0);
        atomic_init(&w->done, 0);
        w->tp = tp;
        w->index = i + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            tp->n_threads = i + 1; // only join the ones that started
            ci_threadpool_free(tp);
            return ci_err_set(err, CI_ERR_INTERNAL, "thread pool: cannot start thread %d", i + 1);
        }
    }
    *out = tp;
    return CI_OK;
}

void ci_threadpool_free(struct ci_threadpool *tp) {
    if (!tp)
        return;
    pthread_mutex_lock(&tp->lock);
    atomic_store(&tp->stop, true);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);
    for (int i = 0; tp->workers && i < tp->n_threads - 1; i++)
        pthread_join(tp->workers[i].thread, NULL);
    pthread_mutex_destroy(&tp->lock);
    pthread_cond_destroy(&tp->wake);
    ci_free_aligned(tp->workers);
    ci_free_aligned(tp);
}

int ci_threadpool_n_threads(const struct ci_threadpool *tp) {
    return tp->n_threads;
}

void ci_threadpool_run(struct ci_threadpool *tp, ci_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0)
        return;
    if (tp->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_tasks = n_tasks;
    atomic_store_explicit(&tp->next_task, 0, memory_order_relaxed);
    unsigned gen = atomic_load_explicit(&tp->generation, memory_order_relaxed) + 1;
    atomic_store(&tp->generation, gen); // seq_cst: pairs with the sleepers handshake in wait_job
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->lock);
    }
    work(tp, 0);
    // Every task is taken.  Excuse the workers that have not joined; wait for those that did.
    for (int i = 0; i < tp->n_threads - 1; i++) {
        struct worker *w = &tp->workers[i];
        unsigned old = atomic_load(&w->claim);
        bool excused = false;
        while (newer(gen, old) && !(excused = atomic_compare_exchange_weak(&w->claim, &old, gen)))
            ;
        if (excused)
            continue;
        for (int polls = 0; atomic_load_explicit(&w->done, memory_order_acquire) != gen; polls++) {
            if (polls < 4096) // a worker usually finishes its last task within microseconds
                CPU_RELAX();
            else
                sched_yield(); // it may be descheduled: let it run
        }
    }
}
