#include "model/forward.h"

#include <math.h>
#include <string.h>

#include "core/mem.h"
#include "core/threadpool.h"
#include "format/gguf.h"
#include "model/model.h"
#include "model/pack.h"

struct forward {
    const struct model *m;
    struct ci_threadpool *tp;
    int max_tokens;
    int max_rows;
    // Scratch, sized once.
    struct ci_rope_params rope; // the model's RoPE, with the frequency factors for the served context
    float *x;                   // [max_tokens][n_embd] residual stream
    float *xb;                  // [max_tokens][n_embd] normed input of a sub-block
    float *q;                   // [max_tokens][n_head][head_dim]
    float *k;                   // [max_tokens][n_kv_head][head_dim]
    float *v;                   // [max_tokens][n_kv_head][head_dim]
    float *att;                 // [max_tokens][n_head][head_dim]
    float *gate;                // [max_tokens][n_ff]
    float *up;                  // [max_tokens][n_ff]
    float *out;                 // [max_tokens][n_embd] sub-block output before the residual add
    float *rows;                // [max_rows][n_embd] final hidden states of the rows that want logits
    float *logits;              // [max_rows][n_vocab]
    float *part;                // [max_rows][head_rows] this rank's slice of a vocabulary-split head's logits
    int64_t head_rows;          // output.weight's rows: n_vocab, or the rank's slice (model/shard.h)
    float *hid;                 // [max_tokens][n_embd] final normed hidden states of the rows marked hidden
    int n_hid;
    float *qkv;     // [max_tokens][q_dim + 2*kv_dim] fused Q/K/V projection (Phi-3), else 1 float
    int32_t *apos;  // [max_tokens] encoders: the position each query attends up to (its sequence's last)
    void *work;     // matmul workspace
    float *row_raw; // [n_embd] one embedding row's stored bytes, read from the file (at most 4 a value)
    // RoPE cos/sin of each token of the batch, made once per batch and table (ci_rope_cos_sin): [0] the
    // model's RoPE, [1] that of sliding-window layers with their own base or scale.
    double *rope_cs[2]; // [max_tokens][rope_dim]
    bool rope_ready[2];
    // Mixture of experts (allocated only when the model has experts).
    float *router;  // [max_tokens][n_expert] router logits, then probabilities
    int32_t *sel;   // [max_tokens][n_expert_used] chosen experts of each token
    float *sel_w;   // [max_tokens][n_expert_used] their weights
    int32_t *e_tok; // [max_tokens * n_expert_used] tokens grouped by expert (ascending token order)
    float *e_w;     // [max_tokens * n_expert_used] the matching weights
    int32_t *e_off; // [n_expert + 1] start of each expert's group in e_tok
    float *xg;      // [max_tokens][n_embd] one expert's gathered input rows
    float *yg;      // [max_tokens][n_embd] one expert's output rows
    // Tensor parallelism: the shard's partial sums are all-reduced (dist.allreduce NULL: a whole model).
    struct fwd_dist dist;
    enum ci_status dist_status; // the first failure of this batch's all-reduces (CI_OK: none)
    struct ci_err dist_err;
};

/* Enough workspace for any matmul or matmul group of the model: the largest Q8 activations and the largest
 * Q8_K ones side by side (a group with both kinds of weight, e.g. Q4_K_M's Q/K/V, holds both). */
static size_t matmul_work(const struct model *m, int n_tok) {
    const struct model_weights *w = &m->weights;
    size_t best[2] = {0, 0}; // [uses Q8_K]
    if (w->output.data) {
        size_t n = ci_matmul_work_bytes(w->output.type, w->output.ne[0], n_tok);
        best[ci_type_uses_q8k(w->output.type)] = n;
    }
    for (int il = 0; il < m->config.n_layer; il++) {
        const struct layer_weights *l = &w->layers[il];
        const struct ci_tensor *all[] = {&l->wq,
                                         &l->wk,
                                         &l->wv,
                                         &l->wo,
                                         &l->w_gate,
                                         &l->w_up,
                                         &l->w_down,
                                         &l->wqkv,
                                         &l->ffn_gate_inp,
                                         &l->ffn_gate_exps,
                                         &l->ffn_up_exps,
                                         &l->ffn_down_exps,
                                         &l->ffn_gate_shexp,
                                         &l->ffn_up_shexp,
                                         &l->ffn_down_shexp};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (!all[i]->data)
                continue;
            size_t n = ci_matmul_work_bytes(all[i]->type, all[i]->ne[0], n_tok);
            size_t *b = &best[ci_type_uses_q8k(all[i]->type)];
            *b = n > *b ? n : *b;
        }
    }
    return best[0] > SIZE_MAX - best[1] ? SIZE_MAX : best[0] + best[1]; // SIZE_MAX: the allocation fails
}

