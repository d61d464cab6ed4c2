/* `cinfer convert`: a llama2.c checkpoint (legacy or version 1) plus its tokenizer.bin -> GGUF v3, arch
 * llama, loadable by llama.cpp.  Matrices are stored in the requested type (F32 copies the checkpoint bit
 * for bit), norm weights stay F32, output.weight is written explicitly (a copy of token_embd when the
 * classifier is shared).  No Q/K permutation: llama2.c and GGUF llama both rotate adjacent pairs here.
 *
 * tokenizer.bin: int32 max_token_length, then per token a float score, an int32 length and the bytes.  It
 * becomes tokenizer.ggml.model "llama" with pieces in SentencePiece form (' ' -> U+2581, BOS/EOS stored as
 * "\n<s>\n" / "\n</s>\n" -> "<s>" / "</s>"), the scores, and token types (id 0 unknown, ids 1-2 control,
 * "<0xXX>" byte, the rest normal); bos 1, eos 2, unk 0, add_bos true. */
#ifndef CINFER_MODEL_CONVERT_H
#define CINFER_MODEL_CONVERT_H

#include <stdint.h>

#include "core/status.h"

/* type: F32, F16, BF16, Q8_0 or Q4_0 for the matrices (a matrix whose row the block size does not divide
 * stays F32).  The tokenizer must hold exactly the checkpoint's vocab_size tokens.  A partial output file
 * is removed on failure. */
enum ci_status convert_llama2c(const char *in, const char *tokenizer_path, uint32_t type, const char *out,
                               struct ci_err *err);

/* The same with the matrices typed as `llama-quantize OUT quant` would type them from the F32 file: quant names
 * one of llama.cpp's presets (model/quant_rules.h). */
enum ci_status convert_llama2c_preset(const char *in, const char *tokenizer_path, const char *quant,
                                      const char *out, struct ci_err *err);

#endif
