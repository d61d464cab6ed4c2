/* Regular expressions into GBNF text (regex.h): a recursive-descent parser that writes the GBNF expression
 * as it reads, character sets kept as sorted lists of code-point ranges. */
#include "grammar/regex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/utf8.h"
#include "grammar/grammar.h"

/* ---- text buffer ----------------------------------------------------------------------------------------- */

void gtext_free(struct gtext *t) {
    ci_free(t->s);
    t->s = NULL;
    t->n = t->cap = 0;
}

static bool gtext_reserve(struct gtext *t, size_t more) {
    if (t->oom || t->over)
        return false;
    size_t limit = t->limit ? t->limit : GRAM_MAX_TEXT;
    if (t->n + more > limit) {
        t->over = true;
        return false;
    }
    if (t->n + more + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + more + 1)
            cap *= 2;
        char *s = ci_realloc(t->s, cap);
        if (!s) {
            t->oom = true;
            return false;
        }
        t->s = s;
        t->cap = cap;
    }
    return true;
}

void gtext_put(struct gtext *t, const char *s, size_t n) {
    if (!gtext_reserve(t, n))
        return;
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

void gtext_printf(struct gtext *t, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    if ((size_t)k < sizeof small) {
        gtext_put(t, small, (size_t)k);
        return;
    }
    if (!gtext_reserve(t, (size_t)k))
        return;
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    t->n += (size_t)k;
}

enum ci_status gtext_status(const struct gtext *t, struct ci_err *err) {
    if (t->oom)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    if (t->over)
        return ci_err_set(err, CI_ERR_LIMIT, "the compiled grammar is too large (more than %zu bytes)",
                          t->limit ? t->limit : (size_t)GRAM_MAX_TEXT);
    return CI_OK;
}

/* One code point inside a GBNF literal or class. */
static void put_cp(struct gtext *t, uint32_t cp, bool in_class) {
    if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '-' || cp == '[')))
        gtext_printf(t, "\\%c", (char)cp);
    else if (cp < 0x20 || cp == 0x7F || (in_class && cp == '^'))
        gtext_printf(t, "\\x%02X", (unsigned)cp);
    else if (cp < 0x80)
        gtext_printf(t, "%c", (char)cp);
    else if (cp < 0x10000)
        gtext_printf(t, "\\u%04X", (unsigned)cp);
    else
        gtext_printf(t, "\\U%08X", (unsigned)cp);
}

void gtext_literal(struct gtext *t, const char *s, size_t n) {
    gtext_put(t, "\"", 1);
    for (size_t i = 0; i < n;) {
        size_t bad;
        bool partial;
        int len = utf8_next_strict((const unsigned char *)s + i, n - i, &bad, &partial);
        uint32_t cp = 0xFFFD;
        if (len > 0) {
            size_t off = 0;
            cp = utf8_decode_lenient((const unsigned char *)s + i, n - i, &off);
            i += (size_t)len;
        } else {
            i += bad;
        }
        put_cp(t, cp, false);
    }
    gtext_put(t, "\"", 1);
}

/* ---- character sets -------------------------------------------------------------------------------------- */

struct range {
    uint32_t lo, hi;
};

struct cset {
    struct range *r;
    size_t n, cap;
    bool oom;
};

static void cs_add(struct cset *s, uint32_t lo, uint32_t hi) {
    if (s->oom)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct range *r = ci_realloc(s->r, cap * sizeof *r);
        if (!r) {
            s->oom = true;
            return;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (struct range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const struct range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, without surrogates. */
static void cs_norm(struct cset *s) {
    if (s->oom || !s->n)
        return;
    // split ranges across the surrogates first
    size_t n0 = s->n;
    for (size_t i = 0; i < n0; i++) {
        struct range r = s->r[i];
        if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
            s->r[i].hi = r.lo < 0xD800 ? 0xD7FF : 0;
            if (r.lo >= 0xD800)
                s->r[i] = (struct range){1, 0}; // empty
            if (r.hi > 0xDFFF)
                cs_add(s, 0xE000, r.hi);
            if (s->oom)
                return;
        }
    }
    qsort(s->r, s->n, sizeof *s->r, cmp_range);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > s->r[i].hi)
            continue;
        if (k && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi)
                s->r[k - 1].hi = s->r[i].hi;
        } else {
            s->r[k++] = s->r[i];
        }
    }
    s->n = k;
}

