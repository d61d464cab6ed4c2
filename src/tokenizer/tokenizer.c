/* Tokenizer facade (see tokenizer.h).  Encoding follows llama.cpp's llama_vocab::impl::tokenize: special
 * tokens are split out of the text first (tokenizer_st_partition: for each special token, longest first,
 * every occurrence in the remaining raw fragments), then each raw fragment goes through the SPM or BPE
 * encoder.  SPM prepends "▁" to a fragment at the start of the text or right after a special token. */
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_gguf.h"
#include "tokenizer/vocab_llama2c.h"
#include "tokenizer/wpm.h"

struct tokenizer {
    struct vocab v;
    struct bpe *bpe; // BPE vocabularies only
};

static enum ci_status finish(struct tokenizer *t, struct tokenizer **out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    if (st == CI_OK && t->v.type == VOCAB_TYPE_BPE) {
        const struct bpe_pre *pre = bpe_pre_find(t->v.pre);
        CI_ASSERT(pre); // vocab_load_gguf rejected unknown names
        st = bpe_create(pre, &t->bpe, err);
    }
    if (st) {
        tokenizer_free(t);
        return st;
    }
    *out = t;
    return CI_OK;
}

enum ci_status tokenizer_from_gguf(const struct gguf *g, struct tokenizer **out, struct ci_err *err) {
    *out = NULL;
    struct tokenizer *t = ci_calloc(1, sizeof(*t));
    if (!t)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    enum ci_status st = vocab_load_gguf(&t->v, g, err);
    if (st) {
        ci_free(t);
        return st;
    }
    return finish(t, out, err);
}

enum ci_status tokenizer_from_llama2c_mem(const void *data, size_t size, int n_vocab_expected,
                                          struct tokenizer **out, struct ci_err *err) {
    *out = NULL;
    struct tokenizer *t = ci_calloc(1, sizeof(*t));
    if (!t)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    enum ci_status st = vocab_load_llama2c_mem(&t->v, data, size, n_vocab_expected, err);
    if (st) {
        ci_free(t);
        return st;
    }
    return finish(t, out, err);
}

enum ci_status tokenizer_from_llama2c(const char *path, int n_vocab_expected, struct tokenizer **out,
                                      struct ci_err *err) {
    *out = NULL;
    struct tokenizer *t = ci_calloc(1, sizeof(*t));
    if (!t)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    enum ci_status st = vocab_load_llama2c(&t->v, path, n_vocab_expected, err);
    if (st) {
        ci_free(t);
        return st;
    }
    return finish(t, out, err);
}

void tokenizer_free(struct tokenizer *t) {
    if (!t)
        return;
    bpe_free(t->bpe);
    vocab_deinit(&t->v);
    ci_free(t);
}

/* A piece of the input: raw text [off, off + len) or a special token. */
struct frag {
    int32_t id; // TOKENIZER_TOKEN_NULL for raw text
    size_t off, len;
};

static bool c_isspace(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Splits the raw fragments of in[] around every occurrence of special token id. */
static size_t split_special(const struct vocab *v, int32_t id, const char *text, const struct frag *in,
                            size_t n_in, struct frag *out) {
    uint32_t tl;
    const char *tok = vocab_text(v, id, &tl);
    unsigned attr = v->attr[id];
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++) {
        if (in[i].id != TOKENIZER_TOKEN_NULL) {
            out[n++] = in[i];
            continue;
        }
        size_t off = in[i].off, len = in[i].len;
        for (;;) {
            const char *m = len >= tl ? memmem(text + off, len, tok, tl) : NULL;
            if (!m) {
                if (len > 0)
                    out[n++] = (struct frag){TOKENIZER_TOKEN_NULL, off, len};
                break;
            }
            size_t ms = (size_t)(m - text), left = ms - off;
            if (attr & VOCAB_ATTR_LSTRIP)
                while (left > 0 && c_isspace(text[off + left - 1]))
                    left--;
            if (left > 0)
                out[n++] = (struct frag){TOKENIZER_TOKEN_NULL, off, left};
            out[n++] = (struct frag){id, ms, tl};
            size_t end = off + len;
            off = ms + tl;
            len = end - off;
            if (attr & VOCAB_ATTR_RSTRIP)
                while (len > 0 && c_isspace(text[off])) {
                    off++;
                    len--;
                }
        }
    }
    return n;
}

