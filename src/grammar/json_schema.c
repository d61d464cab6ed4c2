/* JSON Schema into GBNF text (json_schema.h).  The schema is read with cJSON; every schema node becomes a
 * rule (named r<N>), $ref targets are compiled once under a name kept per reference (so recursion is a
 * rule referring to itself), allOf is merged into one schema (a new cJSON object owned by the compiler), and
 * the shared pieces (strings, numbers, any value, whitespace) are rules written once at the end. */
#include "grammar/json_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "grammar/grammar.h"

enum {
    P_WS = 1,
    P_VALUE = 2,
    P_STRING = 4,
    P_NUMBER = 8,
    P_INTEGER = 16,
    P_BOOL = 32,
    P_NULL = 64,
    P_FRAC = 128
};

enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_OBJECT = 4,
    T_ARRAY = 8,
    T_STRING = 16,
    T_NUMBER = 32,
    T_INTEGER = 64,
    T_ALL = 127
};

static const char *const TYPE_NAMES[] = {"null", "boolean", "object", "array", "string", "number", "integer"};

struct refname {
    char *ref;
    char name[16];
    bool failed, unsat; // its target did not compile (unsat: because it matches nothing)
};

struct jsc {
    cJSON *doc;
    struct gtext *out;
    struct ci_err *err;
    int n_rules;
    unsigned prims;
    struct refname *refs;
    int n_refs, cap_refs;
    cJSON **owned;
    int n_owned, cap_owned;
    long copied; // schema nodes copied by merges (GRAM_SCHEMA_MAX_COPIED)
    bool unsat;  // the last error: a schema that matches nothing (an optional property with it is left out)
    const char *prefix; // of the rules' names, so that several schemas share one grammar ("" alone)
};

#define MAX_PATH 200

__attribute__((format(printf, 4, 5))) static enum ci_status sfail(struct jsc *c, enum ci_status code,
                                                                  const char *path, const char *fmt, ...) {
    char msg[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ci_err_set(c->err, code, "json_schema: %s (at '%s')", msg, path[0] ? path : "#");
}

/* An error for a schema that matches nothing. */
#define unsat_fail(c, path, ...) ((c)->unsat = true, sfail((c), CI_ERR_UNSUPPORTED, (path), __VA_ARGS__))

static void subpath(char *dst, const char *path, const char *a, const char *b) {
    snprintf(dst, MAX_PATH, "%s/%s%s%s", path[0] ? path : "#", a, b ? "/" : "", b ? b : "");
}

static cJSON *own(struct jsc *c, cJSON *j) {
    if (!j)
        return NULL;
    if (c->n_owned == c->cap_owned) {
        int cap = c->cap_owned ? 2 * c->cap_owned : 16;
        cJSON **v = ci_realloc(c->owned, (size_t)cap * sizeof *v);
        if (!v) {
            cJSON_Delete(j);
            return NULL;
        }
        c->owned = v;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = j;
    return j;
}

/* Charges the nodes of j to the copying budget (merges copy schemas): false once it is spent. */
static bool charge(struct jsc *c, const cJSON *j) {
    for (; j; j = j->next) {
        if (++c->copied > GRAM_SCHEMA_MAX_COPIED)
            return false;
        if (j->child && !charge(c, j->child))
            return false;
    }
    return true;
}

/* An owned copy of j (NULL: the copying budget is spent, or out of memory: see copy_fail). */
static cJSON *dup_owned(struct jsc *c, const cJSON *j) {
    if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) {
        if (++c->copied > GRAM_SCHEMA_MAX_COPIED)
            return NULL;
    } else if ((j->child && !charge(c, j->child)) || ++c->copied > GRAM_SCHEMA_MAX_COPIED) {
        return NULL;
    }
    return own(c, cJSON_Duplicate(j, true));
}

static enum ci_status copy_fail(struct jsc *c, const char *path) {
    if (c->copied > GRAM_SCHEMA_MAX_COPIED)
        return sfail(c, CI_ERR_LIMIT, path,
                     "merging the schema's allOf/anyOf/oneOf/$ref copies more than %d nodes",
                     GRAM_SCHEMA_MAX_COPIED);
    return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
}

static enum ci_status new_rule(struct jsc *c, const char *path, char name[16]) {
    if (c->n_rules >= GRAM_SCHEMA_MAX_RULES)
        return sfail(c, CI_ERR_LIMIT, path, "the schema needs more than %d grammar rules",
                     GRAM_SCHEMA_MAX_RULES);
    snprintf(name, 16, "%sr%d", c->prefix ? c->prefix : "", c->n_rules++);
    return CI_OK;
}

static void define(struct jsc *c, const char *name, const struct gtext *body) {
    gtext_printf(c->out, "%s ::= ", name);
    gtext_put(c->out, body->s ? body->s : "\"\"", body->s ? body->n : 2);
    gtext_put(c->out, "\n", 1);
}

/* ---- keyword classes ------------------------------------------------------------------------------------- */

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(k, *list))
            return true;
    return false;
}

static const char *const ANNOTATIONS[] = {"title",
                                          "description",
                                          "$schema",
                                          "$id",
                                          "id",
                                          "examples",
                                          "example",
                                          "default",
                                          "$comment",
                                          "deprecated",
                                          "readOnly",
                                          "writeOnly",
                                          "$anchor",
                                          "$vocabulary",
                                          "contentEncoding",
                                          "contentMediaType",
                                          "contentSchema",
                                          "$defs",
                                          "definitions",
                                          "discriminator",
                                          "xml",
                                          "externalDocs",
                                          "markdownDescription",
                                          "enumDescriptions",
                                          "errorMessage",
                                          "then",
                                          "else",
                                          NULL};
static const char *const UNSUPPORTED[] = {
    "not",         "propertyNames", "contains",       "minContains",      "maxContains", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor", NULL};
static const char *const KNOWN[] = {"type",
                                    "patternProperties",
                                    "dependencies",
                                    "dependentRequired",
                                    "dependentSchemas",
                                    "enum",
                                    "const",
                                    "properties",
                                    "required",
                                    "additionalProperties",
                                    "unevaluatedProperties",
                                    "items",
                                    "prefixItems",
                                    "additionalItems",
                                    "minItems",
                                    "maxItems",
                                    "uniqueItems",
                                    "minLength",
                                    "maxLength",
                                    "pattern",
                                    "format",
                                    "minimum",
                                    "maximum",
                                    "exclusiveMinimum",
                                    "exclusiveMaximum",
                                    "multipleOf",
                                    "anyOf",
                                    "oneOf",
                                    "allOf",
                                    "$ref",
                                    "nullable",
                                    "minProperties",
                                    "maxProperties",
                                    "if",
                                    NULL};

/* Whether key constrains instances (something a merge must honour). */
static bool constraining(const char *k) {
    return !in_list(k, ANNOTATIONS) && (in_list(k, KNOWN) || in_list(k, UNSUPPORTED));
}

static unsigned type_mask(const cJSON *t);

/* The types that "not": {"type": ...} (nothing else that constrains) excludes, the one form of 'not' compiled
 * exactly (by removing them); 0 for any other 'not', or a schema whose enum/const/anyOf/oneOf would not see
 * it. */
static unsigned not_types(const cJSON *s) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "not");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (!cJSON_IsObject(n) || !t || cJSON_GetObjectItemCaseSensitive(s, "enum") ||
        cJSON_GetObjectItemCaseSensitive(s, "const") || cJSON_GetObjectItemCaseSensitive(s, "anyOf") ||
        cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
        return 0;
    for (const cJSON *k = n->child; k; k = k->next)
        if (strcmp(k->string, "type") != 0 && constraining(k->string))
            return 0;
    return type_mask(t);
}

static enum ci_status check_keywords(struct jsc *c, const cJSON *s, const char *path) {
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!strcmp(k->string, "not") && not_types(s))
            continue;
        if (in_list(k->string, UNSUPPORTED))
            return sfail(c, CI_ERR_UNSUPPORTED, path, "the keyword '%s' is not supported", k->string);
        if (!strcmp(k->string, "if") &&
            (cJSON_GetObjectItemCaseSensitive(s, "then") || cJSON_GetObjectItemCaseSensitive(s, "else")))
            return sfail(c, CI_ERR_UNSUPPORTED, path, "the keyword 'if' (with then/else) is not supported");
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
    if (m && !(cJSON_IsNumber(m) && m->valuedouble > 0))
        return sfail(c, CI_ERR_INVALID, path, "'multipleOf' must be a number above 0");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    if (u && !cJSON_IsFalse(u) && !cJSON_IsTrue(u))
        return sfail(c, CI_ERR_UNSUPPORTED, path,
                     "the keyword 'unevaluatedProperties' (a schema) is not supported");
    return CI_OK;
}

/* ---- $ref ------------------------------------------------------------------------------------------------ */

static const cJSON *resolve_pointer(struct jsc *c, const char *ref) {
    if (ref[0] != '#')
        return NULL;
    const cJSON *cur = c->doc;
    const char *p = ref + 1;
    if (*p == 0)
        return cur;
    if (*p != '/')
        return NULL;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else if (p[0] == '%' && p[1] && p[2]) {
                unsigned v;
                if (sscanf(p + 1, "%2x", &v) != 1)
                    return NULL;
                tok[n++] = (char)v;
                p += 3;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            if (*end || end == tok || i < 0)
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)i);
        } else if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else {
            return NULL;
        }
    }
    return *p ? NULL : cur;
}

static enum ci_status lookup_ref(struct jsc *c, const cJSON *s, const char *path, const cJSON **out) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (!cJSON_IsString(r))
        return sfail(c, CI_ERR_INVALID, path, "'$ref' must be a string");
    const cJSON *t = resolve_pointer(c, r->valuestring);
    if (!t) {
        if (r->valuestring[0] != '#')
            return sfail(c, CI_ERR_UNSUPPORTED, path,
                         "'$ref' \"%.80s\": only references within the schema (\"#...\") are supported",
                         r->valuestring);
        return sfail(c, CI_ERR_INVALID, path, "'$ref' \"%.80s\" does not resolve", r->valuestring);
    }
    if (!cJSON_IsObject(t) && !cJSON_IsBool(t))
        return sfail(c, CI_ERR_INVALID, path, "'$ref' \"%.80s\" is not a schema", r->valuestring);
    *out = t;
    return CI_OK;
}

static bool has_constraints_besides(const cJSON *s, const char *skip) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, skip) && constraining(k->string))
            return true;
    return false;
}

/* ---- allOf: merging schemas ------------------------------------------------------------------------------ */

static unsigned type_mask(const cJSON *t) {
    if (!t)
        return T_ALL;
    unsigned m = 0;
    if (cJSON_IsString(t)) {
        for (int i = 0; i < 7; i++)
            if (!strcmp(t->valuestring, TYPE_NAMES[i]))
                m |= 1u << i;
        return m;
    }
    for (const cJSON *e = t->child; e; e = e->next)
        if (cJSON_IsString(e))
            m |= type_mask(e);
    return m;
}

