/* A sequence: one stream of tokens the engine generates (a request with n samples has n sequences).  Owned
 * by the engine thread; the scheduler reads and moves sequences between states, the engine executes.
 *
 * Tokens [0, n_tokens) are known (prompt, then generated); the KV of [0, n_computed) is in the sequence's
 * blocks.  A sequence samples when a step computes up to n_tokens.  Preemption by recompute drops every block
 * and sets n_computed to 0: the known tokens are kept, so the recomputation is a longer prefill. */
#ifndef CINFER_ENGINE_SEQ_H
#define CINFER_ENGINE_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/kv_pool.h"

struct engine_request;
struct sampler;

enum seq_state {
    SEQ_STATE_WAITING,  // queued (new or preempted), holds no blocks
    SEQ_STATE_RUNNING,  // admitted: computing its prompt or decoding
    SEQ_STATE_FORKING,  // sample i > 0 of an n > 1 request: waits for sample 0's prompt, then shares its
                        // blocks
    SEQ_STATE_FINISHED, // done; blocks released
};

struct seq {
    struct engine_request *req;
    int sample;     // index among the request's n samples
    uint64_t order; // admission order of the request (FCFS, and newest-first preemption)
    enum seq_state state;

    int32_t *tokens; // [cap] prompt then generated tokens
    int n_tokens;
    int n_prompt;
    int cap;        // n_prompt + max_tokens
    int n_computed; // positions whose K/V are in blocks
    int n_cached;   // prompt tokens taken from the prefix cache at the last admission
    struct kv_seq_blocks blocks;
    struct sampler *sampler;

    // Static batching: member of the running batch (it pads until the whole batch ends).
    bool in_static_batch;
    // Scheduled this step: tokens [sched_from, sched_from + sched_count), sampling if it reaches n_tokens.
    int sched_from;
    int sched_count;
    int n_preempted;
    // The prefix cache must not supply this sequence's prompt (an embedding that pools every token, or the
    // first, needs their hidden states computed).
    bool no_prefix_match;
    // Speculative decoding: n_draft proposed tokens wait in tokens[n_tokens, n_tokens + n_draft) (the array
    // has room: a proposal never reaches cap).  A decoding sequence with drafts is planned 1 + n_draft tokens
    // (its last token and the drafts); the engine verifies them, keeps the accepted ones and rolls n_computed
    // back to n_tokens - 1.  Preemption drops the drafts.
    int n_draft;
    int spec_k; // the sequence's current proposal length (adaptive, 0: speculation off for it)
    // Backoff (spec_backoff): verifications in a row that accepted nothing, and steps left without proposals.
    int spec_misses, spec_pause;
};

static inline int seq_n_output(const struct seq *s) {
    return s->n_tokens - s->n_prompt;
}

/* True once the prompt's KV is complete and each step adds one token. */
static inline bool seq_is_decoding(const struct seq *s) {
    return s->n_computed == s->n_tokens - 1 && s->n_tokens > s->n_prompt;
}

#endif
