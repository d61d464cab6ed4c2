/* cinfer logits: one forward pass over a token list (one sequence, positions 0..n-1), writing the logits of
 * every position as raw little-endian float32 [n_tokens][n_vocab].  The test suite compares them with the
 * independent numpy reference. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/tp.h"
#include "core/mem.h"

#define MAX_TOKENS 65536

static int parse_tokens(const char *s, int32_t **out, int *n) {
    int cap = 16, len = 0;
    int32_t *ids = ci_malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX || (*end && *end != ',') || len >= MAX_TOKENS) {
            fprintf(stderr, "cinfer logits: --tokens: expected comma-separated ids, got '%s'\n", s);
            ci_free(ids);
            return 0;
        }
        if (len == cap) {
            int32_t *grown = ci_realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!grown)
                break;
            ids = grown;
        }
        ids[len++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    *out = ids;
    *n = len;
    return ids && len > 0;
}

int cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *tokens = NULL, *out_path = NULL;
    int n_threads = 2, block_size = 16;
    struct cli_dist dist = CLI_DIST_DEFAULT;
    const char *kv_type_s = "f32";
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  accepted as by run; ids need no tokenizer"},
        {"--tokens", NULL, ARG_STR, &tokens, 0, 0, "IDS  comma-separated token ids"},
        {"--threads", NULL, ARG_INT, &n_threads, 1, 512, "N  kernel threads (default 2)"},
        {"--block-size", NULL, ARG_INT, &block_size, 1, 1 << 20, "N  KV block size in tokens (default 16)"},
        {"--kv-type", NULL, ARG_STR, &kv_type_s, 0, 0,
         "T  KV cache element type: f32|f16|q8_0 (default f32)"},
        {"--output", "-o", ARG_STR, &out_path, 0, 0, "FILE  where to write float32 [n_tokens][n_vocab]"},
        CLI_DIST_SPECS(&dist),
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("logits", "-m MODEL --tokens 1,2,3 -o OUT.f32", specs, n_specs);
        return 0;
    }
    const char *pos_args[1];
    int n_pos;
    if (!args_parse("logits", argc, argv, 2, specs, n_specs, pos_args, 0, &n_pos))
        return 2;
    if (!model_path || !tokens || !out_path) {
        fprintf(stderr, "cinfer logits: -m MODEL, --tokens IDS and -o OUT are required\n");
        return 2;
    }
    if (!cinfer_kv_type_known(kv_type_s)) {
        fprintf(stderr, "cinfer logits: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type_s);
        return 2;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (!parse_tokens(tokens, &ids, &n))
        return 2;

    int rc = 1;
    struct cinfer_error err = {0};
    struct cinfer_model *m = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    struct cinfer_tp *tp = NULL;
    struct cinfer_load_options lo = {tok_path, true, false, NULL, 0, CINFER_PACK_LAZY};
    if (!cli_tp_start("logits", &dist, argc, argv, &tp, &lo))
        goto done;
    if (cinfer_model_load_with(model_path, &lo, &m, &err) != CINFER_OK)
        goto fail;
    if (cinfer_tp_rank(tp) > 0) { // a worker: rank 0 drives the forward pass and writes the output
        if (cinfer_tp_worker(tp, m, n_threads, &err) != CINFER_OK)
            goto fail;
        rc = 0;
        goto done;
    }
    struct cinfer_model_info mi;
    cinfer_model_info(m, &mi);
    if (!(logits = ci_malloc(sizeof(float) * (size_t)mi.n_vocab * (size_t)n))) {
        fprintf(stderr, "cinfer logits: out of memory\n");
        goto done;
    }
    struct cinfer_logits_options lo2 = {n_threads, block_size, kv_type_s};
    if (cinfer_logits(m, ids, n, &lo2, logits, &err) != CINFER_OK)
        goto fail;
    if (!(f = fopen(out_path, "wb")) ||
        fwrite(logits, sizeof(float) * (size_t)mi.n_vocab, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cinfer logits: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    cli_tp_report("logits", tp, mi.n_layer);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "cinfer logits%s: %s\n", cinfer_tp_rank(tp) ? " (a --tp worker)" : "", err.message);
done:
    if (f && fclose(f) != 0)
        rc = 1;
    ci_free(logits);
    cinfer_model_free(m);
    ci_free(ids);
    cinfer_tp_end(tp, rc == 0);
    return rc;
}
