/* Speculative decoding (engine/spec.h, sampler_sample_draft, the engine's verification and KV rollback).
 *
 * Greedy: with speculation the tokens are exactly the plain decode's (the reference is the single-request
 * generate() path, no engine), for the n-gram proposer, the draft-model proposer (a Q4_0 quantization of the
 * model, made here with quantize_model) and an oracle proposer that proposes the reference continuation with
 * a wrong token planted every few positions (so acceptance, rejection and the bonus token all happen), under
 * every policy, block sizes 1/16/contiguous, a prefix-cache hit, preemption
 * in a tiny KV pool, n > 1, an f16 KV cache, stop strings, max_tokens and EOS inside accepted drafts (EOS
 * biased up so that samples end on it; the oracle proposes it followed by tokens that must never appear), on
 * stories260K (a real trained model, 512 tokens).
 *
 * Sampling: sampler_sample_draft's output is distributed as the softmax of the logits (computed here in
 * double, chi-square over 40000 seeded draws) whatever the draft; and through the engine, the first tokens
 * of 2048 seeded samples at temperature 1 with drafts (the plain run's most frequent continuation) follow
 * the same distribution as 2048 without (two-sample chi-square), and so do those of the draft-model proposer. */
#include "test_util.h"

#include <math.h>

#include "core/check.h"
#include "core/queue.h"
#include "core/rng.h"
#include "format/gguf.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "engine/spec.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/quantize_model.h"
#include "tokenizer/tokenizer.h"

#include <unistd.h>

#define N_REQ   6
#define MAX_OUT 80

static struct model *model;
static struct model *draft; // stories260K quantized to Q4_0: a draft that mostly agrees with the model
static struct tokenizer *tok;

struct req_spec {
    int32_t prompt[64];
    int n_prompt;
    int max_tokens;
};
static struct req_spec reqs[N_REQ];
static int32_t want[N_REQ][MAX_OUT];
static int n_want[N_REQ];

/* "Once upon a time, there was a little girl named Lily." (the MANIFEST's greedy vector) and variations:
 * stories repeat names and phrases, so prompt lookup finds drafts. */
static const int32_t story[] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295};

static void make_requests(void) {
    struct ci_rng rng;
    ci_rng_seed(&rng, 5);
    for (int r = 0; r < N_REQ; r++) {
        struct req_spec *q = &reqs[r];
        int n = 1 + (r * 5) % 29;
        memcpy(q->prompt, story, sizeof(int32_t) * (size_t)n);
        if (r == 5) { // a prompt that repeats itself (copy-like), longer than a block
            for (int i = 0; i < 20; i++)
                q->prompt[n + i] = story[1 + i % 12];
            n += 20;
        }
        if (r == 4) // a random tail
            for (int i = 0; i < 8; i++)
                q->prompt[n++] = 3 + (int32_t)(ci_rng_u64(&rng) % 500);
        q->n_prompt = n;
        q->max_tokens = 30 + (int)(ci_rng_u64(&rng) % (MAX_OUT - 30));
    }
}

struct collect {
    int32_t *out;
    int n;
};

static bool collect_token(void *user, int32_t token, bool is_stop) {
    struct collect *c = user;
    (void)is_stop;
    c->out[c->n++] = token;
    return true;
}

static void make_reference(void) {
    for (int r = 0; r < N_REQ; r++) {
        struct gen_params gp = gen_params_default();
        gp.n_threads = 1;
        gp.max_tokens = reqs[r].max_tokens;
        gp.sampling.temperature = 0;
        gp.ignore_eos = true;
        struct collect c = {want[r], 0};
        struct gen_metrics mt;
        struct ci_err err = {0};
        CI_ASSERT(generate(model, reqs[r].prompt, reqs[r].n_prompt, &gp, collect_token, &c, &mt, &err) ==
                  CI_OK);
        n_want[r] = c.n;
    }
}

/* ---- the n-gram proposer against a direct reading of its definition ----------------------------------- */

static int ref_ngram(const int32_t *t, int n, int n_max, int k, int32_t *out) {
    for (int m = n_max; m >= 1; m--) {
        if (m > n - 1)
            continue;
        int best = -1; // latest start i of an earlier occurrence of the last m tokens
        for (int i = 0; i + m <= n - 1; i++) {
            bool eq = true;
            for (int j = 0; j < m; j++)
                eq = eq && t[i + j] == t[n - m + j];
            if (eq)
                best = i;
        }
        if (best >= 0) {
            int got = 0;
            for (int j = best + m; j < n && got < k; j++)
                out[got++] = t[j];
            return got;
        }
    }
    return 0;
}