static cJSON *type_json(unsigned m) {
    if (m & T_NUMBER)
        m &= ~(unsigned)T_INTEGER;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < 7 && a; i++)
        if (m & (1u << i))
            cJSON_AddItemToArray(a, cJSON_CreateString(TYPE_NAMES[i]));
    return a;
}

static bool has_string(const cJSON *arr, const char *s) {
    for (const cJSON *e = arr ? arr->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, s))
            return true;
    return false;
}

static enum ci_status flatten(struct jsc *c, const cJSON *s, const char *path, int depth, const cJSON **out);

static cJSON *all_of2(const cJSON *a, const cJSON *b) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "allOf");
    if (arr) {
        cJSON_AddItemToArray(arr, cJSON_Duplicate(a, true));
        cJSON_AddItemToArray(arr, cJSON_Duplicate(b, true));
    }
    return o;
}

/* m := m ∧ b (m is owned and mutable; b flattened). */
#define MULTIPLE_MAX    1e9 // the largest multipleOf
#define MULTIPLE_STATES 200 // the largest multipleOf for an unbounded range (16 grammar rules per remainder)
#define MULTIPLE_LIST   512 // the most multiples written out one by one (a bounded range)

static enum ci_status merge_into(struct jsc *c, cJSON *m, const cJSON *b, const char *path) {
    if (cJSON_IsFalse(b))
        return unsat_fail(c, path, "'allOf' with a false schema matches nothing");
    if (cJSON_IsTrue(b))
        return CI_OK;
    if (b->child && !charge(c, b->child))
        return copy_fail(c, path);
    const cJSON *ap_m = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    const cJSON *ap_b = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    const cJSON *props_m0 = cJSON_GetObjectItemCaseSensitive(m, "properties");
    // keys b adds to properties that m's additionalProperties: false forbids, and the reverse
    if (cJSON_IsFalse(ap_b)) {
        const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
        cJSON *pm = cJSON_GetObjectItemCaseSensitive(m, "properties");
        for (cJSON *k = pm ? pm->child : NULL; k;) {
            cJSON *next = k->next;
            if (!cJSON_GetObjectItemCaseSensitive(pb, k->string)) {
                if (has_string(cJSON_GetObjectItemCaseSensitive(m, "required"), k->string))
                    return sfail(
                        c, CI_ERR_UNSUPPORTED, path,
                        "'allOf': required property '%.60s' is forbidden by additionalProperties false",
                        k->string);
                cJSON_DeleteItemFromObjectCaseSensitive(pm, k->string);
            }
            k = next;
        }
    }
    for (const cJSON *k = b->child; k; k = k->next) {
        const char *key = k->string;
        if (!constraining(key) || !strcmp(key, "allOf"))
            continue;
        cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
        if (!strcmp(key, "properties")) {
            if (!v)
                v = cJSON_AddObjectToObject(m, "properties");
            for (const cJSON *p = k->child; p && v; p = p->next) {
                if (cJSON_IsFalse(ap_m) && !cJSON_GetObjectItemCaseSensitive(props_m0, p->string)) {
                    if (has_string(cJSON_GetObjectItemCaseSensitive(b, "required"), p->string))
                        return sfail(
                            c, CI_ERR_UNSUPPORTED, path,
                            "'allOf': required property '%.60s' is forbidden by additionalProperties "
                            "false",
                            p->string);
                    continue;
                }
                cJSON *e = cJSON_GetObjectItemCaseSensitive(v, p->string);
                if (!e)
                    cJSON_AddItemToObject(v, p->string, cJSON_Duplicate(p, true));
                else
                    cJSON_ReplaceItemInObjectCaseSensitive(v, p->string, all_of2(e, p));
            }
            continue;
        }
        if (!v) {
            cJSON_AddItemToObject(m, key, cJSON_Duplicate(k, true));
            continue;
        }
        if (cJSON_Compare(v, k, true))
            continue;
        if (!strcmp(key, "type")) {
            unsigned a = type_mask(v), bm = type_mask(k), both = a & bm;
            if ((a & T_NUMBER) && (bm & T_INTEGER))
                both |= T_INTEGER;
            if ((bm & T_NUMBER) && (a & T_INTEGER))
                both |= T_INTEGER;
            if (!both)
                return unsat_fail(c, path, "'allOf' with types that exclude one another");
            cJSON_ReplaceItemInObjectCaseSensitive(m, "type", type_json(both));
        } else if (!strcmp(key, "required")) {
            for (const cJSON *e = k->child; e; e = e->next)
                if (cJSON_IsString(e) && !has_string(v, e->valuestring))
                    cJSON_AddItemToArray(v, cJSON_CreateString(e->valuestring));
        } else if (!strcmp(key, "minimum") || !strcmp(key, "minLength") || !strcmp(key, "minItems") ||
                   !strcmp(key, "minProperties") ||
                   (!strcmp(key, "exclusiveMinimum") && cJSON_IsNumber(k) && cJSON_IsNumber(v))) {
            if (cJSON_IsNumber(k) && cJSON_IsNumber(v)) {
                if (k->valuedouble > v->valuedouble)
                    cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber(k->valuedouble));
            } else {
                return sfail(c, CI_ERR_INVALID, path, "'%s' must be a number", key);
            }
        } else if (!strcmp(key, "maximum") || !strcmp(key, "maxLength") || !strcmp(key, "maxItems") ||
                   !strcmp(key, "maxProperties") ||
                   (!strcmp(key, "exclusiveMaximum") && cJSON_IsNumber(k) && cJSON_IsNumber(v))) {
            if (cJSON_IsNumber(k) && cJSON_IsNumber(v)) {
                if (k->valuedouble < v->valuedouble)
                    cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber(k->valuedouble));
            } else {
                return sfail(c, CI_ERR_INVALID, path, "'%s' must be a number", key);
            }
        } else if (!strcmp(key, "additionalProperties")) {
            if (cJSON_IsFalse(v) || cJSON_IsTrue(k))
                continue;
            if (cJSON_IsFalse(k) || cJSON_IsTrue(v))
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_Duplicate(k, true));
            else
                cJSON_ReplaceItemInObjectCaseSensitive(m, key, all_of2(v, k));
        } else if (!strcmp(key, "items") && cJSON_IsObject(k) && cJSON_IsObject(v)) {
            cJSON_ReplaceItemInObjectCaseSensitive(m, key, all_of2(v, k));
        } else if (!strcmp(key, "enum") && cJSON_IsArray(k) && cJSON_IsArray(v)) {
            cJSON *n = cJSON_CreateArray();
            for (const cJSON *e = v->child; e && n; e = e->next) {
                bool found = false;
                for (const cJSON *f = k->child; f && !found; f = f->next)
                    found = cJSON_Compare(e, f, true);
                if (found)
                    cJSON_AddItemToArray(n, cJSON_Duplicate(e, true));
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, key, n);
        } else if (!strcmp(key, "multipleOf") && cJSON_IsNumber(k) && cJSON_IsNumber(v) &&
                   k->valuedouble == floor(k->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
                   k->valuedouble >= 1 && v->valuedouble >= 1 && k->valuedouble <= MULTIPLE_MAX &&
                   v->valuedouble <= MULTIPLE_MAX) { // both: multiples of their least common multiple
            long long ka = (long long)k->valuedouble, va = (long long)v->valuedouble, x = ka, y = va;
            while (y) {
                long long t = x % y;
                x = y;
                y = t;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateNumber((double)(ka / x) * (double)va));
        } else if (!strcmp(key, "uniqueItems")) {
            cJSON_ReplaceItemInObjectCaseSensitive(m, key, cJSON_CreateBool(true));
        } else {
            return sfail(c, CI_ERR_UNSUPPORTED, path, "'allOf': cannot merge two different '%s'", key);
        }
    }
    return CI_OK;
}

/* s with its $ref (when alone) followed and its allOf merged in: a schema without $ref or allOf at the top. */
static enum ci_status flatten(struct jsc *c, const cJSON *s, const char *path, int depth, const cJSON **out) {
    enum ci_status st;
    if (depth > GRAM_SCHEMA_MAX_DEPTH)
        return sfail(c, CI_ERR_LIMIT, path, "schemas and references nested deeper than %d",
                     GRAM_SCHEMA_MAX_DEPTH);
    if (!cJSON_IsObject(s)) {
        *out = s;
        return CI_OK;
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (!ref && !all) {
        *out = s;
        return CI_OK;
    }
    if (all && !cJSON_IsArray(all))
        return sfail(c, CI_ERR_INVALID, path, "'allOf' must be an array");
    cJSON *m = dup_owned(c, s);
    if (!m)
        return copy_fail(c, path);
    cJSON_DeleteItemFromObjectCaseSensitive(m, "$ref");
    cJSON_DeleteItemFromObjectCaseSensitive(m, "allOf");
    if (ref) {
        const cJSON *t, *ft;
        if ((st = lookup_ref(c, s, path, &t)) != CI_OK || (st = flatten(c, t, path, depth + 1, &ft)) != CI_OK)
            return st;
        if ((st = merge_into(c, m, ft, path)) != CI_OK)
            return st;
    }
    int i = 0;
    for (const cJSON *e = all ? all->child : NULL; e; e = e->next, i++) {
        char sub[MAX_PATH], idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        subpath(sub, path, "allOf", idx);
        const cJSON *fe;
        if ((st = flatten(c, e, sub, depth + 1, &fe)) != CI_OK || (st = merge_into(c, m, fe, sub)) != CI_OK)
            return st;
    }
    *out = m;
    return CI_OK;
}

/* ---- generators ------------------------------------------------------------------------------------------ */

static enum ci_status gen(struct jsc *c, const cJSON *s, const char *path, int depth, char name[16]);

static void json_quote(struct gtext *t, const char *s) {
    gtext_put(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            gtext_printf(t, "\\%c", *p);
        else if (*p < 0x20)
            gtext_printf(t, "\\u%04x", *p);
        else
            gtext_put(t, (const char *)p, 1);
    }
    gtext_put(t, "\"", 1);
}

static void lit_key(struct gtext *body, const char *key) {
    struct gtext q = {0};
    json_quote(&q, key);
    if (q.oom || q.over)
        body->oom = true;
    else
        gtext_literal(body, q.s, q.n);
    gtext_free(&q);
}

static bool num_ok(double v) {
    return isfinite(v) && fabs(v) <= 9007199254740992.0;
}

static enum ci_status gen_enum(struct jsc *c, const cJSON *s, const cJSON *vals, const char *path,
                               struct gtext *body) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    unsigned tm = type_mask(t);
    for (const cJSON *k = s->child; k; k = k->next)
        if (constraining(k->string) && strcmp(k->string, "enum") && strcmp(k->string, "const") &&
            strcmp(k->string, "type"))
            return sfail(c, CI_ERR_UNSUPPORTED, path, "'%s' beside enum/const is not supported", k->string);
    int n = 0;
    for (const cJSON *v = vals->child; v; v = v->next) {
        unsigned vm = cJSON_IsNull(v)     ? T_NULL
                      : cJSON_IsBool(v)   ? T_BOOL
                      : cJSON_IsObject(v) ? T_OBJECT
                      : cJSON_IsArray(v)  ? T_ARRAY
                      : cJSON_IsString(v)
                          ? T_STRING
                          : (v->valuedouble == floor(v->valuedouble) ? T_INTEGER | T_NUMBER : T_NUMBER);
        if (!(vm & tm))
            continue;
        if (cJSON_IsNumber(v) && !num_ok(v->valuedouble))
            return sfail(c, CI_ERR_UNSUPPORTED, path,
                         "enum/const number %g is too large to reproduce exactly", v->valuedouble);
        char *txt = cJSON_PrintUnformatted(v);
        if (!txt)
            return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
        if (n++)
            gtext_put(body, " | ", 3);
        gtext_literal(body, txt, strlen(txt));
        cJSON_free(txt);
    }
    if (!n)
        return unsat_fail(c, path, "no value of 'enum'/'const' fits the schema");
    return CI_OK;
}

