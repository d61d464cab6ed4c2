/* The Jinja built-ins (see jinja_builtins.h); their behaviour follows @huggingface/jinja's runtime.ts. */
#include "chat/jinja_builtins.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    B_RANGE,
    B_NAMESPACE,
    B_RAISE,
    B_STRFTIME,
    B_DICT,
    // string methods
    B_S_UPPER,
    B_S_LOWER,
    B_S_STRIP,
    B_S_TITLE,
    B_S_CAPITALIZE,
    B_S_RSTRIP,
    B_S_LSTRIP,
    B_S_STARTSWITH,
    B_S_ENDSWITH,
    B_S_SPLIT,
    B_S_REPLACE,
    B_S_FIND,   // jinja2's (Python's str.find), an extension
    B_S_COUNT,  // the same
    B_S_FORMAT, // the same (str.format: {} {0} {name}, no format specs)
    // dict methods
    B_O_GET,
    B_O_ITEMS,
    B_O_KEYS,
    B_O_VALUES,
    B_O_DICTSORT,
    // list methods (jinja2's, an extension)
    B_A_APPEND,
    B_A_POP,
};

static const struct {
    const char *name;
    int id;
} string_methods[] =
    {
        {"upper", B_S_UPPER},   {"lower", B_S_LOWER},           {"strip", B_S_STRIP},
        {"title", B_S_TITLE},   {"capitalize", B_S_CAPITALIZE}, {"rstrip", B_S_RSTRIP},
        {"lstrip", B_S_LSTRIP}, {"startswith", B_S_STARTSWITH}, {"endswith", B_S_ENDSWITH},
        {"split", B_S_SPLIT},   {"replace", B_S_REPLACE},       {"find", B_S_FIND},
        {"count", B_S_COUNT},   {"format", B_S_FORMAT},
},
  object_methods[] = {
      {"get", B_O_GET},       {"items", B_O_ITEMS},       {"keys", B_O_KEYS},
      {"values", B_O_VALUES}, {"dictsort", B_O_DICTSORT},
};

static struct jv func(struct jinterp *I, int id, struct jv self) {
    struct jfunc *f = jalloc(I->c, sizeof *f);
    f->kind = JF_BUILTIN;
    f->id = id;
    f->self = self;
    return (struct jv){.t = JV_FUNC, .u.fn = f};
}

static bool streq(struct jstr a, struct jstr b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static struct jstr S(const char *s) {
    return (struct jstr){s, strlen(s)};
}

/* ---- string helpers ------------------------------------------------------------------------------------- */

static struct jstr
trim(struct jstr s, bool left, bool right) {
    size_t w;
    if (left)
        while (s.n && (w = js_space_len(s.p, s.n)) > 0)
            s.p += w, s.n -= w;
    if (right)
        while (s.n && (w = js_space_len_before(s.p, s.n)) > 0)
            s.n -= w;
    return s;
}

static struct jv map_ascii(struct jinterp *I, struct jstr s, int upper) {
    char *d = jalloc(I->c, s.n + 1);
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        if (upper && ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 32);
        else if (!upper && ch >= 'A' && ch <= 'Z')
            ch = (char)(ch + 32);
        d[i] = ch;
    }
    return jv_str((struct jstr){d, s.n});
}

static bool is_word(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static struct jv title(struct jinterp *I, struct jstr s) { // /\b\w/g upper-cased
    char *d = jalloc(I->c, s.n + 1);
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        if (is_word(ch) && (i == 0 || !is_word(s.p[i - 1])) && ch >= 'a' && ch <= 'z')
            ch = (char)(ch - 32);
        d[i] = ch;
    }
    return jv_str((struct jstr){d, s.n});
}

static bool has_prefix(struct jstr s, struct jstr p) {
    return p.n <= s.n && (p.n == 0 || memcmp(s.p, p.p, p.n) == 0);
}
static bool has_suffix(struct jstr s, struct jstr p) {
    return p.n <= s.n && (p.n == 0 || memcmp(s.p + s.n - p.n, p.p, p.n) == 0);
}

static const char *find(struct jstr s, size_t from, struct jstr needle) {
    if (needle.n == 0)
        return from <= s.n ? s.p + from : NULL;
    for (size_t i = from; i + needle.n <= s.n; i++)
        if (memcmp(s.p + i, needle.p, needle.n) == 0)
            return s.p + i;
    return NULL;
}

static size_t cp_len(struct jstr s, size_t i) {
    size_t j = i + 1;
    while (j < s.n && ((unsigned char)s.p[j] & 0xC0) == 0x80)
        j++;
    return j - i;
}

static struct jv str_replace(struct jinterp *I, struct jstr s, struct jstr old, struct jstr new,
                             int64_t count) {
    if (count == 0)
        return jv_str(s);
    int64_t left = count < 0 ? INT64_MAX : count;
    struct jbuf b = {0};
    if (old.n == 0) { // at every code-point boundary, the ends included
        size_t i = 0;
        for (;;) {
            if (left > 0) {
                jbuf_put(I->c, &b, new.p, new.n);
                left--;
            }
            if (i >= s.n)
                break;
            size_t l = cp_len(s, i);
            jbuf_put(I->c, &b, s.p + i, l);
            i += l;
        }
        return jv_str(jbuf_str(&b));
    }
    size_t i = 0;
    while (i < s.n) {
        const char *hit = left > 0 ? find(s, i, old) : NULL;
        if (!hit) {
            jbuf_put(I->c, &b, s.p + i, s.n - i);
            break;
        }
        jbuf_put(I->c, &b, s.p + i, (size_t)(hit - (s.p + i)));
        jbuf_put(I->c, &b, new.p, new.n);
        left--;
        i = (size_t)(hit - s.p) + old.n;
    }
    return jv_str(jbuf_str(&b));
}

static struct jv split(struct jinterp *I, struct jstr s, struct jv sep, int64_t maxsplit, int line) {
    struct jv out = jv_array(I->c, 0);
    if (sep.t == JV_NULL || sep.t == JV_UNDEF) {
        struct jstr t = trim(s, true, false);
        size_t i = 0;
        while (i < t.n) {
            size_t w;
            while (i < t.n && (w = js_space_len(t.p + i, t.n - i)) > 0)
                i += w;
            if (i >= t.n)
                break;
            size_t start = i;
            while (i < t.n && js_space_len(t.p + i, t.n - i) == 0)
                i++;
            if (maxsplit != -1 && (int64_t)out.u.a->n >= maxsplit) {
                jv_push(I->c, out, jv_str((struct jstr){t.p + start, t.n - start}));
                break;
            }
            jv_push(I->c, out, jv_str((struct jstr){t.p + start, i - start}));
        }
        return out;
    }
    if (sep.t != JV_STR)
        jctx_fail(I->c, line, "sep argument must be a string or null");
    if (!sep.u.s.n)
        jctx_fail(I->c, line, "empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = (maxsplit == -1 || (int64_t)out.u.a->n < maxsplit) ? find(s, i, sep.u.s) : NULL;
        if (!hit) {
            jv_push(I->c, out, jv_str((struct jstr){s.p + i, s.n - i}));
            break;
        }
        jv_push(I->c, out, jv_str((struct jstr){s.p + i, (size_t)(hit - (s.p + i))}));
        i = (size_t)(hit - s.p) + sep.u.s.n;
    }
    return out;
}

/* ---- comparisons for sort / dictsort -------------------------------------------------------------------- */

static bool num_like(struct jv v) {
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}
static double num(struct jv v) {
    return v.t == JV_INT ? (double)v.u.i : v.t == JV_FLOAT ? v.u.f : v.u.b;
}

