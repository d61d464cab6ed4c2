/* The incremental detokenizer on arbitrary token sequences (any ids, in the vocabulary or not), and its
 * output fed to a stop-string matcher the way the engine streams a sequence.
 *
 * Input: byte 0 picks the tokenizer (SentencePiece and byte-level BPE vocabularies), byte 1 the flags
 * (bit 0 render_special, bit 1 at_text_start, bit 2 reset the stream halfway), then a stop string
 * (one length byte, then its bytes; empty for none), then token ids, 3 bytes each (little-endian, taken
 * modulo the vocabulary size + 8, so a few ids lie past the end).
 *
 * Properties checked:
 *   - every piece detok_push and detok_flush return is valid UTF-8, and no longer than detok_max_out;
 *   - the pieces of a stream add up to the whole text with each ill-formed part replaced by U+FFFD, the
 *     text being the tokens' bytes (U+FFFD for ids outside the vocabulary) with the SentencePiece leading
 *     space dropped at the start and after BOS; so how the bytes were split into tokens never matters;
 *   - the stop matcher fed those pieces releases exactly the text before the first occurrence of the stop
 *     string (all of it when there is none), and reports the match. */
#include "fuzz.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"

static struct fuzz_tok toks[FUZZ_MAX_TOKENIZERS];
static int n_toks;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    n_toks = fuzz_load_tokenizers(toks, false);
    return 0;
}

/* The bytes a stream of ids stands for (before UTF-8 cleaning), computed from the vocabulary directly. */
static void expected_bytes(const struct tokenizer *t, const int32_t *ids, int n, bool render_special,
                           bool at_text_start, struct fuzz_buf *out) {
    bool spm_prefix = tokenizer_type(t) == TOKENIZER_TYPE_SPM && tokenizer_add_space_prefix(t);
    bool strip = spm_prefix && at_text_start;
    for (int i = 0; i < n; i++) {
        size_t l = 0;
        const char *p = tokenizer_token_bytes(t, ids[i], render_special, &l);
        if (!p) {
            p = "\xef\xbf\xbd";
            l = 3;
        }
        if (strip && l > 0) {
            if (p[0] == ' ') {
                p++;
                l--;
            }
            strip = false;
        }
        if (spm_prefix && ids[i] == tokenizer_bos(t))
            strip = true;
        fuzz_buf_put(out, p, l);
    }
}

/* Runs ids through a detokenizer and a stop matcher; checks both against the whole-text reference. */
static void check_stream(const struct tokenizer *t, const int32_t *ids, int n, bool render_special,
                         bool at_text_start, struct detok *d, const char *stop) {
    struct stop_matcher m;
    struct ci_err err = {0};
    const char *stops[1] = {stop};
    FUZZ_CHECK(stop_matcher_init(&m, stops, 1, detok_max_out(d), &err) == CI_OK, "stop init: %s", err.msg);
    struct fuzz_buf got = {0}, released = {0}, raw = {0};
    int matched = -1;
    for (int i = 0; i <= n; i++) {
        const char *s, *r;
        size_t l, rl;
        if (i < n)
            detok_push(d, ids[i], &s, &l);
        else
            detok_flush(d, &s, &l);
        FUZZ_CHECK(l <= detok_max_out(d), "piece of %zu bytes, max %zu", l, detok_max_out(d));
        FUZZ_CHECK(fuzz_utf8_valid(s, l), "piece %d is not valid UTF-8", i);
        fuzz_buf_put(&got, s, l);
        int st = -1;
        FUZZ_CHECK(stop_matcher_feed(&m, s, l, &r, &rl, &st) == CI_OK, "stop feed of %zu bytes", l);
        fuzz_buf_put(&released, r, rl);
        if (st >= 0) {
            FUZZ_CHECK(matched < 0 || matched == st, "a second match");
            matched = st;
        }
    }
    if (matched < 0) {
        const char *r;
        size_t rl;
        stop_matcher_flush(&m, &r, &rl);
        fuzz_buf_put(&released, r, rl);
    }
    expected_bytes(t, ids, n, render_special, at_text_start, &raw);
    char *want = malloc(3 * raw.n + 1);
    size_t want_len = fuzz_utf8_replace(raw.p, raw.n, want);
    FUZZ_CHECK(got.n == want_len && (want_len == 0 || memcmp(got.p, want, want_len) == 0),
               "stream of %zu bytes differs from the whole text's %zu", got.n, want_len);
    // With one stop string, the occurrence that starts first is also the one that ends first.
    size_t sl = strlen(stop), cut = got.n;
    if (sl) {
        const char *hit = got.n >= sl ? memmem(got.p, got.n, stop, sl) : NULL;
        if (hit)
            cut = (size_t)(hit - got.p);
        FUZZ_CHECK((matched == 0) == (hit != NULL), "match reported %d, found %d", matched, hit != NULL);
    }
    FUZZ_CHECK(released.n == cut && (cut == 0 || memcmp(released.p, got.p, cut) == 0),
               "released %zu bytes, want the %zu before the stop string", released.n, cut);
    free(want);
    free(got.p);
    free(released.p);
    free(raw.p);
    stop_matcher_deinit(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    const struct fuzz_tok *ft = &toks[fuzz_u8(&in) % n_toks];
    const struct tokenizer *t = ft->tok;
    unsigned flags = fuzz_u8(&in);
    bool render_special = flags & 1, at_text_start = flags & 2;
    const uint8_t *sb;
    size_t sn = fuzz_lstr(&in, &sb);
    char *stop = fuzz_strndup(sb, sn); // a C string: cut at the first NUL, as the server's are
    int n = (int)(in.n / 3);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    uint32_t range = (uint32_t)tokenizer_n_vocab(t) + 8;
    for (int i = 0; i < n; i++) {
        uint32_t v = fuzz_u8(&in);
        v |= (uint32_t)fuzz_u8(&in) << 8;
        v |= (uint32_t)fuzz_u8(&in) << 16;
        ids[i] = (int32_t)(v % range);
    }

    struct detok d;
    struct ci_err err = {0};
    FUZZ_CHECK(detok_init(&d, t, at_text_start, render_special, &err) == CI_OK, "detok_init: %s", err.msg);
    if (flags & 4) { // two streams through one detokenizer, reset in between
        int half = n / 2;
        check_stream(t, ids, half, render_special, at_text_start, &d, stop);
        detok_reset(&d, at_text_start);
        check_stream(t, ids + half, n - half, render_special, at_text_start, &d, stop);
    } else {
        check_stream(t, ids, n, render_special, at_text_start, &d, stop);
    }
    detok_deinit(&d);
    free(ids);
    free(stop);
    FUZZ_MEM_END();
    return 0;
}
