/* Regular expressions (the ECMAScript subset of JSON Schema's `pattern` and vLLM's guided_regex) into GBNF
 * text (grammar.h), which the GBNF parser then compiles like any grammar.
 *
 * Supported: literals and escapes (\n \r \t \v \f \0 \xHH \uHHHH \u{H...} \cX, escaped punctuation), `.`,
 * classes [...] and [^...] with ranges, \d \w \s \D \W \S (in and out of classes), groups ( ), (?: ) and
 * (?<name> ), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms are matched as the greedy ones: the
 * same language), and ^ / $ at the start / end of the pattern or of a top-level alternative.  Anything else
 * (backreferences, lookaround, \b, \p{...}, inline flags, anchors elsewhere) is an error naming it.
 *
 * The language generated is a subset of what both ECMAScript and Python's `re` (the usual validator) accept
 * for the pattern: \d is [0-9], \w [A-Za-z0-9_], \s the whitespace both agree on, and the complements
 * (\D \W \S, negated classes holding those) avoid every character either dialect might count in.  `.`
 * excludes \n \r U+2028 U+2029.
 *
 * Modes: anchored (the whole text matches, vLLM's guided_regex) or search (JSON Schema: the pattern matches
 * somewhere unless anchored with ^ and $, so unanchored ends get any text around them); and plain text or
 * the inside of a JSON string (characters JSON must escape are produced as escapes: \" \\ and \u00XX for
 * control characters, so that the decoded string is what matches).  Surrogates are never produced. */
#ifndef CINFER_GRAMMAR_REGEX_H
#define CINFER_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#define GRAM_REGEX_MAX_LEN     (64u << 10) // bytes of one pattern
#define GRAM_REGEX_MAX_NESTING 32          // groups inside one another

/* A growing text buffer (front ends write GBNF into it).  The first failure sticks (oom). */
struct gtext {
    char *s;
    size_t n, cap;
    size_t limit; // 0: GRAM_MAX_TEXT
    bool oom, over;
};
void gtext_free(struct gtext *t);
__attribute__((format(printf, 2, 3))) void gtext_printf(struct gtext *t, const char *fmt, ...);
void gtext_put(struct gtext *t, const char *s, size_t n);
/* CI_OK, or the error for an overflow (CI_ERR_LIMIT) or allocation failure. */
enum ci_status gtext_status(const struct gtext *t, struct ci_err *err);
/* A GBNF string literal ("...") holding s[0..n) (UTF-8), escaped. */
void gtext_literal(struct gtext *t, const char *s, size_t n);

enum gram_regex_flags {
    GRAM_REGEX_SEARCH = 1,      // unanchored ends match any text (JSON Schema); else the whole text matches
    GRAM_REGEX_JSON_STRING = 2, // produce the inside of a JSON string
};

/* Appends to out a GBNF expression (one parenthesized group, no rule definition) for the pattern
 * re[0..len), and (when not NULL) the least and most characters a match holds (*max_len -1: unbounded).
 * Errors: CI_ERR_INVALID / CI_ERR_UNSUPPORTED with "regex: " and what and where. */
enum ci_status gram_regex_expr(const char *re, size_t len, int flags, struct gtext *out, long *min_len,
                               long *max_len, struct ci_err *err);

/* A whole GBNF grammar ("root ::= ...") for the pattern (flags as above). */
enum ci_status gram_regex_to_gbnf(const char *re, size_t len, int flags, struct gtext *out,
                                  struct ci_err *err);

#endif
