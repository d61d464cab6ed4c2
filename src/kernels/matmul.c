/* y = x · W^T over a thread pool.
 * Quantized weights first get their activations quantized to int8, once per matmul, into the caller's
 * workspace (as llama.cpp does), so the dots run on int8: 32-element blocks (struct ci_act_q8) for the
 * 32-block types, 256-element super-blocks with 16-element sums (struct ci_act_q8k, ggml's Q8_K) for the
 * K-quants and IQ4_XS.  The output rows are then cut into
 * tasks: for decode-sized batches (weights streamed once, bandwidth-bound) one equal share per thread; for
 * larger batches row chunks whose weights fit in L2, each computing every token (split by tokens too when
 * there are too few rows to keep the threads busy).  The per-ISA kernels (dot.h) tile each task's panel in
 * registers; every element follows the reduction order of dot.h, so the bits do not depend on the thread
 * count, the chunking, the tile shapes or which other tokens share the batch. */
#include "kernels/kernels.h"

#include "core/check.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "kernels/dot.h"
#include "kernels/pack16.h"

// Batches up to this many tokens are bandwidth-bound: split the rows into equal shares.  Two a thread, not
// four: each task restarts the memory streams, which costs a small model's matrices (a few hundred KiB) more
// than the finer balance gains (bench/RESULTS.md, 2026-12-06: 135M Q4_0 decode 7% faster, 1.1B level).
#define GEMV_MAX_TOKENS        4
#define GEMV_SHARES_PER_THREAD 2
#define GEMV_MIN_SHARE_ROWS    64
// Weight bytes of one GEMM task's rows (stay in L2 while the task's tokens stream over them).
#define TASK_L2_BYTES (256 * 1024)
// Quantize activations on the pool from this many tokens on (below, the caller does it: a few microseconds).
#define PARALLEL_QUANT_TOKENS 32
#define QUANT_TOKENS_PER_TASK 16

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Workspace layout for quantized activations: qs, then d, then sum, then s, each 64-byte aligned.  Returns false on
 * overflow. */
static bool act_layout(int64_t n_in, int n_tok, size_t *qs_bytes, size_t *vec_bytes, int *tok_stride) {
    int stride = (n_tok + 7) / 8 * 8;
    if (stride < 8)
        stride = 8;
    size_t qb, nv, vb;
    if (!ci_mul_size((size_t)n_in, (size_t)n_tok, &qb) || qb > SIZE_MAX - 64 ||
        !ci_mul_size((size_t)(n_in / 32), (size_t)stride, &nv) || !ci_mul_size(nv, 4, &vb) ||
        vb > SIZE_MAX - 64)
        return false;
    *qs_bytes = align64(qb);
    *vec_bytes = align64(vb);
    *tok_stride = stride;
    return true;
}

/* Workspace layout for Q8_K activations: qs, then d [n_tok][n_in / 256], then bsum [n_tok][n_in / 16], each
 * 64-byte aligned.  Returns false on overflow. */
static bool act_k_layout(int64_t n_in, int n_tok, size_t *qs_bytes, size_t *d_bytes, size_t *bsum_bytes) {
    size_t qb, db, sb;
    if (!ci_mul_size((size_t)n_in, (size_t)n_tok, &qb) || qb > SIZE_MAX - 64 ||
        !ci_mul_size((size_t)(n_in / 256) * 4, (size_t)n_tok, &db) || db > SIZE_MAX - 64 ||
        !ci_mul_size((size_t)(n_in / 16) * 2, (size_t)n_tok, &sb) || sb > SIZE_MAX - 64)
        return false;
    *qs_bytes = align64(qb);
    *d_bytes = align64(db);
    *bsum_bytes = align64(sb);
    return true;
}

/* Whether the selected table's packed matmul of this float type reads permuted activations (struct ci_mm.xp). */
static bool float_act_packed(const struct ci_dot_table *tab, uint32_t type, int64_t n_in) {
    return (type == CI_TYPE_F16 || type == CI_TYPE_BF16) && tab->mm_packed[type] && tab->float_residues > 0 &&
           n_in % 16 == 0;
}

