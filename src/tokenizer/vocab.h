/* Tokenizer vocabulary: token strings, scores and attributes, special token ids, the piece → id map, BPE
 * merge ranks and the decoded bytes of every token, loaded from GGUF tokenizer.ggml.* metadata
 * (vocab_gguf.h) or from a llama2.c tokenizer.bin (vocab_llama2c.h).  Shared by spm.c, bpe.c and the
 * tokenizer.c facade (which is what the rest of cinfer calls).
 *
 * Ownership: struct vocab owns copies of every string it holds (the GGUF mapping may be closed after load).
 * After loading it is read-only, so any number of threads may encode/decode with it at once. */
#ifndef CINFER_TOKENIZER_VOCAB_H
#define CINFER_TOKENIZER_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

enum vocab_type {
    VOCAB_TYPE_SPM = 1, // tokenizer.ggml.model "llama": SentencePiece-style BPE over scores, byte fallback
    VOCAB_TYPE_BPE = 2, // tokenizer.ggml.model "gpt2": byte-level BPE over merge ranks
    VOCAB_TYPE_WPM = 3, // tokenizer.ggml.model "bert": WordPiece, greedy longest match ("▁" word starts)
};

/* Token attributes (llama.cpp's llama_token_attr bits; GGUF token_type 1..6 map onto the first six). */
enum vocab_attr {
    VOCAB_ATTR_UNDEFINED = 0,
    VOCAB_ATTR_UNKNOWN = 1 << 0,
    VOCAB_ATTR_UNUSED = 1 << 1,
    VOCAB_ATTR_NORMAL = 1 << 2,
    VOCAB_ATTR_CONTROL = 1 << 3,
    VOCAB_ATTR_USER_DEFINED = 1 << 4,
    VOCAB_ATTR_BYTE = 1 << 5,
    VOCAB_ATTR_LSTRIP = 1 << 7, // when split out as a special token, eat whitespace to its left
    VOCAB_ATTR_RSTRIP = 1 << 8, // ... and to its right
};

/* GGUF tokenizer.ggml.token_type values. */
enum vocab_token_type {
    VOCAB_TOKEN_TYPE_UNDEFINED = 0,
    VOCAB_TOKEN_TYPE_NORMAL = 1,
    VOCAB_TOKEN_TYPE_UNKNOWN = 2,
    VOCAB_TOKEN_TYPE_CONTROL = 3,
    VOCAB_TOKEN_TYPE_USER_DEFINED = 4,
    VOCAB_TOKEN_TYPE_UNUSED = 5,
    VOCAB_TOKEN_TYPE_BYTE = 6,
};

#define VOCAB_TOKEN_NULL      (-1)
#define VOCAB_MAX_TOKEN_BYTES (1u << 16) // longest token string accepted from a file

/* Open-addressing hash map from a byte string to an int32.  Keys are views into a pool the owner keeps
 * (pool is not owned by the map). */
struct vocab_map_slot {
    uint64_t off;  // key bytes at pool + off
    uint32_t len;  // key length
    uint32_t hash; // low 32 bits of the key hash
    int32_t value; // VOCAB_TOKEN_NULL marks an empty slot
};

struct vocab_map {
    const char *pool;
    struct vocab_map_slot *slots; // [mask + 1]
    uint64_t mask;
    uint64_t n;
};

struct vocab {
    enum vocab_type type;
    char model[32]; // tokenizer.ggml.model ("llama", "gpt2", "bert")
    char pre[64];   // tokenizer.ggml.pre ("default" when absent)

    int32_t n_tokens;
    char *text_pool;         // every token string, each NUL-terminated
    uint64_t *text_off;      // [n_tokens] offset of token i in text_pool
    uint32_t *text_len;      // [n_tokens]
    float *scores;           // [n_tokens] (0 when the file has none)
    uint16_t *attr;          // [n_tokens] enum vocab_attr bits
    struct vocab_map tokens; // text → id

    /* BPE only: merge "left right" → rank. */
    char *merge_pool;
    struct vocab_map merges;
    int32_t n_merges;