static bool get_num(const cJSON *s, const char *k, double *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!cJSON_IsNumber(j))
        return false;
    *v = j->valuedouble;
    return true;
}

static enum ci_status get_count(struct jsc *c, const cJSON *s, const char *k, const char *path, long dflt,
                                long *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(s, k);
    *v = dflt;
    if (!j)
        return CI_OK;
    if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble != floor(j->valuedouble))
        return sfail(c, CI_ERR_INVALID, path, "'%s' must be a non-negative integer", k);
    *v = j->valuedouble > 1e9 ? 1000000000L : (long)j->valuedouble;
    return CI_OK;
}

/* Naturals with exactly len digits in [x, y] (decimal strings of that length). */
static void same_len(struct gtext *t, const char *x, const char *y, int len) {
    if (len == 1) {
        gtext_printf(t, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        gtext_printf(t, "\"%c\" ", x[0]);
        same_len(t, x + 1, y + 1, len - 1);
        return;
    }
    bool xz = true, y9 = true;
    for (int i = 1; i < len; i++) {
        xz &= x[i] == '0';
        y9 &= y[i] == '9';
    }
    char lo = xz ? x[0] : (char)(x[0] + 1), hi = y9 ? y[0] : (char)(y[0] - 1);
    const char *sep = "";
    gtext_put(t, "(", 1);
    if (!xz) {
        char nines[24];
        memset(nines, '9', (size_t)len - 1);
        nines[len - 1] = 0;
        gtext_printf(t, "\"%c\" ", x[0]);
        same_len(t, x + 1, nines, len - 1);
        sep = " | ";
    }
    if (lo <= hi) {
        gtext_printf(t, "%s[%c-%c] [0-9]{%d}", sep, lo, hi, len - 1);
        sep = " | ";
    }
    if (!y9) {
        char zeros[24];
        memset(zeros, '0', (size_t)len - 1);
        zeros[len - 1] = 0;
        gtext_printf(t, "%s\"%c\" ", sep, y[0]);
        same_len(t, zeros, y + 1, len - 1);
    }
    gtext_put(t, ")", 1);
}

#define NAT_MAX_DIGITS 17

static int ndigits(long long v) {
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Naturals in [a, b] (b < 0: unbounded, up to NAT_MAX_DIGITS digits), without leading zeros, as a
 * parenthesized choice.  Returns false (nothing written) when the range is empty. */
static bool nat_range(struct gtext *t, long long a, long long b, const char *suffix) {
    if (b >= 0 && a > b)
        return false;
    int da = ndigits(a), db = b < 0 ? da : ndigits(b);
    long long p = 1;
    for (int i = 1; i < da; i++)
        p *= 10;
    gtext_put(t, "(", 1);
    const char *sep = "";
    for (int d = da; d <= db; d++, p *= 10) {
        long long lo = d == 1 ? 0 : p, hi = p * 10 - 1;
        if (lo < a)
            lo = a;
        if (b >= 0 && hi > b)
            hi = b;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%lld", lo);
        snprintf(ys, sizeof ys, "%lld", hi);
        gtext_printf(t, "%s(", sep);
        same_len(t, xs, ys, d);
        gtext_printf(t, ")%s", suffix);
        sep = " | ";
    }
    if (b < 0 && da < NAT_MAX_DIGITS)
        gtext_printf(t, "%s[1-9] [0-9]{%d,%d}%s", sep, da, NAT_MAX_DIGITS - 1, suffix);
    gtext_put(t, ")", 1);
    return true;
}

/* Magnitudes m (+ optional fraction f > 0) in the interval from a to b (b < 0: unbounded); exclusive ends as
 * flagged.  Returns the number of alternatives written (each preceded by sep handling by the caller). */
static int mag_range(struct jsc *c, struct gtext *t, long long a, bool a_ex, long long b, bool b_ex,
                     const char *sep) {
    int n = 0;
    c->prims |= P_FRAC;
    if (a_ex) { // a with a fraction, then from a+1
        if (b < 0 || a < b) {
            gtext_printf(t, "%s\"%lld\" frac", sep, a);
            n++;
        }
        a++;
    }
    long long top = b < 0 ? -1 : b - 1; // integer parts that take any fraction
    if (b < 0 || a <= top) {
        gtext_printf(t, "%s", n ? " | " : sep);
        nat_range(t, a, top, " frac?");
        n++;
    }
    if (b >= 0 && !b_ex && b >= a) {
        gtext_printf(t, "%s\"%lld\"", n ? " | " : sep, b);
        n++;
    }
    return n;
}

#define BOUND_INT_MAX 1e17
#define BOUND_NUM_MAX 1e9

#define MULTIPLE_DIGITS 16 // the longest multiple written by the automaton (as the integer primitive)

/* Writes " | "-separated alternatives "[digits] <base>-<t>-<l>" from remainder r (r < 0: the first digit,
 * 1-9), each digit class leading to the same next remainder t, only to live states (live[t]: a multiple is
 * still reachable within the digits left). */
static void digit_steps(struct jsc *c, const char *base, long long k, long long r, int l, const bool *live,
                        const char *sep) {
    int lo = r < 0 ? 1 : 0;
    long long from = r < 0 ? 0 : r;
    for (int d = lo; d <= 9; d++) {
        long long t = (10 * from + d) % k;
        bool first = live[t];
        for (int e = lo; e < d && first; e++)
            first = (10 * from + e) % k != t;
        if (!first)
            continue;
        gtext_printf(c->out, "%s[", sep);
        for (int e = d; e <= 9; e++)
            if ((10 * from + e) % k == t)
                gtext_printf(c->out, "%d", e);
        gtext_printf(c->out, "] %s-%lld-%d", base, t, l);
        sep = " | ";
    }
}

/* The positive multiples of k below 10^16 without leading zeros, as rules "<base>-<r>-<l>" over the
 * remainder r of the l digits so far (a divisibility automaton, at most k * 16 rules; states from which no
 * multiple can be reached in the digits left are left out): returns the first rule's name in start. */
static enum ci_status multiples_rules(struct jsc *c, long long k, const char *path, char start[16]) {
    char base[16];
    enum ci_status st = new_rule(c, path, base);
    if (st != CI_OK)
        return st;
    if (c->n_rules + k * MULTIPLE_DIGITS > GRAM_SCHEMA_MAX_RULES)
        return sfail(c, CI_ERR_LIMIT, path, "the schema needs more than %d grammar rules",
                     GRAM_SCHEMA_MAX_RULES);
    c->n_rules += (int)(k * MULTIPLE_DIGITS);
    // live[l][r]: from remainder r after l digits, a multiple of k is reachable with at most 16 - l more
    bool *live = ci_calloc((size_t)(MULTIPLE_DIGITS + 1) * (size_t)k, sizeof *live);
    if (!live)
        return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
    for (int l = MULTIPLE_DIGITS; l >= 1; l--)
        for (long long r = 0; r < k; r++) {
            bool ok = r == 0;
            for (int d = 0; d <= 9 && !ok && l < MULTIPLE_DIGITS; d++)
                ok = live[(size_t)(l + 1) * (size_t)k + (size_t)((10 * r + d) % k)];
            live[(size_t)l * (size_t)k + (size_t)r] = ok;
        }
    for (int l = 1; l <= MULTIPLE_DIGITS; l++)
        for (long long r = 0; r < k; r++) {
            if (!live[(size_t)l * (size_t)k + (size_t)r])
                continue;
            gtext_printf(c->out, "%s-%lld-%d ::= %s", base, r, l, r == 0 ? "\"\"" : "");
            if (l < MULTIPLE_DIGITS)
                digit_steps(c, base, k, r, l + 1, live + (size_t)(l + 1) * (size_t)k, r == 0 ? " | " : "");
            gtext_put(c->out, "\n", 1);
        }
    snprintf(start, 16, "%s", base);
    gtext_printf(c->out, "%s ::= ", base);
    digit_steps(c, base, k, -1, 1, live + (size_t)k, "");
    gtext_put(c->out, "\n", 1);
    ci_free(live);
    return CI_OK;
}

/* The magnitudes in [a, b] (b < 0: unbounded) that are multiples of k, as alternatives after prefix
 * (e.g. "\"-\" "); *n counts the alternatives written.  Exact or an error naming multipleOf. */
static enum ci_status multiples_in(struct jsc *c, long long k, long long a, long long b, const char *prefix,
                                   const char *path, struct gtext *body, int *n) {
    long long first = (a + k - 1) / k * k;
    if (b >= 0) {
        if (first > b)
            return CI_OK;
        long long count = (b - first) / k + 1;
        if (count > MULTIPLE_LIST)
            return sfail(c, CI_ERR_UNSUPPORTED, path,
                         "'multipleOf' %lld with bounds holding more than %d multiples is not supported", k,
                         MULTIPLE_LIST);
        for (long long v = first; v <= b; v += k)
            gtext_printf(body, "%s%s\"%lld\"", (*n)++ ? " | " : "", prefix, v);
        return CI_OK;
    }
    // unbounded above: the automaton, when nothing below the bound is a positive multiple
    if (a > k || k > MULTIPLE_STATES)
        return sfail(c, CI_ERR_UNSUPPORTED, path, "'multipleOf' %lld is not supported %s", k,
                     k > MULTIPLE_STATES ? "on an unbounded range (at most 200 there)"
                                         : "with a lower bound above it and no upper bound");
    char start[16];
    enum ci_status st = multiples_rules(c, k, path, start);
    if (st != CI_OK)
        return st;
    if (a == 0)
        gtext_printf(body, "%s%s\"0\"", (*n)++ ? " | " : "", prefix);
    gtext_printf(body, "%s%s%s", (*n)++ ? " | " : "", prefix, start);
    return CI_OK;
}

/* An integer (or a number: written as an integer, a subset of its forms) that is a multiple of the integer
 * k, within [L, H] (infinite ends flagged). */
static enum ci_status gen_multiple(struct jsc *c, long long k, bool lo_inf, long long L, bool hi_inf,
                                   long long H, const char *path, struct gtext *body) {
    int n = 0;
    enum ci_status st = CI_OK;
    gtext_put(body, "(", 1);
    if (hi_inf || H >= 0) // the non-negative side
        st = multiples_in(c, k, lo_inf || L < 0 ? 0 : L, hi_inf ? -1 : H, "", path, body, &n);
    if (st == CI_OK && (lo_inf || L < 0)) { // the negative side, by magnitude
        long long a = hi_inf || H >= 0 ? 1 : -H;
        st = multiples_in(c, k, a, lo_inf ? -1 : -L, "\"-\" ", path, body, &n);
    }
    gtext_put(body, ")", 1);
    if (st == CI_OK && !n)
        return unsat_fail(c, path, "no multiple of %lld fits the bounds", k);
    return st;
}

static enum ci_status gen_number(struct jsc *c, const cJSON *s, bool integer, const char *path,
                                 struct gtext *body) {
    double mn = 0, mx = 0, emn = 0, emx = 0;
    bool has_mn = get_num(s, "minimum", &mn), has_mx = get_num(s, "maximum", &mx);
    bool has_emn = get_num(s, "exclusiveMinimum", &emn), has_emx = get_num(s, "exclusiveMaximum", &emx);
    const cJSON *bemn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *bemx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    bool lo_inf = true, hi_inf = true, lo_ex = false, hi_ex = false;
    double lo = 0, hi = 0;
    if (has_mn) {
        lo_inf = false;
        lo = mn;
        lo_ex = cJSON_IsTrue(bemn); // draft 4
    }
    if (has_emn && (lo_inf || emn >= lo)) {
        lo_inf = false;
        lo = emn;
        lo_ex = true;
    }
    if (has_mx) {
        hi_inf = false;
        hi = mx;
        hi_ex = cJSON_IsTrue(bemx);
    }
    if (has_emx && (hi_inf || emx <= hi)) {
        hi_inf = false;
        hi = emx;
        hi_ex = true;
    }
    double mult = 1;
    bool has_mult = get_num(s, "multipleOf", &mult) && !(integer && mult == 1);
    if (has_mult && (mult != floor(mult) || mult > MULTIPLE_MAX))
        return sfail(c, CI_ERR_UNSUPPORTED, path,
                     "'multipleOf' %g is not supported (integer multipleOf up to %g only: decimal multiples "
                     "are not exact in binary floating point)",
                     mult, MULTIPLE_MAX);
    if (has_mult)
        integer = true; // a number that is a multiple of an integer: written as an integer
    if (lo_inf && hi_inf && !has_mult) {
        c->prims |= integer ? P_INTEGER : P_NUMBER;
        gtext_put(body, integer ? "integer" : "number", integer ? 7 : 6);
        return CI_OK;
    }
    double lim = integer ? BOUND_INT_MAX : BOUND_NUM_MAX;
    // integer-valued bounds (rounded inward: a subset of the numbers allowed)
    if (!lo_inf) {
        if (lo != floor(lo)) {
            lo = ceil(lo);
            lo_ex = false;
        } else if (integer && lo_ex) {
            lo += 1;
            lo_ex = false;
        }
        if (lo > lim)
            return sfail(c, CI_ERR_UNSUPPORTED, path, "a minimum above %g is not supported", lim);
        if (lo < -lim && integer)
            lo_inf = true; // integer's 17 digits stay above it
        else if (lo < -lim)
            lo = -lim; // a number bound beyond 1e9 is rounded inward (fractions near it are not exact)
    }
    if (!hi_inf) {
        if (hi != floor(hi)) {
            hi = floor(hi);
            hi_ex = false;
        } else if (integer && hi_ex) {
            hi -= 1;
            hi_ex = false;
        }
        if (hi < -lim)
            return sfail(c, CI_ERR_UNSUPPORTED, path, "a maximum below %g is not supported", -lim);
        if (hi > lim && integer)
            hi_inf = true;
        else if (hi > lim)
            hi = lim;
    }
    long long L = lo_inf ? 0 : (long long)lo, H = hi_inf ? 0 : (long long)hi;
    if (has_mult)
        return gen_multiple(c, (long long)mult, lo_inf, L, hi_inf, H, path, body);
    int n = 0;
    gtext_put(body, "(", 1);
    if (integer) {
        if ((hi_inf || H >= 0) && nat_range(body, lo_inf || L < 0 ? 0 : L, hi_inf ? -1 : H, ""))
            n++;
        if (lo_inf || L < 0) {
            long long a = hi_inf || H >= 0 ? 1 : -H, b = lo_inf ? -1 : -L;
            struct gtext tmp = {0};
            if (nat_range(&tmp, a, b, "")) {
                gtext_printf(body, "%s\"-\" ", n ? " | " : "");
                gtext_put(body, tmp.s, tmp.n);
                n++;
            }
            gtext_free(&tmp);
        }
    } else {
        if (hi_inf || H > 0 || (H == 0 && !hi_ex)) {
            long long a = lo_inf || L < 0 ? 0 : L;
            bool a_ex = !lo_inf && L >= 0 && lo_ex;
            n += mag_range(c, body, a, a_ex, hi_inf ? -1 : H, hi_ex, "");
        }
        if (lo_inf || L < 0) {
            long long a = hi_inf || H >= 0 ? 0 : -H, b = lo_inf ? -1 : -L;
            bool a_ex = hi_inf || H >= 0 ? true : hi_ex;
            struct gtext tmp = {0};
            if (mag_range(c, &tmp, a, a_ex, b, lo_ex, "")) {
                gtext_printf(body, "%s\"-\" (", n ? " | " : "");
                gtext_put(body, tmp.s, tmp.n);
                gtext_put(body, ")", 1);
                n++;
            }
            gtext_free(&tmp);
        }
    }
    gtext_put(body, ")", 1);
    if (!n)
        return unsat_fail(c, path, "no %s fits the bounds", integer ? "integer" : "number");
    return CI_OK;
}

/* The formats produced: their grammar and the lengths (in characters) of what it produces. */
struct format {
    const char *name, *gbnf;
    int min_len, max_len;
};
static const struct format FORMATS[] = {
    {"date", "fmt-date", 10, 10},
    {"time", "fmt-time", 9, 21},
    {"date-time", "fmt-date \"T\" fmt-time", 20, 32},
    {"uuid", "fmt-uuid", 36, 36},
    {"email", "fmt-email", 6, 59},
    {"idn-email", "fmt-email", 6, 59},
    {"ipv4", "fmt-ipv4", 7, 15},
    {"hostname", "fmt-host", 1, 83},
    {"idn-hostname", "fmt-host", 1, 83},
    {"uri", "fmt-uri", 9, 175},
    {"uri-reference", "fmt-uri", 9, 175},
    {"iri", "fmt-uri", 9, 175},
    {"iri-reference", "fmt-uri", 9, 175},
};
/* Formats of the JSON Schema vocabulary not produced (a validator may assert them).  Any other format name
 * is no assertion for a validator (unknown formats are ignored), so it is ignored here too. */
static const char *const FORMATS_UNSUPPORTED[] = {
    "duration", "ipv6", "uri-template", "json-pointer", "relative-json-pointer", "regex", NULL};

static enum ci_status gen_string(struct jsc *c, const cJSON *s, const char *path, struct gtext *body) {
    enum ci_status st;
    long mn, mx;
    if ((st = get_count(c, s, "minLength", path, 0, &mn)) != CI_OK ||
        (st = get_count(c, s, "maxLength", path, -1, &mx)) != CI_OK)
        return st;
    if (mx >= 0 && mn > mx)
        return unsat_fail(c, path, "minLength %ld > maxLength %ld", mn, mx);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    bool lens = mn > 0 || mx >= 0;
    if (fmt && !cJSON_IsString(fmt))
        return sfail(c, CI_ERR_INVALID, path, "'format' must be a string");
    if (pat && !cJSON_IsString(pat))
        return sfail(c, CI_ERR_INVALID, path, "'pattern' must be a string");
    if (fmt && in_list(fmt->valuestring, FORMATS_UNSUPPORTED))
        return sfail(c, CI_ERR_UNSUPPORTED, path, "the format '%.60s' is not supported", fmt->valuestring);
    const struct format *f = NULL;
    for (size_t i = 0; fmt && i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(fmt->valuestring, FORMATS[i].name))
            f = &FORMATS[i];
    if (f) {
        if (pat)
            return sfail(c, CI_ERR_UNSUPPORTED, path, "'format' together with 'pattern' is not supported");
        if (mn > f->min_len || (mx >= 0 && mx < f->max_len))
            return sfail(
                c, CI_ERR_UNSUPPORTED, path,
                "'format' '%s' with minLength/maxLength narrower than %d..%d characters is not supported",
                f->name, f->min_len, f->max_len);
        c->prims |= P_STRING; // the format rules live with the string rules
        gtext_printf(body, "\"\\\"\" %s \"\\\"\"", f->gbnf);
        return CI_OK;
    }
    if (pat) {
        gtext_put(body, "\"\\\"\" ", 5);
        struct ci_err e2;
        long plo = 0, phi = -1;
        st = gram_regex_expr(pat->valuestring, strlen(pat->valuestring),
                             GRAM_REGEX_SEARCH | GRAM_REGEX_JSON_STRING, body, &plo, &phi, &e2);
        // lengths beside a pattern: only when every match already fits them
        if (st == CI_OK && lens && (plo < mn || (mx >= 0 && (phi < 0 || phi > mx))))
            return sfail(
                c, CI_ERR_UNSUPPORTED, path,
                "'pattern' together with minLength/maxLength is supported only when every match fits "
                "them (matches hold %ld to %ld characters, -1: unbounded)",
                plo, phi);
        if (st != CI_OK)
            return sfail(c, st, path, "'pattern': %s", e2.msg);
        gtext_put(body, " \"\\\"\"", 5);
        return CI_OK;
    }
    c->prims |= P_STRING;
    if (!lens) {
        gtext_put(body, "string", 6);
        return CI_OK;
    }
    if (mn > GRAM_MAX_REPEAT)
        return sfail(c, CI_ERR_UNSUPPORTED, path, "minLength above %d is not supported", GRAM_MAX_REPEAT);
    if (mx > 1000)
        mx = mn > 1000 ? mn : 1000; // a subset: at most this long
    if (mx < 0)
        gtext_printf(body, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
    else
        gtext_printf(body, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
    return CI_OK;
}

/* The schema a listed property p must match given patternProperties pp: p's own, with the schema of every
 * pattern its name matches (searched, as validators do) merged in.  Names are matched with PCRE2, which
 * agrees with ECMAScript and Python on ASCII names; a non-ASCII name is refused. */
static enum ci_status pattern_schema(struct jsc *c, const cJSON *pp, const cJSON *p, const char *path,
                                     const cJSON **out) {
    *out = p;
    cJSON *m = NULL;
    for (const unsigned char *k = (const unsigned char *)p->string; *k; k++)
        if (*k >= 0x80)
            return sfail(c, CI_ERR_UNSUPPORTED, path,
                         "'patternProperties' with the non-ASCII property name '%.60s' is not supported",
                         p->string);
    for (const cJSON *e = pp->child; e; e = e->next) {
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)e->string, PCRE2_ZERO_TERMINATED, 0, &code, &off, NULL);
        if (!re)
            return sfail(c, CI_ERR_UNSUPPORTED, path,
                         "'patternProperties': the pattern '%.60s' is not supported", e->string);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int rc = md ? pcre2_match(re, (PCRE2_SPTR)p->string, strlen(p->string), 0, 0, md, NULL) : -1;
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (rc == PCRE2_ERROR_NOMATCH)
            continue;
        if (rc < 0)
            return sfail(c, CI_ERR_UNSUPPORTED, path, "'patternProperties': matching '%.60s' failed",
                         e->string);
        if (!m) {
            m = own(c, cJSON_CreateObject());
            cJSON *all = m ? cJSON_AddArrayToObject(m, "allOf") : NULL;
            if (!all || !cJSON_AddItemToArray(all, cJSON_Duplicate(p, true)))
                return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
        }
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(m, "allOf"), cJSON_Duplicate(e, true));
    }
    if (m)
        *out = m;
    return CI_OK;
}

struct member {
    const char *key;
    char rule[16];
    bool req, drop;
};

static int find_member(const struct member *m, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!m[i].drop && !strcmp(m[i].key, key))
            return i;
    return -1;
}

