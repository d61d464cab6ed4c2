/* The engine half of include/cinfer.h: single-request generation and the serving engine with its streams,
 * built on the models of api_model.c. */
#include "cinfer.h"

#include <stddef.h>
#include <string.h>

#include "core/mem.h"
#include "core/queue.h"
#include "engine/api_model.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/kv_budget.h"
#include "engine/kv_pool.h"
#include "grammar/cache.h"
#include "grammar/json_schema.h"
#include "engine/metrics.h"
#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

_Static_assert((int)CINFER_ERR_INTERNAL == (int)CI_ERR_INTERNAL, "cinfer_status mirrors ci_status");
_Static_assert(sizeof(struct cinfer_logit_bias) == sizeof(struct sampling_logit_bias) &&
                   offsetof(struct cinfer_logit_bias, bias) == offsetof(struct sampling_logit_bias, bias),
               "cinfer_logit_bias is passed to the sampler as is");

void cinfer_generate_params_default(struct cinfer_generate_params *p) {
    struct gen_params g = gen_params_default();
    memset(p, 0, sizeof *p);
    p->max_tokens = g.max_tokens;
    p->n_threads = g.n_threads;
    p->kv_block_size = g.block_size;
    p->sampling.temperature = g.sampling.temperature;
    p->sampling.top_k = g.sampling.top_k;
    p->sampling.top_p = g.sampling.top_p;
    p->sampling.min_p = g.sampling.min_p;
    p->sampling.repetition_penalty = g.sampling.repetition_penalty;
    p->sampling.presence_penalty = g.sampling.presence_penalty;
    p->sampling.frequency_penalty = g.sampling.frequency_penalty;
    p->sampling.seed = g.sampling.seed;
}

static struct sampling_params sampling_from(const struct cinfer_sampling *c) {
    struct sampling_params p = sampling_params_default();
    p.temperature = c->temperature;
    p.top_k = c->top_k;
    p.top_p = c->top_p;
    p.min_p = c->min_p;
    p.repetition_penalty = c->repetition_penalty;
    p.presence_penalty = c->presence_penalty;
    p.frequency_penalty = c->frequency_penalty;
    p.seed = c->seed;
    return p;
}

struct stream {
    struct detok detok;
    cinfer_token_fn on_token;
    void *user;
};

/* The public per-request figures from the token timing (the one place they are converted). */
static void stats_fill(struct cinfer_generate_stats *out, int n_prompt, int n_generated,
                       const struct token_timing *tt, uint64_t kv_bytes, const char *finish_reason) {
    memset(out, 0, sizeof *out);
    out->n_prompt = n_prompt;
    out->n_generated = n_generated;
    out->ttft_ms = tt->ttft_ms;
    out->tbt_ms = tt->tbt_mean_ms;
    out->tbt_p50_ms = tt->tbt_p50_ms;
    out->tbt_p99_ms = tt->tbt_p99_ms;
    out->tps = tt->tps;
    out->latency_ms = tt->latency_ms;
    out->prefill_tps = tt->ttft_ms > 0 ? n_prompt / (tt->ttft_ms / 1000.0) : 0;
    out->kv_bytes = kv_bytes;
    out->finish_reason = finish_reason;
}

static bool stream_token(void *user, int32_t token, bool is_stop) {
    struct stream *st = user;
    const char *text = "";
    size_t n = 0;
    if (!is_stop)
        detok_push(&st->detok, token, &text, &n);
    return st->on_token ? st->on_token(st->user, token, text, n) : true;
}

