/* Portable scalar kernels: the ground truth every SIMD version is tested against.
 * Float types accumulate in float, front to back.  Quantized types follow the canonical order of dot.h:
 * activations quantized to int8 blocks, then qblock_ref.c's block steps block after block; the SIMD tables
 * reproduce these bits exactly. */
#include "kernels/dot.h"

#include <math.h>
#include <string.h>

#include "kernels/quant.h"

static float dot_f32(const void *row, const float *x, int64_t n) {
    const float *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

static float dot_f16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += ci_fp16_to_fp32(w[i]) * x[i];
    return sum;
}

static float dot_bf16(const void *row, const float *x, int64_t n) {
    const uint16_t *w = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += ci_bf16_to_fp32(w[i]) * x[i];
    return sum;
}

/* What cvtps2dq then two saturating packs do: round to nearest even, out of range or NaN -> INT32_MIN, then
 * saturate to int8.  Written out so the scalar quantizers have no undefined conversions and match SIMD. */
int8_t ci_ref_to_int8(float v) {
    int32_t i = v >= -2147483648.0f && v < 2147483648.0f ? (int32_t)nearbyintf(v) : INT32_MIN;
    return (int8_t)(i < -128 ? -128 : i > 127 ? 127 : i);
}

/* ggml's quantize_row_q8_0 as llama.cpp's x86 CPU backend runs it: q = round(x * 127 / max|x|) with the
 * unrounded scale, and the block's scale d = max|x| / 127 kept in half precision (block_q8_0 stores it as
 * fp16), so every product with the block uses the rounded d.  Keeping d in float32 instead moved sharp
 * synthetic MoE models by up to a quarter of their logit range away from llama.cpp. */
void ci_ref_quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, float *s,
                      int64_t stride) {
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax < ACT_MIN_AMAX ? 0.0f : amax / 127.0f;
        float id = db != 0.0f ? 127.0f / amax : 0.0f;
        int32_t qsum = 0;
        for (int j = 0; j < 32; j++) {
            int8_t q = ci_ref_to_int8(xb[j] * id);
            qs[b * 32 + j] = q;
            qsum += q;
        }
        d[b * stride] = ci_fp16_to_fp32(ci_fp32_to_fp16(db));
        sum[b * stride] = qsum;
        s[b * stride] = ci_fp16_to_fp32(ci_fp32_to_fp16(db * (float)qsum));
    }
}

/* dot(row, x) for quantized rows: x is quantized block by block on the stack (blocks are independent, so
 * this is exactly what ci_matmul's whole-row quantization gives), then the canonical block steps. */
static float dot_quant(uint32_t type, const void *row, const float *x, int64_t n) {
    const struct ci_type_traits *tt = ci_type_traits(type);
    const uint8_t *w = row;
    float acc = 0.0f;
    if (ci_type_uses_q8k(type)) {
        for (int64_t b = 0; b < n / 256; b++) {
            int8_t qs[256];
            int16_t bsum[16];
            float d;
            ci_ref_quant_act_k(x + b * 256, 256, qs, &d, bsum);
            acc = ci_ref_qblock(type, w + (size_t)b * tt->type_size, qs, d, 0, bsum, acc);
        }
        return acc;
    }
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t qs[32];
        float d;
        int32_t sum;
        float s;
        ci_ref_quant_act(x + b * 32, 32, qs, &d, &sum, &s, 1);
        acc = ci_ref_qblock(type, w + (size_t)b * tt->type_size, qs, d, s, NULL, acc);
    }
    return acc;
}

#define DOT_QUANT(name, type)                                                                                \
    static float dot_##name(const void *row, const float *x, int64_t n) {                                    \
        return dot_quant(type, row, x, n);                                                                   \
    }