/* dependencies / dependentRequired / dependentSchemas over the properties to produce: an optional property
 * whose dependencies are not all produced is left out; a required one makes its dependencies required. */
static enum ci_status apply_dependencies(struct jsc *c, const cJSON *s, const char *path, struct member *m,
                                         int n) {
    static const char *const KW[] = {"dependencies", "dependentRequired", "dependentSchemas"};
    for (int round = 0; round < n + 1; round++) {
        bool changed = false;
        for (int w = 0; w < 3; w++) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(s, KW[w]);
            if (!d)
                continue;
            if (!cJSON_IsObject(d))
                return sfail(c, CI_ERR_INVALID, path, "'%s' must be an object", KW[w]);
            for (const cJSON *e = d->child; e; e = e->next) {
                int k = find_member(m, n, e->string);
                if (k < 0 || cJSON_IsTrue(e))
                    continue;
                if (cJSON_IsArray(e)) {
                    for (const cJSON *x = e->child; x && !m[k].drop; x = x->next) {
                        if (!cJSON_IsString(x))
                            return sfail(c, CI_ERR_INVALID, path, "'%s' lists must hold strings", KW[w]);
                        int j = find_member(m, n, x->valuestring);
                        if (j >= 0 && m[j].req)
                            continue;
                        if (j >= 0 && m[k].req) {
                            m[j].req = changed = true;
                        } else if (!m[k].req) {
                            m[k].drop = changed = true;
                        } else {
                            return sfail(
                                c, CI_ERR_UNSUPPORTED, path,
                                "'%s': required property '%.60s' needs '%.60s', which is not produced", KW[w],
                                e->string, x->valuestring);
                        }
                    }
                } else if (!m[k].req) { // a schema the object must then match: not produced
                    m[k].drop = changed = true;
                } else {
                    return sfail(c, CI_ERR_UNSUPPORTED, path,
                                 "the keyword '%s' with a schema for a required property is not supported",
                                 KW[w]);
                }
            }
        }
        if (!changed)
            break;
    }
    return CI_OK;
}