int32_t tokenizer_single_token(const struct tokenizer *t, const char *text, size_t len) {
    int32_t *ids = NULL, id = -1;
    int n = 0;
    struct ci_err err = {0};
    if (tokenizer_encode(t, text, len, false, true, &ids, &n, &err) == CI_OK && n == 1)
        id = ids[0];
    ci_free(ids);
    return id;
}

enum ci_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                                bool parse_special, int32_t **out_ids, int *n_out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    const struct vocab *v = &t->v;
    struct tok_ids ids = {0};
    struct frag *fa = NULL, *fb = NULL;
    size_t n_frag = 0, bytes;
    *out_ids = NULL;
    *n_out = 0;
    if (len > (size_t)INT_MAX / 4 || !ci_mul_size(2 * len + 2, sizeof(struct frag), &bytes)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text of %zu bytes is too long", len);
        goto fail;
    }
    if (len > 0) {
        // Each special token eats at least one byte, so 2 * len + 1 fragments always suffice.
        fa = ci_malloc(bytes);
        fb = ci_malloc(bytes);
        if (!fa || !fb) {
            st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        fa[0] = (struct frag){TOKENIZER_TOKEN_NULL, 0, len};
        n_frag = 1;
        bool present[256] = {false};
        for (size_t i = 0; i < len; i++)
            present[(unsigned char)text[i]] = true;
        for (int32_t k = 0; k < v->n_special; k++) {
            int32_t id = v->special[k];
            if (!parse_special && (v->attr[id] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_UNKNOWN)))
                continue;
            uint32_t tl;
            const char *tok = vocab_text(v, id, &tl);
            if (tl == 0 || tl > len || !present[(unsigned char)tok[0]]) // an empty one would match forever
                continue;
            n_frag = split_special(v, id, text, fa, n_frag, fb);
            struct frag *tmp = fa;
            fa = fb;
            fb = tmp;
        }
    }

    if (add_special && v->add_bos)
        st = tok_ids_push(&ids, v->bos);
    bool prev_special = true; // SPM: the text start counts as "after a special token"
    for (size_t i = 0; i < n_frag && st == CI_OK; i++) {
        if (fa[i].id != TOKENIZER_TOKEN_NULL) {
            st = tok_ids_push(&ids, fa[i].id);
            prev_special = true;
            continue;
        }
        if (v->type == VOCAB_TYPE_SPM)
            st = spm_encode(v, text + fa[i].off, fa[i].len, v->add_space_prefix && prev_special, &ids, err);
        else if (v->type == VOCAB_TYPE_WPM)
            st = wpm_encode(v, text + fa[i].off, fa[i].len, &ids, err);
        else
            st = bpe_encode(t->bpe, v, text + fa[i].off, fa[i].len, &ids, err);
        if (st)
            goto fail; // err set by the encoder
        prev_special = false;
    }
    if (st == CI_OK && add_special && v->add_sep)
        st = tok_ids_push(&ids, v->sep);
    else if (st == CI_OK && add_special && v->add_eos)
        st = tok_ids_push(&ids, v->eos);
    if (st) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    if (ids.n > (size_t)INT_MAX) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: too many tokens");
        goto fail;
    }
    ci_free(fa);
    ci_free(fb);
    *out_ids = ids.ids;
    *n_out = (int)ids.n;
    return CI_OK;
fail:
    ci_free(fa);
    ci_free(fb);
    ci_free(ids.ids);
    return st;
}

static bool valid_id(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->v.n_tokens;
}

const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, bool special, size_t *len) {
    *len = 0;
    if (!valid_id(t, id))
        return NULL;
    const char *p = t->v.piece_pool + t->v.piece_off[id];
    if (!special && (t->v.attr[id] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_UNKNOWN)))
        return p;
    *len = t->v.piece_len[id];
    return p;
}

int tokenizer_token_to_bytes(const struct tokenizer *t, int32_t id, char *buf, int cap) {
    size_t n;
    const char *p = tokenizer_token_bytes(t, id, false, &n);
    if (n > (size_t)INT_MAX)
        return INT_MIN;
    if (cap < 0 || (size_t)cap < n)
        return -(int)n;
    if (n)
        memcpy(buf, p, n);
    return (int)n;
}

