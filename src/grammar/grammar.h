/* Context-free grammars over Unicode code points, for constrained decoding.
 *
 * Representation (what every front end emits: the GBNF parser here, a JSON-schema compiler next): a grammar
 * is a list of rules; rule r is a list of alternatives, each a sequence of elements; an element is a rule
 * reference, a character class (ranges of code points, possibly negated; a literal character is a class of
 * one), or a token reference (llama.cpp's `<[id]>`: exactly that vocabulary token, whole; `!<[id]>`: any one
 * token but that one), which a token matches by its id, never by its text.  Repetition and grouping are lowered into helper rules by whoever builds the grammar (the builder has
 * helpers for them).  The compiled form is flat, as llama.cpp's: the elements of all rules in one array,
 * rule r's alternatives at rule_start[r], separated by GRAM_ALT and ended by GRAM_END; a character class is a
 * GRAM_CHAR or GRAM_CHAR_NOT element followed by GRAM_CHAR_RNG (the upper end of a range starting at the
 * element before) and GRAM_CHAR_ALT (one more character or range start) elements.
 *
 * Validation (gram_builder_finish): every referenced rule defined, a rule named "root" (or the given start),
 * no left recursion (direct, indirect, or through nullable prefixes: the matcher expands left edges eagerly)
 * except cycles made only of tail calls (a repetition of a nullable item, "( [x]* )*": the matcher's stack
 * comes back unchanged and its expansion stops there),
 * every rule reachable from the start able to derive some string (no empty language, no dead rule), and the
 * limits below.  Errors name the rule and, for GBNF text, the line and column.
 *
 * Ownership: a struct grammar is immutable once built and owns its arrays; gram_free frees it.  The builder
 * is single-threaded.  A compiled grammar may be shared by threads (read only). */
#ifndef CINFER_GRAMMAR_GRAMMAR_H
#define CINFER_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define GRAM_MAX_TEXT      (1u << 20) // bytes of GBNF text
#define GRAM_MAX_RULES     (1u << 16)
#define GRAM_MAX_ELEMS     (1u << 21) // elements of all rules together, after lowering repetitions
#define GRAM_MAX_NESTING   64         // parentheses inside one another
#define GRAM_MAX_REPEAT    10000      // m and n of {m,n}
#define GRAM_MAX_DEPTH     2000       // rules that can start one another in a chain (matcher recursion)
#define GRAM_MAX_CODEPOINT 0x10FFFFu

enum gram_op {
    GRAM_END = 0,   // end of a rule's last alternative
    GRAM_ALT,       // end of an alternative, another follows
    GRAM_REF,       // val: rule id
    GRAM_CHAR,      // val: code point; a class's first character (or range start)
    GRAM_CHAR_NOT,  // val: code point; as GRAM_CHAR, negated class
    GRAM_CHAR_RNG,  // val: upper end (inclusive) of the range starting at the previous element
    GRAM_CHAR_ALT,  // val: another character (or range start) of the same class
    GRAM_CHAR_ANY,  // any code point ('.'); stands alone
    GRAM_TOKEN,     // val: token id; that token, whole; stands alone
    GRAM_TOKEN_NOT, // val: token id; any one token but that one (end-of-generation tokens aside); stands alone
};

struct gram_elem {
    uint32_t op; // enum gram_op
    uint32_t val;
};

struct grammar {
    struct gram_elem *elems; // [n_elems]
    uint32_t n_elems;
    uint32_t *rule_start; // [n_rules] index of each rule's first element
    char **rule_names;    // [n_rules]
    uint32_t n_rules;
    uint32_t start; // the start rule ("root")
};

void gram_free(struct grammar *g);

