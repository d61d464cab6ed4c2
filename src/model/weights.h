/* Binds tensor names (GGUF naming) to the model's weights and checks every shape and type against the
 * config.  All tensors are views into the mapped file; nothing is copied. */
#ifndef CINFER_MODEL_WEIGHTS_H
#define CINFER_MODEL_WEIGHTS_H

#include "core/status.h"
#include "kernels/quant.h"
#include "model/config.h"

/* A tensor whose data is NULL is absent (biases, Q/K norms where the architecture has none).  Holds only
 * struct ci_tensor members: model_weights_check_all_used walks it as an array of them. */
struct layer_weights {
    struct ci_tensor attn_norm;  // [n_embd] F32
    struct ci_tensor wq;         // [n_head*head_dim][n_embd]   (ne = {n_embd, n_head*head_dim})
    struct ci_tensor wk;         // [n_kv_head*head_dim][n_embd]
    struct ci_tensor wv;         // [n_kv_head*head_dim][n_embd]
    struct ci_tensor bq, bk, bv; // qwen2 biases, F32
    struct ci_tensor q_norm;     // [head_dim] F32: qwen3's per-head RMSNorm of Q before RoPE
    struct ci_tensor k_norm;     // [head_dim] F32: the same for K
    struct ci_tensor wo;         // [n_embd][n_head*head_dim]
    struct ci_tensor ffn_norm;   // [n_embd] F32
    struct ci_tensor w_gate;     // [n_ff][n_embd]
    struct ci_tensor w_up;       // [n_ff][n_embd]; [2*n_ff][n_embd] when ffn_fused (gate rows, then up)
    struct ci_tensor w_down;     // [n_embd][n_ff]
    struct ci_tensor wqkv;       // [q_dim + 2*kv_dim][n_embd]: Phi-3's fused Q, K, V rows (wq/wk/wv absent)
    struct ci_tensor post_attn_norm; // [n_embd] F32: Gemma's RMSNorm of the attention output (post_norms)
    struct ci_tensor post_ffw_norm;  // [n_embd] F32: the same for the FFN output
    // Mixture of experts (config n_expert > 0; w_gate / w_up / w_down are then absent).  The 3-D expert
    // tensors are n_expert matrices stored one after another: expert e's [rows][cols] starts at byte
    // e * rows * row_bytes (model_expert_view).
    struct ci_tensor ffn_gate_inp;       // router [n_expert][n_embd]
    struct ci_tensor ffn_gate_exps;      // [n_expert][n_ff_exp][n_embd]  (ne = {n_embd, n_ff_exp, n_expert})
    struct ci_tensor ffn_up_exps;        // [n_expert][n_ff_exp][n_embd]
    struct ci_tensor ffn_down_exps;      // [n_expert][n_embd][n_ff_exp]
    struct ci_tensor ffn_gate_inp_shexp; // [n_embd] F32: the shared expert's gate (qwen2moe)
    struct ci_tensor ffn_gate_shexp;     // [n_ff_shexp][n_embd]
    struct ci_tensor ffn_up_shexp;       // [n_ff_shexp][n_embd]
    struct ci_tensor ffn_down_shexp;     // [n_embd][n_ff_shexp]
    // gpt-oss (F32): the attention output's bias, per-head sink logits, the router's and the experts' biases.
    struct ci_tensor bo;              // [n_embd]
    struct ci_tensor sinks;           // [n_head]
    struct ci_tensor ffn_gate_inp_b;  // [n_expert]
    struct ci_tensor ffn_gate_exps_b; // [n_expert][n_ff_exp]
    struct ci_tensor ffn_up_exps_b;   // [n_expert][n_ff_exp]
    struct ci_tensor ffn_down_exps_b; // [n_expert][n_embd]
    // BERT (F32): the FFN's biases and the post-norm LayerNorms' weights and biases.
    struct ci_tensor b_up;             // [n_ff]
    struct ci_tensor b_down;           // [n_embd]
    struct ci_tensor attn_out_norm;    // [n_embd] after the attention residual
    struct ci_tensor attn_out_norm_b;  // [n_embd]
    struct ci_tensor layer_out_norm;   // [n_embd] after the FFN residual
    struct ci_tensor layer_out_norm_b; // [n_embd]
};

struct model_weights {
    struct ci_tensor tok_embd;    // [n_vocab][n_embd]; a tensor-parallel rank's slice of rows (model/shard.h)
    int64_t tok_embd_v0;          // the vocabulary id of tok_embd's first row (0 unless sliced)
    struct ci_tensor output_norm; // [n_embd] F32
    struct ci_tensor output;      // [n_vocab][n_embd]; equals tok_embd when the head is tied
    struct ci_tensor rope_freqs;  // [rope_dim/2] F32 RoPE frequency divisors (llama3 scaling), or absent
    struct ci_tensor rope_long;   // [rope_dim/2] F32 LongRoPE divisors for contexts above rope_orig_ctx
    struct ci_tensor rope_short;  // [rope_dim/2] F32 LongRoPE divisors for contexts up to rope_orig_ctx
    // BERT: absolute position and token type embeddings, and the LayerNorm of their sum.
    struct ci_tensor pos_embd;    // [n_ctx_train][n_embd]
    struct ci_tensor type_embd;   // [n_token_types][n_embd] (row 0 is added), or absent
    struct ci_tensor tok_norm;    // [n_embd] F32
    struct ci_tensor tok_norm_b;  // [n_embd] F32
    struct layer_weights *layers; // [n_layer], owned
};

/* Looks up a tensor by name: returns NULL if absent.  Implemented by the file format (GGUF or llama2.c). */
typedef const struct ci_tensor *(*weights_lookup_fn)(const void *src, const char *name);

enum ci_status model_weights_bind(struct model_weights *w, const struct model_config *c,
                                  weights_lookup_fn lookup, const void *src, struct ci_err *err);
void model_weights_deinit(struct model_weights *w);

/* Expert e of a bound 3-D expert tensor as a 2-D matrix (a view into the same data) that ci_matmul runs.
 * Expert e starts at e * nbytes / ne[2]; where the stack is packed (model/pack.c), its packing at
 * e * model_expert_pack_stride(exps) from exps->packed. */
struct ci_tensor model_expert_view(const struct ci_tensor *exps, int e);
/* Bytes from one expert's packing to the next: one expert's ci_pack_bytes, rounded up to 64 (0: not packable). */
size_t model_expert_pack_stride(const struct ci_tensor *exps);

/* Tensor i of a file's n tensors, for model_weights_check_all_used. */
typedef const struct ci_tensor *(*weights_tensor_at_fn)(const void *src, int64_t i);

/* Every tensor of the file must have been bound by model_weights_bind: a tensor the architecture does not
 * consume would otherwise be silently ignored (a different model computed).  CI_ERR_UNSUPPORTED naming the
 * first such tensor. */
enum ci_status model_weights_check_all_used(const struct model_weights *w, const struct model_config *c,
                                            weights_tensor_at_fn tensor_at, const void *src, int64_t n,
                                            struct ci_err *err);

#endif
