/* Tokenizer encode and decode on arbitrary text, for SentencePiece vocabularies, every byte-level BPE
 * pre-tokenizer cinfer supports and WordPiece (fuzz_load_tokenizers: the real ggml-vocab files, and GPT-2's
 * vocabulary under each remaining pre-tokenizer).
 *
 * Input: byte 0 picks the tokenizer, byte 1 the flags (bit 0 add_special, bit 1 parse_special, bit 2 make
 * the text valid UTF-8 first by replacing ill-formed parts with U+FFFD), the rest is the text.
 *
 * Properties checked:
 *   - encoding never fails on text of this size; every id is in the vocabulary; the count is bounded by
 *     the text (at most 3 tokens a byte, plus the special ones);
 *   - the ids decode;
 *   - round trip: when the text is valid UTF-8, special texts are not parsed, no user-defined or unknown
 *     token came out, and the vocabulary has a token for each byte of the text (several BPE vocabularies
 *     lack some control bytes, which are then dropped as llama.cpp drops them), decode(encode(text))
 *     gives the text back (for SentencePiece with U+2581 read as the space it stands for; BOS/EOS added by
 *     add_special decode to nothing; not for WordPiece, which lowercases, strips accents and drops spaces);
 *   - encoding the same text twice gives the same ids. */
#include "fuzz.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

static struct fuzz_tok toks[FUZZ_MAX_TOKENIZERS];
static int n_toks;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    n_toks = fuzz_load_tokenizers(toks, true);
    return 0;
}

/* The text SentencePiece decoding gives back: its escape U+2581 reads as a space. */
static size_t spm_expect(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = s[i++];
        }
    }
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    const struct fuzz_tok *ft = &toks[fuzz_u8(&in) % n_toks];
    const struct tokenizer *t = ft->tok;
    unsigned flags = fuzz_u8(&in);
    bool add_special = flags & 1, parse_special = flags & 2;
    const uint8_t *raw;
    size_t raw_len = fuzz_bytes(&in, SIZE_MAX, &raw);
    char *text = malloc(3 * raw_len + 1);
    size_t len = raw_len;
    if (flags & 4)
        len = fuzz_utf8_replace((const char *)raw, raw_len, text);
    else if (raw_len)
        memcpy(text, raw, raw_len);

    struct ci_err err = {0};
    int32_t *ids = NULL, *ids2 = NULL;
    int n = 0, n2 = 0;
    enum ci_status s = tokenizer_encode(t, text, len, add_special, parse_special, &ids, &n, &err);
    FUZZ_CHECK(s == CI_OK, "%s: encode: %s", ft->name, err.msg);
    int nv = tokenizer_n_vocab(t), n_special = 0;
    bool plain = true; // only normal and byte tokens, apart from the BOS/EOS add_special added
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv, "%s: id %d of %d", ft->name, ids[i], nv);
        unsigned a = tokenizer_vocab(t)->attr[ids[i]];
        if (a & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_USER_DEFINED | VOCAB_ATTR_UNKNOWN)) {
            n_special++;
            bool added = add_special && ((i == 0 && ids[i] == tokenizer_bos(t) && tokenizer_add_bos(t)) ||
                                         (i == n - 1 && ids[i] == tokenizer_eos(t) && tokenizer_add_eos(t)));
            if (!added)
                plain = false;
        }
    }
    FUZZ_CHECK((size_t)n <= 3 * len + 3 * (size_t)n_special + 5, "%s: %d tokens for %zu bytes", ft->name, n,
               len);

    char *dec = NULL;
    size_t dec_len = 0;
    FUZZ_CHECK(tokenizer_decode(t, ids, n, false, &dec, &dec_len, &err) == CI_OK, "%s: decode: %s", ft->name,
               err.msg);
    const struct vocab *v = tokenizer_vocab(t);
    for (size_t i = 0; i < len && plain; i++)
        plain = v->byte_id[(unsigned char)text[i]] >= 0;
    if (!parse_special && plain && tokenizer_type(t) != TOKENIZER_TYPE_WPM && fuzz_utf8_valid(text, len)) {
        char *want = malloc(len + 1);
        size_t want_len = len;
        if (tokenizer_type(t) == TOKENIZER_TYPE_SPM)
            want_len = spm_expect(text, len, want);
        else if (len)
            memcpy(want, text, len);
        FUZZ_CHECK(dec_len == want_len && memcmp(dec, want, want_len) == 0,
                   "%s: decode(encode(text)) != text (%zu vs %zu bytes)", ft->name, dec_len, want_len);
        free(want);
    }
    ci_free(dec);

    if (len <= 256) {
        FUZZ_CHECK(tokenizer_encode(t, text, len, add_special, parse_special, &ids2, &n2, &err) == CI_OK,
                   "%s: second encode: %s", ft->name, err.msg);
        FUZZ_CHECK(n2 == n && (n == 0 || memcmp(ids, ids2, (size_t)n * sizeof *ids) == 0),
                   "%s: encoding is not deterministic", ft->name);
        ci_free(ids2);
    }
    ci_free(ids);
    free(text);
    FUZZ_MEM_END();
    return 0;
}
