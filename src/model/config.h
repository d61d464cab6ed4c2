/* Model hyper-parameters, from GGUF keys (<arch>.embedding_length, ...) or a llama2.c header, and the table
 * of architectures: what each one computes differently is a row of data (model_arch_info), not a branch on
 * its name. */
#ifndef CINFER_MODEL_CONFIG_H
#define CINFER_MODEL_CONFIG_H

#include <stdbool.h>

#include "core/status.h"
#include "kernels/kernels.h"

struct gguf;
struct llama2c;

enum model_arch {
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_GEMMA2,
    MODEL_ARCH_GEMMA3,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_QWEN3MOE,
    MODEL_ARCH_PHI3,
    MODEL_ARCH_GPT_OSS,
    MODEL_ARCH_BERT,
    MODEL_ARCH_COUNT
};

/* Whether an architecture's FFN may or must be a mixture of experts (<arch>.expert_count). */
enum model_moe { MOE_NONE, MOE_OPTIONAL, MOE_REQUIRED };

/* What an architecture's layer computes beyond the Llama block (RMSNorm, RoPE, GQA attention, SwiGLU). */
struct model_arch_info {
    const char *name;  // general.architecture
    bool rope_neox;    // rotate (x[i], x[i + rope_dim/2]) rather than adjacent pairs
    bool qkv_bias;     // blk.N.attn_{q,k,v}.bias are required
    bool qk_norm;      // blk.N.attn_{q,k}_norm.weight [head_dim]: per-head RMSNorm of Q and K before RoPE
    bool rope_freqs;   // rope_freqs.weight [rope_dim/2] (llama3 frequency divisors) may be present
    bool tied_allowed; // output.weight may be absent (the head is token_embd)
    // Sliding-window attention and the Gemma block (llama.cpp's semantics, src/models/gemma2.cpp, gemma3.cpp).
    bool tied_required;          // no output.weight at all (gemma2: the head is always token_embd)
    bool embd_scale;             // token embeddings multiplied by sqrt(n_embd)
    bool gelu_ffn;               // FFN gelu_tanh(gate) * up instead of SwiGLU
    bool post_norms;             // blk.N.post_attention_norm / post_ffw_norm.weight [n_embd]: RMSNorm of each
                                 // sub-block's output before its residual add
    bool swa;                    // <arch>.attention.sliding_window is read (else refused)
    int swa_period;              // default attention.sliding_window_pattern (0: every layer is local)
    int swa_default;             // window when the key is absent (gemma2: 4096); 0: no window
    float rope_base_swa_default; // local layers' RoPE base without rope.freq_base_swa; 0: the global base
    bool swa_rope_unscaled;      // local layers ignore the linear rope scaling (gemma3)
    bool attn_softcap;           // attention logits soft-capped (attn_logit_softcapping, default 50)
    bool final_softcap;          // final_logit_softcapping is read (default final_softcap_default)
    float final_softcap_default;
    int attn_scale_embd_layers; // at this block_count the attention scale is 1/sqrt(n_embd / n_head), not
                                // 1/sqrt(head_dim) (llama.cpp's Gemma 27B rule); 0: never
    // Mixture of experts: softmax router ffn_gate_inp, top-k experts ffn_{gate,up,down}_exps.
    enum model_moe moe;
    bool moe_norm_w; // the top-k router probabilities renormalised to sum 1 (llama, qwen3moe)
    bool
        moe_shared_exp; // plus a shared expert ffn_{gate,up,down}_shexp scaled by sigmoid(ffn_gate_inp_shexp . x)
    bool qkv_fused;     // blk.N.attn_qkv.weight [n_embd, q_dim + 2*kv_dim] may replace attn_{q,k,v}.weight
    bool ffn_fused;     // blk.N.ffn_up.weight is [n_embd, 2*n_ff]: gate rows then up rows; no ffn_gate
    bool longrope;      // rope_factors_{long,short}.weight [rope_dim/2] (Phi-3 LongRoPE) may be present
    bool
        swa_not_applied; // <arch>.attention.sliding_window is read and warned about, not applied (phi3: llama.cpp
                         // disables it because the converters write it inconsistently, e.g. 262144)
    // gpt-oss (llama.cpp's openai-moe graph): attention output bias and per-head sinks, the FFN's input norm
    // stored as post_attention_norm, router and expert biases, top-k over the router logits then a softmax
    // of the k chosen (SOFTMAX_WEIGHT gating), and the clamped SwiGLU (swiglu_oai).
    bool attn_out_bias;      // blk.N.attn_output.bias [n_embd] required
    bool attn_sinks;         // blk.N.attn_sinks.weight [n_head] required
    bool ffn_norm_post_attn; // the FFN's input RMSNorm is named blk.N.post_attention_norm.weight
    bool moe_bias;           // ffn_gate_inp.bias [n_expert], ffn_{gate,up}_exps.bias [n_ff_exp, n_expert],
                             // ffn_down_exps.bias [n_embd, n_expert] required
    bool moe_softmax_weight; // experts chosen by their router logits, weighted by the softmax of the chosen
    bool swiglu_oai;         // expert activation min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1)
    // BERT encoders (llama.cpp's src/models/bert.cpp): token + absolute position (position_embd) + token type 0
    // (token_types) embeddings, LayerNorm (token_embd_norm); per layer biased Q/K/V and output projections,
    // bidirectional attention without RoPE, residual then LayerNorm (attn_output_norm), FFN up (bias) → GeLU
    // → down (bias), residual then LayerNorm (layer_output_norm).  No head: embeddings only.
    bool encoder;
};