DOT_QUANT(q8_0, CI_TYPE_Q8_0)
DOT_QUANT(q4_0, CI_TYPE_Q4_0)
DOT_QUANT(q4_1, CI_TYPE_Q4_1)
DOT_QUANT(q5_0, CI_TYPE_Q5_0)
DOT_QUANT(q5_1, CI_TYPE_Q5_1)
DOT_QUANT(iq4_nl, CI_TYPE_IQ4_NL)
DOT_QUANT(mxfp4, CI_TYPE_MXFP4)
DOT_QUANT(q2_k, CI_TYPE_Q2_K)
DOT_QUANT(q3_k, CI_TYPE_Q3_K)
DOT_QUANT(q4_k, CI_TYPE_Q4_K)
DOT_QUANT(q5_k, CI_TYPE_Q5_K)
DOT_QUANT(q6_k, CI_TYPE_Q6_K)
DOT_QUANT(iq4_xs, CI_TYPE_IQ4_XS)

static void mm_float(ci_dot_fn dot, const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    for (int64_t o = r0; o < r1; o++) {
        const uint8_t *row = m->w + (size_t)o * m->row_bytes;
        for (int t = t0; t < t1; t++)
            m->y[(size_t)t * (size_t)m->n_out + (size_t)o] =
                dot(row, m->x + (size_t)t * (size_t)m->n_in, m->n_in);
    }
}

/* Quantized rows against the activations ci_matmul quantized (ci_act_q8 or ci_act_q8k), block after block. */
static void mm_quant(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    const struct ci_type_traits *tt = ci_type_traits(m->type);
    bool k = ci_type_uses_q8k(m->type);
    int64_t nb = m->n_in / tt->block_size;
    for (int64_t o = r0; o < r1; o++) {
        const uint8_t *row = m->w + (size_t)o * m->row_bytes;
        for (int t = t0; t < t1; t++) {
            float acc = 0.0f;
            if (k) {
                const struct ci_act_q8k *q = m->qk;
                const int8_t *xq = q->qs + (size_t)t * (size_t)q->n_in;
                const float *d = q->d + (size_t)t * (size_t)(q->n_in / 256);
                const int16_t *bsum = q->bsum + (size_t)t * (size_t)(q->n_in / 16);
                for (int64_t b = 0; b < nb; b++)
                    acc = ci_ref_qblock(m->type, row + (size_t)b * tt->type_size, xq + b * 256, d[b], 0,
                                        bsum + b * 16, acc);
            } else {
                const struct ci_act_q8 *q = m->q;
                const int8_t *xq = q->qs + (size_t)t * (size_t)q->n_in;
                for (int64_t b = 0; b < nb; b++)
                    acc = ci_ref_qblock(m->type, row + (size_t)b * tt->type_size, xq + b * 32,
                                        q->d[b * q->tok_stride + t], q->s[b * q->tok_stride + t], NULL, acc);
            }
            m->y[(size_t)t * (size_t)m->n_out + (size_t)o] = acc;
        }
    }
}

static void mm_f32(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    mm_float(dot_f32, m, r0, r1, t0, t1);
}
static void mm_f16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    mm_float(dot_f16, m, r0, r1, t0, t1);
}
static void mm_bf16(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    mm_float(dot_bf16, m, r0, r1, t0, t1);
}

/* The online-softmax update of one query row from its n scores s (overwritten with the weights) and float V
 * rows: the f32 chunk's order (dot.h), shared by the f32 and q8_0 chunks. */
static void softmax_pv(float *s, const float *const *v, int n, int hd, float *m, float *l, float *a) {
    float mx = *m;
    for (int i = 0; i < n; i++)
        mx = s[i] > mx ? s[i] : mx;
    float c = *m == -INFINITY ? 0.0f : expf(*m - mx);
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    *l = *l * c + sum;
    for (int d = 0; d < hd; d++) {
        float t = a[d] * c;
        for (int i = 0; i < n; i++)
            t += s[i] * v[i][d];
        a[d] = t;
    }
    *m = mx;
}

void ci_ref_attn_f32(const void *const *kr, const void *const *vr, int n, const float *const *q, int ng,
                     int hd, float scale, float *m, float *l, float *acc) {
    const float *const *k = (const float *const *)kr, *const *v = (const float *const *)vr;
    for (int g = 0; g < ng; g++) {
        float s[CI_ATTN_CHUNK];
        for (int i = 0; i < n; i++)
            s[i] = dot_f32(q[g], k[i], hd) * scale;
        softmax_pv(s, v, n, hd, &m[g], &l[g], acc + (size_t)g * (size_t)hd);
    }
}

