/* cinfer tokenize: the token ids of a text, on one line. */
#include <stdio.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL;
    bool no_bos = false, no_special = false, pieces = false;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model or vocab-only GGUF"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--no-bos", NULL, ARG_FLAG, &no_bos, 0, 0, "    do not add BOS/EOS"},
        {"--no-special", NULL, ARG_FLAG, &no_special, 0, 0, "    treat special-token texts as text"},
        {"--pieces", NULL, ARG_FLAG, &pieces, 0, 0, "    print id:'piece' pairs"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("tokenize", "-m MODEL [--tokenizer FILE] TEXT", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("tokenize", argc, argv, 2, specs, n_specs, pos, 1, &n_pos))
        return 2;
    if (!model_path || n_pos != 1) {
        fprintf(stderr, "cinfer tokenize: usage: cinfer tokenize -m MODEL [--tokenizer FILE] TEXT\n");
        return 2;
    }
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    struct cinfer_load_options lo = {tok_path, true, true, NULL, 0, CINFER_PACK_LAZY};
    if (cinfer_model_load_with(model_path, &lo, &m, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer: %s\n", err.message);
        return 1;
    }
    cinfer_token *ids = NULL;
    int n = 0, rc = 1;
    if (cinfer_tokenize_ex(m, pos[0], strlen(pos[0]), !no_bos, !no_special, &ids, &n, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer tokenize: %s\n", err.message);
    } else {
        for (int i = 0; i < n; i++) {
            if (pieces) {
                size_t len;
                const char *p = cinfer_token_piece(m, ids[i], &len);
                printf(i ? " %d:'%.*s'" : "%d:'%.*s'", ids[i], (int)len, p);
            } else {
                printf(i ? " %d" : "%d", ids[i]);
            }
        }
        printf("\n");
        rc = 0;
    }
    cinfer_free(ids);
    cinfer_model_free(m);
    return rc;
}
