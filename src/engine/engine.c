#include "engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/queue.h"
#include "core/sysmem.h"
#include "core/threadpool.h"
#include "engine/dist.h"
#include "engine/kv_budget.h"
#include "engine/kv_pool.h"
#include "grammar/cache.h"
#include "grammar/matcher.h"
#include "engine/metrics.h"
#include "engine/prefix_cache.h"
#include "engine/spec.h"
#include "engine/think.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

#define MAX_KV_BLOCKS          (1 << 30) // block ids are int
#define MAX_SAMPLES            64
#define DEFAULT_QUEUE_CAPACITY 1024
#define ENGINE_GRAM_SLOTS                                                                                    \
    16 // grammars whose matcher spaces (nodes, mask cache) the engine keeps // requests waiting to be drained into the engine
// Sequences the engine tracks (running + waiting): the running ones, plus room for this many samples per
// queued request on average and one request of MAX_SAMPLES; a request that would exceed it gets CI_ERR_BUSY.
#define SEQS_PER_QUEUED_REQUEST 4

struct engine_request {
    atomic_int refs; // the caller's and the engine's
    struct engine *e;
    int32_t *prompt; // [n_prompt]
    int n_prompt;
    int max_tokens;
    int n;
    struct sampling_params sampling;
    char **stop; // [n_stop]
    int n_stop;
    bool ignore_eos;
    bool want_text;
    bool render_special;
    int logprobs;
    int spec_k;                       // this request's longest proposal (0: no speculation)
    struct sampling_logit_bias *bias; // [sampling.n_logit_bias], the copy sampling.logit_bias points at
    enum engine_pooling pooling;      // NONE, or an embedding request
    float *embedding;                 // [n_embd] the pooled hidden states (embedding requests)
    bool embedding_done;              // written by the engine thread before the stream's DONE
    uint64_t order;
    struct ci_channel **ch;          // [n]
    struct request_metrics *metrics; // [n]
    int n_live;                      // samples not finished (engine thread)
    struct gram_ref *grammar;        // the compiled grammar constraining every sample (NULL: none)
    // Reasoning budget (engine.h's think_*): think_force is the grammar of the end marker's text, forced
    // once a sample's reasoning block holds think_budget tokens (NULL: no budget).
    struct gram_ref *think_force;
    char *think_start, *think_end;
    int think_budget;
    bool think_open;
};

/* The engine's sequence: the scheduler's struct seq plus what streaming text needs. */
struct eseq {
    struct seq s; // first: sched hands back struct seq pointers
    struct detok detok;
    struct stop_matcher stop;
    bool has_detok, has_stop;
    struct gram_matcher *gm; // the grammar's state after this sample's generated tokens (NULL: none)
    int gslot;               // the engine's gslots entry gm lives in (-1: gm has a space of its own)
    struct think think;      // the reasoning budget's state (request with think_force)
    struct gram_matcher *fm; // forcing the end of the reasoning block (NULL: not forcing)
    // Draft model proposer: the draft's KV of tokens[0, d_computed) in its own pool, and this step's k.
    struct kv_seq_blocks dblocks;
    int d_computed;
    int d_k;
};

struct engine {
    const struct model *m;
    // The engine cannot go on (the model file changed on disk): every request fails with this message.
    atomic_bool failed;
    char failure[256]; // written once, before failed is set
    const struct tokenizer *tok;
    struct engine_params p;
    int n_ctx;
    int block_size;
    int64_t kv_bytes_per_token; // K and V of one token in the pool's element type
    int kv_sizing;              // enum kv_sizing: what decided the pool's size (start-up report)
    double kv_mem_fraction;
    int64_t mem_available;
    int64_t kv_weight_bytes; // weights counted against the default pool's budget
    int kv_window; // > 0: every layer attends through this sliding window, so blocks behind it are given back
    struct ci_threadpool *tp;
    struct kv_pool *pool;
    struct prefix_cache *pc;
    struct forward *fwd;
    struct ci_kv_layer *layers; // [n_layer]
    // Speculative decoding with a draft model: its pool (same block size and count), forward and KV views.
    struct kv_pool *dpool;
    struct forward *dfwd;
    struct ci_kv_layer *dlayers; // [draft n_layer]
    bool draft_warned;
    bool dist_open; // tensor parallelism: dist_open made the workers mirror fwd and pool
    struct ci_queue *queue;

    struct sched_state st;
    struct seq **items;                       // [cap]
    const struct kv_seq_blocks **live_tables; // [cap + 1] check_invariants' scratch
    int cap;                                  // sequences the engine tracks at once (running + waiting)
    struct kv_seq_blocks pad;                 // static batching: the block pad tokens are written to

    // One forward pass: flat token arrays and the sequences they belong to.
    int max_pass_tokens;
    int max_rows;
    int32_t *b_tok, *b_pos, *b_seq; // [max_pass_tokens]
    uint8_t *b_want;                // [max_pass_tokens]
    uint8_t *b_hid;                 // [max_pass_tokens] keep the final hidden state (embedding requests)
    struct seq **b_hid_seq;         // [max_pass_tokens] sequence of each kept hidden state
    struct seq **b_embed_done;      // [max_pass_tokens] embedding sequences whose prompt this pass completes
    int n_hid, n_embed_done;
    struct ci_attn_seq *b_seqs; // [max_rows + 1]
    struct seq **b_owner;       // [max_rows + 1] sequence of each b_seqs entry (NULL: pad)
    struct seq **b_row_seq;     // [max_rows] sequence of each logits row

    const int32_t *eog; // [n_eog] the tokenizer's end-of-generation ids
    int n_eog;
    // Grammars: compiled once per text (any thread); the vocabulary trie is built on the engine thread at
    // the first sequence with a grammar; the mask and masked logits are the engine thread's scratch.
    struct gram_cache *gcache;
    struct gram_vocab *gvocab;
    uint32_t *gmask; // [(n_vocab + 31) / 32]
    uint32_t *fmask; // [(n_vocab + 31) / 32] the reasoning budget's forcing mask
    float *grow;     // [n_vocab]
    // The matchers' shared spaces, one per grammar in use or recently used (engine thread): the samples of a
    // request and later requests with the same grammar share stack nodes and cached masks.
    struct gram_slot {
        struct gram_ref *ref; // held while the slot is (NULL: free)
        struct gram_space *sp;
        int users; // sequences whose matcher lives in sp
        uint64_t used;
    } gslots[ENGINE_GRAM_SLOTS];
    uint64_t gslot_tick;
    uint64_t next_order;
    double linear_params; // per token, matmul weights of all layers
    double weight_bytes;

    engine_step_fn hook;
    void *hook_ctx;
    engine_propose_fn proposer; // tests
    void *proposer_ctx;
    bool debug_sched;        // CINFER_DEBUG contains "sched"
    int64_t step_grammar_ns; // this step's grammar time and masks (step_metrics)
    int step_grammar_masks;
    int step_draft_tokens; // positions the draft model computed this step (step_metrics)
    pthread_t thread;
    bool started;
    atomic_bool stop_thread;

    atomic_llong t_steps, t_finished, t_preempt, t_prompt, t_gen, t_pad, t_pq, t_ph;
    atomic_llong t_spec_draft, t_spec_acc, t_dec_steps, t_dec_emitted; // speculative decoding
    atomic_llong t_finish[ENGINE_FINISH_ERROR + 1];                    // finished samples by reason
    atomic_int live_running, live_waiting, live_blocks;
    struct histogram h_ttft, h_itl, h_e2e, h_queue;
};

struct engine_params engine_params_default(void) {
    struct engine_params p = {0};
    p.n_threads = 2;
    p.sched.policy = SCHED_POLICY_CONTINUOUS;
    p.sched.chunked_prefill = true;
    p.sched.max_batch_tokens = 512;
    p.sched.max_seqs = 64;
    p.block_size = 16;
    p.prefix_cache = true;
    p.queue_capacity = 1024;
    p.spec = ENGINE_SPEC_NONE;
    p.spec_k = 8;
    p.spec_k_min = 1;
    p.spec_ngram_n = 3;
    return p;
}

const char *engine_spec_name(enum engine_spec sp) {
    switch (sp) {
    case ENGINE_SPEC_NONE:
        return "none";
    case ENGINE_SPEC_NGRAM:
        return "ngram";
    case ENGINE_SPEC_DRAFT:
        return "draft";
    }
    return "unknown";
}

bool engine_spec_parse(const char *name, enum engine_spec *out) {
    for (int i = ENGINE_SPEC_NONE; i <= ENGINE_SPEC_DRAFT; i++)
        if (name && !strcmp(name, engine_spec_name((enum engine_spec)i))) {
            *out = (enum engine_spec)i;
            return true;
        }
    return false;
}

const char *engine_pooling_str(enum engine_pooling p) {
    switch (p) {
    case ENGINE_POOLING_NONE:
        return "none";
    case ENGINE_POOLING_MEAN:
        return "mean";
    case ENGINE_POOLING_CLS:
        return "cls";
    case ENGINE_POOLING_LAST:
        return "last";
    }
    return "unknown";
}

const char *engine_finish_str(enum engine_finish f) {
    switch (f) {
    case ENGINE_FINISH_NONE:
        return "none";
    case ENGINE_FINISH_STOP:
        return "stop";
    case ENGINE_FINISH_LENGTH:
        return "length";
    case ENGINE_FINISH_CANCELLED:
        return "cancelled";
    case ENGINE_FINISH_ERROR:
        return "error";
    }
    return "unknown";
}

/* ---- requests ------------------------------------------------------------------------------------------ */

static void request_free(struct engine_request *r) {
    if (!r)
        return;
    for (int i = 0; r->metrics && i < r->n; i++) {
        ci_free(r->metrics[i].t_token_ns);
        ci_free(r->metrics[i].logprob);
        ci_free(r->metrics[i].top_ids);
        ci_free(r->metrics[i].top_logprob);
    }
    ci_free(r->bias);
    ci_free(r->embedding);
    gram_ref_release(r->grammar);
    gram_ref_release(r->think_force);
    ci_free(r->think_start);
    ci_free(r->think_end);
    for (int i = 0; r->stop && i < r->n_stop; i++)
        ci_free(r->stop[i]);
    ci_free(r->stop);
    ci_free(r->metrics);
    ci_free(r->ch);
    ci_free(r->prompt);
    ci_free(r);
}

static void request_unref(struct engine_request *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        request_free(r);
}

struct ci_channel *engine_request_channel(struct engine_request *r, int sample) {
    CI_ASSERT(sample >= 0 && sample < r->n);
    return r->ch[sample];
}

const struct request_metrics *engine_request_metrics(const struct engine_request *r, int sample) {
    CI_ASSERT(sample >= 0 && sample < r->n);
    return &r->metrics[sample];
}

int engine_request_n(const struct engine_request *r) {
    return r->n;
}

const float *engine_request_embedding(const struct engine_request *r, int *n) {
    *n = r->embedding_done ? r->e->m->config.n_embd : 0;
    return r->embedding_done ? r->embedding : NULL;
}

void engine_request_cancel(struct engine_request *r) {
    for (int i = 0; i < r->n; i++)
        ci_channel_cancel(r->ch[i]);
}

void engine_request_release(struct engine_request *r) {
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        ci_channel_release(r->ch[i], CI_CHANNEL_CONSUMER); // also cancels an unfinished stream
    request_unref(r);
}

static int64_t blocks_for(const struct engine *e, int64_t n_tokens) {
    return (n_tokens + e->block_size - 1) / e->block_size;
}

/* The reasoning budget's markers copied, and the end marker's text compiled as a one-string grammar (GBNF
 * literal), which is what forcing it means: each token drawn among those that spell it next. */