/* Every row of a chunk seen by some query: the most positions any of the nr rows sees. */
static int group_positions(const int *n, int nr) {
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    return nmax;
}

/* The rows of a chunk widened to float (ci_dequantize_row): kf/vf [n][hd], kp/vp point into them. */
static void widen_rows(uint32_t type, const void *const *k, const void *const *v, int n, int hd, float *kf,
                       float *vf, const void **kp, const void **vp) {
    for (int i = 0; i < n; i++) {
        ci_dequantize_row(type, k[i], kf + (size_t)i * (size_t)hd, hd);
        ci_dequantize_row(type, v[i], vf + (size_t)i * (size_t)hd, hd);
        kp[i] = kf + (size_t)i * (size_t)hd;
        vp[i] = vf + (size_t)i * (size_t)hd;
    }
}

/* f16 / q8_0 K/V: the chunk's rows widened to float, then the f32 chunk. */
static void attn_widened(uint32_t type, const void *const *k, const void *const *v, int n,
                         const float *const *q, int ng, int hd, float scale, float *m, float *l, float *acc) {
    float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM], vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    widen_rows(type, k, v, n, hd, kf, vf, kp, vp);
    ci_ref_attn_f32(kp, vp, n, q, ng, hd, scale, m, l, acc);
}

void ci_ref_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng, int hd,
                     float scale, float *m, float *l, float *acc) {
    attn_widened(CI_TYPE_F16, k, v, n, q, ng, hd, scale, m, l, acc);
}

/* The Q8_0 chunk of dot.h: integer scores against the quantized query, the V rows widened to float. */
void ci_ref_attn_q8_0(const void *const *k, const void *const *v, int n, const struct ci_block_q8_0 *const *q,
                      int ng, int hd, float scale, float *m, float *l, float *acc) {
    float vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const float *vp[CI_ATTN_CHUNK];
    for (int i = 0; i < n; i++) {
        ci_dequantize_row(CI_TYPE_Q8_0, v[i], vf + (size_t)i * (size_t)hd, hd);
        vp[i] = vf + (size_t)i * (size_t)hd;
    }
    const int nb = hd / CI_QK8_0;
    for (int g = 0; g < ng; g++) {
        float s[CI_ATTN_CHUNK];
        for (int i = 0; i < n; i++) {
            const struct ci_block_q8_0 *kb = k[i];
            float a = 0.0f;
            for (int b = 0; b < nb; b++)
                a = ci_ref_qblock(CI_TYPE_Q8_0, (const uint8_t *)(const void *)&kb[b], q[g][b].qs,
                                  ci_fp16_to_fp32(q[g][b].d), 0.0f, NULL, a);
            s[i] = a * scale;
        }
        softmax_pv(s, vp, n, hd, &m[g], &l[g], acc + (size_t)g * (size_t)hd);
    }
}

/* The grouped chunk of dot.h: by definition, the f32 chunk row by row, each on its own n[r] positions. */
void ci_ref_attn_grp_f32(const void *const *k, const void *const *v, const int *n, int nr,
                         const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    for (int r = 0; r < nr; r++)
        ci_ref_attn_f32(k, v, n[r], q + r, 1, hd, scale, m + r, l + r, acc + (size_t)r * (size_t)hd);
}

static void attn_grp_widened(uint32_t type, const void *const *k, const void *const *v, const int *n, int nr,
                             const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM], vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    widen_rows(type, k, v, group_positions(n, nr), hd, kf, vf, kp, vp);
    ci_ref_attn_grp_f32(kp, vp, n, nr, q, hd, scale, m, l, acc);
}

void ci_ref_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                         const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    attn_grp_widened(CI_TYPE_F16, k, v, n, nr, q, hd, scale, m, l, acc);
}

void ci_ref_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                          const struct ci_block_q8_0 *const *q, int hd, float scale, float *m, float *l,
                          float *acc) {
    for (int r = 0; r < nr; r++)
        ci_ref_attn_q8_0(k, v, n[r], q + r, 1, hd, scale, m + r, l + r, acc + (size_t)r * (size_t)hd);
}

