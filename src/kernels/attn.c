/* Causal attention over a paged KV cache.  Decode batches (no two tokens of a sequence at consecutive
 * positions) run one pool task per (token, KV head): it walks that sequence's block table once, positions
 * 0..pos, and serves every query head of the GQA group that reads this KV head (in sub-groups of
 * ATTN_SUBGROUP heads so the accumulators stay a fixed size on the stack).  Softmax is online (running max,
 * running sum, rescaled accumulator) in float, updated once per chunk of CI_ATTN_CHUNK positions by the
 * selected table's vectorized chunk kernel (dot.h).  Chunks start at fixed multiples of CI_ATTN_CHUNK
 * whatever the KV block size, and every output element belongs to one task, so results depend neither on the
 * block size, nor on the thread count, nor on the rest of the batch.  The KV element type (f32, f16, q8_0)
 * picks the chunk kernel; f16 and q8_0 rows are widened to float inside it, chunk by chunk, once for the
 * whole GQA sub-group, and then follow the f32 kernel's order, so the same property holds for each type.
 *
 * Prefill: a run of tokens of one sequence at consecutive positions shares its prefix, so the batch is cut
 * into slots of up to ATTN_TOKEN_GROUP tokens and one task per (slot, KV head) walks the chunks once for all
 * the slot's runs of consecutive positions, calling the grouped chunk kernel (dot.h) on every token x head
 * of a run that reaches the chunk: the K/V rows are loaded (and widened) once for all of them.  A grouped
 * row gives exactly the bits of the per-token chunk on the positions that token sees (same chunk edges, its
 * own n for the last chunks), so the grouping changes no result: a token computes the same alone, in a
 * decode batch or in any prompt chunk.
 *
 * Optional features (struct ci_attn_args): a sliding window starts each token's walk at its first visible
 * position (the first chunk cut short, the later edges unchanged); logit soft-capping runs one scalar chunk
 * (chunk_capped) shared by every table; both take the per-token walk (no grouped prefill).  Attention sinks
 * only change the final normalization (finish_row), grouped or not. */
#include "kernels/kernels.h"

#include <math.h>
#include <stdbool.h>

#include "core/check.h"
#include "core/threadpool.h"
#include "kernels/dot.h"

// Query heads served per pass over the KV positions; larger groups (MQA) take several passes.
#define ATTN_SUBGROUP 8
// Most tokens of one prefill task (each of them x the heads of a sub-group is one row of the grouped chunk).
#define ATTN_TOKEN_GROUP 8
// Prefill tasks per thread the slot size aims at, so the dynamic hand-out can even out the causal costs.
#define ATTN_TASKS_PER_THREAD 8

struct attn_job {
    const struct ci_attn_args *a;
    ci_attn_chunk_fn chunk;
    ci_attn_group_fn grp;
    int group;   // query heads per KV head
    int slot;    // tokens per task: 1 = one task per token (decode), else grouped prefill slots
    int n_slots; // ceil(n_tokens / slot)
};

