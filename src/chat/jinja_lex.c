/* The Jinja lexer (see jinja_lex.h). */
#include "chat/jinja_lex.h"

#include <string.h>

/* The source after @huggingface/jinja's preprocessing, with the original line of every byte. */
struct pre {
    char *s;
    int *line;
    size_t n;
};

static void pre_alloc(struct jctx *c, struct pre *p, size_t cap) {
    p->s = jalloc(c, cap + 1);
    p->line = jalloc(c, (cap + 1) * sizeof *p->line);
    p->n = 0;
}

static void pre_put(struct pre *p, char ch, int line) {
    p->s[p->n] = ch;
    p->line[p->n++] = line;
}

static bool is_ws(const struct pre *p, size_t i) {
    return i < p->n && js_space_len(p->s + i, p->n - i) > 0;
}

static void preprocess(struct jctx *c, const char *src, size_t len, struct pre *out) {
    struct pre a, b;
    pre_alloc(c, &a, len);
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        pre_put(&a, src[i], line);
        if (src[i] == '\n')
            line++;
    }
    if (a.n && a.s[a.n - 1] == '\n') // a single trailing newline is dropped
        a.n--;
    // lstrip_blocks: /^[ \t]*({[#%-])/gm
    pre_alloc(c, &b, a.n);
    for (size_t i = 0; i < a.n;) {
        if (i == 0 || a.s[i - 1] == '\n' || a.s[i - 1] == '\r') {
            size_t j = i;
            while (j < a.n && (a.s[j] == ' ' || a.s[j] == '\t'))
                j++;
            if (j > i && j + 1 < a.n && a.s[j] == '{' &&
                (a.s[j + 1] == '#' || a.s[j + 1] == '%' || a.s[j + 1] == '-'))
                i = j;
        }
        pre_put(&b, a.s[i], a.line[i]);
        i++;
    }
    // trim_blocks: /([#%-]})\n/g
    pre_alloc(c, &a, b.n);
    for (size_t i = 0; i < b.n;) {
        if (i + 2 < b.n && (b.s[i] == '#' || b.s[i] == '%' || b.s[i] == '-') && b.s[i + 1] == '}' &&
            b.s[i + 2] == '\n') {
            pre_put(&a, b.s[i], b.line[i]);
            pre_put(&a, b.s[i + 1], b.line[i + 1]);
            i += 3;
            continue;
        }
        pre_put(&a, b.s[i], b.line[i]);
        i++;
    }
    // transformers' {% generation %} / {% endgeneration %}: /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs
    pre_alloc(c, out, a.n);
    for (size_t i = 0; i < a.n;) {
        size_t ws = i;
        while (is_ws(&a, ws))
            ws += js_space_len(a.s + ws, a.n - ws);
        size_t j = ws;
        bool ok = j + 1 < a.n && a.s[j] == '{' && a.s[j + 1] == '%';
        bool lstrip = false, rstrip = false;
        if (ok) {
            j += 2;
            if (j < a.n && a.s[j] == '-') {
                lstrip = true;
                j++;
            }
            while (is_ws(&a, j))
                j += js_space_len(a.s + j, a.n - j);
            if (j + 3 <= a.n && memcmp(a.s + j, "end", 3) == 0 && j + 13 <= a.n &&
                memcmp(a.s + j + 3, "generation", 10) == 0)
                j += 3;
            ok = j + 10 <= a.n && memcmp(a.s + j, "generation", 10) == 0;
            if (ok) {
                j += 10;
                while (is_ws(&a, j))
                    j += js_space_len(a.s + j, a.n - j);
                if (j < a.n && a.s[j] == '-') {
                    rstrip = true;
                    j++;
                }
                ok = j + 1 < a.n && a.s[j] == '%' && a.s[j + 1] == '}';
            }
        }
        if (!ok) {
            if (ws == i) {
                pre_put(out, a.s[i], a.line[i]);
                i++;
            } else { // copy the whitespace run, retry at its end
                for (; i < ws; i++)
                    pre_put(out, a.s[i], a.line[i]);
            }
            continue;
        }
        if (!lstrip)
            for (size_t k = i; k < ws; k++)
                pre_put(out, a.s[k], a.line[k]);
        j += 2;
        size_t after = j;
        while (is_ws(&a, after))
            after += js_space_len(a.s + after, a.n - after);
        if (!rstrip)
            for (size_t k = j; k < after; k++)
                pre_put(out, a.s[k], a.line[k]);
        i = after;
    }
    out->s[out->n] = '\0';
}

static void push(struct jctx *c, struct jtoks *t, enum jtok_type type, struct jstr v, int line) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct jtok *nt = jalloc(c, cap * sizeof *nt);
        if (t->n)
            memcpy(nt, t->t, t->n * sizeof *nt);
        t->t = nt;
        t->cap = cap;
    }
    t->t[t->n++] = (struct jtok){type, v, line};
}

