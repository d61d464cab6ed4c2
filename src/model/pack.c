#include "model/pack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "format/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* Calls fn on every tensor a forward pass reads each step: each layer's tensors (struct layer_weights is all
 * tensors; a 3-D expert stack is packed expert by expert, model_expert_view finds each), the output head (a
 * copy when tied: the token embedding keeps serving row lookups from the file) and the final norm. */
static void each_tensor(struct model *m, void (*fn)(struct ci_tensor *t, void *ctx), void *ctx) {
    const size_t per_layer = sizeof(struct layer_weights) / sizeof(struct ci_tensor);
    for (int il = 0; il < m->config.n_layer; il++) {
        struct ci_tensor *all = (struct ci_tensor *)&m->weights.layers[il];
        for (size_t i = 0; i < per_layer; i++)
            if (all[i].data)
                fn(&all[i], ctx);
    }
    if (m->weights.output.data)
        fn(&m->weights.output, ctx);
    if (m->weights.output_norm.data)
        fn(&m->weights.output_norm, ctx);
}

/* Vectors (norm weights, biases, sinks) are read by every step.  Left in the file mapping, each read faults
 * back the pages around it that the packing gave back (the kernel maps a whole folio, and reads around it:
 * measured, one request re-mapped 58 of the 136 MiB of a packed smollm2-135m Q8_0, as much peak memory as the
 * packing saves), so once matrices are packed the vectors are copied next to them. */
static bool is_vector(const struct ci_tensor *t) {
    return t->n_dims == 1 && !t->packed && t->nbytes > 0;
}

// Rows packed between two releases of their file pages (a multiple of every table's row group).
#define PACK_SLICE_ROWS 1024

struct pack_plan {
    struct ci_threadpool *tp; // NULL: this thread alone
    size_t bytes;
    int n; // matrices packed (the vectors copied along are not counted)
    struct model *m;
    uint8_t *at;      // next free byte of the packed buffer
    bool skip_floats; // F16/BF16 matrices are left for later (a lazy model's first packing)
    bool vectors;     // the vectors are copied along (they are still in the file)
};

static bool is_float_matrix(const struct ci_tensor *t) {
    return !is_vector(t) && (t->type == CI_TYPE_F16 || t->type == CI_TYPE_BF16);
}

static bool planned(const struct pack_plan *p, const struct ci_tensor *t) {
    return is_vector(t) ? p->vectors : !(p->skip_floats && is_float_matrix(t));
}

/* The bytes of t's packing: of each expert's, one after another, for an expert stack (0: none). */
static size_t packed_bytes(const struct ci_tensor *t) {
    if (t->n_dims != 3)
        return ci_pack_bytes(t);
    size_t stride = model_expert_pack_stride(t);
    return stride && (size_t)t->ne[2] <= SIZE_MAX / stride ? stride * (size_t)t->ne[2] : 0;
}

static void count(struct ci_tensor *t, void *ctx) {
    struct pack_plan *p = ctx;
    size_t b = is_vector(t) ? (size_t)t->nbytes : packed_bytes(t);
    if (planned(p, t) && b && !t->packed && p->bytes <= SIZE_MAX - 64 - b) {
        p->bytes += (b + 63) & ~(size_t)63;
        p->n += !is_vector(t);
    }
}

static void count_matrix_only(struct ci_tensor *t, void *ctx) {
    if (!is_vector(t))
        count(t, ctx);
}

/* A slice of rows cut into one part per thread (whole row groups). */
struct pack_slice {
    const struct ci_tensor *t;
    uint8_t *dst;
    int64_t r0, r1, part_rows;
};

static void pack_slice_part(void *ctx, int task, int thread) {
    (void)thread;
    const struct pack_slice *s = ctx;
    int64_t a = s->r0 + (int64_t)task * s->part_rows, b = a + s->part_rows < s->r1 ? a + s->part_rows : s->r1;
    if (a < b)
        ci_pack_part(s->t, s->dst, a, b);
}

/* Packs the 2-D matrix t into dst a slice of rows at a time, each slice's file pages given back once packed,
 * so the matrix is never resident twice (the largest one, often the tied head, would otherwise set the peak
 * memory).  The threads of tp share each slice: the packing's cost is mostly the first touch of its new pages
 * (the kernel zeroing them), which runs on every thread at once.  The rows are read from the packing from now
 * on; a tail past the last whole group re-faults. */
static void pack_matrix(struct pack_plan *p, const struct ci_tensor *t, uint8_t *dst) {
    const int64_t step = PACK_SLICE_ROWS, group = ci_pack_rows(), rows = t->ne[1] / group * group;
    const int n_threads = p->tp ? ci_threadpool_n_threads(p->tp) : 1;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t r1 = r0 + step < rows ? r0 + step : rows;
        int64_t groups = (r1 - r0) / group, per = (groups + n_threads - 1) / n_threads;
        struct pack_slice s = {.t = t, .dst = dst, .r0 = r0, .r1 = r1, .part_rows = per * group};
        if (n_threads > 1 && groups > 1)
            ci_threadpool_run(p->tp, pack_slice_part, &s, (int)((groups + per - 1) / per));
        else
            ci_pack_part(t, dst, r0, r1);
        if (p->m->gguf) // from the matrix's start: the page a slice edge splits goes with the later slice
            gguf_release(p->m->gguf, t->data, (uint64_t)r1 * t->row_bytes);
    }
}

