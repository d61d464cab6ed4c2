#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

struct binder {
    const struct model_config *c;
    weights_lookup_fn lookup;
    const void *src;
    struct ci_err *err;
};

static const char *dims_str(char *buf, size_t n, int64_t ne0, int64_t ne1) {
    if (ne1 > 1)
        snprintf(buf, n, "[%lld, %lld]", (long long)ne0, (long long)ne1);
    else
        snprintf(buf, n, "[%lld]", (long long)ne0);
    return buf;
}

/* Binds name to *out, checking shape {ne0, ne1} (ne1 = 1 for vectors).  Vectors (norms, biases) must be F32;
 * matrices any type with kernels. */
static enum ci_status bind(struct binder *b, const char *name, int64_t ne0, int64_t ne1, bool optional,
                           struct ci_tensor *out) {
    memset(out, 0, sizeof *out);
    const struct ci_tensor *t = b->lookup(b->src, name);
    if (!t)
        return optional ? CI_OK : ci_err_set(b->err, CI_ERR_FORMAT, "tensor '%s' missing", name);
    int64_t rows = 1;
    for (int d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    if (t->ne[0] != ne0 || rows != ne1 || (ne1 > 1 && t->n_dims != 2)) {
        char want[64], got[64];
        return ci_err_set(b->err, CI_ERR_FORMAT, "tensor '%s': shape %s, expected %s", name,
                          dims_str(got, sizeof got, t->ne[0], rows), dims_str(want, sizeof want, ne0, ne1));
    }
    bool vector = ne1 == 1;
    if (vector ? t->type != CI_TYPE_F32 : !ci_type_supported(t->type))
        return ci_err_set(b->err, CI_ERR_UNSUPPORTED, "tensor '%s': type %s not supported here%s", name,
                          ci_type_name(t->type), vector ? " (norms and biases must be F32)" : "");
    *out = *t;
    return CI_OK;
}

/* An F32 table of biases {ne0, ne1} (gpt-oss's expert biases: one row per expert). */
static enum ci_status bind_f32(struct binder *b, const char *name, int64_t ne0, int64_t ne1,
                               struct ci_tensor *out) {
    enum ci_status s = bind(b, name, ne0, ne1, false, out);
    if (s == CI_OK && out->type != CI_TYPE_F32)
        return ci_err_set(b->err, CI_ERR_UNSUPPORTED, "tensor '%s': type %s, biases must be F32", name,
                          ci_type_name(out->type));
    return s;
}

/* A 3-D expert tensor {ne0, ne1, n_expert}: n_expert matrices of ne1 rows of ne0, any type with kernels. */
static enum ci_status bind_experts(struct binder *b, const char *name, int64_t ne0, int64_t ne1,
                                   struct ci_tensor *out) {
    memset(out, 0, sizeof *out);
    const struct ci_tensor *t = b->lookup(b->src, name);
    int64_t n_expert = b->c->n_expert;
    if (!t)
        return ci_err_set(b->err, CI_ERR_FORMAT, "tensor '%s' missing (expert_count %lld)", name,
                          (long long)n_expert);
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n_expert)
        return ci_err_set(b->err, CI_ERR_FORMAT,
                          "tensor '%s': shape [%lld, %lld, %lld] (%d dims), expected [%lld, %lld, %lld] "
                          "(expert_count %lld)",
                          name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], t->n_dims,
                          (long long)ne0, (long long)ne1, (long long)n_expert, (long long)n_expert);
    if (!ci_type_supported(t->type))
        return ci_err_set(b->err, CI_ERR_UNSUPPORTED, "tensor '%s': type %s not supported here", name,
                          ci_type_name(t->type));
    *out = *t;
    return CI_OK;
}

/* Expert e's matrix in the file's layout (no packing). */
static struct ci_tensor expert_matrix(const struct ci_tensor *exps, int e) {
    struct ci_tensor v = *exps;
    // Experts lie nbytes / n_expert apart: a tensor-parallel shard's slice (model/shard.c) covers less.
    uint64_t stride = exps->nbytes / (uint64_t)exps->ne[2];
    v.n_dims = 2;
    v.ne[2] = v.ne[3] = 1;
    v.nbytes = (uint64_t)exps->ne[1] * exps->row_bytes;
    v.data = (const uint8_t *)exps->data + (uint64_t)e * stride;
    v.packed = NULL;
    return v;
}

