/* cinfer bench: the offline benchmark.  Loads a model, generates a seeded workload (bench_workload.h),
 * replays it in-process under one policy or a comparison of policies (or a sweep of batch sizes or context
 * lengths), and prints the table; writes CSV/JSON and gnuplot plots into --out (bench_report.h).  Prompts are
 * token ids, so no tokenizer is needed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "core/mem.h"
#include "core/rng.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "model/model.h"

int cmd_bench(int argc, char **argv);

#define MAX_RUNS       16
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
    char bar[31];
    int fill = n_total > 0 ? (int)((int64_t)n_done * 30 / n_total) : 30;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r\033[K%-12s [%s] %d/%d requests  %.1f s", label, bar, n_done, n_total,
            (double)elapsed_ns * 1e-9);
    fflush(stderr);
    p->drawn = true;
}

static void progress_clear(struct progress *p) {
    if (p->on && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->drawn = false;
    }
}

/* Comma-separated positive integers into out[0..*n), at most max.  False on a malformed list. */
static bool parse_int_list(const char *s, int *out, int max, int *n) {
    *n = 0;
    while (*s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 24) || *n >= max || (*end != ',' && *end != '\0'))
            return false;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

static bool parse_rate(const char *s, double *out) {
    if (!strcmp(s, "inf") || !strcmp(s, "infinity")) {
        *out = INFINITY;
        return true;
    }
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0) || !isfinite(v))
        return false;
    *out = v;
    return true;
}

struct opts {
    const char *model_path, *workload, *rate, *compare, *policy, *sweep, *out_dir, *batch_sizes, *contexts;
    const char *kv_type;
    int num_prompts, input_len, output_len, groups, prefix_len, suffix_len, long_len, long_output_len;
    float range_ratio, input_sigma, output_sigma, long_at, long_delay_ms, kv_mem_mib;
    uint64_t seed;
    int sweep_steps, threads, ctx, max_seqs, max_batch_tokens, block_size;
    bool quiet, no_plots;
};

