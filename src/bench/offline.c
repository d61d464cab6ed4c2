/* cinfer bench: the offline benchmark (see offline.h).  Loads a model, generates a seeded workload
 * (workload.h), replays it in-process under one policy or a comparison of policies (or a sweep of batch sizes
 * or context lengths), and prints the table; writes CSV/JSON and gnuplot plots into --out (report.h). Prompts
 * are token ids, so no tokenizer is needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/offline.h"

#include <math.h>
#include "core/stats.h"
#include "core/check.h"
#include "core/mem.h"
#include "core/rng.h"
#include "engine/api_model.h"
#include "engine/dist.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define MIB            (1024.0 * 1024.0)
#define CONFIG_MAX     4096
#define KV_SWEEP_STEPS 8

struct progress {
    bool on;
    bool drawn;
};

static void on_progress(void *ctx, const char *label, int n_done, int n_total, int64_t elapsed_ns) {
    struct progress *p = ctx;
    if (!p->on)
        return;
    char tag[16];
    snprintf(tag, sizeof tag, "%-12s", label);
    bench_progress_draw(tag, n_done, n_total, NULL, elapsed_ns);
    p->drawn = true;
}

static void progress_clear(struct progress *p) {
    if (p->on && p->drawn) {
        bench_progress_clear();
        p->drawn = false;
    }
}

/* Workload parameters: the kind's defaults, overridden by every flag that was given (sentinel -1). */
static struct bench_workload_params workload_params(const struct bench_offline_opts *o,
                                                    enum bench_workload_kind k, const struct model *m,
                                                    int n_ctx, double rate) {
    struct bench_workload_params p = bench_workload_params_default(k);
    p.n_vocab = m->config.n_vocab;
    p.n_ctx = n_ctx;
    p.seed = o->seed;
    p.request_rate = rate;
    if (o->num_prompts > 0)
        p.num_prompts = o->num_prompts;
    if (o->input_len > 0)
        p.input_len = o->input_len;
    if (o->output_len > 0)
        p.output_len = o->output_len;
    if (o->range_ratio >= 0)
        p.range_ratio = o->range_ratio;
    if (o->input_sigma >= 0)
        p.input_sigma = o->input_sigma;
    if (o->output_sigma >= 0)
        p.output_sigma = o->output_sigma;
    if (o->groups > 0)
        p.n_groups = o->groups;
    if (o->prefix_len > 0)
        p.prefix_len = o->prefix_len;
    if (o->suffix_len > 0)
        p.suffix_len = o->suffix_len;
    if (o->long_len > 0)
        p.long_len = o->long_len;
    if (o->long_output_len > 0)
        p.long_output_len = o->long_output_len;
    if (o->long_at >= 0)
        p.long_at = o->long_at;
    if (o->long_delay_ms >= 0)
        p.long_delay_s = o->long_delay_ms / 1000.0;
    return p;
}

static void default_out_dir(char *buf, size_t n) {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, n, "bench/out/%s", stamp);
}

static int64_t model_kv_bytes_per_token(const struct model *m, uint32_t kv_type) {
    const struct model_config *c = &m->config;
    return kv_bytes_per_token(c->n_layer, c->n_kv_head, c->head_dim, kv_type);
}

static void print_workload(const struct bench_workload_params *p, const struct bench_workload *w) {
    printf("workload   %s, %d requests, seed %llu, ", bench_workload_name(p->kind), w->n,
           (unsigned long long)p->seed);
    if (isinf(p->request_rate))
        printf("all arriving at once");
    else
        printf("Poisson arrivals at %g requests/s", p->request_rate);
    printf("; %lld prompt + %lld output tokens\n", (long long)w->n_prompt_tokens,
           (long long)w->n_output_tokens);
    switch (p->kind) {
    case BENCH_WORKLOAD_RANDOM:
        printf("           input %d, output %d tokens, each uniform within +-%.0f%%\n", p->input_len,
               p->output_len, 100 * p->range_ratio);
        break;
    case BENCH_WORKLOAD_SHAREGPT:
        printf("           log-normal lengths: input median %d (sigma %.2f), output median %d (sigma %.2f)\n",
               p->input_len, p->input_sigma, p->output_len, p->output_sigma);
        break;
    case BENCH_WORKLOAD_SHARED_PREFIX:
        printf("           %d groups sharing a %d-token prefix, %d-token unique suffix, output %d\n",
               p->n_groups, p->prefix_len, p->suffix_len, p->output_len);
        break;
    case BENCH_WORKLOAD_LONG_PROMPT:
        printf("           %d short streams (input %d, output %d, +-%.0f%%); request %d is a %d-token prompt "
               "(output %d) arriving at %.3f s\n",
               w->n - 1, p->input_len, p->output_len, 100 * p->range_ratio, w->long_index, p->long_len,
               p->long_output_len, (double)w->reqs[w->long_index].t_arrival_ns * 1e-9);
        break;
    }
}

