/* The incremental grammar matcher and the token mask.
 *
 * Matcher: the set of pushdown stacks llama.cpp's grammar sampler keeps (every parse the text so far allows,
 * so ambiguity and recursion are exact), over Unicode code points, fed bytes: a partial UTF-8 character is
 * held until complete (strict UTF-8: no overlong forms, surrogates or values past U+10FFFF), and a byte that
 * starts or continues a character is accepted only when some stack can take a character with that prefix.
 * Stacks are hash-consed linked lists (a node is (element position, parent node)), so a state is a sorted
 * set of node ids: equal states compare equal, which the mask cache uses.  Rules are expanded eagerly at
 * their left edge (the grammar has no left recursion, grammar.h), and a reference in tail position pushes no
 * return node, so right recursion (x ::= "a" x | ...) keeps stacks flat.
 *
 * Vocabulary (struct gram_vocab): the byte strings of the tokens in a prefix tree, built once per vocabulary
 * and shared read-only by every matcher.  Tokens with no bytes or that the caller excludes (control tokens)
 * are never allowed; end-of-generation tokens are allowed exactly when the matcher is accepting.
 *
 * Mask: the masks of states seen before come from the cache of the matcher's space (keyed by the state),
 * which matchers of the same grammar can share (gram_space).  A new state's mask comes from the space's
 * per-position token table (token_cache.h, XGrammar's adaptive token mask cache): for each stack top, the
 * tokens it accepts whatever the stack below, precomputed on the top's first use, united, plus a check of
 * only the few tokens whose fate depends on the stack below.  The check, and the fallback when the table
 * does not apply (a partial character pending, the table over its memory bound), walk the trie depth first,
 * advancing a copy of the state one byte per edge, so a prefix shared by many tokens is matched once and a
 * dead prefix prunes its whole subtree.  Both give the same mask.
 *
 * Ownership: a matcher belongs to one thread at a time; it keeps pointers to its grammar and vocabulary,
 * which must outlive it. */
#ifndef CINFER_GRAMMAR_MATCHER_H
#define CINFER_GRAMMAR_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher_stats.h"

#define GRAM_MAX_STACKS 4096 // parses held at once; a step that would need more is rejected

struct gram_vocab;

/* bytes[i]/lens[i]: token i's bytes (bytes[i] NULL or lens[i] 0: never allowed).  eog: end-of-generation
 * ids.  The bytes are copied. */
enum ci_status gram_vocab_create(int n_vocab, const char *const *bytes, const uint32_t *lens,
                                 const int32_t *eog, int n_eog, struct gram_vocab **out, struct ci_err *err);
void gram_vocab_free(struct gram_vocab *v);
int gram_vocab_n(const struct gram_vocab *v);
int gram_vocab_n_nodes(const struct gram_vocab *v); // trie nodes (for tests and stats)

/* The part the matchers of one grammar and vocabulary can share: the stack nodes (so a state has the same
 * ids in every matcher), the mask cache (a state one sample has met is free for the others and for later
 * requests) and the scratch.  It belongs to one thread at a time, as do its matchers; it must outlive them. */
struct gram_space;
enum ci_status gram_space_create(const struct grammar *g, const struct gram_vocab *v, struct gram_space **out,
                                 struct ci_err *err);
void gram_space_free(struct gram_space *sp);
/* Whether masks use the per-position token table (default on; off: the trie walk only, for tests and
 * benchmarks: both give the same masks). */
void gram_space_use_table(struct gram_space *sp, bool on);
/* Bounds the table's entries to `bytes` (tests: the fallback to the walk past the bound). */
void gram_space_table_limit(struct gram_space *sp, uint64_t bytes);

struct gram_matcher;

/* A matcher at the grammar's start, in the shared space sp. */
enum ci_status gram_matcher_create_in(struct gram_space *sp, struct gram_matcher **out, struct ci_err *err);
/* A matcher with a space of its own. */
enum ci_status gram_matcher_create(const struct grammar *g, const struct gram_vocab *v,
                                   struct gram_matcher **out, struct ci_err *err);
void gram_matcher_free(struct gram_matcher *m);
/* A copy of m's state, in m's space. */
enum ci_status gram_matcher_clone(const struct gram_matcher *m, struct gram_matcher **out,
                                  struct ci_err *err);

/* Advances over bytes[0..n) when the grammar allows them (true), else leaves the state as it was (false). */
bool gram_matcher_accept_bytes(struct gram_matcher *m, const char *bytes, size_t n);
/* Whether bytes would be accepted (the state is unchanged). */
bool gram_matcher_try_bytes(struct gram_matcher *m, const char *bytes, size_t n);
/* Advances over token id's bytes; an end-of-generation token is accepted only in an accepting state, and
 * then the matcher is done (nothing more is accepted). */
bool gram_matcher_accept_token(struct gram_matcher *m, int32_t id);
/* The text so far is a whole sentence of the grammar (no partial character pending). */
bool gram_matcher_is_accepting(const struct gram_matcher *m);
/* Nothing more can follow: accepting with no parse that could continue (or an end token was accepted). */
bool gram_matcher_is_done(const struct gram_matcher *m);

/* The allowed tokens in the current state: bits[(id) / 32] bit id % 32, (n_vocab + 31) / 32 words, written
 * whole.  CI_ERR_NOMEM only. */
enum ci_status gram_matcher_mask(struct gram_matcher *m, uint32_t *bits, struct ci_err *err);

void gram_matcher_stats(const struct gram_matcher *m, struct gram_matcher_stats *out);

#endif
