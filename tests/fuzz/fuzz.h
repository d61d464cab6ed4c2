/* Shared helpers of the fuzz harnesses (tests/fuzz/fuzz_<target>.c).  A harness defines
 * LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize when it loads something once, e.g. vocabularies); the
 * same source links either with libFuzzer (`make fuzz`, clang) or with tests/fuzz/replay.c (every gcc
 * variant, run by `make test`), so nothing here may depend on libFuzzer.
 *
 * A failed property is FUZZ_CHECK: it prints what failed and aborts, which libFuzzer reports as a crash
 * (and saves the input) and the replay reports as a FAIL line.  Leaks are failures too: FUZZ_MEM_BEGIN /
 * FUZZ_MEM_END compare cinfer's counted heap (ci_mem_in_use) around one input, which catches a leak under
 * gcc as well as under LeakSanitizer. */
#ifndef CINFER_TESTS_FUZZ_H
#define CINFER_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond, ...)                                                                                \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: fuzz property failed: %s: ", __FILE__, __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

#define FUZZ_MEM_BEGIN() const size_t fuzz_mem_before_ = ci_mem_in_use()
#define FUZZ_MEM_END()                                                                                       \
    FUZZ_CHECK(ci_mem_in_use() == fuzz_mem_before_, "%zd bytes of cinfer's heap leaked",                     \
               (ssize_t)(ci_mem_in_use() - fuzz_mem_before_))

/* Warnings about odd files (empty tokens, missing scores) are expected on fuzzed input: keep stderr for
 * failures. */
static inline void fuzz_quiet(void) {
    ci_log_set_level(CI_LOG_LEVEL_ERR);
}

/* ---- a growable byte buffer (released with free(b.p)) ---- */

struct fuzz_buf {
    char *p;
    size_t n, cap;
};

static inline void fuzz_buf_put(struct fuzz_buf *b, const char *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = realloc(b->p, b->cap);
        FUZZ_CHECK(b->p != NULL, "out of memory");
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* ---- reading the input ---- */

struct fuzz_in {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fuzz_u8(struct fuzz_in *in) {
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint32_t fuzz_u16(struct fuzz_in *in) {
    uint32_t lo = fuzz_u8(in);
    return lo | (uint32_t)fuzz_u8(in) << 8;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in) {
    uint32_t lo = fuzz_u16(in);
    return lo | fuzz_u16(in) << 16;
}

/* Up to max bytes (fewer when the input runs out). */
static inline size_t fuzz_bytes(struct fuzz_in *in, size_t max, const uint8_t **out) {
    size_t n = in->n < max ? in->n : max;
    *out = in->p;
    in->p += n;
    in->n -= n;
    return n;
}

/* A length-prefixed string: one byte of length (0..255), then that many bytes. */
static inline size_t fuzz_lstr(struct fuzz_in *in, const uint8_t **out) {
    return fuzz_bytes(in, fuzz_u8(in), out);
}

/* A NUL-terminated malloc'd copy of s[0..n) (the NUL bytes inside are kept; strlen sees the first). */
static inline char *fuzz_strndup(const void *s, size_t n) {
    char *d = malloc(n + 1);
    FUZZ_CHECK(d != NULL, "out of memory");
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- UTF-8 (independent of the code under test: Unicode 15, table 3-7) ---- */

/* Length of the well-formed sequence at s[0..n), or 0 when none starts there. */
static inline size_t fuzz_utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; // allowed range of the second byte
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xbf)
            return 0;
    return len;
}

static inline bool fuzz_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = fuzz_utf8_seq(u + i, n - i);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

/* Length of the longest prefix of s[0..n) that could still be completed into a well-formed sequence
 * (Unicode's "maximal subpart"), at least 1. */
static inline size_t fuzz_utf8_subpart(const unsigned char *s, size_t n) {
    unsigned char c = s[0], lo = 0x80, hi = 0xbf;
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
    if (c == 0xe0)
        lo = 0xa0;
    if (c == 0xed)
        hi = 0x9f;
    if (c == 0xf0)
        lo = 0x90;
    if (c == 0xf4)
        hi = 0x8f;
    size_t k = 1;
    while (k < len && k < n && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xbf))
        k++;
    return k;
}

/* s[0..n) with every maximal ill-formed subpart replaced by U+FFFD (the Unicode recommendation, also
 * WHATWG's decoder); out needs 3 * n bytes.  Returns the length written. */
static inline size_t fuzz_utf8_replace(const char *s, size_t n, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = fuzz_utf8_seq(u + i, n - i);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += fuzz_utf8_subpart(u + i, n - i);
        }
    }
    return o;
}

