/* Tensor and pipeline parallelism's model side: a rank's part of a loaded model, made in place as views into the
 * same read-only mapping (nothing is copied; a rank's pages of the file are the only ones it reads).
 *
 * Rank r of n keeps, in every layer:
 *   - attention: query heads [r*H/n, (r+1)*H/n) and KV heads [r*KV/n, (r+1)*KV/n) (whole GQA groups): the
 *     rows of wq, wk, wv (and of their biases), the matching columns of wo; q/k norms are per head (whole);
 *   - dense FFN: about rows [r*F/n, (r+1)*F/n) of gate and up and the matching columns of down, the
 *     boundaries rounded to down's blocks (so with K-quants an FFN of 768 splits 512 + 256);
 *   - mixture of experts: every expert's FFN split the same way (each rank runs every expert on its slice);
 *     the router (and the shared expert's gate) whole, the shared expert split like a dense FFN;
 *   - norms and biases added after a sum (wo's bias) whole.
 * The token embedding (on the ranks that embed: stage 0) is split by vocabulary, rows
 * shard_vocab_range(n_vocab, tp_rank, tp) (weights tok_embd_v0 says where the slice starts): the forward pass
 * embeds the rows it holds, zeros for the others, and all-reduces them.
 * Pipeline stages (pp > 1, cut first): a stage keeps its contiguous run of layers, moved to the front of the
 * layer array (config n_layer is the stage's, layer0 its first in the whole model, n_layer_all the whole's);
 * only stage 0 keeps the token embedding.
 *
 * The config's n_head, n_kv_head, n_ff, n_ff_exp and n_ff_shexp become the shard's, so the forward pass and
 * the KV pool size themselves for the rank's heads only.  Each sub-block's output is then a partial sum that
 * the forward pass all-reduces (struct fwd_dist).  The output head: split by vocabulary over the ranks
 * without pipeline stages (shard_head_split), else whole on rank 0 (the sampler's rank), the others dropping
 * it (they compute no logits).
 *
 * A column slice is a view whose row_bytes is the whole row's (the stride) and whose ne[0] is the slice's:
 * it must start and end on the type's block boundaries (a multiple of 32 for Q8_0, 256 for the K-quants).
 * For wo (split by heads) a head group off those boundaries is CI_ERR_UNSUPPORTED naming the tensor; an FFN
 * with fewer down blocks than ranks likewise. */
#ifndef CINFER_MODEL_SHARD_H
#define CINFER_MODEL_SHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct model;

/* Where a rank sits: tp_rank of tp in the tensor-parallel group of pipeline stage `stage` of pp. */
struct shard_spec {
    int tp_rank, tp, stage, pp;
};

/* Cuts m down to the rank's part: with pp > 1 first its stage's contiguous layers (config n_layer becomes the
 * stage's, layer0 its first; stages > 0 drop the embedding), then with tp > 1 its 1/tp of each of them and its
 * vocabulary slice of the token embedding.  The head and the final norm: each rank its vocabulary slice
 * (shard_head_split), else only rank (0, 0).  1 x 1 changes nothing.  CI_ERR_UNSUPPORTED for an architecture
 * the shards do not cover yet (tp: encoders, fused Q/K/V or gate/up, gpt-oss; pp: encoders), a head or KV
 * head count not divisible by tp, or a column split off the block boundaries; CI_ERR_INVALID for fewer layers
 * than stages.  The model may be half cut then, so it must be freed after any error. */
enum ci_status model_shard(struct model *m, const struct shard_spec *sp, struct ci_err *err);

/* Whether sp's ranks split the output head by vocabulary: tensor parallelism without pipeline stages (with
 * stages the last one's hidden states come back to rank 0 alone, which keeps the whole head).  Each rank of
 * the group then keeps rows shard_vocab_range(n_vocab, tp_rank, tp) of output.weight (a tied head: the same
 * view as its slice of the token embedding) and the final norm, computes its
 * slice of every logit row, and rank 0 gathers them (struct fwd_dist's head). */
bool shard_head_split(const struct shard_spec *sp);
/* Rank's rows [*v0, *v0 + *nv) of a head of n_vocab rows split n ways: as even as can be on multiples of 64
 * rows (the packed kernels' row groups), of 1 when the vocabulary is smaller than 64 per rank. */
void shard_vocab_range(int64_t n_vocab, int rank, int n, int64_t *v0, int64_t *nv);

/* A 64-bit fingerprint of the whole (unsharded) model: its hyper-parameters and its tensor table (names,
 * types, shapes, sizes, and the first and last bytes of each tensor's data).  Ranks compare it at start-up. */
uint64_t model_fingerprint(const struct model *m);

#endif
