/* cinfer bench kernels: the forward pass's speed with llama.cpp's benchmark definitions, against the roofline
 * of the machine measured in the same run (bench_hw.c), so kernel work can be judged side by side with
 * llama-bench and llama-batched-bench on the same files and thread count (bench/kernels.sh).
 *
 *   pp<P>  llama-bench: tokens/s of a P-token prompt of one sequence, one forward_batch per --ubatch tokens
 *          (P <= 512: one batch), logits for the last token only, no sampling; mean +- stddev over --reps.
 *   tg<N>  llama-bench: tokens/s of N tokens generated one at a time from an empty context (a 1-token
 *          forward_batch at positions 0..N-1, greedy argmax of its logits gives the next token).
 *   @ d<D> (--depth, llama-bench -d): pp and tg start at position D, after a D-token prompt of the same
 *          sequence prefilled once, untimed (the tests write only positions >= D, so that context stays).
 *   batched llama-batched-bench: B sequences each prefilled with a PP-token prompt (S_PP), then TG steps,
 * each ONE forward_batch holding one token per sequence: S_TG = B * TG / decode time. Warm-up as the
 * originals: a full prompt run before pp, one token before tg, 16 tokens before batched.
 *
 * Roofline: every forward call's ops (2 per weight per token, 2 * head for each logit row, 4 * head_dim per
 * head per attended position) and its minimum bytes (every weight it touches once, the KV of every attended
 * position once per sequence, the new KV written, in the KV type) are summed.  Each op is charged to the
 * peak of the instructions that do it: matmuls over Q8_0/Q4_0 weights are int8 dot products (2 ops per
 * multiply-add) bound by the int8 peak, float-weight matmuls and attention are f32 FMAs (2 FLOPs each) bound
 * by the f32 FMA peak.  A call can not be faster than max(int8 ops / int8 peak + FLOPs / f32 peak,
 * bytes / bandwidth), and a test's roofline time is the sum over its calls; "% roof" = roofline time /
 * measured time.  The peaks are the machine's (512-bit and VNNI loops where the CPU has them), the bandwidth
 * the sustained read bandwidth, all on -t threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/perf.h"
#include "bench/report.h"
#include "core/clock.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/stats.h"
#include "core/threadpool.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"

#define WARMUP_TOKENS 16 // llama-batched-bench's warm-up batch

/* What a forward call costs, per unit, from the model's tensors.  Weights are split by the roof of their
 * matmul (index: enum bench_roof). */
struct kb_shape {
    double p_layers[2];    // matrix weights applied to every token (all layers)
    double p_head[2];      // output head weights, applied per logit row
    double w_layers_bytes; // every per-layer tensor as stored (matrices, norms, biases)
    double w_head_bytes;   // output head (+ final norm) as stored
    double emb_row_bytes;  // one row of token_embd (the lookup reads one row per token)
    double kv_tok_bytes;   // K + V of one position, all layers, f32 (this engine's KV)
    double attn_flops_pos; // FLOPs per query token per attended position: 4 * n_layer * n_head * head_dim
};

struct kb_cost {
    double ops, int8_ops, bytes;        // ops: f32 FLOPs + int8 ops (int8_ops of them)
    double t_roof, t_compute, t_memory; // seconds: sum over calls of the bound, and of each side
    double t_int8;                      // the part of t_compute spent at the int8 peak
};

/* acc += a - b, field by field (the cost of the calls between two snapshots). */
static void cost_add_diff(struct kb_cost *acc, const struct kb_cost *a, const struct kb_cost *b) {
    acc->ops += a->ops - b->ops;
    acc->int8_ops += a->int8_ops - b->int8_ops;
    acc->bytes += a->bytes - b->bytes;
    acc->t_roof += a->t_roof - b->t_roof;
    acc->t_compute += a->t_compute - b->t_compute;
    acc->t_memory += a->t_memory - b->t_memory;
    acc->t_int8 += a->t_int8 - b->t_int8;
}

/* What bounds a test: "memory", or the compute roof that carries most of its compute time. */
static const char *cost_bound(const struct kb_cost *c) {
    if (c->t_memory > c->t_compute)
        return "memory";
    return bench_roof_name(c->t_int8 * 2 > c->t_compute ? BENCH_ROOF_INT8 : BENCH_ROOF_F32);
}

