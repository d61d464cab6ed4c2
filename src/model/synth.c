/* Synthetic GGUF models: presets, the weight scheme of synth.h, a synthetic SPM vocabulary, streamed out
 * through the GGUF writer one tensor at a time. */
#include "model/synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/rng.h"
#include "kernels/quant.h"
#include "format/gguf_write.h"
#include "model/quant_rules.h"

static const struct synth_preset presets[] = {
    {.name = "tiny",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f},
    {.name = "tiny-qwen2",
     .arch = MODEL_ARCH_QWEN2,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .qkv_bias = true},
    {.name = "stories15m",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 288,
     .n_layer = 6,
     .n_head = 6,
     .n_kv_head = 6,
     .n_ff = 768,
     .n_vocab = 32000,
     .n_ctx = 256,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f,
     .tied = true},
    {.name = "smollm2-135m",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 576,
     .n_layer = 30,
     .n_head = 9,
     .n_kv_head = 3,
     .n_ff = 1536,
     .n_vocab = 49152,
     .n_ctx = 8192,
     .rope_base = 100000.0f,
     .rms_eps = 1e-5f,
     .tied = true},
    {.name = "tinyllama-1.1b",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 2048,
     .n_layer = 22,
     .n_head = 32,
     .n_kv_head = 4,
     .n_ff = 5632,
     .n_vocab = 32000,
     .n_ctx = 2048,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f},
    {.name = "qwen2-0.5b",
     .arch = MODEL_ARCH_QWEN2,
     .n_embd = 896,
     .n_layer = 24,
     .n_head = 14,
     .n_kv_head = 2,
     .n_ff = 4864,
     .n_vocab = 151936,
     .n_ctx = 32768,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .qkv_bias = true},
    // Llama 3.2 3B's shapes (its llama3 RoPE frequency scaling is not modelled: synth's weights are random)
    {.name = "llama3.2-3b",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 3072,
     .n_layer = 28,
     .n_head = 24,
     .n_kv_head = 8,
     .n_ff = 8192,
     .n_vocab = 128256,
     .n_ctx = 131072,
     .rope_base = 500000.0f,
     .rms_eps = 1e-5f,
     .tied = true},
    // The tiny shape with llama3 RoPE scaling whose factors matter within 100 positions: 1 for the three
    // fastest pairs, 8 from the sixth on, smooth between (original context 256).
    {.name = "tiny-llama3",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 500000.0f,
     .rms_eps = 1e-5f,
     .llama3_factor = 8.0f,
     .llama3_low = 1.0f,
     .llama3_high = 4.0f,
     .llama3_orig_ctx = 256},
    // head_dim 64 with 8 heads: q_dim 512 != n_embd 256.
    // A bge-small-like BERT encoder (CLS pooling) with a synthetic WordPiece vocabulary.
    {.name = "tiny-bert",
     .arch = MODEL_ARCH_BERT,
     .n_embd = 128,
     .n_layer = 3,
     .n_head = 4,
     .n_kv_head = 4,
     .n_ff = 512,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-12f,
     .qkv_bias = true,
     .pooling_type = 2},
    {.name = "tiny-qwen3",
     .arch = MODEL_ARCH_QWEN3,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 64},
    {.name = "llama3.2-1b",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 2048,
     .n_layer = 16,
     .n_head = 32,
     .n_kv_head = 8,
     .n_ff = 8192,
     .n_vocab = 128256,
     .n_ctx = 131072,
     .rope_base = 500000.0f,
     .rms_eps = 1e-5f,
     .tied = true,
     .llama3_factor = 32.0f,
     .llama3_low = 1.0f,
     .llama3_high = 4.0f,
     .llama3_orig_ctx = 8192},
    {.name = "qwen3-0.6b",
     .arch = MODEL_ARCH_QWEN3,
     .n_embd = 1024,
     .n_layer = 28,
     .n_head = 16,
     .n_kv_head = 8,
     .n_ff = 3072,
     .n_vocab = 151936,
     .n_ctx = 40960,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 128},
    // Llama with Mistral's sliding window, small enough that a 100-token test crosses it.
    {.name = "tiny-mistral",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f,
     .sliding_window = 32},
    // Gemma 2 in small: alternating local (window 32) and global layers, soft-caps low enough to bend the
    // synthetic weights' scores (+-12) and logits (+-18) well away from linear, q_dim 512 != n_embd.
    {.name = "tiny-gemma2",
     .arch = MODEL_ARCH_GEMMA2,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 4,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 64,
     .sliding_window = 32,
     .attn_softcap = 10.0f,
     .final_softcap = 15.0f},
    // Gemma 3 in small: six layers so the default pattern (5 local : 1 global) has its global layer; local
    // layers RoPE at llama.cpp's default base 10000, global at 1e6.
    {.name = "tiny-gemma3",
     .arch = MODEL_ARCH_GEMMA3,
     .n_embd = 256,
     .n_layer = 6,
     .n_head = 4,
     .n_kv_head = 1,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 64,
     .sliding_window = 32},
    {.name = "gemma2-2b",
     .arch = MODEL_ARCH_GEMMA2,
     .n_embd = 2304,
     .n_layer = 26,
     .n_head = 8,
     .n_kv_head = 4,
     .n_ff = 9216,
     .n_vocab = 256000,
     .n_ctx = 8192,
     .rope_base = 10000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 256,
     .sliding_window = 4096,
     .attn_softcap = 50.0f,
     .final_softcap = 30.0f},
    {.name = "gemma3-1b",
     .arch = MODEL_ARCH_GEMMA3,
     .n_embd = 1152,
     .n_layer = 26,
     .n_head = 4,
     .n_kv_head = 1,
     .n_ff = 6912,
     .n_vocab = 262144,
     .n_ctx = 32768,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 256,
     .sliding_window = 512},
    // Mixtral's layout (llama with 8 experts, top-2, untied head) at the tiny shape.
    {.name = "tiny-mixtral",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 256,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-5f,
     .n_expert = 8,
     .n_expert_used = 2},
    // Qwen3-MoE's layout: qwen3 attention (head_dim 64 != n_embd / n_head), 16 experts of 128, top-4.
    {.name = "tiny-qwen3moe",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .tied = true,
     .head_dim = 64,
     .n_expert = 16,
     .n_expert_used = 4,
     .n_ff_exp = 128},
    // Qwen1.5-MoE's layout: qwen2 attention with biases, 8 experts of 128 (top-2, weights not renormalised)
    // and a shared expert of 512 behind its sigmoid gate.
    {.name = "tiny-qwen2moe",
     .arch = MODEL_ARCH_QWEN2MOE,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .qkv_bias = true,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 128,
     .n_ff_shexp = 512},
    // Qwen3-30B-A3B scaled down for benchmarks: its 128 experts with top-8, qwen3 attention (32/4 heads of
    // 128 there, 16/4 here), the vocabulary; n_embd 2048 -> 1024, 48 -> 6 layers, expert FFN 768 -> 256
    // (a multiple of 256 so Q4_K_M applies throughout).  About 0.95 G parameters: 3.8 GB in F32.
    {.name = "qwen3-moe",
     .arch = MODEL_ARCH_QWEN3MOE,
     .n_embd = 1024,
     .n_layer = 6,
     .n_head = 16,
     .n_kv_head = 4,
     .n_ff = 3072,
     .n_vocab = 151936,
     .n_ctx = 40960,
     .rope_base = 1000000.0f,
     .rms_eps = 1e-6f,
     .head_dim = 128,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 256},
    // Phi-3 (fused QKV and gate-up) with LongRoPE factors that matter within 100 positions (original context
    // 64, so contexts above it use the long factors, 1 to 16) and partial NeoX rotary (24 of 32 dimensions).
    {.name = "tiny-phi3",
     .arch = MODEL_ARCH_PHI3,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f,
     .rope_dim = 24,
     .rope_orig_ctx = 64,
     .longrope = true,
     .longrope_long = 16.0f,
     .longrope_short = 3.0f},
    // The tiny llama shape with YaRN scaling (factor 4 over an original context of 128): all but the fastest
    // pairs interpolated, and the magnitude scaling 1 + 0.1 ln 4, within 100 positions.
    {.name = "tiny-yarn",
     .arch = MODEL_ARCH_LLAMA,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f,
     .yarn_factor = 4.0f,
     .rope_orig_ctx = 128},
    // Phi-3-mini-128k's shapes (LongRoPE over an original 4096; synth's factors, not Microsoft's).
    {.name = "phi3-mini",
     .arch = MODEL_ARCH_PHI3,
     .n_embd = 3072,
     .n_layer = 32,
     .n_head = 32,
     .n_kv_head = 32,
     .n_ff = 8192,
     .n_vocab = 32064,
     .n_ctx = 131072,
     .rope_base = 10000.0f,
     .rms_eps = 1e-5f,
     .rope_orig_ctx = 4096,
     .longrope = true,
     .longrope_long = 64.0f,
     .longrope_short = 1.5f},
    // gpt-oss in small: biased attention with sinks, head_dim 64 with 8 heads of a 256-wide model, every
    // other layer windowed to 32, YaRN (factor 4 over 128), 8 biased experts of 128 (top-2, softmax of the
    // chosen logits) with the clamped SwiGLU.
    {.name = "tiny-gpt-oss",
     .arch = MODEL_ARCH_GPT_OSS,
     .n_embd = 256,
     .n_layer = 4,
     .n_head = 8,
     .n_kv_head = 2,
     .n_ff = 768,
     .n_vocab = 1024,
     .n_ctx = 512,
     .rope_base = 150000.0f,
     .rms_eps = 1e-5f,
     .qkv_bias = true,
     .head_dim = 64,
     .sliding_window = 32,
     .yarn_factor = 4.0f,
     .rope_orig_ctx = 128,
     .n_expert = 8,
     .n_expert_used = 2,
     .n_ff_exp = 128},
};