struct ci_tensor model_expert_view(const struct ci_tensor *exps, int e) {
    struct ci_tensor v = expert_matrix(exps, e);
    if (exps->packed) // model/pack.c: each expert's packing, model_expert_pack_stride() bytes apart
        v.packed = (const uint8_t *)exps->packed + (size_t)e * model_expert_pack_stride(exps);
    return v;
}

size_t model_expert_pack_stride(const struct ci_tensor *exps) {
    struct ci_tensor v = expert_matrix(exps, 0);
    return (ci_pack_bytes(&v) + 63) & ~(size_t)63; // ci_pack_part writes 64-byte aligned
}

static enum ci_status bind_moe(struct binder *b, int il, struct layer_weights *l) {
    const struct model_config *c = b->c;
    char name[96];
    enum ci_status s;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d.%s", il, suffix), name)
    if ((s = bind(b, NAME("ffn_gate_inp.weight"), c->n_embd, c->n_expert, false, &l->ffn_gate_inp)) ||
        (s = bind_experts(b, NAME("ffn_gate_exps.weight"), c->n_embd, c->n_ff_exp, &l->ffn_gate_exps)) ||
        (s = bind_experts(b, NAME("ffn_up_exps.weight"), c->n_embd, c->n_ff_exp, &l->ffn_up_exps)) ||
        (s = bind_experts(b, NAME("ffn_down_exps.weight"), c->n_ff_exp, c->n_embd, &l->ffn_down_exps)))
        return s;
    if (c->moe_shared_exp &&
        ((s = bind(b, NAME("ffn_gate_inp_shexp.weight"), c->n_embd, 1, false, &l->ffn_gate_inp_shexp)) ||
         (s = bind(b, NAME("ffn_gate_shexp.weight"), c->n_embd, c->n_ff_shexp, false, &l->ffn_gate_shexp)) ||
         (s = bind(b, NAME("ffn_up_shexp.weight"), c->n_embd, c->n_ff_shexp, false, &l->ffn_up_shexp)) ||
         (s = bind(b, NAME("ffn_down_shexp.weight"), c->n_ff_shexp, c->n_embd, false, &l->ffn_down_shexp))))
        return s;
    if (model_arch_info(c->arch)->moe_bias &&
        ((s = bind_f32(b, NAME("ffn_gate_inp.bias"), c->n_expert, 1, &l->ffn_gate_inp_b)) ||
         (s = bind_f32(b, NAME("ffn_gate_exps.bias"), c->n_ff_exp, c->n_expert, &l->ffn_gate_exps_b)) ||
         (s = bind_f32(b, NAME("ffn_up_exps.bias"), c->n_ff_exp, c->n_expert, &l->ffn_up_exps_b)) ||
         (s = bind_f32(b, NAME("ffn_down_exps.bias"), c->n_embd, c->n_expert, &l->ffn_down_exps_b))))
        return s;
#undef NAME
    return CI_OK;
}

/* A BERT layer (llama.cpp's bert tensors; the biases are optional there, the LayerNorms required). */
static enum ci_status bind_bert_layer(struct binder *b, int il, struct layer_weights *l) {
    const struct model_config *c = b->c;
    int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_kv_head * c->head_dim;
    struct {
        const char *suffix;
        int64_t ne0, ne1;
        bool optional;
        struct ci_tensor *out;
    } want[] = {
        {"attn_q.weight", c->n_embd, q_dim, false, &l->wq},
        {"attn_k.weight", c->n_embd, kv_dim, false, &l->wk},
        {"attn_v.weight", c->n_embd, kv_dim, false, &l->wv},
        {"attn_q.bias", q_dim, 1, true, &l->bq},
        {"attn_k.bias", kv_dim, 1, true, &l->bk},
        {"attn_v.bias", kv_dim, 1, true, &l->bv},
        {"attn_output.weight", q_dim, c->n_embd, false, &l->wo},
        {"attn_output.bias", c->n_embd, 1, true, &l->bo},
        {"attn_output_norm.weight", c->n_embd, 1, false, &l->attn_out_norm},
        {"attn_output_norm.bias", c->n_embd, 1, false, &l->attn_out_norm_b},
        {"ffn_up.weight", c->n_embd, c->n_ff, false, &l->w_up},
        {"ffn_up.bias", c->n_ff, 1, true, &l->b_up},
        {"ffn_down.weight", c->n_ff, c->n_embd, false, &l->w_down},
        {"ffn_down.bias", c->n_embd, 1, true, &l->b_down},
        {"layer_output_norm.weight", c->n_embd, 1, false, &l->layer_out_norm},
        {"layer_output_norm.bias", c->n_embd, 1, false, &l->layer_out_norm_b},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, want[i].suffix);
        enum ci_status s = bind(b, name, want[i].ne0, want[i].ne1, want[i].optional, want[i].out);
        if (s != CI_OK)
            return s;
    }
    return CI_OK;
}

