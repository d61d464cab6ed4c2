/* The serving engine end to end (synchronous mode, real model): a request's greedy tokens are identical under
 * every policy (naive, static, continuous with chunk budgets 1, 7 and the whole prompt, chunking off), block
 * sizes 1/16/contiguous, with and without a prefix-cache hit, alone or among 8 other requests, and through
 * preemption in a tiny KV pool; the reference is the single-request generate() path.  Also: n > 1 samples,
 * cancellation, stop strings, rejection of requests that can never fit, and the engine thread. */
#include "test_util.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/mem.h"
#include "core/queue.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "engine/kv_budget.h"
#include "engine/generate.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

#define N_REQ   9
#define MAX_OUT 24

static struct model *model;
static struct tokenizer *tok;

struct req_spec {
    int32_t prompt[96];
    int n_prompt;
    int max_tokens;
};
static struct req_spec reqs[N_REQ];
static int32_t want[N_REQ][MAX_OUT]; // reference greedy tokens
static int n_want[N_REQ];

static void make_requests(void) {
    struct ci_rng rng;
    ci_rng_seed(&rng, 11);
    // Requests 0..2 share a 40-token prefix (prefix-cache hits); lengths straddle block boundaries.
    int32_t shared[40];
    shared[0] = 1;
    for (int i = 1; i < 40; i++)
        shared[i] = 3 + (int32_t)(ci_rng_u64(&rng) % 500);
    for (int r = 0; r < N_REQ; r++) {
        struct req_spec *q = &reqs[r];
        int n = 2 + (int)(ci_rng_u64(&rng) % 60);
        if (r < 3) {
            memcpy(q->prompt, shared, sizeof shared);
            n = 40 + r * 9; // 40, 49, 58
        } else {
            q->prompt[0] = 1;
        }
        for (int i = r < 3 ? 40 : 1; i < n; i++)
            q->prompt[i] = 3 + (int32_t)(ci_rng_u64(&rng) % 500);
        q->n_prompt = n;
        q->max_tokens = 8 + (int)(ci_rng_u64(&rng) % (MAX_OUT - 8));
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

/* Drains whatever events are ready on a channel into out; returns true once the stream has ended. */
static bool drain(struct ci_channel *ch, int32_t *out, int *n, int *finish) {
    struct ci_event ev;
    while (ci_channel_recv(ch, &ev, 0) == CI_OK) {
        if (ev.kind == CI_EVENT_TOKEN && !(ev.flags & CI_EVENT_F_CONT))
            out[(*n)++] = ev.token;
        if (ev.kind == CI_EVENT_DONE || ev.kind == CI_EVENT_ERROR) {
            *finish = ev.finish;
            return true;
        }
    }
    return false;
}

struct run_stats {
    int64_t steps, preemptions, prefix_hits, pad;
    int peak_blocks; // most KV blocks in use after any step
};

static int peak_blocks;
static void track_peak(void *ctx, const struct step_metrics *m) {
    (void)ctx;
    peak_blocks = m->kv_blocks_used > peak_blocks ? m->kv_blocks_used : peak_blocks;
}

/* Runs requests [first, first + count) (all submitted at once, or request 0 first and the others after
 * `stagger` steps) and checks each against the reference.  Returns false on a mismatch (after reporting). */
static bool run_and_check(const char *label, struct engine_params p, int first, int count, int stagger,
                          struct run_stats *stats) {
    p.check_invariants = true;
    struct engine *e = NULL;
    struct ci_err err = {0};
    if (engine_create(model, tok, &p, &e, &err) != CI_OK) {
        TEST_FAILF("%s: engine_create: %s", label, err.msg);
        return false;
    }
    peak_blocks = 0;
    engine_set_step_hook(e, track_peak, NULL);
    struct engine_request *handles[N_REQ] = {0};
    int32_t got[N_REQ][MAX_OUT];
    int n_got[N_REQ] = {0}, finish[N_REQ] = {0};
    bool done[N_REQ] = {0}, ok = true;
    int submitted = 0, steps = 0;
    for (int guard = 0; guard < 100000; guard++) {
        while (submitted < count && (submitted == 0 || steps >= stagger)) {
            int r = first + submitted;
            struct engine_request_params rp = {0};
            rp.prompt = reqs[r].prompt;
            rp.n_prompt = reqs[r].n_prompt;
            rp.max_tokens = reqs[r].max_tokens;
            rp.n = 1;
            rp.sampling = sampling_params_default();
            rp.sampling.temperature = 0;
            rp.ignore_eos = true;
            if (engine_submit(e, &rp, &handles[r], &err) != CI_OK) {
                TEST_FAILF("%s: submit %d: %s", label, r, err.msg);
                ok = false;
                goto done;
            }
            submitted++;
        }
        engine_step(e);
        steps++;
        bool all = submitted == count;
        for (int i = 0; i < submitted; i++) {
            int r = first + i;
            if (!done[r])
                done[r] = drain(engine_request_channel(handles[r], 0), got[r], &n_got[r], &finish[r]);
            all = all && done[r];
        }
        if (all)
            break;
    }
    for (int i = 0; i < count; i++) {
        int r = first + i;
        if (!done[r] || finish[r] != ENGINE_FINISH_LENGTH || n_got[r] != n_want[r] ||
            memcmp(got[r], want[r], sizeof(int32_t) * (size_t)n_want[r]) != 0) {
            TEST_FAILF("%s: request %d differs (done %d finish %d, %d of %d tokens)", label, r, done[r],
                       finish[r], n_got[r], n_want[r]);
            ok = false;
        }
    }
    struct engine_totals t;
    engine_totals(e, &t);
    if (stats) {
        stats->steps = t.n_steps;
        stats->preemptions = t.n_preemptions;
        stats->prefix_hits = t.prefix_hit_tokens;
        stats->pad = t.n_pad_tokens;
        stats->peak_blocks = peak_blocks;
    }
    CHECK(t.kv_blocks_used == 0); // every block back (cached ones parked, not used)
done:
    for (int r = 0; r < N_REQ; r++)
        engine_request_release(handles[r]);
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

TEST(policies_agree_alone) {
    const char *names[] = {"naive", "static", "continuous", "chunk-1", "chunk-7", "unchunked"};
    for (int v = 0; v < 6; v++) {
        struct engine_params p = base();
        p.sched.policy = v == 0 ? SCHED_POLICY_NAIVE : v == 1 ? SCHED_POLICY_STATIC : SCHED_POLICY_CONTINUOUS;
        if (v == 3)
            p.sched.max_batch_tokens = 1;
        if (v == 4)
            p.sched.max_batch_tokens = 7;
        if (v == 5)
            p.sched.chunked_prefill = false;
        for (int r = 0; r < N_REQ; r++)
            run_and_check(names[v], p, r, 1, 0, NULL);
    }
}

TEST(policies_agree_in_a_crowd) {
    for (int v = 0; v < 4; v++) {
        struct engine_params p = base();
        p.sched.policy = v == 0 ? SCHED_POLICY_NAIVE : v == 1 ? SCHED_POLICY_STATIC : SCHED_POLICY_CONTINUOUS;
        p.sched.chunked_prefill = v != 3;
        char label[64];
        snprintf(label, sizeof label, "crowd-%s%s", sched_policy_name(p.sched.policy),
                 v == 3 ? "-unchunked" : "");
        run_and_check(label, p, 0, N_REQ, 0, NULL);
        snprintf(label, sizeof label, "staggered-%s", sched_policy_name(p.sched.policy));
        run_and_check(label, p, 0, N_REQ, 3, NULL);
    }
}

TEST(block_sizes_agree) {
    int sizes[] = {1, 16, 0};
    for (int i = 0; i < 3; i++) {
        struct engine_params p = base();
        p.block_size = sizes[i];
        p.contiguous_kv = sizes[i] == 0;
        char label[32];
        snprintf(label, sizeof label, "block-%d", sizes[i]);
        run_and_check(label, p, 0, N_REQ, 2, NULL);
    }
}

TEST(prefix_cache_hits_agree) {
    struct engine_params p = base();
    struct run_stats st;
    // Requests 0..2 share a 40-token prefix: submitted one after another, the later ones hit the cache.
    ASSERT(run_and_check("prefix", p, 0, 3, 40, &st));
    CHECK(st.prefix_hits >= 2 * 32); // two full 16-token blocks, twice
    p.prefix_cache = false;
    ASSERT(run_and_check("no-prefix", p, 0, 3, 40, &st));
    CHECK(st.prefix_hits == 0);
}

TEST(preemption_in_a_tiny_pool) {
    struct engine_params p = base();
    p.block_size = 4;
    p.kv_blocks = 40; // 160 positions for 9 requests of up to 80: they cannot all run at once
    struct run_stats st;
    ASSERT(run_and_check("tiny-pool", p, 0, N_REQ, 0, &st));
    CHECK(st.preemptions > 0);
    p.sched.policy = SCHED_POLICY_STATIC;
    ASSERT(run_and_check("tiny-pool-static", p, 0, N_REQ, 0, &st));
}

TEST(static_batching_pads) {
    struct engine_params p = base();
    p.sched.policy = SCHED_POLICY_STATIC;
    p.sched.max_seqs = 4;
    struct run_stats st;
    ASSERT(run_and_check("static-4", p, 0, N_REQ, 0, &st));
    CHECK(st.pad > 0);
}

TEST(rejects_what_never_fits) {
    struct engine_params p = base();
    p.block_size = 4;
    p.kv_blocks = 8;
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    struct engine_request *h = NULL;
    struct engine_request_params rp = {0};
    rp.prompt = reqs[0].prompt;
    rp.n_prompt = 30;
    rp.max_tokens = 10; // 40 positions > 8 blocks of 4
    rp.n = 1;
    rp.sampling = sampling_params_default();
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_LIMIT && h == NULL);
    rp.max_tokens = 5000; // beyond the context
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_LIMIT && strstr(err.msg, "context") != NULL);
    rp.max_tokens = 0;
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_INVALID);
    rp.max_tokens = 1;
    int32_t bad = 100000;
    rp.prompt = &bad;
    rp.n_prompt = 1;
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_INVALID);
    engine_free(e);
}

