/* Paged KV block pool: one aligned allocation of K/V arrays, refcounts, a LIFO free list, the parking hooks
 * of an attached prefix cache, copy-on-write and the invariant checker.  Layout and ownership rules are in
 * kv_pool.h. */
#include "engine/kv_pool.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "kernels/kernels.h"

struct kv_pool {
    struct kv_pool_params p;
    unsigned char *mem;      // [n_layers][2][array_bytes], 64-byte aligned
    size_t array_bytes;      // one layer's K (or V) array, padded to 64 bytes
    size_t bytes;            // whole allocation
    size_t row_bytes;        // one slot of one KV head (head_dim elements of the type)
    size_t head_block_bytes; // block_size * row_bytes: one KV head's slots in one block
    int32_t *refcount;       // [n_blocks]
    int32_t *free_stack;     // [n_blocks] free ids; top is free_stack[n_free - 1]
    int n_free;
    int32_t *scratch; // [n_blocks] for kv_pool_verify, so the check does not allocate
    // The attached cache (has_cache) and the blocks it keeps: parked[b] = 1 for a parked block.
    struct kv_pool_cache_hooks hooks;
    void *cache_ctx;
    bool has_cache;
    unsigned char *parked; // [n_blocks]
    int n_parked;
    kv_pool_copy_hook copy_hook; // tensor parallelism: the other ranks repeat every copy (NULL: none)
    void *copy_ctx;
};

void kv_pool_set_copy_hook(struct kv_pool *pool, kv_pool_copy_hook fn, void *ctx) {
    pool->copy_hook = fn;
    pool->copy_ctx = ctx;
}

static enum ci_status sizes(const struct kv_pool_params *p, size_t *array_bytes, size_t *total,
                            struct ci_err *err) {
    if (!p || p->n_layers <= 0 || p->n_kv_head <= 0 || p->head_dim <= 0 || p->block_size <= 0 ||
        p->n_blocks <= 0)
        return ci_err_set(
            err, CI_ERR_INVALID,
            "KV pool: every dimension must be positive (n_layers %d, n_kv_head %d, head_dim %d, "
            "block_size %d, n_blocks %d)",
            p ? p->n_layers : 0, p ? p->n_kv_head : 0, p ? p->head_dim : 0, p ? p->block_size : 0,
            p ? p->n_blocks : 0);
    size_t n = ci_kv_row_bytes(p->type, p->head_dim), arr, tot;
    if (!n)
        return ci_err_set(err, CI_ERR_INVALID,
                          p->type == CI_TYPE_Q8_0
                              ? "KV pool: KV type q8_0 needs head_dim a multiple of 32 (head_dim is %d)"
                              : "KV pool: unsupported KV element type for head_dim %d (f32, f16 or q8_0)",
                          p->head_dim);
    bool ok = ci_mul_size(n, (size_t)p->n_blocks, &n) && ci_mul_size(n, (size_t)p->n_kv_head, &n) &&
              ci_mul_size(n, (size_t)p->block_size, &n) && ci_add_size(n, 63, &arr);
    if (ok) {
        arr = arr / 64 * 64;
        ok = ci_mul_size(arr, 2, &tot) && ci_mul_size(tot, (size_t)p->n_layers, &tot);
    }
    if (!ok)
        return ci_err_set(
            err, CI_ERR_INVALID,
            "KV pool: size of %d layers x %d blocks x %d KV heads x %d slots x %d dims overflows",
            p->n_layers, p->n_blocks, p->n_kv_head, p->block_size, p->head_dim);
    *array_bytes = arr;
    *total = tot;
    return CI_OK;
}

int64_t kv_bytes_per_token(int n_layer, int n_kv_head, int head_dim, uint32_t type) {
    return 2ll * n_layer * n_kv_head * (int64_t)ci_kv_row_bytes(type, head_dim);
}

enum ci_status kv_pool_size_bytes(const struct kv_pool_params *p, size_t *out, struct ci_err *err) {
    size_t arr;
    return sizes(p, &arr, out, err);
}

