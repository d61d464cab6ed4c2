/* Unit tests for the paged KV block pool: sizes and layout, alloc/ref/unref and free-list reuse,
 * all-or-nothing reserve and copy-on-write, fork, the invariant checker, the cache hooks (parking, eviction,
 * invalidation, verify) driven by a fake cache, and seeded random operation sequences whose data is compared
 * after every step with a shadow copy kept by the test. */
#include "engine/kv_pool.h" // first: the header must compile on its own

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "test.h"

static size_t round64(size_t n) {
    return (n + 63) / 64 * 64;
}

/* Element x of (block, KV head, slot) of an f32 pool's layer. */
static float *slot_at(const struct ci_kv_layer *l, int is_v, int32_t blk, int h, int slot) {
    return (float *)(void *)((unsigned char *)(is_v ? l->v : l->k) + ci_kv_offset(l, blk, h, slot));
}

static struct kv_pool *make_pool_t(int n_layers, int n_kv_head, int head_dim, int block_size, int n_blocks,
                                   uint32_t type) {
    struct kv_pool_params p = {n_layers, n_kv_head, head_dim, block_size, n_blocks, type};
    struct kv_pool *pool = NULL;
    struct ci_err err = {0};
    if (kv_pool_create(&p, &pool, &err) != CI_OK) {
        printf("kv_pool_create: %s\n", err.msg);
        return NULL;
    }
    return pool;
}

static struct kv_pool *make_pool(int n_layers, int n_kv_head, int head_dim, int block_size, int n_blocks) {
    return make_pool_t(n_layers, n_kv_head, head_dim, block_size, n_blocks, CI_TYPE_F32);
}

TEST(create_invalid) {
    struct kv_pool *pool = (struct kv_pool *)1;
    struct ci_err err = {0};
    struct kv_pool_params zero = {2, 2, 4, 16, 0, CI_TYPE_F32};
    ASSERT_STATUS(kv_pool_create(&zero, &pool, &err), CI_ERR_INVALID);
    ASSERT(pool == NULL);
    struct kv_pool_params neg = {2, -1, 4, 16, 8, CI_TYPE_F32};
    ASSERT_STATUS(kv_pool_create(&neg, &pool, &err), CI_ERR_INVALID);
    // Each factor fits an int, the product of bytes does not fit size_t.
    struct kv_pool_params huge = {1000, 1 << 20, 1 << 20, 1 << 20, 1 << 20, CI_TYPE_F32};
    ASSERT_STATUS(kv_pool_create(&huge, &pool, &err), CI_ERR_INVALID);
    CHECK(strstr(err.msg, "overflow") != NULL);
    size_t sz = 0;
    ASSERT_STATUS(kv_pool_size_bytes(&huge, &sz, NULL), CI_ERR_INVALID);
    // A size that is representable but cannot be allocated under the memory limit.
    struct kv_pool_params big = {4, 4, 64, 16, 1024, CI_TYPE_F32}; // 4*2*1024*4*16*64*4 bytes = 128 MiB
    ci_mem_set_limit(ci_mem_in_use() + (1u << 20));
    enum ci_status st = kv_pool_create(&big, &pool, &err);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(pool == NULL);
}

TEST(sizes) {
    // 15 floats = 60 bytes per array, padded to 64; 2 layers x (K, V).
    struct kv_pool *pool = make_pool(2, 1, 3, 5, 1);
    ASSERT(pool);
    ASSERT_EQ_I64(kv_pool_bytes(pool), 4 * 64);
    ASSERT_EQ_I64(kv_pool_bytes_per_block(pool), 2 * 2 * 15 * 4);
    kv_pool_free(pool);

    struct kv_pool_params p = {3, 2, 8, 16, 10, CI_TYPE_F32};
    size_t want = 3 * 2 * round64((size_t)10 * 2 * 16 * 8 * 4), got = 0;
    ASSERT_STATUS(kv_pool_size_bytes(&p, &got, NULL), CI_OK);
    ASSERT_EQ_I64(got, want);
    pool = make_pool(3, 2, 8, 16, 10);
    ASSERT(pool);
    ASSERT_EQ_I64(kv_pool_bytes(pool), want);
    ASSERT_EQ_I64(kv_pool_bytes_per_block(pool), 2 * 3 * 2 * 16 * 8 * 4);
    ASSERT_EQ_I64(kv_pool_block_size(pool), 16);
    ASSERT_EQ_I64(kv_pool_n_blocks(pool), 10);
    ASSERT_EQ_I64(kv_pool_n_layers(pool), 3);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 10);
    ASSERT_EQ_I64(kv_pool_blocks_for(pool, 0), 0);
    ASSERT_EQ_I64(kv_pool_blocks_for(pool, 1), 1);
    ASSERT_EQ_I64(kv_pool_blocks_for(pool, 16), 1);
    ASSERT_EQ_I64(kv_pool_blocks_for(pool, 17), 2);
    kv_pool_free(pool);
    kv_pool_free(NULL);
}

/* f16 and q8_0 pools: row bytes (head_dim * 2; head_dim / 32 * 34), the header's size formula, q8_0's
 * head_dim rule, the layer view, and copy-on-write copying whole rows of bytes (q8_0 rows with their block
 * scales) of every layer and KV head. */
