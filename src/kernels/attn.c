/* Causal attention over a paged KV cache.  Decode tokens (no token of their sequence at the position before or
 * after, in a decode batch or beside prompt runs) take one pool task per (token, range of KV heads, segment, see
 * below): it walks that sequence's block table once over the segment's positions and, chunk by chunk, serves every
 * query head of the GQA groups that read those KV heads (in sub-groups of ATTN_SUBGROUP heads so the accumulators
 * stay a fixed size), so it reads each block's rows of its heads in address order (walk_block).  Softmax is online
 * (running max, running sum, rescaled accumulator) in float, updated once per chunk of CI_ATTN_CHUNK positions by
 * the selected table's vectorized chunk kernel (dot.h).  Chunks start at fixed multiples of CI_ATTN_CHUNK whatever
 * the KV block size, and every output element belongs to one task, so results depend neither on the block size,
 * nor on the thread count, nor on the rest of the batch.  The KV element type (f32, f16, q8_0) picks the chunk
 * kernel; f16 rows are widened to float inside it (in registers, or chunk by chunk once for the whole GQA
 * sub-group) and then follow the f32 kernel's order.  q8_0 (as ggml's flash attention for a Q8_0 cache): each walk
 * quantizes its query rows to Q8_0 once (quant_rows), the scores are integer dots against the stored K blocks and
 * only V is widened (dot.h), so the same property holds for each type.
 *
 * Prefill: a run of tokens of one sequence at consecutive positions shares its prefix, so the batch is cut
 * into slots of up to ATTN_TOKEN_GROUP tokens and one task per (slot, KV head) walks the chunks once for all
 * the slot's runs of consecutive positions, calling the grouped chunk kernel (dot.h) on every token x head
 * of a run that reaches the chunk: the K/V rows are loaded (and widened) once for all of them.  A grouped
 * row gives exactly the bits of the per-token chunk on the positions that token sees (same chunk edges, its
 * own n for the last chunks), so the grouping changes no result: a token computes the same alone, in a
 * decode batch or in any prompt chunk.
 *
 * Long contexts: every walk is cut at the multiples of ATTN_SEG positions into segments; the first segment a
 * query sees is walked into its running state, each later one from an empty state and then folded in by the
 * log-sum-exp merge (merge_row), left to right.  The cut depends only on the positions, so a token still
 * gives the same bits on every path.  A decode runs one task per (item, segment), item = (token, range of KV
 * heads), split-K as in flash-decoding: each task writes its segment's state (max, sum, unnormalized V sum)
 * to a scratch slot, and the task that finishes an item's last segment folds the slots in the same
 * left-to-right order, so the split changes no bit either; it spreads a long context's K/V reads over the
 * threads.  An item takes all KV heads (up to ATTN_ITEM_ROWS query rows) unless the segments are too few
 * tasks for the threads (short contexts, batch 1): then the heads are cut into ranges, down to one head.
 *
 * Optional features (struct ci_attn_args): a sliding window starts each token's walk at its first visible
 * position (the first chunk cut short, the later edges unchanged); logit soft-capping runs one scalar chunk
 * (chunk_capped) shared by every table; both take the per-token walk (no grouped prefill).  Attention sinks
 * only change the final normalization (finish_row), grouped or not. */
#include "kernels/kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "kernels/dot.h"

// Query heads served per pass over the KV positions; larger groups (MQA) take several passes.
#define ATTN_SUBGROUP 8
// Most tokens of one prefill task (each of them x the heads of a sub-group is one row of the grouped chunk).
#define ATTN_TOKEN_GROUP 8
// Prefill tasks per thread the slot size aims at, so the dynamic hand-out can even out the causal costs.
#define ATTN_TASKS_PER_THREAD 8
// Positions per segment: every walk over a token's context is cut at the multiples of ATTN_SEG (a multiple
// of CI_ATTN_CHUNK), each segment's softmax state is computed from scratch and the states are merged left to
// right (merge_row), whether one task walks them all or the split decode hands them to several tasks.
#define ATTN_SEG 256
_Static_assert(ATTN_SEG % CI_ATTN_CHUNK == 0, "segment edges must be chunk edges");
// Decode tasks per thread the walk aims at: KV heads are cut into groups (items) until the tasks reach it.
#define ATTN_SPLIT_ITEMS_PER_THREAD 4
// Most query rows (KV heads x GQA group) one decode task serves; larger groups take the per-token walk.
#define ATTN_ITEM_ROWS 64
// Chunks ahead of the current one whose K/V rows a walk prefetches (see prefetch_chunk).
#define ATTN_PREFETCH_CHUNKS 2
// Most scratch the decode walk takes for its segment states; above it the per-token walk runs.
#define ATTN_SPLIT_MAX_BYTES ((size_t)32 << 20)