#define N_PRESETS      ((int)(sizeof presets / sizeof *presets))
#define N_FIXED_TOKENS 259 // <unk>, <s>, </s>, 256 byte tokens
#define Q_SCALE        4.0f
#define NORM_JITTER    0.1f
#define BIAS_STD       0.1f
#define SINK_STD       2.0f
#define QK_NORM_SCALE  2.0f
#define QK_NORM_JITTER 0.5f
#define EXPS_PER_LAYER                                                                                       \
    14 // router, 3 expert tensors, shared gate and 3 shared matrices; gpt-oss: 6 biases and sinks

int synth_n_presets(void) {
    return N_PRESETS;
}

const struct synth_preset *synth_preset(int i) {
    CI_ASSERT(i >= 0 && i < N_PRESETS);
    return &presets[i];
}

const struct synth_preset *synth_preset_find(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

static int preset_head_dim(const struct synth_preset *p) {
    return p->head_dim ? p->head_dim : p->n_embd / p->n_head;
}

void synth_preset_config(const struct synth_preset *p, struct model_config *c) {
    memset(c, 0, sizeof *c);
    model_config_set_arch(c, p->arch);
    c->n_vocab = p->n_vocab;
    c->n_embd = p->n_embd;
    c->n_layer = p->n_layer;
    c->n_head = p->n_head;
    c->n_kv_head = p->n_kv_head;
    c->head_dim = preset_head_dim(p);
    c->n_ff = p->n_ff;
    c->n_ctx_train = p->n_ctx;
    c->rope_dim = p->rope_dim ? p->rope_dim : c->head_dim;
    c->rope_base = p->rope_base;
    c->rms_eps = p->rms_eps;
    // The file carries rope_freqs.weight but no rope.scaling.type key (as llama.cpp's converter writes it;
    // llama.cpp refuses a "llama3" type), which the loader reads as llama3.
    c->rope_scaling = p->llama3_factor > 0.0f ? ROPE_SCALING_LLAMA3
                      : p->yarn_factor > 0.0f ? ROPE_SCALING_YARN
                      : p->longrope           ? ROPE_SCALING_LONGROPE
                                              : ROPE_SCALING_NONE;
    c->rope_pos_scale = p->yarn_factor > 0.0f ? 1.0f / p->yarn_factor : 1.0f;
    c->rope_orig_ctx = p->rope_orig_ctx ? p->rope_orig_ctx : p->n_ctx;
    c->rope_attn_factor = p->longrope ? synth_longrope_attn_factor(p) : 1.0f;
    c->yarn_beta_fast = 32.0f;
    c->yarn_beta_slow = 1.0f;
    c->qkv_fused = model_arch_info(p->arch)->qkv_fused;
    if (p->sliding_window)
        c->sliding_window = p->sliding_window;
    if (p->attn_softcap > 0.0f)
        c->attn_softcap = p->attn_softcap;
    if (p->final_softcap > 0.0f)
        c->final_softcap = p->final_softcap;
    c->rope_base_swa = model_arch_info(p->arch)->rope_base_swa_default;
    c->rope_pos_scale_swa = model_arch_info(p->arch)->swa_rope_unscaled ? 1.0f : 0.0f;
    c->n_expert = p->n_expert;
    c->n_expert_used = p->n_expert_used;
    c->n_ff_exp = p->n_expert ? (p->n_ff_exp ? p->n_ff_exp : p->n_ff) : 0;
    c->n_ff_shexp = p->n_expert && c->moe_shared_exp ? (p->n_ff_shexp ? p->n_ff_shexp : p->n_ff) : 0;
}

void synth_longrope_factors(const struct synth_preset *p, bool long_factors, float *out) {
    int half = (p->rope_dim ? p->rope_dim : preset_head_dim(p)) / 2;
    double top = long_factors ? p->longrope_long : p->longrope_short;
    for (int i = 0; i < half; i++)
        out[i] = (float)pow(top, half > 1 ? (double)i / (half - 1) : 0.0);
}

float synth_longrope_attn_factor(const struct synth_preset *p) {
    double scale = (double)p->n_ctx / p->rope_orig_ctx;
    return scale > 1.0 ? (float)sqrt(1.0 + log(scale) / log((double)p->rope_orig_ctx)) : 1.0f;
}

void synth_llama3_rope_freqs(const struct synth_preset *p, float *out) {
    // Meta's apply_scaling (Llama 3.1): wavelengths shorter than original_ctx / high_freq_factor keep their
    // frequency, longer than original_ctx / low_freq_factor are divided by factor, a smooth mix between.
    int d = preset_head_dim(p);
    double lo_wavelen = p->llama3_orig_ctx / (double)p->llama3_low,
           hi_wavelen = p->llama3_orig_ctx / (double)p->llama3_high;
    for (int i = 0; i < d / 2; i++) {
        double freq = 1.0 / pow((double)p->rope_base, 2.0 * i / d), wavelen = 2.0 * M_PI / freq;
        double f;
        if (wavelen < hi_wavelen)
            f = 1.0;
        else if (wavelen > lo_wavelen)
            f = p->llama3_factor;
        else {
            double smooth = (p->llama3_orig_ctx / wavelen - p->llama3_low) / (p->llama3_high - p->llama3_low);
            f = 1.0 / ((1.0 - smooth) / p->llama3_factor + smooth);
        }
        out[i] = (float)f;
    }
}

bool synth_type_parse(const char *name, uint32_t *type) {
    static const struct {
        const char *name;
        uint32_t type;
    } names[] = {{"f32", CI_TYPE_F32},
                 {"f16", CI_TYPE_F16},
                 {"bf16", CI_TYPE_BF16},
                 {"q8_0", CI_TYPE_Q8_0},
                 {"q4_0", CI_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcasecmp(name, names[i].name) == 0) {
            *type = names[i].type;
            return true;
        }
    return false;
}

int synth_file_type(uint32_t type) {
    switch (type) {
    case CI_TYPE_F32:
        return 0;
    case CI_TYPE_F16:
        return 1;
    case CI_TYPE_Q4_0:
        return 2;
    case CI_TYPE_Q8_0:
        return 7;
    case CI_TYPE_BF16:
        return 32;
    default:
        return -1;
    }
}

/* ---- vocabulary ---- */

int synth_vocab_piece(int i, char *buf) {
    static const char sp[] = "\xe2\x96\x81"; // U+2581, SentencePiece's space
    CI_ASSERT(i >= 0);
    if (i == 0)
        return sprintf(buf, "<unk>");
    if (i == 1)
        return sprintf(buf, "<s>");
    if (i == 2)
        return sprintf(buf, "</s>");
    if (i < N_FIXED_TOKENS)
        return sprintf(buf, "<0x%02X>", (unsigned)(i - 3));
    int g = i - N_FIXED_TOKENS;
    if (g == 0)
        return sprintf(buf, "%s", sp);
    if (g <= 94) // '!' .. '~'
        return sprintf(buf, "%c", (char)(32 + g));
    // Letter strings by length: length 1 only with the space prefix (bare letters came above), longer
    // lengths as "\u2581s" then "s" for each s in lexicographic order.
    int64_t idx = g - 95, len = 1, block = 26;
    while (idx >= block) {
        idx -= block;
        len++;
        block = 2;
        for (int k = 0; k < len; k++)
            block *= 26;
    }
    bool bare = len > 1 && (idx & 1);
    int64_t s = len > 1 ? idx / 2 : idx;
    int n = 0;
    if (!bare)
        n = sprintf(buf, "%s", sp);
    for (int64_t k = len - 1; k >= 0; k--) {
        int64_t div = 1;
        for (int64_t j = 0; j < k; j++)
            div *= 26;
        buf[n++] = (char)('a' + (s / div) % 26);
    }
    buf[n] = '\0';
    return n;
}

int synth_wpm_piece(int i, char *buf) {
    static const char *const special[SYNTH_WPM_FIXED] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    CI_ASSERT(i >= 0);
    if (i < SYNTH_WPM_FIXED)
        return sprintf(buf, "%s", special[i]);
    int g = i - SYNTH_WPM_FIXED;
    if (g < 2 * 94) // '!' .. '~'
        return sprintf(buf, "%s%c", g % 2 ? "" : "\xe2\x96\x81", (char)(33 + g / 2));
    int64_t idx = g - 2 * 94, len = 2, block = 2 * 26 * 26;
    while (idx >= block) {
        idx -= block;
        len++;
        block *= 26;
    }
    int n = idx & 1 ? 0 : sprintf(buf, "\xe2\x96\x81");
    int64_t s = idx / 2;
    for (int64_t k = len - 1; k >= 0; k--) {
        int64_t div = 1;
        for (int64_t j = 0; j < k; j++)
            div *= 26;
        buf[n++] = (char)('a' + (s / div) % 26);
    }
    buf[n] = '\0';
    return n;
}

/* The WordPiece vocabulary of encoder presets, with the keys llama.cpp's "bert" loader reads (its BOS is
 * [CLS]; it reads no cls_token_id, so bos_token_id is written too). */
static enum ci_status set_vocab_wpm(struct gguf_writer *w, int n_vocab, struct ci_err *err) {
    enum ci_status s = CI_OK;
    char *text = ci_malloc((size_t)n_vocab * 16);
    const char **strs = ci_malloc((size_t)n_vocab * sizeof *strs);
    int32_t *types = ci_malloc((size_t)n_vocab * sizeof *types);
    if (!text || !strs || !types) {
        s = ci_err_set(err, CI_ERR_NOMEM, "synth: out of memory for a %d-token vocabulary", n_vocab);
        goto fail;
    }
    for (int i = 0; i < n_vocab; i++) {
        char *p = text + (size_t)i * 16;
        synth_wpm_piece(i, p);
        strs[i] = p;
        types[i] = i == 1 ? 2 : i < SYNTH_WPM_FIXED ? 3 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_vocab);
    gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 4);
    s = gguf_writer_status(w, err);
fail:
    ci_free(text);
    ci_free(strs);
    ci_free(types);
    return s;
}

static enum ci_status set_vocab(struct gguf_writer *w, int n_vocab, struct ci_err *err) {
    enum ci_status s = CI_OK;
    char *text = ci_malloc((size_t)n_vocab * 16);
    const char **strs = ci_malloc((size_t)n_vocab * sizeof *strs);
    float *scores = ci_malloc((size_t)n_vocab * sizeof *scores);
    int32_t *types = ci_malloc((size_t)n_vocab * sizeof *types);
    if (!text || !strs || !scores || !types) {
        s = ci_err_set(err, CI_ERR_NOMEM, "synth: out of memory for a %d-token vocabulary", n_vocab);
        goto fail;
    }
    for (int i = 0; i < n_vocab; i++) {
        char *p = text + (size_t)i * 16;
        synth_vocab_piece(i, p);
        strs[i] = p;
        // Special and byte tokens score 0; the rest descend so earlier (shorter) pieces merge first.
        scores[i] = i < N_FIXED_TOKENS ? 0.0f : -(float)(i - N_FIXED_TOKENS);
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < N_FIXED_TOKENS ? 6 : 1;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n_vocab);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_vocab);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    s = gguf_writer_status(w, err);
fail:
    ci_free(text);
    ci_free(strs);
    ci_free(scores);
    ci_free(types);
    return s;
}