TEST(ngram_proposals) {
    int32_t a[] = {5, 6, 7, 8, 5, 6, 9, 5, 6};
    int32_t out[8];
    // Last 2 tokens "5 6": latest earlier occurrence at 4 -> continues "9 5 6"
    ASSERT_EQ_I64(spec_ngram_propose(a, 9, 3, 4, out), 3);
    CHECK(out[0] == 9 && out[1] == 5 && out[2] == 6);
    ASSERT_EQ_I64(spec_ngram_propose(a, 9, 3, 1, out), 1);
    int32_t b[] = {1, 2, 3};
    ASSERT_EQ_I64(spec_ngram_propose(b, 3, 3, 4, out), 0);
    struct ci_rng rng;
    ci_rng_seed(&rng, 3);
    for (int it = 0; it < 3000; it++) {
        int32_t t[64], o1[8], o2[8];
        int n = 1 + (int)(ci_rng_u64(&rng) % 64), alpha = 2 + (int)(ci_rng_u64(&rng) % 5);
        for (int i = 0; i < n; i++)
            t[i] = (int32_t)(ci_rng_u64(&rng) % (uint64_t)alpha);
        int nm = 1 + (int)(ci_rng_u64(&rng) % 4), k = 1 + (int)(ci_rng_u64(&rng) % 8);
        int g1 = spec_ngram_propose(t, n, nm, k, o1), g2 = ref_ngram(t, n, nm, k, o2);
        if (g1 != g2 || memcmp(o1, o2, sizeof(int32_t) * (size_t)g1)) {
            TEST_FAILF("n=%d n_max=%d k=%d: %d drafts, reference %d", n, nm, k, g1, g2);
            return;
        }
    }
    CHECK(spec_adapt_k(4, 4, 4, 1, 8) == 6 && spec_adapt_k(7, 3, 3, 1, 8) == 8);
    CHECK(spec_adapt_k(4, 4, 2, 1, 8) == 3 && spec_adapt_k(1, 2, 0, 1, 8) == 1);
    // Backoff, from its definition: 4 misses in a row, then pauses of 2, 4, 8, ... capped at 64 steps; a
    // verification without drafts changes nothing, one accepted draft starts over.
    int misses = 0, pauses[12];
    for (int i = 0; i < 12; i++)
        pauses[i] = spec_backoff(&misses, 3, 0);
    static const int want_p[12] = {0, 0, 0, 2, 4, 8, 16, 32, 64, 64, 64, 64};
    CHECK(memcmp(pauses, want_p, sizeof want_p) == 0);
    CHECK(spec_backoff(&misses, 0, 0) == 0 && spec_backoff(&misses, 2, 0) == 64);
    CHECK(spec_backoff(&misses, 2, 1) == 0 && misses == 0 && spec_backoff(&misses, 2, 0) == 0 && misses == 1);
    misses = 0;
    for (int i = 0; i < 1000; i++) // a very long losing streak stays bounded
        CHECK(spec_backoff(&misses, 1, 0) <= 64 && misses <= 64);
}

/* ---- greedy: identical tokens -------------------------------------------------------------------------- */

/* The oracle: the reference continuation, with a wrong token wherever (output index) % 4 == 2. */
static struct engine_request *oracle_handles[N_REQ];
static float eos_bias; // > 0: EOS counts (not ignored) and gets this logit bias, so samples end on it
static int want_finish[N_REQ];
static int oracle_first;
static int oracle_wrong_until;  // > 0: proposals for outputs below it are wrong (a losing streak), then right
static int oracle_streak_calls; // proposals asked for inside that streak
static int oracle(void *ctx, const struct engine_request *r, int sample, const int32_t *tokens, int n_tokens,
                  int k, int32_t *out) {
    (void)ctx;
    (void)sample;
    (void)tokens;
    int q = -1;
    for (int i = 0; i < N_REQ; i++)
        if (oracle_handles[i] == r)
            q = i;
    if (q < 0)
        return 0;
    int n_out = n_tokens - reqs[q].n_prompt, got = 0;
    oracle_streak_calls += n_out < oracle_wrong_until;
    for (int j = n_out; j < n_want[q] && got < k; j++)
        out[got++] = (j % 4 == 2 && eos_bias <= 0 && !oracle_wrong_until) || j < oracle_wrong_until
                         ? (want[q][j] + 1) % 512
                         : want[q][j];
    // Ending on EOS (not streamed, so not in want): propose it, and tokens after it that must never appear.
    for (int j = 0; eos_bias > 0 && want_finish[q] == ENGINE_FINISH_STOP && got < k; j++)
        out[got++] = j == 0 ? tokenizer_eos(tok) : want[q][0];
    return got;
}

static bool drain(struct ci_channel *ch, int32_t *out, int *n, int *finish) {
    struct ci_event ev;
    while (ci_channel_recv(ch, &ev, 0) == CI_OK) {
        if (ev.kind == CI_EVENT_TOKEN && !(ev.flags & CI_EVENT_F_CONT) && *n < MAX_OUT + 8)
            out[(*n)++] = ev.token;
        if (ev.kind == CI_EVENT_DONE || ev.kind == CI_EVENT_ERROR) {
            *finish = ev.finish;
            return true;
        }
    }
    return false;
}

struct run_stats {
    int64_t preemptions, prefix_hits, drafts, accepted, dec_steps, dec_emitted;
};

enum proposer { PROP_NGRAM, PROP_ORACLE, PROP_DRAFT, PROP_NONE };
static bool recording; // run_and_check records the outputs as the reference instead of comparing

/* run_and_check's step hook: counts steps that verified drafts, and those that did so with more decoding
 * sequences than the engine's spec_max_batch allows; and the draft model's positions, in prefill steps and
 * at most in one step. */
struct batch_watch {
    int max_batch;
    int spec_steps, over_limit;
    int draft_in_prefill, draft_max;
};
static struct batch_watch *watch;

static void watch_step(void *ctx, const struct step_metrics *m) {
    struct batch_watch *w = ctx;
    w->spec_steps += m->n_draft_tokens > 0;
    w->over_limit += m->n_draft_tokens > 0 && m->n_decode_seqs > w->max_batch;
    if (m->n_prefill_tokens > 0)
        w->draft_in_prefill += m->n_draft_model_tokens;
    w->draft_max = m->n_draft_model_tokens > w->draft_max ? m->n_draft_model_tokens : w->draft_max;
}
static const char *const prop_names[] = {"ngram", "oracle", "draft"};