/* Runs one request of each pooling for prompt 2 (58 tokens), after the 9 generation requests when crowd is
 * set, and copies the vectors out; returns how many times the embedding requests were preempted. */
static int embed_run(struct engine_params p, bool crowd, float (*out)[512]) {
    p.check_invariants = true;
    struct engine *e = NULL;
    struct ci_err err = {0};
    if (engine_create(model, tok, &p, &e, &err) != CI_OK) {
        TEST_FAILF("engine_create: %s", err.msg);
        return -1;
    }
    struct engine_request *h[N_REQ + 3] = {0};
    int n_h = 0;
    for (int r = 0; crowd && r < N_REQ; r++) {
        struct engine_request_params rp = {0};
        rp.prompt = reqs[r].prompt;
        rp.n_prompt = reqs[r].n_prompt;
        rp.max_tokens = reqs[r].max_tokens;
        rp.n = 1;
        rp.logprobs = -1;
        rp.sampling = sampling_params_default();
        CHECK(engine_submit(e, &rp, &h[n_h++], &err) == CI_OK);
    }
    int first_embed = n_h;
    for (int k = 0; k < 3; k++) {
        struct engine_request_params rp = {0};
        rp.prompt = reqs[2].prompt;
        rp.n_prompt = reqs[2].n_prompt;
        rp.n = 1;
        rp.logprobs = -1;
        rp.sampling = sampling_params_default();
        rp.pooling = (enum engine_pooling)(ENGINE_POOLING_MEAN + k);
        CHECK(engine_submit(e, &rp, &h[n_h++], &err) == CI_OK);
    }
    int32_t toks[MAX_OUT + 8];
    bool done[N_REQ + 3] = {0};
    for (int left = n_h, guard = 0; left > 0 && guard < 100000; guard++) {
        engine_step(e);
        for (int i = 0; i < n_h; i++) {
            int n = 0, finish = 0;
            if (!done[i] && drain(engine_request_channel(h[i], 0), toks, &n, &finish)) {
                done[i] = true;
                left--;
                CHECK(i < first_embed || (finish == ENGINE_FINISH_STOP && n == 0));
            }
        }
    }
    int preempted = 0;
    for (int k = 0; k < 3; k++) {
        int n = 0;
        const float *v = engine_request_embedding(h[first_embed + k], &n);
        CHECK(v != NULL && n == model->config.n_embd && n <= 512);
        if (v && n <= 512)
            memcpy(out[k], v, (size_t)n * sizeof *v);
        preempted += engine_request_metrics(h[first_embed + k], 0)->n_preempted;
    }
    for (int i = 0; i < n_h; i++)
        engine_request_release(h[i]);
    engine_free(e);
    return preempted;
}

