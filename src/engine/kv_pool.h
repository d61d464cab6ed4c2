/* Paged KV storage: a fixed pool of KV blocks with reference counts, a free list, copy-on-write, and the
 * per-sequence block tables that point into it.  Owned by the engine thread (no locks inside).
 *
 * Memory: one 64-byte aligned allocation made at creation and never resized.  For each layer il it holds a
 * K array and a V array, each [n_blocks][n_kv_head][block_size] rows of head_dim elements of the element type
 * (the layout the attention kernel reads, see struct ci_kv_layer / ci_kv_offset in kernels/kernels.h):
 *
 *     row_bytes   = head_dim * 4 (f32), head_dim * 2 (f16), head_dim / 32 * 34 (q8_0, head_dim % 32 == 0)
 *     array_bytes = round_up(n_blocks * n_kv_head * block_size * row_bytes, 64)
 *     K of layer il starts at byte (2*il + 0) * array_bytes of the allocation
 *     V of layer il starts at byte (2*il + 1) * array_bytes
 *     total bytes  = 2 * n_layers * array_bytes
 *
 * so the allocation is [n_layers][2 (K, V)][n_blocks][n_kv_head][block_size][row_bytes] (plus padding to 64
 * bytes after each array).  Token position p of a sequence lives in block seq->ids[p / block_size], slot
 * p % block_size.  The memory is not cleared: a slot holds garbage until the forward pass writes it.
 *
 * Blocks: ids 0..n_blocks-1.  A free block has refcount 0 and sits on the free list (a LIFO stack, filled so
 * that a fresh pool hands out 0, 1, 2, ...; everything is deterministic).  kv_pool_alloc takes one with
 * refcount 1; kv_pool_ref shares it (fork, prefix reuse); kv_pool_unref returns it to the free list at 0
 * (or parks it, see below).
 * A block with refcount > 1 is read-only: kv_seq_prepare_write gives the writer a private copy first.
 *
 * Prefix cache hooks (kv_pool_set_cache): a cache attached to the pool holds no references.  When a block's
 * refcount reaches 0 the pool asks the cache (park) whether to keep it; a kept block is "parked": refcount 0,
 * not on the free list, owned by the cache until the cache hands it back (kv_pool_take_parked on a hit,
 * kv_pool_drop_parked when it forgets it) or kv_pool_alloc finds the free list empty and asks the cache to
 * evict one (evict).  Parked blocks are as good as free for allocation, so the all-or-nothing checks of
 * kv_seq_reserve and kv_seq_prepare_write count kv_pool_n_available() = free + parked.  A block the cache
 * knows, held by a single table (refcount 1) and about to be overwritten in place (kv_seq_prepare_write after
 * a shrink into it), is reported first (invalidate), so the cache never describes KV that has changed.
 * Without a cache everything behaves as before: nothing is ever parked.
 *
 * Sizes and ids are validated with a status at creation (outside configuration); misuse at run time (a bad
 * id, a refcount underflow) is an internal bug and aborts through CI_ASSERT. */
#ifndef CINFER_ENGINE_KV_POOL_H
#define CINFER_ENGINE_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct kv_pool;
struct ci_kv_layer;

struct kv_pool_params {
    int n_layers;
    int n_kv_head;
    int head_dim;
    int block_size; // tokens per block
    int n_blocks;
    uint32_t type; // KV element type: CI_TYPE_F32 (0, the default), CI_TYPE_F16 or CI_TYPE_Q8_0
};

/* KV element type names as the CLI spells them: "f32", "f16", "q8_0".  parse: false for anything else. */
bool kv_type_parse(const char *name, uint32_t *type);
const char *kv_type_name(uint32_t type); // "?" for a type that is not a KV type

/* CI_ERR_INVALID for non-positive dimensions, a type that is not a KV type, q8_0 with head_dim not a multiple
 * of 32, or a total size that overflows, CI_ERR_NOMEM when the allocation
 * fails.  The pool is freed with kv_pool_free (NULL is fine). */
enum ci_status kv_pool_create(const struct kv_pool_params *p, struct kv_pool **out, struct ci_err *err);
void kv_pool_free(struct kv_pool *pool);

