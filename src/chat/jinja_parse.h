/* The Jinja parser: tokens to a syntax tree, with @huggingface/jinja's grammar and operator precedence
 * (lowest first: `a if c else b`, or, and, not, comparisons and `in`/`not in`, + - ~, * / // %, **, `is`
 * tests, `|` filters, unary + -, calls / member access / subscripts and slices, primaries).  Statements:
 * if/elif/else, for (tuple targets, an `if` condition, else), set (expression, tuple and namespace
 * attribute targets, block set), macro, call (with caller arguments), filter blocks, break, continue.
 * Every node keeps its template line.  Nodes live in the jctx's arena; errors fail through it. */
#ifndef CINFER_CHAT_JINJA_PARSE_H
#define CINFER_CHAT_JINJA_PARSE_H

#include "chat/jinja_lex.h"

enum jnode_kind {
    JN_PROGRAM,     // list: body
    JN_TEXT,        // str (template text)
    JN_STRING,      // str
    JN_INT,         // ival
    JN_FLOAT,       // fval
    JN_IDENT,       // str
    JN_ARRAY,       // list
    JN_TUPLE,       // list
    JN_OBJECT,      // list: keys, list2: values
    JN_MEMBER,      // a: object, b: property, flag: computed (a[b])
    JN_SLICE,       // a, b, c: start, stop, step (NULL: absent)
    JN_CALL,        // a: callee, list: arguments
    JN_KWARG,       // str: name, a: value
    JN_SPREAD,      // a (*x)
    JN_KWSPREAD,    // a (**x)
    JN_UNARY,       // str: operator ("not", "-", "+"), a
    JN_BINARY,      // str: operator, a, b
    JN_FILTER,      // a: operand, b: the filter (JN_IDENT or JN_CALL)
    JN_TEST,        // a: operand, str: the test's name, flag: negated
    JN_SELECT,      // a: value, b: condition (`a if b` without else)
    JN_TERNARY,     // a: condition, b: if true, c: if false
    JN_IF,          // a: test, list: body, list2: else
    JN_FOR,         // a: target, b: iterable (JN_SELECT for an `if` condition), list: body, list2: else
    JN_SET,         // a: target, b: value (NULL for a block set), list: block body
    JN_MACRO,       // str: name, list: parameters, list2: body, flag: uses varargs/kwargs
    JN_CALLBLOCK,   // a: the call (JN_CALL), list: caller's parameters, list2: body
    JN_FILTERBLOCK, // a: the filter (JN_IDENT or JN_CALL), list: body
    JN_BREAK,
    JN_CONTINUE,
    JN_COMMENT,
};

struct jnode {
    enum jnode_kind kind;
    int line;
    bool flag;
    struct jstr str;
    int64_t ival;
    double fval;
    struct jnode *a, *b, *c;
    struct jnode **list, **list2;
    size_t n, n2;
};

/* Parses the template's tokens; the tree's root is a JN_PROGRAM. */
struct jnode *jinja_parse(struct jctx *c, const struct jtoks *t);

#endif
