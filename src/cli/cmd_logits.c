/* cinfer logits: one forward pass over a token list (one sequence, positions 0..n-1), writing the logits of
 * every position as raw little-endian float32 [n_tokens][n_vocab].  The test suite compares them with the
 * independent numpy reference. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/mem.h"
#include "core/threadpool.h"
#include "engine/kv_pool.h"
#include "model/forward.h"
#include "model/model.h"

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
    const char *kv_type_s = "f32";
    uint32_t kv_type = 0;
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  accepted as by run; ids need no tokenizer"},
        {"--tokens", NULL, ARG_STR, &tokens, 0, 0, "IDS  comma-separated token ids"},
        {"--threads", NULL, ARG_INT, &n_threads, 1, 512, "N  kernel threads (default 2)"},
        {"--block-size", NULL, ARG_INT, &block_size, 1, 1 << 20, "N  KV block size in tokens (default 16)"},
        {"--kv-type", NULL, ARG_STR, &kv_type_s, 0, 0,
         "T  KV cache element type: f32|f16|q8_0 (default f32)"},
        {"--output", "-o", ARG_STR, &out_path, 0, 0, "FILE  where to write float32 [n_tokens][n_vocab]"},
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
    if (!kv_type_parse(kv_type_s, &kv_type)) {
        fprintf(stderr, "cinfer logits: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type_s);
        return 2;
    }
    int32_t *ids = NULL;
    int n = 0;
    if (!parse_tokens(tokens, &ids, &n))
        return 2;

    int rc = 1;
    struct ci_err err = {0};
    struct model *m = NULL;
    struct ci_threadpool *tp = NULL;
    struct kv_pool *pool = NULL;
    struct forward *fwd = NULL;
    struct kv_seq_blocks table = {0};
    struct ci_kv_layer *layers = NULL;
    int32_t *pos = ci_calloc((size_t)n, sizeof *pos), *seq = ci_calloc((size_t)n, sizeof *seq);
    uint8_t *want = ci_calloc((size_t)n, 1);
    FILE *f = NULL;
    if (!pos || !seq || !want) {
        fprintf(stderr, "cinfer logits: out of memory\n");
        goto done;
    }
    if (model_load(model_path, &m, &err) != CI_OK)
        goto fail;
    const struct model_config *c = &m->config;
    int n_blocks = (n + block_size - 1) / block_size;
    struct kv_pool_params pp = {c->n_layer, c->n_kv_head, c->head_dim, block_size, n_blocks, kv_type};
    if (ci_threadpool_create(n_threads, &tp, &err) || kv_pool_create(&pp, &pool, &err) ||
        forward_create(m, n, n, tp, &fwd, &err) || kv_seq_init(&table, n_blocks, &err) ||
        kv_seq_reserve(pool, &table, n))
        goto fail;
    layers = ci_calloc((size_t)c->n_layer, sizeof *layers);
    if (!layers)
        goto done;
    for (int il = 0; il < c->n_layer; il++)
        kv_pool_layer(pool, il, &layers[il]);
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    struct ci_attn_seq aseq = {table.ids, table.n};
    struct fwd_batch b = {n, ids, pos, seq, want, 1, &aseq};
    const float *logits;
    int rows;
    if (forward_batch(fwd, &b, layers, &logits, &rows, &err) != CI_OK)
        goto fail;
    if (!(f = fopen(out_path, "wb")) ||
        fwrite(logits, sizeof(float) * (size_t)c->n_vocab, (size_t)rows, f) != (size_t)rows) {
        fprintf(stderr, "cinfer logits: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "cinfer logits: %s\n", err.msg);
done:
    if (f && fclose(f) != 0)
        rc = 1;
    if (table.ids)
        kv_seq_release(pool, &table);
    kv_seq_deinit(&table);
    ci_free(layers);
    forward_free(fwd);
    kv_pool_free(pool);
    ci_threadpool_free(tp);
    model_free(m);
    ci_free(ids);
    ci_free(pos);
    ci_free(seq);
    ci_free(want);
    return rc;
}
