/* Quantizers of a row of floats into ggml's block formats for the types whose choice of scales is a search:
 * Q4_1, Q5_0, Q5_1, the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the non-linear IQ4_NL, IQ4_XS.  They follow
 * llama.cpp's reference quantizers without an importance matrix (what `llama-quantize` does without
 * --imatrix), so files we write have the same quality and dequantize as llama.cpp expects:
 *   Q4_1, Q5_0, Q5_1   min/max (or signed max) per block of 32, as ggml's reference;
 *   Q2_K, Q4_K, Q5_K   a weighted least-squares search of scale and min per sub-block (make_qkx2_quants);
 *   Q3_K               per sub-block a signed scale refined by coordinate descent (make_q3_quants);
 *   Q6_K               per sub-block the best of 19 candidate scales (make_qx_quants);
 *   IQ4_NL, IQ4_XS     the best of 15 candidate scales onto the 16-value non-linear grid.
 * Non-finite inputs are read as 0 and every fp16 scale saturates at +-65504, so the output never holds a NaN
 * or an infinity; an all-zero block gives zero scales.  n must be a multiple of the type's block size (32 or
 * 256).  Pure functions on caller buffers: safe on any number of threads.  ci_quantize_row (quant.h) calls
 * these; call them directly only in tests. */
#ifndef CINFER_KERNELS_QUANTIZE_H
#define CINFER_KERNELS_QUANTIZE_H

#include <stdint.h>

/* The 16 values of IQ4_NL/IQ4_XS, as ggml's kvalues_iq4nl (sorted ascending). */
extern const int8_t ci_iq4nl_values[16];

void ci_quantize_row_q4_1(const float *x, void *dst, int64_t n);
void ci_quantize_row_q5_0(const float *x, void *dst, int64_t n);
void ci_quantize_row_q5_1(const float *x, void *dst, int64_t n);
void ci_quantize_row_q2_k(const float *x, void *dst, int64_t n);
void ci_quantize_row_q3_k(const float *x, void *dst, int64_t n);
void ci_quantize_row_q4_k(const float *x, void *dst, int64_t n);
void ci_quantize_row_q5_k(const float *x, void *dst, int64_t n);
void ci_quantize_row_q6_k(const float *x, void *dst, int64_t n);
void ci_quantize_row_iq4_nl(const float *x, void *dst, int64_t n);
void ci_quantize_row_iq4_xs(const float *x, void *dst, int64_t n);

#endif
