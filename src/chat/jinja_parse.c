/* The Jinja parser (see jinja_parse.h); its structure follows @huggingface/jinja's parser.ts. */
#include "chat/jinja_parse.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 200

struct parser {
    struct jctx *c;
    const struct jtoks *t;
    size_t cur;
    int depth;
};

struct nlist {
    struct jnode **v;
    size_t n, cap;
};

static void nl_push(struct parser *P, struct nlist *l, struct jnode *x) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jnode **v = jalloc(P->c, cap * sizeof *v);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static int cur_line(const struct parser *P) {
    if (P->cur < P->t->n)
        return P->t->t[P->cur].line;
    return P->t->n ? P->t->t[P->t->n - 1].line : 1;
}

static struct jnode *node(struct parser *P, enum jnode_kind k, int line) {
    struct jnode *x = jalloc(P->c, sizeof *x);
    x->kind = k;
    x->line = line;
    return x;
}

static const struct jtok *peek(const struct parser *P, size_t k) {
    return P->cur + k < P->t->n ? &P->t->t[P->cur + k] : NULL;
}

static bool is(const struct parser *P, enum jtok_type type) {
    const struct jtok *k = peek(P, 0);
    return k && k->type == type;
}

static bool is_ident(const struct parser *P, const char *name) {
    const struct jtok *k = peek(P, 0);
    return k && k->type == JT_IDENT && jstr_eq(k->v, name);
}

static bool is_stmt(const struct parser *P, const char *a, const char *b, const char *c3) {
    const struct jtok *x = peek(P, 0), *y = peek(P, 1);
    if (!x || x->type != JT_OPEN_STMT || !y || y->type != JT_IDENT)
        return false;
    return jstr_eq(y->v, a) || (b && jstr_eq(y->v, b)) || (c3 && jstr_eq(y->v, c3));
}

