/* Unit tests for the sampler: greedy is argmax, seeds reproduce, temperature sampling fits the softmax by a
 * chi-square test, top-k / top-p / min-p keep exactly the sets their definitions give (computed here
 * independently), penalties and logit bias change logits as the formulas in sampler.h say. */
#include "engine/sampler.h" // first: the header must compile on its own

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "test.h"

static struct sampling_params plain(float temperature, uint64_t seed) {
    struct sampling_params p = sampling_params_default();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static struct sampler *make(const struct sampling_params *p, int n_vocab) {
    struct sampler *s = NULL;
    struct ci_err err = {0};
    if (sampler_create(p, n_vocab, &s, &err) != CI_OK)
        printf("sampler_create: %s\n", err.msg);
    return s;
}

static int ref_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

// probs[i] = softmax(x / t) in double.
static void ref_softmax(const float *x, int n, double t, double *probs) {
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, (double)x[i]);
    for (int i = 0; i < n; i++)
        sum += probs[i] = exp(((double)x[i] - mx) / t);
    for (int i = 0; i < n; i++)
        probs[i] /= sum;
}

// 0.999 quantiles of the chi-square distribution, df = 1..7.
static const double chi2_999[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322};

/* Draws n_draws tokens and checks them against want[] (probabilities; 0 = must never appear) with a
 * chi-square goodness-of-fit test at the 0.999 level.  Returns 1 on success. */
static int fits(struct sampler *s, const float *logits, int n, const double *want, int n_draws) {
    int counts[64] = {0};
    for (int i = 0; i < n_draws; i++) {
        int32_t t = sampler_sample(s, logits, n, NULL, 0);
        if (t < 0 || t >= n) {
            printf("token %d out of range\n", (int)t);
            return 0;
        }
        counts[t]++;
    }
    double chi2 = 0.0;
    int df = -1;
    for (int i = 0; i < n; i++) {
        if (want[i] == 0.0) {
            if (counts[i] != 0) {
                printf("token %d drawn %d times, want never\n", i, counts[i]);
                return 0;
            }
            continue;
        }
        double e = want[i] * n_draws;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        df++;
    }
    if (df < 1)
        return 1;
    if (chi2 >= chi2_999[df]) {
        printf("chi2 %.2f >= %.2f (df %d)\n", chi2, chi2_999[df], df);
        return 0;
    }
    return 1;
}

static const float L8[8] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.3f, 1.5f};

TEST(defaults_and_validation) {
    struct sampling_params d = sampling_params_default();
    ASSERT_NEAR(d.temperature, 0.8, 1e-7);
    ASSERT_EQ_I64(d.top_k, 40);
    ASSERT_NEAR(d.top_p, 0.95, 1e-7);
    ASSERT_NEAR(d.min_p, 0.05, 1e-7);
    ASSERT_NEAR(d.repetition_penalty, 1.0, 0);
    ASSERT_EQ_I64(d.penalty_last_n, 64);
    ASSERT_EQ_I64(d.seed, SAMPLING_DEFAULT_SEED);
    ASSERT_STATUS(sampling_params_validate(&d, 10, NULL), CI_OK);

    struct ci_err err = {0};
    struct sampling_params p;
    struct sampling_logit_bias bias[2] = {{3, -INFINITY}, {9, 2.0f}};
#define BAD(field_set, n_vocab)                                                                              \
    do {                                                                                                     \
        p = sampling_params_default();                                                                       \
        field_set;                                                                                           \
        ASSERT_STATUS(sampling_params_validate(&p, n_vocab, &err), CI_ERR_INVALID);                          \
    } while (0)
    BAD((void)0, 0);
    BAD(p.temperature = NAN, 10);
    BAD(p.temperature = INFINITY, 10);
    BAD(p.top_p = 1.5f, 10);
    BAD(p.top_p = NAN, 10);
    BAD(p.min_p = -0.1f, 10);
    BAD(p.repetition_penalty = 0.0f, 10);
    BAD(p.presence_penalty = NAN, 10);
    BAD(p.frequency_penalty = INFINITY, 10);
    BAD(p.penalty_last_n = -2, 10);
    BAD((p.logit_bias = bias, p.n_logit_bias = 2), 9); // token 9 outside [0, 9)
    bias[1].bias = INFINITY;
    BAD((p.logit_bias = bias, p.n_logit_bias = 2), 10);
    bias[1].bias = NAN;
    BAD((p.logit_bias = bias, p.n_logit_bias = 2), 10);
    BAD(p.n_logit_bias = 1, 10); // count without an array
#undef BAD
    CHECK(strstr(err.msg, "logit_bias") != NULL);
    bias[1].bias = 2.0f;
    p = sampling_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.temperature = -1.0f; // greedy, valid
    ASSERT_STATUS(sampling_params_validate(&p, 10, &err), CI_OK);

    struct sampler *s = (struct sampler *)1;
    p.top_p = 2.0f;
    ASSERT_STATUS(sampler_create(&p, 10, &s, &err), CI_ERR_INVALID);
    ASSERT(s == NULL);
    CHECK(strstr(err.msg, "top_p") != NULL);
    sampler_free(NULL);
}

