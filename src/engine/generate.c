#include "engine/generate.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "engine/kv_pool.h"
#include "engine/metrics.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"

struct gen_params gen_params_default(void) {
    struct gen_params p = {0};
    p.n_threads = 2;
    p.block_size = 16;
    p.max_batch = 512;
    p.max_tokens = 128;
    p.sampling = sampling_params_default();
    return p;
}

const char *gen_finish_str(enum gen_finish f) {
    switch (f) {
    case GEN_FINISH_LENGTH:
        return "length";
    case GEN_FINISH_STOP:
        return "stop";
    case GEN_FINISH_CALLER:
        return "caller";
    }
    return "unknown";
}

static bool is_stop(const struct gen_params *p, int32_t tok) {
    for (int i = 0; i < p->n_stop_tokens; i++)
        if (p->stop_tokens[i] == tok)
            return true;
    return false;
}

static void finish_metrics(struct gen_metrics *mt, int64_t t0, const int64_t *t_tok, int n, double *gaps) {
    metrics_token_timing(t0, t_tok, n, gaps, &mt->timing);
    mt->n_generated = n;
}

enum ci_status generate(const struct model *m, const int32_t *prompt, int n_prompt,
                        const struct gen_params *p, gen_token_fn on_token, void *user, struct gen_metrics *mt,
                        struct ci_err *err) {
    const struct model_config *c = &m->config;
    memset(mt, 0, sizeof *mt);
    mt->n_prompt = n_prompt;
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    int block_size = p->block_size > 0 ? p->block_size : 16;
    int max_batch = p->max_batch > 0 ? p->max_batch : 512;
    if (n_prompt < 1)
        return ci_err_set(err, CI_ERR_INVALID, "the prompt must hold at least one token");
    if (p->max_tokens < 0)
        return ci_err_set(err, CI_ERR_INVALID, "max_tokens must not be negative");
    if ((int64_t)n_prompt + p->max_tokens > n_ctx)
        return ci_err_set(err, CI_ERR_LIMIT,
                          "prompt (%d tokens) + max_tokens (%d) exceeds the context length (%d tokens)",
                          n_prompt, p->max_tokens, n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->n_vocab)
            return ci_err_set(err, CI_ERR_INVALID, "prompt token %d: id %d outside the vocabulary [0, %d)", i,
                              prompt[i], c->n_vocab);

    int n_total = n_prompt + p->max_tokens;
    int max_blocks = (n_total + block_size - 1) / block_size;
    if (max_batch > n_prompt)
        max_batch = n_prompt;
    struct ci_threadpool *tp = NULL;
    struct kv_pool *pool = NULL;
    struct forward *fwd = NULL;
    struct sampler *smp = NULL;
    struct kv_seq_blocks table = {0};
    struct ci_kv_layer *layers = NULL;
    int32_t *history = NULL, *pos = NULL, *seqi = NULL;
    uint8_t *want = NULL;
    int64_t *t_tok = NULL;
    double *gaps = NULL;
    enum ci_status s;
    struct kv_pool_params pp = {c->n_layer, c->n_kv_head, c->head_dim, block_size, max_blocks, CI_TYPE_F32};
    if ((s = ci_threadpool_create(p->n_threads, &tp, err)) || (s = kv_pool_create(&pp, &pool, err)) ||
        (s = forward_create(m, max_batch, 1, tp, &fwd, err)) ||
        (s = sampler_create(&p->sampling, c->n_vocab, &smp, err)) ||
        (s = kv_seq_init(&table, max_blocks, err)))
        goto fail;
    forward_set_n_ctx(fwd, n_ctx); // Phi-3 LongRoPE: long or short factors by the context
    mt->kv_bytes = kv_pool_bytes(pool);
    layers = ci_calloc((size_t)c->n_layer, sizeof *layers);
    history = ci_calloc((size_t)n_total, sizeof *history);
    pos = ci_calloc((size_t)max_batch, sizeof *pos);
    seqi = ci_calloc((size_t)max_batch, sizeof *seqi);
    want = ci_calloc((size_t)max_batch, sizeof *want);
    t_tok = ci_calloc((size_t)p->max_tokens + 1, sizeof *t_tok);
    gaps = ci_calloc((size_t)p->max_tokens + 1, sizeof *gaps);
    if (!layers || !history || !pos || !seqi || !want || !t_tok || !gaps) {
        s = ci_err_set(err, CI_ERR_NOMEM, "generate: out of memory");
        goto fail;
    }
    for (int il = 0; il < c->n_layer; il++)
        kv_pool_layer(pool, il, &layers[il]);
    memcpy(history, prompt, (size_t)n_prompt * sizeof *prompt);

    int64_t t0 = ci_now_ns();
    int n_hist = n_prompt, n_gen = 0, n_done = 0; // n_done: positions whose K/V are in the cache
    mt->finish = GEN_FINISH_LENGTH;
    while (n_gen < p->max_tokens) {
        // Next batch: the rest of the prompt (up to max_batch), or the last sampled token.
        int from = n_done, count = n_hist - n_done;
        if (count > max_batch)
            count = max_batch;
        if ((s = kv_seq_reserve(pool, &table, from + count)) != CI_OK) {
            s = ci_err_set(err, CI_ERR_INTERNAL, "KV pool exhausted at position %d", from + count);
            goto fail;
        }
        for (int i = 0; i < count; i++) {
            pos[i] = from + i;
            seqi[i] = 0;
            want[i] = 0;
        }
        bool sample = from + count == n_hist;
        want[count - 1] = sample;
        struct ci_attn_seq aseq = {table.ids, table.n};
        struct fwd_batch b = {.n_tokens = count,
                              .token = history + from,
                              .pos = pos,
                              .seq = seqi,
                              .logits = want,
                              .n_seqs = 1,
                              .seqs = &aseq};
        const float *logits;
        int rows;
        if ((s = forward_batch(fwd, &b, layers, &logits, &rows, err)) != CI_OK)
            goto fail;
        n_done += count;
        if (!sample)
            continue;
        int32_t tok = sampler_sample(smp, logits, c->n_vocab, history, n_hist);
        t_tok[n_gen++] = ci_now_ns();
        history[n_hist++] = tok;
        bool stop = !p->ignore_eos && is_stop(p, tok);
        if (on_token && !on_token(user, tok, stop)) {
            mt->finish = GEN_FINISH_CALLER;
            break;
        }
        if (stop) {
            mt->finish = GEN_FINISH_STOP;
            break;
        }
    }
    finish_metrics(mt, t0, t_tok, n_gen, gaps);
    s = CI_OK;
fail:
    if (table.ids)
        kv_seq_release(pool, &table);
    kv_seq_deinit(&table);
    ci_free(layers);
    ci_free(history);
    ci_free(pos);
    ci_free(seqi);
    ci_free(want);
    ci_free(t_tok);
    ci_free(gaps);
    sampler_free(smp);
    forward_free(fwd);
    kv_pool_free(pool);
    ci_threadpool_free(tp);
    return s;
}
