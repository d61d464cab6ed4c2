/* Unit tests for the prefix cache: hits share blocks (refcounts, data), misses, partial prefixes, the "never
 * all tokens" rule, forced hash collisions, parent-chain and parent-serial verification, LRU parking and
 * eviction order, reserve/COW counting parked blocks, the pool and cache invariant checkers, statistics, and
 * seeded random operation sequences (real and constant hash) checked after every operation.
 *
 * KV data: every position the test "computes" gets K/V values that encode an independent signature (FNV-1a,
 * not the cache's hash) of the whole token prefix ending there, so reading a reused block back proves it
 * holds the KV of exactly the request's prefix. */
#include "engine/prefix_cache.h" // first: the header must compile on its own

#include <stdint.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "test.h"

enum { HD = 4 }; // head_dim: four 16-bit pieces of a 64-bit signature

static uint64_t sig(const int32_t *t, int pos) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i <= pos; i++) {
        h ^= (uint32_t)t[i];
        h *= 0x100000001b3ULL;
        h ^= h >> 29;
    }
    return h;
}

static void kv_ptrs(struct kv_pool *pool, const struct kv_seq_blocks *seq, int pos, float **k, float **v) {
    struct ci_kv_layer l;
    kv_pool_layer(pool, 0, &l);
    int bs = kv_pool_block_size(pool);
    size_t off = ci_kv_offset(&l, seq->ids[pos / bs], 0, pos % bs);
    *k = (float *)(void *)((unsigned char *)l.k + off);
    *v = (float *)(void *)((unsigned char *)l.v + off);
}

static void write_kv(struct kv_pool *pool, const struct kv_seq_blocks *seq, const int32_t *t, int from,
                     int to) {
    for (int pos = from; pos < to; pos++) {
        float *k, *v;
        kv_ptrs(pool, seq, pos, &k, &v);
        uint64_t s = sig(t, pos);
        for (int d = 0; d < HD; d++) {
            k[d] = (float)((s >> (16 * d)) & 0xffff);
            v[d] = k[d] + 65536.0f;
        }
    }
}

// First position in [0, n) whose K/V does not encode the prefix t[0..pos], or -1.
static int kv_bad(struct kv_pool *pool, const struct kv_seq_blocks *seq, const int32_t *t, int n) {
    for (int pos = 0; pos < n; pos++) {
        float *k, *v;
        kv_ptrs(pool, seq, pos, &k, &v);
        uint64_t s = sig(t, pos);
        for (int d = 0; d < HD; d++)
            if (k[d] != (float)((s >> (16 * d)) & 0xffff) || v[d] != k[d] + 65536.0f)
                return pos;
    }
    return -1;
}

static struct kv_pool *make_pool(int bs, int nb) {
    struct kv_pool_params p = {1, 1, HD, bs, nb, CI_TYPE_F32};
    struct kv_pool *pool = NULL;
    struct ci_err err = {0};
    if (kv_pool_create(&p, &pool, &err) != CI_OK) {
        printf("kv_pool_create: %s\n", err.msg);
        return NULL;
    }
    return pool;
}

static struct prefix_cache *make_cache(struct kv_pool *pool) {
    struct prefix_cache *pc = NULL;
    struct ci_err err = {0};
    if (prefix_cache_create(pool, &pc, &err) != CI_OK) {
        printf("prefix_cache_create: %s\n", err.msg);
        return NULL;
    }
    return pc;
}

/* What the engine does for a prompt: match, reserve, compute (write) the rest, insert.  Returns the tokens
 * covered by the match, or -1 (table released) when the blocks do not fit. */
static int run_request(struct kv_pool *pool, struct prefix_cache *pc, struct kv_seq_blocks *seq,
                       const int32_t *t, int n) {
    int covered = prefix_cache_match(pc, t, n, seq);
    if (kv_seq_reserve(pool, seq, n) != CI_OK || kv_seq_prepare_write(pool, seq, covered, n) != CI_OK) {
        kv_seq_release(pool, seq);
        return -1;
    }
    write_kv(pool, seq, t, covered, n);
    prefix_cache_insert(pc, t, n, seq);
    return covered;
}

static uint64_t const_hash(uint64_t seed, const void *data, size_t n) {
    (void)seed;
    (void)data;
    (void)n;
    return 42;
}

static void check_all(struct kv_pool *pool, struct prefix_cache *pc, const struct kv_seq_blocks *const *seqs,
                      int n) {
    kv_pool_check(pool, seqs, n, NULL); // runs the cache's verify hook too
    prefix_cache_check(pc);
}