TEST(typed_pools_sizes_and_cow) {
    struct kv_pool *pool = (struct kv_pool *)1;
    struct ci_err err = {0};
    struct kv_pool_params bad = {2, 2, 48, 16, 4, CI_TYPE_Q8_0};
    ASSERT_STATUS(kv_pool_create(&bad, &pool, &err), CI_ERR_INVALID);
    ASSERT(pool == NULL);
    CHECK(strstr(err.msg, "q8_0") != NULL && strstr(err.msg, "multiple of 32") != NULL);
    struct kv_pool_params not_kv = {2, 2, 64, 16, 4, CI_TYPE_Q4_0};
    ASSERT_STATUS(kv_pool_create(&not_kv, &pool, &err), CI_ERR_INVALID);

    static const uint32_t types[] = {CI_TYPE_F32, CI_TYPE_F16, CI_TYPE_Q8_0};
    static const size_t row[] = {64 * 4, 64 * 2, 2 * 34}; // head_dim 64
    enum { L = 3, H = 2, HD = 64, BS = 5, NB = 6 };
    for (int ti = 0; ti < 3; ti++) {
        uint32_t t = types[ti];
        struct kv_pool_params p = {L, H, HD, BS, NB, t};
        size_t want = 2 * L * round64((size_t)NB * H * BS * row[ti]), got = 0;
        ASSERT_STATUS(kv_pool_size_bytes(&p, &got, NULL), CI_OK);
        ASSERT_EQ_I64(got, want);
        pool = make_pool_t(L, H, HD, BS, NB, t);
        ASSERT(pool);
        ASSERT_EQ_I64(kv_pool_type(pool), t);
        ASSERT_EQ_I64(kv_pool_bytes(pool), want);
        ASSERT_EQ_I64(kv_pool_bytes_per_block(pool), 2 * L * H * BS * row[ti]);
        struct ci_kv_layer lay;
        kv_pool_layer(pool, 1, &lay);
        ASSERT_EQ_I64(lay.type, t);
        ASSERT_EQ_I64(lay.row_bytes, row[ti]);
        ASSERT_EQ_I64(ci_kv_offset(&lay, 1, 1, 2), (size_t)((1 * H + 1) * BS + 2) * row[ti]);

        // Write rows through ci_kv_store_row into block a, share it, copy-on-write, compare bytes.
        struct kv_seq_blocks a, b;
        ASSERT_STATUS(kv_seq_init(&a, 2, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_init(&b, 2, NULL), CI_OK);
        ASSERT_STATUS(kv_seq_reserve(pool, &a, BS), CI_OK);
        float x[HD];
        for (int il = 0; il < L; il++) {
            kv_pool_layer(pool, il, &lay);
            for (int h = 0; h < H; h++)
                for (int slot = 0; slot < BS; slot++) {
                    for (int d = 0; d < HD; d++)
                        x[d] = (float)(il * 1000 + h * 100 + slot * 10) + 0.25f * (float)d - 3.0f;
                    size_t off = ci_kv_offset(&lay, a.ids[0], h, slot);
                    ci_kv_store_row(t, x, (unsigned char *)lay.k + off, HD);
                    x[0] = -x[0];
                    ci_kv_store_row(t, x, (unsigned char *)lay.v + off, HD);
                }
        }
        ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
        ASSERT_STATUS(kv_seq_prepare_write(pool, &b, BS - 1, BS), CI_OK);
        ASSERT(b.ids[0] != a.ids[0]);
        for (int il = 0; il < L; il++) {
            kv_pool_layer(pool, il, &lay);
            for (int h = 0; h < H; h++) {
                size_t oa = ci_kv_offset(&lay, a.ids[0], h, 0), ob = ci_kv_offset(&lay, b.ids[0], h, 0);
                CHECK(memcmp((unsigned char *)lay.k + oa, (unsigned char *)lay.k + ob, BS * row[ti]) == 0);
                CHECK(memcmp((unsigned char *)lay.v + oa, (unsigned char *)lay.v + ob, BS * row[ti]) == 0);
                // and the copy decodes to the written values (f32 exactly, f16 / q8_0 within rounding)
                float y[HD];
                ci_dequantize_row(t, (unsigned char *)lay.k + ob + (BS - 1) * row[ti], y, HD);
                for (int d = 0; d < HD; d++) {
                    float w = (float)(il * 1000 + h * 100 + (BS - 1) * 10) + 0.25f * (float)d - 3.0f;
                    float tol = t == CI_TYPE_F32 ? 0 : t == CI_TYPE_F16 ? fabsf(w) / 1024 : 2500.0f / 254;
                    CHECK(fabsf(y[d] - w) <= tol);
                }
            }
        }
        const struct kv_seq_blocks *all[] = {&a, &b};
        kv_pool_check(pool, all, 2, NULL);
        kv_seq_release(pool, &a);
        kv_seq_release(pool, &b);
        kv_seq_deinit(&a);
        kv_seq_deinit(&b);
        kv_pool_free(pool);
    }
    uint32_t t = 99;
    CHECK(kv_type_parse("f32", &t) && t == CI_TYPE_F32);
    CHECK(kv_type_parse("f16", &t) && t == CI_TYPE_F16);
    CHECK(kv_type_parse("q8_0", &t) && t == CI_TYPE_Q8_0);
    CHECK(!kv_type_parse("q4_0", &t) && !kv_type_parse("F16", &t) && !kv_type_parse("", &t));
    CHECK(!strcmp(kv_type_name(CI_TYPE_Q8_0), "q8_0") && !strcmp(kv_type_name(CI_TYPE_F16), "f16"));
}

TEST(layout) {
    enum { L = 3, H = 2, HD = 5, BS = 4, NB = 7 };
    struct kv_pool *pool = make_pool(L, H, HD, BS, NB);
    ASSERT(pool);
    size_t arr_floats = (size_t)NB * H * BS * HD, arr_bytes = round64(arr_floats * sizeof(float));
    struct ci_kv_layer lay[L];
    for (int il = 0; il < L; il++) {
        kv_pool_layer(pool, il, &lay[il]);
        ASSERT_EQ_I64(lay[il].block_size, BS);
        ASSERT_EQ_I64(lay[il].n_kv_head, H);
        ASSERT_EQ_I64(lay[il].head_dim, HD);
        ASSERT_EQ_I64((uintptr_t)lay[il].k % 64, 0);
        ASSERT_EQ_I64((uintptr_t)lay[il].v % 64, 0);
        // The header: K of layer il at (2*il) * array_bytes, V at (2*il + 1) * array_bytes.
        ASSERT_EQ_I64((char *)lay[il].k - (char *)lay[0].k, (ptrdiff_t)(2 * il) * (ptrdiff_t)arr_bytes);
        ASSERT_EQ_I64((char *)lay[il].v - (char *)lay[0].k, (ptrdiff_t)(2 * il + 1) * (ptrdiff_t)arr_bytes);
    }
    ASSERT_EQ_I64(kv_pool_bytes(pool), 2 * L * arr_bytes);
    // Write a distinct value to every element through ci_kv_offset, then read each back by the header's
    // [n_blocks][n_kv_head][block_size][head_dim] arithmetic: every value intact means no two overlap.
    for (int il = 0; il < L; il++)
        for (int b = 0; b < NB; b++)
            for (int h = 0; h < H; h++)
                for (int s = 0; s < BS; s++) {
                    size_t off = ci_kv_offset(&lay[il], b, h, s);
                    ASSERT(off % sizeof(float) == 0 &&
                           off + HD * sizeof(float) <= arr_floats * sizeof(float));
                    off /= sizeof(float);
                    for (int d = 0; d < HD; d++) {
                        float val = (float)((((il * NB + b) * H + h) * BS + s) * HD + d);
                        ((float *)lay[il].k)[off + d] = val;
                        ((float *)lay[il].v)[off + d] = -val - 1.0f;
                    }
                }
    const float *base = (const float *)lay[0].k;
    for (int il = 0; il < L; il++)
        for (int b = 0; b < NB; b++)
            for (int h = 0; h < H; h++)
                for (int s = 0; s < BS; s++)
                    for (int d = 0; d < HD; d++) {
                        size_t idx = (((size_t)b * H + h) * BS + s) * HD + d;
                        float val = (float)((((il * NB + b) * H + h) * BS + s) * HD + d);
                        const float *k = base + (2 * (size_t)il) * (arr_bytes / 4);
                        const float *v = base + (2 * (size_t)il + 1) * (arr_bytes / 4);
                        if (k[idx] != val || v[idx] != -val - 1.0f) {
                            TEST_FAILF("layer %d blk %d head %d slot %d dim %d: k %g v %g, want %g %g", il, b,
                                       h, s, d, (double)k[idx], (double)v[idx], (double)val,
                                       (double)(-val - 1));
                            kv_pool_free(pool);
                            return;
                        }
                    }
    kv_pool_free(pool);
}

TEST(alloc_ref_unref_reuse) {
    struct kv_pool *pool = make_pool(1, 1, 4, 4, 5);
    ASSERT(pool);
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ_I64(kv_pool_alloc(pool), i); // a fresh pool hands out 0, 1, 2, ...
        ASSERT_EQ_I64(kv_pool_refcount(pool, i), 1);
    }
    ASSERT_EQ_I64(kv_pool_n_free(pool), 0);
    ASSERT_EQ_I64(kv_pool_alloc(pool), -1);
    ASSERT_EQ_I64(kv_pool_alloc(pool), -1);
    int32_t extra[5] = {1, 1, 1, 1, 1};
    kv_pool_check(pool, NULL, 0, extra);

    kv_pool_ref(pool, 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, 2), 2);
    kv_pool_unref(pool, 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, 2), 1);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 0); // still referenced
    kv_pool_unref(pool, 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, 2), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 1);
    extra[2] = 0;
    kv_pool_check(pool, NULL, 0, extra);
    ASSERT_EQ_I64(kv_pool_alloc(pool), 2); // reused
    // LIFO: the last block freed is the first handed out again.
    kv_pool_unref(pool, 3);
    kv_pool_unref(pool, 1);
    ASSERT_EQ_I64(kv_pool_alloc(pool), 1);
    ASSERT_EQ_I64(kv_pool_alloc(pool), 3);
    ASSERT_EQ_I64(kv_pool_alloc(pool), -1);
    for (int i = 0; i < 5; i++)
        kv_pool_unref(pool, i);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 5);
    kv_pool_check(pool, NULL, 0, NULL);
    kv_pool_free(pool);
}

