/* cinfer bench: the flags of the offline policy benchmark (src/bench/offline.c). */
#include <stdio.h>
#include <string.h>

#include "bench/offline.h"
#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tp.h"

int cmd_bench(int argc, char **argv) {
    struct bench_offline_opts o;
    bench_offline_opts_default(&o);
    const char *workload = "random", *rate = NULL, *compare = NULL, *policy = NULL, *sweep = NULL;
    const char *batch_sizes = NULL, *contexts = NULL;
    struct cli_dist dist = CLI_DIST_DEFAULT;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &o.model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--workload", "-w", ARG_STR, &workload, 0, 0,
         "NAME  random | sharegpt-like | shared-prefix | long-prompt (default random)"},
        {"--num-prompts", "-n", ARG_INT, &o.num_prompts, 1, 1 << 20,
         "N  requests (default 32; long-prompt 17)"},
        {"--request-rate", NULL, ARG_STR, &rate, 0, 0,
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
        {"--policy", NULL, ARG_STR, &policy, 0, 0,
         "NAME  one policy: naive|static|continuous|chunked|paged|prefix (default prefix)"},
        {"--compare", NULL, ARG_STR, &compare, 0, 0,
         "LIST  comma-separated policies, run on the same workload"},
        {"--sweep", NULL, ARG_STR, &sweep, 0, 0,
         "batch|context  throughput vs max sequences, or decode step time vs context"},
        {"--batch-sizes", NULL, ARG_STR, &batch_sizes, 0, 0, "LIST  --sweep batch (default 1,2,4,8,16,32)"},
        {"--contexts", NULL, ARG_STR, &contexts, 0, 0,
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
         "T  KV cache element type: f32|f16|q8_0 (default f16)"},
        {"--max-seqs", NULL, ARG_INT, &o.max_seqs, 1, 4096,
         "N  running sequences; static batch (default 16)"},
        {"--max-batch-tokens", NULL, ARG_INT, &o.max_batch_tokens, 1, 1 << 20,
         "N  chunked prefill budget per step (default 128)"},
        {"--block-size", NULL, ARG_INT, &o.block_size, 1, 1 << 16, "N  paged KV block (default 16)"},
        {"--spec", NULL, ARG_STR, &o.spec, 0, 0,
         "MODE  speculative decoding: none|ngram|draft (acceptance and tokens/step reported)"},
        {"--spec-k", NULL, ARG_INT, &o.spec_k, 1, 32, "N  longest proposal (default 8)"},
        {"--spec-max-batch", NULL, ARG_INT, &o.spec_max_batch, 1, 4096,
         "N  speculate only in steps where at most N sequences decode (default: any number)"},
        {"--draft-model", NULL, ARG_STR, &o.draft_path, 0, 0, "FILE  --spec draft: the draft model"},
        CLI_DIST_SPECS(&dist),
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
    if (!bench_workload_parse(workload, &o.kind)) {
        fprintf(stderr,
                "cinfer bench: --workload: unknown '%s' (random, sharegpt-like, shared-prefix, "
                "long-prompt)\n",
                workload);
        return 2;
    }
    if (rate && !args_parse_rate(rate, &o.rate)) {
        fprintf(stderr, "cinfer bench: --request-rate: '%s' is not a positive number or inf\n", rate);
        return 2;
    }
    if (!cinfer_kv_type_known(o.kv_type)) {
        fprintf(stderr, "cinfer bench: --kv-type: '%s' is not one of f32, f16, q8_0\n", o.kv_type);
        return 2;
    }
    char msg[160];
    if (compare && policy) {
        fprintf(stderr, "cinfer bench: --compare and --policy exclude each other\n");
        return 2;
    }
    o.compare = compare != NULL;
    if (compare &&
        !bench_policy_list_parse(compare, o.policies, BENCH_MAX_RUNS, &o.n_policies, msg, sizeof msg)) {
        fprintf(stderr, "cinfer bench: --compare: %s\n", msg);
        return 2;
    }
    if (policy && !bench_policy_parse(policy, &o.policies[0])) {
        fprintf(stderr, "cinfer bench: --policy: unknown '%s'\n", policy);
        return 2;
    }
    if (sweep) {
        o.sweep = !strcmp(sweep, "batch")     ? BENCH_SWEEP_BATCH
                  : !strcmp(sweep, "context") ? BENCH_SWEEP_CONTEXT
                                              : BENCH_SWEEP_NONE;
        if (o.sweep == BENCH_SWEEP_NONE) {
            fprintf(stderr, "cinfer bench: --sweep: '%s' is neither batch nor context\n", sweep);
            return 2;
        }
        if (compare) {
            fprintf(stderr, "cinfer bench: --sweep and --compare exclude each other\n");
            return 2;
        }
    }
    if (batch_sizes &&
        !args_parse_int_list(batch_sizes, 1, 1 << 24, o.batch_sizes, BENCH_MAX_RUNS, &o.n_batch_sizes)) {
        fprintf(stderr, "cinfer bench: --batch-sizes: '%s' is not a list of up to %d positive integers\n",
                batch_sizes, BENCH_MAX_RUNS);
        return 2;
    }
    if (contexts &&
        !args_parse_int_list(contexts, 1, 1 << 24, o.contexts, BENCH_MAX_CONTEXTS, &o.n_contexts)) {
        fprintf(stderr, "cinfer bench: --contexts: '%s' is not a list of up to %d positive integers\n",
                contexts, BENCH_MAX_CONTEXTS);
        return 2;
    }
    struct cinfer_tp *tp = NULL;
    struct cinfer_load_options lo = {0};
    int rc = 1;
    if (cli_tp_start("bench", &dist, argc, argv, &tp, &lo)) {
        o.tp = tp;
        o.tp_options = lo.tp_options;
        rc = bench_offline_run(&o);
    }
    cinfer_tp_end(tp, rc == 0); // rank 0 tells the others to stop
    return rc;
}
