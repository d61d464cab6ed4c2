/* Tokenizer tests: llama.cpp's tokenizer vectors (shared/models/ggml-vocab: .inp strings, .out ids made by
 * the reference tokenizers), llama2.c tokenizer.bin against the GGUF form of the same vocabulary, the
 * stories260K greedy text from MANIFEST.md, hand-built vocabularies whose encodings follow from the
 * algorithms by hand, and malformed inputs (tokenizer.bin and GGUF metadata) that must fail cleanly. */
#include "tokenizer/tokenizer.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/utf8.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/vocab.h"

#define VOCAB_DIR "ggml-vocab"
#define TEST_SEP  "\n__ggml_vocab_test__\n"

/* ---- helpers ---- */

struct vectors {
    char *inp, *out;      // file contents (modified in place: separators and newlines become NULs)
    const char *text[64]; // test strings
    size_t len[64];
    const char *ids[64]; // expected id lines ("" for none)
    int n;
};

/* Splits the .inp by TEST_SEP and the .out by lines, as llama.cpp's test-tokenizer-0 does. */
static bool vectors_load(struct vectors *v, const char *gguf_path) {
    char p[1024];
    size_t ni, no;
    memset(v, 0, sizeof(*v));
    snprintf(p, sizeof(p), "%s.inp", gguf_path);
    v->inp = test_read_file(p, &ni);
    snprintf(p, sizeof(p), "%s.out", gguf_path);
    v->out = test_read_file(p, &no);
    if (!v->inp || !v->out)
        return false;
    char *s = v->inp;
    while (*s && v->n < 64) {
        char *e = strstr(s, TEST_SEP);
        v->text[v->n] = s;
        v->len[v->n] = e ? (size_t)(e - s) : strlen(s);
        v->n++;
        if (!e)
            break;
        *e = 0;
        s = e + strlen(TEST_SEP);
    }
    char *o = v->out;
    for (int i = 0; i < v->n; i++) {
        char *e = strchr(o, '\n');
        if (!e)
            return false;
        *e = 0;
        while (*o == ' ')
            o++;
        v->ids[i] = o;
        o = e + 1;
    }
    return *o == 0; // exactly one line per test
}

static void vectors_free(struct vectors *v) {
    free(v->inp);
    free(v->out);
}

/* Parses "1 2 3" into ids; returns the count. */
static int parse_ids(const char *s, int32_t *ids, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *e;
        long x = strtol(s, &e, 10);
        if (e == s)
            break;
        ids[n++] = (int32_t)x;
        s = e;
        while (*s == ' ')
            s++;
    }
    return n;
}

static void ids_str(const int32_t *ids, int n, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", ids[i]);
}

static struct tokenizer *load_bin(const char *name, int n_vocab) {
    char p[1024];
    struct ci_err err = {0};
    struct tokenizer *t = NULL;
    test_model_path(p, sizeof(p), name);
    if (tokenizer_from_llama2c(p, n_vocab, &t, &err))
        TEST_FAILF("tokenizer_from_llama2c %s: %s", p, err.msg);
    return t;
}

/* Encodes and compares with the expected id line; on mismatch reports the test (once per caller). */
static bool check_encode(const struct tokenizer *t, const char *text, size_t len, const char *want,
                         int test_no, const char *file) {
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    if (tokenizer_encode(t, text, len, false, false, &ids, &n, &err)) {
        TEST_FAILF("%s test %d: encode failed: %s", file, test_no, err.msg);
        return false;
    }
    char got[16384];
    ids_str(ids, n, got, sizeof(got));
    ci_free(ids);
    if (strcmp(got, want) != 0) {
        TEST_FAILF("%s test %d '%.*s':\n    want %s\n    got  %s", file, test_no, (int)(len > 80 ? 80 : len),
                   text, want, got);
        return false;
    }
    return true;
}

/* ---- llama.cpp vectors ---- */

/* One vocabulary file: its own PASS/FAIL line (harness semantics, named after the file). */
static void run_vocab_file(const char *file) {
    char name[256], path[1024];
    snprintf(name, sizeof(name), "vocab_vectors %.120s", file);
    if (!test_selected(name))
        return;
    test_current = name;
    test_failed_checks = 0;
    snprintf(path, sizeof(path), "%s/%.120s", VOCAB_DIR, file);
    struct tokenizer *t = test_load_tokenizer(path);
    struct vectors v;
    test_model_path(path, sizeof(path), VOCAB_DIR);
    size_t l = strlen(path);
    snprintf(path + l, sizeof(path) - l, "/%.120s", file);
    bool ok = vectors_load(&v, path);
    if (!ok)
        TEST_FAILF("cannot read %s.inp/.out (or their test counts differ)", path);
    if (t && ok) {
        int pass = 0;
        for (int i = 0; i < v.n; i++) {
            if (check_encode(t, v.text[i], v.len[i], v.ids[i], i, file))
                pass++;
            else
                break; // the first mismatch is shown; the count says the rest
        }
        if (v.n < 46) // llama.cpp's test-tokenizer-0 texts (46; newer vocabularies' files have a few more)
            TEST_FAILF("%s: %d tests, expected at least 46", file, v.n);
        else if (pass == v.n)
            printf("  %s: %d/%d (%s, pre %s)\n", file, pass, v.n, tokenizer_type_name(t), tokenizer_pre(t));
    }
    vectors_free(&v);
    tokenizer_free(t);
    if (test_failed_checks == 0)
        printf("PASS %s\n", name);
    else
        test_total_failed++;
    fflush(stdout);
}

/* Every .gguf in ggml-vocab; BERT (WordPiece, lowercasing: its texts do not round-trip) only when asked. */
static int list_vocabs(char names[][128], int cap, bool with_bert) {
    char dir[1024];
    test_model_path(dir, sizeof(dir), VOCAB_DIR);
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d)) && n < cap;) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".gguf") != 0 || (!with_bert && strstr(e->d_name, "bert")) ||
            l >= 128)
            continue;
        memcpy(names[n++], e->d_name, l + 1);
    }
    closedir(d);
    char *ptrs[64];
    for (int i = 0; i < n; i++)
        ptrs[i] = names[i];
    qsort(ptrs, (size_t)n, sizeof(char *), test_cmp_str);
    char sorted[64][128];
    for (int i = 0; i < n; i++)
        memcpy(sorted[i], ptrs[i], 128);
    memcpy(names, sorted, (size_t)n * 128);
    return n;
}

TEST(vocab_files_present) {
    char names[64][128];
    int n = list_vocabs(names, 64, true);
    // MANIFEST.md lists 9 SentencePiece/BPE vocabularies plus bert-bge.
    ASSERT_EQ_I64(n, 10);
}

/* Decoding each expected id line must give back the .inp text (llama.cpp decodes user-defined tokens such
 * as DeepSeek's "ü" verbatim, which is what makes "Führer" round-trip). */
TEST(vectors_decode_roundtrip) {
    char names[64][128];
    int n_files = list_vocabs(names, 64, false);
    for (int f = 0; f < n_files; f++) {
        char path[1024], rel[256];
        snprintf(rel, sizeof(rel), VOCAB_DIR "/%.120s", names[f]);
        struct tokenizer *t = test_load_tokenizer(rel);
        test_model_path(path, sizeof(path), rel);
        struct vectors v;
        bool ok = vectors_load(&v, path);
        CHECK(ok);
        for (int i = 0; t && ok && i < v.n; i++) {
            int32_t ids[4096];
            int n = parse_ids(v.ids[i], ids, 4096);
            char *s = NULL;
            size_t sl = 0;
            struct ci_err err = {0};
            if (tokenizer_decode(t, ids, n, false, &s, &sl, &err)) {
                TEST_FAILF("%s test %d: decode: %s", names[f], i, err.msg);
                break;
            }
            if (sl != v.len[i] || memcmp(s, v.text[i], sl) != 0) {
                TEST_FAILF("%s test %d: decoded '%s' != '%.*s'", names[f], i, s, (int)v.len[i], v.text[i]);
                ci_free(s);
                break;
            }
            ci_free(s);
        }
        vectors_free(&v);
        tokenizer_free(t);
    }
}

