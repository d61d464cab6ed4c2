/* The model half of include/cinfer.h: loading a model file and its tokenizer, what it is, tokens and text,
 * the logits of a token sequence, and writing model files (convert, synth).  See api_model.h. */
#include "engine/api_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "engine/dist.h"
#include "engine/kv_pool.h"
#include "format/gguf.h"
#include "core/threadpool.h"
#include "model/convert.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/quant_rules.h"
#include "model/quantize_model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

enum cinfer_status api_fail(struct cinfer_error *out, const struct ci_err *e) {
    if (out) {
        out->code = (enum cinfer_status)e->code;
        memcpy(out->message, e->msg, sizeof out->message);
    }
    return (enum cinfer_status)e->code;
}

static char *dup_n(const char *s, size_t n) {
    char *d = ci_malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* The name and chat template, copied out of the GGUF metadata. */
static enum ci_status model_strings(struct cinfer_model *m, const char *path, struct ci_err *e) {
    struct gguf_str str = {0};
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (m->model && m->model->gguf && gguf_get_str_opt(m->model->gguf, "general.name", &str, NULL) == CI_OK &&
        str.len)
        m->name = dup_n(str.data, str.len);
    else
        m->name = dup_n(base, strlen(base));
    str.len = 0;
    if (m->model && m->model->gguf &&
        gguf_get_str_opt(m->model->gguf, "tokenizer.chat_template", &str, NULL) == CI_OK && str.len) {
        m->chat_template = dup_n(str.data, str.len);
        m->chat_template_len = str.len;
        if (!m->chat_template)
            return ci_err_set(e, CI_ERR_NOMEM, "out of memory");
    }
    return m->name ? CI_OK : ci_err_set(e, CI_ERR_NOMEM, "out of memory");
}

/* Only the tokenizer of path: from tok_path (tokenizer.bin) when given, else the GGUF's own metadata (the
 * file may be a vocab-only GGUF). */
static enum ci_status load_vocab_only(struct cinfer_model *m, const char *path, const char *tok_path,
                                      struct ci_err *e) {
    if (tok_path)
        return tokenizer_from_llama2c(tok_path, 0, &m->tok, e);
    struct gguf *g = NULL;
    enum ci_status s = gguf_open(path, &g, e);
    if (s == CI_OK)
        s = tokenizer_from_gguf(g, &m->tok, e);
    struct gguf_str str = {0}; // the chat template too (a vocab-only file may carry it: cinfer template -m)
    if (s == CI_OK && gguf_get_str_opt(g, "tokenizer.chat_template", &str, NULL) == CI_OK && str.len) {
        m->chat_template = dup_n(str.data, str.len);
        m->chat_template_len = str.len;
        if (!m->chat_template)
            s = ci_err_set(e, CI_ERR_NOMEM, "out of memory");
    }
    gguf_free(g);
    return s;
}

enum cinfer_status cinfer_model_load_with(const char *path, const struct cinfer_load_options *o,
                                          struct cinfer_model **out, struct cinfer_error *err) {
    struct ci_err e = {0};
    *out = NULL;
    struct cinfer_model *m = ci_calloc(1, sizeof *m);
    if (!m) {
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &e);
    }
    const char *tok_path = o ? o->tokenizer_path : NULL;
    enum ci_status s;
    if (o && ((int)o->pack < CINFER_PACK_LAZY || (int)o->pack > CINFER_PACK_OFF)) {
        ci_err_set(&e, CI_ERR_INVALID, "load options: pack mode %d is none of lazy (0), eager (1), off (2)",
                   (int)o->pack);
        ci_free(m);
        return api_fail(err, &e);
    }
    if (o && o->vocab_only) {
        s = load_vocab_only(m, path, tok_path, &e);
    } else if ((s = model_load_ex(path, !(o && o->tp), &m->model, &e)) == CI_OK) { // a rank: its shard only
        if (tok_path)
            s = tokenizer_from_llama2c(tok_path, 0, &m->tok,
                                       &e); // size checked below, with a clearer message
        else if (m->model->gguf && gguf_find_key(m->model->gguf, "tokenizer.ggml.model") >= 0)
            s = tokenizer_from_gguf(m->model->gguf, &m->tok, &e);
        else if (!(o && o->tokenizer_optional))
            s = ci_err_set(&e, CI_ERR_INVALID, "%s: %s", path,
                           m->model->gguf ? "the GGUF file holds no tokenizer"
                                          : "a llama2.c checkpoint needs its tokenizer.bin");
    }
    if (s == CI_OK && m->model) {
        static const enum model_pack_mode modes[] = {[CINFER_PACK_LAZY] = MODEL_PACK_LAZY,
                                                     [CINFER_PACK_EAGER] = MODEL_PACK_EAGER,
                                                     [CINFER_PACK_OFF] = MODEL_PACK_OFF};
        m->model->pack.mode = modes[o ? o->pack : CINFER_PACK_LAZY];
    }
    if (s == CI_OK && m->tok && m->model && tokenizer_n_vocab(m->tok) != m->model->config.n_vocab)
        s = ci_err_set(&e, CI_ERR_FORMAT, "tokenizer has %d tokens but the model's vocabulary is %d",
                       tokenizer_n_vocab(m->tok), m->model->config.n_vocab);
    if (s == CI_OK && m->tok)
        m->eog = tokenizer_eog_ids(m->tok, &m->n_eog);
    if (s == CI_OK)
        s = model_strings(m, path, &e);
    if (o && o->tp) { // every rank, loaded or not, takes part in the agreement (or the others would wait)
        struct ci_err ae = {0};
        if (dist_agree(o->tp->d, s == CI_OK ? m->model : NULL, &e, o->tp_options, &ae) != CI_OK) {
            e = ae;
            s = ae.code;
        }
        m->dist = o->tp->d;
    }
    if (s != CI_OK) {
        cinfer_model_free(m);
        return api_fail(err, &e);
    }
    *out = m;
    return CINFER_OK;
}