/* True when elems[i] begins a character class (GRAM_CHAR, GRAM_CHAR_NOT or GRAM_CHAR_ANY). */
static inline bool gram_is_char(uint32_t op) {
    return op == GRAM_CHAR || op == GRAM_CHAR_NOT || op == GRAM_CHAR_ANY;
}
static inline bool gram_is_token(uint32_t op) {
    return op == GRAM_TOKEN || op == GRAM_TOKEN_NOT;
}
static inline bool gram_is_end(uint32_t op) {
    return op == GRAM_END || op == GRAM_ALT;
}
/* The element after the class (or token reference) starting at i. */
uint32_t gram_class_end(const struct grammar *g, uint32_t i);
/* Whether the class at elems[i] contains cp (a token reference contains no code point). */
bool gram_class_matches(const struct grammar *g, uint32_t i, uint32_t cp);
/* Whether the token reference at elems[i] takes token id (false for a class). */
static inline bool gram_token_matches(const struct grammar *g, uint32_t i, int32_t id) {
    uint32_t op = g->elems[i].op;
    return (op == GRAM_TOKEN && g->elems[i].val == (uint32_t)id) ||
           (op == GRAM_TOKEN_NOT && g->elems[i].val != (uint32_t)id);
}
/* Whether the class at elems[i] contains some code point in [lo, hi] (false for a token reference). */
bool gram_class_intersects(const struct grammar *g, uint32_t i, uint32_t lo, uint32_t hi);

/* ---- building -------------------------------------------------------------------------------------------- */

struct gram_builder;

enum ci_status gram_builder_create(struct gram_builder **out, struct ci_err *err);
void gram_builder_free(struct gram_builder *b);

/* The id of the rule named name (created, undefined, on first use).  line/col (1-based, 0 when unknown) are
 * where it was first referenced, for the undefined-rule error. */
enum ci_status gram_rule_id(struct gram_builder *b, const char *name, size_t len, int line, int col,
                            uint32_t *id, struct ci_err *err);
/* A new rule with a unique name derived from base ("base_N"). */
enum ci_status gram_rule_new(struct gram_builder *b, const char *base, uint32_t *id, struct ci_err *err);
/* Defines rule id as elems[0..n): alternatives separated by GRAM_ALT (no final GRAM_END: the builder adds
 * it).  Defining a rule twice is an error (GBNF: "rule 'x' defined twice"). line/col: where, for messages. */
enum ci_status gram_rule_define(struct gram_builder *b, uint32_t id, const struct gram_elem *elems, size_t n,
                                int line, int col, struct ci_err *err);
/* Lowers item{min,max} (max < 0: unbounded) of the sequence item[0..n) into *out_elems: min copies of item
 * followed by a reference to a helper rule for the optional part.  Appends to a caller buffer via the
 * builder's scratch; see gbnf.c for use.  *id receives the helper rule (UINT32_MAX when none was needed). */
enum ci_status gram_repeat_rule(struct gram_builder *b, const char *base, const struct gram_elem *item,
                                size_t n, int max_extra, uint32_t *id, struct ci_err *err);
/* Validates and flattens into *out (start: the start rule's name).  The builder may then be freed. */
enum ci_status gram_builder_finish(struct gram_builder *b, const char *start, struct grammar **out,
                                   struct ci_err *err);

/* ---- GBNF ------------------------------------------------------------------------------------------------ */

/* Parses llama.cpp's GBNF (grammars/README.md): `name ::= alternatives` rules, `|`, `( )`, `*` `+` `?`
 * `{m}` `{m,}` `{m,n}`, "literals", [classes] and [^negated] with ranges, `.`, escapes \n \r \t \\ \" \[ \]
 * \- \xHH \uHHHH \UHHHHHHHH, `#` comments, and token references: `<[id]>`, `<text>` (the one token whose
 * text, special tokens included, is <text>: `<think>`), each negated with a `!` before it.  The start rule is
 * "root".  Errors (CI_ERR_INVALID) say what and where ("line 3, column 7: ..."). */
enum ci_status gram_parse_gbnf(const char *text, size_t len, struct grammar **out, struct ci_err *err);

/* The vocabulary that token references name (gram_parse_gbnf_tokens). */
struct gram_tokens {
    int n_vocab; // an <[id]> must be below it
    // The id of the single token that text[0..len) (the whole "<...>", brackets included) encodes to, special
    // tokens recognized; -1 when it is not exactly one token.  NULL: `<text>` references are refused.
    int32_t (*lookup)(const void *ctx, const char *text, size_t len);
    const void *ctx;
};
/* gram_parse_gbnf with token references resolved against tk (NULL: token references are refused, naming the
 * missing vocabulary, as gram_parse_gbnf does). */
enum ci_status gram_parse_gbnf_tokens(const char *text, size_t len, const struct gram_tokens *tk,
                                      struct grammar **out, struct ci_err *err);

#endif