/* Embedding requests: the same vector alone, in a crowd of generation requests in a pool too small for all
 * (preempted and recomputed: the mean's sum starts over), with a 7-token step budget, and with the prefix
 * cache warm.  The vector is the pooled final hidden states: checked against the numpy reference in
 * tests/ref/test_embeddings.py; here the engine's bookkeeping. */
static void embed_compare(const char *label, float (*alone)[512], float (*other)[512]) {
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < model->config.n_embd; i++)
            if (!(fabsf(alone[k][i] - other[k][i]) <= 1e-5f * (1 + fabsf(alone[k][i]))))
                FAIL_FIRST("%s: pooling %d, value %d: %g vs %g alone", label, k, i, (double)other[k][i],
                           (double)alone[k][i]);
}

TEST(embeddings_independent_of_batch_and_preemption) {
    static float alone[3][512], other[3][512];
    struct engine_params p = base();
    ASSERT(embed_run(p, false, alone) == 0);
    for (int k = 0; k < 3; k++) // the three poolings give three different vectors
        CHECK(memcmp(alone[k], alone[(k + 1) % 3], (size_t)model->config.n_embd * sizeof(float)) != 0);
    embed_run(p, true, other); // the same step budget: the same passes for the embeddings' tokens
    CHECK(memcmp(alone, other, sizeof alone) == 0);
    p.sched.max_batch_tokens = 7; // chunked: 9 steps for the 58 tokens, other pass shapes
    embed_run(p, true, other);
    embed_compare("chunked", alone, other);
    p.block_size = 4;
    p.kv_blocks = 40; // the decodes outgrow the pool and preempt the newest: the embeddings, mid-prompt
    CHECK(embed_run(p, true, other) > 0);
    embed_compare("preempted", alone, other);
    struct engine_request *h = NULL;
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    struct engine_request_params rp = {0};
    rp.prompt = reqs[0].prompt;
    rp.n_prompt = reqs[0].n_prompt;
    rp.n = 1;
    rp.logprobs = -1;
    rp.pooling = ENGINE_POOLING_LAST;
    rp.max_tokens = 1; // an embedding generates nothing
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_INVALID && h == NULL);
    rp.max_tokens = 0;
    rp.n = 2;
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_INVALID && h == NULL);
    rp.n = 1;
    rp.pooling = (enum engine_pooling)7;
    CHECK(engine_submit(e, &rp, &h, &err) == CI_ERR_INVALID && h == NULL);
    engine_free(e);
}