TEST(hit_after_insert) {
    enum { BS = 4, NB = 16 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks a, b, c;
    ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&c, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b, &c};
    int32_t t[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

    ASSERT_EQ_I64(run_request(pool, pc, &a, t, 10), 0); // empty cache
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.queries, 1);
    ASSERT_EQ_I64(st.query_tokens, 10);
    ASSERT_EQ_I64(st.hit_blocks, 0);
    ASSERT_EQ_I64(st.n_cached, 2); // two full blocks; the partial third is not cached
    ASSERT_EQ_I64(st.n_parked, 0);
    check_all(pool, pc, all, 3);

    ASSERT_EQ_I64(prefix_cache_match(pc, t, 10, &b), 8);
    ASSERT_EQ_I64(b.n, 2);
    ASSERT_EQ_I64(b.ids[0], a.ids[0]);
    ASSERT_EQ_I64(b.ids[1], a.ids[1]);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[0]), 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[1]), 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[2]), 1);
    ASSERT_EQ_I64(kv_bad(pool, &b, t, 8), -1);
    check_all(pool, pc, all, 3);
    // The rest goes into a fresh block: nothing shared is written, so no copy.
    int free_before = kv_pool_n_free(pool);
    ASSERT_STATUS(kv_seq_reserve(pool, &b, 10), CI_OK);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 8, 10), CI_OK);
    ASSERT_EQ_I64(kv_pool_n_free(pool), free_before - 1);
    ASSERT(b.ids[2] != a.ids[2]);
    write_kv(pool, &b, t, 8, 10);
    prefix_cache_insert(pc, t, 10, &b); // idempotent: nothing new
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.queries, 2);
    ASSERT_EQ_I64(st.query_tokens, 20);
    ASSERT_EQ_I64(st.hit_blocks, 2);
    ASSERT_EQ_I64(st.hit_tokens, 8);
    ASSERT_EQ_I64(st.n_cached, 2);
    check_all(pool, pc, all, 3);

    // Releasing both: the cached blocks are parked, the partial ones freed.
    int32_t c0 = a.ids[0], c1 = a.ids[1];
    kv_seq_release(pool, &a);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0); // still held by b
    kv_seq_release(pool, &b);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    ASSERT(kv_pool_is_parked(pool, c0) && kv_pool_is_parked(pool, c1));
    ASSERT_EQ_I64(kv_pool_refcount(pool, c0), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB - 2);
    ASSERT_EQ_I64(kv_pool_n_available(pool), NB);
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_parked, 2);
    check_all(pool, pc, all, 3);

    // A hit on parked blocks takes them back (refcount 0 -> 1) with their data intact.
    ASSERT_EQ_I64(prefix_cache_match(pc, t, 10, &c), 8);
    ASSERT_EQ_I64(c.ids[0], c0);
    ASSERT_EQ_I64(c.ids[1], c1);
    ASSERT_EQ_I64(kv_pool_refcount(pool, c0), 1);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0);
    ASSERT_EQ_I64(kv_bad(pool, &c, t, 8), -1);
    check_all(pool, pc, all, 3);

    kv_seq_release(pool, &c);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_seq_deinit(&c);
    prefix_cache_free(pc);
    ASSERT(!kv_pool_has_cache(pool));
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB); // parked blocks given back
    kv_pool_check(pool, NULL, 0, NULL);
    kv_pool_free(pool);
}