struct attn_split;

struct attn_job {
    const struct ci_attn_args *a;
    ci_attn_chunk_fn chunk;
    ci_attn_group_fn grp;
    ci_attn_chunk_q8_fn chunk_q8; // Q8_0 KV without soft-capping: integer scores against the quantized query
    ci_attn_group_q8_fn grp_q8;
    bool q8;                  // use chunk_q8 / grp_q8 (the query rows quantized once per walk: quant_rows)
    int group;                // query heads per KV head
    int slot;                 // tokens per task: 1 = one task per token (decode), else grouped prefill slots
    int n_slots;              // ceil(n_tokens / slot)
    struct attn_split *split; // non-NULL: decode as (token, KV heads, segment) tasks (walk_block)
    int n_slot_tasks;         // tasks before the decode walk's: (slot, KV head) of the prompt runs, or none
    bool prefetch_chunks;     // walk_block prefetches whole next chunks (ci_kernel_tune.attn_prefetch_chunks)
};

/* The decode walk's bookkeeping, in one allocation: item i = (token tok[i / n_groups], KV heads [g heads,
 * (g + 1) heads) with g = i % n_groups) owns tasks first[i] .. first[i + 1] - 1, one per segment, whose
 * states go to part + task * split_slot_floats(heads * group, hd) (per segment [m: rows][l: rows][acc: rows]
 * [hd], row = local KV head x group + query head of the group); left[i] counts its unfinished segments, and
 * the task that finishes the last one merges them and writes the item's output rows. */
struct attn_split {
    int n_items;
    int n_groups;     // items per token
    int heads;        // KV heads per item (the last item of a token may have fewer)
    int *tok;         // [n_items / n_groups]: the batch index of each token the walk serves
    int *first;       // [n_items + 1]
    atomic_int *left; // [n_items]
    float *part;      // [first[n_items]][split_slot_floats(heads * group, hd)]
};

/* Floats of one task's state slot: rows x (hd + 2), rounded up to whole cache lines.  Tasks running side by
 * side update their m, l and acc on every chunk; slots that shared a line made it travel between the cores
 * on each update (2 threads, 8 KV heads, 130 positions: 2.6 us a task alone, 4.3 beside another). */
static size_t split_slot_floats(int rows, int hd) {
    const size_t n = (size_t)rows * (size_t)(hd + 2), line = 64 / sizeof(float);
    return (n + line - 1) / line * line;
}

/* First key position a query at pos sees: pos - window + 1 under a sliding window, else 0. */
static int window_start(const struct ci_attn_args *a, int pos) {
    return a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
}

/* Folds a segment's softmax state (m, l, a) into the running state (M, L, A) of one query row: both rescaled
 * to the larger max (the log-sum-exp merge), L = L e^(M - M') + l e^(m - M'), A likewise.  Every path
 * (one task per token, grouped prefill, split decode) folds the same segments in the same order with this one
 * routine, so they agree bit for bit. */