/* Bytes the pool would allocate for p (K and V of all layers, with padding), or CI_ERR_INVALID as create. */
/* K and V of every layer for one token in a cache of element type `type`: 2 · layers · kv_heads · the bytes
 * of head_dim elements of that type (4, 2 or 34/32 an element).  The one place this is computed. */
int64_t kv_bytes_per_token(int n_layer, int n_kv_head, int head_dim, uint32_t type);
enum ci_status kv_pool_size_bytes(const struct kv_pool_params *p, size_t *out, struct ci_err *err);

/* The attention kernel's view of layer il (0 <= il < n_layers). */
void kv_pool_layer(const struct kv_pool *pool, int il, struct ci_kv_layer *out);

int kv_pool_block_size(const struct kv_pool *pool);
int kv_pool_n_blocks(const struct kv_pool *pool);
int kv_pool_n_layers(const struct kv_pool *pool);
uint32_t kv_pool_type(const struct kv_pool *pool);
/* Blocks on the free list (refcount 0, owned by nobody).  Parked blocks are not counted: use
 * kv_pool_n_available for "how many blocks can still be allocated". */
int kv_pool_n_free(const struct kv_pool *pool);
/* Refcount-0 blocks the attached cache keeps (0 without a cache). */
int kv_pool_n_parked(const struct kv_pool *pool);
/* Blocks kv_pool_alloc can still hand out: free + parked (a parked block is evicted on demand). */
int kv_pool_n_available(const struct kv_pool *pool);
/* Whole allocation, and K+V of one block over all layers (2 * n_layers * n_kv_head * block_size * row_bytes:
 * the unit the free list counts, without the per-array padding). */
size_t kv_pool_bytes(const struct kv_pool *pool);
size_t kv_pool_bytes_per_block(const struct kv_pool *pool);
/* Blocks needed to hold n_tokens positions: ceil(n_tokens / block_size). */
int64_t kv_pool_blocks_for(const struct kv_pool *pool, int64_t n_tokens);

/* A free block with refcount 1; when the free list is empty, the block the cache evicts (its least recently
 * used parked block); -1 when neither exists. */
int32_t kv_pool_alloc(struct kv_pool *pool);
/* Shares a live block (refcount >= 1): refcount++. */
void kv_pool_ref(struct kv_pool *pool, int32_t blk);
/* refcount--; at 0 the block is parked if the attached cache wants it, else it goes back on top of the free
 * list. */
void kv_pool_unref(struct kv_pool *pool, int32_t blk);
int kv_pool_refcount(const struct kv_pool *pool, int32_t blk);
/* Copies slots [0, n_slots) of every KV head of every layer, K and V, from block src to block dst. */
void kv_pool_copy_block(struct kv_pool *pool, int32_t dst, int32_t src, int n_slots);

/* Tensor parallelism (engine/tp.c): fn(ctx, dst, src, n_slots) runs on every kv_pool_copy_block that copies
 * something, so the other ranks can repeat it on their own pools (which hold their own KV heads).  NULL: off. */
typedef void (*kv_pool_copy_hook)(void *ctx, int32_t dst, int32_t src, int n_slots);
void kv_pool_set_copy_hook(struct kv_pool *pool, kv_pool_copy_hook fn, void *ctx);

/* The cache side of parking (see the header comment).  The hooks run inside kv_pool calls and must not call
 * back into the pool, except verify, which may read it.  ctx is the cache. */
struct kv_pool_cache_hooks {
    /* blk's refcount just reached 0.  true: the cache keeps it parked; false: it goes on the free list. */
    bool (*park)(void *ctx, int32_t blk);
    /* The free list is empty and a block is wanted: the cache forgets one of its parked blocks and returns it
     * (the pool hands it out with refcount 1), or returns -1 when it has none parked. */
    int32_t (*evict)(void *ctx);
    /* blk (refcount 1, not parked) is about to be overwritten in place by its only holder: the cache must
     * forget what it knew of blk's content.  May be NULL. */
    void (*invalidate)(void *ctx, int32_t blk);
    /* Called at the end of kv_pool_verify to check the cache's invariants against the pool; must not
     * allocate.  May be NULL. */
    enum ci_status (*verify)(void *ctx, struct ci_err *err);
};

/* Attaches a cache (hooks copied; ctx passed to each hook) or detaches it (hooks NULL).  At most one cache
 * per pool; nothing may be parked when the cache changes (the cache drops its parked blocks before
 * detaching). Misuse aborts. */
