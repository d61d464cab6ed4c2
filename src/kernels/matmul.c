/* y = x · W^T over a thread pool.  Output rows are cut into chunks handed out as pool tasks; a task computes
 * its rows for every token of the batch, so each weight row is streamed from memory once per step and reused
 * across tokens.  Each y[t][o] is one ci_dot call on (row o, x[t]) whose order depends only on n_in: the bits
 * do not depend on the thread count, the chunking, or which other tokens share the batch. */
#include "kernels/kernels.h"

#include "core/check.h"
#include "core/threadpool.h"
#include "kernels/dot.h"

struct matmul_job {
    ci_dot_fn dot;
    const uint8_t *w; // [n_out] rows of row_bytes
    size_t row_bytes;
    int64_t n_in, n_out;
    const float *x; // [n_tok][n_in]
    float *y;       // [n_tok][n_out]
    int n_tok;
    int64_t rows_per_chunk;
};

static void matmul_chunk(void *ctx, int task, int thread) {
    (void)thread;
    const struct matmul_job *j = ctx;
    int64_t o0 = (int64_t)task * j->rows_per_chunk;
    int64_t o1 = o0 + j->rows_per_chunk < j->n_out ? o0 + j->rows_per_chunk : j->n_out;
    for (int64_t o = o0; o < o1; o++) {
        const void *row = j->w + (size_t)o * j->row_bytes;
        for (int t = 0; t < j->n_tok; t++)
            j->y[(size_t)t * (size_t)j->n_out + (size_t)o] =
                j->dot(row, j->x + (size_t)t * (size_t)j->n_in, j->n_in);
    }
}

size_t ci_matmul_work_bytes(uint32_t type, int64_t n_in, int n_tok) {
    (void)type, (void)n_in, (void)n_tok;
    return 0; // activations stay float for now; the workspace is for quantized activations later
}

void ci_matmul(struct ci_threadpool *tp, const struct ci_tensor *w, const float *x, int n_tok, float *y,
               void *work) {
    (void)work;
    CI_ASSERT(w && ci_type_supported(w->type) && n_tok >= 0);
    int64_t n_in = w->ne[0], n_out = w->ne[1];
    uint64_t row_bytes = 0;
    CI_ASSERT(n_in > 0 && n_out > 0 && ci_row_bytes(w->type, (uint64_t)n_in, &row_bytes));
    CI_ASSERT(row_bytes == w->row_bytes);
    if (n_tok == 0)
        return;

    int n_threads = tp ? ci_threadpool_n_threads(tp) : 1;
    // 64-row chunks, shrunk down to 8 rows while there are fewer than ~4 chunks per thread (load balance).
    int64_t rows = 64;
    while (rows > 8 && (n_out + rows - 1) / rows < 4 * (int64_t)n_threads)
        rows /= 2;
    int64_t n_chunks = (n_out + rows - 1) / rows;
    CI_ASSERT(n_chunks <= INT32_MAX);

    struct matmul_job j = {
        .dot = ci_dot_select(w->type),
        .w = w->data,
        .row_bytes = (size_t)row_bytes,
        .n_in = n_in,
        .n_out = n_out,
        .x = x,
        .y = y,
        .n_tok = n_tok,
        .rows_per_chunk = rows,
    };
    if (tp) {
        ci_threadpool_run(tp, matmul_chunk, &j, (int)n_chunks);
    } else {
        for (int c = 0; c < (int)n_chunks; c++)
            matmul_chunk(&j, c, 0);
    }
}