static int compare(struct jinterp *I, struct jv a, struct jv b, bool case_sensitive, int line) {
    if (a.t == JV_NULL && b.t == JV_NULL)
        return 0;
    if (a.t == JV_NULL || b.t == JV_NULL || (a.t == JV_UNDEF) != (b.t == JV_UNDEF))
        jctx_fail(I->c, line, "Cannot compare %s with %s", jv_type_name(a.t), jv_type_name(b.t));
    if (a.t == JV_UNDEF)
        return 0;
    if (num_like(a) && num_like(b))
        return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    if (a.t != b.t)
        jctx_fail(I->c, line, "Cannot compare different types: %s and %s", jv_type_name(a.t),
                  jv_type_name(b.t));
    if (a.t != JV_STR)
        jctx_fail(I->c, line, "Cannot compare type: %s", jv_type_name(a.t));
    struct jstr x = a.u.s, y = b.u.s;
    if (!case_sensitive) {
        x = map_ascii(I, x, 0).u.s;
        y = map_ascii(I, y, 0).u.s;
    }
    size_t n = x.n < y.n ? x.n : y.n;
    int c = n ? memcmp(x.p, y.p, n) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return (x.n > y.n) - (x.n < y.n);
}

struct sort_ctx {
    struct jinterp *I;
    bool case_sensitive, reverse;
    struct jstr attr; // empty: the items themselves
    bool by_attr;
    int key_index; // dictsort: 0 key, 1 value; -1 otherwise
    int line;
};

static struct jv attribute_path(struct jv item, struct jstr path);

static struct jv sort_key(const struct sort_ctx *s, struct jv v) {
    if (s->key_index >= 0)
        return v.u.a->v[s->key_index];
    return s->by_attr ? attribute_path(v, s->attr) : v;
}

static void merge_sort(const struct sort_ctx *s, struct jv *v, struct jv *tmp, size_t n) {
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(s, v, tmp, h);
    merge_sort(s, v + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = compare(s->I, sort_key(s, v[j]), sort_key(s, v[i]), s->case_sensitive, s->line);
        if (s->reverse)
            c = -c;
        tmp[k++] = c < 0 ? v[j++] : v[i++];
    }
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static struct jv sorted(const struct sort_ctx *s, struct jv arr) {
    struct jctx *c = s->I->c;
    size_t n = arr.u.a->n;
    struct jv out = jv_array(c, n);
    for (size_t i = 0; i < n; i++)
        jv_push(c, out, arr.u.a->v[i]);
    struct jv *tmp = jalloc(c, (n + 1) * sizeof *tmp);
    merge_sort(s, out.u.a->v, tmp, n);
    return out;
}

/* "a.b.0": keys of dicts and namespaces, indices of lists. */
static struct jv attribute_path(struct jv item, struct jstr path) {
    struct jv v = item;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.')
            j++;
        struct jstr part = {path.p + i, j - i};
        if (v.t == JV_OBJECT || v.t == JV_NAMESPACE || v.t == JV_KWARGS) {
            struct jv *x = jv_get(v, part);
            if (!x)
                return jv_undef();
            v = *x;
        } else if (v.t == JV_ARRAY) {
            char tmp[24];
            if (!part.n || part.n >= sizeof tmp)
                return jv_undef();
            memcpy(tmp, part.p, part.n);
            tmp[part.n] = '\0';
            char *end;
            long idx = strtol(tmp, &end, 10);
            if (end == tmp || idx < 0 || (size_t)idx >= v.u.a->n)
                return jv_undef();
            v = v.u.a->v[idx];
        } else {
            return jv_undef();
        }
        if (j >= path.n)
            return v;
        i = j + 1;
    }
}

/* ---- members -------------------------------------------------------------------------------------------- */

static struct jv char_at(struct jinterp *I, struct jstr s, int64_t idx) {
    int64_t n = (int64_t)jv_utf8_count(s);
    if (idx < 0)
        idx += n;
    if (idx < 0 || idx >= n)
        return jv_undef();
    size_t i = 0;
    for (int64_t k = 0; k < idx; k++)
        i += cp_len(s, i);
    return jv_str(jstr_dup(I->c, s.p + i, cp_len(s, i)));
}

struct jv jinja_member(struct jinterp *I, struct jv obj, struct jv prop, int line) {
    if (obj.t == JV_OBJECT && prop.t == JV_INT) { // an integer key (jinja2's; an extension)
        char tmp[32];
        int n = snprintf(tmp, sizeof tmp, "%lld", (long long)prop.u.i);
        struct jv *v = jv_get(obj, (struct jstr){tmp, (size_t)n});
        size_t at = v ? (size_t)(v - obj.u.o->v) : 0;
        return v && obj.u.o->kint && obj.u.o->kint[at] ? *v : jv_undef();
    }
    if (obj.t == JV_OBJECT || obj.t == JV_NAMESPACE || obj.t == JV_KWARGS) {
        if (prop.t != JV_STR)
            jctx_fail(I->c, line, "Cannot access property with non-string: got %s", jv_type_name(prop.t));
        struct jv *v = jv_get(obj, prop.u.s);
        if (v)
            return *v;
        if (obj.t != JV_NAMESPACE)
            for (size_t i = 0; i < sizeof object_methods / sizeof object_methods[0]; i++)
                if (jstr_eq(prop.u.s, object_methods[i].name))
                    return func(I, object_methods[i].id, obj);
        return jv_undef();
    }
    if (obj.t == JV_ARRAY || obj.t == JV_STR) {
        if (prop.t == JV_INT) {
            if (obj.t == JV_STR)
                return char_at(I, obj.u.s, prop.u.i);
            int64_t n = (int64_t)obj.u.a->n, idx = prop.u.i < 0 ? prop.u.i + n : prop.u.i;
            return idx >= 0 && idx < n ? obj.u.a->v[idx] : jv_undef();
        }
        if (prop.t != JV_STR)
            jctx_fail(I->c, line, "Cannot access property with non-string/non-number: got %s",
                      jv_type_name(prop.t));
        if (jstr_eq(prop.u.s, "length"))
            return jv_int(obj.t == JV_STR ? (int64_t)jv_utf8_count(obj.u.s) : (int64_t)obj.u.a->n);
        if (obj.t == JV_STR) {
            for (size_t i = 0; i < sizeof string_methods / sizeof string_methods[0]; i++)
                if (jstr_eq(prop.u.s, string_methods[i].name))
                    return func(I, string_methods[i].id, obj);
        } else if (jstr_eq(prop.u.s, "append")) {
            return func(I, B_A_APPEND, obj);
        } else if (jstr_eq(prop.u.s, "pop")) {
            return func(I, B_A_POP, obj);
        }
        return jv_undef();
    }
    if (prop.t != JV_STR)
        jctx_fail(I->c, line, "Cannot access property with non-string: got %s", jv_type_name(prop.t));
    return jv_undef();
}

/* ---- tests ---------------------------------------------------------------------------------------------- */

static bool value_strict_eq(struct jv a, struct jv b) {
    if (jv_is_number(a) && jv_is_number(b))
        return num(a) == num(b);
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NULL:
        return true;
    case JV_BOOL:
        return a.u.b == b.u.b;
    case JV_STR:
        return streq(a.u.s, b.u.s);
    case JV_ARRAY:
        return a.u.a == b.u.a;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    default:
        return a.u.o == b.u.o;
    }
}

static bool is_lower_str(struct jstr s, bool upper) {
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        if (!upper && ch >= 'A' && ch <= 'Z')
            return false;
        if (upper && ch >= 'a' && ch <= 'z')
            return false;
    }
    return true;
}