struct kb_run {
    const struct model *m;
    uint32_t kv_type; // the KV element type (opts.kv_type parsed)
    struct forward *fwd;
    struct kv_pool *pool;
    struct ci_kv_layer *layers;   // [n_layer]
    struct kv_seq_blocks *tables; // [max_seqs]
    struct ci_attn_seq *aseqs;    // [max_seqs]
    int max_seqs, max_tokens, ubatch;
    int32_t *tok, *pos, *seq; // [max_tokens]
    uint8_t *want;            // [max_tokens]
    int32_t *row_seq;         // [max_tokens] sequence of each logit row
    int32_t *next;            // [max_seqs] next token of each sequence (greedy)
    int32_t *seq_max_pos;     // [max_seqs] scratch for the cost model
    struct ci_rng rng;
    struct kb_shape shape;
    double peak[2], bw; // ops/s per enum bench_roof (f32: FLOP/s, int8: int8 op/s), bytes/s
    struct kb_cost cost;
};

/* ---- cost model ---- */

static double tensor_params(const struct ci_tensor *t) {
    if (!t->data)
        return 0;
    double n = 1;
    for (int i = 0; i < t->n_dims; i++)
        n *= (double)t->ne[i];
    return n;
}

static void shape_init(struct kb_shape *s, const struct model *m, uint32_t kv_type) {
    const struct model_config *c = &m->config;
    const struct model_weights *w = &m->weights;
    memset(s, 0, sizeof *s);
    for (int il = 0; il < c->n_layer; il++) {
        const struct layer_weights *l = &w->layers[il];
        const struct ci_tensor *mats[] = {&l->wq,     &l->wk,   &l->wv,     &l->wo,
                                          &l->w_gate, &l->w_up, &l->w_down, &l->wqkv};
        const struct ci_tensor *rest[] = {&l->attn_norm, &l->ffn_norm, &l->bq, &l->bk, &l->bv};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            if (!mats[i]->data) // phi3: wqkv instead of wq/wk/wv, no w_gate; the others: no wqkv
                continue;
            s->p_layers[bench_roof_of_type(mats[i]->type)] += tensor_params(mats[i]);
            s->w_layers_bytes += (double)mats[i]->nbytes;
        }
        for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
            s->w_layers_bytes += rest[i]->data ? (double)rest[i]->nbytes : 0;
    }
    s->p_head[bench_roof_of_type(w->output.type)] = tensor_params(&w->output);
    s->w_head_bytes = (double)w->output.nbytes + (double)w->output_norm.nbytes;
    s->emb_row_bytes = (double)w->tok_embd.row_bytes;
    s->kv_tok_bytes = (double)kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, kv_type);
    s->attn_flops_pos = 4.0 * c->n_layer * c->n_head * c->head_dim;
}

/* Adds one forward call over b to run->cost. */
static void cost_add(struct kb_run *r, const struct fwd_batch *b) {
    const struct kb_shape *s = &r->shape;
    double rows = 0, attended = 0, kv_read = 0;
    for (int i = 0; i < b->n_seqs; i++)
        r->seq_max_pos[i] = -1;
    for (int t = 0; t < b->n_tokens; t++) {
        rows += b->logits[t] != 0;
        attended += (double)b->pos[t] + 1;
        if (b->pos[t] > r->seq_max_pos[b->seq[t]])
            r->seq_max_pos[b->seq[t]] = b->pos[t];
    }
    for (int i = 0; i < b->n_seqs; i++)
        kv_read += (double)r->seq_max_pos[i] + 1;
    double n = b->n_tokens;
    double flops = 2.0 * n * s->p_layers[BENCH_ROOF_F32] + 2.0 * rows * s->p_head[BENCH_ROOF_F32] +
                   attended * s->attn_flops_pos; // attention is f32 FMAs whatever the KV type
    double int8_ops = 2.0 * n * s->p_layers[BENCH_ROOF_INT8] + 2.0 * rows * s->p_head[BENCH_ROOF_INT8];
    double bytes = s->w_layers_bytes + (rows > 0 ? s->w_head_bytes : 0) + n * s->emb_row_bytes +
                   (kv_read + n) * s->kv_tok_bytes; // every attended position read once, the new ones written
    double t_int8 = int8_ops > 0 ? int8_ops / r->peak[BENCH_ROOF_INT8] : 0;
    double tc = flops / r->peak[BENCH_ROOF_F32] + t_int8, tm = bytes / r->bw;
    r->cost.ops += flops + int8_ops;
    r->cost.int8_ops += int8_ops;
    r->cost.bytes += bytes;
    r->cost.t_compute += tc;
    r->cost.t_int8 += t_int8;
    r->cost.t_memory += tm;
    r->cost.t_roof += tc > tm ? tc : tm;
}