/* A model file claims a context of 16,777,216 tokens (a 1 MB file could make the engine allocate 20 GiB):
 * the pool stays within its budget (the default: half the available memory, here a pretended 1 GiB, minus
 * the weights; or an explicit --kv-mem) and the served context is clamped to what the pool holds. */
TEST(file_context_never_sizes_the_pool) {
    char path[512];
    test_tmp_path(path, sizeof path, "ctx.gguf");
    struct ci_err err = {0};
    ASSERT_STATUS(synth_write("tiny", CI_TYPE_F32, 1, path, &err), CI_OK);
    // Patch the u32 value of "llama.context_length" (key string, then the u32 type tag, then the value).
    FILE *f = fopen(path, "r+b");
    ASSERT(f);
    static char head[1 << 16];
    size_t n = fread(head, 1, sizeof head, f);
    const char *key = "llama.context_length";
    char *at = memmem(head, n, key, strlen(key));
    ASSERT(at && at + strlen(key) + 8 <= head + n);
    uint32_t huge = 1u << 24;
    ASSERT(fseek(f, (long)(at - head) + (long)strlen(key) + 4, SEEK_SET) == 0);
    ASSERT(fwrite(&huge, 4, 1, f) == 1);
    fclose(f);
    struct model *m = NULL;
    ASSERT_STATUS(model_load(path, &m, &err), CI_OK);
    CHECK(m->config.n_ctx_train == 1 << 24);
    ASSERT(setenv("CINFER_MEM_AVAILABLE", "1G", 1) == 0);
    for (int contiguous = 0; contiguous < 2; contiguous++) {
        struct engine_params p = base();
        p.contiguous_kv = contiguous;
        struct engine *e = NULL;
        ASSERT_STATUS(engine_create(m, NULL, &p, &e, &err), CI_OK);
        struct engine_info info;
        engine_info(e, &info);
        CHECK(info.kv_bytes <= (512ll << 20) - (int64_t)model_weight_bytes(m));
        CHECK(info.kv_sizing == KV_SIZED_MEMORY && info.mem_available == 1ll << 30);
        CHECK(info.n_ctx < 1 << 24 && info.n_ctx > 0);
        CHECK((int64_t)info.n_blocks * info.block_size >= info.n_ctx); // one whole-context sequence fits
        engine_free(e);
        p.kv_mem_bytes = 4 << 20; // an explicit budget holds too
        ASSERT_STATUS(engine_create(m, NULL, &p, &e, &err), CI_OK);
        engine_info(e, &info);
        CHECK(info.kv_bytes <= 4 << 20 && info.n_ctx > 0);
        engine_free(e);
    }
    unsetenv("CINFER_MEM_AVAILABLE");
    model_free(m);
    unlink(path);
}