static bool is_digit(char ch) {
    return ch >= '0' && ch <= '9';
}
static bool is_word(char ch) {
    return is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

struct lexer {
    struct jctx *c;
    struct pre p;
    size_t pos;
    struct jtoks *t;
};

static int line_at(const struct lexer *L, size_t pos) {
    if (!L->p.n)
        return 1;
    return L->p.line[pos < L->p.n ? pos : L->p.n - 1];
}

static int hexval(char ch) {
    return is_digit(ch)               ? ch - '0'
           : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
           : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                                      : -1;
}

static void put_utf8(struct jctx *c, struct jbuf *b, unsigned cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    }
    jbuf_put(c, b, u, n);
}

/* A string literal's body up to the closing quote q (escapes decoded); leaves pos on the quote. */
static struct jstr lex_string(struct lexer *L, char q) {
    struct jbuf b = {0};
    const char *s = L->p.s;
    size_t n = L->p.n;
    int line = line_at(L, L->pos);
    while (L->pos < n && s[L->pos] != q) {
        if (s[L->pos] == '\\') {
            L->pos++;
            if (L->pos >= n)
                jctx_fail(L->c, line, "Unexpected end of input");
            char e = s[L->pos++];
            if (e == 'x' || e == 'u') {
                int len = e == 'x' ? 2 : 4;
                unsigned cp = 0;
                for (int k = 0; k < len; k++) {
                    int h = L->pos + (size_t)k < n ? hexval(s[L->pos + (size_t)k]) : -1;
                    if (h < 0)
                        jctx_fail(L->c, line, "Invalid hexadecimal escape sequence");
                    cp = cp << 4 | (unsigned)h;
                }
                L->pos += (size_t)len;
                put_utf8(L->c, &b, cp);
                continue;
            }
            const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
            const char *f = e ? strchr(from, e) : NULL;
            if (!f)
                jctx_fail(L->c, line, "Unexpected escaped character: %c", e);
            jbuf_put(L->c, &b, to + (f - from), 1);
            continue;
        }
        jbuf_put(L->c, &b, s + L->pos, 1);
        L->pos++;
        if (L->pos >= n)
            jctx_fail(L->c, line, "Unexpected end of input");
    }
    return jbuf_str(&b);
}

static void strip_trailing(struct lexer *L) {
    struct jtoks *t = L->t;
    if (!t->n || t->t[t->n - 1].type != JT_TEXT)
        return;
    struct jtok *k = &t->t[t->n - 1];
    size_t w;
    while ((w = js_space_len_before(k->v.p, k->v.n)) > 0)
        k->v.n -= w;
    if (!k->v.n)
        t->n--;
}

static void skip_ws(struct lexer *L) {
    size_t w;
    while (L->pos < L->p.n && (w = js_space_len(L->p.s + L->pos, L->p.n - L->pos)) > 0)
        L->pos += w;
}

static size_t consume_while(struct lexer *L, bool (*pred)(char)) {
    size_t start = L->pos;
    while (L->pos < L->p.n && pred(L->p.s[L->pos])) {
        L->pos++;
        if (L->pos >= L->p.n)
            jctx_fail(L->c, line_at(L, start), "Unexpected end of input");
    }
    return L->pos - start;
}

