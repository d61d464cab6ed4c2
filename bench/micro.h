/* What the microbenchmarks outside the build (attn_decode.c, gemv_read.c, kpack_ab.c) share: a monotonic clock,
 * the comparison their medians sort by, a weight type by its name and a weight matrix over quantized rows. */
#ifndef CINFER_BENCH_MICRO_H
#define CINFER_BENCH_MICRO_H

#include <string.h>
#include <time.h>

#include "kernels/quant.h"

static inline double micro_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline int micro_cmp_double(const void *a, const void *b) { // for qsort of doubles, ascending
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline uint32_t micro_type(const char *name) { // CI_TYPE_COUNT when no type is spelled so
    uint32_t type = CI_TYPE_COUNT;
    for (uint32_t t = 0; t < CI_TYPE_COUNT; t++)
        if (strcmp(ci_type_name(t), name) == 0)
            type = t;
    return type;
}

static inline struct ci_tensor micro_matrix(uint32_t type, long n_in, long n_out, uint64_t row_bytes,
                                            void *rows) {
    return (struct ci_tensor){.name = "w",
                              .type = type,
                              .n_dims = 2,
                              .ne = {n_in, n_out, 1, 1},
                              .row_bytes = row_bytes,
                              .nbytes = row_bytes * (uint64_t)n_out,
                              .data = rows};
}

#endif
