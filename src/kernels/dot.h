/* Private to kernels/: the per-ISA kernel tables and the runtime selection between them.
 * dot_ref.c holds the portable scalar versions (the ground truth), dot_avx2.c the AVX2/FMA/F16C ones,
 * dot_avx512.c the AVX-512 (+VNNI) ones (attention chunks: attn_avx2.c, attn_avx512.c), and dispatch.c picks
 * a table once at ci_kernels_init.
 *
 * Reduction orders (the invariance contract).  Every output element y[t][o] of ci_matmul is computed by one
 * thread, in an order that depends only on n_in and the selected table, never on the tile it sits in, the
 * thread count or the other tokens of the batch:
 *  - F32/F16/BF16 (float activations): the table's dot order.  Scalar: front to back.  AVX2: ONE 8-lane
 *    accumulator over the row in steps of 8 (lane j sums elements i = j mod 8 with FMA), a fixed horizontal
 *    sum, then the n mod 8 tail added front to back.  AVX-512: one 16-lane accumulator, the last partial step
 *    zero-masked, a fixed horizontal sum.  Register tiles of several rows x tokens give each element its own
 *    accumulator, so a 1x1 and a 3x8 tile produce the same bits.
 *  - Quantized types (activations quantized to int8, see struct ci_act_q8 and struct ci_act_q8k): per weight
 *    block an exact integer dot, then float steps over the blocks in order from acc = 0.  Integer sums are
 *    exact in any order and every float operation is the same scalar operation in every implementation, so
 *    the scalar, AVX2 and AVX-512 tables give the SAME bits for the quantized types.  Per block (dw, mw: the
 *    weight block's scale and min; dx, xs: the activation block's scale and its s (struct ci_act_q8); q_i, x_i: weight and
 *    activation integers):
 *      Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 (32-blocks; q_i signed: q - 8, q - 16, the table value):
 *          acc = fmaf(dw * dx, isum, acc),  isum = sum q_i x_i
 *      Q4_1, Q5_1 (32-blocks, q_i unsigned):
 *          acc = fmaf(dw * dx, isum, acc); acc = fmaf(mw, xs, acc)
 *      Q2_K, Q4_K, Q5_K (256-blocks vs Q8_K, sub-block scales sc_j and mins m_j, q_i unsigned):
 *          acc = fmaf(d * dx, sumi, acc); acc = fmaf(-(dmin * dx), summ, acc),
 *          sumi = sum_j sc_j sum_{i in j} q_i x_i,  summ = sum_j m_j sum_{i in j} x_i (from the bsums)
 *      Q3_K, Q6_K, IQ4_XS (256-blocks, signed sub-block scales sc_j, q_i signed):
 *          acc = fmaf(d * dx, sumi, acc),  sumi = sum_j sc_j sum_{i in j} q_i x_i
 *    The integer sums fit in int32 with room to spare (at most ~1.4e8 for IQ4_XS and Q6_K). */
#ifndef CINFER_KERNELS_DOT_H
#define CINFER_KERNELS_DOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

typedef float (*ci_dot_fn)(const void *row, const float *x, int64_t n);

/* Activations of n_tok tokens quantized for the integer dots: each token's n_in values cut into 32-value
 * blocks; block b of token t has scale d = max|x| / 127 (float) and values q = x / d rounded to the nearest
 * integer (ties to even) as int8, and sum = the sum of those 32 q (the Q4_0 offset correction).
 * Scales and sums are stored token-minor so that 8 consecutive tokens' values are one vector load; the
 * tok_stride - n_tok padding entries repeat token n_tok - 1 (tiles that clamp to the last token read them).
 */
struct ci_act_q8 {
    int8_t *qs;   // [n_tok][n_in]
    float *d;     // [n_in / 32][tok_stride] the block scales, rounded to half precision (as ggml stores them)
    int32_t *sum; // [n_in / 32][tok_stride]
    float *s; // [n_in / 32][tok_stride] ggml's block_q8_1 s: the unrounded scale times sum, in half precision
    int64_t n_in;   // a multiple of 32
    int n_tok;      // tokens quantized
    int tok_stride; // n_tok rounded up to a multiple of 8
};

