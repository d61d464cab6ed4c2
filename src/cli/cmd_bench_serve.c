/* cinfer bench serve: the flags of the serving load generator (the benchmark itself is src/bench/serve.c;
 * bench/serve.md documents both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/serve.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/mem.h"

#define CMD "bench serve"
static const char SYNOPSIS[] =
    "--url URL [options]\n\n"
    "Sends a seeded workload of streaming requests to an OpenAI-compatible server and reports vLLM's "
    "serving\n"
    "metrics (TTFT, TPOT, ITL, E2EL, throughput, goodput).  --goodput takes one or more KEY:MS terms\n"
    "(keys ttft, tpot, e2el), e.g. --goodput ttft:500 tpot:50.  See bench/serve.md.";

/* Takes every --goodput term out of argv (vLLM's nargs='+': KEY:MS words after the flag) and returns the
 * rest in rest[] (caller-allocated, argc entries); the terms are joined into spec. */
static bool split_goodput(int argc, char **argv, char **rest, int *n_rest, char *spec, size_t spec_size,
                          bool *given) {
    *n_rest = 0;
    *given = false;
    spec[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool eq = !strncmp(a, "--goodput=", 10);
        if (strcmp(a, "--goodput") && !eq) {
            rest[(*n_rest)++] = argv[i];
            continue;
        }
        *given = true;
        size_t len = strlen(spec);
        if (eq)
            snprintf(spec + len, spec_size - len, "%s ", a + 10);
        while (!eq && i + 1 < argc && argv[i + 1][0] != '-' && strchr(argv[i + 1], ':')) {
            len = strlen(spec);
            if (len + strlen(argv[i + 1]) + 2 > spec_size)
                return false;
            snprintf(spec + len, spec_size - len, "%s ", argv[++i]);
        }
    }
    return true;
}

