/* GGUF reader and writer tests: facts of the shared real files (values from MANIFEST.md and an independent
 * Python dump of the files), the writer's exact byte layout against a hand-assembled file, writer → reader
 * round trips of every value type and several tensor types, and malformed files (every truncation, hostile
 * counts and sizes, bad tensor infos), each of which must fail with a message naming the culprit, plus a
 * seeded random-mutation loop that must never crash. */
#include "format/gguf.h"
#include "format/gguf_write.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "test_util.h"

/* ---- helpers ---- */

static bool str_eq(struct gguf_str s, const char *want) {
    return s.len == strlen(want) && memcmp(s.data, want, s.len) == 0;
}

/* Opens an exact-size heap copy, so ASan sees any read past the end. */
static enum ci_status open_copy(const uint8_t *bytes, size_t n, struct gguf **g, struct ci_err *err,
                                void **copy) {
    *copy = malloc(n ? n : 1);
    if (n)
        memcpy(*copy, bytes, n);
    return gguf_open_mem(*copy, n, g, err);
}

/* A hand-assembled GGUF image: every byte placed here, independently of the writer. */
struct tb {
    uint8_t *p;
    size_t n, cap;
};

static void tb_put(struct tb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void tb_u32(struct tb *b, uint32_t v) {
    tb_put(b, &v, 4);
}
static void tb_u64(struct tb *b, uint64_t v) {
    tb_put(b, &v, 8);
}
static void tb_str(struct tb *b, const char *s) {
    tb_u64(b, strlen(s));
    tb_put(b, s, strlen(s));
}
static void tb_hdr(struct tb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    tb_put(b, "GGUF", 4);
    tb_u32(b, version);
    tb_u64(b, n_tensors);
    tb_u64(b, n_kv);
}
static void tb_kv_u32(struct tb *b, const char *key, uint32_t v) {
    tb_str(b, key);
    tb_u32(b, GGUF_TYPE_UINT32);
    tb_u32(b, v);
}
static void tb_kv_str(struct tb *b, const char *key, const char *v) {
    tb_str(b, key);
    tb_u32(b, GGUF_TYPE_STRING);
    tb_str(b, v);
}
static void tb_tinfo(struct tb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t offset) {
    tb_str(b, name);
    tb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        tb_u64(b, ne[d]);
    tb_u32(b, type);
    tb_u64(b, offset);
}
static void tb_pad(struct tb *b, size_t align) {
    static const uint8_t z[256];
    tb_put(b, z, (align - b->n % align) % align);
}
static void tb_fill(struct tb *b, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        tb_put(b, &v, 1);
}

/* Expects the image to be rejected with a "gguf: ..." message containing want (if non-NULL). */
#define EXPECT_REJECT(b, want)                                                                               \
    do {                                                                                                     \
        struct gguf *g_ = NULL;                                                                              \
        struct ci_err e_ = {0};                                                                              \
        void *c_;                                                                                            \
        enum ci_status s_ = open_copy((b)->p, (b)->n, &g_, &e_, &c_);                                        \
        if (s_ == CI_OK) {                                                                                   \
            TEST_FAILF("accepted a malformed file (want error '%s')", (want) ? (want) : "");                 \
            gguf_free(g_);                                                                                   \
        } else if (g_ != NULL || strncmp(e_.msg, "gguf: ", 6) != 0 || ((want) && !strstr(e_.msg, (want)))) { \
            TEST_FAILF("error '%s' (status %d) does not name '%s'", e_.msg, (int)s_, (want) ? (want) : "");  \
        }                                                                                                    \
        free(c_);                                                                                            \
        free((b)->p);                                                                                        \
        *(b) = (struct tb){0};                                                                               \
    } while (0)

/* ---- real files ---- */

TEST(stories260k) {
    char path[512];
    struct gguf *g = NULL;
    struct ci_err err = {0};
    test_model_path(path, sizeof path, "stories260K.gguf");
    enum ci_status s = gguf_open(path, &g, &err);
    if (s != CI_OK)
        printf("  %s\n", err.msg);
    ASSERT_STATUS(s, CI_OK);
    CHECK(gguf_version(g) == 3);
    CHECK(gguf_n_tensors(g) == 48);
    CHECK(gguf_n_kv(g) == 19);
    CHECK(gguf_alignment(g) == 32);
    CHECK(gguf_file_size(g) == 1185376);
    CHECK(gguf_data_offset(g) == 14176); // header ends at 14152 (Python dump), aligned up to 32
    CHECK(test_gguf_int(g, "llama.context_length") == 2048);
    CHECK(test_gguf_int(g, "llama.embedding_length") == 64);
    CHECK(test_gguf_int(g, "llama.feed_forward_length") == 172);
    CHECK(test_gguf_int(g, "llama.block_count") == 5);
    CHECK(test_gguf_int(g, "llama.attention.head_count") == 8);
    CHECK(test_gguf_int(g, "llama.attention.head_count_kv") == 4);
    CHECK(test_gguf_int(g, "llama.rope.dimension_count") == 8);
    CHECK(test_gguf_int(g, "tokenizer.ggml.bos_token_id") == 1);
    CHECK(test_gguf_int(g, "tokenizer.ggml.seperator_token_id") == 4294967295LL); // u32 max fits int64
    float eps = 0;
    ASSERT_STATUS(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL), CI_OK);
    ASSERT_NEAR(eps, 1e-5, 1e-9);
    struct gguf_str str;
    ASSERT_STATUS(gguf_get_str(g, "general.architecture", &str, NULL), CI_OK);
    CHECK(str_eq(str, "llama"));
    ASSERT_STATUS(gguf_get_str(g, "tokenizer.ggml.model", &str, NULL), CI_OK);
    CHECK(str_eq(str, "llama"));
    CHECK(gguf_kv_type(g, gguf_find_key(g, "llama.block_count")) == GGUF_TYPE_UINT32);
    CHECK(strcmp(gguf_kv_key(g, 0), "tokenizer.ggml.tokens") == 0);

    struct gguf_arr arr;
    ASSERT_STATUS(gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, NULL), CI_OK);
    ASSERT(arr.elem_type == GGUF_TYPE_STRING && arr.n == 512);
    CHECK(str_eq(gguf_arr_str(&arr, 0), "<unk>"));
    CHECK(str_eq(gguf_arr_str(&arr, 1), "<s>"));
    CHECK(str_eq(gguf_arr_str(&arr, 2), "</s>"));
    CHECK(str_eq(gguf_arr_str(&arr, 3), "<0x00>"));
    ASSERT_STATUS(gguf_get_arr(g, "tokenizer.ggml.token_type", &arr, NULL), CI_OK);
    ASSERT(arr.n == 512 && arr.elem_type == GGUF_TYPE_INT32);
    CHECK(gguf_arr_i64(&arr, 0) == 2 && gguf_arr_i64(&arr, 1) == 3 && gguf_arr_i64(&arr, 3) == 6);
    ASSERT_STATUS(gguf_get_arr(g, "tokenizer.ggml.scores", &arr, NULL), CI_OK);
    CHECK(arr.n == 512 && arr.elem_type == GGUF_TYPE_FLOAT32 && gguf_arr_f64(&arr, 0) == 0.0);

    // Getter errors name the key; _opt forms leave the output alone when absent.
    int64_t v = 77;
    CHECK(gguf_get_int(g, "no.such.key", &v, &err) == CI_ERR_INVALID && strstr(err.msg, "no.such.key"));
    CHECK(gguf_get_int(g, "general.name", &v, &err) == CI_ERR_FORMAT && strstr(err.msg, "general.name"));
    CHECK(gguf_get_str(g, "llama.block_count", &str, &err) == CI_ERR_FORMAT);
    CHECK(gguf_get_arr(g, "llama.block_count", &arr, &err) == CI_ERR_FORMAT);
    CHECK(gguf_get_f32(g, "llama.block_count", &eps, &err) == CI_ERR_FORMAT);
    CHECK(gguf_get_bool(g, "llama.block_count", &(bool){0}, &err) == CI_ERR_FORMAT);
    CHECK(gguf_get_int_opt(g, "no.such.key", &v, &err) == CI_OK && v == 77);
    CHECK(gguf_get_int_opt(g, "llama.block_count", &v, &err) == CI_OK && v == 5);
    CHECK(gguf_find_key(g, "llama") == -1 && gguf_find_key(g, "") == -1);

    int64_t ti = gguf_find_tensor(g, "token_embd.weight");
    ASSERT(ti >= 0);
    const struct ci_tensor *t = gguf_tensor(g, ti);
    CHECK(strcmp(t->name, "token_embd.weight") == 0);
    CHECK(t->type == CI_TYPE_F32 && t->n_dims == 2);
    CHECK(t->ne[0] == 64 && t->ne[1] == 512 && t->ne[2] == 1 && t->ne[3] == 1);
    CHECK(t->row_bytes == 256 && t->nbytes == 64 * 512 * 4);
    t = gguf_tensor(g, gguf_find_tensor(g, "blk.4.ffn_down.weight"));
    CHECK(t->ne[0] == 172 && t->ne[1] == 64 && t->nbytes == 172 * 64 * 4);
    CHECK(gguf_find_tensor(g, "blk.5.ffn_down.weight") == -1);

    // Tensor bytes: token_embd starts the data section, output_norm sits at offset 131072 (Python dump).
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    static uint8_t want[64 * 512 * 4];
    CHECK(fseek(f, 14176, SEEK_SET) == 0 && fread(want, 1, sizeof want, f) == sizeof want);
    CHECK(memcmp(gguf_tensor(g, gguf_find_tensor(g, "token_embd.weight"))->data, want, sizeof want) == 0);
    CHECK(fseek(f, 14176 + 131072, SEEK_SET) == 0 && fread(want, 1, 256, f) == 256);
    CHECK(memcmp(gguf_tensor(g, gguf_find_tensor(g, "output_norm.weight"))->data, want, 256) == 0);
    fclose(f);
    // All 48 tensors are F32 and together cover the data section exactly (stories260K has no padding gaps
    // to speak of: every size is a multiple of 32).
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        CHECK(gguf_tensor(g, i)->type == CI_TYPE_F32);
        total += gguf_tensor(g, i)->nbytes;
    }
    CHECK(total == 1185376 - 14176);
    gguf_free(g);
}