TEST(greedy_is_argmax) {
    enum { N = 1000 };
    float x[N];
    struct ci_rng rng;
    ci_rng_seed(&rng, 7);
    struct sampling_params p = sampling_params_default(); // filters on: greedy ignores them
    p.temperature = 0.0f;
    struct sampler *s = make(&p, N);
    ASSERT(s);
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)ci_rng_normal(&rng) * 3.0f;
        ASSERT_EQ_I64(sampler_sample(s, x, N, NULL, 0), ref_argmax(x, N));
    }
    // Ties go to the lowest id; negative temperature is greedy too.
    for (int i = 0; i < N; i++)
        x[i] = 0.0f;
    x[17] = x[400] = x[900] = 5.0f;
    ASSERT_EQ_I64(sampler_sample(s, x, N, NULL, 0), 17);
    sampler_free(s);
    p.temperature = -2.0f;
    s = make(&p, N);
    ASSERT(s);
    ASSERT_EQ_I64(sampler_sample(s, x, N, NULL, 0), 17);
    sampler_free(s);
}

static void draw_seq(struct sampler *s, const float *x, int n, int32_t *out, int n_out) {
    for (int i = 0; i < n_out; i++)
        out[i] = sampler_sample(s, x, n, NULL, 0);
}

TEST(seeds_reproduce) {
    enum { N = 50, D = 200 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 7) * 0.1f; // fairly flat: two streams agreeing by chance is impossible
    int32_t a[D], b[D], c[D], r[D];
    struct sampling_params p = sampling_params_default();
    p.temperature = 1.0f;
    p.seed = 42;
    struct sampler *s1 = make(&p, N), *s2 = make(&p, N);
    p.seed = 43;
    struct sampler *s3 = make(&p, N);
    ASSERT(s1 && s2 && s3);
    draw_seq(s1, x, N, a, D);
    draw_seq(s2, x, N, b, D);
    draw_seq(s3, x, N, c, D);
    ASSERT(memcmp(a, b, sizeof a) == 0);
    ASSERT(memcmp(a, c, sizeof a) != 0);
    sampler_reset(s1, 42);
    draw_seq(s1, x, N, r, D);
    ASSERT(memcmp(a, r, sizeof a) == 0);
    sampler_reset(s1, 43);
    draw_seq(s1, x, N, r, D);
    ASSERT(memcmp(c, r, sizeof c) == 0);
    sampler_free(s1);
    sampler_free(s2);
    sampler_free(s3);
}

TEST(temperature_chi_square) {
    double want[8];
    const float temps[] = {1.0f, 0.7f, 1.8f};
    for (int k = 0; k < 3; k++) {
        struct sampling_params p = plain(temps[k], 1000 + (uint64_t)k);
        struct sampler *s = make(&p, 8);
        ASSERT(s);
        ref_softmax(L8, 8, temps[k], want);
        CHECK(fits(s, L8, 8, want, 20000));
        sampler_free(s);
    }
}

