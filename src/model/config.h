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

enum model_arch { MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3, MODEL_ARCH_PHI3, MODEL_ARCH_COUNT };

/* What an architecture's layer computes beyond the Llama block (RMSNorm, RoPE, GQA attention, SwiGLU). */
struct model_arch_info {
    const char *name;  // general.architecture
    bool rope_neox;    // rotate (x[i], x[i + rope_dim/2]) rather than adjacent pairs
    bool qkv_bias;     // blk.N.attn_{q,k,v}.bias are required
    bool qk_norm;      // blk.N.attn_{q,k}_norm.weight [head_dim]: per-head RMSNorm of Q and K before RoPE
    bool rope_freqs;   // rope_freqs.weight [rope_dim/2] (llama3 frequency divisors) may be present
    bool tied_allowed; // output.weight may be absent (the head is token_embd)
    bool qkv_fused;    // blk.N.attn_qkv.weight [n_embd, q_dim + 2*kv_dim] may replace attn_{q,k,v}.weight
    bool ffn_fused;    // blk.N.ffn_up.weight is [n_embd, 2*n_ff]: gate rows then up rows; no ffn_gate
    bool longrope;     // rope_factors_{long,short}.weight [rope_dim/2] (Phi-3 LongRoPE) may be present
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
};

/* The kernel's RoPE parameters for this config: the scaling, YaRN's correction range and the magnitude
 * scaling (rope_attn_factor, times 1 + 0.1 ln(factor) for YaRN, as llama.cpp applies them).  freq_factors is
 * left NULL: those tensors live in model_weights and the forward pass picks them. */
void model_config_rope_params(const struct model_config *c, struct ci_rope_params *p);

const char *model_arch_name(enum model_arch a);
const struct model_arch_info *model_arch_info(enum model_arch a);
const char *rope_scaling_name(enum rope_scaling s);
/* Reads and validates the hyper-parameters of a GGUF model (n_vocab comes from the token_embd tensor).
 * Keys that change the computation in ways cinfer does not implement (sliding-window attention, logit
 * soft-capping, experts, YaRN/LongRoPE scaling) are refused with CI_ERR_UNSUPPORTED naming the key. */
enum ci_status model_config_from_gguf(struct model_config *c, const struct gguf *g, struct ci_err *err);
/* A llama2.c checkpoint's hyper-parameters: arch llama, rope_base 10000, rms_eps 1e-5, rope_dim = head_dim,
 * adjacent-pair rope, n_ctx_train = seq_len (the header itself is validated by llama2c_open). */
void model_config_from_llama2c(struct model_config *c, const struct llama2c *l);
/* Fills the per-architecture fields (rope_neox, qkv_bias, qk_norm) from the arch table. */
void model_config_set_arch(struct model_config *c, enum model_arch a);
/* Checks ranges and consistency (positive sizes, n_head % n_kv_head == 0, even rope_dim, ...). */
enum ci_status model_config_validate(const struct model_config *c, struct ci_err *err);

#endif