static void print_engine(const struct bench_engine_config *c, const struct model *m) {
    int64_t bpt = model_kv_bytes_per_token(m, c->kv_type);
    printf("engine     %d threads, context %d, max %d sequences, chunk budget %d tokens, block %d tokens\n",
           c->n_threads, c->n_ctx, c->max_seqs, c->max_batch_tokens, c->block_size);
    printf(
        "KV budget  %.1f MiB (%s, %lld bytes/token): contiguous policies hold %lld whole-context sequences, "
        "paged ones %lld tokens\n",
        (double)c->kv_mem_bytes / MIB, kv_type_name(c->kv_type), (long long)bpt,
        (long long)(c->kv_mem_bytes / (bpt * c->n_ctx)),
        (long long)(c->kv_mem_bytes / (bpt * c->block_size) * c->block_size));
}

static bool config_json(char *buf, size_t n, const struct bench_offline_opts *o,
                        const struct bench_workload_params *p, const struct bench_engine_config *c,
                        const char *mode) {
    buf[0] = '\0';
    size_t len;
    snprintf(buf, n, "{\"model\": ");
    if (!bench_json_str(buf, n, o->model_path))
        return false;
    len = strlen(buf);
    snprintf(buf + len, n - len,
             ", \"mode\": \"%s\", \"workload\": \"%s\", \"num_prompts\": %d, \"seed\": %llu, ", mode,
             bench_workload_name(p->kind), p->num_prompts, (unsigned long long)p->seed);
    len = strlen(buf);
    if (isinf(p->request_rate))
        snprintf(buf + len, n - len, "\"request_rate\": \"inf\", ");
    else
        snprintf(buf + len, n - len, "\"request_rate\": %g, ", p->request_rate);
    len = strlen(buf);
    snprintf(
        buf + len, n - len,
        "\"input_len\": %d, \"output_len\": %d, \"range_ratio\": %g, \"input_sigma\": %g, \"output_sigma\": "
        "%g, \"groups\": %d, \"prefix_len\": %d, \"suffix_len\": %d, \"long_len\": %d, \"long_output_len\": "
        "%d, \"long_at\": %g, \"long_delay_s\": %g, \"threads\": %d, \"ctx\": %d, \"max_seqs\": %d, "
        "\"max_batch_tokens\": %d, \"block_size\": %d, \"kv_mem_bytes\": %lld, \"kv_type\": \"%s\"}",
        p->input_len, p->output_len, p->range_ratio, p->input_sigma, p->output_sigma, p->n_groups,
        p->prefix_len, p->suffix_len, p->long_len, p->long_output_len, p->long_at, p->long_delay_s,
        c->n_threads, c->n_ctx, c->max_seqs, c->max_batch_tokens, c->block_size, (long long)c->kv_mem_bytes,
        kv_type_name(c->kv_type));
    return strlen(buf) + 1 < n;
}