TEST(top_k) {
    // top-k = 1 is greedy at any temperature.
    enum { N = 300 };
    float x[N];
    struct ci_rng rng;
    ci_rng_seed(&rng, 99);
    struct sampling_params p = plain(1.5f, 5);
    p.top_k = 1;
    struct sampler *s = make(&p, N);
    ASSERT(s);
    for (int round = 0; round < 100; round++) {
        for (int i = 0; i < N; i++)
            x[i] = (float)ci_rng_normal(&rng);
        ASSERT_EQ_I64(sampler_sample(s, x, N, NULL, 0), ref_argmax(x, N));
    }
    sampler_free(s);

    // top-k = 3 on L8: tokens 4, 7, 0 with softmax(l / T) renormalized over them.
    p = plain(0.9f, 6);
    p.top_k = 3;
    s = make(&p, 8);
    ASSERT(s);
    double want[8] = {0}, all[8];
    ref_softmax(L8, 8, 0.9, all);
    double z = all[4] + all[7] + all[0];
    want[4] = all[4] / z;
    want[7] = all[7] / z;
    want[0] = all[0] / z;
    CHECK(fits(s, L8, 8, want, 20000));
    sampler_free(s);
}

/* The set top-p keeps by its definition: the shortest prefix in descending order of softmax(l) (temperature
 * not applied: it comes last) whose mass reaches top_p. */