static void merge_row(float *M, float *L, float *A, float m, float l, const float *a, int hd) {
    if (m == -INFINITY) // nothing seen (cannot happen for a non-empty segment; kept safe)
        return;
    float mx = *M > m ? *M : m;
    float c0 = *M == -INFINITY ? 0.0f : expf(*M - mx), c1 = expf(m - mx);
    *L = *L * c0 + l * c1;
    for (int d = 0; d < hd; d++)
        A[d] = A[d] * c0 + a[d] * c1;
    *M = mx;
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

/* Software prefetch of the K/V rows of the chunk at positions [p0, p0 + CI_ATTN_CHUNK) ∩ [., pe) of KV head kvh.
 * A chunk's rows lie in one or two KV blocks at unrelated addresses, so the hardware prefetchers restart
 * at every chunk and a decode walk over a long context stalls on each chunk's first lines; asking for the
 * rows a few chunks ahead overlaps those misses with the current chunk's work.  Into L2 (hint T1): an L1
 * prefetch holds one of the core's few L1 fill buffers for a whole DRAM round trip, and a chunk asks for 2 x 16
 * rows at once (measured, S_TG at 16 sequences 5-15% faster).  No effect on any result. */
static void prefetch_chunk(const struct ci_kv_layer *kv, const struct ci_attn_seq *s, int kvh, int p0,
                           int pe) {
#if defined(__GNUC__) || defined(__clang__)
    const int bs = kv->block_size;
    const int p1 = p0 + CI_ATTN_CHUNK < pe ? p0 + CI_ATTN_CHUNK : pe;
    for (int p = p0; p < p1;) {
        // The chunk's positions inside one block are contiguous slots: prefetch them as one span.
        int span = bs - p % bs < p1 - p ? bs - p % bs : p1 - p;
        size_t off = ci_kv_offset(kv, s->block_table[p / bs], kvh, p % bs);
        size_t bytes = (size_t)span * kv->row_bytes;
        const unsigned char *k = (const unsigned char *)kv->k + off, *v = (const unsigned char *)kv->v + off;
        for (size_t b = 0; b < bytes; b += 64) {
            __builtin_prefetch(k + b, 0, 2);
            __builtin_prefetch(v + b, 0, 2);
        }
        p += span;
    }
    // GCC 12 takes a function that reads memory and only prefetches for a pure one and deletes the calls whose
    // (void) result nobody uses (a ten-line reproduction: no prefetch left); an empty volatile asm keeps them.
    __asm__ volatile("");
#else
    (void)kv, (void)s, (void)kvh, (void)p0, (void)pe;
#endif
}

/* One chunk of n positions (K/V rows kp, vp) for query rows q[0..ng) (Q8_0 KV: qq), continuing m, l, acc: the
 * job's chunk kernel, or the soft-capped scalar one. */
static void chunk_rows(const struct attn_job *j, const void *const *kp, const void *const *vp, int n,
                       const float *const *q, const struct ci_block_q8_0 *const *qq, int ng, float *m,
                       float *l, float *acc) {
    const struct ci_attn_args *a = j->a;
    const int hd = a->kv->head_dim;
    if (a->softcap > 0.0f)
        chunk_capped(a->kv->type, kp, vp, n, q, ng, hd, a->scale, a->softcap, m, l, acc);
    else if (j->q8)
        j->chunk_q8(kp, vp, n, qq, ng, hd, a->scale, m, l, acc);
    else
        j->chunk(kp, vp, n, q, ng, hd, a->scale, m, l, acc);
}

/* The online softmax of query rows q[0..ng) of token t over positions [ps, pe) of KV head kvh (a range inside
 * one segment), continuing the state m, l, acc.  The chunks sit at the fixed multiples of CI_ATTN_CHUNK (a
 * range starting inside one cuts it short), so the order depends only on the positions. */
static void walk_heads(const struct attn_job *j, int t, int kvh, const float *const *q,
                       const struct ci_block_q8_0 *const *qq, int ng, int ps, int pe, float *m, float *l,
                       float *acc) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int bs = kv->block_size;
    const struct ci_attn_seq *s = &a->seqs[a->seq[t]];
    CI_ASSERT(ps >= 0 && ps < pe && (pe - 1) / bs < s->n_blocks);
    const unsigned char *kb = kv->k, *vb = kv->v;
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    const int pc = ps - ps % CI_ATTN_CHUNK;
    for (int c = 1; c < ATTN_PREFETCH_CHUNKS && pc + c * CI_ATTN_CHUNK < pe; c++)
        prefetch_chunk(kv, s, kvh, pc + c * CI_ATTN_CHUNK, pe);
    for (int p0 = pc; p0 < pe; p0 += CI_ATTN_CHUNK) {
        int p1 = p0 + CI_ATTN_CHUNK < pe ? p0 + CI_ATTN_CHUNK : pe, pb = p0 > ps ? p0 : ps;
        if (p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK < pe)
            prefetch_chunk(kv, s, kvh, p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK, pe);
        int n = p1 - pb;
        for (int i = 0; i < n; i++) {
            int p = pb + i;
            int32_t blk = s->block_table[p / bs];
            CI_DASSERT(blk >= 0);
            size_t off = ci_kv_offset(kv, blk, kvh, p % bs); // this KV head's slots are contiguous in a block
            kp[i] = kb + off;
            vp[i] = vb + off;
        }
        chunk_rows(j, kp, vp, n, q, qq, ng, m, l, acc);
    }
}

/* The online softmax of the query rows of KV heads [kv0, kv1) of token t (row (kvh - kv0) group + g: q[row],
 * qq[row]) over positions [ps, pe) of one segment, continuing the states m, l, acc: chunk by chunk, every head
 * of the range in turn.  A block holds each KV head's slots one after another, so the walk reads a block's
 * rows of those heads in address order, one stream the hardware prefetchers follow, instead of one head's
 * slots at a stride of the whole block (measured: a walk of one head in 8 reads 2.5-4x slower from memory
 * than the same bytes in order).  Each row sees the chunks walk_heads gives it, in the same order: the same
 * bits. */