static enum ci_status think_prepare(struct engine *e, struct engine_request *r,
                                    const struct engine_request_params *p, struct ci_err *err) {
    char g[16 + 4 * THINK_MARKER_MAX];
    size_t n = (size_t)snprintf(g, sizeof g, "root ::= \"");
    for (const unsigned char *c = (const unsigned char *)p->think_end; *c; c++) {
        if (*c == '"' || *c == '\\')
            n += (size_t)snprintf(g + n, sizeof g - n, "\\%c", *c);
        else if (*c < 0x20)
            n += (size_t)snprintf(g + n, sizeof g - n, "\\x%02X", *c);
        else
            g[n++] = (char)*c;
    }
    n += (size_t)snprintf(g + n, sizeof g - n, "\"\n");
    r->think_budget = p->think_budget;
    r->think_open = p->think_open;
    if (!(r->think_end = ci_strdup(p->think_end)) ||
        (p->think_start && p->think_start[0] && !(r->think_start = ci_strdup(p->think_start))))
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    return gram_cache_get(e->gcache, GRAM_FRONT_GBNF, g, n, &r->think_force, err);
}

enum ci_status engine_submit(struct engine *e, const struct engine_request_params *p,
                             struct engine_request **out, struct ci_err *err) {
    *out = NULL;
    const struct model_config *c = &e->m->config;
    if (atomic_load(&e->failed))
        return ci_err_set(err, CI_ERR_IO, "%s", e->failure);
    if (p->n_prompt < 1)
        return ci_err_set(err, CI_ERR_INVALID, "the prompt must hold at least one token");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= c->n_vocab)
            return ci_err_set(err, CI_ERR_INVALID, "prompt token %d: id %d outside the vocabulary [0, %d)", i,
                              p->prompt[i], c->n_vocab);
    bool embed = p->pooling != ENGINE_POOLING_NONE;
    if (embed && (p->pooling < ENGINE_POOLING_MEAN || p->pooling > ENGINE_POOLING_LAST))
        return ci_err_set(err, CI_ERR_INVALID, "unknown pooling %d", (int)p->pooling);
    if (embed && (p->max_tokens != 0 || p->n != 1 || p->n_stop || p->logprobs >= 0 || p->grammar))
        return ci_err_set(err, CI_ERR_INVALID,
                          "an embedding request generates nothing: max_tokens 0, n 1, no stop strings, "
                          "logprobs or grammar");
    if (!embed && c->encoder)
        return ci_err_set(err, CI_ERR_INVALID,
                          "this model is an embedding model (%s, an encoder): it computes embeddings "
                          "(/v1/embeddings), not completions",
                          model_arch_name(c->arch));
    if (embed && c->encoder && p->n_prompt > e->max_pass_tokens)
        return ci_err_set(err, CI_ERR_LIMIT,
                          "an encoder computes its input in one pass: %d tokens exceed the %d-token batch "
                          "(--max-batch-tokens)",
                          p->n_prompt, e->max_pass_tokens);
    if (!embed && p->max_tokens < 1)
        return ci_err_set(err, CI_ERR_INVALID, "max_tokens must be at least 1");
    if (p->n < 1 || p->n > MAX_SAMPLES)
        return ci_err_set(err, CI_ERR_INVALID, "n must be in [1, %d]", MAX_SAMPLES);
    if ((p->n_stop > 0 || p->want_text) && !e->tok)
        return ci_err_set(err, CI_ERR_INVALID, "text and stop strings need a tokenizer");
    if (p->grammar && !e->tok)
        return ci_err_set(err, CI_ERR_INVALID, "a grammar needs the model's tokenizer");
    if (p->think_end && (!e->tok || !p->want_text || p->think_budget < 0 || !p->think_end[0] ||
                         strlen(p->think_end) > THINK_MARKER_MAX ||
                         (p->think_start && strlen(p->think_start) > THINK_MARKER_MAX)))
        return ci_err_set(
            err, CI_ERR_INVALID,
            "a reasoning budget needs the tokenizer, text, a budget >= 0 and markers of 1 to %d "
            "bytes",
            THINK_MARKER_MAX);
    enum ci_status s = sampling_params_validate(&p->sampling, c->n_vocab, err);
    if (s != CI_OK)
        return s;
    int64_t total = (int64_t)p->n_prompt + p->max_tokens;
    if (total > e->n_ctx)
        return ci_err_set(
            err, CI_ERR_LIMIT,
            "this model's context is %d tokens, but the prompt (%d tokens) plus max_tokens (%d) "
            "needs %lld",
            e->n_ctx, p->n_prompt, p->max_tokens, (long long)total);
    if (blocks_for(e, total) > kv_pool_n_blocks(e->pool) - e->pad.n)
        return ci_err_set(err, CI_ERR_LIMIT,
                          "the prompt (%d tokens) plus max_tokens (%d) needs %lld KV blocks, the pool has %d",
                          p->n_prompt, p->max_tokens, (long long)blocks_for(e, total),
                          kv_pool_n_blocks(e->pool));
    if (p->logprobs > ENGINE_MAX_LOGPROBS)
        return ci_err_set(err, CI_ERR_INVALID, "logprobs must be at most %d", ENGINE_MAX_LOGPROBS);
    if (p->n > e->p.sched.max_seqs)
        return ci_err_set(err, CI_ERR_LIMIT, "n = %d exceeds the %d sequences the engine runs at once", p->n,
                          e->p.sched.max_seqs);

    struct engine_request *r = ci_calloc(1, sizeof *r);
    if (!r)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    atomic_init(&r->refs, 2);
    r->e = e;
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->n = p->n;
    r->sampling = p->sampling;
    r->sampling.logit_bias = NULL;
    r->sampling.n_logit_bias = 0;
    r->ignore_eos = p->ignore_eos;
    r->logprobs = p->logprobs < 0 ? -1 : p->logprobs;
    r->spec_k = e->p.spec == ENGINE_SPEC_NONE || p->spec_k < 0 ? 0
                : p->spec_k > 0 && p->spec_k < e->p.spec_k     ? p->spec_k
                                                               : e->p.spec_k;
    r->want_text = p->want_text && !embed;
    r->render_special = p->render_special;
    r->pooling = p->pooling;
    if (embed && !(r->embedding = ci_calloc((size_t)c->n_embd, sizeof *r->embedding)))
        goto nomem;
    r->prompt = ci_malloc((size_t)p->n_prompt * sizeof *r->prompt);
    r->ch = ci_calloc((size_t)p->n, sizeof *r->ch);
    r->metrics = ci_calloc((size_t)p->n, sizeof *r->metrics);
    r->stop = p->n_stop ? ci_calloc((size_t)p->n_stop, sizeof *r->stop) : NULL;
    if (!r->prompt || !r->ch || !r->metrics || (p->n_stop && !r->stop))
        goto nomem;
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    if (p->sampling.n_logit_bias > 0) { // the caller's array may be gone by the time the engine reads it
        r->bias = ci_malloc((size_t)p->sampling.n_logit_bias * sizeof *r->bias);
        if (!r->bias)
            goto nomem;
        memcpy(r->bias, p->sampling.logit_bias, (size_t)p->sampling.n_logit_bias * sizeof *r->bias);
        r->sampling.logit_bias = r->bias;
        r->sampling.n_logit_bias = p->sampling.n_logit_bias;
    }
    for (int i = 0; i < p->n_stop; i++, r->n_stop++)
        if (!(r->stop[i] = ci_strdup(p->stop[i])))
            goto nomem;
    if (p->grammar && (s = gram_cache_get(e->gcache, (enum gram_front)p->grammar_front, p->grammar,
                                          p->grammar_len, &r->grammar, err)) != CI_OK)
        goto fail;
    if (p->think_end && (s = think_prepare(e, r, p, err)) != CI_OK)
        goto fail;
    int64_t now = p->t_arrival_ns > 0 ? p->t_arrival_ns : ci_now_ns();
    for (int i = 0; i < p->n; i++) {
        // Room for every token and its text pieces, so the engine never finds a channel full.
        if ((s = ci_channel_create(2 * p->max_tokens + 16, &r->ch[i], err)) != CI_OK)
            goto fail;
        struct request_metrics *mt = &r->metrics[i];
        mt->t_token_ns = ci_calloc((size_t)(p->max_tokens ? p->max_tokens : 1), sizeof(int64_t));
        if (!mt->t_token_ns)
            goto nomem;
        if (r->logprobs >= 0) {
            size_t top = (size_t)p->max_tokens * (size_t)(r->logprobs ? r->logprobs : 1);
            mt->logprob = ci_calloc((size_t)p->max_tokens, sizeof(float));
            mt->top_ids = ci_calloc(top, sizeof(int32_t));
            mt->top_logprob = ci_calloc(top, sizeof(float));
            if (!mt->logprob || !mt->top_ids || !mt->top_logprob)
                goto nomem;
        }
        r->metrics[i].t_arrival_ns = now;
        r->metrics[i].n_prompt = p->n_prompt;
    }
    if ((s = ci_queue_push(e->queue, r)) != CI_OK) {
        s = ci_err_set(err, s == CI_ERR_BUSY ? CI_ERR_BUSY : CI_ERR_CANCELLED,
                       s == CI_ERR_BUSY ? "the engine's queue is full" : "the engine is shutting down");
        goto fail;
    }
    *out = r;
    return CI_OK;
nomem:
    s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
fail:
    for (int i = 0; r->ch && i < r->n; i++) // r->ch is NULL when its allocation failed
        if (r->ch[i]) {
            ci_channel_release(r->ch[i], CI_CHANNEL_PRODUCER);
            ci_channel_release(r->ch[i], CI_CHANNEL_CONSUMER);
        }
    request_free(r);
    return s;
}

enum ci_status engine_check_grammar(struct engine *e, int front, const char *text, size_t len,
                                    struct ci_err *err) {
    if (!e->tok)
        return ci_err_set(err, CI_ERR_INVALID, "a grammar needs the model's tokenizer");
    struct gram_ref *r = NULL;
    enum ci_status s = gram_cache_get(e->gcache, (enum gram_front)front, text, len, &r, err);
    gram_ref_release(r);
    return s;
}

/* ---- sequences ----------------------------------------------------------------------------------------- */

static void seq_destroy(struct eseq *q) {
    if (q->has_detok)
        detok_deinit(&q->detok);
    if (q->has_stop)
        stop_matcher_deinit(&q->stop);
    sampler_free(q->s.sampler);
    gram_matcher_free(q->gm);
    gram_matcher_free(q->fm);
    if (q->gm && q->gslot >= 0)
        q->s.req->e->gslots[q->gslot].users--;
    kv_seq_deinit(&q->s.blocks);
    if (q->dblocks.ids) {
        kv_seq_release(q->s.req->e->dpool, &q->dblocks);
        kv_seq_deinit(&q->dblocks);
    }
    ci_free(q->s.tokens);
    ci_free(q);
}

/* A GBNF `<text>` token reference (gram_tokens).  Any thread: the tokenizer is read only. */
static int32_t token_by_text(const void *ctx, const char *text, size_t len) {
    return tokenizer_single_token(ctx, text, len);
}

/* The vocabulary as the grammar matcher sees it: each token's decoded bytes (control tokens have none and
 * are never allowed), end-of-generation tokens allowed in accepting states.  Engine thread, once. */
static enum ci_status build_gram_vocab(struct engine *e, struct ci_err *err) {
    int n = e->m->config.n_vocab, nt = tokenizer_n_vocab(e->tok);
    const char **ptrs = ci_calloc((size_t)n, sizeof *ptrs);
    uint32_t *lens = ci_calloc((size_t)n, sizeof *lens);
    size_t words = ((size_t)n + 31) / 32;
    if (!e->gmask)
        e->gmask = ci_calloc(words, sizeof *e->gmask);
    if (!e->fmask)
        e->fmask = ci_calloc(words, sizeof *e->fmask);
    if (!e->grow)
        e->grow = ci_calloc((size_t)n, sizeof *e->grow);
    enum ci_status s;
    if (!ptrs || !lens || !e->gmask || !e->fmask || !e->grow) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    } else {
        for (int i = 0; i < n && i < nt; i++) {
            size_t l = 0;
            ptrs[i] = tokenizer_token_bytes(e->tok, i, false, &l);
            lens[i] = (uint32_t)l;
        }
        s = gram_vocab_create(n, ptrs, lens, e->eog, e->n_eog, &e->gvocab, err);
    }
    ci_free(ptrs);
    ci_free(lens);
    return s;
}

