/* grammar/ on the grammar corpus (the .gbnf files of tests/data/grammars: llama.cpp's example grammars and grammars
 * written for these tests, see the README there) with real vocabularies (GPT-2's 50k BPE, LLaMA's 32k
 * SentencePiece with byte tokens, StarCoder's 49k BPE, the size of SmolLM2's):
 *
 * - every grammar compiles (and the compile time is printed);
 * - reachability: sentences drawn at random from each grammar by the independent reference
 *   (tests/ref/gbnf_ref.py derive: its own GBNF parser, not cinfer's), split into tokens in two ways (the
 *   tokenizer's own encoding when its bytes are the sentence; a random split into vocabulary tokens, which
 *   cuts multi-byte characters wherever a token does), are fed token by token: the mask allows every token,
 *   the matcher accepts it, and at the end the mask allows the end-of-generation token (the mask never
 *   forbids a valid continuation);
 * - the mask equals trying every vocabulary token on the matcher (brute force), on states reached by those
 *   sentences' prefixes and by random walks (a random allowed token at each step).
 *
 * Needs python3 for the reference ($CINFER_PY, as tests/run.sh sets it); without it the reachability test
 * fails (it is the point of the program). */
#include <glob.h>

#include <cjson/cJSON.h>

#include "core/mem.h"
#include "core/clock.h"
#include "core/rng.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "test_util.h"

#define CHECKF(cond, ...)                                                                                    \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            FAIL_FIRST(__VA_ARGS__);                                                                         \
    } while (0)

#define MAX_GRAMMARS 256
#define N_SAMPLES    12 // sentences per grammar

struct sample {
    char *s;
    size_t n;
};

static struct {
    int n;
    char *name[MAX_GRAMMARS];
    char *text[MAX_GRAMMARS];
    size_t len[MAX_GRAMMARS];
    char path[MAX_GRAMMARS][1024];
    struct grammar *g[MAX_GRAMMARS];
    struct sample samples[MAX_GRAMMARS][N_SAMPLES];
    int n_samples[MAX_GRAMMARS];
} C;

/* Every how many grammars and schemas the walks take: $CINFER_TEST_SAMPLE, which tests/run.sh sets for the
 * sanitizer builds (a sample reaches the same code; the release suite takes them all). */
static int sample_every(void) {
    const char *e = getenv("CINFER_TEST_SAMPLE");
    int k = e ? atoi(e) : 1;
    return k > 1 ? k : 1;
}