/* s := all code points (no surrogates) not in s. */
static void cs_negate(struct cset *s) {
    cs_norm(s);
    if (s->oom)
        return;
    struct cset o = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next)
            cs_add(&o, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= GRAM_MAX_CODEPOINT)
        cs_add(&o, next, GRAM_MAX_CODEPOINT);
    ci_free(s->r);
    *s = o;
    cs_norm(s);
}

/* s := s ∩ [lo, hi]. */
static void cs_clip(struct cset *s, uint32_t lo, uint32_t hi) {
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t a = s->r[i].lo > lo ? s->r[i].lo : lo, b = s->r[i].hi < hi ? s->r[i].hi : hi;
        if (a <= b)
            s->r[k++] = (struct range){a, b};
    }
    s->n = k;
}

static bool cs_has(const struct cset *s, uint32_t c) {
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i].lo <= c && c <= s->r[i].hi)
            return true;
    return false;
}

/* The shorthand classes.  wide: the union of what ECMAScript and Python's re may count in (to be complemented);
 * otherwise the characters both count in. */
static void cs_shorthand(struct cset *s, char c, bool wide) {
    switch (c) {
    case 'd':
        cs_add(s, '0', '9');
        if (wide)
            cs_add(s, 0x80, GRAM_MAX_CODEPOINT);
        break;
    case 'w':
        cs_add(s, '0', '9');
        cs_add(s, 'A', 'Z');
        cs_add(s, 'a', 'z');
        cs_add(s, '_', '_');
        if (wide)
            cs_add(s, 0x80, GRAM_MAX_CODEPOINT);
        break;
    case 's':
        cs_add(s, '\t', '\r');
        cs_add(s, ' ', ' ');
        cs_add(s, 0xA0, 0xA0);
        cs_add(s, 0x1680, 0x1680);
        cs_add(s, 0x2000, 0x200A);
        cs_add(s, 0x2028, 0x2029);
        cs_add(s, 0x202F, 0x202F);
        cs_add(s, 0x205F, 0x205F);
        cs_add(s, 0x3000, 0x3000);
        if (wide) {
            cs_add(s, 0x1C, 0x1F); // Python's str.isspace
            cs_add(s, 0x85, 0x85);
            cs_add(s, 0xFEFF, 0xFEFF); // ECMAScript's
            cs_add(s, 0x180E, 0x180E);
        }
        break;
    }
}

/* Writes the set as one GBNF element (a class, or a parenthesized choice in JSON-string mode). */
static void cs_emit(struct gtext *t, struct cset *s, bool json) {
    cs_norm(s);
    if (!json) {
        gtext_put(t, "[", 1);
        for (size_t i = 0; i < s->n; i++) {
            put_cp(t, s->r[i].lo, true);
            if (s->r[i].hi != s->r[i].lo) {
                gtext_put(t, "-", 1);
                put_cp(t, s->r[i].hi, true);
            }
        }
        gtext_put(t, "]", 1);
        return;
    }
    bool quote = cs_has(s, '"'), bslash = cs_has(s, '\\');
    uint32_t ctl = 0;
    for (uint32_t c = 0; c < 0x20; c++)
        if (cs_has(s, c))
            ctl |= 1u << c;
    struct cset plain = {0};
    for (size_t i = 0; i < s->n; i++)
        cs_add(&plain, s->r[i].lo, s->r[i].hi);
    cs_clip(&plain, 0x20, GRAM_MAX_CODEPOINT);
    struct cset tmp = {0}; // remove " and \ .
    for (size_t i = 0; i < plain.n; i++) {
        struct range r = plain.r[i];
        uint32_t cuts[2] = {'"', '\\'};
        uint32_t lo = r.lo;
        for (int k = 0; k < 2; k++)
            if (cuts[k] >= lo && cuts[k] <= r.hi) {
                if (cuts[k] > lo)
                    cs_add(&tmp, lo, cuts[k] - 1);
                lo = cuts[k] + 1;
            }
        if (lo <= r.hi)
            cs_add(&tmp, lo, r.hi);
    }
    ci_free(plain.r);
    if (tmp.oom)
        t->oom = true;
    int alts = (tmp.n > 0) + quote + bslash + (ctl == 0xFFFFFFFFu ? 1 : __builtin_popcount(ctl));
    if (alts > 1)
        gtext_put(t, "(", 1);
    const char *sep = "";
    if (tmp.n) {
        cs_emit(t, &tmp, false);
        sep = " | ";
    }
    ci_free(tmp.r);
    if (quote) {
        gtext_printf(t, "%s\"\\\\\\\"\"", sep);
        sep = " | ";
    }
    if (bslash) {
        gtext_printf(t, "%s\"\\\\\\\\\"", sep);
        sep = " | ";
    }
    if (ctl == 0xFFFFFFFFu) {
        gtext_printf(t, "%s\"\\\\u00\" [01] [0-9a-f]", sep);
    } else {
        for (uint32_t c = 0; c < 0x20; c++)
            if (ctl & (1u << c)) {
                gtext_printf(t, "%s\"\\\\u%04x\"", sep, (unsigned)c);
                sep = " | ";
            }
    }
    if (alts > 1)
        gtext_put(t, ")", 1);
}

