/* The vocabulary (see vocab.h): its arrays, lookups and the tables every loader builds the same way once ids
 * and attributes are final (the special-token list, the byte table, the decoded pieces).  The loaders are
 * vocab_gguf.c and vocab_llama2c.c; the special tokens recognised by their text are special.c. */
#include "tokenizer/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/utf8.h"

#define HASH_SEED 0x9b6c3f1a2d4e5870ULL

/* ---- the GPT-2 byte table ---- */

/* GPT-2 keeps the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' as their own code point and maps the other
 * 68 bytes, in byte order, to U+0100..U+0143: 0x00-0x20 → U+0100-U+0120, 0x7F-0xA0 → U+0121-U+0142,
 * 0xAD → U+0143. */
uint32_t vocab_gpt2_byte_to_cpt(uint8_t byte) {
    if (byte <= 0x20)
        return 0x100u + byte;
    if (byte >= 0x7f && byte <= 0xa0)
        return 0x121u + (byte - 0x7fu);
    if (byte == 0xad)
        return 0x143;
    return byte;
}

int vocab_gpt2_cpt_to_byte(uint32_t cpt) {
    if (cpt < 0x100)
        return vocab_gpt2_byte_to_cpt((uint8_t)cpt) == cpt ? (int)cpt : -1;
    if (cpt <= 0x120)
        return (int)(cpt - 0x100);
    if (cpt <= 0x142)
        return (int)(cpt - 0x121 + 0x7f);
    if (cpt == 0x143)
        return 0xad;
    return -1;
}

enum ci_status tok_ids_push(struct tok_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64, bytes;
        if (!ci_mul_size(cap, sizeof(int32_t), &bytes))
            return CI_ERR_NOMEM;
        int32_t *p = ci_realloc(o->ids, bytes);
        if (!p)
            return CI_ERR_NOMEM;
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
    return CI_OK;
}

/* ---- string → int32 map ---- */

enum ci_status vocab_map_init(struct vocab_map *m, const char *pool, uint64_t n_expected) {
    uint64_t cap = 16;
    while (cap < 2 * n_expected + 1) // load factor <= 1/2
        cap *= 2;
    size_t bytes;
    memset(m, 0, sizeof(*m));
    if (!ci_mul_size((size_t)cap, sizeof(struct vocab_map_slot), &bytes))
        return CI_ERR_NOMEM;
    m->slots = ci_malloc(bytes);
    if (!m->slots)
        return CI_ERR_NOMEM;
    for (uint64_t i = 0; i < cap; i++)
        m->slots[i].value = VOCAB_TOKEN_NULL;
    m->pool = pool;
    m->mask = cap - 1;
    return CI_OK;
}

void vocab_map_deinit(struct vocab_map *m) {
    ci_free(m->slots);
    memset(m, 0, sizeof(*m));
}

void vocab_map_insert(struct vocab_map *m, uint64_t off, uint32_t len, int32_t value, bool *inserted) {
    CI_ASSERT(2 * (m->n + 1) <= m->mask + 1);
    uint64_t h = ci_hash_bytes(HASH_SEED, m->pool + off, len);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        struct vocab_map_slot *s = &m->slots[i];
        if (s->value == VOCAB_TOKEN_NULL) {
            *s = (struct vocab_map_slot){off, len, (uint32_t)h, value};
            m->n++;
            *inserted = true;
            return;
        }
        if (s->hash == (uint32_t)h && s->len == len && memcmp(m->pool + s->off, m->pool + off, len) == 0) {
            *inserted = false;
            return;
        }
    }
}

int32_t vocab_map_find(const struct vocab_map *m, const char *s, size_t n) {
    if (!m->slots || n > UINT32_MAX)
        return VOCAB_TOKEN_NULL;
    uint64_t h = ci_hash_bytes(HASH_SEED, s, n);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const struct vocab_map_slot *sl = &m->slots[i];
        if (sl->value == VOCAB_TOKEN_NULL)
            return VOCAB_TOKEN_NULL;
        if (sl->hash == (uint32_t)h && sl->len == n && memcmp(m->pool + sl->off, s, n) == 0)
            return sl->value;
    }
}

int32_t vocab_find(const struct vocab *v, const char *s, size_t n) {
    return vocab_map_find(&v->tokens, s, n);
}