TEST(reserve_all_or_nothing) {
    struct kv_pool *pool = make_pool(1, 1, 2, 4, 5);
    ASSERT(pool);
    struct kv_seq_blocks a, b, small;
    ASSERT_STATUS(kv_seq_init(&a, 10, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 10, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&small, 2, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b, &small};

    ASSERT_STATUS(kv_seq_reserve(pool, &a, 0), CI_OK);
    ASSERT_EQ_I64(a.n, 0);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 1), CI_OK);
    ASSERT_EQ_I64(a.n, 1);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 4), CI_OK);
    ASSERT_EQ_I64(a.n, 1);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 5), CI_OK);
    ASSERT_EQ_I64(a.n, 2);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 3);
    kv_pool_check(pool, all, 3, NULL);

    // 13 tokens need 4 blocks, 3 are free: nothing may change.
    ASSERT_STATUS(kv_seq_reserve(pool, &b, 13), CI_ERR_LIMIT);
    ASSERT_EQ_I64(b.n, 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 3);
    kv_pool_check(pool, all, 3, NULL);
    // Capacity too small even though blocks are free.
    ASSERT_STATUS(kv_seq_reserve(pool, &small, 9), CI_ERR_LIMIT);
    ASSERT_EQ_I64(small.n, 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 3);

    ASSERT_STATUS(kv_seq_reserve(pool, &b, 12), CI_OK);
    ASSERT_EQ_I64(b.n, 3);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 0);
    kv_pool_check(pool, all, 3, NULL);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 9), CI_ERR_LIMIT);
    ASSERT_EQ_I64(a.n, 2);
    // Distinct blocks across both tables.
    int seen[5] = {0};
    for (int i = 0; i < a.n; i++)
        seen[a.ids[i]]++;
    for (int i = 0; i < b.n; i++)
        seen[b.ids[i]]++;
    for (int i = 0; i < 5; i++)
        ASSERT_EQ_I64(seen[i], 1);

    // Shrink gives back the tail blocks; the freed block is reused by the next reserve.
    int32_t last = b.ids[2];
    kv_seq_shrink(pool, &b, 5);
    ASSERT_EQ_I64(b.n, 2);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 1);
    kv_pool_check(pool, all, 3, NULL);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 9), CI_OK);
    ASSERT_EQ_I64(a.ids[2], last);
    kv_pool_check(pool, all, 3, NULL);

    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    ASSERT_EQ_I64(a.n, 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 5);
    kv_pool_check(pool, all, 3, NULL);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_seq_deinit(&small);
    kv_pool_free(pool);
}