static bool run_and_check(const char *label, struct engine_params p, enum proposer prop, int first, int count,
                          int stagger, int n_samples, struct run_stats *stats) {
    p.check_invariants = true;
    p.spec = prop == PROP_DRAFT  ? ENGINE_SPEC_DRAFT
             : prop == PROP_NONE ? ENGINE_SPEC_NONE
                                 : ENGINE_SPEC_NGRAM;
    p.draft = draft;
    struct engine *e = NULL;
    struct ci_err err = {0};
    if (engine_create(model, tok, &p, &e, &err) != CI_OK) {
        TEST_FAILF("%s: engine_create: %s", label, err.msg);
        return false;
    }
    if (prop == PROP_ORACLE)
        engine_set_proposer(e, oracle, NULL);
    if (watch)
        engine_set_step_hook(e, watch_step, watch);
    memset(oracle_handles, 0, sizeof oracle_handles);
    oracle_first = first;
    struct engine_request *h[N_REQ] = {0};
    static int32_t got[N_REQ][4][MAX_OUT + 8];
    int n_got[N_REQ][4] = {{0}}, finish[N_REQ][4] = {{0}};
    bool done[N_REQ][4] = {{0}}, ok = true;
    int submitted = 0, steps = 0;
    for (int guard = 0; guard < 100000; guard++) {
        while (submitted < count && (submitted == 0 || steps >= stagger * submitted)) {
            int r = first + submitted;
            struct engine_request_params rp = {0};
            rp.prompt = reqs[r].prompt;
            rp.n_prompt = reqs[r].n_prompt;
            rp.max_tokens = reqs[r].max_tokens;
            rp.n = n_samples;
            rp.sampling = sampling_params_default();
            rp.sampling.temperature = 0;
            rp.ignore_eos = eos_bias <= 0;
            struct sampling_logit_bias eb = {tokenizer_eos(tok), eos_bias};
            if (eos_bias > 0) {
                rp.sampling.logit_bias = &eb;
                rp.sampling.n_logit_bias = 1;
            }
            if (engine_submit(e, &rp, &h[r], &err) != CI_OK) {
                TEST_FAILF("%s: submit %d: %s", label, r, err.msg);
                ok = false;
                goto out;
            }
            oracle_handles[r] = h[r];
            submitted++;
        }
        engine_step(e);
        steps++;
        bool all = submitted == count;
        for (int i = 0; i < submitted; i++)
            for (int j = 0; j < n_samples; j++) {
                int r = first + i;
                if (!done[r][j])
                    done[r][j] =
                        drain(engine_request_channel(h[r], j), got[r][j], &n_got[r][j], &finish[r][j]);
                all = all && done[r][j];
            }
        if (all)
            break;
    }
    for (int i = 0; i < count; i++)
        for (int j = 0; j < n_samples; j++) {
            int r = first + i;
            if (recording && done[r][j] && n_got[r][j] <= MAX_OUT) {
                memcpy(want[r], got[r][j], sizeof(int32_t) * (size_t)n_got[r][j]);
                n_want[r] = n_got[r][j];
                want_finish[r] = finish[r][j];
            }
            int fin_want = eos_bias > 0 ? want_finish[r] : ENGINE_FINISH_LENGTH;
            if (!done[r][j] || finish[r][j] != fin_want || n_got[r][j] != n_want[r] ||
                memcmp(got[r][j], want[r], sizeof(int32_t) * (size_t)n_want[r]) != 0) {
                int at = 0;
                while (at < n_got[r][j] && at < n_want[r] && got[r][j][at] == want[r][at])
                    at++;
                TEST_FAILF("%s: request %d sample %d differs (done %d finish %d, %d of %d tokens, first "
                           "difference at %d)",
                           label, r, j, done[r][j], finish[r][j], n_got[r][j], n_want[r], at);
                ok = false;
            }
        }
    struct engine_totals t;
    engine_totals(e, &t);
    if (stats) {
        stats->preemptions = t.n_preemptions;
        stats->prefix_hits = t.prefix_hit_tokens;
        stats->drafts = t.spec_draft_tokens;
        stats->accepted = t.spec_accepted_tokens;
        stats->dec_steps = t.decode_seq_steps;
        stats->dec_emitted = t.decode_emitted;
    }
    CHECK(t.kv_blocks_used == 0);
out:
    for (int r = 0; r < N_REQ; r++)
        engine_request_release(h[r]);
    engine_free(e);
    return ok;
}

static struct engine_params base(void) {
    struct engine_params p = engine_params_default();
    p.n_threads = 1;
    p.sched.max_seqs = 16;
    p.sched.max_batch_tokens = 64;
    return p;
}

/* Speculation must have happened, with both outcomes, for the equality to mean anything. */
static void check_spec_happened(const char *label, const struct run_stats *st, int prop) {
    bool oracle_prop = prop == PROP_ORACLE;
    if (st->drafts == 0 || st->accepted == 0 ||
        ((oracle_prop || st->drafts > 200) && st->accepted == st->drafts))
        TEST_FAILF("%s: %lld drafts, %lld accepted", label, (long long)st->drafts, (long long)st->accepted);
    if (st->dec_emitted <= st->dec_steps)
        TEST_FAILF("%s: %lld tokens in %lld decode steps: no gain", label, (long long)st->dec_emitted,
                   (long long)st->dec_steps);
}