/* Activations of n_tok tokens for the 256-element super-block types (Q2_K..Q6_K, IQ4_XS: ggml's Q8_K):
 * per token and super-block b a scale d = max|x| / 127 and int8 q = x / d rounded to nearest even, as
 * struct ci_act_q8; bsum[16 b + k] is the sum of the 16 q of group k (the mins' correction).  Token-major. */
struct ci_act_q8k {
    int8_t *qs;    // [n_tok][n_in]
    float *d;      // [n_tok][n_in / 256]
    int16_t *bsum; // [n_tok][n_in / 16]
    int64_t n_in;  // a multiple of 256
    int n_tok;
};

/* Blocks whose max |x| is below this quantize to zero (d = 0): their contribution is below float resolution
 * next to any normal activation, and it keeps 1/d finite (x * (1/d) would overflow to inf for tiny d).
 * Non-finite activations give non-finite or unspecified (but memory-safe) results. */
#define ACT_MIN_AMAX 0x1p-100f

/* One token: x [n_in] -> qs [n_in], d[b * stride], sum[b * stride], s[b * stride] for each block b. */
typedef void (*ci_quant_act_fn)(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, float *s,
                                int64_t stride);
/* One token for the 256-block types: x [n_in] -> qs [n_in], d [n_in / 256], bsum [n_in / 16]. */
typedef void (*ci_quant_act_k_fn)(const float *x, int64_t n_in, int8_t *qs, float *d, int16_t *bsum);

/* One matmul: W [n_out rows of row_bytes] times the activations of n_tok tokens into y [n_tok][n_out]. */
struct ci_mm {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_in, n_out;
    const float *x;              // [n_tok][n_in] float activations (F32/F16/BF16)
    const struct ci_act_q8 *q;   // quantized activations of the 32-block types
    const struct ci_act_q8k *qk; // those of the 256-block types (ci_type_uses_q8k)
    float *y;                    // [n_tok][n_out]
    int n_tok;
    const uint8_t *packed; // the rows packed by the selected table (ci_pack), for mm_packed; else NULL
    const float *xp;       // packed F16/BF16 rows: x in pack16.h's ci_pk_float_act order
};

/* Computes y[t][o] for o in [r0, r1), t in [t0, t1): the kernel picks its register tiles and cache blocking
 * inside that panel; each element follows the reduction order above. */
typedef void (*ci_mm_fn)(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);

/* SwiGLU: gate[i] = gate[i] / (1 + e^-gate[i]) * up[i], with e^t computed the same way in every table (and
 * so the same bits): t clamped to [CI_EXP_LO, CI_EXP_HI], n = rint(t * log2 e), r = t - n ln2 (two fmas,
 * hi/lo), e^r = fma(P(r), r^2, r) + 1 with the degree-5 polynomial P of dot_ref.c (Horner, fmas), times 2^n
 * from the exponent bits.  Within 2 ulp of e^t; past the clamp, silu is g (exactly) or below 1e-36 in size.
 */
typedef void (*ci_silu_fn)(float *gate, const float *up, int64_t n);
#define CI_EXP_LO     (-87.0f)
#define CI_EXP_HI     88.0f
#define CI_EXP_LOG2E  1.44269504088896341f
#define CI_EXP_LN2_HI 0.693359375f // Cephes' split of ln 2: hi has 9 significant bits, n * hi is exact
#define CI_EXP_LN2_LO (-2.12194440e-4f)
#define CI_EXP_P0     1.9875691500e-4f
#define CI_EXP_P1     1.3981999507e-3f
#define CI_EXP_P2     8.3334519073e-3f
#define CI_EXP_P3     4.1665795894e-2f
#define CI_EXP_P4     1.6666665459e-1f
#define CI_EXP_P5     5.0000001201e-1f

/* GeGLU with the tanh-form GeLU (gemma): 0.5 g (1 + tanh(c (g + 0.044715 g^3))) = g / (1 + e^(-2c (g +
 * 0.044715 g^3))), c = sqrt(2 / pi), so it is SwiGLU's sigmoid at another argument: a = g g, b = a *
 * CI_GELU_A, t = fma(b, g, g) * CI_GELU_M2C, then e^t as above and gate = g / (1 + e) * up, in that order in
 * every table (the same bits).  Past the clamp: g (exactly) for large positive g, below 1e-36 for negative. */
#define CI_GELU_A   0.044715f
#define CI_GELU_M2C (-1.5957691216057308f) // -2 sqrt(2 / pi)