static void walk_block(const struct attn_job *j, int t, int kv0, int kv1, const float *const *q,
                       const struct ci_block_q8_0 *const *qq, int ps, int pe, float *m, float *l,
                       float *acc) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, bs = kv->block_size, group = j->group;
    const struct ci_attn_seq *s = &a->seqs[a->seq[t]];
    CI_ASSERT(ps >= 0 && ps < pe && (pe - 1) / bs < s->n_blocks);
    const size_t head_bytes = (size_t)bs * kv->row_bytes; // one KV head's slots in a block
    const unsigned char *kb = kv->k, *vb = kv->v;
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    size_t off[CI_ATTN_CHUNK];
    const int pc = ps - ps % CI_ATTN_CHUNK;
    // One KV head's slots are a few KiB at a stride of the block: prefetched ahead as walk_heads does.  Several
    // heads are one stream per block, which the hardware prefetchers follow (started below);
    // software prefetches of whole chunks on top of it made the walk slower (bench/attn_decode.c, 4096
    // positions, 8 KV heads of 128: blocks in order 810-910 us a layer without, 1170-1270 with).
    const bool pf = kv1 - kv0 == 1;
    for (int c = 1; pf && c < ATTN_PREFETCH_CHUNKS && pc + c * CI_ATTN_CHUNK < pe; c++)
        prefetch_chunk(kv, s, kv0, pc + c * CI_ATTN_CHUNK, pe);
    for (int p0 = pc; p0 < pe; p0 += CI_ATTN_CHUNK) {
        int p1 = p0 + CI_ATTN_CHUNK < pe ? p0 + CI_ATTN_CHUNK : pe, pb = p0 > ps ? p0 : ps;
        int n = p1 - pb;
        if (pf && p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK < pe)
            prefetch_chunk(kv, s, kv0, p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK, pe);
#if defined(__GNUC__) || defined(__clang__)
        else if (!pf && p0 + CI_ATTN_CHUNK < pe) {
            // The first lines of each head's run in the next chunk: the hardware prefetchers follow a run once
            // started, and starting them a chunk ahead saves each run its first misses (blocks in no order,
            // 4096 positions, 8 KV heads of 128: 1050-1270 -> 900-1130 us a layer; 1024 positions 300-385 ->
            // 265-335; blocks in order level).  Where the CPU's row says so (Intel), the whole run within its
            // block instead (ci_kernel_tune.attn_prefetch_chunks).  Written here: a helper needs
            // prefetch_chunk's volatile asm.
            const int pn = p0 + CI_ATTN_CHUNK;
            const size_t o = ci_kv_offset(kv, s->block_table[pn / bs], kv0, pn % bs);
            const int run = CI_ATTN_CHUNK < bs - pn % bs ? CI_ATTN_CHUNK : bs - pn % bs;
            const int lines = j->prefetch_chunks ? (int)(((size_t)run * kv->row_bytes + 63) / 64) : 2;
            for (int kvh = kv0; kvh < kv1; kvh++)
                for (int line = 0; line < lines; line++) {
                    __builtin_prefetch(kb + o + (size_t)(kvh - kv0) * head_bytes + 64 * line, 0, 2);
                    __builtin_prefetch(vb + o + (size_t)(kvh - kv0) * head_bytes + 64 * line, 0, 2);
                }
        }
#endif
        for (int i = 0; i < n; i++) {
            int p = pb + i;
            int32_t blk = s->block_table[p / bs];
            CI_DASSERT(blk >= 0);
            off[i] = ci_kv_offset(kv, blk, kv0, p % bs);
        }
        for (int kvh = kv0; kvh < kv1; kvh++) {
            const size_t dh = (size_t)(kvh - kv0) * head_bytes;
            for (int i = 0; i < n; i++) {
                kp[i] = kb + off[i] + dh;
                vp[i] = vb + off[i] + dh;
            }
            for (int h = 0; h < group; h += ATTN_SUBGROUP) {
                const int ng = group - h < ATTN_SUBGROUP ? group - h : ATTN_SUBGROUP;
                const int r = (kvh - kv0) * group + h;
                chunk_rows(j, kp, vp, n, q + r, qq + r, ng, m + r, l + r, acc + (size_t)r * (size_t)hd);
            }
        }
    }
}

/* Visible positions [lo, pos] of token t cut into segments: the first segment index and the count. */
static void token_segments(const struct ci_attn_args *a, int t, int *s0, int *ns) {
    int lo = window_start(a, a->pos[t]);
    *s0 = lo / ATTN_SEG;
    *ns = a->pos[t] / ATTN_SEG - *s0 + 1;
}

