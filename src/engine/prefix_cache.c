/* Prefix cache: entries indexed by block id (a block is cached at most once), an open-addressing map from
 * chain key to block id (linear probing, backward-shift deletion, so no tombstones build up), and an
 * intrusive LRU list of the parked blocks.  Semantics, ownership and the write rules are in prefix_cache.h.
 * The pool calls back into this module through the hooks registered at creation (park, evict, invalidate,
 * verify). */
#include "engine/prefix_cache.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"
#include "core/mem.h"

typedef uint64_t (*pc_hash_fn)(uint64_t seed, const void *data, size_t n);

struct pc_entry {
    uint64_t key;
    uint64_t serial;        // 0: block blk has no entry
    uint64_t parent_serial; // serial of the parent entry when this one was registered; 0 for a first block
    int32_t parent;         // block id of the parent entry, -1 for a first block
    int32_t prev, next;     // LRU links (-1 at the ends), meaningful while parked
    bool parked;            // in the LRU
};

struct prefix_cache {
    struct kv_pool *pool;
    int n_blocks, bs;
    struct pc_entry *e; // [n_blocks], indexed by block id
    int32_t *tokens;    // [n_blocks][bs]: the tokens of each cached block
    int32_t *slots;     // [map_mask + 1] block ids, -1 = empty
    size_t map_mask;    // map size - 1 (a power of two >= 2 * n_blocks, so the load stays <= 1/2)
    int32_t head, tail; // LRU: head = least recently parked, evicted first
    int n_cached, n_parked;
    uint64_t next_serial; // never reused, so a forgotten parent never matches again
    unsigned char *seen;  // [n_blocks] scratch for verify, so it does not allocate
    pc_hash_fn hash;      // a test's hash, else NULL
    int64_t queries, query_tokens, hit_blocks, evictions;
};

static size_t home(const struct prefix_cache *pc, uint64_t key) {
    return (size_t)(key ^ (key >> 32)) & pc->map_mask;
}

static const int32_t *toks_of(const struct prefix_cache *pc, int32_t blk) {
    return pc->tokens + (size_t)blk * (size_t)pc->bs;
}

/* The chain of core/hash.h (the one `cinfer router` computes too), unless a test set its own hash. */
static uint64_t block_key(const struct prefix_cache *pc, uint64_t prev, const int32_t *toks) {
    if (!pc->hash)
        return ci_hash_chain_step(prev, toks, pc->bs);
    return pc->hash(prev, toks, (size_t)pc->bs * sizeof *toks);
}

/* The entry for key whose stored tokens equal toks and whose parent is (parent, parent_serial), or -1.
 * Several entries may share a key (a collision): each is verified. */
static int32_t map_find(const struct prefix_cache *pc, uint64_t key, const int32_t *toks, int32_t parent,
                        uint64_t parent_serial) {
    size_t bytes = (size_t)pc->bs * sizeof *toks;
    for (size_t i = home(pc, key);; i = (i + 1) & pc->map_mask) {
        int32_t blk = pc->slots[i];
        if (blk < 0)
            return -1;
        const struct pc_entry *x = &pc->e[blk];
        if (x->key == key && x->parent == parent && x->parent_serial == parent_serial &&
            memcmp(toks_of(pc, blk), toks, bytes) == 0)
            return blk;
    }
}

static void map_put(struct prefix_cache *pc, int32_t blk) {
    size_t i = home(pc, pc->e[blk].key);
    while (pc->slots[i] >= 0)
        i = (i + 1) & pc->map_mask;
    pc->slots[i] = blk;
}

static void map_remove(struct prefix_cache *pc, int32_t blk) {
    size_t i = home(pc, pc->e[blk].key);
    while (pc->slots[i] != blk) {
        CI_ASSERT(pc->slots[i] >= 0); // an entry is always reachable from its home slot
        i = (i + 1) & pc->map_mask;
    }
    // Backward shift: pull later members of the cluster into the hole unless that would put them before
    // their home slot, so every entry stays reachable without tombstones.
    for (size_t j = (i + 1) & pc->map_mask;; j = (j + 1) & pc->map_mask) {
        int32_t b = pc->slots[j];
        if (b < 0)
            break;
        size_t h = home(pc, pc->e[b].key);
        // b stays if its home lies cyclically in (i, j].
        bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            pc->slots[i] = b;
            i = j;
        }
    }
    pc->slots[i] = -1;
}

static void lru_unlink(struct prefix_cache *pc, int32_t blk) {
    struct pc_entry *x = &pc->e[blk];
    CI_ASSERT(x->parked);
    if (x->prev >= 0)
        pc->e[x->prev].next = x->next;
    else
        pc->head = x->next;
    if (x->next >= 0)
        pc->e[x->next].prev = x->prev;
    else
        pc->tail = x->prev;
    x->prev = x->next = -1;
    x->parked = false;
    pc->n_parked--;
}