static const char *root_dir(void) {
    const char *r = getenv("CINFER_ROOT");
    return r ? r : ".";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Reads the corpus and compiles it (each grammar 5 times, for the median compile time). */
TEST(corpus_compiles) {
    char pat[1200];
    snprintf(pat, sizeof pat, "%s/tests/data/grammars/*.gbnf", root_dir());
    glob_t gl;
    ASSERT(glob(pat, 0, NULL, &gl) == 0);
    CHECKF(gl.gl_pathc >= 50, "only %zu grammars in %s", gl.gl_pathc, pat);
    double total_ms = 0, worst_ms = 0;
    const char *worst = "";
    for (size_t i = 0; i < gl.gl_pathc && C.n < MAX_GRAMMARS; i++) {
        int k = C.n;
        size_t n;
        char *text = test_read_file(gl.gl_pathv[i], &n);
        CHECKF(text != NULL, "%s: cannot read", gl.gl_pathv[i]);
        if (!text)
            continue;
        snprintf(C.path[k], sizeof C.path[k], "%s", gl.gl_pathv[i]);
        const char *base = strrchr(gl.gl_pathv[i], '/') + 1;
        C.name[k] = strndup(base, strlen(base) - 5);
        C.text[k] = text;
        C.len[k] = n;
        double t[5];
        for (int rep = 0; rep < 5; rep++) {
            struct ci_err err = {0};
            struct grammar *g = NULL;
            int64_t t0 = ci_now_ns();
            enum ci_status st = gram_parse_gbnf(text, n, &g, &err);
            t[rep] = (double)(ci_now_ns() - t0) / 1e6;
            CHECKF(st == CI_OK, "%s: %s", C.name[k], err.msg);
            if (rep == 0)
                C.g[k] = g;
            else
                gram_free(g);
        }
        qsort(t, 5, sizeof t[0], cmp_double);
        total_ms += t[2];
        if (t[2] > worst_ms) {
            worst_ms = t[2];
            worst = C.name[k];
        }
        C.n++;
    }
    globfree(&gl);
    printf("  %d grammars compiled: %.3f ms in all (median of 5 each), %.3f ms per grammar on average, the "
           "slowest %s %.3f ms\n",
           C.n, total_ms, C.n ? total_ms / C.n : 0.0, worst, worst_ms);
}

/* N_SAMPLES sentences of each grammar from the reference (gbnf_ref.py derive: hex of the UTF-8 bytes). */
static void load_samples(void) {
    static bool done;
    if (done)
        return;
    done = true;
    const char *py = getenv("CINFER_PY");
    for (int k = 0; k < C.n; k++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' '%s/tests/ref/gbnf_ref.py' derive '%s' %d %d", py ? py : "python3",
                 root_dir(), C.path[k], N_SAMPLES, 1000 + k);
        FILE *p = popen(cmd, "r");
        if (!p) {
            TEST_FAILF("popen %s", cmd);
            continue;
        }
        static char line[1 << 16];
        while (C.n_samples[k] < N_SAMPLES && fgets(line, sizeof line, p)) {
            size_t h = strcspn(line, "\r\n");
            char *s = malloc(h / 2 + 1);
            for (size_t i = 0; i + 1 < h; i += 2) {
                unsigned v;
                sscanf(line + i, "%2x", &v);
                s[i / 2] = (char)v;
            }
            s[h / 2] = '\0';
            C.samples[k][C.n_samples[k]++] = (struct sample){s, h / 2};
        }
        int rc = pclose(p);
        CHECKF(rc == 0 && C.n_samples[k] == N_SAMPLES, "%s: the reference gave %d sentences (exit %d): %s",
               C.name[k], C.n_samples[k], rc, cmd);
    }
}

/* ---- vocabularies --------------------------------------------------------------------------------------- */

struct vocab_ctx {
    const char *file;
    struct tokenizer *t;
    struct gram_vocab *v;
    int n;
    size_t words;
    // The tokens that may be sampled (bytes, not end-of-generation), sorted by their bytes, for splitting a
    // sentence into tokens.
    int32_t *sorted;
    int n_sorted;
    size_t max_len;
};