/* ---- the shared model files ---- */

static inline const char *fuzz_models_dir(void) {
    const char *d = getenv("CINFER_MODELS");
    return d && *d ? d : "../shared/models";
}

/* The whole file <models>/<name> (malloc'd); aborts when it cannot be read: the harness needs it. */
static inline uint8_t *fuzz_model_file(const char *name, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fuzz_models_dir(), name);
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(f != NULL, "cannot open %s (set CINFER_MODELS to the shared models directory)", path);
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    FUZZ_CHECK(l >= 0, "cannot size %s", path);
    uint8_t *b = malloc((size_t)l + 1);
    FUZZ_CHECK(b != NULL && fread(b, 1, (size_t)l, f) == (size_t)l, "cannot read %s", path);
    fclose(f);
    *n = (size_t)l;
    return b;
}

/* A GGUF image equal to g's key/values with tokenizer.ggml.pre set to pre (tensors are not copied: the
 * vocabulary files have none). */
static inline uint8_t *fuzz_gguf_with_pre(const struct gguf *g, const char *pre, uint64_t *n) {
    struct gguf_writer *w = gguf_writer_create();
    struct ci_err err = {0};
    uint8_t *img = NULL;
    FUZZ_CHECK(w != NULL, "out of memory");
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        gguf_writer_copy_kv(w, g, i);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    FUZZ_CHECK(gguf_writer_write_mem(w, &img, n, &err) == CI_OK, "%s", err.msg);
    gguf_writer_free(w);
    return img;
}

/* The tokenizers the tokenizer harnesses choose from, loaded once. */
struct fuzz_tok {
    char name[96]; // file, or "file pre=<name>" for a pre-tokenizer set on another vocabulary
    struct tokenizer *tok;
};

#define FUZZ_MAX_TOKENIZERS 48

static inline struct tokenizer *fuzz_tok_from_gguf_bytes(const uint8_t *b, uint64_t n, const char *what) {
    struct ci_err err = {0};
    struct gguf *g = NULL;
    struct tokenizer *t = NULL;
    FUZZ_CHECK(gguf_open_mem(b, n, &g, &err) == CI_OK, "%s: %s", what, err.msg);
    FUZZ_CHECK(tokenizer_from_gguf(g, &t, &err) == CI_OK, "%s: %s", what, err.msg);
    gguf_free(g);
    return t;
}

/* Same regexes and flags that change encoding (clean_spaces only affects `cinfer info`). */
static inline bool fuzz_pre_same(const struct bpe_pre *a, const struct bpe_pre *b) {
    if (a->ignore_merges != b->ignore_merges || a->add_bos != b->add_bos)
        return false;
    for (int i = 0; i < BPE_MAX_REGEX; i++) {
        if (!a->regex[i] || !b->regex[i]) {
            if (a->regex[i] || b->regex[i])
                return false;
            break;
        }
        if (strcmp(a->regex[i], b->regex[i]) != 0)
            return false;
    }
    return true;
}

/* Loads SentencePiece vocabularies (Llama 2 and Phi-3 GGUFs, the llama2.c tok512.bin) and, with all_pre,
 * one tokenizer for every byte-level BPE pre-tokenizer bpe.c knows: the real ggml-vocab file where one
 * exists, otherwise GPT-2's vocabulary with tokenizer.ggml.pre set to that name (pre-tokenizers that split
 * and merge identically share one), and the WordPiece bert-bge vocabulary.  Without all_pre: the SPM ones
 * plus GPT-2 and DeepSeek-LLM.
 * Returns the count. */