// Test-side view of one position's K or V for one head: where the header says it lives.
static float *kv_at(struct kv_pool *pool, const struct kv_seq_blocks *seq, int il, int is_v, int h, int pos) {
    struct ci_kv_layer l;
    kv_pool_layer(pool, il, &l);
    int bs = kv_pool_block_size(pool);
    return slot_at(&l, is_v, seq->ids[pos / bs], h, pos % bs);
}

enum { CL = 2, CH = 2, CHD = 3 };

static float pattern(int tag, int il, int is_v, int h, int pos, int d) {
    return (float)(((((tag * CL + il) * 2 + is_v) * CH + h) * 64 + pos) * CHD + d);
}

static void write_pos(struct kv_pool *pool, const struct kv_seq_blocks *seq, int tag, int pos) {
    for (int il = 0; il < CL; il++)
        for (int is_v = 0; is_v < 2; is_v++)
            for (int h = 0; h < CH; h++) {
                float *x = kv_at(pool, seq, il, is_v, h, pos);
                for (int d = 0; d < CHD; d++)
                    x[d] = pattern(tag, il, is_v, h, pos, d);
            }
}

static int pos_matches(struct kv_pool *pool, const struct kv_seq_blocks *seq, int tag, int pos) {
    for (int il = 0; il < CL; il++)
        for (int is_v = 0; is_v < 2; is_v++)
            for (int h = 0; h < CH; h++) {
                const float *x = kv_at(pool, seq, il, is_v, h, pos);
                for (int d = 0; d < CHD; d++)
                    if (x[d] != pattern(tag, il, is_v, h, pos, d))
                        return 0;
            }
    return 1;
}

TEST(copy_on_write) {
    struct kv_pool *pool = make_pool(CL, CH, CHD, 4, 8);
    ASSERT(pool);
    struct kv_seq_blocks a, b;
    ASSERT_STATUS(kv_seq_init(&a, 8, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 8, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b};
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 10), CI_OK); // blocks for positions 0..11
    ASSERT_STATUS(kv_seq_prepare_write(pool, &a, 0, 10), CI_OK);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 5); // nothing shared yet: no copies
    for (int pos = 0; pos < 10; pos++)
        write_pos(pool, &a, 1, pos);

    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
    ASSERT_EQ_I64(b.n, 3);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ_I64(b.ids[i], a.ids[i]);
        ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[i]), 2);
    }
    kv_pool_check(pool, all, 2, NULL);

    // b writes positions 9..10 (block 2 only): block 2 gets a private copy, blocks 0-1 stay shared.
    int32_t shared2 = a.ids[2];
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 9, 11), CI_OK);
    ASSERT(b.ids[2] != shared2);
    ASSERT_EQ_I64(a.ids[2], shared2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, shared2), 1);
    ASSERT_EQ_I64(kv_pool_refcount(pool, b.ids[2]), 1);
    ASSERT_EQ_I64(b.ids[0], a.ids[0]);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[0]), 2);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 4);
    kv_pool_check(pool, all, 2, NULL);
    // The copy carries every position of the block, including position 8 that b does not rewrite.
    for (int pos = 0; pos < 10; pos++)
        ASSERT(pos_matches(pool, &b, 1, pos));
    write_pos(pool, &b, 2, 9);
    write_pos(pool, &b, 2, 10);
    // a's view is unchanged; b sees its own writes.
    for (int pos = 0; pos < 10; pos++)
        ASSERT(pos_matches(pool, &a, 1, pos));
    ASSERT(pos_matches(pool, &b, 2, 9));
    ASSERT(pos_matches(pool, &b, 2, 10));
    ASSERT(pos_matches(pool, &b, 1, 8));

    // a writing into its now-private block 2 copies nothing.
    ASSERT_STATUS(kv_seq_prepare_write(pool, &a, 10, 12), CI_OK);
    ASSERT_EQ_I64(a.ids[2], shared2);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 4);

    // a rewrites position 2 (block 0, shared): a gets the copy, b keeps the original.
    int32_t shared0 = b.ids[0];
    ASSERT_STATUS(kv_seq_prepare_write(pool, &a, 2, 3), CI_OK);
    ASSERT(a.ids[0] != shared0);
    ASSERT_EQ_I64(b.ids[0], shared0);
    write_pos(pool, &a, 3, 2);
    ASSERT(pos_matches(pool, &a, 3, 2));
    ASSERT(pos_matches(pool, &b, 1, 2));
    ASSERT(pos_matches(pool, &a, 1, 1));
    ASSERT(pos_matches(pool, &a, 1, 3));
    kv_pool_check(pool, all, 2, NULL);

    kv_seq_release(pool, &a);
    kv_pool_check(pool, all, 2, NULL);
    for (int pos = 0; pos < 9; pos++)
        ASSERT(pos_matches(pool, &b, 1, pos)); // b's data survived a's release
    kv_seq_release(pool, &b);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 8);
    kv_pool_check(pool, all, 2, NULL);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_pool_free(pool);
}