bool jinja_test(struct jinterp *I, struct jstr name, struct jv a, const struct jv *arg, int line) {
    struct jv b = arg ? *arg : jv_undef();
    if (jstr_eq(name, "boolean"))
        return a.t == JV_BOOL;
    if (jstr_eq(name, "callable"))
        return a.t == JV_FUNC;
    if (jstr_eq(name, "odd") || jstr_eq(name, "even")) {
        if (a.t != JV_INT)
            jctx_fail(I->c, line, "cannot %.*s on %s", (int)name.n, name.p, jv_type_name(a.t));
        return (a.u.i % 2 != 0) == (name.p[0] == 'o');
    }
    if (jstr_eq(name, "false"))
        return a.t == JV_BOOL && !a.u.b;
    if (jstr_eq(name, "true"))
        return a.t == JV_BOOL && a.u.b;
    if (jstr_eq(name, "none"))
        return a.t == JV_NULL;
    if (jstr_eq(name, "string"))
        return a.t == JV_STR;
    if (jstr_eq(name, "number"))
        return jv_is_number(a);
    if (jstr_eq(name, "integer"))
        return a.t == JV_INT;
    if (jstr_eq(name, "float")) // jinja2's (an extension)
        return a.t == JV_FLOAT;
    if (jstr_eq(name, "iterable"))
        return a.t == JV_ARRAY || a.t == JV_STR;
    if (jstr_eq(name, "mapping"))
        return a.t == JV_OBJECT || a.t == JV_KWARGS;
    if (jstr_eq(name, "sequence"))
        return a.t == JV_ARRAY || a.t == JV_OBJECT || a.t == JV_KWARGS || a.t == JV_STR;
    if (jstr_eq(name, "lower") || jstr_eq(name, "upper"))
        return a.t == JV_STR && is_lower_str(a.u.s, name.p[0] == 'u');
    if (jstr_eq(name, "defined"))
        return a.t != JV_UNDEF;
    if (jstr_eq(name, "undefined"))
        return a.t == JV_UNDEF;
    if (jstr_eq(name, "equalto") || jstr_eq(name, "eq"))
        return value_strict_eq(a, b);
    if (jstr_eq(name, "ne"))
        return !value_strict_eq(a, b);
    if (jstr_eq(name, "gt") || jstr_eq(name, "greaterthan"))
        return compare(I, a, b, true, line) > 0;
    if (jstr_eq(name, "ge"))
        return compare(I, a, b, true, line) >= 0;
    if (jstr_eq(name, "lt") || jstr_eq(name, "lessthan"))
        return compare(I, a, b, true, line) < 0;
    if (jstr_eq(name, "le"))
        return compare(I, a, b, true, line) <= 0;
    if (jstr_eq(name, "in")) { // select('in', list) and the like
        if (b.t == JV_ARRAY) {
            for (size_t i = 0; i < b.u.a->n; i++)
                if (value_strict_eq(b.u.a->v[i], a))
                    return true;
            return false;
        }
        if (b.t == JV_STR && a.t == JV_STR)
            return find(b.u.s, 0, a.u.s) != NULL;
        if ((b.t == JV_OBJECT || b.t == JV_KWARGS) && a.t == JV_STR)
            return jv_get(b, a.u.s) != NULL;
        jctx_fail(I->c, line, "cannot test 'in' on %s", jv_type_name(b.t));
    }
    if (jstr_eq(name, "sameas")) // Python's "is": the same value for none and booleans, the same object else
        return a.t == b.t && value_strict_eq(a, b);
    if (jstr_eq(name, "divisibleby")) {
        if (a.t != JV_INT || b.t != JV_INT || b.u.i == 0)
            jctx_fail(I->c, line, "divisibleby needs integers and a divisor other than 0");
        return a.u.i % b.u.i == 0;
    }
    jctx_fail(I->c, line, "Unknown test: %.*s", (int)(name.n > 40 ? 40 : name.n), name.p);
}

/* ---- filters -------------------------------------------------------------------------------------------- */

static struct jv arg_at(struct jv args, size_t i) {
    return i < args.u.a->n && args.u.a->v[i].t != JV_KWARGS ? args.u.a->v[i] : jv_undef();
}

static struct jv kwarg(struct jv kw, const char *name) {
    if (kw.t != JV_KWARGS && kw.t != JV_OBJECT)
        return jv_undef();
    struct jv *v = jv_get(kw, S(name));
    return v ? *v : jv_undef();
}

/* args[i] ?? kwargs[name] ?? def */
static struct jv opt(struct jv args, size_t i, struct jv kw, const char *name, struct jv def) {
    struct jv v = arg_at(args, i);
    if (v.t != JV_UNDEF)
        return v;
    v = kwarg(kw, name);
    return v.t != JV_UNDEF ? v : def;
}

static struct jv to_json(struct jinterp *I, struct jv v, const struct jjson_opts *o, int line) {
    struct jbuf b = {0};
    jv_to_json(I->c, &b, v, o, 0, line);
    return jv_str(jbuf_str(&b));
}

static struct jv js_join(struct jinterp *I, struct jv arr, struct jstr sep) {
    struct jbuf b = {0};
    for (size_t i = 0; i < arr.u.a->n; i++) {
        if (i)
            jbuf_put(I->c, &b, sep.p, sep.n);
        struct jv x = arr.u.a->v[i];
        if (x.t != JV_NULL && x.t != JV_UNDEF)
            jv_render_js(I->c, &b, x);
    }
    return jv_str(jbuf_str(&b));
}

static struct jv chars(struct jinterp *I, struct jstr s) {
    struct jv a = jv_array(I->c, 0);
    for (size_t i = 0; i < s.n;) {
        size_t l = cp_len(s, i);
        jv_push(I->c, a, jv_str((struct jstr){s.p + i, l}));
        i += l;
    }
    return a;
}

static struct jv parse_int(struct jstr s, bool *ok) { // JavaScript's parseInt(s, 10)
    s = trim(s, true, false);
    size_t i = 0;
    bool neg = false;
    if (i < s.n && (s.p[i] == '+' || s.p[i] == '-'))
        neg = s.p[i++] == '-';
    int64_t v = 0;
    size_t start = i;
    while (i < s.n && s.p[i] >= '0' && s.p[i] <= '9' && v < INT64_MAX / 10 - 10)
        v = v * 10 + (s.p[i++] - '0');
    *ok = i > start;
    return jv_int(neg ? -v : v);
}

static struct jv parse_float(struct jstr s, bool *ok) { // JavaScript's parseFloat
    s = trim(s, true, false);
    char tmp[128];
    size_t n = s.n < sizeof tmp - 1 ? s.n : sizeof tmp - 1;
    memcpy(tmp, s.p, n);
    tmp[n] = '\0';
    size_t i = 0;
    if (tmp[i] == '+' || tmp[i] == '-')
        i++;
    if (!strncmp(tmp + i, "Infinity", 8)) {
        *ok = true;
        return jv_float(tmp[0] == '-' ? -INFINITY : INFINITY);
    }
    if (!((tmp[i] >= '0' && tmp[i] <= '9') || (tmp[i] == '.' && tmp[i + 1] >= '0' && tmp[i + 1] <= '9'))) {
        *ok = false;
        return jv_float(0);
    }
    // only decimal digits, '.', and an exponent: cut anything strtod would take beyond that (hex, nan)
    size_t j = i;
    while ((tmp[j] >= '0' && tmp[j] <= '9') || tmp[j] == '.' || tmp[j] == 'e' || tmp[j] == 'E' ||
           ((tmp[j] == '+' || tmp[j] == '-') && (tmp[j - 1] == 'e' || tmp[j - 1] == 'E')))
        j++;
    tmp[j] = '\0';
    *ok = true;
    return jv_float(strtod(tmp, NULL));
}

