/* Loading a model and its tokenizer for a subcommand: GGUF files carry the tokenizer in their metadata,
 * llama2.c checkpoints take it from --tokenizer tokenizer.bin.  Errors are printed as one line. */
#ifndef CINFER_CLI_LOAD_H
#define CINFER_CLI_LOAD_H

#include <stdbool.h>

struct model;
struct tokenizer;

struct loaded {
    struct model *model;
    struct tokenizer *tok; // NULL if none was found and none was required
};

/* Prints the error and returns false on failure.  need_tok: fail when no tokenizer can be had. */
bool load_model(const char *model_path, const char *tok_path, bool need_tok, struct loaded *out);
/* Only the tokenizer (out->model stays NULL): from tok_path (tokenizer.bin) if given, else from the GGUF
 * metadata of model_path, which may be a vocab-only GGUF file. */
bool load_tokenizer(const char *model_path, const char *tok_path, struct loaded *out);
void unload_model(struct loaded *ld);

#endif