/* BERT's embeddings: token, absolute position (one row per trained position), token types (optional; any
 * number of rows), and their LayerNorm. */
static enum ci_status bind_bert_globals(struct binder *b, struct model_weights *w) {
    const struct model_config *c = b->c;
    enum ci_status s;
    const struct ci_tensor *types = b->lookup(b->src, "token_types.weight");
    int64_t n_types = types && types->n_dims == 2 ? types->ne[1] : 1;
    if ((s = bind(b, "token_embd.weight", c->n_embd, c->n_vocab, false, &w->tok_embd)) ||
        (s = bind(b, "position_embd.weight", c->n_embd, c->n_ctx_train, false, &w->pos_embd)) ||
        (s = bind(b, "token_types.weight", c->n_embd, n_types, true, &w->type_embd)) ||
        (s = bind(b, "token_embd_norm.weight", c->n_embd, 1, false, &w->tok_norm)) ||
        (s = bind(b, "token_embd_norm.bias", c->n_embd, 1, false, &w->tok_norm_b)))
        return s;
    return CI_OK;
}

static enum ci_status bind_layer(struct binder *b, int il, struct layer_weights *l) {
    const struct model_config *c = b->c;
    int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_kv_head * c->head_dim;
    // llama.cpp's llama graph takes Q/K/V biases when present; qwen2 requires them.
    bool biases = c->qkv_bias;
    const struct model_arch_info *ai = model_arch_info(c->arch);
    struct {
        const char *suffix;
        int64_t ne0, ne1;
        bool optional;
        struct ci_tensor *out;
    } want[] = {
        {"attn_norm.weight", c->n_embd, 1, false, &l->attn_norm},
        {"attn_qkv.weight", c->n_embd, q_dim + 2 * kv_dim, false, &l->wqkv},
        {"attn_q.weight", c->n_embd, q_dim, false, &l->wq},
        {"attn_k.weight", c->n_embd, kv_dim, false, &l->wk},
        {"attn_v.weight", c->n_embd, kv_dim, false, &l->wv},
        {"attn_q.bias", q_dim, 1, !biases, &l->bq},
        {"attn_k.bias", kv_dim, 1, !biases, &l->bk},
        {"attn_v.bias", kv_dim, 1, !biases, &l->bv},
        {"attn_q_norm.weight", c->head_dim, 1, !c->qk_norm, &l->q_norm},
        {"attn_k_norm.weight", c->head_dim, 1, !c->qk_norm, &l->k_norm},
        {"attn_output.weight", q_dim, c->n_embd, false, &l->wo},
        {ai->ffn_norm_post_attn ? "post_attention_norm.weight" : "ffn_norm.weight", c->n_embd, 1, false,
         &l->ffn_norm},
        {"attn_output.bias", c->n_embd, 1, !ai->attn_out_bias, &l->bo},
        {"attn_sinks.weight", c->n_head, 1, !ai->attn_sinks, &l->sinks},
        {"ffn_gate.weight", c->n_embd, c->n_ff, false, &l->w_gate},
        {"ffn_up.weight", c->n_embd, c->ffn_fused ? 2 * (int64_t)c->n_ff : c->n_ff, false, &l->w_up},
        {"ffn_down.weight", c->n_ff, c->n_embd, false, &l->w_down},
        {"post_attention_norm.weight", c->n_embd, 1, false, &l->post_attn_norm},
        {"post_ffw_norm.weight", c->n_embd, 1, false, &l->post_ffw_norm},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, want[i].suffix);
        // Q/K norms and post norms exist only where the arch has them: elsewhere one is an unknown tensor.
        // With experts the dense FFN is absent.
        bool dense_ffn = want[i].out == &l->w_gate || want[i].out == &l->w_up || want[i].out == &l->w_down;
        bool skip =
            ((want[i].out == &l->q_norm || want[i].out == &l->k_norm) && !c->qk_norm) ||
            ((want[i].out == &l->post_attn_norm || want[i].out == &l->post_ffw_norm) && !c->post_norms) ||
            (dense_ffn && c->n_expert > 0);
        // Fused Q/K/V (the file's choice, from layer 0) or separate; a fused FFN has no gate tensor.
        bool sep_qkv = want[i].out == &l->wq || want[i].out == &l->wk || want[i].out == &l->wv;
        skip |= want[i].out == &l->wqkv ? !c->qkv_fused : sep_qkv && c->qkv_fused;
        skip |= want[i].out == &l->w_gate && c->ffn_fused;
        skip |=
            (want[i].out == &l->bo && !ai->attn_out_bias) || (want[i].out == &l->sinks && !ai->attn_sinks);
        enum ci_status s =
            skip ? CI_OK : bind(b, name, want[i].ne0, want[i].ne1, want[i].optional, want[i].out);
        if (s != CI_OK)
            return s;
    }
    return c->n_expert > 0 ? bind_moe(b, il, l) : CI_OK;
}

