/* cinfer bench: the workload generator (deterministic per seed, lengths within their ranges and the context,
 * shared prefixes really shared, Poisson gaps of mean 1/R), the statistics (numpy-linear percentiles against
 * hand-computed values, throughput and latency arithmetic on a hand-made run), the policy progression, and a
 * small end-to-end comparison on stories260K checking only non-timing facts: every request completes with
 * its exact length under every policy, static batching pads, contiguous KV wastes more than paged, and only
 * the prefix policy hits the prefix cache (on the shared-prefix workload); and the machine measurement of
 * `bench hw` (every peak positive and finite, the roofline peaks the largest of their loops, the loops the
 * CPU lacks left at 0) with the roof each weight type's matmul is charged to.  Nothing here is timed against
 * a threshold.  It links the bench layer's library (src/bench), as the binary does. */
#include "core/stats.h"
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "bench/perf.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/model.h"

static struct model *model;

static struct bench_workload_params params(enum bench_workload_kind k) {
    struct bench_workload_params p = bench_workload_params_default(k);
    p.n_vocab = 512;
    p.n_ctx = 1024;
    return p;
}

static bool same_workload(const struct bench_workload *a, const struct bench_workload *b) {
    if (a->n != b->n || a->long_index != b->long_index)
        return false;
    for (int i = 0; i < a->n; i++) {
        const struct bench_request *x = &a->reqs[i], *y = &b->reqs[i];
        if (x->n_prompt != y->n_prompt || x->max_tokens != y->max_tokens ||
            x->t_arrival_ns != y->t_arrival_ns || x->group != y->group ||
            memcmp(x->prompt, y->prompt, sizeof(int32_t) * (size_t)x->n_prompt) != 0)
            return false;
    }
    return true;
}

TEST(workload_is_deterministic_per_seed) {
    for (int k = 0; k < 4; k++) {
        struct bench_workload_params p = params((enum bench_workload_kind)k);
        p.request_rate = 10;
        struct bench_workload a, b, c;
        struct ci_err err = {0};
        ASSERT_STATUS(bench_workload_generate(&p, &a, &err), CI_OK);
        ASSERT_STATUS(bench_workload_generate(&p, &b, &err), CI_OK);
        p.seed = 2;
        ASSERT_STATUS(bench_workload_generate(&p, &c, &err), CI_OK);
        if (!same_workload(&a, &b))
            TEST_FAILF("%s: the same seed gave different requests", bench_workload_name(p.kind));
        if (same_workload(&a, &c))
            TEST_FAILF("%s: seeds 1 and 2 gave the same requests", bench_workload_name(p.kind));
        bench_workload_free(&a);
        bench_workload_free(&b);
        bench_workload_free(&c);
    }
}

/* Every request fits the context, tokens avoid the specials, arrivals never decrease. */
static void check_common(const struct bench_workload *w, const struct bench_workload_params *p) {
    int64_t prompt = 0, out = 0;
    for (int i = 0; i < w->n; i++) {
        const struct bench_request *q = &w->reqs[i];
        if (q->n_prompt < 1 || q->max_tokens < 1 || q->n_prompt + q->max_tokens > p->n_ctx)
            TEST_FAILF("%s request %d: %d + %d tokens vs context %d", bench_workload_name(p->kind), i,
                       q->n_prompt, q->max_tokens, p->n_ctx);
        for (int k = 0; k < q->n_prompt; k++)
            if (q->prompt[k] < 3 || q->prompt[k] >= p->n_vocab) {
                TEST_FAILF("request %d token %d = %d outside [3, %d)", i, k, q->prompt[k], p->n_vocab);
                break;
            }
        if (i > 0 && q->t_arrival_ns < w->reqs[i - 1].t_arrival_ns)
            TEST_FAILF("request %d arrives before request %d", i, i - 1);
        prompt += q->n_prompt;
        out += q->max_tokens;
    }
    CHECK(prompt == w->n_prompt_tokens && out == w->n_output_tokens);
}