enum ci_status kv_pool_create(const struct kv_pool_params *p, struct kv_pool **out, struct ci_err *err) {
    struct kv_pool *pool = NULL;
    size_t arr, total;
    enum ci_status st = sizes(p, &arr, &total, err);
    *out = NULL;
    if (st != CI_OK)
        goto fail;
    pool = ci_calloc(1, sizeof *pool);
    if (!pool) {
        st = ci_err_set(err, CI_ERR_NOMEM, "KV pool: out of memory");
        goto fail;
    }
    pool->p = *p;
    pool->array_bytes = arr;
    pool->bytes = total;
    pool->row_bytes = ci_kv_row_bytes(p->type, p->head_dim);
    pool->head_block_bytes = (size_t)p->block_size * pool->row_bytes; // divides a checked product
    pool->mem = ci_malloc_aligned(total);
    pool->refcount = ci_calloc((size_t)p->n_blocks, sizeof *pool->refcount);
    pool->free_stack = ci_malloc((size_t)p->n_blocks * sizeof *pool->free_stack);
    pool->scratch = ci_malloc((size_t)p->n_blocks * sizeof *pool->scratch);
    pool->parked = ci_calloc((size_t)p->n_blocks, sizeof *pool->parked);
    if (!pool->mem || !pool->refcount || !pool->free_stack || !pool->scratch || !pool->parked) {
        st = ci_err_set(err, CI_ERR_NOMEM, "KV pool: out of memory for %zu bytes (%d blocks)", total,
                        p->n_blocks);
        goto fail;
    }
    // Highest id at the bottom so a fresh pool hands out 0, 1, 2, ...
    for (int i = 0; i < p->n_blocks; i++)
        pool->free_stack[i] = p->n_blocks - 1 - i;
    pool->n_free = p->n_blocks;
    *out = pool;
    return CI_OK;
fail:
    kv_pool_free(pool);
    return st;
}

void kv_pool_free(struct kv_pool *pool) {
    if (!pool)
        return;
    ci_free_aligned(pool->mem);
    ci_free(pool->refcount);
    ci_free(pool->free_stack);
    ci_free(pool->scratch);
    ci_free(pool->parked);
    ci_free(pool);
}

static unsigned char *array_base(const struct kv_pool *pool, int il, int is_v) {
    return pool->mem + (2 * (size_t)il + (size_t)is_v) * pool->array_bytes;
}

bool kv_type_parse(const char *name, uint32_t *type) {
    static const struct {
        const char *name;
        uint32_t type;
    } names[] = {{"f32", CI_TYPE_F32}, {"f16", CI_TYPE_F16}, {"q8_0", CI_TYPE_Q8_0}};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++) {
        if (!strcmp(name, names[i].name)) {
            *type = names[i].type;
            return true;
        }
    }
    return false;
}

const char *kv_type_name(uint32_t type) {
    return type == CI_TYPE_F32 ? "f32" : type == CI_TYPE_F16 ? "f16" : type == CI_TYPE_Q8_0 ? "q8_0" : "?";
}

void kv_pool_layer(const struct kv_pool *pool, int il, struct ci_kv_layer *out) {
    CI_ASSERT(il >= 0 && il < pool->p.n_layers);
    out->k = array_base(pool, il, 0);
    out->v = array_base(pool, il, 1);
    out->block_size = pool->p.block_size;
    out->n_kv_head = pool->p.n_kv_head;
    out->head_dim = pool->p.head_dim;
    out->type = pool->p.type;
    out->row_bytes = pool->row_bytes;
}

int kv_pool_block_size(const struct kv_pool *pool) {
    return pool->p.block_size;
}

int kv_pool_n_blocks(const struct kv_pool *pool) {
    return pool->p.n_blocks;
}

int kv_pool_n_layers(const struct kv_pool *pool) {
    return pool->p.n_layers;
}

uint32_t kv_pool_type(const struct kv_pool *pool) {
    return pool->p.type;
}

int kv_pool_n_free(const struct kv_pool *pool) {
    return pool->n_free;
}

int kv_pool_n_parked(const struct kv_pool *pool) {
    return pool->n_parked;
}

int kv_pool_n_available(const struct kv_pool *pool) {
    return pool->n_free + pool->n_parked; // both <= n_blocks, disjoint
}

size_t kv_pool_bytes(const struct kv_pool *pool) {
    return pool->bytes;
}

size_t kv_pool_bytes_per_block(const struct kv_pool *pool) {
    // Fits: it is at most total / n_blocks.
    return 2 * (size_t)pool->p.n_layers * (size_t)pool->p.n_kv_head * pool->head_block_bytes;
}

int64_t kv_pool_blocks_for(const struct kv_pool *pool, int64_t n_tokens) {
    CI_ASSERT(n_tokens >= 0);
    return n_tokens / pool->p.block_size + (n_tokens % pool->p.block_size != 0);
}

