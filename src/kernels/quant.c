#include "kernels/quant.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "kernels/quantize.h"

// Block layouts as ggml defines them; only the types with block_size != 0 are known.
static const struct ci_type_traits traits[CI_TYPE_COUNT] = {
    [CI_TYPE_F32] = {"F32", 1, 4},
    [CI_TYPE_F16] = {"F16", 1, 2},
    [CI_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [CI_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [CI_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [CI_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [CI_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [CI_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [CI_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [CI_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [CI_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [CI_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [CI_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [CI_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [CI_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [CI_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [CI_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [CI_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [CI_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [CI_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [CI_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [CI_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [CI_TYPE_I8] = {"I8", 1, 1},
    [CI_TYPE_I16] = {"I16", 1, 2},
    [CI_TYPE_I32] = {"I32", 1, 4},
    [CI_TYPE_I64] = {"I64", 1, 8},
    [CI_TYPE_F64] = {"F64", 1, 8},
    [CI_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [CI_TYPE_BF16] = {"BF16", 1, 2},
    [CI_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [CI_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [CI_TYPE_MXFP4] = {"MXFP4", 32, 17},
};

const int8_t ci_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

float ci_e8m0_half_to_fp32(uint8_t e) {
    // 2^(e - 128): a normal float's exponent field e - 1 for e >= 2, the subnormals 2^-127 and 2^-128 below.
    uint32_t bits = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

const struct ci_type_traits *ci_type_traits(uint32_t type) {
    if (type >= CI_TYPE_COUNT || traits[type].block_size == 0)
        return NULL;
    return &traits[type];
}

const char *ci_type_name(uint32_t type) {
    const struct ci_type_traits *t = ci_type_traits(type);
    return t ? t->name : "unknown";
}

bool ci_type_supported(uint32_t type) {
    switch (type) {
    case CI_TYPE_F32:
    case CI_TYPE_F16:
    case CI_TYPE_BF16:
    case CI_TYPE_Q8_0:
    case CI_TYPE_Q4_0:
    case CI_TYPE_Q4_1:
    case CI_TYPE_Q5_0:
    case CI_TYPE_Q5_1:
    case CI_TYPE_Q2_K:
    case CI_TYPE_Q3_K:
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K:
    case CI_TYPE_Q6_K:
    case CI_TYPE_IQ4_NL:
    case CI_TYPE_IQ4_XS:
    case CI_TYPE_MXFP4:
        return true;
    default:
        return false;
    }
}

bool ci_row_bytes(uint32_t type, uint64_t n, uint64_t *out) {
    const struct ci_type_traits *t = ci_type_traits(type);
    if (!t || n % t->block_size != 0)
        return false;
    uint64_t blocks = n / t->block_size;
    if (t->type_size && blocks > UINT64_MAX / t->type_size)
        return false;
    *out = blocks * t->type_size;
    return true;
}

float ci_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { // subnormal: value = mant * 2^-24
            float f = (float)mant * (1.0f / 16777216.0f);
            memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ci_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) // inf or nan
        return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
    if (ax >= 0x477ff000u) // rounds to >= 65520: overflow to inf
        return sign | 0x7c00;
    if (ax < 0x38800000u) { // below the smallest normal half (2^-14): subnormal or zero
        // value / 2^-24 rounded to nearest even gives the subnormal mantissa.
        float af;
        memcpy(&af, &ax, 4);
        float scaled = af * 16777216.0f; // exact (power of two)
        float r = nearbyintf(scaled);    // default rounding mode: nearest even
        return sign | (uint16_t)r;
    }
    // normal: round mantissa from 23 to 10 bits, nearest even; carry may bump the exponent (correctly).
    uint32_t e = ((ax >> 23) - 112) << 10;
    uint32_t m = ax & 0x7fffff;
    uint32_t h = e | (m >> 13);
    uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++;
    return sign | (uint16_t)h;
}

float ci_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t ci_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) // nan: keep it quiet
        return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

static float f16_at(const uint8_t *p) {
    return ci_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

/* Q4_K / Q5_K sub-block j (0..7) of the 12 packed scale bytes: 6-bit scale and 6-bit min.  Sub-blocks 0..3
 * sit in the low 6 bits of bytes j (scale) and j + 4 (min); sub-blocks 4..7 take their low 4 bits from the
 * nibbles of byte j + 4 (scale low, min high) and their top 2 bits from the top 2 bits of bytes j - 4 (scale)
 * and j (min). */
static void kq_scale_min(const uint8_t *sc, int j, float *scale, float *min) {
    if (j < 4) {
        *scale = (float)(sc[j] & 63);
        *min = (float)(sc[j + 4] & 63);
    } else {
        *scale = (float)((sc[j + 4] & 0x0f) | (sc[j - 4] >> 6) << 4);
        *min = (float)((sc[j + 4] >> 4) | (sc[j] >> 6) << 4);
    }
}

/* One block of the scalar (ground-truth) dequantizers, written from ggml's block formats (ggml-common.h).
 * All multi-byte fields are little-endian; fp16 fields are read bytewise so blocks need no alignment. */
static void dequant_block(uint32_t type, const uint8_t *b, float *y) {
    switch (type) {
    case CI_TYPE_Q4_1: { // d fp16, m fp16, qs[16]: x = q * d + m, q = nibble (low: 0..15, high: 16..31)
        float d = f16_at(b), m = f16_at(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
        return;
    }
    case CI_TYPE_Q5_0:   // d fp16, qh (32 bits: bit j is element j's 5th bit), qs[16]: x = (q - 16) * d
    case CI_TYPE_Q5_1: { // d fp16, m fp16, qh, qs[16]: x = q * d + m
        bool q51 = type == CI_TYPE_Q5_1;
        float d = f16_at(b), m = q51 ? f16_at(b + 2) : 0.0f;
        const uint8_t *p = b + (q51 ? 4 : 2);
        uint32_t qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        const uint8_t *qs = p + 4;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            if (q51) {
                y[j] = (float)lo * d + m;
                y[j + 16] = (float)hi * d + m;
            } else {
                y[j] = (float)(lo - 16) * d;
                y[j + 16] = (float)(hi - 16) * d;
            }
        }
        return;
    }
    case CI_TYPE_Q2_K: { // scales[16] (low nibble scale, high nibble min), qs[64], d fp16, dmin fp16
        const uint8_t *scales = b, *qs = b + 16;
        float d = f16_at(b + 80), dmin = f16_at(b + 82);
        // Element i = 128h + 32s + l (h half, s shift, l < 32): bits 2s..2s+1 of qs[32h + l], sub-block
        // (16 elements) 8h + 2s + l / 16.
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = i % 128 / 32, l = i % 32;
            int q = qs[32 * h + l] >> (2 * s) & 3;
            uint8_t sc = scales[8 * h + 2 * s + l / 16];
            float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
            y[i] = dl * (float)q - ml;
        }
        return;
    }
    case CI_TYPE_Q3_K: { // hmask[32], qs[64], scales[12] (16 6-bit scales, biased by 32), d fp16
        const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
        float d = f16_at(b + 108);
        // Scale k: low 4 bits from the low (k < 8) or high (k >= 8) nibble of byte k % 8, top 2 bits from
        // bits 2(k / 4).. of byte 8 + k % 4.  Element i = 128h + 32s + l: 2 low bits of the quant as in
        // Q2_K, its 3rd bit is bit 4h + s of hmask[l]; a clear bit subtracts 4 (values -4..3).
        for (int i = 0; i < 256; i++) {
            int h = i / 128, s = i % 128 / 32, l = i % 32;
            int k = 8 * h + 2 * s + l / 16;
            int lo = k < 8 ? sc[k] & 0x0f : sc[k - 8] >> 4;
            int hi = sc[8 + k % 4] >> (2 * (k / 4)) & 3;
            float dl = d * (float)((lo | hi << 4) - 32);
            int q = (qs[32 * h + l] >> (2 * s) & 3) - ((hmask[l] >> (4 * h + s) & 1) ? 0 : 4);
            y[i] = dl * (float)q;
        }
        return;
    }
    case CI_TYPE_Q4_K:   // d fp16, dmin fp16, scales[12], qs[128]
    case CI_TYPE_Q5_K: { // d fp16, dmin fp16, scales[12], qh[32], qs[128]
        bool q5 = type == CI_TYPE_Q5_K;
        float d = f16_at(b), dmin = f16_at(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
        // Element i = 64c + 32u + l: nibble u (low, high) of qs[32c + l], sub-block j = 2c + u (32
        // elements); Q5_K's 5th bit is bit j of qh[l].  x = d * scale_j * q - dmin * min_j.
        for (int i = 0; i < 256; i++) {
            int c = i / 64, u = i % 64 / 32, l = i % 32, j = 2 * c + u;
            float scale, min;
            kq_scale_min(sc, j, &scale, &min);
            int q = u ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
            if (q5)
                q |= (qh[l] >> j & 1) << 4;
            y[i] = d * scale * (float)q - dmin * min;
        }
        return;
    }
    case CI_TYPE_Q6_K: { // ql[128], qh[64], scales[16] (int8), d fp16
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        float d = f16_at(b + 208);
        // Element i = 128h + 32r + l: low 4 bits from nibble r / 2 of ql[64h + 32(r % 2) + l], top 2 bits
        // from bits 2r.. of qh[32h + l]; value q - 32 (-32..31), sub-block (16 elements) i / 16.
        for (int i = 0; i < 256; i++) {
            int h = i / 128, r = i % 128 / 32, l = i % 32;
            uint8_t lb = ql[64 * h + 32 * (r % 2) + l];
            int q = ((r / 2 ? lb >> 4 : lb & 0x0f) | (qh[32 * h + l] >> (2 * r) & 3) << 4) - 32;
            y[i] = d * (float)scales[i / 16] * (float)q;
        }
        return;
    }
    case CI_TYPE_IQ4_NL:  // d fp16, qs[16]: x = d * value[q], nibbles as Q4_0 (low: 0..15, high: 16..31)
    case CI_TYPE_MXFP4: { // e (E8M0), qs[16]: x = 2^(e - 128) * (2 * E2M1 value)[q]
        bool nl = type == CI_TYPE_IQ4_NL;
        float d = nl ? f16_at(b) : ci_e8m0_half_to_fp32(b[0]);
        const int8_t *values = nl ? ci_iq4nl_values : ci_mxfp4_values;
        const uint8_t *qs = b + (nl ? 2 : 1);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)values[qs[j] & 0x0f];
            y[j + 16] = d * (float)values[qs[j] >> 4];
        }
        return;
    }
    case CI_TYPE_IQ4_XS: { // d fp16, scales_h (16 bits), scales_l[4], qs[128]
        float d = f16_at(b);
        unsigned scales_h = (unsigned)(b[2] | b[3] << 8);
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        // Sub-block j (32 elements): 6-bit scale, low 4 bits from nibble j % 2 of scales_l[j / 2], top 2 bits
        // from bits 2j.. of scales_h, biased by 32; its 16 bytes of qs hold elements 0..15 (low nibbles) and
        // 16..31 (high), as IQ4_NL.
        for (int j = 0; j < 8; j++) {
            int ls = (scales_l[j / 2] >> (4 * (j % 2)) & 0x0f) | (int)(scales_h >> (2 * j) & 3) << 4;
            float dl = d * (float)(ls - 32);
            for (int l = 0; l < 16; l++) {
                y[32 * j + l] = dl * (float)ci_iq4nl_values[qs[16 * j + l] & 0x0f];
                y[32 * j + l + 16] = dl * (float)ci_iq4nl_values[qs[16 * j + l] >> 4];
            }
        }
        return;
    }
    default:
        CI_UNREACHABLE();
    }
}

void ci_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case CI_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case CI_TYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = ci_fp16_to_fp32(s[i]);
        return;
    }
    case CI_TYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = ci_bf16_to_fp32(s[i]);
        return;
    }
    case CI_TYPE_Q8_0: {
        const struct ci_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / CI_QK8_0; i++) {
            float d = ci_fp16_to_fp32(b[i].d);
            for (int j = 0; j < CI_QK8_0; j++)
                dst[i * CI_QK8_0 + j] = d * (float)b[i].qs[j];
        }
        return;
    }
    case CI_TYPE_Q4_0: {
        const struct ci_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / CI_QK4_0; i++) {
            float d = ci_fp16_to_fp32(b[i].d);
            for (int j = 0; j < CI_QK4_0 / 2; j++) {
                dst[i * CI_QK4_0 + j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
                dst[i * CI_QK4_0 + j + CI_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        return;
    }
    case CI_TYPE_Q4_1:
    case CI_TYPE_Q5_0:
    case CI_TYPE_Q5_1:
    case CI_TYPE_Q2_K:
    case CI_TYPE_Q3_K:
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K:
    case CI_TYPE_Q6_K:
    case CI_TYPE_IQ4_NL:
    case CI_TYPE_IQ4_XS:
    case CI_TYPE_MXFP4: {
        const struct ci_type_traits *t = ci_type_traits(type);
        const uint8_t *b = src;
        for (int64_t i = 0; i < n / t->block_size; i++)
            dequant_block(type, b + (size_t)i * t->type_size, dst + i * t->block_size);
        return;
    }
    default:
        CI_UNREACHABLE();
    }
}

/* C's (int)v (toward zero) where it is defined; 0 for NaN and the nearest end of int's range beyond it, where
 * the cast would be undefined behaviour.  The Q8_0 and Q4_0 quantizers below meet NaN on rows that hold NaN
 * or Inf (x * (1 / amax) with amax = Inf), e.g. a K/V row of a q8_0 KV cache; x86's conversion gave INT_MIN,
 * whose low bits (0) their callers kept, so such rows keep the codes they had.  (quantize.c's quantizers read
 * non-finite inputs as 0.) */
static int float_to_int(float v) {
    if (!(v == v))
        return 0;
    return v <= -2147483648.0f ? INT32_MIN : v >= 2147483648.0f ? INT32_MAX : (int)v;
}

// Quantizers follow ggml's reference rounding so files we write dequantize as llama.cpp expects.
void ci_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    switch (type) {
    case CI_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case CI_TYPE_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = ci_fp32_to_fp16(src[i]);
        return;
    }
    case CI_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = ci_fp32_to_bf16(src[i]);
        return;
    }
    case CI_TYPE_Q8_0: {
        struct ci_block_q8_0 *b = dst;
        for (int64_t i = 0; i < n / CI_QK8_0; i++) {
            const float *x = src + i * CI_QK8_0;
            float amax = 0.0f;
            for (int j = 0; j < CI_QK8_0; j++)
                amax = fmaxf(amax, fabsf(x[j]));
            float d = amax / 127.0f;
            float id = d ? 1.0f / d : 0.0f;
            b[i].d = ci_fp32_to_fp16(d);
            for (int j = 0; j < CI_QK8_0; j++)
                b[i].qs[j] = (int8_t)float_to_int(roundf(x[j] * id));
        }
        return;
    }
    case CI_TYPE_Q4_0: {
        struct ci_block_q4_0 *b = dst;
        for (int64_t i = 0; i < n / CI_QK4_0; i++) {
            const float *x = src + i * CI_QK4_0;
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < CI_QK4_0; j++) {
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    max = x[j];
                }
            }
            float d = max / -8.0f;
            float id = d ? 1.0f / d : 0.0f;
            b[i].d = ci_fp32_to_fp16(d);
            for (int j = 0; j < CI_QK4_0 / 2; j++) {
                float x0 = x[j] * id, x1 = x[CI_QK4_0 / 2 + j] * id;
                int q0 = float_to_int(x0 + 8.5f), q1 = float_to_int(x1 + 8.5f);
                q0 = q0 > 15 ? 15 : q0;
                q1 = q1 > 15 ? 15 : q1;
                b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
            }
        }
        return;
    }
    case CI_TYPE_Q4_1:
        ci_quantize_row_q4_1(src, dst, n);
        return;
    case CI_TYPE_Q5_0:
        ci_quantize_row_q5_0(src, dst, n);
        return;
    case CI_TYPE_Q5_1:
        ci_quantize_row_q5_1(src, dst, n);
        return;
    case CI_TYPE_Q2_K:
        ci_quantize_row_q2_k(src, dst, n);
        return;
    case CI_TYPE_Q3_K:
        ci_quantize_row_q3_k(src, dst, n);
        return;
    case CI_TYPE_Q4_K:
        ci_quantize_row_q4_k(src, dst, n);
        return;
    case CI_TYPE_Q5_K:
        ci_quantize_row_q5_k(src, dst, n);
        return;
    case CI_TYPE_Q6_K:
        ci_quantize_row_q6_k(src, dst, n);
        return;
    case CI_TYPE_IQ4_NL:
        ci_quantize_row_iq4_nl(src, dst, n);
        return;
    case CI_TYPE_IQ4_XS:
        ci_quantize_row_iq4_xs(src, dst, n);
        return;
    default:
        CI_UNREACHABLE();
    }
}