TEST(greedy_identical_across_policies) {
    const char *names[] = {"naive", "static", "continuous", "chunk-7", "unchunked", "budget-3"};
    for (int prop = 0; prop < 3; prop++)
        for (int v = 0; v < 6; v++) {
            struct engine_params p = base();
            p.sched.policy = v == 0   ? SCHED_POLICY_NAIVE
                             : v == 1 ? SCHED_POLICY_STATIC
                                      : SCHED_POLICY_CONTINUOUS;
            if (v == 3)
                p.sched.max_batch_tokens = 7;
            if (v == 4)
                p.sched.chunked_prefill = false;
            if (v == 5)
                p.sched.max_batch_tokens = 3; // drafts cut to the budget
            char label[64];
            snprintf(label, sizeof label, "%s-%s", prop_names[prop], names[v]);
            struct run_stats st;
            if (run_and_check(label, p, (enum proposer)prop, 0, N_REQ, 0, 1, &st))
                check_spec_happened(label, &st, prop);
            if (v == 2)
                printf("  %s: %lld of %lld drafts accepted, %.2f tokens per decode step\n", label,
                       (long long)st.accepted, (long long)st.drafts,
                       (double)st.dec_emitted / (double)st.dec_steps);
            snprintf(label, sizeof label, "%s-%s-alone", prop_names[prop], names[v]);
            run_and_check(label, p, (enum proposer)prop, 3, 1, 0, 1, NULL);
        }
}

TEST(greedy_identical_across_block_sizes) {
    int sizes[] = {1, 16, 0};
    for (int prop = 0; prop < 3; prop++)
        for (int i = 0; i < 3; i++) {
            struct engine_params p = base();
            p.block_size = sizes[i];
            p.contiguous_kv = sizes[i] == 0;
            p.spec_k = i == 0 ? 3 : 8;
            char label[48];
            snprintf(label, sizeof label, "%s-block-%d", prop_names[prop], sizes[i]);
            struct run_stats st;
            if (run_and_check(label, p, (enum proposer)prop, 0, N_REQ, 2, 1, &st))
                check_spec_happened(label, &st, prop);
        }
}

TEST(greedy_identical_with_f16_kv) {
    // generate() keeps f32 KV, so the reference here is the plain engine with f16 KV (q8_0 needs head_dim a
    // multiple of 32; stories260K's is 8).
    static int32_t saved[N_REQ][MAX_OUT];
    int n_saved[N_REQ];
    memcpy(saved, want, sizeof want);
    memcpy(n_saved, n_want, sizeof n_want);
    struct engine_params p = base();
    p.kv_type = CI_TYPE_F16;
    recording = true;
    bool ok = run_and_check("f16-plain", p, PROP_NONE, 0, N_REQ, 0, 1, NULL);
    recording = false;
    int differ = 0;
    for (int r = 0; r < N_REQ; r++)
        differ += n_want[r] != n_saved[r] || memcmp(want[r], saved[r], sizeof(int32_t) * (size_t)n_want[r]);
    printf("  f16 KV: %d of %d requests differ from the f32 reference\n", differ, N_REQ);
    for (int prop = 0; ok && prop < 3; prop++) {
        char label[48];
        snprintf(label, sizeof label, "%s-f16", prop_names[prop]);
        struct run_stats st;
        if (run_and_check(label, p, (enum proposer)prop, 0, N_REQ, 1, 1, &st))
            check_spec_happened(label, &st, prop);
    }
    memcpy(want, saved, sizeof want);
    memcpy(n_want, n_saved, sizeof n_want);
}

/* EOS inside a run of accepted drafts: with EOS biased up, the plain engine's samples end on it (the
 * reference, recorded); the oracle then proposes continuations that hold the EOS, and every proposer must end
 * each sample at the same token with the same finish. */
TEST(greedy_identical_ending_on_eos) {
    static int32_t saved[N_REQ][MAX_OUT];
    int n_saved[N_REQ];
    memcpy(saved, want, sizeof want);
    memcpy(n_saved, n_want, sizeof n_want);
    struct engine_params p = base();
    eos_bias = 20.0f; // EOS wins at a sentence end (stories260K)
    recording = true;
    bool ok = run_and_check("eos-plain", p, PROP_NONE, 0, N_REQ, 0, 1, NULL);
    recording = false;
    int stops = 0;
    for (int r = 0; r < N_REQ; r++)
        stops += want_finish[r] == ENGINE_FINISH_STOP && n_want[r] < reqs[r].max_tokens; // EOS: not streamed
    printf("  %d of %d reference samples end on EOS\n", stops, N_REQ);
    CHECK(stops >= N_REQ / 2);
    for (int prop = 0; ok && prop < 3; prop++) {
        char label[48];
        snprintf(label, sizeof label, "%s-eos", prop_names[prop]);
        run_and_check(label, p, (enum proposer)prop, 0, N_REQ, 1, 1, NULL);
    }
    eos_bias = 0;
    memcpy(want, saved, sizeof want);
    memcpy(n_want, n_saved, sizeof n_want);
}

TEST(greedy_identical_with_prefix_hits_and_preemption) {
    for (int prop = 0; prop < 3; prop++) {
        struct engine_params p = base();
        struct run_stats st;
        // Requests 1..5 share the story's opening: staggered, later ones hit the cache (block 4).
        p.block_size = 4;
        ASSERT(run_and_check("prefix", p, (enum proposer)prop, 1, 5, 30, 1, &st));
        CHECK(st.prefix_hits > 0);
        check_spec_happened("prefix", &st, prop);
        p.kv_blocks = 48; // 192 positions for 6 requests of up to ~130: preemption
        ASSERT(run_and_check("tiny-pool", p, (enum proposer)prop, 0, N_REQ, 0, 1, &st));
        CHECK(st.preemptions > 0);
        check_spec_happened("tiny-pool", &st, prop);
        p.sched.policy = SCHED_POLICY_STATIC;
        ASSERT(run_and_check("tiny-pool-static", p, (enum proposer)prop, 0, N_REQ, 0, 1, &st));
    }
}