int cmd_bench_serve(int argc, char **argv) {
    int rc = 1;
    struct bench_serve_opts o = {0};
    o.dataset_name = "random";
    o.rate_str = "inf";
    o.endpoint = "/v1/completions";
    o.num_prompts = 32;
    o.input_len = o.output_len = o.groups = o.prefix_len = o.suffix_len = -1;
    o.range_ratio = o.input_sigma = o.output_sigma = -1;
    o.timeout_s = 600;
    o.seed = 1;
    struct arg_spec specs[] = {
        {"--url", "--base-url", ARG_STR, &o.url, 0, 0, "URL  server base URL, e.g. http://127.0.0.1:8080"},
        {"--endpoint", NULL, ARG_STR, &o.endpoint, 0, 0,
         "PATH  /v1/completions (default) or /v1/chat/completions"},
        {"--api-key", NULL, ARG_STR, &o.api_key, 0, 0,
         "KEY  sent as a Bearer token (default $OPENAI_API_KEY)"},
        {"--model", NULL, ARG_STR, &o.model, 0, 0, "NAME  model field (default: first of GET /v1/models)"},
        {"--dataset", "--dataset-name", ARG_STR, &o.dataset_name, 0, 0,
         "NAME  random | sharegpt-like | shared-prefix (default random)"},
        {"--num-prompts", "-n", ARG_INT, &o.num_prompts, 1, 1 << 20, "N  requests (default 32)"},
        {"--request-rate", NULL, ARG_STR, &o.rate_str, 0, 0,
         "R  Poisson arrivals at R requests/s, or inf: all at once (default inf)"},
        {"--max-concurrency", NULL, ARG_INT, &o.max_concurrency, 0, 1 << 20,
         "C  at most C requests in flight (default 0: no cap)"},
        {"--input-len", "--random-input-len", ARG_INT, &o.input_len, 1, 1 << 22,
         "L  prompt tokens (random: mean; sharegpt-like: median; default 128 / 96)"},
        {"--output-len", "--random-output-len", ARG_INT, &o.output_len, 1, 1 << 22,
         "L  output tokens (max_tokens; default 64, shared-prefix 32)"},
        {"--range-ratio", "--random-range-ratio", ARG_FLOAT, &o.range_ratio, 0, 0.999,
         "R  random: lengths uniform in [L(1-R), L(1+R)] (default 0.5)"},
        {"--input-sigma", NULL, ARG_FLOAT, &o.input_sigma, 0, 4,
         "S  sharegpt-like: sigma of log input length (default 0.9)"},
        {"--output-sigma", NULL, ARG_FLOAT, &o.output_sigma, 0, 4,
         "S  sharegpt-like: sigma of log output length (default 0.7)"},
        {"--max-len", NULL, ARG_INT, &o.max_len, 0, 1 << 22,
         "N  sharegpt-like: clip input + output to N tokens (default 0: no clip)"},
        {"--groups", NULL, ARG_INT, &o.groups, 1, 1 << 16, "G  shared-prefix: prefix groups (default 4)"},
        {"--prefix-len", NULL, ARG_INT, &o.prefix_len, 1, 1 << 22,
         "L  shared-prefix: shared prefix tokens (default 192)"},
        {"--suffix-len", NULL, ARG_INT, &o.suffix_len, 1, 1 << 22,
         "L  shared-prefix: unique suffix tokens (default 16)"},
        {"--seed", NULL, ARG_U64, &o.seed, 0, 1.8e19, "S  workload and arrival seed (default 1)"},
        // Taken out of argv by split_goodput before parsing (it takes several words); listed for --help.
        {"--goodput", NULL, ARG_STR, NULL, 0, 0, "KEY:MS...  SLOs for goodput: ttft:MS tpot:MS e2el:MS"},
        {"--out", "-o", ARG_STR, &o.out_dir, 0, 0, "DIR  output directory (default bench/out/serve-<time>)"},
        {"--timeout", NULL, ARG_FLOAT, &o.timeout_s, 1, 86400, "S  per-request timeout (default 600)"},
        {"--tokens-per-word", NULL, ARG_FLOAT, &o.tokens_per_word, 0.05, 100,
         "F  prompt tokens per word (default: measured from the server's usage)"},
        {"--no-calibrate", NULL, ARG_FLAG, &o.no_calibrate, 0, 0, "   assume 1 token per word"},
        {"--no-ignore-eos", NULL, ARG_FLAG, &o.no_ignore_eos, 0, 0, "   do not send ignore_eos"},
        {"--no-plots", NULL, ARG_FLAG, &o.no_plots, 0, 0, "   skip the gnuplot PNGs"},
        {"--quiet", "-q", ARG_FLAG, &o.quiet, 0, 0, "   no progress bar"},
    };
    const int n_specs = (int)(sizeof specs / sizeof specs[0]);
    char **rest = NULL;
    char goodput[512], msg[256];

    if (args_want_help(argc, argv, 3)) {
        args_usage(CMD, SYNOPSIS, specs, n_specs);
        return 0;
    }
    rest = ci_calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) {
        fprintf(stderr, "cinfer bench serve: out of memory\n");
        return 1;
    }
    int n_rest = 0;
    bool goodput_given = false;
    if (!split_goodput(argc, argv, rest, &n_rest, goodput, sizeof goodput, &goodput_given)) {
        fprintf(stderr, "cinfer bench serve: --goodput: too many terms\n");
        rc = 2;
        goto done;
    }
    const char *positional[1];
    int n_positional = 0;
    if (!args_parse(CMD, n_rest, rest, 3, specs, n_specs, positional, 0, &n_positional)) {
        rc = 2;
        goto done;
    }
    if (!o.url) {
        fprintf(stderr, "cinfer bench serve: --url is required (e.g. --url http://127.0.0.1:8080)\n");
        rc = 2;
        goto done;
    }
    if (!strcmp(o.dataset_name, "random"))
        o.dataset = BENCH_SERVE_RANDOM;
    else if (!strcmp(o.dataset_name, "sharegpt-like") || !strcmp(o.dataset_name, "sharegpt"))
        o.dataset = BENCH_SERVE_SHAREGPT;
    else if (!strcmp(o.dataset_name, "shared-prefix"))
        o.dataset = BENCH_SERVE_SHARED_PREFIX;
    else {
        fprintf(stderr, "cinfer bench serve: --dataset: '%s' is not random, sharegpt-like or shared-prefix\n",
                o.dataset_name);
        rc = 2;
        goto done;
    }
    if (!args_parse_rate(o.rate_str, &o.rate)) {
        fprintf(stderr, "cinfer bench serve: --request-rate: '%s' is not a positive number or inf\n",
                o.rate_str);
        rc = 2;
        goto done;
    }
    if (goodput_given && !bench_serve_parse_goodput(goodput, &o.slo, msg, sizeof msg)) {
        fprintf(stderr, "cinfer bench serve: --goodput: %s\n", msg);
        rc = 2;
        goto done;
    }
    rc = bench_serve_run(&o);
done:
    ci_free(rest);
    return rc;
}