/* Segment s of token t: the positions [*ps, *pe) it sees there. */
static void segment_range(const struct ci_attn_args *a, int t, int s, int *ps, int *pe) {
    int lo = window_start(a, a->pos[t]), pos = a->pos[t];
    *ps = s * ATTN_SEG > lo ? s * ATTN_SEG : lo;
    *pe = (s + 1) * ATTN_SEG < pos + 1 ? (s + 1) * ATTN_SEG : pos + 1;
}

static void init_rows(int nr, int hd, float *m, float *l, float *acc) {
    for (int r = 0; r < nr; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int d = 0; d < nr * hd; d++)
        acc[d] = 0.0f;
}

static void query_rows(const struct ci_attn_args *a, int t, int h0, int ng, const float **q) {
    for (int g = 0; g < ng; g++)
        q[g] = a->q + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)a->kv->head_dim;
}

/* The Q8_0 chunks' query rows: q[0..nr) quantized (ci_quantize_row, as K is stored) into buf [nr][hd / 32]
 * and pointed to by qq; nothing when the job does not use them. */
static void quant_rows(const struct attn_job *j, const float *const *q, int nr, struct ci_block_q8_0 *buf,
                       const struct ci_block_q8_0 **qq) {
    if (!j->q8)
        return;
    const int hd = j->a->kv->head_dim, nb = hd / CI_QK8_0;
    for (int r = 0; r < nr; r++) {
        ci_quantize_row(CI_TYPE_Q8_0, q[r], buf + (size_t)r * (size_t)nb, hd);
        qq[r] = buf + (size_t)r * (size_t)nb;
    }
}

/* Query heads [h0, h0 + ng) of token t, all reading KV head kvh: segment by segment, the first walked straight
 * into the running state (merging into the empty state would copy it), the later ones merged in. */
static void attn_heads(const struct attn_job *j, int t, int kvh, int h0, int ng) {
    const struct ci_attn_args *a = j->a;
    const int hd = a->kv->head_dim;
    CI_ASSERT(a->pos[t] >= 0 && a->pos[t] / a->kv->block_size < a->seqs[a->seq[t]].n_blocks);

    float acc[ATTN_SUBGROUP * CI_ATTN_MAX_HEAD_DIM]; // [ng][hd] unnormalized sum of w * v
    float m[ATTN_SUBGROUP];                          // running max score
    float l[ATTN_SUBGROUP];                          // running sum of exp(score - m)
    float sacc[ATTN_SUBGROUP * CI_ATTN_MAX_HEAD_DIM], sm[ATTN_SUBGROUP], sl[ATTN_SUBGROUP]; // one segment's
    const float *q[ATTN_SUBGROUP];                                                          // [ng] -> [hd]
    struct ci_block_q8_0 qbuf[ATTN_SUBGROUP * (CI_ATTN_MAX_HEAD_DIM / CI_QK8_0)];
    const struct ci_block_q8_0 *qq[ATTN_SUBGROUP];
    query_rows(a, t, h0, ng, q);
    quant_rows(j, q, ng, qbuf, qq);
    init_rows(ng, hd, m, l, acc);
    int s0, ns;
    token_segments(a, t, &s0, &ns);
    for (int s = s0; s < s0 + ns; s++) {
        int ps, pe;
        segment_range(a, t, s, &ps, &pe);
        if (s == s0) {
            walk_heads(j, t, kvh, q, qq, ng, ps, pe, m, l, acc);
            continue;
        }
        init_rows(ng, hd, sm, sl, sacc);
        walk_heads(j, t, kvh, q, qq, ng, ps, pe, sm, sl, sacc);
        for (int g = 0; g < ng; g++)
            merge_row(&m[g], &l[g], acc + (size_t)g * (size_t)hd, sm[g], sl[g], sacc + (size_t)g * (size_t)hd,
                      hd);
    }
    for (int g = 0; g < ng; g++) {
        float *o = a->out + ((size_t)t * (size_t)a->n_head + (size_t)(h0 + g)) * (size_t)hd;
        finish_row(a, h0 + g, m[g], l[g], acc + (size_t)g * (size_t)hd, o, hd);
    }
}

/* The grouped walk of rows q[0..nr) (token i = row / ng) over the chunks of positions [p_seg, p_end) of one
 * segment, p_end <= p_last + 1, continuing the state m, l, acc: per chunk, one grouped call for every row
 * whose token reaches it.  Row (i, g) sees min(CI_ATTN_CHUNK, pos_i + 1 - p0) positions of the chunk at p0,
 * exactly what walk_heads gives token i. */
