/* llama.cpp's quantization presets (LLAMA_FTYPE_*) and its choice of each tensor's type within one
 * (src/llama-quant.cpp: llama_tensor_get_type, without an importance matrix or overrides), so `cinfer
 * quantize` and `cinfer synth` write the same mixture of types as `llama-quantize`:
 *   - only 2-D (or 3-D) tensors whose name ends in "weight" are quantized; norms, biases, 1-D tensors and a
 *     few small special tensors keep their type;
 *   - output.weight (and token_embd.weight when the head is tied) goes to Q6_K in every quantized preset
 *     but Q8_0 (Q8_0 when the base type's block does not divide its rows);
 *   - attn_v / ffn_down / attn_output / attn_qkv get more bits in the _M/_L presets (attn_v and ffn_down in
 *     the "use_more_bits" layers: the first and last eighth and every third in between), and attn_v with
 *     grouped-query attention (n_head / n_head_kv >= 4) in Q2_K and IQ4_*;
 *   - a type whose block does not divide the row length falls back (IQ4_XS -> IQ4_NL, Q2_K/Q3_K -> Q4_0,
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and to F16 when even that block does not divide it.
 * Usage: quant_rules_init, then quant_rules_choose over the file's tensors (or by hand: quant_rules_count for
 * every tensor name, then quant_rules_type for every tensor in llama.cpp's visiting order, which the layer
 * counters advance in). */
#ifndef CINFER_MODEL_QUANT_RULES_H
#define CINFER_MODEL_QUANT_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct quant_preset {
    const char *name; // "Q4_K_M", as llama-quantize names it
    int ftype;        // llama.cpp's LLAMA_FTYPE_* (general.file_type)
    uint32_t base;    // enum ci_type of the bulk of the weights
};

int quant_n_presets(void);
const struct quant_preset *quant_preset(int i);
/* By name, case-insensitive ("q4_k_m"; the aliases Q3_K, Q4_K, Q5_K name the _M presets); NULL if unknown. */
const struct quant_preset *quant_preset_find(const char *name);
/* "F32, F16, BF16, Q8_0, ..." (static). */
const char *quant_preset_names(void);
/* True for the presets whose base type is quantized (the per-tensor rules apply). */
bool quant_preset_quantized(const struct quant_preset *p);

struct quant_rules {
    const struct quant_preset *p;
    bool pure;          // every quantized tensor in the base type (llama-quantize --pure): fallbacks only
    int n_layer, n_gqa; // block_count, n_head / n_head_kv
    int n_expert;       // expert_count (0: dense)
    bool is_70b;        // llama.cpp's LLM_TYPE_70B (80 layers with GQA): attn_v gets Q5_K
    bool tied;          // no output.weight: token_embd is also the head
    int n_attn_v;       // attn_v-like tensors in the file
    int i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up; // counters while choosing
    int n_fallback;                                 // tensors whose row length forced a fallback type
};

void quant_rules_init(struct quant_rules *r, const struct quant_preset *p, int n_layer, int n_head,
                      int n_head_kv, int n_expert);
/* First pass: every tensor name of the file. */
void quant_rules_count(struct quant_rules *r, const char *name);
/* Second pass, in file order: the type tensor name (n_dims dims, row length ne0, stored as src_type) is to
 * be written in. */
uint32_t quant_rules_type(struct quant_rules *r, const char *name, int n_dims, int64_t ne0,
                          uint32_t src_type);

/* One tensor for quant_rules_choose: name, dimensions (trailing 1s not counted, as ggml_n_dims), row length
 * and stored type in; the chosen type out. */
struct quant_tensor {
    const char *name;
    int n_dims;
    int64_t ne0;
    uint32_t src_type;
    uint32_t type; // out
};

/* Both passes over a whole file's tensors: the counts, then the choices in llama-quantize's visiting order
 * (by layer "blk.N.", tensors outside the layers first, then by name), whatever order t[] is in.  r comes from
 * quant_rules_init.  CI_ERR_NOMEM only. */
enum ci_status quant_rules_choose(struct quant_rules *r, struct quant_tensor *t, int64_t n,
                                  struct ci_err *err);

#endif