/* q's matcher, in the shared space of its grammar (a slot found or made free), or in one of its own when
 * every slot serves live sequences of other grammars. */
static enum ci_status matcher_for(struct engine *e, struct gram_ref *ref, struct eseq *q,
                                  struct ci_err *err) {
    int k = -1;
    for (int i = 0; i < ENGINE_GRAM_SLOTS && k < 0; i++)
        if (e->gslots[i].ref == ref)
            k = i;
    if (k < 0) { // a free slot, else the least recently used one that no sequence uses
        for (int i = 0; i < ENGINE_GRAM_SLOTS; i++)
            if (e->gslots[i].users == 0 &&
                (k < 0 || !e->gslots[i].ref || (e->gslots[k].ref && e->gslots[i].used < e->gslots[k].used)))
                k = i;
        if (k >= 0) {
            struct gram_slot *sl = &e->gslots[k];
            gram_space_free(sl->sp);
            gram_ref_release(sl->ref);
            *sl = (struct gram_slot){0};
            enum ci_status s = gram_space_create(gram_ref_grammar(ref), e->gvocab, &sl->sp, err);
            if (s != CI_OK)
                return s;
            sl->ref = gram_ref_retain(ref);
        }
    }
    q->gslot = k;
    if (k < 0)
        return gram_matcher_create(gram_ref_grammar(ref), e->gvocab, &q->gm, err);
    enum ci_status s = gram_matcher_create_in(e->gslots[k].sp, &q->gm, err);
    if (s == CI_OK) {
        e->gslots[k].users++;
        e->gslots[k].used = ++e->gslot_tick;
    }
    return s;
}

/* The reasoning budget is spent: q's next tokens spell the end marker. */
static enum ci_status think_force(struct engine *e, struct eseq *q, struct ci_err *err) {
    q->think.state = THINK_FORCING;
    return gram_matcher_create(gram_ref_grammar(q->s.req->think_force), e->gvocab, &q->fm, err);
}

static enum ci_status seq_create(struct engine *e, struct engine_request *r, int sample, struct eseq **out,
                                 struct ci_err *err) {
    struct eseq *q = ci_calloc(1, sizeof *q);
    if (!q)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    struct seq *s = &q->s;
    s->req = r;
    s->sample = sample;
    s->order = r->order;
    s->state = SEQ_STATE_WAITING;
    s->n_prompt = s->n_tokens = r->n_prompt;
    s->cap = r->n_prompt + r->max_tokens;
    s->no_prefix_match = r->pooling == ENGINE_POOLING_MEAN || r->pooling == ENGINE_POOLING_CLS ||
                         r->e->m->config.encoder; // bidirectional: a prefix's states depend on what follows
    s->spec_k = r->spec_k > 0 ? (r->spec_k + 1) / 2 : 0; // adapts from half the longest proposal
    s->spec_misses = s->spec_pause = 0;
    if (s->spec_k > 0 && s->spec_k < e->p.spec_k_min)
        s->spec_k = r->spec_k < e->p.spec_k_min ? r->spec_k : e->p.spec_k_min;
    enum ci_status st = CI_OK;
    struct sampling_params sp = r->sampling;
    sp.seed = r->sampling.seed + (uint64_t)sample;
    if (!(s->tokens = ci_malloc((size_t)s->cap * sizeof *s->tokens))) {
        st = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    if (e->dpool && (st = kv_seq_init(&q->dblocks, (int)blocks_for(e, s->cap), err)))
        goto fail;
    if ((st = kv_seq_init(&s->blocks, (int)blocks_for(e, s->cap), err)) ||
        (st = sampler_create(&sp, e->m->config.n_vocab, &s->sampler, err)))
        goto fail;
    if (r->want_text || r->n_stop) {
        int32_t last = r->prompt[r->n_prompt - 1];
        bool at_start = r->n_prompt == 1 && last == tokenizer_bos(e->tok);
        if ((st = detok_init(&q->detok, e->tok, at_start, r->render_special, err)))
            goto fail;
        q->has_detok = true;
        if ((st = stop_matcher_init(&q->stop, (const char *const *)r->stop, r->n_stop,
                                    detok_max_out(&q->detok), err)))
            goto fail;
        q->has_stop = true;
    }
    if (r->grammar || r->think_force) {
        if (!e->gvocab && (st = build_gram_vocab(e, err)) != CI_OK)
            goto fail;
        if (r->grammar && (st = matcher_for(e, r->grammar, q, err)) != CI_OK)
            goto fail;
    }
    if (r->think_force) {
        think_init(&q->think, r->think_open);
        if (q->think.state == THINK_INSIDE && r->think_budget <= 0 && (st = think_force(e, q, err)) != CI_OK)
            goto fail;
    }
    *out = q;
    return CI_OK;
fail:
    seq_destroy(q);
    return st;
}

static void send_or_fail(struct engine *e, struct eseq *q, enum ci_event_kind kind, int32_t tok,
                         float logprob, int64_t t, const char *text, size_t n, enum engine_finish *finish);

/* Ends a sequence: releases its blocks, closes its stream, drops the engine's hold on the request when it was
 * the last sample. */
static void seq_finish(struct engine *e, struct eseq *q, enum engine_finish why, enum ci_status status,
                       const char *msg) {
    struct seq *s = &q->s;
    struct engine_request *r = s->req;
    struct request_metrics *mt = &r->metrics[s->sample];
    if (why == ENGINE_FINISH_LENGTH && q->has_detok) { // release text held back at the end
        const char *text, *rest;
        size_t n, n_rest;
        detok_flush(&q->detok, &text, &n);
        enum engine_finish dummy = ENGINE_FINISH_NONE;
        const char *out;
        size_t n_out;
        int stop = -1;
        if (n && stop_matcher_feed(&q->stop, text, n, &out, &n_out, &stop) == CI_OK && n_out)
            send_or_fail(e, q, CI_EVENT_TEXT, -1, 0.0f, ci_now_ns(), out, n_out, &dummy);
        stop_matcher_flush(&q->stop, &rest, &n_rest);
        if (n_rest && stop < 0)
            send_or_fail(e, q, CI_EVENT_TEXT, -1, 0.0f, ci_now_ns(), rest, n_rest, &dummy);
    }
    sched_retire(&e->st, s);
    kv_seq_release(e->pool, &s->blocks);
    s->state = SEQ_STATE_FINISHED;
    mt->finish = why;
    mt->t_finish_ns = ci_now_ns();
    mt->n_preempted = s->n_preempted;
    atomic_fetch_add(&e->t_finished, 1);
    atomic_fetch_add(&e->t_finish[why], 1);
    if (mt->n_output > 0)
        histogram_observe_ns(&e->h_ttft, mt->t_first_token_ns - mt->t_arrival_ns);
    if (mt->t_scheduled_ns)
        histogram_observe_ns(&e->h_queue, mt->t_scheduled_ns - mt->t_arrival_ns);
    histogram_observe_ns(&e->h_e2e, mt->t_finish_ns - mt->t_arrival_ns);
    ci_channel_close(r->ch[s->sample], why, status, msg);
    ci_channel_release(r->ch[s->sample], CI_CHANNEL_PRODUCER);
    seq_destroy(q);
    if (--r->n_live == 0)
        request_unref(r);
}

static void send_or_fail(struct engine *e, struct eseq *q, enum ci_event_kind kind, int32_t tok,
                         float logprob, int64_t t, const char *text, size_t n, enum engine_finish *finish) {
    (void)e;
    enum ci_status s = ci_channel_send(q->s.req->ch[q->s.sample], kind, tok, logprob, t, text, n);
    if (s == CI_ERR_CANCELLED)
        *finish = ENGINE_FINISH_CANCELLED;
    else if (s != CI_OK)
        *finish = ENGINE_FINISH_ERROR; // cannot happen with the channel sized for max_tokens
}

static bool is_eog(const struct engine *e, int32_t tok) {
    for (int i = 0; i < e->n_eog; i++)
        if (e->eog[i] == tok)
            return true;
    return false;
}

/* Appends a sampled token, streams it, and returns why the sequence ends (NONE: it goes on). */
static enum engine_finish seq_emit(struct engine *e, struct eseq *q, int32_t tok, float logprob) {
    struct seq *s = &q->s;
    struct engine_request *r = s->req;
    struct request_metrics *mt = &r->metrics[s->sample];
    int64_t now = ci_now_ns();
    if (tok < 0) // the grammar allows no token (sample_token)
        return ENGINE_FINISH_STOP;
    CI_ASSERT(s->n_tokens < s->cap);
    s->tokens[s->n_tokens++] = tok;
    int n_out = seq_n_output(s);
    mt->t_token_ns[n_out - 1] = now;
    mt->n_output = n_out;
    if (n_out == 1)
        mt->t_first_token_ns = now;
    else
        histogram_observe_ns(&e->h_itl, now - mt->t_token_ns[n_out - 2]);
    atomic_fetch_add(&e->t_gen, 1);
    enum engine_finish finish = ENGINE_FINISH_NONE;
    if (!r->ignore_eos && is_eog(e, tok))
        return ENGINE_FINISH_STOP; // the end-of-generation token is not streamed as text
    const char *out = "";
    size_t n = 0;
    int stop = -1;
    if (q->has_detok) {
        const char *text;
        size_t n_text;
        detok_push(&q->detok, tok, &text, &n_text);
        if (r->think_force &&
            think_push(&q->think, r->think_start, r->think_end, r->think_budget, text, n_text) &&
            think_force(e, q, &(struct ci_err){0}) != CI_OK)
            return ENGINE_FINISH_ERROR;
        if (q->fm && (q->think.state == THINK_DONE || gram_matcher_is_done(q->fm))) { // the marker is written
            q->think.state = THINK_DONE;
            gram_matcher_free(q->fm);
            q->fm = NULL;
        }
        if (stop_matcher_feed(&q->stop, text, n_text, &out, &n, &stop) != CI_OK)
            return ENGINE_FINISH_ERROR;
    }
    send_or_fail(e, q, CI_EVENT_TOKEN, tok, logprob, now, out, n, &finish);
    if (finish != ENGINE_FINISH_NONE)
        return finish;
    if (stop >= 0)
        return ENGINE_FINISH_STOP;
    if (q->gm && gram_matcher_is_done(q->gm))
        return ENGINE_FINISH_STOP; // the grammar is complete and nothing can follow
    if (n_out >= r->max_tokens)
        return ENGINE_FINISH_LENGTH;
    return ENGINE_FINISH_NONE;
}

/* ---- a step -------------------------------------------------------------------------------------------- */

static void drain_queue(struct engine *e) {
    void *items[64];
    int n;
    while (ci_queue_pop_all(e->queue, items, 64, &n) == CI_OK && n > 0) {
        for (int i = 0; i < n; i++) {
            struct engine_request *r = items[i];
            r->order = e->next_order++;
            struct ci_err err = {0};
            enum ci_status s = CI_OK;
            int made = 0;
            struct eseq *qs[MAX_SAMPLES];
            if (e->st.n_running + e->st.n_waiting + r->n > e->cap)
                s = ci_err_set(&err, CI_ERR_BUSY, "the engine tracks %d sequences at most", e->cap);
            while (s == CI_OK && made < r->n) // qs[made] exists only when its seq_create succeeded
                if ((s = seq_create(e, r, made, &qs[made], &err)) == CI_OK)
                    made++;
            if (s != CI_OK) {
                for (int j = 0; j < made; j++)
                    seq_destroy(qs[j]);
                for (int j = 0; j < r->n; j++) {
                    r->metrics[j].finish = ENGINE_FINISH_ERROR;
                    ci_channel_close(r->ch[j], ENGINE_FINISH_ERROR, s, err.msg);
                    ci_channel_release(r->ch[j], CI_CHANNEL_PRODUCER);
                }
                request_unref(r);
                continue;
            }
            r->n_live = r->n;
            atomic_fetch_add(&e->t_prompt, r->n_prompt);
            for (int j = 0; j < r->n; j++)
                e->st.waiting[e->st.n_waiting++] = &qs[j]->s; // orders only grow: FIFO append keeps the order
        }
    }
}

static void handle_cancellations(struct engine *e) {
    for (int pass = 0; pass < 2; pass++) {
        struct seq **arr = pass ? e->st.waiting : e->st.running;
        int *n = pass ? &e->st.n_waiting : &e->st.n_running;
        for (int i = 0; i < *n; i++) {
            struct seq *s = arr[i];
            if (ci_channel_cancelled(s->req->ch[s->sample])) {
                seq_finish(e, (struct eseq *)s, ENGINE_FINISH_CANCELLED, CI_OK, NULL);
                i--;
            }
        }
    }
}

/* Samples the next token of s from its logits row and, when the request asks, records the log-probabilities
 * (log-softmax of the raw logits) of the sampled token and of the most likely alternatives. */
static int32_t sample_token(struct engine *e, struct seq *s, const float *row, int32_t draft,
                            float *logprob) {
    int n_vocab = e->m->config.n_vocab;
    struct eseq *q = (struct eseq *)s;
    struct gram_matcher *gm = q->gm;
    *logprob = 0.0f;
    if (gm ||
        q->fm) { // the grammar's mask first: every sampler setting and the logprobs see only allowed tokens
        int64_t t0 = ci_now_ns();
        struct ci_err err = {0};
        if (gm && gram_matcher_mask(gm, e->gmask, &err) != CI_OK)
            return -1;
        const uint32_t *mask = gm ? e->gmask : NULL;
        if (q->fm) { // forcing the end of the reasoning: the tokens that spell it (and that the grammar allows)
            size_t words = ((size_t)n_vocab + 31) / 32;
            uint32_t any = 0;
            if (gram_matcher_mask(q->fm, e->fmask, &err) == CI_OK)
                for (size_t w = 0; w < words; w++)
                    any |= e->fmask[w] &= gm ? e->gmask[w] : ~0u;
            if (any) {
                mask = e->fmask;
            } else { // the grammar allows none of them: the grammar wins and the block is not forced
                gram_matcher_free(q->fm);
                q->fm = NULL;
                q->think.state = THINK_DONE;
            }
        }
        bool any = false;
        for (int i = 0; mask && i < n_vocab; i++) {
            bool ok = (mask[i >> 5] >> (i & 31)) & 1u;
            e->grow[i] = ok ? row[i] : -INFINITY;
            any |= ok;
        }
        e->step_grammar_ns += ci_now_ns() - t0;
        e->step_grammar_masks++;
        if (mask && !any)
            return -1; // no token of the vocabulary can continue the grammar
        if (mask)
            row = e->grow;
    }
    int32_t tok = draft >= 0 ? sampler_sample_draft(s->sampler, row, n_vocab, s->tokens, s->n_tokens, draft)
                             : sampler_sample(s->sampler, row, n_vocab, s->tokens, s->n_tokens);
    if (gm || q->fm) {
        int64_t t0 = ci_now_ns();
        bool ok =
            (!gm || gram_matcher_accept_token(gm, tok)) && (!q->fm || gram_matcher_accept_token(q->fm, tok));
        e->step_grammar_ns += ci_now_ns() - t0;
        if (!ok)
            return -1; // cannot happen: the sampler picks an allowed token (NaN logits aside)
    }
    struct engine_request *r = s->req;
    if (r->logprobs < 0)
        return tok;
    float max = row[0];
    for (int i = 1; i < n_vocab; i++)
        max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)row[i] - max);
    double lse = max + log(sum);
    struct request_metrics *mt = &r->metrics[s->sample];
    int k = seq_n_output(s), n_top = r->logprobs;
    *logprob = (float)(row[tok] - lse);
    mt->logprob[k] = *logprob;
    int32_t *ids = mt->top_ids + (size_t)k * (size_t)(n_top ? n_top : 1);
    float *lps = mt->top_logprob + (size_t)k * (size_t)(n_top ? n_top : 1);
    int have = 0;
    for (int32_t i = 0; i < n_vocab; i++) { // insertion into a sorted top-n list (n <= 20)
        if (have == n_top && (n_top == 0 || row[i] <= lps[have - 1] + lse))
            continue;
        int j = have < n_top ? have++ : have - 1;
        while (j > 0 && row[i] > lps[j - 1] + lse) {
            ids[j] = ids[j - 1];
            lps[j] = lps[j - 1];
            j--;
        }
        ids[j] = i;
        lps[j] = (float)(row[i] - lse);
    }
    for (int j = 0; (gm || q->fm) && j < have;
         j++) // tokens the grammar forbids (when fewer than n_top are allowed):
        lps[j] = lps[j] < -9999.0f ? -9999.0f : lps[j]; // OpenAI's floor rather than -inf (JSON has none)
    return tok;
}

