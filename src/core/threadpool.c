#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/mem.h"

// Workers spin this many polls before sleeping on the condvar: decode steps issue many short jobs back to
// back.
#define SPIN_POLLS 20000

struct worker {
    struct ci_threadpool *tp;
    int index;
    pthread_t thread;
};

struct ci_threadpool {
    int n_threads;
    struct worker *workers; // [n_threads - 1]

    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint generation; // bumped once per job
    atomic_bool stop;

    ci_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    atomic_int n_busy; // workers still inside the current job
};

static void work(struct ci_threadpool *tp, int thread) {
    for (;;) {
        int task = atomic_fetch_add_explicit(&tp->next_task, 1, memory_order_relaxed);
        if (task >= tp->n_tasks)
            break;
        tp->fn(tp->ctx, task, thread);
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct ci_threadpool *tp = w->tp;
    unsigned seen =
        0; // generation starts at 0; reading it here would race with a first job posted before we run
    for (;;) {
        unsigned gen;
        int polls = 0;
        while ((gen = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++polls < SPIN_POLLS)
                continue;
            pthread_mutex_lock(&tp->lock);
            while ((gen = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->wake, &tp->lock);
            pthread_mutex_unlock(&tp->lock);
            break;
        }
        if (atomic_load(&tp->stop))
            return NULL;
        seen = gen;
        work(tp, w->index);
        atomic_fetch_sub_explicit(&tp->n_busy, 1, memory_order_release);
    }
}

enum ci_status ci_threadpool_create(int n_threads, struct ci_threadpool **out, struct ci_err *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 512)
        return ci_err_set(err, CI_ERR_INVALID, "thread count %d out of range [1, 512]", n_threads);
    struct ci_threadpool *tp = ci_calloc(1, sizeof *tp);
    if (!tp)
        return ci_err_set(err, CI_ERR_NOMEM, "thread pool: out of memory");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    if (n_threads > 1) {
        tp->workers = ci_calloc((size_t)n_threads - 1, sizeof *tp->workers);
        if (!tp->workers) {
            ci_threadpool_free(tp);
            return ci_err_set(err, CI_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct worker *w = &tp->workers[i];
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
    ci_free(tp->workers);
    ci_free(tp);
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
    atomic_store_explicit(&tp->n_busy, tp->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&tp->lock);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);
    work(tp, 0);
    while (atomic_load_explicit(&tp->n_busy, memory_order_acquire) > 0)
        sched_yield();
}