/* How positions are stretched before RoPE (<arch>.rope.scaling.type). */
enum rope_scaling {
    ROPE_SCALING_NONE,     // absent or "none"
    ROPE_SCALING_LINEAR,   // "linear": positions divided by rope.scaling.factor
    ROPE_SCALING_LLAMA3,   // "llama3": per-pair frequency divisors in rope_freqs.weight (required)
    ROPE_SCALING_YARN,     // "yarn": YaRN interpolation (rope.scaling.factor, original_context_length, betas)
    ROPE_SCALING_LONGROPE, // Phi-3: rope_factors_{long,short}.weight divisors ("longrope", or implied by them)
};

struct model_config {
    enum model_arch arch;
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_kv_head;
    int head_dim; // <arch>.attention.key_length (= value_length), else n_embd / n_head
    int n_ff;
    int n_ctx_train; // context length the model was trained for
    int rope_dim;    // dimensions rotated per head (<= head_dim)
    float rope_base;
    float rms_eps;
    bool rope_neox;                 // qwen2/qwen3: rotate (x[i], x[i + rope_dim/2]); llama: adjacent pairs
    bool qkv_bias;                  // from the arch table
    bool qk_norm;                   // from the arch table
    enum rope_scaling rope_scaling; // the file's declared type; rope_freqs.weight is applied whenever present
    float rope_pos_scale;           // 1 / rope.scaling.factor for linear and YaRN scaling, else 1
    int rope_orig_ctx;      // rope.scaling.original_context_length (else n_ctx_train): YaRN's and LongRoPE's
    float rope_attn_factor; // rope.scaling.attn_factor (1 when absent): multiplies RoPE's cos and sin
    float yarn_beta_fast;   // rope.scaling.yarn_beta_fast (32)
    float yarn_beta_slow;   // rope.scaling.yarn_beta_slow (1)
    bool qkv_fused;         // this file's layers have blk.N.attn_qkv.weight
    bool ffn_fused;         // from the arch table
    // Sliding window, soft-capping and the Gemma block (0 / false: off; see struct model_arch_info).
    int sliding_window;       // > 0: local layers attend to the last sliding_window positions
    int swa_period;           // local layers: il % swa_period < swa_period - 1; 0: every layer
    float rope_base_swa;      // RoPE base of the local layers
    float rope_pos_scale_swa; // RoPE position scale of the local layers
    float attn_softcap;       // > 0: attention scores capped as cap * tanh(s / cap)
    float final_softcap;      // > 0: logits capped the same way
    float attn_scale;         // softmax scale of q.k (1/sqrt(head_dim) unless the arch says otherwise)
    bool embd_scale, gelu_ffn, post_norms; // from the arch table
    // Mixture of experts (n_expert 0: a dense FFN of n_ff).
    int n_expert;      // <arch>.expert_count
    int n_expert_used; // <arch>.expert_used_count: experts per token (top-k), 1..n_expert
    int n_ff_exp;      // one expert's FFN length: expert_feed_forward_length, else n_ff (llama) or
                       // n_ff / n_expert_used (qwen2moe, qwen3moe), as llama.cpp
    int n_ff_shexp; // the shared expert's FFN length (qwen2moe): expert_shared_feed_forward_length, else n_ff
    bool moe_norm_w;                     // from the arch table
    bool moe_shared_exp;                 // from the arch table
    bool moe_softmax_weight, swiglu_oai; // from the arch table
    bool encoder; // from the arch table: bidirectional, embeddings only (rms_eps is the LayerNorm epsilon)
    // Pipeline parallelism (model/shard.h): this rank holds layers [layer0, layer0 + n_layer) of a model of
    // n_layer_all (0: not cut, n_layer is the whole model's).
    int layer0, n_layer_all;
};