TEST(miss_and_partial_prefix) {
    enum { BS = 4, NB = 16 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks a, b;
    ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b};
    int32_t t[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    ASSERT_EQ_I64(run_request(pool, pc, &a, t, 13), 0);

    // First token differs: a miss, nothing referenced.
    int32_t u[13];
    memcpy(u, t, sizeof u);
    u[0] = 99;
    ASSERT_EQ_I64(prefix_cache_match(pc, u, 13, &b), 0);
    ASSERT_EQ_I64(b.n, 0);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[0]), 1);
    // Differs in block 1 (token 5): only block 0 matches.
    memcpy(u, t, sizeof u);
    u[5] = 99;
    ASSERT_EQ_I64(prefix_cache_match(pc, u, 13, &b), 4);
    ASSERT_EQ_I64(b.n, 1);
    ASSERT_EQ_I64(b.ids[0], a.ids[0]);
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &b);
    // Differs in the last token of block 2: blocks 0 and 1 match.
    memcpy(u, t, sizeof u);
    u[11] = 99;
    ASSERT_EQ_I64(prefix_cache_match(pc, u, 13, &b), 8);
    ASSERT_EQ_I64(kv_bad(pool, &b, u, 8), -1);
    kv_seq_release(pool, &b);
    // A shorter request that is a prefix of a: whole blocks only.
    ASSERT_EQ_I64(prefix_cache_match(pc, t, 7, &b), 4);
    kv_seq_release(pool, &b);
    // A longer one: all three cached blocks.
    int32_t longer[20];
    memcpy(longer, t, sizeof t);
    for (int i = 13; i < 20; i++)
        longer[i] = 50 + i;
    ASSERT_EQ_I64(prefix_cache_match(pc, longer, 20, &b), 12);
    ASSERT_EQ_I64(kv_bad(pool, &b, longer, 12), -1);
    kv_seq_release(pool, &b);
    // The table's capacity bounds the match.
    struct kv_seq_blocks tiny;
    ASSERT_STATUS(kv_seq_init(&tiny, 1, NULL), CI_OK);
    ASSERT_EQ_I64(prefix_cache_match(pc, longer, 20, &tiny), 4);
    kv_seq_release(pool, &tiny);
    kv_seq_deinit(&tiny);

    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.queries, 7);
    ASSERT_EQ_I64(st.query_tokens, 13 * 4 + 7 + 20 + 20);
    ASSERT_EQ_I64(st.hit_blocks, 0 + 0 + 1 + 2 + 1 + 3 + 1);
    ASSERT_EQ_I64(st.hit_tokens, st.hit_blocks * BS);
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &a);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(never_all_tokens) {
    enum { BS = 4, NB = 16 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks a, b;
    ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b};
    int32_t t[13] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9};
    ASSERT_EQ_I64(run_request(pool, pc, &a, t, 12), 0); // three full blocks cached
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_cached, 3);
    // At most floor((n - 1) / bs) blocks: at least one token is always left to compute.
    static const int want[][2] = {{13, 12}, {12, 8}, {9, 8}, {8, 4}, {5, 4}, {4, 0}, {1, 0}, {0, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int got = prefix_cache_match(pc, t, want[i][0], &b);
        if (got != want[i][1]) {
            TEST_FAILF("match of %d tokens covered %d, want %d", want[i][0], got, want[i][1]);
            return;
        }
        ASSERT_EQ_I64(b.n, got / BS);
        kv_seq_release(pool, &b);
    }
    // A prompt of exactly 2 blocks, both cached: match covers 1; the second is recomputed into a fresh
    // block, which stays uncached (an identical entry exists) and is freed, not parked, on release.
    ASSERT_EQ_I64(run_request(pool, pc, &b, t, 8), 4);
    ASSERT_EQ_I64(b.ids[0], a.ids[0]);
    ASSERT(b.ids[1] != a.ids[1]);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[1]), 1); // never written by b
    ASSERT_EQ_I64(kv_bad(pool, &b, t, 8), -1);
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_cached, 3);
    check_all(pool, pc, all, 2);
    int32_t fresh = b.ids[1];
    kv_seq_release(pool, &b);
    ASSERT(!kv_pool_is_parked(pool, fresh));
    ASSERT_EQ_I64(kv_pool_refcount(pool, fresh), 0);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0); // block 0 still held by a
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &a);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 3);
    check_all(pool, pc, all, 2);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(forced_collisions) {
    enum { BS = 4, NB = 16 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    prefix_cache_set_hash_for_test(pc, const_hash); // every key collides
    struct kv_seq_blocks a, b, c;
    ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&c, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b, &c};
    int32_t ta[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t tb[9] = {10, 11, 12, 13, 14, 15, 16, 17, 18};
    ASSERT_EQ_I64(run_request(pool, pc, &a, ta, 9), 0);
    // Same key, different tokens: never a hit.
    ASSERT_EQ_I64(prefix_cache_match(pc, tb, 9, &b), 0);
    ASSERT_EQ_I64(b.n, 0);
    // Same tokens still hit.
    ASSERT_EQ_I64(prefix_cache_match(pc, ta, 9, &c), 8);
    ASSERT_EQ_I64(kv_bad(pool, &c, ta, 8), -1);
    kv_seq_release(pool, &c);
    // Both chains cached under the one key; each finds its own blocks.
    ASSERT_EQ_I64(run_request(pool, pc, &b, tb, 9), 0);
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_cached, 4);
    check_all(pool, pc, all, 3);
    ASSERT_EQ_I64(prefix_cache_match(pc, tb, 9, &c), 8);
    ASSERT_EQ_I64(c.ids[0], b.ids[0]);
    ASSERT_EQ_I64(c.ids[1], b.ids[1]);
    ASSERT_EQ_I64(kv_bad(pool, &c, tb, 8), -1);
    kv_seq_release(pool, &c);
    // A mix (block 0 of a, block 1 of b) shares only the first block.
    int32_t mix[9] = {1, 2, 3, 4, 14, 15, 16, 17, 0};
    ASSERT_EQ_I64(prefix_cache_match(pc, mix, 9, &c), 4);
    ASSERT_EQ_I64(c.ids[0], a.ids[0]);
    kv_seq_release(pool, &c);
    // Removing entries from one crowded cluster keeps the others reachable (backward-shift deletion).
    int32_t a0 = a.ids[0], a1 = a.ids[1];
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    for (int i = 0; i < NB - 4; i++) // take the free blocks, then evict two parked ones
        ASSERT(kv_pool_alloc(pool) >= 0);
    int32_t e1 = kv_pool_alloc(pool), e2 = kv_pool_alloc(pool);
    ASSERT_EQ_I64(e1, a1); // LRU: a's blocks were parked first, last block first
    ASSERT_EQ_I64(e2, a0);
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.evictions, 2);
    ASSERT_EQ_I64(st.n_cached, 2);
    prefix_cache_check(pc);
    kv_seq_release(pool, &c);
    for (int32_t blk = 0; blk < NB; blk++)
        if (kv_pool_refcount(pool, blk) == 1)
            kv_pool_unref(pool, blk);
    ASSERT_EQ_I64(kv_pool_n_available(pool), NB);
    prefix_cache_check(pc);
    // a was released first (its blocks parked last block first), so both of a's blocks were evicted; b's two
    // entries, in the same crowded cluster, are still found.
    ASSERT_EQ_I64(prefix_cache_match(pc, ta, 9, &a), 0);
    ASSERT_EQ_I64(prefix_cache_match(pc, tb, 9, &b), 8);
    ASSERT_EQ_I64(kv_bad(pool, &b, tb, 8), -1);
    check_all(pool, pc, all, 3);
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_seq_deinit(&c);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(parent_chain) {
    enum { BS = 4, NB = 16 };
    for (int collide = 0; collide < 2; collide++) {
        struct kv_pool *pool = make_pool(BS, NB);
        ASSERT(pool);
        struct prefix_cache *pc = make_cache(pool);
        ASSERT(pc);
        if (collide)
            prefix_cache_set_hash_for_test(pc, const_hash);
        struct kv_seq_blocks a, b, c;
        ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&c, 8, NULL), CI_OK);
        const struct kv_seq_blocks *all[] = {&a, &b, &c};
        // Block 1 has the same tokens under two different first blocks: different KV.
        int32_t ta[9] = {1, 1, 1, 1, 7, 7, 7, 7, 0};
        int32_t tb[9] = {2, 2, 2, 2, 7, 7, 7, 7, 0};
        ASSERT_EQ_I64(run_request(pool, pc, &a, ta, 9), 0);
        ASSERT_EQ_I64(prefix_cache_match(pc, tb, 9, &b), 0);
        kv_seq_release(pool, &b);
        ASSERT_EQ_I64(run_request(pool, pc, &b, tb, 9), 0);
        ASSERT(b.ids[1] != a.ids[1]);
        ASSERT_EQ_I64(prefix_cache_match(pc, tb, 9, &c), 8);
        ASSERT_EQ_I64(c.ids[1], b.ids[1]);
        ASSERT_EQ_I64(kv_bad(pool, &c, tb, 8), -1);
        check_all(pool, pc, all, 3);
        kv_seq_release(pool, &a);
        kv_seq_release(pool, &b);
        kv_seq_release(pool, &c);
        kv_seq_deinit(&a);
        kv_seq_deinit(&b);
        kv_seq_deinit(&c);
        prefix_cache_free(pc);
        kv_pool_free(pool);
    }
}