static void lru_push_tail(struct prefix_cache *pc, int32_t blk) {
    struct pc_entry *x = &pc->e[blk];
    CI_ASSERT(!x->parked);
    x->prev = pc->tail;
    x->next = -1;
    if (pc->tail >= 0)
        pc->e[pc->tail].next = blk;
    else
        pc->head = blk;
    pc->tail = blk;
    x->parked = true;
    pc->n_parked++;
}

/* Drops blk's entry (not parked: the caller unlinks it first and settles the block with the pool). */
static void forget(struct prefix_cache *pc, int32_t blk) {
    struct pc_entry *x = &pc->e[blk];
    CI_ASSERT(x->serial != 0 && !x->parked);
    map_remove(pc, blk);
    x->serial = 0;
    x->parent = -1;
    x->parent_serial = 0;
    pc->n_cached--;
}

static void remember(struct prefix_cache *pc, int32_t blk, uint64_t key, const int32_t *toks, int32_t parent,
                     uint64_t parent_serial) {
    struct pc_entry *x = &pc->e[blk];
    CI_ASSERT(x->serial == 0 && !x->parked);
    x->key = key;
    x->serial = pc->next_serial++;
    x->parent = parent;
    x->parent_serial = parent_serial;
    x->prev = x->next = -1;
    memcpy(pc->tokens + (size_t)blk * (size_t)pc->bs, toks, (size_t)pc->bs * sizeof *toks);
    map_put(pc, blk);
    pc->n_cached++;
}

/* An entry whose parent was forgotten (or re-registered) can never be matched again. */
static bool stale(const struct prefix_cache *pc, int32_t blk) {
    const struct pc_entry *x = &pc->e[blk];
    return x->parent >= 0 && pc->e[x->parent].serial != x->parent_serial;
}

static bool hook_park(void *ctx, int32_t blk) {
    struct prefix_cache *pc = ctx;
    if (pc->e[blk].serial == 0)
        return false;
    if (stale(pc, blk)) { // lazy cleanup of an unreachable descendant
        forget(pc, blk);
        return false;
    }
    lru_push_tail(pc, blk);
    return true;
}

static int32_t hook_evict(void *ctx) {
    struct prefix_cache *pc = ctx;
    int32_t blk = pc->head;
    if (blk < 0)
        return -1;
    lru_unlink(pc, blk);
    forget(pc, blk);
    pc->evictions++;
    return blk;
}

static void hook_invalidate(void *ctx, int32_t blk) {
    struct prefix_cache *pc = ctx;
    if (pc->e[blk].serial != 0)
        forget(pc, blk);
}

static enum ci_status hook_verify(void *ctx, struct ci_err *err) {
    return prefix_cache_verify(ctx, err);
}

static const struct kv_pool_cache_hooks hooks = {hook_park, hook_evict, hook_invalidate, hook_verify};

enum ci_status prefix_cache_create(struct kv_pool *pool, struct prefix_cache **out, struct ci_err *err) {
    struct prefix_cache *pc = NULL;
    enum ci_status st = CI_OK;
    *out = NULL;
    if (kv_pool_has_cache(pool))
        return ci_err_set(err, CI_ERR_INVALID, "prefix cache: the KV pool already has a cache");
    int nb = kv_pool_n_blocks(pool), bs = kv_pool_block_size(pool);
    size_t n_tok, tok_bytes, map_n = 1;
    while (map_n < 2 * (size_t)nb)
        map_n <<= 1;
    if (!ci_mul_size((size_t)nb, (size_t)bs, &n_tok) || !ci_mul_size(n_tok, sizeof(int32_t), &tok_bytes))
        return ci_err_set(err, CI_ERR_INVALID, "prefix cache: %d blocks x %d tokens overflows", nb, bs);
    pc = ci_calloc(1, sizeof *pc);
    if (!pc)
        return ci_err_set(err, CI_ERR_NOMEM, "prefix cache: out of memory");
    pc->pool = pool;
    pc->n_blocks = nb;
    pc->bs = bs;
    pc->e = ci_calloc((size_t)nb, sizeof *pc->e);
    pc->tokens = ci_malloc(tok_bytes);
    pc->slots = ci_malloc(map_n * sizeof *pc->slots); // map_n <= 4 * nb: fits
    pc->seen = ci_malloc((size_t)nb);
    if (!pc->e || !pc->tokens || !pc->slots || !pc->seen) {
        st = ci_err_set(err, CI_ERR_NOMEM,
                        "prefix cache: out of memory for the tables of %d blocks of %d tokens", nb, bs);
        goto fail;
    }
    for (int b = 0; b < nb; b++) {
        pc->e[b].parent = -1;
        pc->e[b].prev = pc->e[b].next = -1;
    }
    for (size_t i = 0; i < map_n; i++)
        pc->slots[i] = -1;
    pc->map_mask = map_n - 1;
    pc->head = pc->tail = -1;
    pc->next_serial = 1;
    pc->hash = NULL; // the chain of core/hash.h
    kv_pool_set_cache(pool, &hooks, pc);
    *out = pc;
    return CI_OK;
fail:
    ci_free(pc->e);
    ci_free(pc->tokens);
    ci_free(pc->slots);
    ci_free(pc->seen);
    ci_free(pc);
    return st;
}