struct vocab_fact {
    const char *file, *model, *pre, *arch;
    uint64_t n_vocab;
    int64_t bos;
    const char *tok0;
};

TEST(vocab_files) {
    // n_vocab and model/pre from MANIFEST.md; bos and first token from an independent Python dump.
    static const struct vocab_fact facts[] = {
        {"ggml-vocab-llama-spm.gguf", "llama", "default", "llama", 32000, 1, "<unk>"},
        {"ggml-vocab-phi-3.gguf", "llama", "default", "phi3", 32064, -1, NULL},
        {"ggml-vocab-gpt-2.gguf", "gpt2", "gpt-2", "gpt2", 50257, 50256, "!"},
        {"ggml-vocab-falcon.gguf", "gpt2", "falcon", NULL, 65024, -1, NULL},
        {"ggml-vocab-mpt.gguf", "gpt2", "mpt", NULL, 50432, -1, NULL},
        {"ggml-vocab-refact.gguf", "gpt2", "refact", NULL, 49216, -1, NULL},
        {"ggml-vocab-starcoder.gguf", "gpt2", "starcoder", "starcoder2", 49152, -1, NULL},
        {"ggml-vocab-deepseek-coder.gguf", "gpt2", "deepseek-coder", NULL, 32256, -1, NULL},
        {"ggml-vocab-deepseek-llm.gguf", "gpt2", "deepseek-llm", "llama", 102400, 100000, "!"},
        {"ggml-vocab-bert-bge.gguf", "bert", "bert-bge", "bert", 30522, -1, "[PAD]"},
    };
    for (size_t k = 0; k < sizeof facts / sizeof facts[0]; k++) {
        const struct vocab_fact *v = &facts[k];
        char name[256], path[512];
        struct gguf *g = NULL;
        struct ci_err err = {0};
        snprintf(name, sizeof name, "ggml-vocab/%s", v->file);
        test_model_path(path, sizeof path, name);
        enum ci_status s = gguf_open(path, &g, &err);
        if (s != CI_OK)
            printf("  %s\n", err.msg);
        ASSERT_STATUS(s, CI_OK);
        CHECK(gguf_version(g) == 3 && gguf_n_tensors(g) == 0);
        CHECK(gguf_data_offset(g) >= gguf_file_size(g)); // no padding after the KVs
        struct gguf_str str;
        CHECK(gguf_get_str(g, "tokenizer.ggml.model", &str, NULL) == CI_OK && str_eq(str, v->model));
        CHECK(gguf_get_str(g, "tokenizer.ggml.pre", &str, NULL) == CI_OK && str_eq(str, v->pre));
        if (v->arch)
            CHECK(gguf_get_str(g, "general.architecture", &str, NULL) == CI_OK && str_eq(str, v->arch));
        struct gguf_arr arr;
        ASSERT_STATUS(gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, NULL), CI_OK);
        if (arr.n != v->n_vocab)
            TEST_FAILF("%s: %llu tokens, want %llu", v->file, (unsigned long long)arr.n,
                       (unsigned long long)v->n_vocab);
        ASSERT(arr.elem_type == GGUF_TYPE_STRING);
        if (v->tok0)
            CHECK(str_eq(gguf_arr_str(&arr, 0), v->tok0));
        if (v->bos >= 0)
            CHECK(test_gguf_int(g, "tokenizer.ggml.bos_token_id") == v->bos);
        // Every token string lies inside the file: walk them all (ASan/bounds) and check they are non-empty.
        uint64_t n_empty = 0, bytes = 0;
        for (uint64_t i = 0; i < arr.n; i++) {
            struct gguf_str t = gguf_arr_str(&arr, i);
            n_empty += t.len == 0;
            bytes += t.len;
        }
        CHECK(n_empty == 0 && bytes < gguf_file_size(g));
        gguf_free(g);
    }
    // Two more facts: gpt-2 has 50000 merges and token 50256 is <|endoftext|>.
    char path[512];
    struct gguf *g = NULL;
    ASSERT_STATUS(gguf_open(test_model_path(path, sizeof path, "ggml-vocab/ggml-vocab-gpt-2.gguf"), &g, NULL),
                  CI_OK);
    struct gguf_arr arr;
    CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", &arr, NULL) == CI_OK && arr.n == 50000);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, NULL) == CI_OK &&
          str_eq(gguf_arr_str(&arr, 50256), "<|endoftext|>"));
    gguf_free(g);
}

TEST(open_errors) {
    struct gguf *g = (struct gguf *)1;
    struct ci_err err = {0};
    CHECK(gguf_open("/nonexistent/dir/x.gguf", &g, &err) == CI_ERR_IO && g == NULL);
    CHECK(strstr(err.msg, "/nonexistent/dir/x.gguf") != NULL);
    char path[512];
    ASSERT(test_write_file(test_tmp_path(path, sizeof path, "empty.gguf"), "", 0));
    CHECK(gguf_open(path, &g, &err) == CI_ERR_FORMAT && g == NULL);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "magic"));
    remove(path);
}

/* ---- writer ---- */

TEST(writer_exact_bytes) {
    // The writer's output must equal a hand-assembled file byte for byte (layout from the GGUF spec).
    float data[4] = {1, 2, 3, 4};
    struct gguf_writer *w = gguf_writer_create();
    ASSERT(w);
    gguf_writer_set_u32(w, "a", 7);
    gguf_writer_set_str(w, "s", "hi");
    gguf_writer_add_tensor(w, "t", CI_TYPE_F32, 1, (const int64_t[]){4}, data);
    gguf_writer_add_tensor(w, "u", CI_TYPE_F32, 2, (const int64_t[]){2, 2}, data);
    uint8_t *img;
    uint64_t size;
    struct ci_err err = {0};
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, &err), CI_OK);

    struct tb b = {0};
    tb_hdr(&b, 3, 2, 2);
    tb_kv_u32(&b, "a", 7);
    tb_kv_str(&b, "s", "hi");
    tb_tinfo(&b, "t", 1, (const uint64_t[]){4}, 0, 0);
    tb_tinfo(&b, "u", 2, (const uint64_t[]){2, 2}, 0, 32);
    tb_pad(&b, 32);
    tb_put(&b, data, 16);
    tb_fill(&b, 16, 0);
    tb_put(&b, data, 16);
    tb_fill(&b, 16, 0);
    CHECK(size == b.n && gguf_writer_file_size(w) == b.n);
    CHECK(size == b.n && memcmp(img, b.p, b.n) == 0);
    ci_free(img);
    free(b.p);
    gguf_writer_free(w);
}

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