enum cinfer_status cinfer_model_load(const char *path, const char *tokenizer_path, struct cinfer_model **out,
                                     struct cinfer_error *err) {
    struct cinfer_load_options o = {tokenizer_path, false, false, NULL, 0, CINFER_PACK_LAZY};
    return cinfer_model_load_with(path, &o, out, err);
}

void cinfer_model_free(struct cinfer_model *m) {
    if (!m)
        return;
    tokenizer_free(m->tok);
    model_free(m->model);
    ci_free(m->name);
    ci_free(m->chat_template);
    ci_free(m);
}

static void count_type(const struct ci_tensor *t, int *per_type) {
    if (t->data && t->type < CI_TYPE_COUNT)
        per_type[t->type]++;
}

/* Tensors of each type among the weights the model uses (a tied head counted once). */
static void tensor_types(const struct model *m, struct cinfer_model_info *out) {
    int per_type[CI_TYPE_COUNT] = {0};
    const struct model_weights *w = &m->weights;
    count_type(&w->tok_embd, per_type);
    count_type(&w->output_norm, per_type);
    count_type(&w->rope_freqs, per_type);
    count_type(&w->rope_long, per_type);
    count_type(&w->rope_short, per_type);
    if (w->output.data != w->tok_embd.data)
        count_type(&w->output, per_type);
    for (int il = 0; il < m->config.n_layer; il++) {
        const struct layer_weights *l = &w->layers[il];
        const struct ci_tensor *all[] = {&l->attn_norm, &l->wq,     &l->wk,     &l->wv,     &l->bq,
                                         &l->bk,        &l->bv,     &l->q_norm, &l->k_norm, &l->wo,
                                         &l->ffn_norm,  &l->w_gate, &l->w_up,   &l->w_down, &l->wqkv};
        for (size_t i = 0; i < CI_ARRAY_LEN(all); i++)
            count_type(all[i], per_type);
    }
    out->n_tensor_types = 0;
    for (int t = 0; t < CI_TYPE_COUNT && out->n_tensor_types < CINFER_MAX_TENSOR_TYPES; t++)
        if (per_type[t]) {
            const struct ci_type_traits *tt = ci_type_traits((uint32_t)t);
            out->tensor_types[out->n_tensor_types].type = ci_type_name((uint32_t)t);
            out->tensor_types[out->n_tensor_types].bits_per_weight = 8.0 * tt->type_size / tt->block_size;
            out->tensor_types[out->n_tensor_types++].count = per_type[t];
        }
}

bool cinfer_pooling_known(const char *name) {
    return name && (strcmp(name, "mean") == 0 || strcmp(name, "cls") == 0 || strcmp(name, "last") == 0);
}

