/* Portable scalar kernels: the ground truth every SIMD version is tested against.
 * Float types accumulate in float, front to back.  Quantized types follow the canonical order of dot.h:
 * activations quantized to Q8 blocks, an exact int32 dot per block, then acc = fmaf(dw * dx, isum, acc) block
 * after block; the SIMD tables reproduce these bits exactly. */
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
 * saturate to int8.  Written out so the scalar quantizer has no undefined conversions and matches SIMD. */
static int8_t to_int8(float v) {
    int32_t i = v >= -2147483648.0f && v < 2147483648.0f ? (int32_t)nearbyintf(v) : INT32_MIN;
    return (int8_t)(i < -128 ? -128 : i > 127 ? 127 : i);
}

void ci_ref_quant_act(const float *x, int64_t n_in, int8_t *qs, float *d, int32_t *sum, int64_t stride) {
    for (int64_t b = 0; b < n_in / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float db = amax < ACT_MIN_AMAX ? 0.0f : amax / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t s = 0;
        for (int j = 0; j < 32; j++) {
            int8_t q = to_int8(xb[j] * id);
            qs[b * 32 + j] = q;
            s += q;
        }
        d[b * stride] = db;
        sum[b * stride] = s;
    }
}

int32_t ci_ref_idot_q8_0(const void *wblock, const int8_t *xq) {
    const struct ci_block_q8_0 *b = wblock;
    int32_t s = 0;
    for (int j = 0; j < CI_QK8_0; j++)
        s += (int32_t)b->qs[j] * xq[j];
    return s;
}

int32_t ci_ref_idot_q4_0(const void *wblock, const int8_t *xq) {
    const struct ci_block_q4_0 *b = wblock;
    int32_t s = 0;
    for (int j = 0; j < CI_QK4_0 / 2; j++) // low nibbles: elements 0..15, high nibbles: 16..31
        s += ((b->qs[j] & 0x0f) - 8) * xq[j] + ((b->qs[j] >> 4) - 8) * xq[j + CI_QK4_0 / 2];
    return s;
}

/* Both block layouts start with the fp16 scale. */
static float block_scale(const void *wblock) {
    uint16_t d;
    const uint8_t *p = wblock;
    d = (uint16_t)(p[0] | p[1] << 8);
    return ci_fp16_to_fp32(d);
}

typedef int32_t (*idot_fn)(const void *wblock, const int8_t *xq);

/* The canonical quantized dot of one row against one quantized token (scale stride: tok_stride). */
static float qdot(idot_fn idot, size_t block_bytes, const uint8_t *row, const int8_t *qs, const float *d,
                  int64_t stride, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = row + (size_t)b * block_bytes;
        acc = fmaf(block_scale(wb) * d[b * stride], (float)idot(wb, qs + b * 32), acc);
    }
    return acc;
}

/* dot(row, x) for quantized rows: x is quantized block by block on the stack (blocks are independent, so
 * this is exactly what ci_matmul's whole-row quantization gives). */
static float dot_q(idot_fn idot, size_t block_bytes, const void *row, const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t qs[32];
        float d;
        int32_t s;
        ci_ref_quant_act(x + b * 32, 32, qs, &d, &s, 1);
        const uint8_t *wb = (const uint8_t *)row + (size_t)b * block_bytes;
        acc = fmaf(block_scale(wb) * d, (float)idot(wb, qs), acc);
    }
    return acc;
}

float ci_ref_dot_q8_0(const void *row, const float *x, int64_t n) {
    return dot_q(ci_ref_idot_q8_0, sizeof(struct ci_block_q8_0), row, x, n);
}

float ci_ref_dot_q4_0(const void *row, const float *x, int64_t n) {
    return dot_q(ci_ref_idot_q4_0, sizeof(struct ci_block_q4_0), row, x, n);
}

static void mm_float(ci_dot_fn dot, const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    for (int64_t o = r0; o < r1; o++) {
        const uint8_t *row = m->w + (size_t)o * m->row_bytes;
        for (int t = t0; t < t1; t++)
            m->y[(size_t)t * (size_t)m->n_out + (size_t)o] =
                dot(row, m->x + (size_t)t * (size_t)m->n_in, m->n_in);
    }
}

