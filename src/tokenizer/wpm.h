/* WordPiece (tokenizer.ggml.model "bert": BERT, bge, MiniLM, ...), following llama.cpp's llm_tokenizer_wpm.
 * The text is normalized (optionally accent-stripped: each code point replaced by the first one of its
 * canonical decomposition and combining marks dropped; optionally lowercased), split at whitespace, with
 * every punctuation character, ASCII symbol and CJK ideograph a word of its own, and control characters,
 * NUL and U+FFFD dropped.  Each word, with "▁" prepended (llama.cpp's converter stores BERT's word-start
 * pieces as "▁word" and its "##" continuation pieces without the "##"), is cut greedily into the longest
 * vocabulary tokens from the left; a word that cannot be cut entirely becomes the unknown token.
 * Stateless: all scratch is per call. */
#ifndef CINFER_TOKENIZER_WPM_H
#define CINFER_TOKENIZER_WPM_H

#include <stddef.h>

#include "core/status.h"

struct vocab;
struct tok_ids;

/* Appends the tokens of one raw-text fragment (no special tokens inside) to out. */
enum ci_status wpm_encode(const struct vocab *v, const char *text, size_t len, struct tok_ids *out,
                          struct ci_err *err);

#endif