enum ci_status forward_create(const struct model *m, int max_tokens, int max_logit_rows,
                              struct ci_threadpool *tp, struct forward **out, struct ci_err *err) {
    *out = NULL;
    const struct model_config *c = &m->config;
    if (max_tokens < 1 || max_logit_rows < 1 || max_logit_rows > max_tokens)
        return ci_err_set(err, CI_ERR_INVALID, "forward: need 1 <= max_logit_rows (%d) <= max_tokens (%d)",
                          max_logit_rows, max_tokens);
    model_pack_weights(m, tp); // once per model: the kernels' own layout of the matrices, where they have one
    struct forward *f = ci_calloc(1, sizeof *f);
    if (!f)
        return ci_err_set(err, CI_ERR_NOMEM, "forward: out of memory");
    f->m = m;
    f->tp = tp;
    f->max_tokens = max_tokens;
    f->max_rows = max_logit_rows;
    size_t T = (size_t)max_tokens, R = (size_t)max_logit_rows;
    size_t q_dim = (size_t)c->n_head * (size_t)c->head_dim,
           kv_dim = (size_t)c->n_kv_head * (size_t)c->head_dim;
    // The FFN scratch holds the widest of the dense FFN, one expert and the shared expert.
    size_t ff = c->n_expert ? 0 : (size_t)c->n_ff;
    ff = (size_t)c->n_ff_exp > ff ? (size_t)c->n_ff_exp : ff;
    ff = (size_t)c->n_ff_shexp > ff ? (size_t)c->n_ff_shexp : ff;
    size_t ne = (size_t)c->n_expert, nk = (size_t)c->n_expert_used, moe_rows = ne ? T : 0;
    const size_t ff_rows = T > nk ? T : nk; // moe_one_token keeps every chosen expert's gate and up rows
    f->head_rows = m->weights.output.data ? m->weights.output.ne[1] : 0;
    const bool split = f->head_rows > 0 && f->head_rows < c->n_vocab;
    struct {
        float **p;
        size_t rows, cols;
    } bufs[] = {
        {&f->x, T, (size_t)c->n_embd},
        {&f->xb, T, (size_t)c->n_embd},
        {&f->q, T, q_dim},
        {&f->k, T, kv_dim},
        {&f->v, T, kv_dim},
        {&f->att, T, q_dim},
        {&f->gate, ff_rows, ff * (c->ffn_fused ? 2 : 1)}, // fused: the gate and up rows side by side
        {&f->up, ff_rows, ff},
        {&f->out, T, (size_t)c->n_embd},
        {&f->rows, R, (size_t)c->n_embd},
        {&f->logits, R, (size_t)c->n_vocab},
        {&f->part, split ? R : 0, (size_t)f->head_rows},
        {&f->hid, T, (size_t)c->n_embd},
        {&f->row_raw, 1, (size_t)c->n_embd},
        {&f->qkv, c->qkv_fused ? T : 1, c->qkv_fused ? q_dim + 2 * kv_dim : 1},
        {(float **)&f->apos, c->encoder ? T : 0, 1},
        // 32-bit integers share the float buffers' element size.
        {&f->router, moe_rows, ne},
        {(float **)&f->sel, moe_rows, nk},
        {&f->sel_w, moe_rows, nk},
        {(float **)&f->e_tok, moe_rows, nk},
        {&f->e_w, moe_rows, nk},
        {(float **)&f->e_off, ne ? 1 : 0, ne + 1},
        {&f->xg, moe_rows, (size_t)c->n_embd},
        {&f->yg, moe_rows, (size_t)c->n_embd},
    };
    _Static_assert(sizeof(int32_t) == sizeof(float), "int32 scratch in float-sized buffers");
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (bufs[i].rows == 0)
            continue;
        size_t n, bytes;
        if (!ci_mul_size(bufs[i].rows, bufs[i].cols, &n) || !ci_mul_size(n, sizeof(float), &bytes) ||
            !(*bufs[i].p = ci_malloc_aligned(bytes))) {
            forward_free(f);
            return ci_err_set(err, CI_ERR_NOMEM, "forward: out of memory for the scratch of %d tokens",
                              max_tokens);
        }
    }
    size_t work = matmul_work(m, max_tokens);
    if (work && !(f->work = ci_malloc_aligned(work))) {
        forward_free(f);
        return ci_err_set(err, CI_ERR_NOMEM, "forward: out of memory for %zu bytes of matmul workspace",
                          work);
    }
    model_config_rope_params(c, &f->rope);
    for (int i = 0; i < 2 && !c->encoder; i++) {
        size_t n;
        if (!ci_mul_size(T, (size_t)f->rope.rope_dim * sizeof(double), &n) ||
            !(f->rope_cs[i] = ci_malloc_aligned(n))) {
            forward_free(f);
            return ci_err_set(err, CI_ERR_NOMEM, "forward: out of memory for the RoPE of %d tokens",
                              max_tokens);
        }
    }
    forward_set_n_ctx(f, c->n_ctx_train);
    *out = f;
    return CI_OK;
}

void forward_set_n_ctx(struct forward *f, int n_ctx) {
    const struct model_weights *w = &f->m->weights;
    if (w->rope_long.data) // LongRoPE: llama.cpp's choice by the context per sequence
        f->rope.freq_factors = n_ctx > f->m->config.rope_orig_ctx ? w->rope_long.data : w->rope_short.data;
    else
        f->rope.freq_factors = w->rope_freqs.data; // [rope_dim/2] or NULL
    f->rope_ready[0] = f->rope_ready[1] = false;
}

