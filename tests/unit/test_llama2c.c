/* llama2.c loader: the legacy and version-1 exports of stories260K load with the MANIFEST configuration and
 * hold bit-identical tensors (to each other and to the GGUF export), and malformed checkpoints fail cleanly.
 */
#include "format/llama2c.h"
#include "model/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "format/gguf.h"
#include "test.h"

/* The stories260K configuration from MANIFEST.md (independent of the loader). */
static void check_config(const struct model_config *c) {
    CHECK(c->arch == MODEL_ARCH_LLAMA);
    CHECK(c->n_embd == 64);
    CHECK(c->n_ff == 172);
    CHECK(c->n_layer == 5);
    CHECK(c->n_head == 8);
    CHECK(c->n_kv_head == 4);
    CHECK(c->n_vocab == 512);
    CHECK(c->n_ctx_train == 512);
    CHECK(c->head_dim == 8);
    CHECK(c->rope_dim == 8);
    CHECK(!c->rope_neox);
    CHECK(c->rope_base == 10000.0f);
    CHECK(c->rms_eps == 1e-5f);
}

TEST(legacy_config) {
    char p[512];
    struct llama2c *l = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(llama2c_open(test_model_path(p, sizeof p, "stories260K.bin"), &l, &err), CI_OK);
    struct model_config c;
    model_config_from_llama2c(&c, l);
    check_config(&c);
    CHECK(llama2c_version(l) == 0);
    CHECK(llama2c_shared_classifier(l));
    CHECK(llama2c_n_tensors(l) == 3 + 9 * 5);
    llama2c_free(l);
}

TEST(v1_config) {
    char p[512];
    struct llama2c *l = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(llama2c_open(test_model_path(p, sizeof p, "stories260K_v1.bin"), &l, &err), CI_OK);
    struct model_config c;
    model_config_from_llama2c(&c, l);
    check_config(&c);
    CHECK(llama2c_version(l) == 1);
    CHECK(llama2c_shared_classifier(l));
    llama2c_free(l);
}

/* Expected shape of a GGUF-named tensor for stories260K: ne0 (row length), ne1 (rows; 1 for vectors). */
static void expected_shape(const char *name, int64_t *ne0, int64_t *ne1) {
    const int64_t dim = 64, hidden = 172, kv = 32, vocab = 512;
    *ne0 = dim;
    *ne1 = 1;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight"))
        *ne1 = vocab;
    else if (strstr(name, "attn_q.") || strstr(name, "attn_output."))
        *ne1 = dim;
    else if (strstr(name, "attn_k.") || strstr(name, "attn_v."))
        *ne1 = kv;
    else if (strstr(name, "ffn_gate.") || strstr(name, "ffn_up."))
        *ne1 = hidden;
    else if (strstr(name, "ffn_down.")) {
        *ne0 = hidden;
        *ne1 = dim;
    }
}