/* ---- keys other than the listed ones (additionalProperties beside properties) ---------------------------- */

#define OTHER_KEY_MAX_NODES 512 // trie nodes of the listed keys; more: no extra keys are produced

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Bytes of the UTF-8 character at s (1 on a malformed lead: keys come from cJSON, which decodes escapes). */
static size_t cp_len(const char *s) {
    unsigned char b = (unsigned char)*s;
    return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
}

/* The rule of the trie node shared by keys[lo, hi) (sorted) after their first `off` bytes: the rest of a JSON
 * string key (up to its closing quote) that makes it differ from every one of them.  Written unescaped, the
 * key's characters are its decoded ones, so a key can equal a listed one only by following the trie to its
 * end; the ways out are a character no listed key has there (then anything) or a quote where none ends. */
static enum ci_status other_key_node(struct jsc *c, const char *path, const char *const *keys, int lo, int hi,
                                     size_t off, char name[16]) {
    enum ci_status st = new_rule(c, path, name);
    if (st != CI_OK)
        return st;
    struct gtext alt = {0}, cls = {0};
    bool ends_here = false;
    gtext_printf(&cls, "%s", "[^\"\\\\\\x00-\\x1F");
    for (int i = lo; i < hi;) {
        if (keys[i][off] == '\0') {
            ends_here = true;
            i++;
            continue;
        }
        size_t n = cp_len(keys[i] + off);
        int j = i + 1;
        while (j < hi && strlen(keys[j]) >= off + n && !memcmp(keys[j] + off, keys[i] + off, n))
            j++;
        char child[16];
        if ((st = other_key_node(c, path, keys, i, j, off + n, child)) != CI_OK)
            break;
        gtext_literal(&alt, keys[i] + off, n);
        gtext_printf(&alt, " %s | ", child);
        uint32_t cp = 0;
        const unsigned char *u = (const unsigned char *)keys[i] + off;
        cp = n == 1   ? u[0]
             : n == 2 ? (u[0] & 0x1Fu) << 6 | (u[1] & 0x3Fu)
             : n == 3 ? (u[0] & 0x0Fu) << 12 | (u[1] & 0x3Fu) << 6 | (u[2] & 0x3Fu)
                      : (u[0] & 0x07u) << 18 | (u[1] & 0x3Fu) << 12 | (u[2] & 0x3Fu) << 6 | (u[3] & 0x3Fu);
        gtext_printf(&cls, "\\U%08X", (unsigned)cp);
        i = j;
    }
    gtext_put(&cls, "]", 1);
    if (st == CI_OK) {
        gtext_put(&alt, cls.s, cls.n);
        gtext_printf(&alt, "%s", " char* \"\\\"\"");
        if (!ends_here)
            gtext_printf(&alt, "%s", " | \"\\\"\"");
        if (alt.oom || cls.oom)
            c->out->oom = true;
        define(c, name, &alt);
    }
    gtext_free(&alt);
    gtext_free(&cls);
    return st;
}

/* The rule of a JSON string key equal to none of keys[0..n) (the schema's listed property names), or "" in
 * name when the listed keys make too large a trie (then no extra key is produced). */
static enum ci_status other_key_rule(struct jsc *c, const char *path, const char **keys, int n,
                                     char name[16]) {
    name[0] = '\0';
    int m = 0;
    size_t nodes = 1;
    for (int i = 0; i < n; i++) { // keys holding a quote, a backslash, a control character or malformed
        bool plain = true;        // UTF-8: an unescaped key of well-formed characters never equals them
        for (const unsigned char *p = (const unsigned char *)keys[i]; *p && plain;) {
            size_t l = cp_len((const char *)p);
            plain = *p >= 0x20 && *p != '"' && *p != '\\' && !(*p >= 0x80 && *p < 0xC2) && *p < 0xF5;
            for (size_t k = 1; k < l && plain; k++)
                plain = (p[k] & 0xC0) == 0x80;
            p += plain ? l : 1;
        }
        if (plain) {
            keys[m++] = keys[i];
            nodes += strlen(keys[i]);
        }
    }
    if (nodes > OTHER_KEY_MAX_NODES)
        return CI_OK;
    qsort(keys, (size_t)m, sizeof *keys, cmp_cstr);
    char root[16];
    enum ci_status st = other_key_node(c, path, keys, 0, m, 0, root);
    if (st != CI_OK)
        return st;
    c->prims |= P_STRING;
    struct gtext body = {0};
    gtext_printf(&body, "\"\\\"\" %s", root);
    if ((st = new_rule(c, path, name)) == CI_OK)
        define(c, name, &body);
    if (body.oom)
        c->out->oom = true;
    gtext_free(&body);
    return st;
}

