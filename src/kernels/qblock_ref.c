/* The canonical block dots of the quantized weight types (dot.h states the order): for one weight block and
 * the int8 activations of the same elements, an exact integer dot, then the block's float steps on acc.
 * Written from ggml's block formats (the layouts of quant.c's dequantizers, element for element), plainly:
 * this is the ground truth the SIMD tables reproduce bit for bit.  Also the Q8_K activation quantizer. */
#include "kernels/dot.h"

#include <math.h>

#include "core/check.h"

static float f16_at(const uint8_t *p) {
    return ci_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

/* ggml's quantize_row_q8_K (the reference, which x86 runs too): 127 / max|x| scales, its inverse is the block's
 * float scale (ggml maps the largest value to -127 and negates d; the products are the same bits). */
void ci_ref_quant_act_k(const float *x, int64_t n_in, int8_t *qs, float *d, int16_t *bsum) {
    for (int64_t b = 0; b < n_in / 256; b++) {
        const float *xb = x + b * 256;
        float amax = 0.0f;
        for (int j = 0; j < 256; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        float id = amax < ACT_MIN_AMAX ? 0.0f : 127.0f / amax;
        float db = id != 0.0f ? 1.0f / id : 0.0f;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) {
                int8_t q = ci_ref_to_int8(xb[16 * g + j] * id);
                qs[b * 256 + 16 * g + j] = q;
                s += q;
            }
            bsum[b * 16 + g] = (int16_t)s;
        }
        d[b] = db;
    }
}

/* Element i of a 32-block with 4-bit codes: low nibbles of qs[0..15] are elements 0..15, high ones 16..31. */
static int nibble32(const uint8_t *qs, int i) {
    return i < 16 ? qs[i] & 0x0f : qs[i - 16] >> 4;
}

/* Q4_K / Q5_K sub-block j's 6-bit scale and min (the packing quant.c's kq_scale_min describes). */
static void kq_scale_min(const uint8_t *sc, int j, int *scale, int *min) {
    if (j < 4) {
        *scale = sc[j] & 63;
        *min = sc[j + 4] & 63;
    } else {
        *scale = (sc[j + 4] & 0x0f) | (sc[j - 4] >> 6) << 4;
        *min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
    }
}

static float block32(uint32_t type, const uint8_t *w, const int8_t *x, float dx, float xs, float acc) {
    int32_t isum = 0;
    float dw, mw = 0.0f;
    switch (type) {
    case CI_TYPE_Q8_0:
        dw = f16_at(w);
        for (int i = 0; i < 32; i++)
            isum += (int8_t)w[2 + i] * x[i];
        break;
    case CI_TYPE_Q4_0:
        dw = f16_at(w);
        for (int i = 0; i < 32; i++)
            isum += (nibble32(w + 2, i) - 8) * x[i];
        break;
    case CI_TYPE_Q4_1:
        dw = f16_at(w);
        mw = f16_at(w + 2);
        for (int i = 0; i < 32; i++)
            isum += nibble32(w + 4, i) * x[i];
        break;
    case CI_TYPE_Q5_0:
    case CI_TYPE_Q5_1: { // qh: bit i is element i's 5th bit
        bool q51 = type == CI_TYPE_Q5_1;
        const uint8_t *p = w + (q51 ? 4 : 2);
        uint32_t qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        dw = f16_at(w);
        mw = q51 ? f16_at(w + 2) : 0.0f;
        for (int i = 0; i < 32; i++)
            isum += ((nibble32(p + 4, i) | (int)(qh >> i & 1) << 4) - (q51 ? 0 : 16)) * x[i];
        break;
    }
    case CI_TYPE_IQ4_NL:
        dw = f16_at(w);
        for (int i = 0; i < 32; i++)
            isum += ci_iq4nl_values[nibble32(w + 2, i)] * x[i];
        break;
    case CI_TYPE_MXFP4:
        dw = ci_e8m0_half_to_fp32(w[0]);
        for (int i = 0; i < 32; i++)
            isum += ci_mxfp4_values[nibble32(w + 1, i)] * x[i];
        break;
    default:
        CI_UNREACHABLE();
    }
    acc = fmaf(dw * dx, (float)isum, acc);
    if (type == CI_TYPE_Q4_1 || type == CI_TYPE_Q5_1)
        acc = fmaf(mw, xs, acc);
    return acc;
}

/* The integer dot of 16 or 32 weights q[i] (already decoded) with x. */
static int32_t idot(const int *q, const int8_t *x, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++)
        s += q[i] * x[i];
    return s;
}

