/* GBNF (llama.cpp's grammar format) into the grammar builder (grammar.h).  A recursive-descent parser over
 * the text with positions kept for line/column messages; repetitions are lowered as they are read. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/utf8.h"
#include "grammar/grammar.h"

struct ebuf {
    struct gram_elem *v;
    size_t n, cap;
};

struct parser {
    const char *s;
    size_t n, pos;
    struct gram_builder *b;
    const struct gram_tokens *tk; // what token references name (NULL: none allowed)
    struct ci_err *err;
    size_t memo_at; // position(): the last answer
    int memo_line, memo_col;
};

/* Line and column (1-based, in characters) of byte at; resumes from the last answer when at is past it, so
 * the references' positions cost linear time over the whole text. */
static void position(struct parser *p, size_t at, int *line, int *col) {
    if (at < p->memo_at) {
        p->memo_at = 0;
        p->memo_line = p->memo_col = 1;
    }
    int l = p->memo_line, c = p->memo_col;
    for (size_t i = p->memo_at; i < at && i < p->n; i++) {
        if (p->s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)p->s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    p->memo_at = at;
    p->memo_line = *line = l;
    p->memo_col = *col = c;
}

__attribute__((format(printf, 3, 4))) static enum ci_status fail(struct parser *p, size_t at, const char *fmt,
                                                                 ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    position(p, at, &line, &col);
    return ci_err_set(p->err, CI_ERR_INVALID, "grammar: line %d, column %d: %s", line, col, msg);
}

static enum ci_status push(struct parser *p, struct ebuf *e, uint32_t op, uint32_t val) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 32;
        if (cap > GRAM_MAX_ELEMS + 16)
            return ci_err_set(p->err, CI_ERR_LIMIT, "the grammar is too large (more than %u elements)",
                              GRAM_MAX_ELEMS);
        struct gram_elem *v = ci_realloc(e->v, cap * sizeof *v);
        if (!v)
            return ci_err_set(p->err, CI_ERR_NOMEM, "out of memory");
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (struct gram_elem){op, val};
    return CI_OK;
}

static int peek(const struct parser *p) {
    return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1;
}

/* Spaces, tabs and comments; newlines too when newline_ok. */
static void skip_space(struct parser *p, bool newline_ok) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->s[p->pos] != '\n' && p->s[p->pos] != '\r')
                p->pos++;
        } else {
            break;
        }
    }
}

static bool is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static enum ci_status parse_hex(struct parser *p, int digits, uint32_t *cp) {
    size_t at = p->pos;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p);
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return fail(p, at, "expected %d hexadecimal digits in the escape", digits);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    if (v > GRAM_MAX_CODEPOINT || (v >= 0xD800 && v <= 0xDFFF))
        return fail(p, at, "escape U+%X is not a Unicode scalar value", (unsigned)v);
    *cp = v;
    return CI_OK;
}

/* One character of a literal or class (an escape or a UTF-8 character). */
static enum ci_status parse_char(struct parser *p, uint32_t *cp) {
    size_t at = p->pos;
    if (p->pos >= p->n)
        return fail(p, at, "unexpected end of the grammar");
    if (p->s[p->pos] == '\\') {
        if (p->pos + 1 >= p->n)
            return fail(p, at, "unexpected end of the grammar after '\\'");
        char c = p->s[p->pos + 1];
        p->pos += 2;
        switch (c) {
        case 'x':
            return parse_hex(p, 2, cp);
        case 'u':
            return parse_hex(p, 4, cp);
        case 'U':
            return parse_hex(p, 8, cp);
        case 't':
            *cp = '\t';
            return CI_OK;
        case 'r':
            *cp = '\r';
            return CI_OK;
        case 'n':
            *cp = '\n';
            return CI_OK;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
            *cp = (uint32_t)c;
            return CI_OK;
        default:
            return fail(p, at, "unknown escape '\\%c'", c);
        }
    }
    size_t bad;
    bool partial;
    int len = utf8_next_strict((const unsigned char *)p->s + p->pos, p->n - p->pos, &bad, &partial);
    if (len <= 0)
        return fail(p, at, "invalid UTF-8");
    size_t off = 0;
    *cp = utf8_decode_lenient((const unsigned char *)p->s + p->pos, p->n - p->pos, &off);
    p->pos += (size_t)len;
    return CI_OK;
}

