/* The Jinja interpreter (see jinja_eval.h); its structure follows @huggingface/jinja's runtime.ts. */
#include "chat/jinja_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_builtins.h"

struct jenv *jenv_new(struct jctx *c, struct jenv *parent) {
    struct jenv *e = jalloc(c, sizeof *e);
    e->parent = parent;
    e->vars = jv_object(c, JV_OBJECT);
    return e;
}

void jenv_set(struct jctx *c, struct jenv *e, struct jstr name, struct jv v) {
    jv_set(c, e->vars, name, v);
}

struct jv jenv_lookup(const struct jenv *e, struct jstr name) {
    for (; e; e = e->parent) {
        struct jv *v = jv_get(e->vars, name);
        if (v)
            return *v;
    }
    return jv_undef();
}

static void step(struct jinterp *I, int line) {
    if (++I->c->steps > I->c->step_limit)
        jctx_fail(I->c, line, "the template ran more than %lld steps", (long long)I->c->step_limit);
}

static void enter(struct jinterp *I, int line) {
    if (++I->c->depth > I->c->depth_limit)
        jctx_fail(I->c, line, "the template nests or recurses deeper than %d", I->c->depth_limit);
}

static void render_block(struct jinterp *I, struct jnode *const *list, size_t n, struct jenv *env,
                         struct jbuf *out);

/* ---- equality ------------------------------------------------------------------------------------------- */

static bool is_container(struct jv v) {
    return v.t == JV_ARRAY || v.t == JV_OBJECT || v.t == JV_NAMESPACE || v.t == JV_KWARGS || v.t == JV_FUNC;
}

static double js_to_number(struct jv v) {
    switch (v.t) {
    case JV_INT:
        return (double)v.u.i;
    case JV_FLOAT:
        return v.u.f;
    case JV_BOOL:
        return v.u.b;
    case JV_STR: {
        const char *p = v.u.s.p;
        size_t n = v.u.s.n, w;
        while (n && (w = js_space_len(p, n)) > 0)
            p += w, n -= w;
        while (n && (w = js_space_len_before(p, n)) > 0)
            n -= w;
        if (!n)
            return 0;
        char tmp[64];
        if (n >= sizeof tmp)
            return NAN;
        memcpy(tmp, p, n);
        tmp[n] = '\0';
        char *end;
        double d = strtod(tmp, &end);
        if (*end || strchr(tmp, 'x') || strchr(tmp, 'X') || strchr(tmp, 'n') || strchr(tmp, 'N'))
            return strcmp(tmp, "Infinity") == 0 ? INFINITY : strcmp(tmp, "-Infinity") == 0 ? -INFINITY : NAN;
        return d;
    }
    default:
        return NAN;
    }
}

static bool same_str(struct jstr a, struct jstr b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static bool container_same(struct jv a, struct jv b) {
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_ARRAY:
        return a.u.a == b.u.a;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    default:
        return a.u.o == b.u.o;
    }
}

/* JavaScript's === on the values. */
static bool strict_eq(struct jv a, struct jv b) {
    if (jv_is_number(a) && jv_is_number(b))
        return js_to_number(a) == js_to_number(b);
    if (is_container(a) || is_container(b))
        return container_same(a, b);
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NULL:
        return true;
    case JV_BOOL:
        return a.u.b == b.u.b;
    case JV_STR:
        return same_str(a.u.s, b.u.s);
    default:
        return false;
    }
}

/* JavaScript's == on the values. */
static bool loose_eq(struct jinterp *I, struct jv a, struct jv b) {
    bool an = a.t == JV_UNDEF || a.t == JV_NULL, bn = b.t == JV_UNDEF || b.t == JV_NULL;
    if (an || bn)
        return an && bn;
    if (is_container(a) && is_container(b))
        return container_same(a, b);
    if (is_container(a) || is_container(b)) { // ToPrimitive: the object's string
        struct jbuf t = {0};
        jv_render_js(I->c, &t, is_container(a) ? a : b);
        struct jv s = jv_str(jbuf_str(&t));
        return loose_eq(I, is_container(a) ? s : a, is_container(a) ? b : s);
    }
    if (a.t == JV_STR && b.t == JV_STR)
        return same_str(a.u.s, b.u.s);
    return js_to_number(a) == js_to_number(b);
}

/* ---- operators ------------------------------------------------------------------------------------------ */