enum cinfer_status cinfer_generate(const struct cinfer_model *m, const char *prompt,
                                   const struct cinfer_generate_params *p, cinfer_token_fn on_token,
                                   void *user, struct cinfer_generate_stats *stats,
                                   struct cinfer_error *err) {
    struct ci_err e = {0};
    int32_t *ids = NULL;
    int n_ids = 0;
    struct stream st = {.on_token = on_token, .user = user};
    bool detok_ready = false;
    enum ci_status s = tokenizer_encode(m->tok, prompt, strlen(prompt), true, true, &ids, &n_ids, &e);
    if (s == CI_OK && n_ids == 0)
        s = ci_err_set(&e, CI_ERR_INVALID, "the prompt is empty and the vocabulary adds no BOS token");
    // The generated text starts a new text (SPM drops its leading space) only when the prompt is just BOS.
    if (s == CI_OK && (s = detok_init(&st.detok, m->tok, n_ids == 1 && ids[0] == tokenizer_bos(m->tok), false,
                                      &e)) == CI_OK)
        detok_ready = true;
    struct gen_params g = gen_params_default();
    g.max_tokens = p->max_tokens;
    g.n_threads = p->n_threads;
    g.block_size = p->kv_block_size;
    g.n_ctx = p->n_ctx;
    g.ignore_eos = p->ignore_eos;
    g.stop_tokens = m->eog;
    g.n_stop_tokens = m->n_eog;
    g.sampling = sampling_from(&p->sampling);
    struct gen_metrics mt = {0};
    if (s == CI_OK)
        s = generate(m->model, ids, n_ids, &g, stream_token, &st, &mt, &e);
    if (s == CI_OK) {
        const char *text;
        size_t n;
        detok_flush(&st.detok, &text, &n);
        if (n && on_token)
            on_token(user, -1, text, n);
    }
    if (stats)
        stats_fill(stats, mt.n_prompt, mt.n_generated, &mt.timing, mt.kv_bytes, gen_finish_str(mt.finish));
    if (detok_ready)
        detok_deinit(&st.detok);
    ci_free(ids);
    return s == CI_OK ? CINFER_OK : api_fail(err, &e);
}

/* ---- the serving engine -------------------------------------------------------------------------------- */

struct cinfer_engine {
    struct engine *e;
    const char *pooling;     // embedding requests' default ("mean", "cls", "last"), or NULL: ...
    const char *pooling_why; // ... why embeddings are refused
};

#define STREAM_TEXT_CAP 256 // bytes of one event's text cinfer_stream_next joins without allocating

struct cinfer_stream {
    struct engine_request *r;
    int n_tokens[64]; // TOKEN events returned per sample (the row of their logprobs)
    int logprobs;
    char *text; // [cap] one event's text, joined from its pieces
    size_t cap;
    int64_t kv_bytes_per_token;
};

void cinfer_engine_options_default(struct cinfer_engine_options *o) {
    struct engine_params p = engine_params_default();
    memset(o, 0, sizeof *o);
    o->n_threads = p.n_threads;
    o->policy = sched_policy_name(p.sched.policy);
    o->chunked_prefill = p.sched.chunked_prefill;
    o->max_batch_tokens = p.sched.max_batch_tokens;
    o->max_seqs = p.sched.max_seqs;
    o->kv_block_size = p.block_size;
    o->prefix_cache = p.prefix_cache;
}

bool cinfer_policy_known(const char *name) {
    enum sched_policy p;
    return name && sched_policy_parse(name, &p);
}

bool cinfer_spec_known(const char *name) {
    enum engine_spec sp;
    return name && engine_spec_parse(name, &sp);
}

/* A draft model must speak the target's vocabulary: the same size and the same text for every token. */
static enum ci_status check_draft_vocab(const struct cinfer_model *m, const struct cinfer_model *d,
                                        struct ci_err *e) {
    int nv = m->model->config.n_vocab, nd = d->model->config.n_vocab;
    if (nv != nd)
        return ci_err_set(e, CI_ERR_INVALID, "the draft model's vocabulary has %d tokens, the model's %d", nd,
                          nv);
    if (!m->tok || !d->tok)
        return CI_OK; // no texts to compare (llama2.c checkpoints without a tokenizer)
    if (tokenizer_n_vocab(m->tok) != tokenizer_n_vocab(d->tok))
        return ci_err_set(e, CI_ERR_INVALID, "the draft model's tokenizer has %d tokens, the model's %d",
                          tokenizer_n_vocab(d->tok), tokenizer_n_vocab(m->tok));
    for (int i = 0; i < tokenizer_n_vocab(m->tok); i++) {
        size_t la, lb;
        const char *a = tokenizer_piece(m->tok, i, &la), *b = tokenizer_piece(d->tok, i, &lb);
        if (la != lb || (la && memcmp(a, b, la) != 0))
            return ci_err_set(e, CI_ERR_INVALID,
                              "the draft model's vocabulary differs from the model's at token %d", i);
    }
    return CI_OK;
}