TEST(tensors_match_v1_and_offsets) {
    char p[512];
    struct llama2c *a = NULL, *b = NULL;
    struct ci_err err = {0};
    size_t n_raw = 0;
    uint8_t *raw = test_read_file(test_model_path(p, sizeof p, "stories260K.bin"), &n_raw);
    ASSERT(raw != NULL);
    ASSERT_STATUS(llama2c_open(p, &a, &err), CI_OK);
    ASSERT_STATUS(llama2c_open(test_model_path(p, sizeof p, "stories260K_v1.bin"), &b, &err), CI_OK);

    // Legacy offsets by hand: header 28 bytes, then tok_emb, rms_att[5], wq[5], wk[5], wv[5], wo[5],
    // rms_ffn[5], w1[5], w2[5], w3[5], rms_final, freq_cis.
    const uint64_t d = 64, h = 172, kv = 32, v = 512, L = 5;
    uint64_t o_tok = 28, o_att = o_tok + v * d * 4, o_wq = o_att + L * d * 4, o_wk = o_wq + L * d * d * 4;
    uint64_t o_wv = o_wk + L * kv * d * 4, o_wo = o_wv + L * kv * d * 4, o_ffn = o_wo + L * d * d * 4;
    uint64_t o_w1 = o_ffn + L * d * 4, o_w2 = o_w1 + L * h * d * 4, o_w3 = o_w2 + L * d * h * 4;
    uint64_t o_fin = o_w3 + L * h * d * 4;
    CHECK(o_fin + d * 4 + 2 * 512 * 4 * 4 == n_raw);

    struct {
        const char *name;
        uint64_t off;
    } want[] = {
        {"token_embd.weight", o_tok},
        {"output.weight", o_tok},
        {"output_norm.weight", o_fin},
        {"blk.0.attn_norm.weight", o_att},
        {"blk.4.attn_norm.weight", o_att + 4 * d * 4},
        {"blk.2.attn_q.weight", o_wq + 2 * d * d * 4},
        {"blk.3.attn_k.weight", o_wk + 3 * kv * d * 4},
        {"blk.1.attn_v.weight", o_wv + 1 * kv * d * 4},
        {"blk.4.attn_output.weight", o_wo + 4 * d * d * 4},
        {"blk.2.ffn_norm.weight", o_ffn + 2 * d * 4},
        {"blk.3.ffn_gate.weight", o_w1 + 3 * h * d * 4},
        {"blk.4.ffn_down.weight", o_w2 + 4 * d * h * 4},
        {"blk.0.ffn_up.weight", o_w3},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const struct ci_tensor *t = llama2c_find_tensor(a, want[i].name);
        ASSERT(t != NULL);
        if (memcmp(t->data, raw + want[i].off, t->nbytes) != 0)
            TEST_FAILF("%s: bytes differ from file offset %llu", want[i].name,
                       (unsigned long long)want[i].off);
    }
    CHECK(llama2c_find_tensor(a, "blk.5.attn_q.weight") == NULL);
    CHECK(llama2c_find_tensor(a, "nope") == NULL);

    // Every tensor: the same name, shape and bytes in the v1 export; shapes as the config implies.
    ASSERT(llama2c_n_tensors(a) == llama2c_n_tensors(b));
    for (int i = 0; i < llama2c_n_tensors(a); i++) {
        const struct ci_tensor *ta = llama2c_tensor(a, i);
        const struct ci_tensor *tb = llama2c_find_tensor(b, ta->name);
        ASSERT(tb != NULL);
        int64_t ne0, ne1;
        expected_shape(ta->name, &ne0, &ne1);
        CHECK(ta->type == CI_TYPE_F32 && tb->type == CI_TYPE_F32);
        if (ta->ne[0] != ne0 || ta->ne[1] != ne1 || tb->ne[0] != ne0 || tb->ne[1] != ne1)
            TEST_FAILF("%s: shape %lld x %lld, want %lld x %lld", ta->name, (long long)ta->ne[1],
                       (long long)ta->ne[0], (long long)ne1, (long long)ne0);
        CHECK(ta->n_dims == (ne1 == 1 ? 1 : 2));
        CHECK(ta->nbytes == (uint64_t)(ne0 * ne1 * 4) && ta->row_bytes == (uint64_t)ne0 * 4);
        CHECK(tb->nbytes == ta->nbytes);
        if (memcmp(ta->data, tb->data, ta->nbytes) != 0)
            TEST_FAILF("%s differs between legacy and v1", ta->name);
    }
    llama2c_free(a);
    llama2c_free(b);
    free(raw);
}

TEST(tensors_match_gguf) {
    char p[512];
    struct llama2c *a = NULL;
    struct gguf *g = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(llama2c_open(test_model_path(p, sizeof p, "stories260K.bin"), &a, &err), CI_OK);
    ASSERT_STATUS(gguf_open(test_model_path(p, sizeof p, "stories260K.gguf"), &g, &err), CI_OK);
    ASSERT_EQ_I64(gguf_n_tensors(g), llama2c_n_tensors(a));
    for (int i = 0; i < llama2c_n_tensors(a); i++) {
        const struct ci_tensor *ta = llama2c_tensor(a, i);
        int64_t gi = gguf_find_tensor(g, ta->name);
        if (gi < 0) {
            TEST_FAILF("%s not in the GGUF", ta->name);
            continue;
        }
        const struct ci_tensor *tg = gguf_tensor(g, gi);
        CHECK(tg->type == CI_TYPE_F32);
        CHECK(tg->n_dims == ta->n_dims && tg->ne[0] == ta->ne[0] && tg->ne[1] == ta->ne[1]);
        if (tg->nbytes != ta->nbytes || memcmp(tg->data, ta->data, ta->nbytes) != 0)
            TEST_FAILF("%s differs from the GGUF", ta->name);
    }
    gguf_free(g);
    llama2c_free(a);
}

TEST(lookup_fn_signature) {
    // llama2c_find_tensor must be usable where weights_lookup_fn is expected.
    const struct ci_tensor *(*fn)(const void *, const char *) = llama2c_find_tensor;
    CHECK(fn != NULL);
}