const char *cinfer_model_embedding_pooling(const struct cinfer_model *m, const char **why) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"}; // llama_pooling_type
    *why = NULL;
    const struct gguf *g = m->model ? m->model->gguf : NULL;
    if (!g)
        return "last";
    char key[96];
    snprintf(key, sizeof key, "%s.pooling_type", model_arch_name(m->model->config.arch));
    int64_t v = -1;
    struct ci_err e = {0};
    if (gguf_get_int_opt(g, key, &v, &e) != CI_OK || v < -1 || v > 4) {
        *why = "the model's pooling_type is not one of none, mean, cls, last, rank";
        return NULL;
    }
    if (v == 4) {
        *why = "the model's pooling_type is rank (a classification head), which cinfer does not implement";
        return NULL;
    }
    // No pooling_type: a decoder's last token sees the whole input; an encoder's [CLS] is made for it (BERT).
    return v <= 0 ? (m->model->config.encoder ? "cls" : "last") : names[v];
}

void cinfer_model_info(const struct cinfer_model *m, struct cinfer_model_info *out) {
    memset(out, 0, sizeof *out);
    out->bos = out->eos = -1;
    if (m->tok) {
        out->tokenizer_type = tokenizer_type_name(m->tok);
        out->tokenizer_pre = tokenizer_pre(m->tok);
        out->bos = tokenizer_bos(m->tok);
        out->eos = tokenizer_eos(m->tok);
        out->n_vocab = tokenizer_n_vocab(m->tok);
    }
    if (!m->model)
        return;
    const struct model *md = m->model;
    const struct model_config *c = &md->config;
    out->has_weights = true;
    out->arch = model_arch_name(c->arch);
    out->format = md->format == MODEL_FORMAT_GGUF ? "GGUF" : "llama2.c";
    out->n_vocab = c->n_vocab;
    out->n_embd = c->n_embd;
    out->n_layer = model_n_layer_all(c); // a pipeline stage's rank: still the whole model's
    out->n_head = c->n_head;
    out->n_kv_head = c->n_kv_head;
    out->head_dim = c->head_dim;
    out->n_ff = c->n_ff;
    out->n_ctx_train = c->n_ctx_train;
    out->rope_dim = c->rope_dim;
    out->rope_base = c->rope_base;
    out->rope_neox = c->rope_neox;
    out->rope_scaling = rope_scaling_name(c->rope_scaling);
    out->rope_linear_factor = 1.0f / c->rope_pos_scale;
    out->rope_freqs = md->weights.rope_freqs.data != NULL;
    out->rope_orig_ctx = c->rope_orig_ctx;
    struct ci_rope_params rp;
    model_config_rope_params(c, &rp);
    out->rope_mscale = rp.mscale;
    out->yarn_beta_fast = c->yarn_beta_fast;
    out->yarn_beta_slow = c->yarn_beta_slow;
    out->rope_longrope = md->weights.rope_long.data != NULL;
    out->qkv_fused = c->qkv_fused;
    out->ffn_fused = c->ffn_fused;
    out->qk_norm = c->qk_norm;
    out->sliding_window = c->sliding_window;
    for (int il = 0; il < model_n_layer_all(c); il++)
        out->n_swa_layers += model_layer_swa(c, il);
    out->rope_base_swa = c->rope_base_swa > 0.0f ? c->rope_base_swa : c->rope_base;
    out->attn_softcap = c->attn_softcap;
    out->final_softcap = c->final_softcap;
    out->post_norms = c->post_norms;
    out->gelu_ffn = c->gelu_ffn;
    out->embd_scale = c->embd_scale ? sqrtf((float)c->n_embd) : 1.0f;
    out->n_expert = c->n_expert;
    out->n_expert_used = c->n_expert_used;
    out->n_ff_exp = c->n_ff_exp;
    out->n_ff_shexp = c->n_ff_shexp;
    out->expert_weights_norm = c->n_expert > 0 && c->moe_norm_w;
    out->expert_softmax_topk = c->n_expert > 0 && c->moe_softmax_weight;
    out->attn_sinks = md->weights.layers && md->weights.layers[0].sinks.data;
    out->rms_eps = c->rms_eps;
    out->tied_output = md->weights.output.data == md->weights.tok_embd.data;
    out->encoder = c->encoder;
    out->n_params = model_n_params(md);
    out->weight_bytes = model_weight_bytes(md);
    out->file_bytes = md->file_bytes;
    out->kv_bytes_per_token =
        (uint64_t)kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, CI_TYPE_F32);
    if (md->gguf) {
        out->gguf_version = gguf_version(md->gguf);
        out->gguf_n_tensors = (long long)gguf_n_tensors(md->gguf);
        out->gguf_n_metadata = (long long)gguf_n_kv(md->gguf);
    }
    tensor_types(md, out);
}