/* --spec-max-batch: no step with more decoding sequences than the limit verifies drafts; the outputs stay the
 * same, and the requests still speculate once few enough are left. */
TEST(greedy_identical_with_spec_max_batch) {
    for (int prop = 0; prop < 3; prop++) {
        struct engine_params p = base();
        struct run_stats all, limited;
        ASSERT(run_and_check("unlimited", p, (enum proposer)prop, 0, N_REQ, 0, 1, &all));
        for (int max_batch = 1; max_batch <= 2; max_batch++) {
            struct batch_watch w = {.max_batch = max_batch};
            p.spec_max_batch = max_batch;
            watch = &w;
            bool ok = run_and_check("spec-max-batch", p, (enum proposer)prop, 0, N_REQ, 0, 1, &limited);
            watch = NULL;
            ASSERT(ok);
            if (w.over_limit != 0 || w.spec_steps == 0 || limited.drafts == 0 || limited.drafts >= all.drafts)
                TEST_FAILF("%s, at most %d decoding: %d steps with drafts, %d of them over the limit; %lld "
                           "drafts (unlimited: %lld)",
                           prop_names[prop], max_batch, w.spec_steps, w.over_limit, (long long)limited.drafts,
                           (long long)all.drafts);
        }
    }
    struct engine_params p = base();
    p.spec = ENGINE_SPEC_NGRAM;
    p.spec_max_batch = -1;
    struct engine *e = NULL;
    struct ci_err err = {0};
    CHECK(engine_create(model, tok, &p, &e, &err) == CI_ERR_INVALID && !e && strstr(err.msg, "batch limit"));
}

/* The draft model computes a prompt with the target's prefill, chunk by chunk: every prompt position in the
 * prefill steps, and no step runs more draft positions than a chunk or a proposal (the first decode step
 * once ran the whole prompt through the draft, stalling the batch). */
TEST(draft_follows_the_prompt) {
    const int r = 5, chunk = 7, k = 6; // request 5: the longest prompt (46 tokens), 7 prefill steps
    struct engine_params p = base();
    p.sched.max_batch_tokens = chunk;
    p.spec_k = k;
    struct batch_watch w = {.max_batch = 1};
    watch = &w;
    struct run_stats st;
    bool ok = run_and_check("draft-follows-prompt", p, PROP_DRAFT, r, 1, 0, 1, &st);
    watch = NULL;
    ASSERT(ok);
    check_spec_happened("draft-follows-prompt", &st, PROP_DRAFT);
    if (w.draft_in_prefill != reqs[r].n_prompt || w.draft_max > (chunk > k + 1 ? chunk : k + 1))
        TEST_FAILF(
            "the draft model ran %d positions in prefill steps (prompt: %d), at most %d in a step (chunk "
            "%d, k %d)",
            w.draft_in_prefill, reqs[r].n_prompt, w.draft_max, chunk, k);
}

TEST(greedy_identical_for_n_samples) {
    for (int prop = 0; prop < 3; prop++) {
        struct engine_params p = base();
        p.block_size = 4; // the samples share the prompt's last block, copied on write
        struct run_stats st;
        ASSERT(run_and_check(prop == 0   ? "ngram-n3"
                             : prop == 1 ? "oracle-n3"
                                         : "draft-n3",
                             p, (enum proposer)prop, 0, N_REQ, 1, 3, &st));
        check_spec_happened("n3", &st, prop);
    }
}

/* Text with a stop string: with drafts running past the stop, the sequence still ends at the same token. */
static void stop_run(bool spec, int max_tokens, char *text, size_t *len, int *fin, int *n_tok) {
    struct engine_params p = base();
    p.check_invariants = true;
    p.spec = spec ? ENGINE_SPEC_NGRAM : ENGINE_SPEC_NONE;
    struct engine *e = NULL;
    struct ci_err err = {0};
    CI_ASSERT(engine_create(model, tok, &p, &e, &err) == CI_OK);
    const char *stops[] = {"ball"};
    struct engine_request_params rp = {0};
    rp.prompt = story;
    rp.n_prompt = 13;
    rp.max_tokens = max_tokens;
    rp.n = 1;
    rp.sampling = sampling_params_default();
    rp.sampling.temperature = 0;
    rp.stop = stops;
    rp.n_stop = 1;
    rp.want_text = true;
    struct engine_request *h = NULL;
    CI_ASSERT(engine_submit(e, &rp, &h, &err) == CI_OK);
    *len = 0;
    *fin = -1;
    *n_tok = 0;
    for (int guard = 0; guard < 400 && *fin < 0; guard++) {
        engine_step(e);
        struct ci_event ev;
        while (ci_channel_recv(engine_request_channel(h, 0), &ev, 0) == CI_OK) {
            if (ev.kind == CI_EVENT_TOKEN || ev.kind == CI_EVENT_TEXT) {
                *n_tok += ev.kind == CI_EVENT_TOKEN;
                memcpy(text + *len, ev.text, ev.n_text);
                *len += ev.n_text;
            } else {
                *fin = ev.finish;
            }
        }
    }
    text[*len] = 0;
    engine_request_release(h);
    engine_free(e);
}