void forward_free(struct forward *f) {
    if (!f)
        return;
    void *all[] = {f->x,   f->xb,    f->q,      f->k,   f->v,      f->att,  f->gate,  f->up,
                   f->out, f->rows,  f->logits, f->hid, f->router, f->sel,  f->sel_w, f->e_tok,
                   f->e_w, f->e_off, f->xg,     f->yg,  f->qkv,    f->apos, f->part,  f->row_raw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ci_free_aligned(all[i]);
    ci_free_aligned(f->work);
    ci_free_aligned(f->rope_cs[0]);
    ci_free_aligned(f->rope_cs[1]);
    ci_free(f);
}

void forward_set_dist(struct forward *f, const struct fwd_dist *d) {
    if (d)
        f->dist = *d;
    else
        memset(&f->dist, 0, sizeof f->dist);
}

/* A shard's partial sub-block output out[0..n) summed over the ranks.  After a failure the ranks are out of
 * step: the rest of the batch runs without communicating and forward_batch returns the failure. */
static void dist_sum(struct forward *f, float *out, size_t n) {
    if (!f->dist.allreduce || f->dist_status != CI_OK)
        return;
    f->dist_status = f->dist.allreduce(f->dist.ctx, out, n, &f->dist_err);
}

/* A pipeline transfer (fn: one of f->dist's), skipped after a failure like dist_sum. */
static void dist_xfer(struct forward *f, enum ci_status (*fn)(void *, float *, size_t, struct ci_err *),
                      float *x, size_t n) {
    if (f->dist_status == CI_OK)
        f->dist_status = fn(f->dist.ctx, x, n, &f->dist_err);
}

/* Row `row` of the embedding table t (n_embd values) into x.  A GGUF's rows are read from the file
 * (gguf_read), not through its mapping: a prompt's tokens would otherwise map the whole page-cache folio
 * around each row (up to 2 MiB each after a cold start's read-ahead; measured, 8.9 MiB of a smollm2-135m
 * table for a 182-token prompt, which put cinfer's peak memory above llama.cpp's). */
static void embedding_row(struct forward *f, const struct ci_tensor *t, int64_t row, float *x) {
    const int E = f->m->config.n_embd;
    const uint8_t *src = (const uint8_t *)t->data + (size_t)row * t->row_bytes;
    uint64_t nb = 0;
    if (f->m->gguf && ci_row_bytes(t->type, (uint64_t)E, &nb) && nb <= (uint64_t)E * sizeof(float)) {
        gguf_read(f->m->gguf, src, nb, f->row_raw);
        src = (const uint8_t *)f->row_raw;
    }
    ci_dequantize_row(t->type, src, x, E);
}

/* The token embeddings of b's rows into f->x.  A tensor-parallel rank holds a slice of the vocabulary's rows
 * (model/shard.h): it writes zeros for the others' tokens, and the all-reduce sums the one row each token has
 * (exact: every other term is zero). */
static void embed(struct forward *f, const struct fwd_batch *b) {
    const struct model_config *c = &f->m->config;
    const struct model_weights *w = &f->m->weights;
    const struct ci_tensor *te = &w->tok_embd;
    const int n = b->n_tokens, E = c->n_embd;
    const bool sliced = te->ne[1] != c->n_vocab;
    for (int t = 0; t < n; t++) {
        float *x = f->x + (size_t)t * E;
        int64_t row = b->token[t] - w->tok_embd_v0;
        if (row < 0 || row >= te->ne[1])
            memset(x, 0, (size_t)E * sizeof *x);
        else
            embedding_row(f, te, row, x);
    }
    if (c->embd_scale) { // gemma: embeddings times sqrt(n_embd)
        const float sc = sqrtf((float)E);
        for (size_t i = 0; i < (size_t)n * E; i++)
            f->x[i] *= sc;
    }
    if (sliced)
        dist_sum(f, f->x, (size_t)n * E);
}

int forward_max_tokens(const struct forward *f) {
    return f->max_tokens;
}

const float *forward_hidden(const struct forward *f, int *n) {
    *n = f->n_hid;
    return f->hid;
}

static enum ci_status check_batch(const struct forward *f, const struct fwd_batch *b, int block_size,
                                  struct ci_err *err) {
    const struct model_config *c = &f->m->config;
    if (b->n_tokens < 1 || b->n_tokens > f->max_tokens)
        return ci_err_set(err, CI_ERR_INVALID, "batch of %d tokens outside [1, %d]", b->n_tokens,
                          f->max_tokens);
    int rows = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->token[t] < 0 || b->token[t] >= c->n_vocab)
            return ci_err_set(err, CI_ERR_INVALID, "token id %d outside the vocabulary [0, %d)", b->token[t],
                              c->n_vocab);
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return ci_err_set(err, CI_ERR_INVALID, "token %d: sequence index %d out of range", t, b->seq[t]);
        const struct ci_attn_seq *s = &b->seqs[b->seq[t]];
        if (b->pos[t] < 0 || b->pos[t] / block_size >= s->n_blocks)
            return ci_err_set(err, CI_ERR_INVALID, "token %d: position %d beyond its block table (%d blocks)",
                              t, b->pos[t], s->n_blocks);
        rows += b->logits[t] != 0;
    }
    if (rows > f->max_rows)
        return ci_err_set(err, CI_ERR_INVALID, "batch asks for %d logit rows, at most %d", rows, f->max_rows);
    if (c->encoder) {
        // Bidirectional attention needs each sequence whole in one batch (encoder_positions checks the
        // positions).  An encoder has no head: no logits.
        if (rows > 0)
            return ci_err_set(err, CI_ERR_INVALID, "an embedding model computes no logits");
        if (b->n_seqs > b->n_tokens)
            return ci_err_set(err, CI_ERR_INVALID, "encoder batch: %d sequences for %d tokens", b->n_seqs,
                              b->n_tokens);
        for (int t = 0; t < b->n_tokens; t++)
            if (b->pos[t] >= c->n_ctx_train)
                return ci_err_set(err, CI_ERR_INVALID,
                                  "token %d: position %d beyond the model's %d positions", t, b->pos[t],
                                  c->n_ctx_train);
    }
    return CI_OK;
}

/* Encoders: every query of a sequence attends to all of that sequence's keys, which this batch writes
 * before attending: the attention kernel's causal bound becomes the sequence's last position.  The batch
 * must hold each sequence from position 0 as one chunk (the engine runs an encoder's prompt whole); a
 * position past the sequence's token count here is refused, since a later chunk would change the earlier
 * tokens' states. */
