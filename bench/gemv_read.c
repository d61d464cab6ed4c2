/* How close decode's matrix-vector products come to the memory: one token (or TOKENS) against M random
 * matrices of a weight type (packed as the model loader packs them), every pass over all M, against a plain
 * read of the same bytes by the same thread pool (each thread an equal contiguous share of each matrix, 64-bit
 * loads).
 * The two alternate, pass after pass, so that both see the same machine; it prints each one's median GB/s.
 * A roofline from `cinfer bench hw` is the best window of a read of a huge-page buffer; this is what a read
 * of the weights themselves sustains.  Not part of the build: compile it against a release build's library
 * (bench/RESULTS.md, issues 11 and 12):
 *   make -j2 && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude bench/gemv_read.c build/release/libcinfer.a \
 *       -lpthread -lm -o /tmp/gemv_read
 *   /tmp/gemv_read TYPE N_IN N_OUT M PASSES THREADS [TOKENS]
 * e.g. Q4_K 2048 5632 40 9 2: tinyllama's FFN, 40 copies.  TOKENS (default 1) multiplies that many tokens (a
 * small batch, a speculative verification) and adds the matmul's GFLOP/s; the read stays one pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "micro.h" // bench/micro.h, beside this file
#include "core/mem.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

struct read_job {
    const uint8_t *p;
    size_t bytes;
    int n_threads;
    uint64_t sum[64]; // one slot per thread, a cache line apart
};

static void read_task(void *ctx, int task, int thread) {
    (void)thread;
    struct read_job *j = ctx;
    size_t share = j->bytes / (size_t)j->n_threads / 64 * 64;
    const uint64_t *w = (const uint64_t *)(const void *)(j->p + share * (size_t)task);
    uint64_t acc = 0;
    for (size_t i = 0; i < share / 8; i += 8)
        acc += w[i] ^ w[i + 1] ^ w[i + 2] ^ w[i + 3] ^ w[i + 4] ^ w[i + 5] ^ w[i + 6] ^ w[i + 7];
    j->sum[8 * (task % 8)] += acc;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: %s TYPE N_IN N_OUT M PASSES THREADS [TOKENS]\n", argv[0]);
        return 2;
    }
    const uint32_t type = micro_type(argv[1]);
    const long n_in = atol(argv[2]), n_out = atol(argv[3]);
    const int n_mat = atoi(argv[4]), passes = atoi(argv[5]), n_threads = atoi(argv[6]);
    const int n_tok = argc == 8 ? atoi(argv[7]) : 1;
    uint64_t row_bytes = 0;
    if (type == CI_TYPE_COUNT || !ci_type_supported(type) || n_in <= 0 || n_out <= 0 || n_mat <= 0 ||
        passes <= 0 || n_threads <= 0 || n_threads > 8 || n_tok <= 0 || n_tok > 512 ||
        !ci_row_bytes(type, (uint64_t)n_in, &row_bytes)) {
        fprintf(stderr, "%s: bad arguments (TYPE as ci_type_name spells it, e.g. Q4_K; at most 8 threads)\n",
                argv[0]);
        return 2;
    }
    ci_kernels_init();
    struct ci_threadpool *tp = NULL;
    if (ci_threadpool_create(n_threads, &tp, NULL) != CI_OK)
        return 1;
    struct ci_rng rng;
    ci_rng_seed(&rng, 1);
    float *row = malloc((size_t)n_in * sizeof *row), *x = malloc((size_t)(n_in * n_tok) * sizeof *x),
          *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
    for (long i = 0; i < n_in * n_tok; i++)
        x[i] = (float)ci_rng_f64(&rng) - 0.5f;
    struct ci_tensor *w = calloc((size_t)n_mat, sizeof *w);
    size_t total = 0;
    for (int m = 0; m < n_mat; m++) {
        uint8_t *d = ci_malloc_aligned(row_bytes * (size_t)n_out);
        for (long r = 0; r < n_out; r++) {
            for (long i = 0; i < n_in; i++)
                row[i] = (float)ci_rng_f64(&rng) - 0.5f;
            ci_quantize_row(type, row, d + (size_t)r * row_bytes, n_in);
        }
        w[m] = micro_matrix(type, n_in, n_out, row_bytes, d);
        size_t pb = ci_pack_bytes(&w[m]);
        if (pb) { // decode reads the packed copy, as a loaded model does
            void *p = ci_malloc_aligned(pb);
            ci_pack(&w[m], p);
            w[m].packed = p;
        }
        total += pb ? pb : (size_t)w[m].nbytes;
    }
    void *work = ci_malloc_aligned(ci_matmul_work_bytes(type, n_in, n_tok) + 64);
    double *t_mm = malloc((size_t)passes * sizeof *t_mm), *t_rd = malloc((size_t)passes * sizeof *t_rd);
    struct read_job job = {.n_threads = n_threads};
    for (int p = -1; p < passes; p++) { // pass -1 warms the pages, the TLB and the pool
        double t0 = micro_now_s();
        for (int m = 0; m < n_mat; m++)
            ci_matmul(tp, &w[m], x, n_tok, y, work);
        double t1 = micro_now_s();
        for (int m = 0; m < n_mat; m++) {
            job.p = w[m].packed ? w[m].packed : w[m].data;
            job.bytes = w[m].packed ? ci_pack_bytes(&w[m]) : (size_t)w[m].nbytes;
            ci_threadpool_run(tp, read_task, &job, n_threads);
        }
        double t2 = micro_now_s();
        if (p >= 0) {
            t_mm[p] = t1 - t0;
            t_rd[p] = t2 - t1;
        }
    }
    qsort(t_mm, (size_t)passes, sizeof *t_mm, micro_cmp_double);
    qsort(t_rd, (size_t)passes, sizeof *t_rd, micro_cmp_double);
    const double t = t_mm[passes / 2];
    printf(
        "%s %ld x %ld x %d (%.1f MiB), %d threads, %d token%s, median of %d passes: matmul %.3f ms a pass, "
        "%.2f GB/s, %.1f GFLOP/s; plain read %.2f GB/s (matmul at %.0f%% of it)\n",
        argv[1], n_in, n_out, n_mat, (double)total / (1 << 20), n_threads, n_tok, n_tok == 1 ? "" : "s",
        passes, t * 1e3, (double)total / t * 1e-9,
        2.0 * (double)n_in * (double)n_out * n_mat * n_tok / t * 1e-9,
        (double)total / t_rd[passes / 2] * 1e-9, 100.0 * t_rd[passes / 2] / t);
    return job.sum[0] == 42 ? 3 : 0; // keeps the reads
}
