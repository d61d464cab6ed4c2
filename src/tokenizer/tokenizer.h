/* The tokenizer facade the rest of cinfer calls: builds a SentencePiece-style ("llama") or byte-level BPE
 * ("gpt2") tokenizer from GGUF metadata or a llama2.c tokenizer.bin, encodes text to token ids exactly as
 * llama.cpp's llama_tokenize does, and hands out each token's raw text and decoded bytes.
 *
 * Ownership and threads: struct tokenizer owns everything it uses (the GGUF may be freed after
 * tokenizer_from_gguf).  It is immutable once built: any number of threads may call tokenizer_encode and
 * the accessors concurrently (each encode call allocates its own scratch and frees it before returning). */
#ifndef CINFER_TOKENIZER_TOKENIZER_H
#define CINFER_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct gguf;
struct tokenizer;
struct vocab;

enum tokenizer_type {
    TOKENIZER_TYPE_SPM = 1, // SentencePiece-style BPE with byte fallback
    TOKENIZER_TYPE_BPE = 2, // GPT-2 byte-level BPE
    TOKENIZER_TYPE_WPM = 3, // WordPiece (BERT)
};

#define TOKENIZER_TOKEN_NULL (-1)

/* CI_ERR_UNSUPPORTED for vocabularies other than "llama"/"gpt2"/"bert" or an unknown pre-tokenizer;
 * CI_ERR_FORMAT for malformed tokenizer metadata. */
enum ci_status tokenizer_from_gguf(const struct gguf *g, struct tokenizer **out, struct ci_err *err);
/* llama2.c tokenizer.bin (SentencePiece-style; BOS 1, EOS 2, UNK 0).  n_vocab_expected 0 accepts any
 * count (tokens up to end of file); otherwise the file must hold exactly that many tokens. */
enum ci_status tokenizer_from_llama2c(const char *path, int n_vocab_expected, struct tokenizer **out,
                                      struct ci_err *err);
enum ci_status tokenizer_from_llama2c_mem(const void *data, size_t size, int n_vocab_expected,
                                          struct tokenizer **out, struct ci_err *err);
void tokenizer_free(struct tokenizer *t);

/* Encodes text[0..len) (any bytes; malformed UTF-8 is tokenized as llama.cpp does).  add_special adds BOS
 * and/or EOS as the vocabulary asks (tokenizer_add_bos/add_eos; WordPiece: [CLS] ... [SEP], add_sep);
 * parse_special turns control-token texts
 * such as "<|im_start|>" in the text into those tokens (user-defined tokens are always matched, as in
 * llama.cpp).  *out_ids is allocated (free with ci_free; NULL when *n_out is 0). */
enum ci_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                                bool parse_special, int32_t **out_ids, int *n_out, struct ci_err *err);

/* The id of the one token text[0..len) encodes to (special tokens recognized, no BOS/EOS added), or -1 when
 * it encodes to none or several (GBNF's `<text>` token references, as llama.cpp resolves them). */
int32_t tokenizer_single_token(const struct tokenizer *t, const char *text, size_t len);

/* Decodes ids into one allocated NUL-terminated string (free with ci_free): the concatenated token bytes,
 * with SentencePiece's leading space dropped at the start of the text and after BOS; control tokens
 * appear only with render_special.  Unknown ids are an error. */
enum ci_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, bool render_special,
                                char **out, size_t *n_out, struct ci_err *err);

int tokenizer_n_vocab(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); // TOKENIZER_TOKEN_NULL when the vocabulary has none
int32_t tokenizer_eos(const struct tokenizer *t);
int32_t tokenizer_eot(const struct tokenizer *t);
int32_t tokenizer_unk(const struct tokenizer *t);
int32_t tokenizer_pad(const struct tokenizer *t);
int32_t tokenizer_nl(const struct tokenizer *t);
bool tokenizer_add_bos(const struct tokenizer *t);
bool tokenizer_add_eos(const struct tokenizer *t);
bool tokenizer_add_space_prefix(const struct tokenizer *t);
int32_t tokenizer_sep(const struct tokenizer *t); // WordPiece's [SEP] (TOKENIZER_TOKEN_NULL when none)
bool tokenizer_add_sep(const struct tokenizer *t);
/* End of generation: EOS, EOT, EOM and the other tokens llama.cpp treats as such (e.g. "<|im_end|>"). */
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);
/* Every end-of-generation id, ascending (listed once, when the tokenizer is built; owned by it). */
const int32_t *tokenizer_eog_ids(const struct tokenizer *t, int *n);
/* Control or unknown token (rendered as nothing unless asked). */
bool tokenizer_is_control(const struct tokenizer *t, int32_t id);
float tokenizer_score(const struct tokenizer *t, int32_t id);

/* Raw vocabulary text of id ("▁Hello", "Ġworld", "<0x0A>", "<s>"), not NUL-terminated in general use
 * (it is NUL-terminated, but may contain NUL bytes); NULL with *len 0 for an id out of range. */
const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len);
/* Decoded bytes of id: SPM "▁" → ' ', "<0xXX>" → that byte, GPT-2 characters → bytes, user-defined tokens
 * as written; control/unknown tokens are empty unless special.  A view valid for the tokenizer's life
 * (NULL/0 for an id out of range). */
const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, bool special, size_t *len);
/* The same bytes copied into buf: returns the length, or -(length) when cap is too small (nothing
 * written).  Control tokens render as empty; an id out of range gives 0. */
int tokenizer_token_to_bytes(const struct tokenizer *t, int32_t id, char *buf, int cap);
/* Longest decoded token (bytes), for sizing detokenizer buffers. */
size_t tokenizer_max_token_bytes(const struct tokenizer *t);

enum tokenizer_type tokenizer_type(const struct tokenizer *t);
const char *tokenizer_type_name(const struct tokenizer *t);  // "SPM" / "BPE" / "WPM"
const char *tokenizer_model_name(const struct tokenizer *t); // tokenizer.ggml.model: "llama" / "gpt2"
const char *tokenizer_pre(const struct tokenizer *t);        // tokenizer.ggml.pre ("default" if absent)
int tokenizer_n_merges(const struct tokenizer *t);

/* The vocabulary behind t (for detok.c and tests). */
const struct vocab *tokenizer_vocab(const struct tokenizer *t);

#endif