static enum ci_status encoder_positions(struct forward *f, const struct fwd_batch *b, struct ci_err *err) {
    int32_t *cnt = f->apos; // first per sequence: [n_seqs] counts, then maxima; n_seqs <= n_tokens
    for (int s = 0; s < b->n_seqs; s++)
        cnt[s] = 0;
    for (int t = 0; t < b->n_tokens; t++)
        cnt[b->seq[t]]++;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->pos[t] >= cnt[b->seq[t]])
            return ci_err_set(err, CI_ERR_INVALID,
                              "encoder batch: token %d at position %d of a sequence with %d tokens here: an "
                              "encoder's sequence must be whole in one batch",
                              t, b->pos[t], cnt[b->seq[t]]);
    // Below the count (the engine gives each of 0..count-1 once): the last position is count - 1.  f->gate
    // (at least n_ff >= 1 floats per token) holds the result while cnt is still read.
    int32_t *last = (int32_t *)f->gate;
    for (int t = 0; t < b->n_tokens; t++)
        last[t] = cnt[b->seq[t]] - 1;
    memcpy(f->apos, last, (size_t)b->n_tokens * sizeof *f->apos);
    return CI_OK;
}

/* y[t][i] += bias[i] for the n_tok rows of n; bias NULL (an absent tensor): nothing. */
static void add_bias(float *y, const float *bias, int n_tok, int n) {
    if (!bias)
        return;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < n; i++)
            y[(size_t)t * n + i] += bias[i];
}

static void write_kv(const struct fwd_batch *b, const struct ci_kv_layer *kv, const float *k,
                     const float *v) {
    size_t row = (size_t)kv->n_kv_head * (size_t)kv->head_dim;
    for (int t = 0; t < b->n_tokens; t++) {
        const struct ci_attn_seq *s = &b->seqs[b->seq[t]];
        int32_t blk = s->block_table[b->pos[t] / kv->block_size];
        int slot = b->pos[t] % kv->block_size;
        for (int h = 0; h < kv->n_kv_head; h++) {
            // Stored as the cache's element type (f32: a copy; f16 / q8_0: rounded / quantized here, once).
            size_t off = ci_kv_offset(kv, blk, h, slot);
            const float *kr = k + t * row + (size_t)h * kv->head_dim,
                        *vr = v + t * row + (size_t)h * kv->head_dim;
            ci_kv_store_row(kv->type, kr, (unsigned char *)kv->k + off, kv->head_dim);
            ci_kv_store_row(kv->type, vr, (unsigned char *)kv->v + off, kv->head_dim);
        }
    }
}

/* The k largest of v[0..n) (the lower index first among equals) into sel, their values into w. */
static void top_k(const float *v, int n, int k, int32_t *sel, float *w) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        sel[j] = best;
        w[j] = v[best];
    }
}

/* The router of one token: softmax over the n_expert logits, the n_used most probable experts, their
 * probabilities as weights, renormalised to sum 1 where the architecture does so (the sum clamped below at
 * 2^-14 as llama.cpp does); gpt-oss instead takes the top n_used logits and weights them by their softmax. */
static void route_token(const struct model_config *c, float *probs, int32_t *sel, float *w) {
    if (c->moe_softmax_weight) {
        top_k(probs, c->n_expert, c->n_expert_used, sel, w);
        ci_softmax(w, c->n_expert_used);
        return;
    }
    ci_softmax(probs, c->n_expert);
    top_k(probs, c->n_expert, c->n_expert_used, sel, w);
    if (c->moe_norm_w) {
        float sum = 0.0f;
        for (int j = 0; j < c->n_expert_used; j++)
            sum += w[j];
        sum = sum < 6.103515625e-5f ? 6.103515625e-5f : sum;
        for (int j = 0; j < c->n_expert_used; j++)
            w[j] /= sum;
    }
}

/* Biases of one expert (gpt-oss): rows of the bias tables, or NULL. */
struct ffn_bias {
    const float *gate, *up, *down;
};

/* out = gated FFN of the n rows of x: down(act(gate x) * up x), with biases where given. */
/* g = act(g) * u over ff values: SwiGLU, GeGLU with the tanh GeLU (gemma), or gpt-oss's clamped SwiGLU. */
static void ffn_activate(const struct model_config *c, float *g, const float *u, int ff) {
    if (c->swiglu_oai)
        ci_swiglu_oai_mul(g, u, ff, 1.702f, 7.0f);
    else
        (c->gelu_ffn ? ci_gelu_mul : ci_silu_mul)(g, u, ff);
}

static void gated_ffn(struct forward *f, const struct ci_tensor *gate, const struct ci_tensor *up,
                      const struct ci_tensor *down, const struct ffn_bias *bias, const float *x, int n,
                      float *out) {
    const struct model_config *c = &f->m->config;
    int ff = (int)gate->ne[1];
    const struct ci_tensor *w[] = {gate, up};
    float *const y[] = {f->gate, f->up};
    ci_matmul_group(f->tp, 2, w, x, n, y, f->work);
    if (bias) {
        add_bias(f->gate, bias->gate, n, ff);
        add_bias(f->up, bias->up, n, ff);
    }
    for (int t = 0; t < n; t++)
        ffn_activate(c, f->gate + (size_t)t * ff, f->up + (size_t)t * ff, ff);
    ci_matmul(f->tp, down, f->gate, n, out, f->work);
    if (bias)
        add_bias(out, bias->down, n, (int)down->ne[1]);
}

/* moe_ffn for one token (decode) whose chosen experts are ex[0..k) in ascending order with weights ew: every
 * expert's gate and up in one matmul group (one pool dispatch, the input quantized once, where gated_ffn would
 * take one per expert), then each expert's activation and down projection as gated_ffn does them, added in
 * the same order: the same bits as the per-expert path. */