uint64_t cinfer_kv_bytes_per_token(const struct cinfer_model *m, const char *kv_type) {
    uint32_t t;
    if (!m->model || !kv_type || !kv_type_parse(kv_type, &t))
        return 0;
    const struct model_config *c = &m->model->config;
    return (uint64_t)kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, t);
}

enum cinfer_status cinfer_tokenize(const struct cinfer_model *m, const char *text, size_t len,
                                   bool add_special, cinfer_token **ids, int *n_ids,
                                   struct cinfer_error *err) {
    return cinfer_tokenize_ex(m, text, len, add_special, true, ids, n_ids, err);
}

enum cinfer_status cinfer_tokenize_ex(const struct cinfer_model *m, const char *text, size_t len,
                                      bool add_special, bool parse_special, cinfer_token **ids, int *n_ids,
                                      struct cinfer_error *err) {
    struct ci_err e = {0};
    if (!m->tok)
        ci_err_set(&e, CI_ERR_INVALID, "the model was loaded without a tokenizer");
    else if (tokenizer_encode(m->tok, text, len, add_special, parse_special, ids, n_ids, &e) == CI_OK)
        return CINFER_OK;
    return api_fail(err, &e);
}

void cinfer_free(void *p) {
    ci_free(p);
}

enum cinfer_status cinfer_detokenize(const struct cinfer_model *m, const cinfer_token *ids, int n_ids,
                                     bool render_special, char **text, size_t *len,
                                     struct cinfer_error *err) {
    struct ci_err e = {0};
    if (!m->tok) {
        ci_err_set(&e, CI_ERR_INVALID, "the model was loaded without a tokenizer");
        return api_fail(err, &e);
    }
    if (tokenizer_decode(m->tok, ids, n_ids, render_special, text, len, &e) != CI_OK)
        return api_fail(err, &e);
    return CINFER_OK;
}

const char *cinfer_token_piece(const struct cinfer_model *m, cinfer_token id, size_t *len) {
    if (!m->tok) {
        *len = 0;
        return NULL;
    }
    return tokenizer_piece(m->tok, id, len);
}

const char *cinfer_model_chat_template(const struct cinfer_model *m, size_t *len) {
    if (len)
        *len = m->chat_template_len;
    return m->chat_template;
}

const char *cinfer_model_name(const struct cinfer_model *m) {
    return m->name;
}

bool cinfer_token_is_eog(const struct cinfer_model *m, cinfer_token id) {
    return m->tok && tokenizer_is_eog(m->tok, id);
}

/* ---- logits ---- */

void cinfer_logits_options_default(struct cinfer_logits_options *o) {
    o->n_threads = 2;
    o->kv_block_size = 16;
    o->kv_type = "f32";
}