/* A parent forgotten and its block id reused for other content: the old child names the same parent id but
 * must not match (the parent's serial differs).  With a constant hash only the serial tells them apart. */
TEST(parent_serial_and_invalidate) {
    enum { BS = 2, NB = 12 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    prefix_cache_set_hash_for_test(pc, const_hash);
    struct kv_seq_blocks s, r;
    ASSERT_STATUS(kv_seq_init(&s, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&r, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&s, &r};
    int32_t t1[5] = {1, 2, 3, 4, 5};
    ASSERT_EQ_I64(run_request(pool, pc, &s, t1, 5), 0);
    int32_t p = s.ids[0], d = s.ids[1];
    // Roll back into block 0 and rewrite position 1 with another token: block p (refcount 1) is written in
    // place, so the cache must forget it first.
    kv_seq_shrink(pool, &s, 1);
    ASSERT(kv_pool_is_parked(pool, d)); // d still cached (its parent was valid when it was released)
    ASSERT_STATUS(kv_seq_prepare_write(pool, &s, 1, 2), CI_OK);
    ASSERT_EQ_I64(s.ids[0], p); // in place, no copy
    int32_t t2[5] = {1, 9, 3, 4, 6};
    write_kv(pool, &s, t2, 1, 2);
    check_all(pool, pc, all, 2);
    ASSERT_EQ_I64(prefix_cache_match(pc, t1, 5, &r), 0); // p's old content is gone
    kv_seq_release(pool, &r);
    prefix_cache_insert(pc, t2, 2, &s); // p cached again, same id, new content
    check_all(pool, pc, all, 2);
    // d: same (colliding) key, same tokens {3, 4}, parent id p, but p's old serial.  Only block 0 matches.
    ASSERT_EQ_I64(prefix_cache_match(pc, t2, 5, &r), 2);
    ASSERT_EQ_I64(r.ids[0], p);
    ASSERT_EQ_I64(kv_bad(pool, &r, t2, 2), -1);
    kv_seq_release(pool, &r);
    // The unreachable d is still parked until evicted in LRU order.
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_cached, 2);
    ASSERT_EQ_I64(st.n_parked, 1);
    ASSERT(kv_pool_is_parked(pool, d));
    // Computing t2 fully caches its block 1 in another block, chained to the new p.
    kv_seq_release(pool, &s);
    ASSERT_EQ_I64(run_request(pool, pc, &s, t2, 5), 2);
    ASSERT(s.ids[1] != d);
    ASSERT_EQ_I64(prefix_cache_match(pc, t2, 5, &r), 4);
    ASSERT_EQ_I64(r.ids[1], s.ids[1]);
    ASSERT_EQ_I64(kv_bad(pool, &r, t2, 4), -1);
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &r);
    kv_seq_release(pool, &s);
    kv_seq_deinit(&s);
    kv_seq_deinit(&r);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

/* A held block chained to a parent that gets evicted becomes unreachable.  Released as it is, it is freed,
 * not parked (lazy cleanup of stale descendants); re-inserted by its holder first, its entry is replaced by
 * one chained to the holder's own (now registered) first block, and it is reachable again. */
TEST(stale_descendant) {
    enum { BS = 2, NB = 6 };
    for (int reinsert = 0; reinsert < 2; reinsert++) {
        struct kv_pool *pool = make_pool(BS, NB);
        ASSERT(pool);
        struct prefix_cache *pc = make_cache(pool);
        ASSERT(pc);
        struct kv_seq_blocks s, x, hold, r;
        ASSERT_STATUS(kv_seq_init(&s, 4, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&x, 4, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&hold, 8, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&r, 4, NULL), CI_OK);
        const struct kv_seq_blocks *all[] = {&s, &x, &hold, &r};
        int32_t ts[3] = {1, 2, 9};
        int32_t tx[5] = {1, 2, 3, 4, 5};
        ASSERT_EQ_I64(run_request(pool, pc, &s, ts, 3), 0); // caches p = s.ids[0]
        // x computes its whole prompt without matching (as if admitted before s finished), then inserts: its
        // block 0 duplicates p and stays uncached; its block 1 is cached as p's child.
        ASSERT_STATUS(kv_seq_reserve(pool, &x, 5), CI_OK);
        write_kv(pool, &x, tx, 0, 5);
        prefix_cache_insert(pc, tx, 5, &x);
        struct prefix_cache_stats st;
        prefix_cache_stats(pc, &st);
        ASSERT_EQ_I64(st.n_cached, 2);
        check_all(pool, pc, all, 4);
        int32_t p = s.ids[0], d = x.ids[1];
        // A new request matching tx goes through p, then x's block 1.
        ASSERT_EQ_I64(prefix_cache_match(pc, tx, 5, &r), 4);
        ASSERT_EQ_I64(r.ids[0], p);
        ASSERT_EQ_I64(r.ids[1], d);
        ASSERT_EQ_I64(kv_bad(pool, &r, tx, 4), -1);
        kv_seq_release(pool, &r);
        // Release s (p parked), then use up the pool so p is evicted while d is still held by x.
        kv_seq_release(pool, &s);
        ASSERT(kv_pool_is_parked(pool, p));
        ASSERT_EQ_I64(kv_pool_n_available(pool), 3);
        ASSERT_STATUS(kv_seq_reserve(pool, &hold, 6), CI_OK);
        prefix_cache_stats(pc, &st);
        ASSERT_EQ_I64(st.evictions, 1);
        ASSERT_EQ_I64(st.n_cached, 1); // d, unreachable
        check_all(pool, pc, all, 4);
        kv_seq_release(pool, &hold);
        ASSERT_EQ_I64(prefix_cache_match(pc, tx, 5, &r), 0);
        kv_seq_release(pool, &r);
        if (reinsert) {
            prefix_cache_insert(pc, tx, 5, &x);
            prefix_cache_stats(pc, &st);
            ASSERT_EQ_I64(st.n_cached, 2);
            check_all(pool, pc, all, 4);
            ASSERT_EQ_I64(prefix_cache_match(pc, tx, 5, &r), 4);
            ASSERT_EQ_I64(r.ids[0], x.ids[0]);
            ASSERT_EQ_I64(r.ids[1], d);
            ASSERT_EQ_I64(kv_bad(pool, &r, tx, 4), -1);
            kv_seq_release(pool, &r);
            kv_seq_release(pool, &x);
            ASSERT(kv_pool_is_parked(pool, d));
            ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
        } else {
            kv_seq_release(pool, &x);
            ASSERT(!kv_pool_is_parked(pool, d));
            ASSERT_EQ_I64(kv_pool_refcount(pool, d), 0);
            prefix_cache_stats(pc, &st);
            ASSERT_EQ_I64(st.n_cached, 0);
        }
        check_all(pool, pc, all, 4);
        kv_seq_deinit(&s);
        kv_seq_deinit(&x);
        kv_seq_deinit(&hold);
        kv_seq_deinit(&r);
        prefix_cache_free(pc);
        kv_pool_free(pool);
    }
}

TEST(lru_eviction_order) {
    enum { BS = 2, NB = 8 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks s, hold;
    ASSERT_STATUS(kv_seq_init(&s, 4, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&hold, NB, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&s, &hold};
    int32_t ta[3] = {1, 2, 0}, tb[3] = {3, 4, 0}, tc[3] = {5, 6, 0};
    int32_t blk_a, blk_b, blk_c;
    ASSERT_EQ_I64(run_request(pool, pc, &s, ta, 3), 0);
    blk_a = s.ids[0];
    kv_seq_release(pool, &s); // A parked first
    ASSERT_EQ_I64(run_request(pool, pc, &s, tb, 3), 0);
    blk_b = s.ids[0];
    kv_seq_release(pool, &s); // then B
    ASSERT_EQ_I64(run_request(pool, pc, &s, tc, 3), 0);
    blk_c = s.ids[0];
    kv_seq_release(pool, &s); // then C
    ASSERT(blk_a != blk_b && blk_b != blk_c && blk_a != blk_c);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 3);
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB - 3);
    check_all(pool, pc, all, 2);
    // A hit on A takes it out of the LRU; released again, it goes to the tail: order B, C, A.
    ASSERT_EQ_I64(prefix_cache_match(pc, ta, 3, &s), 2);
    ASSERT_EQ_I64(s.ids[0], blk_a);
    ASSERT(!kv_pool_is_parked(pool, blk_a));
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    check_all(pool, pc, all, 2);
    // Free blocks go first; no eviction while the free list has any.
    for (int i = 0; i < NB - 3; i++) {
        int32_t blk = kv_pool_alloc(pool);
        ASSERT(blk >= 0 && blk != blk_b && blk != blk_c);
        hold.ids[hold.n++] = blk;
    }
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.evictions, 0);
    // Free list empty: the LRU head (B) is evicted, and handed out fresh.
    int32_t got = kv_pool_alloc(pool);
    ASSERT_EQ_I64(got, blk_b);
    ASSERT_EQ_I64(kv_pool_refcount(pool, got), 1);
    hold.ids[hold.n++] = got;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.evictions, 1);
    ASSERT_EQ_I64(st.n_cached, 2);
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &s); // A parked at the tail: order C, A
    struct kv_seq_blocks probe;
    ASSERT_STATUS(kv_seq_init(&probe, 4, NULL), CI_OK);
    ASSERT_EQ_I64(prefix_cache_match(pc, tb, 3, &probe), 0); // B forgotten
    ASSERT_EQ_I64(kv_pool_alloc(pool), blk_c);
    hold.ids[hold.n++] = blk_c;
    ASSERT_EQ_I64(kv_pool_alloc(pool), blk_a);
    hold.ids[hold.n++] = blk_a;
    ASSERT_EQ_I64(kv_pool_alloc(pool), -1); // nothing free, nothing parked
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.evictions, 3);
    ASSERT_EQ_I64(st.n_cached, 0);
    ASSERT_EQ_I64(prefix_cache_match(pc, ta, 3, &probe), 0);
    check_all(pool, pc, all, 2);
    kv_seq_release(pool, &hold);
    kv_seq_deinit(&s);
    kv_seq_deinit(&hold);
    kv_seq_deinit(&probe);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(reserve_and_cow_count_parked) {
    enum { BS = 2, NB = 4 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks s, big, f;
    ASSERT_STATUS(kv_seq_init(&s, 4, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&big, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&f, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&s, &big, &f};
    int32_t ta[3] = {1, 2, 0}, tb[3] = {3, 4, 0};
    ASSERT_EQ_I64(run_request(pool, pc, &s, ta, 3), 0);
    kv_seq_release(pool, &s);
    ASSERT_EQ_I64(run_request(pool, pc, &s, tb, 3), 0);
    kv_seq_release(pool, &s);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 2);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    ASSERT_EQ_I64(kv_pool_n_available(pool), 4);
    // Five blocks do not fit: nothing changes, both stay cached.
    ASSERT_STATUS(kv_seq_reserve(pool, &big, 10), CI_ERR_LIMIT);
    ASSERT_EQ_I64(big.n, 0);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.n_cached, 2);
    ASSERT_EQ_I64(st.evictions, 0);
    // Three fit: two free, one evicted (A, the least recently parked).
    ASSERT_STATUS(kv_seq_reserve(pool, &big, 6), CI_OK);
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.evictions, 1);
    ASSERT_EQ_I64(prefix_cache_match(pc, ta, 3, &s), 0);
    ASSERT_EQ_I64(prefix_cache_match(pc, tb, 3, &s), 2);
    kv_seq_release(pool, &s);
    check_all(pool, pc, all, 3);
    kv_seq_release(pool, &big);
    // Copy-on-write counts parked blocks too: f shares 2 blocks with s; no block free, 2 parked.
    int32_t t4[5] = {7, 8, 9, 10, 0};
    ASSERT_EQ_I64(run_request(pool, pc, &s, t4, 4), 0); // 2 blocks, both cached
    ASSERT_STATUS(kv_seq_fork(pool, &f, &s), CI_OK);
    ASSERT_STATUS(kv_seq_reserve(pool, &big, 2 * kv_pool_n_free(pool)), CI_OK); // drain the free list
    ASSERT_EQ_I64(kv_pool_n_free(pool), 0);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 1); // B's block (the other one was evicted)
    ASSERT_EQ_I64(kv_pool_n_available(pool), 1);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &f, 0, 4), CI_ERR_LIMIT); // two copies, one available
    ASSERT_EQ_I64(f.ids[0], s.ids[0]);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &f, 3, 4), CI_OK); // one copy: evicts B
    ASSERT(f.ids[1] != s.ids[1]);
    ASSERT_EQ_I64(kv_bad(pool, &f, t4, 4), -1); // the copy carries the data
    ASSERT_EQ_I64(kv_pool_n_available(pool), 0);
    check_all(pool, pc, all, 3);
    kv_seq_release(pool, &s);
    kv_seq_release(pool, &f);
    kv_seq_release(pool, &big);
    check_all(pool, pc, all, 3);
    kv_seq_deinit(&s);
    kv_seq_deinit(&big);
    kv_seq_deinit(&f);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(checks_and_lifecycle) {
    enum { BS = 2, NB = 6 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool), *second = (struct prefix_cache *)1;
    ASSERT(pc);
    struct ci_err err = {0};
    ASSERT_STATUS(prefix_cache_create(pool, &second, &err), CI_ERR_INVALID); // one cache per pool
    ASSERT(second == NULL);
    struct kv_seq_blocks s, fake;
    ASSERT_STATUS(kv_seq_init(&s, 4, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&fake, 4, NULL), CI_OK);
    int32_t t[5] = {1, 2, 3, 4, 5};
    ASSERT_EQ_I64(run_request(pool, pc, &s, t, 5), 0);
    int32_t b0 = s.ids[0];
    kv_seq_release(pool, &s);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    // Parked blocks pass the pool's check...
    const struct kv_seq_blocks *none[] = {&s};
    ASSERT_STATUS(kv_pool_verify(pool, none, 1, NULL, &err), CI_OK);
    ASSERT_STATUS(prefix_cache_verify(pc, &err), CI_OK);
    // ...but a table naming a parked block does not (refcount 0, one reference claimed).
    fake.ids[0] = b0;
    fake.n = 1;
    const struct kv_seq_blocks *with_fake[] = {&fake};
    ASSERT_STATUS(kv_pool_verify(pool, with_fake, 1, NULL, &err), CI_ERR_INTERNAL);
    CHECK(strstr(err.msg, "refcount") != NULL);
    fake.n = 0;
    // The cache's own check runs inside the pool's; both pass after a clean release and re-match.
    ASSERT_EQ_I64(prefix_cache_match(pc, t, 5, &s), 4);
    ASSERT_STATUS(kv_pool_verify(pool, none, 1, NULL, &err), CI_OK);
    ASSERT_STATUS(kv_pool_verify(pool, NULL, 0, NULL, &err), CI_ERR_INTERNAL); // s's references undeclared
    kv_seq_release(pool, &s);
    kv_seq_deinit(&s);
    kv_seq_deinit(&fake);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

TEST(create_nomem_and_clear) {
    enum { BS = 4, NB = 64 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = (struct prefix_cache *)1;
    struct ci_err err = {0};
    ci_mem_set_limit(ci_mem_in_use() + 256);
    enum ci_status st = prefix_cache_create(pool, &pc, &err);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(pc == NULL);
    ASSERT(!kv_pool_has_cache(pool)); // a failed create leaves the pool alone
    pc = make_cache(pool);
    ASSERT(pc);
    struct kv_seq_blocks s;
    ASSERT_STATUS(kv_seq_init(&s, 8, NULL), CI_OK);
    int32_t t[17];
    for (int i = 0; i < 17; i++)
        t[i] = i * 7 % 5;
    ASSERT_EQ_I64(run_request(pool, pc, &s, t, 17), 0);
    kv_seq_shrink(pool, &s, 8); // blocks 2, 3 parked, 4 freed
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    prefix_cache_clear(pc);
    struct prefix_cache_stats ps;
    prefix_cache_stats(pc, &ps);
    ASSERT_EQ_I64(ps.n_cached, 0);
    ASSERT_EQ_I64(ps.n_parked, 0);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB - 2);
    const struct kv_seq_blocks *all[] = {&s};
    check_all(pool, pc, all, 1);
    // Still-held blocks, once forgotten, are freed (not parked) on release; matching misses.
    struct kv_seq_blocks r;
    ASSERT_STATUS(kv_seq_init(&r, 8, NULL), CI_OK);
    ASSERT_EQ_I64(prefix_cache_match(pc, t, 17, &r), 0);
    kv_seq_release(pool, &s);
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB);
    check_all(pool, pc, all, 1);
    kv_seq_deinit(&s);
    kv_seq_deinit(&r);
    prefix_cache_free(pc);
    kv_pool_free(pool);
}

