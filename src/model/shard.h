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
 *   - norms, embeddings and biases added after a sum (wo's bias) whole.
 * Pipeline stages (pp > 1, cut first): a stage keeps its contiguous run of layers, moved to the front of the
 * layer array (config n_layer is the stage's, layer0 its first in the whole model, n_layer_all the whole's);
 * only stage 0 keeps the token embedding.
 *
 * The config's n_head, n_kv_head, n_ff, n_ff_exp and n_ff_shexp become the shard's, so the forward pass and
 * the KV pool size themselves for the rank's heads only.  Each sub-block's output is then a partial sum that
 * the forward pass all-reduces (struct fwd_dist).  The output head stays whole on rank 0 (the sampler's rank);
 * the other ranks drop it (they compute no logits).
 *
 * A column slice is a view whose row_bytes is the whole row's (the stride) and whose ne[0] is the slice's:
 * it must start and end on the type's block boundaries (a multiple of 32 for Q8_0, 256 for the K-quants).
 * For wo (split by heads) a head group off those boundaries is CI_ERR_UNSUPPORTED naming the tensor; an FFN
 * with fewer down blocks than ranks likewise. */
#ifndef CINFER_MODEL_SHARD_H
#define CINFER_MODEL_SHARD_H

#include <stdint.h>

#include "core/status.h"

struct model;

/* Where a rank sits: tp_rank of tp in the tensor-parallel group of pipeline stage `stage` of pp. */
struct shard_spec {
    int tp_rank, tp, stage, pp;
};

/* Cuts m down to the rank's part: with pp > 1 first its stage's contiguous layers (config n_layer becomes the
 * stage's, layer0 its first; stages > 0 drop the embedding), then with tp > 1 its 1/tp of each of them.  Only
 * rank (0, 0) keeps the head and the final norm.  1 x 1 changes nothing.  CI_ERR_UNSUPPORTED for an
 * architecture the shards do not cover yet (tp: encoders, fused Q/K/V or gate/up, gpt-oss; pp: encoders), a
 * head or KV head count not divisible by tp, or a column split off the block boundaries; CI_ERR_INVALID for
 * fewer layers than stages.  The model may be half cut then, so it must be freed after any error. */
enum ci_status model_shard(struct model *m, const struct shard_spec *sp, struct ci_err *err);

/* A 64-bit fingerprint of the whole (unsharded) model: its hyper-parameters and its tensor table (names,
 * types, shapes, sizes, and the first and last bytes of each tensor's data).  Ranks compare it at start-up. */
uint64_t model_fingerprint(const struct model *m);

#endif