static const char *tok_name(enum jtok_type t) {
    static const char *const names[] = {
        "Text",
        "NumericLiteral",
        "StringLiteral",
        "Identifier",
        "Equals",
        "OpenParen",
        "CloseParen",
        "OpenStatement",
        "CloseStatement",
        "OpenExpression",
        "CloseExpression",
        "OpenSquareBracket",
        "CloseSquareBracket",
        "OpenCurlyBracket",
        "CloseCurlyBracket",
        "Comma",
        "Dot",
        "Colon",
        "Pipe",
        "AdditiveBinaryOperator",
        "MultiplicativeBinaryOperator",
        "ExponentiationBinaryOperator",
        "ComparisonBinaryOperator",
        "UnaryOperator",
        "Comment",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static const struct jtok *expect(struct parser *P, enum jtok_type type, const char *what) {
    const struct jtok *k = peek(P, 0);
    if (!k)
        jctx_fail(P->c, cur_line(P), "%s, got the end of the template", what);
    if (k->type != type)
        jctx_fail(P->c, k->line, "%s, got %s '%.40s'", what, tok_name(k->type), k->v.p ? k->v.p : "");
    P->cur++;
    return k;
}

static void expect_ident(struct parser *P, const char *name) {
    if (!is_ident(P, name))
        jctx_fail(P->c, cur_line(P), "Expected %s", name);
    P->cur++;
}

static void enter(struct parser *P) {
    if (++P->depth > MAX_NESTING)
        jctx_fail(P->c, cur_line(P), "the template nests deeper than %d", MAX_NESTING);
}

static struct jnode *parse_any(struct parser *P);
static struct jnode *parse_expression(struct parser *P);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_call(struct parser *P, struct jnode *callee);
static struct jnode *parse_member(struct parser *P, struct jnode *object);
static void parse_args(struct parser *P, bool params, struct nlist *out);

static void body_until(struct parser *P, const char *a, const char *b, const char *c3, struct nlist *out) {
    while (!is_stmt(P, a, b, c3)) {
        if (P->cur >= P->t->n)
            jctx_fail(P->c, cur_line(P), "Expected {%% %s %%}, got the end of the template",
                      c3                           ? c3
                      : b && !strncmp(b, "end", 3) ? b
                                                   : a);
        nl_push(P, out, parse_any(P));
    }
}

static struct jnode *parse_sequence(struct parser *P, bool primary) {
    int line = cur_line(P);
    struct jnode *first = primary ? parse_primary(P) : parse_expression(P);
    if (!is(P, JT_COMMA))
        return first;
    struct nlist l = {0};
    nl_push(P, &l, first);
    while (is(P, JT_COMMA)) {
        P->cur++;
        nl_push(P, &l, primary ? parse_primary(P) : parse_expression(P));
        if (!is(P, JT_COMMA))
            break;
    }
    struct jnode *t = node(P, JN_TUPLE, line);
    t->list = l.v;
    t->n = l.n;
    return t;
}

static struct jnode *parse_if(struct parser *P, int line) {
    struct jnode *x = node(P, JN_IF, line);
    x->a = parse_expression(P);
    expect(P, JT_CLOSE_STMT, "Expected closing statement token");
    struct nlist body = {0}, alt = {0};
    body_until(P, "elif", "else", "endif", &body);
    if (is_stmt(P, "elif", NULL, NULL)) {
        int l2 = cur_line(P);
        P->cur += 2;
        nl_push(P, &alt, parse_if(P, l2));
    } else if (is_stmt(P, "else", NULL, NULL)) {
        P->cur += 2;
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        body_until(P, "endif", NULL, NULL, &alt);
    }
    x->list = body.v;
    x->n = body.n;
    x->list2 = alt.v;
    x->n2 = alt.n;
    return x;
}

/* Whether a macro body mentions `varargs` or `kwargs` (then it accepts extra arguments). */
static bool mentions_special(const struct jnode *x, int depth) {
    if (!x || depth > MAX_NESTING * 4)
        return false;
    if (x->kind == JN_IDENT && (jstr_eq(x->str, "varargs") || jstr_eq(x->str, "kwargs")))
        return true;
    if (mentions_special(x->a, depth + 1) || mentions_special(x->b, depth + 1) ||
        mentions_special(x->c, depth + 1))
        return true;
    for (size_t i = 0; i < x->n; i++)
        if (mentions_special(x->list[i], depth + 1))
            return true;
    for (size_t i = 0; i < x->n2; i++)
        if (mentions_special(x->list2[i], depth + 1))
            return true;
    return false;
}

static struct jnode *parse_statement(struct parser *P) {
    int line = cur_line(P);
    expect(P, JT_OPEN_STMT, "Expected opening statement token");
    const struct jtok *k = peek(P, 0);
    if (!k || k->type != JT_IDENT)
        jctx_fail(P->c, line, "Unknown statement, got %s", k ? tok_name(k->type) : "the end of the template");
    struct jstr name = k->v;
    struct jnode *x;
    P->cur++;
    if (jstr_eq(name, "set")) {
        x = node(P, JN_SET, line);
        x->a = parse_sequence(P, false);
        if (is(P, JT_EQUALS)) {
            P->cur++;
            x->b = parse_sequence(P, false);
        } else {
            expect(P, JT_CLOSE_STMT, "Expected %} token");
            struct nlist body = {0};
            body_until(P, "endset", NULL, NULL, &body);
            x->list = body.v;
            x->n = body.n;
            expect(P, JT_OPEN_STMT, "Expected {% token");
            expect_ident(P, "endset");
        }
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
    } else if (jstr_eq(name, "if")) {
        x = parse_if(P, line);
        expect(P, JT_OPEN_STMT, "Expected {% token");
        expect_ident(P, "endif");
        expect(P, JT_CLOSE_STMT, "Expected %} token");
    } else if (jstr_eq(name, "macro")) {
        x = node(P, JN_MACRO, line);
        struct jnode *id = parse_primary(P);
        if (id->kind != JN_IDENT)
            jctx_fail(P->c, line, "Expected identifier following macro statement");
        x->str = id->str;
        struct nlist params = {0}, body = {0};
        parse_args(P, true, &params);
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        body_until(P, "endmacro", NULL, NULL, &body);
        x->list = params.v;
        x->n = params.n;
        x->list2 = body.v;
        x->n2 = body.n;
        for (size_t i = 0; i < body.n && !x->flag; i++)
            x->flag = mentions_special(body.v[i], 0);
        expect(P, JT_OPEN_STMT, "Expected {% token");
        expect_ident(P, "endmacro");
        expect(P, JT_CLOSE_STMT, "Expected %} token");
    } else if (jstr_eq(name, "for")) {
        x = node(P, JN_FOR, line);
        x->a = parse_sequence(P, true);
        if (x->a->kind != JN_IDENT && x->a->kind != JN_TUPLE)
            jctx_fail(P->c, line, "Expected identifier/tuple for the loop variable");
        if (!is_ident(P, "in"))
            jctx_fail(P->c, line, "Expected `in` keyword following loop variable");
        P->cur++;
        x->b = parse_expression(P);
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        struct nlist body = {0}, alt = {0};
        body_until(P, "endfor", "else", NULL, &body);
        if (is_stmt(P, "else", NULL, NULL)) {
            P->cur += 2;
            expect(P, JT_CLOSE_STMT, "Expected closing statement token");
            body_until(P, "endfor", NULL, NULL, &alt);
        }
        x->list = body.v;
        x->n = body.n;
        x->list2 = alt.v;
        x->n2 = alt.n;
        expect(P, JT_OPEN_STMT, "Expected {% token");
        expect_ident(P, "endfor");
        expect(P, JT_CLOSE_STMT, "Expected %} token");
    } else if (jstr_eq(name, "call")) {
        x = node(P, JN_CALLBLOCK, line);
        struct nlist cargs = {0}, body = {0};
        if (is(P, JT_LPAREN))
            parse_args(P, true, &cargs);
        struct jnode *callee = parse_primary(P);
        if (callee->kind != JN_IDENT)
            jctx_fail(P->c, line, "Expected identifier following call statement");
        struct jnode *call = node(P, JN_CALL, line);
        call->a = callee;
        struct nlist args = {0};
        parse_args(P, false, &args);
        call->list = args.v;
        call->n = args.n;
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        body_until(P, "endcall", NULL, NULL, &body);
        expect(P, JT_OPEN_STMT, "Expected '{%'");
        expect_ident(P, "endcall");
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        x->a = call;
        x->list = cargs.v;
        x->n = cargs.n;
        x->list2 = body.v;
        x->n2 = body.n;
        for (size_t i = 0; i < body.n && !x->flag; i++)
            x->flag = mentions_special(body.v[i], 0);
    } else if (jstr_eq(name, "break") || jstr_eq(name, "continue")) {
        x = node(P, jstr_eq(name, "break") ? JN_BREAK : JN_CONTINUE, line);
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
    } else if (jstr_eq(name, "filter")) {
        x = node(P, JN_FILTERBLOCK, line);
        struct jnode *f = parse_primary(P);
        if (f->kind == JN_IDENT && is(P, JT_LPAREN))
            f = parse_call(P, f);
        x->a = f;
        expect(P, JT_CLOSE_STMT, "Expected closing statement token");
        struct nlist body = {0};
        body_until(P, "endfilter", NULL, NULL, &body);
        x->list = body.v;
        x->n = body.n;
        expect(P, JT_OPEN_STMT, "Expected '{%'");
        expect_ident(P, "endfilter");
        expect(P, JT_CLOSE_STMT, "Expected '%}'");
    } else {
        jctx_fail(P->c, line, "Unknown statement type: %.*s", (int)(name.n > 40 ? 40 : name.n), name.p);
    }
    return x;
}

static struct jnode *parse_any(struct parser *P) {
    enter(P);
    const struct jtok *k = peek(P, 0);
    struct jnode *x;
    switch (k->type) {
    case JT_COMMENT:
        x = node(P, JN_COMMENT, k->line);
        P->cur++;
        break;
    case JT_TEXT:
        x = node(P, JN_TEXT, k->line);
        x->str = k->v;
        P->cur++;
        break;
    case JT_OPEN_STMT:
        x = parse_statement(P);
        break;
    case JT_OPEN_EXPR:
        P->cur++;
        x = parse_expression(P);
        expect(P, JT_CLOSE_EXPR, "Expected closing expression token");
        break;
    default:
        jctx_fail(P->c, k->line, "Unexpected token type: %s", tok_name(k->type));
    }
    P->depth--;
    return x;
}

static struct jnode *parse_or(struct parser *P);

static struct jnode *parse_expression(struct parser *P) {
    enter(P);
    int line = cur_line(P);
    struct jnode *a = parse_or(P);
    if (is_ident(P, "if")) {
        P->cur++;
        struct jnode *test = parse_or(P);
        if (is_ident(P, "else")) {
            P->cur++;
            struct jnode *x = node(P, JN_TERNARY, line);
            x->a = test;
            x->b = a;
            x->c = parse_expression(P);
            a = x;
        } else {
            struct jnode *x = node(P, JN_SELECT, line);
            x->a = a;
            x->b = test;
            a = x;
        }
    }
    P->depth--;
    return a;
}

static struct jnode *binary(struct parser *P, const char *op, struct jnode *l, struct jnode *r, int line) {
    struct jnode *x = node(P, JN_BINARY, line);
    x->str = (struct jstr){op, strlen(op)};
    x->a = l;
    x->b = r;
    return x;
}

static struct jnode *parse_not(struct parser *P);
static struct jnode *parse_and(struct parser *P) {
    struct jnode *l = parse_not(P);
    while (is_ident(P, "and")) {
        int line = cur_line(P);
        P->cur++;
        l = binary(P, "and", l, parse_not(P), line);
    }
    return l;
}

static struct jnode *parse_or(struct parser *P) {
    struct jnode *l = parse_and(P);
    while (is_ident(P, "or")) {
        int line = cur_line(P);
        P->cur++;
        l = binary(P, "or", l, parse_and(P), line);
    }
    return l;
}

static struct jnode *parse_compare(struct parser *P);
static struct jnode *parse_not(struct parser *P) {
    struct jnode *r = NULL;
    while (is_ident(P, "not")) {
        enter(P);
        int line = cur_line(P);
        P->cur++;
        r = node(P, JN_UNARY, line);
        r->str = (struct jstr){"not", 3};
        r->a = parse_not(P);
        P->depth--;
    }
    return r ? r : parse_compare(P);
}

static struct jnode *parse_additive(struct parser *P);
static struct jnode *parse_compare(struct parser *P) {
    struct jnode *l = parse_additive(P);
    for (;;) {
        int line = cur_line(P);
        const char *op;
        const struct jtok *k = peek(P, 0), *k2 = peek(P, 1);
        if (is_ident(P, "not") && k2 && k2->type == JT_IDENT && jstr_eq(k2->v, "in")) {
            op = "not in";
            P->cur += 2;
        } else if (is_ident(P, "in")) {
            op = "in";
            P->cur++;
        } else if (is(P, JT_COMPARE)) {
            op = jstr_eq(k->v, "<=")   ? "<="
                 : jstr_eq(k->v, ">=") ? ">="
                 : jstr_eq(k->v, "==") ? "=="
                 : jstr_eq(k->v, "!=") ? "!="
                 : jstr_eq(k->v, "<")  ? "<"
                                       : ">";
            P->cur++;
        } else {
            break;
        }
        l = binary(P, op, l, parse_additive(P), line);
    }
    return l;
}

static const char *op_of(struct jstr v) {
    static const char *const ops[] = {"+", "-", "~", "*", "//", "/", "%", "**"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (jstr_eq(v, ops[i]))
            return ops[i];
    return "?";
}

static struct jnode *parse_multiplicative(struct parser *P);
static struct jnode *parse_additive(struct parser *P) {
    struct jnode *l = parse_multiplicative(P);
    while (is(P, JT_ADD)) {
        int line = cur_line(P);
        const char *op = op_of(peek(P, 0)->v);
        P->cur++;
        l = binary(P, op, l, parse_multiplicative(P), line);
    }
    return l;
}

static struct jnode *parse_power(struct parser *P);
static struct jnode *parse_multiplicative(struct parser *P) {
    struct jnode *l = parse_power(P);
    while (is(P, JT_MUL)) {
        int line = cur_line(P);
        const char *op = op_of(peek(P, 0)->v);
        P->cur++;
        l = binary(P, op, l, parse_power(P), line);
    }
    return l;
}

static struct jnode *parse_test(struct parser *P);
static struct jnode *parse_power(struct parser *P) {
    struct jnode *l = parse_test(P);
    while (is(P, JT_POW)) {
        int line = cur_line(P);
        P->cur++;
        l = binary(P, "**", l, parse_test(P), line);
    }
    return l;
}

static struct jnode *parse_filter(struct parser *P);
static struct jnode *parse_test(struct parser *P) {
    struct jnode *operand = parse_filter(P);
    while (is_ident(P, "is")) {
        int line = cur_line(P);
        P->cur++;
        bool negate = is_ident(P, "not");
        if (negate)
            P->cur++;
        struct jnode *name = parse_primary(P);
        if (name->kind != JN_IDENT)
            jctx_fail(P->c, line, "Expected identifier for the test");
        struct jnode *x = node(P, JN_TEST, line);
        x->a = operand;
        x->str = name->str;
        x->flag = negate;
        if (is(P, JT_LPAREN)) { // a test's argument: "is divisibleby(3)", "is eq(x)" (jinja2)
            P->cur++;
            x->b = parse_expression(P);
            if (!is(P, JT_RPAREN))
                jctx_fail(P->c, line, "Expected ')' after the test's argument");
            P->cur++;
        }
        operand = x;
    }
    return operand;
}

static struct jnode *parse_unary(struct parser *P);
static struct jnode *parse_filter(struct parser *P) {
    struct jnode *operand = parse_unary(P);
    while (is(P, JT_PIPE)) {
        int line = cur_line(P);
        P->cur++;
        struct jnode *f = parse_primary(P);
        if (f->kind != JN_IDENT)
            jctx_fail(P->c, line, "Expected identifier for the filter");
        if (is(P, JT_LPAREN))
            f = parse_call(P, f);
        struct jnode *x = node(P, JN_FILTER, line);
        x->a = operand;
        x->b = f;
        operand = x;
    }
    return operand;
}

static struct jnode *parse_unary(struct parser *P) {
    const struct jtok *k = peek(P, 0);
    if (k && (k->type == JT_UNARY || k->type == JT_ADD) && (jstr_eq(k->v, "-") || jstr_eq(k->v, "+"))) {
        enter(P);
        struct jnode *x = node(P, JN_UNARY, k->line);
        x->str = jstr_eq(k->v, "-") ? (struct jstr){"-", 1} : (struct jstr){"+", 1};
        P->cur++;
        x->a = parse_unary(P);
        P->depth--;
        return x;
    }
    struct jnode *m = parse_member(P, parse_primary(P));
    if (is(P, JT_LPAREN))
        return parse_call(P, m);
    return m;
}

static struct jnode *parse_call(struct parser *P, struct jnode *callee) {
    enter(P);
    struct jnode *x = node(P, JN_CALL, cur_line(P));
    x->a = callee;
    struct nlist args = {0};
    parse_args(P, false, &args);
    x->list = args.v;
    x->n = args.n;
    x = parse_member(P, x);
    if (is(P, JT_LPAREN))
        x = parse_call(P, x);
    P->depth--;
    return x;
}

static void parse_args(struct parser *P, bool params, struct nlist *out) {
    expect(P, JT_LPAREN, "Expected opening parenthesis for arguments list");
    bool saw_kw = false, saw_spread = false;
    while (!is(P, JT_RPAREN)) {
        if (P->cur >= P->t->n)
            jctx_fail(P->c, cur_line(P), "Expected closing parenthesis for arguments list");
        int line = cur_line(P);
        bool kw_spread = is(P, JT_POW);
        bool spread = is(P, JT_MUL) && jstr_eq(peek(P, 0)->v, "*");
        if (params && (kw_spread || spread))
            jctx_fail(P->c, line, "Argument unpacking is not allowed in parameter declarations");
        if (kw_spread) {
            P->cur++;
            struct jnode *x = node(P, JN_KWSPREAD, line);
            x->a = parse_expression(P);
            nl_push(P, out, x);
            if (is(P, JT_COMMA))
                P->cur++;
            if (!is(P, JT_RPAREN))
                jctx_fail(P->c, line,
                          "Expected closing parenthesis: `**` must be applied to the final argument");
            break;
        }
        struct jnode *arg;
        if (spread) {
            if (saw_spread)
                jctx_fail(P->c, line, "Only one `*` argument unpacking is allowed");
            saw_spread = true;
            P->cur++;
            arg = node(P, JN_SPREAD, line);
            arg->a = parse_expression(P);
        } else {
            arg = parse_expression(P);
            if (is(P, JT_EQUALS)) {
                P->cur++;
                if (arg->kind != JN_IDENT)
                    jctx_fail(P->c, line,
                              params ? "Expected identifier for parameter declaration"
                                     : "Expected identifier for keyword argument");
                struct jnode *kw = node(P, JN_KWARG, line);
                kw->str = arg->str;
                kw->a = parse_expression(P);
                arg = kw;
            }
            if (params) {
                if (arg->kind != JN_IDENT && arg->kind != JN_KWARG)
                    jctx_fail(P->c, line, "Expected identifier for parameter declaration");
                for (size_t i = 0; i < out->n; i++)
                    if (out->v[i]->str.n == arg->str.n &&
                        memcmp(out->v[i]->str.p, arg->str.p, arg->str.n) == 0)
                        jctx_fail(P->c, line, "Duplicate parameter name: %.*s", (int)arg->str.n, arg->str.p);
            }
            if (arg->kind == JN_KWARG)
                saw_kw = true;
            else if (saw_kw)
                jctx_fail(P->c, line,
                          params ? "Non-default argument follows default argument"
                                 : "Positional arguments must come before keyword arguments");
            else if (saw_spread)
                jctx_fail(P->c, line, "Positional arguments must not follow `*` argument unpacking");
        }
        nl_push(P, out, arg);
        if (is(P, JT_COMMA))
            P->cur++;
    }
    expect(P, JT_RPAREN, "Expected closing parenthesis for arguments list");
}

static struct jnode *parse_subscript(struct parser *P) {
    int line = cur_line(P);
    struct jnode *s[4] = {0};
    size_t n = 0;
    bool slice = false;
    while (!is(P, JT_RBRACKET)) {
        if (P->cur >= P->t->n)
            jctx_fail(P->c, line, "Expected closing square bracket");
        if (n == 4)
            jctx_fail(P->c, line, "Expected 0-3 arguments for slice expression");
        if (is(P, JT_COLON)) {
            s[n++] = NULL;
            P->cur++;
            slice = true;
        } else {
            s[n++] = parse_expression(P);
            if (is(P, JT_COLON)) {
                P->cur++;
                slice = true;
            }
        }
    }
    if (!n)
        jctx_fail(P->c, line, "Expected at least one argument for member/slice expression");
    if (slice) {
        if (n > 3)
            jctx_fail(P->c, line, "Expected 0-3 arguments for slice expression");
        struct jnode *x = node(P, JN_SLICE, line);
        x->a = s[0];
        x->b = n > 1 ? s[1] : NULL;
        x->c = n > 2 ? s[2] : NULL;
        return x;
    }
    return s[0];
}

static struct jnode *parse_member(struct parser *P, struct jnode *object) {
    while (is(P, JT_DOT) || is(P, JT_LBRACKET)) {
        int line = cur_line(P);
        bool computed = is(P, JT_LBRACKET);
        P->cur++;
        struct jnode *x = node(P, JN_MEMBER, line);
        x->flag = computed;
        x->a = object;
        if (computed) {
            x->b = parse_subscript(P);
            expect(P, JT_RBRACKET, "Expected closing square bracket");
        } else {
            x->b = parse_primary(P);
            if (x->b->kind != JN_IDENT && x->b->kind != JN_INT)
                jctx_fail(P->c, line, "Expected identifier or integer following dot operator");
        }
        object = x;
    }
    return object;
}

static struct jnode *parse_primary(struct parser *P) {
    const struct jtok *k = peek(P, 0);
    if (!k)
        jctx_fail(P->c, cur_line(P), "Unexpected end of the template");
    enter(P);
    P->cur++;
    struct jnode *x;
    switch (k->type) {
    case JT_NUMBER: {
        char tmp[64];
        size_t n = k->v.n < sizeof tmp - 1 ? k->v.n : sizeof tmp - 1;
        memcpy(tmp, k->v.p, n);
        tmp[n] = '\0';
        if (memchr(tmp, '.', n)) {
            x = node(P, JN_FLOAT, k->line);
            x->fval = strtod(tmp, NULL);
        } else {
            x = node(P, JN_INT, k->line);
            x->ival = strtoll(tmp, NULL, 10);
        }
        break;
    }
    case JT_STRING: {
        x = node(P, JN_STRING, k->line);
        x->str = k->v;
        if (is(P, JT_STRING)) { // adjacent literals concatenate
            struct jbuf b = {0};
            jbuf_put(P->c, &b, k->v.p, k->v.n);
            while (is(P, JT_STRING)) {
                jbuf_put(P->c, &b, peek(P, 0)->v.p, peek(P, 0)->v.n);
                P->cur++;
            }
            x->str = jbuf_str(&b);
        }
        break;
    }
    case JT_IDENT:
        x = node(P, JN_IDENT, k->line);
        x->str = k->v;
        break;
    case JT_LPAREN:
        x = parse_sequence(P, false);
        expect(P, JT_RPAREN, "Expected closing parenthesis");
        break;
    case JT_LBRACKET: {
        x = node(P, JN_ARRAY, k->line);
        struct nlist l = {0};
        while (!is(P, JT_RBRACKET)) {
            if (P->cur >= P->t->n)
                jctx_fail(P->c, k->line, "Expected closing square bracket");
            nl_push(P, &l, parse_expression(P));
            if (is(P, JT_COMMA))
                P->cur++;
        }
        P->cur++;
        x->list = l.v;
        x->n = l.n;
        break;
    }
    case JT_LBRACE: {
        x = node(P, JN_OBJECT, k->line);
        struct nlist keys = {0}, vals = {0};
        while (!is(P, JT_RBRACE)) {
            if (P->cur >= P->t->n)
                jctx_fail(P->c, k->line, "Expected closing curly bracket");
            nl_push(P, &keys, parse_expression(P));
            expect(P, JT_COLON, "Expected colon between key and value in object literal");
            nl_push(P, &vals, parse_expression(P));
            if (is(P, JT_COMMA))
                P->cur++;
        }
        P->cur++;
        x->list = keys.v;
        x->n = keys.n;
        x->list2 = vals.v;
        x->n2 = vals.n;
        break;
    }
    default:
        jctx_fail(P->c, k->line, "Unexpected token: %s", tok_name(k->type));
    }
    P->depth--;
    return x;
}

struct jnode *jinja_parse(struct jctx *c, const struct jtoks *t) {
    struct parser P = {.c = c, .t = t};
    struct jnode *prog = node(&P, JN_PROGRAM, 1);
    struct nlist body = {0};
    while (P.cur < t->n)
        nl_push(&P, &body, parse_any(&P));
    prog->list = body.v;
    prog->n = body.n;
    return prog;
}
