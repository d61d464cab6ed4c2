/* llama.cpp's per-tensor type choices of its quantization presets (see quant_rules.h). */
#include "model/quant_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/mem.h"
#include "kernels/quant.h"

// LLAMA_FTYPE_* numbers (llama.h).
enum {
    FT_F32 = 0,
    FT_F16 = 1,
    FT_Q4_0 = 2,
    FT_Q4_1 = 3,
    FT_Q8_0 = 7,
    FT_Q5_0 = 8,
    FT_Q5_1 = 9,
    FT_Q2_K = 10,
    FT_Q3_K_S = 11,
    FT_Q3_K_M = 12,
    FT_Q3_K_L = 13,
    FT_Q4_K_S = 14,
    FT_Q4_K_M = 15,
    FT_Q5_K_S = 16,
    FT_Q5_K_M = 17,
    FT_Q6_K = 18,
    FT_IQ4_NL = 25,
    FT_IQ4_XS = 30,
    FT_BF16 = 32,
};

static const struct quant_preset presets[] = {
    {"F32", FT_F32, CI_TYPE_F32},          {"F16", FT_F16, CI_TYPE_F16},
    {"BF16", FT_BF16, CI_TYPE_BF16},       {"Q8_0", FT_Q8_0, CI_TYPE_Q8_0},
    {"Q4_0", FT_Q4_0, CI_TYPE_Q4_0},       {"Q4_1", FT_Q4_1, CI_TYPE_Q4_1},
    {"Q5_0", FT_Q5_0, CI_TYPE_Q5_0},       {"Q5_1", FT_Q5_1, CI_TYPE_Q5_1},
    {"Q2_K", FT_Q2_K, CI_TYPE_Q2_K},       {"Q3_K_S", FT_Q3_K_S, CI_TYPE_Q3_K},
    {"Q3_K_M", FT_Q3_K_M, CI_TYPE_Q3_K},   {"Q3_K_L", FT_Q3_K_L, CI_TYPE_Q3_K},
    {"Q4_K_S", FT_Q4_K_S, CI_TYPE_Q4_K},   {"Q4_K_M", FT_Q4_K_M, CI_TYPE_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, CI_TYPE_Q5_K},   {"Q5_K_M", FT_Q5_K_M, CI_TYPE_Q5_K},
    {"Q6_K", FT_Q6_K, CI_TYPE_Q6_K},       {"IQ4_NL", FT_IQ4_NL, CI_TYPE_IQ4_NL},
    {"IQ4_XS", FT_IQ4_XS, CI_TYPE_IQ4_XS},
};
#define N_PRESETS ((int)(sizeof presets / sizeof *presets))

int quant_n_presets(void) {
    return N_PRESETS;
}

const struct quant_preset *quant_preset(int i) {
    CI_ASSERT(i >= 0 && i < N_PRESETS);
    return &presets[i];
}

const struct quant_preset *quant_preset_find(const char *name) {
    static const struct {
        const char *alias, *name;
    } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}}; // as llama-quantize
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (strcasecmp(name, aliases[i].alias) == 0)
            name = aliases[i].name;
    for (int i = 0; i < N_PRESETS; i++)
        if (strcasecmp(name, presets[i].name) == 0)
            return &presets[i];
    return NULL;
}

const char *quant_preset_names(void) {
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < N_PRESETS; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", presets[i].name);
    return buf;
}

bool quant_preset_quantized(const struct quant_preset *p) {
    return p->base != CI_TYPE_F32 && p->base != CI_TYPE_F16 && p->base != CI_TYPE_BF16;
}

enum category {
    CAT_OTHER,
    CAT_OUTPUT,
    CAT_TOKEN_EMBD,
    CAT_ATTN_QKV,
    CAT_ATTN_KV_B,
    CAT_ATTN_V,
    CAT_ATTN_K,
    CAT_ATTN_Q,
    CAT_ATTN_OUTPUT,
    CAT_FFN_UP,
    CAT_FFN_GATE,
    CAT_FFN_DOWN,
};