static void walk_run(const struct attn_job *j, int t0, int nt, int kvh, int ng, const float *const *q,
                     const struct ci_block_q8_0 *const *qq, int p_seg, int p_end, float *m, float *l,
                     float *acc) {
    const struct ci_attn_args *a = j->a;
    const struct ci_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, bs = kv->block_size, nr = nt * ng;
    const int p_first = a->pos[t0];
    const struct ci_attn_seq *s = &a->seqs[a->seq[t0]];
    int n[ATTN_TOKEN_GROUP * ATTN_SUBGROUP]; // positions of the current chunk each row sees
    const unsigned char *kb = kv->k, *vb = kv->v;
    const void *kp[CI_ATTN_CHUNK], *vp[CI_ATTN_CHUNK];
    for (int c = 1; c < ATTN_PREFETCH_CHUNKS && p_seg + c * CI_ATTN_CHUNK < p_end; c++)
        prefetch_chunk(kv, s, kvh, p_seg + c * CI_ATTN_CHUNK, p_end);
    for (int p0 = p_seg; p0 < p_end; p0 += CI_ATTN_CHUNK) {
        int np = p_end - p0 < CI_ATTN_CHUNK ? p_end - p0 : CI_ATTN_CHUNK;
        if (p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK < p_end)
            prefetch_chunk(kv, s, kvh, p0 + ATTN_PREFETCH_CHUNKS * CI_ATTN_CHUNK, p_end);
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
        if (j->q8)
            j->grp_q8(kp, vp, n + r0, nr - r0, qq + r0, hd, a->scale, m + r0, l + r0,
                      acc + (size_t)r0 * (size_t)hd);
        else
            j->grp(kp, vp, n + r0, nr - r0, q + r0, hd, a->scale, m + r0, l + r0,
                   acc + (size_t)r0 * (size_t)hd);
    }
}