enum ci_status model_weights_bind(struct model_weights *w, const struct model_config *c,
                                  weights_lookup_fn lookup, const void *src, struct ci_err *err) {
    memset(w, 0, sizeof *w);
    struct binder b = {c, lookup, src, err};
    enum ci_status s;
    if (c->encoder) {
        if ((s = bind_bert_globals(&b, w)))
            return s;
        w->layers = ci_calloc((size_t)c->n_layer, sizeof *w->layers);
        if (!w->layers)
            return ci_err_set(err, CI_ERR_NOMEM, "out of memory binding %d layers", c->n_layer);
        for (int il = 0; il < c->n_layer; il++) {
            if ((s = bind_bert_layer(&b, il, &w->layers[il])) != CI_OK) {
                model_weights_deinit(w);
                return s;
            }
        }
        return CI_OK;
    }
    if ((s = bind(&b, "token_embd.weight", c->n_embd, c->n_vocab, false, &w->tok_embd)) ||
        (s = bind(&b, "output_norm.weight", c->n_embd, 1, false, &w->output_norm)) ||
        (!model_arch_info(c->arch)->tied_required && // gemma2: an output.weight is an unknown tensor
         (s = bind(&b, "output.weight", c->n_embd, c->n_vocab, true, &w->output))))
        return s;
    if (!w->output.data) {
        if (!model_arch_info(c->arch)->tied_allowed)
            return ci_err_set(err, CI_ERR_FORMAT, "tensor 'output.weight' missing");
        w->output = w->tok_embd; // tied head
    }
    // llama3 RoPE scaling: per-pair frequency divisors.  Applied whenever present, as llama.cpp does.
    if (model_arch_info(c->arch)->rope_freqs &&
        (s = bind(&b, "rope_freqs.weight", c->rope_dim / 2, 1, true, &w->rope_freqs)))
        return s;
    if (c->rope_scaling == ROPE_SCALING_LLAMA3 && !w->rope_freqs.data)
        return ci_err_set(err, CI_ERR_FORMAT, "rope scaling type llama3 needs tensor 'rope_freqs.weight'");
    // Phi-3 LongRoPE: both factor tensors or neither (llama.cpp picks one by the context size).
    if (model_arch_info(c->arch)->longrope &&
        ((s = bind(&b, "rope_factors_long.weight", c->rope_dim / 2, 1, true, &w->rope_long)) ||
         (s = bind(&b, "rope_factors_short.weight", c->rope_dim / 2, 1, true, &w->rope_short))))
        return s;
    if (!w->rope_long.data != !w->rope_short.data)
        return ci_err_set(err, CI_ERR_FORMAT, "tensor 'rope_factors_%s.weight' missing: LongRoPE needs both",
                          w->rope_long.data ? "short" : "long");
    if (c->rope_scaling == ROPE_SCALING_LONGROPE && !w->rope_long.data)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "rope scaling type longrope needs tensors 'rope_factors_long.weight' and "
                          "'rope_factors_short.weight'");
    if (w->rope_long.data && (w->rope_freqs.data || c->rope_scaling != ROPE_SCALING_LONGROPE))
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "LongRoPE factor tensors with rope scaling type %s: refusing the combination",
                          rope_scaling_name(c->rope_scaling));
    const struct ci_tensor *factors[] = {&w->rope_freqs, &w->rope_long, &w->rope_short};
    for (size_t k = 0; k < sizeof factors / sizeof *factors; k++) {
        const float *ff = factors[k]->data;
        for (int i = 0; ff && i < c->rope_dim / 2; i++)
            if (!(ff[i] > 0.0f) || !isfinite(ff[i]))
                return ci_err_set(err, CI_ERR_FORMAT, "tensor '%s': factor %d is %g, not positive",
                                  factors[k]->name, i, (double)ff[i]);
    }
    w->layers = ci_calloc((size_t)c->n_layer, sizeof *w->layers);
    if (!w->layers)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory binding %d layers", c->n_layer);
    for (int il = 0; il < c->n_layer; il++) {
        if ((s = bind_layer(&b, il, &w->layers[il])) != CI_OK) {
            model_weights_deinit(w);
            return s;
        }
    }
    return CI_OK;
}

