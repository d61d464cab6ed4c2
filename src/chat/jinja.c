/* Jinja chat templates: parse and render (see jinja.h). */
#include "chat/jinja.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "core/mem.h"

struct jinja_template {
    struct jctx ctx; // the arena holding the tree
    struct jnode *prog;
};

struct jinja_limits jinja_limits_default(void) {
    return (struct jinja_limits){
        .max_output = 8u << 20, .max_memory = 256u << 20, .max_steps = 10000000, .max_depth = 1000};
}

static enum ci_status fail(struct ci_err *err, const struct jctx *c, const char *what) {
    enum ci_status code = strstr(c->msg, "out of memory") ? CI_ERR_NOMEM : CI_ERR_INVALID;
    if (c->line > 0)
        return ci_err_set(err, code, "%s, line %d: %s", what, c->line, c->msg);
    return ci_err_set(err, code, "%s: %s", what, c->msg);
}

enum ci_status jinja_template_parse(const char *src, size_t len, struct jinja_template **out,
                                    struct ci_err *err) {
    *out = NULL;
    struct jinja_template *t = ci_calloc(1, sizeof *t);
    if (!t)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    if (len > (16u << 20)) {
        ci_free(t);
        return ci_err_set(err, CI_ERR_LIMIT, "the chat template is larger than 16 MiB");
    }
    jctx_init(&t->ctx, 64u << 20);
    if (setjmp(t->ctx.jb)) {
        enum ci_status s = fail(err, &t->ctx, "chat template syntax error");
        jctx_free(&t->ctx);
        ci_free(t);
        return s;
    }
    struct jtoks toks;
    jinja_lex(&t->ctx, src ? src : "", src ? len : 0, &toks);
    t->prog = jinja_parse(&t->ctx, &toks);
    *out = t;
    return CI_OK;
}

void jinja_template_free(struct jinja_template *t) {
    if (!t)
        return;
    jctx_free(&t->ctx);
    ci_free(t);
}

enum ci_status jinja_render(const struct jinja_template *t, const cJSON *context,
                            const struct jinja_limits *lim, char **out, size_t *len, struct ci_err *err) {
    *out = NULL;
    if (len)
        *len = 0;
    struct jinja_limits L = lim ? *lim : jinja_limits_default();
    struct jctx c;
    jctx_init(&c, L.max_memory);
    c.out_limit = L.max_output;
    c.step_limit = L.max_steps;
    c.depth_limit = L.max_depth;
    if (setjmp(c.jb)) {
        enum ci_status s = fail(err, &c, "chat template error");
        jctx_free(&c);
        return s;
    }
    struct jinterp I = {.c = &c};
    I.global = jenv_new(&c, NULL);
    jinja_globals(&I, I.global->vars);
    if (context) {
        if (!cJSON_IsObject(context))
            jctx_fail(&c, 0, "the context is not a JSON object");
        for (const cJSON *e = context->child; e; e = e->next)
            if (e->string)
                jenv_set(&c, I.global, jstr_dup(&c, e->string, strlen(e->string)), jv_from_cjson(&c, e, 0));
    }
    struct jbuf b = {.limit = L.max_output};
    jinja_run(&I, t->prog, &b);
    char *s = ci_malloc(b.n + 1);
    if (!s) {
        jctx_free(&c);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    if (b.n)
        memcpy(s, b.p, b.n);
    s[b.n] = '\0';
    *out = s;
    if (len)
        *len = b.n;
    jctx_free(&c);
    return CI_OK;
}
