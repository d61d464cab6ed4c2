/* The stop-string matcher alone, with several stop strings and text cut into arbitrary chunks.
 *
 * Input: byte 0: the number of stop strings (0..5) and whether to reset and replay the stream once;
 * then each stop string (one length byte, then its bytes, cut at a NUL); then one byte for max_chunk
 * (1..64); then chunks: one length byte (taken modulo max_chunk + 2, so some chunks are too long and
 * must be refused) and that many bytes of text.
 *
 * Properties checked against a brute-force scan of the whole text:
 *   - the released text is exactly the text before the match that ends first (of those, the one that
 *     starts first), or the whole text when no stop string occurs; a stop string is never released;
 *   - the reported index is the caller's index of that stop string (empty strings keep their place);
 *   - the matcher never holds back more than the longest stop string minus one byte;
 *   - a chunk longer than max_chunk is refused without changing anything;
 *   - after a match every feed releases nothing and reports the same match;
 *   - reset gives the same answers again. */
#include "fuzz.h"
#include "tokenizer/detok.h"

#define MAX_STOPS 5

struct ref {
    size_t cut; // released bytes
    int stop;   // caller's index, -1 for none
};

static struct ref reference(const char *text, size_t n, char *const *stops, int n_stops) {
    for (size_t e = 1; e <= n; e++) {
        int best = -1;
        size_t best_start = 0;
        for (int s = 0; s < n_stops; s++) {
            size_t l = strlen(stops[s]);
            if (l == 0 || l > e || memcmp(text + e - l, stops[s], l) != 0)
                continue;
            if (best < 0 || e - l < best_start) {
                best = s;
                best_start = e - l;
            }
        }
        if (best >= 0)
            return (struct ref){best_start, best};
    }
    return (struct ref){n, -1};
}

struct chunk {
    const uint8_t *p;
    size_t n;
};

static void run(struct stop_matcher *m, const struct chunk *ch, int n_ch, size_t max_chunk, size_t max_len,
                const char *text, const struct ref *want) {
    char *released = malloc(want->cut + max_chunk + max_len + 1);
    size_t got = 0;
    int matched = -1;
    for (int i = 0; i < n_ch; i++) {
        const char *out;
        size_t n_out;
        int stop;
        size_t held = m->n_held;
        enum ci_status s = stop_matcher_feed(m, (const char *)ch[i].p, ch[i].n, &out, &n_out, &stop);
        if (ch[i].n > max_chunk && matched < 0) {
            FUZZ_CHECK(s == CI_ERR_INVALID && n_out == 0 && m->n_held == held, "a too-long chunk was taken");
            continue;
        }
        FUZZ_CHECK(s == CI_OK, "feed of %zu bytes: status %d", ch[i].n, (int)s);
        if (matched >= 0) {
            FUZZ_CHECK(n_out == 0 && stop == matched, "output after the match");
            continue;
        }
        FUZZ_CHECK(got + n_out <= want->cut, "released %zu bytes past the %zu before the stop", got + n_out,
                   want->cut);
        memcpy(released + got, out, n_out);
        got += n_out;
        FUZZ_CHECK(max_len == 0 ? m->n_held == 0 : m->n_held < max_len,
                   "holding %zu bytes (longest stop %zu)", m->n_held, max_len);
        matched = stop;
    }
    if (matched < 0) {
        const char *out;
        size_t n_out;
        stop_matcher_flush(m, &out, &n_out);
        FUZZ_CHECK(got + n_out <= want->cut, "flush released too much");
        memcpy(released + got, out, n_out);
        got += n_out;
    }
    FUZZ_CHECK(matched == want->stop, "reported stop %d, want %d", matched, want->stop);
    FUZZ_CHECK(got == want->cut && memcmp(released, text, got) == 0, "released %zu bytes, want %zu", got,
               want->cut);
    free(released);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct fuzz_in in = {data, size};
    unsigned head = fuzz_u8(&in);
    int n_stops = (int)(head % (MAX_STOPS + 1));
    char *stops[MAX_STOPS];
    size_t max_len = 0;
    for (int i = 0; i < n_stops; i++) {
        const uint8_t *p;
        size_t l = fuzz_lstr(&in, &p);
        stops[i] = fuzz_strndup(p, l);
        if (strlen(stops[i]) > max_len)
            max_len = strlen(stops[i]);
    }
    size_t max_chunk = 1 + fuzz_u8(&in) % 64;
    struct chunk ch[256];
    int n_ch = 0;
    char *text = malloc(in.n + 1);
    size_t text_len = 0;
    while (in.n > 0 && n_ch < 256) {
        size_t want = fuzz_u8(&in) % (max_chunk + 2);
        ch[n_ch].n = fuzz_bytes(&in, want, &ch[n_ch].p);
        if (ch[n_ch].n <= max_chunk) { // the text the matcher sees: refused chunks are not part of it
            memcpy(text + text_len, ch[n_ch].p, ch[n_ch].n);
            text_len += ch[n_ch].n;
        }
        n_ch++;
    }
    struct ref want = reference(text, text_len, stops, n_stops);
    // Refused chunks after the match are irrelevant; before it they must not count, which the reference
    // already reflects (they are not in text).
    struct stop_matcher m;
    struct ci_err err = {0};
    FUZZ_CHECK(stop_matcher_init(&m, (const char *const *)stops, n_stops, max_chunk, &err) == CI_OK,
               "init: %s", err.msg);
    run(&m, ch, n_ch, max_chunk, max_len, text, &want);
    if (head & 0x80) {
        stop_matcher_reset(&m);
        run(&m, ch, n_ch, max_chunk, max_len, text, &want);
    }
    stop_matcher_deinit(&m);
    for (int i = 0; i < n_stops; i++)
        free(stops[i]);
    free(text);
    FUZZ_MEM_END();
    return 0;
}