/* Sample i > 0 of a request shares sample 0's prompt blocks once sample 0 has computed its prompt. */
static void fork_siblings(struct engine *e, struct seq *leader, const float *row) {
    for (int i = 0; i < e->st.n_running; i++) {
        struct seq *s = e->st.running[i];
        if (s->req != leader->req || s->state != SEQ_STATE_FORKING)
            continue;
        enum ci_status st = kv_seq_fork(e->pool, &s->blocks, &leader->blocks);
        CI_ASSERT(st == CI_OK); // tables are sized for the whole sequence
        s->n_computed = leader->n_computed;
        s->state = SEQ_STATE_RUNNING;
        s->req->metrics[s->sample].t_scheduled_ns = leader->req->metrics[leader->sample].t_scheduled_ns;
        float lp;
        int32_t tok = sample_token(e, s, row, -1, &lp);
        enum engine_finish f = seq_emit(e, (struct eseq *)s, tok, lp);
        if (f != ENGINE_FINISH_NONE) {
            seq_finish(e, (struct eseq *)s, f, f == ENGINE_FINISH_ERROR ? CI_ERR_INTERNAL : CI_OK, NULL);
            i--;
        }
    }
}

struct pass {
    int n_tokens, n_rows, n_seqs;
};

static int pass_seq_index(struct engine *e, struct pass *ps, struct seq *s) {
    for (int i = 0; i < ps->n_seqs; i++)
        if (e->b_owner[i] == s)
            return i;
    e->b_owner[ps->n_seqs] = s;
    e->b_seqs[ps->n_seqs].block_table = s ? s->blocks.ids : e->pad.ids;
    e->b_seqs[ps->n_seqs].n_blocks = s ? s->blocks.n : e->pad.n;
    return ps->n_seqs++;
}

/* Embedding requests: folds the pass's kept hidden states into their requests' vectors, then ends the
 * requests whose prompt the pass completed (mean pooling divides the sum by the prompt length there). */
static void pool_hidden(struct engine *e) {
    int n_hid, E = e->m->config.n_embd;
    const float *hid = forward_hidden(e->fwd, &n_hid);
    CI_ASSERT(n_hid == e->n_hid);
    for (int h = 0; h < n_hid; h++) {
        struct engine_request *r = e->b_hid_seq[h]->req;
        const float *row = hid + (size_t)h * E;
        if (r->pooling == ENGINE_POOLING_MEAN)
            for (int i = 0; i < E; i++)
                r->embedding[i] += row[i];
        else // CLS and LAST keep exactly one row
            memcpy(r->embedding, row, (size_t)E * sizeof *row);
    }
    for (int i = 0; i < e->n_embed_done; i++) {
        struct seq *q = e->b_embed_done[i];
        struct engine_request *r = q->req;
        if (r->pooling == ENGINE_POOLING_MEAN)
            for (int k = 0; k < E; k++)
                r->embedding[k] /= (float)q->n_tokens;
        r->embedding_done = true;
        seq_finish(e, (struct eseq *)q, ENGINE_FINISH_STOP, CI_OK, NULL);
    }
    e->n_hid = e->n_embed_done = 0;
}

/* Samples the rows of a decoding sequence that brought drafts: row j is the target's distribution after
 * the last token and drafts 0..j-1.  Each draft is verified in order (sampler_sample_draft) and emitted while
 * accepted; the first rejection emits the target's token instead, and with every draft accepted the last
 * row gives one more (the bonus).  Emission stops early where the sequence ends (EOS, a stop string,
 * max_tokens, the grammar).  Then the KV of the rejected positions is given up: n_computed = n_tokens - 1
 * (the last emitted token is computed next step), blocks past the tokens released. */
static void verify_drafts(struct engine *e, struct seq *q, const float *rows, struct step_metrics *sm) {
    int n_vocab = e->m->config.n_vocab, nd = q->n_draft, accepted = 0, emitted = 0;
    int32_t draft[SPEC_MAX_K];
    CI_ASSERT(nd <= SPEC_MAX_K);
    memcpy(draft, q->tokens + q->n_tokens, (size_t)nd * sizeof *draft);
    q->n_draft = 0;
    enum engine_finish f = ENGINE_FINISH_NONE;
    for (int j = 0; j <= nd; j++) {
        float lp;
        int32_t tok = sample_token(e, q, rows + (size_t)j * n_vocab, j < nd ? draft[j] : -1, &lp);
        bool ok = j < nd && tok == draft[j];
        accepted += ok;
        emitted += tok >= 0;
        if ((f = seq_emit(e, (struct eseq *)q, tok, lp)) != ENGINE_FINISH_NONE || !ok)
            break;
    }
    sm->n_draft_tokens += nd;
    sm->n_accepted_tokens += accepted;
    // The totals now, before seq_finish answers the request: /metrics read after a response counts its drafts.
    atomic_fetch_add(&e->t_spec_draft, nd);
    atomic_fetch_add(&e->t_spec_acc, accepted);
    sm->n_decode_seqs++;
    sm->n_decode_emitted += emitted;
    if (f != ENGINE_FINISH_NONE) {
        seq_finish(e, (struct eseq *)q, f, f == ENGINE_FINISH_ERROR ? CI_ERR_INTERNAL : CI_OK, NULL);
        return;
    }
    q->n_computed = q->n_tokens - 1;
    kv_seq_shrink(e->pool, &q->blocks, q->n_tokens);
    struct eseq *eq = (struct eseq *)q; // the draft's KV holds the accepted drafts, not what follows
    eq->d_computed = eq->d_computed < q->n_computed ? eq->d_computed : q->n_computed;
    q->spec_k =
        spec_adapt_k(q->spec_k, nd, accepted,
                     e->p.spec_k_min < q->req->spec_k ? e->p.spec_k_min : q->req->spec_k, q->req->spec_k);
    // Not for n-gram lookup: its proposals cost nothing to make, a miss only the rows verified (k
    // adapts those down to one), and its hits come in bursts (a repeat starts) that a pause would skip.
    if (e->dpool || e->proposer)
        q->spec_pause = spec_backoff(&q->spec_misses, nd, accepted);
}