size_t ci_matmul_work_bytes(uint32_t type, int64_t n_in, int n_tok) {
    if (n_in <= 0 || n_tok <= 0)
        return 0;
    if (float_act_packed(ci_kernels_table(), type, n_in)) {
        size_t b;
        return ci_mul_size((size_t)(n_tok + CI_PK_FLOAT_TOKENS + 1), (size_t)n_in * sizeof(float), &b)
                   ? ci_pk_float_act_bytes(n_in, n_tok)
                   : SIZE_MAX;
    }
    if (!ci_type_quantized(type))
        return 0;
    size_t qb, vb, total;
    if (ci_type_uses_q8k(type)) {
        size_t sb;
        if (!act_k_layout(n_in, n_tok, &qb, &vb, &sb) || !ci_add_size(qb, vb, &total) ||
            !ci_add_size(total, sb, &total))
            return SIZE_MAX;
        return total;
    }
    int stride;
    if (!act_layout(n_in, n_tok, &qb, &vb, &stride) || !ci_add_size(qb, vb, &total) ||
        !ci_add_size(total, vb, &total) || !ci_add_size(total, vb, &total))
        return SIZE_MAX; // an allocation of this size fails cleanly
    return total;
}

struct quant_job {
    ci_quant_act_fn fn;
    const float *x; // [n_tok][n_in]
    struct ci_act_q8 *q;
};

static void quant_tokens(const struct quant_job *j, int t0, int t1) {
    struct ci_act_q8 *q = j->q;
    for (int t = t0; t < t1; t++)
        j->fn(j->x + (size_t)t * (size_t)q->n_in, q->n_in, q->qs + (size_t)t * (size_t)q->n_in, q->d + t,
              q->sum + t, q->s + t, q->tok_stride);
}

static void quant_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct quant_job *j = ctx;
    int t0 = task * QUANT_TOKENS_PER_TASK;
    int t1 = t0 + QUANT_TOKENS_PER_TASK < j->q->n_tok ? t0 + QUANT_TOKENS_PER_TASK : j->q->n_tok;
    quant_tokens(j, t0, t1);
}

static void quantize_activations(struct ci_threadpool *tp, ci_quant_act_fn fn, const float *x,
                                 struct ci_act_q8 *q) {
    struct quant_job j = {.fn = fn, .x = x, .q = q};
    if (tp && ci_threadpool_n_threads(tp) > 1 && q->n_tok >= PARALLEL_QUANT_TOKENS)
        ci_threadpool_run(tp, quant_task, &j, (q->n_tok + QUANT_TOKENS_PER_TASK - 1) / QUANT_TOKENS_PER_TASK);
    else
        quant_tokens(&j, 0, q->n_tok);
    // Padding columns repeat the last token, so tiles that clamp to it read defined values.
    for (int64_t b = 0; b < q->n_in / 32; b++) {
        size_t base = (size_t)b * (size_t)q->tok_stride;
        for (int t = q->n_tok; t < q->tok_stride; t++) {
            q->d[base + (size_t)t] = q->d[base + (size_t)q->n_tok - 1];
            q->sum[base + (size_t)t] = q->sum[base + (size_t)q->n_tok - 1];
            q->s[base + (size_t)t] = q->s[base + (size_t)q->n_tok - 1];
        }
    }
}

struct quant_k_job {
    ci_quant_act_k_fn fn;
    const float *x; // [n_tok][n_in]
    const struct ci_act_q8k *q;
};

static void quant_k_tokens(const struct quant_k_job *j, int t0, int t1) {
    const struct ci_act_q8k *q = j->q;
    for (int t = t0; t < t1; t++)
        j->fn(j->x + (size_t)t * (size_t)q->n_in, q->n_in, q->qs + (size_t)t * (size_t)q->n_in,
              q->d + (size_t)t * (size_t)(q->n_in / 256), q->bsum + (size_t)t * (size_t)(q->n_in / 16));
}

static void quant_k_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct quant_k_job *j = ctx;
    int t0 = task * QUANT_TOKENS_PER_TASK;
    int t1 = t0 + QUANT_TOKENS_PER_TASK < j->q->n_tok ? t0 + QUANT_TOKENS_PER_TASK : j->q->n_tok;
    quant_k_tokens(j, t0, t1);
}

static void quantize_activations_k(struct ci_threadpool *tp, ci_quant_act_k_fn fn, const float *x,
                                   const struct ci_act_q8k *q) {
    struct quant_k_job j = {.fn = fn, .x = x, .q = q};
    if (tp && ci_threadpool_n_threads(tp) > 1 && q->n_tok >= PARALLEL_QUANT_TOKENS)
        ci_threadpool_run(tp, quant_k_task, &j,
                          (q->n_tok + QUANT_TOKENS_PER_TASK - 1) / QUANT_TOKENS_PER_TASK);
    else
        quant_k_tokens(&j, 0, q->n_tok);
}