static enum ci_status parse_alternates(struct parser *p, const char *rule, struct ebuf *out, bool nested,
                                       int depth);

static enum ci_status parse_int(struct parser *p, int *v) {
    size_t at = p->pos;
    long x = 0;
    if (peek(p) < '0' || peek(p) > '9')
        return fail(p, at, "expected a number in the repetition");
    while (peek(p) >= '0' && peek(p) <= '9') {
        x = x * 10 + (peek(p) - '0');
        if (x > GRAM_MAX_REPEAT)
            return fail(p, at, "repetition count above %d", GRAM_MAX_REPEAT);
        p->pos++;
    }
    *v = (int)x;
    return CI_OK;
}

#define TOKEN_TEXT_MAX 256 // bytes of a `<text>` token reference

/* A token reference at p->pos: `<[id]>` or `<text>`, preceded by `!` when negated (as llama.cpp's GBNF). */
static enum ci_status parse_token(struct parser *p, struct ebuf *out) {
    size_t at = p->pos;
    uint32_t op = GRAM_TOKEN;
    if (peek(p) == '!') {
        op = GRAM_TOKEN_NOT;
        p->pos++;
        if (peek(p) != '<')
            return fail(p, p->pos, "expected '<' after '!' (a negated token reference: !<[id]> or !<text>)");
    }
    size_t open = p->pos++;
    if (!p->tk)
        return fail(p, at, "a token reference needs the model's vocabulary (none is given here)");
    int64_t id = -1;
    if (peek(p) == '[') {
        p->pos++;
        size_t num = p->pos;
        id = 0;
        while (peek(p) >= '0' && peek(p) <= '9') {
            id = id * 10 + (peek(p) - '0');
            if (id >= p->tk->n_vocab)
                return fail(p, num, "token id out of range: the vocabulary has %d tokens", p->tk->n_vocab);
            p->pos++;
        }
        if (p->pos == num)
            return fail(p, num, "expected a token id in <[id]>");
        if (peek(p) != ']' || (p->pos++, peek(p) != '>'))
            return fail(p, p->pos, "expected ']>' to end the token reference <[id]>");
        p->pos++;
    } else {
        while (peek(p) >= 0 && peek(p) != '>' && peek(p) != '\n' && p->pos - open <= TOKEN_TEXT_MAX)
            p->pos++;
        if (peek(p) != '>')
            return fail(p, open, "unterminated token reference (expected '>' within %d bytes on its line)",
                        TOKEN_TEXT_MAX);
        p->pos++;
        if (!p->tk->lookup)
            return fail(p, open, "a token reference by text (<...>) needs the model's tokenizer");
        id = p->tk->lookup(p->tk->ctx, p->s + open, p->pos - open);
        if (id < 0 || id >= p->tk->n_vocab)
            return fail(p, open, "'%.*s' is not a single token of the model's vocabulary",
                        (int)(p->pos - open), p->s + open);
    }
    return push(p, out, op, (uint32_t)id);
}

/* Replaces out[item..n) with item{min,max} (max < 0: unbounded). */
static enum ci_status lower_repeat(struct parser *p, const char *rule, struct ebuf *out, size_t item, int min,
                                   int max) {
    enum ci_status s;
    size_t len = out->n - item;
    struct gram_elem *copy = ci_malloc((len ? len : 1) * sizeof *copy);
    if (!copy)
        return ci_err_set(p->err, CI_ERR_NOMEM, "out of memory");
    if (len) // an empty item ("" or ()) leaves out->v NULL when nothing came before it
        memcpy(copy, out->v + item, len * sizeof *copy);
    out->n = item;
    if ((size_t)min * len > GRAM_MAX_ELEMS) {
        ci_free(copy);
        return ci_err_set(p->err, CI_ERR_LIMIT, "the grammar is too large (more than %u elements)",
                          GRAM_MAX_ELEMS);
    }
    for (int k = 0; k < min; k++)
        for (size_t i = 0; i < len; i++)
            if ((s = push(p, out, copy[i].op, copy[i].val)) != CI_OK)
                goto done;
    uint32_t id;
    if ((s = gram_repeat_rule(p->b, rule, copy, len, max < 0 ? -1 : max - min, &id, p->err)) != CI_OK)
        goto done;
    if (id != UINT32_MAX)
        s = push(p, out, GRAM_REF, id);
done:
    ci_free(copy);
    return s;
}