/* e^t in the order of dot.h.  Comparisons are written as the SIMD max/min evaluate them (a NaN clamps to
 * CI_EXP_LO and still gives NaN in the callers below). */
static float exp_dot_h(float t) {
    t = t > CI_EXP_LO ? t : CI_EXP_LO;
    t = t < CI_EXP_HI ? t : CI_EXP_HI;
    float k = nearbyintf(t * CI_EXP_LOG2E);
    float r = fmaf(k, -CI_EXP_LN2_HI, t);
    r = fmaf(k, -CI_EXP_LN2_LO, r);
    float p = CI_EXP_P0;
    p = fmaf(p, r, CI_EXP_P1);
    p = fmaf(p, r, CI_EXP_P2);
    p = fmaf(p, r, CI_EXP_P3);
    p = fmaf(p, r, CI_EXP_P4);
    p = fmaf(p, r, CI_EXP_P5);
    p = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* SwiGLU in the order of dot.h (the SIMD tables give the same bits). */
static void silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + exp_dot_h(-g)) * up[i];
    }
}

/* GeGLU in the order of dot.h (CI_GELU_A). */
static void gelu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float b = g * g * CI_GELU_A;
        gate[i] = g / (1.0f + exp_dot_h(fmaf(b, g, g) * CI_GELU_M2C)) * up[i];
    }
}

static const struct ci_dot_table ref_table = {
    .isa = "scalar",
    .dot =
        {
            [CI_TYPE_F32] = dot_f32,
            [CI_TYPE_F16] = dot_f16,
            [CI_TYPE_BF16] = dot_bf16,
            [CI_TYPE_Q8_0] = dot_q8_0,
            [CI_TYPE_Q4_0] = dot_q4_0,
            [CI_TYPE_Q4_1] = dot_q4_1,
            [CI_TYPE_Q5_0] = dot_q5_0,
            [CI_TYPE_Q5_1] = dot_q5_1,
            [CI_TYPE_IQ4_NL] = dot_iq4_nl,
            [CI_TYPE_MXFP4] = dot_mxfp4,
            [CI_TYPE_Q2_K] = dot_q2_k,
            [CI_TYPE_Q3_K] = dot_q3_k,
            [CI_TYPE_Q4_K] = dot_q4_k,
            [CI_TYPE_Q5_K] = dot_q5_k,
            [CI_TYPE_Q6_K] = dot_q6_k,
            [CI_TYPE_IQ4_XS] = dot_iq4_xs,
        },
    .f32_short = dot_f32,
    .attn_f32 = ci_ref_attn_f32,
    .attn_f16 = ci_ref_attn_f16,
    .attn_q8_0 = ci_ref_attn_q8_0,
    .attn_grp_f32 = ci_ref_attn_grp_f32,
    .attn_grp_f16 = ci_ref_attn_grp_f16,
    .attn_grp_q8_0 = ci_ref_attn_grp_q8_0,
    .quant_act = ci_ref_quant_act,
    .quant_act_k = ci_ref_quant_act_k,
    .mm =
        {
            [CI_TYPE_F32] = mm_f32,
            [CI_TYPE_F16] = mm_f16,
            [CI_TYPE_BF16] = mm_bf16,
            [CI_TYPE_Q8_0] = mm_quant,
            [CI_TYPE_Q4_0] = mm_quant,
            [CI_TYPE_Q4_1] = mm_quant,
            [CI_TYPE_Q5_0] = mm_quant,
            [CI_TYPE_Q5_1] = mm_quant,
            [CI_TYPE_IQ4_NL] = mm_quant,
            [CI_TYPE_MXFP4] = mm_quant,
            [CI_TYPE_Q2_K] = mm_quant,
            [CI_TYPE_Q3_K] = mm_quant,
            [CI_TYPE_Q4_K] = mm_quant,
            [CI_TYPE_Q5_K] = mm_quant,
            [CI_TYPE_Q6_K] = mm_quant,
            [CI_TYPE_IQ4_XS] = mm_quant,
        },
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
};

const struct ci_dot_table *ci_dot_ref_table(void) {
    return &ref_table;
}
