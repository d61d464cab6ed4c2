/* Detokenizer and stop-string tests: UTF-8 split across byte tokens (<0xE2><0x96><0x81>, emoji), malformed
 * bytes becoming U+FFFD, the SentencePiece leading-space rule, streaming equal to whole-text decoding on
 * random texts, and stop strings matched across token boundaries without ever being released. */
#include "tokenizer/detok.h"

#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#define FFFD "\xef\xbf\xbd"

static int32_t byte_tok(const struct tokenizer *t, unsigned b) {
    char s[8];
    snprintf(s, sizeof(s), "<0x%02X>", b);
    return test_find_piece(t, s);
}

/* Pushes one token and checks the exact bytes that come out. */
static bool push_is(struct detok *d, int32_t id, const char *want) {
    const char *s;
    size_t n;
    detok_push(d, id, &s, &n);
    if (n != strlen(want) || memcmp(s, want, n) != 0) {
        printf("    token %d: got '%.*s' (%zu bytes), want '%s'\n", id, (int)n, s, n, want);
        return false;
    }
    return true;
}

static bool flush_is(struct detok *d, const char *want) {
    const char *s;
    size_t n;
    detok_flush(d, &s, &n);
    return n == strlen(want) && memcmp(s, want, n) == 0;
}

TEST(split_utf8) {
    struct tokenizer *t = test_load_tokenizer("ggml-vocab/ggml-vocab-llama-spm.gguf");
    ASSERT(t);
    struct detok d;
    struct ci_err err = {0};
    ASSERT_STATUS(detok_init(&d, t, false, false, &err), CI_OK);
    // "▁" (E2 96 81) as three byte tokens: nothing until the last byte.
    CHECK(push_is(&d, byte_tok(t, 0xe2), ""));
    CHECK(push_is(&d, byte_tok(t, 0x96), ""));
    CHECK(push_is(&d, byte_tok(t, 0x81), "\xe2\x96\x81"));
    // 🦙 (F0 9F A6 99): held for three tokens.
    CHECK(push_is(&d, byte_tok(t, 0xf0), ""));
    CHECK(push_is(&d, byte_tok(t, 0x9f), ""));
    CHECK(push_is(&d, byte_tok(t, 0xa6), ""));
    CHECK(push_is(&d, byte_tok(t, 0x99), "\xf0\x9f\xa6\x99"));
    // A held prefix is released together with the following text token.
    int32_t hello = test_find_piece(t, "\xe2\x96\x81Hello");
    ASSERT(hello >= 0);
    CHECK(push_is(&d, byte_tok(t, 0xc3), ""));
    CHECK(push_is(&d, byte_tok(t, 0xa9), "\xc3\xa9"));
    CHECK(push_is(&d, hello, " Hello"));
    CHECK(flush_is(&d, ""));
    detok_deinit(&d);
    tokenizer_free(t);
}

TEST(invalid_bytes) {
    struct tokenizer *t = test_load_tokenizer("ggml-vocab/ggml-vocab-llama-spm.gguf");
    ASSERT(t);
    struct detok d;
    struct ci_err err = {0};
    ASSERT_STATUS(detok_init(&d, t, false, false, &err), CI_OK);
    CHECK(push_is(&d, byte_tok(t, 0xff), FFFD));      // never valid
    CHECK(push_is(&d, byte_tok(t, 0x80), FFFD));      // stray continuation
    CHECK(push_is(&d, byte_tok(t, 0xc0), FFFD));      // overlong lead
    CHECK(push_is(&d, byte_tok(t, 0xe2), ""));        // valid start...
    CHECK(push_is(&d, byte_tok(t, 'A'), FFFD "A"));   // ...broken by ASCII
    CHECK(push_is(&d, byte_tok(t, 0xed), ""));        // ED A0 80 would be a surrogate:
    CHECK(push_is(&d, byte_tok(t, 0xa0), FFFD FFFD)); // ED alone, then A0 alone
    CHECK(push_is(&d, byte_tok(t, 0x80), FFFD));
    CHECK(push_is(&d, byte_tok(t, 0xf4), ""));
    CHECK(push_is(&d, byte_tok(t, 0x90), FFFD FFFD)); // past U+10FFFF
    CHECK(push_is(&d, byte_tok(t, 0xf0), ""));
    CHECK(push_is(&d, byte_tok(t, 0x9f), ""));
    CHECK(flush_is(&d, FFFD)); // an unfinished character at the end
    CHECK(flush_is(&d, ""));
    CHECK(push_is(&d, 1 << 30, FFFD)); // an id outside the vocabulary
    detok_deinit(&d);
    tokenizer_free(t);
}

