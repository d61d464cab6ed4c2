/* The Jinja lexer: template text to tokens, as @huggingface/jinja's lexer does it (with trim_blocks and
 * lstrip_blocks on, as transformers' apply_chat_template renders): the source first loses one trailing
 * newline, the spaces and tabs before a line's `{%`/`{#`/`{-`, the newline after `%}`/`#}`/`-}`, and the
 * transformers-only `{% generation %}` tags; then `{%-`, `{{-`, `{#-` strip the whitespace before them and
 * `-%}`, `-}}`, `-#}` the whitespace after.  Each token keeps the line of the original source it came from.
 * Tokens live in the arena of the jctx; errors fail through it (jctx_fail). */
#ifndef CINFER_CHAT_JINJA_LEX_H
#define CINFER_CHAT_JINJA_LEX_H

#include "chat/jinja_value.h"

enum jtok_type {
    JT_TEXT,
    JT_NUMBER,
    JT_STRING,
    JT_IDENT,
    JT_EQUALS,
    JT_LPAREN,
    JT_RPAREN,
    JT_OPEN_STMT,
    JT_CLOSE_STMT,
    JT_OPEN_EXPR,
    JT_CLOSE_EXPR,
    JT_LBRACKET,
    JT_RBRACKET,
    JT_LBRACE,
    JT_RBRACE,
    JT_COMMA,
    JT_DOT,
    JT_COLON,
    JT_PIPE,
    JT_ADD,     // + - ~
    JT_MUL,     // * / // %
    JT_POW,     // **
    JT_COMPARE, // < > <= >= == !=
    JT_UNARY,   // a + or - that is not a binary operator
    JT_COMMENT,
};

struct jtok {
    enum jtok_type type;
    struct jstr v;
    int line;
};

struct jtoks {
    struct jtok *t;
    size_t n, cap;
};

void jinja_lex(struct jctx *c, const char *src, size_t len, struct jtoks *out);

#endif