/* ---- llama2.c tokenizer.bin ---- */

static void gen_text(struct ci_rng *r, char *buf, size_t cap, size_t *len) {
    static const char *const atoms[] = {"the",
                                        "Hello",
                                        "world",
                                        "Once",
                                        " ",
                                        "  ",
                                        "   ",
                                        "\n",
                                        "\n\n",
                                        "\t",
                                        "'s",
                                        "'ll",
                                        "'RE",
                                        "3",
                                        "42",
                                        "333333",
                                        "3.14",
                                        ".",
                                        ",",
                                        "!",
                                        "?",
                                        "(",
                                        ")",
                                        "\"",
                                        "--",
                                        "==",
                                        "é",
                                        "ü",
                                        "ß",
                                        "Cửa",
                                        "нещо",
                                        "Бълг",
                                        "我想",
                                        "工作",
                                        "～",
                                        "🦙",
                                        "😁",
                                        "🚀",
                                        "▁",
                                        "ក",
                                        "ា",
                                        "់",
                                        "\u200d",
                                        "Ω",
                                        "\u00a0",
                                        "<s>",
                                        "</s>",
                                        "<0x41>",
                                        "...",
                                        "apple",
                                        "Führer",
                                        "ied",
                                        "½",
                                        "x",
                                        "Z",
                                        "\r\n",
                                        "       ",
                                        "日本語",
                                        "👍🏽",
                                        "\xff",
                                        "\xe2\x96",
                                        "\xc3",
                                        "a\x80"
                                        "b"};
    size_t n = 0, n_atoms = 1 + ci_rng_u64(r) % 14;
    for (size_t i = 0; i < n_atoms; i++) {
        const char *a = atoms[ci_rng_u64(r) % (sizeof(atoms) / sizeof(atoms[0]))];
        size_t l = strlen(a);
        if (n + l >= cap)
            break;
        memcpy(buf + n, a, l);
        n += l;
    }
    buf[n] = 0;
    *len = n;
}

static bool same_encoding(const struct tokenizer *a, const struct tokenizer *b, const char *text, size_t len,
                          bool add_special, bool parse_special) {
    int32_t *x = NULL, *y = NULL;
    int nx = 0, ny = 0;
    struct ci_err err = {0};
    bool ok = tokenizer_encode(a, text, len, add_special, parse_special, &x, &nx, &err) == CI_OK &&
              tokenizer_encode(b, text, len, add_special, parse_special, &y, &ny, &err) == CI_OK &&
              nx == ny && (nx == 0 || memcmp(x, y, (size_t)nx * sizeof(int32_t)) == 0);
    ci_free(x);
    ci_free(y);
    return ok;
}

TEST(llama2c_matches_gguf) {
    struct tokenizer *bin = load_bin("tokenizer.bin", 32000);
    struct tokenizer *gg = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    ASSERT(bin && gg);
    ASSERT_EQ_I64(tokenizer_n_vocab(bin), 32000);
    ASSERT_EQ_I64(tokenizer_bos(bin), 1);
    ASSERT_EQ_I64(tokenizer_eos(bin), 2);
    // Same texts and scores as the GGUF once llama2.c's ' ' is read back as "▁".
    for (int32_t id = 0; id < 32000; id++) {
        size_t la, lb;
        const char *pa = tokenizer_piece(bin, id, &la), *pb = tokenizer_piece(gg, id, &lb);
        if (la != lb || memcmp(pa, pb, la) != 0 || tokenizer_score(bin, id) != tokenizer_score(gg, id) ||
            tokenizer_is_control(bin, id) != tokenizer_is_control(gg, id)) {
            TEST_FAILF("token %d differs: '%.*s' vs '%.*s'", id, (int)la, pa, (int)lb, pb);
            break;
        }
    }
    // The llama.cpp vectors hold for tokenizer.bin too.
    char path[1024];
    struct vectors v;
    test_model_path(path, sizeof(path), VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    ASSERT(vectors_load(&v, path));
    for (int i = 0; i < v.n; i++)
        if (!check_encode(bin, v.text[i], v.len[i], v.ids[i], i, "tokenizer.bin"))
            break;
    vectors_free(&v);
    struct ci_rng r;
    ci_rng_seed(&r, 20240601);
    for (int i = 0; i < 400; i++) {
        char buf[512];
        size_t len;
        gen_text(&r, buf, sizeof(buf), &len);
        bool add = i % 2, parse = i % 3 == 0;
        if (!same_encoding(bin, gg, buf, len, add, parse)) {
            TEST_FAILF("random string %d '%s' encodes differently", i, buf);
            break;
        }
    }
    tokenizer_free(bin);
    tokenizer_free(gg);
}

static const char *const story_text =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
    "she saw a big, red ball. She wanted to play with it, but it was too high";
static const int32_t story_ids[] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
    266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415};

/* MANIFEST.md's stories260K greedy continuation: the ids after BOS decode to the text, and the text
 * encodes back to the same ids; tok512.bin and stories260K.gguf agree. */
TEST(tok512_story) {
    struct tokenizer *bin = load_bin("tok512.bin", 512);
    struct tokenizer *gg = test_load_tokenizer("stories260K.gguf");
    ASSERT(bin && gg);
    const struct tokenizer *ts[2] = {bin, gg};
    int n_story = (int)(sizeof(story_ids) / sizeof(story_ids[0]));
    for (int k = 0; k < 2; k++) {
        const struct tokenizer *t = ts[k];
        int32_t with_bos[64];
        with_bos[0] = tokenizer_bos(t);
        memcpy(with_bos + 1, story_ids, sizeof(story_ids));
        char *s = NULL;
        size_t sl;
        struct ci_err err = {0};
        ASSERT_STATUS(tokenizer_decode(t, with_bos, n_story + 1, false, &s, &sl, &err), CI_OK);
        CHECK(strcmp(s, story_text) == 0);
        ci_free(s);
        int32_t *ids = NULL;
        int n = 0;
        ASSERT_STATUS(tokenizer_encode(t, story_text, strlen(story_text), true, false, &ids, &n, &err),
                      CI_OK);
        ASSERT_EQ_I64(n, n_story + 1);
        CHECK(ids[0] == 1);
        CHECK(memcmp(ids + 1, story_ids, sizeof(story_ids)) == 0);
        ci_free(ids);
        // "Once upon a time": BOS, then whole-word tokens (" Once" is 403 in this vocabulary).
        ASSERT_STATUS(tokenizer_encode(t, "Once upon a time", 16, true, false, &ids, &n, &err), CI_OK);
        ASSERT_EQ_I64(n, 5);
        CHECK(ids[0] == 1 && ids[1] == 403 && ids[2] == 407 && ids[3] == 261 && ids[4] == 378);
        ci_free(ids);
    }
    struct ci_rng r;
    ci_rng_seed(&r, 7);
    for (int i = 0; i < 200; i++) {
        char buf[512];
        size_t len;
        gen_text(&r, buf, sizeof(buf), &len);
        if (!same_encoding(bin, gg, buf, len, true, i % 2)) {
            TEST_FAILF("tok512.bin and stories260K.gguf disagree on '%s'", buf);
            break;
        }
    }
    tokenizer_free(bin);
    tokenizer_free(gg);
}

static enum ci_status load_bin_mem(const void *data, size_t n, int n_vocab, struct ci_err *err) {
    struct tokenizer *t = NULL;
    enum ci_status st = tokenizer_from_llama2c_mem(data, n, n_vocab, &t, err);
    tokenizer_free(t);
    return st;
}

static void put_i32(unsigned char *p, int32_t v) {
    memcpy(p, &v, 4);
}

