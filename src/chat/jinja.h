/* Jinja chat templates: parse a template once (tokenizer.chat_template, a --chat-template-file), render it
 * many times with a JSON context ({"messages": [...], "add_generation_prompt": true, "bos_token": "<s>",
 * ...}), as @huggingface/jinja renders it (the semantics and the reference the tests compare against; see
 * jinja_lex.h for the whitespace rules, jinja_eval.h and jinja_builtins.h for the rest).
 *
 * Errors are returned, never raised: a syntax error at parse time, and at render time a type error, an
 * unknown filter or test, raise_exception's message, or a bound exceeded, each as "line N: message" with the
 * template line.  Rendering is bounded by struct jinja_limits (output size, steps, depth, memory), so a
 * hostile template cannot hang or exhaust memory.
 *
 * Ownership: a template is immutable once parsed, so one may be rendered by many threads at once; the
 * rendered text is ci_malloc'ed and NUL-terminated, released with ci_free. */
#ifndef CINFER_CHAT_JINJA_H
#define CINFER_CHAT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct cJSON;
struct jinja_template;

struct jinja_limits {
    size_t max_output; // bytes of rendered text
    size_t max_memory; // bytes of the render's arena (values, intermediate strings)
    int64_t max_steps; // statements, loop iterations and macro calls
    int max_depth;     // evaluation depth: nesting and macro recursion
};
/* 8 MiB of output, 256 MiB of memory, 10 million steps, depth 1000. */
struct jinja_limits jinja_limits_default(void);

enum ci_status jinja_template_parse(const char *src, size_t len, struct jinja_template **out,
                                    struct ci_err *err);
void jinja_template_free(struct jinja_template *t);

/* Renders t with the variables of context (a JSON object; NULL: none).  lim NULL: the defaults. */
enum ci_status jinja_render(const struct jinja_template *t, const struct cJSON *context,
                            const struct jinja_limits *lim, char **out, size_t *len, struct ci_err *err);

#endif