static struct jv indent(struct jinterp *I, struct jstr s, struct jv width, bool first, bool blank, int line) {
    struct jbuf pad = {0};
    if (width.t == JV_INT) {
        for (int64_t k = 0; k < width.u.i && k < 4096; k++)
            jbuf_put(I->c, &pad, " ", 1);
    } else if (width.t == JV_STR) {
        jbuf_put(I->c, &pad, width.u.s.p, width.u.s.n);
    } else {
        jctx_fail(I->c, line, "width must be a number");
    }
    struct jbuf b = {0};
    size_t i = 0, ln = 0;
    for (;;) {
        const char *nl = memchr(s.p + i, '\n', s.n - i);
        size_t end = nl ? (size_t)(nl - s.p) : s.n;
        bool empty = end == i;
        if (!((!first && ln == 0) || (!blank && empty)))
            jbuf_put(I->c, &b, pad.p, pad.n);
        jbuf_put(I->c, &b, s.p + i, end - i);
        if (!nl)
            break;
        jbuf_put(I->c, &b, "\n", 1);
        i = end + 1;
        ln++;
    }
    return jv_str(jbuf_str(&b));
}

static struct jv object_method(struct jinterp *I, int id, struct jv self, struct jv args, int line);

static struct jv dict_items(struct jinterp *I, struct jv o) {
    struct jv a = jv_array(I->c, o.u.o->n);
    for (size_t i = 0; i < o.u.o->n; i++) {
        struct jv pair = jv_array(I->c, 2);
        jv_push(I->c, pair, jv_key(I->c, o, i));
        jv_push(I->c, pair, o.u.o->v[i]);
        jv_push(I->c, a, pair);
    }
    return a;
}

/* A filter on undefined, as jinja2's default Undefined behaves (empty string, empty list, 0) where
 * @huggingface/jinja refuses (an extension: templates written for transformers rely on it, e.g. `x|trim` or
 * `tools|length` with no tools).  Sets *done when it applies. */
static struct jv filter_undefined(struct jinterp *I, struct jstr name, bool *done) {
    static const char *const as_string[] = {"trim", "upper", "lower",  "title",  "capitalize", "string",
                                            "join", "e",     "escape", "indent", "replace"};
    static const char *const as_list[] = {"list",       "items",      "sort", "reverse",  "unique", "select",
                                          "selectattr", "rejectattr", "map",  "dictsort", "reject"};
    *done = true;
    for (size_t i = 0; i < sizeof as_string / sizeof as_string[0]; i++)
        if (jstr_eq(name, as_string[i]))
            return jv_str(S(""));
    for (size_t i = 0; i < sizeof as_list / sizeof as_list[0]; i++)
        if (jstr_eq(name, as_list[i]))
            return jv_array(I->c, 0);
    if (jstr_eq(name, "length") || jstr_eq(name, "count") || jstr_eq(name, "int"))
        return jv_int(0);
    if (jstr_eq(name, "float"))
        return jv_float(0);
    if (jstr_eq(name, "first") || jstr_eq(name, "last"))
        return jv_undef();
    *done = false;
    return jv_undef();
}

static struct jv filter_plain(struct jinterp *I, struct jv v, struct jstr name, int line) {
    struct jctx *c = I->c;
    if (jstr_eq(name, "safe"))
        return v;
    if (v.t == JV_UNDEF && !jstr_eq(name, "tojson")) {
        bool done;
        struct jv r = filter_undefined(I, name, &done);
        if (done)
            return r;
    }
    if (jstr_eq(name, "tojson")) {
        struct jjson_opts o = {.undefined_as_null = true};
        return to_json(I, v, &o, line);
    }
    if (v.t == JV_ARRAY) {
        size_t n = v.u.a->n;
        if (jstr_eq(name, "list"))
            return v;
        if (jstr_eq(name, "select") || jstr_eq(name, "reject")) { // the items (not) truthy
            struct jv out = jv_array(c, 0);
            for (size_t i = 0; i < n; i++)
                if (jv_truthy(v.u.a->v[i]) == (name.p[0] == 's'))
                    jv_push(c, out, v.u.a->v[i]);
            return out;
        }
        if (jstr_eq(name, "first"))
            return n ? v.u.a->v[0] : jv_undef();
        if (jstr_eq(name, "last"))
            return n ? v.u.a->v[n - 1] : jv_undef();
        if (jstr_eq(name, "length") || jstr_eq(name, "count"))
            return jv_int((int64_t)n);
        if (jstr_eq(name, "reverse")) {
            struct jv a = jv_array(c, n);
            for (size_t i = n; i-- > 0;)
                jv_push(c, a, v.u.a->v[i]);
            return a;
        }
        if (jstr_eq(name, "sort")) {
            struct sort_ctx s = {.I = I, .key_index = -1, .line = line};
            return sorted(&s, v);
        }
        if (jstr_eq(name, "join"))
            return js_join(I, v, S(""));
        if (jstr_eq(name, "string")) {
            struct jjson_opts o = {0};
            return to_json(I, v, &o, line);
        }
        if (jstr_eq(name, "unique")) {
            struct jv a = jv_array(c, n);
            for (size_t i = 0; i < n; i++) {
                bool seen = false;
                for (size_t j = 0; j < a.u.a->n && !seen; j++)
                    seen = value_strict_eq(a.u.a->v[j], v.u.a->v[i]);
                if (!seen)
                    jv_push(c, a, v.u.a->v[i]);
            }
            return a;
        }
        if (jstr_eq(name, "sum") || jstr_eq(name, "min") || jstr_eq(name, "max")) { // jinja2's (extensions)
            if (name.p[0] == 's') {
                bool fl = false;
                double sum = 0;
                int64_t isum = 0;
                for (size_t i = 0; i < n; i++) {
                    struct jv x = v.u.a->v[i];
                    if (!num_like(x))
                        jctx_fail(c, line, "sum: %s is not a number", jv_type_name(x.t));
                    fl |= x.t == JV_FLOAT;
                    sum += num(x);
                    if (__builtin_add_overflow(isum,
                                               x.t == JV_INT    ? x.u.i
                                               : x.t == JV_BOOL ? (int64_t)x.u.b
                                                                : 0,
                                               &isum))
                        fl = true; // past int64: the float sum
                }
                return fl ? jv_float(sum) : jv_int(isum);
            }
            if (!n)
                return jv_undef();
            struct jv best = v.u.a->v[0];
            for (size_t i = 1; i < n; i++) {
                int r = compare(I, v.u.a->v[i], best, false, line);
                if (name.p[1] == 'i' ? r < 0 : r > 0)
                    best = v.u.a->v[i];
            }
            return best;
        }
        jctx_fail(c, line, "Unknown ArrayValue filter: %.*s", (int)name.n, name.p);
    }
    if (v.t == JV_STR) {
        struct jstr s = v.u.s;
        if (jstr_eq(name, "length") || jstr_eq(name, "count"))
            return jv_int((int64_t)jv_utf8_count(s));
        if (jstr_eq(name, "upper") || jstr_eq(name, "lower"))
            return map_ascii(I, s, name.p[0] == 'u');
        if (jstr_eq(name, "title"))
            return title(I, s);
        if (jstr_eq(name, "capitalize")) { // jinja2's (Python's str.capitalize): the rest lower-cased
            char *d = jalloc(c, s.n + 1);
            for (size_t i = 0; i < s.n; i++)
                d[i] = (char)(i == 0 ? (s.p[i] >= 'a' && s.p[i] <= 'z' ? s.p[i] - 32 : s.p[i])
                                     : (s.p[i] >= 'A' && s.p[i] <= 'Z' ? s.p[i] + 32 : s.p[i]));
            return jv_str((struct jstr){d, s.n});
        }
        if (jstr_eq(name, "trim"))
            return jv_str(trim(s, true, true));
        if (jstr_eq(name, "indent"))
            return indent(I, s, jv_int(4), false, false, line);
        if (jstr_eq(name, "join") || jstr_eq(name, "string"))
            return v;
        if (jstr_eq(name, "int")) {
            bool ok;
            struct jv r = parse_int(s, &ok);
            return ok ? r : jv_int(0);
        }
        if (jstr_eq(name, "float")) {
            bool ok;
            struct jv r = parse_float(s, &ok);
            return ok ? r : jv_float(0);
        }
        if (jstr_eq(name, "e") || jstr_eq(name, "escape")) { // jinja2's HTML escaping (an extension)
            struct jbuf b = {0};
            for (size_t i = 0; i < s.n; i++) {
                const char *rep = s.p[i] == '&'    ? "&amp;"
                                  : s.p[i] == '<'  ? "&lt;"
                                  : s.p[i] == '>'  ? "&gt;"
                                  : s.p[i] == '"'  ? "&#34;"
                                  : s.p[i] == '\'' ? "&#39;"
                                                   : NULL;
                if (rep)
                    jbuf_puts(c, &b, rep);
                else
                    jbuf_put(c, &b, s.p + i, 1);
            }
            return jv_str(jbuf_str(&b));
        }
        jctx_fail(c, line, "Unknown StringValue filter: %.*s", (int)name.n, name.p);
    }
    if (jv_is_number(v)) {
        if (jstr_eq(name, "abs"))
            return v.t == JV_INT
                       ? (v.u.i == INT64_MIN ? jv_float(-(double)v.u.i) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i))
                       : jv_float(fabs(v.u.f));
        if (jstr_eq(name, "int"))
            return v.t == JV_INT ? v : jv_int_of(floor(v.u.f));
        if (jstr_eq(name, "float"))
            return jv_float(num(v));
        if (jstr_eq(name, "string")) {
            struct jbuf b = {0};
            jv_render(c, &b, v);
            return jv_str(jbuf_str(&b));
        }
        if (jstr_eq(name, "round")) // jinja2's (an extension): to a float
            return jv_float(round(num(v)));
        jctx_fail(c, line, "Unknown NumericValue filter: %.*s", (int)name.n, name.p);
    }
    if (v.t == JV_OBJECT || v.t == JV_KWARGS) {
        if (jstr_eq(name, "items"))
            return dict_items(I, v);
        if (jstr_eq(name, "length") || jstr_eq(name, "count"))
            return jv_int((int64_t)v.u.o->n);
        for (size_t i = 0; i < sizeof object_methods / sizeof object_methods[0]; i++)
            if (jstr_eq(name, object_methods[i].name))
                return object_method(I, object_methods[i].id, v, jv_array(c, 0), line);
        jctx_fail(c, line, "Unknown ObjectValue filter: %.*s", (int)name.n, name.p);
    }
    if (v.t == JV_BOOL) {
        if (jstr_eq(name, "bool"))
            return v;
        if (jstr_eq(name, "int"))
            return jv_int(v.u.b);
        if (jstr_eq(name, "float"))
            return jv_float(v.u.b);
        if (jstr_eq(name, "string"))
            return jv_cstr(c, v.u.b ? "true" : "false");
        jctx_fail(c, line, "Unknown BooleanValue filter: %.*s", (int)name.n, name.p);
    }
    jctx_fail(c, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.n, name.p, jv_type_name(v.t));
}

