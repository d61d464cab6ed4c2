/* Grammar-constrained generation through the public API (include/cinfer.h) on stories260K: every policy
 * (naive recomputes the prefix each step, static, continuous), n = 3 samples at temperature 1 with top-k,
 * penalties and a logit_bias that pushes a forbidden token, and a tiny KV pool that forces preemption.  Each
 * sample's text is checked by a hand-written matcher of the grammar's language (not cinfer's), and a sample
 * ends with "stop" exactly when the grammar can go no further.  Bad grammars fail the submit with the
 * problem named. */
#include <ctype.h>
#include <math.h>

#include "cinfer.h"
#include "test.h"

#define CHECKF(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            TEST_FAILF(__VA_ARGS__);                                                                         \
    } while (0)

// A date, a space, then 1 to 3 lowercase words separated by single spaces, then "." — nothing may follow.
static const char *const GRAMMAR = "root ::= date \" \" word (\" \" word){0,2} \".\"\n"
                                   "date ::= [12] [0-9]{3} \"-\" [01] [0-9] \"-\" [0-3] [0-9]\n"
                                   "word ::= [a-z]{1,6}\n";

/* The language above, checked by hand: 1 when s is a whole sentence, 0 otherwise. */
static int in_language(const char *s) {
    const char *p = s;
    if (!(*p == '1' || *p == '2'))
        return 0;
    p++;
    for (int i = 0; i < 3; i++, p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    if (*p++ != '-' || !(*p == '0' || *p == '1') || !isdigit((unsigned char)p[1]))
        return 0;
    p += 2;
    if (*p++ != '-' || !(*p >= '0' && *p <= '3') || !isdigit((unsigned char)p[1]))
        return 0;
    p += 2;
    for (int w = 0; w < 3; w++) {
        if (*p != ' ')
            return 0;
        p++;
        int n = 0;
        while (*p >= 'a' && *p <= 'z')
            p++, n++;
        if (n < 1 || n > 6)
            return 0;
        if (*p == '.')
            return p[1] == '\0';
    }
    return 0;
}

static struct cinfer_model *load(void) {
    char p[1024];
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    if (cinfer_model_load(test_model_path(p, sizeof p, "stories260K.gguf"), NULL, &m, &err) != CINFER_OK)
        TEST_FAILF("load: %s", err.message);
    return m;
}

enum { R = 3, N = 3 };
static char first[R][N][256]; // the first run's texts: every other run must give the same
static bool have_first;

static void run_policy(struct cinfer_model *m, const char *policy, int kv_blocks) {
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    eo.policy = policy;
    eo.n_threads = 1;
    eo.kv_block_size = 4;
    if (kv_blocks)
        eo.kv_blocks = kv_blocks;
    struct cinfer_engine *e = NULL;
    struct cinfer_error err = {0};
    if (cinfer_engine_create(m, &eo, &e, &err) != CINFER_OK) {
        TEST_FAILF("%s: engine: %s", policy, err.message);
        return;
    }
    cinfer_token *ids = NULL;
    int n = 0;
    CHECK(cinfer_tokenize(m, "Once upon a time", 16, true, &ids, &n, &err) == CINFER_OK);
    struct cinfer_stream *st[R] = {0};
    struct cinfer_logit_bias bias = {261, 50.0f}; // " a": pushed hard, allowed only where a word starts
    for (int r = 0; r < R; r++) {
        struct cinfer_request_options ro;
        cinfer_request_options_default(&ro);
        ro.max_tokens = 40;
        ro.n = N;
        ro.sampling.temperature = 1.0f;
        ro.sampling.top_k = r == 1 ? 5 : 0;
        ro.sampling.top_p = 1.0f;
        ro.sampling.min_p = 0.0f;
        ro.sampling.repetition_penalty = r == 2 ? 1.5f : 1.0f;
        ro.sampling.seed = 100 + (uint64_t)r;
        ro.logit_bias = &bias;
        ro.n_logit_bias = r == 0;
        ro.grammar = GRAMMAR;
        CHECKF(cinfer_engine_submit(e, ids, n, &ro, &st[r], &err) == CINFER_OK, "%s: %s", policy,
               err.message);
    }
    cinfer_free(ids);
    char text[R][N][256];
    size_t len[R][N];
    bool done[R][N];
    memset(len, 0, sizeof len);
    memset(done, 0, sizeof done);
    int left = R * N;
    for (int guard = 0; left > 0 && guard < 100000; guard++) {
        cinfer_engine_step(e);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < N; k++) {
                struct cinfer_event ev;
                while (st[r] && !done[r][k] && cinfer_stream_next(st[r], k, &ev, 0) == CINFER_OK) {
                    if (ev.len && len[r][k] + ev.len < sizeof text[r][k]) {
                        memcpy(text[r][k] + len[r][k], ev.text, ev.len);
                        len[r][k] += ev.len;
                    }
                    if (ev.kind == CINFER_EVENT_DONE || ev.kind == CINFER_EVENT_ERROR) {
                        done[r][k] = true;
                        left--;
                        text[r][k][len[r][k]] = '\0';
                        CHECKF(ev.kind == CINFER_EVENT_DONE && !strcmp(ev.finish_reason, "stop"),
                               "%s request %d sample %d: %s (%s)", policy, r, k, ev.finish_reason,
                               text[r][k]);
                        CHECKF(in_language(text[r][k]),
                               "%s request %d sample %d: '%s' is not in the language", policy, r, k,
                               text[r][k]);
                    }
                }
            }
    }
    CHECKF(left == 0, "%s: %d samples never finished", policy, left);
    // Samples differ (each has its own seed and matcher).
    CHECKF(strcmp(text[0][0], text[0][1]) || strcmp(text[0][1], text[0][2]), "%s: identical samples '%s'",
           policy, text[0][0]);
    printf("  %s: e.g. '%s' / '%s'\n", policy, text[0][0], text[1][2]);
    // The same seeds give the same samples whatever the policy, and through preemption and recompute:
    // each sample's matcher follows its own tokens only.
    if (!have_first) {
        memcpy(first, text, sizeof first);
        have_first = true;
    } else {
        for (int r = 0; r < R; r++)
            for (int k = 0; k < N; k++)
                CHECKF(!strcmp(first[r][k], text[r][k]), "%s request %d sample %d: '%s', first run '%s'",
                       policy, r, k, text[r][k], first[r][k]);
    }
    if (kv_blocks) {
        char *metrics = NULL;
        size_t mlen = 0;
        CHECK(cinfer_engine_metrics(e, &metrics, &mlen) == CINFER_OK);
        const char *pre = metrics ? strstr(metrics, "\ncinfer:num_preemptions_total ") : NULL;
        CHECKF(pre && atof(pre + strlen("\ncinfer:num_preemptions_total ")) > 0, "%s: no preemption happened",
               policy);
        cinfer_free(metrics);
    }
    for (int r = 0; r < R; r++)
        cinfer_stream_release(st[r]);
    cinfer_engine_free(e);
}

