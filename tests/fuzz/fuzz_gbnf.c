/* The GBNF parser and, for grammars it accepts, the matcher and the token mask (src/grammar/).
 *
 * Input: GBNF text, then optionally a NUL byte and the bytes to feed the matcher.
 *
 * Token references (<[id]>, !<[id]>, <text>) name that vocabulary: "<x>" is the byte token 'x' (120),
 * "<e>" the token "é" (256), "<end>" the end token (which a reference never takes).
 *
 * Properties checked:
 *   - the parser either accepts or fails with a message (never empty), without leaking;
 *   - an accepted grammar has a start rule and every element's rule reference and token id in range;
 *   - over a vocabulary of the 255 one-byte tokens, a few two- and three-byte UTF-8 tokens and an end token,
 *     at each step the mask equals trying every token on a copy of the matcher (accept_token; without token
 *     references also try_bytes on its bytes; the end token exactly when accepting), the second mask of a
 *     state (from the cache) equals the first, and a token the mask forbids is refused by accept_token
 *     without changing the state.
 * Trying every token costs about (parses held) x (their expansion) per token, so a grammar of many nullable
 * items (word{168} with an empty alternative: 170 parses, ~40 ms per state, 20 s for one input under ASan)
 * would time out: an input stops (no more bytes fed, no more masks checked) once it has spent BRUTE_BUDGET
 * parse-tries, counted as the parses held times the tokens tried. */
#include "fuzz.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

#define N_TOK        262 // 0: unused, 1..255 bytes, 256..260 multi-byte characters, 261 the end token
#define BRUTE_BUDGET (1u << 17)

static uint64_t brute_spent; // parse-tries of the current input

static const char *const multi[] = {"\xc3\xa9", "\xe2\x80\xa8", "\xe3\x81\x82", "\xf0\x9f\x98\x80", "\xc3"};

static struct gram_vocab *vocab;

static int32_t lookup(const void *ctx, const char *text, size_t len) {
    (void)ctx;
    return len == 3 && !memcmp(text, "<x>", 3)     ? 'x'
           : len == 3 && !memcmp(text, "<e>", 3)   ? 256
           : len == 5 && !memcmp(text, "<end>", 5) ? N_TOK - 1
                                                   : -1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    static char bytes[256];
    const char *ptrs[N_TOK] = {0};
    uint32_t lens[N_TOK] = {0};
    for (int i = 1; i < 256; i++) {
        bytes[i] = (char)i;
        ptrs[i] = &bytes[i];
        lens[i] = 1;
    }
    for (int i = 0; i < 5; i++) {
        ptrs[256 + i] = multi[i];
        lens[256 + i] = (uint32_t)strlen(multi[i]);
    }
    int32_t eog = N_TOK - 1;
    struct ci_err err = {0};
    FUZZ_CHECK(gram_vocab_create(N_TOK, ptrs, lens, &eog, 1, &vocab, &err) == CI_OK, "%s", err.msg);
    return 0;
}

static bool over_budget(const struct gram_matcher *m, uint32_t tries) {
    struct gram_matcher_stats st;
    gram_matcher_stats(m, &st);
    brute_spent += (uint64_t)(st.n_stacks ? st.n_stacks : 1) * tries;
    return brute_spent > BRUTE_BUDGET;
}

/* Whether m takes token id (tried on a copy). */
static bool takes(const struct gram_matcher *m, int32_t id) {
    struct gram_matcher *c = NULL;
    struct ci_err err = {0};
    FUZZ_CHECK(gram_matcher_clone(m, &c, &err) == CI_OK, "%s", err.msg);
    bool ok = gram_matcher_accept_token(c, id);
    gram_matcher_free(c);
    return ok;
}

static void check_mask(struct gram_matcher *m, bool has_tokens, bool ended) {
    if (over_budget(m, N_TOK))
        return;
    uint32_t bits[(N_TOK + 31) / 32], again[(N_TOK + 31) / 32];
    struct ci_err err = {0};
    FUZZ_CHECK(gram_matcher_mask(m, bits, &err) == CI_OK, "%s", err.msg);
    FUZZ_CHECK(gram_matcher_mask(m, again, &err) == CI_OK, "%s", err.msg);
    FUZZ_CHECK(memcmp(bits, again, sizeof bits) == 0, "cached mask differs");
    for (int id = 0; id < N_TOK; id++) {
        bool want = takes(m, id);
        if (id == N_TOK - 1) {
            bool open = gram_matcher_is_accepting(m) && !ended; // after the end token, nothing more
            FUZZ_CHECK(want == open, "the end token taken %d, accepting and not ended %d", want, open);
        } else if (!has_tokens && id > 0) {
            char one = (char)id;
            const char *b = id < 256 ? &one : multi[id - 256];
            FUZZ_CHECK(want == gram_matcher_try_bytes(m, b, id < 256 ? 1 : strlen(b)),
                       "token %d: accept_token %d, try_bytes disagrees", id, want);
        }
        bool got = (bits[id >> 5] >> (id & 31)) & 1u;
        FUZZ_CHECK(got == want, "token %d: mask %d, trying it %d", id, got, want);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) // the parser's cost is linear; longer inputs only slow the fuzzer down
        return 0;
    FUZZ_MEM_BEGIN();
    brute_spent = 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    struct grammar *g = NULL;
    struct ci_err err = {0};
    const struct gram_tokens tk = {N_TOK, lookup, NULL};
    enum ci_status s = gram_parse_gbnf_tokens((const char *)data, glen, &tk, &g, &err);
    if (s != CI_OK) {
        FUZZ_CHECK(g == NULL && err.msg[0] != '\0', "a failed parse without a message");
    } else {
        FUZZ_CHECK(g && g->start < g->n_rules, "no start rule");
        bool has_tokens = false;
        for (uint32_t i = 0; i < g->n_elems; i++) {
            FUZZ_CHECK(g->elems[i].op != GRAM_REF || g->elems[i].val < g->n_rules, "reference out of range");
            FUZZ_CHECK(!gram_is_token(g->elems[i].op) || g->elems[i].val < N_TOK, "token id out of range");
            has_tokens |= gram_is_token(g->elems[i].op);
        }
        struct gram_matcher *m = NULL;
        if (gram_matcher_create(g, vocab, &m, &err) == CI_OK) {
            const uint8_t *feed = nul ? nul + 1 : data + size;
            size_t nfeed = nul ? size - glen - 1 : 0;
            bool ended = false;
            check_mask(m, has_tokens, ended);
            // Each byte fed is a token: 1..255 the byte's, 0 the next byte's multi-byte token (256 + it % 6).
            for (size_t i = 0; i < nfeed && i < 64 && !over_budget(m, 2); i++) {
                int32_t id = feed[i];
                if (id == 0 && i + 1 < nfeed)
                    id = 256 + feed[++i] % (N_TOK - 256);
                bool ok = takes(m, id);
                FUZZ_CHECK(gram_matcher_accept_token(m, id) == ok, "a copy and the matcher disagree");
                ended |= ok && id == N_TOK - 1;
                check_mask(m, has_tokens, ended);
            }
            gram_matcher_free(m);
        }
        gram_free(g);
    }
    FUZZ_MEM_END();
    return 0;
}
