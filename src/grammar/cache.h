/* A cache of compiled grammars keyed by their text (and front end), shared by every thread that submits
 * requests: the first request with a grammar compiles it, the next ones with the same text take a
 * reference to the same immutable struct grammar.  Errors are not cached (a bad grammar is parsed again;
 * its compile time is bounded by the limits of grammar.h).  The cache holds at most `capacity` grammars and
 * drops the least recently used one beyond that; a dropped grammar lives on while requests hold it.
 *
 * Thread safety: every function may be called from any thread (one mutex). */
#ifndef CINFER_GRAMMAR_CACHE_H
#define CINFER_GRAMMAR_CACHE_H

#include <stddef.h>

#include "core/status.h"
#include "grammar/grammar.h"

struct gram_cache;
struct gram_ref; // a counted reference to a compiled grammar

enum ci_status gram_cache_create(int capacity, struct gram_cache **out, struct ci_err *err);
/* The vocabulary GBNF token references (<[id]>, <text>) resolve against (copied; its lookup context must
 * outlive the cache and be safe to call from any thread).  Without it they are refused. */
void gram_cache_set_tokens(struct gram_cache *c, const struct gram_tokens *tk);
/* The cache's own references are released; references handed out stay valid until released. */
void gram_cache_free(struct gram_cache *c);

/* The front ends a grammar's text may be written in (each compiled to GBNF text first: regex.h,
 * json_schema.h). */
enum gram_front {
    GRAM_FRONT_GBNF = 0,
    GRAM_FRONT_JSON_SCHEMA, // a JSON Schema (JSON text)
    GRAM_FRONT_REGEX,       // a regular expression the whole output matches
    GRAM_FRONT_COUNT
};

/* The compiled grammar for text[0..len) in front end `front` (the cache is keyed by both): a new reference,
 * or the front end's or the GBNF parser's error. */
enum ci_status gram_cache_get(struct gram_cache *c, enum gram_front front, const char *text, size_t len,
                              struct gram_ref **out, struct ci_err *err);

/* The compiled GBNF grammar text[0..len): a new reference (release with gram_ref_release), or the parse
 * error (CI_ERR_INVALID / CI_ERR_LIMIT, the message naming the problem). */
enum ci_status gram_cache_get_gbnf(struct gram_cache *c, const char *text, size_t len, struct gram_ref **out,
                                   struct ci_err *err);
const struct grammar *gram_ref_grammar(const struct gram_ref *r);
struct gram_ref *gram_ref_retain(struct gram_ref *r);
void gram_ref_release(struct gram_ref *r); // NULL is fine

struct gram_cache_stats {
    long hits, misses, entries;
};
void gram_cache_stats(struct gram_cache *c, struct gram_cache_stats *out);

#endif