void prefix_cache_free(struct prefix_cache *pc) {
    if (!pc)
        return;
    prefix_cache_clear(pc);
    kv_pool_set_cache(pc->pool, NULL, NULL);
    ci_free(pc->e);
    ci_free(pc->tokens);
    ci_free(pc->slots);
    ci_free(pc->seen);
    ci_free(pc);
}

void prefix_cache_clear(struct prefix_cache *pc) {
    for (int32_t b = 0; b < pc->n_blocks; b++) {
        if (pc->e[b].serial == 0)
            continue;
        if (pc->e[b].parked) {
            lru_unlink(pc, b);
            kv_pool_drop_parked(pc->pool, b);
        }
        forget(pc, b);
    }
}

int prefix_cache_match(struct prefix_cache *pc, const int32_t *tokens, int n_tokens,
                       struct kv_seq_blocks *seq) {
    CI_ASSERT(seq->n == 0 && n_tokens >= 0);
    pc->queries++;
    pc->query_tokens += n_tokens;
    // Never all tokens: the last one is always computed, and lies in a block that is not matched.
    int max = n_tokens > 0 ? (n_tokens - 1) / pc->bs : 0;
    if (max > seq->cap)
        max = seq->cap;
    uint64_t key = CI_HASH_CHAIN_SEED, parent_serial = 0;
    int32_t parent = -1;
    for (int i = 0; i < max; i++) {
        const int32_t *toks = tokens + (size_t)i * (size_t)pc->bs;
        key = block_key(pc, key, toks);
        int32_t blk = map_find(pc, key, toks, parent, parent_serial);
        if (blk < 0)
            break;
        if (pc->e[blk].parked) {
            lru_unlink(pc, blk);
            kv_pool_take_parked(pc->pool, blk);
        } else {
            kv_pool_ref(pc->pool, blk);
        }
        seq->ids[seq->n++] = blk;
        parent = blk;
        parent_serial = pc->e[blk].serial;
    }
    pc->hit_blocks += seq->n;
    return seq->n * pc->bs; // <= n_tokens - 1
}

void prefix_cache_insert(struct prefix_cache *pc, const int32_t *tokens, int n_computed,
                         const struct kv_seq_blocks *seq) {
    CI_ASSERT(n_computed >= 0 && kv_pool_blocks_for(pc->pool, n_computed) <= seq->n);
    int n_full = n_computed / pc->bs;
    uint64_t key = CI_HASH_CHAIN_SEED, parent_serial = 0;
    int32_t parent = -1;
    for (int i = 0; i < n_full; i++) {
        const int32_t *toks = tokens + (size_t)i * (size_t)pc->bs;
        int32_t blk = seq->ids[i];
        key = block_key(pc, key, toks);
        int32_t found = map_find(pc, key, toks, parent, parent_serial);
        if (blk < 0) { // given back early (sliding window): the chain goes on through the cached copy, if any
            if (found < 0)
                break;
            parent = found;
            parent_serial = pc->e[found].serial;
            continue;
        }
        if (found != blk && pc->e[blk].serial != 0) {
            // blk's entry describes other content than the caller says blk holds (its chain was forgotten
            // and re-registered, or it was cached elsewhere): the caller's word wins.  blk is referenced by
            // seq, so it is not parked.  A block that is its own parent can only come from a table that
            // breaks the contract; stop rather than build a cycle.
            if (blk == parent)
                break;
            forget(pc, blk);
        }
        if (found < 0) {
            remember(pc, blk, key, toks, parent, parent_serial);
            found = blk;
        }
        parent = found;
        parent_serial = pc->e[found].serial;
    }
}

void prefix_cache_stats(const struct prefix_cache *pc, struct prefix_cache_stats *out) {
    out->queries = pc->queries;
    out->query_tokens = pc->query_tokens;
    out->hit_blocks = pc->hit_blocks;
    out->hit_tokens = pc->hit_blocks * pc->bs;
    out->evictions = pc->evictions;
    out->n_cached = pc->n_cached;
    out->n_parked = pc->n_parked;
}

