#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/gguf.h"
#include "format/llama2c.h"

const char *model_arch_name(enum model_arch a) {
    return a == MODEL_ARCH_QWEN2 ? "qwen2" : "llama";
}

// Upper bounds far beyond any real model: they only stop absurd values from driving huge allocations.
#define MAX_DIM    (1 << 17)
#define MAX_LAYERS 1024
#define MAX_HEADS  1024
#define MAX_VOCAB  (1 << 22)
#define MAX_CTX    (1 << 24)

static enum ci_status get_dim(const struct gguf *g, const char *arch, const char *suffix, int64_t max,
                              int *out, bool optional, struct ci_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v = -1;
    enum ci_status s = optional ? gguf_get_int_opt(g, key, &v, err) : gguf_get_int(g, key, &v, err);
    if (s != CI_OK)
        return s;
    if (optional && v == -1)
        return CI_OK;
    if (v <= 0 || v > max)
        return ci_err_set(err, CI_ERR_FORMAT, "key '%s': value %lld out of range [1, %lld]", key,
                          (long long)v, (long long)max);
    *out = (int)v;
    return CI_OK;
}

enum ci_status model_config_from_gguf(struct model_config *c, const struct gguf *g, struct ci_err *err) {
    memset(c, 0, sizeof *c);
    struct gguf_str arch;
    enum ci_status s = gguf_get_str(g, "general.architecture", &arch, err);
    if (s != CI_OK)
        return s;
    char name[32];
    if (arch.len >= sizeof name)
        return ci_err_set(err, CI_ERR_UNSUPPORTED, "unknown architecture (name too long)");
    memcpy(name, arch.data, arch.len);
    name[arch.len] = '\0';
    if (!strcmp(name, "llama"))
        c->arch = MODEL_ARCH_LLAMA;
    else if (!strcmp(name, "qwen2"))
        c->arch = MODEL_ARCH_QWEN2;
    else
        return ci_err_set(err, CI_ERR_UNSUPPORTED, "unknown architecture '%s' (supported: llama, qwen2)",
                          name);

    if ((s = get_dim(g, name, "embedding_length", MAX_DIM, &c->n_embd, false, err)) ||
        (s = get_dim(g, name, "block_count", MAX_LAYERS, &c->n_layer, false, err)) ||
        (s = get_dim(g, name, "feed_forward_length", MAX_DIM * 8, &c->n_ff, false, err)) ||
        (s = get_dim(g, name, "attention.head_count", MAX_HEADS, &c->n_head, false, err)) ||
        (s = get_dim(g, name, "context_length", MAX_CTX, &c->n_ctx_train, false, err)))
        return s;
    c->n_kv_head = c->n_head;
    if ((s = get_dim(g, name, "attention.head_count_kv", MAX_HEADS, &c->n_kv_head, true, err)))
        return s;
    c->head_dim = c->n_embd / c->n_head;
    c->rope_dim = c->head_dim;
    if ((s = get_dim(g, name, "rope.dimension_count", MAX_DIM, &c->rope_dim, true, err)))
        return s;

    char key[128];
    c->rope_base = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", name);
    if ((s = gguf_get_f32_opt(g, key, &c->rope_base, err)))
        return s;
    c->rms_eps = 1e-5f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", name);
    if ((s = gguf_get_f32_opt(g, key, &c->rms_eps, err)))
        return s;
    c->rope_neox = c->arch == MODEL_ARCH_QWEN2;

    int64_t i = gguf_find_tensor(g, "token_embd.weight");
    if (i < 0)
        return ci_err_set(err, CI_ERR_FORMAT, "tensor 'token_embd.weight' missing");
    const struct ci_tensor *emb = gguf_tensor(g, i);
    if (emb->n_dims != 2 || emb->ne[1] > MAX_VOCAB)
        return ci_err_set(err, CI_ERR_FORMAT, "tensor 'token_embd.weight': unexpected shape");
    c->n_vocab = (int)emb->ne[1];
    return model_config_validate(c, err);
}

enum ci_status model_config_validate(const struct model_config *c, struct ci_err *err) {
    if (c->n_vocab <= 0 || c->n_embd <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_kv_head <= 0 ||
        c->n_ff <= 0 || c->n_ctx_train <= 0)
        return ci_err_set(err, CI_ERR_FORMAT, "model hyper-parameters must be positive");
    if (c->n_embd % c->n_head != 0)
        return ci_err_set(err, CI_ERR_FORMAT, "embedding length %d is not a multiple of head count %d",
                          c->n_embd, c->n_head);
    if (c->n_head % c->n_kv_head != 0)
        return ci_err_set(err, CI_ERR_FORMAT, "head count %d is not a multiple of KV head count %d",
                          c->n_head, c->n_kv_head);
    if (c->head_dim > 256)
        return ci_err_set(err, CI_ERR_UNSUPPORTED, "head dimension %d above the supported 256", c->head_dim);
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2 != 0)
        return ci_err_set(err, CI_ERR_FORMAT, "rope dimension %d must be even and at most head dim %d",
                          c->rope_dim, c->head_dim);
    if (!(c->rope_base > 0.0f) || !isfinite(c->rope_base))
        return ci_err_set(err, CI_ERR_FORMAT, "rope base %g must be positive", (double)c->rope_base);
    if (!(c->rms_eps >= 0.0f) || !(c->rms_eps < 1.0f))
        return ci_err_set(err, CI_ERR_FORMAT, "rms epsilon %g out of range [0, 1)", (double)c->rms_eps);
    return CI_OK;
}

void model_config_from_llama2c(struct model_config *c, const struct llama2c *l) {
    const struct llama2c_hparams *hp = llama2c_hparams(l);
    memset(c, 0, sizeof *c);
    c->arch = MODEL_ARCH_LLAMA;
    c->n_vocab = hp->vocab;
    c->n_embd = hp->dim;
    c->n_layer = hp->n_layers;
    c->n_head = hp->n_heads;
    c->n_kv_head = hp->n_kv_heads;
    c->head_dim = hp->dim / hp->n_heads;
    c->n_ff = hp->hidden;
    c->n_ctx_train = hp->seq_len;
    c->rope_dim = c->head_dim;
    c->rope_base = 10000.0f;
    c->rms_eps = 1e-5f;
    c->rope_neox = false;
}