static enum ci_status parse_sequence(struct parser *p, const char *rule, struct ebuf *out, bool nested,
                                     int depth) {
    enum ci_status s;
    size_t item = SIZE_MAX; // start of the last item in out (what a repetition applies to)
    for (;;) {
        int c = peek(p);
        size_t at = p->pos;
        if (c == '"') {
            p->pos++;
            item = out->n;
            while (peek(p) != '"') {
                if (peek(p) < 0)
                    return fail(p, at, "unterminated string literal");
                uint32_t cp;
                if ((s = parse_char(p, &cp)) != CI_OK || (s = push(p, out, GRAM_CHAR, cp)) != CI_OK)
                    return s;
            }
            p->pos++;
        } else if (c == '[') {
            p->pos++;
            item = out->n;
            uint32_t op = GRAM_CHAR;
            if (peek(p) == '^') {
                p->pos++;
                op = GRAM_CHAR_NOT;
            }
            bool first = true;
            while (peek(p) != ']') {
                if (peek(p) < 0)
                    return fail(p, at, "unterminated character class");
                uint32_t lo, hi;
                size_t cat = p->pos;
                if ((s = parse_char(p, &lo)) != CI_OK ||
                    (s = push(p, out, first ? op : GRAM_CHAR_ALT, lo)) != CI_OK)
                    return s;
                first = false;
                if (peek(p) == '-' && p->pos + 1 < p->n && p->s[p->pos + 1] != ']') {
                    p->pos++;
                    if ((s = parse_char(p, &hi)) != CI_OK)
                        return s;
                    if (hi < lo)
                        return fail(p, cat, "character range ends (U+%X) before it starts (U+%X)",
                                    (unsigned)hi, (unsigned)lo);
                    if ((s = push(p, out, GRAM_CHAR_RNG, hi)) != CI_OK)
                        return s;
                }
            }
            if (first) { // [] matches nothing; [^] matches anything
                if (op == GRAM_CHAR_NOT) {
                    if ((s = push(p, out, GRAM_CHAR_ANY, 0)) != CI_OK)
                        return s;
                } else {
                    return fail(p, at, "empty character class '[]' matches nothing");
                }
            }
            p->pos++;
        } else if (c >= 0 && is_word(c)) {
            size_t start = p->pos;
            while (is_word(peek(p)))
                p->pos++;
            int line, col;
            position(p, start, &line, &col);
            uint32_t id;
            item = out->n;
            if ((s = gram_rule_id(p->b, p->s + start, p->pos - start, line, col, &id, p->err)) != CI_OK ||
                (s = push(p, out, GRAM_REF, id)) != CI_OK)
                return s;
        } else if (c == '(') {
            if (depth >= GRAM_MAX_NESTING)
                return fail(p, at, "parentheses nested more than %d deep", GRAM_MAX_NESTING);
            p->pos++;
            skip_space(p, true);
            struct ebuf sub = {0};
            uint32_t id;
            s = gram_rule_new(p->b, rule, &id, p->err);
            if (s == CI_OK)
                s = parse_alternates(p, rule, &sub, true, depth + 1);
            if (s == CI_OK && peek(p) != ')')
                s = fail(p, at, "unmatched '('");
            if (s == CI_OK) {
                p->pos++;
                s = gram_rule_define(p->b, id, sub.v, sub.n, 0, 0, p->err);
            }
            ci_free(sub.v);
            item = out->n;
            if (s != CI_OK || (s = push(p, out, GRAM_REF, id)) != CI_OK)
                return s;
        } else if (c == '.') {
            p->pos++;
            item = out->n;
            if ((s = push(p, out, GRAM_CHAR_ANY, 0)) != CI_OK)
                return s;
        } else if (c == '<' || c == '!') {
            item = out->n;
            if ((s = parse_token(p, out)) != CI_OK)
                return s;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (item == SIZE_MAX)
                return fail(p, at, "'%c' has nothing before it to repeat", c);
            p->pos++;
            int min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            if (c == '{') {
                skip_space(p, false);
                if ((s = parse_int(p, &min)) != CI_OK)
                    return s;
                skip_space(p, false);
                max = min;
                if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, false);
                    max = -1;
                    if (peek(p) >= '0' && peek(p) <= '9') {
                        if ((s = parse_int(p, &max)) != CI_OK)
                            return s;
                        if (max < min)
                            return fail(p, at, "repetition {%d,%d}: the maximum is below the minimum", min,
                                        max);
                    }
                    skip_space(p, false);
                }
                if (peek(p) != '}')
                    return fail(p, at, "expected '}' to close the repetition");
                p->pos++;
            }
            if ((s = lower_repeat(p, rule, out, item, min, max)) != CI_OK)
                return s;
            item = SIZE_MAX;
        } else {
            return CI_OK;
        }
        skip_space(p, nested);
    }
}