/* The per-step estimate of bytes moved (CINFER_DEBUG=sched, cinfer bench) counts the KV cache in its own
 * element type: for the same request, the KV part of f16 is exactly half of f32's and q8_0's 34/128 of it
 * (it used to count 4 bytes an element whatever the type). */
struct kv_bytes_hook {
    double weight_bytes;
    double kv; // bytes - weights, summed over the steps
};
static void sum_kv_bytes(void *ctx, const struct step_metrics *m) {
    struct kv_bytes_hook *h = ctx;
    h->kv += m->bytes - h->weight_bytes * m->n_passes;
}

static double kv_bytes_of_one_request(uint32_t kv_type) {
    struct engine_params p = base();
    p.kv_type = kv_type;
    struct engine *e = NULL;
    struct ci_err err = {0};
    if (engine_create(model, tok, &p, &e, &err) != CI_OK) {
        TEST_FAILF("engine_create: %s", err.msg);
        return -1;
    }
    struct kv_bytes_hook h = {(double)model_weight_bytes(model), 0};
    engine_set_step_hook(e, sum_kv_bytes, &h);
    struct engine_request_params rp = {0};
    rp.prompt = reqs[3].prompt;
    rp.n_prompt = reqs[3].n_prompt;
    rp.max_tokens = 12;
    rp.n = 1;
    rp.sampling = sampling_params_default();
    rp.ignore_eos = true;
    struct engine_request *r = NULL;
    if (engine_submit(e, &rp, &r, &err) != CI_OK) {
        TEST_FAILF("submit: %s", err.msg);
        engine_free(e);
        return -1;
    }
    int32_t out[MAX_OUT];
    int n = 0, finish = 0;
    for (int guard = 0; guard < 1000 && !drain(engine_request_channel(r, 0), out, &n, &finish); guard++)
        engine_step(e);
    engine_request_release(r);
    engine_free(e);
    return n == 12 ? h.kv : -1;
}

TEST(step_bytes_count_the_kv_type) {
    double f32 = kv_bytes_of_one_request(CI_TYPE_F32), f16 = kv_bytes_of_one_request(CI_TYPE_F16);
    ASSERT(f32 > 0 && f16 > 0);
    CHECK(fabs(f16 / f32 - 0.5) < 1e-9);
    // stories260K's head_dim (8) is no multiple of q8_0's 32-element blocks: only f32 and f16 apply here.
}

/* Runs the requests to completion in one engine and collects every sample's tokens. */
static void run_all(struct engine *e, struct engine_request **h, int n_h, int32_t (*got)[MAX_OUT], int *n) {
    int fin[16] = {0}, n_streams = 0;
    bool done[16] = {0};
    for (int i = 0; i < n_h; i++)
        n_streams += engine_request_n(h[i]);
    for (int guard = 0; guard < 2000; guard++) {
        engine_step(e);
        bool all = true;
        for (int i = 0, k = 0; i < n_h; i++)
            for (int j = 0; j < engine_request_n(h[i]); j++, k++) {
                if (!done[k])
                    done[k] = drain(engine_request_channel(h[i], j), got[k], &n[k], &fin[k]);
                all = all && done[k];
            }
        if (all)
            return;
    }
    (void)n_streams;
}

