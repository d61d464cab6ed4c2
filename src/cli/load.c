#include "cli/load.h"

#include <stdio.h>

#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

bool load_model(const char *model_path, const char *tok_path, bool need_tok, struct loaded *out) {
    out->model = NULL;
    out->tok = NULL;
    struct ci_err err = {0};
    if (model_load(model_path, &out->model, &err) != CI_OK) {
        fprintf(stderr, "cinfer: %s\n", err.msg);
        return false;
    }
    enum ci_status s = CI_OK;
    if (tok_path)
        s = tokenizer_from_llama2c(tok_path, 0, &out->tok, &err); // size checked below
    else if (out->model->gguf && gguf_find_key(out->model->gguf, "tokenizer.ggml.model") >= 0)
        s = tokenizer_from_gguf(out->model->gguf, &out->tok, &err);
    if (s != CI_OK) {
        fprintf(stderr, "cinfer: tokenizer: %s\n", err.msg);
        unload_model(out);
        return false;
    }
    if (out->tok && tokenizer_n_vocab(out->tok) != out->model->config.n_vocab) {
        fprintf(stderr, "cinfer: tokenizer has %d tokens but the model's vocabulary is %d\n",
                tokenizer_n_vocab(out->tok), out->model->config.n_vocab);
        unload_model(out);
        return false;
    }
    if (!out->tok && need_tok) {
        fprintf(stderr, "cinfer: %s has no tokenizer: give --tokenizer tokenizer.bin\n", model_path);
        unload_model(out);
        return false;
    }
    return true;
}

bool load_tokenizer(const char *model_path, const char *tok_path, struct loaded *out) {
    out->model = NULL;
    out->tok = NULL;
    struct ci_err err = {0};
    struct gguf *g = NULL;
    enum ci_status s;
    if (tok_path)
        s = tokenizer_from_llama2c(tok_path, 0, &out->tok, &err);
    else if ((s = gguf_open(model_path, &g, &err)) == CI_OK)
        s = tokenizer_from_gguf(g, &out->tok, &err);
    gguf_free(g);
    if (s != CI_OK)
        fprintf(stderr, "cinfer: %s\n", err.msg);
    return s == CI_OK;
}

void unload_model(struct loaded *ld) {
    tokenizer_free(ld->tok);
    model_free(ld->model);
    ld->tok = NULL;
    ld->model = NULL;
}