/* Random engine-like operations: new requests (from a few shared stems, so prefixes repeat), decoding
 * appends with re-insert, rollbacks (shrink, then different tokens), forks, releases, occasional clears.
 * After every operation: the pool and cache invariants and every live sequence's KV data.  Right after an
 * insert, a probe match of the same tokens must cover every full block it can. */
static void random_run(uint64_t seed, int collide) {
    enum { NSEQ = 5, BS = 3, NB = 22, CAP = 8, MAXT = CAP * BS, VOCAB = 3, NSTEM = 3 };
    struct kv_pool *pool = make_pool(BS, NB);
    ASSERT(pool);
    struct prefix_cache *pc = make_cache(pool);
    ASSERT(pc);
    if (collide)
        prefix_cache_set_hash_for_test(pc, const_hash);
    struct kv_seq_blocks seqs[NSEQ + 1]; // the last one is the probe
    const struct kv_seq_blocks *all[NSEQ + 1];
    int32_t toks[NSEQ][MAXT];
    int len[NSEQ] = {0};
    for (int i = 0; i <= NSEQ; i++) {
        ASSERT_STATUS(kv_seq_init(&seqs[i], CAP, NULL), CI_OK);
        all[i] = &seqs[i];
    }
    struct kv_seq_blocks *probe = &seqs[NSEQ];
    struct ci_rng rng;
    ci_rng_seed(&rng, seed);
    int32_t stems[NSTEM][MAXT];
    for (int s = 0; s < NSTEM; s++)
        for (int i = 0; i < MAXT; i++)
            stems[s][i] = (int32_t)(ci_rng_u64(&rng) % VOCAB);
    int64_t n_queries = 0, n_query_tokens = 0, n_hit_tokens = 0, n_limit = 0, n_rollback_in_block = 0;
    int64_t n_request_hits = 0; // blocks reused by new requests (not probes)
    for (int step = 1; step <= 4000; step++) {
        int i = (int)(ci_rng_u64(&rng) % NSEQ), op = (int)(ci_rng_u64(&rng) % 20);
        struct kv_seq_blocks *s = &seqs[i];
        if (op < 6) { // new request in slot i
            kv_seq_release(pool, s);
            int n = 1 + (int)(ci_rng_u64(&rng) % MAXT);
            int keep = (int)(ci_rng_u64(&rng) % (uint64_t)(n + 1)); // tokens taken from a stem
            const int32_t *stem = stems[ci_rng_u64(&rng) % NSTEM];
            for (int k = 0; k < n; k++)
                toks[i][k] = k < keep ? stem[k] : (int32_t)(ci_rng_u64(&rng) % VOCAB);
            int covered = prefix_cache_match(pc, toks[i], n, s);
            n_queries++;
            n_query_tokens += n;
            n_hit_tokens += covered;
            n_request_hits += covered / BS;
            if (covered % BS != 0 || covered > n - 1 || s->n != covered / BS) {
                TEST_FAILF("step %d: match covered %d of %d", step, covered, n);
                return;
            }
            int bad = kv_bad(pool, s, toks[i], covered);
            if (bad >= 0) {
                TEST_FAILF("step %d: matched block holds wrong KV at position %d", step, bad);
                return;
            }
            if (kv_seq_reserve(pool, s, n) != CI_OK || kv_seq_prepare_write(pool, s, covered, n) != CI_OK) {
                n_limit++;
                kv_seq_release(pool, s);
                len[i] = 0;
            } else {
                write_kv(pool, s, toks[i], covered, n);
                len[i] = n;
                prefix_cache_insert(pc, toks[i], n, s);
            }
        } else if (op < 11) { // decode: append a few tokens
            int k = 1 + (int)(ci_rng_u64(&rng) % 4);
            if (len[i] == 0 || len[i] + k > MAXT)
                continue;
            int n_before = s->n;
            if (kv_seq_reserve(pool, s, len[i] + k) != CI_OK ||
                kv_seq_prepare_write(pool, s, len[i], len[i] + k) != CI_OK) {
                n_limit++;
                kv_seq_shrink(pool, s, (int64_t)n_before * BS);
            } else {
                for (int q = 0; q < k; q++)
                    toks[i][len[i] + q] = (int32_t)(ci_rng_u64(&rng) % VOCAB);
                write_kv(pool, s, toks[i], len[i], len[i] + k);
                len[i] += k;
                if (ci_rng_u64(&rng) % 2)
                    prefix_cache_insert(pc, toks[i], len[i], s);
            }
        } else if (op < 14) { // rollback: shrink to a random length (later appends rewrite the tail)
            if (len[i] == 0)
                continue;
            int to = (int)(ci_rng_u64(&rng) % (uint64_t)len[i]);
            n_rollback_in_block += to % BS != 0;
            kv_seq_shrink(pool, s, to);
            len[i] = to;
        } else if (op < 16) { // fork another sequence into slot i
            int j = (int)(ci_rng_u64(&rng) % NSEQ);
            if (j == i)
                continue;
            kv_seq_release(pool, s);
            ASSERT_STATUS(kv_seq_fork(pool, s, &seqs[j]), CI_OK);
            len[i] = len[j];
            memcpy(toks[i], toks[j], sizeof(int32_t) * (size_t)len[j]);
        } else if (op < 19) {
            kv_seq_release(pool, s);
            len[i] = 0;
        } else if (ci_rng_u64(&rng) % 20 == 0) {
            prefix_cache_clear(pc);
        }
        // Right after an insert of a live sequence, its own tokens must match every block it can.
        if (len[i] > 0 && op < 11) {
            prefix_cache_insert(pc, toks[i], len[i], s);
            int want = (len[i] - 1) / BS * BS;
            int got = prefix_cache_match(pc, toks[i], len[i], probe);
            n_queries++;
            n_query_tokens += len[i];
            n_hit_tokens += got;
            if (got != want || kv_bad(pool, probe, toks[i], got) >= 0) {
                TEST_FAILF("step %d: probe of seq %d (%d tokens) covered %d, want %d", step, i, len[i], got,
                           want);
                return;
            }
            kv_seq_release(pool, probe);
        }
        struct ci_err err = {0};
        if (kv_pool_verify(pool, all, NSEQ + 1, NULL, &err) != CI_OK) {
            TEST_FAILF("step %d: %s", step, err.msg);
            return;
        }
        for (int q = 0; q < NSEQ; q++) {
            int bad = seqs[q].n * BS >= len[q] ? kv_bad(pool, &seqs[q], toks[q], len[q]) : 0;
            if (bad >= 0) {
                TEST_FAILF("step %d: seq %d position %d holds wrong KV", step, q, bad);
                return;
            }
        }
    }
    struct prefix_cache_stats st;
    prefix_cache_stats(pc, &st);
    ASSERT_EQ_I64(st.queries, n_queries);
    ASSERT_EQ_I64(st.query_tokens, n_query_tokens);
    ASSERT_EQ_I64(st.hit_tokens, n_hit_tokens);
    ASSERT_EQ_I64(st.hit_tokens, st.hit_blocks * BS);
    // The run must have exercised the interesting paths.
    CHECK(n_request_hits > 100);
    CHECK(st.evictions > 0);
    CHECK(n_limit > 0);
    CHECK(n_rollback_in_block > 0);
    for (int i = 0; i <= NSEQ; i++) {
        kv_seq_release(pool, &seqs[i]);
        kv_seq_deinit(&seqs[i]);
    }
    ASSERT_EQ_I64(kv_pool_n_available(pool), NB);
    prefix_cache_free(pc);
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB);
    kv_pool_check(pool, NULL, 0, NULL);
    kv_pool_free(pool);
}

TEST(random_ops) {
    random_run(1, 0);
    random_run(77, 0);
}

TEST(random_ops_colliding_hash) {
    random_run(2, 1);
    random_run(99, 1);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(hit_after_insert);
    RUN(miss_and_partial_prefix);
    RUN(never_all_tokens);
    RUN(forced_collisions);
    RUN(parent_chain);
    RUN(parent_serial_and_invalidate);
    RUN(stale_descendant);
    RUN(lru_eviction_order);
    RUN(reserve_and_cow_count_parked);
    RUN(checks_and_lifecycle);
    RUN(create_nomem_and_clear);
    RUN(random_ops);
    RUN(random_ops_colliding_hash);
    return test_exit_code();
}