TEST(samples_share_the_prompt) {
    struct engine_params p = base();
    p.check_invariants = true;
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    struct engine_request *h[5] = {0};
    struct engine_request_params rp = {0};
    rp.prompt = reqs[4].prompt;
    rp.n_prompt = reqs[4].n_prompt;
    rp.max_tokens = reqs[4].max_tokens;
    rp.n = 3;
    rp.sampling = sampling_params_default();
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    ASSERT_STATUS(engine_submit(e, &rp, &h[0], &err), CI_OK);
    rp.sampling.temperature = 1.0f;
    rp.sampling.seed = 99;
    ASSERT_STATUS(engine_submit(e, &rp, &h[1], &err), CI_OK);
    int32_t got[6][MAX_OUT];
    int n[6] = {0};
    run_all(e, h, 2, got, n);
    for (int i = 0; i < 3; i++)
        CHECK(n[i] == n_want[4] && !memcmp(got[i], want[4], sizeof(int32_t) * (size_t)n[i]));
    CHECK(memcmp(got[3], got[4], sizeof got[3]) != 0 || memcmp(got[4], got[5], sizeof got[4]) != 0);
    CHECK(engine_request_metrics(h[0], 1)->t_first_token_ns > 0);
    engine_request_release(h[0]);
    engine_request_release(h[1]);

    // Sample i of an n = 3 request (seed 99 + i), which shares the prompt's blocks and copies the last one on
    // its first write, equals a request of its own with seed 99 + i.
    rp.n = 1;
    for (int i = 0; i < 3; i++) {
        rp.sampling.seed = 99 + (uint64_t)i;
        ASSERT_STATUS(engine_submit(e, &rp, &h[i], &err), CI_OK);
    }
    int32_t alone[3][MAX_OUT];
    int n_alone[3] = {0};
    run_all(e, h, 3, alone, n_alone);
    for (int i = 0; i < 3; i++) {
        if (n_alone[i] != n[3 + i] || memcmp(alone[i], got[3 + i], sizeof(int32_t) * (size_t)n_alone[i]))
            TEST_FAILF("sample %d of n=3 differs from its own request", i);
        engine_request_release(h[i]);
    }
    engine_free(e);
}

TEST(cancellation_frees_blocks) {
    struct engine_params p = base();
    p.check_invariants = true;
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    struct engine_request *h = NULL;
    struct engine_request_params rp = {0};
    rp.prompt = reqs[5].prompt;
    rp.n_prompt = reqs[5].n_prompt;
    rp.max_tokens = 400;
    rp.n = 1;
    rp.sampling = sampling_params_default();
    rp.ignore_eos = true;
    ASSERT_STATUS(engine_submit(e, &rp, &h, &err), CI_OK);
    for (int i = 0; i < 5; i++)
        engine_step(e);
    struct engine_totals t;
    engine_totals(e, &t);
    CHECK(t.kv_blocks_used > 0 && t.n_running == 1);
    engine_request_cancel(h);
    engine_step(e); // the cancellation is seen within one step
    engine_totals(e, &t);
    CHECK(t.kv_blocks_used == 0 && t.n_running == 0);
    int32_t out[512];
    int n = 0, fin = 0;
    CHECK(drain(engine_request_channel(h, 0), out, &n, &fin) && fin == ENGINE_FINISH_CANCELLED);
    CHECK(engine_request_metrics(h, 0)->finish == ENGINE_FINISH_CANCELLED);
    engine_request_release(h);
    engine_free(e);
}

TEST(stop_strings_and_text) {
    struct engine_params p = base();
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    int32_t bos = 1;
    const char *stops[] = {"Lily."};
    struct engine_request_params rp = {0};
    rp.prompt = &bos;
    rp.n_prompt = 1;
    rp.max_tokens = 100;
    rp.n = 1;
    rp.sampling = sampling_params_default();
    rp.sampling.temperature = 0;
    rp.stop = stops;
    rp.n_stop = 1;
    rp.want_text = true;
    struct engine_request *h = NULL;
    ASSERT_STATUS(engine_submit(e, &rp, &h, &err), CI_OK);
    char text[2048] = {0};
    size_t len = 0;
    int fin = -1;
    for (int guard = 0; guard < 200 && fin < 0; guard++) {
        engine_step(e);
        struct ci_event ev;
        while (ci_channel_recv(engine_request_channel(h, 0), &ev, 0) == CI_OK) {
            if (ev.kind == CI_EVENT_TOKEN || ev.kind == CI_EVENT_TEXT) {
                memcpy(text + len, ev.text, ev.n_text);
                len += ev.n_text;
            } else {
                fin = ev.finish;
            }
        }
    }
    CHECK(fin == ENGINE_FINISH_STOP);
    if (strcmp(text, "Once upon a time, there was a little girl named ") != 0)
        TEST_FAILF("text before the stop string: '%s'", text);
    engine_request_release(h);
    engine_free(e);
}