/* ---- the parser ------------------------------------------------------------------------------------------ */

struct rx {
    const char *s;
    size_t n, pos;
    int flags;
    struct gtext *out;
    struct ci_err *err;
};

static enum ci_status rx_fail(struct rx *p, enum ci_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum ci_status rx_fail(struct rx *p, enum ci_status code, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ci_err_set(p->err, code, "regex: %s (at offset %zu)", msg, p->pos);
}

static int rx_peek(const struct rx *p) {
    return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1;
}

static bool json_mode(const struct rx *p) {
    return (p->flags & GRAM_REGEX_JSON_STRING) != 0;
}

static void emit_cp(struct rx *p, uint32_t cp) {
    struct cset s = {0};
    cs_add(&s, cp, cp);
    cs_emit(p->out, &s, json_mode(p));
    if (s.oom)
        p->out->oom = true;
    ci_free(s.r);
}

static enum ci_status rx_utf8(struct rx *p, uint32_t *cp) {
    size_t bad;
    bool partial;
    int len = utf8_next_strict((const unsigned char *)p->s + p->pos, p->n - p->pos, &bad, &partial);
    if (len <= 0)
        return rx_fail(p, CI_ERR_INVALID, "invalid UTF-8");
    size_t off = 0;
    *cp = utf8_decode_lenient((const unsigned char *)p->s + p->pos, p->n - p->pos, &off);
    p->pos += (size_t)len;
    return CI_OK;
}

static int hexval(int c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool rx_hex(struct rx *p, int digits, uint32_t *v) {
    if (p->pos + (size_t)digits > p->n)
        return false;
    uint32_t x = 0;
    for (int i = 0; i < digits; i++) {
        int d = hexval((unsigned char)p->s[p->pos + (size_t)i]);
        if (d < 0)
            return false;
        x = x * 16 + (uint32_t)d;
    }
    p->pos += (size_t)digits;
    *v = x;
    return true;
}

/* An escape after the backslash (consumed).  Either a set (*is_set, the shorthand in *set_c) or a code point. */
static enum ci_status rx_escape(struct rx *p, bool in_class, uint32_t *cp, char *set_c) {
    *set_c = 0;
    if (p->pos >= p->n)
        return rx_fail(p, CI_ERR_INVALID, "the pattern ends with a lone '\\'");
    int c = rx_peek(p);
    p->pos++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
        *set_c = (char)c;
        return CI_OK;
    case 'n':
        *cp = '\n';
        return CI_OK;
    case 'r':
        *cp = '\r';
        return CI_OK;
    case 't':
        *cp = '\t';
        return CI_OK;
    case 'v':
        *cp = '\v';
        return CI_OK;
    case 'f':
        *cp = '\f';
        return CI_OK;
    case '0':
        if (rx_peek(p) >= '0' && rx_peek(p) <= '9')
            return rx_fail(p, CI_ERR_UNSUPPORTED, "octal escapes are not supported");
        *cp = 0;
        return CI_OK;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return CI_OK;
        }
        return rx_fail(p, CI_ERR_UNSUPPORTED, "the word boundary '\\b' is not supported");
    case 'B':
        return rx_fail(p, CI_ERR_UNSUPPORTED, "the non-word-boundary '\\B' is not supported");
    case 'k':
        return rx_fail(p, CI_ERR_UNSUPPORTED, "backreferences ('\\k<name>') are not supported");
    case 'p':
    case 'P':
        return rx_fail(p, CI_ERR_UNSUPPORTED, "Unicode property escapes ('\\%c{...}') are not supported", c);
    case 'c': {
        int l = rx_peek(p);
        if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
            p->pos++;
            *cp = (uint32_t)(l % 32);
            return CI_OK;
        }
        return rx_fail(p, CI_ERR_INVALID, "'\\c' must be followed by a letter");
    }
    case 'x':
        if (!rx_hex(p, 2, cp))
            return rx_fail(p, CI_ERR_INVALID, "'\\x' must be followed by 2 hexadecimal digits");
        return CI_OK;
    case 'u':
        if (rx_peek(p) == '{') {
            p->pos++;
            uint32_t v = 0;
            int nd = 0, d;
            while ((d = hexval(rx_peek(p))) >= 0 && nd < 8) {
                v = v * 16 + (uint32_t)d;
                nd++;
                p->pos++;
            }
            if (!nd || rx_peek(p) != '}' || v > GRAM_MAX_CODEPOINT)
                return rx_fail(p, CI_ERR_INVALID, "bad '\\u{...}' escape");
            p->pos++;
            *cp = v;
        } else if (!rx_hex(p, 4, cp)) {
            return rx_fail(p, CI_ERR_INVALID, "'\\u' must be followed by 4 hexadecimal digits");
        }
        if (*cp >= 0xD800 && *cp <= 0xDBFF && p->pos + 6 <= p->n && p->s[p->pos] == '\\' &&
            p->s[p->pos + 1] == 'u') { // a surrogate pair
            size_t save = p->pos;
            uint32_t lo;
            p->pos += 2;
            if (rx_hex(p, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                return CI_OK;
            }
            p->pos = save;
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF)
            return rx_fail(p, CI_ERR_UNSUPPORTED, "a lone surrogate escape is not supported");
        return CI_OK;
    default:
        break;
    }
    if (c >= '1' && c <= '9')
        return rx_fail(p, CI_ERR_UNSUPPORTED, "backreferences ('\\%c') are not supported", c);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return rx_fail(p, CI_ERR_UNSUPPORTED, "the escape '\\%c' is not supported", c);
    if (c >= 0x80) {
        p->pos--;
        return rx_utf8(p, cp);
    }
    *cp = (uint32_t)c; // escaped punctuation: itself
    return CI_OK;
}