/* Query heads [h0, h0 + ng) of the nt tokens t0.. of one sequence at consecutive positions, all reading KV
 * head kvh: segment by segment as attn_heads (the first into the running state, the later ones merged in for
 * the tokens that reach them), each segment by the grouped walk. */
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
    float sacc[MAX_ROWS * CI_ATTN_MAX_HEAD_DIM], sm[MAX_ROWS], sl[MAX_ROWS]; // one segment's state
    const float *q[MAX_ROWS];                                                // [nt][ng] -> [hd]
    struct ci_block_q8_0 qbuf[MAX_ROWS * (CI_ATTN_MAX_HEAD_DIM / CI_QK8_0)];
    const struct ci_block_q8_0 *qq[MAX_ROWS];
    const int nr = nt * ng;
    for (int i = 0; i < nt; i++)
        query_rows(a, t0 + i, h0, ng, q + i * ng);
    quant_rows(j, q, nr, qbuf, qq);
    init_rows(nr, hd, m, l, acc);
    for (int p_seg = 0; p_seg <= p_last; p_seg += ATTN_SEG) {
        int p_end = p_seg + ATTN_SEG < p_last + 1 ? p_seg + ATTN_SEG : p_last + 1;
        if (p_seg == 0) {
            walk_run(j, t0, nt, kvh, ng, q, qq, p_seg, p_end, m, l, acc);
            continue;
        }
        // Tokens before the segment are done: the rows from token i0 on see it.
        int i0 = p_seg > p_first ? p_seg - p_first : 0, r0 = i0 * ng;
        init_rows(nr - r0, hd, sm + r0, sl + r0, sacc + (size_t)r0 * (size_t)hd);
        walk_run(j, t0 + i0, nt - i0, kvh, ng, q + r0, qq + r0, p_seg, p_end, sm + r0, sl + r0,
                 sacc + (size_t)r0 * (size_t)hd);
        for (int r = r0; r < nr; r++)
            merge_row(&m[r], &l[r], acc + (size_t)r * (size_t)hd, sm[r], sl[r], sacc + (size_t)r * (size_t)hd,
                      hd);
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

/* Decode, one task per (item, segment): the segment's state for every query row of the item's KV heads into
 * its scratch slot (walk_block); the task that finishes an item's last segment folds the slots left to right
 * (the first one is the running state, as in attn_heads) and writes the output rows. */
static void split_task(void *ctx, int task, int thread) {
    (void)thread;
    const struct attn_job *j = ctx;
    const struct ci_attn_args *a = j->a;
    const struct attn_split *sp = j->split;
    const int hd = a->kv->head_dim, n_kv_head = a->kv->n_kv_head, group = j->group;
    const int stride = sp->heads * group; // rows of a slot's m and l
    const size_t slot = split_slot_floats(stride, hd);
    int lo = 0, hi = sp->n_items - 1; // the item whose tasks hold this one
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (sp->first[mid] <= task)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int item = lo, t = sp->tok[item / sp->n_groups], kv0 = item % sp->n_groups * sp->heads;
    const int kv1 = kv0 + sp->heads < n_kv_head ? kv0 + sp->heads : n_kv_head, rows = (kv1 - kv0) * group;
    int s0, ns, ps, pe;
    token_segments(a, t, &s0, &ns);
    segment_range(a, t, s0 + (task - sp->first[item]), &ps, &pe);
    float *st = sp->part + (size_t)task * slot; // [m: stride][l: stride][acc: stride][hd]
    float *m = st, *l = st + stride, *acc = st + 2 * stride;
    const float *q[ATTN_ITEM_ROWS];
    struct ci_block_q8_0 qbuf[ATTN_ITEM_ROWS * (CI_ATTN_MAX_HEAD_DIM / CI_QK8_0)];
    const struct ci_block_q8_0 *qq[ATTN_ITEM_ROWS];
    query_rows(a, t, kv0 * group, rows, q);
    quant_rows(j, q, rows, qbuf, qq);
    init_rows(rows, hd, m, l, acc);
    walk_block(j, t, kv0, kv1, q, qq, ps, pe, m, l, acc);
    if (atomic_fetch_sub_explicit(&sp->left[item], 1, memory_order_acq_rel) != 1)
        return;
    float *st0 = sp->part + (size_t)sp->first[item] * slot;
    float *M = st0, *L = st0 + stride, *A = st0 + 2 * stride;
    for (int k = sp->first[item] + 1; k < sp->first[item + 1]; k++) {
        const float *sk = sp->part + (size_t)k * slot;
        for (int r = 0; r < rows; r++)
            merge_row(&M[r], &L[r], A + (size_t)r * (size_t)hd, sk[r], sk[stride + r],
                      sk + 2 * stride + (size_t)r * (size_t)hd, hd);
    }
    for (int r = 0; r < rows; r++) {
        int h = kv0 * group + r;
        finish_row(a, h, M[r], L[r], A + (size_t)r * (size_t)hd,
                   a->out + ((size_t)t * (size_t)a->n_head + (size_t)h) * (size_t)hd, hd);
    }
}

/* True when token t is alone in its run: a decode token (neither neighbour continues it). */
static bool lone_token(const struct ci_attn_args *a, int t) {
    return !continues_run(a, t) && !(t + 1 < a->n_tokens && continues_run(a, t + 1));
}

/* True when the decode walk serves token t: every token of a decode batch (j->slot == 1), the lone tokens of
 * a batch that also holds prompt runs (the sequences decoding beside a prefill chunk). */
static bool split_serves(const struct attn_job *j, int t) {
    return j->slot == 1 || lone_token(j->a, t);
}

/* The decode walk's plan and scratch for job j, or NULL where it does not apply (no token it serves, GQA groups
 * above ATTN_ITEM_ROWS) or does not fit (ATTN_SPLIT_MAX_BYTES, or no memory): the per-token walk (attn_task)
 * then computes the same bits.  Each item takes as many KV heads as ATTN_ITEM_ROWS query rows allow (one
 * stream through each block), fewer where the tokens' segments alone are too few tasks for the threads. */
static struct attn_split *split_plan(const struct attn_job *j, int n_threads) {
    const struct ci_attn_args *a = j->a;
    const int n_kv_head = a->kv->n_kv_head, group = j->group;
    if (group > ATTN_ITEM_ROWS)
        return NULL;
    int64_t n_segs = 0;
    int n_tok = 0;
    for (int t = 0; t < a->n_tokens; t++) {
        if (!split_serves(j, t))
            continue;
        int s0, ns;
        token_segments(a, t, &s0, &ns);
        n_segs += ns;
        n_tok++;
    }
    if (n_tok == 0)
        return NULL;
    const int64_t want = (int64_t)n_threads * ATTN_SPLIT_ITEMS_PER_THREAD;
    const int64_t groups_wanted = (want + n_segs - 1) / n_segs;
    int heads = groups_wanted >= n_kv_head ? 1 : (int)((n_kv_head + groups_wanted - 1) / groups_wanted);
    if (heads > ATTN_ITEM_ROWS / group)
        heads = ATTN_ITEM_ROWS / group;
    const int n_groups = (n_kv_head + heads - 1) / heads;
    const int64_t n_items = (int64_t)n_tok * n_groups, n_tasks = n_segs * n_groups;
    const size_t slot = split_slot_floats(heads * group, a->kv->head_dim);
    if (n_tasks > INT32_MAX || (size_t)n_tasks > ATTN_SPLIT_MAX_BYTES / sizeof(float) / slot)
        return NULL;
    size_t head = sizeof(struct attn_split), tok = (size_t)n_tok * sizeof(int);
    size_t first = (size_t)(n_items + 1) * sizeof(int), left = (size_t)n_items * sizeof(atomic_int);
    size_t part = (size_t)n_tasks * slot * sizeof(float);
    head = (head + 63) & ~(size_t)63;
    tok = (tok + 63) & ~(size_t)63;
    first = (first + 63) & ~(size_t)63;
    left = (left + 63) & ~(size_t)63;
    unsigned char *mem = ci_malloc_aligned(head + tok + first + left + part);
    if (!mem)
        return NULL;
    struct attn_split *sp = (struct attn_split *)(void *)mem;
    mem += head;
    sp->n_items = (int)n_items;
    sp->n_groups = n_groups;
    sp->heads = heads;
    sp->tok = (int *)(void *)mem;
    sp->first = (int *)(void *)(mem + tok);
    sp->left = (atomic_int *)(void *)(mem + tok + first);
    sp->part = (float *)(void *)(mem + tok + first + left);
    for (int t = 0, i = 0; t < a->n_tokens; t++)
        if (split_serves(j, t))
            sp->tok[i++] = t;
    int k = 0;
    for (int i = 0; i < sp->n_items; i++) {
        int s0, ns;
        token_segments(a, sp->tok[i / n_groups], &s0, &ns);
        sp->first[i] = k;
        atomic_init(&sp->left[i], ns);
        k += ns;
    }
    sp->first[sp->n_items] = k;
    return sp;
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
            if (e - t == 1 && j->split && lone_token(j->a, t))
                break; // a decode token beside the prompt runs: the decode walk's (split_task)
            if (e - t == 1)
                attn_heads(j, t, kvh, kvh * j->group + h, ng);
            else
                attn_run(j, t, e - t, kvh, kvh * j->group + h, ng);
        }
        t = e;
    }
}

