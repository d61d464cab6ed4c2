/* Token sampler: logit bias, penalties, greedy / top-k / top-p / min-p / temperature, seeded draw.  The
 * order and the formulas are documented in sampler.h; all workspace is allocated by sampler_create. */
#include "engine/sampler.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/rng.h"
#include "kernels/kernels.h"

struct cand {
    float logit;
    int32_t id;
};

// Top-p histogram: logits within SAMPLER_BUCKET_RANGE of the max in equal-width buckets, the rest in the
// last.
#define SAMPLER_N_BUCKETS    1024
#define SAMPLER_BUCKET_RANGE 32.0f

struct sampler {
    struct sampling_params p;         // p.logit_bias points at bias below
    struct sampling_logit_bias *bias; // [p.n_logit_bias]
    int n_vocab;
    struct ci_rng rng;
    float *work;       // [n_vocab] logits after bias and penalties
    int32_t *counts;   // [n_vocab] occurrence counts; all zero between calls
    struct cand *cand; // [n_vocab] candidate set
    double bucket_mass[SAMPLER_N_BUCKETS];
    int32_t bucket_count[SAMPLER_N_BUCKETS];
};

struct sampling_params sampling_params_default(void) {
    struct sampling_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repetition_penalty = 1.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = SAMPLING_DEFAULT_SEED,
        .logit_bias = NULL,
        .n_logit_bias = 0,
    };
    return p;
}