TEST(llama2c_malformed) {
    char path[1024];
    size_t n;
    test_model_path(path, sizeof(path), "tok512.bin");
    unsigned char *d = test_read_file(path, &n);
    ASSERT(d && n == 6227);
    size_t base = ci_mem_in_use();
    struct ci_err err = {0};
    ASSERT_STATUS(load_bin_mem(d, n, 512, &err), CI_OK);
    ASSERT_STATUS(load_bin_mem(d, n, 0, &err), CI_OK);
    // Every truncation fails (the file holds exactly 512 records).
    for (size_t cut = 0; cut < n; cut += (cut < 64 ? 1 : 7))
        if (load_bin_mem(d, cut, 512, &err) != CI_ERR_FORMAT) {
            TEST_FAILF("truncated to %zu bytes: not CI_ERR_FORMAT", cut);
            break;
        }
    CHECK(load_bin_mem(d, n - 1, 0, &err) == CI_ERR_FORMAT);
    CHECK(load_bin_mem(d, 0, 0, &err) == CI_ERR_FORMAT);
    CHECK(load_bin_mem(d, n, 511, &err) == CI_ERR_FORMAT); // bytes left over
    CHECK(strstr(err.msg, "left after") != NULL);
    CHECK(load_bin_mem(d, n, 513, &err) == CI_ERR_FORMAT); // runs out
    CHECK(load_bin_mem(d, n, -5, &err) == CI_ERR_INVALID);
    unsigned char *c = malloc(n);
    // Header and the first record: max_token_length 0 / negative / huge; negative, huge, too-long lengths.
    const struct {
        size_t off;
        int32_t val;
    } edits[] = {{0, 0},         {0, -1},        {0, INT32_MAX}, {8, -1},
                 {8, INT32_MIN}, {8, INT32_MAX}, {8, 8},         {8, 100000}};
    for (size_t k = 0; k < sizeof(edits) / sizeof(edits[0]); k++) {
        memcpy(c, d, n);
        put_i32(c + edits[k].off, edits[k].val);
        if (load_bin_mem(c, n, 0, &err) != CI_ERR_FORMAT)
            TEST_FAILF("edit %zu (offset %zu = %d) not rejected", k, edits[k].off, edits[k].val);
    }
    memcpy(c, d, n);
    uint32_t nan_bits = 0x7fc00000u;
    memcpy(c + 4, &nan_bits, 4); // score of token 0
    CHECK(load_bin_mem(c, n, 0, &err) == CI_ERR_FORMAT);
    // Random corruption: any outcome but a crash or a leak (ASan checks the former).  Corrupted vocabularies
    // may warn about duplicate tokens; keep the output quiet.
    bool warn = ci_log_enabled(CI_LOG_LEVEL_WARN);
    ci_log_set_level(CI_LOG_LEVEL_ERR);
    struct ci_rng r;
    ci_rng_seed(&r, 99);
    for (int i = 0; i < 300; i++) {
        memcpy(c, d, n);
        for (int k = 0; k < 4; k++)
            c[ci_rng_u64(&r) % n] = (unsigned char)ci_rng_u64(&r);
        enum ci_status st = load_bin_mem(c, n, (int)(ci_rng_u64(&r) % 2) * 512, &err);
        CHECK(st == CI_OK || st == CI_ERR_FORMAT);
    }
    if (warn)
        ci_log_set_level(CI_LOG_LEVEL_WARN);
    CHECK(ci_mem_in_use() == base);
    free(c);
    free(d);
}

/* ---- hand-built vocabularies (a minimal GGUF writer for metadata-only files) ---- */

struct gb {
    unsigned char *b;
    size_t n, cap;
    uint64_t n_kv;
};