bool cinfer_kv_type_known(const char *name) {
    uint32_t t;
    return name && kv_type_parse(name, &t);
}

enum cinfer_status cinfer_engine_create(const struct cinfer_model *m, const struct cinfer_engine_options *o,
                                        struct cinfer_engine **out, struct cinfer_error *err) {
    struct ci_err e = {0};
    *out = NULL;
    struct engine_params p = engine_params_default();
    if (o->policy && !sched_policy_parse(o->policy, &p.sched.policy)) {
        ci_err_set(&e, CI_ERR_INVALID, "unknown policy '%s' (naive, static, continuous)", o->policy);
        return api_fail(err, &e);
    }
    p.n_threads = o->n_threads;
    p.sched.chunked_prefill = o->chunked_prefill;
    p.sched.max_batch_tokens = o->max_batch_tokens;
    p.sched.max_seqs = o->max_seqs;
    p.block_size = o->kv_block_size;
    p.contiguous_kv = o->contiguous_kv;
    p.kv_mem_bytes = o->kv_mem_bytes;
    if (o->kv_type && !kv_type_parse(o->kv_type, &p.kv_type)) {
        ci_err_set(&e, CI_ERR_INVALID, "unknown KV type '%s' (f32, f16, q8_0)", o->kv_type);
        return api_fail(err, &e);
    }
    p.kv_blocks = o->kv_blocks;
    p.kv_mem_fraction = o->kv_mem_fraction;
    p.prefix_cache = o->prefix_cache;
    if (o->spec && !engine_spec_parse(o->spec, &p.spec)) {
        ci_err_set(&e, CI_ERR_INVALID, "unknown speculative decoding '%s' (none, ngram, draft)", o->spec);
        return api_fail(err, &e);
    }
    p.spec_k = o->spec_k;
    p.spec_k_min = o->spec_k_min;
    p.spec_ngram_n = o->spec_ngram_n;
    p.spec_max_batch = o->spec_max_batch;
    if (p.spec == ENGINE_SPEC_DRAFT) {
        if (!o->draft_model) {
            ci_err_set(&e, CI_ERR_INVALID, "speculative decoding with a draft model needs the draft model");
            return api_fail(err, &e);
        }
        if (check_draft_vocab(m, o->draft_model, &e) != CI_OK)
            return api_fail(err, &e);
        p.draft = o->draft_model->model;
    }
    p.n_ctx = o->n_ctx;
    p.dist = m->dist; // tensor parallelism: this engine drives the other ranks
    if (o->pooling && !cinfer_pooling_known(o->pooling)) {
        ci_err_set(&e, CI_ERR_INVALID, "unknown pooling '%s' (mean, cls, last)", o->pooling);
        return api_fail(err, &e);
    }
    struct cinfer_engine *ce = ci_calloc(1, sizeof *ce);
    if (!ce) {
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &e);
    }
    ce->pooling = o->pooling ? o->pooling : cinfer_model_embedding_pooling(m, &ce->pooling_why);
    if (engine_create(m->model, m->tok, &p, &ce->e, &e) != CI_OK) {
        ci_free(ce);
        return api_fail(err, &e);
    }
    *out = ce;
    return CINFER_OK;
}

void cinfer_engine_free(struct cinfer_engine *e) {
    if (!e)
        return;
    engine_free(e->e);
    ci_free(e);
}

enum cinfer_status cinfer_engine_start(struct cinfer_engine *e, struct cinfer_error *err) {
    struct ci_err ce = {0};
    return engine_start(e->e, &ce) == CI_OK ? CINFER_OK : api_fail(err, &ce);
}