static void moe_one_token(struct forward *f, const struct layer_weights *l, const int *ex, const float *ew,
                          int k) {
    const struct model_config *c = &f->m->config;
    const int E = c->n_embd, ff = c->n_ff_exp;
    struct ci_tensor views[CI_MATMUL_GROUP_MAX];
    const struct ci_tensor *w[CI_MATMUL_GROUP_MAX];
    float *y[CI_MATMUL_GROUP_MAX];
    for (int i = 0; i < k; i++) {
        views[2 * i] = model_expert_view(&l->ffn_gate_exps, ex[i]);
        views[2 * i + 1] = model_expert_view(&l->ffn_up_exps, ex[i]);
        w[2 * i] = &views[2 * i];
        w[2 * i + 1] = &views[2 * i + 1];
        y[2 * i] = f->gate + (size_t)i * ff;
        y[2 * i + 1] = f->up + (size_t)i * ff;
    }
    ci_matmul_group(f->tp, 2 * k, w, f->xb, 1, y, f->work);
    memset(f->out, 0, sizeof(float) * (size_t)E);
    for (int i = 0; i < k; i++) {
        const int e = ex[i];
        float *g = y[2 * i], *u = y[2 * i + 1];
        if (l->ffn_gate_exps_b.data) { // gpt-oss: expert e's row of each bias table
            add_bias(g, (const float *)l->ffn_gate_exps_b.data + (size_t)e * ff, 1, ff);
            add_bias(u, (const float *)l->ffn_up_exps_b.data + (size_t)e * ff, 1, ff);
        }
        ffn_activate(c, g, u, ff);
        struct ci_tensor down = model_expert_view(&l->ffn_down_exps, e);
        ci_matmul(f->tp, &down, g, 1, f->yg, f->work);
        if (l->ffn_gate_exps_b.data)
            add_bias(f->yg, (const float *)l->ffn_down_exps_b.data + (size_t)e * E, 1, E);
        for (int d = 0; d < E; d++)
            f->out[d] += ew[i] * f->yg[d];
    }
}

/* moe_ffn's experts for a batch: each expert used by any token once, over the rows routed to it (e_off,
 * e_tok, e_w), its outputs added to those tokens' rows in ascending expert order. */
static void moe_tokens(struct forward *f, const struct layer_weights *l, int n) {
    const struct model_config *c = &f->m->config;
    const int E = c->n_embd, NE = c->n_expert;
    memset(f->out, 0, sizeof(float) * (size_t)n * E);
    for (int e = 0; e < NE; e++) {
        int lo = f->e_off[e], cnt = f->e_off[e + 1] - lo;
        if (cnt == 0)
            continue;
        for (int i = 0; i < cnt; i++)
            memcpy(f->xg + (size_t)i * E, f->xb + (size_t)f->e_tok[lo + i] * E, sizeof(float) * E);
        struct ci_tensor gate = model_expert_view(&l->ffn_gate_exps, e),
                         up = model_expert_view(&l->ffn_up_exps, e),
                         down = model_expert_view(&l->ffn_down_exps, e);
        struct ffn_bias eb = {0};
        if (l->ffn_gate_exps_b.data) { // gpt-oss: expert e's row of each bias table
            eb.gate = (const float *)l->ffn_gate_exps_b.data + (size_t)e * c->n_ff_exp;
            eb.up = (const float *)l->ffn_up_exps_b.data + (size_t)e * c->n_ff_exp;
            eb.down = (const float *)l->ffn_down_exps_b.data + (size_t)e * E;
        }
        gated_ffn(f, &gate, &up, &down, l->ffn_gate_exps_b.data ? &eb : NULL, f->xg, cnt, f->yg);
        for (int i = 0; i < cnt; i++) {
            float *o = f->out + (size_t)f->e_tok[lo + i] * E, w = f->e_w[lo + i];
            const float *y = f->yg + (size_t)i * E;
            for (int d = 0; d < E; d++)
                o[d] += w * y[d];
        }
    }
}

/* The mixture-of-experts FFN of the batch's normed rows f->xb into f->out.  The tokens are grouped by expert:
 * each expert used by any token runs once over the rows routed to it (its weights are read once per step),
 * and its outputs are added to those tokens' rows in ascending expert order, so a token's result does not
 * depend on the other tokens of the batch. */
static void moe_ffn(struct forward *f, const struct layer_weights *l, int n) {
    const struct model_config *c = &f->m->config;
    const int E = c->n_embd, K = c->n_expert_used, NE = c->n_expert;
    ci_matmul(f->tp, &l->ffn_gate_inp, f->xb, n, f->router, f->work);
    add_bias(f->router, l->ffn_gate_inp_b.data, n, NE);
    for (int t = 0; t < n; t++)
        route_token(c, f->router + (size_t)t * NE, f->sel + (size_t)t * K, f->sel_w + (size_t)t * K);
    // Counting sort of the (token, expert) pairs by expert, tokens ascending within an expert.
    for (int e = 0; e <= NE; e++)
        f->e_off[e] = 0;
    for (int i = 0; i < n * K; i++)
        f->e_off[f->sel[i] + 1]++;
    for (int e = 0; e < NE; e++)
        f->e_off[e + 1] += f->e_off[e];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < K; j++) {
            int e = f->sel[t * K + j];
            // e_off[e] advances as the slots fill; restored below.
            f->e_tok[f->e_off[e]] = t;
            f->e_w[f->e_off[e]++] = f->sel_w[t * K + j];
        }
    for (int e = NE; e > 0; e--)
        f->e_off[e] = f->e_off[e - 1];
    f->e_off[0] = 0;

    if (n == 1 && 2 * K <= CI_MATMUL_GROUP_MAX) {
        int ex[CI_MATMUL_GROUP_MAX / 2];
        float ew[CI_MATMUL_GROUP_MAX / 2];
        int k = 0;
        for (int e = 0; e < NE; e++)
            if (f->e_off[e + 1] > f->e_off[e]) {
                ex[k] = e;
                ew[k++] = f->e_w[f->e_off[e]];
            }
        moe_one_token(f, l, ex, ew, k);
    } else {
        moe_tokens(f, l, n);
    }
    if (c->moe_shared_exp) { // qwen2moe: + sigmoid(gate_inp_shexp . x) * shared_ffn(x)
        gated_ffn(f, &l->ffn_gate_shexp, &l->ffn_up_shexp, &l->ffn_down_shexp, NULL, f->xb, n, f->yg);
        const float *gw = l->ffn_gate_inp_shexp.data;
        for (int t = 0; t < n; t++) {
            const float *x = f->xb + (size_t)t * E, *y = f->yg + (size_t)t * E;
            float g = 0.0f;
            for (int d = 0; d < E; d++)
                g += gw[d] * x[d];
            g = 1.0f / (1.0f + expf(-g));
            float *o = f->out + (size_t)t * E;
            for (int d = 0; d < E; d++)
                o[d] += g * y[d];
        }
    }
}

