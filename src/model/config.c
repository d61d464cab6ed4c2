#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "format/gguf.h"
#include "format/llama2c.h"

/* One row per architecture: adding one that differs from these only in features named here is a row. */
static const struct model_arch_info arch_table[MODEL_ARCH_COUNT] = {
    [MODEL_ARCH_LLAMA] = {.name = "llama",
                          .rope_freqs = true,
                          .tied_allowed = true,
                          .swa = true,
                          .moe = MOE_OPTIONAL,
                          .moe_norm_w = true},
    [MODEL_ARCH_QWEN2] = {.name = "qwen2", .rope_neox = true, .qkv_bias = true, .tied_allowed = true},
    [MODEL_ARCH_QWEN3] = {.name = "qwen3", .rope_neox = true, .qk_norm = true, .tied_allowed = true},
    [MODEL_ARCH_GEMMA2] = {.name = "gemma2",
                           .rope_neox = true,
                           .tied_allowed = true,
                           .tied_required = true,
                           .embd_scale = true,
                           .gelu_ffn = true,
                           .post_norms = true,
                           .swa = true,
                           .swa_period = 2,
                           .swa_default = 4096,
                           .attn_softcap = true,
                           .final_softcap = true,
                           .final_softcap_default = 30.0f,
                           .attn_scale_embd_layers = 46},
    [MODEL_ARCH_GEMMA3] = {.name = "gemma3",
                           .rope_neox = true,
                           .qk_norm = true,
                           .tied_allowed = true,
                           .embd_scale = true,
                           .gelu_ffn = true,
                           .post_norms = true,
                           .swa = true,
                           .swa_period = 6,
                           .rope_base_swa_default = 10000.0f,
                           .swa_rope_unscaled = true,
                           .final_softcap = true,
                           .attn_scale_embd_layers = 62},
    // llama.cpp's qwen2moe: top-k router weights not renormalised; a shared expert with a sigmoid gate.
    [MODEL_ARCH_QWEN2MOE] = {.name = "qwen2moe",
                             .rope_neox = true,
                             .qkv_bias = true,
                             .moe = MOE_REQUIRED,
                             .moe_shared_exp = true},
    [MODEL_ARCH_QWEN3MOE] = {.name = "qwen3moe",
                             .rope_neox = true,
                             .qk_norm = true,
                             .tied_allowed = true,
                             .moe = MOE_REQUIRED,
                             .moe_norm_w = true},
    // OpenAI's gpt-oss: qwen2-style biased attention with sinks and alternating windows (period 2), YaRN from
    // the file, a mixture of biased experts with the clamped SwiGLU; untied head.
    [MODEL_ARCH_GPT_OSS] = {.name = "gpt-oss",
                            .rope_neox = true,
                            .qkv_bias = true,
                            .swa = true,
                            .swa_period = 2,
                            .moe = MOE_REQUIRED,
                            .attn_out_bias = true,
                            .attn_sinks = true,
                            .ffn_norm_post_attn = true,
                            .moe_bias = true,
                            .moe_softmax_weight = true,
                            .swiglu_oai = true},
    [MODEL_ARCH_BERT] = {.name = "bert", .qkv_bias = true, .attn_out_bias = true, .encoder = true},
    [MODEL_ARCH_PHI3] = {.name = "phi3",
                         .rope_neox = true,
                         .tied_allowed = true,
                         .qkv_fused = true,
                         .ffn_fused = true,
                         .longrope = true,
                         .swa_not_applied = true},
};

const struct model_arch_info *model_arch_info(enum model_arch a) {
    CI_ASSERT((unsigned)a < MODEL_ARCH_COUNT);
    return &arch_table[a];
}

const char *model_arch_name(enum model_arch a) {
    return model_arch_info(a)->name;
}

void model_config_set_arch(struct model_config *c, enum model_arch a) {
    const struct model_arch_info *ai = model_arch_info(a);
    c->arch = a;
    c->rope_neox = ai->rope_neox;
    c->qkv_bias = ai->qkv_bias;
    c->qk_norm = ai->qk_norm;
    c->embd_scale = ai->embd_scale;
    c->gelu_ffn = ai->gelu_ffn;
    c->post_norms = ai->post_norms;
    c->sliding_window = ai->swa_default;
    c->swa_period = ai->swa_period;
    c->attn_softcap = ai->attn_softcap ? 50.0f : 0.0f;
    c->final_softcap = ai->final_softcap_default;
    c->moe_norm_w = ai->moe_norm_w;
    c->moe_shared_exp = ai->moe_shared_exp;
    c->ffn_fused = ai->ffn_fused;
    c->moe_softmax_weight = ai->moe_softmax_weight;
    c->swiglu_oai = ai->swiglu_oai;
    c->encoder = ai->encoder;
}