static void gb_put(struct gb *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 256;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void gb_u32(struct gb *g, uint32_t v) {
    gb_put(g, &v, 4);
}
static void gb_u64(struct gb *g, uint64_t v) {
    gb_put(g, &v, 8);
}
static void gb_str(struct gb *g, const char *s, size_t n) {
    gb_u64(g, n);
    gb_put(g, s, n);
}
static void gb_key(struct gb *g, const char *key, enum gguf_type t) {
    gb_str(g, key, strlen(key));
    gb_u32(g, (uint32_t)t);
    g->n_kv++;
}
static void kv_str(struct gb *g, const char *key, const char *v) {
    gb_key(g, key, GGUF_TYPE_STRING);
    gb_str(g, v, strlen(v));
}
static void kv_u32(struct gb *g, const char *key, uint32_t v) {
    gb_key(g, key, GGUF_TYPE_UINT32);
    gb_u32(g, v);
}
static void kv_bool(struct gb *g, const char *key, bool v) {
    gb_key(g, key, GGUF_TYPE_BOOL);
    unsigned char c = v;
    gb_put(g, &c, 1);
}
static void kv_arr_str(struct gb *g, const char *key, const char *const *s, size_t n) {
    gb_key(g, key, GGUF_TYPE_ARRAY);
    gb_u32(g, GGUF_TYPE_STRING);
    gb_u64(g, n);
    for (size_t i = 0; i < n; i++)
        gb_str(g, s[i], strlen(s[i]));
}
static void kv_arr_num(struct gb *g, const char *key, enum gguf_type t, const void *data, size_t n) {
    gb_key(g, key, GGUF_TYPE_ARRAY);
    gb_u32(g, (uint32_t)t);
    gb_u64(g, n);
    gb_put(g, data, 4 * n);
}

/* Wraps the key/values in a GGUF v3 header (no tensors); the caller frees the result. */
static unsigned char *gb_file(struct gb *kvs, size_t *n) {
    struct gb f = {0};
    gb_put(&f, "GGUF", 4);
    gb_u32(&f, 3);
    gb_u64(&f, 0);
    gb_u64(&f, kvs->n_kv);
    gb_put(&f, kvs->b, kvs->n);
    free(kvs->b);
    memset(kvs, 0, sizeof(*kvs));
    *n = f.n;
    return f.b;
}

static enum ci_status tok_from_gb(struct gb *kvs, struct tokenizer **t, struct ci_err *err) {
    size_t n;
    unsigned char *file = gb_file(kvs, &n);
    struct gguf *g = NULL;
    *t = NULL;
    enum ci_status st = gguf_open_mem(file, n, &g, err);
    if (st == CI_OK)
        st = tokenizer_from_gguf(g, t, err);
    gguf_free(g);
    free(file);
    return st;
}

#define MAXV 400

/* A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then extra[] with scores. */
struct spm_def {
    const char *tok[MAXV];
    float score[MAXV];
    int32_t type[MAXV];
    char bytes[256][8];
    int n;
};

static void spm_def_init(struct spm_def *d) {
    memset(d, 0, sizeof(*d));
    const char *head[3] = {"<unk>", "<s>", "</s>"};
    int32_t ht[3] = {2, 3, 3};
    for (int i = 0; i < 3; i++) {
        d->tok[d->n] = head[i];
        d->type[d->n++] = ht[i];
    }
    for (int b = 0; b < 256; b++) {
        snprintf(d->bytes[b], 8, "<0x%02X>", b);
        d->tok[d->n] = d->bytes[b];
        d->type[d->n++] = 6;
    }
}

static int32_t spm_add(struct spm_def *d, const char *tok, float score) {
    d->tok[d->n] = tok;
    d->score[d->n] = score;
    d->type[d->n] = 1;
    return d->n++;
}

static void spm_kvs(struct gb *g, const struct spm_def *d) {
    kv_str(g, "tokenizer.ggml.model", "llama");
    kv_arr_str(g, "tokenizer.ggml.tokens", d->tok, (size_t)d->n);
    kv_arr_num(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, d->score, (size_t)d->n);
    kv_arr_num(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, d->type, (size_t)d->n);
}

static bool encodes_to(const struct tokenizer *t, const char *text, bool add_special, bool parse_special,
                       const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    bool ok = tokenizer_encode(t, text, strlen(text), add_special, parse_special, &ids, &n, &err) == CI_OK &&
              n == n_want && (n == 0 || memcmp(ids, want, (size_t)n * sizeof(int32_t)) == 0);
    if (!ok) {
        char got[1024], exp[1024];
        ids_str(ids, n, got, sizeof(got));
        ids_str(want, n_want, exp, sizeof(exp));
        printf("    '%s': want [%s] got [%s] %s\n", text, exp, got, err.msg);
    }
    ci_free(ids);
    return ok;
}

#define ENCODES(t, text, add, parse, ...)                                                                    \
    do {                                                                                                     \
        const int32_t want_[] = {__VA_ARGS__};                                                               \
        CHECK(encodes_to(t, text, add, parse, want_, (int)(sizeof(want_) / sizeof(want_[0]))));              \
    } while (0)

static bool decodes_to(const struct tokenizer *t, const int32_t *ids, int n, bool special, const char *want) {
    char *s = NULL;
    size_t sl = 0;
    struct ci_err err = {0};
    bool ok = tokenizer_decode(t, ids, n, special, &s, &sl, &err) == CI_OK && sl == strlen(want) &&
              memcmp(s, want, sl) == 0;
    if (!ok)
        printf("    decode: want '%s' got '%s' %s\n", want, s ? s : "", err.msg);
    ci_free(s);
    return ok;
}

/* The bge WordPiece vocabulary beyond the vectors: [CLS] ... [SEP] with add_special, the ids the GGUF
 * names, "▁" word starts and bare continuation pieces, and decoding that joins the pieces back. */
TEST(bert_wordpiece) {
    struct tokenizer *t = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-bert-bge.gguf");
    ASSERT(t);
    CHECK(tokenizer_type(t) == TOKENIZER_TYPE_WPM);
    CHECK(strcmp(tokenizer_type_name(t), "WPM") == 0);
    CHECK(strcmp(tokenizer_model_name(t), "bert") == 0);
    ASSERT_EQ_I64(tokenizer_bos(t), 101); // [CLS]
    ASSERT_EQ_I64(tokenizer_sep(t), 102);
    ASSERT_EQ_I64(tokenizer_unk(t), 100);
    ASSERT_EQ_I64(tokenizer_eos(t), TOKENIZER_TOKEN_NULL);
    CHECK(tokenizer_add_bos(t) && tokenizer_add_sep(t) && !tokenizer_add_eos(t));
    size_t pl;
    const char *p = tokenizer_piece(t, 7592, &pl);
    CHECK(pl == 8 && memcmp(p, "\xe2\x96\x81hello", 8) == 0);
    ENCODES(t, "Hello world", true, false, 101, 7592, 2088, 102);
    ENCODES(t, "", true, false, 101, 102);
    // Special texts in the input: split out only with parse_special.
    ENCODES(t, "[SEP]", false, true, 102);
    ENCODES(t, "[SEP]", false, false, 1031, 19802, 1033);
    static const int32_t w[] = {101, 7592, 1010, 2088, 999, 102};
    // Pieces are joined as they are (no clean-up of the space before punctuation).
    CHECK(decodes_to(t, w, 6, false, "hello , world !"));
    CHECK(decodes_to(t, w, 6, true, "[CLS]hello , world ![SEP]"));
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    ASSERT_STATUS(tokenizer_encode(t, "Tokenization unbelievably", 25, false, false, &ids, &n, &err), CI_OK);
    CHECK(n > 2);
    CHECK(decodes_to(t, ids, n, false, "tokenization unbelievably"));
    ci_free(ids);
    tokenizer_free(t);
}

/* A hand-built WordPiece vocabulary: greedy longest match from the left, a word that cannot be cut whole is
 * one [UNK], and the normalizer switches. */
TEST(wpm_algorithm) {
    const char *toks[] = {"[PAD]",
                          "[UNK]",
                          "[CLS]",
                          "[SEP]",
                          "\xe2\x96\x81"
                          "ab",
                          "\xe2\x96\x81"
                          "a",
                          "b",
                          "bc",
                          "c",
                          "\xe2\x96\x81"
                          "x",
                          "\xe2\x96\x81"
                          ",",
                          "\xe2\x96\x81"
                          "e",
                          "\xe2\x96\x81\xc3\xa9",
                          "\xe2\x96\x81"
                          "A",
                          "\xe2\x96\x81\xe4\xb8\xad"};
    int32_t types[15] = {3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct tokenizer *t = NULL;
    struct ci_err err = {0};
    for (int variant = 0; variant < 3; variant++) {
        struct gb g = {0};
        kv_str(&g, "tokenizer.ggml.model", "bert");
        kv_arr_str(&g, "tokenizer.ggml.tokens", toks, 15);
        kv_arr_num(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 15);
        kv_u32(&g, "tokenizer.ggml.unknown_token_id", 1);
        kv_u32(&g, "tokenizer.ggml.cls_token_id", 2);
        kv_u32(&g, "tokenizer.ggml.seperator_token_id", 3);
        if (variant == 1)
            kv_bool(&g, "tokenizer.ggml.normalizer.lowercase", false);
        if (variant == 2) {
            kv_bool(&g, "tokenizer.ggml.normalizer.strip_accents", false);
            kv_bool(&g, "tokenizer.ggml.add_sep_token", false);
        }
        ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
        if (variant == 0) {
            // "abc": "▁ab" is the longest match at the start, then "c" (not "▁a" "bc").
            ENCODES(t, "abc", false, false, 4, 8);
            ENCODES(t, "abc", true, false, 2, 4, 8, 3);
            // "abd": no piece for "d": the whole word is [UNK]; the next word is cut normally.
            ENCODES(t, "abd x", false, false, 1, 9);
            // Punctuation is a word of its own, whitespace of any kind separates, controls vanish.
            ENCODES(t,
                    "x,ab\t\xe3\x80\x80"
                    "a\x01"
                    "b",
                    false, false, 9, 10, 4, 4);
            // Lowercasing and accent stripping: "É" → "e" (NFD "E" + U+0301, the mark dropped).
            ENCODES(t, "\xc3\x89 AB", false, false, 11, 4);
            // Malformed UTF-8 decodes to U+FFFD, which is dropped without ending the word.
            ENCODES(t,
                    "ab\xff"
                    "c",
                    false, false, 4, 8);
            // CJK ideographs are words of their own.
            ENCODES(t, "\xe4\xb8\xad\xe4\xb8\xad", false, false, 14, 14);
        } else if (variant == 1) {
            // No lowercasing (and so, by default, no accent stripping): "A" stays, "É" has no piece.
            ENCODES(t, "A", false, false, 13);
            ENCODES(t, "\xc3\x89", false, false, 1);
            ENCODES(t, "\xc3\xa9", false, false, 12);
        } else {
            // Lowercase without accent stripping: "É" → "é"; add_sep false: no [SEP].
            ENCODES(t, "\xc3\x89", false, false, 12);
            ENCODES(t, "ab", true, false, 2, 4);
        }
        tokenizer_free(t);
        t = NULL;
    }
    // A WordPiece vocabulary needs an unknown token.
    struct gb g = {0};
    const char *few[] = {"[PAD]", "x"};
    kv_str(&g, "tokenizer.ggml.model", "bert");
    kv_arr_str(&g, "tokenizer.ggml.tokens", few, 2);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", 0);
    kv_u32(&g, "tokenizer.ggml.seperator_token_id", 0);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT);
    CHECK(t == NULL && strstr(err.msg, "unknown token") != NULL);
    // Without a [CLS] / BOS id (BERT's default 101 is past this vocabulary), add_special has nothing to add.
    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "bert");
    kv_arr_str(&g, "tokenizer.ggml.tokens", few, 2);
    kv_u32(&g, "tokenizer.ggml.unknown_token_id", 0);
    kv_u32(&g, "tokenizer.ggml.seperator_token_id", 0);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT);
    CHECK(t == NULL && strstr(err.msg, "BOS") != NULL);
}