static const struct {
    const char *seq;
    enum jtok_type type;
} table[] = {
    {"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
    {"(", JT_LPAREN},     {")", JT_RPAREN},      {"{", JT_LBRACE},     {"}", JT_RBRACE},
    {"[", JT_LBRACKET},   {"]", JT_RBRACKET},    {",", JT_COMMA},      {".", JT_DOT},
    {":", JT_COLON},      {"|", JT_PIPE},        {"<=", JT_COMPARE},   {">=", JT_COMPARE},
    {"==", JT_COMPARE},   {"!=", JT_COMPARE},    {"<", JT_COMPARE},    {">", JT_COMPARE},
    {"+", JT_ADD},        {"-", JT_ADD},         {"~", JT_ADD},        {"**", JT_POW},
    {"*", JT_MUL},        {"//", JT_MUL},        {"/", JT_MUL},        {"%", JT_MUL},
    {"=", JT_EQUALS},
};

static bool starts(const struct lexer *L, const char *s) {
    size_t n = strlen(s);
    return L->pos + n <= L->p.n && memcmp(L->p.s + L->pos, s, n) == 0;
}

void jinja_lex(struct jctx *c, const char *src, size_t len, struct jtoks *out) {
    struct lexer L = {.c = c, .t = out};
    memset(out, 0, sizeof *out);
    preprocess(c, src, len, &L.p);
    const char *s = L.p.s;
    size_t n = L.p.n;
    int curly = 0;
    while (L.pos < n) {
        enum jtok_type last = out->n ? out->t[out->n - 1].type : JT_TEXT;
        bool at_text = !out->n || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT;
        if (at_text) {
            size_t start = L.pos;
            while (L.pos < n && !(s[L.pos] == '{' && L.pos + 1 < n &&
                                  (s[L.pos + 1] == '%' || s[L.pos + 1] == '{' || s[L.pos + 1] == '#')))
                L.pos++;
            if (L.pos > start) {
                push(c, out, JT_TEXT, (struct jstr){s + start, L.pos - start}, line_at(&L, start));
                continue;
            }
        }
        int line = line_at(&L, L.pos);
        if (starts(&L, "{#")) {
            L.pos += 2;
            bool strip_before = L.pos < n && s[L.pos] == '-';
            if (strip_before)
                L.pos++;
            size_t start = L.pos;
            while (!(L.pos + 1 < n && s[L.pos] == '#' && s[L.pos + 1] == '}')) {
                if (L.pos + 2 >= n)
                    jctx_fail(c, line, "Missing end of comment tag");
                L.pos++;
            }
            struct jstr body = {s + start, L.pos - start};
            bool strip_after = body.n && body.p[body.n - 1] == '-';
            if (strip_after)
                body.n--;
            if (strip_before)
                strip_trailing(&L);
            push(c, out, JT_COMMENT, body, line);
            L.pos += 2;
            if (strip_after)
                skip_ws(&L);
            continue;
        }
        if (starts(&L, "{%-")) {
            strip_trailing(&L);
            push(c, out, JT_OPEN_STMT, (struct jstr){"{%", 2}, line);
            L.pos += 3;
            continue;
        }
        if (starts(&L, "{{-")) {
            strip_trailing(&L);
            push(c, out, JT_OPEN_EXPR, (struct jstr){"{{", 2}, line);
            curly = 0;
            L.pos += 3;
            continue;
        }
        skip_ws(&L);
        if (L.pos >= n)
            break;
        line = line_at(&L, L.pos);
        if (starts(&L, "-%}")) {
            push(c, out, JT_CLOSE_STMT, (struct jstr){"%}", 2}, line);
            L.pos += 3;
            skip_ws(&L);
            continue;
        }
        if (starts(&L, "-}}")) {
            push(c, out, JT_CLOSE_EXPR, (struct jstr){"}}", 2}, line);
            L.pos += 3;
            skip_ws(&L);
            continue;
        }
        char ch = s[L.pos];
        if (ch == '-' || ch == '+') {
            last = out->n ? out->t[out->n - 1].type : JT_TEXT;
            if (!out->n || last == JT_TEXT)
                jctx_fail(c, line, "Unexpected character: %c", ch);
            if (last != JT_IDENT && last != JT_NUMBER && last != JT_STRING && last != JT_RPAREN &&
                last != JT_RBRACKET) {
                size_t start = L.pos++;
                consume_while(&L, is_digit);
                if (L.pos > start + 1 && L.pos + 1 < n && s[L.pos] == '.' && is_digit(s[L.pos + 1])) {
                    L.pos++;
                    consume_while(&L, is_digit);
                }
                bool num = L.pos > start + 1;
                push(c, out, num ? JT_NUMBER : JT_UNARY, (struct jstr){s + start, L.pos - start}, line);
                continue;
            }
        }
        bool matched = false;
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
            if (table[k].type == JT_CLOSE_EXPR && curly > 0)
                continue;
            if (!starts(&L, table[k].seq))
                continue;
            size_t sl = strlen(table[k].seq);
            push(c, out, table[k].type, (struct jstr){s + L.pos, sl}, line);
            if (table[k].type == JT_OPEN_EXPR)
                curly = 0;
            else if (table[k].type == JT_LBRACE)
                curly++;
            else if (table[k].type == JT_RBRACE)
                curly--;
            L.pos += sl;
            matched = true;
            break;
        }
        if (matched)
            continue;
        if (ch == '\'' || ch == '"') {
            L.pos++;
            struct jstr v = lex_string(&L, ch);
            push(c, out, JT_STRING, v, line);
            L.pos++;
            continue;
        }
        if (is_digit(ch)) {
            size_t start = L.pos;
            consume_while(&L, is_digit);
            bool after_dot = out->n && out->t[out->n - 1].type == JT_DOT;
            if (!after_dot && L.pos + 1 < n && s[L.pos] == '.' && is_digit(s[L.pos + 1])) {
                L.pos++;
                consume_while(&L, is_digit);
            }
            push(c, out, JT_NUMBER, (struct jstr){s + start, L.pos - start}, line);
            continue;
        }
        if (is_word(ch)) {
            size_t start = L.pos;
            consume_while(&L, is_word);
            push(c, out, JT_IDENT, (struct jstr){s + start, L.pos - start}, line);
            continue;
        }
        jctx_fail(c, line, "Unexpected character: %c", ch);
    }
}