struct thread_arg {
    struct engine *e;
    int r;
    bool ok;
};

static void *client(void *arg) {
    struct thread_arg *a = arg;
    struct engine_request_params rp = {0};
    rp.prompt = reqs[a->r].prompt;
    rp.n_prompt = reqs[a->r].n_prompt;
    rp.max_tokens = reqs[a->r].max_tokens;
    rp.n = 1;
    rp.sampling = sampling_params_default();
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    struct engine_request *h = NULL;
    struct ci_err err = {0};
    if (engine_submit(a->e, &rp, &h, &err) != CI_OK)
        return NULL;
    int32_t out[MAX_OUT + 4];
    int n = 0;
    struct ci_event ev;
    while (ci_channel_recv(engine_request_channel(h, 0), &ev, 5000000000LL) == CI_OK) {
        if (ev.kind == CI_EVENT_TOKEN && !(ev.flags & CI_EVENT_F_CONT) && n < MAX_OUT + 4)
            out[n++] = ev.token;
        if (ev.kind == CI_EVENT_DONE)
            a->ok = n == n_want[a->r] && !memcmp(out, want[a->r], sizeof(int32_t) * (size_t)n);
    }
    engine_request_release(h);
    return NULL;
}

TEST(engine_thread_serves_concurrent_clients) {
    struct engine_params p = base();
    p.n_threads = 2;
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    ASSERT_STATUS(engine_start(e, &err), CI_OK);
    pthread_t th[N_REQ];
    struct thread_arg args[N_REQ];
    for (int r = 0; r < N_REQ; r++) {
        args[r] = (struct thread_arg){e, r, false};
        pthread_create(&th[r], NULL, client, &args[r]);
    }
    for (int r = 0; r < N_REQ; r++) {
        pthread_join(th[r], NULL);
        CHECK(args[r].ok);
    }
    engine_free(e);
}

/* tiny-mistral (a 32-position window on every layer): blocks behind the window go back to the pool while a
 * sequence runs (kv_seq_drop_front), and the greedy tokens stay those of the single-request generate() path
 * (which keeps every block) under continuous batching, chunked prefill, block sizes 1/4/16, prefix-cache hits
 * through dropped blocks, preemption in a tiny pool, static batching and naive (which keeps its blocks); the
 * pool and prefix-cache invariants are checked after every step (holes included).  Runs last: it swaps the
 * model and the reference. */
TEST(sliding_window_frees_blocks_early) {
    char path[512];
    test_tmp_path(path, sizeof path, "mistral.gguf");
    struct ci_err err = {0};
    ASSERT_STATUS(synth_write("tiny-mistral", CI_TYPE_F32, 1, path, &err), CI_OK);
    struct model *saved = model;
    struct tokenizer *saved_tok = tok;
    ASSERT_STATUS(model_load(path, &model, &err), CI_OK);
    ASSERT_STATUS(tokenizer_from_gguf(model->gguf, &tok, &err), CI_OK);
    CHECK(model->config.sliding_window == 32);
    make_reference();

    struct engine_params p = base();
    struct run_stats st;
    // One request of 58 + up to 24 positions in chunks of 7 with blocks of 4: without early freeing it holds
    // ceil(positions / 4) blocks at the end; with it, at most the window's 8 blocks plus the ones the last
    // chunk and the block being filled straddle.
    p.block_size = 4;
    p.sched.max_batch_tokens = 7;
    p.prefix_cache = false;
    ASSERT(run_and_check("window-one", p, 2, 1, 0, &st));
    int full = (reqs[2].n_prompt + reqs[2].max_tokens + 3) / 4;
    CHECK(st.peak_blocks <= 8 + 2 + 2 && st.peak_blocks < full);
    // The same without a window would hold every block: the naive policy keeps them (it recomputes from 0).
    p.sched.policy = SCHED_POLICY_NAIVE;
    ASSERT(run_and_check("window-naive", p, 2, 1, 0, &st));
    CHECK(st.peak_blocks >= full - 1);
    const int sizes[] = {1, 4, 16};
    for (int i = 0; i < 3; i++) {
        struct engine_params q = base();
        q.block_size = sizes[i];
        char label[48];
        snprintf(label, sizeof label, "window-crowd-b%d", sizes[i]);
        run_and_check(label, q, 0, N_REQ, 2, NULL);
    }
    // Requests 0..2 share a 40-token prefix; by the time the later ones arrive the first has dropped its
    // first blocks, which the prefix cache keeps parked and hands out again.
    struct engine_params q = base();
    ASSERT(run_and_check("window-prefix", q, 0, 3, 40, &st));
    CHECK(st.prefix_hits >= 2 * 32);
    q.block_size = 4;
    q.kv_blocks = 40;
    ASSERT(run_and_check("window-tiny-pool", q, 0, N_REQ, 0, &st));
    q.sched.policy = SCHED_POLICY_STATIC;
    ASSERT(run_and_check("window-static", q, 0, N_REQ, 0, &st));

    tokenizer_free(tok);
    model_free(model);
    model = saved;
    tok = saved_tok;
    make_reference();
    unlink(path);
}