TEST(spm_algorithm) {
    struct spm_def d;
    spm_def_init(&d);
    int32_t sp = spm_add(&d, "\xe2\x96\x81", -1.0f); // "▁"
    int32_t a = spm_add(&d, "a", -2.0f), b = spm_add(&d, "b", -2.0f);
    int32_t ab = spm_add(&d, "ab", -3.0f);
    int32_t spa = spm_add(&d,
                          "\xe2\x96\x81"
                          "a",
                          -4.0f);
    int32_t spab = spm_add(&d,
                           "\xe2\x96\x81"
                           "ab",
                           -5.0f);
    int32_t x = spm_add(&d, "x", -2.0f), y = spm_add(&d, "y", -2.0f), z = spm_add(&d, "z", -2.0f);
    int32_t xy = spm_add(&d, "xy", -1.5f), yz = spm_add(&d, "yz", -1.5f);
    int32_t e_acute = spm_add(&d, "\xc3\xa9", -2.0f); // "é"
    struct gb g = {0};
    struct tokenizer *t = NULL;
    struct ci_err err = {0};
    spm_kvs(&g, &d);
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    // "ab": "▁" "a" "b" → "ab" (-3) beats "▁a" (-4) → "▁" "ab" → "▁ab" (-5).
    ENCODES(t, "ab", false, false, spab);
    // add_special: BOS first (the defaults for "llama": BOS 1, add_bos true, no EOS).
    ENCODES(t, "ab", true, false, 1, spab);
    // Spaces become "▁": "ab ab" → "▁ab" "▁ab".
    ENCODES(t, "ab ab", false, false, spab, spab);
    // Equal scores: the leftmost pair merges first.
    ENCODES(t, " xyz", false, false, sp, sp, xy, z);
    ENCODES(t, " yzy", false, false, sp, sp, yz, y);
    (void)x;
    // Unknown characters fall back to their bytes; known multi-byte characters are one symbol.
    ENCODES(t, "q", false, false, sp, 3 + 'q');
    ENCODES(t, "\xc3\xa9\xc3\xa8", false, false, sp, e_acute, 3 + 0xc3, 3 + 0xa8);
    // Special tokens in text only with parse_special; a fragment after one gets the "▁" prefix again.
    ENCODES(t, "<s>ab", false, true, 1, spab);
    ENCODES(t, "a<s>", false, true, spa, 1);
    (void)a;
    (void)b;
    (void)ab;
    tokenizer_free(t);

    // add_space_prefix false: no "▁" in front.
    g = (struct gb){0};
    spm_kvs(&g, &d);
    kv_bool(&g, "tokenizer.ggml.add_space_prefix", false);
    kv_bool(&g, "tokenizer.ggml.add_eos_token", true);
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    ENCODES(t, "ab", false, false, ab);
    ENCODES(t, "ab", true, false, 1, ab, 2);
    tokenizer_free(t);
}

/* A byte-level BPE vocabulary: the 256 GPT-2 byte characters (id = byte), then extra tokens. */
struct bpe_def {
    const char *tok[MAXV];
    char chars[256][5];
    int n;
    const char *merges[16];
    int n_merges;
};

static void bpe_def_init(struct bpe_def *d) {
    memset(d, 0, sizeof(*d));
    for (int b = 0; b < 256; b++) {
        int l = utf8_encode(vocab_gpt2_byte_to_cpt((uint8_t)b), d->chars[b]);
        d->chars[b][l] = 0;
        d->tok[d->n++] = d->chars[b];
    }
}

static void bpe_kvs(struct gb *g, const struct bpe_def *d, const char *pre) {
    kv_str(g, "tokenizer.ggml.model", "gpt2");
    kv_str(g, "tokenizer.ggml.pre", pre);
    kv_arr_str(g, "tokenizer.ggml.tokens", d->tok, (size_t)d->n);
    kv_arr_str(g, "tokenizer.ggml.merges", d->merges, (size_t)d->n_merges);
}

TEST(bpe_algorithm) {
    struct bpe_def d;
    bpe_def_init(&d);
    int32_t ab = d.n, bc = d.n + 1, abc = d.n + 2, sp_a = d.n + 3;
    d.tok[d.n++] = "ab";
    d.tok[d.n++] = "bc";
    d.tok[d.n++] = "abc";
    d.tok[d.n++] = "\xc4\xa0"
                   "a"; // "Ġa": GPT-2's space is U+0120
    struct tokenizer *t = NULL;
    struct ci_err err = {0};
    struct gb g = {0};
    // Rank decides: "b c" before "a b" gives a|bc; the reverse gives ab|c.
    d.merges[0] = "b c";
    d.merges[1] = "a b";
    d.n_merges = 2;
    bpe_kvs(&g, &d, "gpt-2");
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    ENCODES(t, "abc", false, false, 'a', bc);
    tokenizer_free(t);
    d.merges[0] = "a b";
    d.merges[1] = "b c";
    d.merges[2] = "Ġ a";
    d.n_merges = 3;
    g = (struct gb){0};
    bpe_kvs(&g, &d, "gpt-2");
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    ENCODES(t, "abc", false, false, ab, 'c');
    // The GPT-2 regex splits " a" as one word; its space byte is the character "Ġ".
    ENCODES(t, "c a", false, false, 'c', sp_a);
    // No BOS for gpt2 vocabularies unless the file asks.
    ENCODES(t, "c", true, false, 'c');
    CHECK(!tokenizer_add_bos(t));
    tokenizer_free(t);
    // llama3-style pre-tokenizers take a whole word that is a token without merging.
    g = (struct gb){0};
    d.n_merges = 0;
    bpe_kvs(&g, &d, "llama-bpe");
    kv_u32(&g, "tokenizer.ggml.bos_token_id", 'B');
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    ENCODES(t, "abc", false, false, abc);
    ENCODES(t, "abc", true, false, 'B', abc); // llama-bpe adds BOS by default
    tokenizer_free(t);
    g = (struct gb){0};
    bpe_kvs(&g, &d, "gpt-2");
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    ENCODES(t, "abc", false, false, 'a', 'b', 'c');
    tokenizer_free(t);
}

/* Splits text with pre-tokenizer pre and compares the pieces with want[] (NULL-terminated). */
static bool split_is(const char *pre, const char *text, const char *const *want) {
    struct bpe *b = NULL;
    struct ci_err err = {0};
    char *s = NULL;
    size_t(*p)[2] = NULL, n = 0, n_want = 0;
    bool ok = bpe_create(bpe_pre_find(pre), &b, &err) == CI_OK &&
              bpe_split(b, text, strlen(text), &s, &p, &n, &err) == CI_OK;
    while (want[n_want])
        n_want++;
    ok = ok && n == n_want;
    for (size_t i = 0; ok && i < n; i++)
        ok = p[i][1] == strlen(want[i]) && memcmp(s + p[i][0], want[i], p[i][1]) == 0;
    if (!ok) {
        printf("    %s split of '%s':", pre, text);
        for (size_t i = 0; i < n; i++)
            printf(" [%.*s]", (int)p[i][1], s + p[i][0]);
        printf(" %s\n", err.msg);
    }
    ci_free(s);
    ci_free(p);
    bpe_free(b);
    return ok;
}

/* Pre-tokenizer regexes, with the pieces worked out by hand from the patterns: GPT-2 (" ?letters",
 * " ?digits", " ?other", whitespace runs that leave their last space to the next word), Llama 3 (digits in
 * threes, punctuation keeping its newlines), Qwen2 (single digits) and "default" (four stages). */
