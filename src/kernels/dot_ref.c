/* Portable scalar dot products: the ground truth every SIMD version is tested against.  Each one accumulates
 * in float, front to back; quantized types sum each block's q[j] * x[j] first and then scale by the block's
 * d, which is dequantize-then-dot with the scale factored out of the block. */
#include "kernels/dot.h"

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

static float dot_q8_0(const void *row, const float *x, int64_t n) {
    const struct ci_block_q8_0 *b = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / CI_QK8_0; i++, x += CI_QK8_0) {
        float bsum = 0.0f;
        for (int j = 0; j < CI_QK8_0; j++)
            bsum += (float)b[i].qs[j] * x[j];
        sum += ci_fp16_to_fp32(b[i].d) * bsum;
    }
    return sum;
}

static float dot_q4_0(const void *row, const float *x, int64_t n) {
    const struct ci_block_q4_0 *b = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / CI_QK4_0; i++, x += CI_QK4_0) {
        float bsum = 0.0f;
        for (int j = 0; j < CI_QK4_0 / 2; j++) // low nibbles: elements 0..15
            bsum += (float)((b[i].qs[j] & 0x0f) - 8) * x[j];
        for (int j = 0; j < CI_QK4_0 / 2; j++) // high nibbles: elements 16..31
            bsum += (float)((b[i].qs[j] >> 4) - 8) * x[j + CI_QK4_0 / 2];
        sum += ci_fp16_to_fp32(b[i].d) * bsum;
    }
    return sum;
}

static const struct ci_dot_table ref_table = {
    .isa = "scalar",
    .f32 = dot_f32,
    .f16 = dot_f16,
    .bf16 = dot_bf16,
    .q8_0 = dot_q8_0,
    .q4_0 = dot_q4_0,
};

const struct ci_dot_table *ci_dot_ref_table(void) {
    return &ref_table;
}