TEST(writer_round_trip) {
    struct gguf_writer *w = gguf_writer_create();
    ASSERT(w);
    gguf_writer_set_u8(w, "v.u8", 200);
    gguf_writer_set_i8(w, "v.i8", -100);
    gguf_writer_set_u16(w, "v.u16", 60000);
    gguf_writer_set_i16(w, "v.i16", -30000);
    gguf_writer_set_u32(w, "v.u32", 4000000000u);
    gguf_writer_set_i32(w, "v.i32", -2000000000);
    gguf_writer_set_u64(w, "v.u64", 0x8000000000000005ull);
    gguf_writer_set_u64(w, "v.u64small", 123456789012345ull);
    gguf_writer_set_i64(w, "v.i64", INT64_MIN);
    gguf_writer_set_f32(w, "v.f32", 1.5f);
    gguf_writer_set_f64(w, "v.f64", -2.25e300);
    gguf_writer_set_f64(w, "v.f64small", 0.125);
    gguf_writer_set_bool(w, "v.bool", true);
    gguf_writer_set_bool(w, "v.false", false);
    gguf_writer_set_str(w, "v.empty", "");
    gguf_writer_set_strn(w, "v.nul", "x\0y", 3);
    gguf_writer_set_str(w, "v.replaced", "old");
    gguf_writer_set_str(w, "v.replaced", "new"); // replaces, keeps one key
    gguf_writer_set_str(w, "v.removed", "gone");
    gguf_writer_remove_key(w, "v.removed");

    static const uint8_t a_u8[] = {0, 1, 255};
    static const int8_t a_i8[] = {-128, 0, 127};
    static const uint16_t a_u16[] = {0, 65535};
    static const int16_t a_i16[] = {-32768, 32767};
    static const uint32_t a_u32[] = {0, 4294967295u, 5};
    static const int32_t a_i32[] = {-7, 7};
    static const float a_f32[] = {0.5f, -1.25f};
    static const uint8_t a_bool[] = {1, 0, 1};
    static const uint64_t a_u64[] = {1, 0xffffffffffffffffull};
    static const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    static const double a_f64[] = {1e-300, -3.5};
    gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, a_u8, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, a_i8, 3);
    gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, a_u16, 2);
    gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, a_i16, 2);
    gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, a_u32, 3);
    gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, a_i32, 2);
    gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, a_f32, 2);
    gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, a_bool, 3);
    gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, a_u64, 2);
    gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, a_i64, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, a_f64, 2);
    gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_INT32, NULL, 0);
    const char *strs[] = {"", "a", "h\xc3\xa9llo", "x\0y"};
    const size_t lens[] = {0, 1, 6, 3};
    gguf_writer_set_arr_str(w, "a.str", strs, lens, 4);
    gguf_writer_set_arr_str(w, "a.str_empty", NULL, NULL, 0);
    // [[ "p", "q" ], [], [[1, 2, 3]]] : array of arrays of mixed element types.
    const char *pq[] = {"p", "q"};
    static const int32_t n123[] = {1, 2, 3};
    struct gguf_warr deep1[] = {{GGUF_TYPE_INT32, 3, n123, NULL}};
    struct gguf_warr inner[] = {{GGUF_TYPE_STRING, 2, pq, NULL},
                                {GGUF_TYPE_STRING, 0, NULL, NULL},
                                {GGUF_TYPE_ARRAY, 1, deep1, NULL}};
    struct gguf_warr outer = {GGUF_TYPE_ARRAY, 3, inner, NULL};
    gguf_writer_set_arr_v(w, "a.nested", &outer);
    struct gguf_warr empty_arrs = {GGUF_TYPE_ARRAY, 0, NULL, NULL};
    gguf_writer_set_arr_v(w, "a.nested_empty", &empty_arrs);
    // A chain of exactly GGUF_MAX_ARRAY_DEPTH arrays is allowed; one more is refused by the writer.
    struct gguf_warr chain[GGUF_MAX_ARRAY_DEPTH + 1];
    chain[GGUF_MAX_ARRAY_DEPTH] = (struct gguf_warr){GGUF_TYPE_UINT8, 3, a_u8, NULL};
    for (int d = GGUF_MAX_ARRAY_DEPTH - 1; d >= 0; d--)
        chain[d] = (struct gguf_warr){GGUF_TYPE_ARRAY, 1, &chain[d + 1], NULL};
    gguf_writer_set_arr_v(w, "a.deep", &chain[1]); // depth 8
    ASSERT_STATUS(gguf_writer_status(w, NULL), CI_OK);

    // Tensors of several types; sizes computed by hand from the block layouts.
    static uint8_t d_f32[8 * 3 * 4], d_f16[16 * 2], d_q8[2 * 34 * 2], d_q4[18 * 3], d_q4k[144],
        d_bf16[5 * 2 * 2];
    fill_bytes(d_f32, sizeof d_f32, 1);
    fill_bytes(d_f16, sizeof d_f16, 2);
    fill_bytes(d_q8, sizeof d_q8, 3);
    fill_bytes(d_q4, sizeof d_q4, 4);
    fill_bytes(d_q4k, sizeof d_q4k, 5);
    fill_bytes(d_bf16, sizeof d_bf16, 6);
    gguf_writer_add_tensor(w, "t.f32", CI_TYPE_F32, 2, (const int64_t[]){8, 3}, d_f32);
    gguf_writer_add_tensor(w, "t.f16", CI_TYPE_F16, 1, (const int64_t[]){16}, d_f16);
    gguf_writer_add_tensor(w, "t.q8_0", CI_TYPE_Q8_0, 2, (const int64_t[]){64, 2}, d_q8);
    gguf_writer_add_tensor(w, "t.q4_0", CI_TYPE_Q4_0, 3, (const int64_t[]){32, 1, 3}, d_q4);
    gguf_writer_add_tensor(w, "t.q4_k", CI_TYPE_Q4_K, 1, (const int64_t[]){256}, d_q4k);
    gguf_writer_add_tensor(w, "t.bf16", CI_TYPE_BF16, 4, (const int64_t[]){5, 1, 1, 2}, d_bf16);
    ASSERT_STATUS(gguf_writer_status(w, NULL), CI_OK);
    CHECK(gguf_writer_tensor_nbytes(w, 2) == 136 && gguf_writer_tensor_nbytes(w, 3) == 54);

    uint8_t *img;
    uint64_t size;
    struct ci_err err = {0};
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, &err), CI_OK);
    CHECK(size == gguf_writer_file_size(w));
    struct gguf *g = NULL;
    enum ci_status s = gguf_open_mem(img, size, &g, &err);
    if (s)
        printf("  %s\n", err.msg);
    ASSERT_STATUS(s, CI_OK);

    int64_t v;
    CHECK(test_gguf_int(g, "v.u8") == 200 && gguf_kv_type(g, gguf_find_key(g, "v.u8")) == GGUF_TYPE_UINT8);
    CHECK(test_gguf_int(g, "v.i8") == -100 && gguf_kv_type(g, gguf_find_key(g, "v.i8")) == GGUF_TYPE_INT8);
    CHECK(test_gguf_int(g, "v.u16") == 60000 && test_gguf_int(g, "v.i16") == -30000);
    CHECK(test_gguf_int(g, "v.u32") == 4000000000LL && test_gguf_int(g, "v.i32") == -2000000000);
    CHECK(test_gguf_int(g, "v.i64") == INT64_MIN && test_gguf_int(g, "v.u64small") == 123456789012345LL);
    CHECK(gguf_get_int(g, "v.u64", &v, &err) == CI_ERR_FORMAT && strstr(err.msg, "v.u64"));
    uint64_t raw_n;
    const uint8_t *raw = gguf_kv_raw(g, gguf_find_key(g, "v.u64"), &raw_n);
    uint64_t u64;
    memcpy(&u64, raw, 8);
    CHECK(raw_n == 8 && u64 == 0x8000000000000005ull);
    float fv;
    CHECK(gguf_get_f32(g, "v.f32", &fv, NULL) == CI_OK && fv == 1.5f);
    CHECK(gguf_get_f32(g, "v.f64small", &fv, NULL) == CI_OK && fv == 0.125f);
    double d64;
    raw = gguf_kv_raw(g, gguf_find_key(g, "v.f64"), &raw_n);
    memcpy(&d64, raw, 8);
    CHECK(raw_n == 8 && d64 == -2.25e300 && gguf_kv_type(g, gguf_find_key(g, "v.f64")) == GGUF_TYPE_FLOAT64);
    bool bv = false;
    CHECK(gguf_get_bool(g, "v.bool", &bv, NULL) == CI_OK && bv);
    CHECK(gguf_get_bool(g, "v.false", &bv, NULL) == CI_OK && !bv);
    CHECK(gguf_get_int(g, "v.bool", &v, NULL) == CI_ERR_FORMAT); // bool is not an integer
    struct gguf_str str;
    CHECK(gguf_get_str(g, "v.empty", &str, NULL) == CI_OK && str.len == 0);
    CHECK(gguf_get_str(g, "v.nul", &str, NULL) == CI_OK && str.len == 3 && memcmp(str.data, "x\0y", 3) == 0);
    CHECK(gguf_get_str(g, "v.replaced", &str, NULL) == CI_OK && str_eq(str, "new"));
    CHECK(gguf_find_key(g, "v.removed") == -1);
    CHECK(gguf_n_kv(g) == 17 + 17); // 17 scalars/strings (one removed, one replaced) + 17 arrays

    struct gguf_arr a;