/* Runs the pass built so far, then samples its rows.  Returns the number of sequences that finished. */
static enum ci_status run_pass(struct engine *e, struct pass *ps, struct step_metrics *sm,
                               struct ci_err *err) {
    if (ps->n_tokens == 0)
        return CI_OK;
    struct fwd_batch b = {.n_tokens = ps->n_tokens,
                          .token = e->b_tok,
                          .pos = e->b_pos,
                          .seq = e->b_seq,
                          .logits = e->b_want,
                          .hidden = e->b_hid,
                          .n_seqs = ps->n_seqs,
                          .seqs = e->b_seqs};
    const float *logits;
    int rows;
    enum ci_status s = forward_batch(e->fwd, &b, e->layers, &logits, &rows, err);
    if (s != CI_OK)
        return s; // CI_ERR_IO for a model file truncated while in use: engine_step then fails everything
    sm->n_passes++;
    CI_ASSERT(rows == ps->n_rows);
    int n_vocab = e->m->config.n_vocab;
    for (int r = 0; r < rows; r++) {
        struct seq *q = e->b_row_seq[r];
        const float *row = logits + (size_t)r * n_vocab;
        if (q->n_draft > 0) { // rows r .. r + n_draft: the last token's and each draft's
            int nd = q->n_draft;
            verify_drafts(e, q, row, sm);
            r += nd;
            continue;
        }
        bool first = q->n_tokens == q->n_prompt;
        bool decode = !first && q->n_computed == q->n_tokens;
        float lp;
        int32_t tok = sample_token(e, q, row, -1, &lp);
        if (decode) {
            sm->n_decode_seqs++;
            sm->n_decode_emitted += tok >= 0;
        }
        if (first && q->sample == 0 && q->req->n > 1)
            fork_siblings(e, q, row);
        enum engine_finish f = seq_emit(e, (struct eseq *)q, tok, lp);
        if (f != ENGINE_FINISH_NONE)
            seq_finish(e, (struct eseq *)q, f, f == ENGINE_FINISH_ERROR ? CI_ERR_INTERNAL : CI_OK, NULL);
    }
    pool_hidden(e);
    ps->n_tokens = ps->n_rows = ps->n_seqs = 0;
    return CI_OK;
}

static void estimate_cost(const struct engine *e, int32_t pos, struct step_metrics *sm) {
    const struct model_config *c = &e->m->config;
    double ctx = (double)pos + 1, kv_row = (double)e->kv_bytes_per_token; // in the pool's element type
    sm->flops += 2.0 * e->linear_params + 4.0 * c->n_layer * (double)c->n_head * c->head_dim * ctx;
    sm->bytes += kv_row * ctx + kv_row; // read the context's K/V, write this token's
}

static enum ci_status execute(struct engine *e, const struct sched_result *res, struct step_metrics *sm,
                              struct ci_err *err) {
    struct pass ps = {0};
    enum ci_status s = CI_OK;
    // Sampled rows are handled by run_pass, which may finish sequences; the plan's items stay valid until
    // then because a sequence samples only in the pass that holds its last planned token.
    for (int i = 0; i < res->n_items; i++) {
        struct seq *q = res->items[i];
        int from = q->sched_from, left = q->sched_count;
        struct request_metrics *mt = &q->req->metrics[q->sample];
        if (mt->t_scheduled_ns == 0)
            mt->t_scheduled_ns = ci_now_ns();
        if (q->n_cached > mt->n_cached)
            mt->n_cached = q->n_cached;
        int end = q->n_tokens + q->n_draft, tail = 1 + q->n_draft; // the rows sampled share one pass
        // An encoder's input goes whole into one pass (engine_submit bounded it by the pass).
        bool whole = e->m->config.encoder && ps.n_tokens > 0 && left > e->max_pass_tokens - ps.n_tokens;
        while (left > 0) {
            if (whole || ps.n_tokens == e->max_pass_tokens || ps.n_seqs == e->max_rows + 1 ||
                ps.n_rows == e->max_rows) {
                whole = false;
                if ((s = run_pass(e, &ps, sm, err)) != CI_OK)
                    return s;
            }
            int room = e->max_pass_tokens - ps.n_tokens, take = left < room ? left : room;
            if (q->n_draft > 0 && take < left && left - take < tail)
                take = left - tail; // leave the sampled tail whole for the next pass
            if (q->n_draft > 0 && (take <= 0 || (take == left && ps.n_rows + tail > e->max_rows))) {
                if ((s = run_pass(e, &ps, sm, err)) != CI_OK) // (proposals fit an empty pass)
                    return s;
                continue;
            }
            int si = pass_seq_index(e, &ps, q);
            enum engine_pooling pool = q->req->pooling;
            if (pool == ENGINE_POOLING_MEAN && from == 0) // a recompute after preemption starts the sum over
                memset(q->req->embedding, 0, (size_t)e->m->config.n_embd * sizeof *q->req->embedding);
            for (int k = 0; k < take; k++) {
                int t = ps.n_tokens++, pos = from + k;
                e->b_tok[t] = q->tokens[pos];
                e->b_pos[t] = pos;
                e->b_seq[t] = si;
                e->b_want[t] = 0;
                e->b_hid[t] = pool == ENGINE_POOLING_MEAN || (pool == ENGINE_POOLING_CLS && pos == 0) ||
                              (pool == ENGINE_POOLING_LAST && pos == q->n_tokens - 1);
                if (e->b_hid[t])
                    e->b_hid_seq[e->n_hid++] = q;
                estimate_cost(e, pos, sm);
            }
            from += take;
            left -= take;
            q->n_computed = from;
            if (left == 0 && from == q->n_tokens && pool != ENGINE_POOLING_NONE) {
                e->b_embed_done[e->n_embed_done++] = q; // nothing to sample: ends after the pass
            } else if (left == 0 && from == end) {
                for (int j = tail; j >= 1; j--) {
                    e->b_want[ps.n_tokens - j] = 1;
                    e->b_row_seq[ps.n_rows++] = q;
                    sm->flops += 2.0 * e->m->config.n_embd * e->m->config.n_vocab;
                }
            }
        }
        // Only real tokens are registered (drafts may be rejected and their positions rewritten).
        if (e->pc && q->state == SEQ_STATE_RUNNING)
            prefix_cache_insert(e->pc, q->tokens, q->n_computed < q->n_tokens ? q->n_computed : q->n_tokens,
                                &q->blocks);
    }
    // Static batching's padding: real tokens through the model whose results are thrown away.
    for (int i = 0; i < res->n_pad_tokens; i++) {
        if (ps.n_tokens == e->max_pass_tokens || ps.n_seqs == e->max_rows + 1)
            if ((s = run_pass(e, &ps, sm, err)) != CI_OK)
                return s;
        int t = ps.n_tokens++;
        e->b_tok[t] = 0;
        e->b_pos[t] = 0;
        e->b_seq[t] = pass_seq_index(e, &ps, NULL);
        e->b_want[t] = 0;
        e->b_hid[t] = 0;
        estimate_cost(e, 0, sm);
    }
    if ((s = run_pass(e, &ps, sm, err)) != CI_OK)
        return s;
    sm->bytes += e->weight_bytes * sm->n_passes;
    return CI_OK;
}

/* Sliding window on every layer: a running sequence's next query is at n_computed or later and sees keys
 * after n_computed - window, so a block whose last position is at most n_computed - window is read by no
 * one any more.  It goes back to the pool (parked by the prefix cache if that wants it) and its table entry
 * becomes a hole. */
static void drop_out_of_window(struct engine *e) {
    if (e->kv_window <= 0)
        return;
    for (int i = 0; i < e->st.n_running; i++) {
        struct seq *s = e->st.running[i];
        if (s->state != SEQ_STATE_RUNNING)
            continue;
        int64_t dead = ((int64_t)s->n_computed - e->kv_window + 1) / e->block_size;
        if (dead > s->blocks.n)
            dead = s->blocks.n;
        if (dead > 0)
            kv_seq_drop_front(e->pool, &s->blocks, (int)dead);
    }
}

static void kv_usage(struct engine *e, struct step_metrics *sm) {
    sm->kv_blocks_used = kv_pool_n_blocks(e->pool) - kv_pool_n_available(e->pool) - e->pad.n;
    for (int i = 0; i < e->st.n_running; i++) {
        const struct seq *s = e->st.running[i];
        int64_t holes = s->blocks.n - kv_seq_n_live(&s->blocks);
        sm->kv_slots_used += s->n_computed - holes * e->block_size;
        sm->kv_slots_allocated += (int64_t)(s->blocks.n - holes) * e->block_size;
    }
}

static void check_invariants(struct engine *e) {
    sched_check(&e->st);
    const struct kv_seq_blocks **live = e->live_tables; // every running sequence, and the pad block
    int n = 0;
    for (int i = 0; i < e->st.n_running; i++)
        live[n++] = &e->st.running[i]->blocks;
    if (e->pad.n)
        live[n++] = &e->pad;
    kv_pool_check(e->pool, live, n, NULL);
    if (e->dpool) { // the draft's tables: running and waiting sequences hold blocks there
        n = 0;
        for (int i = 0; i < e->st.n_running; i++)
            live[n++] = &((struct eseq *)e->st.running[i])->dblocks;
        for (int i = 0; i < e->st.n_waiting && n < e->cap + 1; i++)
            live[n++] = &((struct eseq *)e->st.waiting[i])->dblocks;
        kv_pool_check(e->dpool, live, n, NULL);
    }
    if (e->pc)
        prefix_cache_check(e->pc);
}

/* CINFER_DEBUG=sched: one line per step, so the prefill/decode asymmetry is visible live. */
static void log_step(const struct engine *e, const struct step_metrics *m) {
    double s = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
    int64_t waste = m->kv_slots_allocated - m->kv_slots_used;
    fprintf(stderr,
            "step %lld: %.2f ms, %d tokens (%d prefill, %d decode, %d pad) in %d pass(es), %d running, %d "
            "waiting, KV %d blocks (%lld slots unused), %d preempted, %d prefix-hit tokens, %.2f GFLOP/s, "
            "%.2f GB/s, %.1f FLOP/byte, grammar %.3f ms (%d masks)\n",
            (long long)atomic_load(&e->t_steps), s * 1e3, m->n_tokens, m->n_prefill_tokens,
            m->n_decode_tokens, m->n_pad_tokens, m->n_passes, m->n_running, m->n_waiting, m->kv_blocks_used,
            (long long)waste, m->n_preempted, m->n_prefix_hit_tokens, s > 0 ? m->flops / s / 1e9 : 0,
            s > 0 ? m->bytes / s / 1e9 : 0, m->bytes > 0 ? m->flops / m->bytes : 0,
            (double)m->grammar_ns / 1e6, m->n_grammar_masks);
}

/* Speculative decoding: proposals for the decoding sequences (their drafts go to tokens[n_tokens..]).  A
 * proposal leaves room for every token it may emit (1 + k within max_tokens) and fits one forward pass. */
/* The draft model's pass over the tokens gathered in b_*: each row's argmax becomes its sequence's next
 * draft.  On an error (a position past the draft model's tables) the pass's sequences get no drafts. */
static void draft_pass(struct engine *e, struct pass *ps) {
    if (ps->n_tokens == 0)
        return;
    struct fwd_batch b = {.n_tokens = ps->n_tokens,
                          .token = e->b_tok,
                          .pos = e->b_pos,
                          .seq = e->b_seq,
                          .logits = e->b_want,
                          .n_seqs = ps->n_seqs,
                          .seqs = e->b_seqs};
    const float *logits;
    int rows;
    struct ci_err err = {0};
    int n_vocab = e->m->config.n_vocab;
    e->step_draft_tokens += ps->n_tokens;
    if (forward_batch(e->dfwd, &b, e->dlayers, &logits, &rows, &err) != CI_OK) {
        if (!e->draft_warned)
            CI_LOG_WARN("draft model: %s (no drafts for these sequences this step)", err.msg);
        e->draft_warned = true;
        for (int i = 0; i < ps->n_seqs; i++) {
            struct eseq *q = (struct eseq *)e->b_owner[i];
            q->d_k = 0;
            q->s.n_draft = 0;
            kv_seq_release(e->dpool, &q->dblocks);
            q->d_computed = 0;
        }
    } else {
        for (int r = 0; r < rows; r++) {
            struct eseq *q = (struct eseq *)e->b_row_seq[r];
            if (q->d_k == 0)
                continue;
            q->s.tokens[q->s.n_tokens + q->s.n_draft++] = ci_argmax(logits + (size_t)r * n_vocab, n_vocab);
        }
    }
    ps->n_tokens = ps->n_rows = ps->n_seqs = 0;
}

/* Adds positions [from, to) of q's tokens (drafts included) to the draft pass, running it when full; with
 * propose, the last one wants logits (q's next draft). */