static inline int fuzz_load_tokenizers(struct fuzz_tok *out, bool all_pre) {
    static const char *const spm[] = {"ggml-vocab/ggml-vocab-llama-spm.gguf",
                                      "ggml-vocab/ggml-vocab-phi-3.gguf"};
    static const char *const bpe_all[] = {
        "ggml-vocab/ggml-vocab-gpt-2.gguf",        "ggml-vocab/ggml-vocab-falcon.gguf",
        "ggml-vocab/ggml-vocab-mpt.gguf",          "ggml-vocab/ggml-vocab-refact.gguf",
        "ggml-vocab/ggml-vocab-starcoder.gguf",    "ggml-vocab/ggml-vocab-deepseek-coder.gguf",
        "ggml-vocab/ggml-vocab-deepseek-llm.gguf",
    };
    static const char *const bpe_few[] = {"ggml-vocab/ggml-vocab-gpt-2.gguf",
                                          "ggml-vocab/ggml-vocab-deepseek-llm.gguf"};
    const char *const *bpe = all_pre ? bpe_all : bpe_few;
    size_t n_bpe = all_pre ? sizeof bpe_all / sizeof *bpe_all : sizeof bpe_few / sizeof *bpe_few;
    int n = 0;
    size_t sz;
    for (size_t i = 0; i < sizeof spm / sizeof *spm; i++) {
        uint8_t *b = fuzz_model_file(spm[i], &sz);
        snprintf(out[n].name, sizeof out[n].name, "%s", spm[i]);
        out[n++].tok = fuzz_tok_from_gguf_bytes(b, sz, spm[i]);
        free(b);
    }
    {
        struct ci_err err = {0};
        uint8_t *b = fuzz_model_file("tok512.bin", &sz);
        snprintf(out[n].name, sizeof out[n].name, "tok512.bin");
        FUZZ_CHECK(tokenizer_from_llama2c_mem(b, sz, 0, &out[n].tok, &err) == CI_OK, "tok512.bin: %s",
                   err.msg);
        n++;
        free(b);
    }
    int first_bpe = n;
    for (size_t i = 0; i < n_bpe; i++) {
        uint8_t *b = fuzz_model_file(bpe[i], &sz);
        snprintf(out[n].name, sizeof out[n].name, "%s", bpe[i]);
        out[n++].tok = fuzz_tok_from_gguf_bytes(b, sz, bpe[i]);
        free(b);
    }
    if (!all_pre)
        return n;
    // Every other pre-tokenizer, on GPT-2's vocabulary.
    uint8_t *gpt2 = fuzz_model_file(bpe_all[0], &sz);
    struct gguf *g = NULL;
    struct ci_err err = {0};
    FUZZ_CHECK(gguf_open_mem(gpt2, sz, &g, &err) == CI_OK, "%s", err.msg);
    for (size_t k = 0; bpe_pre_at(k); k++) {
        const struct bpe_pre *pre = bpe_pre_at(k);
        bool covered = false;
        for (int j = first_bpe; j < n && !covered; j++)
            covered = fuzz_pre_same(bpe_pre_find(tokenizer_pre(out[j].tok)), pre);
        if (covered)
            continue;
        FUZZ_CHECK(n < FUZZ_MAX_TOKENIZERS, "too many tokenizers");
        uint64_t m;
        uint8_t *img = fuzz_gguf_with_pre(g, pre->name, &m);
        snprintf(out[n].name, sizeof out[n].name, "ggml-vocab-gpt-2.gguf pre=%s", pre->name);
        out[n].tok = fuzz_tok_from_gguf_bytes(img, m, out[n].name);
        FUZZ_CHECK(strcmp(tokenizer_pre(out[n].tok), pre->name) == 0, "%s: pre '%s'", out[n].name,
                   tokenizer_pre(out[n].tok));
        n++;
        ci_free(img);
    }
    gguf_free(g);
    free(gpt2);
    // WordPiece (BERT), last: the seeds' first byte keeps picking the tokenizers listed before it.
    static const char bert[] = "ggml-vocab/ggml-vocab-bert-bge.gguf";
    FUZZ_CHECK(n < FUZZ_MAX_TOKENIZERS, "too many tokenizers");
    uint8_t *b = fuzz_model_file(bert, &sz);
    snprintf(out[n].name, sizeof out[n].name, "%s", bert);
    out[n++].tok = fuzz_tok_from_gguf_bytes(b, sz, bert);
    free(b);
    return n;
}

#endif