/* ---- driving the forward pass ---- */

/* One forward_batch over run->tok/pos/seq/want[0..n); greedy next token for every logit row's sequence. */
static enum ci_status kb_forward(struct kb_run *r, int n, int n_seqs, struct ci_err *err) {
    for (int i = 0; i < n_seqs; i++) {
        r->aseqs[i].block_table = r->tables[i].ids;
        r->aseqs[i].n_blocks = r->tables[i].n;
    }
    int n_rows = 0;
    for (int t = 0; t < n; t++)
        if (r->want[t])
            r->row_seq[n_rows++] = r->seq[t];
    struct fwd_batch b = {.n_tokens = n,
                          .token = r->tok,
                          .pos = r->pos,
                          .seq = r->seq,
                          .logits = r->want,
                          .n_seqs = n_seqs,
                          .seqs = r->aseqs};
    const float *logits;
    int rows;
    enum ci_status st = forward_batch(r->fwd, &b, r->layers, &logits, &rows, err);
    if (st != CI_OK)
        return st;
    int n_vocab = r->m->config.n_vocab;
    for (int i = 0; i < rows && i < n_rows; i++)
        r->next[r->row_seq[i]] = ci_argmax(logits + (size_t)i * (size_t)n_vocab, n_vocab);
    cost_add(r, &b);
    return CI_OK;
}

static int32_t random_token(struct kb_run *r) {
    return (int32_t)(ci_rng_u64(&r->rng) % (uint64_t)r->m->config.n_vocab);
}

/* Gives sequences 0..n_seqs-1 fresh block tables covering n_tokens positions each (the KV of earlier runs is
 * simply overwritten, as llama-bench clears its cache between repetitions). */
static enum ci_status kb_reserve(struct kb_run *r, int n_seqs, int n_tokens, struct ci_err *err) {
    for (int i = 0; i < r->max_seqs; i++)
        kv_seq_release(r->pool, &r->tables[i]);
    for (int i = 0; i < n_seqs; i++)
        if (kv_seq_reserve(r->pool, &r->tables[i], n_tokens) != CI_OK)
            return ci_err_set(err, CI_ERR_LIMIT, "bench kernels: KV pool too small for %d x %d tokens",
                              n_seqs, n_tokens);
    return CI_OK;
}

/* Prompt processing of n_seqs sequences of n_pp random tokens each (positions pos0..pos0+n_pp-1), laid out sequence
 * after sequence and cut into forward calls of at most ubatch tokens; logits for each sequence's last token.
 */
static enum ci_status kb_prompts_at(struct kb_run *r, int n_seqs, int pos0, int n_pp, struct ci_err *err) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int p = 0; p < n_pp; p++) {
            r->tok[n] = random_token(r);
            r->pos[n] = pos0 + p;
            r->seq[n] = s;
            r->want[n] = p == n_pp - 1;
            if (++n == r->ubatch || (s == n_seqs - 1 && p == n_pp - 1)) {
                enum ci_status st = kb_forward(r, n, n_seqs, err);
                if (st != CI_OK)
                    return st;
                n = 0;
            }
        }
    return CI_OK;
}

static enum ci_status kb_prompts(struct kb_run *r, int n_seqs, int n_pp, struct ci_err *err) {
    return kb_prompts_at(r, n_seqs, 0, n_pp, err);
}

/* n_tg decode steps of n_seqs sequences from position pos0: each step one forward call holding one token per
 * sequence, the token the previous step's argmax chose (a random first one). */
static enum ci_status kb_decode(struct kb_run *r, int n_seqs, int pos0, int n_tg, struct ci_err *err) {
    for (int s = 0; s < n_seqs; s++)
        r->next[s] = random_token(r);
    for (int i = 0; i < n_tg; i++) {
        for (int s = 0; s < n_seqs; s++) {
            r->tok[s] = r->next[s];
            r->pos[s] = pos0 + i;
            r->seq[s] = s;
            r->want[s] = 1;
        }
        enum ci_status st = kb_forward(r, n_seqs, n_seqs, err);
        if (st != CI_OK)
            return st;
    }
    return CI_OK;
}

