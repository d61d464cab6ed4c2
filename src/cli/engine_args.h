/* The engine flags shared by `cinfer run` and `cinfer serve`: scheduling policy, chunked prefill, token
 * budget, running sequences, KV memory, element type and block size, prefix caching, threads, context.  They
 * fill the public API's engine options (include/cinfer.h), which is all a front end needs. */
#ifndef CINFER_CLI_ENGINE_ARGS_H
#define CINFER_CLI_ENGINE_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer.h"
#include "cli/args.h"

struct engine_args {
    struct cinfer_engine_options o; // what cinfer_engine_create gets
    const char *kv_mem;
    float kv_mem_fraction; // --kv-mem-fraction (0: the library's default)
    bool no_chunked_prefill;
    bool no_prefix_cache;
    const char *draft_path; // --draft-model
    struct cinfer_model *draft;
    const char *pack;           // --pack
    enum cinfer_pack pack_mode; // the load options' pack mode: --pack, else the command's default (lazy)
};

#define ENGINE_ARGS_N_SPECS 21

void engine_args_init(struct engine_args *a);
/* Writes ENGINE_ARGS_N_SPECS flag specs bound to a into out. */
void engine_args_specs(struct engine_args *a, struct arg_spec *out);
/* After parsing: checks the names and resolves the sizes into a->o.  Prints the error and returns false on
 * bad values. */
bool engine_args_finish(const char *cmd, struct engine_args *a);
/* --spec draft: loads the --draft-model file (packed as the model: pack_mode) into a->o.draft_model (true
 * with nothing to do otherwise).  engine_args_free frees it after the engine. */
bool engine_args_load_draft(struct engine_args *a, struct cinfer_error *err);
void engine_args_free(struct engine_args *a);
/* The start-up line about the KV pool ("cinfer CMD: KV pool ..."): its size, blocks, the tokens it holds, the
 * bytes per token, and what sized it (the memory share, the cap or the flag). */
void engine_args_report_pool(const char *cmd, const struct cinfer_engine_info *info);
/* Parses "64M", "1.5G", "4096", "512K" (binary multiples) into bytes; false if malformed or not positive. */
bool engine_args_parse_bytes(const char *s, int64_t *out);

#endif
