/* The batched forward pass.  One call runs every weight matrix once over a flat list of tokens drawn from any
 * number of sequences: each token carries its sequence and position; its K/V are written into the paged KV
 * memory at that position (through the sequence's block table) and it attends causally over its own
 * sequence's positions 0..pos.  Logits are computed only for the rows the batch marks.
 *
 * struct forward owns its scratch (sized once for max_tokens and max_logit_rows) and never allocates per
 * call. The KV memory belongs to the caller (engine/kv_pool); blocks a batch writes must not be shared (the
 * caller does copy-on-write first). */
#ifndef CINFER_MODEL_FORWARD_H
#define CINFER_MODEL_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/kernels.h"

struct model;
struct ci_threadpool;
struct forward;

struct fwd_batch {
    int n_tokens;
    const int32_t *token;  // [n_tokens]
    const int32_t *pos;    // [n_tokens]
    const int32_t *seq;    // [n_tokens] index into seqs
    const uint8_t *logits; // [n_tokens] nonzero: compute this row's logits
    int n_seqs;
    const struct ci_attn_seq *seqs; // [n_seqs] block tables covering every position the batch touches
    const uint8_t *hidden; // [n_tokens] nonzero: keep this row's final normed hidden state; NULL: none
};

/* Tensor parallelism (engine/dist.c): the forward pass of a shard (model/shard.h).  allreduce sums a
 * sub-block's partial output [n] over the ranks, in place, twice per layer (after the attention output
 * projection and after the FFN, before their biases, post-norms and residual adds).  begin, when set (rank 0),
 * runs first in every forward_batch: it sends the batch to the other ranks.  Either failing fails the
 * forward_batch with its status (the ranks are then out of step: the caller ends them all). */
struct fwd_dist {
    void *ctx;
    enum ci_status (*allreduce)(void *ctx, float *buf, size_t n, struct ci_err *err);
    enum ci_status (*begin)(void *ctx, const struct fwd_batch *b, struct ci_err *err);
    // end, when set, runs as forward_batch returns after a begin that succeeded (rank 0: the pass is over).
    void (*end)(void *ctx);
    // head, when set (a vocabulary-split head, model/shard.h: every rank of the group), gathers each rank's
    // logits part [rows][its slice] into rank 0's logits [rows][n_vocab], after the last all-reduce.
    enum ci_status (*head)(void *ctx, const float *part, int rows, float *logits, struct ci_err *err);
    // Pipeline parallelism (a stage's layers, model/shard.h): the batch's rows go in n_micro micro-batches
    // (contiguous rows; <= 1: one).  recv, when set (stages > 0), fills a micro-batch's residual stream
    // [n] from the stage before instead of embedding; send, when set, passes it on after this stage's
    // layers (it may return before the data has left: x stays untouched until flush, which runs after the
    // last micro-batch).  gather, when set (the head's rank), then fills each micro-batch's rows with the
    // last stage's output, before the final norm and the head.  A failure fails the forward_batch as above.
    int n_micro;
    enum ci_status (*recv)(void *ctx, float *x, size_t n, struct ci_err *err);
    enum ci_status (*send)(void *ctx, float *x, size_t n, struct ci_err *err);
    enum ci_status (*flush)(void *ctx, float *x, size_t n, struct ci_err *err);
    enum ci_status (*gather)(void *ctx, float *x, size_t n, struct ci_err *err);
};

enum ci_status forward_create(const struct model *m, int max_tokens, int max_logit_rows,
                              struct ci_threadpool *tp, struct forward **out, struct ci_err *err);
void forward_free(struct forward *f);

/* Runs the batch.  kv: [n_layer] views of the KV memory.  On success *logits points at [n_rows][n_vocab]
 * floats, rows in batch order of the marked tokens, valid until the next call.  Errors (CI_ERR_INVALID) only
 * for batches that break the contract: too many tokens or rows, token id or position out of range, a
 * position beyond its sequence's block table. */
enum ci_status forward_batch(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv,
                             const float **logits, int *n_rows, struct ci_err *err);

int forward_max_tokens(const struct forward *f);
/* Runs f as one shard of a tensor-parallel model (d copied; NULL: a whole model, the default). */
void forward_set_dist(struct forward *f, const struct fwd_dist *d);

/* The final hidden states (after the output norm, before the head: what embeddings pool) of the tokens the
 * last forward_batch marked in b->hidden, [n][n_embd] in batch order; valid until the next call. */
const float *forward_hidden(const struct forward *f, int *n);
/* The context size per sequence the caller serves (default: the model's n_ctx_train).  Phi-3's LongRoPE
 * rotates with the long factors when it exceeds rope.scaling.original_context_length, else the short ones,
 * as llama.cpp chooses by its n_ctx_seq. */
void forward_set_n_ctx(struct forward *f, int n_ctx);

#endif