const char *rope_scaling_name(enum rope_scaling s) {
    switch (s) {
    case ROPE_SCALING_NONE:
        return "none";
    case ROPE_SCALING_LINEAR:
        return "linear";
    case ROPE_SCALING_LLAMA3:
        return "llama3";
    case ROPE_SCALING_YARN:
        return "yarn";
    case ROPE_SCALING_LONGROPE:
        return "longrope";
    }
    CI_UNREACHABLE();
}

// Upper bounds far beyond any real model: they only stop absurd values from driving huge allocations.
#define MAX_DIM    (1 << 17)
#define MAX_LAYERS 1024
#define MAX_HEADS  1024
#define MAX_VOCAB  (1 << 22)
#define MAX_CTX    (1 << 24)
#define MAX_EXPERT 512 // llama.cpp's LLAMA_MAX_EXPERTS

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

static enum ci_status get_f32_key(const struct gguf *g, const char *arch, const char *suffix, float *v,
                                  struct ci_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    enum ci_status s = gguf_get_f32_opt(g, key, v, err);
    if (s == CI_OK && !isfinite(*v))
        return ci_err_set(err, CI_ERR_FORMAT, "key '%s': %g is not finite", key, (double)*v);
    return s;
}

/* <arch>.rope.scaling.*.  As in llama.cpp, an absent type with a factor means linear scaling.  "llama3"
 * (cinfer's name; llama.cpp's converter writes only the tensor) requires rope_freqs.weight, "longrope" the
 * rope_factors_{long,short}.weight tensors, which model/weights.c binds and checks.  attn_factor multiplies
 * RoPE's cos and sin under every type (llama.cpp's rope_attn_factor); YaRN multiplies it by
 * 1 + 0.1 ln(factor). */