static void draft_add(struct engine *e, struct pass *ps, struct eseq *q, int from, int to, bool propose) {
    int cap_rows = e->p.sched.max_seqs;
    while (from < to) {
        if (ps->n_tokens == e->max_pass_tokens || ps->n_seqs == cap_rows || ps->n_rows == cap_rows)
            draft_pass(e, ps);
        if (q->d_computed != from || (propose && q->d_k == 0))
            return; // a failed pass dropped it (its KV and d_computed)
        int si = -1;
        for (int i = 0; i < ps->n_seqs && si < 0; i++)
            si = e->b_owner[i] == &q->s ? i : -1;
        if (si < 0) {
            si = ps->n_seqs++;
            e->b_owner[si] = &q->s;
            e->b_seqs[si].block_table = q->dblocks.ids;
            e->b_seqs[si].n_blocks = q->dblocks.n;
        }
        int room = e->max_pass_tokens - ps->n_tokens, take = to - from < room ? to - from : room;
        for (int k = 0; k < take; k++) {
            int t = ps->n_tokens++;
            e->b_tok[t] = q->s.tokens[from + k];
            e->b_pos[t] = from + k;
            e->b_seq[t] = si;
            e->b_want[t] = 0;
        }
        from += take;
        q->d_computed = from;
        if (from == to && propose) {
            e->b_want[ps->n_tokens - 1] = 1;
            e->b_row_seq[ps->n_rows++] = &q->s;
        }
    }
}

/* Draft-model proposals: the draft catches up on each sequence's tokens it has not seen (its KV rolled back
 * past rejected drafts), then proposes greedily, one batched draft pass per draft position. */
static void propose_with_draft(struct engine *e, struct eseq **cand, int n_cand) {
    struct pass ps = {0};
    int max_k = 0;
    for (int i = 0; i < n_cand; i++) {
        struct eseq *q = cand[i];
        if (q->d_computed > q->s.n_tokens - 1)
            q->d_computed = q->s.n_tokens - 1; // the last token's logits are wanted
        max_k = q->d_k > max_k ? q->d_k : max_k;
        draft_add(e, &ps, q, q->d_computed, q->s.n_tokens, true);
    }
    draft_pass(e, &ps);
    for (int j = 1; j < max_k; j++) {
        for (int i = 0; i < n_cand; i++) {
            struct eseq *q = cand[i];
            if (q->d_k > j && q->s.n_draft == j)
                draft_add(e, &ps, q, q->s.n_tokens + j - 1, q->s.n_tokens + j, true);
        }
        if (ps.n_tokens == 0)
            break;
        draft_pass(e, &ps);
    }
}

/* The draft model follows the prompts of the sequences that will speculate with it: after a step's passes,
 * it computes the prompt positions the target computed in the step (the last token excepted: propose wants
 * its logits), so it catches up chunk by chunk with the prefill instead of over the whole prompt in one pass
 * of the first decode step, which stalled every sequence in the batch (2,650 prompt tokens: 3.9 s). */
static void draft_follow_prompts(struct engine *e) {
    if (!e->dpool || e->proposer || e->p.spec != ENGINE_SPEC_DRAFT)
        return;
    struct pass ps = {0};
    for (int i = 0; i < e->st.n_running; i++) {
        struct eseq *q = (struct eseq *)e->st.running[i];
        const struct seq *s = &q->s;
        int upto = s->n_computed < s->n_prompt ? s->n_computed : s->n_prompt;
        upto = upto < s->n_tokens - 1 ? upto : s->n_tokens - 1;
        if (s->state != SEQ_STATE_RUNNING || s->spec_k <= 0 || q->d_computed >= upto)
            continue;
        if (kv_seq_reserve(e->dpool, &q->dblocks, upto) != CI_OK)
            continue; // the pool is short: propose catches up later, or the sequence decodes without drafts
        draft_add(e, &ps, q, q->d_computed, upto, false);
    }
    draft_pass(e, &ps);
}

/* Whether s samples its next token in this step (its prompt done, one token to compute). */
static bool seq_decoding(const struct seq *s) {
    return s->state == SEQ_STATE_RUNNING && s->n_tokens > s->n_prompt && s->n_computed == s->n_tokens - 1;
}

static void propose(struct engine *e) {
    if (e->p.spec == ENGINE_SPEC_NONE)
        return;
    int n_decoding = 0;
    for (int i = 0; i < e->st.n_running; i++) {
        e->st.running[i]->n_draft = 0;
        n_decoding += seq_decoding(e->st.running[i]);
    }
    if (e->p.spec_max_batch > 0 && n_decoding > e->p.spec_max_batch)
        return; // a batch this large gains less than verifying costs (a draft model catches up later)
    struct eseq **cand = (struct eseq **)e->items; // the scheduler's plan is made after this
    int n_cand = 0;
    int limit = e->max_pass_tokens - 1 < e->max_rows - 1 ? e->max_pass_tokens - 1 : e->max_rows - 1;
    for (int i = 0; i < e->st.n_running; i++) {
        struct seq *s = e->st.running[i];
        if (!seq_decoding(s) || s->spec_k <= 0)
            continue;
        if (s->spec_pause > 0) { // backing off (spec_backoff); a draft model catches up when it resumes
            s->spec_pause--;
            continue;
        }
        int k = s->spec_k, left = s->req->max_tokens - seq_n_output(s) - 1;
        k = k < left ? k : left;
        k = k < limit ? k : limit;
        if (k <= 0)
            continue;
        if (e->dpool && !e->proposer) {
            struct eseq *q = (struct eseq *)s;
            // Room in the draft's pool for the positions it will write (n_tokens + k - 1); when the pool is
            // short the sequence decodes without drafts this step.
            if (kv_seq_reserve(e->dpool, &q->dblocks, s->n_tokens + k - 1) != CI_OK)
                continue;
            q->d_k = k;
            cand[n_cand++] = q;
        } else if (e->proposer) {
            s->n_draft = e->proposer(e->proposer_ctx, s->req, s->sample, s->tokens, s->n_tokens, k,
                                     s->tokens + s->n_tokens);
            CI_ASSERT(s->n_draft >= 0 && s->n_draft <= k);
        } else if (e->p.spec == ENGINE_SPEC_NGRAM)
            s->n_draft =
                spec_ngram_propose(s->tokens, s->n_tokens, e->p.spec_ngram_n, k, s->tokens + s->n_tokens);
    }
    if (n_cand > 0)
        propose_with_draft(e, cand, n_cand);
}

/* Ends every sequence, running or waiting, with status and msg. */
static void finish_all(struct engine *e, enum ci_status status, const char *msg) {
    while (e->st.n_running > 0)
        seq_finish(e, (struct eseq *)e->st.running[0], ENGINE_FINISH_ERROR, status, msg);
    while (e->st.n_waiting > 0)
        seq_finish(e, (struct eseq *)e->st.waiting[0], ENGINE_FINISH_ERROR, status, msg);
}

/* From now on every request fails with msg: what is running, what waits, and what comes. */
static void engine_fail(struct engine *e, const char *msg) {
    if (!atomic_load(&e->failed)) {
        snprintf(e->failure, sizeof e->failure, "%s", msg);
        atomic_store(&e->failed, true);
        CI_LOG_ERR("%s", msg);
    }
    finish_all(e, CI_ERR_IO, e->failure);
}

const char *engine_failure(const struct engine *e) {
    return atomic_load(&e->failed) ? e->failure : NULL;
}

bool engine_step(struct engine *e) {
    if (atomic_load(&e->failed)) { // requests that were already queued when it failed
        int before = e->st.n_running + e->st.n_waiting + ci_queue_len(e->queue);
        drain_queue(e);
        finish_all(e, CI_ERR_IO, e->failure);
        return before > 0;
    }
    struct step_metrics sm = {0};
    sm.t_start_ns = ci_now_ns();
    e->step_grammar_ns = 0;
    e->step_grammar_masks = 0;
    e->step_draft_tokens = 0;
    int before = e->st.n_running + e->st.n_waiting;
    drain_queue(e);
    handle_cancellations(e);
    propose(e);
    struct sched_result res = {.items = e->items};
    sched_step(&e->p.sched, &e->st, &res);
    bool work = res.n_items > 0 || res.n_pad_tokens > 0;
    if (work) {
        struct ci_err err = {0};
        enum ci_status st = execute(e, &res, &sm, &err);
        if ((st == CI_ERR_IO && model_file_damaged(e->m)) || (e->dist_open && dist_broken(e->p.dist))) {
            engine_fail(e, err.msg); // (--tp/--pp: the ranks are out of step, a rank lost or hung)
        } else if (st != CI_OK) {
            // A batch the forward pass refuses is an engine bug: fail its sequences rather than loop.
            for (int i = 0; i < res.n_items; i++)
                if (res.items[i]->state == SEQ_STATE_RUNNING)
                    seq_finish(e, (struct eseq *)res.items[i], ENGINE_FINISH_ERROR, CI_ERR_INTERNAL, err.msg);
        } else {
            draft_follow_prompts(e);
        }
    }
    for (int i = 0; i < e->st.n_running; i++) { // drafts the step did not verify (not scheduled) are dropped
        struct eseq *q = (struct eseq *)e->st.running[i];
        q->s.n_draft = 0;
        q->d_computed = q->d_computed < q->s.n_tokens ? q->d_computed : q->s.n_tokens;
    }
    for (int i = 0; e->dpool && i < e->st.n_waiting; i++) { // preempted: the draft's KV goes back too
        struct eseq *q = (struct eseq *)e->st.waiting[i];
        kv_seq_release(e->dpool, &q->dblocks);
        q->d_computed = 0;
    }
    drop_out_of_window(e);
    sm.t_end_ns = ci_now_ns();
    sm.n_tokens = res.n_tokens;
    sm.n_prefill_tokens = res.n_prefill_tokens;
    sm.n_decode_tokens = res.n_decode_tokens;
    sm.n_pad_tokens = res.n_pad_tokens;
    sm.n_preempted = res.n_preempted;
    sm.n_prefix_hit_tokens = res.n_prefix_hit_tokens;
    sm.n_running = e->st.n_running;
    sm.n_waiting = e->st.n_waiting;
    sm.grammar_ns = e->step_grammar_ns;
    sm.n_grammar_masks = e->step_grammar_masks;
    sm.n_draft_model_tokens = e->step_draft_tokens;
    kv_usage(e, &sm);
    if (work) {
        atomic_fetch_add(&e->t_steps, 1);
        atomic_fetch_add(&e->t_preempt, res.n_preempted);
        atomic_fetch_add(&e->t_pad, res.n_pad_tokens);
        atomic_fetch_add(&e->t_dec_steps, sm.n_decode_seqs);
        atomic_fetch_add(&e->t_dec_emitted, sm.n_decode_emitted);
        if (e->hook)
            e->hook(e->hook_ctx, &sm);
        if (e->debug_sched)
            log_step(e, &sm);
    }
    atomic_store(&e->live_running, e->st.n_running);
    atomic_store(&e->live_waiting, e->st.n_waiting);
    atomic_store(&e->live_blocks, sm.kv_blocks_used);
    if (e->pc) {
        struct prefix_cache_stats ps;
        prefix_cache_stats(e->pc, &ps);
        atomic_store(&e->t_pq, (long long)ps.query_tokens);
        atomic_store(&e->t_ph, (long long)ps.hit_tokens);
    }
    if (e->p.check_invariants)
        check_invariants(e);
    return work || before != e->st.n_running + e->st.n_waiting;
}

bool engine_idle(struct engine *e) {
    return e->st.n_running == 0 && e->st.n_waiting == 0 && ci_queue_len(e->queue) == 0;
}

/* ---- thread mode --------------------------------------------------------------------------------------- */

static void *engine_main(void *arg) {
    struct engine *e = arg;
    while (!atomic_load(&e->stop_thread)) {
        if (!engine_step(e))
            ci_queue_wait(e->queue, 50 * 1000000LL);
    }
    return NULL;
}