/* Each step reports the grammar's time and one mask per sample drawn under a grammar (step_metrics, what
 * bench/grammar.py and the steps CSV read); a request without a grammar reports none. */
static int64_t g_masks, g_ns;
static void count_grammar(void *ctx, const struct step_metrics *m) {
    (void)ctx;
    g_masks += m->n_grammar_masks;
    g_ns += m->grammar_ns;
}

TEST(steps_count_grammar_masks) {
    struct engine_params p = base();
    struct engine *e = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(engine_create(model, tok, &p, &e, &err), CI_OK);
    engine_set_step_hook(e, count_grammar, NULL);
    static const char gbnf[] = "root ::= [a-z ]+\n";
    struct engine_request *h[2] = {0};
    struct engine_request_params rp = {0};
    rp.prompt = reqs[0].prompt;
    rp.n_prompt = reqs[0].n_prompt;
    rp.max_tokens = 6;
    rp.n = 2;
    rp.sampling = sampling_params_default();
    rp.sampling.temperature = 1.0f;
    rp.ignore_eos = true;
    rp.grammar = gbnf;
    rp.grammar_len = strlen(gbnf);
    ASSERT_STATUS(engine_submit(e, &rp, &h[0], &err), CI_OK);
    int32_t got[2][MAX_OUT];
    int n[2] = {0};
    g_masks = g_ns = 0;
    run_all(e, h, 1, got, n);
    if (!(g_masks == n[0] + n[1] && n[0] == 6 && n[1] == 6 && g_ns > 0))
        TEST_FAILF("%lld masks, %lld ns for %d + %d tokens", (long long)g_masks, (long long)g_ns, n[0], n[1]);
    engine_request_release(h[0]);
    rp.grammar = NULL;
    rp.grammar_len = 0;
    ASSERT_STATUS(engine_submit(e, &rp, &h[0], &err), CI_OK);
    g_masks = g_ns = 0;
    run_all(e, h, 1, got, n);
    if (!(g_masks == 0 && g_ns == 0))
        TEST_FAILF("no grammar: %lld masks, %lld ns", (long long)g_masks, (long long)g_ns);
    engine_request_release(h[0]);
    engine_free(e);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    struct ci_err err = {0};
    ci_kernels_init();
    if (!(model = test_load_model("stories260K.gguf")))
        return 1;
    if (tokenizer_from_gguf(model->gguf, &tok, &err) != CI_OK) {
        printf("FAIL setup: %s\n", err.msg);
        return 1;
    }
    make_requests();
    make_reference();
    RUN(policies_agree_alone);
    RUN(policies_agree_in_a_crowd);
    RUN(block_sizes_agree);
    RUN(prefix_cache_hits_agree);
    RUN(preemption_in_a_tiny_pool);
    RUN(static_batching_pads);
    RUN(rejects_what_never_fits);
    RUN(file_context_never_sizes_the_pool);
    RUN(step_bytes_count_the_kv_type);
    RUN(samples_share_the_prompt);
    RUN(embeddings_independent_of_batch_and_preemption);
    RUN(cancellation_frees_blocks);
    RUN(stop_strings_and_text);
    RUN(engine_thread_serves_concurrent_clients);
    RUN(sliding_window_frees_blocks_early);
    RUN(steps_count_grammar_masks);
    tokenizer_free(tok);
    model_free(model);
    return test_exit_code();
}
