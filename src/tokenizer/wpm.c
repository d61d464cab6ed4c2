/* WordPiece encoder (see wpm.h).  The text is read one code point at a time; the current word is built in
 * a buffer that starts with "▁" and is cut into tokens as soon as the word ends, so scratch memory is
 * bounded by the longest word, and the work per word by its length times the longest vocabulary token. */
#include "tokenizer/wpm.h"

#include <string.h>

#include "core/mem.h"
#include "core/utf8.h"
#include "tokenizer/unicode_wpm.h"
#include "tokenizer/vocab.h"

#define WORD_PREFIX     "\xe2\x96\x81" // "▁"
#define WORD_PREFIX_LEN 3

struct word {
    char *p;
    size_t n, cap;
};

static enum ci_status word_put(struct word *w, const char *s, size_t n, struct ci_err *err) {
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 64;
        while (cap < w->n + n)
            cap *= 2;
        char *p = ci_realloc(w->p, cap);
        if (!p)
            return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        w->p = p;
        w->cap = cap;
    }
    memcpy(w->p + w->n, s, n);
    w->n += n;
    return CI_OK;
}

/* CJK ideographs, as llama.cpp's is_chinese_char lists them (including its 0x2B920 lower bound, which
 * follows Hugging Face's Rust tokenizer). */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Cuts the word in w (after its "▁") into tokens, then empties it. */
static enum ci_status flush_word(const struct vocab *v, struct word *w, struct tok_ids *out,
                                 struct ci_err *err) {
    if (w->n <= WORD_PREFIX_LEN)
        return CI_OK;
    size_t n = w->n, start = out->n;
    w->n = WORD_PREFIX_LEN;
    for (size_t i = 0; i < n;) {
        size_t j = n - i > (size_t)v->max_token_len ? i + v->max_token_len : n;
        int32_t id = VOCAB_TOKEN_NULL;
        for (; j > i; j--)
            if ((id = vocab_find(v, w->p + i, j - i)) != VOCAB_TOKEN_NULL)
                break;
        if (id == VOCAB_TOKEN_NULL) { // the word cannot be cut entirely: all of it is unknown
            out->n = start;
            break;
        }
        if (tok_ids_push(out, id))
            return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        i = j;
    }
    if (out->n == start && tok_ids_push(out, v->unk))
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    return CI_OK;
}

enum ci_status wpm_encode(const struct vocab *v, const char *text, size_t len, struct tok_ids *out,
                          struct ci_err *err) {
    struct word w = {0};
    enum ci_status st = word_put(&w, WORD_PREFIX, WORD_PREFIX_LEN, err);
    const unsigned char *s = (const unsigned char *)text;
    for (size_t off = 0; off < len && st == CI_OK;) {
        uint32_t cp = utf8_decode_lenient(s, len, &off);
        if (v->strip_accents)
            cp = wpm_cpt_nfd_first(cp);
        unsigned f = wpm_cpt_flags(cp);
        if (f & WPM_CAT_SPACE) {
            st = flush_word(v, &w, out, err);
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || (f & WPM_CAT_CONTROL) || (v->strip_accents && (f & WPM_CAT_MARK)))
            continue;
        char u[4];
        int ul = utf8_encode(v->lowercase ? wpm_cpt_lower(cp) : cp, u);
        if ((f & WPM_CAT_PUNCT) || (cp < 0x7F && (f & WPM_CAT_SYMBOL)) || is_cjk(cp)) {
            // A word of its own.
            if ((st = flush_word(v, &w, out, err)) || (st = word_put(&w, u, (size_t)ul, err)))
                break;
            st = flush_word(v, &w, out, err);
        } else {
            st = word_put(&w, u, (size_t)ul, err);
        }
    }
    if (st == CI_OK)
        st = flush_word(v, &w, out, err);
    ci_free(w.p);
    return st;
}
