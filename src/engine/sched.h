/* The scheduler: each step it decides which sequences run and how many of their tokens, under one of the
 * policies the seeds compare.  Policies are data (struct sched_params), not forks of the engine:
 *
 *   naive       no KV reuse: every step each running sequence recomputes its whole prefix (the O(N^2)
 * baseline) static      a batch of up to max_seqs requests is formed when none is running; prompts are padded
 * to the longest and the batch decodes until its last member ends (finished members keep computing a pad
 * token per step: the stragglers); newcomers wait for the next batch continuous  iteration-level admission
 * and retirement, bounded by max_seqs and max_batch_tokens; decode tokens first, then prompt chunks fill the
 * rest of the budget (chunked prefill), or with chunked_prefill off a prompt enters only whole
 *
 * When a sequence needs a KV block and none is free, the newest running sequence is preempted by recompute:
 * its blocks are released and it returns to the front of the waiting queue with its tokens kept.  A sequence
 * whose own growth cannot be met preempts itself.  Admission never preempts.  The scheduler only plans (and
 * reserves blocks, copies shared blocks before they are written); the engine runs the plan. */
#ifndef CINFER_ENGINE_SCHED_H
#define CINFER_ENGINE_SCHED_H

#include <stdbool.h>

#include "engine/seq.h"

struct kv_pool;
struct prefix_cache;

enum sched_policy { SCHED_POLICY_NAIVE, SCHED_POLICY_STATIC, SCHED_POLICY_CONTINUOUS };

const char *sched_policy_name(enum sched_policy p);
bool sched_policy_parse(const char *name, enum sched_policy *out);

struct sched_params {
    enum sched_policy policy;
    bool chunked_prefill; // continuous: split prompts to fill the token budget
    int max_batch_tokens; // per-step token budget (continuous)
    int max_seqs;         // running sequences (static: the batch size)
};

/* The sequences the scheduler works on; the arrays belong to the engine (capacity cap each).  running is in
 * admission order; waiting is FIFO by request order (preempted sequences go back to their place in it). */
struct sched_state {
    struct kv_pool *pool;
    struct prefix_cache *prefix; // NULL: prefix caching off
    struct seq **running;
    int n_running;
    struct seq **waiting;
    int n_waiting;
    int cap;
    int static_batch_left; // static: members of the current batch not yet finished (0: no batch)
    int static_batch_size;
};

struct sched_result {
    struct seq *
        *items; // [cap] (engine-owned) sequences scheduled this step, each with sched_from/sched_count
    int n_items;
    int n_tokens;         // real tokens scheduled
    int n_prefill_tokens; // of which prompt (or recompute) tokens
    int n_decode_tokens;  // of which decoding sequences' last tokens and their drafts
    int n_draft_tokens;   // of which speculative drafts to verify
    int n_pad_tokens;     // static batching: padding and straggler tokens computed for nothing
    int n_preempted;
    int n_admitted; // sequences admitted this step
    int n_prefix_hit_tokens;
};

/* Plans one step. */
void sched_step(const struct sched_params *p, struct sched_state *st, struct sched_result *r);

/* Removes s from running (it finished); the caller releases its blocks.  Static batching counts it out. */
void sched_retire(struct sched_state *st, struct seq *s);

/* Internal consistency: every running sequence is RUNNING or FORKING, waiting ones WAITING with no blocks,
 * no duplicates.  Aborts on a violation (test builds run it after every step). */
void sched_check(const struct sched_state *st);

#endif