TEST(cow_all_or_nothing_and_fork_limit) {
    struct kv_pool *pool = make_pool(CL, CH, CHD, 2, 4);
    ASSERT(pool);
    struct kv_seq_blocks a, b, tiny;
    ASSERT_STATUS(kv_seq_init(&a, 4, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 4, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&tiny, 1, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b, &tiny};
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 6), CI_OK);
    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
    ASSERT_STATUS(kv_seq_fork(pool, &tiny, &a), CI_ERR_LIMIT);
    ASSERT_EQ_I64(tiny.n, 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 1);
    int32_t before[3];
    memcpy(before, b.ids, sizeof before);
    // Three shared blocks to copy, one free: refuse without touching anything.
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 0, 6), CI_ERR_LIMIT);
    ASSERT(memcmp(before, b.ids, sizeof before) == 0);
    for (int i = 0; i < 3; i++)
        ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[i]), 2);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 1);
    kv_pool_check(pool, all, 3, NULL);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 5, 6), CI_OK); // one copy fits
    ASSERT_EQ_I64(kv_pool_n_free(pool), 0);
    ASSERT(b.ids[2] != a.ids[2]);
    kv_pool_check(pool, all, 3, NULL);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 3, 4), CI_ERR_LIMIT);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 4, 4), CI_OK); // empty range
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    kv_pool_check(pool, all, 3, NULL);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 4);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_seq_deinit(&tiny);
    kv_pool_free(pool);
}

/* kv_seq_drop_front: the front blocks go back (shared ones only lose this table's reference), their entries
 * become holes that fork copies, release and shrink skip, and the checker accepts before live entries only;
 * reserve and copy-on-write keep working behind the holes. */
TEST(drop_front_holes) {
    struct kv_pool *pool = make_pool(CL, CH, CHD, 2, 8);
    ASSERT(pool);
    struct kv_seq_blocks a, b;
    ASSERT_STATUS(kv_seq_init(&a, 6, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 6, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b};
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 8), CI_OK); // 4 blocks
    int32_t first = a.ids[0], second = a.ids[1];
    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK); // every block shared
    ASSERT_EQ_I64(kv_seq_drop_front(pool, &a, 2), 2);
    ASSERT(a.ids[0] == -1 && a.ids[1] == -1 && a.n == 4);
    ASSERT_EQ_I64(kv_seq_n_live(&a), 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, first), 1); // b still holds them
    ASSERT_EQ_I64(kv_pool_n_free(pool), 4);
    kv_pool_check(pool, all, 2, NULL);
    ASSERT_EQ_I64(kv_seq_drop_front(pool, &a, 3), 1); // the holes are skipped
    ASSERT_EQ_I64(kv_seq_drop_front(pool, &b, 2), 2); // now the first two blocks are free
    ASSERT_EQ_I64(kv_pool_refcount(pool, first), 0);
    ASSERT_EQ_I64(kv_pool_refcount(pool, second), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 6);
    kv_pool_check(pool, all, 2, NULL);
    // Growing and writing behind the holes: a gets a new block, b's shared block 3 is copied on write.
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 10), CI_OK);
    ASSERT_STATUS(kv_seq_prepare_write(pool, &a, 6, 10), CI_OK);
    ASSERT(a.ids[3] != b.ids[3] && a.n == 5);
    kv_pool_check(pool, all, 2, NULL);
    // A fork copies the holes without references.
    kv_seq_release(pool, &b);
    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
    ASSERT(b.ids[0] == -1 && b.ids[2] == -1 && b.ids[4] == a.ids[4]);
    ASSERT_EQ_I64(kv_pool_refcount(pool, a.ids[4]), 2);
    kv_pool_check(pool, all, 2, NULL);
    // A hole after a live entry is corruption.
    int32_t keep = a.ids[4];
    a.ids[4] = -1;
    struct ci_err err = {0};
    ASSERT_STATUS(kv_pool_verify(pool, all, 2, NULL, &err), CI_ERR_INTERNAL);
    a.ids[4] = keep;
    kv_seq_shrink(pool, &a, 4); // down to the holes: nothing to unref there
    ASSERT_EQ_I64(a.n, 2);
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    kv_pool_check(pool, all, 2, NULL);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 8);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_pool_free(pool);
}

TEST(copy_block_slots) {
    enum { BS = 4 };
    struct kv_pool *pool = make_pool(CL, CH, CHD, BS, 3);
    ASSERT(pool);
    int32_t s = kv_pool_alloc(pool), d = kv_pool_alloc(pool);
    for (int il = 0; il < CL; il++) {
        struct ci_kv_layer l;
        kv_pool_layer(pool, il, &l);
        for (int h = 0; h < CH; h++)
            for (int slot = 0; slot < BS; slot++)
                for (int x = 0; x < CHD; x++) {
                    slot_at(&l, 0, s, h, slot)[x] = pattern(1, il, 0, h, slot, x);
                    slot_at(&l, 1, s, h, slot)[x] = pattern(1, il, 1, h, slot, x);
                    slot_at(&l, 0, d, h, slot)[x] = -1.0f;
                    slot_at(&l, 1, d, h, slot)[x] = -1.0f;
                }
    }
    kv_pool_copy_block(pool, d, s, 2);
    for (int il = 0; il < CL; il++) {
        struct ci_kv_layer l;
        kv_pool_layer(pool, il, &l);
        for (int h = 0; h < CH; h++)
            for (int slot = 0; slot < BS; slot++)
                for (int x = 0; x < CHD; x++) {
                    float wk = slot < 2 ? pattern(1, il, 0, h, slot, x) : -1.0f;
                    float wv = slot < 2 ? pattern(1, il, 1, h, slot, x) : -1.0f;
                    ASSERT(slot_at(&l, 0, d, h, slot)[x] == wk);
                    ASSERT(slot_at(&l, 1, d, h, slot)[x] == wv);
                    ASSERT(slot_at(&l, 0, s, h, slot)[x] == pattern(1, il, 0, h, slot, x));
                }
    }
    kv_pool_unref(pool, s);
    kv_pool_unref(pool, d);
    kv_pool_free(pool);
}