void kv_pool_set_cache(struct kv_pool *pool, const struct kv_pool_cache_hooks *hooks, void *ctx);
bool kv_pool_has_cache(const struct kv_pool *pool);
/* For the attached cache only.  is_parked: whether blk is parked.  take_parked: a parked block is reused by a
 * hit (refcount 0 -> 1, no longer parked).  drop_parked: the cache forgets a parked block; it goes on top of
 * the free list. */
bool kv_pool_is_parked(const struct kv_pool *pool, int32_t blk);
void kv_pool_take_parked(struct kv_pool *pool, int32_t blk);
void kv_pool_drop_parked(struct kv_pool *pool, int32_t blk);

/* A sequence's block table: ids[i] holds positions [i*block_size, (i+1)*block_size).  Each entry is one
 * reference on its block, or -1: a hole, a block given back early because no future query can see its
 * positions (kv_seq_drop_front: sliding-window models).  Holes only ever precede live entries.  The array is allocated once (kv_seq_init) for the most blocks the sequence may
 * ever need, so the per-step functions below never allocate. */
struct kv_seq_blocks {
    int32_t *ids; // [cap]
    int n;        // entries in use
    int cap;
};

/* Empty table with room for max_blocks entries (CI_ERR_INVALID if max_blocks < 0, CI_ERR_NOMEM). */
enum ci_status kv_seq_init(struct kv_seq_blocks *seq, int max_blocks, struct ci_err *err);
/* Frees the array; the table must have been released first (n == 0). */
void kv_seq_deinit(struct kv_seq_blocks *seq);

/* Makes the table cover positions [0, n_tokens_total), allocating blocks at the end.  CI_ERR_LIMIT, with
 * nothing changed, when the table's capacity or the available (free + parked) blocks are not enough (all or
 * nothing). */
enum ci_status kv_seq_reserve(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total);
/* Drops (unrefs) the blocks past those needed for n_tokens_total positions. */
void kv_seq_shrink(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total);
/* Copy-on-write before writing positions [pos_from, pos_to) (which must be covered by the table): every
 * block of that range with refcount > 1 is replaced by a private copy of all its slots, and the shared
 * original unref'ed.  CI_ERR_LIMIT, with nothing changed, if there are not enough available (free + parked)
 * blocks for all the copies.  A block of the range with refcount 1 is written in place; the attached cache
 * is told first (invalidate), since that only happens after a shrink into a block it may have cached. */
enum ci_status kv_seq_prepare_write(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t pos_from,
                                    int64_t pos_to);
/* Gives back the first n_front entries' blocks (unref, the entries become holes, -1): positions no query of
 * the sequence will read again (all layers' sliding windows have passed them).  n stays; entries already
 * holes are skipped.  Returns how many blocks were unref'ed. */
int kv_seq_drop_front(struct kv_pool *pool, struct kv_seq_blocks *seq, int n_front);
/* Entries of the table that hold a block (n minus the holes). */
int kv_seq_n_live(const struct kv_seq_blocks *seq);
/* Unrefs every block, last first; n becomes 0. */
void kv_seq_release(struct kv_pool *pool, struct kv_seq_blocks *seq);
/* dst (empty) shares all of src's blocks (ref each; holes stay holes).  CI_ERR_LIMIT if dst's capacity is too
 * small. */
enum ci_status kv_seq_fork(struct kv_pool *pool, struct kv_seq_blocks *dst, const struct kv_seq_blocks *src);

/* Invariant check: re-derives every block's refcount from the live block tables seqs[0..n_seqs) plus
 * extra_refs ([n_blocks] references held elsewhere, or NULL) and compares with the pool's; checks that each
 * refcount-0 block is either on the free list exactly once or parked (never both), that the free list holds
 * nothing else and that only refcount-0 blocks are parked; then runs the attached cache's verify hook (the
 * cache checks its own structures and that its parked set is exactly the pool's).  kv_pool_verify returns
 * CI_ERR_INTERNAL with the first mismatch described in err; kv_pool_check aborts with that message (run it
 * after every step in test and debug builds).  Neither allocates. */
enum ci_status kv_pool_verify(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                              const int32_t *extra_refs, struct ci_err *err);
void kv_pool_check(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                   const int32_t *extra_refs);

#endif
