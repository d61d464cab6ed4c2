/* The kernel API used by model/: pure functions on raw pointers and dimensions, no allocation.
 * Matmul and attention split their work across a ci_threadpool by output rows (or by token × KV head);
 * no reduction is ever split across threads, so every output element is computed by one thread in a fixed
 * order and results do not depend on the thread count or on what else is in the batch. */
#ifndef CINFER_KERNELS_KERNELS_H
#define CINFER_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

struct ci_threadpool;

/* Selects SIMD implementations for this CPU (idempotent; called by ci_matmul's users at load time).
 * CINFER_NO_SIMD=1 in the environment forces the portable scalar kernels, CINFER_NO_AVX512=1 stops at AVX2.
 */
void ci_kernels_init(void);
/* "avx512+vnni", "avx2+fma+f16c" or "scalar": what ci_kernels_init picked. */
const char *ci_kernels_isa(void);

/* Kernel parameters that depend on the CPU model, not only on its instruction sets: a table by CPUID vendor
 * and family (dispatch.c), each row with the measurement behind it; `cinfer bench hw` reports them. */
struct ci_kernel_tune {
    char cpu[48]; // "AMD family 25 model 17", "Intel family 6 model 143", "unknown"
    // F16/BF16 matmuls over more tokens than this widen each row block to F32 once and run the F32 tiles
    // on the copy; up to it, the tiles convert in registers (INT32_MAX: always).  Same bits either way.
    int f16_widen_min_tokens;
    // Decode tiles (AVX-512 packed, AVX2 packed and AVX2 row tiles) prefetch the weights ahead into L2 (T1)
    // rather than L1 (T0).  Same bits either way.
    bool decode_prefetch_l2;
    // The decode attention walk over several KV heads prefetches every line of the next chunk's K and V rows
    // of each head into L2, rather than the first two lines of each head's run.  Same bits either way.
    bool attn_prefetch_chunks;
    const char *why; // which table row ("table row: AMD family 19h, Zen 3 and Zen 4") or env override
};
/* The row for this CPU; CINFER_F16_WIDEN_MIN=N (N >= 0) overrides f16_widen_min_tokens and
 * CINFER_DECODE_PREFETCH=l1|l2 decode_prefetch_l2 and CINFER_ATTN_PREFETCH=chunks|lines attn_prefetch_chunks, for
 * measuring. */
const struct ci_kernel_tune *ci_kernels_tune(void);

/* dot(row of n elements of type, x) in float; n a multiple of the type's block size.  Bit for bit what
 * ci_matmul computes for that row and token: for quantized rows x is first quantized to int8 blocks. */
float ci_dot(uint32_t type, const void *row, const float *x, int64_t n);

/* Workspace bytes ci_matmul needs for n_tok rows of n_in activations against weights of this type (the Q8
 * activations of quantized weights; 0 for float types; SIZE_MAX if the size overflows). */
size_t ci_matmul_work_bytes(uint32_t type, int64_t n_in, int n_tok);

/* y[t][o] = sum_i x[t][i] * W[o][i] for t < n_tok, o < w->ne[1]; W is w->ne[1] rows of w->ne[0] elements.
 * x: [n_tok][w->ne[0]], y: [n_tok][w->ne[1]].  work: ci_matmul_work_bytes() bytes, 64-byte aligned. */
void ci_matmul(struct ci_threadpool *tp, const struct ci_tensor *w, const float *x, int n_tok, float *y,
               void *work);

/* Packing weights once at load (as llama.cpp's CPU repack buffers do): where the selected kernels have a
 * layout of their own for a matrix (the AVX-512 VNNI table for Q8_0, Q4_0, Q4_K and Q6_K: 16 rows interleaved so
 * one vector instruction serves 16 rows), ci_pack_bytes is its size (about the matrix's own; 0: none) and ci_pack
 * writes it to dst (64-byte aligned); with w->packed pointing at it, ci_matmul reads the packed rows instead,
 * with the same bits.  A packing is valid only for the kernel table selected when it was made. */
size_t ci_pack_bytes(const struct ci_tensor *w);
void ci_pack(const struct ci_tensor *w, void *dst);
/* Part of ci_pack: the rows [r0, r1) of the packing (r0 and r1 multiples of ci_pack_rows(), r1 at most the
 * rows of whole groups), written where ci_pack writes them in dst; the parts together give ci_pack's bytes. */