void prefix_cache_set_hash_for_test(struct prefix_cache *pc,
                                    uint64_t (*fn)(uint64_t seed, const void *data, size_t n)) {
    prefix_cache_clear(pc);
    pc->hash = fn; // NULL: back to the chain of core/hash.h
}

enum ci_status prefix_cache_verify(const struct prefix_cache *pc, struct ci_err *err) {
    int nb = pc->n_blocks, n_entries = 0, n_parked_flags = 0;
    for (int32_t b = 0; b < nb; b++) {
        const struct pc_entry *x = &pc->e[b];
        bool pool_parked = kv_pool_is_parked(pc->pool, b);
        int rc = kv_pool_refcount(pc->pool, b);
        pc->seen[b] = 0;
        if (x->serial == 0) {
            if (x->parked || pool_parked)
                return ci_err_set(err, CI_ERR_INTERNAL,
                                  "prefix cache check: block %" PRId32 " is parked without an entry", b);
            continue;
        }
        n_entries++;
        n_parked_flags += x->parked;
        if (x->serial >= pc->next_serial)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: block %" PRId32 " has serial %" PRIu64 " >= next %" PRIu64,
                              b, x->serial, pc->next_serial);
        if (x->parent < -1 || x->parent >= nb || x->parent == b ||
            (x->parent == -1) != (x->parent_serial == 0) || x->parent_serial >= pc->next_serial)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: block %" PRId32 " has bad parent %" PRId32
                              " (serial %" PRIu64 ")",
                              b, x->parent, x->parent_serial);
        if (x->parked != pool_parked)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: block %" PRId32
                              " is %sin the LRU but %sparked in the pool",
                              b, x->parked ? "" : "not ", pool_parked ? "" : "not ");
        if (x->parked ? rc != 0 : rc == 0)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: cached block %" PRId32 " has refcount %d but is %sparked",
                              b, rc, x->parked ? "" : "not ");
    }
    if (n_entries != pc->n_cached || n_parked_flags != pc->n_parked ||
        pc->n_parked != kv_pool_n_parked(pc->pool))
        return ci_err_set(err, CI_ERR_INTERNAL,
                          "prefix cache check: %d entries (count %d), %d parked (count %d, pool %d)",
                          n_entries, pc->n_cached, n_parked_flags, pc->n_parked, kv_pool_n_parked(pc->pool));
    // The map holds each entry exactly once, reachable from its home slot, and nothing else.
    int n_slots = 0;
    for (size_t i = 0; i <= pc->map_mask; i++) {
        int32_t b = pc->slots[i];
        if (b < 0)
            continue;
        if (b >= nb || pc->e[b].serial == 0)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: map slot %zu holds %" PRId32 ", which has no entry", i, b);
        if (pc->seen[b]++)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "prefix cache check: block %" PRId32 " is in the map twice", b);
        for (size_t j = home(pc, pc->e[b].key); j != i; j = (j + 1) & pc->map_mask)
            if (pc->slots[j] < 0)
                return ci_err_set(
                    err, CI_ERR_INTERNAL,
                    "prefix cache check: block %" PRId32 " in slot %zu is unreachable from its home", b, i);
        n_slots++;
    }
    if (n_slots != pc->n_cached)
        return ci_err_set(err, CI_ERR_INTERNAL, "prefix cache check: map holds %d blocks, %d entries",
                          n_slots, pc->n_cached);
    // The LRU links exactly the parked entries (each parked flag was counted above).
    int n_lru = 0;
    int32_t prev = -1;
    for (int32_t b = pc->head; b >= 0; prev = b, b = pc->e[b].next) {
        if (b >= nb || !pc->e[b].parked || pc->e[b].prev != prev || ++n_lru > pc->n_parked)
            return ci_err_set(err, CI_ERR_INTERNAL, "prefix cache check: LRU broken at block %" PRId32, b);
    }
    if (prev != pc->tail || n_lru != pc->n_parked)
        return ci_err_set(err, CI_ERR_INTERNAL,
                          "prefix cache check: LRU holds %d blocks, %d parked (tail %" PRId32
                          ", last %" PRId32 ")",
                          n_lru, pc->n_parked, pc->tail, prev);
    return CI_OK;
}

void prefix_cache_check(const struct prefix_cache *pc) {
    struct ci_err err = {0};
    if (prefix_cache_verify(pc, &err) != CI_OK) {
        fprintf(stderr, "%s\n", err.msg);
        CI_ASSERT(!"prefix_cache_check failed");
    }
}
