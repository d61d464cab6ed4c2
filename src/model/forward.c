#include "model/forward.h"

#include <math.h>
#include <string.h>

#include "core/mem.h"
#include "core/threadpool.h"
#include "model/model.h"

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
    float *qkv;                 // [max_tokens][q_dim + 2*kv_dim] fused Q/K/V projection (Phi-3), else 1 float
    void *work;                 // matmul workspace
};

static size_t matmul_work(const struct model *m, int n_tok) {
    const struct model_weights *w = &m->weights;
    size_t best = ci_matmul_work_bytes(w->output.type, w->output.ne[0], n_tok);
    for (int il = 0; il < m->config.n_layer; il++) {
        const struct layer_weights *l = &w->layers[il];
        const struct ci_tensor *all[] = {&l->wq,     &l->wk,   &l->wv,     &l->wo,
                                         &l->w_gate, &l->w_up, &l->w_down, &l->wqkv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            if (!all[i]->data)
                continue;
            size_t n = ci_matmul_work_bytes(all[i]->type, all[i]->ne[0], n_tok);
            best = n > best ? n : best;
        }
    }
    return best;
}

enum ci_status forward_create(const struct model *m, int max_tokens, int max_logit_rows,
                              struct ci_threadpool *tp, struct forward **out, struct ci_err *err) {
    *out = NULL;
    const struct model_config *c = &m->config;
    if (max_tokens < 1 || max_logit_rows < 1 || max_logit_rows > max_tokens)
        return ci_err_set(err, CI_ERR_INVALID, "forward: need 1 <= max_logit_rows (%d) <= max_tokens (%d)",
                          max_logit_rows, max_tokens);
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
        {&f->gate, T, (size_t)c->n_ff * (c->ffn_fused ? 2 : 1)}, // fused: the gate and up rows side by side
        {&f->up, T, (size_t)c->n_ff},
        {&f->out, T, (size_t)c->n_embd},
        {&f->rows, R, (size_t)c->n_embd},
        {&f->logits, R, (size_t)c->n_vocab},
        {&f->qkv, c->qkv_fused ? T : 1, c->qkv_fused ? q_dim + 2 * kv_dim : 1},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
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
}

void forward_free(struct forward *f) {
    if (!f)
        return;
    float *all[] = {f->x,    f->xb, f->q,   f->k,    f->v,      f->att,
                    f->gate, f->up, f->out, f->rows, f->logits, f->qkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ci_free_aligned(all[i]);
    ci_free_aligned(f->work);
    ci_free(f);
}

int forward_max_tokens(const struct forward *f) {
    return f->max_tokens;
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
    return CI_OK;
}

static void add_bias(float *y, const struct ci_tensor *bias, int n_tok, int n) {
    if (!bias->data)
        return;
    const float *bv = bias->data;
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < n; i++)
            y[(size_t)t * n + i] += bv[i];
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
        ci_matmul(f->tp, &l->wq, f->xb, n, f->q, f->work);
        ci_matmul(f->tp, &l->wk, f->xb, n, f->k, f->work);
        ci_matmul(f->tp, &l->wv, f->xb, n, f->v, f->work);
    }
    add_bias(f->q, &l->bq, n, q_dim);
    add_bias(f->k, &l->bk, n, kv_dim);
    add_bias(f->v, &l->bv, n, kv_dim);
    if (l->q_norm.data) { // qwen3: RMSNorm of each head of Q and K, before RoPE
        for (size_t h = 0; h < (size_t)n * c->n_head; h++)
            ci_rmsnorm(f->q + h * c->head_dim, f->q + h * c->head_dim, l->q_norm.data, c->head_dim,
                       c->rms_eps);
        for (size_t h = 0; h < (size_t)n * c->n_kv_head; h++)
            ci_rmsnorm(f->k + h * c->head_dim, f->k + h * c->head_dim, l->k_norm.data, c->head_dim,
                       c->rms_eps);
    }
    for (int t = 0; t < n; t++) {
        ci_rope_apply(f->q + (size_t)t * q_dim, c->n_head, c->head_dim, b->pos[t], &f->rope);
        ci_rope_apply(f->k + (size_t)t * kv_dim, c->n_kv_head, c->head_dim, b->pos[t], &f->rope);
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
        .scale = 1.0f / sqrtf((float)c->head_dim),
        .out = f->att,
    };
    ci_attention_paged(f->tp, &args);
    ci_matmul(f->tp, &l->wo, f->att, n, f->out, f->work);
    for (size_t i = 0; i < (size_t)n * E; i++)
        f->x[i] += f->out[i];

    // Feed-forward sub-block (SwiGLU).
    for (int t = 0; t < n; t++)
        ci_rmsnorm(f->xb + (size_t)t * E, f->x + (size_t)t * E, l->ffn_norm.data, E, c->rms_eps);
    if (c->ffn_fused) { // Phi-3: ffn_up's rows are the gate's then the up projection's
        size_t F = (size_t)c->n_ff;
        ci_matmul(f->tp, &l->w_up, f->xb, n, f->gate, f->work);
        for (int t = 0; t < n; t++) {
            float *g = f->gate + (size_t)t * 2 * F;
            ci_silu_mul(g, g + F, c->n_ff);
            memmove(f->gate + (size_t)t * F, g, F * sizeof *g); // compact to [n][n_ff] for ffn_down
        }
    } else {
        ci_matmul(f->tp, &l->w_gate, f->xb, n, f->gate, f->work);
        ci_matmul(f->tp, &l->w_up, f->xb, n, f->up, f->work);
        for (int t = 0; t < n; t++)
            ci_silu_mul(f->gate + (size_t)t * c->n_ff, f->up + (size_t)t * c->n_ff, c->n_ff);
    }
    ci_matmul(f->tp, &l->w_down, f->gate, n, f->out, f->work);
    for (size_t i = 0; i < (size_t)n * E; i++)
        f->x[i] += f->out[i];
}

enum ci_status forward_batch(struct forward *f, const struct fwd_batch *b, const struct ci_kv_layer *kv,
                             const float **logits, int *n_rows, struct ci_err *err) {
    const struct model_config *c = &f->m->config;
    const struct model_weights *w = &f->m->weights;
    enum ci_status s = check_batch(f, b, kv[0].block_size, err);
    if (s != CI_OK)
        return s;
    int n = b->n_tokens, E = c->n_embd;
    for (int t = 0; t < n; t++)
        ci_dequantize_row(w->tok_embd.type,
                          (const uint8_t *)w->tok_embd.data + (size_t)b->token[t] * w->tok_embd.row_bytes,
                          f->x + (size_t)t * E, E);
    for (int il = 0; il < c->n_layer; il++)
        layer_forward(f, il, b, kv);

    int rows = 0;
    for (int t = 0; t < n; t++) {
        if (!b->logits[t])
            continue;
        ci_rmsnorm(f->rows + (size_t)rows * E, f->x + (size_t)t * E, w->output_norm.data, E, c->rms_eps);
        rows++;
    }
    if (rows)
        ci_matmul(f->tp, &w->output, f->rows, rows, f->logits, f->work);
    *logits = f->logits;
    *n_rows = rows;
    // A model file truncated while mapped reads as zeros (core/mapfile.c): these logits are not the model's.
    if (model_file_damaged(f->m))
        return ci_err_set(
            err, CI_ERR_IO,
            "the model file changed on disk while it was in use (truncated): restart to load it "
            "again");
    return CI_OK;
}
