/* include/cinfer.h on top of model/, tokenizer/ and engine/generate: the embedding entry point. */
#include "cinfer.h"

#include <string.h>

#include "core/mem.h"
#include "engine/generate.h"
#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

_Static_assert((int)CINFER_ERR_INTERNAL == (int)CI_ERR_INTERNAL, "cinfer_status mirrors ci_status");

struct cinfer_model {
    struct model *model;
    struct tokenizer *tok;
    int32_t *eog; // [n_eog] end-of-generation token ids
    int n_eog;
};

static enum cinfer_status fail(struct cinfer_error *out, const struct ci_err *e) {
    if (out) {
        out->code = (enum cinfer_status)e->code;
        memcpy(out->message, e->msg, sizeof out->message);
    }
    return (enum cinfer_status)e->code;
}

enum cinfer_status cinfer_model_load(const char *path, const char *tokenizer_path, struct cinfer_model **out,
                                     struct cinfer_error *err) {
    struct ci_err e = {0};
    *out = NULL;
    struct cinfer_model *m = ci_calloc(1, sizeof *m);
    if (!m) {
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return fail(err, &e);
    }
    enum ci_status s = model_load(path, &m->model, &e);
    if (s == CI_OK) {
        if (tokenizer_path)
            s = tokenizer_from_llama2c(tokenizer_path, 0, &m->tok,
                                       &e); // size checked below, with a clearer message
        else if (m->model->gguf)
            s = tokenizer_from_gguf(m->model->gguf, &m->tok, &e);
        else
            s = ci_err_set(&e, CI_ERR_INVALID, "%s: a llama2.c checkpoint needs its tokenizer.bin", path);
    }
    if (s == CI_OK && tokenizer_n_vocab(m->tok) != m->model->config.n_vocab)
        s = ci_err_set(&e, CI_ERR_FORMAT, "tokenizer has %d tokens but the model's vocabulary is %d",
                       tokenizer_n_vocab(m->tok), m->model->config.n_vocab);
    if (s == CI_OK) {
        int n_vocab = tokenizer_n_vocab(m->tok);
        for (int32_t id = 0; id < n_vocab; id++)
            m->n_eog += tokenizer_is_eog(m->tok, id);
        if (!(m->eog = ci_calloc((size_t)m->n_eog + 1, sizeof *m->eog)))
            s = ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        m->n_eog = 0;
        for (int32_t id = 0; m->eog && id < n_vocab; id++)
            if (tokenizer_is_eog(m->tok, id))
                m->eog[m->n_eog++] = id;
    }
    if (s != CI_OK) {
        cinfer_model_free(m);
        return fail(err, &e);
    }
    *out = m;
    return CINFER_OK;
}

void cinfer_model_free(struct cinfer_model *m) {
    if (!m)
        return;
    tokenizer_free(m->tok);
    model_free(m->model);
    ci_free(m->eog);
    ci_free(m);
}

void cinfer_model_info(const struct cinfer_model *m, struct cinfer_model_info *out) {
    const struct model_config *c = &m->model->config;
    out->arch = model_arch_name(c->arch);
    out->n_vocab = c->n_vocab;
    out->n_embd = c->n_embd;
    out->n_layer = c->n_layer;
    out->n_head = c->n_head;
    out->n_kv_head = c->n_kv_head;
    out->head_dim = c->head_dim;
    out->n_ff = c->n_ff;
    out->n_ctx_train = c->n_ctx_train;
    out->n_params = model_n_params(m->model);
    out->weight_bytes = model_weight_bytes(m->model);
    out->kv_bytes_per_token =
        2ull * (uint64_t)c->n_layer * (uint64_t)c->n_kv_head * (uint64_t)c->head_dim * 4;
}

enum cinfer_status cinfer_tokenize(const struct cinfer_model *m, const char *text, size_t len,
                                   bool add_special, cinfer_token **ids, int *n_ids,
                                   struct cinfer_error *err) {
    struct ci_err e = {0};
    if (tokenizer_encode(m->tok, text, len, add_special, true, ids, n_ids, &e) != CI_OK)
        return fail(err, &e);
    return CINFER_OK;
}

void cinfer_free(void *p) {
    ci_free(p);
}

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

struct stream {
    struct detok detok;
    cinfer_token_fn on_token;
    void *user;
};

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
    g.sampling.temperature = p->sampling.temperature;
    g.sampling.top_k = p->sampling.top_k;
    g.sampling.top_p = p->sampling.top_p;
    g.sampling.min_p = p->sampling.min_p;
    g.sampling.repetition_penalty = p->sampling.repetition_penalty;
    g.sampling.presence_penalty = p->sampling.presence_penalty;
    g.sampling.frequency_penalty = p->sampling.frequency_penalty;
    g.sampling.seed = p->sampling.seed;
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
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_prompt = mt.n_prompt;
        stats->n_generated = mt.n_generated;
        stats->ttft_ms = mt.ttft_ms;
        stats->tbt_ms = mt.tbt_mean_ms;
        stats->tbt_p50_ms = mt.tbt_p50_ms;
        stats->tbt_p99_ms = mt.tbt_p99_ms;
        stats->tps = mt.tps;
        stats->latency_ms = mt.latency_ms;
        stats->prefill_tps = mt.prefill_tps;
        stats->kv_bytes = mt.kv_bytes;
        stats->finish_reason = gen_finish_str(mt.finish);
    }
    if (detok_ready)
        detok_deinit(&st.detok);
    ci_free(ids);
    return s == CI_OK ? CINFER_OK : fail(err, &e);
}