struct float_act_job {
    int residues;
    const float *x; // [n_tok][n_in]
    int64_t n_in;
    int n_tok;
    float *xp;
};

static void float_act_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct float_act_job *j = ctx;
    int t0 = task * QUANT_TOKENS_PER_TASK;
    int t1 = t0 + QUANT_TOKENS_PER_TASK < j->n_tok ? t0 + QUANT_TOKENS_PER_TASK : j->n_tok;
    ci_pk_float_act(j->residues, j->x, j->n_in, t0, t1, j->xp);
}

/* The activations of packed F16/BF16 rows in their order (pack16.h ci_pk_float_act). */
static void permute_activations(struct ci_threadpool *tp, int residues, const float *x, int64_t n_in,
                                int n_tok, float *xp) {
    struct float_act_job j = {.residues = residues, .x = x, .n_in = n_in, .n_tok = n_tok, .xp = xp};
    if (tp && ci_threadpool_n_threads(tp) > 1 && n_tok >= PARALLEL_QUANT_TOKENS)
        ci_threadpool_run(tp, float_act_task, &j,
                          (n_tok + QUANT_TOKENS_PER_TASK - 1) / QUANT_TOKENS_PER_TASK);
    else
        ci_pk_float_act(residues, x, n_in, 0, n_tok, xp);
}

/* One matrix of a matmul job: its kernel, operands and how its output is cut into tasks. */
struct mm_part {
    ci_mm_fn mm;
    struct ci_mm m;
    int64_t rows_per_task;
    int64_t n_row_tasks;
    int toks_per_task;
    int64_t n_tasks;
};

/* A job is one pool dispatch over the tasks of up to CI_MATMUL_GROUP_MAX matrices that share their input:
 * decode issues many short matmuls, and each dispatch costs a wake-up and a barrier. */
struct matmul_job {
    int n_parts;
    struct mm_part part[CI_MATMUL_GROUP_MAX];
};

static void matmul_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct matmul_job *j = ctx;
    const struct mm_part *p = j->part;
    int64_t k = task;
    while (k >= p->n_tasks) {
        k -= p->n_tasks;
        p++;
    }
    int64_t rt = k % p->n_row_tasks, tt = k / p->n_row_tasks;
    int64_t r0 = rt * p->rows_per_task;
    int64_t r1 = r0 + p->rows_per_task < p->m.n_out ? r0 + p->rows_per_task : p->m.n_out;
    int t0 = (int)tt * p->toks_per_task;
    int t1 = t0 + p->toks_per_task < p->m.n_tok ? t0 + p->toks_per_task : p->m.n_tok;
    if (r0 < r1 && t0 < t1)
        p->mm(&p->m, r0, r1, t0, t1);
}

static int64_t round_up(int64_t v, int64_t a) {
    return (v + a - 1) / a * a;
}

/* Cuts one matrix's output into tasks. */
static void plan_part(struct mm_part *p, int n_threads) {
    int64_t n_out = p->m.n_out;
    int n_tok = p->m.n_tok;
    if (n_tok <= GEMV_MAX_TOKENS) {
        // Bandwidth-bound: a few large equal shares per thread (big contiguous streams for the prefetchers,
        // and a thread that starts late or is preempted by another process leaves shares to the others).
        int64_t shares = (int64_t)n_threads * GEMV_SHARES_PER_THREAD;
        if (shares > n_out / GEMV_MIN_SHARE_ROWS)
            shares = n_out / GEMV_MIN_SHARE_ROWS > n_threads ? n_out / GEMV_MIN_SHARE_ROWS : n_threads;
        p->rows_per_task = round_up((n_out + shares - 1) / shares, CI_MM_ROW_ALIGN);
        p->n_row_tasks = (n_out + p->rows_per_task - 1) / p->rows_per_task;
        p->toks_per_task = n_tok;
        p->n_tasks = p->n_row_tasks;
        return;
    }
    // Compute-bound: row chunks that fit in L2, at least 8 per thread for balance; split the tokens too
    // (in multiples of 24, whole register tiles of 6 and 8) when there are too few row chunks.
    int64_t rows = (int64_t)(TASK_L2_BYTES / p->m.row_bytes);
    int64_t fair = (n_out + 8 * n_threads - 1) / (8 * (int64_t)n_threads);
    rows = rows < fair ? rows : fair;
    rows = rows < CI_MM_ROW_ALIGN ? CI_MM_ROW_ALIGN : round_up(rows, CI_MM_ROW_ALIGN);
    p->rows_per_task = rows;
    p->n_row_tasks = (n_out + rows - 1) / rows;
    int tok_groups = 1;
    if (n_threads > 1 && p->n_row_tasks < 4 * n_threads) {
        int64_t want = (4 * n_threads + p->n_row_tasks - 1) / p->n_row_tasks;
        int64_t max_groups = (n_tok + 23) / 24;
        tok_groups = (int)(want < max_groups ? want : max_groups);
    }
    p->toks_per_task = (int)round_up((n_tok + tok_groups - 1) / tok_groups, tok_groups > 1 ? 24 : 1);
    p->n_tasks = p->n_row_tasks * ((n_tok + p->toks_per_task - 1) / p->toks_per_task);
}

