/* Synthetic GGUF models with real shapes (`cinfer synth`): random weights from a fixed seed, a synthetic
 * SentencePiece-style vocabulary, written as GGUF v3 that llama.cpp loads.  Presets mirror the shapes of
 * real models (tiny test models up to TinyLlama 1.1B).  The file is generated and written tensor by tensor,
 * so memory stays at one tensor's bytes; the same preset, type and seed give a byte-identical file.
 *
 * Weight scheme (chosen so greedy decoding is decided by clear margins and stays varied over 32+ tokens):
 *   token_embd      ~ N(0, 1/sqrt(n_embd))       (rows of about unit norm)
 *   attn_q          ~ N(0, 4/sqrt(n_embd))       (sharp attention: keeps outputs dependent on the context)
 *   other matrices  ~ N(0, 1/sqrt(n_in))          (n_in = ne[0], the row length)
 *   output          ~ N(0, SYNTH_LOGIT_STD/sqrt(n_embd)) when untied
 *   norm weights    ~ 1 + 0.1 N(0, 1); output_norm additionally x SYNTH_LOGIT_STD when the head is tied
 *   q/k/v biases    ~ N(0, 0.1)  (qwen2 presets)
 *   q/k norms       ~ 2 (1 + 0.5 N(0, 1))  (qwen3: after the per-head norm, this keeps attention sharp)
 *   rope_freqs      Meta's llama3 frequency divisors (llama3 presets), not random
 *   post norms      ~ 1 + 0.1 N(0, 1)  (gemma: post_attention_norm, post_ffw_norm)
 *   ffn_gate_inp    ~ N(0, SYNTH_ROUTER_STD/sqrt(n_embd))  (MoE router: logits of std ~4, decisive top-k)
 *   ffn_*_exps      as the dense ffn_* matrices, each expert its own rows of the 3-D tensor
 *   ffn_gate_inp_shexp ~ N(0, 1/sqrt(n_embd))  (qwen2moe's shared-expert gate, sigmoid of ~N(0, 1))
 * so the logits have a standard deviation of about SYNTH_LOGIT_STD.  Normals are Irwin-Hall sums of four
 * 16-bit uniforms from xoshiro256** (fast, bounded at +-3.46 sigma); each tensor's stream is seeded from
 * (seed, tensor name), independent of the order tensors are generated in.
 *
 * Matrices (token_embd included) are stored in the requested type; norm weights, biases and the MoE router
 * (as llama.cpp's converter and llama-quantize keep it) stay F32, and so does any matrix whose row length the
 * type's block size does not divide. */
#ifndef CINFER_MODEL_SYNTH_H
#define CINFER_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "model/config.h"

#define SYNTH_LOGIT_STD  6.0f
#define SYNTH_ROUTER_STD 4.0f

struct synth_preset {
    const char *name;
    enum model_arch arch;
    int n_embd, n_layer, n_head, n_kv_head, n_ff, n_vocab, n_ctx;
    float rope_base, rms_eps;
    bool tied;     // no output.weight: the head is token_embd
    bool qkv_bias; // attn_{q,k,v}.bias tensors (qwen2)
    int head_dim;  // 0: n_embd / n_head; else written as attention.key_length / value_length
    // Llama 3 RoPE scaling: rope_freqs.weight computed as Meta's llama3 scaling (and llama.cpp's converter)
    // does from factor, low/high frequency factors and the original context; factor 0: none.
    float llama3_factor, llama3_low, llama3_high;
    int llama3_orig_ctx;
    // Written when nonzero: <arch>.attention.sliding_window, .attn_logit_softcapping, .final_logit_softcapping
    // (the arch's defaults apply where absent: gemma2 4096 / 50 / 30).
    int sliding_window;
    float attn_softcap, final_softcap;
    // Mixture of experts (n_expert 0: dense FFN): ffn_gate_inp router ~ N(0, SYNTH_ROUTER_STD/sqrt(n_embd))
    // so routing is decisive, experts as the dense matrices.  n_ff_exp 0: n_ff (written as
    // expert_feed_forward_length when set); n_ff_shexp > 0: qwen2moe's shared expert and its gate.
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int rope_dim;         // 0: head_dim; else rope.dimension_count (partial rotary)
    float yarn_factor;    // > 0: rope.scaling.type yarn with this factor and original context rope_orig_ctx
    int rope_orig_ctx;    // rope.scaling.original_context_length (YaRN, LongRoPE)
    bool longrope;        // Phi-3 LongRoPE: rope_factors_{long,short}.weight and rope.scaling.attn_factor
    float longrope_long;  // LongRoPE factors rise geometrically from 1 to this (long) ...
    float longrope_short; // ... and to this (short) over the rotated pairs
    int pooling_type;     // > 0: <arch>.pooling_type (llama.cpp's: 1 mean, 2 cls, 3 last)
};