TEST(workload_lengths_respect_ranges_and_context) {
    struct ci_err err = {0};
    struct bench_workload w;
    // random: input 100 +-50% -> [50, 150], output 40 +-50% -> [20, 60]; both ends are reached.
    struct bench_workload_params p = params(BENCH_WORKLOAD_RANDOM);
    p.num_prompts = 2000;
    p.input_len = 100;
    p.output_len = 40;
    p.range_ratio = 0.5;
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    check_common(&w, &p);
    int in_min = 1 << 30, in_max = 0, out_min = 1 << 30, out_max = 0;
    for (int i = 0; i < w.n; i++) {
        in_min = w.reqs[i].n_prompt < in_min ? w.reqs[i].n_prompt : in_min;
        in_max = w.reqs[i].n_prompt > in_max ? w.reqs[i].n_prompt : in_max;
        out_min = w.reqs[i].max_tokens < out_min ? w.reqs[i].max_tokens : out_min;
        out_max = w.reqs[i].max_tokens > out_max ? w.reqs[i].max_tokens : out_max;
        CHECK(w.reqs[i].t_arrival_ns == 0); // infinite rate by default
    }
    CHECK(in_min == 50 && in_max == 150 && out_min == 20 && out_max == 60);
    bench_workload_free(&w);

    // random lengths that cannot fit the context are refused, not clipped.
    p.n_ctx = 200;
    CHECK(bench_workload_generate(&p, &w, &err) == CI_ERR_INVALID && strstr(err.msg, "context"));

    // sharegpt-like: long-tailed, clipped to the context, never below 4 tokens.
    p = params(BENCH_WORKLOAD_SHAREGPT);
    p.num_prompts = 4000;
    p.n_ctx = 512;
    p.input_len = 100;
    p.input_sigma = 1.0;
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    check_common(&w, &p);
    int clipped = 0, below = 0, n_short = 0;
    for (int i = 0; i < w.n; i++) {
        CHECK(w.reqs[i].n_prompt >= 4 && w.reqs[i].max_tokens >= 4);
        clipped += w.reqs[i].n_prompt == p.n_ctx - 4;
        below += w.reqs[i].n_prompt < 100;
        n_short += w.reqs[i].n_prompt <= 37; // e^-1 of the median: 1 sigma below, ~15.9%
    }
    // ln(508/100) = 1.63 sigma: ~5.2% of lognormal draws exceed it and are clipped to the context.
    CHECK(clipped > 100 && clipped < 320);
    CHECK(below > 1800 && below < 2200); // the median
    CHECK(n_short > 500 && n_short < 780);
    bench_workload_free(&w);

    // long-prompt: one long request at index round(n/3) under a finite rate; the last one under inf.
    p = params(BENCH_WORKLOAD_LONG_PROMPT);
    p.num_prompts = 13;
    p.request_rate = 20;
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    check_common(&w, &p);
    CHECK(w.long_index == 4);
    for (int i = 0; i < w.n; i++) {
        bool is_long = i == w.long_index;
        CHECK(w.reqs[i].group == is_long);
        CHECK(is_long ? w.reqs[i].n_prompt == p.long_len && w.reqs[i].max_tokens == p.long_output_len
                      : w.reqs[i].n_prompt <= 40 && w.reqs[i].max_tokens <= 120);
    }
    bench_workload_free(&w);
    p.request_rate = INFINITY;
    p.long_delay_s = 0.25;
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    check_common(&w, &p);
    CHECK(w.long_index == 12 && w.reqs[12].t_arrival_ns == 250000000 && w.reqs[11].t_arrival_ns == 0);
    bench_workload_free(&w);
}

TEST(shared_prefix_groups_share_their_prefix) {
    struct bench_workload_params p = params(BENCH_WORKLOAD_SHARED_PREFIX);
    p.num_prompts = 12;
    p.n_groups = 3;
    p.prefix_len = 64;
    p.suffix_len = 8;
    struct bench_workload w;
    struct ci_err err = {0};
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    check_common(&w, &p);
    for (int i = 0; i < w.n; i++) {
        CHECK(w.reqs[i].group == i % 3 && w.reqs[i].n_prompt == 72);
        for (int j = 0; j < i; j++) {
            const int32_t *a = w.reqs[i].prompt, *b = w.reqs[j].prompt;
            bool same_prefix = !memcmp(a, b, 64 * sizeof *a);
            if (same_prefix != (w.reqs[i].group == w.reqs[j].group))
                TEST_FAILF("requests %d and %d (groups %d, %d): prefix shared %d", i, j, w.reqs[i].group,
                           w.reqs[j].group, same_prefix);
            if (!memcmp(a + 64, b + 64, 8 * sizeof *a))
                TEST_FAILF("requests %d and %d have the same suffix", i, j);
        }
    }
    bench_workload_free(&w);
    p.n_groups = 13;
    CHECK(bench_workload_generate(&p, &w, &err) == CI_ERR_INVALID);
}