TEST(sniff) {
    char p[512];
    size_t n;
    uint8_t *legacy = test_read_file(test_model_path(p, sizeof p, "stories260K.bin"), &n);
    ASSERT(legacy != NULL);
    CHECK(llama2c_sniff(legacy, n));
    CHECK(llama2c_sniff(legacy, 28));
    CHECK(!llama2c_sniff(legacy, 27));
    free(legacy);
    uint8_t *v1 = test_read_file(test_model_path(p, sizeof p, "stories260K_v1.bin"), &n);
    ASSERT(v1 != NULL);
    CHECK(llama2c_sniff(v1, n));
    free(v1);
    uint8_t *gg = test_read_file(test_model_path(p, sizeof p, "stories260K.gguf"), &n);
    ASSERT(gg != NULL);
    CHECK(!llama2c_sniff(gg, n));
    free(gg);
    uint8_t junk[64];
    memset(junk, 0xff, sizeof junk);
    CHECK(!llama2c_sniff(junk, sizeof junk));
    CHECK(!llama2c_sniff(junk, 0));
}

/* Opens bytes expected to be rejected: a non-OK status and a message, no crash (ASan checks reads). */
static int expect_reject(const void *data, size_t n, const char *what) {
    // A private copy sized exactly n, so any read past the end trips ASan.
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, data, n);
    struct llama2c *l = (struct llama2c *)(uintptr_t)1;
    struct ci_err err = {0};
    enum ci_status s = llama2c_open_mem(copy, n, &l, &err);
    free(copy);
    if (s == CI_OK) {
        llama2c_free(l);
        TEST_FAILF("%s: accepted", what);
        return 0;
    }
    if (l != NULL || err.msg[0] == '\0') {
        TEST_FAILF("%s: status %d but out=%p msg='%s'", what, (int)s, (void *)l, err.msg);
        return 0;
    }
    return 1;
}

TEST(truncated) {
    char p[512];
    size_t n;
    static const char *files[] = {"stories260K.bin", "stories260K_v1.bin"};
    for (int f = 0; f < 2; f++) {
        uint8_t *buf = test_read_file(test_model_path(p, sizeof p, files[f]), &n);
        ASSERT(buf != NULL);
        size_t cuts[] = {0, 3, 4, 20, 27, 28, 100, 255, 256, 257, 4096, n / 2, n - 4, n - 1};
        for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
            char what[128];
            snprintf(what, sizeof what, "%s cut at %zu", files[f], cuts[i]);
            expect_reject(buf, cuts[i], what);
        }
        // Trailing bytes beyond the layout mean the header does not describe the file.
        uint8_t *longer = malloc(n + 8);
        memcpy(longer, buf, n);
        memset(longer + n, 0, 8);
        expect_reject(longer, n + 8, "8 trailing bytes");
        free(longer);
        free(buf);
    }
}

/* Patches one int32 of a header and expects rejection. */
static void reject_patched(const uint8_t *buf, size_t n, size_t off, int32_t v, const char *what) {
    uint8_t *b = malloc(n);
    memcpy(b, buf, n);
    memcpy(b + off, &v, 4);
    expect_reject(b, n, what);
    free(b);
}