/* ---- statistics and output ---- */

struct kb_stats {
    double avg, sd, median; // of tokens/s samples
    double avg_s;           // mean seconds per rep
};

static void stats(const double *ts, const double *secs, int n, struct kb_stats *o) {
    double sum = 0, sum_s = 0, sq = 0;
    for (int i = 0; i < n; i++) {
        sum += ts[i];
        sum_s += secs[i];
    }
    o->avg = sum / n;
    o->avg_s = sum_s / n;
    for (int i = 0; i < n; i++)
        sq += (ts[i] - o->avg) * (ts[i] - o->avg);
    o->sd = n > 1 ? sqrt(sq / (n - 1)) : 0; // sample stddev, as llama-bench
    double sorted[BENCH_KERNELS_MAX_REPS];
    memcpy(sorted, ts, (size_t)n * sizeof *sorted);
    ci_sort_doubles(sorted, n);
    o->median = ci_quantile(sorted, n, 0.5); // the middle one, or the mean of the middle two
}

/* A pp or tg test: R timed repetitions after the warm-up. */
static enum ci_status run_single(struct kb_run *r, const struct bench_kernels_opts *o, bool pp,
                                 const char *label, const char *model_desc, struct ci_err *err) {
    int n = pp ? o->n_prompt : o->n_gen, d = o->depth;
    enum ci_status st = kb_reserve(r, 1, d + n, err);
    if (st != CI_OK)
        return st;
    if (d > 0 && (st = kb_prompts(r, 1, d, err)) != CI_OK) // the context, once
        return st;
    if (!o->no_warmup) // llama-bench: a whole prompt run before pp, one generated token before tg
        st = pp ? kb_prompts_at(r, 1, d, n, err) : kb_decode(r, 1, d, 1, err);
    if (st != CI_OK)
        return st;
    double ts[BENCH_KERNELS_MAX_REPS], secs[BENCH_KERNELS_MAX_REPS];
    memset(&r->cost, 0, sizeof r->cost);
    for (int i = 0; i < o->reps; i++) {
        int64_t t0 = ci_now_ns();
        st = pp ? kb_prompts_at(r, 1, d, n, err) : kb_decode(r, 1, d, n, err);
        if (st != CI_OK)
            return st;
        secs[i] = (double)(ci_now_ns() - t0) * 1e-9;
        ts[i] = n / secs[i];
    }
    struct kb_stats s;
    stats(ts, secs, o->reps, &s);
    double t_roof = r->cost.t_roof / o->reps, ops = r->cost.ops / o->reps,
           int8_ops = r->cost.int8_ops / o->reps, bytes = r->cost.bytes / o->reps;
    double roof_ts = n / t_roof, pct = 100.0 * s.avg / roof_ts;
    const char *bound = cost_bound(&r->cost);
    if (o->json) {
        printf("{\"type\": \"%s\", \"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
               "\"reps\": %d, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"median_ts\": %.4f, \"avg_s\": %.6f, "
               "\"samples_ts\": [",
               pp ? "pp" : "tg", label, pp ? n : 0, pp ? 0 : n, d, o->reps, s.avg, s.sd, s.median, s.avg_s);
        for (int i = 0; i < o->reps; i++)
            printf("%s%.4f", i ? ", " : "", ts[i]);
        printf("], \"flops\": %.6g, \"int8_ops\": %.6g, \"bytes\": %.6g, \"gflops\": %.3f, \"gbs\": %.3f, "
               "\"roofline_ts\": %.4f, \"roofline_pct\": %.3f, \"bound\": \"%s\"}\n",
               ops, int8_ops, bytes, ops / s.avg_s * 1e-9, bytes / s.avg_s * 1e-9, roof_ts, pct, bound);
    } else {
        printf("| %-28s | %7d | %13s | %12.2f ± %-8.2f | %10.2f | %6.1f%% %-7s | %8.1f | %7.2f |\n",
               model_desc, o->n_threads, label, s.avg, s.sd, roof_ts, pct, bound, ops / s.avg_s * 1e-9,
               bytes / s.avg_s * 1e-9);
    }
    fflush(stdout);
    return CI_OK;
}