enum ci_status sampling_params_validate(const struct sampling_params *p, int n_vocab, struct ci_err *err) {
    if (n_vocab <= 0)
        return ci_err_set(err, CI_ERR_INVALID, "sampler: n_vocab %d must be positive", n_vocab);
    if (!isfinite(p->temperature))
        return ci_err_set(err, CI_ERR_INVALID, "temperature must be a finite number");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return ci_err_set(err, CI_ERR_INVALID, "top_p %g is outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ci_err_set(err, CI_ERR_INVALID, "min_p %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return ci_err_set(err, CI_ERR_INVALID, "repetition_penalty %g must be positive and finite",
                          (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return ci_err_set(err, CI_ERR_INVALID, "presence_penalty must be a finite number");
    if (!isfinite(p->frequency_penalty))
        return ci_err_set(err, CI_ERR_INVALID, "frequency_penalty must be a finite number");
    if (p->penalty_last_n < -1)
        return ci_err_set(err, CI_ERR_INVALID, "penalty_last_n %d must be >= -1", p->penalty_last_n);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return ci_err_set(err, CI_ERR_INVALID, "logit_bias: bad array (%d entries)", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const struct sampling_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return ci_err_set(err, CI_ERR_INVALID, "logit_bias: token %d is outside the vocabulary [0, %d)",
                              (int)b->token, n_vocab);
        if (isnan(b->bias) || b->bias == INFINITY)
            return ci_err_set(err, CI_ERR_INVALID, "logit_bias: token %d: bias must be a number or -inf",
                              (int)b->token);
    }
    return CI_OK;
}

enum ci_status sampler_create(const struct sampling_params *p, int n_vocab, struct sampler **out,
                              struct ci_err *err) {
    struct sampler *s = NULL;
    enum ci_status st = sampling_params_validate(p, n_vocab, err);
    *out = NULL;
    if (st != CI_OK)
        goto fail;
    s = ci_calloc(1, sizeof *s);
    if (!s) {
        st = ci_err_set(err, CI_ERR_NOMEM, "sampler: out of memory");
        goto fail;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->work = ci_malloc((size_t)n_vocab * sizeof *s->work);
    s->counts = ci_calloc((size_t)n_vocab, sizeof *s->counts);
    s->cand = ci_malloc((size_t)n_vocab * sizeof *s->cand);
    if (p->n_logit_bias > 0) {
        s->bias = ci_malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (s->bias)
            memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    if (!s->work || !s->counts || !s->cand || (p->n_logit_bias > 0 && !s->bias)) {
        st = ci_err_set(err, CI_ERR_NOMEM, "sampler: out of memory for the workspace of %d tokens", n_vocab);
        goto fail;
    }
    s->p.logit_bias = s->bias;
    ci_rng_seed(&s->rng, p->seed);
    *out = s;
    return CI_OK;
fail:
    sampler_free(s);
    return st;
}

void sampler_free(struct sampler *s) {
    if (!s)
        return;
    ci_free(s->work);
    ci_free(s->counts);
    ci_free(s->cand);
    ci_free(s->bias);
    ci_free(s);
}

void sampler_reset(struct sampler *s, uint64_t seed) {
    s->p.seed = seed;
    ci_rng_seed(&s->rng, seed);
}

void sampler_apply_penalties(struct sampler *s, float *logits, int n_vocab, const int32_t *history,
                             int n_history) {
    const struct sampling_params *p = &s->p;
    CI_ASSERT(n_vocab == s->n_vocab);
    for (int i = 0; i < p->n_logit_bias; i++)
        logits[p->logit_bias[i].token] += p->logit_bias[i].bias;
    bool active =
        p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!active || p->penalty_last_n == 0 || n_history <= 0)
        return;
    int n = p->penalty_last_n < 0 || p->penalty_last_n > n_history ? n_history : p->penalty_last_n;
    const int32_t *win = history + (n_history - n);
    for (int i = 0; i < n; i++)
        if (win[i] >= 0 && win[i] < n_vocab)
            s->counts[win[i]]++;
    // Second pass applies each distinct token once and zeroes its count, leaving counts clean for next time.
    for (int i = 0; i < n; i++) {
        int32_t t = win[i];
        if (t < 0 || t >= n_vocab || s->counts[t] == 0)
            continue;
        int c = s->counts[t];
        s->counts[t] = 0;
        float x = logits[t];
        x = x > 0.0f ? x / p->repetition_penalty : x * p->repetition_penalty;
        x -= (float)c * p->frequency_penalty + p->presence_penalty;
        logits[t] = x;
    }
}

// Strict total order: larger logit first, then lower id (keeps every selection deterministic).
static bool better(const struct cand *a, const struct cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

// Sift down in a heap whose root is the *worst* element (so the kept set's weakest member is at h[0]).
static void sift_down(struct cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l]))
            w = l;
        if (r < n && better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        struct cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the k best of c[0..n) to c[0..k) in descending order; the rest stay in c[k..n) in some order.
 * O(n log k), no allocation: the array stays a permutation of its input. */
static void select_top(struct cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--)
        sift_down(c, k, i);
    for (int i = k; i < n; i++) {
        if (better(&c[i], &c[0])) {
            struct cand t = c[0];
            c[0] = c[i];
            c[i] = t;
            sift_down(c, k, 0);
        }
    }
    // Heapsort: the worst goes to the end each round, leaving c[0..k) best first.
    for (int m = k - 1; m > 0; m--) {
        struct cand t = c[0];
        c[0] = c[m];
        c[m] = t;
        sift_down(c, m, 0);
    }
}

static int bucket_of(float logit, float max) {
    float d = (max - logit) * ((float)SAMPLER_N_BUCKETS / SAMPLER_BUCKET_RANGE);
    return d < (float)(SAMPLER_N_BUCKETS - 1) ? (int)d : SAMPLER_N_BUCKETS - 1;
}

/* Top-p on a descending c[0..n): the length of the shortest prefix whose mass reaches top_p of the total. */
static int nucleus_sorted(const struct cand *c, int n, float max, float top_p) {
    double z = 0.0, cum = 0.0;
    for (int i = 0; i < n; i++)
        z += (double)expf(c[i].logit - max);
    double target = (double)top_p * z;
    for (int i = 0; i < n; i++) {
        cum += (double)expf(c[i].logit - max);
        if (cum >= target)
            return i + 1;
    }
    return n; // rounding kept the sum just short of the target: keep everything
}

/* Top-p on an unsorted c[0..n) without sorting it: bucket the logits by distance below the max, find the
 * bucket where the cumulative mass crosses the target, move every token of the buckets above it to the front
 * and sort only the crossing bucket.  Returns the kept count; c[0..count) is the same set as the shortest
 * descending prefix (the buckets are ordered by logit, and ties share a bucket).  O(n) plus one bucket's
 * sort, where sorting everything would cost ~75 ms per token for a flat 150k-token distribution. */
static int nucleus_buckets(struct sampler *s, struct cand *c, int n, float max, float top_p) {
    double *mass = s->bucket_mass, z = 0.0;
    int32_t *count = s->bucket_count;
    memset(mass, 0, sizeof s->bucket_mass);
    memset(count, 0, sizeof s->bucket_count);
    for (int i = 0; i < n; i++) {
        int b = bucket_of(c[i].logit, max);
        double w = (double)expf(c[i].logit - max);
        mass[b] += w;
        count[b]++;
        z += w;
    }
    double target = (double)top_p * z, cum = 0.0;
    int k = 0;
    while (k < SAMPLER_N_BUCKETS && cum + mass[k] < target)
        cum += mass[k++];
    if (k == SAMPLER_N_BUCKETS)
        return n; // rounding
    int j = 0;
    for (int i = 0; i < n; i++)
        if (bucket_of(c[i].logit, max) < k) {
            struct cand t = c[i];
            c[i] = c[j];
            c[j++] = t;
        }
    int m = j;
    for (int i = j; i < n; i++)
        if (bucket_of(c[i].logit, max) == k) {
            struct cand t = c[i];
            c[i] = c[m];
            c[m++] = t;
        }
    select_top(c + j, m - j, m - j);
    for (int i = j; i < m; i++) {
        cum += (double)expf(c[i].logit - max);
        if (cum >= target)
            return i + 1;
    }
    return m;
}

/* The pipeline of sampler.h; with draft >= 0 the speculative verification of sampler_sample_draft. */
static int32_t sample_impl(struct sampler *s, const float *logits, int n_vocab, const int32_t *history,
                           int n_history, int32_t draft) {
    const struct sampling_params *p = &s->p;
    CI_ASSERT(n_vocab == s->n_vocab);
    float *x = s->work;
    memcpy(x, logits, (size_t)n_vocab * sizeof *x);
    sampler_apply_penalties(s, x, n_vocab, history, n_history);
    // A broken row must still give a valid id: NaN never wins, +inf would turn the softmax into NaN.
    for (int i = 0; i < n_vocab; i++) {
        if (isnan(x[i]))
            x[i] = -INFINITY;
        else if (x[i] == INFINITY)
            x[i] = FLT_MAX;
    }

    int best = ci_argmax(x, n_vocab);
    float max = x[best];
    // A temperature so small that 1/t overflows is greedy in the limit (and would give NaN weights).
    if (p->temperature <= 0.0f || 1.0f / p->temperature == INFINITY || max == -INFINITY)
        return best;

    struct cand *c = s->cand;
    int n = n_vocab;
    bool sorted = false;
    for (int i = 0; i < n; i++) {
        c[i].logit = x[i];
        c[i].id = i;
    }
    if (p->top_k > 0 && p->top_k < n) {
        select_top(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }
    if (p->top_p < 1.0f)
        n = sorted ? nucleus_sorted(c, n, max, p->top_p) : nucleus_buckets(s, c, n, max, p->top_p);
    if (p->min_p > 0.0f) {
        // Relative to the max probability, so unaffected by what top-k / top-p removed (they keep the max).
        float thresh = max + logf(p->min_p);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit >= thresh)
                c[m++] = c[i];
        n = m;
    }
    CI_ASSERT(n >= 1);

    float inv_t = 1.0f / p->temperature;
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        // Reuse the slot for the unnormalized probability; sum the stored floats so the draw walks exactly
        // the mass it was scaled by.
        c[i].logit = expf((c[i].logit - max) * inv_t);
        total += (double)c[i].logit;
    }
    if (draft >= 0) {
        // Speculative sampling with a one-hot draft: accept it with probability p(draft), else draw from the
        // residual max(0, p - onehot(draft)) normalized, i.e. p without the draft.  The mix is exactly p.
        double w = 0.0;
        for (int i = 0; i < n; i++)
            if (c[i].id == draft)
                w = (double)c[i].logit;
        if (ci_rng_f64(&s->rng) * total < w)
            return draft;
        total -= w;
        if (!(total > 0.0))
            return draft; // p(draft) == 1 up to rounding
    }
    double u = ci_rng_f64(&s->rng) * total, cum = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].logit <= 0.0f || c[i].id == draft)
            continue;
        last = i;
        cum += (double)c[i].logit;
        if (cum > u)
            return c[i].id;
    }
    return last >= 0    ? c[last].id
           : draft >= 0 ? draft
                        : c[0].id; // u landed in the rounding gap at the very top
}

int32_t sampler_sample(struct sampler *s, const float *logits, int n_vocab, const int32_t *history,
                       int n_history) {
    return sample_impl(s, logits, n_vocab, history, n_history, -1);
}

int32_t sampler_sample_draft(struct sampler *s, const float *logits, int n_vocab, const int32_t *history,
                             int n_history, int32_t draft) {
    CI_ASSERT(draft >= 0 && draft < n_vocab);
    return sample_impl(s, logits, n_vocab, history, n_history, draft);
}
