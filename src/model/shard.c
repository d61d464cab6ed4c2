#include "model/shard.h"

#include <string.h>

#include "core/hash.h"
#include "model/model.h"

/* Rows [r0, r0 + nr) of a matrix (or of each expert's matrix: the expert stride, nbytes / ne[2], stays). */
static void slice_rows(struct ci_tensor *t, int64_t r0, int64_t nr) {
    if (!t->data)
        return;
    t->data = (const uint8_t *)t->data + (uint64_t)r0 * t->row_bytes;
    t->ne[1] = nr;
    if (t->n_dims <= 2)
        t->nbytes = (uint64_t)nr * t->row_bytes;
}

/* Elements [i0, i0 + n) of an F32 vector (a bias). */
static void slice_vec(struct ci_tensor *t, int64_t i0, int64_t n) {
    if (!t->data)
        return;
    t->data = (const float *)t->data + i0;
    t->ne[0] = n;
    t->row_bytes = t->nbytes = (uint64_t)n * sizeof(float);
}

/* Columns [c0, c0 + nc) of every row: a strided view (row_bytes stays the whole row's). */
static enum ci_status slice_cols(struct ci_tensor *t, int64_t c0, int64_t nc, struct ci_err *err) {
    if (!t->data)
        return CI_OK;
    const struct ci_type_traits *tr = ci_type_traits(t->type);
    uint64_t bs = tr ? tr->block_size : 0;
    if (!bs || (uint64_t)c0 % bs || (uint64_t)nc % bs)
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "--tp: %s (%s) would be split at column %lld into slices of %lld columns, not on "
                          "its %llu-element block boundaries: use fewer ranks or another weight type",
                          t->name ? t->name : "a tensor", ci_type_name(t->type), (long long)c0, (long long)nc,
                          (unsigned long long)bs);
    t->data = (const uint8_t *)t->data + (uint64_t)c0 / bs * tr->type_size;
    t->ne[0] = nc;
    if (t->n_dims <= 2)
        t->nbytes = (uint64_t)t->ne[1] * t->row_bytes;
    return CI_OK;
}

/* The larger of blk and t's block size (t absent: blk). */
static int64_t block_of(const struct ci_tensor *t, int64_t blk) {
    const struct ci_type_traits *tr = t->data ? ci_type_traits(t->type) : NULL;
    return tr && (int64_t)tr->block_size > blk ? (int64_t)tr->block_size : blk;
}

static enum ci_status check_div(const char *what, int v, int n, struct ci_err *err) {
    if (v % n == 0)
        return CI_OK;
    return ci_err_set(err, CI_ERR_UNSUPPORTED, "--tp %d: the model's %s (%d) is not divisible by %d", n, what,
                      v, n);
}

/* A gated FFN of length ff: rank's share of the gate/up rows and the matching down columns.  The shares are
 * as even as down's blocks allow (its columns split on block boundaries: 256 for the K-quants), so they may
 * differ by a block; *len is this rank's. */
static enum ci_status shard_ffn(struct ci_tensor *gate, struct ci_tensor *up, struct ci_tensor *down, int ff,
                                int64_t blk, int rank, int n, const char *what, int *len,
                                struct ci_err *err) {
    int64_t units = ff / blk;
    int64_t lo = units * rank / n * blk, hi = units * (rank + 1) / n * blk;
    if (ff % blk || hi <= lo)
        return ci_err_set(
            err, CI_ERR_UNSUPPORTED,
            "--tp %d: the %s (%d) holds %lld blocks of %lld columns of %s, too few to give each "
            "rank whole blocks: use fewer ranks or another weight type",
            n, what, ff, (long long)units, (long long)blk, ci_type_name(down->type));
    slice_rows(gate, lo, hi - lo);
    slice_rows(up, lo, hi - lo);
    *len = (int)(hi - lo);
    return slice_cols(down, lo, hi - lo, err);
}