/* ---- weights ---- */

enum init_kind {
    INIT_NORMAL,
    INIT_NORM,
    INIT_BIAS,
    INIT_QK_NORM,
    INIT_ROPE_FREQS,
    INIT_ROPE_LONG,
    INIT_ROPE_SHORT,
    INIT_QKV, // fused Q/K/V: the first q_rows rows at Q_SCALE times the scale
};

struct plan {
    char name[64];
    uint32_t type;
    int n_dims;
    int64_t ne[3]; // ne[2]: experts of a 3-D expert tensor, else 1
    enum init_kind kind;
    float scale;    // std of the normal (INIT_NORMAL), overall factor (INIT_NORM)
    int64_t q_rows; // INIT_QKV
};

/* Irwin-Hall(4) on 16-bit lanes of one xoshiro draw: mean 0, variance 1 (to 1 part in 2^32). */
static inline float fast_normal(struct ci_rng *r) {
    uint64_t u = ci_rng_u64(r);
    int32_t sum = (int32_t)(u & 0xffff) + (int32_t)((u >> 16) & 0xffff) + (int32_t)((u >> 32) & 0xffff) +
                  (int32_t)(u >> 48);
    return (float)(2 * sum - 4 * 65535) * (1.7320508f / 131072.0f);
}

static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ULL ^ seed; // FNV-1a, then a splitmix finalizer
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static void gen_row(struct ci_rng *r, const struct synth_preset *ps, const struct plan *p, int64_t ri,
                    float *row) {
    int64_t n = p->ne[0];
    switch (p->kind) {
    case INIT_ROPE_LONG:
    case INIT_ROPE_SHORT:
        synth_longrope_factors(ps, p->kind == INIT_ROPE_LONG, row);
        return;
    case INIT_QKV: {
        float sc = ri < p->q_rows ? Q_SCALE * p->scale : p->scale;
        for (int64_t i = 0; i < n; i++)
            row[i] = sc * fast_normal(r);
        return;
    }
    case INIT_ROPE_FREQS:
        synth_llama3_rope_freqs(ps, row);
        return;
    case INIT_QK_NORM:
        for (int64_t i = 0; i < n; i++)
            row[i] = p->scale * (1.0f + QK_NORM_JITTER * fast_normal(r));
        return;
    case INIT_NORMAL:
    case INIT_BIAS:
        for (int64_t i = 0; i < n; i++)
            row[i] = p->scale * fast_normal(r);
        return;
    case INIT_NORM:
        for (int64_t i = 0; i < n; i++)
            row[i] = p->scale * (1.0f + NORM_JITTER * fast_normal(r));
        return;
    }
    CI_UNREACHABLE();
}