/* llama-batched-bench's row for B sequences (the mean over batch_reps runs). */
static enum ci_status run_batched(struct kb_run *r, const struct bench_kernels_opts *o, int B,
                                  struct ci_err *err) {
    int pp = o->batch_pp, tg = o->batch_tg;
    enum ci_status st = kb_reserve(r, B, pp + tg, err);
    if (st != CI_OK)
        return st;
    double t_pp = 0, t_tg = 0;
    struct kb_cost c_pp = {0}, c_tg = {0}, none = {0};
    for (int rep = 0; rep < o->batch_reps; rep++) {
        memset(&r->cost, 0, sizeof r->cost);
        int64_t t0 = ci_now_ns();
        if ((st = kb_prompts(r, B, pp, err)) != CI_OK)
            return st;
        int64_t t1 = ci_now_ns();
        struct kb_cost after_pp = r->cost;
        if ((st = kb_decode(r, B, pp, tg, err)) != CI_OK)
            return st;
        int64_t t2 = ci_now_ns();
        t_pp += (double)(t1 - t0) * 1e-9;
        t_tg += (double)(t2 - t1) * 1e-9;
        cost_add_diff(&c_pp, &after_pp, &none);
        cost_add_diff(&c_tg, &r->cost, &after_pp);
    }
    int n = o->batch_reps;
    t_pp /= n;
    t_tg /= n;
    double s_pp = pp > 0 ? B * pp / t_pp : 0, s_tg = tg > 0 ? B * tg / t_tg : 0;
    double s_all = (B * (pp + tg)) / (t_pp + t_tg);
    double roof_pp = pp > 0 ? B * pp / (c_pp.t_roof / n) : 0,
           roof_tg = tg > 0 ? B * tg / (c_tg.t_roof / n) : 0;
    double pct_pp = roof_pp > 0 ? 100.0 * s_pp / roof_pp : 0,
           pct_tg = roof_tg > 0 ? 100.0 * s_tg / roof_tg : 0;
    const char *bound = cost_bound(&c_tg);
    if (o->json) {
        printf("{\"type\": \"batched\", \"pp\": %d, \"tg\": %d, \"pl\": %d, \"n_kv\": %d, \"reps\": %d, "
               "\"t_pp\": %.6f, \"speed_pp\": %.4f, \"t_tg\": %.6f, \"speed_tg\": %.4f, \"t\": %.6f, "
               "\"speed\": %.4f, \"roofline_speed_pp\": %.4f, \"roofline_pct_pp\": %.3f, "
               "\"roofline_speed_tg\": %.4f, "
               "\"roofline_pct_tg\": %.3f, \"gflops_tg\": %.3f, \"gbs_tg\": %.3f, \"bound_tg\": \"%s\"}\n",
               pp, tg, B, B * (pp + tg), n, t_pp, s_pp, t_tg, s_tg, t_pp + t_tg, s_all, roof_pp, pct_pp,
               roof_tg, pct_tg, t_tg > 0 ? c_tg.ops / n / t_tg * 1e-9 : 0,
               t_tg > 0 ? c_tg.bytes / n / t_tg * 1e-9 : 0, bound);
    } else {
        printf("| %6d | %6d | %4d | %6d | %8.3f | %8.2f | %5.1f%% | %8.3f | %8.2f | %9.2f | %5.1f%% %-7s "
               "| %8.3f | %8.2f |\n",
               pp, tg, B, B * (pp + tg), t_pp, s_pp, pct_pp, t_tg, s_tg, roof_tg, pct_tg, bound, t_pp + t_tg,
               s_all);
    }
    fflush(stdout);
    return CI_OK;
}

static int imax(int a, int b) {
    return a > b ? a : b;
}