/* Which activation form a weight type's kernels read. */
enum act_kind { ACT_FLOAT, ACT_Q8, ACT_Q8K };

static enum act_kind act_kind_of(uint32_t type) {
    if (ci_type_uses_q8k(type))
        return ACT_Q8K;
    return ci_type_quantized(type) ? ACT_Q8 : ACT_FLOAT;
}

/* The workspace of a group: the Q8 activations first (when any part needs them), then the Q8_K ones, then
 * the permuted float ones (all 64-byte multiples: each form starts aligned). */
static bool group_work_layout(int n_w, const struct ci_tensor *const *w, int n_tok, size_t *q8_bytes,
                              size_t *q8k_bytes, size_t *fp_bytes) {
    *q8_bytes = *q8k_bytes = *fp_bytes = 0;
    for (int i = 0; i < n_w; i++) {
        size_t b = ci_matmul_work_bytes(w[i]->type, w[i]->ne[0], n_tok);
        if (b == SIZE_MAX)
            return false;
        enum act_kind kind = act_kind_of(w[i]->type);
        size_t *slot = kind == ACT_Q8K ? q8k_bytes : kind == ACT_Q8 ? q8_bytes : fp_bytes;
        if (b > *slot)
            *slot = b;
    }
    return *q8_bytes <= SIZE_MAX - *q8k_bytes && *q8_bytes + *q8k_bytes <= SIZE_MAX - *fp_bytes;
}

size_t ci_matmul_group_work_bytes(int n_w, const struct ci_tensor *const *w, int n_tok) {
    size_t q8 = 0, q8k = 0, fp = 0;
    return group_work_layout(n_w, w, n_tok, &q8, &q8k, &fp) ? q8 + q8k + fp : SIZE_MAX;
}