static bool is_container(struct jv v) {
    return v.t == JV_OBJECT || v.t == JV_NAMESPACE || v.t == JV_KWARGS;
}

static struct jv filter_call(struct jinterp *I, struct jv v, const struct jnode *call, struct jv args,
                             struct jv kw, int line) {
    struct jctx *c = I->c;
    if (call->a->kind != JN_IDENT)
        jctx_fail(c, line, "Unknown filter");
    struct jstr name = call->a->str;
    const struct jnode *const *argn = (const struct jnode *const *)call->list;
    if (jstr_eq(name, "tojson")) {
        struct jv ind = kwarg(kw, "indent"), asc = kwarg(kw, "ensure_ascii"), sk = kwarg(kw, "sort_keys"),
                  sep = kwarg(kw, "separators");
        if (ind.t != JV_INT && ind.t != JV_NULL && ind.t != JV_UNDEF)
            jctx_fail(c, line, "If set, indent must be a number");
        if (asc.t != JV_BOOL && asc.t != JV_UNDEF)
            jctx_fail(c, line, "If set, ensure_ascii must be a boolean");
        if (sk.t != JV_BOOL && sk.t != JV_UNDEF)
            jctx_fail(c, line, "If set, sort_keys must be a boolean");
        struct jjson_opts o = {.undefined_as_null = true};
        o.indent = ind.t == JV_INT ? (int)(ind.u.i > 64 ? 64 : ind.u.i < 0 ? 0 : ind.u.i) : 0;
        o.ensure_ascii = asc.t == JV_BOOL && asc.u.b;
        o.sort_keys = sk.t == JV_BOOL && sk.u.b;
        if (sep.t == JV_ARRAY) {
            if (sep.u.a->n != 2 || sep.u.a->v[0].t != JV_STR || sep.u.a->v[1].t != JV_STR)
                jctx_fail(c, line, "separators must be a tuple of two strings");
            o.item_sep = jstr_dup(c, sep.u.a->v[0].u.s.p, sep.u.a->v[0].u.s.n).p;
            o.key_sep = jstr_dup(c, sep.u.a->v[1].u.s.p, sep.u.a->v[1].u.s.n).p;
        } else if (sep.t != JV_NULL && sep.t != JV_UNDEF) {
            jctx_fail(c, line, "If set, separators must be a tuple of two strings");
        }
        return to_json(I, v, &o, line);
    }
    if (v.t == JV_UNDEF && !jstr_eq(name, "int") && !jstr_eq(name, "float") && !jstr_eq(name, "default") &&
        !jstr_eq(name, "d")) {
        bool done;
        struct jv r = filter_undefined(I, name, &done);
        if (done)
            return r;
    }
    if (jstr_eq(name, "join")) {
        struct jv items;
        if (v.t == JV_STR)
            items = chars(I, v.u.s);
        else if (v.t == JV_ARRAY)
            items = v;
        else
            jctx_fail(c, line, "Cannot apply filter \"join\" to type: %s", jv_type_name(v.t));
        struct jv sep = opt(args, 0, kw, "separator", jv_str(S("")));
        if (sep.t != JV_STR)
            jctx_fail(c, line, "separator must be a string");
        return js_join(I, items, sep.u.s);
    }
    if (jstr_eq(name, "int") || jstr_eq(name, "float")) {
        bool is_int = name.p[0] == 'i';
        struct jv def = opt(args, 0, kw, "default", is_int ? jv_int(0) : jv_float(0));
        if (v.t == JV_STR) {
            bool ok;
            struct jv r = is_int ? parse_int(v.u.s, &ok) : parse_float(v.u.s, &ok);
            return ok ? r : def;
        }
        if (jv_is_number(v))
            return v;
        if (v.t == JV_BOOL)
            return is_int ? jv_int(v.u.b) : jv_float(v.u.b);
        if (v.t == JV_UNDEF) // jinja2: the default (an extension)
            return def;
        jctx_fail(c, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.n, name.p,
                  jv_type_name(v.t));
    }
    if (jstr_eq(name, "default") || jstr_eq(name, "d")) {
        struct jv def = arg_at(args, 0);
        if (def.t == JV_UNDEF)
            def = jv_str(S(""));
        struct jv boolean = opt(args, 1, kw, "boolean", jv_bool(false));
        if (boolean.t != JV_BOOL)
            jctx_fail(c, line, "`default` filter flag must be a boolean");
        if (v.t == JV_UNDEF || (boolean.u.b && !jv_truthy(v)))
            return def;
        return v;
    }
    if (v.t == JV_ARRAY) {
        if (jstr_eq(name, "sort")) {
            struct jv rev = opt(args, 0, kw, "reverse", jv_bool(false));
            struct jv cs = opt(args, 1, kw, "case_sensitive", jv_bool(false));
            struct jv attr = opt(args, 2, kw, "attribute", jv_null());
            if (rev.t != JV_BOOL)
                jctx_fail(c, line, "reverse must be a boolean");
            if (cs.t != JV_BOOL)
                jctx_fail(c, line, "case_sensitive must be a boolean");
            if (attr.t != JV_STR && attr.t != JV_INT && attr.t != JV_NULL)
                jctx_fail(c, line, "attribute must be a string, integer, or null");
            struct sort_ctx s = {
                .I = I, .reverse = rev.u.b, .case_sensitive = cs.u.b, .key_index = -1, .line = line};
            if (attr.t == JV_STR) {
                s.by_attr = true;
                s.attr = attr.u.s;
            } else if (attr.t == JV_INT) {
                struct jbuf b = {0};
                jbuf_printf(c, &b, "%lld", (long long)attr.u.i);
                s.by_attr = true;
                s.attr = jbuf_str(&b);
            }
            return sorted(&s, v);
        }
        if (jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr")) {
            bool select = name.p[0] == 's';
            for (size_t i = 0; i < v.u.a->n; i++)
                if (!is_container(v.u.a->v[i]))
                    jctx_fail(c, line, "`%.*s` can only be applied to array of objects", (int)name.n, name.p);
            for (size_t i = 0; i < call->n; i++)
                if (argn[i]->kind != JN_STRING)
                    jctx_fail(c, line, "arguments of `%.*s` must be strings", (int)name.n, name.p);
            if (!call->n)
                jctx_fail(c, line, "`%.*s` needs an attribute", (int)name.n, name.p);
            struct jstr attr = argn[0]->str;
            struct jv value = call->n > 2 ? jv_str(argn[2]->str) : jv_undef();
            struct jv out = jv_array(c, 0);
            for (size_t i = 0; i < v.u.a->n; i++) {
                struct jv *a = jv_get(v.u.a->v[i], attr);
                bool r = false;
                if (a)
                    r = call->n > 1 ? jinja_test(I, argn[1]->str, *a, call->n > 2 ? &value : NULL, line)
                                    : jv_truthy(*a);
                if (r == select)
                    jv_push(c, out, v.u.a->v[i]);
            }
            return out;
        }
        if (jstr_eq(name, "select") || jstr_eq(name, "reject")) { // the items (not) passing a test (jinja2)
            bool select = name.p[0] == 's';
            struct jv test = arg_at(args, 0), targ = arg_at(args, 1);
            if (test.t != JV_STR && test.t != JV_UNDEF)
                jctx_fail(c, line, "the test of `%.*s` must be a name", (int)name.n, name.p);
            struct jv out = jv_array(c, 0);
            for (size_t i = 0; i < v.u.a->n; i++) {
                struct jv x = v.u.a->v[i];
                bool r = test.t == JV_UNDEF
                             ? jv_truthy(x)
                             : jinja_test(I, test.u.s, x, args.u.a->n > 1 ? &targ : NULL, line);
                if (r == select)
                    jv_push(c, out, x);
            }
            return out;
        }
        if (jstr_eq(name, "map")) {
            struct jv attr = kwarg(kw, "attribute");
            if (attr.t == JV_UNDEF)
                jctx_fail(c, line, "`map` expressions without `attribute` set are not currently supported.");
            if (attr.t != JV_STR)
                jctx_fail(c, line, "attribute must be a string");
            struct jv *def = jv_get(kw, S("default"));
            struct jv out = jv_array(c, v.u.a->n);
            for (size_t i = 0; i < v.u.a->n; i++) {
                if (!is_container(v.u.a->v[i]))
                    jctx_fail(c, line, "items in map must be an object");
                struct jv x = attribute_path(v.u.a->v[i], attr.u.s);
                jv_push(c, out, x.t == JV_UNDEF ? (def ? *def : jv_undef()) : x);
            }
            return out;
        }
        jctx_fail(c, line, "Unknown ArrayValue filter: %.*s", (int)name.n, name.p);
    }
    if (v.t == JV_STR) {
        if (jstr_eq(name, "indent")) {
            struct jv width = opt(args, 0, kw, "width", jv_int(4));
            if (width.t != JV_INT)
                jctx_fail(c, line, "width must be a number");
            struct jv first = opt(args, 1, kw, "first", jv_bool(false));
            struct jv blank = opt(args, 2, kw, "blank", jv_bool(false));
            return indent(I, v.u.s, width, jv_truthy(first), jv_truthy(blank), line);
        }
        if (jstr_eq(name, "replace")) {
            jv_push(c, args, kw);
            struct jfunc f = {.kind = JF_BUILTIN, .id = B_S_REPLACE, .self = v};
            return jinja_builtin_call(I, &f, args, line);
        }
        jctx_fail(c, line, "Unknown StringValue filter: %.*s", (int)name.n, name.p);
    }
    if (v.t == JV_OBJECT || v.t == JV_KWARGS) {
        for (size_t i = 0; i < sizeof object_methods / sizeof object_methods[0]; i++)
            if (jstr_eq(name, object_methods[i].name)) {
                struct jv all = jv_array(c, args.u.a->n + 1);
                for (size_t k = 0; k < args.u.a->n; k++)
                    jv_push(c, all, args.u.a->v[k]);
                if (kw.u.o->n)
                    jv_push(c, all, kw);
                return object_method(I, object_methods[i].id, v, all, line);
            }
        jctx_fail(c, line, "Unknown ObjectValue filter: %.*s", (int)name.n, name.p);
    }
    jctx_fail(c, line, "Cannot apply filter \"%.*s\" to type: %s", (int)name.n, name.p, jv_type_name(v.t));
}