static enum ci_status parse_alternates(struct parser *p, const char *rule, struct ebuf *out, bool nested,
                                       int depth) {
    enum ci_status s = parse_sequence(p, rule, out, nested, depth);
    while (s == CI_OK && peek(p) == '|') {
        p->pos++;
        skip_space(p, true);
        if ((s = push(p, out, GRAM_ALT, 0)) != CI_OK)
            return s;
        s = parse_sequence(p, rule, out, nested, depth);
    }
    return s;
}

enum ci_status gram_parse_gbnf(const char *text, size_t len, struct grammar **out, struct ci_err *err) {
    return gram_parse_gbnf_tokens(text, len, NULL, out, err);
}

enum ci_status gram_parse_gbnf_tokens(const char *text, size_t len, const struct gram_tokens *tk,
                                      struct grammar **out, struct ci_err *err) {
    *out = NULL;
    if (len > GRAM_MAX_TEXT)
        return ci_err_set(err, CI_ERR_LIMIT, "the grammar is %zu bytes, the limit is %u", len, GRAM_MAX_TEXT);
    struct parser p = {text, len, 0, NULL, tk, err, 0, 1, 1};
    enum ci_status s = gram_builder_create(&p.b, err);
    if (s != CI_OK)
        return s;
    struct ebuf body = {0};
    skip_space(&p, true);
    while (s == CI_OK && p.pos < p.n) {
        size_t at = p.pos;
        if (!is_word(peek(&p))) {
            s = fail(&p, at, "expected a rule name");
            break;
        }
        while (is_word(peek(&p)))
            p.pos++;
        char name[128];
        size_t nl = p.pos - at;
        if (nl >= sizeof name) {
            s = fail(&p, at, "rule name longer than %zu characters", sizeof name - 1);
            break;
        }
        memcpy(name, text + at, nl);
        name[nl] = '\0';
        skip_space(&p, false);
        if (p.pos + 3 > p.n || memcmp(text + p.pos, "::=", 3) != 0) {
            s = fail(&p, p.pos, "expected '::=' after the rule name '%s'", name);
            break;
        }
        p.pos += 3;
        skip_space(&p, true);
        uint32_t id;
        int line, col;
        position(&p, at, &line, &col);
        body.n = 0;
        if ((s = gram_rule_id(p.b, name, nl, line, col, &id, err)) != CI_OK ||
            (s = parse_alternates(&p, name, &body, false, 0)) != CI_OK)
            break;
        int c = peek(&p);
        if (c >= 0 && c != '\n' && c != '\r') {
            if (c == ')')
                s = fail(&p, p.pos, "unmatched ')'");
            else
                s = fail(&p, p.pos, "unexpected '%c' (expected a newline or the end of the rule)", c);
            break;
        }
        if ((s = gram_rule_define(p.b, id, body.v, body.n, line, col, err)) != CI_OK)
            break;
        skip_space(&p, true);
    }
    ci_free(body.v);
    if (s == CI_OK)
        s = gram_builder_finish(p.b, "root", out, err);
    gram_builder_free(p.b);
    return s;
}