/* Online-softmax attention over one chunk of n <= CI_ATTN_CHUNK key/value positions for ng query heads that
 * share a KV head: s_i = scale * q_g . k_i, m' = max(m_g, max_i s_i), c = e^(m_g - m') (0 while m_g = -inf),
 * l_g = l_g * c + sum_i e^(s_i - m'), acc_g = acc_g * c + sum_i e^(s_i - m') v_i, m_g = m'.
 * The caller cuts positions into chunks at fixed multiples of CI_ATTN_CHUNK (never at KV block edges), so
 * the order of operations depends only on the position, not on the block size or the batch.
 * k[i] and v[i] point to rows of hd elements of the KV type of the table entry (struct ci_kv_layer): float
 * (attn_f32) or IEEE half (attn_f16); q8_0 has its own kernels below.  The f16 kernels first widen the chunk's
 * rows to float (exactly: every table converts each element to the same float) and then run the table's f32
 * chunk on them, so their results are bit for bit the table's f32 results on the widened K/V. */
#define CI_ATTN_CHUNK 16
typedef void (*ci_attn_chunk_fn)(const void *const *k, const void *const *v, int n, const float *const *q,
                                 int ng, int hd, float scale, float *m, float *l, float *acc /* [ng][hd] */);

/* The same chunk for nr query rows (several tokens x heads of one sequence, prefill) that share its K/V rows:
 * row r sees the first n[r] (1..CI_ATTN_CHUNK) positions, k[i] / v[i] exist for i < max_r n[r].  The rows
 * are widened (f16, q8_0) once for all of them, and each row gives exactly the bits of the same table's
 * ci_attn_chunk_fn called alone on it: chunk(k, v, n[r], &q[r], 1, hd, scale, &m[r], &l[r], acc + r * hd)
 * (a chunk kernel treats its ng heads independently), whatever the other rows are. */
typedef void (*ci_attn_group_fn)(const void *const *k, const void *const *v, const int *n /* [nr] */, int nr,
                                 const float *const *q /* [nr] */, int hd, float scale, float *m, float *l,
                                 float *acc /* [nr][hd] */);

/* The chunks for a Q8_0 KV cache (K and V rows of hd / 32 ggml Q8_0 blocks), as ggml's CPU flash attention
 * does for -ctk q8_0: the query rows come quantized to Q8_0 too (q[g]: hd / 32 blocks made by
 * ci_quantize_row, the quantizer that stores K), and each score is an integer dot in the canonical order of
 * the quantized matmul (dot.h top): acc = 0; per block b acc = fmaf(dk_b * dq_b, isum_b, acc) with the fp16
 * scales widened and isum_b = sum of the 32 products of int8 codes (exact); s_i = acc * scale.  Every table
 * computes these scores bit for bit alike.  V rows are widened to float (d * q, as ci_dequantize_row), then
 * the softmax and the weighted sum of V run as the table's f32 chunk runs them.  Same roles of n, ng, nr, m,
 * l, acc as above; the grouped form gives each row the bits of the per-row chunk. */
typedef void (*ci_attn_chunk_q8_fn)(const void *const *k, const void *const *v, int n,
                                    const struct ci_block_q8_0 *const *q, int ng, int hd, float scale,
                                    float *m, float *l, float *acc /* [ng][hd] */);
typedef void (*ci_attn_group_q8_fn)(const void *const *k, const void *const *v, const int *n /* [nr] */,
                                    int nr, const struct ci_block_q8_0 *const *q /* [nr] */, int hd,
                                    float scale, float *m, float *l, float *acc /* [nr][hd] */);

/* ci_rmsnorm's row (kernels.h): out = x / rms(x) * weight over n elements. */
typedef void (*ci_rmsnorm_fn)(float *out, const float *x, const float *weight, int64_t n, float eps);