static enum ci_status kb_setup(struct kb_run *r, const struct bench_kernels_opts *o, struct ci_threadpool *tp,
                               struct ci_err *err) {
    const struct model_config *c = &r->m->config;
    int max_b = 1, per_seq = imax(imax(o->n_prompt, o->n_gen) + o->depth, WARMUP_TOKENS);
    for (int i = 0; i < o->n_batches; i++)
        max_b = imax(max_b, o->batches[i]);
    if (o->n_batches > 0)
        per_seq = imax(per_seq, o->batch_pp + o->batch_tg);
    int blocks_per_seq = (per_seq + o->block_size - 1) / o->block_size;
    int64_t n_blocks = (int64_t)blocks_per_seq * max_b;
    if (n_blocks > INT32_MAX / 2)
        return ci_err_set(err, CI_ERR_INVALID, "bench kernels: %d sequences x %d tokens is too many", max_b,
                          per_seq);
    // Tokens per forward call: a whole prompt chunk (up to ubatch), or one token per sequence.
    int most =
        imax(imax(imax(o->n_prompt, o->depth), o->n_batches > 0 ? max_b * o->batch_pp : 0), WARMUP_TOKENS);
    r->ubatch = o->ubatch;
    r->max_tokens = imax(most < o->ubatch ? most : o->ubatch, max_b);
    r->max_seqs = max_b;
    struct kv_pool_params kp = {c->n_layer,    c->n_kv_head,  c->head_dim,
                                o->block_size, (int)n_blocks, r->kv_type};
    enum ci_status st;
    if ((st = kv_pool_create(&kp, &r->pool, err)) != CI_OK ||
        (st = forward_create(r->m, r->max_tokens, max_b, tp, &r->fwd, err)) != CI_OK)
        return st;
    size_t T = (size_t)r->max_tokens, S = (size_t)max_b;
    r->layers = ci_calloc((size_t)c->n_layer, sizeof *r->layers);
    r->tables = ci_calloc(S, sizeof *r->tables);
    r->aseqs = ci_calloc(S, sizeof *r->aseqs);
    r->tok = ci_calloc(T, sizeof *r->tok);
    r->pos = ci_calloc(T, sizeof *r->pos);
    r->seq = ci_calloc(T, sizeof *r->seq);
    r->want = ci_calloc(T, 1);
    r->row_seq = ci_calloc(T, sizeof *r->row_seq);
    r->next = ci_calloc(S, sizeof *r->next);
    r->seq_max_pos = ci_calloc(S, sizeof *r->seq_max_pos);
    if (!r->layers || !r->tables || !r->aseqs || !r->tok || !r->pos || !r->seq || !r->want || !r->row_seq ||
        !r->next || !r->seq_max_pos)
        return ci_err_set(err, CI_ERR_NOMEM, "bench kernels: out of memory");
    for (int il = 0; il < c->n_layer; il++)
        kv_pool_layer(r->pool, il, &r->layers[il]);
    for (int i = 0; i < max_b; i++)
        if ((st = kv_seq_init(&r->tables[i], blocks_per_seq, err)) != CI_OK)
            return st;
    return CI_OK;
}

static void kb_teardown(struct kb_run *r) {
    if (r->tables)
        for (int i = 0; i < r->max_seqs; i++) {
            if (r->tables[i].ids)
                kv_seq_release(r->pool, &r->tables[i]);
            kv_seq_deinit(&r->tables[i]);
        }
    ci_free(r->tables);
    ci_free(r->aseqs);
    ci_free(r->layers);
    ci_free(r->tok);
    ci_free(r->pos);
    ci_free(r->seq);
    ci_free(r->want);
    ci_free(r->row_seq);
    ci_free(r->next);
    ci_free(r->seq_max_pos);
    forward_free(r->fwd);
    kv_pool_free(r->pool);
}