static enum ci_status read_rope_scaling(struct model_config *c, const struct gguf *g, const char *arch,
                                        struct ci_err *err) {
    char key[128];
    struct gguf_str type = {0};
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    bool has_type = gguf_find_key(g, key) >= 0;
    enum ci_status s = gguf_get_str_opt(g, key, &type, err);
    if (s != CI_OK)
        return s;
    float factor = 0.0f;
    if ((s = get_f32_key(g, arch, "rope.scaling.factor", &factor, err)))
        return s;
    if (factor == 0.0f && (s = get_f32_key(g, arch, "rope.scale_linear", &factor, err))) // the older key
        return s;
    if (factor != 0.0f && !(factor > 0.0f))
        return ci_err_set(err, CI_ERR_FORMAT, "key '%s.rope.scaling.factor': %g must be positive", arch,
                          (double)factor);
    c->rope_scaling = ROPE_SCALING_NONE;
    c->rope_pos_scale = 1.0f;
    if (has_type) {
        static const char *const known[] = {"none", "linear", "llama3", "yarn", "longrope"};
        size_t k = 0, n_known = sizeof known / sizeof *known;
        while (k < n_known && !(type.len == strlen(known[k]) && memcmp(type.data, known[k], type.len) == 0))
            k++;
        if (k == n_known)
            return ci_err_set(err, CI_ERR_UNSUPPORTED,
                              "key '%s.rope.scaling.type': '%.*s' is not supported (supported: none, linear, "
                              "llama3, yarn, longrope)",
                              arch, (int)(type.len > 32 ? 32 : type.len), type.data);
        c->rope_scaling = (enum rope_scaling)k;
    } else if (factor != 0.0f && factor != 1.0f) {
        c->rope_scaling = ROPE_SCALING_LINEAR;
    }
    if ((c->rope_scaling == ROPE_SCALING_LINEAR || c->rope_scaling == ROPE_SCALING_YARN) && factor != 0.0f)
        c->rope_pos_scale = 1.0f / factor;
    else if (c->rope_scaling == ROPE_SCALING_NONE && factor != 0.0f && factor != 1.0f)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "key '%s.rope.scaling.factor' is %g but '%s.rope.scaling.type' is none", arch,
                          (double)factor, arch);
    if (c->rope_scaling == ROPE_SCALING_YARN && factor == 0.0f)
        return ci_err_set(err, CI_ERR_FORMAT, "rope scaling type yarn needs key '%s.rope.scaling.factor'",
                          arch);
    c->rope_attn_factor = 1.0f;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    if ((s = get_f32_key(g, arch, "rope.scaling.attn_factor", &c->rope_attn_factor, err)) ||
        (s = get_f32_key(g, arch, "rope.scaling.yarn_beta_fast", &c->yarn_beta_fast, err)) ||
        (s = get_f32_key(g, arch, "rope.scaling.yarn_beta_slow", &c->yarn_beta_slow, err)))
        return s;
    if (!(c->rope_attn_factor > 0.0f))
        return ci_err_set(err, CI_ERR_FORMAT, "key '%s.rope.scaling.attn_factor': %g must be positive", arch,
                          (double)c->rope_attn_factor);
    if (!(c->yarn_beta_fast > 0.0f) || !(c->yarn_beta_slow > 0.0f) || c->yarn_beta_slow > c->yarn_beta_fast)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "keys '%s.rope.scaling.yarn_beta_fast' (%g) and 'yarn_beta_slow' (%g): need "
                          "0 < beta_slow <= beta_fast",
                          arch, (double)c->yarn_beta_fast, (double)c->yarn_beta_slow);
    // YaRN variants llama.cpp applies only to other architectures (DeepSeek's log multiplier, Grok's
    // explicit ext/attn factors): refused rather than ignored.
    static const char *const yarn_other[] = {"rope.scaling.yarn_log_multiplier",
                                             "rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"};
    for (size_t k = 0; k < sizeof yarn_other / sizeof *yarn_other; k++) {
        snprintf(key, sizeof key, "%s.%s", arch, yarn_other[k]);
        if (gguf_find_key(g, key) >= 0)
            return ci_err_set(err, CI_ERR_UNSUPPORTED, "key '%s' is not supported; refusing the model", key);
    }
    c->rope_orig_ctx = 0; // n_ctx_train, once it is known
    int64_t orig = -1;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((s = gguf_get_int_opt(g, key, &orig, err)))
        return s;
    if (orig != -1) {
        if (orig <= 0 || orig > MAX_CTX)
            return ci_err_set(err, CI_ERR_FORMAT, "key '%s': value %lld out of range [1, %d]", key,
                              (long long)orig, MAX_CTX);
        c->rope_orig_ctx = (int)orig;
    }
    return CI_OK;
}

/* Sliding window (attention.sliding_window, .sliding_window_pattern, rope.freq_base_swa) and logit
 * soft-capping (attn_logit_softcapping, final_logit_softcapping), as llama.cpp's loaders read them for the
 * architectures whose table row has the feature.  A window of 0 is off (llama, gemma3) or refused where the
 * architecture always has one (gemma2); a window above the training context is refused. */
