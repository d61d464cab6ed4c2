#include "cli/engine_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

void engine_args_init(struct engine_args *a) {
    cinfer_engine_options_default(&a->o);
    a->o.kv_type = "f16"; // as llama.cpp; the library's own default (cinfer_engine_options_default) stays f32
    a->kv_mem = NULL;
    a->kv_mem_fraction = 0;
    a->no_chunked_prefill = false;
    a->no_prefix_cache = false;
    a->draft_path = NULL;
    a->draft = NULL;
    a->pack = NULL;
    a->pack_mode = CINFER_PACK_LAZY;
}

bool engine_args_load_draft(struct engine_args *a, struct cinfer_error *err) {
    if (!a->draft_path || a->draft)
        return true;
    const struct cinfer_load_options lo = {.pack = a->pack_mode};
    if (cinfer_model_load_with(a->draft_path, &lo, &a->draft, err) != CINFER_OK) {
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "--draft-model: %.*s", (int)sizeof msg - 32, err->message);
        memcpy(err->message, msg, sizeof msg);
        return false;
    }
    a->o.draft_model = a->draft;
    return true;
}

void engine_args_free(struct engine_args *a) {
    cinfer_model_free(a->draft);
    a->draft = NULL;
    a->o.draft_model = NULL;
}

void engine_args_specs(struct engine_args *a, struct arg_spec *out) {
    struct cinfer_engine_options *p = &a->o;
    const struct arg_spec specs[] = {
        {"--threads", "-t", ARG_INT, &p->n_threads, 1, 512, "N  kernel threads (default 2)"},
        {"--policy", NULL, ARG_STR, &p->policy, 0, 0, "P  naive|static|continuous (default continuous)"},
        {"--no-chunked-prefill", NULL, ARG_FLAG, &a->no_chunked_prefill, 0, 0,
         "    prompts enter a step whole"},
        {"--max-batch-tokens", NULL, ARG_INT, &p->max_batch_tokens, 1, 1 << 20,
         "N  per-step token budget (default 512)"},
        {"--max-seqs", NULL, ARG_INT, &p->max_seqs, 1, 4096,
         "N  running sequences; static: the batch size (default 64)"},
        {"--block-size", NULL, ARG_INT, &p->kv_block_size, 1, 1 << 20,
         "N  KV block size in tokens (default 16)"},
        {"--contiguous-kv", NULL, ARG_FLAG, &p->contiguous_kv, 0, 0,
         "    one whole-context KV block per sequence (static allocation)"},
        {"--kv-mem", NULL, ARG_STR, &a->kv_mem, 0, 0,
         "BYTES  KV pool size, e.g. 256M (default: --kv-mem-fraction of the available memory)"},
        {"--kv-mem-fraction", NULL, ARG_FLOAT, &a->kv_mem_fraction, 0.01, 1,
         "F  default KV pool: F x available memory minus the weights, at most --max-seqs whole contexts "
         "(default 0.5; pages touched only as used)"},
        {"--kv-type", NULL, ARG_STR, &p->kv_type, 0, 0,
         "T  KV cache element type: f32|f16|q8_0 (default f16; q8_0: head_dim a multiple of 32)"},
        {"--kv-blocks", NULL, ARG_INT, &p->kv_blocks, 1, 1 << 30, "N  KV pool size in blocks"},
        {"--no-prefix-cache", NULL, ARG_FLAG, &a->no_prefix_cache, 0, 0, "    do not share prompt blocks"},
        {"--ctx", "-c", ARG_INT, &p->n_ctx, 0, 1 << 24, "N  context limit (default: the model's)"},
        {"--pooling", NULL, ARG_STR, &p->pooling, 0, 0,
         "P  embeddings: mean|cls|last (default: the file's pooling_type, else last; bert: cls)"},
        {"--spec", NULL, ARG_STR, &p->spec, 0, 0,
         "MODE  speculative decoding: none|ngram|draft (ngram: prompt lookup; draft: --draft-model)"},
        {"--spec-k", NULL, ARG_INT, &p->spec_k, 1, 32,
         "N  longest proposal per sequence and step (default 8; adapts from N/2 by acceptance)"},
        {"--spec-k-min", NULL, ARG_INT, &p->spec_k_min, 1, 32, "N  shortest proposal (default 1)"},
        {"--spec-ngram", NULL, ARG_INT, &p->spec_ngram_n, 1, 64,
         "N  ngram: longest suffix looked up (default 3)"},
        {"--spec-max-batch", NULL, ARG_INT, &p->spec_max_batch, 1, 4096,
         "N  speculate only in steps where at most N sequences decode (default: any number)"},
        {"--draft-model", NULL, ARG_STR, &a->draft_path, 0, 0,
         "FILE  --spec draft: a small model with the same vocabulary"},
        {"--pack", NULL, ARG_STR, &a->pack, 0, 0,
         "WHEN  weights copied into the kernels' layout: lazy (F16/BF16 after the first pass; the "
         "default of run), eager (all at start; of serve) or off"},
    };
    _Static_assert(CI_ARRAY_LEN(specs) == ENGINE_ARGS_N_SPECS, "ENGINE_ARGS_N_SPECS counts the flags above");
    memcpy(out, specs, sizeof specs);
}