/* One BERT layer over the residual stream f->x (post-norm): LayerNorm(x + attn(x)), then
 * LayerNorm(x + down(gelu(up x))). */
static void bert_layer(struct forward *f, int il, const struct fwd_batch *b, const struct ci_kv_layer *kv) {
    const struct model_config *c = &f->m->config;
    const struct layer_weights *l = &f->m->weights.layers[il];
    int n = b->n_tokens, E = c->n_embd, q_dim = c->n_head * c->head_dim, kv_dim = c->n_kv_head * c->head_dim;
    ci_matmul(f->tp, &l->wq, f->x, n, f->q, f->work);
    ci_matmul(f->tp, &l->wk, f->x, n, f->k, f->work);
    ci_matmul(f->tp, &l->wv, f->x, n, f->v, f->work);
    add_bias(f->q, l->bq.data, n, q_dim);
    add_bias(f->k, l->bk.data, n, kv_dim);
    add_bias(f->v, l->bv.data, n, kv_dim);
    write_kv(b, &kv[il], f->k, f->v);
    struct ci_attn_args args = {
        .n_tokens = n,
        .q = f->q,
        .pos = f->apos, // bidirectional: every key of the sequence
        .seq = b->seq,
        .seqs = b->seqs,
        .kv = &kv[il],
        .n_head = c->n_head,
        .scale = 1.0f / sqrtf((float)c->head_dim),
        .out = f->att,
    };
    ci_attention_paged(f->tp, &args);
    ci_matmul(f->tp, &l->wo, f->att, n, f->out, f->work);
    add_bias(f->out, l->bo.data, n, E);
    for (int t = 0; t < n; t++) {
        float *x = f->x + (size_t)t * E;
        const float *o = f->out + (size_t)t * E;
        for (int i = 0; i < E; i++)
            x[i] += o[i];
        ci_layernorm(x, x, l->attn_out_norm.data, l->attn_out_norm_b.data, E, c->rms_eps);
    }
    ci_matmul(f->tp, &l->w_up, f->x, n, f->up, f->work);
    add_bias(f->up, l->b_up.data, n, c->n_ff);
    for (int t = 0; t < n; t++)
        ci_gelu(f->up + (size_t)t * c->n_ff, c->n_ff);
    ci_matmul(f->tp, &l->w_down, f->up, n, f->out, f->work);
    add_bias(f->out, l->b_down.data, n, E);
    for (int t = 0; t < n; t++) {
        float *x = f->x + (size_t)t * E;
        const float *o = f->out + (size_t)t * E;
        for (int i = 0; i < E; i++)
            x[i] += o[i];
        ci_layernorm(x, x, l->layer_out_norm.data, l->layer_out_norm_b.data, E, c->rms_eps);
    }
}

/* BERT's input: token + position + token type 0 embeddings, LayerNorm; then the layers.  The final
 * hidden states are the last layer's output (no output norm). */
static void bert_forward(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv) {
    const struct model_config *c = &f->m->config;
    const struct model_weights *w = &f->m->weights;
    int n = b->n_tokens, E = c->n_embd;
    float *row = f->out; // one row of scratch
    for (int t = 0; t < n; t++) {
        float *x = f->x + (size_t)t * E;
        embedding_row(f, &w->tok_embd, b->token[t], x);
        embedding_row(f, &w->pos_embd, b->pos[t], row);
        for (int i = 0; i < E; i++)
            x[i] += row[i];
        if (w->type_embd.data) {
            ci_dequantize_row(w->type_embd.type, w->type_embd.data, row, E);
            for (int i = 0; i < E; i++)
                x[i] += row[i];
        }
        ci_layernorm(x, x, w->tok_norm.data, w->tok_norm_b.data, E, c->rms_eps);
    }
    for (int il = 0; il < c->n_layer; il++)
        bert_layer(f, il, b, kv);
    f->n_hid = 0;
    for (int t = 0; t < n; t++)
        if (b->hidden && b->hidden[t])
            memcpy(f->hid + (size_t)f->n_hid++ * E, f->x + (size_t)t * E, (size_t)E * sizeof(float));
}