static enum ci_status read_window_softcap(struct model_config *c, const struct gguf *g, const char *arch,
                                          struct ci_err *err) {
    const struct model_arch_info *ai = model_arch_info(c->arch);
    char key[128];
    enum ci_status s;
    if (ai->swa) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        int64_t w = -1;
        if ((s = gguf_get_int_opt(g, key, &w, err)))
            return s;
        if (gguf_find_key(g, key) >= 0) {
            if (w < 0 || w > c->n_ctx_train)
                return ci_err_set(err, CI_ERR_FORMAT,
                                  "key '%s': %lld is not a sliding window within the context length %d", key,
                                  (long long)w, c->n_ctx_train);
            if (w == 0 && ai->swa_default > 0)
                return ci_err_set(err, CI_ERR_FORMAT,
                                  "key '%s': 0 is not a window (%s always attends through a sliding window)",
                                  key, arch);
            c->sliding_window = (int)w;
        }
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
        int64_t ki = gguf_find_key(g, key);
        if (ki >= 0) {
            if (gguf_kv_type(g, ki) == GGUF_TYPE_ARRAY)
                return ci_err_set(err, CI_ERR_UNSUPPORTED,
                                  "key '%s': a per-layer array is not supported (only a period)", key);
            int64_t period = 0;
            if ((s = gguf_get_int(g, key, &period, err)))
                return s;
            if (period < 0 || period > MAX_LAYERS)
                return ci_err_set(err, CI_ERR_FORMAT, "key '%s': period %lld out of range [0, %d]", key,
                                  (long long)period, MAX_LAYERS);
            c->swa_period = (int)period;
        }
        c->rope_base_swa = ai->rope_base_swa_default;
        snprintf(key, sizeof key, "%s.rope.freq_base_swa", arch);
        if ((s = gguf_get_f32_opt(g, key, &c->rope_base_swa, err)))
            return s;
        if (gguf_find_key(g, key) >= 0 && (!(c->rope_base_swa > 0.0f) || !isfinite(c->rope_base_swa)))
            return ci_err_set(err, CI_ERR_FORMAT, "key '%s': %g must be positive", key,
                              (double)c->rope_base_swa);
        c->rope_pos_scale_swa = ai->swa_rope_unscaled ? 1.0f : 0.0f;
    }
    if (ai->attn_softcap) {
        snprintf(key, sizeof key, "%s.attn_logit_softcapping", arch);
        if ((s = gguf_get_f32_opt(g, key, &c->attn_softcap, err)))
            return s;
        if (!(c->attn_softcap > 0.0f) || !isfinite(c->attn_softcap))
            return ci_err_set(err, CI_ERR_FORMAT, "key '%s': %g must be positive", key,
                              (double)c->attn_softcap);
    }
    if (ai->final_softcap) {
        snprintf(key, sizeof key, "%s.final_logit_softcapping", arch);
        if ((s = gguf_get_f32_opt(g, key, &c->final_softcap, err)))
            return s;
        if (!(c->final_softcap >= 0.0f) || !isfinite(c->final_softcap))
            return ci_err_set(err, CI_ERR_FORMAT, "key '%s': %g must be positive (or 0: off)", key,
                              (double)c->final_softcap);
    }
    if (ai->attn_scale_embd_layers && c->n_layer == ai->attn_scale_embd_layers)
        c->attn_scale = 1.0f / sqrtf((float)(c->n_embd / c->n_head));
    return CI_OK;
}

void model_config_rope_params(const struct model_config *c, struct ci_rope_params *p) {
    *p = (struct ci_rope_params){.rope_dim = c->rope_dim,
                                 .base = c->rope_base,
                                 .neox = c->rope_neox,
                                 .freq_scale = c->rope_pos_scale,
                                 .mscale = c->rope_attn_factor};
    if (c->rope_scaling == ROPE_SCALING_YARN) {
        // llama.cpp: ext_factor 1, and the magnitude scaling 1 + 0.1 ln(factor) for factors above 1
        // (its context multiplies attn_factor by get_mscale / (1 + 0.1 ln factor) and ggml's rope_yarn by
        // 1 + 0.1 ln(1 / freq_scale), which cancel below 1).
        p->ext_factor = 1.0f;
        float factor = 1.0f / c->rope_pos_scale;
        if (factor > 1.0f)
            p->mscale = c->rope_attn_factor * (1.0f + 0.1f * logf(factor));
        float dims[2];
        ci_rope_yarn_corr_dims(c->rope_dim, c->rope_orig_ctx, c->rope_base, c->yarn_beta_fast,
                               c->yarn_beta_slow, dims);
        p->corr_low = dims[0];
        p->corr_high = dims[1];
    }
}

/* Keys that change the computation in ways this engine does not implement: loading such a file would
 * silently compute another model.  Keys an architecture's row implements are read instead. */
/* The expert keys read_experts reads for this architecture (the others are refused when nonzero). */
static bool expert_key_read(const struct model_arch_info *ai, const char *suffix) {
    if (strcmp(suffix, "expert_count") == 0 || strcmp(suffix, "expert_used_count") == 0)
        return ai->moe != MOE_NONE;
    if (strcmp(suffix, "expert_feed_forward_length") == 0)
        return ai->moe == MOE_REQUIRED;
    if (strcmp(suffix, "expert_shared_feed_forward_length") == 0)
        return ai->moe_shared_exp;
    return false;
}

