/* cinfer info: what a model file is and what it costs to serve. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load.h"
#include "engine/kv_pool.h"
#include "kernels/kernels.h"
#include "format/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void print_bytes(const char *label, double bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = bytes;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    printf("%-28s %.2f %s (%.0f bytes)\n", label, v, unit[u], bytes);
}

static void count_type(const struct ci_tensor *t, uint64_t *per_type) {
    if (t->data && t->type < CI_TYPE_COUNT)
        per_type[t->type]++;
}

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *kv_type_s = "f32";
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--kv-type", NULL, ARG_STR, &kv_type_s, 0, 0,
         "T  KV element type of the full-context lines: f32|f16|q8_0 (default f32)"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("info", "-m MODEL [--tokenizer FILE] [--kv-type f32|f16|q8_0]", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("info", argc, argv, 2, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!model_path) {
        fprintf(stderr, "cinfer info: -m MODEL is required\n");
        return 2;
    }
    uint32_t kv_type;
    if (!kv_type_parse(kv_type_s, &kv_type)) {
        fprintf(stderr, "cinfer info: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type_s);
        return 2;
    }
    struct loaded ld;
    if (!load_model(model_path, tok_path, false, &ld))
        return 1;
    const struct model *m = ld.model;
    const struct model_config *c = &m->config;
    printf("%-28s %s\n", "file", model_path);
    printf("%-28s %s\n", "format", m->format == MODEL_FORMAT_GGUF ? "GGUF" : "llama2.c checkpoint");
    if (m->gguf) {
        struct gguf_str name = {0};
        gguf_get_str(m->gguf, "general.name", &name, NULL);
        printf("%-28s GGUF v%u, %lld tensors, %lld metadata keys%s%.*s\n", "container", gguf_version(m->gguf),
               (long long)gguf_n_tensors(m->gguf), (long long)gguf_n_kv(m->gguf), name.len ? ", name " : "",
               (int)name.len, name.data ? name.data : "");
    }
    printf("%-28s %s\n", "architecture", model_arch_name(c->arch));
    printf("%-28s %d\n", "vocabulary", c->n_vocab);
    printf("%-28s %d\n", "embedding length", c->n_embd);
    printf("%-28s %d\n", "layers", c->n_layer);
    printf("%-28s %d (head dim %d)\n", "attention heads", c->n_head, c->head_dim);
    printf("%-28s %d (%s, group of %d)\n", "KV heads", c->n_kv_head,
           c->n_kv_head == c->n_head ? "MHA"
           : c->n_kv_head == 1       ? "MQA"
                                     : "GQA",
           c->n_head / c->n_kv_head);
    printf("%-28s %d\n", "feed-forward length", c->n_ff);
    printf("%-28s %d\n", "context length", c->n_ctx_train);
    printf("%-28s base %g, %d dims, %s pairing\n", "rope", (double)c->rope_base, c->rope_dim,
           c->rope_neox ? "NeoX" : "adjacent");
    printf("%-28s %g\n", "rms epsilon", (double)c->rms_eps);
    printf("%-28s %s\n", "output head",
           m->weights.output.data == m->weights.tok_embd.data ? "tied to token embeddings" : "separate");

    uint64_t per_type[CI_TYPE_COUNT] = {0};
    const struct model_weights *w = &m->weights;
    count_type(&w->tok_embd, per_type);
    count_type(&w->output_norm, per_type);
    if (w->output.data != w->tok_embd.data)
        count_type(&w->output, per_type);
    for (int il = 0; il < c->n_layer; il++) {
        const struct layer_weights *l = &w->layers[il];
        const struct ci_tensor *all[] = {&l->attn_norm, &l->wq,     &l->wk,   &l->wv,
                                         &l->bq,        &l->bk,     &l->bv,   &l->wo,
                                         &l->ffn_norm,  &l->w_gate, &l->w_up, &l->w_down};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            count_type(all[i], per_type);
    }
    printf("%-28s", "tensor types");
    for (int t = 0; t < CI_TYPE_COUNT; t++)
        if (per_type[t])
            printf(" %s×%llu", ci_type_name((uint32_t)t), (unsigned long long)per_type[t]);
    printf("\n");
    uint64_t n_params = model_n_params(m);
    printf("%-28s %llu (%.2f M)\n", "parameters", (unsigned long long)n_params, (double)n_params / 1e6);
    print_bytes("file size", (double)m->file_bytes);
    print_bytes("weights (mapped)", (double)model_weight_bytes(m));

    // The seeds' formula: KV bytes per token = 2 (K and V) · layers · kv_heads · head_dim · bytes per
    // element; q8_0 stores 34 bytes per 32 elements (head_dim a multiple of 32).
    double kv_rows = 2.0 * c->n_layer * c->n_kv_head, kv_elems = kv_rows * c->head_dim;
    size_t q8_row = ci_kv_row_bytes(CI_TYPE_Q8_0, c->head_dim);
    char q8[64];
    if (q8_row)
        snprintf(q8, sizeof q8, "%.0f bytes q8_0", kv_rows * (double)q8_row);
    else
        snprintf(q8, sizeof q8, "q8_0 n/a: head_dim %% 32 != 0");
    printf("%-28s %.0f bytes f32, %.0f bytes f16, %s  (2·%d layers·%d kv heads·%d head dim·bytes)\n",
           "KV cache per token", kv_elems * 4, kv_elems * 2, q8, c->n_layer, c->n_kv_head, c->head_dim);
    if (c->n_kv_head != c->n_head)
        printf("%-28s %.0f bytes f32 (GQA saves %.0f%%)\n", "  same model with full MHA",
               2.0 * c->n_layer * c->n_head * c->head_dim * 4,
               100.0 * (1.0 - (double)c->n_kv_head / c->n_head));
    size_t row = ci_kv_row_bytes(kv_type, c->head_dim);
    if (row) {
        double per_tok = kv_rows * (double)row;
        char label[64];
        printf("%-28s %.0f bytes (--kv-type %s)\n", "KV cache per token, chosen", per_tok, kv_type_s);
        snprintf(label, sizeof label, "KV cache, full context %s", kv_type_s);
        print_bytes(label, per_tok * c->n_ctx_train);
        print_bytes("memory, one full sequence", (double)model_weight_bytes(m) + per_tok * c->n_ctx_train);
    } else {
        printf("%-28s --kv-type %s needs head_dim a multiple of 32 (head_dim %d)\n", "KV cache, chosen",
               kv_type_s, c->head_dim);
    }
    if (ld.tok)
        printf("%-28s %s (pre-tokenizer %s), %d tokens, bos %d, eos %d\n", "tokenizer",
               tokenizer_type_name(ld.tok), tokenizer_pre(ld.tok), tokenizer_n_vocab(ld.tok),
               tokenizer_bos(ld.tok), tokenizer_eos(ld.tok));
    else
        printf("%-28s none (give --tokenizer FILE)\n", "tokenizer");
    unload_model(&ld);
    return 0;
}