void ci_matmul_group(struct ci_threadpool *tp, int n_w, const struct ci_tensor *const *w, const float *x,
                     int n_tok, float *const *y, void *work) {
    CI_ASSERT(n_w >= 1 && n_w <= CI_MATMUL_GROUP_MAX && n_tok >= 0);
    if (n_tok == 0)
        return;
    const struct ci_dot_table *tab = ci_kernels_table();
    const int64_t n_in = w[0]->ne[0];
    size_t q8_bytes = 0, q8k_bytes = 0, fp_bytes = 0;
    bool sized = group_work_layout(n_w, w, n_tok, &q8_bytes, &q8k_bytes, &fp_bytes);
    CI_ASSERT(sized);
    struct ci_act_q8 q;
    struct ci_act_q8k qk;
    float *xp = NULL;
    bool have_q8 = false, have_q8k = false;
    int n_threads = tp ? ci_threadpool_n_threads(tp) : 1;
    struct matmul_job j = {.n_parts = n_w};
    int64_t n_tasks = 0;
    for (int i = 0; i < n_w; i++) {
        const struct ci_tensor *t = w[i];
        CI_ASSERT(t && ci_type_supported(t->type) && t->ne[0] == n_in);
        int64_t n_out = t->ne[1];
        uint64_t row_bytes = 0;
        CI_ASSERT(n_in > 0 && n_out > 0 && ci_row_bytes(t->type, (uint64_t)n_in, &row_bytes));
        // A column slice (a tensor-parallel shard, model/shard.c) strides by the whole row: row_bytes is larger.
        CI_ASSERT(row_bytes <= t->row_bytes);
        struct mm_part *p = &j.part[i];
        const bool packed = t->packed && tab->mm_packed[t->type];
        *p = (struct mm_part){
            .mm = packed ? tab->mm_packed[t->type] : ci_mm_select(tab, t->type),
            .m = {.type = t->type,
                  .w = t->data,
                  .row_bytes = (size_t)t->row_bytes,
                  .n_in = n_in,
                  .n_out = n_out,
                  .x = x,
                  .y = y[i],
                  .n_tok = n_tok,
                  .packed = packed ? t->packed : NULL},
        };
        // Each activation form is made once for the whole group.
        enum act_kind kind = act_kind_of(t->type);
        if (kind == ACT_Q8K) {
            if (!have_q8k) {
                uint8_t *base = (uint8_t *)work + q8_bytes;
                size_t qb = 0, db = 0, sb = 0;
                bool ok = act_k_layout(n_in, n_tok, &qb, &db, &sb);
                CI_ASSERT(ok && work && ((uintptr_t)base & 63) == 0 && n_in % 256 == 0);
                qk.qs = (int8_t *)base;
                qk.d = (float *)(void *)(base + qb);
                qk.bsum = (int16_t *)(void *)(base + qb + db);
                qk.n_in = n_in;
                qk.n_tok = n_tok;
                quantize_activations_k(tp, ci_quant_act_k_select(tab), x, &qk);
                have_q8k = true;
            }
            p->m.qk = &qk;
        } else if (kind == ACT_Q8) {
            if (!have_q8) {
                size_t qb = 0, vb = 0;
                bool ok = act_layout(n_in, n_tok, &qb, &vb, &q.tok_stride);
                CI_ASSERT(ok && work && ((uintptr_t)work & 63) == 0 && n_in % 32 == 0);
                q.qs = work;
                q.d = (float *)(void *)((uint8_t *)work + qb);
                q.sum = (int32_t *)(void *)((uint8_t *)work + qb + vb);
                q.s = (float *)(void *)((uint8_t *)work + qb + 2 * vb);
                q.n_in = n_in;
                q.n_tok = n_tok;
                quantize_activations(tp, tab->quant_act, x, &q);
                have_q8 = true;
            }
            p->m.q = &q;
        } else if (packed && float_act_packed(tab, t->type, n_in) &&
                   !ci_pk_float_widens(tab->float_residues, n_in, n_tok)) {
            if (!xp) {
                CI_ASSERT(work && fp_bytes > 0);
                xp = (float *)(void *)((uint8_t *)work + q8_bytes + q8k_bytes);
                permute_activations(tp, tab->float_residues, x, n_in, n_tok, xp);
            }
            p->m.xp = xp;
        }
        plan_part(p, n_threads);
        n_tasks += p->n_tasks;
    }
    CI_ASSERT(n_tasks <= INT32_MAX);
    if (tp) {
        ci_threadpool_run(tp, matmul_task, &j, (int)n_tasks);
    } else {
        for (int c = 0; c < (int)n_tasks; c++)
            matmul_task(&j, c, 0);
    }
}

void ci_matmul(struct ci_threadpool *tp, const struct ci_tensor *w, const float *x, int n_tok, float *y,
               void *work) {
    ci_matmul_group(tp, 1, &w, x, n_tok, &y, work);
}

size_t ci_pack_bytes(const struct ci_tensor *w) {
    const struct ci_dot_table *tab = ci_kernels_table();
    if (!tab->pack_bytes || w->n_dims > 2 || !ci_type_supported(w->type))
        return 0;
    return tab->pack_bytes(w->type, w->ne[0], w->ne[1]);
}

void ci_pack(const struct ci_tensor *w, void *dst) {
    ci_pack_part(w, dst, 0, w->ne[1] / CI_MM_ROW_ALIGN * CI_MM_ROW_ALIGN);
}

int ci_pack_rows(void) {
    return CI_MM_ROW_ALIGN;
}

void ci_pack_part(const struct ci_tensor *w, void *dst, int64_t r0, int64_t r1) {
    const struct ci_dot_table *tab = ci_kernels_table();
    CI_ASSERT(ci_pack_bytes(w) > 0 && tab->pack && ((uintptr_t)dst & 63) == 0);
    CI_ASSERT(r0 >= 0 && r0 <= r1 && r0 % CI_MM_ROW_ALIGN == 0 && r1 % CI_MM_ROW_ALIGN == 0 &&
              r1 <= w->ne[1]);
    tab->pack(w->type, w->data, (size_t)w->row_bytes, w->ne[0], r0 / CI_MM_ROW_ALIGN, r1 / CI_MM_ROW_ALIGN,
              dst);
}
