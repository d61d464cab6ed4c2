/* The matcher's internals, private to src/grammar (matcher.c and token_cache.c, which precomputes masks with
 * the same stepping): the vocabulary trie, the stack sets and the shared space.  Nothing outside
 * src/grammar includes this. */
#ifndef CINFER_GRAMMAR_MATCHER_IMPL_H
#define CINFER_GRAMMAR_MATCHER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/matcher_stats.h"

#define GRAM_NONE UINT32_MAX

struct trie_node {
    uint32_t first_child, next_sibling;
    uint32_t tok_first, tok_n;   // tokens whose bytes end here: toks[tok_first .. + tok_n)
    uint32_t sub_first, sub_end; // the tokens of the subtree (this node's first): toks[sub_first .. sub_end)
    uint8_t byte;
};

/* A token's rank is its index in toks (byte order), so the tokens under a trie node have consecutive ranks. */
struct gram_vocab {
    int n_vocab;
    char *pool;
    uint64_t *off;
    uint32_t *len; // 0: never allowed
    uint8_t *is_eog;
    int32_t *eog;
    int n_eog;
    struct trie_node *nodes; // [0]: the root
    uint32_t n_nodes;
    int32_t *toks; // [n_toks] by rank
    uint32_t n_toks;
    uint32_t max_len;
    uint32_t *sub_max_len; // [n_nodes] the longest token (bytes) in each node's subtree, 0 when none
    int32_t *by_len;       // [n_toks] the token ids, longest first
};

struct u8state {
    uint32_t acc;
    uint8_t rem, lo, hi; // continuation bytes still to come; the range the next one must be in
};

struct mstate {
    size_t off; // the stack set: arena[off .. off + n), sorted node ids
    uint32_t n;
    struct u8state u;
};

struct frame {
    uint32_t child; // next child to visit
    size_t mark;    // arena length to restore when this frame is left
    struct mstate s;
};

struct cache_entry {
    uint64_t hash;
    uint32_t *key; // [n_key]: the stack set then the UTF-8 state
    uint32_t n_key;
    uint32_t *bits;
};

#define CACHE_SLOTS 32

struct gram_tcache;

/* What the matchers of one grammar and vocabulary share: the stack nodes (so equal states have equal ids
 * across matchers), the mask cache, the per-position token table, the scratch. */
struct gram_space {
    const struct grammar *g;
    const struct gram_vocab *v;
    // hash-consed stack nodes; node 0 is the empty stack
    uint32_t *npos, *nparent;
    uint32_t n_nodes, cap_nodes;
    uint32_t *htab; // node id + 1, 0: free
    uint32_t hmask;
    // The table's scratch spaces only: a parent node standing for "the stack below is unknown" (GRAM_NONE in
    // matchers' spaces); expand sets `escaped` instead of popping into it.
    uint32_t unknown;
    bool escaped;
    // scratch: stack sets of the steps being computed
    uint32_t *arena;
    size_t n_arena, cap_arena;
    struct frame *frames;
    bool failed; // out of memory or too many stacks in the current computation
    // the rule expansions (rule, return node) done in the current closure (expand), generation-stamped: a
    // cycle of tail calls through nullable rules comes back to one of them and stops there
    uint64_t *vkey;
    uint32_t *vgen;
    uint32_t vmask, vn, vcur;
    struct cache_entry cache[CACHE_SLOTS];
    uint32_t cache_next;
    struct gram_matcher_stats stats;
    uint32_t *start; // the start state's stack set [n_start]
    uint32_t n_start;
    struct gram_tcache *tc; // the per-position token table (token_cache.h); NULL until the first mask
    bool tc_off;            // masks by the trie walk only (tests, benchmarks)
    uint64_t tc_limit;      // the table's bound on its entries' bytes (0: GRAM_TCACHE_MAX_BYTES)
    uint32_t *dep;          // scratch: [(n_toks + 31) / 32] ranks to check against the whole state
};

void gram_space_free(struct gram_space *sp); // as matcher.h declares it
/* A space with no start state and no table: the table's scratch (token_cache.c). */
struct gram_space *gram_space_scratch(const struct grammar *g, const struct gram_vocab *v);
/* Forgets every stack node (the scratch starts each position afresh). */
void gram_space_reset_nodes(struct gram_space *m);
uint32_t gram_intern(struct gram_space *m, uint32_t pos, uint32_t parent);
/* One byte: false when no parse can take it (out is then unspecified); m->failed when a limit was hit. */
bool gram_step_byte(struct gram_space *m, const struct mstate *in, uint8_t b, struct mstate *out);

#endif