/* First key position a query at pos sees: pos - window + 1 under a sliding window, else 0. */
static int window_start(const struct ci_attn_args *a, int pos) {
    return a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* out = acc / l, or with an attention sink x for this head: the softmax denominator gains e^x, i.e.
 * out = acc e^(m - m') / (l e^(m - m') + e^(x - m')) with m' = max(m, x) (no overflow either way). */
static void finish_row(const struct ci_attn_args *a, int h, float m, float l, const float *acc, float *o,
                       int hd) {
    if (!a->sinks) {
        for (int d = 0; d < hd; d++)
            o[d] = acc[d] / l;
        return;
    }
    float x = a->sinks[h], mx = x > m ? x : m;
    float c = expf(m - mx), den = l * c + expf(x - mx);
    for (int d = 0; d < hd; d++)
        o[d] = acc[d] * c / den;
}

/* The online-softmax chunk of dot.h with logit soft-capping: s_i = cap * tanh(scale * q . k_i / cap).  One
 * scalar routine (front-to-back dots, expf, tanhf) that every table shares, so the tables agree bit for bit;
 * f16 / q8_0 rows are widened to float first (ci_dequantize_row). */
static void chunk_capped(uint32_t type, const void *const *k, const void *const *v, int n,
                         const float *const *q, int ng, int hd, float scale, float cap, float *m, float *l,
                         float *acc) {
    float kf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM], vf[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    const float *kr[CI_ATTN_CHUNK], *vr[CI_ATTN_CHUNK];
    for (int i = 0; i < n; i++) {
        if (type == CI_TYPE_F32) {
            kr[i] = k[i];
            vr[i] = v[i];
        } else {
            ci_dequantize_row(type, k[i], kf + (size_t)i * (size_t)hd, hd);
            ci_dequantize_row(type, v[i], vf + (size_t)i * (size_t)hd, hd);
            kr[i] = kf + (size_t)i * (size_t)hd;
            vr[i] = vf + (size_t)i * (size_t)hd;
        }
    }
    for (int g = 0; g < ng; g++) {
        float s[CI_ATTN_CHUNK], mx = m[g];
        for (int i = 0; i < n; i++) {
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += q[g][d] * kr[i][d];
            s[i] = cap * tanhf(dot * scale / cap);
            mx = s[i] > mx ? s[i] : mx;
        }
        float c = m[g] == -INFINITY ? 0.0f : expf(m[g] - mx), sum = 0.0f;
        for (int i = 0; i < n; i++) {
            s[i] = expf(s[i] - mx);
            sum += s[i];
        }
        l[g] = l[g] * c + sum;
        float *acc_g = acc + (size_t)g * (size_t)hd;
        for (int d = 0; d < hd; d++) {
            float t = acc_g[d] * c;
            for (int i = 0; i < n; i++)
                t += s[i] * vr[i][d];
            acc_g[d] = t;
        }
        m[g] = mx;
    }
}

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
    // A window starts the walk at the first position it sees; the chunk edges stay at the fixed multiples of
    // CI_ATTN_CHUNK (the first chunk is cut short), so the order still depends only on the position.
    const int lo = window_start(a, pos);
    for (int p0 = lo - lo % CI_ATTN_CHUNK; p0 <= pos; p0 += CI_ATTN_CHUNK) {
        int p1 = p0 + CI_ATTN_CHUNK < pos + 1 ? p0 + CI_ATTN_CHUNK : pos + 1, ps = p0 > lo ? p0 : lo;
        int n = p1 - ps;
        for (int i = 0; i < n; i++) {
            int p = ps + i;
            int32_t blk = s->block_table[p / bs];
            CI_DASSERT(blk >= 0);
            size_t off = ci_kv_offset(kv, blk, kvh, p % bs); // this KV head's slots are contiguous in a block
            kp[i] = kb + off;
            vp[i] = vb + off;
        }
        if (a->softcap > 0.0f)
            chunk_capped(kv->type, kp, vp, n, q, ng, hd, a->scale, a->softcap, m, l, acc);
        else
            j->chunk(kp, vp, n, q, ng, hd, a->scale, m, l, acc);
    }

    for (int g = 0; g < ng; g++) {
        float *o = a->out + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        finish_row(a, h0 + g, m[g], l[g], acc + (size_t)g * (size_t)hd, o, hd);
    }
}

/* Query heads [h0, h0 + ng) of the nt tokens t0.. of one sequence at consecutive positions, all reading KV
 * head kvh: per chunk, one grouped call for every (token, head) whose position reaches it.  Row (i, g) sees
 * min(CI_ATTN_CHUNK, pos_i + 1 - p0) positions of the chunk at p0, exactly what attn_heads gives token i. */
static void attn_run(const struct attn_job *j, int t0, int nt, int kvh, int h0, int ng) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, bs = kv->block_size;
    const int p_first = a->pos[t0], p_last = a->pos[t0 + nt - 1];
    const struct ci_attn_seq *s = &a->seqs[a->seq[t0]];
    CI_ASSERT(nt <= ATTN_TOKEN_GROUP && ng <= ATTN_SUBGROUP);
    CI_ASSERT(p_first >= 0 && p_last == p_first + (nt - 1) && p_last / bs < s->n_blocks);

    enum { MAX_ROWS = ATTN_TOKEN_GROUP * ATTN_SUBGROUP };
    float acc[MAX_ROWS * CI_ATTN_MAX_HEAD_DIM]; // [nt][ng][hd] unnormalized sum of w * v
    float m[MAX_ROWS];                          // running max score
    float l[MAX_ROWS];                          // running sum of exp(score - m)
    const float *q[MAX_ROWS];                   // [nt][ng] -> [hd]
    int n[MAX_ROWS];                            // positions of the current chunk each row sees
    const int nr = nt * ng;
    for (int i = 0; i < nt; i++)
        for (int g = 0; g < ng; g++) {
            int r = i * ng + g;
            q[r] = a->q + ((size_t)(t0 + i) * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
    for (int d = 0; d < nr * hd; d++)
        acc[d] = 0.0f;

    const unsigned char *kb = kv->k, *vb = kv->v;
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    for (int p0 = 0; p0 <= p_last; p0 += CI_ATTN_CHUNK) {
        int np = p_last + 1 - p0 < CI_ATTN_CHUNK ? p_last + 1 - p0 : CI_ATTN_CHUNK;
        for (int i = 0; i < np; i++) {
            int p = p0 + i;
            int32_t blk = s->block_table[p / bs];
            CI_DASSERT(blk >= 0);
            size_t off = ci_kv_offset(kv, blk, kvh, p % bs);
            kp[i] = kb + off;
            vp[i] = vb + off;
        }
        // Tokens before the chunk (pos < p0) are done with it: the rows from token i0 on take part.
        int i0 = p0 > p_first ? p0 - p_first : 0;
        for (int i = i0; i < nt; i++) {
            int pos = p_first + i;
            int ni = pos + 1 - p0 < CI_ATTN_CHUNK ? pos + 1 - p0 : CI_ATTN_CHUNK;
            for (int g = 0; g < ng; g++)
                n[i * ng + g] = ni;
        }
        int r0 = i0 * ng;
        j->grp(kp, vp, n + r0, nr - r0, q + r0, hd, a->scale, m + r0, l + r0, acc + (size_t)r0 * (size_t)hd);
    }

    for (int r = 0; r < nr; r++) {
        int i = r / ng, g = r % ng;
        float *o = a->out + ((size_t)(t0 + i) * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        finish_row(a, h0 + g, m[r], l[r], acc + (size_t)r * (size_t)hd, o, hd);
    }
}

/* True when token t continues token t - 1's run: same sequence, the next position. */
static bool continues_run(const struct ci_attn_args *a, int t) {
    return t > 0 && a->seq[t] == a->seq[t - 1] && (int64_t)a->pos[t] == (int64_t)a->pos[t - 1] + 1;
}

static void attn_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct attn_job *j = ctx;
    int n_kv_head = j->a->kv->n_kv_head;
    int kvh = task % n_kv_head;
    if (j->slot == 1) {
        int t = task / n_kv_head;
        for (int h = 0; h < j->group; h += ATTN_SUBGROUP) {
            int ng = j->group - h < ATTN_SUBGROUP ? j->group - h : ATTN_SUBGROUP;
            attn_heads(j, t, kvh, kvh * j->group + h, ng);
        }
        return;
    }
    // Slots are handed out last first: along a prompt the later tokens see longer prefixes, so the dearest
    // tasks go first and the cheapest fill in at the end.
    int slot = j->n_slots - 1 - task / n_kv_head;
    int t1 = (slot + 1) * j->slot < j->a->n_tokens ? (slot + 1) * j->slot : j->a->n_tokens;
    for (int t = slot * j->slot; t < t1;) {
        int e = t + 1;
        while (e < t1 && continues_run(j->a, e))
            e++;
        for (int h = 0; h < j->group; h += ATTN_SUBGROUP) {
            int ng = j->group - h < ATTN_SUBGROUP ? j->group - h : ATTN_SUBGROUP;
            if (e - t == 1)
                attn_heads(j, t, kvh, kvh * j->group + h, ng);
            else
                attn_run(j, t, e - t, kvh, kvh * j->group + h, ng);
        }
        t = e;
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
    CI_ASSERT(ci_kv_row_bytes(kv->type, kv->head_dim) == kv->row_bytes);
    CI_ASSERT(a->window >= 0 && a->softcap >= 0.0f);
    const struct ci_dot_table *tab = ci_kernels_table();
    ci_attn_chunk_fn chunk = kv->type == CI_TYPE_F16    ? tab->attn_f16
                             : kv->type == CI_TYPE_Q8_0 ? tab->attn_q8_0
                                                        : tab->attn_f32;
    ci_attn_group_fn grp = kv->type == CI_TYPE_F16    ? tab->attn_grp_f16
                           : kv->type == CI_TYPE_Q8_0 ? tab->attn_grp_q8_0
                                                      : tab->attn_grp_f32;
    struct attn_job j = {.a = a, .chunk = chunk, .grp = grp, .group = a->n_head / kv->n_kv_head, .slot = 1};
    // Any two tokens to group (prefill)?  Windowed and soft-capped layers take the per-token walk (the
    // grouped chunk kernels know neither a per-row start nor the cap).
    bool runs = false;
    for (int t = 1; t < a->n_tokens && !runs && a->window <= 0 && !(a->softcap > 0.0f); t++)
        runs = continues_run(a, t);
    if (runs) {
        // Slots as large as ATTN_TOKEN_GROUP while that leaves ATTN_TASKS_PER_THREAD tasks per thread.
        int64_t want = (int64_t)(tp ? ci_threadpool_n_threads(tp) : 1) * ATTN_TASKS_PER_THREAD;
        int64_t slot = (int64_t)a->n_tokens * kv->n_kv_head / want;
        j.slot = slot < 2 ? 2 : slot > ATTN_TOKEN_GROUP ? ATTN_TOKEN_GROUP : (int)slot;
    }
    j.n_slots = (a->n_tokens + j.slot - 1) / j.slot;
    int n_tasks = j.n_slots * kv->n_kv_head;
    if (tp) {
        ci_threadpool_run(tp, attn_task, &j, n_tasks);
    } else {
        for (int task = 0; task < n_tasks; task++)
            attn_task(&j, task, 0);
    }
}
