/* The Jinja interpreter: renders a parsed template (jinja_parse.h) with @huggingface/jinja's semantics —
 * scopes (a for loop's body and a macro's body get their own; `set` elsewhere writes the current one; macros
 * see the caller's variables), `loop.*`, break/continue (an interrupted iteration's output is dropped),
 * macros and call blocks, filter blocks, and the operators (`==` is JavaScript's loose equality on the
 * values, `in` its strict one; undefined operands are errors except for `==`, `!=`, `and`, `or`, `not`,
 * `in`).  The filters, tests, methods and globals are in jinja_builtins.c.
 *
 * Bounds (struct jctx): the output size, the number of evaluation steps (a hostile template cannot loop
 * forever), the evaluation depth (macro recursion, nesting) and the arena's memory. */
#ifndef CINFER_CHAT_JINJA_EVAL_H
#define CINFER_CHAT_JINJA_EVAL_H

#include "chat/jinja_parse.h"

struct jenv *jenv_new(struct jctx *c, struct jenv *parent);
void jenv_set(struct jctx *c, struct jenv *e, struct jstr name, struct jv v);
struct jv jenv_lookup(const struct jenv *e, struct jstr name);

struct jv jinja_eval(struct jinterp *I, const struct jnode *x, struct jenv *env);
/* A call's arguments: the positional ones in order, then (when there are any) the keyword ones as one
 * JV_KWARGS value at the end, as @huggingface/jinja passes them. */
struct jv jinja_eval_args(struct jinterp *I, const struct jnode *const *args, size_t n, struct jenv *env,
                          struct jv *kwargs_out, int line);
/* Calls fn with args (a JV_ARRAY, keyword arguments last as JV_KWARGS); scope is the caller's. */
struct jv jinja_call(struct jinterp *I, struct jv fn, struct jv args, struct jenv *scope, int line);
/* Renders the program into out. */
void jinja_run(struct jinterp *I, const struct jnode *prog, struct jbuf *out);

#endif