static void add_plan(struct plan *plans, int *n, const char *name, uint32_t type, int64_t ne0, int64_t ne1,
                     enum init_kind kind, float scale) {
    struct plan *p = &plans[(*n)++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n_dims = ne1 > 1 ? 2 : 1;
    p->ne[0] = ne0;
    p->ne[1] = ne1;
    p->ne[2] = 1;
    p->kind = kind;
    p->scale = scale;
    // Matrices take the requested type when its block divides the row; vectors and the router stay F32.
    const struct ci_type_traits *tt = ci_type_traits(type);
    bool router = strstr(name, "ffn_gate_inp") != NULL, bias = strstr(name, ".bias") != NULL;
    p->type = p->n_dims == 2 && !router && !bias && tt && ne0 % tt->block_size == 0 ? type : CI_TYPE_F32;
}

/* A 3-D expert tensor: n_expert matrices of ne1 rows of ne0. */
static void add_plan_exps(struct plan *plans, int *n, const char *name, uint32_t type, int64_t ne0,
                          int64_t ne1, int64_t n_expert, float scale) {
    add_plan(plans, n, name, type, ne0, ne1, INIT_NORMAL, scale);
    struct plan *p = &plans[*n - 1];
    p->n_dims = 3;
    p->ne[2] = n_expert;
}

/* BERT: the embeddings (token, position, token type) of about unit norm each, LayerNorm weights near 1 and
 * biases ~ N(0, BIAS_STD), Q sharp as in the decoder presets, every projection biased. */
static int build_plan_bert(const struct synth_preset *ps, uint32_t type, struct plan *plans) {
    int n = 0;
    const int64_t d = ps->n_embd, q = (int64_t)preset_head_dim(ps) * ps->n_head, ff = ps->n_ff;
    const float sd = 1.0f / sqrtf((float)d), sff = 1.0f / sqrtf((float)ff);
    char name[64];
    add_plan(plans, &n, "token_embd.weight", type, d, ps->n_vocab, INIT_NORMAL, sd);
    add_plan(plans, &n, "position_embd.weight", type, d, ps->n_ctx, INIT_NORMAL, sd);
    add_plan(plans, &n, "token_types.weight", type, d, 2, INIT_NORMAL, sd);
    add_plan(plans, &n, "token_embd_norm.weight", type, d, 1, INIT_NORM, 1.0f);
    add_plan(plans, &n, "token_embd_norm.bias", type, d, 1, INIT_BIAS, BIAS_STD);
    for (int il = 0; il < ps->n_layer; il++) {
#define LAYER(suffix, ne0, ne1, kind, scale)                                                                 \
    do {                                                                                                     \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                                                \
        add_plan(plans, &n, name, type, ne0, ne1, kind, scale);                                              \
    } while (0)
        LAYER("attn_q.weight", d, q, INIT_NORMAL, Q_SCALE * sd);
        LAYER("attn_q.bias", q, 1, INIT_BIAS, BIAS_STD);
        LAYER("attn_k.weight", d, q, INIT_NORMAL, sd);
        LAYER("attn_k.bias", q, 1, INIT_BIAS, BIAS_STD);
        LAYER("attn_v.weight", d, q, INIT_NORMAL, sd);
        LAYER("attn_v.bias", q, 1, INIT_BIAS, BIAS_STD);
        LAYER("attn_output.weight", q, d, INIT_NORMAL, 1.0f / sqrtf((float)q));
        LAYER("attn_output.bias", d, 1, INIT_BIAS, BIAS_STD);
        LAYER("attn_output_norm.weight", d, 1, INIT_NORM, 1.0f);
        LAYER("attn_output_norm.bias", d, 1, INIT_BIAS, BIAS_STD);
        LAYER("ffn_up.weight", d, ff, INIT_NORMAL, sd);
        LAYER("ffn_up.bias", ff, 1, INIT_BIAS, BIAS_STD);
        LAYER("ffn_down.weight", ff, d, INIT_NORMAL, sff);
        LAYER("ffn_down.bias", d, 1, INIT_BIAS, BIAS_STD);
        LAYER("layer_output_norm.weight", d, 1, INIT_NORM, 1.0f);
        LAYER("layer_output_norm.bias", d, 1, INIT_BIAS, BIAS_STD);
#undef LAYER
    }
    return n;
}

/* rs: the residual scale, a factor on the matrices that write into the residual stream (attn_output and
 * every ffn_down); 1 is the scheme in synth.h. */
static int build_plan(const struct synth_preset *ps, uint32_t type, float rs, struct plan *plans) {
    int n = 0;
    const int64_t d = ps->n_embd, hd = preset_head_dim(ps), q = hd * ps->n_head, kv = hd * ps->n_kv_head,
                  ff = ps->n_ff;
    const float sd = 1.0f / sqrtf((float)d), sff = rs / sqrtf((float)ff), sq = rs / sqrtf((float)q);
    const bool qk_norm = model_arch_info(ps->arch)->qk_norm,
               post_norms = model_arch_info(ps->arch)->post_norms;
    char name[64];
    if (model_arch_info(ps->arch)->encoder)
        return build_plan_bert(ps, type, plans);
    add_plan(plans, &n, "token_embd.weight", type, d, ps->n_vocab, INIT_NORMAL, sd);
    if (ps->llama3_factor > 0.0f)
        add_plan(plans, &n, "rope_freqs.weight", type, hd / 2, 1, INIT_ROPE_FREQS, 1.0f);
    const int64_t rd = ps->rope_dim ? ps->rope_dim : hd;
    if (ps->longrope) {
        add_plan(plans, &n, "rope_factors_long.weight", type, rd / 2, 1, INIT_ROPE_LONG, 1.0f);
        add_plan(plans, &n, "rope_factors_short.weight", type, rd / 2, 1, INIT_ROPE_SHORT, 1.0f);
    }
    const bool fused = model_arch_info(ps->arch)->qkv_fused, ffn_fused = model_arch_info(ps->arch)->ffn_fused;
    for (int il = 0; il < ps->n_layer; il++) {
#define LAYER(suffix, ne0, ne1, kind, scale)                                                                 \
    do {                                                                                                     \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                                                \
        add_plan(plans, &n, name, type, ne0, ne1, kind, scale);                                              \
    } while (0)
        LAYER("attn_norm.weight", d, 1, INIT_NORM, 1.0f);
        if (fused) { // Phi-3: Q, K and V rows in one tensor, Q's at the same scale as attn_q's
            LAYER("attn_qkv.weight", d, q + 2 * kv, INIT_QKV, sd);
            plans[n - 1].q_rows = q;
        } else {
            LAYER("attn_q.weight", d, q, INIT_NORMAL, Q_SCALE * sd);
            if (ps->qkv_bias)
                LAYER("attn_q.bias", q, 1, INIT_BIAS, BIAS_STD);
            LAYER("attn_k.weight", d, kv, INIT_NORMAL, sd);
            if (ps->qkv_bias)
                LAYER("attn_k.bias", kv, 1, INIT_BIAS, BIAS_STD);
            LAYER("attn_v.weight", d, kv, INIT_NORMAL, sd);
            if (ps->qkv_bias)
                LAYER("attn_v.bias", kv, 1, INIT_BIAS, BIAS_STD);
        }
        if (qk_norm) {
            LAYER("attn_q_norm.weight", hd, 1, INIT_QK_NORM, QK_NORM_SCALE);
            LAYER("attn_k_norm.weight", hd, 1, INIT_QK_NORM, QK_NORM_SCALE);
        }
        LAYER("attn_output.weight", q, d, INIT_NORMAL, sq);
        if (model_arch_info(ps->arch)->attn_out_bias)
            LAYER("attn_output.bias", d, 1, INIT_BIAS, BIAS_STD);
        if (model_arch_info(ps->arch)->attn_sinks) // logits of the size of the scores, so they take a share
            LAYER("attn_sinks.weight", ps->n_head, 1, INIT_BIAS, SINK_STD);
        if (post_norms)
            LAYER("post_attention_norm.weight", d, 1, INIT_NORM, 1.0f);
        LAYER(model_arch_info(ps->arch)->ffn_norm_post_attn ? "post_attention_norm.weight"
                                                            : "ffn_norm.weight",
              d, 1, INIT_NORM, 1.0f);
        if (ps->n_expert == 0 && ffn_fused) { // Phi-3: the gate's rows then the up projection's
            LAYER("ffn_up.weight", d, 2 * ff, INIT_NORMAL, sd);
            LAYER("ffn_down.weight", ff, d, INIT_NORMAL, sff);
        } else if (ps->n_expert == 0) {
            LAYER("ffn_gate.weight", d, ff, INIT_NORMAL, sd);
            LAYER("ffn_up.weight", d, ff, INIT_NORMAL, sd);
            LAYER("ffn_down.weight", ff, d, INIT_NORMAL, sff);
        } else {
            const int64_t fe = ps->n_ff_exp ? ps->n_ff_exp : ff, ne = ps->n_expert;
            const float sfe = rs / sqrtf((float)fe);
            LAYER("ffn_gate_inp.weight", d, ne, INIT_NORMAL, SYNTH_ROUTER_STD * sd);
#define EXPS(suffix, ne0, ne1, scale)                                                                        \
    do {                                                                                                     \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                                                \
        add_plan_exps(plans, &n, name, type, ne0, ne1, ne, scale);                                           \
    } while (0)
            EXPS("ffn_gate_exps.weight", d, fe, sd);
            EXPS("ffn_up_exps.weight", d, fe, sd);
            EXPS("ffn_down_exps.weight", fe, d, sfe);
#undef EXPS
            if (model_arch_info(ps->arch)->moe_bias) { // gpt-oss: one row of biases per expert
                LAYER("ffn_gate_inp.bias", ne, 1, INIT_BIAS, 1.0f);
                LAYER("ffn_gate_exps.bias", fe, ne, INIT_BIAS, BIAS_STD);
                LAYER("ffn_up_exps.bias", fe, ne, INIT_BIAS, BIAS_STD);
                LAYER("ffn_down_exps.bias", d, ne, INIT_BIAS, BIAS_STD);
            }
            if (ps->n_ff_shexp > 0) {
                const int64_t fs = ps->n_ff_shexp;
                LAYER("ffn_gate_inp_shexp.weight", d, 1, INIT_NORMAL, sd);
                LAYER("ffn_gate_shexp.weight", d, fs, INIT_NORMAL, sd);
                LAYER("ffn_up_shexp.weight", d, fs, INIT_NORMAL, sd);
                LAYER("ffn_down_shexp.weight", fs, d, INIT_NORMAL, rs / sqrtf((float)fs));
            }
        }
        if (post_norms)
            LAYER("post_ffw_norm.weight", d, 1, INIT_NORM, 1.0f);
#undef LAYER
    }
    // Tied: logits = token_embd . (g * norm(h)) with unit-norm rows, so g carries the logit scale.
    add_plan(plans, &n, "output_norm.weight", type, d, 1, INIT_NORM, ps->tied ? SYNTH_LOGIT_STD : 1.0f);
    if (!ps->tied)
        add_plan(plans, &n, "output.weight", type, d, ps->n_vocab, INIT_NORMAL, SYNTH_LOGIT_STD * sd);
    return n;
}

/* A llama.cpp preset: the F32 plan's tensors re-typed by llama-quantize's per-tensor rules. */
static enum ci_status apply_preset(const struct synth_preset *ps, const struct quant_preset *qp,
                                   struct plan *plans, int n, struct ci_err *err) {
    struct quant_rules r;
    struct quant_tensor *qt = ci_calloc((size_t)n, sizeof *qt);
    if (!qt)
        return ci_err_set(err, CI_ERR_NOMEM, "synth: out of memory");
    quant_rules_init(&r, qp, ps->n_layer, ps->n_head, ps->n_kv_head, ps->n_expert);
    for (int i = 0; i < n; i++)
        qt[i] =
            (struct quant_tensor){plans[i].name, plans[i].n_dims, plans[i].ne[0], CI_TYPE_F32, CI_TYPE_F32};
    enum ci_status s = quant_rules_choose(&r, qt, n, err);
    for (int i = 0; i < n && s == CI_OK; i++)
        plans[i].type = qt[i].type;
    ci_free(qt);
    return s;
}

static void set_hparams(struct gguf_writer *w, const struct synth_preset *ps, int file_type, bool quantized) {
    const char *arch = model_arch_name(ps->arch);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer_set_str(w, "general.architecture", arch);
    char name[96];
    snprintf(name, sizeof name, "cinfer-synth-%s", ps->name);
    // llama.cpp's vocabulary loader expects Phi-3's "<|endoftext|>" token when general.name contains "phi3"
    // or "phi-3", which the synthetic vocabulary lacks: "phi3" is written "phi_3" in the name.
    char *phi = strstr(name, "phi3");
    if (phi) {
        memmove(phi + 5, phi + 4, strlen(phi + 4) + 1);
        memcpy(phi, "phi_3", 5);
    }
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)file_type);
    if (quantized)
        gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)ps->n_vocab);
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)ps->n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)ps->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)ps->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)ps->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)ps->n_head);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)ps->n_kv_head);
    if (ps->pooling_type > 0)
        gguf_writer_set_u32(w, KEY("pooling_type"), (uint32_t)ps->pooling_type);
    if (model_arch_info(ps->arch)->encoder) { // BERT: LayerNorm, bidirectional, no RoPE
        gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), ps->rms_eps);
        gguf_writer_set_bool(w, KEY("attention.causal"), false);
        return;
    }
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), ps->rms_eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), ps->rope_base);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"),
                        (uint32_t)(ps->rope_dim ? ps->rope_dim : preset_head_dim(ps)));
    if (ps->yarn_factor > 0.0f) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), ps->yarn_factor);
    }
    if (ps->rope_orig_ctx)
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)ps->rope_orig_ctx);
    if (ps->longrope) // llama.cpp's converter: the attention factor, and no scaling type
        gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), synth_longrope_attn_factor(ps));
    if (ps->head_dim) {
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)ps->head_dim);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)ps->head_dim);
    }
    if (ps->sliding_window)
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)ps->sliding_window);
    if (ps->attn_softcap > 0.0f)
        gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), ps->attn_softcap);
    if (ps->final_softcap > 0.0f)
        gguf_writer_set_f32(w, KEY("final_logit_softcapping"), ps->final_softcap);
    if (ps->n_expert) {
        gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)ps->n_expert);
        gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)ps->n_expert_used);
        if (ps->n_ff_exp)
            gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)ps->n_ff_exp);
        if (ps->n_ff_shexp)
            gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)ps->n_ff_shexp);
    }