TEST(bad_headers) {
    char p[512];
    size_t n;
    uint8_t *buf = test_read_file(test_model_path(p, sizeof p, "stories260K.bin"), &n);
    ASSERT(buf != NULL);
    // Field offsets in the legacy header: dim 0, hidden 4, layers 8, heads 12, kv_heads 16, vocab 20, seq 24.
    static const char *field[] = {"dim", "hidden", "n_layers", "n_heads", "n_kv_heads", "vocab", "seq_len"};
    const int32_t bad[] = {0, -1, -64, INT32_MIN, INT32_MAX, 1 << 30};
    for (int fi = 0; fi < 7; fi++) {
        for (size_t j = 0; j < sizeof bad / sizeof *bad; j++) {
            if (fi == 5 && bad[j] < 0 && bad[j] != INT32_MIN)
                continue; // negative vocab is the unshared-classifier flag, tested below
            char what[128];
            snprintf(what, sizeof what, "legacy %s = %d", field[fi], (int)bad[j]);
            reject_patched(buf, n, (size_t)fi * 4, bad[j], what);
        }
    }
    reject_patched(buf, n, 16, 3, "n_heads 8 % n_kv_heads 3");
    reject_patched(buf, n, 16, 16, "n_kv_heads 16 > n_heads 8");
    reject_patched(buf, n, 12, 7, "dim 64 % n_heads 7");
    reject_patched(buf, n, 12, 64, "head_dim 1 (odd)");
    reject_patched(buf, n, 12, 32, "n_heads 32: head_dim 2, layout smaller than the file");
    // Bigger dims than the file holds: the layout check must catch it without overflow.
    reject_patched(buf, n, 0, 65536, "dim 65536");
    reject_patched(buf, n, 4, 1 << 20, "hidden 1M");
    reject_patched(buf, n, 8, 1024, "1024 layers");
    // Unshared classifier: needs vocab*dim more floats than the file has.
    reject_patched(buf, n, 20, -512, "legacy unshared classifier without wcls");
    free(buf);

    uint8_t *v1 = test_read_file(test_model_path(p, sizeof p, "stories260K_v1.bin"), &n);
    ASSERT(v1 != NULL);
    // v1 header: magic 0, version 4, dim 8, hidden 12, layers 16, heads 20, kv 24, vocab 28, seq 32,
    // shared 36.
    reject_patched(v1, n, 4, 2, "v1 version 2");
    reject_patched(v1, n, 4, 0, "v1 version 0");
    reject_patched(v1, n, 8, 0, "v1 dim 0");
    reject_patched(v1, n, 28, -512, "v1 negative vocab");
    reject_patched(v1, n, 24, 5, "v1 n_kv_heads 5");
    reject_patched(v1, n, 32, -1, "v1 seq_len -1");
    {
        uint8_t *b = malloc(n);
        memcpy(b, v1, n);
        b[36] = 0; // unshared: wcls would be missing
        expect_reject(b, n, "v1 unshared without wcls");
        b[36] = 2;
        expect_reject(b, n, "v1 shared flag 2");
        free(b);
    }
    free(v1);
}

TEST(unshared_classifier) {
    // A legacy file with negative vocab and a wcls appended: output.weight is the appended matrix.
    char p[512];
    size_t n;
    uint8_t *buf = test_read_file(test_model_path(p, sizeof p, "stories260K.bin"), &n);
    ASSERT(buf != NULL);
    const size_t wcls_bytes = 512 * 64 * 4;
    uint8_t *b = malloc(n + wcls_bytes);
    memcpy(b, buf, n);
    int32_t neg = -512;
    memcpy(b + 20, &neg, 4);
    float *wcls = (float *)(void *)(b + n);
    for (size_t i = 0; i < wcls_bytes / 4; i++)
        wcls[i] = (float)i;
    struct llama2c *l = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(llama2c_open_mem(b, n + wcls_bytes, &l, &err), CI_OK);
    CHECK(!llama2c_shared_classifier(l));
    struct model_config c;
    model_config_from_llama2c(&c, l);
    CHECK(c.n_vocab == 512);
    const struct ci_tensor *out = llama2c_find_tensor(l, "output.weight");
    const struct ci_tensor *emb = llama2c_find_tensor(l, "token_embd.weight");
    ASSERT(out && emb);
    CHECK(out->data == (const void *)(b + n));
    CHECK(emb->data == (const void *)(b + 28));
    CHECK(((const float *)out->data)[12345] == 12345.0f);
    llama2c_free(l);
    free(b);
    free(buf);
}

TEST(open_errors) {
    struct llama2c *l = NULL;
    struct ci_err err = {0};
    CHECK(llama2c_open("/nonexistent/dir/model.bin", &l, &err) == CI_ERR_IO);
    CHECK(l == NULL && strstr(err.msg, "/nonexistent") != NULL);
    // A truncated file on disk: the message names the path.
    char path[512];
    int32_t hdr[7] = {64, 172, 5, 8, 4, 512, 512};
    ASSERT(test_write_file(test_tmp_path(path, sizeof path, "truncated.bin"), hdr, sizeof hdr));
    memset(&err, 0, sizeof err);
    CHECK(llama2c_open(path, &l, &err) == CI_ERR_FORMAT);
    CHECK(l == NULL && strstr(err.msg, path) != NULL && strstr(err.msg, "truncated") != NULL);
    unlink(path);
    CHECK(ci_mem_in_use() == 0);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(legacy_config);
    RUN(v1_config);
    RUN(tensors_match_v1_and_offsets);
    RUN(tensors_match_gguf);
    RUN(lookup_fn_signature);
    RUN(sniff);
    RUN(truncated);
    RUN(bad_headers);
    RUN(unshared_classifier);
    RUN(open_errors);
    return test_exit_code();
}