/* Workload parameters: the kind's defaults, overridden by every flag that was given (sentinel -1). */
static struct bench_workload_params workload_params(const struct opts *o, enum bench_workload_kind k,
                                                    const struct model *m, int n_ctx, double rate) {
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

static bool config_json(char *buf, size_t n, const struct opts *o, const struct bench_workload_params *p,
                        const struct bench_engine_config *c, const char *mode) {
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
static int run_set(const struct opts *o, const struct model *m, const struct bench_workload *w,
                   const struct bench_workload_params *wp, const struct bench_engine_config *base,
                   const enum bench_policy *pol, const int *batch, int n, const char *mode,
                   const char *out_dir) {
    struct bench_run runs[MAX_RUNS];
    struct bench_summary sums[MAX_RUNS];
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
            struct bench_sweep_point pts[MAX_RUNS], lat[MAX_RUNS];
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
static int sweep_context(const struct opts *o, const struct model *m, const struct bench_engine_config *base,
                         const int *contexts, int n_ctx_list, const char *out_dir) {
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
            bench_sort(d, nd);
            step_ms[p] = bench_percentile(d, nd, 50);
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

int cmd_bench(int argc, char **argv) {
    struct opts o = {0};
    o.workload = "random";
    o.rate = NULL;
    o.num_prompts = o.input_len = o.output_len = o.groups = o.prefix_len = o.suffix_len = -1;
    o.long_len = o.long_output_len = -1;
    o.range_ratio = o.input_sigma = o.output_sigma = o.long_at = o.long_delay_ms = -1;
    o.kv_mem_mib = 0;
    o.kv_type = "f32";
    o.seed = 1;
    o.sweep_steps = 2;
    o.threads = 2;
    o.ctx = 0;
    o.max_seqs = 16;
    o.max_batch_tokens = 128;
    o.block_size = 16;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &o.model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--workload", "-w", ARG_STR, &o.workload, 0, 0,
         "NAME  random | sharegpt-like | shared-prefix | long-prompt (default random)"},
        {"--num-prompts", "-n", ARG_INT, &o.num_prompts, 1, 1 << 20,
         "N  requests (default 32; long-prompt 17)"},
        {"--request-rate", NULL, ARG_STR, &o.rate, 0, 0,
         "R  Poisson arrivals per second, or inf (default inf)"},
        {"--seed", NULL, ARG_U64, &o.seed, 0, 9007199254740991.0, "S  workload seed (default 1)"},
        {"--input-len", NULL, ARG_INT, &o.input_len, 1, 1 << 24, "L  prompt tokens (mean or median)"},
        {"--output-len", NULL, ARG_INT, &o.output_len, 1, 1 << 24, "L  output tokens (mean or median)"},
        {"--range-ratio", NULL, ARG_FLOAT, &o.range_ratio, 0, 0.99,
         "R  uniform lengths within +-R (default 0.5)"},
        {"--input-sigma", NULL, ARG_FLOAT, &o.input_sigma, 0, 10, "S  sharegpt-like: log-normal sigma (0.9)"},
        {"--output-sigma", NULL, ARG_FLOAT, &o.output_sigma, 0, 10,
         "S  sharegpt-like: log-normal sigma (0.7)"},
        {"--groups", NULL, ARG_INT, &o.groups, 1, 1 << 20, "G  shared-prefix: groups (default 4)"},
        {"--prefix-len", NULL, ARG_INT, &o.prefix_len, 1, 1 << 24, "L  shared-prefix: shared tokens (192)"},
        {"--suffix-len", NULL, ARG_INT, &o.suffix_len, 1, 1 << 24, "L  shared-prefix: unique tokens (16)"},
        {"--long-len", NULL, ARG_INT, &o.long_len, 1, 1 << 24, "L  long-prompt: the long prompt (768)"},
        {"--long-output-len", NULL, ARG_INT, &o.long_output_len, 1, 1 << 24,
         "L  long-prompt: its outputs (16)"},
        {"--long-at", NULL, ARG_FLOAT, &o.long_at, 0, 1, "F  long-prompt: fraction arriving before it (1/3)"},
        {"--long-delay-ms", NULL, ARG_FLOAT, &o.long_delay_ms, 0, 1e8,
         "MS  long-prompt, rate inf: its arrival (default 500)"},
        {"--policy", NULL, ARG_STR, &o.policy, 0, 0,
         "NAME  one policy: naive|static|continuous|chunked|paged|prefix (default prefix)"},
        {"--compare", NULL, ARG_STR, &o.compare, 0, 0,
         "LIST  comma-separated policies, run on the same workload"},
        {"--sweep", NULL, ARG_STR, &o.sweep, 0, 0,
         "batch|context  throughput vs max sequences, or decode step time vs context"},
        {"--batch-sizes", NULL, ARG_STR, &o.batch_sizes, 0, 0, "LIST  --sweep batch (default 1,2,4,8,16,32)"},
        {"--contexts", NULL, ARG_STR, &o.contexts, 0, 0,
         "LIST  --sweep context (default 100,250,500,1000,1500,2000)"},
        {"--sweep-steps", NULL, ARG_INT, &o.sweep_steps, 1, 200,
         "N  --sweep context: naive decode steps timed (2; KV >= 8)"},
        {"--out", "-o", ARG_STR, &o.out_dir, 0, 0, "DIR  output directory (default bench/out/<timestamp>)"},
        {"--no-plots", NULL, ARG_FLAG, &o.no_plots, 0, 0, "    write data only, do not run gnuplot"},
        {"--quiet", "-q", ARG_FLAG, &o.quiet, 0, 0, "    no progress bar"},
        {"--threads", "-t", ARG_INT, &o.threads, 1, 512, "N  kernel threads (default 2)"},
        {"--ctx", "-c", ARG_INT, &o.ctx, 0, 1 << 24,
         "N  context per sequence (default min(model, 1024); the contiguous block)"},
        {"--kv-mem", NULL, ARG_FLOAT, &o.kv_mem_mib, 0, 1 << 24,
         "MIB  KV budget for every policy (default: 4 whole contexts)"},
        {"--kv-type", NULL, ARG_STR, &o.kv_type, 0, 0,
         "T  KV cache element type: f32|f16|q8_0 (default f32)"},
        {"--max-seqs", NULL, ARG_INT, &o.max_seqs, 1, 4096,
         "N  running sequences; static batch (default 16)"},
        {"--max-batch-tokens", NULL, ARG_INT, &o.max_batch_tokens, 1, 1 << 20,
         "N  chunked prefill budget per step (default 128)"},
        {"--block-size", NULL, ARG_INT, &o.block_size, 1, 1 << 16, "N  paged KV block (default 16)"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage(
            "bench",
            "-m MODEL [--workload W] [--num-prompts N] [--request-rate R|inf] [--compare LIST | --policy P "
            "| --sweep batch|context] [--out DIR] [engine options]",
            specs, n_specs);
        printf(
            "\npolicies (cumulative): naive, static, continuous (no chunking), chunked, paged, prefix; the "
            "first four\nuse contiguous KV (one whole-context block per sequence).  See bench/README.md.\n");
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("bench", argc, argv, 2, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!o.model_path) {
        fprintf(stderr, "cinfer bench: -m MODEL is required\n");
        return 2;
    }
    enum bench_workload_kind kind;
    if (!bench_workload_parse(o.workload, &kind)) {
        fprintf(stderr,
                "cinfer bench: --workload: unknown '%s' (random, sharegpt-like, shared-prefix, "
                "long-prompt)\n",
                o.workload);
        return 2;
    }
    double rate = INFINITY;
    if (o.rate && !parse_rate(o.rate, &rate)) {
        fprintf(stderr, "cinfer bench: --request-rate: '%s' is not a positive number or inf\n", o.rate);
        return 2;
    }
    enum bench_policy pol[MAX_RUNS];
    int n_pol = 1;
    pol[0] = BENCH_POLICY_PREFIX;
    char msg[160];
    uint32_t kv_type;
    if (!kv_type_parse(o.kv_type, &kv_type)) {
        fprintf(stderr, "cinfer bench: --kv-type: '%s' is not one of f32, f16, q8_0\n", o.kv_type);
        return 2;
    }
    if (o.compare && o.policy) {
        fprintf(stderr, "cinfer bench: --compare and --policy exclude each other\n");
        return 2;
    }
    if (o.compare && !bench_policy_list_parse(o.compare, pol, MAX_RUNS, &n_pol, msg, sizeof msg)) {
        fprintf(stderr, "cinfer bench: --compare: %s\n", msg);
        return 2;
    }
    if (o.policy && !bench_policy_parse(o.policy, &pol[0])) {
        fprintf(stderr, "cinfer bench: --policy: unknown '%s'\n", o.policy);
        return 2;
    }
    bool sweep_batch = false, sweep_ctx = false;
    if (o.sweep) {
        sweep_batch = !strcmp(o.sweep, "batch");
        sweep_ctx = !strcmp(o.sweep, "context");
        if (!sweep_batch && !sweep_ctx) {
            fprintf(stderr, "cinfer bench: --sweep: '%s' is neither batch nor context\n", o.sweep);
            return 2;
        }
        if (o.compare) {
            fprintf(stderr, "cinfer bench: --sweep and --compare exclude each other\n");
            return 2;
        }
    }
    int batch[MAX_RUNS] = {1, 2, 4, 8, 16, 32}, n_batch = 6;
    int contexts[64] = {100, 250, 500, 1000, 1500, 2000}, n_contexts = 6;
    if (o.batch_sizes && !parse_int_list(o.batch_sizes, batch, MAX_RUNS, &n_batch)) {
        fprintf(stderr, "cinfer bench: --batch-sizes: '%s' is not a list of up to %d positive integers\n",
                o.batch_sizes, MAX_RUNS);
        return 2;
    }
    if (o.contexts && !parse_int_list(o.contexts, contexts, 64, &n_contexts)) {
        fprintf(stderr, "cinfer bench: --contexts: '%s' is not a list of up to 64 positive integers\n",
                o.contexts);
        return 2;
    }
    char out_dir[4096];
    if (o.out_dir)
        snprintf(out_dir, sizeof out_dir, "%s", o.out_dir);
    else
        default_out_dir(out_dir, sizeof out_dir);

    struct model *m = NULL;
    struct ci_err err = {0};
    if (model_load(o.model_path, &m, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        return 1;
    }
    int rc = 2;
    struct bench_workload w = {0};
    w.long_index = -1;
    int model_ctx = m->config.n_ctx_train;
    struct bench_engine_config ec = {o.threads,    o.ctx, o.max_seqs, o.max_batch_tokens,
                                     o.block_size, 0,     kv_type};
    int64_t bpt = model_kv_bytes_per_token(m, kv_type);
    if (bpt <= 0) {
        fprintf(stderr, "cinfer bench: --kv-type q8_0 needs head_dim a multiple of 32 (the model's is %d)\n",
                m->config.head_dim);
        model_free(m);
        return 2;
    }
    printf("model      %s: %d layers, d %d, %d heads (%d KV), vocab %d, %.1f MiB of weights, context %d\n",
           o.model_path, m->config.n_layer, m->config.n_embd, m->config.n_head, m->config.n_kv_head,
           m->config.n_vocab, (double)model_weight_bytes(m) / MIB, model_ctx);

    if (sweep_ctx) {
        int max_ctx = 0, kept = 0;
        for (int i = 0; i < n_contexts; i++)
            if (contexts[i] + (o.sweep_steps > KV_SWEEP_STEPS ? o.sweep_steps : KV_SWEEP_STEPS) + 1 <=
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
        int most_steps = o.sweep_steps > KV_SWEEP_STEPS ? o.sweep_steps : KV_SWEEP_STEPS;
        ec.n_ctx = o.ctx ? o.ctx : max_ctx + most_steps + 1;
        ec.max_seqs = 1;
        ec.kv_mem_bytes = o.kv_mem_mib > 0 ? (int64_t)(o.kv_mem_mib * MIB) : 2 * bpt * ec.n_ctx;
        printf("sweep      decode step time vs context: one request per context, median of %d naive and %d "
               "KV-cache decode steps\n",
               o.sweep_steps, most_steps);
        print_engine(&ec, m);
        rc = sweep_context(&o, m, &ec, contexts, n_contexts, out_dir);
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
        if (o.input_len < 0)
            o.input_len = 32;
        if (o.output_len < 0)
            o.output_len = 64;
    }
    struct bench_workload_params wp = workload_params(&o, kind, m, ec.n_ctx, rate);
    if (bench_workload_generate(&wp, &w, &err) != CI_OK) {
        fprintf(stderr, "cinfer bench: %s\n", err.msg);
        goto done;
    }
    if (o.kv_mem_mib > 0) {
        ec.kv_mem_bytes = (int64_t)(o.kv_mem_mib * MIB);
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
        enum bench_policy paged[MAX_RUNS];
        for (int i = 0; i < n_batch; i++)
            paged[i] = BENCH_POLICY_PAGED;
        printf("sweep      throughput vs batch size: policy paged (continuous + chunked prefill + paged KV), "
               "max sequences %d..%d\n",
               batch[0], batch[n_batch - 1]);
        rc = run_set(&o, m, &w, &wp, &ec, paged, batch, n_batch, "sweep-batch", out_dir);
    } else {
        rc = run_set(&o, m, &w, &wp, &ec, pol, NULL, n_pol, o.compare ? "compare" : "single", out_dir);
    }
done:
    bench_workload_free(&w);
    model_free(m);
    return rc;
}