static void layer_forward(struct forward *f, int il, const struct fwd_batch *b,
                          const struct ci_kv_layer *kv) {
    const struct model_config *c = &f->m->config;
    const struct layer_weights *l = &f->m->weights.layers[il];
    int n = b->n_tokens, E = c->n_embd, q_dim = c->n_head * c->head_dim, kv_dim = c->n_kv_head * c->head_dim;

    // Attention sub-block.
    for (int t = 0; t < n; t++)
        ci_rmsnorm(f->xb + (size_t)t * E, f->x + (size_t)t * E, l->attn_norm.data, E, c->rms_eps);
    if (l->wqkv.data) { // Phi-3: one matmul, its rows split into Q, K, V
        int qkv_dim = q_dim + 2 * kv_dim;
        ci_matmul(f->tp, &l->wqkv, f->xb, n, f->qkv, f->work);
        for (int t = 0; t < n; t++) {
            const float *r = f->qkv + (size_t)t * qkv_dim;
            memcpy(f->q + (size_t)t * q_dim, r, (size_t)q_dim * sizeof *r);
            memcpy(f->k + (size_t)t * kv_dim, r + q_dim, (size_t)kv_dim * sizeof *r);
            memcpy(f->v + (size_t)t * kv_dim, r + q_dim + kv_dim, (size_t)kv_dim * sizeof *r);
        }
    } else {
        const struct ci_tensor *w[] = {&l->wq, &l->wk, &l->wv};
        float *const y[] = {f->q, f->k, f->v};
        ci_matmul_group(f->tp, 3, w, f->xb, n, y, f->work);
    }
    add_bias(f->q, l->bq.data, n, q_dim);
    add_bias(f->k, l->bk.data, n, kv_dim);
    add_bias(f->v, l->bv.data, n, kv_dim);
    if (l->q_norm.data) { // qwen3: RMSNorm of each head of Q and K, before RoPE
        for (size_t h = 0; h < (size_t)n * c->n_head; h++)
            ci_rmsnorm(f->q + h * c->head_dim, f->q + h * c->head_dim, l->q_norm.data, c->head_dim,
                       c->rms_eps);
        for (size_t h = 0; h < (size_t)n * c->n_kv_head; h++)
            ci_rmsnorm(f->k + h * c->head_dim, f->k + h * c->head_dim, l->k_norm.data, c->head_dim,
                       c->rms_eps);
    }
    // Sliding-window (local) layers may have their own RoPE base and scale (gemma3: 10000, unscaled).
    const bool local = model_layer_swa(c, c->layer0 + il); // il counts the pipeline stage's layers
    struct ci_rope_params rope = f->rope;
    if (local && c->rope_base_swa > 0.0f)
        rope.base = c->rope_base_swa;
    if (local && c->rope_pos_scale_swa > 0.0f)
        rope.freq_scale = c->rope_pos_scale_swa;
    const int table = local && (c->rope_base_swa > 0.0f || c->rope_pos_scale_swa > 0.0f);
    double *cs = f->rope_cs[table];
    const size_t rd = (size_t)rope.rope_dim;
    if (!f->rope_ready[table]) { // the angles of this batch's positions, for every layer of this table
        for (int t = 0; t < n; t++)
            ci_rope_cos_sin(b->pos[t], &rope, cs + (size_t)t * rd);
        f->rope_ready[table] = true;
    }
    for (int t = 0; t < n; t++) {
        ci_rope_rotate(f->q + (size_t)t * q_dim, c->n_head, c->head_dim, &rope, cs + (size_t)t * rd);
        ci_rope_rotate(f->k + (size_t)t * kv_dim, c->n_kv_head, c->head_dim, &rope, cs + (size_t)t * rd);
    }
    write_kv(b, &kv[il], f->k, f->v);
    struct ci_attn_args args = {
        .n_tokens = n,
        .q = f->q,
        .pos = b->pos,
        .seq = b->seq,
        .seqs = b->seqs,
        .kv = &kv[il],
        .n_head = c->n_head,
        .scale = c->attn_scale > 0.0f ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim),
        .out = f->att,
        .window = local ? c->sliding_window : 0,
        .softcap = c->attn_softcap,
        .sinks = l->sinks.data, // gpt-oss
    };
    ci_attention_paged(f->tp, &args);
    ci_matmul(f->tp, &l->wo, f->att, n, f->out, f->work);
    dist_sum(f, f->out, (size_t)n * E);
    add_bias(f->out, l->bo.data, n, E);
    if (l->post_attn_norm.data) // gemma: the sub-block's output normed before the residual add
        for (int t = 0; t < n; t++)
            ci_rmsnorm(f->out + (size_t)t * E, f->out + (size_t)t * E, l->post_attn_norm.data, E, c->rms_eps);
    for (size_t i = 0; i < (size_t)n * E; i++)
        f->x[i] += f->out[i];

    // Feed-forward sub-block (SwiGLU or GeGLU with the tanh GeLU, dense or a mixture of experts).
    for (int t = 0; t < n; t++)
        ci_rmsnorm(f->xb + (size_t)t * E, f->x + (size_t)t * E, l->ffn_norm.data, E, c->rms_eps);
    if (c->n_expert > 0) {
        moe_ffn(f, l, n);
    } else if (c->ffn_fused) { // Phi-3: ffn_up's rows are the gate's then the up projection's
        size_t F = (size_t)c->n_ff;
        ci_matmul(f->tp, &l->w_up, f->xb, n, f->gate, f->work);
        for (int t = 0; t < n; t++) {
            float *g = f->gate + (size_t)t * 2 * F;
            ci_silu_mul(g, g + F, c->n_ff);
            memmove(f->gate + (size_t)t * F, g, F * sizeof *g); // compact to [n][n_ff] for ffn_down
        }
        ci_matmul(f->tp, &l->w_down, f->gate, n, f->out, f->work);
    } else {
        gated_ffn(f, &l->w_gate, &l->w_up, &l->w_down, NULL, f->xb, n, f->out);
    }
    dist_sum(f, f->out, (size_t)n * E);
    if (l->post_ffw_norm.data)
        for (int t = 0; t < n; t++)
            ci_rmsnorm(f->out + (size_t)t * E, f->out + (size_t)t * E, l->post_ffw_norm.data, E, c->rms_eps);
    for (size_t i = 0; i < (size_t)n * E; i++)
        f->x[i] += f->out[i];
}