enum ci_status engine_start(struct engine *e, struct ci_err *err) {
    if (e->started)
        return CI_OK;
    atomic_store(&e->stop_thread, false);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
        return ci_err_set(err, CI_ERR_INTERNAL, "cannot start the engine thread");
    e->started = true;
    return CI_OK;
}

void engine_stop(struct engine *e) {
    if (!e->started)
        return;
    atomic_store(&e->stop_thread, true);
    ci_queue_wake(e->queue);
    pthread_join(e->thread, NULL);
    e->started = false;
}

/* ---- creation ------------------------------------------------------------------------------------------ */

void engine_set_proposer(struct engine *e, engine_propose_fn fn, void *ctx) {
    e->proposer = fn;
    e->proposer_ctx = ctx;
}

void engine_set_step_hook(struct engine *e, engine_step_fn fn, void *ctx) {
    e->hook = fn;
    e->hook_ctx = ctx;
}

static double layer_params(const struct model_config *c) {
    double q = (double)c->n_head * c->head_dim, kv = (double)c->n_kv_head * c->head_dim;
    // A mixture of experts: the router, the experts a token uses and the shared expert.
    double ffn = c->n_expert ? (double)c->n_embd *
                                   (c->n_expert + 3.0 * c->n_expert_used * c->n_ff_exp + 3.0 * c->n_ff_shexp)
                             : (c->encoder ? 2.0 : 3.0) * c->n_embd * c->n_ff; // BERT: no gate
    return (double)c->n_layer * (c->n_embd * (q + 2 * kv) + q * c->n_embd + ffn);
}

enum ci_status engine_create(const struct model *m, const struct tokenizer *tok,
                             const struct engine_params *p, struct engine **out, struct ci_err *err) {
    *out = NULL;
    const struct model_config *c = &m->config;
    struct sched_params sp = p->sched;
    if (sp.max_seqs < 1 || sp.max_seqs > 4096)
        return ci_err_set(err, CI_ERR_INVALID, "max running sequences %d outside [1, 4096]", sp.max_seqs);
    if (sp.max_batch_tokens < 1 || sp.max_batch_tokens > (1 << 20))
        return ci_err_set(err, CI_ERR_INVALID, "token budget %d outside [1, 1048576]", sp.max_batch_tokens);
    if (p->n_ctx < 0 || p->block_size < 0 || p->kv_blocks < 0 || p->kv_mem_bytes < 0)
        return ci_err_set(err, CI_ERR_INVALID, "negative context, block size or KV size");
    if (p->spec < ENGINE_SPEC_NONE || p->spec > ENGINE_SPEC_DRAFT)
        return ci_err_set(err, CI_ERR_INVALID, "unknown speculative decoding mode %d", (int)p->spec);
    if (p->spec != ENGINE_SPEC_NONE &&
        (p->spec_k < 0 || p->spec_k > SPEC_MAX_K || p->spec_k_min < 0 || p->spec_k_min > SPEC_MAX_K ||
         p->spec_ngram_n < 0 || p->spec_ngram_n > 64 || p->spec_max_batch < 0))
        return ci_err_set(
            err, CI_ERR_INVALID,
            "speculative decoding: k %d and k_min %d must be in [1, %d], the n-gram length %d in "
            "[1, 64], the batch limit %d not negative",
            p->spec_k, p->spec_k_min, SPEC_MAX_K, p->spec_ngram_n, p->spec_max_batch);
    if (p->spec == ENGINE_SPEC_DRAFT && !p->draft)
        return ci_err_set(err, CI_ERR_INVALID,
                          "speculative decoding with a draft model needs the draft model");
    struct engine *e = ci_calloc(1, sizeof *e);
    if (!e)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    enum ci_status s;
    e->m = m;
    e->tok = tok;
    e->p = *p;
    e->p.spec_k = p->spec_k ? p->spec_k : 8;
    e->p.spec_k_min = p->spec_k_min ? p->spec_k_min : 1;
    e->p.spec_k_min = e->p.spec_k_min < e->p.spec_k ? e->p.spec_k_min : e->p.spec_k;
    e->p.spec_ngram_n = p->spec_ngram_n ? p->spec_ngram_n : 3;
    e->n_ctx = p->n_ctx > 0 && p->n_ctx < c->n_ctx_train ? p->n_ctx : c->n_ctx_train;
    e->block_size = p->contiguous_kv ? e->n_ctx : (p->block_size > 0 ? p->block_size : 16);
    if (p->sched.policy == SCHED_POLICY_NAIVE)
        e->p.prefix_cache = false; // nothing is reused under naive recompute
    if (c->encoder) {              // bidirectional attention: each input whole in one pass, nothing reused
        e->p.prefix_cache = false;
        e->p.sched.chunked_prefill = false;
    }
    e->linear_params = layer_params(c);
    static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
                                         1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
    static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2, 0.3,
                                        0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0};
    static const double e2e_bounds[] = {0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,  5.0,
                                        10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 480.0, 960.0};
    histogram_init(&e->h_ttft, ttft_bounds, (int)(sizeof ttft_bounds / sizeof ttft_bounds[0]));
    histogram_init(&e->h_itl, itl_bounds, (int)(sizeof itl_bounds / sizeof itl_bounds[0]));
    histogram_init(&e->h_e2e, e2e_bounds, (int)(sizeof e2e_bounds / sizeof e2e_bounds[0]));
    histogram_init(&e->h_queue, e2e_bounds, (int)(sizeof e2e_bounds / sizeof e2e_bounds[0]));
    const char *debug = getenv("CINFER_DEBUG");
    e->debug_sched = debug && strstr(debug, "sched");
#if defined(CI_DEBUG_CHECKS) && CI_DEBUG_CHECKS
    e->p.check_invariants = true; // debug and sanitizer builds check every step
#endif
    e->weight_bytes = (double)model_weight_bytes(m);

    // An explicit size (--kv-blocks, --kv-mem) is taken as given; the default is sized from the available
    // memory (kv_budget.h), at most what max_seqs whole contexts could use.  The file's claimed context
    // never grows the pool past that budget: the context is clamped to what the pool holds instead.
    struct kv_pool_params kp = {c->n_layer, c->n_kv_head, c->head_dim, 1, 1, p->kv_type};
    size_t bytes_per_token;
    if ((s = kv_pool_size_bytes(&kp, &bytes_per_token, err)) != CI_OK)
        goto fail;
    int64_t mem_bytes = p->kv_mem_bytes, auto_blocks = 0;
    e->kv_sizing = p->kv_blocks ? KV_SIZED_BLOCKS : KV_SIZED_BYTES;
    e->kv_mem_fraction = p->kv_mem_fraction > 0 ? p->kv_mem_fraction : KV_MEM_FRACTION_DEFAULT;
    e->mem_available = -1;
    e->kv_weight_bytes =
        (int64_t)model_weight_bytes(m) + (p->draft ? (int64_t)model_weight_bytes(p->draft) : 0);
    if (!p->kv_blocks && !mem_bytes) {
        if (!(e->kv_mem_fraction > 0 && e->kv_mem_fraction <= 1)) {
            s = ci_err_set(err, CI_ERR_INVALID, "KV memory fraction %g outside (0, 1]", e->kv_mem_fraction);
            goto fail;
        }
        // Paged: counted in blocks.  Contiguous (one block = the whole context, maybe a claimed huge one):
        // counted in tokens, then taken as a --kv-mem of that many bytes, which clamps the context to it.
        const int unit = p->contiguous_kv ? 1 : e->block_size;
        struct kv_pool_params bp = kp;
        bp.block_size = unit;
        size_t bb, dbb = 0;
        if ((s = kv_pool_size_bytes(&bp, &bb, err)) != CI_OK)
            goto fail;
        if (p->draft) { // the draft's pool has as many blocks: charge both to each block
            const struct model_config *dc = &p->draft->config;
            struct kv_pool_params dp = {dc->n_layer, dc->n_kv_head, dc->head_dim, unit, 1, p->kv_type};
            if ((s = kv_pool_size_bytes(&dp, &dbb, err)) != CI_OK)
                goto fail;
        }
        e->mem_available = ci_mem_available();
        int64_t per_seq = (e->n_ctx + unit - 1) / unit;
        struct kv_budget kb = {e->mem_available, e->kv_weight_bytes, e->kv_mem_fraction, (int64_t)(bb + dbb),
                               per_seq * sp.max_seqs};
        enum kv_sizing why;
        int64_t units = kv_budget_blocks(&kb, &why);
        e->kv_sizing = why;
        if (p->contiguous_kv)
            mem_bytes = units * (int64_t)bb;
        else
            auto_blocks = units;
    }
    int64_t pool_tokens = p->kv_blocks ? (int64_t)p->kv_blocks * (p->contiguous_kv ? e->n_ctx : e->block_size)
                          : auto_blocks ? auto_blocks * e->block_size
                                        : mem_bytes / (int64_t)bytes_per_token;
    if (pool_tokens < e->n_ctx && pool_tokens > 0) {
        CI_LOG_WARN("the model's context of %d tokens does not fit the KV pool (%lld tokens of %zu bytes): "
                    "serving a context of %lld tokens (raise --kv-mem to allow more)",
                    e->n_ctx, (long long)pool_tokens, bytes_per_token, (long long)pool_tokens);
        e->n_ctx = (int)pool_tokens;
        if (p->contiguous_kv)
            e->block_size = e->n_ctx;
    }
    kp.block_size = e->block_size;
    size_t bytes_one_block;
    if ((s = kv_pool_size_bytes(&kp, &bytes_one_block, err)) != CI_OK)
        goto fail;
    // (auto_blocks: a clamp above left the block size as it was, since a contiguous block always fits)
    int64_t want_blocks = p->kv_blocks  ? p->kv_blocks
                          : auto_blocks ? auto_blocks
                                        : mem_bytes / (int64_t)bytes_one_block;
    bool padding = p->sched.policy == SCHED_POLICY_STATIC;
    want_blocks += padding; // the pad tokens' block
    if (want_blocks < 1 + padding || want_blocks > MAX_KV_BLOCKS) {
        s = ci_err_set(err, CI_ERR_INVALID, "KV pool of %lld blocks of %d tokens: need 1 to %d",
                       (long long)want_blocks - padding, e->block_size, MAX_KV_BLOCKS);
        goto fail;
    }
    kp.n_blocks = (int)want_blocks;
    e->kv_bytes_per_token = kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, p->kv_type);
    // Early freeing (as vLLM's sliding-window manager): only when every layer is local (a global layer reads
    // every position, and a block holds all layers), and not under naive, which recomputes from position 0.
    bool all_local = c->sliding_window > 0;
    for (int il = 0; il < model_n_layer_all(c) && all_local; il++)
        all_local = model_layer_swa(c, il);
    e->kv_window = all_local && p->sched.policy != SCHED_POLICY_NAIVE ? c->sliding_window : 0;
    if ((s = ci_threadpool_create(p->n_threads, &e->tp, err)) || (s = kv_pool_create(&kp, &e->pool, err)))
        goto fail;
    if (padding && ((s = kv_seq_init(&e->pad, 1, err)) || (s = kv_seq_reserve(e->pool, &e->pad, 1))))
        goto fail;
    if (e->p.prefix_cache && (s = prefix_cache_create(e->pool, &e->pc, err)))
        goto fail;
    int queue_capacity = p->queue_capacity > 0 ? p->queue_capacity : DEFAULT_QUEUE_CAPACITY;
    e->max_rows = sp.max_seqs;
    e->max_pass_tokens = sp.max_batch_tokens > sp.max_seqs ? sp.max_batch_tokens : sp.max_seqs;
    if (e->p.spec != ENGINE_SPEC_NONE) { // rows for the drafts of some sequences (more split the pass)
        int64_t want = (int64_t)sp.max_seqs * (e->p.spec_k + 1);
        want = want < e->max_pass_tokens ? want : e->max_pass_tokens;
        want = want < 128 ? want : 128; // logits rows cost n_vocab floats each
        e->max_rows = want > e->max_rows ? (int)want : e->max_rows;
    }
    if ((s = forward_create(m, e->max_pass_tokens, e->max_rows, e->tp, &e->fwd, err)) ||
        (s = ci_queue_create(queue_capacity, &e->queue, err)))
        goto fail;
    forward_set_n_ctx(e->fwd, e->n_ctx); // Phi-3 LongRoPE: long or short factors by the served context
    if (p->dist) { // tensor parallelism: the other ranks mirror this forward pass and KV pool
        if ((s = dist_open(p->dist, e->fwd, e->pool, &kp, e->max_pass_tokens, e->max_rows, e->n_ctx, err)) !=
            CI_OK)
            goto fail;
        e->dist_open = true;
    }
    if (e->p.spec == ENGINE_SPEC_DRAFT) {
        const struct model_config *dc = &p->draft->config;
        if (dc->n_vocab != c->n_vocab) {
            s = ci_err_set(err, CI_ERR_INVALID, "the draft model's vocabulary has %d tokens, the model's %d",
                           dc->n_vocab, c->n_vocab);
            goto fail;
        }
        struct kv_pool_params dp = {dc->n_layer,   dc->n_kv_head, dc->head_dim,
                                    e->block_size, kp.n_blocks,   p->kv_type};
        if ((s = kv_pool_create(&dp, &e->dpool, err)) ||
            (s = forward_create(p->draft, e->max_pass_tokens, sp.max_seqs, e->tp, &e->dfwd, err)))
            goto fail;
        forward_set_n_ctx(e->dfwd, e->n_ctx);
        if (!(e->dlayers = ci_calloc((size_t)dc->n_layer, sizeof *e->dlayers))) {
            s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int il = 0; il < dc->n_layer; il++)
            kv_pool_layer(e->dpool, il, &e->dlayers[il]);
    }
    e->cap = sp.max_seqs + queue_capacity * SEQS_PER_QUEUED_REQUEST + MAX_SAMPLES;
    size_t T = (size_t)e->max_pass_tokens, R = (size_t)e->max_rows;
    e->layers = ci_calloc((size_t)c->n_layer, sizeof *e->layers);
    e->st.running = ci_calloc((size_t)e->cap, sizeof(struct seq *));
    e->st.waiting = ci_calloc((size_t)e->cap, sizeof(struct seq *));
    e->items = ci_calloc((size_t)e->cap, sizeof(struct seq *));
    e->live_tables = ci_calloc((size_t)e->cap + 1, sizeof *e->live_tables);
    e->b_tok = ci_calloc(T, sizeof *e->b_tok);
    e->b_pos = ci_calloc(T, sizeof *e->b_pos);
    e->b_seq = ci_calloc(T, sizeof *e->b_seq);
    e->b_want = ci_calloc(T, sizeof *e->b_want);
    e->b_seqs = ci_calloc(R + 1, sizeof *e->b_seqs);
    e->b_owner = ci_calloc(R + 1, sizeof *e->b_owner);
    e->b_row_seq = ci_calloc(R, sizeof *e->b_row_seq);
    e->b_hid = ci_calloc(T, sizeof *e->b_hid);
    e->b_hid_seq = ci_calloc(T, sizeof *e->b_hid_seq);
    e->b_embed_done = ci_calloc(T, sizeof *e->b_embed_done);
    if (!e->layers || !e->st.running || !e->st.waiting || !e->items || !e->live_tables || !e->b_tok ||
        !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs || !e->b_owner || !e->b_row_seq || !e->b_hid ||
        !e->b_hid_seq || !e->b_embed_done) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    e->st.cap = e->cap;
    e->st.pool = e->pool;
    e->st.prefix = e->pc;
    for (int il = 0; il < c->n_layer; il++)
        kv_pool_layer(e->pool, il, &e->layers[il]);
    if (tok)
        e->eog = tokenizer_eog_ids(tok, &e->n_eog);
    if ((s = gram_cache_create(64, &e->gcache, err)) != CI_OK)
        goto fail;
    if (tok)
        gram_cache_set_tokens(e->gcache, &(struct gram_tokens){c->n_vocab, token_by_text, tok});
    *out = e;
    return CI_OK;