// By substring, in llama.cpp's order (attn_kv_b before attn_k, ffn_up before ffn_gate).
static enum category category(const char *name) {
    if (strcmp(name, "output.weight") == 0)
        return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    static const struct {
        const char *sub;
        enum category cat;
    } subs[] = {{"attn_qkv.weight", CAT_ATTN_QKV},
                {"attn_kv_b.weight", CAT_ATTN_KV_B},
                {"attn_v.weight", CAT_ATTN_V},
                {"attn_k.weight", CAT_ATTN_K},
                {"attn_q.weight", CAT_ATTN_Q},
                {"attn_output.weight", CAT_ATTN_OUTPUT},
                {"ffn_up", CAT_FFN_UP},
                {"ffn_gate", CAT_FFN_GATE},
                {"ffn_down", CAT_FFN_DOWN}};
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
        if (strstr(name, subs[i].sub))
            return subs[i].cat;
    return CAT_OTHER;
}

static bool is_attn_v(enum category c) {
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

/* llama.cpp's tensor_allows_quantization for the names a llama-family file (or a close relative) holds:
 * matrices named "...weight", except norms and small special tensors that must stay exact. */
static bool allows_quantization(const char *name, int n_dims) {
    static const char *const never[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
    };
    size_t n = strlen(name);
    if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight") != 0)
        return false;
    if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0)
        return false;
    for (size_t i = 0; i < sizeof never / sizeof *never; i++)
        if (strstr(name, never[i]))
            return false;
    return true;
}

static bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

void quant_rules_init(struct quant_rules *r, const struct quant_preset *p, int n_layer, int n_head,
                      int n_head_kv, int n_expert) {
    memset(r, 0, sizeof *r);
    r->p = p;
    r->n_layer = n_layer;
    r->n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
    r->n_expert = n_expert;
    r->is_70b = n_layer == 80 && n_head_kv > 0 && n_head != n_head_kv;
    r->tied = true; // until an output.weight shows up
}

void quant_rules_count(struct quant_rules *r, const char *name) {
    enum category c = category(name);
    if (is_attn_v(c))
        r->n_attn_v++;
    if (c == CAT_OUTPUT)
        r->tied = false;
}

/* With experts, the layer comes from the name (their tensors are not in layer order). */
static int layer_of(const struct quant_rules *r, const char *name, int counter) {
    int il;
    if (r->n_expert > 1 && sscanf(name, "blk.%d.", &il) == 1 && il >= 0 && il < r->n_layer)
        return il;
    return counter;
}