TEST(bpe_pretokenize) {
    // "\n\nx": \s+(?!\S) backs off to the first "\n"; the lone second one is its own piece.
    CHECK(split_is(
        "gpt-2", "Hello world's  test 123!!\n\nx",
        (const char *const[]){"Hello", " world", "'s", " ", " test", " 123", "!!", "\n", "\n", "x", NULL}));
    CHECK(split_is(
        "llama-bpe", "Hello world's 12345 ok!!\n\n  x",
        (const char *const[]){"Hello", " world", "'s", " ", "123", "45", " ok", "!!\n\n", " ", " x", NULL}));
    CHECK(split_is("llama-bpe", "I'VE\tgot", (const char *const[]){"I", "'VE", "\tgot", NULL}));
    CHECK(split_is("qwen2", "x 123", (const char *const[]){"x", " ", "1", "2", "3", NULL}));
    CHECK(split_is("default", "a+b=1234!", (const char *const[]){"a", "+", "b", "=", "123", "4", "!", NULL}));
    CHECK(split_is("deepseek-llm", "ab  \n", (const char *const[]){"ab", "  ", "\n", NULL}));
    // Malformed UTF-8 becomes U+FFFD before splitting (as in llama.cpp).
    struct bpe *b = NULL;
    struct ci_err err = {0};
    char *s = NULL;
    size_t(*p)[2] = NULL, n = 0;
    ASSERT_STATUS(bpe_create(bpe_pre_find("gpt-2"), &b, &err), CI_OK);
    ASSERT_STATUS(bpe_split(b, "a\xff", 2, &s, &p, &n, &err), CI_OK);
    CHECK(strcmp(s, "a\xef\xbf\xbd") == 0);
    ci_free(s);
    ci_free(p);
    bpe_free(b);
    CHECK(bpe_pre_find("no-such-pre") == NULL);
    // Every pre-tokenizer's regexes compile.
    static const char *const names[] = {"default",    "llama-bpe", "deepseek-llm", "deepseek-coder", "falcon",
                                        "mpt",        "starcoder", "refact",       "qwen2",          "smollm",
                                        "command-r",  "tekken",    "gpt-4o",       "poro-chat",      "viking",
                                        "bailingmoe", "seed-coder"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct bpe_pre *pre = bpe_pre_find(names[i]);
        CHECK(pre != NULL);
        if (pre && bpe_create(pre, &b, &err) != CI_OK)
            TEST_FAILF("pre %s: %s", names[i], err.msg);
        else
            bpe_free(b);
    }
}

TEST(gguf_metadata_errors) {
    struct spm_def d;
    spm_def_init(&d);
    spm_add(&d, "a", -1.0f);
    struct ci_err err = {0};
    struct tokenizer *t = NULL;
    struct gb g = {0};
    size_t base = ci_mem_in_use();

    kv_str(&g, "tokenizer.ggml.model", "t5");
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_UNSUPPORTED && strstr(err.msg, "'t5'"));

    g = (struct gb){0};
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "tokenizer.ggml.model"));

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "llama");
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "tokenizer.ggml.tokens"));

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "llama");
    kv_arr_num(&g, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, d.type, (size_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "tokenizer.ggml.tokens"));

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "llama");
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    kv_arr_num(&g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, d.score, (size_t)d.n - 1);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "scores"));

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "llama");
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    kv_arr_num(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, d.type, (size_t)d.n - 2);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "types"));

    d.type[d.n - 1] = 7;
    g = (struct gb){0};
    spm_kvs(&g, &d);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "type 7"));
    d.type[d.n - 1] = 1;

    float nan_score = NAN;
    d.score[d.n - 1] = nan_score;
    g = (struct gb){0};
    spm_kvs(&g, &d);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "NaN"));
    d.score[d.n - 1] = -1.0f;

    g = (struct gb){0};
    spm_kvs(&g, &d);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", (uint32_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "bos_token_id"));

    // UINT32_MAX means "none" (stories260K.gguf writes it for sep/pad); the default stays.
    g = (struct gb){0};
    spm_kvs(&g, &d);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", UINT32_MAX);
    kv_u32(&g, "tokenizer.ggml.padding_token_id", UINT32_MAX);
    ASSERT_STATUS(tok_from_gb(&g, &t, &err), CI_OK);
    CHECK(tokenizer_bos(t) == 1 && tokenizer_pad(t) == TOKENIZER_TOKEN_NULL);
    tokenizer_free(t);

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "gpt2");
    kv_str(&g, "tokenizer.ggml.pre", "no-such-pre");
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_UNSUPPORTED && strstr(err.msg, "no-such-pre"));

    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "gpt2");
    kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    kv_arr_str(&g, "tokenizer.ggml.tokens", d.tok, (size_t)d.n);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "merges"));

    // add_bos_token without any BOS (gpt2's default id 11 is not a token of a 5-token vocabulary).
    const char *small[5] = {"a", "b", "c", "d", "e"};
    const char *no_merges[1] = {"a b"};
    g = (struct gb){0};
    kv_str(&g, "tokenizer.ggml.model", "gpt2");
    kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    kv_arr_str(&g, "tokenizer.ggml.tokens", small, 5);
    kv_arr_str(&g, "tokenizer.ggml.merges", no_merges, 1);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", true);
    CHECK(tok_from_gb(&g, &t, &err) == CI_ERR_FORMAT && strstr(err.msg, "BOS"));
    CHECK(ci_mem_in_use() == base);
}

/* Out-of-memory at every point of loading and encoding: either success or CI_ERR_NOMEM, never a leak. */
TEST(nomem_paths) {
    char path[1024];
    size_t n;
    test_model_path(path, sizeof(path), "tok512.bin");
    char *d = test_read_file(path, &n);
    ASSERT(d);
    struct bpe_def bd;
    bpe_def_init(&bd);
    bd.merges[0] = "a b";
    bd.n_merges = 1;
    struct gb g = {0};
    bpe_kvs(&g, &bd, "gpt-2");
    size_t gn;
    unsigned char *gfile = gb_file(&g, &gn);
    struct gguf *gg = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(gguf_open_mem(gfile, gn, &gg, &err), CI_OK);
    size_t base = ci_mem_in_use();
    int n_ok = 0;
    for (size_t extra = 0; extra < 400000 && n_ok < 3; extra += 997) {
        ci_mem_set_limit(base + extra);
        struct tokenizer *t = NULL;
        enum ci_status st = tokenizer_from_llama2c_mem(d, n, 512, &t, &err);
        enum ci_status st2 = CI_OK;
        int32_t *ids = NULL;
        int nid = 0;
        if (st == CI_OK)
            st2 = tokenizer_encode(t, "Once upon a time \xff there", 23, true, false, &ids, &nid, &err);
        ci_free(ids);
        tokenizer_free(t);
        struct tokenizer *tb = NULL;
        enum ci_status st3 = tokenizer_from_gguf(gg, &tb, &err);
        if (st3 == CI_OK)
            st3 = tokenizer_encode(tb, "ab ab, 12 x", 11, false, false, &ids, &nid, &err);
        if (st3 == CI_OK)
            ci_free(ids);
        tokenizer_free(tb);
        ci_mem_set_limit(0);
        if ((st != CI_OK && st != CI_ERR_NOMEM) || (st2 != CI_OK && st2 != CI_ERR_NOMEM) ||
            (st3 != CI_OK && st3 != CI_ERR_NOMEM && st3 != CI_ERR_LIMIT)) {
            TEST_FAILF("limit +%zu: statuses %d %d %d (%s)", extra, st, st2, st3, err.msg);
            break;
        }
        if (ci_mem_in_use() != base) {
            TEST_FAILF("limit +%zu: leaked %zu bytes", extra, ci_mem_in_use() - base);
            break;
        }
        n_ok += st == CI_OK && st2 == CI_OK && st3 == CI_OK;
    }
    CHECK(n_ok > 0);
    gguf_free(gg);
    free(gfile);
    free(d);
}

/* Random bytes through every vocabulary: encoding succeeds with ids in range.  SentencePiece's byte fallback
 * gives back any bytes without spaces and "▁" (an escaped space split by a malformed character falls back
 * to the bytes of "▁"); byte-level BPE gives back valid UTF-8 whose bytes all have a token (llama.cpp drops
 * bytes the vocabulary lacks, e.g. Falcon has no token for 0x03). */