    int32_t bos, eos, unk, sep, pad, eot, eom, nl; // VOCAB_TOKEN_NULL when absent
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos;
    bool add_space_prefix; // SPM: prepend "▁" at the start of the text and after each special token
    bool clean_spaces;     // llama.cpp's detokenize clean-up flag (kept for `cinfer info`)
    bool ignore_merges;    // BPE (llama3 style): a pre-token that is itself a token skips the merges
    bool bpe_raw;          // BPE over raw UTF-8, "▁" spaces, "<0xXX>" bytes (struct bpe_pre's raw: Gemma 4)
    bool add_sep;          // WPM: add_special appends the separator ([SEP]) instead of EOS
    bool lowercase;        // WPM normalizer: lowercase the text
    bool strip_accents;    // WPM normalizer: decompose (NFD) and drop combining marks

    int32_t *special; // [n_special] control/user-defined/unknown ids, longest text first (partitioning)
    int32_t n_special;
    int32_t *eog; // [n_eog] end-of-generation ids, ascending
    int32_t n_eog;
    int32_t byte_id[256]; // SPM: id of "<0xXX>" (or the 1-byte token); raw BPE: of "<0xXX>"; BPE: of the
                          // byte's GPT-2 char

    /* Decoded bytes of every token (what detokenization emits): SPM "▁" → " ", "<0xXX>" → the byte, BPE
     * GPT-2 chars → bytes; control/unknown tokens keep their text here (callers decide whether to show it).
     */
    char *piece_pool;
    uint64_t *piece_off; // [n_tokens]
    uint32_t *piece_len; // [n_tokens]

    uint32_t max_token_len; // longest token text
    uint32_t max_piece_len; // longest decoded piece
};

void vocab_deinit(struct vocab *v);

/* What every loader does (vocab_gguf.c, vocab_llama2c.c): start from no tokens and no special ids;
 * allocate the per-token arrays for n tokens and a text pool of pool_bytes (the loader copies the texts in);
 * index the texts once they are in; and, once ids and attributes are final (after vocab_detect_special),
 * build the special-token list, the byte table and the decoded pieces. */
void vocab_init_empty(struct vocab *v);
enum ci_status vocab_alloc_tokens(struct vocab *v, uint64_t n, uint64_t pool_bytes, struct ci_err *err);
enum ci_status vocab_build_token_map(struct vocab *v, struct ci_err *err);
enum ci_status vocab_build_tables(struct vocab *v, struct ci_err *err);

/* Id of the token whose text is exactly s[0..n) (vocab_find_str: the C string s), or VOCAB_TOKEN_NULL. */
int32_t vocab_find(const struct vocab *v, const char *s, size_t n);
int32_t vocab_find_str(const struct vocab *v, const char *s);
/* Writes in[0..n) to out with each space as SentencePiece's "▁" (U+2581, 3 bytes): out holds 3 n bytes.
 * Returns the bytes written. */
size_t vocab_escape_spaces(const char *in, size_t n, char *out);
/* The byte a "<0xHH>" token stands for, or -1. */
int vocab_byte_token_value(const char *s, uint32_t n);
static inline const char *vocab_text(const struct vocab *v, int32_t id, uint32_t *len) {
    *len = v->text_len[id];
    return v->text_pool + v->text_off[id];
}
bool vocab_is_eog(const struct vocab *v, int32_t id);

/* Growable id list used by the encoders (ids owned by the caller, freed with ci_free). */
struct tok_ids {
    int32_t *ids;
    size_t n, cap;
};
enum ci_status tok_ids_push(struct tok_ids *o, int32_t id);

/* Map primitives (exposed for the merge table and tests). */
enum ci_status vocab_map_init(struct vocab_map *m, const char *pool, uint64_t n_expected);
void vocab_map_deinit(struct vocab_map *m);
/* Inserts key pool[off..off+len) → value unless the key is present (first insert wins); *inserted says
 * which.  The table never fills: init sized it for n_expected keys. */
void vocab_map_insert(struct vocab_map *m, uint64_t off, uint32_t len, int32_t value, bool *inserted);
int32_t vocab_map_find(const struct vocab_map *m, const char *s, size_t n);

/* GPT-2 byte ↔ code point table of byte-level BPE. */
uint32_t vocab_gpt2_byte_to_cpt(uint8_t byte);
int vocab_gpt2_cpt_to_byte(uint32_t cpt); // -1 when cpt is not one of the 256 mapped code points

#endif