static enum ci_status run_batch(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv,
                                const float **logits, int *n_rows, struct ci_err *err);

enum ci_status forward_batch(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv,
                             const float **logits, int *n_rows, struct ci_err *err) {
    enum ci_status s = check_batch(f, b, kv[0].block_size, err);
    if (s != CI_OK)
        return s;
    if (f->dist.begin && (s = f->dist.begin(f->dist.ctx, b, err)) != CI_OK)
        return s;
    model_pass_begin(f->m, f->tp); // after the broadcast: the other ranks pack their shards meanwhile
    s = run_batch(f, b, kv, logits, n_rows, err);
    model_pass_end(f->m);
    if (f->dist.end)
        f->dist.end(f->dist.ctx);
    return s;
}

/* forward_batch after its checks and the step's broadcast. */
static enum ci_status run_batch(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv,
                                const float **logits, int *n_rows, struct ci_err *err) {
    const struct model_config *c = &f->m->config;
    const struct model_weights *w = &f->m->weights;
    enum ci_status s;
    f->dist_status = CI_OK;
    if (c->encoder) {
        if ((s = encoder_positions(f, b, err)) != CI_OK)
            return s;
        bert_forward(f, b, kv);
        *logits = f->logits;
        *n_rows = 0;
        if (model_file_damaged(f->m))
            return ci_err_set(
                err, CI_ERR_IO,
                "the model file changed on disk while it was in use (truncated): restart to load "
                "it again");
        return CI_OK;
    }
    int n = b->n_tokens, E = c->n_embd;
    const struct fwd_dist *d = &f->dist;
    // Pipeline parallelism: the rows in micro-batches, each passed on as soon as this stage is done with it,
    // so the next stage works on it while this one goes on with the next.  A micro-batch sees the K/V of the
    // earlier ones (each stage runs them in order), so the split needs no care for sequences.
    int n_micro = d->n_micro > 1 ? (d->n_micro < n ? d->n_micro : n) : 1;
    float *x_all = f->x;
    for (int i = 0; i < n_micro; i++) {
        int t0 = (int)((int64_t)n * i / n_micro), t1 = (int)((int64_t)n * (i + 1) / n_micro);
        struct fwd_batch mb = *b;
        mb.n_tokens = t1 - t0;
        mb.token += t0, mb.pos += t0, mb.seq += t0, mb.logits += t0;
        if (mb.hidden)
            mb.hidden += t0;
        f->x = x_all + (size_t)t0 * E; // layer_forward's residual stream: this micro-batch's rows
        if (d->recv)
            dist_xfer(f, d->recv, f->x, (size_t)mb.n_tokens * E);
        else
            embed(f, &mb);
        f->rope_ready[0] = f->rope_ready[1] = false; // this micro-batch's positions
        for (int il = 0; il < c->n_layer; il++)
            layer_forward(f, il, &mb, kv);
        if (d->send)
            dist_xfer(f, d->send, f->x, (size_t)mb.n_tokens * E);
    }
    f->x = x_all;
    if (d->flush)
        dist_xfer(f, d->flush, NULL, 0);
    for (int i = 0; d->gather && i < n_micro; i++) { // the last stage's output, on the head's rank
        int t0 = (int)((int64_t)n * i / n_micro), t1 = (int)((int64_t)n * (i + 1) / n_micro);
        dist_xfer(f, d->gather, f->x + (size_t)t0 * E, (size_t)(t1 - t0) * E);
    }

    int rows = 0;
    f->n_hid = 0;
    for (int t = 0; t < n; t++) {
        if (b->hidden && b->hidden[t])
            ci_rmsnorm(f->hid + (size_t)f->n_hid++ * E, f->x + (size_t)t * E, w->output_norm.data, E,
                       c->rms_eps);
        if (!b->logits[t])
            continue;
        ci_rmsnorm(f->rows + (size_t)rows * E, f->x + (size_t)t * E, w->output_norm.data, E, c->rms_eps);
        rows++;
    }
    // A vocabulary-split head (model/shard.h): this rank's slice of the columns, then gathered on rank 0.
    const bool split = f->head_rows < c->n_vocab;
    float *out = split ? f->part : f->logits;
    if (rows && f->head_rows)
        ci_matmul(f->tp, &w->output, f->rows, rows, out, f->work);
    if (c->final_softcap > 0.0f) { // gemma2: logits capped as cap * tanh(logit / cap)
        const float cap = c->final_softcap;
        for (size_t i = 0; i < (size_t)rows * (size_t)f->head_rows; i++)
            out[i] = cap * tanhf(out[i] / cap);
    }
    if (split && rows && d->head && f->dist_status == CI_OK)
        f->dist_status = d->head(d->ctx, f->part, rows, f->logits, &f->dist_err);
    *logits = f->logits;
    *n_rows = rows;
    if (f->dist_status != CI_OK) {
        if (err)
            *err = f->dist_err;
        return f->dist_status;
    }
    // A model file truncated while mapped reads as zeros (core/mapfile.c): these logits are not the model's.
    if (model_file_damaged(f->m))
        return ci_err_set(
            err, CI_ERR_IO,
            "the model file changed on disk while it was in use (truncated): restart to load it "
            "again");
    return CI_OK;
}