fail:
    engine_free(e);
    return s;
}

void engine_free(struct engine *e) {
    if (!e)
        return;
    engine_stop(e);
    if (e->queue) {
        ci_queue_close(e->queue);
        drain_queue(e); // requests still queued become sequences, cancelled below
    }
    while (e->st.n_running > 0)
        seq_finish(e, (struct eseq *)e->st.running[0], ENGINE_FINISH_CANCELLED, CI_ERR_CANCELLED,
                   "the engine stopped");
    while (e->st.n_waiting > 0)
        seq_finish(e, (struct eseq *)e->st.waiting[0], ENGINE_FINISH_CANCELLED, CI_ERR_CANCELLED,
                   "the engine stopped");
    if (e->pad.ids) {
        kv_seq_release(e->pool, &e->pad);
        kv_seq_deinit(&e->pad);
    }
    prefix_cache_free(e->pc);
    if (e->dist_open)
        dist_close(e->p.dist);
    forward_free(e->fwd);
    kv_pool_free(e->pool);
    forward_free(e->dfwd);
    kv_pool_free(e->dpool);
    ci_free(e->dlayers);
    ci_threadpool_free(e->tp);
    ci_queue_free(e->queue);
    ci_free(e->layers);
    ci_free(e->st.running);
    ci_free(e->st.waiting);
    ci_free(e->items);
    ci_free(e->live_tables);
    ci_free(e->b_tok);
    ci_free(e->b_pos);
    ci_free(e->b_seq);
    ci_free(e->b_want);
    ci_free(e->b_seqs);
    ci_free(e->b_owner);
    ci_free(e->b_row_seq);
    ci_free(e->b_hid);
    ci_free(e->b_hid_seq);
    ci_free(e->b_embed_done);
    for (int i = 0; i < ENGINE_GRAM_SLOTS; i++) { // every sequence is gone by now
        gram_space_free(e->gslots[i].sp);
        gram_ref_release(e->gslots[i].ref);
    }
    gram_cache_free(e->gcache);
    gram_vocab_free(e->gvocab);
    ci_free(e->gmask);
    ci_free(e->fmask);
    ci_free(e->grow);
    ci_free(e);
}

void engine_info(const struct engine *e, struct engine_info *out) {
    out->n_ctx = e->n_ctx;
    out->block_size = e->block_size;
    out->n_blocks = kv_pool_n_blocks(e->pool) - e->pad.n;
    out->kv_bytes = (int64_t)kv_pool_bytes(e->pool);
    out->kv_type = kv_pool_type(e->pool);
    out->kv_bytes_per_token = e->kv_bytes_per_token;
    out->full_context_seqs = (int)(out->n_blocks / blocks_for(e, e->n_ctx));
    out->kv_sizing = e->kv_sizing;
    out->kv_mem_fraction = e->kv_mem_fraction;
    out->mem_available = e->mem_available;
    out->weight_bytes = e->kv_weight_bytes;
}

void engine_totals(const struct engine *e, struct engine_totals *out) {
    out->n_steps = atomic_load(&e->t_steps);
    out->n_requests_finished = atomic_load(&e->t_finished);
    out->n_preemptions = atomic_load(&e->t_preempt);
    out->n_prompt_tokens = atomic_load(&e->t_prompt);
    out->n_generated_tokens = atomic_load(&e->t_gen);
    out->n_pad_tokens = atomic_load(&e->t_pad);
    out->prefix_hit_tokens = atomic_load(&e->t_ph);
    out->prefix_query_tokens = atomic_load(&e->t_pq);
    out->n_running = atomic_load(&e->live_running);
    out->n_waiting = atomic_load(&e->live_waiting);
    out->kv_blocks_used = atomic_load(&e->live_blocks);
    out->spec_draft_tokens = atomic_load(&e->t_spec_draft);
    out->spec_accepted_tokens = atomic_load(&e->t_spec_acc);
    out->decode_seq_steps = atomic_load(&e->t_dec_steps);
    out->decode_emitted = atomic_load(&e->t_dec_emitted);
}

bool engine_metrics_text(const struct engine *e, char *buf, size_t cap, size_t *len) {
    *len = 0;
    int n_blocks = kv_pool_n_blocks(e->pool) - e->pad.n;
    int used = atomic_load(&e->live_blocks);
    struct {
        const char *name, *type, *help;
        double value;
    } simple[] = {
        {"num_requests_running", "gauge", "Sequences running (admitted, computing or decoding).",
         atomic_load(&e->live_running)},
        {"num_requests_waiting", "gauge", "Sequences waiting for admission (new or preempted).",
         atomic_load(&e->live_waiting)},
        {"kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (1 = full).",
         n_blocks > 0 ? (double)used / n_blocks : 0},
        {"prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         (double)atomic_load(&e->t_pq)},
        {"prefix_cache_hits_total", "counter", "Prompt tokens served by the prefix cache.",
         (double)atomic_load(&e->t_ph)},
        {"prompt_tokens_total", "counter", "Prompt tokens submitted.", (double)atomic_load(&e->t_prompt)},
        {"generation_tokens_total", "counter", "Tokens generated.", (double)atomic_load(&e->t_gen)},
        {"num_preemptions_total", "counter", "Sequences preempted by recompute.",
         (double)atomic_load(&e->t_preempt)},
        {"spec_decode_num_draft_tokens_total", "counter", "Speculative draft tokens verified.",
         (double)atomic_load(&e->t_spec_draft)},
        {"spec_decode_num_accepted_tokens_total", "counter", "Speculative draft tokens accepted.",
         (double)atomic_load(&e->t_spec_acc)},
        {"spec_decode_acceptance_rate", "gauge", "Accepted / verified draft tokens since start (0: none).",
         atomic_load(&e->t_spec_draft) > 0
             ? (double)atomic_load(&e->t_spec_acc) / (double)atomic_load(&e->t_spec_draft)
             : 0},
        {"decode_tokens_per_step", "gauge",
         "Tokens a decoding sequence gains per step since start (1 without speculation).",
         atomic_load(&e->t_dec_steps) > 0
             ? (double)atomic_load(&e->t_dec_emitted) / (double)atomic_load(&e->t_dec_steps)
             : 0},
    };
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
        if (!metrics_appendf(buf, cap, len, "# HELP cinfer:%s %s\n# TYPE cinfer:%s %s\ncinfer:%s %.17g\n",
                             simple[i].name, simple[i].help, simple[i].name, simple[i].type, simple[i].name,
                             simple[i].value))
            return false;
    // vLLM's finished_reason labels: stop, length, abort (error requests are counted under their own name).
    static const char *const reasons[] = {"stop", "length", "abort", "error"};
    static const enum engine_finish which[] = {ENGINE_FINISH_STOP, ENGINE_FINISH_LENGTH,
                                               ENGINE_FINISH_CANCELLED, ENGINE_FINISH_ERROR};
    if (!metrics_appendf(buf, cap, len,
                         "# HELP cinfer:request_success_total Finished requests by finish reason.\n"
                         "# TYPE cinfer:request_success_total counter\n"))
        return false;
    for (int i = 0; i < 4; i++)
        if (!metrics_appendf(buf, cap, len, "cinfer:request_success_total{finished_reason=\"%s\"} %lld\n",
                             reasons[i], (long long)atomic_load(&e->t_finish[which[i]])))
            return false;
    return histogram_format(&e->h_ttft, "cinfer:time_to_first_token_seconds", "Time to first token.", buf,
                            cap, len) &&
           histogram_format(&e->h_itl, "cinfer:inter_token_latency_seconds",
                            "Time between consecutive tokens.", buf, cap, len) &&
           histogram_format(&e->h_e2e, "cinfer:e2e_request_latency_seconds", "End-to-end request latency.",
                            buf, cap, len) &&
           histogram_format(&e->h_queue, "cinfer:request_queue_time_seconds",
                            "Time waiting before admission.", buf, cap, len);
}