enum cinfer_status cinfer_logits(const struct cinfer_model *m, const cinfer_token *ids, int n_ids,
                                 const struct cinfer_logits_options *o, float *out,
                                 struct cinfer_error *err) {
    struct ci_err e = {0};
    struct cinfer_logits_options d;
    cinfer_logits_options_default(&d);
    if (!o)
        o = &d;
    uint32_t kv_type;
    if (!m->model) {
        ci_err_set(&e, CI_ERR_INVALID, "the model was loaded without weights");
        return api_fail(err, &e);
    }
    const struct model_config *c = &m->model->config;
    if (n_ids < 1 || o->n_threads < 1 || o->kv_block_size < 1 ||
        !kv_type_parse(o->kv_type ? o->kv_type : "f32", &kv_type)) {
        ci_err_set(&e, CI_ERR_INVALID,
                   "logits: need at least one token, positive threads and block size, and "
                   "a KV type of f32, f16 or q8_0");
        return api_fail(err, &e);
    }
    for (int i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= c->n_vocab) {
            ci_err_set(&e, CI_ERR_INVALID, "token %d: id %d outside the vocabulary [0, %d)", i, ids[i],
                       c->n_vocab);
            return api_fail(err, &e);
        }
    struct ci_threadpool *tp = NULL;
    struct kv_pool *pool = NULL;
    struct forward *fwd = NULL;
    struct kv_seq_blocks table = {0};
    struct ci_kv_layer *layers = ci_calloc((size_t)c->n_layer, sizeof *layers);
    int32_t *pos = ci_calloc((size_t)n_ids, sizeof *pos), *seq = ci_calloc((size_t)n_ids, sizeof *seq);
    uint8_t *want = ci_calloc((size_t)n_ids, 1);
    enum ci_status s = CI_OK;
    int n_blocks = (n_ids + o->kv_block_size - 1) / o->kv_block_size;
    struct kv_pool_params pp = {c->n_layer, c->n_kv_head, c->head_dim, o->kv_block_size, n_blocks, kv_type};
    if (!layers || !pos || !seq || !want)
        s = ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
    else if (!(s = ci_threadpool_create(o->n_threads, &tp, &e)) && !(s = kv_pool_create(&pp, &pool, &e)) &&
             !(s = forward_create(m->model, n_ids, n_ids, tp, &fwd, &e)) &&
             !(s = kv_seq_init(&table, n_blocks, &e)) && (s = kv_seq_reserve(pool, &table, n_ids)) != CI_OK)
        ci_err_set(&e, s, "out of memory");
    bool opened = false; // tensor parallelism: the other ranks mirror this forward pass
    if (s == CI_OK && m->dist &&
        (s = dist_open(m->dist, fwd, pool, &pp, n_ids, n_ids, c->n_ctx_train, &e)) == CI_OK)
        opened = true;
    if (s == CI_OK) {
        for (int il = 0; il < c->n_layer; il++)
            kv_pool_layer(pool, il, &layers[il]);
        for (int i = 0; i < n_ids; i++) {
            pos[i] = i;
            want[i] = 1;
        }
        struct ci_attn_seq aseq = {table.ids, table.n};
        struct fwd_batch b = {.n_tokens = n_ids,
                              .token = ids,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = 1,
                              .seqs = &aseq};
        const float *logits;
        int rows;
        if ((s = forward_batch(fwd, &b, layers, &logits, &rows, &e)) == CI_OK)
            memcpy(out, logits, sizeof(float) * (size_t)c->n_vocab * (size_t)rows);
    }
    if (table.ids)
        kv_seq_release(pool, &table);
    kv_seq_deinit(&table);
    if (opened)
        dist_close(m->dist);
    forward_free(fwd);
    kv_pool_free(pool);
    ci_threadpool_free(tp);
    ci_free(layers);
    ci_free(pos);
    ci_free(seq);
    ci_free(want);
    return s == CI_OK ? CINFER_OK : api_fail(err, &e);
}

/* ---- model files ---- */

/* ---- tensor parallelism ---- */

enum cinfer_status cinfer_tp_init(int tp, int pp, double timeout_s, struct cinfer_tp **out,
                                  struct cinfer_error *err) {
    struct ci_err e = {0};
    *out = NULL;
    struct cinfer_tp *t = ci_calloc(1, sizeof *t);
    if (!t) {
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &e);
    }
    *out = t;
    return dist_create(tp, pp, timeout_s, &t->d, &e) == CI_OK ? CINFER_OK : api_fail(err, &e);
}

int cinfer_tp_rank(const struct cinfer_tp *t) {
    return t && t->d ? dist_rank(t->d) : 0;
}

enum cinfer_status cinfer_tp_worker(struct cinfer_tp *t, const struct cinfer_model *m, int n_threads,
                                    struct cinfer_error *err) {
    struct ci_err e = {0};
    return dist_worker_run(t->d, m->model, n_threads, &e) == CI_OK ? CINFER_OK : api_fail(err, &e);
}

void cinfer_tp_stats(const struct cinfer_tp *t, struct cinfer_tp_stats *out) {
    struct dist_stats ds;
    dist_get_stats(t->d, &ds);
    out->steps = ds.n_steps;
    out->allreduces = ds.n_allreduce;
    out->allreduce_ms = (double)ds.allreduce_ns / 1e6;
    out->allreduce_mib = (double)ds.allreduce_floats * 4.0 / (1 << 20);
    out->bcast_ms = (double)ds.bcast_ns / 1e6;
    out->p2p_ms = (double)ds.p2p_ns / 1e6;
    out->p2p_mib = (double)ds.p2p_floats * 4.0 / (1 << 20);
    out->head_rows = ds.head_rows;
    out->embd_rows = ds.embd_rows;
    out->read_ahead_mib = (double)ds.read_ahead / (1 << 20);
    out->file_mib = (double)ds.file_bytes / (1 << 20);
    out->n_vocab = ds.n_vocab;
    out->head_gathers = ds.n_head;
    out->head_ms = (double)ds.head_ns / 1e6;
}