/* The tensor-parallel cut of every layer m still holds (rank of n). */
static enum ci_status shard_tp(struct model *m, int rank, int n, struct ci_err *err) {
    struct model_config *c = &m->config;
    const char *why = c->encoder                               ? "an encoder (embeddings only)"
                      : c->qkv_fused                           ? "fused Q/K/V projections"
                      : c->ffn_fused                           ? "a fused gate/up projection"
                      : c->moe_softmax_weight || c->swiglu_oai ? "gpt-oss experts"
                                                               : NULL;
    if (why)
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "--tp %d: %s (%s) is not supported with tensor parallelism yet", n,
                          model_arch_name(c->arch), why);
    enum ci_status s;
    if ((s = check_div("head count", c->n_head, n, err)) ||
        (s = check_div("KV head count", c->n_kv_head, n, err)))
        return s;
    int ff = c->n_ff, ff_exp = c->n_ff_exp, ff_sh = c->n_ff_shexp; // this rank's shares
    // The FFN shares split on the coarsest block of each down projection over all layers (block sizes are
    // powers of two), so every layer's share is the same.
    int64_t blk = 1, blk_exp = 1, blk_sh = 1;
    for (int il = 0; il < c->n_layer; il++) {
        const struct layer_weights *l = &m->weights.layers[il];
        blk = block_of(&l->w_down, blk);
        blk_exp = block_of(&l->ffn_down_exps, blk_exp);
        blk_sh = block_of(&l->ffn_down_shexp, blk_sh);
    }
    const int hd = c->head_dim, nh = c->n_head / n, nkv = c->n_kv_head / n;
    const int64_t q0 = (int64_t)rank * nh * hd, k0 = (int64_t)rank * nkv * hd;
    for (int il = 0; il < c->n_layer; il++) {
        struct layer_weights *l = &m->weights.layers[il];
        slice_rows(&l->wq, q0, (int64_t)nh * hd);
        slice_rows(&l->wk, k0, (int64_t)nkv * hd);
        slice_rows(&l->wv, k0, (int64_t)nkv * hd);
        slice_vec(&l->bq, q0, (int64_t)nh * hd);
        slice_vec(&l->bk, k0, (int64_t)nkv * hd);
        slice_vec(&l->bv, k0, (int64_t)nkv * hd);
        if ((s = slice_cols(&l->wo, q0, (int64_t)nh * hd, err)))
            return s;
        if (c->n_expert) {
            if ((s = shard_ffn(&l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps, c->n_ff_exp, blk_exp,
                               rank, n, "expert FFN length", &ff_exp, err)))
                return s;
            if (c->moe_shared_exp &&
                (s = shard_ffn(&l->ffn_gate_shexp, &l->ffn_up_shexp, &l->ffn_down_shexp, c->n_ff_shexp,
                               blk_sh, rank, n, "shared expert FFN length", &ff_sh, err)))
                return s;
        } else if ((s = shard_ffn(&l->w_gate, &l->w_up, &l->w_down, c->n_ff, blk, rank, n, "FFN length", &ff,
                                  err))) {
            return s;
        }
    }
    c->n_head = nh;
    c->n_kv_head = nkv;
    if (!c->n_expert)
        c->n_ff = ff;
    c->n_ff_exp = ff_exp;
    c->n_ff_shexp = ff_sh;
    return CI_OK;
}

/* Pipeline stage `stage` of n: its contiguous layers moved to the front of the layer array (as even as can
 * be, earlier stages one more: stage 0's rank holds the most KV, and rank 0 sizes every rank's pool). */
static enum ci_status shard_pp(struct model *m, int stage, int n, struct ci_err *err) {
    struct model_config *c = &m->config;
    if (c->encoder)
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "--pp %d: %s is an encoder (embeddings only): not supported with pipeline "
                          "parallelism",
                          n, model_arch_name(c->arch));
    if (c->n_layer < n)
        return ci_err_set(
            err, CI_ERR_INVALID,
            "--pp %d: the model has %d layer(s), fewer than the %d pipeline stages: use --pp %d "
            "or fewer",
            n, c->n_layer, n, c->n_layer);
    int base = c->n_layer / n, extra = c->n_layer % n;
    int first = stage * base + (stage < extra ? stage : extra), count = base + (stage < extra);
    struct layer_weights *l = m->weights.layers;
    memmove(l, l + first, (size_t)count * sizeof *l);
    memset(l + count, 0, (size_t)(c->n_layer - count) * sizeof *l);
    c->n_layer_all = c->n_layer;
    c->layer0 = first;
    c->n_layer = count;
    if (stage != 0) // the embedding is stage 0's
        memset(&m->weights.tok_embd, 0, sizeof m->weights.tok_embd);
    return CI_OK;
}

/* Outside rank (0, 0), a rank that does not split the head drops it and the final norm (no logits there). */
static enum ci_status drop_head(struct model *m, const struct shard_spec *sp) {
    if (sp->tp_rank != 0 || sp->stage != 0) {
        memset(&m->weights.output, 0, sizeof m->weights.output);
        memset(&m->weights.output_norm, 0, sizeof m->weights.output_norm);
    }
    return CI_OK;
}