void model_weights_deinit(struct model_weights *w) {
    ci_free(w->layers);
    w->layers = NULL;
}

_Static_assert(sizeof(struct layer_weights) % sizeof(struct ci_tensor) == 0,
               "struct layer_weights must hold only struct ci_tensor members");

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Tensors that may be present and are deliberately not read.  None yet: llama.cpp's loader also refuses a
 * file with a tensor it does not create ("wrong number of tensors"). */
static const char *const known_unused[] = {NULL};

enum ci_status model_weights_check_all_used(const struct model_weights *w, const struct model_config *c,
                                            weights_tensor_at_fn tensor_at, const void *src, int64_t n,
                                            struct ci_err *err) {
    size_t per_layer = sizeof(struct layer_weights) / sizeof(struct ci_tensor);
    size_t cap = 10 + per_layer * (size_t)c->n_layer, n_bound = 0;
    const char **bound = ci_calloc(cap, sizeof *bound);
    if (!bound)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory checking %lld tensors", (long long)n);
    const struct ci_tensor *globals[] = {&w->tok_embd,  &w->output_norm, &w->output,   &w->rope_freqs,
                                         &w->rope_long, &w->rope_short,  &w->pos_embd, &w->type_embd,
                                         &w->tok_norm,  &w->tok_norm_b};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        if (globals[i]->data && globals[i]->name)
            bound[n_bound++] = globals[i]->name;
    for (int il = 0; il < c->n_layer; il++) {
        const struct ci_tensor *t = (const struct ci_tensor *)&w->layers[il];
        for (size_t i = 0; i < per_layer; i++)
            if (t[i].data && t[i].name)
                bound[n_bound++] = t[i].name;
    }
    qsort(bound, n_bound, sizeof *bound, cmp_name);
    enum ci_status s = CI_OK;
    for (int64_t i = 0; i < n; i++) {
        const char *name = tensor_at(src, i)->name;
        if (bsearch(&name, bound, n_bound, sizeof *bound, cmp_name))
            continue;
        bool unused = false;
        for (const char *const *k = known_unused; *k && !unused; k++)
            unused = strcmp(*k, name) == 0;
        if (!unused) {
            s = ci_err_set(
                err, CI_ERR_UNSUPPORTED,
                "tensor '%s' is not used by architecture %s: refusing a model cinfer would compute "
                "without it",
                name, model_arch_name(c->arch));
            break;
        }
    }
    ci_free(bound);
    return s;
}
