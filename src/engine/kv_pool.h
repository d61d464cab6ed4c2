/* Paged KV storage: a fixed pool of KV blocks with reference counts, a free list, copy-on-write, and the
 * per-sequence block tables that point into it.  Owned by the engine thread (no locks inside).
 *
 * Memory: one 64-byte aligned allocation made at creation and never resized.  For each layer il it holds a
 * K array and a V array, each [n_blocks][n_kv_head][block_size][head_dim] floats (the layout the attention
 * kernel reads, see struct ci_kv_layer / ci_kv_offset in kernels/kernels.h):
 *
 *     array_bytes = round_up(n_blocks * n_kv_head * block_size * head_dim * sizeof(float), 64)
 *     K of layer il starts at byte (2*il + 0) * array_bytes of the allocation
 *     V of layer il starts at byte (2*il + 1) * array_bytes
 *     total bytes  = 2 * n_layers * array_bytes
 *
 * so the allocation is [n_layers][2 (K, V)][n_blocks][n_kv_head][block_size][head_dim] (plus padding to 64
 * bytes after each array).  Token position p of a sequence lives in block seq->ids[p / block_size], slot
 * p % block_size.  The memory is not cleared: a slot holds garbage until the forward pass writes it.
 *
 * Blocks: ids 0..n_blocks-1.  A free block has refcount 0 and sits on the free list (a LIFO stack, filled so
 * that a fresh pool hands out 0, 1, 2, ...; everything is deterministic).  kv_pool_alloc takes one with
 * refcount 1; kv_pool_ref shares it (fork, prefix reuse); kv_pool_unref returns it to the free list at 0.
 * A block with refcount > 1 is read-only: kv_seq_prepare_write gives the writer a private copy first.
 *
 * TODO(prefix_cache): the cache will hold no references; an unreferenced cached block will sit in the cache's
 * LRU instead of the free list, and alloc will evict from that LRU when the free list is empty.  Both hooks
 * go into kv_pool_alloc (empty stack) and kv_pool_unref (refcount reaching 0), which are kept tiny for that.
 *
 * Sizes and ids are validated with a status at creation (outside configuration); misuse at run time (a bad
 * id, a refcount underflow) is an internal bug and aborts through CI_ASSERT. */
#ifndef CINFER_ENGINE_KV_POOL_H
#define CINFER_ENGINE_KV_POOL_H

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
};

/* CI_ERR_INVALID for non-positive dimensions or a total size that overflows, CI_ERR_NOMEM when the allocation
 * fails.  The pool is freed with kv_pool_free (NULL is fine). */
enum ci_status kv_pool_create(const struct kv_pool_params *p, struct kv_pool **out, struct ci_err *err);
void kv_pool_free(struct kv_pool *pool);

/* Bytes the pool would allocate for p (K and V of all layers, with padding), or CI_ERR_INVALID as create. */
enum ci_status kv_pool_size_bytes(const struct kv_pool_params *p, size_t *out, struct ci_err *err);

/* The attention kernel's view of layer il (0 <= il < n_layers). */
void kv_pool_layer(const struct kv_pool *pool, int il, struct ci_kv_layer *out);

int kv_pool_block_size(const struct kv_pool *pool);
int kv_pool_n_blocks(const struct kv_pool *pool);
int kv_pool_n_layers(const struct kv_pool *pool);
int kv_pool_n_free(const struct kv_pool *pool);
/* Whole allocation, and K+V of one block over all layers (2 * n_layers * n_kv_head * block_size * head_dim
 * floats: the unit the free list counts, without the per-array padding). */
size_t kv_pool_bytes(const struct kv_pool *pool);
size_t kv_pool_bytes_per_block(const struct kv_pool *pool);
/* Blocks needed to hold n_tokens positions: ceil(n_tokens / block_size). */
int64_t kv_pool_blocks_for(const struct kv_pool *pool, int64_t n_tokens);

/* A free block with refcount 1, or -1 when none is free. */
int32_t kv_pool_alloc(struct kv_pool *pool);
/* Shares a live block (refcount >= 1): refcount++. */
void kv_pool_ref(struct kv_pool *pool, int32_t blk);
/* refcount--; at 0 the block goes back on top of the free list. */
void kv_pool_unref(struct kv_pool *pool, int32_t blk);
int kv_pool_refcount(const struct kv_pool *pool, int32_t blk);
/* Copies slots [0, n_slots) of every KV head of every layer, K and V, from block src to block dst. */
void kv_pool_copy_block(struct kv_pool *pool, int32_t dst, int32_t src, int n_slots);

/* A sequence's block table: ids[i] holds positions [i*block_size, (i+1)*block_size).  Each entry is one
 * reference on its block.  The array is allocated once (kv_seq_init) for the most blocks the sequence may
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
 * nothing changed, when the table's capacity or the free blocks are not enough (all or nothing). */
enum ci_status kv_seq_reserve(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total);
/* Drops (unrefs) the blocks past those needed for n_tokens_total positions. */
void kv_seq_shrink(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total);
/* Copy-on-write before writing positions [pos_from, pos_to) (which must be covered by the table): every
 * block of that range with refcount > 1 is replaced by a private copy of all its slots, and the shared
 * original unref'ed.  CI_ERR_LIMIT, with nothing changed, if there are not enough free blocks for all the
 * copies. */
enum ci_status kv_seq_prepare_write(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t pos_from,
                                    int64_t pos_to);
/* Unrefs every block, last first; n becomes 0. */
void kv_seq_release(struct kv_pool *pool, struct kv_seq_blocks *seq);
/* dst (empty) shares all of src's blocks (ref each).  CI_ERR_LIMIT if dst's capacity is too small. */
enum ci_status kv_seq_fork(struct kv_pool *pool, struct kv_seq_blocks *dst, const struct kv_seq_blocks *src);

/* Invariant check: re-derives every block's refcount from the live block tables seqs[0..n_seqs) plus
 * extra_refs ([n_blocks] references held elsewhere, or NULL) and compares with the pool's; checks that the
 * free list holds each refcount-0 block exactly once and nothing else.  kv_pool_verify returns
 * CI_ERR_INTERNAL with the first mismatch described in err; kv_pool_check aborts with that message (run it
 * after every step in test and debug builds).  Neither allocates. */
enum ci_status kv_pool_verify(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                              const int32_t *extra_refs, struct ci_err *err);
void kv_pool_check(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                   const int32_t *extra_refs);

#endif
