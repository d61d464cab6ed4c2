/* SentencePiece-style BPE (tokenizer.ggml.model "llama": Llama 2, TinyLlama, Phi-3, llama2.c), following
 * llama.cpp's llm_tokenizer_spm: spaces become U+2581 "▁" (one is prepended when the caller asks), the text
 * is split into UTF-8 characters, the adjacent pair whose concatenation is the highest-scoring vocabulary
 * token is merged until none is left (ties: leftmost), and symbols that are not tokens fall back to the
 * byte tokens <0xXX>.  Stateless: all scratch is per call. */
#ifndef CINFER_TOKENIZER_SPM_H
#define CINFER_TOKENIZER_SPM_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

struct vocab;
struct tok_ids;

/* Appends the tokens of one raw-text fragment (no special tokens inside) to out; add_prefix prepends "▁". */
enum ci_status spm_encode(const struct vocab *v, const char *text, size_t len, bool add_prefix,
                          struct tok_ids *out, struct ci_err *err);

#endif