static enum ci_status gen_object(struct jsc *c, const cJSON *s, const char *path, int depth,
                                 struct gtext *body) {
    enum ci_status st = CI_OK;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    if (props && !cJSON_IsObject(props))
        return sfail(c, CI_ERR_INVALID, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req))
        return sfail(c, CI_ERR_INVALID, path, "'required' must be an array");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r))
            return sfail(c, CI_ERR_INVALID, path, "'required' must hold strings");
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return sfail(c, CI_ERR_INVALID, path, "'additionalProperties' must be a schema");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(s, "patternProperties");
    if (pp && !cJSON_IsObject(pp))
        return sfail(c, CI_ERR_INVALID, path, "'patternProperties' must be an object");
    if (pp && !pp->child)
        pp = NULL;
    // with patternProperties, keys of its own would need matching against the patterns: none are produced
    bool extras = !cJSON_IsFalse(ap) && !cJSON_IsFalse(up) && !pp;
    long minp, maxp;
    if ((st = get_count(c, s, "minProperties", path, 0, &minp)) != CI_OK ||
        (st = get_count(c, s, "maxProperties", path, -1, &maxp)) != CI_OK)
        return st;
    if (maxp >= 0 && minp > maxp)
        return unsat_fail(c, path, "minProperties %ld > maxProperties %ld", minp, maxp);
    int n_props = cJSON_GetArraySize(props) + cJSON_GetArraySize(req);
    struct member *mem = ci_calloc((size_t)n_props + 1, sizeof *mem);
    if (!mem)
        return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
    int n = 0, n_req = 0;
    char sub[MAX_PATH], apname[16] = "value";
    if (cJSON_IsObject(ap)) {
        subpath(sub, path, "additionalProperties", NULL);
        if ((st = gen(c, ap, sub, depth + 1, apname)) != CI_OK)
            goto out;
    } else {
        c->prims |= P_VALUE;
    }
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        bool r = has_string(req, p->string);
        if (cJSON_IsFalse(p)) {
            if (r) {
                st = sfail(c, CI_ERR_UNSUPPORTED, path, "required property '%.60s' has the schema false",
                           p->string);
                goto out;
            }
            continue;
        }
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(mem[i].key, p->string);
        if (dup)
            continue;
        subpath(sub, path, "properties", p->string);
        mem[n].key = p->string;
        mem[n].req = r;
        c->unsat = false;
        const cJSON *ps = p;
        if (pp && (st = pattern_schema(c, pp, p, path, &ps)) != CI_OK)
            goto out;
        if ((st = gen(c, ps, sub, depth + 1, mem[n].rule)) != CI_OK) {
            if (!r && c->unsat && st == CI_ERR_UNSUPPORTED) { // no value fits: the property never appears
                st = CI_OK;
                continue;
            }
            goto out;
        }
        n_req += r;
        n++;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (props && cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            continue;
        bool dup = false;
        for (int i = 0; i < n && !dup; i++)
            dup = !strcmp(mem[i].key, r->valuestring);
        if (dup)
            continue;
        if (!extras) {
            st = sfail(c, CI_ERR_UNSUPPORTED, path, "required property '%.60s' is not allowed by the schema",
                       r->valuestring);
            goto out;
        }
        mem[n].key = r->valuestring;
        mem[n].req = true;
        snprintf(mem[n].rule, sizeof mem[n].rule, "%s", apname);
        n_req++;
        n++;
    }
    if ((st = apply_dependencies(c, s, path, mem, n)) != CI_OK)
        goto out;
    n_req = 0;
    {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (!mem[i].drop) {
                n_req += mem[i].req;
                mem[k++] = mem[i];
            }
        n = k;
    }
    gtext_put(body, "\"{\" ws ", 7);
    c->prims |= P_WS;
    if (n == 0 && extras &&
        (cJSON_GetObjectItemCaseSensitive(s, "dependencies") ||
         cJSON_GetObjectItemCaseSensitive(s, "dependentRequired") ||
         cJSON_GetObjectItemCaseSensitive(s, "dependentSchemas")))
        extras = false;     // keys of its own could call for others
    if (n == 0 && extras) { // any keys
        c->prims |= P_STRING;
        if (maxp == 0) {
            gtext_put(body, "\"}\"", 3);
            goto out;
        }
        char kv[64];
        snprintf(kv, sizeof kv, "string \":\" ws %s ws", apname);
        long lo = minp > 0 ? minp - 1 : 0, hi = maxp > 0 ? maxp - 1 : -1;
        if (hi > 1000)
            hi = 1000;
        if (lo > 1000) {
            st = sfail(c, CI_ERR_UNSUPPORTED, path, "minProperties above 1000 is not supported");
            goto out;
        }
        gtext_printf(body, "(%s (\",\" ws %s)", kv, kv);
        if (hi < 0)
            gtext_printf(body, "{%ld,}", lo);
        else
            gtext_printf(body, "{%ld,%ld}", lo, hi);
        gtext_printf(body, ")%s \"}\"", minp > 0 ? "" : "?");
        goto out;
    }
    if (minp > n_req) { // make optional properties required, in order
        for (int i = 0; i < n && n_req < minp; i++)
            if (!mem[i].req) {
                mem[i].req = true;
                n_req++;
            }
        if (n_req < minp) {
            st = sfail(c, CI_ERR_UNSUPPORTED, path, "'minProperties' %ld above the properties listed", minp);
            goto out;
        }
    }
    if (maxp >= 0) {
        if (n_req > maxp) {
            st =
                sfail(c, CI_ERR_UNSUPPORTED, path, "'maxProperties' %ld below the required properties", maxp);
            goto out;
        }
        long room = maxp - n_req;
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!mem[i].req && room-- <= 0)
                continue;
            mem[k++] = mem[i];
        }
        n = k;
    }
    if (n == 0) {
        gtext_put(body, "\"}\"", 3);
        goto out;
    }
    // A_i: members i.. after one was written; B_i: members i.. before any.
    char a_next[16] = "", b_next[16] = "";
    // additionalProperties true or a schema: after the listed members, keys that none of them has (as
    // llama.cpp; absent, it produces only the listed ones), unless a count or a dependency would need them.
    if ((cJSON_IsTrue(ap) || cJSON_IsObject(ap)) && !cJSON_IsFalse(up) && !pp && maxp < 0 &&
        !cJSON_GetObjectItemCaseSensitive(s, "dependencies") &&
        !cJSON_GetObjectItemCaseSensitive(s, "dependentRequired") &&
        !cJSON_GetObjectItemCaseSensitive(s, "dependentSchemas")) {
        int n_keys = cJSON_GetArraySize(props) + n;
        const char **keys = ci_calloc((size_t)n_keys + 1, sizeof *keys);
        if (!keys) {
            st = ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
            goto out;
        }
        int k = 0;
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
            keys[k++] = p->string;
        for (int i = 0; i < n; i++)
            keys[k++] = mem[i].key;
        char xk[16];
        st = other_key_rule(c, path, keys, k, xk);
        ci_free(keys);
        if (st != CI_OK)
            goto out;
        if (xk[0]) {
            char xp[16];
            struct gtext t = {0};
            if ((st = new_rule(c, path, xp)) != CI_OK || (st = new_rule(c, path, a_next)) != CI_OK ||
                (st = new_rule(c, path, b_next)) != CI_OK)
                goto out;
            gtext_printf(&t, "%s \":\" ws %s ws", xk, apname);
            define(c, xp, &t);
            t.n = 0;
            gtext_printf(&t, "(\",\" ws %s)*", xp);
            define(c, a_next, &t);
            t.n = 0;
            gtext_printf(&t, "(%s (\",\" ws %s)*)?", xp, xp);
            define(c, b_next, &t);
            if (t.oom)
                c->out->oom = true;
            gtext_free(&t);
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        char a[16], b[16];
        if ((st = new_rule(c, path, a)) != CI_OK || (st = new_rule(c, path, b)) != CI_OK)
            goto out;
        struct gtext m = {0}, ta = {0}, tb = {0};
        lit_key(&m, mem[i].key);
        gtext_printf(&m, " \":\" ws %s ws", mem[i].rule);
        gtext_printf(&ta, "\",\" ws %s %s", m.s ? m.s : "", a_next);
        if (!mem[i].req)
            gtext_printf(&ta, " | %s", a_next[0] ? a_next : "\"\"");
        gtext_printf(&tb, "%s %s", m.s ? m.s : "", a_next);
        if (!mem[i].req)
            gtext_printf(&tb, " | %s", b_next[0] ? b_next : "\"\"");
        if (m.oom || ta.oom || tb.oom)
            c->out->oom = true;
        define(c, a, &ta);
        define(c, b, &tb);
        gtext_free(&m);
        gtext_free(&ta);
        gtext_free(&tb);
        memcpy(a_next, a, sizeof a);
        memcpy(b_next, b, sizeof b);
    }
    gtext_printf(body, "%s \"}\"", b_next);
out:
    ci_free(mem);
    return st;
}

static enum ci_status gen_array(struct jsc *c, const cJSON *s, const char *path, int depth,
                                struct gtext *body) {
    enum ci_status st;
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *extra;
    char sub[MAX_PATH];
    if (cJSON_IsObject(
            prefix)) { // not 2020-12: llama.cpp reads a schema there as items (items first): so do we
        extra = items ? items : prefix;
        prefix = NULL;
    } else if (prefix) {
        if (!cJSON_IsArray(prefix))
            return sfail(c, CI_ERR_INVALID, path, "'prefixItems' must be an array");
        extra = items;
    } else if (cJSON_IsArray(items)) {
        prefix = items;
        extra = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    } else {
        extra = items;
    }
    if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
        return sfail(c, CI_ERR_INVALID, path, "'items' must be a schema");
    long mn, mx;
    if ((st = get_count(c, s, "minItems", path, 0, &mn)) != CI_OK ||
        (st = get_count(c, s, "maxItems", path, -1, &mx)) != CI_OK)
        return st;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems")) && (mx < 0 || mx > 1)) {
        if (mn > 1)
            return sfail(c, CI_ERR_UNSUPPORTED, path, "'uniqueItems' with minItems above 1 is not supported");
        mx = 1; // at most one item: unique
    }
    if (mx >= 0 && mn > mx)
        return unsat_fail(c, path, "minItems %ld > maxItems %ld", mn, mx);
    int k = cJSON_GetArraySize(prefix);
    if (mx >= 0 && k > mx)
        k = (int)mx;
    c->prims |= P_WS;
    gtext_put(body, "\"[\" ws", 6);
    int i = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p && i < k; p = p->next, i++) {
        char idx[16], name[16];
        snprintf(idx, sizeof idx, "%d", i);
        subpath(sub, path, "prefixItems", idx);
        if (cJSON_IsFalse(p)) {
            if (mn > i)
                return sfail(c, CI_ERR_UNSUPPORTED, path, "minItems needs an item whose schema is false");
            k = i;
            break;
        }
        if ((st = gen(c, p, sub, depth + 1, name)) != CI_OK)
            return st;
        gtext_printf(body, "%s %s ws", i ? " \",\" ws" : "", name);
    }
    long lo = mn > k ? mn - k : 0, hi = mx < 0 ? -1 : mx - k;
    if (cJSON_IsFalse(extra))
        hi = 0;
    if (hi >= 0 && lo > hi)
        return sfail(c, CI_ERR_UNSUPPORTED, path, "minItems %ld needs items that the schema forbids", mn);
    if (hi > 1000)
        hi = 1000; // a subset: at most this many
    if (lo > 1000)
        return sfail(c, CI_ERR_UNSUPPORTED, path, "minItems above 1000 is not supported");
    if (hi != 0) {
        char name[16] = "value";
        if (extra && !cJSON_IsTrue(extra)) {
            subpath(sub, path, "items", NULL);
            if ((st = gen(c, extra, sub, depth + 1, name)) != CI_OK)
                return st;
        } else {
            c->prims |= P_VALUE;
        }
        if (k > 0) { // every further item after a comma
            if (hi < 0)
                gtext_printf(body, " (\",\" ws %s ws){%ld,}", name, lo);
            else
                gtext_printf(body, " (\",\" ws %s ws){%ld,%ld}", name, lo, hi);
        } else {
            long l1 = lo > 0 ? lo - 1 : 0;
            gtext_printf(body, " (%s ws (\",\" ws %s ws)", name, name);
            if (hi < 0)
                gtext_printf(body, "{%ld,}", l1);
            else
                gtext_printf(body, "{%ld,%ld}", l1, hi - 1);
            gtext_printf(body, ")%s", lo > 0 ? "" : "?");
        }
    }
    gtext_put(body, " \"]\"", 4);
    return CI_OK;
}