static void mm_quant(idot_fn idot, size_t block_bytes, const struct ci_mm *m, int64_t r0, int64_t r1, int t0,
                     int t1) {
    const struct ci_act_q8 *q = m->q;
    for (int64_t o = r0; o < r1; o++) {
        const uint8_t *row = m->w + (size_t)o * m->row_bytes;
        for (int t = t0; t < t1; t++)
            m->y[(size_t)t * (size_t)m->n_out + (size_t)o] =
                qdot(idot, block_bytes, row, q->qs + (size_t)t * (size_t)q->n_in, q->d + t, q->tok_stride,
                     q->n_in / 32);
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
static void mm_q8_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    mm_quant(ci_ref_idot_q8_0, sizeof(struct ci_block_q8_0), m, r0, r1, t0, t1);
}
static void mm_q4_0(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    mm_quant(ci_ref_idot_q4_0, sizeof(struct ci_block_q4_0), m, r0, r1, t0, t1);
}

void ci_ref_attn_f32(const void *const *kr, const void *const *vr, int n, const float *const *q, int ng,
                     int hd, float scale, float *m, float *l, float *acc) {
    const float *const *k = (const float *const *)kr, *const *v = (const float *const *)vr;
    for (int g = 0; g < ng; g++) {
        float s[CI_ATTN_CHUNK], mx = m[g];
        for (int i = 0; i < n; i++) {
            s[i] = dot_f32(q[g], k[i], hd) * scale;
            mx = s[i] > mx ? s[i] : mx;
        }
        float c = m[g] == -INFINITY ? 0.0f : expf(m[g] - mx);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            s[i] = expf(s[i] - mx);
            sum += s[i];
        }
        l[g] = l[g] * c + sum;
        float *a = acc + (size_t)g * (size_t)hd;
        for (int d = 0; d < hd; d++) {
            float t = a[d] * c;
            for (int i = 0; i < n; i++)
                t += s[i] * v[i][d];
            a[d] = t;
        }
        m[g] = mx;
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

void ci_ref_attn_q8_0(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                      int hd, float scale, float *m, float *l, float *acc) {
    attn_widened(CI_TYPE_Q8_0, k, v, n, q, ng, hd, scale, m, l, acc);
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
                          const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    attn_grp_widened(CI_TYPE_Q8_0, k, v, n, nr, q, hd, scale, m, l, acc);
}

/* SwiGLU in the order of dot.h (the SIMD tables give the same bits).  Comparisons are written as the SIMD
 * max/min evaluate them (a NaN gate clamps to CI_EXP_LO and still gives NaN below). */
static void silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float t = -g;
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
        float e = p * scale;
        gate[i] = g / (1.0f + e) * up[i];
    }
}

static const struct ci_dot_table ref_table = {
    .isa = "scalar",
    .f32 = dot_f32,
    .f16 = dot_f16,
    .bf16 = dot_bf16,
    .q8_0 = ci_ref_dot_q8_0,
    .q4_0 = ci_ref_dot_q4_0,
    .f32_short = dot_f32,
    .attn_f32 = ci_ref_attn_f32,
    .attn_f16 = ci_ref_attn_f16,
    .attn_q8_0 = ci_ref_attn_q8_0,
    .attn_grp_f32 = ci_ref_attn_grp_f32,
    .attn_grp_f16 = ci_ref_attn_grp_f16,
    .attn_grp_q8_0 = ci_ref_attn_grp_q8_0,
    .quant_act = ci_ref_quant_act,
    .mm_f32 = mm_f32,
    .mm_f16 = mm_f16,
    .mm_bf16 = mm_bf16,
    .mm_q8_0 = mm_q8_0,
    .mm_q4_0 = mm_q4_0,
    .silu_mul = silu_mul,
};

const struct ci_dot_table *ci_dot_ref_table(void) {
    return &ref_table;
}