struct jv jinja_filter(struct jinterp *I, struct jv operand, const struct jnode *filter, struct jv args,
                       struct jv kwargs, int line) {
    if (filter->kind == JN_IDENT)
        return filter_plain(I, operand, filter->str, line);
    if (filter->kind == JN_CALL)
        return filter_call(I, operand, filter, args, kwargs, line);
    jctx_fail(I->c, line, "Unknown filter");
}

/* ---- methods and globals -------------------------------------------------------------------------------- */

static struct jv object_method(struct jinterp *I, int id, struct jv self, struct jv args, int line) {
    struct jctx *c = I->c;
    switch (id) {
    case B_O_GET: {
        struct jv key = arg_at(args, 0);
        if (key.t != JV_STR)
            jctx_fail(c, line, "Object key must be a string: got %s", jv_type_name(key.t));
        struct jv *v = jv_get(self, key.u.s);
        if (v)
            return *v;
        struct jv def = args.u.a->n > 1 ? args.u.a->v[1] : jv_undef();
        return def.t == JV_UNDEF ? jv_null() : def;
    }
    case B_O_ITEMS:
        return dict_items(I, self);
    case B_O_KEYS: {
        struct jv a = jv_array(c, self.u.o->n);
        for (size_t i = 0; i < self.u.o->n; i++)
            jv_push(c, a, jv_key(c, self, i));
        return a;
    }
    case B_O_VALUES: {
        struct jv a = jv_array(c, self.u.o->n);
        for (size_t i = 0; i < self.u.o->n; i++)
            jv_push(c, a, self.u.o->v[i]);
        return a;
    }
    case B_O_DICTSORT: {
        struct jv kw = jv_undef();
        struct jv pos = jv_array(c, 0);
        for (size_t i = 0; i < args.u.a->n; i++) {
            if (args.u.a->v[i].t == JV_KWARGS)
                kw = args.u.a->v[i];
            else
                jv_push(c, pos, args.u.a->v[i]);
        }
        struct jv cs = opt(pos, 0, kw, "case_sensitive", jv_bool(false));
        struct jv by = opt(pos, 1, kw, "by", jv_str(S("key")));
        struct jv rev = opt(pos, 2, kw, "reverse", jv_bool(false));
        if (cs.t != JV_BOOL)
            jctx_fail(c, line, "case_sensitive must be a boolean");
        if (by.t != JV_STR || (!jstr_eq(by.u.s, "key") && !jstr_eq(by.u.s, "value")))
            jctx_fail(c, line, "by must be either 'key' or 'value'");
        if (rev.t != JV_BOOL)
            jctx_fail(c, line, "reverse must be a boolean");
        struct sort_ctx s = {.I = I,
                             .case_sensitive = cs.u.b,
                             .reverse = rev.u.b,
                             .key_index = jstr_eq(by.u.s, "key") ? 0 : 1,
                             .line = line};
        return sorted(&s, dict_items(I, self));
    }
    }
    return jv_undef();
}

