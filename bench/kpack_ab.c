/* A/B of the AVX2 packed matmul (kernels/kpack_avx2.c): the library's ci_avx2_mm_kpacked (A) against a variant
 * of that file (B) in one process, alternating call by call, so that both see the same machine; on a noisy VM the
 * medians of separate runs move by a third, their ratio much less.  Prints each one's median and fastest time and
 * B / A, and checks that both gave the same bits.  Not part of the build: compile the variant with its entry
 * point renamed, then this file against a release build's library (bench/KERNELS.md, stop 47):
 *   make -j2 && cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -mavx2 -mfma -mf16c \
 *       -Dci_avx2_mm_kpacked=ci_avx2_mm_kpacked_b -c VARIANT.c -o /tmp/kp_b.o
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/kpack_ab.c /tmp/kp_b.o build/release/libcinfer.a \
 *       -lpthread -lm -o /tmp/kpack_ab
 *   /tmp/kpack_ab TYPE N_IN N_OUT M ROUNDS THREADS TOKENS
 * e.g. Q4_K 2048 5632 2 40 2 16: 16 tokens against two copies of a tinyllama FFN matrix (in L3 here), 40 rounds.
 * The old tile as B (git show REV:src/kernels/kpack_avx2.c) gives old / new. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "micro.h" // bench/micro.h, beside this file
#include "core/mem.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "kernels/dot.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

void ci_avx2_mm_kpacked_b(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1);

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s TYPE N_IN N_OUT M ROUNDS THREADS TOKENS\n", argv[0]);
        return 2;
    }
    const uint32_t type = micro_type(argv[1]);
    const long n_in = atol(argv[2]), n_out = atol(argv[3]);
    const int n_mat = atoi(argv[4]), rounds = atoi(argv[5]), n_threads = atoi(argv[6]), n_tok = atoi(argv[7]);
    uint64_t row_bytes = 0;
    if (type == CI_TYPE_COUNT || n_in <= 0 || n_out <= 0 || n_mat <= 0 || rounds <= 0 || n_threads <= 0 ||
        n_threads > 8 || n_tok <= 0 || n_tok > 512 || !ci_row_bytes(type, (uint64_t)n_in, &row_bytes)) {
        fprintf(stderr, "%s: bad arguments (TYPE as ci_type_name spells it, e.g. Q4_K)\n", argv[0]);
        return 2;
    }
    ci_kernels_init();
    static struct ci_dot_table a, b; // the CPU's table, and the same with the variant wherever A's entry is
    a = *ci_kernels_table();
    b = a;
    if (a.mm_packed[type] == NULL || strcmp(a.isa, "avx2+fma+f16c") != 0) {
        fprintf(stderr,
                "%s: the kernel table is %s, with no packed %s: run it where the AVX2 table is chosen "
                "(CINFER_NO_AVX512=1 on an AVX-512 CPU)\n",
                argv[0], a.isa, argv[1]);
        return 2;
    }
    for (int t = 0; t < CI_TYPE_COUNT; t++)
        if (b.mm_packed[t] == ci_avx2_mm_kpacked)
            b.mm_packed[t] = ci_avx2_mm_kpacked_b;
    struct ci_threadpool *tp = NULL;
    if (ci_threadpool_create(n_threads, &tp, NULL) != CI_OK)
        return 1;
    struct ci_rng rng;
    ci_rng_seed(&rng, 1);
    float *row = malloc((size_t)n_in * sizeof *row), *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    float *y[2] = {malloc((size_t)(n_out * n_tok) * sizeof(float)),
                   malloc((size_t)(n_out * n_tok) * sizeof(float))};
    for (long i = 0; i < n_in * n_tok; i++)
        x[i] = (float)ci_rng_f64(&rng) - 0.5f;
    uint8_t *q = ci_malloc_aligned(row_bytes * (size_t)n_out); // quantized once, copied M times
    for (long r = 0; r < n_out; r++) {
        for (long i = 0; i < n_in; i++)
            row[i] = (float)ci_rng_f64(&rng) - 0.5f;
        ci_quantize_row(type, row, q + (size_t)r * row_bytes, n_in);
    }
    struct ci_tensor *w = calloc((size_t)n_mat, sizeof *w);
    for (int m = 0; m < n_mat; m++) {
        uint8_t *d = ci_malloc_aligned(row_bytes * (size_t)n_out);
        memcpy(d, q, row_bytes * (size_t)n_out);
        w[m] = micro_matrix(type, n_in, n_out, row_bytes, d);
        void *p = ci_malloc_aligned(ci_pack_bytes(&w[m]));
        ci_pack(&w[m], p);
        w[m].packed = p;
    }
    void *work = ci_malloc_aligned(ci_matmul_work_bytes(type, n_in, n_tok) + 64);
    double *t_ab[2] = {malloc((size_t)rounds * sizeof(double)), malloc((size_t)rounds * sizeof(double))};
    for (int p = -1; p < rounds; p++) // round -1 warms the pages and the pool; the order alternates
        for (int k = 0; k < 2; k++) {
            const int v = (k + p + 1) % 2;
            ci_kernels_force_table(v ? &b : &a);
            double t0 = micro_now_s();
            for (int m = 0; m < n_mat; m++)
                ci_matmul(tp, &w[m], x, n_tok, y[v], work);
            if (p >= 0)
                t_ab[v][p] = micro_now_s() - t0;
        }
    ci_kernels_force_table(NULL);
    const bool same = memcmp(y[0], y[1], (size_t)(n_out * n_tok) * sizeof(float)) == 0;
    qsort(t_ab[0], (size_t)rounds, sizeof(double), micro_cmp_double);
    qsort(t_ab[1], (size_t)rounds, sizeof(double), micro_cmp_double);
    const double flop = 2.0 * (double)n_in * (double)n_out * n_mat * n_tok * 1e-9;
    const double ma = t_ab[0][rounds / 2], mb = t_ab[1][rounds / 2];
    printf("%s %ld x %ld x %d, %d threads, %d tokens, %d rounds: A median %.3f ms (%.0f GFLOP/s), fastest "
           "%.3f | "
           "B median %.3f ms (%.0f GFLOP/s), fastest %.3f | B / A median %.3f, fastest %.3f | %s\n",
           argv[1], n_in, n_out, n_mat, n_threads, n_tok, rounds, ma * 1e3, flop / ma, t_ab[0][0] * 1e3,
           mb * 1e3, flop / mb, t_ab[1][0] * 1e3, mb / ma, t_ab[1][0] / t_ab[0][0],
           same ? "same bits" : "BITS DIFFER");
    return same ? 0 : 1;
}