static void pack(struct ci_tensor *t, void *ctx) {
    struct pack_plan *p = ctx;
    if (!planned(p, t))
        return;
    if (is_vector(t)) {
        const void *file = t->data;
        memcpy(p->at, file, t->nbytes);
        t->data = p->at;
        p->at += (t->nbytes + 63) & ~(uint64_t)63;
        if (p->m->gguf)
            gguf_release(p->m->gguf, file, t->nbytes);
        return;
    }
    size_t b = packed_bytes(t);
    if (!b || t->packed)
        return;
    if (t->n_dims == 3) { // expert by expert, model_expert_pack_stride() apart
        const size_t stride = model_expert_pack_stride(t);
        for (int64_t e = 0; e < t->ne[2]; e++) {
            struct ci_tensor v = model_expert_view(t, (int)e);
            pack_matrix(p, &v, p->at + (size_t)e * stride);
        }
    } else {
        pack_matrix(p, t, p->at);
    }
    t->packed = p->at;
    p->at += (b + 63) & ~(size_t)63;
}

static pthread_mutex_t pack_lock = PTHREAD_MUTEX_INITIALIZER;

/* Packs the matrices that a plan skipping floats or not admits into a new buffer, with the vectors still in
 * the file when it packs any matrix; returns the buffer (NULL: nothing packed).  Under pack_lock. */
static void *pack_some(struct model *m, struct ci_threadpool *tp, bool skip_floats) {
    struct pack_plan plan = {.m = m, .skip_floats = skip_floats};
    each_tensor(m, count_matrix_only, &plan);
    if (plan.n == 0) // nothing packed: the file's pages stay, and the vectors with them
        return NULL;
    plan =
        (struct pack_plan){.m = m, .tp = tp, .skip_floats = skip_floats, .vectors = !m->pack.vectors_copied};
    each_tensor(m, count, &plan);
    void *buf = ci_malloc_aligned(plan.bytes);
    if (!buf) { // an optimisation only: run from the file's layout
        CI_LOG_WARN("no memory to pack %d weight matrices (%zu bytes): running them as stored", plan.n,
                    plan.bytes);
        return NULL;
    }
    // Every decode step streams the whole buffer: on huge pages, measured 4-12% faster single-token decode
    // (bench/RESULTS.md).
    size_t huge = ci_mem_advise_huge(buf, plan.bytes);
    plan.at = buf;
    each_tensor(m, pack, &plan);
    m->pack.vectors_copied = true;
    CI_LOG_INFO("packed %d weight matrices (%.1f MiB%s) for the %s kernels", plan.n,
                (double)plan.bytes / (1024.0 * 1024.0), huge ? ", huge pages asked" : "", ci_kernels_isa());
    return buf;
}

static void count_float_matrix(struct ci_tensor *t, void *ctx) {
    *(int *)ctx += is_float_matrix(t) && !t->packed && packed_bytes(t) > 0;
}

void model_pack_weights(const struct model *cm, struct ci_threadpool *tp) {
    const char *off = getenv("CINFER_NO_PACK");
    if (off && *off && strcmp(off, "0") != 0)
        return;
    struct model *m = (struct model *)(uintptr_t)cm; // the packing is a cache: see pack.h
    pthread_mutex_lock(&pack_lock);
    if (!m->pack.tried && m->pack.mode != MODEL_PACK_OFF) {
        m->pack.tried = true;
        ci_kernels_init();
        const bool lazy = m->pack.mode == MODEL_PACK_LAZY;
        m->pack.first = pack_some(m, tp, lazy);
        int floats = 0;
        if (lazy)
            each_tensor(m, count_float_matrix, &floats);
        pthread_mutex_lock(&m->pack.gate);
        m->pack.waiting = floats > 0;
        pthread_mutex_unlock(&m->pack.gate);
    }
    pthread_mutex_unlock(&pack_lock);
}

void model_pass_begin(const struct model *cm, struct ci_threadpool *tp) {
    struct model_packing *g = &((struct model *)(uintptr_t)cm)->pack;
    pthread_mutex_lock(&g->gate);
    if (g->waiting && g->passed && !g->packing) { // this pass packs, once the others are done
        g->packing = true;
        while (g->running > 0)
            pthread_cond_wait(&g->changed, &g->gate);
        pthread_mutex_unlock(&g->gate);
        pthread_mutex_lock(&pack_lock);
        g->later = pack_some((struct model *)(uintptr_t)cm, tp, false);
        pthread_mutex_unlock(&pack_lock);
        pthread_mutex_lock(&g->gate);
        g->packing = g->waiting = false;
        pthread_cond_broadcast(&g->changed);
    }
    while (g->packing)
        pthread_cond_wait(&g->changed, &g->gate);
    g->running++;
    pthread_mutex_unlock(&g->gate);
}

void model_pass_end(const struct model *cm) {
    struct model_packing *g = &((struct model *)(uintptr_t)cm)->pack;
    pthread_mutex_lock(&g->gate);
    g->passed = true;
    if (--g->running == 0)
        pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->gate);
}