static struct jv string_method(struct jinterp *I, int id, struct jstr s, struct jv args, int line) {
    struct jctx *c = I->c;
    struct jv a0 = arg_at(args, 0);
    switch (id) {
    case B_S_UPPER:
    case B_S_LOWER:
        return map_ascii(I, s, id == B_S_UPPER);
    case B_S_STRIP:
        return jv_str(trim(s, true, true));
    case B_S_LSTRIP:
        return jv_str(trim(s, true, false));
    case B_S_RSTRIP:
        return jv_str(trim(s, false, true));
    case B_S_TITLE:
        return title(I, s);
    case B_S_CAPITALIZE:
        return filter_plain(I, jv_str(s), S("capitalize"), line);
    case B_S_STARTSWITH:
    case B_S_ENDSWITH: {
        const char *what = id == B_S_STARTSWITH ? "startswith" : "endswith";
        if (!args.u.a->n)
            jctx_fail(c, line, "%s() requires at least one argument", what);
        bool (*test)(struct jstr, struct jstr) = id == B_S_STARTSWITH ? has_prefix : has_suffix;
        if (a0.t == JV_STR)
            return jv_bool(test(s, a0.u.s));
        if (a0.t == JV_ARRAY) {
            for (size_t i = 0; i < a0.u.a->n; i++) {
                if (a0.u.a->v[i].t != JV_STR)
                    jctx_fail(c, line, "%s() tuple elements must be strings", what);
                if (test(s, a0.u.a->v[i].u.s))
                    return jv_bool(true);
            }
            return jv_bool(false);
        }
        jctx_fail(c, line, "%s() argument must be a string or tuple of strings", what);
    }
    case B_S_SPLIT: {
        struct jv sep = a0.t == JV_UNDEF ? jv_null() : a0;
        struct jv ms = arg_at(args, 1);
        if (ms.t == JV_UNDEF)
            ms = jv_int(-1);
        if (ms.t != JV_INT)
            jctx_fail(c, line, "maxsplit argument must be a number");
        return split(I, s, sep, ms.u.i, line);
    }
    case B_S_REPLACE: {
        if (args.u.a->n < 2)
            jctx_fail(c, line, "replace() requires at least two arguments");
        struct jv o = args.u.a->v[0], n = args.u.a->v[1];
        if (o.t != JV_STR || n.t != JV_STR)
            jctx_fail(c, line, "replace() arguments must be strings");
        struct jv count = jv_null();
        if (args.u.a->n > 2) {
            count = args.u.a->v[2];
            if (count.t == JV_KWARGS) {
                struct jv *k = jv_get(count, S("count"));
                count = k ? *k : jv_null();
            }
        }
        if (count.t != JV_INT && count.t != JV_NULL)
            jctx_fail(c, line, "replace() count argument must be a number or null");
        return str_replace(I, s, o.u.s, n.u.s, count.t == JV_INT ? count.u.i : -1);
    }
    case B_S_FORMAT: { // Python's str.format without format specs: {} {0} {name}, {{ and }}
        struct jbuf b = {0};
        size_t auto_i = 0, npos = args.u.a->n;
        struct jv kw = npos && args.u.a->v[npos - 1].t == JV_KWARGS ? args.u.a->v[--npos] : jv_undef();
        for (size_t i = 0; i < s.n; i++) {
            char ch = s.p[i];
            if ((ch == '{' || ch == '}') && i + 1 < s.n && s.p[i + 1] == ch) {
                jbuf_put(c, &b, &ch, 1);
                i++;
                continue;
            }
            if (ch == '}')
                jctx_fail(c, line, "format(): single '}' encountered in format string");
            if (ch != '{') {
                jbuf_put(c, &b, &ch, 1);
                continue;
            }
            const char *end = memchr(s.p + i, '}', s.n - i);
            if (!end)
                jctx_fail(c, line, "format(): single '{' encountered in format string");
            struct jstr field = {s.p + i + 1, (size_t)(end - (s.p + i + 1))};
            struct jv v;
            if (memchr(field.p, ':', field.n) || memchr(field.p, '!', field.n))
                jctx_fail(c, line, "format(): format specs and conversions are not supported");
            if (!field.n) {
                v = auto_i < npos ? args.u.a->v[auto_i] : jv_undef();
                if (auto_i++ >= npos)
                    jctx_fail(c, line, "format(): not enough arguments");
            } else if (field.p[0] >= '0' && field.p[0] <= '9') {
                size_t k = (size_t)strtoul(jstr_dup(c, field.p, field.n).p, NULL, 10);
                if (k >= npos)
                    jctx_fail(c, line, "format(): index %zu out of range", k);
                v = args.u.a->v[k];
            } else {
                struct jv *x = kw.t == JV_KWARGS ? jv_get(kw, field) : NULL;
                if (!x)
                    jctx_fail(c, line, "format(): no argument '%.*s'", (int)field.n, field.p);
                v = *x;
            }
            if (v.t == JV_BOOL)
                jbuf_puts(c, &b, v.u.b ? "True" : "False");
            else if (v.t == JV_NULL)
                jbuf_puts(c, &b, "None");
            else
                jv_render(c, &b, v);
            i = (size_t)(end - s.p);
        }
        return jv_str(jbuf_str(&b));
    }
    case B_S_FIND:
    case B_S_COUNT: {
        if (a0.t != JV_STR)
            jctx_fail(c, line, "%s() argument must be a string", id == B_S_FIND ? "find" : "count");
        if (id == B_S_FIND) {
            const char *hit = find(s, 0, a0.u.s);
            return jv_int(hit ? (int64_t)jv_utf8_count((struct jstr){s.p, (size_t)(hit - s.p)}) : -1);
        }
        if (!a0.u.s.n)
            return jv_int((int64_t)jv_utf8_count(s) + 1);
        int64_t n = 0;
        for (const char *hit = find(s, 0, a0.u.s); hit; hit = find(s, (size_t)(hit - s.p) + a0.u.s.n, a0.u.s))
            n++;
        return jv_int(n);
    }
    }
    return jv_undef();
}