static size_t random_utf8(struct ci_rng *r, char *buf, size_t max_cp) {
    size_t n = 0, k = ci_rng_u64(r) % max_cp;
    for (size_t i = 0; i < k; i++) {
        uint64_t x = ci_rng_u64(r);
        uint32_t cp;
        switch (x % 4) {
        case 0:
            cp = 0x20 + (uint32_t)(x >> 8) % 0x5f;
            break;
        case 1:
            cp = " \n\t'"[(x >> 8) % 4];
            break;
        case 2:
            cp = 0x80 + (uint32_t)(x >> 8) % 0x3000;
            break;
        default:
            cp = 0x10000 + (uint32_t)(x >> 8) % 0x30000; // planes 1-3: emoji, CJK extensions
            break;
        }
        if ((cp >= 0xd800 && cp <= 0xdfff) || cp == 0x2581 || cp == 0)
            cp = 'x';
        n += (size_t)utf8_encode(cp, buf + n);
    }
    buf[n] = 0;
    return n;
}

TEST(random_roundtrip) {
    char names[64][128];
    int n_files = list_vocabs(names, 64, false);
    struct ci_rng r;
    ci_rng_seed(&r, 31337);
    for (int f = 0; f < n_files; f++) {
        char rel[256];
        snprintf(rel, sizeof(rel), VOCAB_DIR "/%.120s", names[f]);
        struct tokenizer *t = test_load_tokenizer(rel);
        ASSERT(t);
        bool spm = tokenizer_type(t) == TOKENIZER_TYPE_SPM;
        int n_checked = 0;
        for (int i = 0; i < 120; i++) {
            char text[1024];
            size_t len;
            if (spm && i % 2) { // arbitrary bytes
                len = ci_rng_u64(&r) % 200;
                for (size_t k = 0; k < len; k++)
                    text[k] = (char)(ci_rng_u64(&r) % 256);
                for (size_t k = 0; k < len; k++)
                    if (text[k] == ' ' || (k + 2 < len && memcmp(text + k, "\xe2\x96\x81", 3) == 0))
                        text[k] = 'x';
            } else {
                len = random_utf8(&r, text, 120);
            }
            int32_t *ids = NULL;
            int n = 0;
            struct ci_err err = {0};
            if (tokenizer_encode(t, text, len, false, i % 3 == 0, &ids, &n, &err)) {
                TEST_FAILF("%s: encode: %s", names[f], err.msg);
                break;
            }
            bool in_range = true;
            for (int k = 0; k < n; k++)
                in_range &= ids[k] >= 0 && ids[k] < tokenizer_n_vocab(t);
            CHECK(in_range);
            bool lossless = true;
            for (size_t k = 0; k < len; k++)
                lossless &= tokenizer_vocab(t)->byte_id[(unsigned char)text[k]] >= 0;
            n_checked += lossless;
            if (!lossless) {
                ci_free(ids);
                continue;
            }
            char *s = NULL;
            size_t sl = 0;
            // parse_special may turn "<s>"-like text into control tokens; render them to get the text back.
            enum ci_status st = tokenizer_decode(t, ids, n, true, &s, &sl, &err);
            ci_free(ids);
            if (st || sl != len || memcmp(s, text, len) != 0) {
                TEST_FAILF("%s: random text %d (%zu bytes) does not round-trip (%zu bytes back)", names[f], i,
                           len, sl);
                ci_free(s);
                break;
            }
            ci_free(s);
        }
        if (n_checked < 20)
            TEST_FAILF("%s: only %d of 120 random texts could be checked", names[f], n_checked);
        tokenizer_free(t);
    }
}

/* A long text (whole paragraphs repeated) encodes quickly and decodes back. */
TEST(long_text) {
    struct tokenizer *ts[2] = {test_load_tokenizer(VOCAB_DIR "/ggml-vocab-llama-spm.gguf"),
                               test_load_tokenizer(VOCAB_DIR "/ggml-vocab-gpt-2.gguf")};
    ASSERT(ts[0] && ts[1]);
    size_t cap = 200000, n = 0;
    char *text = malloc(cap + 1);
    while (n + strlen(story_text) + 2 < cap) {
        memcpy(text + n, story_text, strlen(story_text));
        n += strlen(story_text);
        text[n] = n % 3 ? ' ' : '\n';
        n++;
    }
    memset(text + n, 'a', cap - n); // and one 'word' of thousands of letters
    n = cap;
    text[n] = 0;
    for (int k = 0; k < 2; k++) {
        int32_t *ids = NULL;
        int nid = 0;
        char *s = NULL;
        size_t sl = 0;
        struct ci_err err = {0};
        ASSERT_STATUS(tokenizer_encode(ts[k], text, n, false, false, &ids, &nid, &err), CI_OK);
        CHECK(nid > 1000 && nid < (int)n);
        ASSERT_STATUS(tokenizer_decode(ts[k], ids, nid, false, &s, &sl, &err), CI_OK);
        CHECK(sl == n && memcmp(s, text, n) == 0);
        ci_free(s);
        ci_free(ids);
        tokenizer_free(ts[k]);
    }
    free(text);
}

/* SentencePiece escapes each space to the 3-byte "▁" before splitting into symbols, so a text of lead bytes
 * followed by spaces has up to 3 symbols per 2 input bytes: buffers sized from the input length overflowed
 * (a remote heap overflow through any prompt).  Every byte must come back through byte fallback. */
TEST(spm_escape_growth) {
    const char *files[] = {VOCAB_DIR "/ggml-vocab-llama-spm.gguf", "stories260K.gguf"};
    size_t cap = 8192;
    char *text = malloc(cap);
    ASSERT(text);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        struct tokenizer *t = test_load_tokenizer(files[f]);
        ASSERT(t);
        for (int shape = 0; shape < 4; shape++) {
            size_t n = 0;
            for (unsigned b = 0; n + 4 < cap; b++) {
                switch (shape) {
                case 0: // the reported body: "\xc7 " over and over
                    text[n++] = (char)0xc7;
                    text[n++] = ' ';
                    break;
                case 1: // every lead byte before a space
                    text[n++] = (char)(0xc0 + b % 64);
                    text[n++] = ' ';
                    break;
                case 2: // a 4-byte lead before three spaces
                    text[n++] = (char)0xf0;
                    text[n++] = ' ';
                    text[n++] = ' ';
                    text[n++] = ' ';
                    break;
                default: // spaces only
                    text[n++] = ' ';
                    break;
                }
            }
            for (int add_special = 0; add_special < 2; add_special++) {
                int32_t *ids = NULL;
                int nid = 0;
                char *back = NULL;
                size_t nb = 0;
                struct ci_err err = {0};
                ASSERT_STATUS(tokenizer_encode(t, text, n, add_special, false, &ids, &nid, &err), CI_OK);
                ASSERT_STATUS(tokenizer_decode(t, ids, nid, false, &back, &nb, &err), CI_OK);
                // A lead byte swallows the next byte of the escaped text into its symbol, so byte fallback
                // brings that "▁" back as its three raw bytes (as llama.cpp does): read those as the space.
                size_t m = 0;
                for (size_t i = 0; i < nb; i++, m++) {
                    back[m] = back[i];
                    if (nb - i >= 3 && memcmp(back + i, "\xe2\x96\x81", 3) == 0) {
                        back[m] = ' ';
                        i += 2;
                    }
                }
                if (m != n || memcmp(back, text, n) != 0)
                    TEST_FAILF("%s shape %d: %zu bytes decode to %zu other bytes", files[f], shape, n, m);
                ci_free(back);
                ci_free(ids);
            }
        }
        tokenizer_free(t);
    }
    free(text);
}

/* ---- special tokens, pieces, end of generation ---- */

/* ids of text encoded alone (no special handling). */
static int enc(const struct tokenizer *t, const char *text, int32_t *out, int cap) {
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    if (tokenizer_encode(t, text, strlen(text), false, false, &ids, &n, &err) || n > cap)
        n = -1;
    else if (n)
        memcpy(out, ids, (size_t)n * sizeof(int32_t));
    ci_free(ids);
    return n;
}