static void add_shorthand(struct cset *s, char c) {
    if (c >= 'a') {
        cs_shorthand(s, c, false);
    } else {
        struct cset w = {0};
        cs_shorthand(&w, (char)(c + 32), true);
        cs_negate(&w);
        for (size_t i = 0; i < w.n; i++)
            cs_add(s, w.r[i].lo, w.r[i].hi);
        if (w.oom)
            s->oom = true;
        ci_free(w.r);
    }
}

/* [...] after the '['. */
static enum ci_status rx_class(struct rx *p) {
    bool neg = false;
    if (rx_peek(p) == '^') {
        neg = true;
        p->pos++;
    }
    if (rx_peek(p) == ']')
        return rx_fail(p, CI_ERR_UNSUPPORTED, "the empty class '[%s]' is not supported", neg ? "^" : "");
    struct cset s = {0}, shorthand_wide = {0};
    enum ci_status st = CI_OK;
    for (;;) {
        if (p->pos >= p->n) {
            st = rx_fail(p, CI_ERR_INVALID, "unterminated character class");
            break;
        }
        if (rx_peek(p) == ']') {
            p->pos++;
            break;
        }
        uint32_t lo;
        char set_c = 0;
        if (rx_peek(p) == '\\') {
            p->pos++;
            if ((st = rx_escape(p, true, &lo, &set_c)) != CI_OK)
                break;
        } else if ((st = rx_utf8(p, &lo)) != CI_OK) {
            break;
        }
        if (set_c) {
            if (neg && set_c >= 'a') // complemented below: count in what either dialect might
                cs_shorthand(&s, set_c, true);
            else
                add_shorthand(&s, set_c);
            if (rx_peek(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
                st = rx_fail(p, CI_ERR_INVALID, "a range cannot start with '\\%c'", set_c);
                break;
            }
            continue;
        }
        if (rx_peek(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
            p->pos++;
            uint32_t hi;
            if (rx_peek(p) == '\\') {
                p->pos++;
                if ((st = rx_escape(p, true, &hi, &set_c)) != CI_OK)
                    break;
                if (set_c) {
                    st = rx_fail(p, CI_ERR_INVALID, "a range cannot end with '\\%c'", set_c);
                    break;
                }
            } else if ((st = rx_utf8(p, &hi)) != CI_OK) {
                break;
            }
            if (hi < lo) {
                st = rx_fail(p, CI_ERR_INVALID, "range out of order in character class");
                break;
            }
            cs_add(&s, lo, hi);
        } else {
            cs_add(&s, lo, lo);
        }
    }
    ci_free(shorthand_wide.r);
    if (st == CI_OK) {
        if (neg)
            cs_negate(&s);
        cs_norm(&s);
        if (s.oom)
            st = ci_err_set(p->err, CI_ERR_NOMEM, "out of memory");
        else if (!s.n)
            st = rx_fail(p, CI_ERR_UNSUPPORTED, "the character class matches no character");
        else
            cs_emit(p->out, &s, json_mode(p));
    }
    ci_free(s.r);
    return st;
}

/* Any character (search mode's free ends). */
static void emit_any(struct rx *p) {
    struct cset s = {0};
    cs_add(&s, 0, GRAM_MAX_CODEPOINT);
    cs_emit(p->out, &s, json_mode(p));
    gtext_put(p->out, "*", 1);
    ci_free(s.r);
}

static bool rx_int(struct rx *p, long *v) {
    if (rx_peek(p) < '0' || rx_peek(p) > '9')
        return false;
    long x = 0;
    while (rx_peek(p) >= '0' && rx_peek(p) <= '9') {
        x = x * 10 + (rx_peek(p) - '0');
        if (x > 1000000)
            x = 1000000;
        p->pos++;
    }
    *v = x;
    return true;
}

/* The lengths (in characters) of the strings a piece matches; hi RX_INF: unbounded. */
struct rlen {
    long lo, hi;
};
#define RX_INF (1L << 40)

static long len_add(long a, long b) {
    return a + b >= RX_INF ? RX_INF : a + b;
}

static long len_mul(long a, long b) {
    if (a == 0 || b == 0)
        return 0;
    return a >= RX_INF || b >= RX_INF || a > RX_INF / b ? RX_INF : a * b;
}

/* A quantifier at p->pos, if any, appended to the output; *a (the atom's lengths) scaled by it. */
static enum ci_status rx_quant(struct rx *p, struct rlen *a) {
    int c = rx_peek(p);
    if (c == '*' || c == '+' || c == '?') {
        p->pos++;
        gtext_put(p->out, (const char *)&(char){(char)c}, 1);
        a->lo = c == '+' ? a->lo : 0;
        a->hi = c == '?' ? a->hi : len_mul(a->hi, RX_INF);
    } else if (c == '{') {
        size_t save = p->pos;
        p->pos++;
        long m, n = -1;
        if (!rx_int(p, &m)) {
            p->pos = save;
            return CI_OK; // a literal '{' (ECMAScript Annex B)
        }
        if (rx_peek(p) == ',') {
            p->pos++;
            if (!rx_int(p, &n))
                n = -2; // unbounded
        } else {
            n = m;
        }
        if (rx_peek(p) != '}') {
            p->pos = save;
            return CI_OK;
        }
        p->pos++;
        if (m > GRAM_MAX_REPEAT || n > GRAM_MAX_REPEAT)
            return rx_fail(p, CI_ERR_LIMIT, "repetition count above %d", GRAM_MAX_REPEAT);
        if (n >= 0 && n < m)
            return rx_fail(p, CI_ERR_INVALID, "numbers out of order in the {%ld,%ld} quantifier", m, n);
        if (n == -2)
            gtext_printf(p->out, "{%ld,}", m);
        else
            gtext_printf(p->out, "{%ld,%ld}", m, n);
        a->lo = len_mul(a->lo, m);
        a->hi = len_mul(a->hi, n == -2 ? RX_INF : n);
    } else {
        return CI_OK;
    }
    if (rx_peek(p) == '?') // lazy: the same language
        p->pos++;
    c = rx_peek(p);
    if (c == '*' || c == '+' || c == '?' ||
        (c == '{' && p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9'))
        return rx_fail(p, CI_ERR_INVALID, "nothing to repeat before '%c'", c);
    return CI_OK;
}

static enum ci_status rx_alt(struct rx *p, int depth, struct rlen *out);

/* One alternative: atoms until '|', ')' or the end; *out: its lengths. */
static enum ci_status rx_branch(struct rx *p, int depth, struct rlen *out) {
    bool top = depth == 0, search = (p->flags & GRAM_REGEX_SEARCH) != 0;
    bool any = false;
    enum ci_status s;
    struct rlen tot = {0, 0};
    if (rx_peek(p) == '^' && top) {
        p->pos++;
    } else if (top && search) {
        emit_any(p);
        tot.hi = RX_INF;
        any = true;
    }
    for (;;) {
        int c = rx_peek(p);
        if (c < 0 || c == '|' || c == ')')
            break;
        if (any)
            gtext_put(p->out, " ", 1);
        any = true;
        struct rlen a = {1, 1};
        switch (c) {
        case '(':
            p->pos++;
            if (rx_peek(p) == '?') {
                p->pos++;
                int k = rx_peek(p);
                if (k == ':') {
                    p->pos++;
                } else if (k == '<' && p->pos + 1 < p->n && p->s[p->pos + 1] != '=' &&
                           p->s[p->pos + 1] != '!') {
                    while (p->pos < p->n && p->s[p->pos] != '>')
                        p->pos++;
                    if (p->pos >= p->n)
                        return rx_fail(p, CI_ERR_INVALID, "unterminated group name");
                    p->pos++;
                } else if (k == 'P' && p->pos + 1 < p->n && p->s[p->pos + 1] == '<') {
                    while (p->pos < p->n && p->s[p->pos] != '>')
                        p->pos++;
                    if (p->pos >= p->n)
                        return rx_fail(p, CI_ERR_INVALID, "unterminated group name");
                    p->pos++;
                } else if (k == '=' || k == '!') {
                    return rx_fail(p, CI_ERR_UNSUPPORTED, "lookahead '(?%c' is not supported", k);
                } else if (k == '<' && p->pos + 1 < p->n) {
                    return rx_fail(p, CI_ERR_UNSUPPORTED, "lookbehind '(?<%c' is not supported",
                                   p->s[p->pos + 1]);
                } else if (k == '<') {
                    return rx_fail(p, CI_ERR_INVALID, "unterminated group name");
                } else {
                    return rx_fail(p, CI_ERR_UNSUPPORTED, "the group '(?%c' (inline flags) is not supported",
                                   k < 0 ? ' ' : k);
                }
            }
            if (depth + 1 > GRAM_REGEX_MAX_NESTING)
                return rx_fail(p, CI_ERR_LIMIT, "groups nested deeper than %d", GRAM_REGEX_MAX_NESTING);
            if ((s = rx_alt(p, depth + 1, &a)) != CI_OK)
                return s;
            if (rx_peek(p) != ')')
                return rx_fail(p, CI_ERR_INVALID, "missing ')'");
            p->pos++;
            break;
        case '[':
            p->pos++;
            if ((s = rx_class(p)) != CI_OK)
                return s;
            break;
        case '.': {
            p->pos++;
            struct cset d = {0};
            cs_add(&d, '\n', '\n');
            cs_add(&d, '\r', '\r');
            cs_add(&d, 0x2028, 0x2029);
            cs_negate(&d);
            cs_emit(p->out, &d, json_mode(p));
            ci_free(d.r);
            break;
        }
        case '\\': {
            p->pos++;
            uint32_t cp;
            char set_c;
            if ((s = rx_escape(p, false, &cp, &set_c)) != CI_OK)
                return s;
            if (set_c) {
                struct cset d = {0};
                add_shorthand(&d, set_c);
                cs_emit(p->out, &d, json_mode(p));
                ci_free(d.r);
            } else {
                emit_cp(p, cp);
            }
            break;
        }
        case '$':
            p->pos++;
            if (top && (rx_peek(p) < 0 || rx_peek(p) == '|')) {
                *out = tot;
                return CI_OK; // anchored end
            }
            return rx_fail(p, CI_ERR_UNSUPPORTED,
                           "the anchor '$' is supported only at the end of the pattern");
        case '^':
            return rx_fail(p, CI_ERR_UNSUPPORTED,
                           "the anchor '^' is supported only at the start of the pattern");
        case '*':
        case '+':
        case '?':
            return rx_fail(p, CI_ERR_INVALID, "nothing to repeat before '%c'", c);
        default: {
            if (c == '{') {
                size_t save = p->pos;
                p->pos++;
                long m;
                if (rx_int(p, &m)) {
                    p->pos = save;
                    return rx_fail(p, CI_ERR_INVALID, "nothing to repeat before '{'");
                }
                p->pos = save;
            }
            uint32_t cp;
            if ((s = rx_utf8(p, &cp)) != CI_OK)
                return s;
            emit_cp(p, cp);
            break;
        }
        }
        if ((s = rx_quant(p, &a)) != CI_OK)
            return s;
        tot.lo = len_add(tot.lo, a.lo);
        tot.hi = len_add(tot.hi, a.hi);
    }
    if (top && search) {
        if (any)
            gtext_put(p->out, " ", 1);
        emit_any(p);
        tot.hi = RX_INF;
        any = true;
    }
    *out = tot;
    if (!any)
        gtext_put(p->out, "\"\"", 2);
    return CI_OK;
}

static enum ci_status rx_alt(struct rx *p, int depth, struct rlen *out) {
    gtext_put(p->out, "(", 1);
    enum ci_status s;
    *out = (struct rlen){RX_INF, 0};
    for (;;) {
        struct rlen b = {0, 0};
        if ((s = rx_branch(p, depth, &b)) != CI_OK)
            return s;
        out->lo = b.lo < out->lo ? b.lo : out->lo;
        out->hi = b.hi > out->hi ? b.hi : out->hi;
        if (rx_peek(p) != '|')
            break;
        p->pos++;
        gtext_put(p->out, " | ", 3);
    }
    gtext_put(p->out, ")", 1);
    return CI_OK;
}

enum ci_status gram_regex_expr(const char *re, size_t len, int flags, struct gtext *out, long *min_len,
                               long *max_len, struct ci_err *err) {
    struct rx p = {re, len, 0, flags, out, err};
    struct rlen l;
    if (len > GRAM_REGEX_MAX_LEN)
        return ci_err_set(err, CI_ERR_LIMIT, "regex: the pattern is %zu bytes, at most %u are allowed", len,
                          GRAM_REGEX_MAX_LEN);
    enum ci_status s = rx_alt(&p, 0, &l);
    if (s != CI_OK)
        return s;
    if (min_len)
        *min_len = l.lo;
    if (max_len)
        *max_len = l.hi >= RX_INF ? -1 : l.hi;
    if (p.pos < p.n)
        return rx_fail(&p, CI_ERR_INVALID, "unmatched ')'");
    return gtext_status(out, err);
}

enum ci_status gram_regex_to_gbnf(const char *re, size_t len, int flags, struct gtext *out,
                                  struct ci_err *err) {
    gtext_put(out, "root ::= ", 9);
    enum ci_status s = gram_regex_expr(re, len, flags, out, NULL, NULL, err);
    if (s != CI_OK)
        return s;
    gtext_put(out, "\n", 1);
    return gtext_status(out, err);
}