TEST(verify_detects_corruption) {
    struct kv_pool *pool = make_pool(1, 1, 2, 2, 6);
    ASSERT(pool);
    struct kv_seq_blocks a, b, fake;
    ASSERT_STATUS(kv_seq_init(&a, 6, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, 6, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&fake, 6, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 4), CI_OK);
    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
    struct ci_err err = {0};
    const struct kv_seq_blocks *both[] = {&a, &b};
    ASSERT_STATUS(kv_pool_verify(pool, both, 2, NULL, &err), CI_OK);
    // Forgetting a live table: the derived counts are one short.
    const struct kv_seq_blocks *only_a[] = {&a};
    ASSERT_STATUS(kv_pool_verify(pool, only_a, 1, NULL, &err), CI_ERR_INTERNAL);
    CHECK(strstr(err.msg, "refcount") != NULL);
    // A table naming a free block.
    fake.ids[0] = 5;
    fake.n = 1;
    const struct kv_seq_blocks *with_fake[] = {&a, &b, &fake};
    ASSERT_STATUS(kv_pool_verify(pool, with_fake, 3, NULL, &err), CI_ERR_INTERNAL);
    fake.ids[0] = 17; // out of range
    ASSERT_STATUS(kv_pool_verify(pool, with_fake, 3, NULL, &err), CI_ERR_INTERNAL);
    CHECK(strstr(err.msg, "out of range") != NULL);
    fake.n = 0;
    // A reference held outside any table must be declared through extra_refs.
    int32_t held = kv_pool_alloc(pool);
    ASSERT_STATUS(kv_pool_verify(pool, both, 2, NULL, &err), CI_ERR_INTERNAL);
    int32_t extra[6] = {0};
    extra[held] = 1;
    ASSERT_STATUS(kv_pool_verify(pool, both, 2, extra, &err), CI_OK);
    kv_pool_unref(pool, held);
    ASSERT_STATUS(kv_pool_verify(pool, both, 2, extra, &err), CI_ERR_INTERNAL);
    ASSERT_STATUS(kv_pool_verify(pool, both, 2, NULL, &err), CI_OK);
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_seq_deinit(&fake);
    kv_pool_free(pool);
}

TEST(seq_init_errors) {
    struct kv_seq_blocks s;
    struct ci_err err = {0};
    ASSERT_STATUS(kv_seq_init(&s, -1, &err), CI_ERR_INVALID);
    ASSERT_STATUS(kv_seq_init(&s, 0, &err), CI_OK);
    ASSERT_EQ_I64(s.cap, 0);
    kv_seq_deinit(&s);
    ci_mem_set_limit(ci_mem_in_use() + 64);
    enum ci_status st = kv_seq_init(&s, 1 << 20, &err);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(s.ids == NULL);
}

/* A fake cache: parks the blocks listed in want_park, evicts in FIFO order of parking, records every
 * invalidation and verify call, and can make verify fail. */
struct fake_cache {
    bool want_park[8];
    int32_t queue[8]; // parked, oldest first
    int n_queue;
    int n_invalidated, n_verify;
    int32_t invalidated[16];
    bool fail_verify;
};

static bool fake_park(void *ctx, int32_t blk) {
    struct fake_cache *fc = ctx;
    if (!fc->want_park[blk])
        return false;
    fc->queue[fc->n_queue++] = blk;
    return true;
}

static int32_t fake_evict(void *ctx) {
    struct fake_cache *fc = ctx;
    if (fc->n_queue == 0)
        return -1;
    int32_t blk = fc->queue[0];
    memmove(fc->queue, fc->queue + 1, sizeof(int32_t) * (size_t)--fc->n_queue);
    return blk;
}

static void fake_invalidate(void *ctx, int32_t blk) {
    struct fake_cache *fc = ctx;
    if (fc->n_invalidated < 16)
        fc->invalidated[fc->n_invalidated] = blk;
    fc->n_invalidated++;
}

static enum ci_status fake_verify(void *ctx, struct ci_err *err) {
    struct fake_cache *fc = ctx;
    fc->n_verify++;
    return fc->fail_verify ? ci_err_set(err, CI_ERR_INTERNAL, "fake cache says no") : CI_OK;
}

// Takes blk out of the fake cache's queue (what a real cache does on a hit or when forgetting a block).
static void fake_unqueue(struct fake_cache *fc, int32_t blk) {
    for (int i = 0; i < fc->n_queue; i++)
        if (fc->queue[i] == blk) {
            memmove(fc->queue + i, fc->queue + i + 1, sizeof(int32_t) * (size_t)(fc->n_queue - i - 1));
            fc->n_queue--;
            return;
        }
}