/* The types a schema's keywords imply when it names none (a subset: only those its keywords speak of). */
static unsigned implied_types(const cJSON *s) {
    unsigned m = 0;
    static const char *const OBJ[] = {"properties",
                                      "required",
                                      "additionalProperties",
                                      "minProperties",
                                      "maxProperties",
                                      "unevaluatedProperties",
                                      NULL};
    static const char *const ARR[] = {"items",       "prefixItems",     "minItems", "maxItems",
                                      "uniqueItems", "additionalItems", NULL};
    static const char *const STR[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const NUM[] = {"minimum",          "maximum",    "exclusiveMinimum",
                                      "exclusiveMaximum", "multipleOf", NULL};
    for (const cJSON *k = s->child; k; k = k->next) {
        if (in_list(k->string, OBJ))
            m |= T_OBJECT;
        if (in_list(k->string, ARR))
            m |= T_ARRAY;
        if (in_list(k->string, STR))
            m |= T_STRING;
        if (in_list(k->string, NUM))
            m |= T_NUMBER;
    }
    return m;
}

/* What gen() produces for s (flattened), and what its validation accepts, as type masks. */
static unsigned accepted_types(const cJSON *s) {
    if (!cJSON_IsObject(s))
        return cJSON_IsFalse(s) ? 0 : T_ALL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    unsigned m = t ? type_mask(t) : T_ALL;
    if (m & T_NUMBER)
        m |= T_INTEGER;
    if (m & T_INTEGER)
        m |= T_NUMBER; // 1.0 is an integer too
    return m;
}

static const cJSON *const_values(const cJSON *s, const cJSON **one) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(e))
        return e->child;
    *one = cJSON_GetObjectItemCaseSensitive(s, "const");
    return *one;
}

/* Whether no value produced for a can validate against b (a, b flattened).  Conservative: false when unsure. */
static bool excludes(const cJSON *a, const cJSON *b) {
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b))
        return false;
    const cJSON *one_a = NULL, *one_b = NULL;
    const cJSON *va = const_values(a, &one_a), *vb = const_values(b, &one_b);
    if (va && vb) {
        for (const cJSON *x = va; x; x = one_a ? NULL : x->next)
            for (const cJSON *y = vb; y; y = one_b ? NULL : y->next)
                if (cJSON_Compare(x, y, true))
                    return false;
        return true;
    }
    unsigned ga = accepted_types(a), gb = accepted_types(b);
    if (!cJSON_GetObjectItemCaseSensitive(a, "type") && !va) {
        unsigned im = implied_types(a);
        if (im)
            ga = im | (im & T_NUMBER ? T_INTEGER : 0);
    }
    if (va) {
        ga = 0;
        for (const cJSON *x = va; x; x = one_a ? NULL : x->next)
            ga |= cJSON_IsNull(x)     ? T_NULL
                  : cJSON_IsBool(x)   ? T_BOOL
                  : cJSON_IsObject(x) ? T_OBJECT
                  : cJSON_IsArray(x)  ? T_ARRAY
                  : cJSON_IsString(x) ? T_STRING
                                      : T_NUMBER | T_INTEGER;
    }
    if (!(ga & gb))
        return true;
    if (ga != T_OBJECT)
        return false;
    // objects: a required key of a that b forbids, a key b requires that a never produces, or a required key
    // whose values differ (a discriminator)
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *apb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    for (const cJSON *r = ra ? ra->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r))
            continue;
        const cJSON *sb = cJSON_GetObjectItemCaseSensitive(pb, r->valuestring);
        if (!sb && cJSON_IsFalse(apb))
            return true;
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(pa, r->valuestring);
        if (sa && sb && excludes(sa, sb))
            return true;
    }
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    const cJSON *apa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    bool a_extras =
        !pa && !cJSON_IsFalse(apa); // gen_object writes other keys only when no properties are listed
    for (const cJSON *r = rb ? rb->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !a_extras && !cJSON_GetObjectItemCaseSensitive(pa, r->valuestring) &&
            !has_string(ra, r->valuestring))
            return true;
    return false;
}

static enum ci_status gen_alternatives(struct jsc *c, const cJSON *s, const char *kw, const char *path,
                                       int depth, struct gtext *body) {
    enum ci_status st;
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(s, kw);
    if (!cJSON_IsArray(alts) || !alts->child)
        return sfail(c, CI_ERR_INVALID, path, "'%s' must be a non-empty array", kw);
    bool one = !strcmp(kw, "oneOf");
    const cJSON *other = strcmp(kw, "anyOf") ? cJSON_GetObjectItemCaseSensitive(s, "anyOf")
                                             : cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (other)
        return sfail(c, CI_ERR_UNSUPPORTED, path, "'anyOf' and 'oneOf' together are not supported");
    // the siblings apply to every alternative
    cJSON *base = NULL;
    if (has_constraints_besides(s, kw)) {
        base = dup_owned(c, s);
        if (!base)
            return copy_fail(c, path);
        cJSON_DeleteItemFromObjectCaseSensitive(base, kw);
    }
    int n = cJSON_GetArraySize(alts);
    if (n > 256)
        return sfail(c, CI_ERR_LIMIT, path, "'%s' with more than 256 alternatives", kw);
    const cJSON **flat = ci_calloc(2 * (size_t)n, sizeof *flat), **prod = flat + n;
    if (!flat)
        return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
    int i = 0;
    st = CI_OK;
    char sub[MAX_PATH], idx[16];
    for (const cJSON *a = alts->child; a && st == CI_OK; a = a->next, i++) {
        snprintf(idx, sizeof idx, "%d", i);
        subpath(sub, path, kw, idx);
        prod[i] = a;
        if (base) {
            const cJSON *fa;
            cJSON *m = dup_owned(c, base);
            if (!m) {
                st = copy_fail(c, sub);
                break;
            }
            if ((st = flatten(c, a, sub, depth + 1, &fa)) != CI_OK ||
                (st = merge_into(c, m, fa, sub)) != CI_OK)
                break;
            prod[i] = m;
        }
        if (one)
            st = flatten(c, prod[i], sub, depth + 1, &flat[i]);
    }
    bool exclusive = true;
    for (int x = 0; st == CI_OK && one && x < n && exclusive; x++)
        for (int y = 0; y < n && exclusive; y++)
            exclusive = x == y || excludes(flat[x], flat[y]);
    if (st == CI_OK && one && !exclusive) {
        // Objects told apart by their required keys: produce only those keys (no optional ones, no others),
        // so that an output lacks what the other alternatives require.
        for (int x = 0; x < n && st == CI_OK; x++) {
            const cJSON *f = flat[x];
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
            if (!cJSON_IsObject(f) || (t ? type_mask(t) != T_OBJECT : implied_types(f) != T_OBJECT) ||
                cJSON_GetObjectItemCaseSensitive(f, "enum") || cJSON_GetObjectItemCaseSensitive(f, "const") ||
                cJSON_GetObjectItemCaseSensitive(f, "anyOf") || cJSON_GetObjectItemCaseSensitive(f, "oneOf"))
                continue;
            cJSON *m = dup_owned(c, f);
            if (!m) {
                st = copy_fail(c, path);
                break;
            }
            const cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required");
            cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
            for (cJSON *k = props ? props->child : NULL; k;) {
                cJSON *next = k->next;
                if (!has_string(req, k->string))
                    cJSON_DeleteItemFromObjectCaseSensitive(props, k->string);
                k = next;
            }
            cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
            cJSON_AddFalseToObject(m, "additionalProperties");
            cJSON_DeleteItemFromObjectCaseSensitive(m, "unevaluatedProperties");
            prod[x] = m;
        }
        exclusive = true;
        for (int x = 0; st == CI_OK && x < n && exclusive; x++)
            for (int y = 0; y < n && exclusive; y++)
                if (x != y && !excludes(prod[x], flat[y])) {
                    exclusive = false;
                    st = sfail(c, CI_ERR_UNSUPPORTED, path,
                               "'oneOf' whose alternatives %d and %d may both match is not supported", x, y);
                }
    }
    for (i = 0; st == CI_OK && i < n; i++) {
        snprintf(idx, sizeof idx, "%d", i);
        subpath(sub, path, kw, idx);
        char name[16];
        if ((st = gen(c, prod[i], sub, depth + 1, name)) != CI_OK)
            break;
        gtext_printf(body, "%s%s", i ? " | " : "", name);
    }
    ci_free(flat);
    return st;
}