TEST(stop_strings_and_max_tokens) {
    char a[4096], b[4096];
    size_t la, lb;
    int fa, fb, na, nb;
    stop_run(false, 200, a, &la, &fa, &na);
    stop_run(true, 200, b, &lb, &fb, &nb);
    CHECK(fa == ENGINE_FINISH_STOP && fb == ENGINE_FINISH_STOP);
    CHECK(strstr(a, "ball") == NULL && la > 20);
    if (la != lb || strcmp(a, b) || na != nb)
        TEST_FAILF("stop: plain '%s' (%d tokens) vs speculative '%s' (%d tokens)", a, na, b, nb);
    // max_tokens inside a run of accepted drafts: exactly that many tokens
    for (int m = 1; m <= 12; m++) {
        stop_run(false, m, a, &la, &fa, &na);
        stop_run(true, m, b, &lb, &fb, &nb);
        if (na != m || nb != m || strcmp(a, b) || fa != fb)
            TEST_FAILF("max_tokens %d: plain %d tokens '%s' (finish %d), speculative %d '%s' (finish %d)", m,
                       na, a, fa, nb, b, fb);
    }
}

/* ---- sampling: the target distribution is kept -------------------------------------------------------- */

/* Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty). */
static double chi2_crit(int df) {
    double z = 3.090, a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3);
}

TEST(sampler_draft_keeps_the_distribution) {
    enum { V = 12, N = 40000 };
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = (float)(0.3 * i - 0.02 * i * i + (i % 3 == 0 ? 0.8 : 0.0));
    double p[V], z = 0;
    for (int i = 0; i < V; i++)
        z += p[i] = exp((double)logits[i]);
    for (int i = 0; i < V; i++)
        p[i] /= z;
    int drafts[] = {0, 6, 11, 3};
    for (int d = 0; d < 4; d++) {
        struct sampling_params sp = sampling_params_default();
        sp.temperature = 1.0f;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.min_p = 0.0f;
        sp.seed = 1000 + (uint64_t)d;
        struct sampler *s = NULL;
        struct ci_err err = {0};
        ASSERT_STATUS(sampler_create(&sp, V, &s, &err), CI_OK);
        int count[V] = {0};
        for (int i = 0; i < N; i++) {
            int32_t t = sampler_sample_draft(s, logits, V, NULL, 0, drafts[d]);
            ASSERT(t >= 0 && t < V);
            count[t]++;
        }
        double chi = 0;
        for (int i = 0; i < V; i++)
            chi += (count[i] - N * p[i]) * (count[i] - N * p[i]) / (N * p[i]);
        if (chi > chi2_crit(V - 1))
            TEST_FAILF("draft %d: chi-square %.1f > %.1f (p(draft) %.3f, observed %.3f)", drafts[d], chi,
                       chi2_crit(V - 1), p[drafts[d]], (double)count[drafts[d]] / N);
        sampler_free(s);
    }
    // top-k 3: a draft outside the kept set is never accepted; inside, the kept distribution holds
    struct sampling_params sp = sampling_params_default();
    sp.temperature = 1.0f;
    sp.top_k = 3;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    struct sampler *s = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(sampler_create(&sp, V, &s, &err), CI_OK);
    for (int i = 0; i < 2000; i++) {
        int32_t t = sampler_sample_draft(s, logits, V, NULL, 0, 11);
        if (t == 11) {
            TEST_FAILF("a draft outside top-k was accepted");
            break;
        }
    }
    // greedy: the argmax, whatever the draft
    sp.temperature = 0;
    sampler_free(s);
    ASSERT_STATUS(sampler_create(&sp, V, &s, &err), CI_OK);
    int best = 0;
    for (int i = 1; i < V; i++)
        best = logits[i] > logits[best] ? i : best;
    for (int d = 0; d < V; d++)
        ASSERT_EQ_I64(sampler_sample_draft(s, logits, V, NULL, 0, d), best);
    sampler_free(s);
}

/* Through the engine: 32 requests of 64 seeded samples at temperature 1 (plain softmax, or the default
 * top-k/top-p/min-p chain at 0.8), output tokens 1..3 (the first one is sampled from the prompt without
 * drafts).  Plain run first; the speculative run's proposer then proposes, after each output token, the plain
 * run's second most frequent next token (so drafts are accepted and rejected often) and so on. */
enum { S_REQ = 32, S_N = 64, S_T = 4 };
static int32_t mode_next[S_T][512]; // plain run: most frequent token at output index j+1 after token a at j
static int spec_prop(void *ctx, const struct engine_request *r, int sample, const int32_t *tokens,
                     int n_tokens, int k, int32_t *out) {
    (void)ctx;
    (void)r;
    (void)sample;
    int j = n_tokens - 5 - 1, got = 0; // output index of the last token (prompt of 5)
    int32_t last = tokens[n_tokens - 1];
    while (got < k && j >= 0 && j + 1 < S_T && mode_next[j][last] >= 0) {
        last = out[got++] = mode_next[j][last];
        j++;
    }
    return got;
}