bool vocab_is_eog(const struct vocab *v, int32_t id) {
    // n_eog is a handful; a linear scan beats anything fancier.
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return true;
    return false;
}

void vocab_deinit(struct vocab *v) {
    if (!v)
        return;
    ci_free(v->text_pool);
    ci_free(v->text_off);
    ci_free(v->text_len);
    ci_free(v->scores);
    ci_free(v->attr);
    vocab_map_deinit(&v->tokens);
    ci_free(v->merge_pool);
    vocab_map_deinit(&v->merges);
    ci_free(v->special);
    ci_free(v->eog);
    ci_free(v->piece_pool);
    ci_free(v->piece_off);
    ci_free(v->piece_len);
    memset(v, 0, sizeof(*v));
}

/* ---- shared construction ---- */

void vocab_init_empty(struct vocab *v) {
    memset(v, 0, sizeof(*v));
    v->bos = v->eos = v->unk = v->sep = v->pad = v->eot = v->eom = v->nl = VOCAB_TOKEN_NULL;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = VOCAB_TOKEN_NULL;
    for (int i = 0; i < 256; i++)
        v->byte_id[i] = VOCAB_TOKEN_NULL;
}

enum ci_status vocab_alloc_tokens(struct vocab *v, uint64_t n, uint64_t pool_bytes, struct ci_err *err) {
    size_t b_off, b_len, b_sc, b_at;
    if (n == 0 || n > (uint64_t)INT32_MAX - 1)
        return ci_err_set(err, CI_ERR_FORMAT, "tokenizer: vocabulary size %llu out of range",
                          (unsigned long long)n);
    if (pool_bytes > SIZE_MAX - 1 || !ci_mul_size(n, sizeof(uint64_t), &b_off) ||
        !ci_mul_size(n, sizeof(uint32_t), &b_len) || !ci_mul_size(n, sizeof(float), &b_sc) ||
        !ci_mul_size(n, sizeof(uint16_t), &b_at))
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: vocabulary too large");
    v->n_tokens = (int32_t)n;
    v->text_pool = ci_malloc((size_t)pool_bytes + 1);
    v->text_off = ci_malloc(b_off);
    v->text_len = ci_malloc(b_len);
    v->scores = ci_calloc(n, sizeof(float));
    v->attr = ci_calloc(n, sizeof(uint16_t));
    if (!v->text_pool || !v->text_off || !v->text_len || !v->scores || !v->attr)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory for %llu tokens",
                          (unsigned long long)n);
    return CI_OK;
}

enum ci_status vocab_build_token_map(struct vocab *v, struct ci_err *err) {
    if (vocab_map_init(&v->tokens, v->text_pool, (uint64_t)v->n_tokens))
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
    int32_t n_dup = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        bool inserted;
        vocab_map_insert(&v->tokens, v->text_off[i], v->text_len[i], i, &inserted);
        if (!inserted && n_dup++ == 0)
            CI_LOG_WARN("tokenizer: duplicate token text at id %d (the first id keeps the text)", i);
        if (v->text_len[i] > v->max_token_len)
            v->max_token_len = v->text_len[i];
    }
    return CI_OK;
}

int32_t vocab_find_str(const struct vocab *v, const char *s) {
    return vocab_find(v, s, strlen(s));
}

static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

static int hex_val(char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

size_t vocab_escape_spaces(const char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == ' ') {
            memcpy(out + o, "\xe2\x96\x81", 3);
            o += 3;
        } else {
            out[o++] = in[i];
        }
    }
    return o;
}

int vocab_byte_token_value(const char *s, uint32_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !is_hex(s[3]) || !is_hex(s[4]))
        return -1;
    return hex_val(s[3]) * 16 + hex_val(s[4]);
}

