/* The Jinja chat-template part of include/cinfer.h, over chat/jinja.c. */
#include <cjson/cJSON.h>
#include <string.h>

#include "chat/jinja.h"
#include "cinfer.h"
#include "core/mem.h"
#include "engine/api_model.h"
#include "tokenizer/tokenizer.h"

enum cinfer_status cinfer_template_parse(const char *src, size_t len, struct cinfer_template **out,
                                         struct cinfer_error *err) {
    struct ci_err e = {0};
    struct jinja_template *t = NULL;
    if (jinja_template_parse(src, len, &t, &e) != CI_OK) {
        *out = NULL;
        return api_fail(err, &e);
    }
    *out = (struct cinfer_template *)t;
    return CINFER_OK;
}

void cinfer_template_free(struct cinfer_template *t) {
    jinja_template_free((struct jinja_template *)t);
}

/* The text of a special token as llama.cpp's common_token_to_piece(special = true) gives it; "" if absent. */
static const char *token_text(const struct cinfer_model *m, int32_t id, size_t *len) {
    *len = 0;
    if (!m || !m->tok || id < 0)
        return "";
    const char *p = tokenizer_piece(m->tok, id, len);
    return p ? p : "";
}

static bool add_token(cJSON *ctx, const char *key, const char *text, size_t len) {
    if (cJSON_GetObjectItemCaseSensitive(ctx, key))
        return true; // the caller's own value wins
    char *s = ci_malloc(len + 1);
    if (!s)
        return false;
    memcpy(s, text, len);
    s[len] = '\0';
    bool ok = cJSON_AddStringToObject(ctx, key, s) != NULL;
    ci_free(s);
    return ok;
}

enum cinfer_status cinfer_template_render(const struct cinfer_template *t, const struct cinfer_model *m,
                                          const char *context_json, size_t len, char **out, size_t *out_len,
                                          struct cinfer_error *err) {
    struct ci_err e = {0};
    *out = NULL;
    if (out_len)
        *out_len = 0;
    cJSON *ctx = context_json && len ? cJSON_ParseWithLength(context_json, len) : cJSON_CreateObject();
    if (!ctx || !cJSON_IsObject(ctx)) {
        cJSON_Delete(ctx);
        ci_err_set(&e, CI_ERR_INVALID, "the template context is not a JSON object");
        return api_fail(err, &e);
    }
    size_t bos_len = 0, eos_len = 0;
    const char *bos = token_text(m, m && m->tok ? tokenizer_bos(m->tok) : -1, &bos_len);
    const char *eos = token_text(m, m && m->tok ? tokenizer_eos(m->tok) : -1, &eos_len);
    if (m && (!add_token(ctx, "bos_token", bos, bos_len) || !add_token(ctx, "eos_token", eos, eos_len))) {
        cJSON_Delete(ctx);
        ci_err_set(&e, CI_ERR_NOMEM, "out of memory");
        return api_fail(err, &e);
    }
    char *text = NULL;
    size_t n = 0;
    enum ci_status s = jinja_render((const struct jinja_template *)t, ctx, NULL, &text, &n, &e);
    cJSON_Delete(ctx);
    if (s != CI_OK)
        return api_fail(err, &e);
    // As llama.cpp (common_chat_template_direct_apply): a template that writes the BOS text itself loses it
    // when tokenization adds BOS, and the EOS text at the end likewise, so the prompt holds one BOS.
    size_t start = 0;
    if (m && m->tok && tokenizer_add_bos(m->tok) && bos_len && n >= bos_len && !memcmp(text, bos, bos_len))
        start = bos_len;
    if (m && m->tok && tokenizer_add_eos(m->tok) && eos_len && n - start >= eos_len &&
        !memcmp(text + n - eos_len, eos, eos_len))
        n -= eos_len;
    if (start)
        memmove(text, text + start, n - start);
    n -= start;
    text[n] = '\0';
    *out = text;
    if (out_len)
        *out_len = n;
    return CINFER_OK;
}