const char *cinfer_engine_failure(const struct cinfer_engine *e) {
    return engine_failure(e->e);
}

void cinfer_engine_info(const struct cinfer_engine *e, struct cinfer_engine_info *out) {
    struct engine_info info;
    engine_info(e->e, &info);
    out->n_ctx = info.n_ctx;
    out->kv_block_size = info.block_size;
    out->kv_blocks = info.n_blocks;
    out->kv_bytes = info.kv_bytes;
    out->kv_bytes_per_token = info.kv_bytes_per_token;
    out->kv_type = kv_type_name(info.kv_type);
    out->full_context_seqs = info.full_context_seqs;
    out->kv_sizing = kv_sizing_name((enum kv_sizing)info.kv_sizing);
    out->kv_mem_fraction = info.kv_mem_fraction;
    out->mem_available = info.mem_available;
    out->weight_bytes = info.weight_bytes;
}

void cinfer_engine_spec_stats(const struct cinfer_engine *e, struct cinfer_spec_stats *out) {
    struct engine_totals t;
    engine_totals(e->e, &t);
    out->draft_tokens = t.spec_draft_tokens;
    out->accepted_tokens = t.spec_accepted_tokens;
    out->decode_steps = t.decode_seq_steps;
    out->decode_tokens = t.decode_emitted;
}

bool cinfer_engine_step(struct cinfer_engine *e) {
    return engine_step(e->e);
}

static int grammar_front(enum cinfer_grammar_kind k) {
    return k == CINFER_GRAMMAR_JSON_SCHEMA ? GRAM_FRONT_JSON_SCHEMA
           : k == CINFER_GRAMMAR_REGEX     ? GRAM_FRONT_REGEX
           : k == CINFER_GRAMMAR_GBNF      ? GRAM_FRONT_GBNF
                                           : GRAM_FRONT_COUNT; // refused by the cache
}

enum cinfer_status cinfer_engine_check_grammar(struct cinfer_engine *e, const char *grammar,
                                               struct cinfer_error *err) {
    return cinfer_engine_check_grammar_kind(e, CINFER_GRAMMAR_GBNF, grammar, err);
}

enum cinfer_status cinfer_engine_check_grammar_kind(struct cinfer_engine *e, enum cinfer_grammar_kind kind,
                                                    const char *text, struct cinfer_error *err) {
    struct ci_err ce = {0};
    if (engine_check_grammar(e->e, grammar_front(kind), text, strlen(text), &ce) != CI_OK)
        return api_fail(err, &ce);
    return CINFER_OK;
}

enum cinfer_status cinfer_json_schemas_gbnf(const char *const *schemas, int n, char **out, size_t *len,
                                            struct cinfer_error *err) {
    struct ci_err ce = {0};
    struct gtext t = {0};
    size_t *lens = n > 0 ? ci_calloc((size_t)n, sizeof *lens) : NULL;
    *out = NULL;
    *len = 0;
    if (n > 0 && !lens) {
        ci_err_set(&ce, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &ce);
    }
    for (int i = 0; i < n; i++)
        lens[i] = strlen(schemas[i]);
    enum ci_status st = gram_json_schemas_gbnf(schemas, lens, n, &t, &ce);
    ci_free(lens);
    if (st != CI_OK) {
        gtext_free(&t);
        return api_fail(err, &ce);
    }
    if (!t.s) { // no schema: an empty text
        ci_free(t.s);
        t.s = ci_calloc(1, 1);
        if (!t.s) {
            ci_err_set(&ce, CI_ERR_NOMEM, "out of memory");
            return api_fail(err, &ce);
        }
    }
    *out = t.s;
    *len = t.n;
    return CINFER_OK;
}

void cinfer_request_options_default(struct cinfer_request_options *o) {
    struct cinfer_generate_params g;
    cinfer_generate_params_default(&g);
    memset(o, 0, sizeof *o);
    o->max_tokens = g.max_tokens;
    o->n = 1;
    o->sampling = g.sampling;
    o->logprobs = -1; // none: computing them is a pass over the vocabulary per token
}