#define CHECK_ARR(key, type, vals, cnt)                                                                      \
    do {                                                                                                     \
        CHECK(gguf_get_arr(g, key, &a, NULL) == CI_OK && a.elem_type == (type) && a.n == (cnt));             \
        CHECK(a.n == (cnt) && memcmp(a.data, vals, sizeof vals) == 0);                                       \
        for (uint64_t i_ = 0; i_ < a.n && i_ < (cnt); i_++)                                                  \
            CHECK(gguf_arr_f64(&a, i_) == (double)vals[i_]);                                                 \
    } while (0)
    CHECK_ARR("a.u8", GGUF_TYPE_UINT8, a_u8, 3);
    CHECK_ARR("a.i8", GGUF_TYPE_INT8, a_i8, 3);
    CHECK_ARR("a.u16", GGUF_TYPE_UINT16, a_u16, 2);
    CHECK_ARR("a.i16", GGUF_TYPE_INT16, a_i16, 2);
    CHECK_ARR("a.u32", GGUF_TYPE_UINT32, a_u32, 3);
    CHECK_ARR("a.i32", GGUF_TYPE_INT32, a_i32, 2);
    CHECK_ARR("a.f32", GGUF_TYPE_FLOAT32, a_f32, 2);
    CHECK_ARR("a.bool", GGUF_TYPE_BOOL, a_bool, 3);
    CHECK_ARR("a.u64", GGUF_TYPE_UINT64, a_u64, 2);
    CHECK_ARR("a.i64", GGUF_TYPE_INT64, a_i64, 2);
    CHECK_ARR("a.f64", GGUF_TYPE_FLOAT64, a_f64, 2);
    CHECK(gguf_get_arr(g, "a.i64", &a, NULL) == CI_OK && gguf_arr_i64(&a, 0) == INT64_MIN &&
          gguf_arr_i64(&a, 1) == INT64_MAX);
    CHECK(gguf_get_arr(g, "a.u64", &a, NULL) == CI_OK && gguf_arr_i64(&a, 1) == INT64_MAX); // saturates
    CHECK(gguf_get_arr(g, "a.f32", &a, NULL) == CI_OK && gguf_arr_i64(&a, 1) == -1);        // truncates
    CHECK(gguf_get_arr(g, "a.empty", &a, NULL) == CI_OK && a.n == 0 && a.elem_type == GGUF_TYPE_INT32);
    CHECK(gguf_get_arr(g, "a.str", &a, NULL) == CI_OK && a.n == 4 && a.elem_type == GGUF_TYPE_STRING);
    for (uint64_t i = 0; i < 4 && a.n == 4; i++) {
        struct gguf_str e = gguf_arr_str(&a, i);
        CHECK(e.len == lens[i] && memcmp(e.data, strs[i], lens[i]) == 0);
    }
    CHECK(gguf_get_arr(g, "a.str_empty", &a, NULL) == CI_OK && a.n == 0 && a.elem_type == GGUF_TYPE_STRING);
    ASSERT(gguf_get_arr(g, "a.nested", &a, NULL) == CI_OK && a.n == 3 && a.elem_type == GGUF_TYPE_ARRAY);
    struct gguf_arr in0 = gguf_arr_arr(&a, 0), in1 = gguf_arr_arr(&a, 1), in2 = gguf_arr_arr(&a, 2);
    CHECK(in0.elem_type == GGUF_TYPE_STRING && in0.n == 2);
    CHECK(in0.n == 2 && str_eq(gguf_arr_str(&in0, 0), "p") && str_eq(gguf_arr_str(&in0, 1), "q"));
    CHECK(in1.elem_type == GGUF_TYPE_STRING && in1.n == 0);
    ASSERT(in2.elem_type == GGUF_TYPE_ARRAY && in2.n == 1);
    struct gguf_arr in20 = gguf_arr_arr(&in2, 0);
    CHECK(in20.elem_type == GGUF_TYPE_INT32 && in20.n == 3 && gguf_arr_i64(&in20, 2) == 3);
    CHECK(gguf_get_arr(g, "a.nested_empty", &a, NULL) == CI_OK && a.n == 0 && a.elem_type == GGUF_TYPE_ARRAY);
    ASSERT(gguf_get_arr(g, "a.deep", &a, NULL) == CI_OK);
    for (int d = 1; d < GGUF_MAX_ARRAY_DEPTH; d++) {
        ASSERT(a.elem_type == GGUF_TYPE_ARRAY && a.n == 1);
        a = gguf_arr_arr(&a, 0);
    }
    CHECK(a.elem_type == GGUF_TYPE_UINT8 && a.n == 3 && gguf_arr_i64(&a, 2) == 255);

    // Tensors: bytes, shapes, alignment of every offset, zero padding between them.
    static const struct {
        const char *name;
        const uint8_t *data;
        uint64_t nbytes;
        uint32_t type;
        int n_dims;
    } want[] = {
        {"t.f32", d_f32, sizeof d_f32, CI_TYPE_F32, 2},   {"t.f16", d_f16, sizeof d_f16, CI_TYPE_F16, 1},
        {"t.q8_0", d_q8, sizeof d_q8, CI_TYPE_Q8_0, 2},   {"t.q4_0", d_q4, sizeof d_q4, CI_TYPE_Q4_0, 3},
        {"t.q4_k", d_q4k, sizeof d_q4k, CI_TYPE_Q4_K, 1}, {"t.bf16", d_bf16, sizeof d_bf16, CI_TYPE_BF16, 4}};
    ASSERT(gguf_n_tensors(g) == 6);
    CHECK(gguf_data_offset(g) % 32 == 0);
    uint64_t prev_end = gguf_data_offset(g);
    for (int64_t i = 0; i < 6; i++) {
        const struct ci_tensor *t = gguf_tensor(g, gguf_find_tensor(g, want[i].name));
        CHECK(t == gguf_tensor(g, i));
        CHECK(t->type == want[i].type && t->n_dims == want[i].n_dims && t->nbytes == want[i].nbytes);
        CHECK(memcmp(t->data, want[i].data, want[i].nbytes) == 0);
        uint64_t off = (uint64_t)((const uint8_t *)t->data - img);
        CHECK(off % 32 == 0 && off >= prev_end);
        for (uint64_t k = prev_end; k < off; k++)
            CHECK(img[k] == 0);
        prev_end = off + t->nbytes;
    }
    const struct ci_tensor *t = gguf_tensor(g, 3);
    CHECK(t->ne[0] == 32 && t->ne[1] == 1 && t->ne[2] == 3 && t->ne[3] == 1 && t->row_bytes == 18);
    t = gguf_tensor(g, 2);
    CHECK(t->row_bytes == 68);
    gguf_free(g);

    // Streaming to a FILE gives the same bytes as the in-memory image; write_file too.
    FILE *f = tmpfile();
    ASSERT(f);
    ASSERT_STATUS(gguf_writer_write_header(w, f, &err), CI_OK);
    CHECK(gguf_writer_write_tensor_data(w, f, 1, d_f16, &err) == CI_ERR_INVALID); // out of order
    gguf_writer_free(w);
    fclose(f);
    ci_free(img);
}

/* Builds the small file used by streaming, truncation and mutation tests (tensor data sizes are multiples of
 * 32, so the file has no trailing padding and every proper prefix is malformed). */
static struct gguf_writer *small_writer(uint8_t *tdata, size_t tdata_n) {
    struct gguf_writer *w = gguf_writer_create();
    if (!w)
        return NULL;
    fill_bytes(tdata, tdata_n, 9);
    const char *toks[] = {"<unk>", "<s>", "", "hello"};
    static const float scores[] = {0, -1, -2, -3};
    static const int32_t types[] = {2, 3, 3, 1};
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 2);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_u64(w, "big", 1ull << 40);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 4);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 4);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 4);
    const char *ab[] = {"a", "bc"};
    struct gguf_warr in[] = {{GGUF_TYPE_STRING, 2, ab, NULL}, {GGUF_TYPE_INT32, 4, types, NULL}};
    struct gguf_warr nested = {GGUF_TYPE_ARRAY, 2, in, NULL};
    gguf_writer_set_arr_v(w, "nested", &nested);
    gguf_writer_add_tensor(w, "a", CI_TYPE_F32, 2, (const int64_t[]){8, 4}, tdata);          // 128 bytes
    gguf_writer_add_tensor(w, "b", CI_TYPE_Q8_0, 2, (const int64_t[]){32, 16}, tdata + 128); // 544 bytes
    gguf_writer_add_tensor(w, "c", CI_TYPE_F16, 1, (const int64_t[]){16}, tdata + 672);      // 32 bytes
    return w;
}

