/* Causal attention over a paged KV cache.  One pool task per (token, KV head): it walks that sequence's block
 * table once, positions 0..pos, and serves every query head of the GQA group that reads this KV head (in
 * sub-groups of ATTN_SUBGROUP heads so the accumulators stay a fixed size on the stack).  Softmax is online
 * (running max, running sum, rescaled accumulator) in float, updated once per chunk of CI_ATTN_CHUNK
 * positions by the selected table's vectorized chunk kernel (dot.h).  Chunks start at fixed multiples of
 * CI_ATTN_CHUNK whatever the KV block size, and every output element belongs to one task, so results depend
 * neither on the block size, nor on the thread count, nor on the rest of the batch.  The KV element type
 * (f32, f16, q8_0) picks the chunk kernel; f16 and q8_0 rows are widened to float inside it, chunk by chunk,
 * once for the whole GQA sub-group, and then follow the f32 kernel's order, so the same property holds for
 * each type. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"
#include "core/threadpool.h"
#include "kernels/dot.h"

// Query heads served per pass over the KV positions; larger groups (MQA) take several passes.
#define ATTN_SUBGROUP 8

struct attn_job {
    const struct ci_attn_args *a;
    ci_attn_chunk_fn chunk;
    int group; // query heads per KV head
};

/* Query heads [h0, h0 + ng) of token t, all reading KV head kvh. */
static void attn_heads(const struct attn_job *j, int t, int kvh, int h0, int ng) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, bs = kv->block_size;
    const int pos = a->pos[t];
    const struct ci_attn_seq *s = &a->seqs[a->seq[t]];
    CI_ASSERT(pos >= 0 && pos / bs < s->n_blocks);

    float acc[ATTN_SUBGROUP * CI_ATTN_MAX_HEAD_DIM]; // [ng][hd] unnormalized sum of w * v
    float m[ATTN_SUBGROUP];                          // running max score
    float l[ATTN_SUBGROUP];                          // running sum of exp(score - m)
    const float *q[ATTN_SUBGROUP];                   // [ng] -> [hd]
    for (int g = 0; g < ng; g++) {
        q[g] = a->q + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    for (int d = 0; d < ng * hd; d++)
        acc[d] = 0.0f;

    const unsigned char *kb = kv->k, *vb = kv->v;
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    for (int p0 = 0; p0 <= pos; p0 += CI_ATTN_CHUNK) {
        int n = pos + 1 - p0 < CI_ATTN_CHUNK ? pos + 1 - p0 : CI_ATTN_CHUNK;
        for (int i = 0; i < n; i++) {
            int p = p0 + i;
            int32_t blk = s->block_table[p / bs];
            CI_DASSERT(blk >= 0);
            size_t off = ci_kv_offset(kv, blk, kvh, p % bs); // this KV head's slots are contiguous in a block
            kp[i] = kb + off;
            vp[i] = vb + off;
        }
        j->chunk(kp, vp, n, q, ng, hd, a->scale, m, l, acc);
    }

    for (int g = 0; g < ng; g++) {
        float *o = a->out + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        for (int d = 0; d < hd; d++)
            o[d] = acc[g * hd + d] / l[g];
    }
}

static void attn_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct attn_job *j = ctx;
    int n_kv_head = j->a->kv->n_kv_head;
    int t = task / n_kv_head, kvh = task % n_kv_head;
    for (int h = 0; h < j->group; h += ATTN_SUBGROUP) {
        int ng = j->group - h < ATTN_SUBGROUP ? j->group - h : ATTN_SUBGROUP;
        attn_heads(j, t, kvh, kvh * j->group + h, ng);
    }
}

size_t ci_kv_row_bytes(uint32_t type, int head_dim) {
    if (head_dim <= 0)
        return 0;
    switch (type) {
    case CI_TYPE_F32:
        return (size_t)head_dim * sizeof(float);
    case CI_TYPE_F16:
        return (size_t)head_dim * sizeof(uint16_t);
    case CI_TYPE_Q8_0:
        return head_dim % CI_QK8_0 ? 0 : (size_t)(head_dim / CI_QK8_0) * sizeof(struct ci_block_q8_0);
    default:
        return 0;
    }
}

void ci_kv_store_row(uint32_t type, const float *x, void *dst, int head_dim) {
    CI_DASSERT(ci_kv_row_bytes(type, head_dim) > 0);
    ci_quantize_row(type, x, dst, head_dim);
}

void ci_attention_paged(struct ci_threadpool *tp, const struct ci_attn_args *a) {
    const struct ci_kv_layer *kv = a->kv;
    CI_ASSERT(a->n_tokens >= 0 && kv->n_kv_head > 0 && a->n_head >= kv->n_kv_head &&
              a->n_head % kv->n_kv_head == 0);
    CI_ASSERT(kv->head_dim > 0 && kv->head_dim <= CI_ATTN_MAX_HEAD_DIM && kv->block_size > 0);
    CI_ASSERT((int64_t)a->n_tokens * kv->n_kv_head <= INT32_MAX);
    int n_tasks = a->n_tokens * kv->n_kv_head;
    CI_ASSERT(ci_kv_row_bytes(kv->type, kv->head_dim) == kv->row_bytes);
    const struct ci_dot_table *tab = ci_kernels_table();
    ci_attn_chunk_fn chunk = kv->type == CI_TYPE_F16    ? tab->attn_f16
                             : kv->type == CI_TYPE_Q8_0 ? tab->attn_q8_0
                                                        : tab->attn_f32;
    struct attn_job j = {.a = a, .chunk = chunk, .group = a->n_head / kv->n_kv_head};
    if (tp) {
        ci_threadpool_run(tp, attn_task, &j, n_tasks);
    } else {
        for (int task = 0; task < n_tasks; task++)
            attn_task(&j, task, 0);
    }
}
