/* Automatic prefix caching across requests (vLLM's automatic prefix caching, at block granularity): KV blocks
 * holding a full block of a prompt's (or generated) tokens are remembered by the content of the whole token
 * prefix they end, so a later request starting with the same tokens reuses them instead of recomputing.
 * Owned by the engine thread, like the pool it is attached to (no locks).
 *
 * Keys.  Only FULL blocks are cached.  Block i of a token list is keyed by a hash chain over the tokens:
 *     key_0 = H(seed, tokens[0 .. bs)),   key_i = H(key_{i-1}, tokens[i*bs .. (i+1)*bs))
 * (H = ci_hash_bytes over the int32 tokens).  Each entry stores its key, its bs tokens, and its parent: the
 * block id of the entry matched for block i-1 (-1 for block 0) and that entry's serial number (a counter
 * value given to each entry when it is registered, never reused).  A lookup of block i is a hit only if an
 * entry has key_i, stores exactly the request's tokens of block i, and names as parent the entry matched for
 * block i-1 (same block id and same serial).  So a hash collision never returns wrong KV: the whole prefix is
 * verified token by token along the chain, and the serial makes a parent that was forgotten and whose block
 * id was reused for other content count as a different parent.
 *
 * Ownership.  The cache holds NO reference.  A block referenced by a sequence has refcount >= 1 and may be
 * cached at the same time.  When a cached block's refcount drops to 0 the pool parks it in the cache's LRU
 * (most recently released at the tail) instead of freeing it; a hit on a parked block takes it out of the LRU
 * (refcount 0 -> 1).  When kv_pool_alloc finds the free list empty, the cache evicts the LRU head: it forgets
 * that entry and the pool hands the block out fresh.  kv_pool_n_available counts parked blocks as
 * allocatable.  kv_seq_release drops a table's blocks last first, so a released request's tail blocks are
 * evicted before its head blocks, which other requests are more likely to share.
 *
 * Descendants.  Forgetting an entry (eviction, invalidation, a conflicting re-insert) does not chase its
 * descendants: they stay in the cache but are unreachable, since no later entry can have the forgotten
 * entry's serial (vLLM does the same).  They are dropped lazily: a stale entry whose block is released is not
 * parked (the block goes straight to the free list), and a stale parked entry is evicted in LRU order.
 *
 * Writes.  A block shared by several tables is copied before a write (kv_seq_prepare_write, copy-on-write).
 * A cached block with refcount 1 is written in place only when its holder shrank into it and rewrites it;
 * the pool then tells the cache (invalidate hook), which forgets that entry first.  Otherwise no cached block
 * is ever written: prefix_cache_match never covers the last token of a request (it matches at most
 * floor((n_tokens - 1) / bs) blocks), so the caller always has at least one token to compute (and logits to
 * sample from), and that token's block is never a matched one.  E.g. with n_tokens = 2*bs and both blocks
 * cached, match covers bs tokens; the request recomputes tokens bs .. 2bs-1 into a fresh block, and a later
 * prefix_cache_insert leaves that block uncached because an identical entry already exists.
 *
 * Memory: everything is allocated by prefix_cache_create, sized from the pool (n_blocks entries of
 * block_size tokens, an open-addressing map of 2..4 x n_blocks slots, LRU links); nothing after. */
#ifndef CINFER_ENGINE_PREFIX_CACHE_H
#define CINFER_ENGINE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/kv_pool.h"

struct prefix_cache;

struct prefix_cache_stats {
    int64_t queries;      // prefix_cache_match calls
    int64_t query_tokens; // tokens looked up (sum of their n_tokens)
    int64_t hit_blocks;   // blocks reused by matches
    int64_t hit_tokens;   // tokens covered by matches (hit_blocks * block_size)
    int64_t evictions;    // parked blocks evicted for kv_pool_alloc
    int n_cached;         // entries now (referenced and parked blocks, stale ones included)
    int n_parked;         // entries now parked (refcount 0, in the LRU)
};

/* Creates a cache for pool (which must have none) and attaches it.  CI_ERR_INVALID if the pool already has
 * a cache or its size overflows, CI_ERR_NOMEM.  The pool must outlive the cache. */
enum ci_status prefix_cache_create(struct kv_pool *pool, struct prefix_cache **out, struct ci_err *err);
/* Gives every parked block back to the pool's free list, detaches and frees (NULL is fine). */
void prefix_cache_free(struct prefix_cache *pc);

/* seq's table must be empty.  Appends to it, with one reference each, the blocks of the longest verified
 * cached prefix of tokens[0..n_tokens) in whole blocks, at most floor((n_tokens - 1) / bs) blocks and at most
 * seq->cap.  Returns the number of tokens covered (a multiple of bs): the caller computes positions
 * [returned, n_tokens).  Updates the statistics; never allocates or fails. */
int prefix_cache_match(struct prefix_cache *pc, const int32_t *tokens, int n_tokens,
                       struct kv_seq_blocks *seq);

/* After seq's blocks hold the KV of tokens[0..n_computed) (n_computed <= seq->n * bs): registers each of its
 * full blocks not yet cached.  Idempotent.  A block whose prefix is already cached under another block id is
 * left uncached (both hold the same KV; the chain continues through the cached one).  An entry of one of
 * seq's blocks that disagrees with tokens (stale) is replaced. */
void prefix_cache_insert(struct prefix_cache *pc, const int32_t *tokens, int n_computed,
                         const struct kv_seq_blocks *seq);

void prefix_cache_stats(const struct prefix_cache *pc, struct prefix_cache_stats *out);

/* Forgets every entry; parked blocks go back to the pool's free list.  Statistics are kept. */
void prefix_cache_clear(struct prefix_cache *pc);

/* Invariants: every entry's block and parent valid; map and entries agree (each entry reachable exactly once
 * from its home slot, nothing else in the map); the LRU is a well-linked list of exactly the pool's parked
 * blocks, each cached with refcount 0; every cached block with refcount 0 is parked.  prefix_cache_verify
 * returns CI_ERR_INTERNAL describing the first violation; prefix_cache_check aborts with it.  Neither
 * allocates.  kv_pool_verify/kv_pool_check run this too (hook). */
enum ci_status prefix_cache_verify(const struct prefix_cache *pc, struct ci_err *err);
void prefix_cache_check(const struct prefix_cache *pc);

/* Tests only: replaces the hash (NULL restores ci_hash_bytes), e.g. with a constant to force collisions.
 * Clears the cache, since existing keys were made with the old hash. */
void prefix_cache_set_hash_for_test(struct prefix_cache *pc,
                                    uint64_t (*fn)(uint64_t seed, const void *data, size_t n));

#endif
