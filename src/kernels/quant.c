#include "kernels/quant.h"

#include <math.h>
#include <string.h>

#include "core/check.h"

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
};

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
    return type == CI_TYPE_F32 || type == CI_TYPE_F16 || type == CI_TYPE_BF16 || type == CI_TYPE_Q8_0 ||
           type == CI_TYPE_Q4_0;
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
    default:
        CI_UNREACHABLE();
    }
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
                b[i].qs[j] = (int8_t)roundf(x[j] * id);
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
                int q0 = (int)(x0 + 8.5f), q1 = (int)(x1 + 8.5f);
                q0 = q0 > 15 ? 15 : q0;
                q1 = q1 > 15 ? 15 : q1;
                b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
            }
        }
        return;
    }
    default:
        CI_UNREACHABLE();
    }
}