static const struct tokenizer *sort_tok;
static int cmp_tok_bytes(const void *a, const void *b) {
    size_t la, lb;
    const char *x = tokenizer_token_bytes(sort_tok, *(const int32_t *)a, false, &la);
    const char *y = tokenizer_token_bytes(sort_tok, *(const int32_t *)b, false, &lb);
    int c = memcmp(x, y, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static bool open_vocab(struct vocab_ctx *c, const char *file) {
    memset(c, 0, sizeof *c);
    c->file = file;
    c->t = test_load_tokenizer(file);
    if (!c->t)
        return false;
    c->n = tokenizer_n_vocab(c->t);
    c->words = ((size_t)c->n + 31) / 32;
    const char **ptrs = calloc((size_t)c->n, sizeof *ptrs);
    uint32_t *lens = calloc((size_t)c->n, sizeof *lens);
    c->sorted = calloc((size_t)c->n, sizeof *c->sorted);
    for (int i = 0; i < c->n; i++) {
        size_t l;
        ptrs[i] = tokenizer_token_bytes(c->t, i, false, &l);
        lens[i] = (uint32_t)l;
        if (l > 0 && !tokenizer_is_eog(c->t, i) && !tokenizer_is_control(c->t, i)) {
            c->sorted[c->n_sorted++] = i;
            if (l > c->max_len)
                c->max_len = l;
        }
    }
    sort_tok = c->t;
    qsort(c->sorted, (size_t)c->n_sorted, sizeof *c->sorted, cmp_tok_bytes);
    int n_eog;
    const int32_t *eog = tokenizer_eog_ids(c->t, &n_eog);
    struct ci_err err = {0};
    if (gram_vocab_create(c->n, ptrs, lens, eog, n_eog, &c->v, &err) != CI_OK)
        TEST_FAILF("vocab: %s", err.msg);
    free(ptrs);
    free(lens);
    return c->v != NULL;
}

static void close_vocab(struct vocab_ctx *c) {
    gram_vocab_free(c->v);
    tokenizer_free(c->t);
    free(c->sorted);
}

/* The token whose bytes are exactly s[0..n), or -1. */
static int32_t find_token(const struct vocab_ctx *c, const char *s, size_t n) {
    int lo = 0, hi = c->n_sorted;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        size_t l;
        const char *b = tokenizer_token_bytes(c->t, c->sorted[mid], false, &l);
        int cmp = memcmp(b, s, l < n ? l : n);
        if (cmp == 0)
            cmp = (l > n) - (l < n);
        if (cmp == 0)
            return c->sorted[mid];
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* A random split of s into vocabulary tokens: at each position one of the tokens that match there, the
 * longest half of the time.  Returns the count (-1 when some byte has no token). */
static int random_split(const struct vocab_ctx *c, const char *s, size_t n, struct ci_rng *rng,
                        int32_t *out) {
    int k = 0;
    for (size_t i = 0; i < n;) {
        int32_t cand[256];
        size_t clen[256];
        int nc = 0;
        for (size_t l = 1; l <= c->max_len && i + l <= n && nc < 256; l++) {
            int32_t id = find_token(c, s + i, l);
            if (id >= 0) {
                cand[nc] = id;
                clen[nc++] = l;
            }
        }
        if (nc == 0)
            return -1;
        int pick = (ci_rng_u64(rng) & 1) ? nc - 1 : (int)(ci_rng_u64(rng) % (uint64_t)nc);
        out[k++] = cand[pick];
        i += clen[pick];
    }
    return k;
}

static bool bit(const uint32_t *bits, int32_t id) {
    return (bits[id >> 5] >> (id & 31)) & 1u;
}

/* The brute-force mask: every token tried on the matcher (end tokens: allowed when accepting). */
static void brute_mask(const struct vocab_ctx *c, struct gram_matcher *m, uint32_t *ref) {
    memset(ref, 0, c->words * sizeof *ref);
    bool acc = gram_matcher_is_accepting(m);
    for (int32_t id = 0; id < c->n; id++) {
        size_t l;
        const char *b = tokenizer_token_bytes(c->t, id, false, &l);
        bool ok = tokenizer_is_eog(c->t, id) ? acc : (l > 0 && gram_matcher_try_bytes(m, b, l));
        if (ok)
            ref[id >> 5] |= 1u << (id & 31);
    }
}

static int mask_diff(const struct vocab_ctx *c, const uint32_t *a, const uint32_t *b) {
    int d = 0;
    for (size_t w = 0; w < c->words; w++)
        d += __builtin_popcount(a[w] ^ b[w]);
    return d;
}

/* ---- reachability ----------------------------------------------------------------------------------------- */

static long fed_tokens, fed_sentences, own_encodings, brute_states;

/* Feeds ids[0..n) (whose bytes are sample s of grammar k) one by one; brute: compare the mask with the brute
 * force at every brute-th step (0: never). */
static void feed(struct vocab_ctx *c, struct gram_space *sp, int k, const struct sample *s,
                 const int32_t *ids, int n, const char *how, int brute, uint32_t *bits, uint32_t *ref) {
    struct gram_matcher *m = NULL;
    struct ci_err err = {0};
    if (gram_matcher_create_in(sp, &m, &err) != CI_OK) {
        TEST_FAILF("%s: matcher: %s", C.name[k], err.msg);
        return;
    }
    for (int i = 0; i <= n; i++) {
        if (gram_matcher_mask(m, bits, &err) != CI_OK) {
            TEST_FAILF("%s: mask: %s", C.name[k], err.msg);
            break;
        }
        if (brute && i % brute == 0) {
            brute_mask(c, m, ref);
            int d = mask_diff(c, bits, ref);
            CHECKF(d == 0, "%s %s: after %d tokens of %.*s, %d tokens differ from the brute-force mask",
                   c->file, C.name[k], i, (int)s->n, s->s, d);
            brute_states++;
        }
        if (i == n)
            break;
        size_t l;
        const char *b = tokenizer_token_bytes(c->t, ids[i], false, &l);
        if (!bit(bits, ids[i]) || !gram_matcher_accept_token(m, ids[i])) {
            FAIL_FIRST("%s %s (%s split): token %d of %d (id %d, %.*s) of the sentence %.*s is %s", c->file,
                       C.name[k], how, i, n, ids[i], (int)l, b, (int)s->n, s->s,
                       bit(bits, ids[i]) ? "masked in but rejected" : "masked out");
            gram_matcher_free(m);
            return;
        }
        fed_tokens++;
    }
    int n_eog;
    const int32_t *eog = tokenizer_eog_ids(c->t, &n_eog);
    CHECKF(gram_matcher_is_accepting(m), "%s %s: the whole sentence %.*s is not accepted", c->file, C.name[k],
           (int)s->n, s->s);
    for (int e = 0; e < n_eog; e++)
        CHECKF(bit(bits, eog[e]), "%s %s: end token %d masked out after the whole sentence %.*s", c->file,
               C.name[k], eog[e], (int)s->n, s->s);
    fed_sentences++;
    gram_matcher_free(m);
}

static const char *const VOCABS[] = {"ggml-vocab/ggml-vocab-gpt-2.gguf",
                                     "ggml-vocab/ggml-vocab-llama-spm.gguf",
                                     "ggml-vocab/ggml-vocab-starcoder.gguf"};

TEST(corpus_reachability) {
    load_samples();
    for (size_t v = 0; v < sizeof VOCABS / sizeof VOCABS[0]; v++) {
        struct vocab_ctx c;
        if (!open_vocab(&c, VOCABS[v])) {
            close_vocab(&c);
            continue;
        }
        fed_tokens = fed_sentences = own_encodings = brute_states = 0;
        long total = 0;
        uint32_t *bits = calloc(c.words, sizeof *bits), *ref = calloc(c.words, sizeof *ref);
        struct ci_rng rng;
        ci_rng_seed(&rng, 77 + v);
        int64_t t0 = ci_now_ns();
        for (int k = 0; k < C.n; k += sample_every()) {
            // The sentences of one grammar share a space (and its mask cache), as the server's requests do.
            struct gram_space *sp = NULL;
            struct ci_err serr = {0};
            if (gram_space_create(C.g[k], c.v, &sp, &serr) != CI_OK) {
                TEST_FAILF("%s: %s", C.name[k], serr.msg);
                continue;
            }
            for (int j = 0; j < C.n_samples[k]; j++) {
                const struct sample *s = &C.samples[k][j];
                total++;
                // The tokenizer's own encoding, when its bytes are the sentence (SentencePiece adds a space).
                int32_t *ids = NULL;
                int n = 0;
                struct ci_err err = {0};
                CHECK(tokenizer_encode(c.t, s->s, s->n, false, false, &ids, &n, &err) == CI_OK);
                char *joined = NULL;
                size_t jn = 0;
                for (int i = 0; i < n; i++) {
                    size_t l;
                    const char *b = tokenizer_token_bytes(c.t, ids[i], false, &l);
                    joined = realloc(joined, jn + l + 1);
                    memcpy(joined + jn, b, l);
                    jn += l;
                }
                if (jn == s->n && (jn == 0 || memcmp(joined, s->s, jn) == 0)) {
                    feed(&c, sp, k, s, ids, n, "tokenizer", j == 0 ? 4 : 0, bits, ref);
                    own_encodings++;
                }
                free(joined);
                ci_free(ids);
                // A random split (byte tokens and partial characters included).
                int32_t *split = malloc((s->n + 1) * sizeof *split);
                int ns = random_split(&c, s->s, s->n, &rng, split);
                CHECKF(ns >= 0, "%s %s: no token split of %.*s", c.file, C.name[k], (int)s->n, s->s);
                if (ns >= 0)
                    feed(&c, sp, k, s, split, ns, "random", j == 1 ? 4 : 0, bits, ref);
                free(split);
            }
            gram_space_free(sp);
        }
        printf("  %s: %ld sentences (%ld with the tokenizer's own encoding), %ld tokens fed, %ld states "
               "checked against the brute force, %.1f s\n",
               c.file, fed_sentences, own_encodings, fed_tokens, brute_states,
               (double)(ci_now_ns() - t0) / 1e9);
        // A BPE tokenizer's encoding is the sentence's bytes: every sentence went through that path too.
        if (tokenizer_type(c.t) == TOKENIZER_TYPE_BPE)
            CHECKF(own_encodings == total, "%s: %ld own encodings of %ld sentences", c.file, own_encodings,
                   total);
        free(bits);
        free(ref);
        close_vocab(&c);
    }
}

/* ---- random walks ----------------------------------------------------------------------------------------- */

TEST(corpus_mask_vs_brute_force) {
    // The same walks (seeds) with masks from the per-position token table and from the trie walk alone.
    for (size_t vt = 0; vt < 2 * sizeof VOCABS / sizeof VOCABS[0]; vt++) {
        size_t v = vt / 2;
        bool table = vt % 2 == 0;
        struct vocab_ctx c;
        if (!open_vocab(&c, VOCABS[v])) {
            close_vocab(&c);
            continue;
        }
        uint32_t *bits = calloc(c.words, sizeof *bits), *ref = calloc(c.words, sizeof *ref);
        int32_t *allowed = calloc((size_t)c.n, sizeof *allowed);
        struct ci_rng rng;
        ci_rng_seed(&rng, 5 + v);
        long states = 0, allowed_total = 0;
        double *mask_us = calloc((size_t)C.n * 8, sizeof *mask_us); // uncached masks' times
        int n_timed = 0;
        uint64_t table_masks = 0, table_ns = 0, table_entries = 0;
        for (int k = 0; k < C.n; k += sample_every()) {
            struct gram_matcher *m = NULL;
            struct gram_space *sp = NULL;
            struct ci_err err = {0};
            if (gram_space_create(C.g[k], c.v, &sp, &err) != CI_OK ||
                (gram_space_use_table(sp, table), gram_matcher_create_in(sp, &m, &err)) != CI_OK) {
                TEST_FAILF("%s: %s", C.name[k], err.msg);
                gram_space_free(sp);
                continue;
            }
            for (int step = 0; step < 6; step++) {
                struct gram_matcher_stats s0, s1;
                gram_matcher_stats(m, &s0);
                int64_t t0 = ci_now_ns();
                CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
                int64_t dt = ci_now_ns() - t0;
                gram_matcher_stats(m, &s1);
                if (s1.cache_hits == s0.cache_hits)
                    mask_us[n_timed++] = (double)dt / 1e3;
                brute_mask(&c, m, ref);
                int d = mask_diff(&c, bits, ref);
                CHECKF(d == 0, "%s %s walk step %d: %d tokens differ from the brute-force mask", c.file,
                       C.name[k], step, d);
                states++;
                int na = 0;
                for (int32_t id = 0; id < c.n; id++)
                    if (bit(ref, id) && !tokenizer_is_eog(c.t, id))
                        allowed[na++] = id;
                allowed_total += na;
                if (na == 0)
                    break;
                CHECK(gram_matcher_accept_token(m, allowed[ci_rng_u64(&rng) % (uint64_t)na]));
            }
            struct gram_matcher_stats gs;
            gram_matcher_stats(m, &gs);
            table_masks += gs.table_masks;
            table_ns += gs.table_ns;
            table_entries += gs.table_positions;
            CHECKF(table ? gs.table_unavailable == 0 : gs.table_masks == 0,
                   "%s %s: table %s: %llu masks from it", c.file, C.name[k], table ? "on" : "off",
                   (unsigned long long)gs.table_masks);
            gram_matcher_free(m);
            gram_space_free(sp);
        }
        if (table)
            CHECKF(table_masks > 0, "%s: no mask came from the table", c.file);
        qsort(mask_us, (size_t)n_timed, sizeof *mask_us, cmp_double);
        printf("  %s (%s): %ld random-walk states equal to the brute force, %.1f allowed tokens per state; "
               "uncached mask %.0f us median, %.0f us p90 (%d masks, %llu from the table, whose %llu entries "
               "took "
               "%.1f ms in all)\n",
               c.file, table ? "table" : "walk", states, states ? (double)allowed_total / states : 0.0,
               n_timed ? mask_us[n_timed / 2] : 0.0, n_timed ? mask_us[n_timed * 9 / 10] : 0.0, n_timed,
               (unsigned long long)table_masks, (unsigned long long)table_entries, (double)table_ns / 1e6);
        free(mask_us);
        free(bits);
        free(ref);
        free(allowed);
        close_vocab(&c);
    }
}

/* ---- JSONSchemaBench ------------------------------------------------------------------------------------ */

/* Per-mask times of one kind (us). */
struct times {
    double *us;
    int n, cap;
};
static void times_add(struct times *t, double us) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->us = realloc(t->us, (size_t)t->cap * sizeof *t->us);
    }
    t->us[t->n++] = us;
}
static void times_print(const char *what, struct times *t) {
    qsort(t->us, (size_t)t->n, sizeof *t->us, cmp_double);
    printf("    %-34s %6d masks: median %7.1f us, p90 %7.1f us, max %8.1f us\n", what, t->n,
           t->n ? t->us[t->n / 2] : 0.0, t->n ? t->us[t->n * 9 / 10] : 0.0, t->n ? t->us[t->n - 1] : 0.0);
    free(t->us);
    *t = (struct times){0};
}

static int64_t timed_mask(struct gram_matcher *m, uint32_t *bits, bool *cached, bool *new_entry) {
    struct gram_matcher_stats s0, s1;
    struct ci_err err = {0};
    gram_matcher_stats(m, &s0);
    int64_t t0 = ci_now_ns();
    CHECK(gram_matcher_mask(m, bits, &err) == CI_OK);
    int64_t dt = ci_now_ns() - t0;
    gram_matcher_stats(m, &s1);
    *cached = s1.cache_hits > s0.cache_hits;
    *new_entry = s1.table_positions + s1.table_unavailable > s0.table_positions + s0.table_unavailable;
    return dt;
}

/* Schemas of JSONSchemaBench (../shared/data/jsonschemabench, or $JSONSCHEMABENCH) compiled by the JSON Schema
 * front end; on each, two random walks (a random allowed token per step) in one space with the table and one
 * without: at every state the two masks are equal, and every 8th state equals the brute force.  The second
 * walk meets the table entries the first computed (a later request with the same schema).  Times printed per
 * kind.  $CINFER_JSB_EVERY (every K-th schema, default 40, times $CINFER_TEST_SAMPLE), $CINFER_JSB_STEPS (per
 * walk, default 24) and $CINFER_JSB_VOCAB (default StarCoder's 49,152 tokens, SmolLM2's size) widen it into
 * the benchmark of bench/RESULTS.md. */
TEST(jsonschemabench_masks) {
    const char *dir = getenv("JSONSCHEMABENCH");
    char dbuf[1200];
    if (!dir) {
        snprintf(dbuf, sizeof dbuf, "%s/../shared/data/jsonschemabench", root_dir());
        dir = dbuf;
    }
    int every = (getenv("CINFER_JSB_EVERY") ? atoi(getenv("CINFER_JSB_EVERY")) : 40) * sample_every();
    if (every < 1)
        every = 1;
    int steps = getenv("CINFER_JSB_STEPS") ? atoi(getenv("CINFER_JSB_STEPS")) : 24;
    const char *vf =
        getenv("CINFER_JSB_VOCAB") ? getenv("CINFER_JSB_VOCAB") : "ggml-vocab/ggml-vocab-starcoder.gguf";
    static const char *const SUBSETS[] = {"Glaiveai2K", "Github_trivial", "Github_easy"};
    struct vocab_ctx c;
    if (!open_vocab(&c, vf)) {
        close_vocab(&c);
        printf("  (no vocabulary %s: skipped)\n", vf);
        return;
    }
    uint32_t *a = calloc(c.words, sizeof *a), *b = calloc(c.words, sizeof *b),
             *ref = calloc(c.words, sizeof *ref);
    int32_t *allowed = calloc((size_t)c.n, sizeof *allowed);
    for (size_t si = 0; si < sizeof SUBSETS / sizeof SUBSETS[0]; si++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s.jsonl", dir, SUBSETS[si]);
        FILE *f = fopen(path, "r");
        if (!f) {
            printf("  (no %s: skipped)\n", path);
            continue;
        }
        struct times t_walk = {0}, t_cold = {0}, t_warm = {0}, u_walk = {0}, u_cold = {0}, u_warm = {0},
                     u_steady = {0}, t_entries = {0}, t_compile = {0};
        int schemas = 0, compiled = 0, states = 0, brute = 0;
        long dep_tokens = 0, entries = 0, shared = 0, patched = 0;
        static char line[1 << 20];
        struct ci_rng rng;
        ci_rng_seed(&rng, 11 + si);
        for (int ln = 0; fgets(line, sizeof line, f); ln++) {
            if (ln % every)
                continue;
            cJSON *j = cJSON_Parse(line);
            char *schema = j ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(j, "schema")) : NULL;
            cJSON_Delete(j);
            if (!schema)
                continue;
            schemas++;
            int64_t t0 = ci_now_ns();
            struct gtext gt = {0};
            struct grammar *g = NULL;
            struct ci_err err = {0};
            if (gram_json_schema_to_gbnf(schema, strlen(schema), &gt, &err) == CI_OK)
                gram_parse_gbnf(gt.s, gt.n, &g, &err);
            gtext_free(&gt);
            free(schema);
            if (!g)
                continue; // a schema the front end declines (the server answers 400)
            times_add(&t_compile, (double)(ci_now_ns() - t0) / 1e3);
            compiled++;
            struct gram_space *sa = NULL, *sb = NULL;
            CHECK(gram_space_create(g, c.v, &sa, &err) == CI_OK &&
                  gram_space_create(g, c.v, &sb, &err) == CI_OK);
            if (!sa || !sb) {
                gram_space_free(sa);
                gram_space_free(sb);
                gram_free(g);
                continue;
            }
            gram_space_use_table(sb, false);
            for (int walk = 0; walk < 2; walk++) {
                struct gram_matcher *ma = NULL, *mb = NULL;
                CHECK(gram_matcher_create_in(sa, &ma, &err) == CI_OK &&
                      gram_matcher_create_in(sb, &mb, &err) == CI_OK);
                for (int step = 0; ma && mb && step < steps; step++) {
                    bool ca, cb, ea, eb;
                    double ua = (double)timed_mask(ma, a, &ca, &ea) / 1e3,
                           ub = (double)timed_mask(mb, b, &cb, &eb) / 1e3;
                    if (!ca && !ea)
                        times_add(&u_steady, ua);
                    times_add(walk ? &t_warm : &t_cold, ua);
                    times_add(&t_walk, ub);
                    if (!ca)
                        times_add(walk ? &u_warm : &u_cold, ua);
                    if (!cb)
                        times_add(&u_walk, ub);
                    int d = mask_diff(&c, a, b);
                    CHECKF(d == 0,
                           "%s line %d walk %d step %d: %d tokens differ between the table and the walk",
                           SUBSETS[si], ln, walk, step, d);
                    states++;
                    if (step % 8 == 0) {
                        brute_mask(&c, ma, ref);
                        d = mask_diff(&c, a, ref);
                        CHECKF(d == 0, "%s line %d walk %d step %d: %d tokens differ from the brute force",
                               SUBSETS[si], ln, walk, step, d);
                        brute++;
                    }
                    int na = 0;
                    for (int32_t id = 0; id < c.n; id++)
                        if (bit(a, id) && !tokenizer_is_eog(c.t, id))
                            allowed[na++] = id;
                    if (na == 0)
                        break;
                    int32_t pick = allowed[ci_rng_u64(&rng) % (uint64_t)na];
                    CHECK(gram_matcher_accept_token(ma, pick) && gram_matcher_accept_token(mb, pick));
                }
                gram_matcher_free(ma);
                gram_matcher_free(mb);
            }
            struct gram_matcher *m = NULL;
            if (gram_matcher_create_in(sa, &m, &err) == CI_OK) {
                struct gram_matcher_stats gs;
                gram_matcher_stats(m, &gs);
                times_add(&t_entries, (double)gs.table_ns / 1e3);
                dep_tokens += (long)gs.table_dep_tokens;
                entries += gs.table_positions;
                shared += gs.table_shared;
                patched += gs.table_patched;
                CHECKF(gs.table_unavailable == 0, "%s line %d: %u table entries unavailable", SUBSETS[si], ln,
                       gs.table_unavailable);
            }
            gram_matcher_free(m);
            gram_space_free(sa);
            gram_space_free(sb);
            gram_free(g);
        }
        fclose(f);
        printf(
            "  %s (every %d, %s): %d schemas, %d compiled, %d states equal between the table and the walk, "
            "%d equal to the brute force; %ld table entries (%ld of them patched from a deeper "
            "repetition's), "
            "%ld positions sharing a deeper repetition's entry, %.1f dependent tokens per entry\n",
            SUBSETS[si], every, c.file, schemas, compiled, states, brute, entries, patched, shared,
            entries ? (double)dep_tokens / (double)entries : 0.0);
        times_print("walk (table off), every mask", &t_walk);
        times_print("table, first walk, every mask", &t_cold);
        times_print("table, second walk, every mask", &t_warm);
        times_print("walk (table off), uncached masks", &u_walk);
        times_print("table, first walk, uncached masks", &u_cold);
        times_print("table, second walk, uncached masks", &u_warm);
        times_print("table, uncached, no entry computed", &u_steady);
        times_print("compile (schema -> grammar), per schema", &t_compile);
        times_print("table entries' time, per schema", &t_entries);
    }
    free(a);
    free(b);
    free(ref);
    free(allowed);
    close_vocab(&c);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    // The corpus is read (and compiled) whatever the filter: the other tests need it.
    test_current = "corpus_compiles";
    test_corpus_compiles();
    if (test_failed_checks == 0)
        printf("PASS corpus_compiles\n");
    else
        test_total_failed++;
    RUN(corpus_reachability);
    RUN(corpus_mask_vs_brute_force);
    RUN(jsonschemabench_masks);
    for (int k = 0; k < C.n; k++) {
        gram_free(C.g[k]);
        free(C.name[k]);
        free(C.text[k]);
        for (int j = 0; j < C.n_samples[k]; j++)
            free(C.samples[k][j].s);
    }
    return test_exit_code();
}