enum ci_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int n, bool render_special,
                                char **out, size_t *n_out, struct ci_err *err) {
    size_t total = 0;
    *out = NULL;
    *n_out = 0;
    for (int i = 0; i < n; i++) {
        if (!valid_id(t, ids[i]))
            return ci_err_set(err, CI_ERR_INVALID, "tokenizer: token id %d out of range (vocabulary %d)",
                              ids[i], t->v.n_tokens);
        total += t->v.piece_len[ids[i]];
    }
    char *s = ci_malloc(total + 1);
    if (!s)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    // SentencePiece drops the space its prefix added; WordPiece drops the "▁" space of the first word and of
    // the first word after a control token such as [CLS] or [SEP].
    bool wpm = t->v.type == VOCAB_TYPE_WPM;
    bool strip = (t->v.type == VOCAB_TYPE_SPM && t->v.add_space_prefix) || wpm;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *p = tokenizer_token_bytes(t, ids[i], render_special, &l);
        if (strip && l > 0) {
            if (p[0] == ' ') {
                p++;
                l--;
            }
            strip = false;
        }
        memcpy(s + o, p, l);
        o += l;
        if (ids[i] == t->v.bos && t->v.type == VOCAB_TYPE_SPM && t->v.add_space_prefix)
            strip = true;
        if (wpm && (t->v.attr[ids[i]] & VOCAB_ATTR_CONTROL))
            strip = true;
    }
    s[o] = 0;
    *out = s;
    *n_out = o;
    return CI_OK;
}

int tokenizer_n_vocab(const struct tokenizer *t) {
    return t->v.n_tokens;
}
int32_t tokenizer_bos(const struct tokenizer *t) {
    return t->v.bos;
}
int32_t tokenizer_eos(const struct tokenizer *t) {
    return t->v.eos;
}
int32_t tokenizer_eot(const struct tokenizer *t) {
    return t->v.eot;
}
int32_t tokenizer_unk(const struct tokenizer *t) {
    return t->v.unk;
}
int32_t tokenizer_pad(const struct tokenizer *t) {
    return t->v.pad;
}
int32_t tokenizer_nl(const struct tokenizer *t) {
    return t->v.nl;
}
bool tokenizer_add_bos(const struct tokenizer *t) {
    return t->v.add_bos;
}
bool tokenizer_add_eos(const struct tokenizer *t) {
    return t->v.add_eos;
}
bool tokenizer_add_space_prefix(const struct tokenizer *t) {
    return t->v.add_space_prefix;
}
const int32_t *tokenizer_eog_ids(const struct tokenizer *t, int *n) {
    *n = t->v.n_eog;
    return t->v.eog;
}

bool tokenizer_is_eog(const struct tokenizer *t, int32_t id) {
    return valid_id(t, id) && vocab_is_eog(&t->v, id);
}
bool tokenizer_is_control(const struct tokenizer *t, int32_t id) {
    return valid_id(t, id) && (t->v.attr[id] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_UNKNOWN));
}
float tokenizer_score(const struct tokenizer *t, int32_t id) {
    return valid_id(t, id) ? t->v.scores[id] : 0.0f;
}

const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (!valid_id(t, id))
        return NULL;
    uint32_t l;
    const char *p = vocab_text(&t->v, id, &l);
    *len = l;
    return p;
}

size_t tokenizer_max_token_bytes(const struct tokenizer *t) {
    return t->v.max_piece_len;
}
enum tokenizer_type tokenizer_type(const struct tokenizer *t) {
    return t->v.type == VOCAB_TYPE_SPM   ? TOKENIZER_TYPE_SPM
           : t->v.type == VOCAB_TYPE_WPM ? TOKENIZER_TYPE_WPM
                                         : TOKENIZER_TYPE_BPE;
}
const char *tokenizer_type_name(const struct tokenizer *t) {
    return t->v.type == VOCAB_TYPE_SPM ? "SPM" : t->v.type == VOCAB_TYPE_WPM ? "WPM" : "BPE";
}
int32_t tokenizer_sep(const struct tokenizer *t) {
    return t->v.sep;
}
bool tokenizer_add_sep(const struct tokenizer *t) {
    return t->v.add_sep;
}
const char *tokenizer_model_name(const struct tokenizer *t) {
    return t->v.model;
}
const char *tokenizer_pre(const struct tokenizer *t) {
    return t->v.pre;
}
int tokenizer_n_merges(const struct tokenizer *t) {
    return t->v.n_merges;
}
const struct vocab *tokenizer_vocab(const struct tokenizer *t) {
    return &t->v;
}