/* The whole model's layer count (a pipeline stage's n_layer is its own). */
static inline int model_n_layer_all(const struct model_config *c) {
    return c->n_layer_all ? c->n_layer_all : c->n_layer;
}

/* True when layer il (of the whole model) uses the sliding window (llama.cpp's set_swa_pattern without
 * dense_first). */
static inline bool model_layer_swa(const struct model_config *c, int il) {
    return c->sliding_window > 0 && (c->swa_period == 0 || il % c->swa_period < c->swa_period - 1);
}

/* The kernel's RoPE parameters for this config: the scaling, YaRN's correction range and the magnitude
 * scaling (rope_attn_factor, times 1 + 0.1 ln(factor) for YaRN, as llama.cpp applies them).  freq_factors is
 * left NULL: those tensors live in model_weights and the forward pass picks them. */
void model_config_rope_params(const struct model_config *c, struct ci_rope_params *p);

const char *model_arch_name(enum model_arch a);
const struct model_arch_info *model_arch_info(enum model_arch a);
const char *rope_scaling_name(enum rope_scaling s);
/* Reads and validates the hyper-parameters of a GGUF model (n_vocab comes from the token_embd tensor).
 * Keys that change the computation in ways cinfer does not implement (sliding-window attention, logit
 * soft-capping, experts where the architecture has none, YaRN/LongRoPE scaling) are refused with CI_ERR_UNSUPPORTED naming the key. */
enum ci_status model_config_from_gguf(struct model_config *c, const struct gguf *g, struct ci_err *err);
/* A llama2.c checkpoint's hyper-parameters: arch llama, rope_base 10000, rms_eps 1e-5, rope_dim = head_dim,
 * adjacent-pair rope, n_ctx_train = seq_len (the header itself is validated by llama2c_open). */
void model_config_from_llama2c(struct model_config *c, const struct llama2c *l);
/* Fills the per-architecture fields (rope_neox, qkv_bias, qk_norm, embd_scale, gelu_ffn, post_norms,
 * moe_norm_w, moe_shared_exp) from the arch table; the values read from keys (window, soft-caps, scales) get
 * the table's defaults. */
void model_config_set_arch(struct model_config *c, enum model_arch a);
/* Checks ranges and consistency (positive sizes, n_head % n_kv_head == 0, even rope_dim, ...). */
enum ci_status model_config_validate(const struct model_config *c, struct ci_err *err);

#endif