enum cinfer_status cinfer_engine_submit(struct cinfer_engine *e, const cinfer_token *prompt, int n_prompt,
                                        const struct cinfer_request_options *o, struct cinfer_stream **out,
                                        struct cinfer_error *err) {
    struct ci_err ce = {0};
    *out = NULL;
    struct engine_request_params rp = {0};
    rp.prompt = prompt;
    rp.n_prompt = n_prompt;
    rp.max_tokens = o->max_tokens;
    rp.n = o->n;
    rp.sampling = sampling_from(&o->sampling);
    rp.stop = o->stop;
    rp.n_stop = o->n_stop;
    rp.ignore_eos = o->ignore_eos;
    rp.want_text = true;
    rp.render_special = o->render_special;
    rp.logprobs = o->logprobs;
    rp.spec_k = o->spec_k;
    if (o->grammar && o->grammar[0]) {
        rp.grammar = o->grammar;
        rp.grammar_len = strlen(o->grammar);
        rp.grammar_front = grammar_front(o->grammar_kind);
    }
    if (o->think_end && o->think_end[0]) {
        rp.think_start = o->think_start;
        rp.think_end = o->think_end;
        rp.think_budget = o->think_budget;
        rp.think_open = o->think_open;
    }
    rp.sampling.logit_bias = (const struct sampling_logit_bias *)o->logit_bias;
    rp.sampling.n_logit_bias = o->n_logit_bias;
    if (o->embedding) {
        const char *pool = o->pooling ? o->pooling : e->pooling;
        if (!pool || !cinfer_pooling_known(pool)) {
            ci_err_set(&ce, CI_ERR_INVALID, "%s",
                       pool ? "unknown pooling (mean, cls, last)" : e->pooling_why);
            return api_fail(err, &ce);
        }
        rp.pooling = strcmp(pool, "mean") == 0  ? ENGINE_POOLING_MEAN
                     : strcmp(pool, "cls") == 0 ? ENGINE_POOLING_CLS
                                                : ENGINE_POOLING_LAST;
        rp.max_tokens = 0;
        rp.n = 1;
        rp.stop = NULL;
        rp.n_stop = 0;
        rp.logprobs = -1;
        rp.grammar = NULL;
        rp.grammar_len = 0;
        rp.sampling.logit_bias = NULL;
        rp.sampling.n_logit_bias = 0;
    }
    // The text buffer is allocated here, at admission: an event's text joins into it without allocating
    // unless it is longer than STREAM_TEXT_CAP (cinfer_stream_next's CINFER_ERR_NOMEM).
    struct cinfer_stream *s = ci_calloc(1, sizeof *s);
    char *text = ci_malloc(STREAM_TEXT_CAP);
    if (!s || !text) {
        ci_free(s);
        ci_free(text);
        ci_err_set(&ce, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &ce);
    }
    s->text = text;
    s->cap = STREAM_TEXT_CAP;
    if (engine_submit(e->e, &rp, &s->r, &ce) != CI_OK) {
        ci_free(s->text);
        ci_free(s);
        return api_fail(err, &ce);
    }
    struct engine_info info;
    engine_info(e->e, &info);
    s->kv_bytes_per_token = info.kv_bytes_per_token;
    s->logprobs = o->logprobs;
    *out = s;
    return CINFER_OK;
}

static bool append_text(struct cinfer_stream *s, size_t *len, const char *text, size_t n) {
    if (*len + n + 1 > s->cap) {
        size_t cap = (*len + n + 1) * 2;
        char *grown = ci_realloc(s->text, cap);
        if (!grown)
            return false;
        s->text = grown;
        s->cap = cap;
    }
    memcpy(s->text + *len, text, n);
    *len += n;
    s->text[*len] = '\0';
    return true;
}