enum ci_status model_shard(struct model *m, const struct shard_spec *sp, struct ci_err *err) {
    if (sp->tp < 1 || sp->pp < 1 || sp->tp_rank < 0 || sp->tp_rank >= sp->tp || sp->stage < 0 ||
        sp->stage >= sp->pp)
        return ci_err_set(err, CI_ERR_INVALID, "--tp/--pp: rank %d of %d in stage %d of %d", sp->tp_rank,
                          sp->tp, sp->stage, sp->pp);
    enum ci_status s;
    if (sp->pp > 1 && (s = shard_pp(m, sp->stage, sp->pp, err)) != CI_OK)
        return s;
    if (sp->tp > 1 && (s = shard_tp(m, sp->tp_rank, sp->tp, err)) != CI_OK)
        return s;
    if (sp->tp == 1)
        return drop_head(m, sp);
    if (m->config.n_vocab < sp->tp)
        return ci_err_set(err, CI_ERR_UNSUPPORTED, "--tp %d: the vocabulary (%d) is smaller than the ranks",
                          sp->tp, m->config.n_vocab);
    // The token embedding and the head: the rank's vocabulary slice of each.  The embedding on the ranks
    // that embed (stage 0): a lookup of a row held elsewhere gives zeros, and an all-reduce sums the rows
    // (vLLM's vocabulary-parallel embedding).  The head without stages (shard_head_split).  A tied head is
    // a copy of the embedding's tensor, cut to the same rows: still a view of the embedding.
    int64_t v0, nv;
    shard_vocab_range(m->config.n_vocab, sp->tp_rank, sp->tp, &v0, &nv);
    if (m->weights.tok_embd.data) {
        slice_rows(&m->weights.tok_embd, v0, nv);
        m->weights.tok_embd_v0 = v0;
    }
    if (!shard_head_split(sp) || !m->weights.output.data)
        return drop_head(m, sp);
    slice_rows(&m->weights.output, v0, nv);
    return CI_OK;
}

bool shard_head_split(const struct shard_spec *sp) {
    return sp->tp > 1 && sp->pp == 1;
}

void shard_vocab_range(int64_t n_vocab, int rank, int n, int64_t *v0, int64_t *nv) {
    const int64_t align = n_vocab >= 64 * (int64_t)n ? 64 : 1, units = n_vocab / align;
    int64_t lo = units * rank / n * align, hi = rank == n - 1 ? n_vocab : units * (rank + 1) / n * align;
    *v0 = lo;
    *nv = hi - lo;
}

static uint64_t hash_tensor(uint64_t h, const struct ci_tensor *t) {
    if (!t->data)
        return ci_hash_bytes(h, "-", 1);
    if (t->name)
        h = ci_hash_bytes(h, t->name, strlen(t->name));
    uint64_t meta[6] = {
        t->type, (uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2], (uint64_t)t->ne[3], t->nbytes};
    h = ci_hash_bytes(h, meta, sizeof meta);
    size_t k = t->nbytes < 32 ? (size_t)t->nbytes : 32;
    h = ci_hash_bytes(h, t->data, k);
    return ci_hash_bytes(h, (const uint8_t *)t->data + t->nbytes - k, k);
}

uint64_t model_fingerprint(const struct model *m) {
    const struct model_config *c = &m->config;
    int64_t ints[] = {c->arch,       c->n_vocab,       c->n_embd,        c->n_layer,     c->n_head,
                      c->n_kv_head,  c->head_dim,      c->n_ff,          c->n_ctx_train, c->rope_dim,
                      c->n_expert,   c->n_expert_used, c->n_ff_exp,      c->n_ff_shexp,  c->sliding_window,
                      c->swa_period, c->rope_scaling,  c->rope_orig_ctx, c->encoder,     c->rope_neox};
    float floats[] = {c->rope_base,     c->rms_eps,      c->rope_pos_scale, c->rope_attn_factor,
                      c->rope_base_swa, c->attn_softcap, c->final_softcap,  c->attn_scale};
    uint64_t h = ci_hash_bytes(0x7470u, ints, sizeof ints);
    h = ci_hash_bytes(h, floats, sizeof floats);
    const struct model_weights *w = &m->weights;
    const struct ci_tensor *top[] = {&w->tok_embd,  &w->output_norm, &w->output,   &w->rope_freqs,
                                     &w->rope_long, &w->rope_short,  &w->pos_embd, &w->type_embd,
                                     &w->tok_norm,  &w->tok_norm_b};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        h = hash_tensor(h, top[i]);
    for (int il = 0; il < c->n_layer; il++) {
        const struct ci_tensor *lt = (const struct ci_tensor *)(const void *)&w->layers[il];
        for (size_t i = 0; i < sizeof w->layers[il] / sizeof *lt; i++)
            h = hash_tensor(h, &lt[i]);
    }
    return h;
}