TEST(cache_hooks) {
    enum { NB = 6 };
    struct kv_pool *pool = make_pool(1, 1, 2, 2, NB);
    ASSERT(pool);
    struct fake_cache fc = {0};
    struct kv_pool_cache_hooks h = {fake_park, fake_evict, fake_invalidate, fake_verify};
    ASSERT(!kv_pool_has_cache(pool));
    kv_pool_set_cache(pool, &h, &fc);
    ASSERT(kv_pool_has_cache(pool));
    struct kv_seq_blocks a, b;
    ASSERT_STATUS(kv_seq_init(&a, NB, NULL), CI_OK);
    ASSERT_STATUS(kv_seq_init(&b, NB, NULL), CI_OK);
    const struct kv_seq_blocks *all[] = {&a, &b};
    ASSERT_STATUS(kv_seq_reserve(pool, &a, 8), CI_OK); // blocks 0..3
    for (int i = 0; i < 4; i++)
        ASSERT_EQ_I64(a.ids[i], i);
    fc.want_park[1] = fc.want_park[2] = fc.want_park[3] = true;
    kv_pool_check(pool, all, 2, NULL);
    ASSERT_EQ_I64(fc.n_verify, 1); // the pool's check runs the cache's

    // Release last first: 3 and 2 are parked, in that order; shrink keeps 0 and 1.
    kv_seq_shrink(pool, &a, 4);
    ASSERT_EQ_I64(fc.n_queue, 2);
    ASSERT_EQ_I64(fc.queue[0], 3);
    ASSERT_EQ_I64(fc.queue[1], 2);
    ASSERT(kv_pool_is_parked(pool, 3) && kv_pool_is_parked(pool, 2) && !kv_pool_is_parked(pool, 1));
    ASSERT_EQ_I64(kv_pool_refcount(pool, 3), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool), 2);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 2);
    ASSERT_EQ_I64(kv_pool_n_available(pool), 4);
    kv_pool_check(pool, all, 2, NULL);

    // Alloc takes free blocks first (LIFO), then asks the cache, oldest parked first.
    ASSERT_STATUS(kv_seq_reserve(pool, &b, 6), CI_OK);
    ASSERT_EQ_I64(b.ids[0], 4);
    ASSERT_EQ_I64(b.ids[1], 5);
    ASSERT_EQ_I64(b.ids[2], 3);
    ASSERT_EQ_I64(kv_pool_refcount(pool, 3), 1);
    ASSERT(!kv_pool_is_parked(pool, 3));
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 1);
    kv_pool_check(pool, all, 2, NULL);
    // Four more blocks than available (1): refused, nothing evicted.
    ASSERT_STATUS(kv_seq_reserve(pool, &b, 10), CI_ERR_LIMIT);
    ASSERT_EQ_I64(b.n, 3);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 1);

    // A hit hands a parked block back (refcount 0 -> 1); a forgotten one goes to the free list.
    fake_unqueue(&fc, 2);
    kv_pool_take_parked(pool, 2);
    ASSERT_EQ_I64(kv_pool_refcount(pool, 2), 1);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0);
    ASSERT_EQ_I64(kv_pool_alloc(pool), -1); // nothing free, nothing parked
    int32_t extra[NB] = {0};
    extra[2] = 1;
    kv_pool_check(pool, all, 2, extra);
    kv_pool_unref(pool, 2); // parked again
    ASSERT(kv_pool_is_parked(pool, 2));
    fake_unqueue(&fc, 2);
    kv_pool_drop_parked(pool, 2);
    ASSERT(!kv_pool_is_parked(pool, 2));
    ASSERT_EQ_I64(kv_pool_n_free(pool), 1);
    kv_pool_check(pool, all, 2, NULL);

    // Writing in place (refcount 1) reports each block of the range to the cache; shared blocks are copied
    // instead and not reported.
    fc.n_invalidated = 0;
    ASSERT_STATUS(kv_seq_prepare_write(pool, &a, 1, 4), CI_OK); // blocks 0 and 1 of a, both private
    ASSERT_EQ_I64(fc.n_invalidated, 2);
    ASSERT_EQ_I64(fc.invalidated[0], 0);
    ASSERT_EQ_I64(fc.invalidated[1], 1);
    kv_seq_release(pool, &b);
    ASSERT_STATUS(kv_seq_fork(pool, &b, &a), CI_OK);
    fc.n_invalidated = 0;
    ASSERT_STATUS(kv_seq_prepare_write(pool, &b, 2, 3), CI_OK); // block 1 shared: copied
    ASSERT(b.ids[1] != a.ids[1]);
    ASSERT_EQ_I64(fc.n_invalidated, 0);
    kv_pool_check(pool, all, 2, NULL);

    // A failing cache check fails the pool's.
    struct ci_err err = {0};
    fc.fail_verify = true;
    ASSERT_STATUS(kv_pool_verify(pool, all, 2, NULL, &err), CI_ERR_INTERNAL);
    CHECK(strstr(err.msg, "fake cache") != NULL);
    fc.fail_verify = false;

    // Detach: park everything it holds, then give it back before detaching.
    kv_seq_release(pool, &a);
    kv_seq_release(pool, &b);
    // Blocks the cache does not want (0, 4, 5 and b's copy) went to the free list as before.
    ASSERT(!kv_pool_is_parked(pool, 0));
    ASSERT_EQ_I64(kv_pool_refcount(pool, 0), 0);
    ASSERT_EQ_I64(kv_pool_n_free(pool) + kv_pool_n_parked(pool), NB);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), fc.n_queue);
    kv_pool_check(pool, all, 2, NULL);
    while (fc.n_queue > 0) {
        int32_t blk = fc.queue[0];
        fake_unqueue(&fc, blk);
        kv_pool_drop_parked(pool, blk);
    }
    kv_pool_set_cache(pool, NULL, NULL);
    ASSERT(!kv_pool_has_cache(pool));
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB);
    ASSERT_EQ_I64(kv_pool_n_available(pool), NB);
    kv_pool_check(pool, all, 2, NULL);
    // Without a cache nothing is parked any more.
    int32_t blk = kv_pool_alloc(pool);
    kv_pool_unref(pool, blk);
    ASSERT_EQ_I64(kv_pool_n_parked(pool), 0);
    kv_seq_deinit(&a);
    kv_seq_deinit(&b);
    kv_pool_free(pool);
}