/* Decoded bytes of token id written to out (capacity >= 2 * text length + 4); returns the length. */
static uint32_t decode_piece(const struct vocab *v, int32_t id, char *out) {
    uint32_t n;
    const char *t = vocab_text(v, id, &n);
    unsigned a = v->attr[id];
    if (a & (VOCAB_ATTR_UNKNOWN | VOCAB_ATTR_CONTROL | VOCAB_ATTR_USER_DEFINED)) {
        memcpy(out, t, n);
        return n;
    }
    if (a & VOCAB_ATTR_NORMAL) {
        uint32_t o = 0;
        if (v->type != VOCAB_TYPE_BPE || v->bpe_raw) { // SPM, WPM and raw BPE: "▁" stands for a space
            for (uint32_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                    out[o++] = ' ';
                    i += 3;
                } else {
                    out[o++] = t[i++];
                }
            }
            return o;
        }
        for (size_t off = 0; off < n;) {
            size_t start = off;
            uint32_t cp = utf8_decode_lenient((const unsigned char *)t, n, &off);
            int b = vocab_gpt2_cpt_to_byte(cp);
            if (b >= 0) {
                out[o++] = (char)b;
            } else { // not a GPT-2 byte character: keep its UTF-8 as is
                memcpy(out + o, t + start, off - start);
                o += (uint32_t)(off - start);
            }
        }
        return o;
    }
    if (a & VOCAB_ATTR_BYTE) {
        int b = vocab_byte_token_value(t, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
    }
    return 0; // undefined / unused types render as nothing, as in llama.cpp
}

struct len_id {
    uint32_t len;
    int32_t id;
};

static int cmp_len_desc(const void *a, const void *b) {
    const struct len_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

enum ci_status vocab_build_tables(struct vocab *v, struct ci_err *err) {
    struct len_id *tmp = NULL;
    char *buf = NULL;
    int32_t n = v->n_tokens, n_special = 0;
    for (int32_t i = 0; i < n; i++)
        if (v->attr[i] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_USER_DEFINED | VOCAB_ATTR_UNKNOWN))
            n_special++;
    tmp = ci_malloc(((size_t)n_special + 1) * sizeof(*tmp));
    v->special = ci_malloc(((size_t)n_special + 1) * sizeof(int32_t));
    if (!tmp || !v->special)
        goto fail;
    n_special = 0;
    for (int32_t i = 0; i < n; i++)
        if (v->attr[i] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_USER_DEFINED | VOCAB_ATTR_UNKNOWN))
            tmp[n_special++] = (struct len_id){v->text_len[i], i};
    // Longest first (llama.cpp sorts by length; ids break ties so the order is deterministic).
    qsort(tmp, (size_t)n_special, sizeof(*tmp), cmp_len_desc);
    for (int32_t i = 0; i < n_special; i++)
        v->special[i] = tmp[i].id;
    v->n_special = n_special;

    for (int b = 0; b < 256; b++) {
        int32_t id = VOCAB_TOKEN_NULL;
        if (v->type != VOCAB_TYPE_BPE || v->bpe_raw) {
            char hex[7];
            snprintf(hex, sizeof(hex), "<0x%02X>", b);
            id = vocab_find_str(v, hex);
            if (id < 0 && !v->bpe_raw) {
                char c = (char)b;
                id = vocab_find(v, &c, 1);
            }
        } else {
            char u[4];
            int l = utf8_encode(vocab_gpt2_byte_to_cpt((uint8_t)b), u);
            id = vocab_find(v, u, (size_t)l);
        }
        v->byte_id[b] = id;
    }
    if (v->nl == VOCAB_TOKEN_NULL)
        v->nl = v->byte_id['\n'];

    // Decoded pieces: never longer than the text (SPM "▁" → 1 byte; GPT-2 chars → 1 byte or kept).
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += v->text_len[i];
    if (total > SIZE_MAX - 8)
        goto fail;
    v->piece_pool = ci_malloc((size_t)total + 1);
    v->piece_off = ci_malloc((size_t)n * sizeof(uint64_t));
    v->piece_len = ci_malloc((size_t)n * sizeof(uint32_t));
    buf = ci_malloc((size_t)v->max_token_len + 8);
    if (!v->piece_pool || !v->piece_off || !v->piece_len || !buf)
        goto fail;
    uint64_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t l = decode_piece(v, i, buf);
        CI_ASSERT(l <= v->text_len[i] && off + l <= total);
        memcpy(v->piece_pool + off, buf, l);
        v->piece_off[i] = off;
        v->piece_len[i] = l;
        off += l;
        if (l > v->max_piece_len)
            v->max_piece_len = l;
    }
    ci_free(tmp);
    ci_free(buf);
    return CI_OK;
fail: // every failure above is an allocation
    ci_free(tmp);
    ci_free(buf);
    return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
}