int synth_n_presets(void);
const struct synth_preset *synth_preset(int i);
const struct synth_preset *synth_preset_find(const char *name); // NULL if unknown
/* The hyper-parameters a loader should read back from a preset's file. */
void synth_preset_config(const struct synth_preset *p, struct model_config *out);
/* A llama3 preset's rope_freqs.weight: [head_dim/2] frequency divisors. */
void synth_llama3_rope_freqs(const struct synth_preset *p, float *out);

/* A LongRoPE preset's rope_factors_long.weight (long) or rope_factors_short.weight: [rope_dim/2]. */
void synth_longrope_factors(const struct synth_preset *p, bool long_factors, float *out);
/* A LongRoPE preset's rope.scaling.attn_factor as llama.cpp's Phi-3 converter derives it:
 * sqrt(1 + ln(n_ctx / orig) / ln(orig)) (1 when n_ctx <= orig). */
float synth_longrope_attn_factor(const struct synth_preset *p);

/* "f32", "f16", "bf16", "q8_0", "q4_0" (case-insensitive) -> enum ci_type; false for anything else. */
bool synth_type_parse(const char *name, uint32_t *type);
/* llama.cpp's general.file_type for a file whose matrices are of `type` (0 F32, 1 F16, 2 Q4_0, 7 Q8_0,
 * 32 BF16); -1 for a type without one here. */
int synth_file_type(uint32_t type);

/* Writes the preset's model with matrices of `type` (F32, F16, BF16, Q8_0 or Q4_0) to path.  A partial file
 * is removed on failure.  CI_ERR_INVALID for an unknown preset or type, CI_ERR_IO/CI_ERR_NOMEM otherwise. */
enum ci_status synth_write(const char *preset, uint32_t type, uint64_t seed, const char *path,
                           struct ci_err *err);

/* Writes the preset's model as `llama-quantize OUT TYPE` of its F32 file would: quant names one of llama.cpp's
 * presets (quant_preset_find: "Q4_K_M", "Q6_K", "IQ4_XS", "F16", ...), each tensor typed by its rules
 * (model/quant_rules.h).  synth_write's five types keep their uniform typing (every matrix in the type, F32
 * where its block does not divide the rows), which cinfer's kernels all run; the presets may give types that
 * only dequantize here. */
enum ci_status synth_write_preset(const char *preset, const char *quant, uint64_t seed, const char *path,
                                  struct ci_err *err);

/* synth_write (type one of its five names) or synth_write_preset (any other name) with the matrices that
 * write into the residual stream (attn_output, ffn_down and the experts' and shared expert's down
 * projections) scaled by residual_scale, in (0, SYNTH_RESIDUAL_SCALE_MAX]; 1 writes the same bytes as they do.
 * Far below 1 the token embedding dominates the residual stream, so the logits have wide margins and a
 * quantization of the file predicts its greedy tokens as a trained model's own quantization does: the
 * high-acceptance target and draft pair that speculative decoding is measured with (bench/spec.sh).
 * Decoder presets only. */
enum ci_status synth_write_scaled(const char *preset, const char *type, uint64_t seed, float residual_scale,
                                  const char *path, struct ci_err *err);
#define SYNTH_RESIDUAL_SCALE_MAX 16.0f

/* The synthetic vocabulary of n_vocab (>= 260) tokens: "<unk>", "<s>", "</s>", "<0x00>".."<0xFF>", then
 * "\u2581", the printable ASCII characters, and "\u2581"-prefixed and bare lowercase letter strings in order
 * of length (all unique).  Token i's text is written NUL-terminated into buf (at least 16 bytes); returns its
 * length.  Exposed for tests. */
int synth_vocab_piece(int i, char *buf);
/* Token i of the synthetic WordPiece vocabulary of encoder presets (tiny-bert): [PAD] [UNK] [CLS] [SEP]
 * [MASK], then for each printable ASCII character c "▁c" (a word start) and "c" (a continuation), then
 * lowercase letter strings of two letters and more, each as "▁s" then "s".  Returns the length. */
int synth_wpm_piece(int i, char *buf);
#define SYNTH_WPM_FIXED 5 // the special tokens: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4

#endif