/* The window and soft-capping keys read_window_softcap reads for this architecture. */
static bool window_key_read(const struct model_arch_info *ai, const char *suffix) {
    if (strcmp(suffix, "attention.sliding_window") == 0 ||
        strcmp(suffix, "attention.sliding_window_pattern") == 0 || strcmp(suffix, "rope.freq_base_swa") == 0)
        return ai->swa;
    if (strcmp(suffix, "attn_logit_softcapping") == 0)
        return ai->attn_softcap;
    if (strcmp(suffix, "final_logit_softcapping") == 0)
        return ai->final_softcap;
    return false;
}

static enum ci_status refuse_unimplemented(const struct gguf *g, const struct model_arch_info *ai,
                                           struct ci_err *err) {
    const char *arch = ai->name;
    static const char *const keys[] = {
        "attention.sliding_window",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "expert_count",
        "expert_used_count",
        "attention.sliding_window_pattern",
        "rope.freq_base_swa",
        "expert_feed_forward_length",
        "expert_shared_feed_forward_length",
        "expert_group_count", // llama.cpp's grouped top-k selection (DeepSeek V3), applied to every arch
        "expert_shared_count",
    };
    if (ai->swa_not_applied) {
        char key[128];
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        int64_t w = 0;
        if (gguf_find_key(g, key) >= 0 && gguf_get_int(g, key, &w, err) == CI_OK && w > 0)
            CI_LOG_WARN("key '%s' = %lld: not applied (full attention), as llama.cpp does for this "
                        "architecture, whose converters write the window inconsistently",
                        key, (long long)w);
    }
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (ai->swa_not_applied && strcmp(keys[i], "attention.sliding_window") == 0)
            continue;
        if (expert_key_read(ai, keys[i]) || window_key_read(ai, keys[i]))
            continue;
        // A group count of 1 is llama.cpp's "no groups".
        if (strcmp(keys[i], "expert_group_count") == 0) {
            char gk[128];
            snprintf(gk, sizeof gk, "%s.%s", arch, keys[i]);
            int64_t v = 0;
            if (gguf_find_key(g, gk) >= 0 && gguf_get_int(g, gk, &v, err) == CI_OK && v == 1)
                continue;
        }
        char key[128];
        snprintf(key, sizeof key, "%s.%s", arch, keys[i]);
        int64_t ki = gguf_find_key(g, key);
        if (ki < 0)
            continue;
        // A zero (an integer 0, a float 0.0) means the feature is off.
        uint64_t n = 0;
        const uint8_t *raw = gguf_kv_raw(g, ki, &n);
        bool zero = raw && n > 0 && n <= 8 && gguf_kv_type(g, ki) != GGUF_TYPE_ARRAY;
        for (uint64_t b = 0; zero && b < n; b++)
            zero = raw[b] == 0;
        if (!zero)
            return ci_err_set(err, CI_ERR_UNSUPPORTED, "key '%s': %s is not implemented; refusing the model",
                              key, keys[i]);
    }
    return CI_OK;
}

/* expert_count / expert_used_count / expert_(shared_)feed_forward_length of an architecture with experts.  An
 * expert count of 0 (or none) is a dense FFN where the architecture allows one. */