static int ref_nucleus(const float *x, int n, double top_p, int *keep) {
    double probs[64];
    int order[64];
    ref_softmax(x, n, 1.0, probs);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 0; i < n; i++) // selection sort, descending
        for (int j = i + 1; j < n; j++)
            if (probs[order[j]] > probs[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    double cum = 0.0;
    int m = 0;
    memset(keep, 0, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        keep[order[i]] = 1;
        m++;
        cum += probs[order[i]];
        if (cum >= top_p)
            break;
    }
    return m;
}

TEST(top_p) {
    double want[8], all[8];
    int keep[8];
    // Edges: a tiny p (and p = 0) keeps only the top token; p = 1 keeps everything.
    const float tiny[] = {1e-6f, 0.0f};
    for (int k = 0; k < 2; k++) {
        struct sampling_params p = plain(2.0f, 11);
        p.top_p = tiny[k];
        struct sampler *s = make(&p, 8);
        ASSERT(s);
        for (int i = 0; i < 200; i++)
            ASSERT_EQ_I64(sampler_sample(s, L8, 8, NULL, 0), 4);
        sampler_free(s);
    }
    struct sampling_params p = plain(1.0f, 12);
    p.top_p = 1.0f;
    struct sampler *s = make(&p, 8);
    ASSERT(s);
    ref_softmax(L8, 8, 1.0, want);
    CHECK(fits(s, L8, 8, want, 20000));
    sampler_free(s);

    // Interior: p = 0.65 and 0.85 at temperature 0.7.  The kept set comes from softmax(l) (before
    // temperature), the draw from softmax(l / 0.7) renormalized over it.
    const float ps[] = {0.65f, 0.85f};
    const int expect_m[] = {3, 5};
    for (int k = 0; k < 2; k++) {
        p = plain(0.7f, 13 + (uint64_t)k);
        p.top_p = ps[k];
        s = make(&p, 8);
        ASSERT(s);
        int m = ref_nucleus(L8, 8, ps[k], keep);
        ASSERT_EQ_I64(m, expect_m[k]); // by hand: p = .378 .229 .139 .084 .069 ...
        ref_softmax(L8, 8, 0.7, all);
        double z = 0.0;
        for (int i = 0; i < 8; i++)
            z += keep[i] ? all[i] : 0.0;
        for (int i = 0; i < 8; i++)
            want[i] = keep[i] ? all[i] / z : 0.0;
        CHECK(fits(s, L8, 8, want, 20000));
        sampler_free(s);
    }
}

TEST(min_p) {
    // probabilities 0.5, 0.3, 0.2
    const float x[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    struct {
        float min_p;
        int allowed; // bitmask of tokens that may appear
    } cases[] = {{1.0f, 1}, {0.7f, 1}, {0.5f, 3}, {0.35f, 7}, {0.0f, 7}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct sampling_params p = plain(1.0f, 21 + k);
        p.min_p = cases[k].min_p;
        struct sampler *s = make(&p, 3);
        ASSERT(s);
        int seen = 0;
        for (int i = 0; i < 3000; i++)
            seen |= 1 << sampler_sample(s, x, 3, NULL, 0);
        if (seen != cases[k].allowed)
            TEST_FAILF("min_p %g: tokens seen mask %d, want %d", (double)cases[k].min_p, seen,
                       cases[k].allowed);
        sampler_free(s);
    }
    // min-p compares before temperature: at a high temperature the filtered set is the same, and the draw
    // follows softmax(l / T) over it.
    struct sampling_params p = plain(3.0f, 31);
    p.min_p = 0.2f; // keeps p >= 0.0755: tokens 4 (.378), 7 (.229), 0 (.139), 1 (.084); not 6 (.069)
    struct sampler *s = make(&p, 8);
    ASSERT(s);
    double all[8], want[8] = {0};
    ref_softmax(L8, 8, 3.0, all);
    double z = all[4] + all[7] + all[0] + all[1];
    want[4] = all[4] / z;
    want[7] = all[7] / z;
    want[0] = all[0] / z;
    want[1] = all[1] / z;
    CHECK(fits(s, L8, 8, want, 20000));
    sampler_free(s);
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* A large vocabulary exercises the partial sorts (top-k heap, growing nucleus): every draw must land in the
 * set the definitions give, computed here by a full sort. */
TEST(large_vocab_filters) {
    enum { N = 30000 };
    float *x = malloc(N * sizeof *x), *sorted = malloc(N * sizeof *sorted);
    ASSERT(x && sorted);
    struct ci_rng rng;
    ci_rng_seed(&rng, 2024);
    for (int i = 0; i < N; i++)
        x[i] = (float)ci_rng_normal(&rng) * 2.0f;
    memcpy(sorted, x, N * sizeof *x);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    double mx = sorted[0], z = 0.0;
    for (int i = 0; i < N; i++)
        z += exp(sorted[i] - mx);

    // top-k 40: the draw's logit is at least the 40th largest.
    struct sampling_params p = plain(1.0f, 3);
    p.top_k = 40;
    struct sampler *s = make(&p, N);
    ASSERT(s);
    for (int i = 0; i < 300; i++) {
        int32_t t = sampler_sample(s, x, N, NULL, 0);
        ASSERT(t >= 0 && t < N && x[t] >= sorted[39]);
    }
    sampler_free(s);

    // top-p 0.9 alone: the nucleus spans thousands of tokens; the draw's logit is >= the cut logit, and the
    // draws must reach deep into it (the cut is not accidentally at the first partial sort's 64).
    double cum = 0.0;
    int m = 0;
    while (m < N && cum < 0.9 * z)
        cum += exp(sorted[m++] - mx);
    float cut = sorted[m - 1];
    CHECK(m > 1000);
    p = plain(1.0f, 4);
    p.top_p = 0.9f;
    s = make(&p, N);
    ASSERT(s);
    float lowest = INFINITY;
    for (int i = 0; i < 600; i++) {
        int32_t t = sampler_sample(s, x, N, NULL, 0);
        ASSERT(t >= 0 && t < N && x[t] >= cut);
        lowest = fminf(lowest, x[t]);
    }
    CHECK(lowest < sorted[512]);
    sampler_free(s);

    // min-p 0.05 with top-p 0.95 and top-k 0: keeps logit >= max + log(0.05) and within the 0.95 nucleus.
    p = plain(0.8f, 5);
    p.min_p = 0.05f;
    p.top_p = 0.95f;
    s = make(&p, N);
    ASSERT(s);
    for (int i = 0; i < 300; i++) {
        int32_t t = sampler_sample(s, x, N, NULL, 0);
        ASSERT(t >= 0 && t < N && x[t] >= sorted[0] + logf(0.05f));
    }
    sampler_free(s);
    free(x);
    free(sorted);
}

struct ref_cand {
    float logit;
    int id;
};

static int cmp_ref(const void *a, const void *b) {
    const struct ref_cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* The exact kept set, on random small vocabularies with many tied logits: at a huge temperature the draw is
 * uniform over what the filters keep, so enough draws show every kept token and nothing else.  The reference
 * applies the definitions from sampler.h with a full sort (ties broken by lower id). */
TEST(filters_exact_sets) {
    enum { MAXN = 300 };
    struct ci_rng rng;
    ci_rng_seed(&rng, 555);
    float x[MAXN];
    struct ref_cand r[MAXN];
    int n_checked = 0;
    for (int cfg = 0; cfg < 40; cfg++) {
        int n = 50 + (int)(ci_rng_u64(&rng) % (MAXN - 50));
        float scale = cfg % 3 == 0 ? 0.5f : cfg % 3 == 1 ? 2.0f : 8.0f;
        for (int i = 0; i < n; i++) {
            x[i] = (float)ci_rng_normal(&rng) * scale;
            if (cfg % 2)
                x[i] = roundf(x[i] * 4.0f) / 4.0f; // many ties
            r[i].logit = x[i];
            r[i].id = i;
        }
        qsort(r, (size_t)n, sizeof r[0], cmp_ref);
        struct sampling_params p = plain(1e6f, 900 + (uint64_t)cfg);
        p.top_p = 0.05f + 0.93f * ci_rng_f32(&rng);
        p.top_k = cfg % 4 == 3 ? 1 + (int)(ci_rng_u64(&rng) % (uint64_t)n) : 0;
        p.min_p = cfg % 5 == 4 ? 0.02f : 0.0f;
        int k = p.top_k > 0 ? p.top_k : n;
        double z = 0.0, cum = 0.0, margin = 1e9;
        for (int i = 0; i < k; i++)
            z += exp((double)r[i].logit - (double)r[0].logit);
        int m = k;
        for (int i = 0; i < k; i++) {
            cum += exp((double)r[i].logit - (double)r[0].logit);
            margin = fmin(margin, fabs(cum - (double)p.top_p * z));
            if (cum >= (double)p.top_p * z) {
                m = i + 1;
                break;
            }
        }
        if (margin < 1e-6 * z)
            continue; // the cut sits within rounding of a prefix sum: either answer would be right
        int want[MAXN] = {0}, seen[MAXN] = {0};
        for (int i = 0; i < m; i++)
            if (p.min_p == 0.0f || r[i].logit >= r[0].logit + logf(p.min_p))
                want[r[i].id] = 1;
        struct sampler *s = make(&p, n);
        ASSERT(s);
        for (int d = 0; d < 6000; d++)
            seen[sampler_sample(s, x, n, NULL, 0)] = 1;
        sampler_free(s);
        for (int i = 0; i < n; i++)
            if (seen[i] != want[i]) {
                TEST_FAILF("config %d (n %d, top_k %d, top_p %g, min_p %g): token %d seen %d, want %d", cfg,
                           n, p.top_k, (double)p.top_p, (double)p.min_p, i, seen[i], want[i]);
                return;
            }
        n_checked++;
    }
    CHECK(n_checked >= 30);
}

TEST(penalty_formulas) {
    enum { N = 10 };
    const float base[N] = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -2.5f, 1.0f, 4.0f, -0.5f, 0.25f};
    // Oldest first.  Token 7 falls outside a window of 8; 99 and -3 are not in the vocabulary.
    const int32_t hist[] = {7, 7, 0, 1, 1, 99, 2, 0, 0, -3, 5};
    const int n_hist = (int)(sizeof hist / sizeof hist[0]);
    const float rp = 1.3f, freq = 0.4f, pres = 0.7f;
    const int windows[] = {8, -1, 0, 100};
    for (int w = 0; w < 4; w++) {
        struct sampling_params p = plain(1.0f, 1);
        p.repetition_penalty = rp;
        p.frequency_penalty = freq;
        p.presence_penalty = pres;
        p.penalty_last_n = windows[w];
        struct sampler *s = make(&p, N);
        ASSERT(s);
        // Independent counts over the window.
        int cnt[N] = {0};
        int n = windows[w] < 0 || windows[w] > n_hist ? n_hist : windows[w];
        for (int i = n_hist - n; i < n_hist; i++)
            if (hist[i] >= 0 && hist[i] < N)
                cnt[hist[i]]++;
        for (int rep = 0; rep < 2; rep++) { // twice: the workspace must be clean after each call
            float x[N];
            memcpy(x, base, sizeof x);
            sampler_apply_penalties(s, x, N, hist, n_hist);
            for (int t = 0; t < N; t++) {
                float want = base[t];
                if (cnt[t] > 0) {
                    want = want > 0 ? want / rp : want * rp;
                    want -= (float)cnt[t] * freq + pres;
                }
                if (fabsf(x[t] - want) > 1e-6f)
                    TEST_FAILF("window %d token %d: %g, want %g", windows[w], t, (double)x[t], (double)want);
            }
        }
        sampler_free(s);
    }
    // Spot values by hand.  The last 8 of the history are {1, 1, 99, 2, 0, 0, -3, 5}: token 0 (2.0, c=2)
    // becomes 2/1.3 - 0.8 - 0.7, token 1 (-1.0, c=2) -1.3 - 0.8 - 0.7, token 5 (-2.5, c=1) -3.25 - 0.4 - 0.7;
    // token 7 (only before the window) and token 3 (never seen) are untouched.
    struct sampling_params p = plain(1.0f, 1);
    p.repetition_penalty = rp;
    p.frequency_penalty = freq;
    p.presence_penalty = pres;
    p.penalty_last_n = 8;
    struct sampler *s = make(&p, N);
    ASSERT(s);
    float x[N];
    memcpy(x, base, sizeof x);
    sampler_apply_penalties(s, x, N, hist, n_hist);
    ASSERT_NEAR(x[0], 2.0 / 1.3 - 0.8 - 0.7, 1e-5);
    ASSERT_NEAR(x[1], -1.3 - 0.8 - 0.7, 1e-5);
    ASSERT_NEAR(x[3], 0.0, 0);
    ASSERT_NEAR(x[7], 4.0, 0);
    ASSERT_NEAR(x[5], -2.5 * 1.3 - 0.4 - 0.7, 1e-5);
    sampler_free(s);
}

TEST(penalties_steer_greedy) {
    const float x[2] = {2.0f, 1.9f};
    const int32_t h1[] = {0}, h2[] = {0, 0}, h3[] = {0, 0, 0};
    struct {
        float rp, pres, freq;
        const int32_t *h;
        int nh;
        int want;
    } cases[] = {
        {1.0f, 0.0f, 0.0f, h1, 1, 0},  // no penalty
        {1.1f, 0.0f, 0.0f, h1, 1, 1},  // 2.0 / 1.1 = 1.82 < 1.9
        {1.04f, 0.0f, 0.0f, h1, 1, 0}, // 2.0 / 1.04 = 1.92
        {1.0f, 0.2f, 0.0f, h1, 1, 1},  // 1.8
        {1.0f, 0.05f, 0.0f, h3, 3, 0}, // presence counts once: 1.95
        {1.0f, 0.0f, 0.04f, h2, 2, 0}, // 1.92
        {1.0f, 0.0f, 0.04f, h3, 3, 1}, // 1.88
        {1.0f, -0.5f, 0.0f, h1, 1, 0}, // negative presence encourages
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct sampling_params p = plain(0.0f, 1);
        p.repetition_penalty = cases[k].rp;
        p.presence_penalty = cases[k].pres;
        p.frequency_penalty = cases[k].freq;
        struct sampler *s = make(&p, 2);
        ASSERT(s);
        int32_t got = sampler_sample(s, x, 2, cases[k].h, cases[k].nh);
        if (got != cases[k].want)
            TEST_FAILF("case %zu: got %d want %d", k, (int)got, cases[k].want);
        sampler_free(s);
    }
    // Penalties with bias: the bias comes first, so a logit pushed negative is multiplied by the penalty.
    struct sampling_logit_bias b = {0, -3.0f};
    struct sampling_params p = plain(0.0f, 1);
    p.repetition_penalty = 2.0f;
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    struct sampler *s = make(&p, 2);
    ASSERT(s);
    float y[2] = {2.0f, 1.9f};
    int32_t h[] = {0};
    sampler_apply_penalties(s, y, 2, h, 1);
    ASSERT_NEAR(y[0], (2.0 - 3.0) * 2.0, 1e-6);
    ASSERT_NEAR(y[1], 1.9, 1e-6);
    sampler_free(s);
}

TEST(logit_bias) {
    struct sampling_logit_bias bias[2] = {{4, -INFINITY}, {2, 1.9f}};
    struct sampling_params p = plain(0.0f, 1);
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    struct sampler *s = make(&p, 8);
    ASSERT(s);
    ASSERT_EQ_I64(sampler_sample(s, L8, 8, NULL, 0), 7); // 4 banned: next best is 7 (1.5)
    sampler_free(s);
    p.n_logit_bias = 2;
    s = make(&p, 8);
    ASSERT(s);
    bias[1].bias = -100.0f;                              // the sampler kept its own copy
    ASSERT_EQ_I64(sampler_sample(s, L8, 8, NULL, 0), 2); // 0.0 + 1.9 beats 1.5
    sampler_free(s);
    // A banned token is never drawn.
    bias[1].bias = 0.0f;
    p = plain(1.0f, 77);
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    s = make(&p, 8);
    ASSERT(s);
    double all[8], want[8];
    float masked[8];
    memcpy(masked, L8, sizeof masked);
    masked[4] = -INFINITY;
    ref_softmax(masked, 8, 1.0, all);
    memcpy(want, all, sizeof want);
    CHECK(fits(s, L8, 8, want, 20000));
    sampler_free(s);
}

TEST(degenerate_logits) {
    float x[5] = {NAN, 1.0f, NAN, 3.0f, 2.0f};
    struct sampling_params p = plain(1.0f, 8);
    struct sampler *s = make(&p, 5);
    ASSERT(s);
    for (int i = 0; i < 500; i++) {
        int32_t t = sampler_sample(s, x, 5, NULL, 0);
        ASSERT(t == 1 || t == 3 || t == 4);
    }
    float banned[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    ASSERT_EQ_I64(sampler_sample(s, banned, 5, NULL, 0), 0);
    float inf[5] = {0.0f, INFINITY, 1.0f, INFINITY, 2.0f};
    for (int i = 0; i < 100; i++) {
        int32_t t = sampler_sample(s, inf, 5, NULL, 0);
        ASSERT(t == 1 || t == 3);
    }
    sampler_free(s);
    // A subnormal temperature is the greedy limit, not NaN weights.
    p = plain(1e-40f, 9);
    s = make(&p, 8);
    ASSERT(s);
    for (int i = 0; i < 20; i++)
        ASSERT_EQ_I64(sampler_sample(s, L8, 8, NULL, 0), 4);
    sampler_free(s);
}

TEST(no_allocation_per_token) {
    enum { N = 4096 };
    static float x[N];
    int32_t hist[100];
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 101) * 0.05f;
    for (int i = 0; i < 100; i++)
        hist[i] = (i * 13) % N;
    struct sampling_params p = sampling_params_default();
    p.repetition_penalty = 1.1f;
    p.top_k = 0;
    struct sampler *s = make(&p, N);
    ASSERT(s);
    size_t before = ci_mem_in_use();
    ci_mem_set_limit(before); // any allocation on the sampling path would now fail
    int ok = 1;
    for (int i = 0; i < 200; i++) {
        int32_t t = sampler_sample(s, x, N, hist, 100);
        ok &= t >= 0 && t < N;
    }
    ci_mem_set_limit(0);
    ASSERT(ok);
    ASSERT_EQ_I64(ci_mem_in_use(), before);
    sampler_free(s);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(defaults_and_validation);
    RUN(greedy_is_argmax);
    RUN(seeds_reproduce);
    RUN(temperature_chi_square);
    RUN(top_k);
    RUN(top_p);
    RUN(min_p);
    RUN(large_vocab_filters);
    RUN(filters_exact_sets);
    RUN(penalty_formulas);
    RUN(penalties_steer_greedy);
    RUN(logit_bias);
    RUN(degenerate_logits);
    RUN(no_allocation_per_token);
    return test_exit_code();
}
