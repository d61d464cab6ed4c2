/* Jinja values and the memory they live in: the arena of one parse or one render, the string builder, the
 * value types (undefined, none, bool, int, float, string, list, dict, namespace, callable), their rendering as
 * text and as JSON (the `tojson` filter), and the conversion from cJSON.
 *
 * The semantics are @huggingface/jinja's (the renderer transformers.js and the Hub use, and the reference the
 * tests compare against): e.g. none renders as "", true as "true", a float with no fraction as "2.0" but as
 * "2" inside JSON, lists and dicts as JSON with ", " and ": " separators, JSON numbers with no fraction are
 * integers.
 *
 * Memory: everything a parse or a render allocates comes from one arena (struct jctx), freed at once by
 * jctx_free; no value is freed on its own.  The arena is bounded (jctx.mem_limit): an allocation past the
 * bound fails the render like any error.  Errors unwind with longjmp to the jctx_try point of the caller
 * (jinja.c), so no function here returns an error code; jctx_fail never returns. */
#ifndef CINFER_CHAT_JINJA_VALUE_H
#define CINFER_CHAT_JINJA_VALUE_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

struct jchunk;
struct jctx {
    jmp_buf jb;
    struct jchunk *chunks;
    size_t used, mem_limit;
    char msg[256]; // the error, once jctx_fail ran
    int line;      // its template line (0: none)
    // render bounds and counters (jinja_eval.c)
    size_t out_limit;
    int64_t steps, step_limit;
    int depth, depth_limit;
};

void jctx_init(struct jctx *c, size_t mem_limit);
void jctx_free(struct jctx *c);
_Noreturn void jctx_fail(struct jctx *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *jalloc(struct jctx *c, size_t n); // zeroed, 8-byte aligned; fails the render past mem_limit

struct jstr {
    const char *p;
    size_t n;
};
struct jstr jstr_dup(struct jctx *c, const char *p, size_t n);
bool jstr_eq(struct jstr a, const char *s);

/* A growing byte buffer in the arena. */
struct jbuf {
    char *p;
    size_t n, cap;
    size_t limit; // 0: the arena's bound only
};
void jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n);
void jbuf_puts(struct jctx *c, struct jbuf *b, const char *s);
void jbuf_printf(struct jctx *c, struct jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct jstr jbuf_str(const struct jbuf *b);

enum jv_type {
    JV_UNDEF,
    JV_NULL,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_ARRAY,     // a list; .tuple marks a tuple (same behaviour)
    JV_OBJECT,    // a dict, in insertion order
    JV_NAMESPACE, // namespace(): attributes assignable with {% set ns.x = ... %}
    JV_KWARGS,    // the keyword arguments of a call, passed as the last argument
    JV_FUNC,
};

struct jarr;
struct jobj;
struct jfunc;
struct jv {
    enum jv_type t;
    bool tuple;
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr s;
        struct jarr *a;
        struct jobj *o; // JV_OBJECT, JV_NAMESPACE, JV_KWARGS
        struct jfunc *fn;
    } u;
};
struct jarr {
    struct jv *v;
    size_t n, cap;
};
struct jobj {
    struct jstr *k;
    struct jv *v;
    bool *kint; // k[i] is the decimal text of an integer key ({512: ...}, as jinja2 allows)
    size_t n, cap;
};

struct jv jv_undef(void);
struct jv jv_null(void);
struct jv jv_bool(bool b);
struct jv jv_int(int64_t i);
struct jv jv_float(double f);
/* An integer from a double (truncated), a float when it is out of int64's range or not finite. */
struct jv jv_int_of(double d);
struct jv jv_str(struct jstr s);
struct jv jv_cstr(struct jctx *c, const char *s);
struct jv jv_array(struct jctx *c, size_t cap);
struct jv jv_object(struct jctx *c, enum jv_type t); // JV_OBJECT, JV_NAMESPACE or JV_KWARGS
void jv_push(struct jctx *c, struct jv arr, struct jv x);
/* Sets key (replacing an existing one in place, else appending). */
void jv_set(struct jctx *c, struct jv obj, struct jstr key, struct jv x);
/* Sets an integer key (stored as its decimal text, marked as an integer). */
void jv_set_int_key(struct jctx *c, struct jv obj, int64_t key, struct jv x);
/* The i-th key as a value: a string, or an integer for an integer key. */
struct jv jv_key(struct jctx *c, struct jv obj, size_t i);
/* The value of key, or NULL. */
struct jv *jv_get(struct jv obj, struct jstr key);

const char *jv_type_name(enum jv_type t); // @huggingface/jinja's names: "StringValue", ...
bool jv_truthy(struct jv v);
bool jv_is_number(struct jv v); // int or float

/* The text {{ v }} renders (none and undefined: ""). */
void jv_render(struct jctx *c, struct jbuf *b, struct jv v);
/* A JavaScript number's text (String(x)): shortest round trip, exponent past 1e21 / below 1e-7. */
void jv_format_js_number(char *out, size_t size, double x);
/* The text of a primitive as JavaScript's String(value) gives it (the `~` and `+` operators): floats with no
 * fraction lose their ".0". */
void jv_render_js(struct jctx *c, struct jbuf *b, struct jv v);

struct jjson_opts {
    int indent; // 0: none
    bool ensure_ascii, sort_keys;
    const char *item_sep, *key_sep; // NULL: ", " / ": " (and "," with an indent)
    bool undefined_as_null;         // tojson: true; rendering a container as text: false ("undefined")
};
void jv_to_json(struct jctx *c, struct jbuf *b, struct jv v, const struct jjson_opts *o, int depth, int line);

/* A cJSON tree as a value (numbers with no fraction become integers, as in JavaScript). */
struct jv jv_from_cjson(struct jctx *c, const struct cJSON *j, int depth);

/* The interpreter's state, its scopes and its callables (jinja_eval.c runs them, jinja_builtins.c implements
 * the built-in ones). */
struct jnode;
struct jenv {
    struct jenv *parent;
    struct jv vars; // a JV_OBJECT
};

enum jctl { JCTL_NONE, JCTL_BREAK, JCTL_CONTINUE };

struct jinterp {
    struct jctx *c;
    struct jenv *global;
    enum jctl ctl;
};

enum jfunc_kind { JF_BUILTIN, JF_MACRO, JF_CALLER };
struct jfunc {
    enum jfunc_kind kind;
    int id;                   // JF_BUILTIN: which (jinja_builtins.c)
    struct jv self;           // JF_BUILTIN methods: the receiver
    const struct jnode *node; // JF_MACRO: the macro; JF_CALLER: the call block (jinja_parse.h)
    struct jenv *env;         // JF_CALLER: where the call block stands
};

/* A string's length in code points (JavaScript's Array.from(string).length). */
size_t jv_utf8_count(struct jstr s);

/* Whitespace as JavaScript's \s and String.prototype.trim see it, at p (n bytes left): its length in bytes,
 * 0 if p does not start with whitespace. */
size_t js_space_len(const char *p, size_t n);
size_t js_space_len_before(const char *p, size_t n); // the same for the character ending at p[n-1]

#endif