/* A table may leave an entry NULL: the table below it (AVX-512 -> AVX2 -> scalar) serves that entry. */
struct ci_dot_table {
    const char *isa; // "scalar", "avx2+fma+f16c", "avx512+vnni"
    // dot(row, float x) per weight type: the reference order of each type (quantized types quantize x block
    // by block first; the canonical order makes the scalar routine the same bits as every table's matmul)
    ci_dot_fn dot[CI_TYPE_COUNT];
    ci_dot_fn f32_short; // F32 dot for attention (q.k over head_dim): any fixed order, tuned for short n
    ci_attn_chunk_fn attn_f32; // attention chunk per KV element type (attn_*.c, dot_ref.c)
    ci_attn_chunk_fn attn_f16;
    ci_attn_chunk_q8_fn attn_q8_0;
    ci_attn_group_fn attn_grp_f32; // the chunk for several query rows at once, per KV element type
    ci_attn_group_fn attn_grp_f16;
    ci_attn_group_q8_fn attn_grp_q8_0;
    ci_quant_act_fn quant_act;
    ci_quant_act_k_fn quant_act_k;
    ci_mm_fn mm[CI_TYPE_COUNT]; // per weight type
    // Weights packed once at load into a layout of this table's (ci_pack): its size (0: none for this type and
    // shape), the packing of row groups [g0, g1), and the matmul that reads it (struct ci_mm.packed).  Only
    // the table that packed may read the packing: none of these entries is inherited from the table below.
    size_t (*pack_bytes)(uint32_t type, int64_t n_in, int64_t n_out);
    void (*pack)(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                 uint8_t *dst);
    ci_mm_fn mm_packed[CI_TYPE_COUNT];
    int float_residues; // R of its packed F16/BF16 layout (pack16.h ci_pk_float_bytes), 0: none
    ci_silu_fn silu_mul;
    ci_silu_fn gelu_mul; // GeGLU, as CI_GELU_A's comment says
    // float -> IEEE half, nearest even, as ci_fp32_to_fp16 (the f16 KV cache's stores)
    void (*f32_to_f16)(const float *x, uint16_t *h, int64_t n);
    // ci_rmsnorm in vectors, the same bits (norm.c's loop is the reference; NULL: the table below's)
    ci_rmsnorm_fn rmsnorm;
};

/* Longest head_dim ci_attention_paged supports (its per-thread accumulators live on the stack). */
#define CI_ATTN_MAX_HEAD_DIM 256

/* ci_matmul cuts row ranges at multiples of this: the most rows one register tile (or the AVX-512 repacked
 * quantized panel) spans. */
#define CI_MM_ROW_ALIGN 16

const struct ci_dot_table *ci_dot_ref_table(void);
/* NULL when the SIMD versions were not compiled in; only call the routines after a CPU probe said yes.
 * The AVX-512 table uses the AVX2 one for small quantized batches: it is only selected when both exist. */
const struct ci_dot_table *ci_dot_avx2_table(void);
/* The AVX2 table's matmul of K-quant, Q8_0 and Q4_0 rows packed in pack16.h's layout (kpack_avx2.c). */
void ci_avx2_mm_kpacked(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);
/* The AVX-512 and AVX2 tables' matmuls of F16 and BF16 rows packed in pack16.h's float layout, with 16 and 8
 * residues (fpack_avx512.c, fpack_avx2.c), and the packing both tables do (fpack_avx2.c: ci_pk_float_rows'
 * bytes by 16-bit transposes). */
void ci_avx512_mm_f16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);
void ci_avx512_mm_bf16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);
void ci_avx2_mm_f16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);
void ci_avx2_mm_bf16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);
void ci_avx2_pk_float_rows(int residues, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0,
                           int64_t g1, uint8_t *dst);
/* A table's packing (its .pack, with the residues of its float layout): F16/BF16 by those transposes (a CPU
 * with AVX-512 has AVX2), the other types by pack16.c's ci_pk_rows. */
void ci_avx2_pk_rows(int float_residues, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in,
                     int64_t g0, int64_t g1, uint8_t *dst);
const struct ci_dot_table *ci_dot_avx512_table(void);
/* Tables this CPU can run, best first (scalar last); returns how many were written (at most 3). */
int ci_kernels_tables(const struct ci_dot_table **out);