static void check_id(const struct kv_pool *pool, int32_t blk) {
    CI_ASSERT(blk >= 0 && blk < pool->p.n_blocks);
}

int32_t kv_pool_alloc(struct kv_pool *pool) {
    int32_t blk;
    if (pool->n_free > 0) {
        blk = pool->free_stack[--pool->n_free];
    } else if (pool->n_parked > 0) {
        // Only the cache knows its eviction order; the pool checks that what it returns was parked.
        blk = pool->hooks.evict(pool->cache_ctx);
        check_id(pool, blk);
        CI_ASSERT(pool->parked[blk]);
        pool->parked[blk] = 0;
        pool->n_parked--;
    } else {
        return -1;
    }
    CI_ASSERT(pool->refcount[blk] == 0);
    pool->refcount[blk] = 1;
    return blk;
}

void kv_pool_ref(struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    CI_ASSERT(pool->refcount[blk] > 0 && pool->refcount[blk] < INT32_MAX);
    pool->refcount[blk]++;
}

void kv_pool_unref(struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    CI_ASSERT(pool->refcount[blk] > 0);
    if (--pool->refcount[blk] == 0) {
        if (pool->has_cache && pool->hooks.park(pool->cache_ctx, blk)) {
            pool->parked[blk] = 1;
            pool->n_parked++;
            return;
        }
        CI_ASSERT(pool->n_free < pool->p.n_blocks);
        pool->free_stack[pool->n_free++] = blk;
    }
}

int kv_pool_refcount(const struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    return pool->refcount[blk];
}

void kv_pool_set_cache(struct kv_pool *pool, const struct kv_pool_cache_hooks *hooks, void *ctx) {
    CI_ASSERT(pool->n_parked == 0);
    if (!hooks) {
        pool->has_cache = false;
        memset(&pool->hooks, 0, sizeof pool->hooks);
        pool->cache_ctx = NULL;
        return;
    }
    CI_ASSERT(!pool->has_cache && hooks->park && hooks->evict);
    pool->hooks = *hooks;
    pool->cache_ctx = ctx;
    pool->has_cache = true;
}

bool kv_pool_has_cache(const struct kv_pool *pool) {
    return pool->has_cache;
}

bool kv_pool_is_parked(const struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    return pool->parked[blk] != 0;
}

void kv_pool_take_parked(struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    CI_ASSERT(pool->parked[blk] && pool->refcount[blk] == 0);
    pool->parked[blk] = 0;
    pool->n_parked--;
    pool->refcount[blk] = 1;
}

void kv_pool_drop_parked(struct kv_pool *pool, int32_t blk) {
    check_id(pool, blk);
    CI_ASSERT(pool->parked[blk] && pool->refcount[blk] == 0);
    pool->parked[blk] = 0;
    pool->n_parked--;
    CI_ASSERT(pool->n_free < pool->p.n_blocks);
    pool->free_stack[pool->n_free++] = blk;
}

void kv_pool_copy_block(struct kv_pool *pool, int32_t dst, int32_t src, int n_slots) {
    check_id(pool, dst);
    check_id(pool, src);
    CI_ASSERT(n_slots >= 0 && n_slots <= pool->p.block_size);
    if (dst == src || n_slots == 0)
        return;
    if (pool->copy_hook)
        pool->copy_hook(pool->copy_ctx, dst, src, n_slots);
    size_t n_bytes = (size_t)n_slots * pool->row_bytes;
    size_t block_bytes = (size_t)pool->p.n_kv_head * pool->head_block_bytes;
    for (int il = 0; il < pool->p.n_layers; il++) {
        for (int is_v = 0; is_v < 2; is_v++) {
            unsigned char *base = array_base(pool, il, is_v);
            unsigned char *d = base + (size_t)dst * block_bytes, *s = base + (size_t)src * block_bytes;
            // Each KV head's slots are contiguous; copy only the first n_slots of each.
            for (int h = 0; h < pool->p.n_kv_head; h++)
                memcpy(d + (size_t)h * pool->head_block_bytes, s + (size_t)h * pool->head_block_bytes,
                       n_bytes);
        }
    }
}

