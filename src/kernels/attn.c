/* Causal attention over a paged KV cache.  One pool task per (token, KV head): it walks that sequence's block
 * table once, positions 0..pos, and serves every query head of the GQA group that reads this KV head (in
 * sub-groups of ATTN_SUBGROUP heads so the accumulators stay a fixed size on the stack).  Softmax is online
 * (running max, running sum, rescaled accumulator) in float.  Every output element belongs to one task and is
 * computed in position order, so results do not depend on the thread count or on the rest of the batch. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"
#include "core/threadpool.h"
#include "kernels/dot.h"

// Query heads served per pass over the KV positions; larger groups (MQA) take several passes.
#define ATTN_SUBGROUP 8

struct attn_job {
    const struct ci_attn_args *a;
    ci_dot_fn dot; // F32 dot for q·k
    int group;     // query heads per KV head
};

/* Query heads [h0, h0 + ng) of token t, all reading KV head kvh. */
static void attn_heads(const struct attn_job *j, int t, int kvh, int h0, int ng) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, bs = kv->block_size;
    const int pos = a->pos[t];
    const struct ci_attn_seq *s = &a->seqs[a->seq[t]];
    CI_ASSERT(pos >= 0 && pos / bs < s->n_blocks);

    float acc[ATTN_SUBGROUP][CI_ATTN_MAX_HEAD_DIM]; // [ng][hd] unnormalized sum of w * v
    float m[ATTN_SUBGROUP];                         // running max score
    float l[ATTN_SUBGROUP];                         // running sum of exp(score - m)
    const float *q[ATTN_SUBGROUP];                  // [ng] -> [hd]
    for (int g = 0; g < ng; g++) {
        q[g] = a->q + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (int d = 0; d < hd; d++)
            acc[g][d] = 0.0f;
    }

    for (int b = 0; b * bs <= pos; b++) {
        int32_t blk = s->block_table[b];
        CI_DASSERT(blk >= 0);
        int n_slots = pos + 1 - b * bs < bs ? pos + 1 - b * bs : bs;
        size_t base = ci_kv_offset(kv, blk, kvh, 0);
        const float *kb = kv->k + base; // [block_size][hd]: this KV head's slots are contiguous
        const float *vb = kv->v + base;
        for (int slot = 0; slot < n_slots; slot++) {
            const float *k = kb + (size_t)slot * (size_t)hd, *v = vb + (size_t)slot * (size_t)hd;
            for (int g = 0; g < ng; g++) {
                float score = j->dot(k, q[g], hd) * a->scale;
                if (score > m[g]) { // new max: rescale what was accumulated under the old one
                    float c = expf(m[g] - score);
                    l[g] *= c;
                    for (int d = 0; d < hd; d++)
                        acc[g][d] *= c;
                    m[g] = score;
                }
                float w = expf(score - m[g]);
                l[g] += w;
                for (int d = 0; d < hd; d++)
                    acc[g][d] += w * v[d];
            }
        }
    }

    for (int g = 0; g < ng; g++) {
        float *o = a->out + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        for (int d = 0; d < hd; d++)
            o[d] = acc[g][d] / l[g];
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

void ci_attention_paged(struct ci_threadpool *tp, const struct ci_attn_args *a) {
    const struct ci_kv_layer *kv = a->kv;
    CI_ASSERT(a->n_tokens >= 0 && kv->n_kv_head > 0 && a->n_head >= kv->n_kv_head &&
              a->n_head % kv->n_kv_head == 0);
    CI_ASSERT(kv->head_dim > 0 && kv->head_dim <= CI_ATTN_MAX_HEAD_DIM && kv->block_size > 0);
    CI_ASSERT((int64_t)a->n_tokens * kv->n_kv_head <= INT32_MAX);
    int n_tasks = a->n_tokens * kv->n_kv_head;
    struct attn_job j = {.a = a, .dot = ci_dot_select(CI_TYPE_F32), .group = a->n_head / kv->n_kv_head};
    if (tp) {
        ci_threadpool_run(tp, attn_task, &j, n_tasks);
    } else {
        for (int task = 0; task < n_tasks; task++)
            attn_task(&j, task, 0);
    }
}
