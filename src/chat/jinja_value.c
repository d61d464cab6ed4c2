/* Jinja values: the arena, the builder, rendering as text and as JSON, cJSON input. */
#include "chat/jinja_value.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

struct jchunk {
    struct jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void jctx_init(struct jctx *c, size_t mem_limit) {
    memset(c, 0, sizeof *c);
    c->mem_limit = mem_limit;
}

void jctx_free(struct jctx *c) {
    struct jchunk *k = c->chunks;
    while (k) {
        struct jchunk *next = k->next;
        ci_free(k);
        k = next;
    }
    c->chunks = NULL;
    c->used = 0;
}

void jctx_fail(struct jctx *c, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->line = line;
    longjmp(c->jb, 1);
}

void *jalloc(struct jctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct jchunk *k = c->chunks;
    if (!k || k->size - k->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (c->used + size > c->mem_limit || size > c->mem_limit)
            jctx_fail(c, 0, "the template needs more than %zu MiB of memory", c->mem_limit >> 20);
        k = ci_malloc(sizeof *k + size);
        if (!k)
            jctx_fail(c, 0, "out of memory");
        k->size = size;
        k->used = 0;
        k->next = c->chunks;
        c->chunks = k;
        c->used += size;
    }
    void *p = k->data + k->used;
    k->used += n;
    memset(p, 0, n);
    return p;
}

struct jstr jstr_dup(struct jctx *c, const char *p, size_t n) {
    char *d = jalloc(c, n + 1);
    if (n)
        memcpy(d, p, n);
    return (struct jstr){d, n};
}

bool jstr_eq(struct jstr a, const char *s) {
    size_t n = strlen(s);
    return a.n == n && memcmp(a.p, s, n) == 0;
}

void jbuf_put(struct jctx *c, struct jbuf *b, const char *s, size_t n) {
    if (!n)
        return;
    if (b->limit && b->n + n > b->limit)
        jctx_fail(c, 0, "the rendered text exceeds %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = jalloc(c, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jbuf_puts(struct jctx *c, struct jbuf *b, const char *s) {
    jbuf_put(c, b, s, strlen(s));
}

void jbuf_printf(struct jctx *c, struct jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        jbuf_put(c, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

struct jstr jbuf_str(const struct jbuf *b) {
    return (struct jstr){b->p ? b->p : "", b->n};
}

struct jv jv_undef(void) {
    return (struct jv){.t = JV_UNDEF};
}
struct jv jv_null(void) {
    return (struct jv){.t = JV_NULL};
}
struct jv jv_bool(bool b) {
    return (struct jv){.t = JV_BOOL, .u.b = b};
}
struct jv jv_int(int64_t i) {
    return (struct jv){.t = JV_INT, .u.i = i};
}
struct jv jv_float(double f) {
    return (struct jv){.t = JV_FLOAT, .u.f = f};
}
struct jv jv_int_of(double d) {
    if (isfinite(d) && d > -9.2e18 && d < 9.2e18)
        return jv_int((int64_t)d);
    return jv_float(d);
}
struct jv jv_str(struct jstr s) {
    return (struct jv){.t = JV_STR, .u.s = s};
}
struct jv jv_cstr(struct jctx *c, const char *s) {
    return jv_str(jstr_dup(c, s, strlen(s)));
}

struct jv jv_array(struct jctx *c, size_t cap) {
    struct jarr *a = jalloc(c, sizeof *a);
    if (cap) {
        a->v = jalloc(c, cap * sizeof *a->v);
        a->cap = cap;
    }
    return (struct jv){.t = JV_ARRAY, .u.a = a};
}

struct jv jv_object(struct jctx *c, enum jv_type t) {
    struct jobj *o = jalloc(c, sizeof *o);
    return (struct jv){.t = t, .u.o = o};
}

void jv_push(struct jctx *c, struct jv arr, struct jv x) {
    struct jarr *a = arr.u.a;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4;
        struct jv *v = jalloc(c, cap * sizeof *v);
        if (a->n)
            memcpy(v, a->v, a->n * sizeof *v);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

struct jv *jv_get(struct jv obj, struct jstr key) {
    struct jobj *o = obj.u.o;
    for (size_t i = 0; i < o->n; i++)
        if (o->k[i].n == key.n && memcmp(o->k[i].p, key.p, key.n) == 0)
            return &o->v[i];
    return NULL;
}

void jv_set(struct jctx *c, struct jv obj, struct jstr key, struct jv x) {
    struct jv *have = jv_get(obj, key);
    if (have) {
        *have = x;
        return;
    }
    struct jobj *o = obj.u.o;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4;
        struct jstr *k = jalloc(c, cap * sizeof *k);
        struct jv *v = jalloc(c, cap * sizeof *v);
        bool *ki = jalloc(c, cap * sizeof *ki);
        if (o->n) {
            memcpy(k, o->k, o->n * sizeof *k);
            memcpy(v, o->v, o->n * sizeof *v);
            if (o->kint)
                memcpy(ki, o->kint, o->n * sizeof *ki);
        }
        o->k = k;
        o->v = v;
        o->kint = ki;
        o->cap = cap;
    }
    if (!o->kint) // a preallocated object (the loop variable): the flags follow its capacity
        o->kint = jalloc(c, o->cap * sizeof *o->kint);
    o->k[o->n] = key;
    o->kint[o->n] = false;
    o->v[o->n++] = x;
}

void jv_set_int_key(struct jctx *c, struct jv obj, int64_t key, struct jv x) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)key);
    struct jstr k = jstr_dup(c, tmp, (size_t)n);
    jv_set(c, obj, k, x);
    struct jobj *o = obj.u.o;
    for (size_t i = 0; i < o->n; i++)
        if (o->k[i].n == k.n && memcmp(o->k[i].p, k.p, k.n) == 0)
            o->kint[i] = true;
}

struct jv jv_key(struct jctx *c, struct jv obj, size_t i) {
    struct jobj *o = obj.u.o;
    if (o->kint && o->kint[i])
        return jv_int(strtoll(jstr_dup(c, o->k[i].p, o->k[i].n).p, NULL, 10));
    return jv_str(o->k[i]);
}

const char *jv_type_name(enum jv_type t) {
    static const char *const names[] = {
        [JV_UNDEF] = "UndefinedValue",     [JV_NULL] = "NullValue",
        [JV_BOOL] = "BooleanValue",        [JV_INT] = "IntegerValue",
        [JV_FLOAT] = "FloatValue",         [JV_STR] = "StringValue",
        [JV_ARRAY] = "ArrayValue",         [JV_OBJECT] = "ObjectValue",
        [JV_NAMESPACE] = "NamespaceValue", [JV_KWARGS] = "KeywordArgumentsValue",
        [JV_FUNC] = "FunctionValue",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

bool jv_truthy(struct jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NULL:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0 && !isnan(v.u.f);
    case JV_STR:
        return v.u.s.n > 0;
    case JV_ARRAY:
        return v.u.a->n > 0;
    case JV_OBJECT:
    case JV_KWARGS:
        return v.u.o->n > 0;
    case JV_NAMESPACE: // a JavaScript Map object: always truthy
    case JV_FUNC:
        return true;
    }
    return false;
}

bool jv_is_number(struct jv v) {
    return v.t == JV_INT || v.t == JV_FLOAT;
}

void jv_format_js_number(char *out, size_t size, double x) {
    if (isnan(x)) {
        snprintf(out, size, "NaN");
        return;
    }
    if (isinf(x)) {
        snprintf(out, size, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (x == 0) {
        snprintf(out, size, "0");
        return;
    }
    char tmp[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    // tmp: [-]d[.ddd]e[+-]XX
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[32];
    int k = 0;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9' && k < 31)
            digits[k++] = *s;
    int e = atoi(s + 1);
    while (k > 1 && digits[k - 1] == '0')
        k--;
    digits[k] = '\0';
    int n = e + 1;
    char buf[80];
    size_t o = 0;
    if (neg)
        buf[o++] = '-';
    if (k <= n && n <= 21) {
        memcpy(buf + o, digits, (size_t)k);
        o += (size_t)k;
        for (int i = 0; i < n - k; i++)
            buf[o++] = '0';
    } else if (0 < n && n <= 21) {
        memcpy(buf + o, digits, (size_t)n);
        o += (size_t)n;
        buf[o++] = '.';
        memcpy(buf + o, digits + n, (size_t)(k - n));
        o += (size_t)(k - n);
    } else if (-6 < n && n <= 0) {
        buf[o++] = '0';
        buf[o++] = '.';
        for (int i = 0; i < -n; i++)
            buf[o++] = '0';
        memcpy(buf + o, digits, (size_t)k);
        o += (size_t)k;
    } else {
        buf[o++] = digits[0];
        if (k > 1) {
            buf[o++] = '.';
            memcpy(buf + o, digits + 1, (size_t)(k - 1));
            o += (size_t)(k - 1);
        }
        o += (size_t)snprintf(buf + o, sizeof buf - o, "e%c%d", n - 1 < 0 ? '-' : '+', abs(n - 1));
    }
    buf[o] = '\0';
    snprintf(out, size, "%s", buf);
}

static void render_float(struct jctx *c, struct jbuf *b, double f) {
    char tmp[400];
    if (f == 0 && signbit(f))
        snprintf(tmp, sizeof tmp, "-0.0");
    else if (isfinite(f) && f == floor(f) && fabs(f) < 1e21)
        snprintf(tmp, sizeof tmp, "%.1f", f);
    else
        jv_format_js_number(tmp, sizeof tmp, f);
    jbuf_puts(c, b, tmp);
}

void jv_render_js(struct jctx *c, struct jbuf *b, struct jv v) {
    char tmp[64];
    switch (v.t) {
    case JV_INT:
        jbuf_printf(c, b, "%lld", (long long)v.u.i);
        return;
    case JV_FLOAT:
        jv_format_js_number(tmp, sizeof tmp, v.u.f);
        jbuf_puts(c, b, tmp);
        return;
    case JV_BOOL:
        jbuf_puts(c, b, v.u.b ? "true" : "false");
        return;
    case JV_STR:
        jbuf_put(c, b, v.u.s.p, v.u.s.n);
        return;
    case JV_ARRAY: // Array.prototype.toString of runtime values: their objects' text
        for (size_t i = 0; i < v.u.a->n; i++)
            jbuf_puts(c, b, i ? ",[object Object]" : "[object Object]");
        return;
    case JV_UNDEF:
        jbuf_puts(c, b, "undefined");
        return;
    case JV_NULL:
        jbuf_puts(c, b, "null");
        return;
    default:
        jbuf_puts(c, b, "[object Map]");
        return;
    }
}

void jv_render(struct jctx *c, struct jbuf *b, struct jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NULL:
        return;
    case JV_FLOAT:
        render_float(c, b, v.u.f);
        return;
    case JV_ARRAY:
    case JV_OBJECT:
    case JV_NAMESPACE:
    case JV_KWARGS: {
        struct jjson_opts o = {0};
        jv_to_json(c, b, v, &o, 0, 0);
        return;
    }
    case JV_FUNC:
        jbuf_puts(c, b, "[function]");
        return;
    default:
        jv_render_js(c, b, v);
    }
}

static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp) {
    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    int len = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > n)
        return 0;
    uint32_t v = p[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (p[i] & 0x3F);
    }
    *cp = v;
    return (size_t)len;
}

static void json_string(struct jctx *c, struct jbuf *b, struct jstr s, bool ascii) {
    jbuf_put(c, b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s.p;
    size_t i = 0;
    while (i < s.n) {
        unsigned char ch = p[i];
        size_t run = i;
        while (run < s.n && p[run] >= 0x20 && p[run] != '"' && p[run] != '\\' && (!ascii || p[run] < 0x7F))
            run++;
        if (run > i) {
            jbuf_put(c, b, (const char *)p + i, run - i);
            i = run;
            continue;
        }
        ch = p[i];
        switch (ch) {
        case '"':
            jbuf_put(c, b, "\\\"", 2);
            break;
        case '\\':
            jbuf_put(c, b, "\\\\", 2);
            break;
        case '\b':
            jbuf_put(c, b, "\\b", 2);
            break;
        case '\f':
            jbuf_put(c, b, "\\f", 2);
            break;
        case '\n':
            jbuf_put(c, b, "\\n", 2);
            break;
        case '\r':
            jbuf_put(c, b, "\\r", 2);
            break;
        case '\t':
            jbuf_put(c, b, "\\t", 2);
            break;
        default:
            if (ch < 0x20) {
                jbuf_printf(c, b, "\\u%04x", ch);
            } else { // ensure_ascii: 0x7F and every non-ASCII character as \uXXXX (UTF-16 units)
                uint32_t cp = 0;
                size_t len = utf8_decode(p + i, s.n - i, &cp);
                if (!len) {
                    jbuf_put(c, b, (const char *)p + i, 1);
                    i++;
                    continue;
                }
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    jbuf_printf(c, b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                } else {
                    jbuf_printf(c, b, "\\u%04x", cp);
                }
                i += len;
                continue;
            }
        }
        i++;
    }
    jbuf_put(c, b, "\"", 1);
}

static void pad(struct jctx *c, struct jbuf *b, int indent, int depth) {
    jbuf_put(c, b, "\n", 1);
    for (int i = 0; i < indent * depth; i++)
        jbuf_put(c, b, " ", 1);
}

static int key_cmp(const void *a, const void *b) {
    const struct jstr *x = *(const struct jstr *const *)a, *y = *(const struct jstr *const *)b;
    size_t n = x->n < y->n ? x->n : y->n;
    int r = memcmp(x->p, y->p, n);
    return r ? r : (x->n > y->n) - (x->n < y->n);
}

void jv_to_json(struct jctx *c, struct jbuf *b, struct jv v, const struct jjson_opts *o, int depth,
                int line) {
    if (depth > 256)
        jctx_fail(c, line, "tojson: nesting deeper than 256");
    const char *item_sep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    char tmp[64];
    switch (v.t) {
    case JV_NULL:
        jbuf_puts(c, b, "null");
        return;
    case JV_UNDEF:
        jbuf_puts(c, b, o->undefined_as_null ? "null" : "undefined");
        return;
    case JV_INT:
        jbuf_printf(c, b, "%lld", (long long)v.u.i);
        return;
    case JV_FLOAT:
        if (!isfinite(v.u.f)) {
            jbuf_puts(c, b, "null");
            return;
        }
        jv_format_js_number(tmp, sizeof tmp, v.u.f);
        jbuf_puts(c, b, tmp);
        return;
    case JV_BOOL:
        jbuf_puts(c, b, v.u.b ? "true" : "false");
        return;
    case JV_STR:
        json_string(c, b, v.u.s, o->ensure_ascii);
        return;
    case JV_ARRAY:
        jbuf_put(c, b, "[", 1);
        for (size_t i = 0; i < v.u.a->n; i++) {
            if (i)
                jbuf_puts(c, b, item_sep);
            if (o->indent)
                pad(c, b, o->indent, depth + 1);
            jv_to_json(c, b, v.u.a->v[i], o, depth + 1, line);
        }
        if (o->indent && v.u.a->n)
            pad(c, b, o->indent, depth);
        jbuf_put(c, b, "]", 1);
        return;
    case JV_OBJECT:
    case JV_NAMESPACE:
    case JV_KWARGS: {
        struct jobj *ob = v.u.o;
        size_t *order = jalloc(c, (ob->n + 1) * sizeof *order);
        for (size_t i = 0; i < ob->n; i++)
            order[i] = i;
        if (o->sort_keys && ob->n > 1) {
            const struct jstr **keys = jalloc(c, ob->n * sizeof *keys);
            for (size_t i = 0; i < ob->n; i++)
                keys[i] = &ob->k[i];
            qsort(keys, ob->n, sizeof *keys, key_cmp);
            for (size_t i = 0; i < ob->n; i++)
                order[i] = (size_t)(keys[i] - ob->k);
        }
        jbuf_put(c, b, "{", 1);
        for (size_t j = 0; j < ob->n; j++) {
            size_t i = order[j];
            if (j)
                jbuf_puts(c, b, item_sep);
            if (o->indent)
                pad(c, b, o->indent, depth + 1);
            json_string(c, b, ob->k[i], o->ensure_ascii);
            jbuf_puts(c, b, key_sep);
            jv_to_json(c, b, ob->v[i], o, depth + 1, line);
        }
        if (o->indent && ob->n)
            pad(c, b, o->indent, depth);
        jbuf_put(c, b, "}", 1);
        return;
    }
    case JV_FUNC:
        jctx_fail(c, line, "Cannot convert to JSON: FunctionValue");
    }
}

struct jv jv_from_cjson(struct jctx *c, const cJSON *j, int depth) {
    if (!j || cJSON_IsNull(j))
        return jv_null();
    if (depth > 128)
        jctx_fail(c, 0, "the context JSON nests deeper than 128");
    if (cJSON_IsBool(j))
        return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j))
        return jv_cstr(c, j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        struct jv a = jv_array(c, 0);
        for (const cJSON *e = j->child; e; e = e->next)
            jv_push(c, a, jv_from_cjson(c, e, depth + 1));
        return a;
    }
    if (cJSON_IsObject(j)) {
        struct jv o = jv_object(c, JV_OBJECT);
        for (const cJSON *e = j->child; e; e = e->next)
            jv_set(c, o, jstr_dup(c, e->string ? e->string : "", e->string ? strlen(e->string) : 0),
                   jv_from_cjson(c, e, depth + 1));
        return o;
    }
    return jv_undef();
}

size_t js_space_len(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (!n)
        return 0;
    if (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r'))
        return 1;
    if (n >= 2 && p[0] == 0xC2 && p[1] == 0xA0)
        return 2;
    if (n >= 3) {
        uint32_t cp = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        if (cp == 0xE19A80 || (cp >= 0xE28080 && cp <= 0xE2808A) || cp == 0xE280A8 || cp == 0xE280A9 ||
            cp == 0xE280AF || cp == 0xE2819F || cp == 0xE38080 || cp == 0xEFBBBF)
            return 3;
    }
    return 0;
}

size_t js_space_len_before(const char *s, size_t n) {
    if (!n)
        return 0;
    if (js_space_len(s + n - 1, 1) == 1)
        return 1;
    if (n >= 2 && js_space_len(s + n - 2, 2) == 2)
        return 2;
    if (n >= 3 && js_space_len(s + n - 3, 3) == 3)
        return 3;
    return 0;
}

size_t jv_utf8_count(struct jstr s) {
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++)
        n += ((unsigned char)s.p[i] & 0xC0) != 0x80;
    return n;
}