enum ci_status kv_seq_init(struct kv_seq_blocks *seq, int max_blocks, struct ci_err *err) {
    seq->ids = NULL;
    seq->n = 0;
    seq->cap = 0;
    if (max_blocks < 0)
        return ci_err_set(err, CI_ERR_INVALID, "block table: negative capacity %d", max_blocks);
    // At least one element, so an empty table still has a valid (freeable) pointer.
    seq->ids = ci_malloc((size_t)(max_blocks > 0 ? max_blocks : 1) * sizeof *seq->ids);
    if (!seq->ids)
        return ci_err_set(err, CI_ERR_NOMEM, "block table: out of memory for %d entries", max_blocks);
    seq->cap = max_blocks;
    return CI_OK;
}

void kv_seq_deinit(struct kv_seq_blocks *seq) {
    CI_ASSERT(seq->n == 0); // release first, or the references leak
    ci_free(seq->ids);
    seq->ids = NULL;
    seq->cap = 0;
}

enum ci_status kv_seq_reserve(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total) {
    int64_t need = kv_pool_blocks_for(pool, n_tokens_total);
    if (need <= seq->n)
        return CI_OK;
    if (need > seq->cap || need - seq->n > kv_pool_n_available(pool))
        return CI_ERR_LIMIT;
    while (seq->n < need) {
        int32_t blk = kv_pool_alloc(pool);
        CI_ASSERT(blk >= 0);
        seq->ids[seq->n++] = blk;
    }
    return CI_OK;
}

void kv_seq_shrink(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t n_tokens_total) {
    int64_t keep = kv_pool_blocks_for(pool, n_tokens_total);
    while (seq->n > keep) {
        int32_t blk = seq->ids[--seq->n];
        if (blk >= 0)
            kv_pool_unref(pool, blk);
    }
}

int kv_seq_drop_front(struct kv_pool *pool, struct kv_seq_blocks *seq, int n_front) {
    CI_ASSERT(n_front >= 0 && n_front <= seq->n);
    int dropped = 0;
    for (int i = 0; i < n_front; i++) {
        if (seq->ids[i] < 0)
            continue;
        kv_pool_unref(pool, seq->ids[i]);
        seq->ids[i] = -1;
        dropped++;
    }
    return dropped;
}

int kv_seq_n_live(const struct kv_seq_blocks *seq) {
    int n = 0;
    for (int i = 0; i < seq->n; i++)
        n += seq->ids[i] >= 0;
    return n;
}

enum ci_status kv_seq_prepare_write(struct kv_pool *pool, struct kv_seq_blocks *seq, int64_t pos_from,
                                    int64_t pos_to) {
    CI_ASSERT(pos_from >= 0);
    if (pos_from >= pos_to)
        return CI_OK;
    int64_t b0 = pos_from / pool->p.block_size, b1 = (pos_to - 1) / pool->p.block_size;
    CI_ASSERT(b1 < seq->n); // reserve before writing
    int n_shared = 0;
    for (int64_t b = b0; b <= b1; b++) {
        CI_ASSERT(seq->ids[b] >= 0); // never write into a block given back early
        n_shared += kv_pool_refcount(pool, seq->ids[b]) > 1;
    }
    if (n_shared > kv_pool_n_available(pool))
        return CI_ERR_LIMIT;
    for (int64_t b = b0; b <= b1; b++) {
        int32_t old = seq->ids[b];
        if (pool->refcount[old] <= 1) {
            // Written in place: a cache that knew this block's content must forget it.
            if (pool->has_cache && pool->hooks.invalidate)
                pool->hooks.invalidate(pool->cache_ctx, old);
            continue;
        }
        int32_t blk = kv_pool_alloc(pool);
        CI_ASSERT(blk >= 0);
        // The whole block: slots outside [pos_from, pos_to) may hold positions the sequence still needs.
        kv_pool_copy_block(pool, blk, old, pool->p.block_size);
        kv_pool_unref(pool, old);
        seq->ids[b] = blk;
    }
    return CI_OK;
}

void kv_seq_release(struct kv_pool *pool, struct kv_seq_blocks *seq) {
    while (seq->n > 0) {
        int32_t blk = seq->ids[--seq->n];
        if (blk >= 0)
            kv_pool_unref(pool, blk);
    }
}

enum ci_status kv_seq_fork(struct kv_pool *pool, struct kv_seq_blocks *dst, const struct kv_seq_blocks *src) {
    CI_ASSERT(dst != src && dst->n == 0);
    if (src->n > dst->cap)
        return CI_ERR_LIMIT;
    for (int i = 0; i < src->n; i++) {
        if (src->ids[i] >= 0)
            kv_pool_ref(pool, src->ids[i]);
        dst->ids[i] = src->ids[i];
    }
    dst->n = src->n;
    return CI_OK;
}

