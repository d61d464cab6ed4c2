/* llama2.c tokenizer.bin from outside bytes (the input is the whole file), and the tokenizer built on it.
 *
 * Properties checked:
 *   - loading with "any count" (n_vocab_expected 0) and loading with exactly the count found agree, and
 *     asking for one token more fails;
 *   - ids 0-2 are <unk>, BOS and EOS; every token's text and bytes are reachable;
 *   - texts built from the vocabulary's own pieces (and fixed ones) encode to ids in range, decode, and
 *     stream through the detokenizer as valid UTF-8 that equals the decoded text, cleaned. */
#include "fuzz.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

/* Streams ids through a detokenizer: the pieces must be valid UTF-8 and add up to the decoded text with
 * every ill-formed part replaced by U+FFFD. */
static void check_stream(const struct tokenizer *t, const int32_t *ids, int n) {
    struct detok d;
    struct ci_err err = {0};
    char *dec = NULL;
    size_t dec_len = 0;
    FUZZ_CHECK(tokenizer_decode(t, ids, n, false, &dec, &dec_len, &err) == CI_OK, "decode: %s", err.msg);
    FUZZ_CHECK(detok_init(&d, t, true, false, &err) == CI_OK, "detok_init: %s", err.msg);
    char *want = malloc(3 * dec_len + 1), *got = malloc(3 * dec_len + 16);
    size_t want_len = fuzz_utf8_replace(dec, dec_len, want), got_len = 0;
    for (int i = 0; i <= n; i++) {
        const char *s;
        size_t l;
        if (i < n)
            detok_push(&d, ids[i], &s, &l);
        else
            detok_flush(&d, &s, &l);
        FUZZ_CHECK(fuzz_utf8_valid(s, l), "detok piece is not UTF-8");
        FUZZ_CHECK(got_len + l <= 3 * dec_len + 16, "detok output longer than 3x the text");
        memcpy(got + got_len, s, l);
        got_len += l;
    }
    FUZZ_CHECK(got_len == want_len && memcmp(got, want, got_len) == 0,
               "stream differs from the decoded text");
    free(want);
    free(got);
    detok_deinit(&d);
    ci_free(dec);
}

static void check_encode(const struct tokenizer *t, const char *text, size_t len) {
    struct ci_err err = {0};
    for (int flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        int n = 0;
        enum ci_status s = tokenizer_encode(t, text, len, flags & 1, flags & 2, &ids, &n, &err);
        FUZZ_CHECK(s == CI_OK, "encode: %s", err.msg); // <unk> (id 0) catches any byte without a token
        for (int i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < tokenizer_n_vocab(t), "id %d", ids[i]);
        check_stream(t, ids, n);
        ci_free(ids);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct ci_err err = {0};
    struct tokenizer *t = NULL, *t2 = NULL;
    enum ci_status s = tokenizer_from_llama2c_mem(data, size, 0, &t, &err);
    if (s != CI_OK) {
        FUZZ_CHECK(t == NULL && err.msg[0] && (s == CI_ERR_FORMAT || s == CI_ERR_NOMEM), "status %d: %s",
                   (int)s, err.msg);
        FUZZ_MEM_END();
        return 0;
    }
    int nv = tokenizer_n_vocab(t);
    FUZZ_CHECK(nv >= 3 && tokenizer_unk(t) == 0 && tokenizer_bos(t) == 1 && tokenizer_eos(t) == 2, "ids");
    FUZZ_CHECK(tokenizer_type(t) == TOKENIZER_TYPE_SPM, "type");
    FUZZ_CHECK(tokenizer_from_llama2c_mem(data, size, nv, &t2, &err) == CI_OK, "exact count %d: %s", nv,
               err.msg);
    FUZZ_CHECK(tokenizer_n_vocab(t2) == nv, "exact count");
    tokenizer_free(t2);
    t2 = NULL;
    FUZZ_CHECK(tokenizer_from_llama2c_mem(data, size, nv + 1, &t2, &err) == CI_ERR_FORMAT, "count %d + 1",
               nv);

    // A text made of the first pieces of the vocabulary (spaces as written), then fixed ones.
    char text[512];
    size_t len = 0;
    for (int32_t id = 0; id < nv && id < 64; id++) {
        size_t l;
        const char *p = tokenizer_token_bytes(t, id, true, &l);
        FUZZ_CHECK(p != NULL && l <= tokenizer_max_token_bytes(t), "token %d bytes", id);
        if (len + l < sizeof text) {
            memcpy(text + len, p, l);
            len += l;
        }
        const char *piece = tokenizer_piece(t, id, &l);
        FUZZ_CHECK(piece != NULL && l > 0, "token %d text", id);
    }
    check_encode(t, text, len);
    static const char fixed[] = "Once upon a time, \xc3\xa9t\xc3\xa9 \xe4\xbd\xa0\n<s> x</s>\xff";
    check_encode(t, fixed, sizeof fixed - 1);
    tokenizer_free(t);
    FUZZ_MEM_END();
    return 0;
}