bool engine_args_parse_bytes(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0)
        return false;
    double mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mult = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' || *end == 'B')
        end += *end == 'i' ? 1 : 0;
    if (*end == 'B')
        end++;
    if (*end || v * mult > 9.0e18 || v * mult < 1)
        return false;
    *out = (int64_t)(v * mult);
    return true;
}

bool engine_args_finish(const char *cmd, struct engine_args *a) {
    if (!cinfer_policy_known(a->o.policy)) {
        fprintf(stderr, "cinfer %s: --policy: '%s' is not one of naive, static, continuous\n", cmd,
                a->o.policy);
        return false;
    }
    if (a->kv_mem && !engine_args_parse_bytes(a->kv_mem, &a->o.kv_mem_bytes)) {
        fprintf(stderr, "cinfer %s: --kv-mem: '%s' is not a size such as 64M or 1G\n", cmd, a->kv_mem);
        return false;
    }
    if (!cinfer_kv_type_known(a->o.kv_type)) {
        fprintf(stderr, "cinfer %s: --kv-type: '%s' is not one of f32, f16, q8_0\n", cmd, a->o.kv_type);
        return false;
    }
    if (a->o.pooling && !cinfer_pooling_known(a->o.pooling)) {
        fprintf(stderr, "cinfer %s: --pooling: '%s' is not one of mean, cls, last\n", cmd, a->o.pooling);
        return false;
    }
    if (a->o.spec && !cinfer_spec_known(a->o.spec)) {
        fprintf(stderr, "cinfer %s: --spec: '%s' is not one of none, ngram, draft\n", cmd, a->o.spec);
        return false;
    }
    bool draft = a->o.spec && !strcmp(a->o.spec, "draft");
    if (draft != (a->draft_path != NULL)) {
        fprintf(stderr, "cinfer %s: %s\n", cmd,
                draft ? "--spec draft needs --draft-model FILE" : "--draft-model needs --spec draft");
        return false;
    }
    if (a->pack) {
        static const char *const names[] = {
            [CINFER_PACK_LAZY] = "lazy", [CINFER_PACK_EAGER] = "eager", [CINFER_PACK_OFF] = "off"};
        size_t i = 0;
        while (i < CI_ARRAY_LEN(names) && strcmp(a->pack, names[i]))
            i++;
        if (i == CI_ARRAY_LEN(names)) {
            fprintf(stderr, "cinfer %s: --pack: '%s' is not one of lazy, eager, off\n", cmd, a->pack);
            return false;
        }
        a->pack_mode = (enum cinfer_pack)i;
    }
    a->o.kv_mem_fraction = a->kv_mem_fraction;
    a->o.chunked_prefill = !a->no_chunked_prefill;
    a->o.prefix_cache = !a->no_prefix_cache;
    return true;
}

void engine_args_report_pool(const char *cmd, const struct cinfer_engine_info *info) {
    const double mib = 1 << 20;
    char why[160];
    if (!strcmp(info->kv_sizing, "memory") || !strcmp(info->kv_sizing, "cap") ||
        !strcmp(info->kv_sizing, "floor"))
        snprintf(why, sizeof why, "%s: %.0f%% of %.0f MiB available minus %.0f MiB of weights%s",
                 info->kv_sizing, info->kv_mem_fraction * 100, (double)info->mem_available / mib,
                 (double)info->weight_bytes / mib,
                 !strcmp(info->kv_sizing, "cap")     ? ", capped at --max-seqs whole contexts"
                 : !strcmp(info->kv_sizing, "floor") ? ", raised to the 64 MiB floor"
                                                     : "");
    else if (!strcmp(info->kv_sizing, "fallback"))
        snprintf(why, sizeof why, "fallback: available memory unknown, 256 MiB");
    else
        snprintf(why, sizeof why, "%s", info->kv_sizing);
    fprintf(stderr,
            "cinfer %s: KV pool %.1f MiB = %d blocks of %d tokens = %lld tokens (%s, %lld bytes per token), "
            "sized by %s; %d sequence(s) of the whole %d-token context fit\n",
            cmd, (double)info->kv_bytes / mib, info->kv_blocks, info->kv_block_size,
            (long long)info->kv_blocks * info->kv_block_size, info->kv_type,
            (long long)info->kv_bytes_per_token, why, info->full_context_seqs, info->n_ctx);
}