TEST(every_policy_follows_the_grammar) {
    struct cinfer_model *m = load();
    if (!m)
        return;
    run_policy(m, "continuous", 0);
    run_policy(m, "static", 0);
    run_policy(m, "naive", 0);
    run_policy(m, "continuous", 13); // 52 token slots for 9 samples of up to 45 tokens: preemption
    cinfer_model_free(m);
}

TEST(bad_grammars_refused) {
    struct cinfer_model *m = load();
    if (!m)
        return;
    struct cinfer_engine_options eo;
    cinfer_engine_options_default(&eo);
    eo.n_threads = 1;
    struct cinfer_engine *e = NULL;
    struct cinfer_error err = {0};
    ASSERT_STATUS(cinfer_engine_create(m, &eo, &e, &err), CINFER_OK);
    cinfer_token prompt[2] = {1, 403};
    static const struct {
        const char *g, *msg;
    } cases[] = {
        {"root ::= x\n", "undefined rule 'x'"}, {"root ::= root \"a\"\n", "left-recursive"},
        {"root ::= \"a\" root\n", "empty"},     {"x ::= \"a\"\n", "no rule named 'root'"},
        {"root ::= [a-\n", "line 1, column"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cinfer_request_options ro;
        cinfer_request_options_default(&ro);
        ro.grammar = cases[i].g;
        struct cinfer_stream *st = NULL;
        memset(&err, 0, sizeof err);
        CHECKF(cinfer_engine_submit(e, prompt, 2, &ro, &st, &err) == CINFER_ERR_INVALID && st == NULL &&
                   strstr(err.message, cases[i].msg),
               "%s: '%s'", cases[i].g, err.message);
        memset(&err, 0, sizeof err);
        CHECKF(cinfer_engine_check_grammar(e, cases[i].g, &err) == CINFER_ERR_INVALID &&
                   strstr(err.message, cases[i].msg),
               "check %s: '%s'", cases[i].g, err.message);
    }
    CHECK(cinfer_engine_check_grammar(e, GRAMMAR, &err) == CINFER_OK);
    cinfer_engine_free(e);
    cinfer_model_free(m);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(every_policy_follows_the_grammar);
    RUN(bad_grammars_refused);
    return test_exit_code();
}