void cinfer_tp_end(struct cinfer_tp *t, bool ok) {
    if (!t)
        return;
    dist_end(t->d, ok);
    ci_free(t);
}

bool cinfer_weight_type_known(const char *type) {
    uint32_t t;
    return type && synth_type_parse(type, &t);
}

enum cinfer_status cinfer_convert_llama2c(const char *in, const char *tokenizer_path, const char *type,
                                          const char *out, struct cinfer_error *err) {
    struct ci_err e = {0};
    uint32_t t;
    if (synth_type_parse(type ? type : "f32", &t)) {
        if (convert_llama2c(in, tokenizer_path, t, out, &e) == CI_OK)
            return CINFER_OK;
    } else if (convert_llama2c_preset(in, tokenizer_path, type, out, &e) == CI_OK) {
        return CINFER_OK;
    }
    return api_fail(err, &e);
}

enum cinfer_status cinfer_synth(const char *preset, const char *type, uint64_t seed, const char *out,
                                struct cinfer_error *err) {
    return cinfer_synth_scaled(preset, type, seed, 1.0f, out, err);
}

enum cinfer_status cinfer_synth_scaled(const char *preset, const char *type, uint64_t seed,
                                       float residual_scale, const char *out, struct cinfer_error *err) {
    struct ci_err e = {0};
    if (synth_write_scaled(preset, type ? type : "f32", seed, residual_scale, out, &e) == CI_OK)
        return CINFER_OK;
    return api_fail(err, &e);
}

void cinfer_quantize_params_default(struct cinfer_quantize_params *p) {
    *p = (struct cinfer_quantize_params){.n_threads = 1, .pure = false};
}

enum cinfer_status cinfer_quantize(const char *in, const char *out, const char *type,
                                   const struct cinfer_quantize_params *p,
                                   struct cinfer_quantize_result *result, struct cinfer_error *err) {
    struct ci_err e = {0};
    struct cinfer_quantize_params def;
    if (!p) {
        cinfer_quantize_params_default(&def);
        p = &def;
    }
    struct quantize_options o = {.n_threads = p->n_threads, .pure = p->pure};
    struct quantize_report *rep = ci_calloc(1, sizeof *rep);
    if (!rep) {
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &e);
    }
    enum ci_status s = quantize_model(in, out, type ? type : "", &o, rep, &e);
    if (s == CI_OK && result) {
        memset(result, 0, sizeof *result);
        for (uint32_t t = 0; t < CI_TYPE_COUNT && result->n_types < CINFER_MAX_TENSOR_TYPES; t++) {
            if (!rep->types[t].count)
                continue;
            int k = result->n_types++;
            result->types[k].type = ci_type_name(t);
            result->types[k].count = rep->types[t].count;
            result->types[k].n_elements = rep->types[t].n_elements;
            result->types[k].n_bytes = rep->types[t].n_bytes;
            result->types[k].bits_per_weight =
                rep->types[t].n_elements
                    ? 8.0 * (double)rep->types[t].n_bytes / (double)rep->types[t].n_elements
                    : 0.0;
        }
        result->n_tensors = rep->n_tensors;
        result->n_fallback = rep->n_fallback;
        result->file_type = rep->ftype;
        result->in_bytes = rep->in_bytes;
        result->out_bytes = rep->out_bytes;
    }
    ci_free(rep);
    return s == CI_OK ? CINFER_OK : api_fail(err, &e);
}

const char *cinfer_quantize_types(void) {
    return quant_preset_names();
}

bool cinfer_quantize_type_known(const char *type) {
    return type && quant_preset_find(type) != NULL;
}

int cinfer_synth_n_presets(void) {
    return synth_n_presets();
}

void cinfer_synth_preset_info(int i, struct cinfer_synth_preset *out) {
    const struct synth_preset *p = synth_preset(i);
    *out = (struct cinfer_synth_preset){p->name,         model_arch_name(p->arch),
                                        p->n_embd,       p->n_layer,
                                        p->n_head,       p->n_kv_head,
                                        p->n_ff,         p->n_vocab,
                                        p->n_ctx,        p->n_expert,
                                        p->n_expert_used};
}