static struct jv strftime_now(struct jinterp *I, struct jv fmt, int line) {
    if (fmt.t != JV_STR)
        jctx_fail(I->c, line, "strftime_now needs a format string");
    static const char *const mon[] = {"January", "February", "March",     "April",   "May",      "June",
                                      "July",    "August",   "September", "October", "November", "December"};
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    struct jbuf b = {0};
    struct jstr f = fmt.u.s;
    for (size_t i = 0; i < f.n; i++) {
        if (f.p[i] == '%' && i + 1 < f.n && strchr("YmdbBHM%", f.p[i + 1])) {
            char k = f.p[++i];
            switch (k) {
            case 'Y':
                jbuf_printf(I->c, &b, "%d", tm.tm_year + 1900);
                break;
            case 'm':
                jbuf_printf(I->c, &b, "%02d", tm.tm_mon + 1);
                break;
            case 'd':
                jbuf_printf(I->c, &b, "%02d", tm.tm_mday);
                break;
            case 'b':
                jbuf_put(I->c, &b, mon[tm.tm_mon], 3);
                break;
            case 'B':
                jbuf_puts(I->c, &b, mon[tm.tm_mon]);
                break;
            case 'H':
                jbuf_printf(I->c, &b, "%02d", tm.tm_hour);
                break;
            case 'M':
                jbuf_printf(I->c, &b, "%02d", tm.tm_min);
                break;
            default:
                jbuf_put(I->c, &b, "%", 1);
            }
            continue;
        }
        jbuf_put(I->c, &b, f.p + i, 1);
    }
    return jv_str(jbuf_str(&b));
}

struct jv jinja_builtin_call(struct jinterp *I, const struct jfunc *f, struct jv args, int line) {
    struct jctx *c = I->c;
    if (f->id >= B_S_UPPER && f->id <= B_S_FORMAT)
        return string_method(I, f->id, f->self.u.s, args, line);
    if (f->id >= B_O_GET && f->id <= B_O_DICTSORT)
        return object_method(I, f->id, f->self, args, line);
    size_t n = args.u.a->n;
    struct jv kw = n && args.u.a->v[n - 1].t == JV_KWARGS ? args.u.a->v[n - 1] : jv_undef();
    if (kw.t != JV_UNDEF)
        n--;
    switch (f->id) {
    case B_A_APPEND:
        if (n != 1)
            jctx_fail(c, line, "append() takes exactly one argument");
        jv_push(c, f->self, args.u.a->v[0]);
        return jv_null();
    case B_A_POP: { // Python's list.pop(index = -1)
        struct jarr *a = f->self.u.a;
        int64_t idx = n ? (args.u.a->v[0].t == JV_INT ? args.u.a->v[0].u.i : INT64_MIN) : -1;
        if (idx == INT64_MIN)
            jctx_fail(c, line, "pop() index must be an integer");
        if (idx < 0)
            idx += (int64_t)a->n;
        if (idx < 0 || idx >= (int64_t)a->n)
            jctx_fail(c, line, "pop index out of range");
        struct jv v = a->v[idx];
        memmove(a->v + idx, a->v + idx + 1, (a->n - (size_t)idx - 1) * sizeof *a->v);
        a->n--;
        return v;
    }
    case B_RAISE: {
        struct jv m = arg_at(args, 0);
        struct jbuf b = {0};
        if (m.t == JV_STR)
            jbuf_put(c, &b, m.u.s.p, m.u.s.n);
        else
            jv_render_js(c, &b, m);
        jctx_fail(c, line, "%.200s", b.p ? b.p : "");
    }
    case B_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (n < 1 || n > 3)
            jctx_fail(c, line, "range expected 1 to 3 arguments, got %zu", n);
        for (size_t i = 0; i < n; i++) {
            if (!num_like(args.u.a->v[i]))
                jctx_fail(c, line, "range() arguments must be numbers");
            double d = num(args.u.a->v[i]);
            if (!isfinite(d) || fabs(d) > 1e15)
                jctx_fail(c, line, "range() argument out of range");
            v[i] = (int64_t)d;
        }
        int64_t start = n == 1 ? 0 : v[0], stop = n == 1 ? v[0] : v[1], stepv = n == 3 ? v[2] : 1;
        if (stepv == 0)
            jctx_fail(c, line, "range() step must not be zero");
        struct jv a = jv_array(c, 0);
        for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
            if (a.u.a->n >= 1000000)
                jctx_fail(c, line, "range() of more than 1000000 numbers");
            jv_push(c, a, jv_int(i));
        }
        return a;
    }
    case B_STRFTIME:
        return strftime_now(I, arg_at(args, 0), line);
    case B_NAMESPACE: {
        if (n > 1)
            jctx_fail(c, line, "namespace expected at most 1 argument, got %zu", n);
        struct jv ns = jv_object(c, JV_NAMESPACE);
        if (n == 1) {
            struct jv src = args.u.a->v[0];
            if (src.t == JV_OBJECT) {
                for (size_t i = 0; i < src.u.o->n; i++)
                    jv_set(c, ns, src.u.o->k[i], src.u.o->v[i]);
            } else if (src.t == JV_ARRAY) {
                for (size_t i = 0; i < src.u.a->n; i++) {
                    struct jv p = src.u.a->v[i];
                    if (p.t != JV_ARRAY || p.u.a->n != 2 || p.u.a->v[0].t != JV_STR)
                        jctx_fail(c, line,
                                  "namespace expected an object or an iterable of [key, value] pairs");
                    jv_set(c, ns, p.u.a->v[0].u.s, p.u.a->v[1]);
                }
            } else {
                jctx_fail(c, line, "'%s' object is not iterable", jv_type_name(src.t));
            }
        }
        if (kw.t == JV_KWARGS)
            for (size_t i = 0; i < kw.u.o->n; i++)
                jv_set(c, ns, kw.u.o->k[i], kw.u.o->v[i]);
        return ns;
    }
    case B_DICT: {
        struct jv d = jv_object(c, JV_OBJECT);
        if (kw.t == JV_KWARGS)
            for (size_t i = 0; i < kw.u.o->n; i++)
                jv_set(c, d, kw.u.o->k[i], kw.u.o->v[i]);
        return d;
    }
    }
    jctx_fail(c, line, "unknown built-in function");
}

void jinja_globals(struct jinterp *I, struct jv vars) {
    struct jctx *c = I->c;
    jv_set(c, vars, S("namespace"), func(I, B_NAMESPACE, jv_undef()));
    jv_set(c, vars, S("false"), jv_bool(false));
    jv_set(c, vars, S("true"), jv_bool(true));
    jv_set(c, vars, S("none"), jv_null());
    jv_set(c, vars, S("raise_exception"), func(I, B_RAISE, jv_undef()));
    jv_set(c, vars, S("range"), func(I, B_RANGE, jv_undef()));
    jv_set(c, vars, S("strftime_now"), func(I, B_STRFTIME, jv_undef()));
    jv_set(c, vars, S("True"), jv_bool(true));
    jv_set(c, vars, S("False"), jv_bool(false));
    jv_set(c, vars, S("None"), jv_null());
    jv_set(c, vars, S("dict"), func(I, B_DICT, jv_undef()));
}
