/* Where decode's weight prefetches go, shared by the AVX2 and AVX-512 tables' matmuls (dot_avx2.c,
 * kpack_avx2.c, dot_avx512.c).  A decode tile reads its weights once, straight from memory, and prefetches
 * them a few KiB ahead; into L1 (T0) or L2 (T1) as the CPU's tuning row says (ci_kernel_tune.
 * decode_prefetch_l2, bench/KERNELS.md): on Intel a T0 prefetch holds one of the core's few L1 fill buffers for
 * a whole DRAM round trip.  Same bits either way.  Not a standalone header: the includer defines AI (the
 * function qualifiers) and includes <immintrin.h> first. */
#ifndef CINFER_KERNELS_PREFETCH_INL_H
#define CINFER_KERNELS_PREFETCH_INL_H

#include "kernels/kernels.h"

/* A tile's weight stream: prefetched into L1 or L2, or not at all (its rows are already cached: a later token
 * group over the same block, a prefill tile). */
enum ci_prefetch { CI_PREFETCH_NONE, CI_PREFETCH_L1, CI_PREFETCH_L2 };

/* The prefetch a decode tile uses on this CPU (read once per matmul panel, not per line). */
static inline enum ci_prefetch ci_decode_prefetch(void) {
    return ci_kernels_tune()->decode_prefetch_l2 ? CI_PREFETCH_L2 : CI_PREFETCH_L1;
}

/* The line holding p into the cache `where` names (nothing for CI_PREFETCH_NONE). */
AI void ci_prefetch_line(const void *p, enum ci_prefetch where) {
    if (where == CI_PREFETCH_L2)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
    else if (where == CI_PREFETCH_L1)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
}

#endif
