/* The per-position token table (XGrammar's adaptive token mask cache, computed lazily): for a stack whose
 * top is a character class, the tokens split three ways by matching them against the stack's top
 * GRAM_TCACHE_DEPTH nodes (element positions: the class, then where its rule returns to) with the stack
 * below them not known.  The key is those positions, so every stack with the same top nodes shares an entry.
 * (Depth 1, the class alone, as XGrammar keys it, leaves a repetition's helper rule (x ::= c x | ) nearly
 * all dependent: every character may end the rule; the parent's position knows what follows, e.g. the
 * closing quote of a JSON string.)
 *
 *   accepted   some parse takes the whole token without reaching the stack below (or reaches it exactly at
 *              the token's end: popping into any real stack then expands to at least one parse, since every
 *              rule derives some string), so every real stack with this top takes it;
 *   dependent  no parse above the stack below takes it, but one reached the stack below with bytes left:
 *              the whole state decides (the matcher checks these tokens against it, in trie order);
 *   rejected   the rest: no real stack with this top takes it.
 *
 * A state's mask is then the union of its tops' accepted sets plus its tops' dependent tokens that the whole
 * state takes, which equals the trie walk over the whole state (a token is taken by a stack set exactly
 * when some one stack takes it) -- except where the walk hits the GRAM_MAX_STACKS limits mid-token (it then
 * rejects a token that a single stack's table may accept; the matcher keeps the walk for states of more
 * than GRAM_MAX_STACKS / 16 parses, where that could happen).
 *
 * Bounded repetitions (x{0,n}, lowered into a chain of rules R_n ... R_1 with R_k ::= x R_(k-1) | ): a
 * position inside R_k classifies every token shorter than k bytes as the same position in the deepest rule
 * of its chain does (the token cannot use up the k items), so its entry is that one's, as is when no token
 * of the vocabulary is that long, else patched: the long tokens classified again by a walk of the trie
 * paths that lead to them only.  A string of maxLength 255 then costs one full walk and short ones, not 255
 * full walks.  CINFER_GRAMMAR_REPEAT=0 turns this off (to compare).
 *
 * Cost and bounds: an entry is computed on first use (one trie walk from that single stack, the cost of
 * one uncached mask of a narrow state), by the space's thread; accepted sets are stored as token lists or a
 * bitset, whichever is smaller, dependent tokens as ranges of trie ranks.  A table holds at most
 * GRAM_TCACHE_MAX_BYTES; entries past that (or that run out of memory) are marked unavailable and masks
 * that need them fall back to the trie walk over the whole state.  Single-threaded, like its space. */
#ifndef CINFER_GRAMMAR_TOKEN_CACHE_H
#define CINFER_GRAMMAR_TOKEN_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/matcher_impl.h"

#define GRAM_TCACHE_MAX_BYTES (16u << 20) // per space; the engine keeps 16 spaces
#define GRAM_TCACHE_DEPTH     2           // stack nodes known in an entry's key: the top and its parent

struct gram_tc_entry {
    uint32_t *acc; // accepted token ids [n_acc], or a bitset of (n_vocab + 31) / 32 words when acc_bits
    uint32_t n_acc;
    bool acc_bits;
    uint32_t *dep;  // dependent tokens: rank ranges [dep[2i], dep[2i + 1])
    uint32_t n_dep; // ranges
};

struct gram_tcache;

/* NULL when out of memory. */
struct gram_tcache *gram_tcache_create(const struct grammar *g, const struct gram_vocab *v);
void gram_tcache_free(struct gram_tcache *tc);
/* The bound on the entries' bytes (default GRAM_TCACHE_MAX_BYTES); entries already made stay. */
void gram_tcache_set_limit(struct gram_tcache *tc, uint64_t bytes);
/* A new mask: gram_tcache_get's *first is true once per entry until the next call. */
void gram_tcache_new_mask(struct gram_tcache *tc);
/* The entry of the stack `node` of space sp (its top GRAM_TCACHE_DEPTH positions; computed now if new); NULL
 * when unavailable (budget or memory).  *first: the first time this entry is asked for in this mask. */
const struct gram_tc_entry *gram_tcache_get(struct gram_tcache *tc, const struct gram_space *sp,
                                            uint32_t node, bool *first);

struct gram_tcache_stats {
    uint32_t computed, unavailable;
    uint32_t shared, patched; // bounded repetitions' entries: another position's as is, or patched from it
    uint64_t bytes, ns, acc_tokens, dep_tokens;
};
void gram_tcache_stats(const struct gram_tcache *tc, struct gram_tcache_stats *out);

#endif
