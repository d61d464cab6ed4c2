/* The GBNF parser and, for grammars it accepts, the matcher and the token mask (src/grammar/).
 *
 * Input: GBNF text, then optionally a NUL byte and the bytes to feed the matcher.
 *
 * Properties checked:
 *   - the parser either accepts or fails with a message (never empty), without leaking;
 *   - an accepted grammar has a start rule and every element's rule reference in range;
 *   - over a vocabulary of the 255 one-byte tokens, a few two- and three-byte UTF-8 tokens and an end token,
 *     at each step the mask equals trying every token (try_bytes; the end token exactly when accepting),
 *     the second mask of a state (from the cache) equals the first, and a byte the mask forbids is
 *     refused by accept_bytes without changing the state.
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

static void check_mask(struct gram_matcher *m) {
    if (over_budget(m, N_TOK))
        return;
    uint32_t bits[(N_TOK + 31) / 32], again[(N_TOK + 31) / 32];
    struct ci_err err = {0};
    FUZZ_CHECK(gram_matcher_mask(m, bits, &err) == CI_OK, "%s", err.msg);
    FUZZ_CHECK(gram_matcher_mask(m, again, &err) == CI_OK, "%s", err.msg);
    FUZZ_CHECK(memcmp(bits, again, sizeof bits) == 0, "cached mask differs");
    for (int id = 1; id < N_TOK; id++) {
        bool want;
        if (id == N_TOK - 1) {
            want = gram_matcher_is_accepting(m);
        } else {
            char one = (char)id;
            const char *b = id < 256 ? &one : multi[id - 256];
            want = gram_matcher_try_bytes(m, b, id < 256 ? 1 : strlen(b));
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
    enum ci_status s = gram_parse_gbnf((const char *)data, glen, &g, &err);
    if (s != CI_OK) {
        FUZZ_CHECK(g == NULL && err.msg[0] != '\0', "a failed parse without a message");
    } else {
        FUZZ_CHECK(g && g->start < g->n_rules, "no start rule");
        for (uint32_t i = 0; i < g->n_elems; i++)
            FUZZ_CHECK(g->elems[i].op != GRAM_REF || g->elems[i].val < g->n_rules, "reference out of range");
        struct gram_matcher *m = NULL;
        if (gram_matcher_create(g, vocab, &m, &err) == CI_OK) {
            const uint8_t *feed = nul ? nul + 1 : data + size;
            size_t nfeed = nul ? size - glen - 1 : 0;
            check_mask(m);
            for (size_t i = 0; i < nfeed && i < 64 && !over_budget(m, 2); i++) {
                char b = (char)feed[i];
                bool ok = gram_matcher_try_bytes(m, &b, 1);
                FUZZ_CHECK(gram_matcher_accept_bytes(m, &b, 1) == ok, "try and accept disagree");
                check_mask(m);
            }
            gram_matcher_free(m);
        }
        gram_free(g);
    }
    FUZZ_MEM_END();
    return 0;
}
