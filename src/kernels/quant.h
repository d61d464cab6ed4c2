/* Tensor element types (ggml's numbering, as stored in GGUF), their block layouts, and conversion helpers.
 * The traits table covers every ggml type a GGUF file may carry, so a file can be fully validated (sizes,
 * offsets) even when a tensor's type has no kernel here; ci_type_supported() says which ones compute. */
#ifndef CINFER_KERNELS_QUANT_H
#define CINFER_KERNELS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ci_type {
    CI_TYPE_F32 = 0,
    CI_TYPE_F16 = 1,
    CI_TYPE_Q4_0 = 2,
    CI_TYPE_Q4_1 = 3,
    CI_TYPE_Q5_0 = 6,
    CI_TYPE_Q5_1 = 7,
    CI_TYPE_Q8_0 = 8,
    CI_TYPE_Q8_1 = 9,
    CI_TYPE_Q2_K = 10,
    CI_TYPE_Q3_K = 11,
    CI_TYPE_Q4_K = 12,
    CI_TYPE_Q5_K = 13,
    CI_TYPE_Q6_K = 14,
    CI_TYPE_Q8_K = 15,
    CI_TYPE_IQ2_XXS = 16,
    CI_TYPE_IQ2_XS = 17,
    CI_TYPE_IQ3_XXS = 18,
    CI_TYPE_IQ1_S = 19,
    CI_TYPE_IQ4_NL = 20,
    CI_TYPE_IQ3_S = 21,
    CI_TYPE_IQ2_S = 22,
    CI_TYPE_IQ4_XS = 23,
    CI_TYPE_I8 = 24,
    CI_TYPE_I16 = 25,
    CI_TYPE_I32 = 26,
    CI_TYPE_I64 = 27,
    CI_TYPE_F64 = 28,
    CI_TYPE_IQ1_M = 29,
    CI_TYPE_BF16 = 30,
    CI_TYPE_TQ1_0 = 34,
    CI_TYPE_TQ2_0 = 35,
    CI_TYPE_MXFP4 = 39,
    CI_TYPE_COUNT = 40, // one past the largest id the table knows (ids with block_size 0 are unknown)
};

#define CI_QK8_0 32
#define CI_QK4_0 32

/* Q8_0: 32 weights as int8 with one fp16 scale (34 bytes).  Q4_0: 32 weights as 4-bit (value - 8), low
 * nibbles hold elements 0..15 and high nibbles 16..31, with one fp16 scale (18 bytes).  As in ggml. */
struct ci_block_q8_0 {
    uint16_t d; // fp16 scale
    int8_t qs[CI_QK8_0];
};
struct ci_block_q4_0 {
    uint16_t d; // fp16 scale
    uint8_t qs[CI_QK4_0 / 2];
};

struct ci_type_traits {
    const char *name;    // "F32", "Q8_0", ... (NULL: id not a known type)
    uint32_t block_size; // elements per block
    uint32_t type_size;  // bytes per block
};

const struct ci_type_traits *ci_type_traits(uint32_t type); // NULL for unknown ids
const char *ci_type_name(uint32_t type);                    // "unknown" for unknown ids
/* True where kernels exist (dequantization, dot product, matmul): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4. */
bool ci_type_supported(uint32_t type);
/* A supported type other than F32/F16/BF16: its matmul runs on int8 activations (kernels/matmul.c). */
static inline bool ci_type_quantized(uint32_t type) {
    return type != CI_TYPE_F32 && type != CI_TYPE_F16 && type != CI_TYPE_BF16;
}

/* Quantized types whose kernels read 256-element Q8_K activations (ggml's vec_dot_type Q8_K); the other quantized
 * types read 32-element Q8_0/Q8_1 blocks. */
static inline bool ci_type_uses_q8k(uint32_t type) {
    return type == CI_TYPE_Q2_K || type == CI_TYPE_Q3_K || type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K ||
           type == CI_TYPE_Q6_K || type == CI_TYPE_IQ4_XS;
}
/* Bytes of a row of n elements; false if n is not a multiple of the block size or on overflow. */
bool ci_row_bytes(uint32_t type, uint64_t n, uint64_t *out);

float ci_fp16_to_fp32(uint16_t h);
uint16_t ci_fp32_to_fp16(float f); // round to nearest even, as F16C does
float ci_bf16_to_fp32(uint16_t h);
uint16_t ci_fp32_to_bf16(float f); // round to nearest even (NaN kept quiet)

/* The 16 values of the non-linear 4-bit types (IQ4_NL, IQ4_XS; defined in quantize.c) and MXFP4's E2M1
 * values doubled (its E8M0 scale is halved to match), as ggml defines them. */
extern const int8_t ci_iq4nl_values[16];
extern const int8_t ci_mxfp4_values[16];
/* MXFP4's E8M0 block scale halved: 2^(e - 128), exactly (subnormal for e < 2). */
float ci_e8m0_half_to_fp32(uint8_t e);

/* Reference conversions of one row of n elements (n a multiple of the block size for quantized types).
 * ci_dequantize_row takes every supported type (ggml's block formats; the K-quants and IQ4_XS in 256-element
 * super-blocks); ci_quantize_row every supported type but MXFP4 (the searched quantizers of kernels/quantize.c). */
void ci_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
void ci_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* A tensor: a view into a mapping (or a model-owned buffer).  ne[0] is the row length (contiguous). */
struct ci_tensor {
    const char *name;
    uint32_t type; // enum ci_type
    int n_dims;
    int64_t ne[4];
    uint64_t row_bytes; // bytes from one row to the next: those of ne[0] elements, more for a column slice
    uint64_t nbytes;
    const void *data;
    /* The matrix packed for the selected kernels (ci_pack, made at load; NULL: none).  Views that change
     * data or ne must clear it. */
    const void *packed;
};

#endif