TEST(poisson_gaps_have_mean_one_over_rate) {
    struct bench_workload_params p = params(BENCH_WORKLOAD_RANDOM);
    p.num_prompts = 20001;
    p.input_len = 4;
    p.output_len = 4;
    p.request_rate = 5;
    struct bench_workload w;
    struct ci_err err = {0};
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    CHECK(w.reqs[0].t_arrival_ns == 0);
    double sum = 0, sq = 0;
    int n = w.n - 1, small = 0;
    for (int i = 1; i < w.n; i++) {
        double g = (double)(w.reqs[i].t_arrival_ns - w.reqs[i - 1].t_arrival_ns) * 1e-9;
        sum += g;
        sq += g * g;
        small += g < 0.2 * log(2.0); // the exponential's median: half the gaps
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    // The mean of 20000 exponential gaps has relative sd 1/sqrt(20000) = 0.7%: 4% is over 5 sigma.
    ASSERT_NEAR(mean, 0.2, 0.2 * 0.04);
    ASSERT_NEAR(sd, 0.2, 0.2 * 0.06); // exponential: sd = mean
    ASSERT_NEAR(small, n / 2, 0.03 * n);
    bench_workload_free(&w);
}

TEST(percentiles_are_numpy_linear) {
    // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4
    double a[] = {4, 1, 3, 2};
    ci_sort_doubles(a, 4);
    CHECK(a[0] == 1 && a[1] == 2 && a[2] == 3 && a[3] == 4);
    ASSERT_NEAR(ci_quantile(a, 4, 0), 1, 1e-12);
    ASSERT_NEAR(ci_quantile(a, 4, 0.5), 2.5, 1e-12);
    ASSERT_NEAR(ci_quantile(a, 4, 0.9), 3.7, 1e-12);
    ASSERT_NEAR(ci_quantile(a, 4, 0.99), 3.97, 1e-12);
    ASSERT_NEAR(ci_quantile(a, 4, 1), 4, 1e-12);
    // numpy.percentile([15, 20, 35, 40, 50], [5, 30, 40, 50]) = 16, 23, 29, 35 (h = 4·q/100)
    double b[] = {15, 20, 35, 40, 50};
    ASSERT_NEAR(ci_quantile(b, 5, 0.05), 16, 1e-12);
    ASSERT_NEAR(ci_quantile(b, 5, 0.3), 23, 1e-12);
    ASSERT_NEAR(ci_quantile(b, 5, 0.4), 29, 1e-12);
    ASSERT_NEAR(ci_quantile(b, 5, 0.5), 35, 1e-12);
    double one = 7;
    ASSERT_NEAR(ci_quantile(&one, 1, 0.99), 7, 0);
    CHECK(isnan(ci_quantile(NULL, 0, 0.5)));
}

TEST(throughput_and_latency_arithmetic) {
    ASSERT_NEAR(bench_throughput(1000, 0, 2000000000), 500, 1e-9);
    ASSERT_NEAR(bench_throughput(10, 500000000, 1000000000), 20, 1e-9);
    CHECK(bench_throughput(10, 5, 5) == 0);

    // A: arrives 0, tokens at 10, 20, 40 ms, ends at 40.  B: arrives 5, tokens at 25, 30, ends at 30.
    int64_t ta[] = {10000000, 20000000, 40000000}, tb[] = {25000000, 30000000};
    struct bench_req_result reqs[2] = {
        {0, 1000000, 10000000, 40000000, ta, 10, 3, 0, 0, ENGINE_FINISH_LENGTH},
        {5000000, 6000000, 25000000, 30000000, tb, 20, 2, 1, 0, ENGINE_FINISH_LENGTH},
    };
    struct step_metrics steps[2] = {0};
    steps[0].t_end_ns = 4000000;
    steps[0].n_prefill_tokens = steps[0].n_tokens = 30;
    steps[0].flops = 3e9;
    steps[0].bytes = 1e9;
    steps[0].kv_blocks_used = 2;
    steps[0].kv_slots_allocated = 32;
    steps[0].kv_slots_used = 8;
    steps[0].n_prefix_hit_tokens = 6;
    steps[1].t_start_ns = 4000000;
    steps[1].t_end_ns = 5000000;
    steps[1].n_decode_tokens = steps[1].n_tokens = 2;
    steps[1].flops = 1e6;
    steps[1].bytes = 1e6;
    steps[1].kv_blocks_used = 1;
    steps[1].kv_slots_allocated = 32;
    steps[1].kv_slots_used = 24;
    steps[1].n_preempted = 1;
    struct bench_run run = {0};
    snprintf(run.label, sizeof run.label, "hand");
    run.reqs = reqs;
    run.n_reqs = 2;
    run.steps = steps;
    run.n_steps = 2;
    run.info.block_size = 16;
    run.info.kv_bytes_per_token = 100;
    struct bench_summary s;
    struct ci_err err = {0};
    ASSERT_STATUS(bench_summarize(&run, &s, &err), CI_OK);
    CHECK(s.n_completed == 2 && s.n_prompt_tokens == 30 && s.n_output_tokens == 5);
    ASSERT_NEAR(s.ttft_ms[0], 15, 1e-9); // TTFTs 10 and 20
    ASSERT_NEAR(s.ttft_ms[2], 19.9, 1e-9);
    ASSERT_NEAR(s.itl_ms[0], 10, 1e-9); // gaps 10, 20 (A) and 5 (B)
    ASSERT_NEAR(s.itl_ms[1], 18, 1e-9);
    ASSERT_NEAR(s.itl_mean_ms, 35.0 / 3, 1e-9);
    ASSERT_NEAR(s.e2e_ms[0], 32.5, 1e-9);  // E2E 40 and 25
    ASSERT_NEAR(s.tpot_mean_ms, 10, 1e-9); // (40 - 10) / 2 = 15 and (25 - 20) / 1 = 5
    ASSERT_NEAR(s.duration_s, 0.04, 1e-12);
    ASSERT_NEAR(s.output_tps, 125, 1e-9);    // 5 tokens / 40 ms
    ASSERT_NEAR(s.total_tps, 875, 1e-9);     // (30 + 5) / 40 ms
    ASSERT_NEAR(s.requests_per_s, 50, 1e-9); // 2 / 40 ms
    ASSERT_NEAR(s.kv_waste_pct, 50, 1e-9);   // (24 + 8) wasted of 64 allocated
    CHECK(s.peak_kv_bytes == 2 * 16 * 100);
    ASSERT_NEAR(s.prefix_hit_rate, 0.2, 1e-12);
    CHECK(s.n_preemptions == 1 && s.prefill.n_steps == 1 && s.decode.n_steps == 1);
    ASSERT_NEAR(s.prefill.gflops_per_s, 3e9 / 4e-3 * 1e-9, 1e-6);
    ASSERT_NEAR(s.prefill.intensity, 3, 1e-12);
    ASSERT_NEAR(s.decode.gbytes_per_s, 1e6 / 1e-3 * 1e-9, 1e-9);
}

TEST(policy_progression_is_cumulative) {
    struct bench_engine_config c = {.n_threads = 2,
                                    .n_ctx = 512,
                                    .max_seqs = 8,
                                    .max_batch_tokens = 64,
                                    .block_size = 16,
                                    .kv_mem_bytes = 1 << 20,
                                    .spec = ENGINE_SPEC_NONE};
    struct engine_params p[BENCH_POLICY_COUNT];
    for (int i = 0; i < BENCH_POLICY_COUNT; i++) {
        p[i] = bench_policy_params((enum bench_policy)i, &c);
        CHECK(p[i].kv_mem_bytes == c.kv_mem_bytes && p[i].n_ctx == 512 && p[i].sched.max_seqs == 8);
        CHECK(p[i].contiguous_kv == (i < BENCH_POLICY_PAGED));
        CHECK(p[i].prefix_cache == (i == BENCH_POLICY_PREFIX));
    }
    CHECK(p[BENCH_POLICY_NAIVE].sched.policy == SCHED_POLICY_NAIVE);
    CHECK(p[BENCH_POLICY_STATIC].sched.policy == SCHED_POLICY_STATIC);
    CHECK(p[BENCH_POLICY_CONTINUOUS].sched.policy == SCHED_POLICY_CONTINUOUS &&
          !p[BENCH_POLICY_CONTINUOUS].sched.chunked_prefill &&
          p[BENCH_POLICY_CONTINUOUS].sched.max_batch_tokens == 512);
    for (int i = BENCH_POLICY_CHUNKED; i < BENCH_POLICY_COUNT; i++)
        CHECK(p[i].sched.policy == SCHED_POLICY_CONTINUOUS && p[i].sched.chunked_prefill &&
              p[i].sched.max_batch_tokens == 64);
    CHECK(p[BENCH_POLICY_PAGED].block_size == 16);
    enum bench_policy list[8];
    int n;
    char msg[128];
    CHECK(bench_policy_list_parse("naive,static,continuous,chunked,paged,prefix", list, 8, &n, msg,
                                  sizeof msg) &&
          n == 6 && list[5] == BENCH_POLICY_PREFIX);
    CHECK(!bench_policy_list_parse("naive,,prefix", list, 8, &n, msg, sizeof msg));
    CHECK(!bench_policy_list_parse("paged,vllm", list, 8, &n, msg, sizeof msg) && strstr(msg, "vllm"));
}

/* Runs w under each policy; fails the test on any error. */
static bool run_all(const struct bench_workload *w, const enum bench_policy *pol, int n,
                    const struct bench_engine_config *c, struct bench_run *runs, struct bench_summary *sums) {
    for (int i = 0; i < n; i++) {
        struct engine_params ep = bench_policy_params(pol[i], c);
        ep.check_invariants = true;
        struct ci_err err = {0};
        if (bench_run_workload(model, &ep, w, bench_policy_name(pol[i]), NULL, NULL, &runs[i], &err) !=
            CI_OK) {
            TEST_FAILF("%s: %s", bench_policy_name(pol[i]), err.msg);
            for (int k = 0; k < i; k++)
                bench_run_free(&runs[k]);
            return false;
        }
        if (bench_summarize(&runs[i], &sums[i], &err) != CI_OK) {
            TEST_FAILF("summarize: %s", err.msg);
            return false;
        }
    }
    return true;
}

TEST(compare_end_to_end_on_stories260k) {
    struct bench_workload_params p = params(BENCH_WORKLOAD_RANDOM);
    p.n_ctx = 128;
    p.num_prompts = 10;
    p.input_len = 24;
    p.output_len = 10;
    p.range_ratio = 0.5;
    struct bench_workload w;
    struct ci_err err = {0};
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    const struct model_config *mc = &model->config;
    int64_t bpt = 2ll * mc->n_layer * mc->n_kv_head * mc->head_dim * (int64_t)sizeof(float); // f32 K and V
    // Room for 3 whole contexts: the contiguous policies run at most 3 sequences at once.
    struct bench_engine_config c = {.n_threads = 1,
                                    .n_ctx = 128,
                                    .max_seqs = 6,
                                    .max_batch_tokens = 32,
                                    .block_size = 16,
                                    .kv_mem_bytes = 3 * 128 * bpt,
                                    .spec = ENGINE_SPEC_NONE};
    enum bench_policy all[6] = {BENCH_POLICY_NAIVE,   BENCH_POLICY_STATIC, BENCH_POLICY_CONTINUOUS,
                                BENCH_POLICY_CHUNKED, BENCH_POLICY_PAGED,  BENCH_POLICY_PREFIX};
    struct bench_run runs[6];
    struct bench_summary s[6];
    if (!run_all(&w, all, 6, &c, runs, s)) {
        bench_workload_free(&w);
        return;
    }
    for (int i = 0; i < 6; i++) {
        CHECK(s[i].n_completed == w.n);
        CHECK(s[i].n_output_tokens == w.n_output_tokens && s[i].n_prompt_tokens == w.n_prompt_tokens);
        for (int r = 0; r < w.n; r++)
            if (runs[i].reqs[r].n_output != w.reqs[r].max_tokens ||
                runs[i].reqs[r].finish != ENGINE_FINISH_LENGTH)
                TEST_FAILF("%s request %d: %d of %d tokens", s[i].label, r, runs[i].reqs[r].n_output,
                           w.reqs[r].max_tokens);
        CHECK(s[i].n_prefix_hit_tokens == 0); // random prompts share no block
        CHECK(runs[i].info.n_blocks == (i < 4 ? 3 : 3 * 128 / 16));
        CHECK(s[i].ttft_ms[0] > 0 && s[i].e2e_ms[0] >= s[i].ttft_ms[0] && s[i].n_steps > 0);
    }
    CHECK(s[1].n_pad_tokens > 0); // static pads prompts and stragglers
    CHECK(s[0].n_pad_tokens == 0 && s[2].n_pad_tokens == 0 && s[4].n_pad_tokens == 0);
    for (int i = 0; i < 4; i++)
        if (!(s[i].kv_waste_pct > s[4].kv_waste_pct))
            TEST_FAILF("%s waste %.1f%% not above paged %.1f%%", s[i].label, s[i].kv_waste_pct,
                       s[4].kv_waste_pct);
    CHECK(s[4].kv_waste_pct < 100.0 * 15 / 16); // at most one partly filled block per sequence
    // The report files come out whole.
    CHECK(bench_write_files(test_tmp_dir(), runs, s, 6, "{\"k\": 1}", &err) == CI_OK);
    char path[600];
    size_t n_csv = 0;
    char *csv = test_read_file(test_tmp_path(path, sizeof path, "requests.csv"), &n_csv);
    int lines = 0;
    for (size_t i = 0; i < n_csv; i++)
        lines += csv[i] == '\n';
    free(csv);
    CHECK(lines == 1 + 6 * w.n);
    for (int i = 0; i < 6; i++)
        bench_run_free(&runs[i]);
    bench_workload_free(&w);

    // shared-prefix: only the prefix cache hits.  All requests arrive at once, so the schedule (and with it
    // the hits) does not depend on timing.
    p = params(BENCH_WORKLOAD_SHARED_PREFIX);
    p.n_ctx = 128;
    p.num_prompts = 8;
    p.n_groups = 2;
    p.prefix_len = 48;
    p.suffix_len = 5;
    p.output_len = 6;
    ASSERT_STATUS(bench_workload_generate(&p, &w, &err), CI_OK);
    enum bench_policy two[2] = {BENCH_POLICY_PAGED, BENCH_POLICY_PREFIX};
    c.max_seqs = 2;
    if (run_all(&w, two, 2, &c, runs, s)) {
        CHECK(s[0].n_prefix_hit_tokens == 0 && s[0].prefix_hit_rate == 0);
        CHECK(s[1].n_prefix_hit_tokens > 0 && s[1].prefix_hit_rate > 0);
        CHECK(s[1].n_prefix_hit_tokens % 16 == 0); // whole blocks only
        CHECK(s[1].n_output_tokens == s[0].n_output_tokens);
        bench_run_free(&runs[0]);
        bench_run_free(&runs[1]);
    }
    bench_workload_free(&w);
}

static bool positive_finite(double x) {
    return isfinite(x) && x > 0;
}

/* One short measurement on 2 threads: the figures are sane and consistent, whatever their size. */
static void check_hw(bool portable) {
    struct ci_threadpool *tp = NULL;
    struct ci_err err = {0};
    ASSERT_STATUS(ci_threadpool_create(2, &tp, &err), CI_OK);
    struct bench_hw_opts o;
    bench_hw_opts_default(&o);
    o.buf_bytes = 16u << 20;
    o.passes = 1;
    o.peak_s = 0.02;
    o.portable = portable;
    struct bench_hw hw;
    ASSERT_STATUS(bench_hw_measure(tp, &o, &hw, &err), CI_OK);
    ci_threadpool_free(tp);
    bool simd = !portable && bench_hw_have_avx2();
    CHECK(!strcmp(hw.isa, simd ? "avx2+fma" : "portable C (no AVX2)"));
    CHECK(hw.n_threads == 2 && hw.buf_bytes == 16u << 20);
    CHECK(positive_finite(hw.bw1_gbs) && positive_finite(hw.bw_gbs));
    CHECK(positive_finite(hw.fma1_gflops) && positive_finite(hw.fma_gflops));
    CHECK(positive_finite(hw.dot1_gops) && positive_finite(hw.dot_gops));
    // A loop runs only where the CPU has its instructions, and never in portable mode.
    bool avx512 = simd && bench_hw_have_avx512(), bw = simd && bench_hw_have_avx512bw();
    bool vnni = simd && bench_hw_have_avxvnni(), vnni512 = simd && bench_hw_have_avx512vnni();
    CHECK(avx512 ? positive_finite(hw.fma512_gflops) && positive_finite(hw.fma512_1_gflops)
                 : hw.fma512_gflops == 0 && hw.fma512_1_gflops == 0);
    CHECK(bw ? positive_finite(hw.dot512_gops) && positive_finite(hw.dot512_1_gops)
             : hw.dot512_gops == 0 && hw.dot512_1_gops == 0);
    CHECK(vnni ? positive_finite(hw.vnni_gops) && positive_finite(hw.vnni1_gops)
               : hw.vnni_gops == 0 && hw.vnni1_gops == 0);
    CHECK(vnni512 ? positive_finite(hw.vnni512_gops) && positive_finite(hw.vnni512_1_gops)
                  : hw.vnni512_gops == 0 && hw.vnni512_1_gops == 0);
    // The roofline's peaks are the best loop of each kind at n_threads, the ridges their ratio to bandwidth.
    CHECK(hw.peak_gflops == fmax(hw.fma_gflops, hw.fma512_gflops));
    CHECK(hw.int8_peak_gops == fmax(fmax(hw.dot_gops, hw.dot512_gops), fmax(hw.vnni_gops, hw.vnni512_gops)));
    ASSERT_NEAR(hw.ridge, hw.peak_gflops / hw.bw_gbs, 1e-9 * hw.ridge);
    ASSERT_NEAR(hw.int8_ridge, hw.int8_peak_gops / hw.bw_gbs, 1e-9 * hw.int8_ridge);
}

TEST(hw_peaks_are_positive_and_consistent) {
    check_hw(false);
}

TEST(hw_portable_loops_measure_both_peaks) {
    check_hw(true);
}

/* Q8_0 and Q4_0 matmuls quantize the activations and multiply in int8; the float types use FMAs. */
TEST(each_weight_type_has_the_roof_of_its_kernel) {
    CHECK(bench_roof_of_type(CI_TYPE_Q8_0) == BENCH_ROOF_INT8);
    CHECK(bench_roof_of_type(CI_TYPE_Q4_0) == BENCH_ROOF_INT8);
    CHECK(bench_roof_of_type(CI_TYPE_F32) == BENCH_ROOF_F32);
    CHECK(bench_roof_of_type(CI_TYPE_F16) == BENCH_ROOF_F32);
    CHECK(bench_roof_of_type(CI_TYPE_BF16) == BENCH_ROOF_F32);
    CHECK(!strcmp(bench_roof_name(BENCH_ROOF_INT8), "int8") &&
          !strcmp(bench_roof_name(BENCH_ROOF_F32), "f32"));
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    ci_kernels_init();
    RUN(workload_is_deterministic_per_seed);
    RUN(workload_lengths_respect_ranges_and_context);
    RUN(shared_prefix_groups_share_their_prefix);
    RUN(poisson_gaps_have_mean_one_over_rate);
    RUN(percentiles_are_numpy_linear);
    RUN(throughput_and_latency_arithmetic);
    RUN(policy_progression_is_cumulative);
    RUN(hw_peaks_are_positive_and_consistent);
    RUN(hw_portable_loops_measure_both_peaks);
    RUN(each_weight_type_has_the_roof_of_its_kernel);
    if (!(model = test_load_model("stories260K.gguf")))
        return 1;
    RUN(compare_end_to_end_on_stories260k);
    model_free(model);
    return test_exit_code();
}
