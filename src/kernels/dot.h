/* Private to kernels/: the per-ISA dot-product tables and the runtime selection between them.
 * dot_ref.c holds the portable scalar versions (the ground truth), dot_avx2.c the AVX2/FMA/F16C ones, and
 * dispatch.c picks a table once at ci_kernels_init.  Every routine computes dot(row of n weights, x) in float
 * with a summation order that depends only on n, so the same row and x always give the same bits. */
#ifndef CINFER_KERNELS_DOT_H
#define CINFER_KERNELS_DOT_H

#include <stdbool.h>
#include <stdint.h>

typedef float (*ci_dot_fn)(const void *row, const float *x, int64_t n);

struct ci_dot_table {
    const char *isa; // "scalar", "avx2+fma+f16c"
    ci_dot_fn f32;
    ci_dot_fn f16;
    ci_dot_fn bf16;
    ci_dot_fn q8_0;
    ci_dot_fn q4_0;
};

/* Longest head_dim ci_attention_paged supports (its per-thread accumulators live on the stack). */
#define CI_ATTN_MAX_HEAD_DIM 256

const struct ci_dot_table *ci_dot_ref_table(void);
/* NULL when the AVX2 versions were not compiled in; only call the routines after a CPU probe said yes. */
const struct ci_dot_table *ci_dot_avx2_table(void);

/* The routine of the selected table for a supported type (CI_ASSERTs the type). */
ci_dot_fn ci_dot_select(uint32_t type);
/* Tests: true forces the scalar table, false restores what the CPU probe (and CINFER_NO_SIMD) chose. */
void ci_kernels_force_scalar(bool on);

#endif