#undef KEY
}

/* qp: a llama.cpp preset's mixture; NULL: every matrix in type (synth_write). */
static enum ci_status write_model(const char *preset, const struct quant_preset *qp, uint32_t type,
                                  uint64_t seed, float residual_scale, const char *path, struct ci_err *err) {
    enum ci_status s = CI_OK;
    struct gguf_writer *w = NULL;
    struct plan *plans = NULL;
    uint8_t *data = NULL;
    float *row = NULL;
    FILE *f = NULL;
    const struct synth_preset *ps = synth_preset_find(preset);
    if (!ps) {
        char known[256] = "";
        for (int i = 0; i < N_PRESETS; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     presets[i].name);
        return ci_err_set(err, CI_ERR_INVALID, "synth: unknown preset '%s' (known: %s)", preset, known);
    }
    if (!qp && synth_file_type(type) < 0)
        return ci_err_set(err, CI_ERR_INVALID, "synth: type %s not supported (f32, f16, bf16, q8_0, q4_0)",
                          ci_type_name(type));

    int max_tensors = 8 + (16 + EXPS_PER_LAYER) * ps->n_layer;
    plans = ci_calloc((size_t)max_tensors, sizeof *plans);
    if (!plans || !(w = gguf_writer_create())) {
        s = ci_err_set(err, CI_ERR_NOMEM, "synth: out of memory");
        goto fail;
    }
    int n_plans = build_plan(ps, qp ? CI_TYPE_F32 : type, residual_scale, plans);
    CI_ASSERT(n_plans <= max_tensors);
    if (qp && (s = apply_preset(ps, qp, plans, n_plans, err)) != CI_OK)
        goto fail;
    bool quantized = false;
    for (int i = 0; i < n_plans; i++)
        quantized |= ci_type_traits(plans[i].type)->block_size > 1;
    set_hparams(w, ps, qp ? qp->ftype : synth_file_type(type), quantized);
    if ((s = (model_arch_info(ps->arch)->encoder ? set_vocab_wpm : set_vocab)(w, ps->n_vocab, err)) != CI_OK)
        goto fail;
    uint64_t max_bytes = 0;
    int64_t max_row = 0;
    for (int i = 0; i < n_plans; i++) {
        gguf_writer_add_tensor(w, plans[i].name, plans[i].type, plans[i].n_dims, plans[i].ne, NULL);
        if ((s = gguf_writer_status(w, err)) != CI_OK)
            goto fail;
        uint64_t nb = gguf_writer_tensor_nbytes(w, i);
        max_bytes = nb > max_bytes ? nb : max_bytes;
        max_row = plans[i].ne[0] > max_row ? plans[i].ne[0] : max_row;
    }
    // One tensor's bytes at a time (the largest is token_embd, output or an expert tensor).
    if (max_bytes > SIZE_MAX || !(data = ci_malloc((size_t)max_bytes)) ||
        !(row = ci_malloc((size_t)max_row * sizeof *row))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "synth: out of memory for a %llu-byte tensor",
                       (unsigned long long)max_bytes);
        goto fail;
    }
    if (!(f = fopen(path, "wb"))) {
        s = ci_err_set(err, CI_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    if ((s = gguf_writer_write_header(w, f, err)) != CI_OK)
        goto fail;
    for (int i = 0; i < n_plans; i++) {
        const struct plan *p = &plans[i];
        uint64_t rb = 0;
        bool row_ok = ci_row_bytes(p->type, (uint64_t)p->ne[0], &rb);
        CI_ASSERT(row_ok);
        struct ci_rng rng;
        ci_rng_seed(&rng, tensor_seed(seed, p->name));
        for (int64_t r = 0; r < p->ne[1] * p->ne[2]; r++) {
            gen_row(&rng, ps, p, r, row);
            ci_quantize_row(p->type, row, data + (uint64_t)r * rb, p->ne[0]);
        }
        if ((s = gguf_writer_write_tensor_data(w, f, i, data, err)) != CI_OK)
            goto fail;
    }
    if (fflush(f) != 0 || ferror(f)) {
        s = ci_err_set(err, CI_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        goto fail;
    }
fail:
    if (f && fclose(f) != 0 && s == CI_OK)
        s = ci_err_set(err, CI_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (f && s != CI_OK)
        remove(path);
    ci_free(row);
    ci_free(data);
    ci_free(plans);
    gguf_writer_free(w);
    return s;
}

enum ci_status synth_write(const char *preset, uint32_t type, uint64_t seed, const char *path,
                           struct ci_err *err) {
    return write_model(preset, NULL, type, seed, 1.0f, path, err);
}

enum ci_status synth_write_preset(const char *preset, const char *quant, uint64_t seed, const char *path,
                                  struct ci_err *err) {
    return synth_write_scaled(preset, quant, seed, 1.0f, path, err);
}

enum ci_status synth_write_scaled(const char *preset, const char *type, uint64_t seed, float residual_scale,
                                  const char *path, struct ci_err *err) {
    if (!(residual_scale > 0.0f && residual_scale <= SYNTH_RESIDUAL_SCALE_MAX))
        return ci_err_set(err, CI_ERR_INVALID, "synth: residual scale %g is not in (0, %g]",
                          (double)residual_scale, (double)SYNTH_RESIDUAL_SCALE_MAX);
    const struct synth_preset *ps = synth_preset_find(preset);
    if (ps && residual_scale != 1.0f && model_arch_info(ps->arch)->encoder)
        return ci_err_set(err, CI_ERR_INVALID, "synth: a residual scale applies to decoder presets, not '%s'",
                          preset);
    uint32_t t;
    if (synth_type_parse(type, &t))
        return write_model(preset, NULL, t, seed, residual_scale, path, err);
    const struct quant_preset *qp = quant_preset_find(type);
    if (!qp)
        return ci_err_set(err, CI_ERR_INVALID, "synth: unknown type '%s' (accepted: %s)", type,
                          quant_preset_names());
    return write_model(preset, qp, CI_TYPE_F32, seed, residual_scale, path, err);
}