int ci_pack_rows(void);
void ci_pack_part(const struct ci_tensor *w, void *dst, int64_t r0, int64_t r1);

/* ci_matmul of several matrices over the same input in one pool dispatch (decode's Q/K/V, gate/up): y[i] =
 * x · w[i]^T, each bit for bit what ci_matmul computes; the activations are quantized once per form.  Every
 * w[i]->ne[0] is the same; the types may differ.  work: ci_matmul_group_work_bytes() bytes, 64-byte aligned. */
#define CI_MATMUL_GROUP_MAX 16 // a one-token MoE step groups its experts' gates and ups (forward.c)
void ci_matmul_group(struct ci_threadpool *tp, int n_w, const struct ci_tensor *const *w, const float *x,
                     int n_tok, float *const *y, void *work);
size_t ci_matmul_group_work_bytes(int n_w, const struct ci_tensor *const *w, int n_tok);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i] (out may alias x). */
void ci_rmsnorm(float *out, const float *x, const float *weight, int n, float eps);
/* LayerNorm: out[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * weight[i] + bias[i] (population variance; out
 * may alias x; bias may be NULL). */
void ci_layernorm(float *out, const float *x, const float *weight, const float *bias, int n, float eps);

/* Rotary embedding in place on one token's heads x: [n_head][head_dim], for the first rope_dim dimensions
 * of each head.  Normal (llama/GPT-J) pairing rotates (x[2i], x[2i+1]); NeoX pairing (qwen2) rotates
 * (x[i], x[i + rope_dim/2]).  theta_i = pos * base^(-2i/rope_dim). */
void ci_rope(float *x, int n_head, int head_dim, int rope_dim, int pos, float base, bool neox);
/* ci_rope with scaled frequencies, as ggml_rope_ext's freq_factors and freq_scale:
 * theta_i = pos * pos_scale * base^(-2i/rope_dim) / freq_factors[i].  freq_factors: [rope_dim/2] (llama3
 * scaling's per-pair divisors) or NULL for all 1; pos_scale: 1 / linear scaling factor, or 1.  With NULL and
 * 1 the result is ci_rope's, bit for bit. */
void ci_rope_ext(float *x, int n_head, int head_dim, int rope_dim, int pos, float base, bool neox,
                 const float *freq_factors, float pos_scale);
/* The general rotary embedding, as ggml_rope_ext computes it (YaRN, frequency factors, magnitude scaling).
 * Per pair i: theta_extrap = pos * base^(-2i/rope_dim) / freq_factors[i], theta_interp = freq_scale *
 * theta_extrap; with ext_factor 0 the angle is theta_interp, else the YaRN mix
 * theta = theta_interp * (1 - m) + theta_extrap * m, m = ext_factor * (1 - clamp((i - corr_low) /
 * max(0.001, corr_high - corr_low), 0, 1)).  cos and sin are multiplied by mscale (the attention factor). */
#define CI_ROPE_MAX_PAIRS 256 // rope_dim / 2 at most (head dims up to 512)
struct ci_rope_params {
    int rope_dim; // dimensions rotated per head (even, <= head_dim)
    float base;
    bool neox;
    const float *freq_factors; // [rope_dim/2] divisors (llama3 rope_freqs, Phi-3 LongRoPE), or NULL
    float freq_scale;          // 1 / scaling factor (linear, YaRN); 1: none
    float ext_factor;          // YaRN extrapolation mix: 1 for YaRN, 0 otherwise
    float corr_low, corr_high; // YaRN ramp bounds in pair indices (ci_rope_yarn_corr_dims)
    float mscale;              // multiplier of cos and sin; 1: none
};
void ci_rope_apply(float *x, int n_head, int head_dim, int pos, const struct ci_rope_params *p);
/* ci_rope_apply in two steps, for a position's heads in many layers: the angles' cos and sin (times mscale)
 * of position pos, cs[2 i] and cs[2 i + 1] for pair i < rope_dim / 2, then the rotation by them; together
 * the same bits as ci_rope_apply. */
void ci_rope_cos_sin(int pos, const struct ci_rope_params *p, double *cs);
void ci_rope_rotate(float *x, int n_head, int head_dim, const struct ci_rope_params *p, const double *cs);
/* YaRN's correction range as ggml computes it (in float): the pair indices whose wavelength is
 * n_ctx_orig / beta_fast (low, floored, >= 0) and n_ctx_orig / beta_slow (high, ceiled, <= rope_dim - 1). */