TEST(leading_space) {
    struct tokenizer *t = test_load_tokenizer("ggml-vocab/ggml-vocab-llama-spm.gguf");
    struct tokenizer *gpt = test_load_tokenizer("ggml-vocab/ggml-vocab-gpt-2.gguf");
    ASSERT(t && gpt);
    int32_t once = test_find_piece(t, "\xe2\x96\x81Once"), upon = test_find_piece(t, "\xe2\x96\x81upon");
    ASSERT(once >= 0 && upon >= 0);
    struct detok d;
    struct ci_err err = {0};
    ASSERT_STATUS(detok_init(&d, t, true, false, &err), CI_OK);
    CHECK(push_is(&d, once, "Once")); // text start: the prefix space is dropped
    CHECK(push_is(&d, upon, " upon"));
    CHECK(push_is(&d, 1, "")); // BOS renders as nothing and starts a new text
    CHECK(push_is(&d, once, "Once"));
    detok_reset(&d, false); // continuing a prompt: keep the space
    CHECK(push_is(&d, once, " Once"));
    detok_deinit(&d);
    ASSERT_STATUS(detok_init(&d, t, true, true, &err), CI_OK); // render_special
    CHECK(push_is(&d, 1, "<s>"));
    CHECK(push_is(&d, once, "Once"));
    CHECK(push_is(&d, 2, "</s>"));
    detok_deinit(&d);
    // Byte-level BPE has no prefix rule.
    int32_t world = test_find_piece(gpt, "\xc4\xa0world");
    ASSERT(world >= 0);
    ASSERT_STATUS(detok_init(&d, gpt, true, false, &err), CI_OK);
    CHECK(push_is(&d, world, " world"));
    detok_deinit(&d);
    tokenizer_free(t);
    tokenizer_free(gpt);
}

