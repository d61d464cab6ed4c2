/* cinfer convert (llama2.c → GGUF) and cinfer synth (random-weight GGUF models of real shapes). */
#include <stdio.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

/* name is one of the allowed types ("f32|f16|q8_0"); prints the error otherwise. */
static bool check_type(const char *cmd, const char *name, const char *allowed) {
    size_t n = strlen(name);
    for (const char *p = allowed; n && (p = strstr(p, name)); p += n)
        if ((p == allowed || p[-1] == '|') && (p[n] == '|' || p[n] == '\0') && cinfer_weight_type_known(name))
            return true;
    fprintf(stderr, "cinfer %s: --type: '%s' is not one of %s\n", cmd, name, allowed);
    return false;
}

int cmd_convert(int argc, char **argv) {
    const char *tok_path = NULL, *out_path = NULL, *type_name = "f32";
    struct arg_spec specs[] = {
        {"--tokenizer", NULL, ARG_STR, &tok_path, 0, 0, "FILE  llama2.c tokenizer.bin (required)"},
        {"--output", "-o", ARG_STR, &out_path, 0, 0, "FILE  GGUF file to write"},
        {"--type", NULL, ARG_STR, &type_name, 0, 0,
         "T  f32|f16|q8_0 for the matrices (default f32), or a `cinfer quantize` type (Q4_K_M, ...)"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("convert", "IN.bin --tokenizer TOK.bin -o OUT.gguf [--type f32|f16|q8_0]", specs, n_specs);
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("convert", argc, argv, 2, specs, n_specs, pos, 1, &n_pos))
        return 2;
    if (n_pos != 1 || !tok_path || !out_path) {
        fprintf(stderr, "cinfer convert: usage: cinfer convert IN.bin --tokenizer TOK.bin -o OUT.gguf\n");
        return 2;
    }
    if (!cinfer_quantize_type_known(type_name) && !check_type("convert", type_name, "f32|f16|q8_0"))
        return 2;
    struct cinfer_error err = {0};
    if (cinfer_convert_llama2c(pos[0], tok_path, type_name, out_path, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer convert: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "cinfer convert: wrote %s\n", out_path);
    return 0;
}

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *out_path = NULL, *type_name = "f32";
    uint64_t seed = 42;
    float residual_scale = 1.0f;
    struct arg_spec specs[] = {
        {"--preset", NULL, ARG_STR, &preset, 0, 0, "NAME  model shape (see below)"},
        {"--type", NULL, ARG_STR, &type_name, 0, 0,
         "T  f32|f16|bf16|q8_0|q4_0 (every matrix in T; default f32) or a `cinfer quantize` type (Q4_K_M, "
         "...: "
         "llama.cpp's per-tensor mixture)"},
        {"--seed", NULL, ARG_U64, &seed, 0, 9007199254740991.0, "S  random seed (default 42)"},
        {"--residual-scale", NULL, ARG_FLOAT, &residual_scale, 1e-6, 16.0,
         "S  factor on attn_output and ffn_down (default 1); e.g. 0.02 makes the token embedding dominate, "
         "so "
         "the file's own quantization predicts its greedy tokens (a high-acceptance speculative draft)"},
        {"--output", "-o", ARG_STR, &out_path, 0, 0, "FILE  GGUF file to write"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("synth", "--preset NAME --type TYPE --seed S -o OUT.gguf", specs, n_specs);
        printf("\npresets:\n");
        for (int i = 0; i < cinfer_synth_n_presets(); i++) {
            struct cinfer_synth_preset p;
            cinfer_synth_preset_info(i, &p);
            printf("  %-16s %s, %d layers, dim %d, %d heads (%d KV), ffn %d, vocab %d, context %d", p.name,
                   p.arch, p.n_layer, p.n_embd, p.n_head, p.n_kv_head, p.n_ff, p.n_vocab, p.n_ctx);
            if (p.n_expert)
                printf(", %d experts (top-%d)", p.n_expert, p.n_expert_used);
            printf("\n");
        }
        return 0;
    }
    const char *pos[1];
    int n_pos;
    if (!args_parse("synth", argc, argv, 2, specs, n_specs, pos, 0, &n_pos))
        return 2;
    if (!preset || !out_path) {
        fprintf(stderr, "cinfer synth: --preset NAME and -o OUT.gguf are required\n");
        return 2;
    }
    // Its own five types, or any of llama.cpp's presets (the per-tensor mixture of `cinfer quantize`).
    if (!cinfer_weight_type_known(type_name) && !cinfer_quantize_type_known(type_name)) {
        fprintf(stderr, "cinfer synth: --type: '%s' is not one of f32|f16|bf16|q8_0|q4_0 or %s\n", type_name,
                cinfer_quantize_types());
        return 2;
    }
    struct cinfer_error err = {0};
    if (cinfer_synth_scaled(preset, type_name, seed, residual_scale, out_path, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer synth: %s\n", err.message);
        return 1;
    }
    fprintf(stderr, "cinfer synth: wrote %s\n", out_path);
    return 0;
}