TEST(special_tokens) {
    struct tokenizer *spm = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    struct tokenizer *phi = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-phi-3.gguf");
    struct tokenizer *gpt = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-gpt-2.gguf");
    ASSERT(spm && phi && gpt);
    int32_t hello[16], want[32], a[8], b[8];
    int nh = enc(spm, "Hello", hello, 16);
    ASSERT(nh > 0);
    // "<s>Hello</s>": with parse_special, BOS + "Hello" encoded as at a text start + EOS.
    want[0] = 1;
    memcpy(want + 1, hello, (size_t)nh * sizeof(int32_t));
    want[nh + 1] = 2;
    CHECK(encodes_to(spm, "<s>Hello</s>", false, true, want, nh + 2));
    int32_t *ids = NULL;
    int n = 0;
    struct ci_err err = {0};
    ASSERT_STATUS(tokenizer_encode(spm, "<s>Hello</s>", 12, false, false, &ids, &n, &err), CI_OK);
    for (int i = 0; i < n; i++)
        CHECK(ids[i] != 1 && ids[i] != 2);
    ci_free(ids);
    // Phi-3 special tokens eat the whitespace after them (RSTRIP).
    int32_t user = test_find_piece(phi, "<|user|>");
    ASSERT(user == 32010);
    nh = enc(phi, "Hi", hello, 16);
    want[0] = user;
    memcpy(want + 1, hello, (size_t)nh * sizeof(int32_t));
    CHECK(encodes_to(phi, "<|user|>\n  Hi", false, true, want, nh + 1));
    // GPT-2: text around "<|endoftext|>" is encoded on its own.
    int na = enc(gpt, "a", a, 8), nb = enc(gpt, "b", b, 8);
    ASSERT(na == 1 && nb == 1);
    CHECK(encodes_to(gpt, "a<|endoftext|>b", false, true, (int32_t[]){a[0], 50256, b[0]}, 3));
    tokenizer_free(spm);
    tokenizer_free(phi);
    tokenizer_free(gpt);
}

TEST(pieces_and_bytes) {
    struct tokenizer *spm = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    struct tokenizer *gpt = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-gpt-2.gguf");
    ASSERT(spm && gpt);
    char buf[64];
    int32_t nl = test_find_piece(spm, "<0x0A>"), hello = test_find_piece(spm, "\xe2\x96\x81Hello");
    ASSERT(nl >= 0 && hello >= 0);
    CHECK(tokenizer_token_to_bytes(spm, nl, buf, 64) == 1 && buf[0] == '\n');
    CHECK(tokenizer_token_to_bytes(spm, hello, buf, 64) == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK(tokenizer_token_to_bytes(spm, hello, buf, 3) == -6);
    CHECK(tokenizer_token_to_bytes(spm, 1, buf, 64) == 0); // <s> renders as nothing
    size_t l;
    const char *p = tokenizer_token_bytes(spm, 1, true, &l);
    CHECK(l == 3 && memcmp(p, "<s>", 3) == 0);
    CHECK(tokenizer_token_to_bytes(spm, -1, buf, 64) == 0 &&
          tokenizer_token_to_bytes(spm, 32000, buf, 64) == 0);
    CHECK(tokenizer_piece(spm, 32000, &l) == NULL && l == 0);
    CHECK(tokenizer_nl(spm) == nl);
    int32_t world = test_find_piece(gpt, "\xc4\xa0world"); // "Ġworld"
    ASSERT(world >= 0);
    CHECK(tokenizer_token_to_bytes(gpt, world, buf, 64) == 6 && memcmp(buf, " world", 6) == 0);
    CHECK(tokenizer_token_to_bytes(gpt, 50256, buf, 64) == 0);
    CHECK(tokenizer_max_token_bytes(gpt) >= 6);
    CHECK(strcmp(tokenizer_type_name(spm), "SPM") == 0 && strcmp(tokenizer_type_name(gpt), "BPE") == 0);
    CHECK(strcmp(tokenizer_model_name(gpt), "gpt2") == 0 && strcmp(tokenizer_pre(gpt), "gpt-2") == 0);
    CHECK(tokenizer_n_merges(gpt) == 50000 && tokenizer_n_merges(spm) == 0);
    CHECK(tokenizer_add_bos(spm) && !tokenizer_add_eos(spm) && tokenizer_add_space_prefix(spm));
    CHECK(!tokenizer_add_bos(gpt) && !tokenizer_add_space_prefix(gpt));
    tokenizer_free(spm);
    tokenizer_free(gpt);
}

TEST(end_of_generation) {
    struct tokenizer *spm = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-llama-spm.gguf");
    struct tokenizer *phi = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-phi-3.gguf");
    struct tokenizer *ref = test_load_tokenizer(VOCAB_DIR "/ggml-vocab-refact.gguf");
    ASSERT(spm && phi && ref);
    CHECK(tokenizer_is_eog(spm, 2) && !tokenizer_is_eog(spm, 1) && !tokenizer_is_eog(spm, 100));
    CHECK(tokenizer_eot(spm) == TOKENIZER_TOKEN_NULL);
    // Phi-3: EOS <|endoftext|> (32000) from the file, EOT <|end|> (32007) recognised by its text.
    CHECK(tokenizer_eos(phi) == 32000 && tokenizer_eot(phi) == 32007);
    CHECK(tokenizer_is_eog(phi, 32000) && tokenizer_is_eog(phi, 32007) && !tokenizer_is_eog(phi, 32010));
    // Refact: <|endoftext|> and the FIM pad token end generation.
    CHECK(tokenizer_is_eog(ref, 0) && tokenizer_is_eog(ref, 4) && !tokenizer_is_eog(ref, 1));
    CHECK(!tokenizer_is_eog(ref, -3) && !tokenizer_is_eog(ref, 1 << 30));
    tokenizer_free(spm);
    tokenizer_free(phi);
    tokenizer_free(ref);
}

/* ---- concurrency ---- */

struct thread_job {
    const struct tokenizer *t;
    const struct vectors *v;
    int ok;
};

static void *encode_all(void *arg) {
    struct thread_job *j = arg;
    j->ok = 1;
    for (int rep = 0; rep < 20; rep++)
        for (int i = 0; i < j->v->n; i++) {
            int32_t *ids = NULL, want[4096];
            int n = 0, nw = parse_ids(j->v->ids[i], want, 4096);
            struct ci_err err = {0};
            if (tokenizer_encode(j->t, j->v->text[i], j->v->len[i], false, false, &ids, &n, &err) ||
                n != nw || (n && memcmp(ids, want, (size_t)n * sizeof(int32_t)) != 0))
                j->ok = 0;
            ci_free(ids);
        }
    return NULL;
}

TEST(concurrent_encode) {
    const char *files[2] = {"ggml-vocab-deepseek-coder.gguf", "ggml-vocab-llama-spm.gguf"};
    for (int f = 0; f < 2; f++) {
        char rel[256], path[1024];
        snprintf(rel, sizeof(rel), VOCAB_DIR "/%.120s", files[f]);
        struct tokenizer *t = test_load_tokenizer(rel);
        test_model_path(path, sizeof(path), rel);
        struct vectors v;
        ASSERT(t && vectors_load(&v, path));
        struct thread_job jobs[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            jobs[i] = (struct thread_job){t, &v, 0};
            ASSERT(pthread_create(&th[i], NULL, encode_all, &jobs[i]) == 0);
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            CHECK(jobs[i].ok);
        }
        vectors_free(&v);
        tokenizer_free(t);
    }
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    char names[64][128];
    int n = list_vocabs(names, 64, true);
    for (int i = 0; i < n; i++)
        run_vocab_file(names[i]);
    RUN(vocab_files_present);
    RUN(bert_wordpiece);
    RUN(wpm_algorithm);
    RUN(vectors_decode_roundtrip);
    RUN(llama2c_matches_gguf);
    RUN(tok512_story);
    RUN(llama2c_malformed);
    RUN(spm_algorithm);
    RUN(bpe_algorithm);
    RUN(bpe_pretokenize);
    RUN(gguf_metadata_errors);
    RUN(nomem_paths);
    RUN(random_roundtrip);
    RUN(long_text);
    RUN(spm_escape_growth);
    RUN(special_tokens);
    RUN(pieces_and_bytes);
    RUN(end_of_generation);
    RUN(concurrent_encode);
    return test_exit_code();
}