TEST(writer_streaming_and_file) {
    static uint8_t tdata[704];
    struct gguf_writer *w = small_writer(tdata, sizeof tdata);
    ASSERT(w);
    uint8_t *img;
    uint64_t size;
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, NULL), CI_OK);
    FILE *f = tmpfile();
    ASSERT(f);
    struct ci_err err = {0};
    CHECK(gguf_writer_write_tensor_data(w, f, 0, tdata, &err) == CI_ERR_INVALID); // before the header
    gguf_writer_free(w);

    w = small_writer(tdata, sizeof tdata);
    ASSERT_STATUS(gguf_writer_write_header(w, f, &err), CI_OK);
    ASSERT_STATUS(gguf_writer_write_tensor_data(w, f, 0, tdata, &err), CI_OK);
    ASSERT_STATUS(gguf_writer_write_tensor_data(w, f, 1, tdata + 128, &err), CI_OK);
    ASSERT_STATUS(gguf_writer_write_tensor_data(w, f, 2, tdata + 672, &err), CI_OK);
    CHECK(gguf_writer_add_tensor(w, "late", CI_TYPE_F32, 1, (const int64_t[]){1}, tdata) == CI_ERR_INVALID);
    long n = ftell(f);
    CHECK(n == (long)size);
    uint8_t *back = malloc(size);
    rewind(f);
    CHECK(fread(back, 1, size, f) == size && memcmp(back, img, size) == 0);
    fclose(f);
    free(back);
    gguf_writer_free(w);

    w = small_writer(tdata, sizeof tdata);
    char path[512];
    test_tmp_path(path, sizeof path, "small.gguf");
    ASSERT_STATUS(gguf_writer_write_file(w, path, &err), CI_OK);
    struct gguf *g = NULL;
    ASSERT_STATUS(gguf_open(path, &g, &err), CI_OK);
    CHECK(gguf_file_size(g) == size && gguf_n_tensors(g) == 3);
    CHECK(memcmp(gguf_tensor(g, 1)->data, tdata + 128, 544) == 0);
    gguf_free(g);
    remove(path);
    CHECK(gguf_writer_write_file(w, "/nonexistent/dir/x.gguf", &err) == CI_ERR_IO);
    gguf_writer_free(w);
    ci_free(img);

    // A tensor without data cannot go through write_mem / write_file.
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "nodata", CI_TYPE_F32, 1, (const int64_t[]){8}, NULL);
    CHECK(gguf_writer_write_mem(w, &img, &size, &err) == CI_ERR_INVALID && strstr(err.msg, "nodata"));
    gguf_writer_free(w);
}

TEST(writer_rejects) {
    struct ci_err err = {0};
    float x[64] = {0};
    struct gguf_writer *w = gguf_writer_create();
    CHECK(gguf_writer_set_u32(w, "", 1) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_set_u32(w, "bad\xff", 1) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_set_u32(w, "general.alignment", 48) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_set_u64(w, "general.alignment", 64) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_add_tensor(w, "q", CI_TYPE_Q8_0, 1, (const int64_t[]){33}, x) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_add_tensor(w, "q", 99, 1, (const int64_t[]){1}, x) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_add_tensor(w, "q", CI_TYPE_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}, x) ==
          CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    CHECK(gguf_writer_add_tensor(w, "q", CI_TYPE_F32, 1, (const int64_t[]){0}, x) == CI_ERR_INVALID);
    gguf_writer_free(w);
    w = gguf_writer_create();
    struct gguf_warr chain[GGUF_MAX_ARRAY_DEPTH + 2]; // chain[1..9]: 9 nested arrays around floats
    chain[GGUF_MAX_ARRAY_DEPTH + 1] = (struct gguf_warr){GGUF_TYPE_FLOAT32, 1, x, NULL};
    for (int d = GGUF_MAX_ARRAY_DEPTH; d >= 1; d--)
        chain[d] = (struct gguf_warr){GGUF_TYPE_ARRAY, 1, &chain[d + 1], NULL};
    CHECK(gguf_writer_set_arr_v(w, "deep", &chain[1]) == CI_ERR_INVALID);
    gguf_writer_free(w);

    // Errors are sticky: a later write reports the first one, naming the tensor.
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "dup", CI_TYPE_F32, 1, (const int64_t[]){4}, x);
    CHECK(gguf_writer_add_tensor(w, "dup", CI_TYPE_F32, 1, (const int64_t[]){4}, x) == CI_ERR_INVALID);
    gguf_writer_set_u32(w, "fine", 1);
    uint8_t *img = NULL;
    uint64_t size;
    CHECK(gguf_writer_write_mem(w, &img, &size, &err) == CI_ERR_INVALID && strstr(err.msg, "dup") && !img);
    gguf_writer_free(w);

    // Alignment 64 is honoured by offsets and the data start.
    w = gguf_writer_create();
    gguf_writer_add_tensor(w, "t0", CI_TYPE_F32, 1, (const int64_t[]){3}, x);
    gguf_writer_add_tensor(w, "t1", CI_TYPE_F32, 1, (const int64_t[]){3}, x);
    gguf_writer_set_u32(w, "general.alignment", 64);
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, &err), CI_OK);
    struct gguf *g;
    ASSERT_STATUS(gguf_open_mem(img, size, &g, &err), CI_OK);
    CHECK(gguf_alignment(g) == 64 && gguf_data_offset(g) % 64 == 0);
    CHECK((const uint8_t *)gguf_tensor(g, 1)->data - (const uint8_t *)gguf_tensor(g, 0)->data == 64);
    CHECK(size == gguf_data_offset(g) + 128);
    gguf_free(g);
    ci_free(img);
    gguf_writer_free(w);
}

TEST(writer_copy_kv) {
    // Copying every key/value of a real file reproduces them (tokens compared string by string).
    char path[512];
    struct gguf *src = NULL, *g = NULL;
    ASSERT_STATUS(gguf_open(test_model_path(path, sizeof path, "stories260K.gguf"), &src, NULL), CI_OK);
    struct gguf_writer *w = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(src); i++)
        gguf_writer_copy_kv(w, src, i);
    uint8_t *img;
    uint64_t size;
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, NULL), CI_OK);
    ASSERT_STATUS(gguf_open_mem(img, size, &g, NULL), CI_OK);
    CHECK(gguf_n_kv(g) == 19 && gguf_n_tensors(g) == 0);
    CHECK(test_gguf_int(g, "llama.block_count") == 5);
    struct gguf_arr a, b;
    ASSERT(gguf_get_arr(src, "tokenizer.ggml.tokens", &a, NULL) == CI_OK);
    ASSERT(gguf_get_arr(g, "tokenizer.ggml.tokens", &b, NULL) == CI_OK && a.n == b.n);
    for (uint64_t i = 0; i < a.n; i++) {
        struct gguf_str x = gguf_arr_str(&a, i), y = gguf_arr_str(&b, i);
        CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
    }
    gguf_free(g);
    gguf_free(src);
    ci_free(img);
    gguf_writer_free(w);
}

TEST(writer_reproduces_stories260k) {
    // stories260K.gguf was written by llama.cpp's gguf-py: copying its key/values and tensors through the
    // writer must reproduce the file byte for byte (same order, offsets, alignment and zero padding).
    char path[512];
    struct gguf *src = NULL;
    ASSERT_STATUS(gguf_open(test_model_path(path, sizeof path, "stories260K.gguf"), &src, NULL), CI_OK);
    struct gguf_writer *w = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(src); i++)
        gguf_writer_copy_kv(w, src, i);
    for (int64_t i = 0; i < gguf_n_tensors(src); i++) {
        const struct ci_tensor *t = gguf_tensor(src, i);
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    uint8_t *img;
    uint64_t size;
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, NULL), CI_OK);
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    uint8_t *orig = malloc(1185376);
    CHECK(fread(orig, 1, 1185376, f) == 1185376);
    fclose(f);
    CHECK(size == 1185376 && memcmp(img, orig, 1185376) == 0);
    free(orig);
    ci_free(img);
    gguf_writer_free(w);
    gguf_free(src);
}

/* ---- malformed inputs ---- */

TEST(truncation_every_offset) {
    static uint8_t tdata[704];
    struct gguf_writer *w = small_writer(tdata, sizeof tdata);
    uint8_t *img;
    uint64_t size;
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, NULL), CI_OK);
    gguf_writer_free(w);
    int n_bad = 0;
    for (uint64_t len = 0; len <= size; len++) {
        struct gguf *g = NULL;
        struct ci_err err = {0};
        void *copy;
        enum ci_status s = open_copy(img, (size_t)len, &g, &err, &copy);
        if (len == size) {
            CHECK(s == CI_OK);
        } else if (s == CI_OK || g != NULL || strncmp(err.msg, "gguf: ", 6) != 0 || strlen(err.msg) < 12) {
            if (n_bad++ < 5)
                TEST_FAILF("truncated to %llu of %llu: status %d msg '%s'", (unsigned long long)len,
                           (unsigned long long)size, (int)s, err.msg);
        }
        gguf_free(g);
        free(copy);
    }
    CHECK(n_bad == 0);
    ci_free(img);
}

