/* The vocabulary of a GGUF file: its tokenizer.ggml.* metadata. */
#ifndef CINFER_TOKENIZER_VOCAB_GGUF_H
#define CINFER_TOKENIZER_VOCAB_GGUF_H

#include "core/status.h"

struct gguf;
struct vocab;

/* Loads from GGUF tokenizer.ggml.* keys.  CI_ERR_UNSUPPORTED for tokenizer models other than "llama" and
 * "gpt2" or an unknown pre-tokenizer; CI_ERR_FORMAT for malformed metadata (types, lengths, ids). */
enum ci_status vocab_load_gguf(struct vocab *v, const struct gguf *g, struct ci_err *err);

#endif