enum cinfer_status cinfer_stream_next(struct cinfer_stream *s, int sample, struct cinfer_event *ev,
                                      int64_t timeout_ns) {
    if (sample < 0 || sample >= engine_request_n(s->r))
        return CINFER_ERR_INVALID;
    struct ci_channel *ch = engine_request_channel(s->r, sample);
    struct ci_event e;
    size_t len = 0;
    enum ci_status st;
    // An event's text may come in several pieces (F_MORE): join them into one cinfer_event.
    while ((st = ci_channel_recv(ch, &e, len ? -1 : timeout_ns)) == CI_OK) {
        if (!append_text(s, &len, e.text, e.n_text))
            return CINFER_ERR_NOMEM;
        if (!(e.flags & CI_EVENT_F_MORE))
            break;
    }
    if (st != CI_OK)
        return (enum cinfer_status)st;
    ev->kind = (enum cinfer_event_kind)e.kind;
    ev->token = e.kind == CI_EVENT_TOKEN ? e.token : -1;
    ev->text = s->text ? s->text : "";
    ev->len = len;
    ev->finish_reason = e.kind >= CI_EVENT_DONE ? engine_finish_str((enum engine_finish)e.finish) : NULL;
    ev->logprob = e.logprob;
    ev->top_tokens = NULL;
    ev->top_logprobs = NULL;
    ev->n_top = 0;
    if (e.kind == CI_EVENT_TOKEN) {
        int k = s->n_tokens[sample]++;
        const struct request_metrics *mt = engine_request_metrics(s->r, sample);
        if (s->logprobs > 0 && mt->top_ids) { // row k was written before the event was sent
            ev->top_tokens = mt->top_ids + (size_t)k * (size_t)s->logprobs;
            ev->top_logprobs = mt->top_logprob + (size_t)k * (size_t)s->logprobs;
            ev->n_top = s->logprobs;
        }
    }
    return CINFER_OK;
}

enum cinfer_status cinfer_engine_metrics(const struct cinfer_engine *e, char **text, size_t *len) {
    for (size_t cap = 16384; cap <= (1u << 24); cap *= 2) {
        char *buf = ci_malloc(cap);
        if (!buf)
            return CINFER_ERR_NOMEM;
        if (engine_metrics_text(e->e, buf, cap, len)) {
            *text = buf;
            return CINFER_OK;
        }
        ci_free(buf);
    }
    return CINFER_ERR_INTERNAL;
}

void cinfer_stream_cancel(struct cinfer_stream *s) {
    engine_request_cancel(s->r);
}

void cinfer_stream_set_notify(struct cinfer_stream *s, void (*fn)(void *ctx), void *ctx) {
    for (int i = 0; i < engine_request_n(s->r); i++)
        ci_channel_set_notify(engine_request_channel(s->r, i), fn, ctx);
}

enum cinfer_status cinfer_stream_embedding(const struct cinfer_stream *s, const float **v, int *n) {
    *v = engine_request_embedding(s->r, n);
    return *v ? CINFER_OK : CINFER_ERR_INVALID;
}

void cinfer_stream_stats(const struct cinfer_stream *s, int sample, struct cinfer_generate_stats *out) {
    const struct request_metrics *m = engine_request_metrics(s->r, sample);
    memset(out, 0, sizeof *out);
    double gaps[1];
    struct token_timing tt;
    double *scratch = m->n_output > 1 ? ci_malloc((size_t)m->n_output * sizeof(double)) : gaps;
    if (scratch)
        metrics_token_timing(m->t_arrival_ns, m->t_token_ns, m->n_output, scratch, &tt);
    else
        memset(&tt, 0, sizeof tt);
    if (scratch != gaps)
        ci_free(scratch);
    stats_fill(out, m->n_prompt, m->n_output, &tt,
               (uint64_t)((int64_t)(m->n_prompt + m->n_output) * s->kv_bytes_per_token),
               engine_finish_str(m->finish));
}

void cinfer_stream_release(struct cinfer_stream *s) {
    if (!s)
        return;
    cinfer_stream_set_notify(s, NULL, NULL); // the engine may still close the channels after this
    engine_request_release(s->r);
    ci_free(s->text);
    ci_free(s);
}