void ci_rope_yarn_corr_dims(int rope_dim, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2]);

/* gate[i] = silu(gate[i]) * up[i]  (SwiGLU). */
void ci_silu_mul(float *gate, const float *up, int n);
/* gate[i] = gelu(gate[i]) * up[i] with GeLU's tanh form (ggml_gelu, Gemma's GeGLU):
 * gelu(x) = x / 2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  Scalar, the same bits in every table. */
void ci_gelu_mul(float *gate, const float *up, int n);
/* x[i] = gelu(x[i]), the same tanh form (ggml_gelu: BERT's FFN). */
void ci_gelu(float *x, int n);

/* gpt-oss's clamped SwiGLU (ggml_swiglu_oai): x = min(gate, limit), y = clamp(up, -limit, limit),
 * gate[i] = x sigmoid(alpha x) (y + 1).  Scalar, the same bits in every table. */
void ci_swiglu_oai_mul(float *gate, const float *up, int n, float alpha, float limit);

/* In-place softmax over n values. */
void ci_softmax(float *x, int n);

/* Index of the largest value (first one on ties). */
int ci_argmax(const float *x, int n);

/* Paged KV layout of one layer: k and v are each [n_blocks][n_kv_head][block_size] rows of head_dim elements
 * of the cache's element type, so one KV head's slots in a block are contiguous.  Token position p of a
 * sequence lives in block table[p / block_size], slot p % block_size.  Element types (llama.cpp's -ctk/-ctv):
 * CI_TYPE_F32 (4 bytes an element), CI_TYPE_F16 (IEEE half, 2) and CI_TYPE_Q8_0 (ggml Q8_0 blocks of 32
 * along head_dim: an fp16 scale d = max|x| / 127 and 32 int8, 34 bytes per 32 elements; head_dim must be a
 * multiple of 32).  row_bytes = ci_kv_row_bytes(type, head_dim). */
struct ci_kv_layer {
    void *k;
    void *v;
    uint32_t type;    // enum ci_type: F32, F16 or Q8_0
    size_t row_bytes; // one slot of one KV head: head_dim elements of type
    int block_size;
    int n_kv_head;
    int head_dim;
};

/* Byte offset of (block, KV head, slot) in k or v. */
static inline size_t ci_kv_offset(const struct ci_kv_layer *l, int32_t blk, int kv_head, int slot) {
    return (((size_t)blk * (size_t)l->n_kv_head + (size_t)kv_head) * (size_t)l->block_size + (size_t)slot) *
           l->row_bytes;
}

/* Bytes of one KV row of head_dim elements of type; 0 when type is not a KV cache type (F32, F16, Q8_0) or
 * head_dim is not positive or (Q8_0) not a multiple of 32. */
size_t ci_kv_row_bytes(uint32_t type, int head_dim);
/* Stores one row of head_dim floats as the KV type (F16: round to nearest even; Q8_0: ggml's quantizer). */
void ci_kv_store_row(uint32_t type, const float *x, void *dst, int head_dim);

struct ci_attn_seq {
    const int32_t *block_table; // [n_blocks]
    int n_blocks;
};

/* Causal attention for every token of a batch over its own sequence's KV (positions 0..pos inclusive, or the
 * last `window` of them, whose K/V must already be written).  GQA: query head h reads KV head h / (n_head / n_kv_head).  Online softmax,
 * one pass over the blocks. */
struct ci_attn_args {
    int n_tokens;
    const float *q;     // [n_tokens][n_head][head_dim]
    const int32_t *pos; // [n_tokens]
    const int32_t *seq; // [n_tokens] index into seqs
    const struct ci_attn_seq *seqs;
    const struct ci_kv_layer *kv;
    int n_head;
    float scale; // usually 1/sqrt(head_dim)
    float *out;  // [n_tokens][n_head][head_dim]
    // Optional features (zero / NULL: off).
    int window;    // > 0: a query at position p sees only keys at positions in (p - window, p] (llama.cpp's
                   // LLAMA_SWA_TYPE_STANDARD: masked when p - p_key >= window)
    float softcap; // > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap) (Gemma 2)
    const float *sinks; // [n_head] or NULL: a per-head logit that joins the softmax denominator and
                        // contributes no value (gpt-oss attention sinks)
};
void ci_attention_paged(struct ci_threadpool *tp, const struct ci_attn_args *a);

#endif