/* llama_tensor_get_type_impl for the presets of quant_rules.h. */
static uint32_t mixture_type(struct quant_rules *r, uint32_t t, const char *name, int64_t ne0) {
    const int ft = r->p->ftype;
    const enum category c = category(name);
    const bool moe8 = r->n_expert == 8;
    if (c == CAT_OUTPUT || (r->tied && c == CAT_TOKEN_EMBD)) {
        // The head matters most: Q6_K, or Q8_0 where the base type's block does not divide the rows.
        if (ne0 % ci_type_traits(t)->block_size != 0)
            t = CI_TYPE_Q8_0;
        else if (t != CI_TYPE_Q8_0)
            t = CI_TYPE_Q6_K;
    } else if (c == CAT_TOKEN_EMBD) {
        // unchanged in these presets
    } else if (is_attn_v(c)) {
        if (ft == FT_Q2_K)
            t = r->n_gqa >= 4 ? CI_TYPE_Q4_K : CI_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = r->i_attn_v < 2 ? CI_TYPE_Q5_K : CI_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = CI_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && r->n_gqa >= 4)
            t = CI_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(r->i_attn_v, r->n_attn_v))
            t = CI_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && r->i_attn_v < 4)
            t = CI_TYPE_Q5_K;
        // attn_v is 8x smaller than attn_q in a 70B model: more bits cost little there.
        if (r->is_70b && (t == CI_TYPE_Q3_K || t == CI_TYPE_Q4_K))
            t = CI_TYPE_Q5_K;
        if (moe8)
            t = CI_TYPE_Q8_0;
        r->i_attn_v++;
    } else if (c == CAT_ATTN_K) {
        if (moe8)
            t = CI_TYPE_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        int il = layer_of(r, name, r->i_ffn_down), nl = r->n_layer;
        if (ft == FT_Q2_K)
            t = CI_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = il < nl / 16 ? CI_TYPE_Q5_K : CI_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = CI_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (use_more_bits(il, nl))
                t = CI_TYPE_Q6_K;
        } else if (il < nl / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS))
            t = CI_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(il, nl))
            t = CI_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && il < nl / 8)
            t = CI_TYPE_Q5_K;
        r->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (moe8) {
            if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                ft == FT_Q4_K_M || ft == FT_IQ4_XS)
                t = CI_TYPE_Q5_K;
        } else if (ft == FT_Q2_K)
            t = CI_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = CI_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = CI_TYPE_Q5_K;
    } else if (c == CAT_ATTN_QKV) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L)
            t = CI_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M)
            t = CI_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M)
            t = CI_TYPE_Q6_K;
    } else if (c == CAT_FFN_GATE) {
        r->i_ffn_gate++;
    } else if (c == CAT_FFN_UP) {
        r->i_ffn_up++;
    }
    return t;
}

/* A row length the type's block does not divide: the nearest type with 32-element blocks, else F16. */
static uint32_t fallback(struct quant_rules *r, uint32_t t, int64_t ne0) {
    if (ne0 % ci_type_traits(t)->block_size == 0)
        return t;
    r->n_fallback++;
    switch (t) {
    case CI_TYPE_IQ4_XS:
        t = CI_TYPE_IQ4_NL;
        break;
    case CI_TYPE_Q2_K:
    case CI_TYPE_Q3_K:
        t = CI_TYPE_Q4_0;
        break;
    case CI_TYPE_Q4_K:
        t = CI_TYPE_Q5_0;
        break;
    case CI_TYPE_Q5_K:
        t = CI_TYPE_Q5_1;
        break;
    case CI_TYPE_Q6_K:
        t = CI_TYPE_Q8_0;
        break;
    default: // already a 32-element block
        break;
    }
    return ne0 % ci_type_traits(t)->block_size == 0 ? t : CI_TYPE_F16;
}

uint32_t quant_rules_type(struct quant_rules *r, const char *name, int n_dims, int64_t ne0,
                          uint32_t src_type) {
    if (!allows_quantization(name, n_dims))
        return src_type;
    uint32_t t = r->p->base;
    if (!quant_preset_quantized(r->p))
        return t;
    if (!r->pure)
        t = mixture_type(r, t, name, ne0);
    return fallback(r, t, ne0);
}

struct visit {
    const char *name;
    int layer;
    int64_t i;
};

static int visit_cmp(const void *pa, const void *pb) {
    const struct visit *a = pa, *b = pb;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

enum ci_status quant_rules_choose(struct quant_rules *r, struct quant_tensor *t, int64_t n,
                                  struct ci_err *err) {
    struct visit *v = ci_calloc(n > 0 ? (size_t)n : 1, sizeof *v);
    if (!v)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        quant_rules_count(r, t[i].name);
        v[i] = (struct visit){t[i].name, -1, i};
        if (sscanf(t[i].name, "blk.%d.", &v[i].layer) != 1)
            v[i].layer = -1;
    }
    qsort(v, (size_t)n, sizeof *v, visit_cmp);
    for (int64_t k = 0; k < n; k++) {
        struct quant_tensor *x = &t[v[k].i];
        x->type = quant_rules_type(r, x->name, x->n_dims, x->ne0, x->src_type);
    }
    ci_free(v);
    return CI_OK;
}