TEST(bad_header) {
    struct tb b = {0};
    tb_put(&b, "GGUG", 4);
    tb_u32(&b, 3);
    tb_u64(&b, 0);
    tb_u64(&b, 0);
    EXPECT_REJECT(&b, "magic");
    tb_hdr(&b, 1, 0, 0);
    EXPECT_REJECT(&b, "version 1");
    tb_hdr(&b, 4, 0, 0);
    EXPECT_REJECT(&b, "version 4");
    tb_hdr(&b, 0x03000000u, 0, 0);
    EXPECT_REJECT(&b, "big-endian");
    tb_put(&b, "GGUF", 4);
    tb_u32(&b, 3);
    tb_u64(&b, 0);
    EXPECT_REJECT(&b, "truncated");
    // Counts beyond what the file could hold fail before any allocation.
    tb_hdr(&b, 3, 0, 1ull << 63);
    EXPECT_REJECT(&b, "kv_count 9223372036854775808");
    tb_hdr(&b, 3, 0, UINT64_MAX);
    EXPECT_REJECT(&b, "kv_count");
    tb_hdr(&b, 3, 1ull << 63, 0);
    EXPECT_REJECT(&b, "tensor_count");
    tb_hdr(&b, 3, UINT64_MAX, 1);
    tb_kv_u32(&b, "k", 1);
    EXPECT_REJECT(&b, "tensor_count");
    // A valid minimal header: v2 and v3 with nothing in them are accepted.
    struct gguf *g;
    tb_hdr(&b, 2, 0, 0);
    CHECK(gguf_open_mem(b.p, b.n, &g, NULL) == CI_OK && gguf_version(g) == 2);
    gguf_free(g);
    free(b.p);
}

TEST(bad_kvs) {
    struct tb b = {0};
    // Key length huge / past the end.
    tb_hdr(&b, 3, 0, 1);
    tb_u64(&b, UINT64_MAX);
    tb_put(&b, "keykeykeykeykey", 15);
    EXPECT_REJECT(&b, "exceeds");
    tb_hdr(&b, 3, 0, 1);
    tb_u64(&b, 1ull << 63);
    tb_put(&b, "keykeykeykeykey", 15);
    EXPECT_REJECT(&b, "exceeds");
    tb_hdr(&b, 3, 0, 1);
    tb_u64(&b, 0);
    tb_u32(&b, GGUF_TYPE_UINT32);
    tb_u32(&b, 1);
    EXPECT_REJECT(&b, "empty");
    tb_hdr(&b, 3, 0, 1);
    tb_u64(&b, 3);
    tb_put(&b, "a\0b", 3);
    tb_u32(&b, GGUF_TYPE_UINT32);
    tb_u32(&b, 1);
    EXPECT_REJECT(&b, "NUL");
    // String value length huge.
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "general.name");
    tb_u32(&b, GGUF_TYPE_STRING);
    tb_u64(&b, 1ull << 63);
    tb_put(&b, "abcdefgh", 8);
    EXPECT_REJECT(&b, "general.name");
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "general.name");
    tb_u32(&b, GGUF_TYPE_STRING);
    tb_u64(&b, UINT64_MAX);
    EXPECT_REJECT(&b, "general.name");
    // Unknown value types, as a value and as an array element.
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "weird");
    tb_u32(&b, 13);
    tb_u64(&b, 0);
    EXPECT_REJECT(&b, "key 'weird': unknown value type 13");
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "weird");
    tb_u32(&b, GGUF_TYPE_ARRAY);
    tb_u32(&b, 0xffffffffu);
    tb_u64(&b, 1);
    tb_u64(&b, 0);
    EXPECT_REJECT(&b, "weird");
    // Array counts beyond the file.
    const uint64_t huge[] = {1ull << 63, UINT64_MAX, 4294967295ull};
    for (int k = 0; k < 3; k++) {
        tb_hdr(&b, 3, 0, 1);
        tb_str(&b, "tokenizer.ggml.tokens");
        tb_u32(&b, GGUF_TYPE_ARRAY);
        tb_u32(&b, GGUF_TYPE_STRING);
        tb_u64(&b, huge[k]);
        tb_str(&b, "a");
        tb_str(&b, "b");
        EXPECT_REJECT(&b, "key 'tokenizer.ggml.tokens': array of");
        tb_hdr(&b, 3, 0, 1);
        tb_str(&b, "scores");
        tb_u32(&b, GGUF_TYPE_ARRAY);
        tb_u32(&b, GGUF_TYPE_FLOAT64);
        tb_u64(&b, huge[k]);
        tb_u64(&b, 0);
        EXPECT_REJECT(&b, "scores");
    }
    // Array of strings whose last string runs past the end.
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "toks");
    tb_u32(&b, GGUF_TYPE_ARRAY);
    tb_u32(&b, GGUF_TYPE_STRING);
    tb_u64(&b, 2);
    tb_str(&b, "a");
    tb_u64(&b, 100);
    tb_put(&b, "short", 5);
    EXPECT_REJECT(&b, "toks");
    // Nesting bomb: 1000 arrays each holding one array.
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "bomb");
    tb_u32(&b, GGUF_TYPE_ARRAY);
    for (int k = 0; k < 1000; k++) {
        tb_u32(&b, GGUF_TYPE_ARRAY);
        tb_u64(&b, 1);
    }
    EXPECT_REJECT(&b, "key 'bomb': arrays nested deeper");
    // Duplicate key.
    tb_hdr(&b, 3, 0, 3);
    tb_kv_u32(&b, "x", 1);
    tb_kv_u32(&b, "y", 1);
    tb_kv_u32(&b, "x", 2);
    EXPECT_REJECT(&b, "key 'x': duplicate");
    // Alignment: 0, 3, wrong type.
    tb_hdr(&b, 3, 0, 1);
    tb_kv_u32(&b, "general.alignment", 0);
    EXPECT_REJECT(&b, "general.alignment");
    tb_hdr(&b, 3, 0, 1);
    tb_kv_u32(&b, "general.alignment", 3);
    EXPECT_REJECT(&b, "general.alignment");
    tb_hdr(&b, 3, 0, 1);
    tb_str(&b, "general.alignment");
    tb_u32(&b, GGUF_TYPE_UINT64);
    tb_u64(&b, 32);
    EXPECT_REJECT(&b, "general.alignment");
    tb_hdr(&b, 3, 0, 1);
    tb_kv_str(&b, "general.alignment", "32");
    EXPECT_REJECT(&b, "general.alignment");
}

/* A file with one KV and the given tensor infos, followed by data_bytes of data after the aligned start. */
static void tensors_file(struct tb *b, int n, const char *const *names, const uint32_t *n_dims,
                         const uint64_t (*ne)[5], const uint32_t *types, const uint64_t *offsets,
                         size_t data_bytes) {
    tb_hdr(b, 3, (uint64_t)n, 1);
    tb_kv_str(b, "general.architecture", "llama");
    for (int i = 0; i < n; i++)
        tb_tinfo(b, names[i], n_dims[i], ne[i], types[i], offsets[i]);
    tb_pad(b, 32);
    tb_fill(b, data_bytes, 0x5a);
}

#define ONE_TENSOR(b, name, nd, type, off, data_bytes, ...)                                                  \
    do {                                                                                                     \
        const char *nm_[] = {name};                                                                          \
        const uint32_t nd_[] = {nd}, ty_[] = {type};                                                         \
        const uint64_t ne_[][5] = {{__VA_ARGS__}}, of_[] = {off};                                            \
        tensors_file(b, 1, nm_, nd_, ne_, ty_, of_, data_bytes);                                             \
    } while (0)