/* Task i of a layer: the prompt runs' (attn_task), then the decode walk's (split_task). */
static void attn_any_task(void *ctx, int task, int thread) {
    const struct attn_job *j = ctx;
    if (task < j->n_slot_tasks)
        attn_task(ctx, task, thread);
    else
        split_task(ctx, task - j->n_slot_tasks, thread);
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
    if (type == CI_TYPE_F16)
        ci_f32_to_f16_row(x, dst, head_dim);
    else
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
    ci_attn_chunk_fn chunk = kv->type == CI_TYPE_F16 ? tab->attn_f16 : tab->attn_f32;
    ci_attn_group_fn grp = kv->type == CI_TYPE_F16 ? tab->attn_grp_f16 : tab->attn_grp_f32;
    // Q8_0: integer scores (dot.h); soft-capped layers keep the float query (chunk_capped widens K instead).
    struct attn_job j = {.a = a,
                         .chunk = chunk,
                         .grp = grp,
                         .chunk_q8 = tab->attn_q8_0,
                         .grp_q8 = tab->attn_grp_q8_0,
                         .q8 = kv->type == CI_TYPE_Q8_0 && !(a->softcap > 0.0f),
                         .group = a->n_head / kv->n_kv_head,
                         .slot = 1,
                         .prefetch_chunks = ci_kernels_tune()->attn_prefetch_chunks};
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
    // Decode tokens: one task per (token, KV heads, segment), walking the blocks in address order (walk_block);
    // beside prompt runs, after their (slot, KV head) tasks, so the dearest tasks start first.
    j.split = split_plan(&j, tp ? ci_threadpool_n_threads(tp) : 1);
    j.n_slot_tasks = j.split && j.slot == 1 ? 0 : j.n_slots * kv->n_kv_head;
    int64_t n_tasks = j.n_slot_tasks + (j.split ? (int64_t)j.split->first[j.split->n_items] : 0);
    if (n_tasks > INT32_MAX) { // the per-token walk alone: the same bits
        ci_free_aligned(j.split);
        j.split = NULL;
        n_tasks = j.n_slot_tasks = j.n_slots * kv->n_kv_head;
    }
    if (tp)
        ci_threadpool_run(tp, attn_any_task, &j, (int)n_tasks);
    else
        for (int task = 0; task < n_tasks; task++)
            attn_any_task(&j, task, 0);
    ci_free_aligned(j.split);
}