static float block256(uint32_t type, const uint8_t *w, const int8_t *x, float dx, const int16_t *bsum,
                      float acc) {
    int q[256]; // the block's weight codes, element by element (as the dequantizers of quant.c read them)
    int32_t sumi = 0, summ = 0;
    float d, dmin = 0.0f;
    switch (type) {
    case CI_TYPE_Q2_K: { // scales[16] (low nibble scale, high nibble min), qs[64], d, dmin
        const uint8_t *sc = w, *qs = w + 16;
        d = f16_at(w + 80);
        dmin = f16_at(w + 82);
        for (int i = 0; i < 256; i++)
            q[i] = qs[32 * (i / 128) + i % 32] >> (2 * (i % 128 / 32)) & 3;
        for (int k = 0; k < 16; k++) {
            sumi += (sc[k] & 0x0f) * idot(q + 16 * k, x + 16 * k, 16);
            summ += (sc[k] >> 4) * bsum[k];
        }
        break;
    }
    case CI_TYPE_Q3_K: { // hmask[32], qs[64], scales[12], d
        const uint8_t *hmask = w, *qs = w + 32, *sc = w + 96;
        d = f16_at(w + 108);
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = i % 128 / 32, l = i % 32;
            q[i] = (qs[32 * h + l] >> (2 * s) & 3) - ((hmask[l] >> (4 * h + s) & 1) ? 0 : 4);
        }
        for (int k = 0; k < 16; k++) {
            int lo = k < 8 ? sc[k] & 0x0f : sc[k - 8] >> 4;
            int hi = sc[8 + k % 4] >> (2 * (k / 4)) & 3;
            sumi += ((lo | hi << 4) - 32) * idot(q + 16 * k, x + 16 * k, 16);
        }
        break;
    }
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K: { // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]
        bool q5 = type == CI_TYPE_Q5_K;
        const uint8_t *sc = w + 4, *qh = w + 16, *qs = w + (q5 ? 48 : 16);
        d = f16_at(w);
        dmin = f16_at(w + 2);
        for (int i = 0; i < 256; i++) {
            int c = i / 64, u = i % 64 / 32, l = i % 32;
            q[i] = u ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
            if (q5)
                q[i] |= (qh[l] >> (2 * c + u) & 1) << 4;
        }
        for (int j = 0; j < 8; j++) {
            int scale, min;
            kq_scale_min(sc, j, &scale, &min);
            sumi += scale * idot(q + 32 * j, x + 32 * j, 32);
            summ += min * (bsum[2 * j] + bsum[2 * j + 1]);
        }
        break;
    }
    case CI_TYPE_Q6_K: { // ql[128], qh[64], scales[16] (int8), d
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *sc = (const int8_t *)(w + 192);
        d = f16_at(w + 208);
        for (int i = 0; i < 256; i++) {
            int h = i / 128, r = i % 128 / 32, l = i % 32;
            uint8_t lb = ql[64 * h + 32 * (r % 2) + l];
            q[i] = ((r / 2 ? lb >> 4 : lb & 0x0f) | (qh[32 * h + l] >> (2 * r) & 3) << 4) - 32;
        }
        for (int k = 0; k < 16; k++)
            sumi += sc[k] * idot(q + 16 * k, x + 16 * k, 16);
        break;
    }
    case CI_TYPE_IQ4_XS: { // d, scales_h, scales_l[4], qs[128]
        unsigned scales_h = (unsigned)(w[2] | w[3] << 8);
        const uint8_t *scales_l = w + 4, *qs = w + 8;
        d = f16_at(w);
        for (int j = 0; j < 8; j++) {
            int ls = (scales_l[j / 2] >> (4 * (j % 2)) & 0x0f) | (int)(scales_h >> (2 * j) & 3) << 4;
            for (int i = 0; i < 32; i++)
                q[32 * j + i] = ci_iq4nl_values[nibble32(qs + 16 * j, i)];
            sumi += (ls - 32) * idot(q + 32 * j, x + 32 * j, 32);
        }
        break;
    }
    default:
        CI_UNREACHABLE();
    }
    acc = fmaf(d * dx, (float)sumi, acc);
    if (type == CI_TYPE_Q2_K || type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K)
        acc = fmaf(-(dmin * dx), (float)summ, acc);
    return acc;
}

float ci_ref_qblock(uint32_t type, const uint8_t *w, const int8_t *xq, float dx, float xs,
                    const int16_t *bsum, float acc) {
    return ci_type_uses_q8k(type) ? block256(type, w, xq, dx, bsum, acc) : block32(type, w, xq, dx, xs, acc);
}