/* A rule for schema s; its name in name. */
static enum ci_status gen(struct jsc *c, const cJSON *s, const char *path, int depth, char name[16]) {
    enum ci_status st;
    if (depth > GRAM_SCHEMA_MAX_DEPTH)
        return sfail(c, CI_ERR_LIMIT, path, "schemas nested deeper than %d", GRAM_SCHEMA_MAX_DEPTH);
    if (cJSON_IsTrue(s)) {
        c->prims |= P_VALUE;
        snprintf(name, 16, "value");
        return CI_OK;
    }
    if (cJSON_IsFalse(s))
        return unsat_fail(c, path, "the schema false matches nothing");
    if (!cJSON_IsObject(s))
        return sfail(c, CI_ERR_INVALID, path, "a schema must be an object or a boolean");
    if ((st = check_keywords(c, s, path)) != CI_OK)
        return st;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref && !has_constraints_besides(s, "$ref")) { // a rule per reference: recursion refers to it
        if (!cJSON_IsString(ref))
            return sfail(c, CI_ERR_INVALID, path, "'$ref' must be a string");
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ref, ref->valuestring)) {
                if (c->refs[i].failed) {
                    c->unsat = c->refs[i].unsat;
                    return sfail(c, CI_ERR_UNSUPPORTED, path, "'$ref' \"%.80s\" does not compile",
                                 ref->valuestring);
                }
                memcpy(name, c->refs[i].name, 16);
                return CI_OK;
            }
        const cJSON *t;
        if ((st = lookup_ref(c, s, path, &t)) != CI_OK)
            return st;
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs ? 2 * c->cap_refs : 16;
            struct refname *v = ci_realloc(c->refs, (size_t)cap * sizeof *v);
            if (!v)
                return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
            c->refs = v;
            c->cap_refs = cap;
        }
        char *copy = ci_malloc(strlen(ref->valuestring) + 1);
        if (!copy)
            return ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
        strcpy(copy, ref->valuestring);
        int ri = c->n_refs++;
        c->refs[ri] = (struct refname){.ref = copy};
        if ((st = new_rule(c, path, c->refs[ri].name)) != CI_OK)
            return st;
        memcpy(name, c->refs[ri].name, 16);
        char target[16];
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "%.190s", ref->valuestring);
        if ((st = gen(c, t, sub, depth + 1, target)) != CI_OK) {
            // rules written meanwhile may refer to it (recursion); they are unreachable now, but defined
            c->refs[ri].failed = true;
            c->refs[ri].unsat = c->unsat;
            gtext_printf(c->out, "%s ::= \"\\x00\"\n", name);
            return st;
        }
        gtext_printf(c->out, "%s ::= %s\n", name, target);
        return CI_OK;
    }
    if (ref || cJSON_GetObjectItemCaseSensitive(s, "allOf")) {
        const cJSON *f;
        if ((st = flatten(c, s, path, depth, &f)) != CI_OK)
            return st;
        return gen(c, f, path, depth + 1, name);
    }
    struct gtext body = {0};
    if ((st = new_rule(c, path, name)) != CI_OK)
        return st;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"),
                *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (en || cn) {
        if (en && !cJSON_IsArray(en)) {
            st = sfail(c, CI_ERR_INVALID, path, "'enum' must be an array");
        } else if (cn) {
            bool in = !en;
            for (const cJSON *v = en ? en->child : NULL; v && !in; v = v->next)
                in = cJSON_Compare(v, cn, true);
            if (!in) {
                st = unsat_fail(c, path, "'const' is not among the 'enum' values");
                goto done;
            }
            cJSON *arr = own(c, cJSON_CreateArray());
            if (!arr || !cJSON_AddItemToArray(arr, cJSON_Duplicate(cn, true)))
                st = ci_err_set(c->err, CI_ERR_NOMEM, "out of memory");
            else
                st = gen_enum(c, s, arr, path, &body);
        } else {
            st = gen_enum(c, s, en, path, &body);
        }
    } else if (cJSON_GetObjectItemCaseSensitive(s, "anyOf")) {
        st = gen_alternatives(c, s, "anyOf", path, depth, &body);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "oneOf")) {
        st = gen_alternatives(c, s, "oneOf", path, depth, &body);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        unsigned m;
        if (t) {
            if (!cJSON_IsString(t) && !cJSON_IsArray(t)) {
                st = sfail(c, CI_ERR_INVALID, path, "'type' must be a string or an array");
                goto done;
            }
            m = type_mask(t);
            if (!m) {
                st = sfail(c, CI_ERR_INVALID, path, "'type' names no known type");
                goto done;
            }
        } else {
            m = implied_types(s);
        }
        unsigned nt = not_types(s); // "not": {"type": ...}: those types removed
        if (nt) {
            if (!m)
                m = T_ALL;
            if (nt & T_NUMBER)
                nt |= T_INTEGER;
            if ((nt & T_INTEGER) && !(nt & T_NUMBER) && (m & T_NUMBER)) {
                st = sfail(c, CI_ERR_UNSUPPORTED, path,
                           "the keyword 'not' with type integer on numbers is not supported");
                goto done;
            }
            if (!(m &= ~nt)) {
                st = unsat_fail(c, path, "'not' excludes every type the schema allows");
                goto done;
            }
        }
        if (!m) {
            c->prims |= P_VALUE;
            gtext_put(&body, "value", 5);
        }
        if ((m & T_NUMBER) && (m & T_INTEGER))
            m &= ~(unsigned)T_INTEGER;
        const char *sep = "";
        for (int i = 0; i < 7 && st == CI_OK; i++) {
            if (!(m & (1u << i)))
                continue;
            gtext_put(&body, sep, strlen(sep));
            sep = " | ";
            switch (1u << i) {
            case T_NULL:
                c->prims |= P_NULL;
                gtext_put(&body, "null", 4);
                break;
            case T_BOOL:
                c->prims |= P_BOOL;
                gtext_put(&body, "boolean", 7);
                break;
            case T_OBJECT:
                st = gen_object(c, s, path, depth, &body);
                break;
            case T_ARRAY:
                st = gen_array(c, s, path, depth, &body);
                break;
            case T_STRING:
                st = gen_string(c, s, path, &body);
                break;
            case T_NUMBER:
            case T_INTEGER:
                st = gen_number(c, s, (1u << i) == T_INTEGER, path, &body);
                break;
            }
        }
    }
done:
    if (st == CI_OK) {
        if (body.oom || body.over)
            c->out->oom |= body.oom, c->out->over |= body.over;
        define(c, name, &body);
    }
    gtext_free(&body);
    return st;
}

static const char PRIM_WS[] = "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
static const char PRIM_STRING[] =
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
    "[dD] "
    "[0-7] [0-9a-fA-F]{2}))\n"
    "fmt-date ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (day30 | \"31\") | (\"0\" [469] | "
    "\"11\") \"-\" day30 | \"02-\" day28)\n"
    "day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "day30 ::= day28 | \"29\" | \"30\"\n"
    "fmt-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" "
    "| "
    "[+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "fmt-uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "hex ::= [0-9a-f]\n"
    "fmt-email ::= [a-z0-9]{1,20} (\".\" [a-z0-9]{1,10})? \"@\" [a-z0-9]{1,20} \".\" [a-z]{2,6}\n"
    "octet ::= [0-9] | [1-9] [0-9] | \"1\" [0-9]{2} | \"2\" [0-4] [0-9] | \"25\" [0-5]\n"
    "fmt-ipv4 ::= octet \".\" octet \".\" octet \".\" octet\n"
    "label ::= [a-z] ([a-z0-9-]{0,18} [a-z0-9])?\n"
    "fmt-host ::= label (\".\" label){0,3}\n"
    "fmt-uri ::= \"https://\" fmt-host (\"/\" [a-zA-Z0-9._~-]{1,20}){0,4}\n";
static const char PRIM_INTEGER[] = "integer ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n";
static const char PRIM_NUMBER[] =
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n";
// a fraction above 0 (a last digit 1-9), then zeros that do not change it ("12.50")
static const char PRIM_FRAC[] = "frac ::= \".\" [0-9]{0,5} [1-9] \"0\"{0,9}\n";
static const char PRIM_VALUE[] =
    "value ::= object-any | array-any | string | number | boolean | null\n"
    "object-any ::= \"{\" ws (string \":\" ws value ws (\",\" ws string \":\" ws value ws)*)? \"}\"\n"
    "array-any ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n";

static void emit_prims(struct jsc *c) {
    unsigned p = c->prims;
    if (p & P_VALUE)
        p |= P_WS | P_STRING | P_NUMBER | P_BOOL | P_NULL;
    if (p & P_WS)
        gtext_put(c->out, PRIM_WS, sizeof PRIM_WS - 1);
    if (p & P_STRING)
        gtext_put(c->out, PRIM_STRING, sizeof PRIM_STRING - 1);
    if (p & P_INTEGER)
        gtext_put(c->out, PRIM_INTEGER, sizeof PRIM_INTEGER - 1);
    if (p & P_NUMBER)
        gtext_put(c->out, PRIM_NUMBER, sizeof PRIM_NUMBER - 1);
    if (p & P_FRAC)
        gtext_put(c->out, PRIM_FRAC, sizeof PRIM_FRAC - 1);
    if (p & P_BOOL)
        gtext_printf(c->out, "boolean ::= \"true\" | \"false\"\n");
    if (p & P_NULL)
        gtext_printf(c->out, "null ::= \"null\"\n");
    if (p & P_VALUE)
        gtext_put(c->out, PRIM_VALUE, sizeof PRIM_VALUE - 1);
}

static int json_depth(const char *s, size_t n) {
    int d = 0, mx = 0;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                str = false;
        } else if (ch == '"') {
            str = true;
        } else if (ch == '{' || ch == '[') {
            if (++d > mx)
                mx = d;
        } else if (ch == '}' || ch == ']') {
            d--;
        }
    }
    return mx;
}

/* Compiles one schema into out: its rules (named with prefix), "<start> ::= <its first rule>\n", and *prims
 * gains the primitive rules it uses (emitted once by the caller). */
static enum ci_status compile_schema(const char *text, size_t len, const char *prefix, const char *start,
                                     struct gtext *out, unsigned *prims, struct ci_err *err) {
    if (len > GRAM_SCHEMA_MAX_BYTES)
        return ci_err_set(err, CI_ERR_LIMIT, "json_schema: the schema is %zu bytes, at most %u are allowed",
                          len, GRAM_SCHEMA_MAX_BYTES);
    if (json_depth(text, len) > GRAM_SCHEMA_MAX_JSON_NESTING)
        return ci_err_set(err, CI_ERR_LIMIT, "json_schema: the schema nests deeper than %d",
                          GRAM_SCHEMA_MAX_JSON_NESTING);
    struct jsc c = {0};
    c.doc = cJSON_ParseWithLength(text, len);
    if (!c.doc)
        return ci_err_set(err, CI_ERR_INVALID, "json_schema: the schema is not valid JSON");
    c.out = out;
    c.err = err;
    c.prefix = prefix;
    char name[16];
    enum ci_status st = gen(&c, c.doc, "", 0, name);
    if (st == CI_OK) {
        gtext_printf(out, "%s ::= %s\n", start, name);
        *prims |= c.prims;
    }
    for (int i = 0; i < c.n_refs; i++)
        ci_free(c.refs[i].ref);
    ci_free(c.refs);
    for (int i = 0; i < c.n_owned; i++)
        cJSON_Delete(c.owned[i]);
    ci_free(c.owned);
    cJSON_Delete(c.doc);
    return st;
}

/* The primitive rules prims asks for, then out's status (a failure named as the schema compiler's). */
static enum ci_status finish_prims(unsigned prims, struct gtext *out, struct ci_err *err) {
    struct jsc c = {.out = out, .prims = prims};
    emit_prims(&c);
    enum ci_status st = gtext_status(out, err);
    if (st != CI_OK) {
        char m[256];
        snprintf(m, sizeof m, "%s", err ? err->msg : "");
        ci_err_set(err, st, "json_schema: %s", m);
    }
    return st;
}

enum ci_status gram_json_schema_to_gbnf(const char *text, size_t len, struct gtext *out, struct ci_err *err) {
    unsigned prims = 0;
    enum ci_status st = compile_schema(text, len, "", "root", out, &prims, err);
    return st == CI_OK ? finish_prims(prims, out, err) : st;
}

enum ci_status gram_json_schemas_gbnf(const char *const *texts, const size_t *lens, int n, struct gtext *out,
                                      struct ci_err *err) {
    unsigned prims = 0;
    for (int i = 0; i < n; i++) {
        char prefix[16], start[24];
        snprintf(prefix, sizeof prefix, "s%d", i);
        snprintf(start, sizeof start, "schema%d", i);
        enum ci_status st = compile_schema(texts[i], lens[i], prefix, start, out, &prims, err);
        if (st != CI_OK)
            return st;
    }
    return finish_prims(prims, out, err);
}

enum ci_status gram_json_object_gbnf(struct gtext *out, struct ci_err *err) {
    return gram_json_schema_to_gbnf("{\"type\":\"object\"}", 17, out, err);
}