enum ci_status kv_pool_verify(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                              const int32_t *extra_refs, struct ci_err *err) {
    int nb = pool->p.n_blocks;
    int32_t *want = pool->scratch;
    for (int b = 0; b < nb; b++)
        want[b] = extra_refs ? extra_refs[b] : 0;
    for (int i = 0; i < n_seqs; i++) {
        const struct kv_seq_blocks *s = seqs[i];
        if (s->n < 0 || s->n > s->cap)
            return ci_err_set(err, CI_ERR_INTERNAL, "kv check: table %d has n %d outside [0, cap %d]", i,
                              s->n, s->cap);
        bool live = false;
        for (int j = 0; j < s->n; j++) {
            int32_t blk = s->ids[j];
            if (blk == -1 && !live)
                continue; // a hole: given back early (kv_seq_drop_front), only before live entries
            live = true;
            if (blk < 0 || blk >= nb)
                return ci_err_set(err, CI_ERR_INTERNAL,
                                  "kv check: table %d entry %d: block id %" PRId32 " out of range [0, %d)", i,
                                  j, blk, nb);
            want[blk]++;
        }
    }
    int n_zero = 0, n_parked = 0;
    for (int b = 0; b < nb; b++) {
        if (pool->refcount[b] != want[b])
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "kv check: block %d has refcount %" PRId32 " but %" PRId32
                              " references are held (tables + extra)",
                              b, pool->refcount[b], want[b]);
        if (pool->parked[b] && pool->refcount[b] != 0)
            return ci_err_set(err, CI_ERR_INTERNAL, "kv check: block %d is parked with refcount %" PRId32, b,
                              pool->refcount[b]);
        if (pool->parked[b] && !pool->has_cache)
            return ci_err_set(err, CI_ERR_INTERNAL, "kv check: block %d is parked but no cache is attached",
                              b);
        n_zero += pool->refcount[b] == 0;
        n_parked += pool->parked[b] != 0;
        want[b] = 0; // reused below to count free-list appearances
    }
    if (n_parked != pool->n_parked)
        return ci_err_set(err, CI_ERR_INTERNAL, "kv check: %d blocks are parked but the parked count is %d",
                          n_parked, pool->n_parked);
    if (pool->n_free < 0 || pool->n_free > nb)
        return ci_err_set(err, CI_ERR_INTERNAL, "kv check: free count %d outside [0, %d]", pool->n_free, nb);
    for (int i = 0; i < pool->n_free; i++) {
        int32_t blk = pool->free_stack[i];
        if (blk < 0 || blk >= nb)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "kv check: free list entry %d: id %" PRId32 " out of range", i, blk);
        if (pool->refcount[blk] != 0)
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "kv check: block %" PRId32 " is on the free list with refcount %" PRId32, blk,
                              pool->refcount[blk]);
        if (pool->parked[blk])
            return ci_err_set(err, CI_ERR_INTERNAL,
                              "kv check: block %" PRId32 " is parked and on the free list", blk);
        if (want[blk]++ != 0)
            return ci_err_set(err, CI_ERR_INTERNAL, "kv check: block %" PRId32 " is on the free list twice",
                              blk);
    }
    // Free-list entries and parked blocks are distinct refcount-0 blocks, so equal counts mean no
    // unreferenced block leaked.
    if (n_zero != pool->n_free + pool->n_parked)
        return ci_err_set(err, CI_ERR_INTERNAL,
                          "kv check: %d blocks have refcount 0 but the free list holds %d and %d are parked "
                          "(leaked blocks)",
                          n_zero, pool->n_free, pool->n_parked);
    if (pool->has_cache && pool->hooks.verify)
        return pool->hooks.verify(pool->cache_ctx, err);
    return CI_OK;
}

void kv_pool_check(struct kv_pool *pool, const struct kv_seq_blocks *const *seqs, int n_seqs,
                   const int32_t *extra_refs) {
    struct ci_err err = {0};
    if (kv_pool_verify(pool, seqs, n_seqs, extra_refs, &err) != CI_OK) {
        fprintf(stderr, "%s\n", err.msg);
        CI_ASSERT(!"kv_pool_check failed");
    }
}
