/* Persistent kernel thread pool.  n_threads - 1 workers plus the calling thread (worker 0) execute the tasks
 * of one job; ci_threadpool_run returns when every task is done.  Tasks are handed out through an atomic
 * counter, so any thread may run any task: callers make each task's result independent of which thread runs
 * it (split by output rows, never a reduction), which keeps results independent of the thread count. */
#ifndef CINFER_CORE_THREADPOOL_H
#define CINFER_CORE_THREADPOOL_H

#include "core/status.h"

struct ci_threadpool;

typedef void (*ci_task_fn)(void *ctx, int task, int thread);

enum ci_status ci_threadpool_create(int n_threads, struct ci_threadpool **out, struct ci_err *err);
void ci_threadpool_free(struct ci_threadpool *tp);
int ci_threadpool_n_threads(const struct ci_threadpool *tp);
/* Runs fn(ctx, task, thread) for task in [0, n_tasks); thread is in [0, n_threads).  Not reentrant: one job
 * at a time, from one calling thread. */
void ci_threadpool_run(struct ci_threadpool *tp, ci_task_fn fn, void *ctx, int n_tasks);

#endif