static void sample_run(int spec, float temp, bool chain, int32_t (*outs)[S_T], int64_t *drafts,
                       int64_t *accepted) { // spec: 0 off, 1 the proposer above, 2 the draft model
    struct engine_params p = base();
    p.sched.max_seqs = S_N;
    p.sched.max_batch_tokens = 512;
    p.spec = spec == 2 ? ENGINE_SPEC_DRAFT : spec ? ENGINE_SPEC_NGRAM : ENGINE_SPEC_NONE;
    p.draft = draft;
    struct engine *e = NULL;
    struct ci_err err = {0};
    CI_ASSERT(engine_create(model, tok, &p, &e, &err) == CI_OK);
    if (spec == 1)
        engine_set_proposer(e, spec_prop, NULL);
    for (int q = 0; q < S_REQ; q++) {
        struct engine_request_params rp = {0};
        rp.prompt = story;
        rp.n_prompt = 5;
        rp.max_tokens = S_T;
        rp.n = S_N;
        rp.sampling = sampling_params_default();
        rp.sampling.temperature = temp;
        if (!chain) {
            rp.sampling.top_k = 0;
            rp.sampling.top_p = 1.0f;
            rp.sampling.min_p = 0.0f;
        }
        rp.sampling.seed = 777 + (uint64_t)q * S_N + (uint64_t)spec * 1000000;
        rp.ignore_eos = true;
        struct engine_request *h = NULL;
        CI_ASSERT(engine_submit(e, &rp, &h, &err) == CI_OK);
        int n[S_N] = {0}, fin[S_N];
        bool done[S_N] = {0};
        int32_t buf[S_N][MAX_OUT + 8];
        for (int guard = 0; guard < 1000; guard++) {
            engine_step(e);
            bool all = true;
            for (int i = 0; i < S_N; i++) {
                if (!done[i])
                    done[i] = drain(engine_request_channel(h, i), buf[i], &n[i], &fin[i]);
                all = all && done[i];
            }
            if (all)
                break;
        }
        for (int i = 0; i < S_N; i++) {
            CI_ASSERT(n[i] == S_T);
            memcpy(outs[q * S_N + i], buf[i], sizeof outs[0]);
        }
        engine_request_release(h);
    }
    struct engine_totals t;
    engine_totals(e, &t);
    *drafts = t.spec_draft_tokens;
    *accepted = t.spec_accepted_tokens;
    engine_free(e);
}

/* Two-sample chi-square on the categories (pairs of consecutive output tokens at j, j+1, keyed a*512+b)
 * seen at least 10 times in both runs together; the rest pooled. */
static void compare(const char *label, int32_t (*a)[S_T], int32_t (*b)[S_T], int j) {
    static int ca[512 * 512], cb[512 * 512];
    memset(ca, 0, sizeof ca);
    memset(cb, 0, sizeof cb);
    int total = S_REQ * S_N;
    for (int i = 0; i < total; i++) {
        int ka = j < 0 ? a[i][0] : a[i][j] * 512 + a[i][j + 1];
        int kb = j < 0 ? b[i][0] : b[i][j] * 512 + b[i][j + 1];
        ca[ka]++;
        cb[kb]++;
    }
    double chi = 0;
    int df = -1, ra = 0, rb = 0;
    for (int k = 0; k < 512 * 512; k++) {
        int s = ca[k] + cb[k];
        if (s == 0)
            continue;
        if (s < 10) {
            ra += ca[k];
            rb += cb[k];
            continue;
        }
        chi += (double)(ca[k] - cb[k]) * (ca[k] - cb[k]) / s;
        df++;
    }
    if (ra + rb > 0) {
        chi += (double)(ra - rb) * (ra - rb) / (ra + rb);
        df++;
    }
    if (df < 1 || chi > chi2_crit(df))
        TEST_FAILF("%s, output tokens %d,%d: chi-square %.1f with %d degrees of freedom (limit %.1f)", label,
                   j, j + 1, chi, df, df > 0 ? chi2_crit(df) : 0.0);
}

TEST(engine_sampling_keeps_the_distribution) {
    static int32_t plain[S_REQ * S_N][S_T], spec[S_REQ * S_N][S_T];
    for (int variant = 0; variant < 2; variant++) {
        float temp = variant ? 0.8f : 1.0f;
        bool chain = variant == 1;
        const char *label = variant ? "t=0.8 top-k/top-p/min-p" : "t=1 softmax";
        int64_t d, acc;
        sample_run(0, temp, chain, plain, &d, &acc);
        static int cnt[S_T][512][512];
        memset(cnt, 0, sizeof cnt);
        for (int i = 0; i < S_REQ * S_N; i++)
            for (int j = 0; j + 1 < S_T; j++)
                cnt[j][plain[i][j]][plain[i][j + 1]]++;
        for (int j = 0; j < S_T; j++)
            for (int a = 0; a < 512; a++) {
                // The second most frequent continuation where there is one (rejections are frequent and
                // the residual is drawn from), else the most frequent.
                int best = -1, second = -1;
                for (int b = 0; j + 1 < S_T && b < 512; b++) {
                    if (cnt[j][a][b] == 0)
                        continue;
                    if (best < 0 || cnt[j][a][b] > cnt[j][a][best]) {
                        second = best;
                        best = b;
                    } else if (second < 0 || cnt[j][a][b] > cnt[j][a][second]) {
                        second = b;
                    }
                }
                mode_next[j][a] = second >= 0 ? second : best;
            }
        sample_run(1, temp, chain, spec, &d, &acc);
        printf("  %s: %lld drafts, %lld accepted\n", label, (long long)d, (long long)acc);
        CHECK(d > 1000 && acc > d / 50 && acc < d / 2); // both outcomes, often
        for (int j = 0; j + 1 < S_T; j++)
            compare(label, plain, spec, j);
        sample_run(2, temp, chain, spec, &d, &acc);
        printf("  %s, draft model: %lld drafts, %lld accepted\n", label, (long long)d, (long long)acc);
        CHECK(d > 1000 && acc > 0 && acc < d);
        for (int j = 0; j + 1 < S_T; j++)
            compare(label, plain, spec, j);
    }
}

