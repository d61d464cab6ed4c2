/* Model hyper-parameters, from GGUF keys (<arch>.embedding_length, ...) or a llama2.c header, and the table
 * of architectures: what each one computes differently is a row of data (model_arch_info), not a branch on
 * its name. */
#ifndef CINFER_MODEL_CONFIG_H
#define CINFER_MODEL_CONFIG_H

#include <stdbool.h>

#include "core/status.h"

struct gguf;
struct llama2c;

enum model_arch {
    MODEL_ARCH_LLAMA,
    MODEL_ARCH_QWEN2,
    MODEL_ARCH_QWEN3,
    MODEL_ARCH_QWEN2MOE,
    MODEL_ARCH_QWEN3MOE,
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
    // Mixture of experts: softmax router ffn_gate_inp, top-k experts ffn_{gate,up,down}_exps.
    enum model_moe moe;
    bool moe_norm_w; // the top-k router probabilities renormalised to sum 1 (llama, qwen3moe)
    bool
        moe_shared_exp; // plus a shared expert ffn_{gate,up,down}_shexp scaled by sigmoid(ffn_gate_inp_shexp . x)
};

/* How positions are stretched before RoPE (<arch>.rope.scaling.type). */
enum rope_scaling {
    ROPE_SCALING_NONE,   // absent or "none"
    ROPE_SCALING_LINEAR, // "linear": positions divided by rope.scaling.factor
    ROPE_SCALING_LLAMA3, // "llama3": per-pair frequency divisors in rope_freqs.weight (required)
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
    float rope_pos_scale;           // 1 / rope.scaling.factor for linear scaling, else 1
    // Mixture of experts (n_expert 0: a dense FFN of n_ff).
    int n_expert;      // <arch>.expert_count
    int n_expert_used; // <arch>.expert_used_count: experts per token (top-k), 1..n_expert
    int n_ff_exp;      // one expert's FFN length: expert_feed_forward_length, else n_ff (llama) or
                       // n_ff / n_expert_used (qwen2moe, qwen3moe), as llama.cpp
    int n_ff_shexp; // the shared expert's FFN length (qwen2moe): expert_shared_feed_forward_length, else n_ff
    bool moe_norm_w;     // from the arch table
    bool moe_shared_exp; // from the arch table
};

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
/* Fills the per-architecture fields (rope_neox, qkv_bias, qk_norm, moe_norm_w, moe_shared_exp) from the arch
 * table. */
void model_config_set_arch(struct model_config *c, enum model_arch a);
/* Checks ranges and consistency (positive sizes, n_head % n_kv_head == 0, even rope_dim, ...). */
enum ci_status model_config_validate(const struct model_config *c, struct ci_err *err);

#endif
