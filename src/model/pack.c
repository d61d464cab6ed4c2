#include "model/pack.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* Calls fn on every matrix that ci_matmul runs: each layer's tensors (struct layer_weights is all tensors;
 * 3-D expert stacks and vectors have no packing) and the output head (a copy when tied: the token embedding
 * keeps serving row lookups from the file). */
static void each_matrix(struct model *m, void (*fn)(struct ci_tensor *t, void *ctx), void *ctx) {
    const size_t per_layer = sizeof(struct layer_weights) / sizeof(struct ci_tensor);
    for (int il = 0; il < m->config.n_layer; il++) {
        struct ci_tensor *all = (struct ci_tensor *)&m->weights.layers[il];
        for (size_t i = 0; i < per_layer; i++)
            if (all[i].data)
                fn(&all[i], ctx);
    }
    if (m->weights.output.data)
        fn(&m->weights.output, ctx);
}

struct pack_plan {
    size_t bytes;
    int n;
    struct model *m;
    uint8_t *at; // next free byte of the packed buffer
    bool q6_k;   // pack Q6_K too (CINFER_PACK_Q6_K=1)
};

/* What the kernels can pack and this model packs.  Q6_K only on request: its packed tile is faster from
 * 2 tokens on, but for one token from memory it measured slower than the file-layout kernels (AMD EPYC Zen 5,
 * 2 threads), and the output head of a Q4_K_M file is Q6_K. */
static size_t pack_size(const struct pack_plan *p, const struct ci_tensor *t) {
    if (t->type == CI_TYPE_Q6_K && !p->q6_k)
        return 0;
    return ci_pack_bytes(t);
}

static void count(struct ci_tensor *t, void *ctx) {
    struct pack_plan *p = ctx;
    size_t b = pack_size(p, t);
    if (b && !t->packed && p->bytes <= SIZE_MAX - 64 - b) {
        p->bytes += (b + 63) & ~(size_t)63;
        p->n++;
    }
}

static void pack(struct ci_tensor *t, void *ctx) {
    struct pack_plan *p = ctx;
    size_t b = pack_size(p, t);
    if (!b || t->packed)
        return;
    ci_pack(t, p->at);
    t->packed = p->at;
    p->at += (b + 63) & ~(size_t)63;
    if (p->m->gguf) // the rows are read from the packing now (a tail past the last 16-row group re-faults)
        gguf_release(p->m->gguf, t->data, t->nbytes);
}

static pthread_mutex_t pack_lock = PTHREAD_MUTEX_INITIALIZER;

void model_pack_weights(const struct model *cm) {
    const char *off = getenv("CINFER_NO_PACK");
    if (off && *off && strcmp(off, "0") != 0)
        return;
    struct model *m = (struct model *)(uintptr_t)cm; // the packing is a cache: see pack.h
    pthread_mutex_lock(&pack_lock);
    if (m->packed || m->pack_tried)
        goto done;
    m->pack_tried = true;
    ci_kernels_init();
    const char *q6 = getenv("CINFER_PACK_Q6_K");
    struct pack_plan plan = {.m = m, .q6_k = q6 && *q6 && strcmp(q6, "0") != 0};
    each_matrix(m, count, &plan);
    if (plan.n == 0)
        goto done;
    if (!(m->packed = ci_malloc_aligned(plan.bytes))) { // an optimisation only: run from the file's layout
        CI_LOG_WARN("no memory to pack %d weight matrices (%zu bytes): running them as stored", plan.n,
                    plan.bytes);
        goto done;
    }
    plan.at = m->packed;
    each_matrix(m, pack, &plan);
    CI_LOG_INFO("packed %d weight matrices (%.1f MiB) for the %s kernels", plan.n,
                (double)plan.bytes / (1024.0 * 1024.0), ci_kernels_isa());
done:
    pthread_mutex_unlock(&pack_lock);
}
