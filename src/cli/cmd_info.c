/* cinfer info: what a model file is and what it costs to serve. */
#include <stdio.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

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

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *kv_type_s = "f16";
    struct arg_spec specs[] = {
        {"--model", "-m", ARG_STR, &model_path, 0, 0, "FILE  model (GGUF or llama2.c checkpoint)"},
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  tokenizer.bin (llama2.c checkpoints)"},
        {"--kv-type", NULL, ARG_STR, &kv_type_s, 0, 0,
         "T  KV element type of the full-context lines: f32|f16|q8_0 (default f16, as run and serve)"},
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
    if (!cinfer_kv_type_known(kv_type_s)) {
        fprintf(stderr, "cinfer info: --kv-type: '%s' is not one of f32, f16, q8_0\n", kv_type_s);
        return 2;
    }
    struct cinfer_model *m = NULL;
    struct cinfer_error err = {0};
    struct cinfer_load_options lo = {tok_path, true, false, NULL, 0, CINFER_PACK_LAZY};
    if (cinfer_model_load_with(model_path, &lo, &m, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer: %s\n", err.message);
        return 1;
    }
    struct cinfer_model_info c;
    cinfer_model_info(m, &c);
    printf("%-28s %s\n", "file", model_path);
    printf("%-28s %s\n", "format", strcmp(c.format, "GGUF") ? "llama2.c checkpoint" : "GGUF");
    if (c.gguf_version) {
        const char *name = cinfer_model_name(m);
        printf("%-28s GGUF v%u, %lld tensors, %lld metadata keys, name %s\n", "container", c.gguf_version,
               c.gguf_n_tensors, c.gguf_n_metadata, name);
    }
    printf("%-28s %s\n", "architecture", c.arch);
    printf("%-28s %d\n", "vocabulary", c.n_vocab);
    printf("%-28s %d\n", "embedding length", c.n_embd);
    printf("%-28s %d\n", "layers", c.n_layer);
    printf("%-28s %d (head dim %d, q dim %d)\n", "attention heads", c.n_head, c.head_dim,
           c.n_head * c.head_dim);
    printf("%-28s %d (%s, group of %d)\n", "KV heads", c.n_kv_head,
           c.n_kv_head == c.n_head ? "MHA"
           : c.n_kv_head == 1      ? "MQA"
                                   : "GQA",
           c.n_head / c.n_kv_head);
    printf("%-28s %d\n", "feed-forward length", c.n_ff);
    if (c.n_expert > 0) {
        if (c.expert_softmax_topk)
            printf(
                "%-28s %d per layer, %d used per token (top-%d router logits, weights their softmax), expert "
                "FFN length %d\n",
                "experts", c.n_expert, c.n_expert_used, c.n_expert_used, c.n_ff_exp);
        else
            printf("%-28s %d per layer, %d used per token (softmax router, top-%d weights %s), expert FFN "
                   "length %d\n",
                   "experts", c.n_expert, c.n_expert_used, c.n_expert_used,
                   c.expert_weights_norm ? "renormalised to sum 1" : "not renormalised", c.n_ff_exp);
        if (c.n_ff_shexp > 0)
            printf("%-28s FFN length %d, scaled by a sigmoid gate\n", "shared expert", c.n_ff_shexp);
    }
    if (c.attn_sinks)
        printf("%-28s per-head logits in every attention softmax\n", "attention sinks");
    printf("%-28s %d\n", "context length", c.n_ctx_train);
    if (c.encoder)
        printf("%-28s none (absolute position embeddings)\n", "rope");
    else
        printf("%-28s base %g, %d dims, %s pairing\n", "rope", (double)c.rope_base, c.rope_dim,
               c.rope_neox ? "NeoX" : "adjacent");
    printf("%-28s type %s", "rope scaling", c.rope_scaling);
    bool yarn = strcmp(c.rope_scaling, "yarn") == 0;
    if (c.rope_linear_factor != 1.0f)
        printf(yarn ? ", factor %g" : ", positions / %g", (double)c.rope_linear_factor);
    printf("%s", c.rope_freqs ? ", per-pair frequency divisors from rope_freqs.weight" : "");
    if (yarn)
        printf(", original context %d, beta fast %g slow %g", c.rope_orig_ctx, (double)c.yarn_beta_fast,
               (double)c.yarn_beta_slow);
    if (c.rope_longrope)
        printf(", rope_factors_long.weight above a context of %d, rope_factors_short.weight up to it",
               c.rope_orig_ctx);
    if (c.rope_mscale != 1.0f)
        printf(", cos/sin scaled by %.6g", (double)c.rope_mscale);
    printf("\n");
    if (c.qkv_fused || c.ffn_fused)
        printf("%-28s%s%s\n", "fused projections", c.qkv_fused ? " attn_qkv (Q, K, V rows)" : "",
               c.ffn_fused ? " ffn_up (gate rows, then up rows)" : "");
    if (c.qk_norm)
        printf("%-28s per-head RMSNorm of Q and K before RoPE\n", "q/k norm");
    if (c.sliding_window > 0)
        printf("%-28s %d positions on %d of %d layers (local RoPE base %g)\n", "sliding window",
               c.sliding_window, c.n_swa_layers, c.n_layer, (double)c.rope_base_swa);
    if (c.attn_softcap > 0.0f || c.final_softcap > 0.0f)
        printf("%-28s attention %g, final logits %g (0: none)\n", "logit soft-capping",
               (double)c.attn_softcap, (double)c.final_softcap);
    if (c.post_norms || c.gelu_ffn || c.embd_scale != 1.0f)
        printf("%-28s embeddings x %g%s%s\n", "gemma block", (double)c.embd_scale,
               c.post_norms ? ", post-attention and post-FFN norms" : "",
               c.gelu_ffn ? ", GeGLU (tanh GeLU) feed-forward" : "");
    if (c.encoder) {
        printf("%-28s BERT: bidirectional attention, absolute positions, LayerNorm (epsilon %g), GeLU; "
               "embeddings only\n",
               "encoder", (double)c.rms_eps);
        printf("%-28s none\n", "output head");
    } else {
        printf("%-28s %g\n", "rms epsilon", (double)c.rms_eps);
        printf("%-28s %s\n", "output head", c.tied_output ? "tied to token embeddings" : "separate");
    }
    printf("%-28s", "tensor types");
    for (int t = 0; t < c.n_tensor_types; t++)
        printf(" %s×%d (%.4g bpw)", c.tensor_types[t].type, c.tensor_types[t].count,
               c.tensor_types[t].bits_per_weight);
    printf("\n");
    printf("%-28s %llu (%.2f M)\n", "parameters", (unsigned long long)c.n_params, (double)c.n_params / 1e6);
    if (c.n_params > 0) // the mixture's average, norms and biases included
        printf("%-28s %.2f\n", "bits per weight", 8.0 * (double)c.weight_bytes / (double)c.n_params);
    print_bytes("file size", (double)c.file_bytes);
    print_bytes("weights (mapped)", (double)c.weight_bytes);

    // The seeds' formula: KV bytes per token = 2 (K and V) · layers · kv_heads · head_dim · bytes per
    // element; q8_0 stores 34 bytes per 32 elements (head_dim a multiple of 32).
    uint64_t q8 = cinfer_kv_bytes_per_token(m, "q8_0");
    char q8s[64];
    if (q8)
        snprintf(q8s, sizeof q8s, "%llu bytes q8_0", (unsigned long long)q8);
    else
        snprintf(q8s, sizeof q8s, "q8_0 n/a: head_dim %% 32 != 0");
    printf("%-28s %llu bytes f32, %llu bytes f16, %s  (2·%d layers·%d kv heads·%d head dim·bytes)\n",
           "KV cache per token", (unsigned long long)cinfer_kv_bytes_per_token(m, "f32"),
           (unsigned long long)cinfer_kv_bytes_per_token(m, "f16"), q8s, c.n_layer, c.n_kv_head, c.head_dim);
    if (c.n_kv_head != c.n_head)
        printf("%-28s %.0f bytes f32 (GQA saves %.0f%%)\n", "  same model with full MHA",
               2.0 * c.n_layer * c.n_head * c.head_dim * 4, 100.0 * (1.0 - (double)c.n_kv_head / c.n_head));
    uint64_t per_tok = cinfer_kv_bytes_per_token(m, kv_type_s);
    if (per_tok) {
        char label[64];
        printf("%-28s %llu bytes (--kv-type %s)\n", "KV cache per token, chosen", (unsigned long long)per_tok,
               kv_type_s);
        snprintf(label, sizeof label, "KV cache, full context %s", kv_type_s);
        print_bytes(label, (double)per_tok * c.n_ctx_train);
        print_bytes("memory, one full sequence", (double)c.weight_bytes + (double)per_tok * c.n_ctx_train);
    } else {
        printf("%-28s --kv-type %s needs head_dim a multiple of 32 (head_dim %d)\n", "KV cache, chosen",
               kv_type_s, c.head_dim);
    }
    if (c.tokenizer_type)
        printf("%-28s %s (pre-tokenizer %s), %d tokens, bos %d, eos %d\n", "tokenizer", c.tokenizer_type,
               c.tokenizer_pre, c.n_vocab, c.bos, c.eos);
    else
        printf("%-28s none (give --tokenizer FILE)\n", "tokenizer");
    cinfer_model_free(m);
    return 0;
}
