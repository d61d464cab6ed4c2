#include "model/model.h"

#include <stdio.h>
#include <string.h>

#include "core/mapfile.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "format/llama2c.h"

static const struct ci_tensor *gguf_lookup(const void *src, const char *name) {
    const struct gguf *g = src;
    int64_t i = gguf_find_tensor(g, name);
    return i < 0 ? NULL : gguf_tensor(g, i);
}

static const struct ci_tensor *gguf_tensor_at(const void *src, int64_t i) {
    return gguf_tensor(src, i);
}

static enum ci_status sniff_gguf(const char *path, bool *is_gguf, uint64_t *size, struct ci_err *err) {
    struct ci_mapfile mf;
    enum ci_status s = ci_mapfile_open_ex(&mf, path, false, err); // 4 bytes read
    if (s != CI_OK)
        return s;
    *is_gguf = mf.size >= 4 && !memcmp(mf.data, "GGUF", 4);
    *size = mf.size;
    ci_mapfile_close(&mf);
    return CI_OK;
}

enum ci_status model_load(const char *path, struct model **out, struct ci_err *err) {
    return model_load_ex(path, true, out, err);
}

static uint64_t read_ahead_tensor(const struct model *m, const struct ci_tensor *t) {
    if (!t->data || !t->nbytes)
        return 0;
    gguf_will_need(m->gguf, t->data, t->nbytes);
    return t->nbytes;
}

uint64_t model_read_ahead(const struct model *m) {
    if (m->format != MODEL_FORMAT_GGUF)
        return 0;
    const struct model_weights *w = &m->weights;
    const struct ci_tensor *top[] = {&w->tok_embd,  &w->output_norm, &w->rope_freqs,
                                     &w->rope_long, &w->rope_short,  &w->pos_embd,
                                     &w->type_embd, &w->tok_norm,    &w->tok_norm_b};
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        n += read_ahead_tensor(m, top[i]);
    if (w->output.data != w->tok_embd.data)
        n += read_ahead_tensor(m, &w->output);
    // Every member of struct layer_weights is a tensor (weights.h): walked as an array, absent ones skipped.
    size_t per_layer = sizeof(struct layer_weights) / sizeof(struct ci_tensor);
    for (int il = 0; il < m->config.n_layer; il++) {
        const struct ci_tensor *all = (const struct ci_tensor *)(const void *)&w->layers[il];
        for (size_t i = 0; i < per_layer; i++)
            n += read_ahead_tensor(m, &all[i]);
    }
    return n;
}

enum ci_status model_load_ex(const char *path, bool read_ahead, struct model **out, struct ci_err *err) {
    *out = NULL;
    struct model *m = ci_calloc(1, sizeof *m);
    if (!m)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    if (pthread_mutex_init(&m->pack.gate, NULL) != 0) {
        ci_free(m);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    if (pthread_cond_init(&m->pack.changed, NULL) != 0) {
        pthread_mutex_destroy(&m->pack.gate);
        ci_free(m);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    m->read_whole = true; // a llama2.c file is read ahead at open; a GGUF file as asked (below)
    bool is_gguf = false;
    enum ci_status s = sniff_gguf(path, &is_gguf, &m->file_bytes, err);
    if (s != CI_OK)
        goto fail;
    if (is_gguf) {
        m->format = MODEL_FORMAT_GGUF;
        m->read_whole = read_ahead;
        if ((s = gguf_open_ex(path, read_ahead, &m->gguf, err)) != CI_OK)
            goto fail;
        if (gguf_n_tensors(m->gguf) == 0) {
            s = ci_err_set(err, CI_ERR_FORMAT, "%s: vocab-only GGUF file (no tensors): not a model", path);
            goto fail;
        }
        if ((s = model_config_from_gguf(&m->config, m->gguf, err)) != CI_OK)
            goto fail;
        if ((s = model_weights_bind(&m->weights, &m->config, gguf_lookup, m->gguf, err)) != CI_OK)
            goto fail;
        s = model_weights_check_all_used(&m->weights, &m->config, gguf_tensor_at, m->gguf,
                                         gguf_n_tensors(m->gguf), err);
    } else {
        m->format = MODEL_FORMAT_LLAMA2C;
        if ((s = llama2c_open(path, &m->llama2c, err)) != CI_OK)
            goto fail;
        model_config_from_llama2c(&m->config, m->llama2c);
        if ((s = model_config_validate(&m->config, err)) != CI_OK)
            goto fail;
        s = model_weights_bind(&m->weights, &m->config, llama2c_find_tensor, m->llama2c, err);
    }
    if (s != CI_OK)
        goto fail;
    *out = m;
    return CI_OK;
fail:
    model_free(m);
    return s;
}

void model_free(struct model *m) {
    if (!m)
        return;
    model_weights_deinit(&m->weights);
    ci_free_aligned(m->pack.first);
    ci_free_aligned(m->pack.later);
    pthread_cond_destroy(&m->pack.changed);
    pthread_mutex_destroy(&m->pack.gate);
    gguf_free(m->gguf);
    llama2c_free(m->llama2c);
    ci_free(m);
}

static void add_tensor(const struct ci_tensor *t, uint64_t *bytes, uint64_t *params) {
    if (!t->data)
        return;
    *bytes += t->nbytes;
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= (uint64_t)t->ne[d];
    *params += n;
}

static void totals(const struct model *m, uint64_t *bytes, uint64_t *params) {
    const struct model_weights *w = &m->weights;
    *bytes = *params = 0;
    add_tensor(&w->tok_embd, bytes, params);
    add_tensor(&w->output_norm, bytes, params);
    add_tensor(&w->rope_freqs, bytes, params);
    add_tensor(&w->rope_long, bytes, params);
    add_tensor(&w->rope_short, bytes, params);
    if (w->output.data != w->tok_embd.data)
        add_tensor(&w->output, bytes, params);
    // Every member of struct layer_weights is a tensor (weights.h): walked as an array, absent ones skipped.
    size_t per_layer = sizeof(struct layer_weights) / sizeof(struct ci_tensor);
    for (int il = 0; il < m->config.n_layer; il++) {
        const struct ci_tensor *all = (const struct ci_tensor *)&w->layers[il];
        for (size_t i = 0; i < per_layer; i++)
            add_tensor(&all[i], bytes, params);
    }
}

uint64_t model_weight_bytes(const struct model *m) {
    uint64_t b, p;
    totals(m, &b, &p);
    return b;
}

uint64_t model_n_params(const struct model *m) {
    uint64_t b, p;
    totals(m, &b, &p);
    return p;
}

bool model_file_damaged(const struct model *m) {
    return (m->gguf && gguf_file_damaged(m->gguf)) || (m->llama2c && llama2c_file_damaged(m->llama2c));
}
