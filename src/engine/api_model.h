/* The model half of the public API (api_model.c): struct cinfer_model, shared with api.c, which builds the
 * engine and generation on it.  Internal: embedders see only include/cinfer.h. */
#ifndef CINFER_ENGINE_API_MODEL_H
#define CINFER_ENGINE_API_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer.h"
#include "core/status.h"

struct model;
struct tokenizer;
struct dist;

struct cinfer_model {
    struct model *model;
    struct tokenizer *tok;
    char *name;          // general.name or the file name
    char *chat_template; // tokenizer.chat_template (NULL if absent)
    size_t chat_template_len;
    const int32_t *eog; // [n_eog] end-of-generation token ids (the tokenizer's)
    int n_eog;
    struct dist *dist; // tensor parallelism: model is this rank's shard (engine/dist.h); not owned
};

struct cinfer_tp {
    struct dist *d;
};

/* Copies e into out (may be NULL) and returns its code as a cinfer_status. */
enum cinfer_status api_fail(struct cinfer_error *out, const struct ci_err *e);

#endif
