/* Byte-level BPE (GPT-2 family: GPT-2, Llama 3, Qwen2, Falcon, StarCoder, DeepSeek, SmolLM, ...), following
 * llama.cpp's llm_tokenizer_bpe: the text is split by the pre-tokenizer regexes named by tokenizer.ggml.pre
 * (each regex splits the pieces the previous one produced; text between matches is kept as its own piece),
 * every piece is mapped byte by byte to GPT-2's printable code points, the merges are applied by rank, and
 * the final symbols are looked up in the vocabulary.
 *
 * struct bpe holds the compiled PCRE2 regexes; it is immutable after bpe_create, so concurrent bpe_encode
 * calls on one struct bpe are safe (each call has its own match data and scratch). */
#ifndef CINFER_TOKENIZER_BPE_H
#define CINFER_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct vocab;
struct bpe;
struct tok_ids;

#define BPE_MAX_REGEX 8

/* One pre-tokenizer: its regexes and the vocabulary defaults llama.cpp ties to the name. */
struct bpe_pre {
    const char *name;
    const char *regex[BPE_MAX_REGEX]; // NULL-terminated list
    bool clean_spaces;
    bool ignore_merges;
    bool add_bos;
    // SentencePiece-style BPE (Gemma 4): merges over the raw UTF-8 text with spaces written "▁", bytes
    // without a token as "<0xXX>" tokens; the others map every byte to a printable GPT-2 character first.
    bool raw;
};

/* The pre-tokenizer named name (llama.cpp's tokenizer.ggml.pre values), or NULL if unknown. */
const struct bpe_pre *bpe_pre_find(const char *name);
/* Entry i of the pre-tokenizer table, NULL past its end (for tests and fuzzers that cover every one). */
const struct bpe_pre *bpe_pre_at(size_t i);

enum ci_status bpe_create(const struct bpe_pre *pre, struct bpe **out, struct ci_err *err);
void bpe_free(struct bpe *b);

/* Splits text[0..len) with the pre-tokenizer regexes; pieces are returned as [n][2] (offset, length) pairs
 * into *out_text (the input with malformed UTF-8 replaced by U+FFFD, as llama.cpp does).  Both outputs are
 * freed by the caller with ci_free.  Exposed for tests. */
enum ci_status bpe_split(const struct bpe *b, const char *text, size_t len, char **out_text,
                         size_t (**out_pieces)[2], size_t *n_pieces, struct ci_err *err);

/* Appends the tokens of one raw-text fragment (no special tokens inside) to out. */
enum ci_status bpe_encode(const struct bpe *b, const struct vocab *v, const char *text, size_t len,
                          struct tok_ids *out, struct ci_err *err);

#endif
