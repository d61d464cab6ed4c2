/* cinfer quantize: a GGUF file re-typed per one of llama.cpp's quantization presets. */
#include <stdio.h>
#include <string.h>

#include "cinfer.h"
#include "cli/args.h"
#include "cli/commands.h"

int cmd_quantize(int argc, char **argv) {
    int n_threads = 1;
    bool pure = false;
    struct arg_spec specs[] = {
        {"--threads", "-t", ARG_INT, &n_threads, 1, 256,
         "N  threads quantizing rows in parallel (default 1)"},
        {"--pure", NULL, ARG_FLAG, &pure, 0, 0,
         "every quantized tensor in the type's base type (no per-tensor mixture; fallbacks still apply)"},
    };
    int n_specs = sizeof specs / sizeof specs[0];
    if (args_want_help(argc, argv, 2)) {
        args_usage("quantize", "IN.gguf OUT.gguf TYPE [--threads N] [--pure]", specs, n_specs);
        printf("\ntypes (llama.cpp's presets and their per-tensor choices, no importance matrix):\n  %s\n",
               cinfer_quantize_types());
        return 0;
    }
    const char *pos[3];
    int n_pos;
    if (!args_parse("quantize", argc, argv, 2, specs, n_specs, pos, 3, &n_pos))
        return 2;
    if (n_pos != 3) {
        fprintf(stderr, "cinfer quantize: usage: cinfer quantize IN.gguf OUT.gguf TYPE [--threads N]\n");
        return 2;
    }
    if (!cinfer_quantize_type_known(pos[2])) {
        fprintf(stderr, "cinfer quantize: unknown type '%s' (accepted: %s)\n", pos[2],
                cinfer_quantize_types());
        return 2;
    }
    struct cinfer_quantize_params p;
    cinfer_quantize_params_default(&p);
    p.n_threads = n_threads;
    p.pure = pure;
    struct cinfer_quantize_result r;
    struct cinfer_error err = {0};
    if (cinfer_quantize(pos[0], pos[1], pos[2], &p, &r, &err) != CINFER_OK) {
        fprintf(stderr, "cinfer quantize: %s\n", err.message);
        return 1;
    }
    uint64_t n_weights = 0;
    for (int i = 0; i < r.n_types; i++) {
        printf("%-7s %4d tensors %12llu weights %6.3f bits per weight\n", r.types[i].type, r.types[i].count,
               (unsigned long long)r.types[i].n_elements, r.types[i].bits_per_weight);
        n_weights += r.types[i].n_elements;
    }
    if (r.n_fallback)
        printf("%d tensor(s) fell back to another type: their row length is not a multiple of the block\n",
               r.n_fallback);
    printf("wrote %s: %s (file_type %d), %d tensors, %.2f MiB (from %.2f MiB), %.3f bits per weight\n",
           pos[1], pos[2], r.file_type, r.n_tensors, (double)r.out_bytes / 1048576.0,
           (double)r.in_bytes / 1048576.0, n_weights ? 8.0 * (double)r.out_bytes / (double)n_weights : 0.0);
    return 0;
}
