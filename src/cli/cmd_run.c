/* cinfer run: generate from a prompt, streaming text to stdout, then the seeds' metrics to stderr.  Built on
 * the public API (include/cinfer.h), as an embedding program would be. */
#include <stdio.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

struct stream {
    bool print_ids;
    int n_printed;
};

static bool on_token(void *user, cinfer_token token, const char *text, size_t len) {
    struct stream *st = user;
    if (st->print_ids) {
        if (token >= 0)
            printf(st->n_printed++ ? " %d" : "%d", token);
    } else {
        fwrite(text, 1, len, stdout);
    }
    fflush(stdout);
    return true;
}

int cmd_run(int argc, char **argv) {
    struct cinfer_generate_params gp;
    cinfer_generate_params_default(&gp);
    const char *model_path = NULL, *tok_path = NULL, *prompt = "";
    bool print_ids = false;
    struct cinfer_sampling *sp = &gp.sampling;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--prompt", "-p", ARG_STR, &prompt, 0, 0, "TEXT  prompt (default: empty, i.e. BOS only)"},
        {"--n-predict", "-n", ARG_INT, &gp.max_tokens, 0, 1 << 24, "N  tokens to generate (default 128)"},
        {"--temp", NULL, ARG_FLOAT, &sp->temperature, 0, 100, "T  temperature, 0 = greedy (default 0.8)"},
        {"--top-k", NULL, ARG_INT, &sp->top_k, 0, 1 << 30, "K  top-k, 0 = off (default 40)"},
        {"--top-p", NULL, ARG_FLOAT, &sp->top_p, 0, 1, "P  nucleus sampling, 1 = off (default 0.95)"},
        {"--min-p", NULL, ARG_FLOAT, &sp->min_p, 0, 1, "M  min-p, 0 = off (default 0.05)"},
        {"--repeat-penalty", NULL, ARG_FLOAT, &sp->repetition_penalty, 0.01, 100, "R  1 = off (default)"},
        {"--presence-penalty", NULL, ARG_FLOAT, &sp->presence_penalty, -2, 2, "P  0 = off (default)"},
        {"--frequency-penalty", NULL, ARG_FLOAT, &sp->frequency_penalty, -2, 2, "F  0 = off (default)"},
        {"--seed", NULL, ARG_U64, &sp->seed, 0, 9007199254740991.0, "S  sampling seed"},
        {"--threads", "-t", ARG_INT, &gp.n_threads, 1, 512, "N  kernel threads (default 2)"},
        {"--block-size", NULL, ARG_INT, &gp.kv_block_size, 1, 1 << 20,
         "N  KV block size in tokens (default 16)"},
        {"--ctx", "-c", ARG_INT, &gp.n_ctx, 0, 1 << 24, "N  context limit (default: the model's)"},
        {"--ignore-eos", NULL, ARG_FLAG, &gp.ignore_eos, 0, 0, "    do not stop at end-of-generation tokens"},
        {"--ids", NULL, ARG_FLAG, &print_ids, 0, 0, "    print generated token ids instead of text"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("run", "-m MODEL [-p PROMPT] [-n N] [sampling options]", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("run", argc, argv, 2, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!model_path) {
        fprintf(stderr, "cinfer run: -m MODEL is required\n");
        return 2;
    }
    struct cinfer_error err = {0};
    struct cinfer_model *m = NULL;
    if (cinfer_model_load(model_path, tok_path, &m, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer run: %s\n", err.message);
        return 1;
    }
    struct stream st = {.print_ids = print_ids};
    struct cinfer_generate_stats mt;
    if (!print_ids)
        fputs(prompt, stdout);
    enum cinfer_status s = cinfer_generate(m, prompt, &gp, on_token, &st, &mt, &err);
    printf("\n");
    fflush(stdout);
    if (s != CINFER_OK) {
        fprintf(stderr, "cinfer run: %s\n", err.message);
        cinfer_model_free(m);
        return 1;
    }
    fprintf(
        stderr,
        "\ncinfer run: prompt %d tokens, generated %d tokens (finish: %s), %d threads, KV cache %.1f KiB\n"
        "  TTFT     %9.2f ms   (prefill %.1f tokens/s)\n"
        "  TBT      %9.2f ms   mean (p50 %.2f ms, p99 %.2f ms)\n"
        "  TPS      %9.2f tokens/s\n"
        "  latency  %9.2f ms   = TTFT + (%d - 1) x TBT\n",
        mt.n_prompt, mt.n_generated, mt.finish_reason, gp.n_threads, (double)mt.kv_bytes / 1024, mt.ttft_ms,
        mt.prefill_tps, mt.tbt_ms, mt.tbt_p50_ms, mt.tbt_p99_ms, mt.tps, mt.latency_ms, mt.n_generated);
    cinfer_model_free(m);
    return 0;
}