static bool num_like(struct jv v) {
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static struct jv concat(struct jinterp *I, struct jv a, struct jv b) {
    struct jbuf t = {0};
    jv_render_js(I->c, &t, a);
    jv_render_js(I->c, &t, b);
    return jv_str(jbuf_str(&t));
}

static bool str_contains(struct jstr hay, struct jstr needle) {
    if (!needle.n)
        return true;
    if (needle.n > hay.n)
        return false;
    for (size_t i = 0; i + needle.n <= hay.n; i++)
        if (memcmp(hay.p + i, needle.p, needle.n) == 0)
            return true;
    return false;
}

static struct jv arith(struct jinterp *I, const char *op, struct jv l, struct jv r, int line) {
    bool fl = l.t == JV_FLOAT || r.t == JV_FLOAT;
    if (!fl && (op[0] == '+' || op[0] == '-' || op[0] == '*') && !op[1]) {
        int64_t res;
        bool ovf = op[0] == '+'   ? __builtin_add_overflow(l.u.i, r.u.i, &res)
                   : op[0] == '-' ? __builtin_sub_overflow(l.u.i, r.u.i, &res)
                                  : __builtin_mul_overflow(l.u.i, r.u.i, &res);
        if (!ovf)
            return jv_int(res);
    }
    double a = js_to_number(l), b = js_to_number(r);
    if (!strcmp(op, "+"))
        return fl ? jv_float(a + b) : jv_int_of(a + b);
    if (!strcmp(op, "-"))
        return fl ? jv_float(a - b) : jv_int_of(a - b);
    if (!strcmp(op, "*"))
        return fl ? jv_float(a * b) : jv_int_of(a * b);
    if (!strcmp(op, "/")) {
        if (b == 0)
            jctx_fail(I->c, line, "division by zero");
        return jv_float(a / b);
    }
    if (!strcmp(op, "//")) {
        if (b == 0)
            jctx_fail(I->c, line, "division by zero");
        if (!fl && !(l.u.i == INT64_MIN && r.u.i == -1)) {
            int64_t q = l.u.i / r.u.i;
            if ((l.u.i % r.u.i != 0) && ((l.u.i < 0) != (r.u.i < 0)))
                q--;
            return jv_int(q);
        }
        return jv_float(floor(a / b));
    }
    if (!strcmp(op, "%")) {
        if (b == 0)
            jctx_fail(I->c, line, "modulo by zero");
        return fl ? jv_float(fmod(a, b))
                  : jv_int(l.u.i % r.u.i); // JavaScript's remainder: the dividend's sign
    }
    if (!strcmp(op, "<"))
        return jv_bool(a < b);
    if (!strcmp(op, ">"))
        return jv_bool(a > b);
    if (!strcmp(op, "<="))
        return jv_bool(a <= b);
    if (!strcmp(op, ">="))
        return jv_bool(a >= b);
    return jv_undef();
}

static struct jv eval_binary(struct jinterp *I, const struct jnode *x, struct jenv *env);

/* "x is name" or "x is name(arg)": the comparison and membership tests are the operators (jinja2's eq, ne,
 * gt, ge, lt, le and their long names, in); the others are jinja_test's. */
static bool eval_test(struct jinterp *I, const struct jnode *x, struct jenv *env) {
    static const struct {
        const char *test, *op;
    } ops[] = {{"eq", "=="}, {"equalto", "=="}, {"ne", "!="},      {"gt", ">"},  {"greaterthan", ">"},
               {"ge", ">="}, {"lt", "<"},       {"lessthan", "<"}, {"le", "<="}, {"in", "in"}};
    for (size_t i = 0; x->b && i < sizeof ops / sizeof ops[0]; i++)
        if (jstr_eq(x->str, ops[i].test)) {
            struct jnode bin = *x;
            bin.kind = JN_BINARY;
            bin.str = (struct jstr){ops[i].op, strlen(ops[i].op)};
            return jv_truthy(eval_binary(I, &bin, env));
        }
    struct jv a = jinja_eval(I, x->a, env);
    if (!x->b)
        return jinja_test(I, x->str, a, NULL, x->line);
    struct jv arg = jinja_eval(I, x->b, env);
    return jinja_test(I, x->str, a, &arg, x->line);
}

static struct jv eval_binary(struct jinterp *I, const struct jnode *x, struct jenv *env) {
    const char *op = x->str.p;
    struct jv l = jinja_eval(I, x->a, env);
    if (!strcmp(op, "and"))
        return jv_truthy(l) ? jinja_eval(I, x->b, env) : l;
    if (!strcmp(op, "or"))
        return jv_truthy(l) ? l : jinja_eval(I, x->b, env);
    struct jv r = jinja_eval(I, x->b, env);
    if (!strcmp(op, "=="))
        return jv_bool(loose_eq(I, l, r));
    if (!strcmp(op, "!="))
        return jv_bool(!loose_eq(I, l, r));
    bool is_in = !strcmp(op, "in"), not_in = !strcmp(op, "not in");
    if (!strcmp(op, "~") &&
        (l.t == JV_UNDEF || r.t == JV_UNDEF)) { // jinja2: str(Undefined) is "" (an extension)
        struct jbuf t = {0};
        if (l.t != JV_UNDEF)
            jv_render_js(I->c, &t, l);
        if (r.t != JV_UNDEF)
            jv_render_js(I->c, &t, r);
        return jv_str(jbuf_str(&t));
    }
    if (l.t == JV_UNDEF || r.t == JV_UNDEF) {
        if (r.t == JV_UNDEF && (is_in || not_in))
            return jv_bool(not_in);
        jctx_fail(I->c, x->line, "Cannot perform operation %s on undefined values", op);
    }
    if (l.t == JV_NULL || r.t == JV_NULL)
        jctx_fail(I->c, x->line, "Cannot perform operation %s on null values", op);
    if (!strcmp(op, "~"))
        return concat(I, l, r);
    if (!strcmp(op, "**") && num_like(l) && num_like(r)) {
        double a = js_to_number(l), b = js_to_number(r);
        if (a == 0 && b < 0)
            jctx_fail(I->c, x->line, "0.0 cannot be raised to a negative power");
        double res = pow(a, b);
        if (!isfinite(res))
            jctx_fail(I->c, x->line, "Exponentiation result is not a finite real number");
        bool fl = l.t == JV_FLOAT || r.t == JV_FLOAT || b < 0;
        return fl ? jv_float(res) : jv_int_of(res);
    }
    if (jv_is_number(l) && jv_is_number(r)) {
        struct jv v = arith(I, op, l, r, x->line);
        if (v.t != JV_UNDEF)
            return v;
    } else if (l.t == JV_ARRAY && r.t == JV_ARRAY) {
        if (!strcmp(op, "+")) {
            struct jv a = jv_array(I->c, l.u.a->n + r.u.a->n);
            for (size_t i = 0; i < l.u.a->n; i++)
                jv_push(I->c, a, l.u.a->v[i]);
            for (size_t i = 0; i < r.u.a->n; i++)
                jv_push(I->c, a, r.u.a->v[i]);
            return a;
        }
    } else if (r.t == JV_ARRAY && (is_in || not_in)) {
        bool member = false;
        for (size_t i = 0; i < r.u.a->n && !member; i++)
            member = strict_eq(r.u.a->v[i], l);
        return jv_bool(is_in ? member : !member);
    }
    if ((l.t == JV_STR || r.t == JV_STR) && !strcmp(op, "+"))
        return concat(I, l, r);
    if (!strcmp(op, "*") && ((l.t == JV_STR && r.t == JV_INT) || (l.t == JV_INT && r.t == JV_STR))) {
        struct jstr s = l.t == JV_STR ? l.u.s : r.u.s; // jinja2's repetition: "ab" * 3
        int64_t k = l.t == JV_INT ? l.u.i : r.u.i;
        if (k <= 0 || s.n == 0)
            return jv_str((struct jstr){"", 0});
        if ((uint64_t)k > SIZE_MAX / 2 / s.n) // jalloc's memory bound refuses what remains too large
            jctx_fail(I->c, x->line, "the repeated string would be too long");
        char *d = jalloc(I->c, s.n * (size_t)k + 1);
        for (int64_t i = 0; i < k; i++)
            memcpy(d + (size_t)i * s.n, s.p, s.n);
        return jv_str((struct jstr){d, s.n * (size_t)k});
    }
    if (l.t == JV_STR && r.t == JV_STR) {
        if (is_in || not_in)
            return jv_bool(str_contains(r.u.s, l.u.s) == is_in);
        if (op[0] == '<' ||
            op[0] == '>') { // jinja2's string ordering (an extension: @huggingface/jinja refuses)
            size_t n = l.u.s.n < r.u.s.n ? l.u.s.n : r.u.s.n;
            int c = n ? memcmp(l.u.s.p, r.u.s.p, n) : 0;
            if (!c)
                c = (l.u.s.n > r.u.s.n) - (l.u.s.n < r.u.s.n);
            return jv_bool(!strcmp(op, "<")    ? c < 0
                           : !strcmp(op, ">")  ? c > 0
                           : !strcmp(op, "<=") ? c <= 0
                                               : c >= 0);
        }
    }
    if (l.t == JV_STR && (r.t == JV_OBJECT || r.t == JV_KWARGS) && (is_in || not_in))
        return jv_bool((jv_get(r, l.u.s) != NULL) == is_in);
    jctx_fail(I->c, x->line, "Unknown operator \"%s\" between %s and %s", op, jv_type_name(l.t),
              jv_type_name(r.t));
}

/* ---- calls ---------------------------------------------------------------------------------------------- */

struct jv jinja_eval_args(struct jinterp *I, const struct jnode *const *args, size_t n, struct jenv *env,
                          struct jv *kwargs_out, int line) {
    struct jv pos = jv_array(I->c, n);
    struct jv kw = jv_object(I->c, JV_KWARGS);
    for (size_t i = 0; i < n; i++) {
        const struct jnode *a = args[i];
        if (a->kind == JN_SPREAD) {
            struct jv v = jinja_eval(I, a->a, env);
            if (v.t != JV_ARRAY)
                jctx_fail(I->c, line, "Cannot unpack non-iterable type: %s", jv_type_name(v.t));
            for (size_t k = 0; k < v.u.a->n; k++)
                jv_push(I->c, pos, v.u.a->v[k]);
        } else if (a->kind != JN_KWARG && a->kind != JN_KWSPREAD) {
            jv_push(I->c, pos, jinja_eval(I, a, env));
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct jnode *a = args[i];
        if (a->kind == JN_KWARG) {
            if (jv_get(kw, a->str))
                jctx_fail(I->c, line, "Got multiple values for keyword argument '%.*s'", (int)a->str.n,
                          a->str.p);
            jv_set(I->c, kw, a->str, jinja_eval(I, a->a, env));
        } else if (a->kind == JN_KWSPREAD) {
            struct jv v = jinja_eval(I, a->a, env);
            if (v.t != JV_OBJECT && v.t != JV_KWARGS)
                jctx_fail(I->c, line, "Argument after ** must be a mapping, not %s", jv_type_name(v.t));
            for (size_t k = 0; k < v.u.o->n; k++) {
                if (jv_get(kw, v.u.o->k[k]))
                    jctx_fail(I->c, line, "Got multiple values for keyword argument");
                jv_set(I->c, kw, v.u.o->k[k], v.u.o->v[k]);
            }
        }
    }
    if (kwargs_out)
        *kwargs_out = kw;
    else if (kw.u.o->n)
        jv_push(I->c, pos, kw);
    return pos;
}

static void bind_args(struct jinterp *I, const struct jnode *const *params, size_t n, bool special,
                      struct jv args, struct jenv *scope, const char *name, int line) {
    size_t npos = args.u.a->n;
    struct jv kw = jv_object(I->c, JV_KWARGS);
    if (npos && args.u.a->v[npos - 1].t == JV_KWARGS) {
        struct jobj *src = args.u.a->v[npos - 1].u.o;
        for (size_t i = 0; i < src->n; i++)
            jv_set(I->c, kw, src->k[i], src->v[i]);
        npos--;
    }
    const struct jnode *pending[64];
    struct jstr pending_name[64];
    size_t n_pending = 0;
    for (size_t i = 0; i < n; i++) {
        const struct jnode *p = params[i];
        struct jstr pname = p->str;
        const struct jnode *def = p->kind == JN_KWARG ? p->a : NULL;
        struct jv v = jv_undef();
        bool have = false;
        if (i < npos) {
            v = args.u.a->v[i];
            have = true;
        } else {
            struct jv *k = jv_get(kw, pname);
            if (k) {
                v = *k;
                have = true;
                // delete the key: rebuild without it
                struct jv rest = jv_object(I->c, JV_KWARGS);
                for (size_t j = 0; j < kw.u.o->n; j++)
                    if (!same_str(kw.u.o->k[j], pname))
                        jv_set(I->c, rest, kw.u.o->k[j], kw.u.o->v[j]);
                kw = rest;
            }
        }
        if (!have && def) {
            if (n_pending == 64)
                jctx_fail(I->c, line, "too many parameters with defaults");
            pending[n_pending] = def;
            pending_name[n_pending++] = pname;
        }
        jenv_set(I->c, scope, pname, v);
    }
    if (special) {
        struct jv kwv = jv_object(I->c, JV_OBJECT);
        for (size_t j = 0; j < kw.u.o->n; j++)
            jv_set(I->c, kwv, kw.u.o->k[j], kw.u.o->v[j]);
        jenv_set(I->c, scope, (struct jstr){"kwargs", 6}, kwv);
        struct jv va = jv_array(I->c, 0);
        for (size_t j = n; j < npos; j++)
            jv_push(I->c, va, args.u.a->v[j]);
        jenv_set(I->c, scope, (struct jstr){"varargs", 7}, va);
    } else {
        if (kw.u.o->n)
            jctx_fail(I->c, line, "macro %s takes no keyword argument '%.*s'", name, (int)kw.u.o->k[0].n,
                      kw.u.o->k[0].p);
        if (npos > n)
            jctx_fail(I->c, line, "macro %s takes not more than %zu argument(s)", name, n);
    }
    for (size_t i = 0; i < n_pending; i++)
        jenv_set(I->c, scope, pending_name[i], jinja_eval(I, pending[i], scope));
}

struct jv jinja_call(struct jinterp *I, struct jv fn, struct jv args, struct jenv *scope, int line) {
    if (fn.t != JV_FUNC)
        jctx_fail(I->c, line, "Cannot call something that is not a function: got %s", jv_type_name(fn.t));
    struct jfunc *f = fn.u.fn;
    if (f->kind == JF_BUILTIN)
        return jinja_builtin_call(I, f, args, line);
    step(I, line);
    enter(I, line);
    struct jbuf out = {0};
    if (f->kind == JF_MACRO) {
        struct jenv *ms = jenv_new(I->c, scope);
        char name[80];
        snprintf(name, sizeof name, "'%.*s'", (int)(f->node->str.n > 60 ? 60 : f->node->str.n),
                 f->node->str.p);
        bind_args(I, (const struct jnode *const *)f->node->list, f->node->n, f->node->flag, args, ms, name,
                  line);
        render_block(I, f->node->list2, f->node->n2, ms, &out);
    } else {
        struct jenv *cs = jenv_new(I->c, f->env);
        bind_args(I, (const struct jnode *const *)f->node->list, f->node->n, f->node->flag, args, cs, "None",
                  line);
        render_block(I, f->node->list2, f->node->n2, cs, &out);
    }
    I->c->depth--;
    return jv_str(jbuf_str(&out));
}

static struct jv eval_call(struct jinterp *I, const struct jnode *x, struct jenv *env) {
    struct jv args = jinja_eval_args(I, (const struct jnode *const *)x->list, x->n, env, NULL, x->line);
    struct jv fn = jinja_eval(I, x->a, env);
    return jinja_call(I, fn, args, env, x->line);
}

/* ---- members and slices --------------------------------------------------------------------------------- */

static struct jv eval_slice(struct jinterp *I, struct jv obj, const struct jnode *s, struct jenv *env) {
    if (obj.t != JV_ARRAY && obj.t != JV_STR)
        jctx_fail(I->c, s->line, "Slice object must be an array or string");
    struct jv sv[3] = {jinja_eval(I, s->a, env), jinja_eval(I, s->b, env), jinja_eval(I, s->c, env)};
    static const char *const what[] = {"start", "stop", "step"};
    for (int i = 0; i < 3; i++)
        if (sv[i].t != JV_INT && sv[i].t != JV_UNDEF)
            jctx_fail(I->c, s->line, "Slice %s must be numeric or undefined", what[i]);
    // code points of a string, elements of a list
    size_t len;
    const char **cps = NULL;
    size_t *cpl = NULL;
    if (obj.t == JV_STR) {
        len = jv_utf8_count(obj.u.s);
        cps = jalloc(I->c, (len + 1) * sizeof *cps);
        cpl = jalloc(I->c, (len + 1) * sizeof *cpl);
        size_t k = 0;
        for (size_t i = 0; i < obj.u.s.n;) {
            size_t j = i + 1;
            while (j < obj.u.s.n && ((unsigned char)obj.u.s.p[j] & 0xC0) == 0x80)
                j++;
            cps[k] = obj.u.s.p + i;
            cpl[k++] = j - i;
            i = j;
        }
    } else {
        len = obj.u.a->n;
    }
    int64_t L = (int64_t)len;
    int64_t stepv = sv[2].t == JV_INT ? sv[2].u.i : 1;
    if (stepv == 0)
        jctx_fail(I->c, s->line, "slice step cannot be zero");
    int64_t start, stop;
    if (stepv > 0) {
        start = sv[0].t == JV_INT ? sv[0].u.i : 0;
        start = start < 0 ? (L + start > 0 ? L + start : 0) : (start < L ? start : L);
        stop = sv[1].t == JV_INT ? sv[1].u.i : L;
        stop = stop < 0 ? (L + stop > 0 ? L + stop : 0) : (stop < L ? stop : L);
    } else {
        start = sv[0].t == JV_INT ? sv[0].u.i : L - 1;
        start = start < 0 ? (L + start > -1 ? L + start : -1) : (start < L - 1 ? start : L - 1);
        stop = sv[1].t == JV_INT ? sv[1].u.i : -1;
        stop = stop < -1 ? (L + stop > -1 ? L + stop : -1) : (stop < L - 1 ? stop : L - 1);
    }
    int64_t dir = stepv > 0 ? 1 : -1;
    if (obj.t == JV_STR) {
        struct jbuf b = {0};
        for (int64_t i = start; dir * i < dir * stop; i += stepv) {
            jbuf_put(I->c, &b, cps[i], cpl[i]);
            if (stepv > L || stepv < -L) // one element; the next step would only overflow
                break;
        }
        return jv_str(jbuf_str(&b));
    }
    struct jv a = jv_array(I->c, 0);
    for (int64_t i = start; dir * i < dir * stop; i += stepv) {
        jv_push(I->c, a, obj.u.a->v[i]);
        if (stepv > L || stepv < -L)
            break;
    }
    return a;
}

static struct jv eval_member(struct jinterp *I, const struct jnode *x, struct jenv *env) {
    struct jv obj = jinja_eval(I, x->a, env);
    struct jv prop;
    if (x->flag) {
        if (x->b->kind == JN_SLICE)
            return eval_slice(I, obj, x->b, env);
        prop = jinja_eval(I, x->b, env);
    } else if (x->b->kind == JN_INT) {
        prop = jv_int(x->b->ival);
    } else {
        prop = jv_str(x->b->str);
    }
    return jinja_member(I, obj, prop, x->line);
}

/* operand | filter, the filter's arguments evaluated here. */
static struct jv apply_filter(struct jinterp *I, struct jv operand, const struct jnode *f, struct jenv *env,
                              int line) {
    struct jv kw = jv_object(I->c, JV_KWARGS), args = jv_array(I->c, 0);
    if (f->kind == JN_CALL)
        args = jinja_eval_args(I, (const struct jnode *const *)f->list, f->n, env, &kw, line);
    return jinja_filter(I, operand, f, args, kw, line);
}

/* ---- statements ----------------------------------------------------------------------------------------- */

static void assign(struct jinterp *I, const struct jnode *target, struct jv v, struct jenv *env, int line) {
    if (target->kind == JN_IDENT) {
        jenv_set(I->c, env, target->str, v);
    } else if (target->kind == JN_TUPLE) {
        if (v.t != JV_ARRAY)
            jctx_fail(I->c, line, "Cannot unpack non-iterable type in set: %s", jv_type_name(v.t));
        if (v.u.a->n != target->n)
            jctx_fail(I->c, line, "Too %s items to unpack in set", target->n > v.u.a->n ? "few" : "many");
        for (size_t i = 0; i < target->n; i++) {
            if (target->list[i]->kind != JN_IDENT)
                jctx_fail(I->c, line, "Cannot unpack to non-identifier in set");
            jenv_set(I->c, env, target->list[i]->str, v.u.a->v[i]);
        }
    } else if (target->kind == JN_MEMBER) {
        struct jv obj = jinja_eval(I, target->a, env);
        if (obj.t != JV_NAMESPACE)
            jctx_fail(I->c, line, "cannot assign attribute on non-namespace object");
        if (target->b->kind != JN_IDENT || target->flag)
            jctx_fail(I->c, line, "Cannot assign to member with non-identifier property");
        jv_set(I->c, obj, target->b->str, v);
    } else {
        jctx_fail(I->c, line, "Invalid LHS inside assignment expression");
    }
}

static void bind_loopvar(struct jinterp *I, const struct jnode *target, struct jv cur, struct jenv *scope,
                         int line) {
    if (target->kind == JN_IDENT) {
        jenv_set(I->c, scope, target->str, cur);
        return;
    }
    if (cur.t != JV_ARRAY)
        jctx_fail(I->c, line, "Cannot unpack non-iterable type: %s", jv_type_name(cur.t));
    if (target->n != cur.u.a->n)
        jctx_fail(I->c, line, "Too %s items to unpack", target->n > cur.u.a->n ? "few" : "many");
    for (size_t j = 0; j < target->n; j++) {
        if (target->list[j]->kind != JN_IDENT)
            jctx_fail(I->c, line, "Cannot unpack non-identifier type");
        jenv_set(I->c, scope, target->list[j]->str, cur.u.a->v[j]);
    }
}

static void exec_for(struct jinterp *I, const struct jnode *x, struct jenv *env, struct jbuf *out) {
    struct jenv *scope = jenv_new(I->c, env);
    const struct jnode *test = NULL;
    struct jv it;
    if (x->b->kind == JN_SELECT) {
        it = jinja_eval(I, x->b->a, scope);
        test = x->b->b;
    } else {
        it = jinja_eval(I, x->b, scope);
    }
    if (it.t == JV_UNDEF) // jinja2's Undefined iterates as empty (@huggingface/jinja refuses: an extension)
        it = jv_array(I->c, 0);
    if (it.t != JV_ARRAY && it.t != JV_OBJECT)
        jctx_fail(I->c, x->line, "Expected iterable or object type in for loop: got %s", jv_type_name(it.t));
    if (it.t == JV_OBJECT) {
        struct jv keys = jv_array(I->c, it.u.o->n);
        for (size_t i = 0; i < it.u.o->n; i++)
            jv_push(I->c, keys, jv_key(I->c, it, i));
        it = keys;
    }
    struct jv items = jv_array(I->c, it.u.a->n);
    for (size_t i = 0; i < it.u.a->n; i++) {
        struct jv cur = it.u.a->v[i];
        if (x->a->kind == JN_TUPLE && cur.t != JV_ARRAY)
            jctx_fail(I->c, x->line, "Cannot unpack non-iterable type: %s", jv_type_name(cur.t));
        if (x->a->kind == JN_TUPLE && x->a->n != cur.u.a->n)
            jctx_fail(I->c, x->line, "Too %s items to unpack", x->a->n > cur.u.a->n ? "few" : "many");
        if (test) {
            step(I, x->line);
            struct jenv *ls = jenv_new(I->c, scope);
            bind_loopvar(I, x->a, cur, ls, x->line);
            if (!jv_truthy(jinja_eval(I, test, ls)))
                continue;
        }
        jv_push(I->c, items, cur);
    }
    size_t n = items.u.a->n;
    bool none = true;
    for (size_t i = 0; i < n; i++) {
        step(I, x->line);
        struct jv loop = jv_object(I->c, JV_OBJECT);
        loop.u.o->k = jalloc(I->c, 9 * sizeof *loop.u.o->k);
        loop.u.o->v = jalloc(I->c, 9 * sizeof *loop.u.o->v);
        loop.u.o->cap = 9;
        struct jv *v = items.u.a->v;
        jv_set(I->c, loop, (struct jstr){"index", 5}, jv_int((int64_t)i + 1));
        jv_set(I->c, loop, (struct jstr){"index0", 6}, jv_int((int64_t)i));
        jv_set(I->c, loop, (struct jstr){"revindex", 8}, jv_int((int64_t)(n - i)));
        jv_set(I->c, loop, (struct jstr){"revindex0", 9}, jv_int((int64_t)(n - i - 1)));
        jv_set(I->c, loop, (struct jstr){"first", 5}, jv_bool(i == 0));
        jv_set(I->c, loop, (struct jstr){"last", 4}, jv_bool(i == n - 1));
        jv_set(I->c, loop, (struct jstr){"length", 6}, jv_int((int64_t)n));
        jv_set(I->c, loop, (struct jstr){"previtem", 8}, i > 0 ? v[i - 1] : jv_undef());
        jv_set(I->c, loop, (struct jstr){"nextitem", 8}, i + 1 < n ? v[i + 1] : jv_undef());
        jenv_set(I->c, scope, (struct jstr){"loop", 4}, loop);
        bind_loopvar(I, x->a, v[i], scope, x->line);
        size_t mark = out->n;
        render_block(I, x->list, x->n, scope, out);
        if (I->ctl !=
            JCTL_NONE) { // the interrupted iteration's output is dropped, as @huggingface/jinja does
            enum jctl ctl = I->ctl;
            I->ctl = JCTL_NONE;
            out->n = mark;
            if (out->p)
                out->p[mark] = '\0';
            if (ctl == JCTL_BREAK)
                break;
            continue;
        }
        none = false;
    }
    if (none)
        render_block(I, x->list2, x->n2, scope, out);
}

static void exec_callblock(struct jinterp *I, const struct jnode *x, struct jenv *env, struct jbuf *out) {
    struct jfunc *caller = jalloc(I->c, sizeof *caller);
    caller->kind = JF_CALLER;
    caller->node = x;
    caller->env = env;
    struct jv kw;
    struct jv args = jinja_eval_args(I, (const struct jnode *const *)x->a->list, x->a->n, env, &kw, x->line);
    jv_push(I->c, args, kw);
    struct jv fn = jinja_eval(I, x->a->a, env);
    struct jenv *ne = jenv_new(I->c, env);
    jenv_set(I->c, ne, (struct jstr){"caller", 6}, (struct jv){.t = JV_FUNC, .u.fn = caller});
    jv_render(I->c, out, jinja_call(I, fn, args, ne, x->line));
}

static void render_block(struct jinterp *I, struct jnode *const *list, size_t n, struct jenv *env,
                         struct jbuf *out) {
    for (size_t i = 0; i < n && I->ctl == JCTL_NONE; i++) {
        const struct jnode *x = list[i];
        step(I, x->line);
        enter(I, x->line);
        switch (x->kind) {
        case JN_TEXT:
            jbuf_put(I->c, out, x->str.p, x->str.n);
            break;
        case JN_COMMENT:
            break;
        case JN_SET: {
            struct jv v;
            if (x->b) {
                v = jinja_eval(I, x->b, env);
            } else {
                struct jbuf b = {0};
                render_block(I, x->list, x->n, env, &b);
                v = jv_str(jbuf_str(&b));
            }
            assign(I, x->a, v, env, x->line);
            break;
        }
        case JN_IF: {
            bool t = jv_truthy(jinja_eval(I, x->a, env));
            render_block(I, t ? x->list : x->list2, t ? x->n : x->n2, env, out);
            break;
        }
        case JN_FOR:
            exec_for(I, x, env, out);
            break;
        case JN_MACRO: {
            struct jfunc *f = jalloc(I->c, sizeof *f);
            f->kind = JF_MACRO;
            f->node = x;
            jenv_set(I->c, env, x->str, (struct jv){.t = JV_FUNC, .u.fn = f});
            break;
        }
        case JN_CALLBLOCK:
            exec_callblock(I, x, env, out);
            break;
        case JN_FILTERBLOCK: {
            struct jbuf b = {0};
            render_block(I, x->list, x->n, env, &b);
            jv_render(I->c, out, apply_filter(I, jv_str(jbuf_str(&b)), x->a, env, x->line));
            break;
        }
        case JN_BREAK:
            I->ctl = JCTL_BREAK;
            break;
        case JN_CONTINUE:
            I->ctl = JCTL_CONTINUE;
            break;
        default:
            jv_render(I->c, out, jinja_eval(I, x, env));
        }
        I->c->depth--;
    }
}

/* ---- expressions ---------------------------------------------------------------------------------------- */

struct jv jinja_eval(struct jinterp *I, const struct jnode *x, struct jenv *env) {
    if (!x)
        return jv_undef();
    enter(I, x->line);
    struct jv r;
    switch (x->kind) {
    case JN_INT:
        r = jv_int(x->ival);
        break;
    case JN_FLOAT:
        r = jv_float(x->fval);
        break;
    case JN_STRING:
    case JN_TEXT:
        r = jv_str(x->str);
        break;
    case JN_ARRAY:
    case JN_TUPLE:
        r = jv_array(I->c, x->n);
        r.tuple = x->kind == JN_TUPLE;
        for (size_t i = 0; i < x->n; i++)
            jv_push(I->c, r, jinja_eval(I, x->list[i], env));
        break;
    case JN_OBJECT:
        r = jv_object(I->c, JV_OBJECT);
        for (size_t i = 0; i < x->n; i++) {
            struct jv k = jinja_eval(I, x->list[i], env);
            if (k.t == JV_INT) { // jinja2 allows integer keys (an extension)
                jv_set_int_key(I->c, r, k.u.i, jinja_eval(I, x->list2[i], env));
                continue;
            }
            if (k.t != JV_STR)
                jctx_fail(I->c, x->line, "Object keys must be strings: got %s", jv_type_name(k.t));
            jv_set(I->c, r, k.u.s, jinja_eval(I, x->list2[i], env));
        }
        break;
    case JN_IDENT:
        r = jenv_lookup(env, x->str);
        break;
    case JN_CALL:
        r = eval_call(I, x, env);
        break;
    case JN_MEMBER:
        r = eval_member(I, x, env);
        break;
    case JN_UNARY: {
        struct jv a = jinja_eval(I, x->a, env);
        if (x->str.p[0] == 'n') {
            r = jv_bool(!jv_truthy(a));
        } else {
            if (!num_like(a))
                jctx_fail(I->c, x->line, "Unknown operator \"%s\" for %s", x->str.p, jv_type_name(a.t));
            bool neg = x->str.p[0] == '-';
            if (a.t == JV_FLOAT)
                r = jv_float(neg ? -a.u.f : a.u.f);
            else {
                int64_t v = a.t == JV_BOOL ? a.u.b : a.u.i;
                r = neg && v == INT64_MIN ? jv_float(-(double)v) : jv_int(neg ? -v : v);
            }
        }
        break;
    }
    case JN_BINARY:
        r = eval_binary(I, x, env);
        break;
    case JN_FILTER:
        r = apply_filter(I, jinja_eval(I, x->a, env), x->b, env, x->line);
        break;
    case JN_TEST:
        r = jv_bool(eval_test(I, x, env) != x->flag);
        break;
    case JN_SELECT:
        r = jv_truthy(jinja_eval(I, x->b, env)) ? jinja_eval(I, x->a, env) : jv_undef();
        break;
    case JN_TERNARY:
        r = jv_truthy(jinja_eval(I, x->a, env)) ? jinja_eval(I, x->b, env) : jinja_eval(I, x->c, env);
        break;
    case JN_COMMENT:
        r = jv_null();
        break;
    default:
        jctx_fail(I->c, x->line, "a statement where an expression belongs");
    }
    I->c->depth--;
    return r;
}

void jinja_run(struct jinterp *I, const struct jnode *prog, struct jbuf *out) {
    render_block(I, prog->list, prog->n, I->global, out);
    if (I->ctl != JCTL_NONE)
        jctx_fail(I->c, 0, "break or continue outside a loop");
}