/* Runs the workload under each policy (or batch size), prints the table, writes files and plots. */
static int run_set(const struct bench_offline_opts *o, const struct model *m, const struct bench_workload *w,
                   const struct bench_workload_params *wp, const struct bench_engine_config *base,
                   const enum bench_policy *pol, const int *batch, int n, const char *mode,
                   const char *out_dir) {
    struct bench_run runs[BENCH_MAX_RUNS];
    struct bench_summary sums[BENCH_MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int n_done = 0, rc = 1;
    struct progress pg = {!o->quiet && isatty(2), false};
    struct ci_err err = {0};
    for (int i = 0; i < n; i++) {
        struct bench_engine_config c = *base;
        char label[32];
        if (batch) {
            c.max_seqs = batch[i];
            snprintf(label, sizeof label, "bs%d", batch[i]);
        } else {
            snprintf(label, sizeof label, "%s", bench_policy_name(pol[i]));
        }
        struct engine_params ep = bench_policy_params(pol[i], &c);
        enum ci_status s = bench_run_workload(m, &ep, w, label, on_progress, &pg, &runs[i], &err);
        progress_clear(&pg);
        if (s != CI_OK) {
            fprintf(stderr, "cinfer bench: %s: %s\n", label, err.msg);
            goto done;
        }
        n_done++;
        if (bench_summarize(&runs[i], &sums[i], &err) != CI_OK) {
            fprintf(stderr, "cinfer bench: %s\n", err.msg);
            goto done;
        }
        if (!o->quiet)
            fprintf(stderr, "%-12s done in %.2f s (%lld steps)\n", label, (double)runs[i].wall_ns * 1e-9,
                    (long long)runs[i].n_steps);
    }
    printf("\n");
    bench_print_table(stdout, sums, n);
    for (int i = 0; base->spec != ENGINE_SPEC_NONE && i < n; i++) {
        const struct engine_totals *t = &runs[i].totals;
        printf("%s speculative %s: %lld of %lld drafts accepted (%.1f%%), %.2f tokens per decode step\n",
               sums[i].label, engine_spec_name(base->spec), (long long)t->spec_accepted_tokens,
               (long long)t->spec_draft_tokens,
               t->spec_draft_tokens ? 100.0 * (double)t->spec_accepted_tokens / (double)t->spec_draft_tokens
                                    : 0.0,
               t->decode_seq_steps ? (double)t->decode_emitted / (double)t->decode_seq_steps : 0.0);
    }
    printf("\nKV pools (same budget): ");
    for (int i = 0; i < n; i++)
        printf("%s%s %d x %d tokens", i ? "; " : "", sums[i].label, sums[i].n_kv_blocks, sums[i].block_size);
    printf("\n\n");
    bench_print_roofline(stdout, sums, n);
    fflush(stdout);

    if (bench_mkdirs(out_dir, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        goto done;
    }
    char cfg[CONFIG_MAX];
    if (bench_write_files(out_dir, runs, sums, n,
                          config_json(cfg, sizeof cfg, o, wp, base, mode) ? cfg : NULL, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        goto done;
    }
    if (!o->no_plots) {
        bench_plot_ttft_cdf(out_dir, runs, n);
        bench_plot_kv_usage(out_dir, runs, n);
        if (w->long_index >= 0)
            bench_plot_tbt_timeline(out_dir, runs, n);
        if (batch) {
            struct bench_sweep_point pts[BENCH_MAX_RUNS], lat[BENCH_MAX_RUNS];
            for (int i = 0; i < n; i++) {
                pts[i] =
                    (struct bench_sweep_point){batch[i], {sums[i].output_tps, sums[i].total_tps, NAN, NAN}};
                lat[i] =
                    (struct bench_sweep_point){batch[i], {sums[i].itl_ms[0], sums[i].itl_ms[2], NAN, NAN}};
            }
            const char *tps[] = {"output tokens/s", "total tokens/s"};
            const char *tbt[] = {"TBT p50", "TBT p99"};
            bench_plot_sweep(out_dir, "throughput_vs_batch", "Throughput vs batch size (continuous batching)",
                             "max running sequences", "tokens/s", tps, 2, pts, n, true);
            bench_plot_sweep(out_dir, "tbt_vs_batch", "Time between tokens vs batch size",
                             "max running sequences", "ms", tbt, 2, lat, n, true);
        }
    }
    printf("\nwrote %s (summary.csv, requests.csv, summary.json, steps_*.csv%s)\n", out_dir,
           o->no_plots ? "" : ", *.png");
    rc = 0;
done:
    for (int i = 0; i < n_done; i++)
        bench_run_free(&runs[i]);
    return rc;
}

/* One request of `context` prompt tokens and `steps` decode steps under naive recompute and under the KV
 * cache; the median duration of the steps after the first token is the decode step time at that context. */
static int sweep_context(const struct bench_offline_opts *o, const struct model *m,
                         const struct bench_engine_config *base, const int *contexts, int n_ctx_list,
                         const char *out_dir) {
    struct bench_sweep_point pts[64], flops[64];
    int n_pts = 0;
    struct progress pg = {!o->quiet && isatty(2), false};
    struct ci_rng rng;
    ci_rng_seed(&rng, o->seed);
    printf("\n%8s %14s %14s %9s %16s %16s\n", "context", "naive ms/step", "KV ms/step", "ratio",
           "naive GFLOP/step", "KV GFLOP/step");
    const enum bench_policy pol[2] = {BENCH_POLICY_NAIVE, BENCH_POLICY_PAGED};
    for (int i = 0; i < n_ctx_list && n_pts < 64; i++) {
        int ctx = contexts[i];
        int32_t *prompt = ci_malloc((size_t)ctx * sizeof *prompt);
        if (!prompt) {
            fprintf(stderr, "cinfer bench: out of memory\n");
            return 1;
        }
        for (int k = 0; k < ctx; k++)
            prompt[k] = 3 + (int32_t)(ci_rng_u64(&rng) % (uint64_t)(m->config.n_vocab - 3));
        double step_ms[2] = {NAN, NAN}, gflop[2] = {NAN, NAN};
        for (int p = 0; p < 2; p++) {
            // A KV-cache decode step is cheap, so it is timed at least KV_SWEEP_STEPS times.
            int steps = p == 0 || o->sweep_steps > KV_SWEEP_STEPS ? o->sweep_steps : KV_SWEEP_STEPS;
            struct bench_request req = {prompt, ctx, 1 + steps, 0, 0};
            struct bench_workload w = {&req, 1, NULL, ctx, 1 + steps, -1};
            struct engine_params ep = bench_policy_params(pol[p], base);
            struct bench_run run;
            struct ci_err err = {0};
            char label[32];
            snprintf(label, sizeof label, "%s@%d", p ? "kv" : "naive", ctx);
            enum ci_status s = bench_run_workload(m, &ep, &w, label, on_progress, &pg, &run, &err);
            progress_clear(&pg);
            if (s != CI_OK) {
                fprintf(stderr, "cinfer bench: %s: %s\n", label, err.msg);
                ci_free(prompt);
                return 1;
            }
            double d[256];
            double fl = 0;
            int nd = 0;
            for (int k = 0; k < run.n_steps && nd < 256; k++)
                if (run.steps[k].t_start_ns >= run.reqs[0].t_first_token_ns) {
                    d[nd++] = (double)(run.steps[k].t_end_ns - run.steps[k].t_start_ns) * 1e-6;
                    fl += run.steps[k].flops;
                }
            ci_sort_doubles(d, nd);
            step_ms[p] = ci_quantile(d, nd, 0.5);
            gflop[p] = nd ? fl / nd * 1e-9 : NAN;
            bench_run_free(&run);
        }
        ci_free(prompt);
        pts[n_pts] = (struct bench_sweep_point){ctx, {step_ms[0], step_ms[1], NAN, NAN}};
        flops[n_pts] = (struct bench_sweep_point){ctx, {gflop[0], gflop[1], NAN, NAN}};
        n_pts++;
        printf("%8d %14.2f %14.2f %8.1fx %16.3f %16.3f\n", ctx, step_ms[0], step_ms[1],
               step_ms[0] / step_ms[1], gflop[0], gflop[1]);
        fflush(stdout);
    }
    struct ci_err err = {0};
    if (bench_mkdirs(out_dir, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        return 1;
    }
    const char *series[] = {"naive (recompute the prefix)", "KV cache"};
    const char *fseries[] = {"naive GFLOP/step", "KV cache GFLOP/step"};
    if (!o->no_plots) {
        bench_plot_sweep(out_dir, "step_vs_context", "Decode step time vs context length (one sequence)",
                         "context (tokens)", "ms per decode step", series, 2, pts, n_pts, false);
        bench_plot_sweep(out_dir, "flops_vs_context", "Estimated FLOPs per decode step vs context",
                         "context (tokens)", "GFLOP per step", fseries, 2, flops, n_pts, false);
    } else {
        FILE *f;
        char path[4200];
        snprintf(path, sizeof path, "%s/step_vs_context.dat", out_dir);
        if ((f = fopen(path, "w"))) {
            fprintf(f, "# context naive_ms kv_ms\n");
            for (int i = 0; i < n_pts; i++)
                fprintf(f, "%g %.4f %.4f\n", pts[i].x, pts[i].y[0], pts[i].y[1]);
            fclose(f);
        }
    }
    printf("\nwrote %s (step_vs_context.dat%s)\n", out_dir, o->no_plots ? "" : ", step_vs_context.png");
    return 0;
}

void bench_offline_opts_default(struct bench_offline_opts *o) {
    memset(o, 0, sizeof *o);
    o->kind = BENCH_WORKLOAD_RANDOM;
    o->rate = INFINITY;
    o->policies[0] = BENCH_POLICY_PREFIX;
    o->n_policies = 1;
    static const int batch[] = {1, 2, 4, 8, 16, 32}, contexts[] = {100, 250, 500, 1000, 1500, 2000};
    memcpy(o->batch_sizes, batch, sizeof batch);
    o->n_batch_sizes = (int)CI_ARRAY_LEN(batch);
    memcpy(o->contexts, contexts, sizeof contexts);
    o->n_contexts = (int)CI_ARRAY_LEN(contexts);
    o->num_prompts = o->input_len = o->output_len = o->groups = o->prefix_len = o->suffix_len = -1;
    o->long_len = o->long_output_len = -1;
    o->range_ratio = o->input_sigma = o->output_sigma = o->long_at = o->long_delay_ms = -1;
    o->kv_type = "f16";
    o->seed = 1;
    o->sweep_steps = 2;
    o->threads = 2;
    o->max_seqs = 16;
    o->max_batch_tokens = 128;
    o->block_size = 16;
}

/* --tp/--pp: rank 0's communication over every run (its weights, heads and layers above are its own part). */
static void print_dist(const struct dist *d, const struct model *m) {
    struct dist_stats s;
    dist_get_stats(d, &s);
    double each = s.n_allreduce ? (double)s.allreduce_ns / 1e3 / (double)s.n_allreduce : 0.0;
    printf("distributed %d ranks (rank 0 holds %d of %d layers): %lld batches broadcast (%.2f ms); %lld "
           "all-reduces of %.2f MiB (%.2f ms: %.1f us each, %.1f us per layer and batch)",
           dist_size(d), m->config.n_layer, model_n_layer_all(&m->config), (long long)s.n_steps,
           (double)s.bcast_ns / 1e6, (long long)s.n_allreduce, (double)s.allreduce_floats * 4.0 / MIB,
           (double)s.allreduce_ns / 1e6, each, 2.0 * each);
    if (s.p2p_floats)
        printf("; %.2f MiB of hidden states received by rank 0 (%.2f ms sending and receiving)",
               (double)s.p2p_floats * 4.0 / MIB, (double)s.p2p_ns / 1e6);
    printf("\n");
}

int bench_offline_run(struct bench_offline_opts *o) {
    uint32_t kv_type;
    if (!kv_type_parse(o->kv_type, &kv_type)) {
        fprintf(stderr, "cinfer bench: --kv-type: '%s' is not one of f32, f16, q8_0\n", o->kv_type);
        return 2;
    }
    char out_dir[4096];
    if (o->out_dir)
        snprintf(out_dir, sizeof out_dir, "%s", o->out_dir);
    else
        default_out_dir(out_dir, sizeof out_dir);
    bool sweep_batch = o->sweep == BENCH_SWEEP_BATCH, sweep_ctx = o->sweep == BENCH_SWEEP_CONTEXT;
    const enum bench_policy *pol = o->policies;
    int n_pol = o->n_policies;
    const int *batch = o->batch_sizes;
    int n_batch = o->n_batch_sizes;
    int *contexts = o->contexts;
    int n_contexts = o->n_contexts;
    enum bench_workload_kind kind = o->kind;
    double rate = o->rate;
    struct model *m = NULL;
    struct ci_err err = {0};
    enum ci_status ls = model_load(o->model_path, &m, &err);
    if (o->tp) { // every rank, loaded or not, takes part in the agreement (it shards m)
        struct ci_err ae = {0};
        if (dist_agree(o->tp->d, ls == CI_OK ? m : NULL, &err, o->tp_options, &ae) != CI_OK) {
            err = ae;
            ls = ae.code;
        } else if (dist_rank(o->tp->d) > 0) { // a worker: rank 0 runs the benchmark and prints it
            ls = dist_worker_run(o->tp->d, m, o->threads, &err);
            model_free(m);
            if (ls != CI_OK)
                fprintf(stderr, "cinfer bench (a --tp/--pp worker): %s\n", err.msg);
            return ls == CI_OK ? 0 : 1;
        }
    }
    if (ls != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        model_free(m);
        return 1;
    }
    int rc = 2;
    struct bench_workload w = {0};
    w.long_index = -1;
    int model_ctx = m->config.n_ctx_train;
    struct bench_engine_config ec = {.n_threads = o->threads,
                                     .n_ctx = o->ctx,
                                     .max_seqs = o->max_seqs,
                                     .max_batch_tokens = o->max_batch_tokens,
                                     .block_size = o->block_size,
                                     .kv_type = kv_type,
                                     .spec = ENGINE_SPEC_NONE,
                                     .spec_k = o->spec_k,
                                     .spec_max_batch = o->spec_max_batch,
                                     .dist = o->tp ? o->tp->d : NULL};
    struct model *draft = NULL;
    if (o->spec && !engine_spec_parse(o->spec, &ec.spec)) {
        fprintf(stderr, "cinfer bench: --spec: '%s' is not one of none, ngram, draft\n", o->spec);
        model_free(m);
        return 2;
    }
    if ((ec.spec == ENGINE_SPEC_DRAFT) != (o->draft_path != NULL)) {
        fprintf(stderr, "cinfer bench: --spec draft and --draft-model FILE go together\n");
        model_free(m);
        return 2;
    }
    if (o->draft_path && model_load(o->draft_path, &draft, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: --draft-model: %s\n", err.msg);
        model_free(m);
        return 1;
    }
    ec.draft = draft;
    int64_t bpt = model_kv_bytes_per_token(m, kv_type);
    if (bpt <= 0) {
        fprintf(stderr, "cinfer bench: --kv-type q8_0 needs head_dim a multiple of 32 (the model's is %d)\n",
                m->config.head_dim);
        model_free(m);
        return 2;
    }
    printf("model      %s: %d layers, d %d, %d heads (%d KV), vocab %d, %.1f MiB of weights, context %d\n",
           o->model_path, model_n_layer_all(&m->config), m->config.n_embd, m->config.n_head,
           m->config.n_kv_head, m->config.n_vocab, (double)model_weight_bytes(m) / MIB, model_ctx);

    if (sweep_ctx) {
        int max_ctx = 0, kept = 0;
        for (int i = 0; i < n_contexts; i++)
            if (contexts[i] + (o->sweep_steps > KV_SWEEP_STEPS ? o->sweep_steps : KV_SWEEP_STEPS) + 1 <=
                model_ctx)
                contexts[kept++] = contexts[i];
            else
                fprintf(stderr, "cinfer bench: context %d exceeds the model's %d tokens: skipped\n",
                        contexts[i], model_ctx);
        n_contexts = kept;
        for (int i = 0; i < n_contexts; i++)
            max_ctx = contexts[i] > max_ctx ? contexts[i] : max_ctx;
        if (n_contexts == 0) {
            fprintf(stderr, "cinfer bench: --contexts: none fits the model's context\n");
            goto done;
        }
        int most_steps = o->sweep_steps > KV_SWEEP_STEPS ? o->sweep_steps : KV_SWEEP_STEPS;
        ec.n_ctx = o->ctx ? o->ctx : max_ctx + most_steps + 1;
        ec.max_seqs = 1;
        ec.kv_mem_bytes = o->kv_mem_mib > 0 ? (int64_t)(o->kv_mem_mib * MIB) : 2 * bpt * ec.n_ctx;
        printf("sweep      decode step time vs context: one request per context, median of %d naive and %d "
               "KV-cache decode steps\n",
               o->sweep_steps, most_steps);
        print_engine(&ec, m);
        rc = sweep_context(o, m, &ec, contexts, n_contexts, out_dir);
        goto done;
    }

    if (!ec.n_ctx)
        ec.n_ctx = model_ctx < 1024 ? model_ctx : 1024;
    if (ec.n_ctx > model_ctx) {
        fprintf(stderr, "cinfer bench: --ctx %d exceeds the model's context of %d tokens\n", ec.n_ctx,
                model_ctx);
        goto done;
    }
    if (sweep_batch) {
        // Decode-heavy by default: short prompts, longer outputs.
        if (o->input_len < 0)
            o->input_len = 32;
        if (o->output_len < 0)
            o->output_len = 64;
    }
    struct bench_workload_params wp = workload_params(o, kind, m, ec.n_ctx, rate);
    if (bench_workload_generate(&wp, &w, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        goto done;
    }
    if (o->kv_mem_mib > 0) {
        ec.kv_mem_bytes = (int64_t)(o->kv_mem_mib * MIB);
    } else if (sweep_batch) {
        // Enough for the largest batch of the longest requests: the sweep is about batching, not memory.
        int longest = 0, max_b = 1;
        for (int i = 0; i < w.n; i++)
            longest = w.reqs[i].n_prompt + w.reqs[i].max_tokens > longest
                          ? w.reqs[i].n_prompt + w.reqs[i].max_tokens
                          : longest;
        for (int i = 0; i < n_batch; i++)
            max_b = batch[i] > max_b ? batch[i] : max_b;
        int64_t blocks = (longest + ec.block_size - 1) / ec.block_size;
        ec.kv_mem_bytes = (int64_t)max_b * blocks * ec.block_size * bpt + ec.block_size * bpt;
    } else {
        ec.kv_mem_bytes = 4 * bpt * ec.n_ctx; // the contiguous policies hold four sequences
    }
    bool contiguous = false;
    for (int i = 0; i < n_pol && !sweep_batch; i++)
        contiguous = contiguous || pol[i] < BENCH_POLICY_PAGED;
    if (ec.kv_mem_bytes < (contiguous ? bpt * ec.n_ctx : bpt * ec.block_size)) {
        fprintf(stderr,
                "cinfer bench: --kv-mem %.2f MiB holds no %s of %d tokens (%.2f MiB); raise --kv-mem or "
                "lower --ctx\n",
                (double)ec.kv_mem_bytes / MIB, contiguous ? "whole context" : "block",
                contiguous ? ec.n_ctx : ec.block_size,
                (double)(contiguous ? bpt * ec.n_ctx : bpt * ec.block_size) / MIB);
        goto done;
    }
    print_workload(&wp, &w);
    print_engine(&ec, m);
    if (sweep_batch) {
        enum bench_policy paged[BENCH_MAX_RUNS];
        for (int i = 0; i < n_batch; i++)
            paged[i] = BENCH_POLICY_PAGED;
        printf("sweep      throughput vs batch size: policy paged (continuous + chunked prefill + paged KV), "
               "max sequences %d..%d\n",
               batch[0], batch[n_batch - 1]);
        rc = run_set(o, m, &w, &wp, &ec, paged, batch, n_batch, "sweep-batch", out_dir);
    } else {
        rc = run_set(o, m, &w, &wp, &ec, pol, NULL, n_pol, o->compare ? "compare" : "single", out_dir);
    }
done:
    if (o->tp)
        print_dist(o->tp->d, m);
    bench_workload_free(&w);
    model_free(draft);
    model_free(m);
    return rc;
}
