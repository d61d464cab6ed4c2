/* cinfer run: generate from a prompt, streaming text to stdout, then the seeds' metrics to stderr.  Built on
 * the public API (include/cinfer.h), as an embedding program would be: the serving engine in synchronous
 * mode, so every scheduling policy and KV option applies to a single request too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/tp.h"
#include "core/check.h"

/* The whole grammar file as a string (NULL with the reason in msg); opt names the option. */
static char *read_grammar(const char *opt, const char *path, char *msg, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, n, "%s %s: %s", opt, path, strerror(errno));
        return NULL;
    }
    size_t cap = (1u << 20) + 2, len; // the grammar limit is 1 MiB: one byte more is reported by the parser
    char *buf = malloc(cap);
    if (buf) {
        len = fread(buf, 1, cap - 1, f);
        buf[len] = '\0';
        if (ferror(f) || memchr(buf, '\0', len)) {
            snprintf(msg, n, "%s %s: %s", opt, path, ferror(f) ? "read error" : "the file holds a NUL byte");
            free(buf);
            buf = NULL;
        }
    } else {
        snprintf(msg, n, "out of memory");
    }
    fclose(f);
    return buf;
}

int cmd_run(int argc, char **argv) {
    struct cinfer_request_options ro;
    cinfer_request_options_default(&ro);
    struct engine_args ea;
    engine_args_init(&ea);
    const char *model_path = NULL, *tok_path = NULL, *prompt = "", *grammar_path = NULL, *schema_path = NULL,
               *regex = NULL;
    char *grammar = NULL;
    bool print_ids = false;
    struct cli_dist dist = CLI_DIST_DEFAULT;
    struct cinfer_sampling *sp = &ro.sampling;
    const struct arg_spec own[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0,
         "FILE  model (GGUF or llama2.c checkpoint; not an embedding-only bert)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--prompt", "-p", ARG_STR, &prompt, 0, 0, "TEXT  prompt (default: empty, i.e. BOS only)"},
        {"--n-predict", "-n", ARG_INT, &ro.max_tokens, 1, 1 << 24, "N  tokens to generate (default 128)"},
        {"--temp", NULL, ARG_FLOAT, &sp->temperature, 0, 100, "T  temperature, 0 = greedy (default 0.8)"},
        {"--top-k", NULL, ARG_INT, &sp->top_k, 0, 1 << 30, "K  top-k, 0 = off (default 40)"},
        {"--top-p", NULL, ARG_FLOAT, &sp->top_p, 0, 1, "P  nucleus sampling, 1 = off (default 0.95)"},
        {"--min-p", NULL, ARG_FLOAT, &sp->min_p, 0, 1, "M  min-p, 0 = off (default 0.05)"},
        {"--repeat-penalty", NULL, ARG_FLOAT, &sp->repetition_penalty, 0.01, 100, "R  1 = off (default)"},
        {"--presence-penalty", NULL, ARG_FLOAT, &sp->presence_penalty, -2, 2, "P  0 = off (default)"},
        {"--frequency-penalty", NULL, ARG_FLOAT, &sp->frequency_penalty, -2, 2, "F  0 = off (default)"},
        {"--seed", NULL, ARG_U64, &sp->seed, 0, 9007199254740991.0, "S  sampling seed"},
        {"--ignore-eos", NULL, ARG_FLAG, &ro.ignore_eos, 0, 0, "    do not stop at end-of-generation tokens"},
        {"--ids", NULL, ARG_FLAG, &print_ids, 0, 0, "    print generated token ids instead of text"},
        {"--grammar", NULL, ARG_STR, &grammar_path, 0, 0,
         "FILE  constrain the output to this GBNF grammar (llama.cpp's format)"},
        {"--json-schema", NULL, ARG_STR, &schema_path, 0, 0,
         "FILE  constrain the output to one JSON value this JSON Schema accepts (keywords it cannot honour "
         "exactly are errors)"},
        {"--regex", NULL, ARG_STR, &regex, 0, 0,
         "RE  constrain the whole output to match this regular expression (ECMAScript subset)"},
        CLI_DIST_SPECS(&dist),
    };
    struct arg_spec specs[CI_ARRAY_LEN(own) + ENGINE_ARGS_N_SPECS];
    memcpy(specs, own, sizeof own);
    engine_args_specs(&ea, specs + CI_ARRAY_LEN(own));
    int n_specs = (int)CI_ARRAY_LEN(specs);
    if (args_want_help(argc, argv, 2)) {
        args_usage("run", "-m MODEL [-p PROMPT] [-n N] [sampling options] [engine options]", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("run", argc, argv, 2, specs, n_specs, pos, 0, &n_pos) || !engine_args_finish("run", &ea))
        return 2;
    if (!model_path) {
        fprintf(stderr, "cinfer run: -m MODEL is required\n");
        return 2;
    }
    int rc = 1;
    struct cinfer_error err = {0};
    struct cinfer_model *m = NULL;
    struct cinfer_engine *e = NULL;
    struct cinfer_stream *st = NULL;
    struct cinfer_tp *tp = NULL;
    struct cinfer_load_options lo = {tok_path, false, false, NULL, 0, ea.pack_mode};
    cinfer_token *ids = NULL;
    int n_ids = 0;
    struct cinfer_engine_options eo = ea.o;
    const char *gopt = grammar_path ? "--grammar" : schema_path ? "--json-schema" : "--regex";
    const char *garg = grammar_path ? grammar_path : schema_path ? schema_path : regex;
    if (!!grammar_path + !!schema_path + !!regex > 1) {
        fprintf(stderr, "cinfer run: give at most one of --grammar, --json-schema, --regex\n");
        return 2;
    }
    if (grammar_path || schema_path) {
        if (!(grammar = read_grammar(gopt, garg, err.message, sizeof err.message)))
            goto fail;
        ro.grammar = grammar;
        ro.grammar_kind = schema_path ? CINFER_GRAMMAR_JSON_SCHEMA : CINFER_GRAMMAR_GBNF;
    } else if (regex) {
        ro.grammar = regex;
        ro.grammar_kind = CINFER_GRAMMAR_REGEX;
    }
    if (!cli_tp_start("run", &dist, argc, argv, &tp, &lo))
        goto done;
    if (cinfer_model_load_with(model_path, &lo, &m, &err) != CINFER_OK)
        goto fail;
    if (cinfer_tp_rank(tp) > 0) { // a worker: rank 0 schedules, samples, drafts and prints
        if (cinfer_tp_worker(tp, m, eo.n_threads, &err) != CINFER_OK)
            goto fail;
        rc = 0;
        goto done;
    }
    if (!engine_args_load_draft(&ea, &err)) // the draft model runs whole on rank 0 alone
        goto fail;
    eo.draft_model = ea.o.draft_model;
    if (cinfer_tokenize(m, prompt, strlen(prompt), true, &ids, &n_ids, &err) != CINFER_OK ||
        cinfer_engine_create(m, &eo, &e, &err) != CINFER_OK)
        goto fail;
    if (n_ids == 0) {
        snprintf(err.message, sizeof err.message,
                 "the prompt is empty and the vocabulary adds no BOS: give -p");
        goto fail;
    }
    if (ro.grammar && cinfer_engine_check_grammar_kind(e, ro.grammar_kind, ro.grammar, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer run: %s %s: %s\n", gopt, garg, err.message);
        rc = 1;
        goto done;
    }
    struct cinfer_engine_info info;
    cinfer_engine_info(e, &info);
    engine_args_report_pool("run", &info);
    if (cinfer_engine_submit(e, ids, n_ids, &ro, &st, &err) != CINFER_OK)
        goto fail;
    if (!print_ids)
        fputs(prompt, stdout);
    // Synchronous mode: this thread runs the engine's steps and prints what each one streamed.
    int n_printed = 0;
    for (bool done = false; !done;) {
        cinfer_engine_step(e);
        struct cinfer_event ev;
        while (!done && cinfer_stream_next(st, 0, &ev, 0) == CINFER_OK) {
            if (ev.kind == CINFER_EVENT_ERROR) {
                snprintf(err.message, sizeof err.message, "%.*s", (int)ev.len, ev.text);
                goto fail;
            }
            done = ev.kind == CINFER_EVENT_DONE;
            if (print_ids && ev.kind == CINFER_EVENT_TOKEN)
                printf(n_printed++ ? " %d" : "%d", ev.token);
            else if (!print_ids)
                fwrite(ev.text, 1, ev.len, stdout);
        }
        fflush(stdout);
    }
    printf("\n");
    fflush(stdout);
    struct cinfer_generate_stats mt;
    cinfer_stream_stats(st, 0, &mt);
    fprintf(stderr,
            "\ncinfer run: prompt %d tokens, generated %d tokens (finish: %s), policy %s, %d threads, "
            "KV %.1f KiB\n"
            "  TTFT     %9.2f ms   (prefill %.1f tokens/s)\n"
            "  TBT      %9.2f ms   mean (p50 %.2f ms, p99 %.2f ms)\n"
            "  TPS      %9.2f tokens/s\n"
            "  latency  %9.2f ms   = TTFT + (%d - 1) x TBT\n",
            mt.n_prompt, mt.n_generated, mt.finish_reason, eo.policy, eo.n_threads,
            (double)mt.kv_bytes / 1024, mt.ttft_ms, mt.prefill_tps, mt.tbt_ms, mt.tbt_p50_ms, mt.tbt_p99_ms,
            mt.tps, mt.latency_ms, mt.n_generated);
    if (eo.spec && strcmp(eo.spec, "none") != 0) {
        struct cinfer_spec_stats ss;
        cinfer_engine_spec_stats(e, &ss);
        fprintf(stderr, "  spec     %s: %lld of %lld drafts accepted (%.1f%%), %.2f tokens per step\n",
                eo.spec, (long long)ss.accepted_tokens, (long long)ss.draft_tokens,
                ss.draft_tokens ? 100.0 * (double)ss.accepted_tokens / (double)ss.draft_tokens : 0.0,
                ss.decode_steps ? (double)ss.decode_tokens / (double)ss.decode_steps : 0.0);
    }
    if (tp) {
        struct cinfer_model_info mi;
        cinfer_model_info(m, &mi);
        cli_tp_report("run", tp, mi.n_layer);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "cinfer run%s: %s\n", cinfer_tp_rank(tp) ? " (a --tp worker)" : "", err.message);
done:
    cinfer_stream_release(st);
    cinfer_engine_free(e); // with --tp: the workers free their forward pass too
    cinfer_free(ids);
    cinfer_model_free(m);
    engine_args_free(&ea);
    free(grammar);
    cinfer_tp_end(tp, rc == 0);
    return rc;
}
