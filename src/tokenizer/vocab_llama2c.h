/* The vocabulary of a llama2.c tokenizer.bin: a max-token-length header, then per token a float score, an
 * int32 length and the bytes (spaces as ' ', which the loader turns into SentencePiece's "\u2581"). */
#ifndef CINFER_TOKENIZER_VOCAB_LLAMA2C_H
#define CINFER_TOKENIZER_VOCAB_LLAMA2C_H

#include <stddef.h>

#include "core/status.h"

struct vocab;

/* Loads a llama2.c tokenizer.bin held in memory.  n_vocab_expected 0 reads tokens up to the end of the
 * data; otherwise exactly that many tokens must be present. */
enum ci_status vocab_load_llama2c_mem(struct vocab *v, const void *data, size_t size, int n_vocab_expected,
                                      struct ci_err *err);
enum ci_status vocab_load_llama2c(struct vocab *v, const char *path, int n_vocab_expected,
                                  struct ci_err *err);

#endif
