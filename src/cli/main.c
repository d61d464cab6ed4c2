/* cinfer: one binary, many subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

/* `cinfer bench` runs the offline policy benchmark; `cinfer bench serve|hw|kernels` the other benchmarks. */
static int cmd_bench_any(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[2], "serve"))
        return cmd_bench_serve(argc, argv);
    if (argc > 2 && !strcmp(argv[2], "hw"))
        return cmd_bench_hw(argc, argv);
    if (argc > 2 && !strcmp(argv[2], "kernels"))
        return cmd_bench_kernels(argc, argv);
    return cmd_bench(argc, argv);
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt and print TTFT/TBT/TPS/latency"},
    {"serve", cmd_serve,
     "an OpenAI-compatible HTTP server (and Anthropic's /v1/messages) with streaming, Prometheus metrics and "
     "a web "
     "UI"},
    {"router", cmd_router,
     "an OpenAI-compatible front for several `cinfer serve` replicas: prefix-aware routing, health checks, "
     "failover"},
    {"bench", cmd_bench_any, "benchmarks: policies (offline), serve (HTTP load), hw (machine), kernels"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"template", cmd_template, "render a Jinja chat template (a model's or a file's) with a conversation"},
    {"info", cmd_info, "print a model's hyper-parameters, tensor types, sizes and KV bytes per token"},
    {"convert", cmd_convert, "convert a llama2.c checkpoint (+ tokenizer.bin) to GGUF"},
    {"quantize", cmd_quantize,
     "re-type a GGUF model per a llama.cpp quantization preset (Q4_K_M, Q6_K, ...)"},
    {"synth", cmd_synth, "write a random-weight GGUF model with a real model's shape"},
    {"calc", cmd_calc,
     "the seeds' arithmetic: KV bytes, FLOPs, intensity, roofline TTFT/TBT for a model and hardware"},
    {"logits", cmd_logits, "write the logits of every position of a token list (testing)"},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: cinfer <command> [options]   (cinfer <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nrun, serve, logits and bench take --tp N (tensor) and --pp M (pipeline parallelism)\n"
               "over MPI: start them under mpirun -np N*M (README \"Past one machine\"); --dist-timeout S\n"
               "bounds a hung rank.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc, argv);
    fprintf(stderr, "cinfer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
