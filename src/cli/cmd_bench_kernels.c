/* cinfer bench kernels: the flags of the forward-pass benchmark (src/bench/kernels.c). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/perf.h"
#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

static bool parse_batches(const char *s, struct bench_kernels_opts *o) {
    o->n_batches = 0;
    if (!strcmp(s, "0") || !strcmp(s, "none") || !*s)
        return true;
    while (*s) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || o->n_batches >= BENCH_KERNELS_MAX_BATCHES ||
            (*end != ',' && *end != '\0'))
            return false;
        o->batches[o->n_batches++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return o->n_batches > 0;
}

int cmd_bench_kernels(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    struct bench_kernels_opts o = {
        .n_threads = ncpu > 0 && ncpu < 512 ? (int)ncpu : 1,
        .n_prompt = 512,
        .n_gen = 128,
        .reps = 5,
        .batch_reps = 1,
        .batch_pp = 128,
        .batch_tg = 128,
        .ubatch = 512,
        .block_size = 16,
        .seed = 1,
    };
    const char *batches = "1,4,16";
    const char *kv_type = "f16";
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &o.model, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--threads", "-t", ARG_INT, &o.n_threads, 1, 512, "N  kernel threads (default: online CPUs)"},
        {"--n-prompt", "-p", ARG_INT, &o.n_prompt, 0, 1 << 20,
         "P  pp test: prompt tokens (default 512; 0 = skip)"},
        {"--n-gen", "-n", ARG_INT, &o.n_gen, 0, 1 << 20,
         "N  tg test: generated tokens (default 128; 0 = skip)"},
        {"--depth", "-d", ARG_INT, &o.depth, 0, 1 << 20,
         "D  pp/tg: tokens of context in the KV cache before the test (llama-bench -d; default 0)"},
        {"--reps", "-r", ARG_INT, &o.reps, 1, BENCH_KERNELS_MAX_REPS,
         "R  repetitions of pp and tg (default 5)"},
        {"--batch", NULL, ARG_STR, &batches, 0, 0,
         "B,B,..  batched decode sequence counts (default 1,4,16; 0 = skip)"},
        {"--batch-pp", NULL, ARG_INT, &o.batch_pp, 1, 1 << 20,
         "P  batched: prompt tokens per sequence (default 128)"},
        {"--batch-tg", NULL, ARG_INT, &o.batch_tg, 1, 1 << 20, "N  batched: decode steps (default 128)"},
        {"--batch-reps", NULL, ARG_INT, &o.batch_reps, 1, BENCH_KERNELS_MAX_REPS,
         "R  batched: runs averaged (default 1)"},
        {"--ubatch", NULL, ARG_INT, &o.ubatch, 1, 1 << 16, "N  most tokens per forward call (default 512)"},
        {"--block-size", NULL, ARG_INT, &o.block_size, 1, 1 << 16, "N  KV block size in tokens (default 16)"},
        {"--kv-type", NULL, ARG_STR, &kv_type, 0, 0,
         "T  KV cache element type: f32|f16|q8_0 (default f16, as llama-bench)"},
        {"--bandwidth-gbs", NULL, ARG_FLOAT, &o.bw_gbs, 0.001, 1e6,
         "X  memory bandwidth, GB/s (default: measure)"},
        {"--peak-gflops", NULL, ARG_FLOAT, &o.peak_gflops, 0.001, 1e9,
         "X  f32 FMA peak, GFLOP/s (default: measure)"},
        {"--int8-peak-gops", NULL, ARG_FLOAT, &o.int8_peak_gops, 0.001, 1e9,
         "X  int8 dot-product peak, GOP/s, 1 multiply-add = 2 ops (default: measure)"},
        {"--hw-mib", NULL, ARG_INT, &o.hw_mib, 0, 1 << 20, "M  bandwidth buffer, MiB (default: bench hw's)"},
        {"--seed", NULL, ARG_U64, &o.seed, 0, 1.8e19, "S  seed of the random prompt tokens (default 1)"},
        {"--no-warmup", NULL, ARG_FLAG, &o.no_warmup, 0, 0, "skip the warm-up runs"},
        {"--json", NULL, ARG_FLAG, &o.json, 0, 0, "JSON lines: hw, model, then one per test"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 3)) {
        args_usage("bench kernels",
                   "-m MODEL [-t N] [-p 512] [-n 128] [-d 0] [--batch 1,4,16] [-r R] [--json]", specs,
                   n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("bench kernels", argc, argv, 3, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!o.model) {
        fprintf(stderr, "cinfer bench kernels: -m MODEL is required\n");
        return 2;
    }
    o.kv_type = kv_type;
    if (!cinfer_kv_type_known(kv_type)) {
        fprintf(stderr, "cinfer bench kernels: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type);
        return 2;
    }
    if (!parse_batches(batches, &o)) {
        fprintf(stderr,
                "cinfer bench kernels: --batch: expected comma-separated counts in [1, 4096], got '%s'\n",
                batches);
        return 2;
    }
    if (o.n_prompt == 0 && o.n_gen == 0 && o.n_batches == 0) {
        fprintf(stderr, "cinfer bench kernels: nothing to run (-p 0, -n 0 and --batch 0)\n");
        return 2;
    }
    return bench_kernels_run(&o);
}