static void gen_text(struct ci_rng *r, char *buf, size_t cap, size_t *len) {
    static const char *const atoms[] = {"Hello",  " world", "  ",       "\n",   "\t",
                                        "'s",     "42",     "3.14",     ".",    "!",
                                        "é",      "ü",      "ß",        "нещо", "我想",
                                        "🦙",   "😁",      "👍🏽", "ក",    "់",
                                        "\u200d", "Führer", "日本語",   "～",   " Once upon a time",
                                        "-->"};
    size_t n = 0, k = 1 + ci_rng_u64(r) % 12;
    for (size_t i = 0; i < k; i++) {
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

/* Streaming tokens one by one gives back the text exactly (valid UTF-8 in, valid UTF-8 out) for an SPM and
 * two byte-level vocabularies.  The texts avoid a literal "▁", which SentencePiece reads back as a space. */
TEST(stream_roundtrip) {
    const char *files[3] = {"ggml-vocab/ggml-vocab-llama-spm.gguf", "ggml-vocab/ggml-vocab-gpt-2.gguf",
                            "ggml-vocab/ggml-vocab-deepseek-llm.gguf"};
    for (int f = 0; f < 3; f++) {
        struct tokenizer *t = test_load_tokenizer(files[f]);
        ASSERT(t);
        struct detok d;
        struct ci_err err = {0};
        ASSERT_STATUS(detok_init(&d, t, true, false, &err), CI_OK);
        struct ci_rng r;
        ci_rng_seed(&r, 1234 + (uint64_t)f);
        size_t mem = ci_mem_in_use();
        for (int i = 0; i < 150; i++) {
            char text[512], got[2048];
            size_t len, o = 0;
            gen_text(&r, text, sizeof(text), &len);
            int32_t *ids = NULL;
            int n = 0;
            ASSERT_STATUS(tokenizer_encode(t, text, len, true, false, &ids, &n, &err), CI_OK);
            size_t mem_before = ci_mem_in_use();
            detok_reset(&d, true);
            for (int k = 0; k < n; k++) {
                const char *s;
                size_t sl;
                detok_push(&d, ids[k], &s, &sl);
                CHECK(o + sl <= sizeof(got) && sl <= detok_max_out(&d));
                memcpy(got + o, s, sl);
                o += sl;
            }
            const char *s;
            size_t sl;
            detok_flush(&d, &s, &sl);
            CHECK(sl == 0); // nothing left over from valid text
            CHECK(ci_mem_in_use() == mem_before);
            ci_free(ids);
            if (o != len || memcmp(got, text, len) != 0) {
                TEST_FAILF("%s: '%s' streamed as '%.*s'", files[f], text, (int)o, got);
                break;
            }
        }
        CHECK(ci_mem_in_use() == mem);
        detok_deinit(&d);
        tokenizer_free(t);
    }
}

/* ---- stop strings ---- */

struct stop_run {
    char out[1024];
    size_t n;
    int stop;
};

/* Feeds chunks (NULL-terminated list) and collects the released text; flushes at the end if no match. */
static void feed_all(struct stop_matcher *m, const char *const *chunks, struct stop_run *r) {
    r->n = 0;
    r->stop = -1;
    for (int i = 0; chunks[i]; i++) {
        const char *o;
        size_t n;
        int stop;
        if (stop_matcher_feed(m, chunks[i], strlen(chunks[i]), &o, &n, &stop) != CI_OK)
            TEST_FAILF("feed of '%s' failed", chunks[i]);
        memcpy(r->out + r->n, o, n);
        r->n += n;
        r->stop = stop;
    }
    if (r->stop < 0) {
        const char *o;
        size_t n;
        stop_matcher_flush(m, &o, &n);
        memcpy(r->out + r->n, o, n);
        r->n += n;
    }
    r->out[r->n] = 0;
}

TEST(stop_across_tokens) {
    const char *stops[] = {"stop", "\n\nUser:"};
    struct stop_matcher m;
    struct ci_err err = {0};
    ASSERT_STATUS(stop_matcher_init(&m, stops, 2, 64, &err), CI_OK);
    const char *o;
    size_t n;
    int stop;
    ASSERT_STATUS(stop_matcher_feed(&m, "Hello st", 8, &o, &n, &stop), CI_OK);
    CHECK(n == 6 && memcmp(o, "Hello ", 6) == 0 && stop == -1); // "st" is held
    ASSERT_STATUS(stop_matcher_feed(&m, "o", 1, &o, &n, &stop), CI_OK);
    CHECK(n == 0 && stop == -1);
    ASSERT_STATUS(stop_matcher_feed(&m, "p now", 5, &o, &n, &stop), CI_OK);
    CHECK(n == 0 && stop == 0); // matched: "stop" and what follows it never come out
    ASSERT_STATUS(stop_matcher_feed(&m, "more", 4, &o, &n, &stop), CI_OK);
    CHECK(n == 0 && stop == 0);
    stop_matcher_flush(&m, &o, &n);
    CHECK(n == 0);

    // A partial match that fails releases the held text.
    stop_matcher_reset(&m);
    ASSERT_STATUS(stop_matcher_feed(&m, "a st", 4, &o, &n, &stop), CI_OK);
    CHECK(n == 2 && memcmp(o, "a ", 2) == 0);
    ASSERT_STATUS(stop_matcher_feed(&m, "ar", 2, &o, &n, &stop), CI_OK);
    CHECK(n == 4 && memcmp(o, "star", 4) == 0 && stop == -1);
    // Multi-line stop over several chunks, preceded by a false start ("\n\nUs" then "\n\nUser:").
    const char *chunks[] = {"Hi\n", "\nUs", "e\n", "\n", "User", ":", " x", NULL};
    struct stop_run r;
    stop_matcher_reset(&m);
    feed_all(&m, chunks, &r);
    CHECK(r.stop == 1 && strcmp(r.out, "Hi\n\nUse") == 0);
    // No match: everything comes out once flushed, including a held tail.
    const char *plain[] = {"no sto", "ry here s", "to", NULL};
    stop_matcher_reset(&m);
    feed_all(&m, plain, &r);
    CHECK(r.stop == -1 && strcmp(r.out, "no story here sto") == 0);
    // Chunks larger than declared are refused.
    char big[65] = {0};
    memset(big, 'x', 64);
    stop_matcher_reset(&m);
    CHECK(stop_matcher_feed(&m, big, 65, &o, &n, &stop) == CI_ERR_INVALID);
    CHECK(stop_matcher_feed(&m, big, 64, &o, &n, &stop) == CI_OK && n == 64);
    stop_matcher_deinit(&m);
}

/* The match that ends first wins, whatever the chunking. */
TEST(stop_chunking_invariant) {
    const char *stops[] = {"abc", "", "b", "cd"}; // the empty one is ignored; indices stay the caller's
    struct stop_matcher m;
    struct ci_err err = {0};
    ASSERT_STATUS(stop_matcher_init(&m, stops, 4, 16, &err), CI_OK);
    struct stop_run whole, chars;
    const char *one[] = {"xabcd", NULL};
    feed_all(&m, one, &whole);
    stop_matcher_reset(&m);
    const char *each[] = {"x", "a", "b", "c", "d", NULL};
    feed_all(&m, each, &chars);
    CHECK(whole.stop == 2 && chars.stop == 2); // "b" completes before "abc"
    CHECK(strcmp(whole.out, "xa") == 0 && strcmp(chars.out, "xa") == 0);
    stop_matcher_deinit(&m);

    // Random texts over a small alphabet: every chunking gives the text before the first-ending match.
    // "aab" and "ab" can end together: the earlier start (the longer string) wins.
    const char *s2[] = {"aab", "ab", "bba"};
    ASSERT_STATUS(stop_matcher_init(&m, s2, 3, 32, &err), CI_OK);
    struct ci_rng r;
    ci_rng_seed(&r, 5);
    for (int it = 0; it < 500; it++) {
        char text[33];
        int len = 1 + (int)(ci_rng_u64(&r) % 32);
        for (int i = 0; i < len; i++)
            text[i] = "ab"[ci_rng_u64(&r) % 2];
        text[len] = 0;
        // Reference: scan end positions, first end where some stop ends; earliest start there.
        int ref_stop = -1;
        size_t ref_len = (size_t)len;
        for (int e = 1; e <= len && ref_stop < 0; e++)
            for (int s = 0; s < 3; s++) {
                int l = (int)strlen(s2[s]);
                if (l <= e && memcmp(text + e - l, s2[s], (size_t)l) == 0 &&
                    (ref_stop < 0 || (size_t)(e - l) < ref_len)) {
                    ref_stop = s;
                    ref_len = (size_t)(e - l);
                }
            }
        stop_matcher_reset(&m);
        char out[64];
        size_t on = 0;
        int stop = -1;
        for (int pos = 0; pos < len;) {
            int c = 1 + (int)(ci_rng_u64(&r) % 5);
            if (c > len - pos)
                c = len - pos;
            const char *o;
            size_t n;
            if (stop_matcher_feed(&m, text + pos, (size_t)c, &o, &n, &stop) != CI_OK)
                TEST_FAILF("feed failed");
            memcpy(out + on, o, n);
            on += n;
            pos += c;
        }
        if (stop < 0) {
            const char *o;
            size_t n;
            stop_matcher_flush(&m, &o, &n);
            memcpy(out + on, o, n);
            on += n;
        }
        if (stop != ref_stop || on != ref_len || memcmp(out, text, on) != 0) {
            TEST_FAILF("'%s': stop %d released %zu, want stop %d released %zu", text, stop, on, ref_stop,
                       ref_len);
            break;
        }
    }
    stop_matcher_deinit(&m);
}

/* detok + stop matcher on real tokens: the stop string spans byte tokens of a multi-byte character. */
TEST(no_stop_strings_release_everything) {
    struct stop_matcher m;
    struct ci_err err = {0};
    ASSERT_STATUS(stop_matcher_init(&m, NULL, 0, 16, &err), CI_OK);
    const char *out;
    size_t n;
    int stop;
    ASSERT_STATUS(stop_matcher_feed(&m, "hello", 5, &out, &n, &stop), CI_OK);
    CHECK(n == 5 && !memcmp(out, "hello", 5) && stop == -1);
    ASSERT_STATUS(stop_matcher_feed(&m, "", 0, &out, &n, &stop), CI_OK);
    CHECK(n == 0 && stop == -1);
    stop_matcher_flush(&m, &out, &n);
    CHECK(n == 0);
    stop_matcher_deinit(&m);
}

TEST(stop_with_detok) {
    struct tokenizer *t = test_load_tokenizer("ggml-vocab/ggml-vocab-llama-spm.gguf");
    ASSERT(t);
    struct detok d;
    struct stop_matcher m;
    struct ci_err err = {0};
    ASSERT_STATUS(detok_init(&d, t, true, false, &err), CI_OK);
    const char *stops[] = {"。END"};
    ASSERT_STATUS(stop_matcher_init(&m, stops, 1, detok_max_out(&d), &err), CI_OK);
    const char *text = "Done。 not yet。END tail";
    int32_t *ids = NULL;
    int n = 0;
    ASSERT_STATUS(tokenizer_encode(t, text, strlen(text), true, false, &ids, &n, &err), CI_OK);
    char out[256];
    size_t on = 0;
    int stop = -1;
    size_t mem = ci_mem_in_use();
    for (int i = 0; i < n && stop < 0; i++) {
        const char *s, *o;
        size_t sl, ol;
        detok_push(&d, ids[i], &s, &sl);
        ASSERT_STATUS(stop_matcher_feed(&m, s, sl, &o, &ol, &stop), CI_OK);
        memcpy(out + on, o, ol);
        on += ol;
    }
    CHECK(ci_mem_in_use() == mem); // no allocation per token
    CHECK(stop == 0);
    CHECK(on == strlen("Done。 not yet") && memcmp(out, "Done。 not yet", on) == 0);
    ci_free(ids);
    stop_matcher_deinit(&m);
    detok_deinit(&d);
    tokenizer_free(t);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(split_utf8);
    RUN(invalid_bytes);
    RUN(leading_space);
    RUN(stream_roundtrip);
    RUN(stop_across_tokens);
    RUN(stop_chunking_invariant);
    RUN(no_stop_strings_release_everything);
    RUN(stop_with_detok);
    return test_exit_code();
}