int bench_kernels_run(const struct bench_kernels_opts *o) {
    struct ci_err err = {0};
    struct ci_threadpool *tp = NULL;
    struct model *m = NULL;
    struct kb_run r;
    memset(&r, 0, sizeof r);
    int rc = 1;
    if (!kv_type_parse(o->kv_type ? o->kv_type : "f32", &r.kv_type)) {
        ci_err_set(&err, CI_ERR_INVALID, "--kv-type: '%s' is not one of f32, f16, q8_0", o->kv_type);
        goto fail;
    }
    if (ci_threadpool_create(o->n_threads, &tp, &err) != CI_OK)
        goto fail;

    // The model is only mapped here; the warm-up runs read it in.  The machine is measured before, on the
    // same threads, so the bandwidth buffer does not evict the weights just before the timed runs.
    if (model_load(o->model, &m, &err) != CI_OK)
        goto fail;
    shape_init(&r.shape, m, r.kv_type);
    // The int8 peak only matters to a model with int8-dot matmuls; everything else must be given or measured.
    bool needs_int8 = r.shape.p_layers[BENCH_ROOF_INT8] + r.shape.p_head[BENCH_ROOF_INT8] > 0;
    bool all_given = o->bw_gbs > 0 && o->peak_gflops > 0 && (o->int8_peak_gops > 0 || !needs_int8);
    struct bench_hw hw;
    if (all_given) {
        memset(&hw, 0, sizeof hw);
        hw.isa = "given";
        hw.kernels_isa = ci_kernels_isa();
        hw.n_threads = o->n_threads;
    } else {
        struct bench_hw_opts ho;
        bench_hw_opts_default(&ho);
        ho.buf_bytes = (size_t)o->hw_mib << 20;
        ho.passes = 3;
        ho.peak_s = 0.2;
        if (!o->json)
            fprintf(stderr,
                    "cinfer bench kernels: measuring the machine (bandwidth, f32 and int8 peaks) ...\n");
        if (bench_hw_measure(tp, &ho, &hw, &err) != CI_OK)
            goto fail;
    }
    if (o->bw_gbs > 0)
        hw.bw_gbs = o->bw_gbs;
    if (o->peak_gflops > 0)
        hw.peak_gflops = o->peak_gflops;
    if (o->int8_peak_gops > 0)
        hw.int8_peak_gops = o->int8_peak_gops;
    hw.ridge = hw.peak_gflops / hw.bw_gbs;
    hw.int8_ridge = hw.int8_peak_gops / hw.bw_gbs;
    if (all_given && !o->json)
        printf("roofline given: f32 peak %.1f GFLOP/s, int8 peak %.1f GOP/s, bandwidth %.2f GB/s\n",
               hw.peak_gflops, hw.int8_peak_gops, hw.bw_gbs);
    else
        bench_hw_print(&hw, o->json);

    r.m = m;
    r.peak[BENCH_ROOF_F32] = hw.peak_gflops * 1e9;
    r.peak[BENCH_ROOF_INT8] = hw.int8_peak_gops * 1e9;
    r.bw = hw.bw_gbs * 1e9;
    ci_rng_seed(&r.rng, o->seed);
    if (kb_setup(&r, o, tp, &err) != CI_OK)
        goto fail;

    const struct model_config *c = &m->config;
    const char *wtype = ci_type_name(m->weights.layers[0].w_gate.type);
    double params = (double)model_n_params(m), wbytes = (double)model_weight_bytes(m);
    const char *base = strrchr(o->model, '/');
    base = base ? base + 1 : o->model;
    char desc[128], size[32];
    if (params >= 1e9)
        snprintf(size, sizeof size, "%.1fB", params / 1e9);
    else
        snprintf(size, sizeof size, params >= 1e7 ? "%.0fM" : "%.2fM", params / 1e6);
    snprintf(desc, sizeof desc, "%.16s %s %s", model_arch_name(c->arch), size, wtype);
    if (o->json) {
        printf("{\"type\": \"model\", \"engine\": \"cinfer\", \"model\": ");
        bench_json_fputs(stdout, o->model);
        printf(
            ", \"arch\": \"%s\", \"weight_type\": \"%s\", \"n_params\": %.0f, \"weight_bytes\": %.0f, "
            "\"n_layer\": %d, \"n_embd\": %d, \"n_head\": %d, \"n_kv_head\": %d, \"n_ff\": %d, \"n_vocab\": "
            "%d, "
            "\"kv_type\": \"%s\", \"n_threads\": %d, \"ubatch\": %d, \"block_size\": %d, \"kernels_isa\": "
            "\"%s\", \"peak_gflops\": %.3f, \"int8_peak_gops\": %.3f, \"bw_gbs\": %.3f, "
            "\"int8_params\": %.0f, \"f32_params\": %.0f}\n",
            model_arch_name(c->arch), wtype, params, wbytes, c->n_layer, c->n_embd, c->n_head, c->n_kv_head,
            c->n_ff, c->n_vocab, kv_type_name(r.kv_type), o->n_threads, o->ubatch, o->block_size,
            ci_kernels_isa(), hw.peak_gflops, hw.int8_peak_gops, hw.bw_gbs,
            r.shape.p_layers[BENCH_ROOF_INT8] + r.shape.p_head[BENCH_ROOF_INT8],
            r.shape.p_layers[BENCH_ROOF_F32] + r.shape.p_head[BENCH_ROOF_F32]);
    } else {
        printf("\nmodel %s: %s, %.1f M params, %.1f MiB of weights (%s), KV %s; %d threads, kernels %s\n",
               base, model_arch_name(c->arch), params / 1e6, wbytes / (1024.0 * 1024.0), wtype,
               kv_type_name(r.kv_type), o->n_threads, ci_kernels_isa());
        printf("roofs: int8 peak for %.1f M matmul weights (int8 dot products), f32 peak for %.1f M and "
               "attention\n",
               (r.shape.p_layers[BENCH_ROOF_INT8] + r.shape.p_head[BENCH_ROOF_INT8]) / 1e6,
               (r.shape.p_layers[BENCH_ROOF_F32] + r.shape.p_head[BENCH_ROOF_F32]) / 1e6);
    }
    fflush(stdout);

    if (o->n_prompt > 0 || o->n_gen > 0) {
        if (!o->json) {
            printf("\n| %-28s | %7s | %13s | %24s | %10s | %15s | %8s | %7s |\n", "model", "threads", "test",
                   "t/s (mean ± sd)", "roof t/s", "% roof  bound", "GOP/s", "GB/s");
            printf("| %.28s | %.7s | %.13s | %.23s | %.10s | %.15s | %.8s | %.7s |\n",
                   "------------------------------", "-------", "-------------", "-------------------------",
                   "----------", "---------------", "--------", "-------");
        }
        char label[32];
        if (o->n_prompt > 0) {
            if (o->depth)
                snprintf(label, sizeof label, "pp%d @ d%d", o->n_prompt, o->depth);
            else
                snprintf(label, sizeof label, "pp%d", o->n_prompt);
            if (run_single(&r, o, true, label, desc, &err) != CI_OK)
                goto fail;
        }
        if (o->n_gen > 0) {
            if (o->depth)
                snprintf(label, sizeof label, "tg%d @ d%d", o->n_gen, o->depth);
            else
                snprintf(label, sizeof label, "tg%d", o->n_gen);
            if (run_single(&r, o, false, label, desc, &err) != CI_OK)
                goto fail;
        }
    }
    if (o->n_batches > 0) {
        if (!o->no_warmup) { // llama-batched-bench's warm-up: 16 tokens of one sequence
            if (kb_reserve(&r, 1, WARMUP_TOKENS, &err) != CI_OK ||
                kb_prompts(&r, 1, WARMUP_TOKENS, &err) != CI_OK)
                goto fail;
        }
        if (!o->json) {
            printf("\n| %6s | %6s | %4s | %6s | %8s | %8s | %6s | %8s | %8s | %9s | %14s | %8s | %8s |\n",
                   "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "% roof", "T_TG s", "S_TG t/s", "roof S_TG",
                   "% roof  bound", "T s", "S t/s");
            printf("|--------|--------|------|--------|----------|----------|--------|----------|----------|"
                   "-----------|----------------|----------|----------|\n");
        }
        for (int i = 0; i < o->n_batches; i++)
            if (run_batched(&r, o, o->batches[i], &err) != CI_OK)
                goto fail;
    }
    if (!o->json) {
        bool some_given = o->bw_gbs > 0 || o->peak_gflops > 0 || o->int8_peak_gops > 0;
        const char *source = all_given ? "given" : some_given ? "partly given" : "measured above";
        printf(
            "\n%% roof: measured / roofline bound (%s): int8-dot matmuls (Q8_0, Q4_0 weights)\n"
            "at the int8 peak %.1f GOP/s, float matmuls and attention at the f32 FMA peak %.1f GFLOP/s,\n"
            "bytes at %.2f GB/s.  bound: memory, or the compute roof that holds most of the compute time.\n"
            "GOP/s: f32 FLOPs + int8 ops per second (one int8 multiply-add = 2 ops, as one FMA = 2 FLOPs).\n",
            source, hw.int8_peak_gops, hw.peak_gflops, hw.bw_gbs);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "cinfer bench kernels: %s\n", err.msg);
done:
    kb_teardown(&r);
    model_free(m);
    ci_threadpool_free(tp);
    return rc;
}