/* Random operations over several sequences (append with COW, fork, shrink, release), with kv_pool_check and a
 * full data comparison against a shadow copy after every step.  The shadow stores, per sequence and position,
 * the tag of the write that produced it; sharing and copy-on-write must make every sequence read exactly its
 * own history. */
TEST(random_ops) {
    enum { NSEQ = 6, BS = 3, NB = 24, CAP = 10, MAXPOS = CAP * BS };
    struct kv_pool *pool = make_pool(CL, CH, CHD, BS, NB);
    ASSERT(pool);
    struct kv_seq_blocks seqs[NSEQ];
    const struct kv_seq_blocks *all[NSEQ];
    int len[NSEQ] = {0};
    int tag[NSEQ][MAXPOS];
    for (int i = 0; i < NSEQ; i++) {
        ASSERT_STATUS(kv_seq_init(&seqs[i], CAP, NULL), CI_OK);
        all[i] = &seqs[i];
    }
    struct ci_rng rng;
    ci_rng_seed(&rng, 1234);
    int n_limit = 0, n_cow = 0, n_fork = 0;
    for (int step = 1; step <= 10000; step++) {
        int i = (int)(ci_rng_u64(&rng) % NSEQ), op = (int)(ci_rng_u64(&rng) % 10);
        struct kv_seq_blocks *s = &seqs[i];
        if (op < 6) { // append k tokens
            int k = 1 + (int)(ci_rng_u64(&rng) % 5);
            if (len[i] + k > MAXPOS)
                k = MAXPOS - len[i];
            int n_before = s->n, free_before = kv_pool_n_free(pool);
            int32_t ids_before[CAP];
            memcpy(ids_before, s->ids, sizeof(int32_t) * (size_t)s->n);
            enum ci_status st = kv_seq_reserve(pool, s, len[i] + k);
            if (st == CI_OK)
                st = kv_seq_prepare_write(pool, s, len[i], len[i] + k);
            if (st != CI_OK) {
                ASSERT_STATUS(st, CI_ERR_LIMIT);
                n_limit++;
                // A refused prepare_write leaves the table as reserve left it; give the new blocks back so
                // the failed append as a whole changes nothing.
                kv_seq_shrink(pool, s, (int64_t)n_before * BS);
                ASSERT_EQ_I64(s->n, n_before);
                ASSERT(memcmp(ids_before, s->ids, sizeof(int32_t) * (size_t)n_before) == 0);
                ASSERT_EQ_I64(kv_pool_n_free(pool), free_before);
            } else {
                for (int j = 0; j < n_before && j < s->n; j++)
                    n_cow += ids_before[j] != s->ids[j];
                for (int pos = len[i]; pos < len[i] + k; pos++) {
                    write_pos(pool, s, step, pos);
                    tag[i][pos] = step;
                }
                len[i] += k;
            }
        } else if (op < 7) { // fork a random other sequence into this one
            int j = (int)(ci_rng_u64(&rng) % NSEQ);
            if (j != i) {
                kv_seq_release(pool, s);
                ASSERT_STATUS(kv_seq_fork(pool, s, &seqs[j]), CI_OK);
                len[i] = len[j];
                memcpy(tag[i], tag[j], sizeof(int) * (size_t)len[j]);
                n_fork++;
            }
        } else if (op < 9) { // shrink to a random length
            int to = len[i] ? (int)(ci_rng_u64(&rng) % (uint64_t)len[i]) : 0;
            kv_seq_shrink(pool, s, to);
            ASSERT_EQ_I64(s->n, kv_pool_blocks_for(pool, to));
            len[i] = to;
        } else {
            kv_seq_release(pool, s);
            len[i] = 0;
        }
        kv_pool_check(pool, all, NSEQ, NULL);
        for (int q = 0; q < NSEQ; q++) {
            ASSERT(seqs[q].n * BS >= len[q]);
            for (int pos = 0; pos < len[q]; pos++)
                if (!pos_matches(pool, &seqs[q], tag[q][pos], pos)) {
                    TEST_FAILF("step %d: seq %d position %d lost its data (tag %d)", step, q, pos,
                               tag[q][pos]);
                    return;
                }
        }
    }
    // The run must have exercised the interesting paths.
    CHECK(n_limit > 0);
    CHECK(n_cow > 0);
    CHECK(n_fork > 0);
    for (int i = 0; i < NSEQ; i++) {
        kv_seq_release(pool, &seqs[i]);
        kv_seq_deinit(&seqs[i]);
    }
    ASSERT_EQ_I64(kv_pool_n_free(pool), NB);
    kv_pool_check(pool, NULL, 0, NULL);
    kv_pool_free(pool);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(create_invalid);
    RUN(sizes);
    RUN(layout);
    RUN(typed_pools_sizes_and_cow);
    RUN(alloc_ref_unref_reuse);
    RUN(reserve_all_or_nothing);
    RUN(copy_on_write);
    RUN(cow_all_or_nothing_and_fork_limit);
    RUN(drop_front_holes);
    RUN(copy_block_slots);
    RUN(verify_detects_corruption);
    RUN(seq_init_errors);
    RUN(cache_hooks);
    RUN(random_ops);
    return test_exit_code();
}