/* The selected table (runs the CPU probe on first use). */
const struct ci_dot_table *ci_kernels_table(void);
/* The routine of the selected table for a supported type (CI_ASSERTs the type). */
ci_dot_fn ci_dot_select(uint32_t type);
/* Table t's entry, or that of the first table below it that has one. */
ci_mm_fn ci_mm_select(const struct ci_dot_table *t, uint32_t type);
ci_quant_act_k_fn ci_quant_act_k_select(const struct ci_dot_table *t);
/* The selected table's float -> half row conversion (bit for bit ci_fp32_to_fp16 on each element). */
void ci_f32_to_f16_row(const float *x, uint16_t *h, int64_t n);
/* The selected table's rmsnorm, or the first below it that has one; NULL: norm.c's loop. */
ci_rmsnorm_fn ci_rmsnorm_select(void);
/* Tests: true forces the scalar table, false restores what the CPU probe (and the environment) chose. */
void ci_kernels_force_scalar(bool on);
/* Tests: runs everything on table t (one of ci_kernels_tables()); NULL restores the probed choice. */
void ci_kernels_force_table(const struct ci_dot_table *t);
/* Tests: F16/BF16 matmuls widen above min_tokens tokens (ci_kernel_tune); negative restores the CPU's row. */
void ci_kernels_force_f16_widen(int min_tokens);
/* Tests: the decode tiles prefetch into L2 (1) or L1 (0) (ci_kernel_tune); negative restores the row. */
void ci_kernels_force_decode_prefetch(int l2);
/* Tests: the attention walk prefetches whole next chunks (1) or two lines a head (0) (ci_kernel_tune);
 * negative restores the row. */
void ci_kernels_force_attn_prefetch(int chunks);

/* Scalar building blocks shared by the tables (dot_ref.c, qblock_ref.c): the canonical quantized block dots.
 * ci_ref_qblock adds weight block w of a quantized type to acc as the canonical order above says: xq are the
 * block's activation integers, dx their scale, xs their s (32-blocks), bsum their 16 group sums
 * (256-blocks). */
float ci_ref_qblock(uint32_t type, const uint8_t *w, const int8_t *xq, float dx, float xs,
                    const int16_t *bsum, float acc);
void ci_ref_quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, float *s,
                      int64_t stride);
/* The activation quantizers' rounding: nearest even, saturated to int8 (out of range or NaN: -128). */
int8_t ci_ref_to_int8(float v);
void ci_ref_quant_act_k(const float *x, int64_t n_in, int8_t *qs, float *d, int16_t *bsum);
/* The scalar attention chunks (dot_ref.c) and the SIMD ones (attn_avx2.c, attn_avx512.c: defined only where
 * their tables are compiled in; call them only after the CPU probe said yes). */
void ci_ref_attn_f32(const void *const *k, const void *const *v, int n, const float *const *q, int ng, int hd,
                     float scale, float *m, float *l, float *acc);
void ci_ref_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng, int hd,
                     float scale, float *m, float *l, float *acc);
void ci_ref_attn_q8_0(const void *const *k, const void *const *v, int n, const struct ci_block_q8_0 *const *q,
                      int ng, int hd, float scale, float *m, float *l, float *acc);
void ci_avx2_attn_f32(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc);
void ci_avx2_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc);
void ci_avx2_attn_q8_0(const void *const *k, const void *const *v, int n,
                       const struct ci_block_q8_0 *const *q, int ng, int hd, float scale, float *m, float *l,
                       float *acc);
void ci_avx512_attn_f32(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                        int hd, float scale, float *m, float *l, float *acc);
void ci_avx512_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                        int hd, float scale, float *m, float *l, float *acc);
void ci_avx512_attn_q8_0(const void *const *k, const void *const *v, int n,
                         const struct ci_block_q8_0 *const *q, int ng, int hd, float scale, float *m,
                         float *l, float *acc);
/* The grouped chunks (same files). */
void ci_ref_attn_grp_f32(const void *const *k, const void *const *v, const int *n, int nr,
                         const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_ref_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                         const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_ref_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                          const struct ci_block_q8_0 *const *q, int hd, float scale, float *m, float *l,
                          float *acc);
void ci_avx2_attn_grp_f32(const void *const *k, const void *const *v, const int *n, int nr,
                          const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_avx2_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                          const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_avx2_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                           const struct ci_block_q8_0 *const *q, int hd, float scale, float *m, float *l,
                           float *acc);
void ci_avx512_attn_grp_f32(const void *const *k, const void *const *v, const int *n, int nr,
                            const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_avx512_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                            const float *const *q, int hd, float scale, float *m, float *l, float *acc);
void ci_avx512_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                             const struct ci_block_q8_0 *const *q, int hd, float scale, float *m, float *l,
                             float *acc);

#endif
