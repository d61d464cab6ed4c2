/* The engine flags shared by `cinfer run`, `cinfer bench` and `cinfer serve`: scheduling policy, chunked
 * prefill, token budget, running sequences, KV memory, element type and block size, prefix caching, threads,
 * context. */
#ifndef CINFER_CLI_ENGINE_ARGS_H
#define CINFER_CLI_ENGINE_ARGS_H

#include <stdbool.h>

#include "cinfer.h"
#include "cli/args.h"
#include "engine/engine.h"

struct engine_args {
    struct engine_params p;
    const char *policy;
    const char *kv_mem;
    const char *kv_type; // "f32" (default), "f16", "q8_0"
    bool no_chunked_prefill;
    bool no_prefix_cache;
};

#define ENGINE_ARGS_N_SPECS 12

void engine_args_init(struct engine_args *a);
/* Writes ENGINE_ARGS_N_SPECS flag specs bound to a into out. */
void engine_args_specs(struct engine_args *a, struct arg_spec *out);
/* After parsing: resolves names and sizes into a->p.  Prints the error and returns false on bad values. */
bool engine_args_finish(const char *cmd, struct engine_args *a);
/* The same settings as the public API's engine options (what run and serve hand to cinfer_engine_create). */
void engine_args_to_options(const struct engine_args *a, struct cinfer_engine_options *o);
/* Parses "64M", "1.5G", "4096", "512K" (binary multiples) into bytes; false if malformed or not positive. */
bool engine_args_parse_bytes(const char *s, int64_t *out);

#endif