TEST(bad_tensors) {
    struct tb b = {0};
    struct gguf *g;
    struct ci_err err = {0};
    // The valid baseline first: F32 [8 x 4] at offset 0 with exactly 128 bytes of data.
    ONE_TENSOR(&b, "blk.3.attn_q.weight", 2, CI_TYPE_F32, 0, 128, 8, 4);
    ASSERT_STATUS(gguf_open_mem(b.p, b.n, &g, &err), CI_OK);
    CHECK(gguf_tensor(g, 0)->nbytes == 128);
    gguf_free(g);
    free(b.p);
    b = (struct tb){0};

    ONE_TENSOR(&b, "blk.3.attn_q.weight", 2, CI_TYPE_F32, 0, 127, 8, 4);
    EXPECT_REJECT(&b, "tensor 'blk.3.attn_q.weight': data [");
    ONE_TENSOR(&b, "blk.3.attn_q.weight", 0, CI_TYPE_F32, 0, 128, 8);
    EXPECT_REJECT(&b, "tensor 'blk.3.attn_q.weight': n_dims 0");
    ONE_TENSOR(&b, "blk.3.attn_q.weight", 5, CI_TYPE_F32, 0, 128, 8, 4, 1, 1, 1);
    EXPECT_REJECT(&b, "tensor 'blk.3.attn_q.weight': n_dims 5");
    ONE_TENSOR(&b, "w", 2, CI_TYPE_F32, 0, 128, 8, 0);
    EXPECT_REJECT(&b, "tensor 'w': ne[1] = 0");
    ONE_TENSOR(&b, "w", 2, CI_TYPE_F32, 0, 128, 1ull << 62, 1ull << 62);
    EXPECT_REJECT(&b, "tensor 'w': element count overflows");
    ONE_TENSOR(&b, "w", 1, CI_TYPE_F32, 0, 128, 1ull << 63);
    EXPECT_REJECT(&b, "tensor 'w'");
    ONE_TENSOR(&b, "w", 1, CI_TYPE_I8, 0, 128, 1ull << 62); // size fits 64 bits, data does not fit the file
    EXPECT_REJECT(&b, "past end of file");
    ONE_TENSOR(&b, "w", 2, 99, 0, 128, 8, 4);
    EXPECT_REJECT(&b, "tensor 'w': unknown tensor type 99");
    ONE_TENSOR(&b, "w", 2, 4, 0, 128, 8, 4); // id 4 (old Q4_2) is not a known type
    EXPECT_REJECT(&b, "tensor 'w': unknown tensor type 4");
    ONE_TENSOR(&b, "w.q8", 2, CI_TYPE_Q8_0, 0, 256, 33, 2);
    EXPECT_REJECT(&b, "tensor 'w.q8': ne[0] = 33 is not a multiple");
    ONE_TENSOR(&b, "w", 2, CI_TYPE_F32, 16, 256, 8, 4);
    EXPECT_REJECT(&b, "tensor 'w': offset 16 is not a multiple");
    ONE_TENSOR(&b, "w", 2, CI_TYPE_F32, 1ull << 40, 128, 8, 4);
    EXPECT_REJECT(&b, "tensor 'w': data [");
    ONE_TENSOR(&b, "w", 2, CI_TYPE_F32, UINT64_MAX - 31, 128, 8, 4);
    EXPECT_REJECT(&b, "tensor 'w': offset 18446744073709551584 + size 128 overflows");
    ONE_TENSOR(&b, "", 2, CI_TYPE_F32, 0, 128, 8, 4);
    EXPECT_REJECT(&b, "name length 0");
    char long_name[301];
    memset(long_name, 'n', 300);
    long_name[300] = '\0';
    ONE_TENSOR(&b, long_name, 2, CI_TYPE_F32, 0, 128, 8, 4);
    EXPECT_REJECT(&b, "name length 300");
    ONE_TENSOR(&b, "bad\xc3", 2, CI_TYPE_F32, 0, 128, 8, 4);
    EXPECT_REJECT(&b, "UTF-8");
    {
        // Overlap: b starts inside a (offset 64 < 0 + 128).
        const char *nm[] = {"ta", "tb"};
        const uint32_t nd[] = {2, 2}, ty[] = {CI_TYPE_F32, CI_TYPE_F32};
        const uint64_t ne[][5] = {{8, 4}, {8, 4}}, of[] = {0, 64};
        tensors_file(&b, 2, nm, nd, ne, ty, of, 256);
        EXPECT_REJECT(&b, "tensor 'tb': data [224, 352) overlaps tensor 'ta' [160, 288)");
        // Listed in the other order: still caught (sorted by offset).
        const uint64_t of2[] = {64, 0};
        tensors_file(&b, 2, nm, nd, ne, ty, of2, 256);
        EXPECT_REJECT(&b, "overlaps");
        // Same offset twice.
        const uint64_t of3[] = {0, 0};
        tensors_file(&b, 2, nm, nd, ne, ty, of3, 256);
        EXPECT_REJECT(&b, "overlaps");
        // Adjacent is fine.
        const uint64_t of4[] = {128, 0};
        tensors_file(&b, 2, nm, nd, ne, ty, of4, 256);
        ASSERT_STATUS(gguf_open_mem(b.p, b.n, &g, &err), CI_OK);
        gguf_free(g);
        free(b.p);
        b = (struct tb){0};
        // Duplicate names.
        const char *dup[] = {"same", "same"};
        const uint64_t of5[] = {0, 128};
        tensors_file(&b, 2, dup, nd, ne, ty, of5, 256);
        EXPECT_REJECT(&b, "tensor 'same': duplicate tensor name");
    }
    // A tensor_count beyond the bytes left (each info needs at least 33 bytes).
    tb_hdr(&b, 3, 1000, 0);
    tb_fill(&b, 64, 0);
    EXPECT_REJECT(&b, "tensor_count 1000");
    // A file with tensors whose aligned data start lies past EOF (no data at all).
    tb_hdr(&b, 3, 1, 0);
    tb_tinfo(&b, "w", 1, (const uint64_t[]){8}, CI_TYPE_F32, 0);
    EXPECT_REJECT(&b, "tensor 'w': data [");
}

/* general.alignment may be any power of two (as llama.cpp reads it), but a tensor's data must sit where its
 * elements can be read in place: an F32 tensor at an odd offset is refused, naming it; types whose blocks
 * need less (MXFP4: bytes only; F16: 2) load at such offsets.  The image is copied to a malloc'd buffer
 * (16-aligned), so offsets and addresses agree. */
static void one_tensor_aligned_1(struct tb *b, const char *name, uint32_t type, uint64_t ne0, size_t bytes,
                                 int want_mod4) {
    tb_hdr(b, 3, 1, 1);
    tb_kv_u32(b, "general.alignment", 1);
    // The data section starts right after the tensor info (alignment 1): choose the offset from its length.
    size_t info_bytes = 8 + strlen(name) + 4 + 8 + 4 + 8;
    uint64_t start = b->n + info_bytes, off = (uint64_t)((4 + want_mod4 - (int)(start % 4)) % 4);
    tb_tinfo(b, name, 1, (const uint64_t[]){ne0}, type, off);
    if (b->n != start)
        abort(); // the info length above is wrong
    tb_fill(b, (size_t)off + bytes, 0x11);
}

TEST(tensor_data_alignment) {
    struct tb b = {0};
    struct gguf *g;
    struct ci_err err = {0};
    void *c;
    one_tensor_aligned_1(&b, "blk.0.attn_norm.weight", CI_TYPE_F32, 8, 32, 1);
    EXPECT_REJECT(&b, "tensor 'blk.0.attn_norm.weight': data at offset");
    one_tensor_aligned_1(&b, "w", CI_TYPE_F32, 8, 32, 2);
    EXPECT_REJECT(&b, "not aligned to 4 bytes, as F32 blocks need (general.alignment is 1)");
    one_tensor_aligned_1(&b, "w", CI_TYPE_F16, 8, 16, 1);
    EXPECT_REJECT(&b, "not aligned to 2 bytes, as F16");
    one_tensor_aligned_1(&b, "w", CI_TYPE_Q4_K, 256, 144, 2);
    EXPECT_REJECT(&b, "not aligned to 8 bytes, as Q4_K");
    // Where the blocks allow it, the same odd or even offsets load.
    const struct {
        uint32_t type;
        uint64_t ne0;
        size_t bytes;
        int mod4;
    } ok[] = {{CI_TYPE_F32, 8, 32, 0},
              {CI_TYPE_F16, 8, 16, 2},
              {CI_TYPE_Q8_0, 32, 34, 2},
              {CI_TYPE_MXFP4, 32, 17, 1},
              {CI_TYPE_MXFP4, 32, 17, 3}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        one_tensor_aligned_1(&b, "w", ok[i].type, ok[i].ne0, ok[i].bytes, ok[i].mod4);
        enum ci_status s = open_copy(b.p, b.n, &g, &err, &c);
        if (s != CI_OK)
            TEST_FAILF("%s at offset 4k + %d refused: %s", ci_type_name(ok[i].type), ok[i].mod4, err.msg);
        if (s == CI_OK) {
            CHECK((uintptr_t)gguf_tensor(g, 0)->data % 4 == (uintptr_t)ok[i].mod4);
            gguf_free(g);
        }
        free(c);
        free(b.p);
        b = (struct tb){0};
    }
}

/* The block types of the files people download (K-quants, IQ4, MXFP4): truncated data, a row length that is
 * not a multiple of the type's block, and type ids cinfer does not know each fail with a message naming the
 * tensor and the type. */