/* Backoff: a sequence whose proposals keep failing stops proposing for a while (spec_backoff) and its
 * output stays the plain decode's.  The oracle proposes only wrong tokens for the first 24 outputs, then the
 * reference: far fewer proposals are asked for inside the streak than there are decode steps, and most drafts
 * are accepted after it.  A draft model whose output norm is zeroed (every logit 0, so it always proposes
 * token 0, which the model never emits) pauses for up to 64 steps at a time, then catches up on the tokens it
 * skipped (its KV over long gaps, in several passes); its drafts are fewer than half the decode steps (without
 * the backoff every decode step brings at least one). */
static struct model *bad_draft_model(struct ci_err *err) {
    char in[1024], dpath[256];
    snprintf(dpath, sizeof dpath, "/tmp/cinfer-test-spec-bad-%d.gguf", (int)getpid());
    struct quantize_options qo = {1, true};
    struct quantize_report qr;
    struct model *m = NULL;
    if (quantize_model(test_model_path(in, sizeof in, "stories260K.gguf"), dpath, "Q4_0", &qo, &qr, err) !=
        CI_OK)
        return NULL;
    FILE *f = fopen(dpath, "r+b");
    uint8_t *buf = NULL;
    long size = 0;
    struct gguf *g = NULL;
    bool ok = f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
              (buf = malloc((size_t)size)) && fread(buf, 1, (size_t)size, f) == (size_t)size &&
              gguf_open_mem(buf, (uint64_t)size, &g, err) == CI_OK;
    int64_t ti = ok ? gguf_find_tensor(g, "output_norm.weight") : -1;
    if (ti >= 0) {
        const struct ci_tensor *t = gguf_tensor(g, ti);
        long off = (long)((const uint8_t *)t->data - buf);
        memset(buf + off, 0, t->nbytes);
        ok = fseek(f, off, SEEK_SET) == 0 && fwrite(buf + off, 1, t->nbytes, f) == t->nbytes;
    }
    ok = ok && ti >= 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    gguf_free(g);
    free(buf);
    if (ok && model_load(dpath, &m, err) != CI_OK)
        m = NULL;
    unlink(dpath);
    return ok ? m : NULL;
}

TEST(greedy_identical_through_backoff) {
    struct engine_params p = base();
    struct run_stats st;
    oracle_wrong_until = 24;
    oracle_streak_calls = 0;
    bool ok = run_and_check("oracle-streak", p, PROP_ORACLE, 0, N_REQ, 1, 1, &st);
    oracle_wrong_until = 0;
    printf("  oracle with a losing streak: %d proposals in %d streak steps, %lld of %lld drafts accepted\n",
           oracle_streak_calls, N_REQ * 23, (long long)st.accepted, (long long)st.drafts);
    if (ok && (oracle_streak_calls * 2 >= N_REQ * 23 || st.accepted * 2 < st.drafts))
        TEST_FAILF("oracle streak: %d proposals in %d decode steps, %lld accepted", oracle_streak_calls,
                   N_REQ * 23, (long long)st.accepted);

    struct ci_err err = {0};
    struct model *good = draft, *bad = bad_draft_model(&err);
    if (!bad) {
        TEST_FAILF("bad draft model: %s", err.msg);
        return;
    }
    draft = bad;
    for (int v = 0; v < 2; v++) {
        p = base();
        if (v == 1) {
            p.block_size = 1; // gaps span many blocks, and passes of 8 tokens
            p.sched.max_batch_tokens = 8;
        }
        const char *label = v ? "bad-draft-block-1" : "bad-draft";
        if (run_and_check(label, p, PROP_DRAFT, 0, N_REQ, 1, 1, &st)) {
            printf("  %s: %lld drafts (%lld accepted) in %lld decode steps\n", label, (long long)st.drafts,
                   (long long)st.accepted, (long long)st.dec_steps);
            if (st.drafts == 0 || st.accepted != 0 || st.drafts * 2 >= st.dec_steps)
                TEST_FAILF("%s: %lld drafts, %lld accepted in %lld decode steps", label, (long long)st.drafts,
                           (long long)st.accepted, (long long)st.dec_steps);
        }
    }
    draft = good;
    model_free(bad);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    struct ci_err err = {0};
    ci_kernels_init();
    if (!(model = test_load_model("stories260K.gguf")))
        return 1;
    char in[1024], dpath[256];
    snprintf(dpath, sizeof dpath, "/tmp/cinfer-test-spec-%d.gguf", (int)getpid());
    struct quantize_options qo = {1, true};
    struct quantize_report qr;
    if (quantize_model(test_model_path(in, sizeof in, "stories260K.gguf"), dpath, "Q4_0", &qo, &qr, &err) !=
            CI_OK ||
        model_load(dpath, &draft, &err) != CI_OK) {
        printf("FAIL setup: draft model: %s\n", err.msg);
        return 1;
    }
    unlink(dpath); // mapped: the file stays readable until the model is freed
    if (tokenizer_from_gguf(model->gguf, &tok, &err) != CI_OK) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    make_requests();
    make_reference();
    RUN(ngram_proposals);
    RUN(greedy_identical_across_policies);
    RUN(greedy_identical_across_block_sizes);
    RUN(greedy_identical_with_f16_kv);
    RUN(greedy_identical_ending_on_eos);
    RUN(greedy_identical_with_prefix_hits_and_preemption);
    RUN(greedy_identical_for_n_samples);
    RUN(draft_follows_the_prompt);
    RUN(greedy_identical_with_spec_max_batch);
    RUN(greedy_identical_through_backoff);
    RUN(stop_strings_and_max_tokens);
    RUN(sampler_draft_keeps_the_distribution);
    RUN(engine_sampling_keeps_the_distribution);
    tokenizer_free(tok);
    model_free(draft);
    model_free(model);
    return test_exit_code();
}