static enum ci_status read_experts(struct model_config *c, const struct gguf *g, const char *arch,
                                   struct ci_err *err) {
    const struct model_arch_info *ai = model_arch_info(c->arch);
    c->n_ff_exp = c->n_ff_shexp = 0;
    if (ai->moe == MOE_NONE)
        return CI_OK;
    char key[128];
    int64_t n_expert = 0, n_used = 0;
    enum ci_status s;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    if ((s = gguf_get_int_opt(g, key, &n_expert, err)))
        return s;
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    if ((s = gguf_get_int_opt(g, key, &n_used, err)))
        return s;
    if (n_expert == -1)
        n_expert = 0;
    if (n_used == -1)
        n_used = 0;
    if (n_expert < 0 || n_expert > MAX_EXPERT)
        return ci_err_set(err, CI_ERR_FORMAT, "key '%s.expert_count': %lld out of range [0, %d]", arch,
                          (long long)n_expert, MAX_EXPERT);
    if (n_expert == 0) {
        if (ai->moe == MOE_REQUIRED)
            return ci_err_set(err, CI_ERR_FORMAT, "architecture %s needs key '%s.expert_count' above 0", arch,
                              arch);
        if (n_used != 0)
            return ci_err_set(
                err, CI_ERR_FORMAT,
                "key '%s.expert_used_count' is %lld but the model has no experts (expert_count 0)", arch,
                (long long)n_used);
        return CI_OK;
    }
    if (n_used < 1 || n_used > n_expert)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "key '%s.expert_used_count': %lld must be in [1, expert_count %lld]", arch,
                          (long long)n_used, (long long)n_expert);
    c->n_expert = (int)n_expert;
    c->n_expert_used = (int)n_used;
    // llama.cpp: llama's experts are n_ff long; qwen2moe/qwen3moe default to n_ff / n_expert_used.
    c->n_ff_exp = ai->moe == MOE_OPTIONAL ? c->n_ff : c->n_ff / c->n_expert_used;
    if (ai->moe != MOE_OPTIONAL &&
        (s = get_dim(g, arch, "expert_feed_forward_length", MAX_DIM * 8, &c->n_ff_exp, true, err)))
        return s;
    if (ai->moe_shared_exp) {
        c->n_ff_shexp = c->n_ff;
        if ((s = get_dim(g, arch, "expert_shared_feed_forward_length", MAX_DIM * 8, &c->n_ff_shexp, true,
                         err)))
            return s;
    }
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
    int a = 0;
    while (a < MODEL_ARCH_COUNT && strcmp(name, arch_table[a].name) != 0)
        a++;
    if (a == MODEL_ARCH_COUNT) {
        char known[256] = "";
        for (int k = 0; k < MODEL_ARCH_COUNT; k++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
                     arch_table[k].name);
        return ci_err_set(err, CI_ERR_UNSUPPORTED, "unknown architecture '%s' (supported: %s)", name, known);
    }
    model_config_set_arch(c, (enum model_arch)a);

    if ((s = get_dim(g, name, "embedding_length", MAX_DIM, &c->n_embd, false, err)) ||
        (s = get_dim(g, name, "block_count", MAX_LAYERS, &c->n_layer, false, err)) ||
        (s = get_dim(g, name, "feed_forward_length", MAX_DIM * 8, &c->n_ff, false, err)) ||
        (s = get_dim(g, name, "attention.head_count", MAX_HEADS, &c->n_head, false, err)) ||
        (s = get_dim(g, name, "context_length", MAX_CTX, &c->n_ctx_train, false, err)))
        return s;
    c->n_kv_head = c->n_head;
    if ((s = get_dim(g, name, "attention.head_count_kv", MAX_HEADS, &c->n_kv_head, true, err)))
        return s;
    // Head size: key_length / value_length when the file gives them (Qwen3, Gemma: n_head * head_dim need
    // not be n_embd), else n_embd / n_head.
    int k_len = -1, v_len = -1;
    if ((s = get_dim(g, name, "attention.key_length", MAX_DIM, &k_len, true, err)) ||
        (s = get_dim(g, name, "attention.value_length", MAX_DIM, &v_len, true, err)))
        return s;
    if (k_len > 0 && v_len > 0 && k_len != v_len)
        return ci_err_set(err, CI_ERR_UNSUPPORTED,
                          "key '%s.attention.key_length' (%d) differs from '%s.attention.value_length' (%d): "
                          "separate K and V head sizes are not supported",
                          name, k_len, name, v_len);
    if (k_len > 0 || v_len > 0) {
        c->head_dim = k_len > 0 ? k_len : v_len;
    } else {
        if (c->n_embd % c->n_head != 0)
            return ci_err_set(err, CI_ERR_FORMAT, "embedding length %d is not a multiple of head count %d",
                              c->n_embd, c->n_head);
        c->head_dim = c->n_embd / c->n_head;
    }
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
    if (c->encoder) { // LayerNorm's epsilon (llama.cpp requires the key for bert)
        c->rms_eps = 1e-12f;
        snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", name);
    }
    if ((s = gguf_get_f32_opt(g, key, &c->rms_eps, err)))
        return s;
    if (c->encoder) {
        // A causal BERT-style file would be another model; llama.cpp reads <arch>.attention.causal too.
        bool causal = false;
        snprintf(key, sizeof key, "%s.attention.causal", name);
        if ((s = gguf_get_bool_opt(g, key, &causal, err)))
            return s;
        if (causal)
            return ci_err_set(err, CI_ERR_UNSUPPORTED, "key '%s' is true: a causal %s is not supported", key,
                              name);
    }
    const struct model_arch_info *ai = model_arch_info(c->arch);
    if ((s = read_rope_scaling(c, g, name, err)) || (s = refuse_unimplemented(g, ai, err)) ||
        (s = read_window_softcap(c, g, name, err)) || (s = read_experts(c, g, name, err)))
        return s;
    // llama.cpp's converter marks llama3 scaling only by the tensor (its loader knows no "llama3" type).
    if (c->rope_scaling == ROPE_SCALING_NONE && model_arch_info(c->arch)->rope_freqs &&
        gguf_find_tensor(g, "rope_freqs.weight") >= 0)
        c->rope_scaling = ROPE_SCALING_LLAMA3;
    // LongRoPE (Phi-3): llama.cpp's converter writes only the factor tensors.
    if (c->rope_scaling == ROPE_SCALING_NONE && model_arch_info(c->arch)->longrope &&
        (gguf_find_tensor(g, "rope_factors_long.weight") >= 0 ||
         gguf_find_tensor(g, "rope_factors_short.weight") >= 0))
        c->rope_scaling = ROPE_SCALING_LONGROPE;
    if (c->rope_orig_ctx == 0)
        c->rope_orig_ctx = c->n_ctx_train;
    // Phi-3: attn_qkv.weight of layer 0 decides for the file (model/weights.c checks every layer).
    c->qkv_fused = model_arch_info(c->arch)->qkv_fused && gguf_find_tensor(g, "blk.0.attn_qkv.weight") >= 0;

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
    if (c->head_dim <= 0)
        return ci_err_set(err, CI_ERR_FORMAT, "head dimension %d must be positive", c->head_dim);
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
    if (!(c->rope_pos_scale > 0.0f) || !isfinite(c->rope_pos_scale))
        return ci_err_set(err, CI_ERR_FORMAT, "rope position scale %g must be positive",
                          (double)c->rope_pos_scale);
    if (c->sliding_window < 0 || c->swa_period < 0)
        return ci_err_set(err, CI_ERR_FORMAT, "sliding window %d / pattern %d must not be negative",
                          c->sliding_window, c->swa_period);
    if (!(c->attn_softcap >= 0.0f) || !(c->final_softcap >= 0.0f) || !(c->attn_scale >= 0.0f))
        return ci_err_set(err, CI_ERR_FORMAT, "soft-caps and attention scale must not be negative");
    if (c->n_expert < 0 || c->n_expert > MAX_EXPERT ||
        (c->n_expert > 0 && (c->n_expert_used < 1 || c->n_expert_used > c->n_expert || c->n_ff_exp <= 0 ||
                             (c->moe_shared_exp && c->n_ff_shexp <= 0))) ||
        (c->n_expert == 0 && c->n_expert_used != 0))
        return ci_err_set(err, CI_ERR_FORMAT, "experts: %d used of %d (expert FFN length %d) is inconsistent",
                          c->n_expert_used, c->n_expert, c->n_ff_exp);
    if (c->rope_orig_ctx <= 0)
        return ci_err_set(err, CI_ERR_FORMAT, "rope original context %d must be positive", c->rope_orig_ctx);
    if (!(c->rope_attn_factor > 0.0f) || !isfinite(c->rope_attn_factor))
        return ci_err_set(err, CI_ERR_FORMAT, "rope attention factor %g must be positive",
                          (double)c->rope_attn_factor);
    if (!(c->rms_eps >= 0.0f) || !(c->rms_eps < 1.0f))
        return ci_err_set(err, CI_ERR_FORMAT, "rms epsilon %g out of range [0, 1)", (double)c->rms_eps);
    return CI_OK;
}

void model_config_from_llama2c(struct model_config *c, const struct llama2c *l) {
    const struct llama2c_hparams *hp = llama2c_hparams(l);
    memset(c, 0, sizeof *c);
    model_config_set_arch(c, MODEL_ARCH_LLAMA);
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
    c->rope_pos_scale = 1.0f;
    c->rope_orig_ctx = c->n_ctx_train;
    c->rope_attn_factor = 1.0f;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
}