TEST(bad_block_tensors) {
    struct tb b = {0};
    struct gguf *g;
    struct ci_err err = {0};
    static const struct {
        uint32_t type;
        const char *name;
        uint64_t block, bytes;
    } types[] = {
        {CI_TYPE_Q2_K, "Q2_K", 256, 84},  {CI_TYPE_Q3_K, "Q3_K", 256, 110},
        {CI_TYPE_Q4_K, "Q4_K", 256, 144}, {CI_TYPE_Q5_K, "Q5_K", 256, 176},
        {CI_TYPE_Q6_K, "Q6_K", 256, 210}, {CI_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
        {CI_TYPE_Q4_1, "Q4_1", 32, 20},   {CI_TYPE_Q5_0, "Q5_0", 32, 22},
        {CI_TYPE_Q5_1, "Q5_1", 32, 24},   {CI_TYPE_IQ4_NL, "IQ4_NL", 32, 18},
        {CI_TYPE_MXFP4, "MXFP4", 32, 17},
    };
    char buf[160], tail[96];
    const char *want = buf; // EXPECT_REJECT takes a pointer
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint64_t ne0 = 2 * types[k].block, size = 2 * 3 * types[k].bytes; // [2 blocks x 3 rows]
        // Exactly the bytes it needs: accepted.
        ONE_TENSOR(&b, "blk.0.ffn_down.weight", 2, types[k].type, 0, size, ne0, 3);
        ASSERT_STATUS(gguf_open_mem(b.p, b.n, &g, &err), CI_OK);
        CHECK(gguf_tensor(g, 0)->nbytes == size);
        gguf_free(g);
        free(b.p);
        b = (struct tb){0};
        // The last block one byte short, and half the data missing.
        const uint64_t have[] = {size - 1, size / 2};
        for (int h = 0; h < 2; h++) {
            ONE_TENSOR(&b, "blk.0.ffn_down.weight", 2, types[k].type, 0, have[h], ne0, 3);
            snprintf(tail, sizeof tail, "past end of file (%zu bytes): %s, %" PRIu64 " bytes", b.n,
                     types[k].name, size);
            struct gguf *gg = NULL;
            struct ci_err e = {0};
            void *copy = NULL;
            CHECK(open_copy(b.p, b.n, &gg, &e, &copy) == CI_ERR_FORMAT && gg == NULL);
            if (!strstr(e.msg, "tensor 'blk.0.ffn_down.weight': data [") || !strstr(e.msg, tail))
                TEST_FAILF("%s, %" PRIu64 " of %" PRIu64 " bytes: error '%s'", types[k].name, have[h], size,
                           e.msg);
            free(copy);
            free(b.p);
            b = (struct tb){0};
        }
        // A row that is not a multiple of the block: 96 (the rows of a 96-wide model) for the 256-blocks, 48
        // for the 32-blocks.
        uint64_t bad = types[k].block == 256 ? 96 : 48;
        ONE_TENSOR(&b, "blk.1.attn_q.weight", 2, types[k].type, 0, 4096, bad, 2);
        snprintf(buf, sizeof buf,
                 "tensor 'blk.1.attn_q.weight': ne[0] = %" PRIu64
                 " is not a multiple of the %s block size %" PRIu64,
                 bad, types[k].name, types[k].block);
        EXPECT_REJECT(&b, want);
    }
    // Type ids that ggml no longer writes (Q4_2, Q4_3, Q4_0_4_4..8_8, IQ4_NL_4_4..8_8), ggml's newer NVFP4, Q1_0
    // and Q2_0 (40-42), and ids beyond any: rejected with the tensor's name and the id.
    const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 41, 1000, UINT32_MAX};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++) {
        ONE_TENSOR(&b, "output.weight", 2, unknown[k], 0, 4096, 256, 2);
        snprintf(buf, sizeof buf, "tensor 'output.weight': unknown tensor type %" PRIu32, unknown[k]);
        EXPECT_REJECT(&b, want);
    }
}

/* Touches every view an accepted file hands out (ASan checks the bounds). */
static uint64_t walk_arr(const struct gguf_arr *a, int depth) {
    uint64_t acc = 0;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->elem_type == GGUF_TYPE_STRING) {
            struct gguf_str s = gguf_arr_str(a, i);
            for (uint64_t k = 0; k < s.len; k++)
                acc += (uint8_t)s.data[k];
        } else if (a->elem_type == GGUF_TYPE_ARRAY) {
            struct gguf_arr in = gguf_arr_arr(a, i);
            acc += walk_arr(&in, depth + 1);
        } else {
            acc += (uint64_t)gguf_arr_i64(a, i) + (uint64_t)(gguf_arr_f64(a, i) == 0);
        }
    }
    return acc;
}

static uint64_t walk_all(const struct gguf *g) {
    uint64_t acc = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        acc += strlen(key);
        CHECK(gguf_find_key(g, key) == i);
        int64_t v;
        float f;
        bool bv;
        struct gguf_str s;
        struct gguf_arr a;
        struct ci_err err = {0};
        switch (gguf_kv_type(g, i)) {
        case GGUF_TYPE_STRING:
            CHECK(gguf_get_str(g, key, &s, &err) == CI_OK);
            for (uint64_t k = 0; k < s.len; k++)
                acc += (uint8_t)s.data[k];
            break;
        case GGUF_TYPE_ARRAY:
            CHECK(gguf_get_arr(g, key, &a, &err) == CI_OK);
            acc += walk_arr(&a, 1);
            break;
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64:
            CHECK(gguf_get_f32(g, key, &f, &err) == CI_OK);
            break;
        case GGUF_TYPE_BOOL:
            CHECK(gguf_get_bool(g, key, &bv, &err) == CI_OK);
            break;
        default:
            if (gguf_get_int(g, key, &v, &err) != CI_OK)
                CHECK(err.msg[0] != '\0');
            break;
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        CHECK(gguf_find_tensor(g, t->name) == i);
        const uint8_t *p = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++)
            acc += p[k];
    }
    return acc;
}

TEST(random_mutations) {
    static uint8_t tdata[704];
    struct gguf_writer *w = small_writer(tdata, sizeof tdata);
    uint8_t *img;
    uint64_t size;
    ASSERT_STATUS(gguf_writer_write_mem(w, &img, &size, NULL), CI_OK);
    gguf_writer_free(w);
    // Mutations concentrate on the header (where the structure is); the data bytes are opaque.
    uint64_t hdr = size - sizeof tdata;
    uint64_t state = 0x243f6a8885a308d3ull, n_ok = 0, n_err = 0, sink = 0;
    uint8_t *buf = malloc(size);
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, img, size);
        int n_flips = 1 + (int)(state % 4);
        for (int k = 0; k < n_flips; k++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            uint64_t pos = (state >> 8) % hdr;
            switch ((state >> 3) % 4) {
            case 0:
                buf[pos] ^= (uint8_t)(1u << ((state >> 40) % 8));
                break;
            case 1:
                buf[pos] = (uint8_t)(state >> 32);
                break;
            case 2: // a run of 0xff: huge counts and lengths
                for (uint64_t j = pos; j < pos + 8 && j < hdr; j++)
                    buf[j] = 0xff;
                break;
            default:
                buf[pos] = 0;
                break;
            }
        }
        uint64_t len = size;
        if (state % 16 == 0)
            len = (state >> 20) % size;
        struct gguf *g = NULL;
        struct ci_err err = {0};
        void *copy;
        enum ci_status s = open_copy(buf, (size_t)len, &g, &err, &copy);
        if (s == CI_OK) {
            n_ok++;
            sink += walk_all(g);
        } else {
            n_err++;
            if (g != NULL || err.msg[0] == '\0') {
                TEST_FAILF("iteration %d: status %d with message '%s'", iter, (int)s, err.msg);
                break;
            }
        }
        gguf_free(g);
        free(copy);
    }
    printf("  mutations: %llu accepted, %llu rejected (sink %llu)\n", (unsigned long long)n_ok,
           (unsigned long long)n_err, (unsigned long long)(sink & 0xff));
    CHECK(n_ok > 0 && n_err > 0); // the loop exercised both paths
    free(buf);
    ci_free(img);
}

TEST(no_leaks) {
    ASSERT_EQ_I64(ci_mem_in_use(), 0);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(stories260k);
    RUN(vocab_files);
    RUN(open_errors);
    RUN(writer_exact_bytes);
    RUN(writer_round_trip);
    RUN(writer_streaming_and_file);
    RUN(writer_rejects);
    RUN(writer_copy_kv);
    RUN(writer_reproduces_stories260k);
    RUN(truncation_every_offset);
    RUN(bad_header);
    RUN(bad_kvs);
    RUN(bad_tensors);
    RUN(tensor_data_alignment);
    RUN(bad_block_tensors);
    RUN(random_mutations);
    RUN(no_leaks);
    return test_exit_code();
}
