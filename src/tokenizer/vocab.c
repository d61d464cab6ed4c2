/* Vocabulary loading (see vocab.h).  The defaults and the special-token rules follow llama.cpp's
 * llama_vocab::impl::load so that the same GGUF tokenizes the same way: per-model default ids, add_bos /
 * add_space_prefix defaults, end-of-generation tokens recognised by their text, and the special-token list
 * (control, user-defined, unknown) that encoding splits out before running the tokenizer proper.
 *
 * Everything read from the file is validated here (types, array lengths, ids in range, string sizes); after
 * a successful load the other tokenizer files index these arrays without further checks. */
#include "tokenizer/vocab.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "core/check.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "tokenizer/bpe.h"

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

static void init_empty(struct vocab *v) {
    memset(v, 0, sizeof(*v));
    v->bos = v->eos = v->unk = v->sep = v->pad = v->eot = v->eom = v->nl = VOCAB_TOKEN_NULL;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = VOCAB_TOKEN_NULL;
    for (int i = 0; i < 256; i++)
        v->byte_id[i] = VOCAB_TOKEN_NULL;
}

/* Allocates the per-token arrays and a text pool of pool_bytes (texts are copied in by the caller). */
static enum ci_status alloc_tokens(struct vocab *v, uint64_t n, uint64_t pool_bytes, struct ci_err *err) {
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

static enum ci_status build_token_map(struct vocab *v, struct ci_err *err) {
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

static int32_t find_str(const struct vocab *v, const char *s) {
    return vocab_find(v, s, strlen(s));
}

static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

static int hex_val(char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* The byte of a "<0xHH>" token, or -1. */
static int byte_token_value(const char *s, uint32_t n) {
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
        if (v->type == VOCAB_TYPE_SPM) {
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
        int b = byte_token_value(t, n);
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

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Builds the special-token list, the byte table and the decoded pieces once ids and attributes are final. */
static enum ci_status build_tables(struct vocab *v, struct ci_err *err) {
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
        if (v->type == VOCAB_TYPE_SPM) {
            char hex[7];
            snprintf(hex, sizeof(hex), "<0x%02X>", b);
            id = find_str(v, hex);
            if (id < 0) {
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

/* Marks token id as control when the vocabulary forgot to (llama.cpp does the same for EOG-looking
 * tokens, so they are split out of text and not shown). */
static void force_control(struct vocab *v, int32_t id) {
    if (id >= 0 && !(v->attr[id] & VOCAB_ATTR_CONTROL))
        v->attr[id] |= VOCAB_ATTR_CONTROL;
}

static int32_t find_first(const struct vocab *v, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = find_str(v, names[i]);
        if (id >= 0)
            return id;
    }
    return VOCAB_TOKEN_NULL;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static enum ci_status eog_add(struct vocab *v, int32_t id) {
    if (id < 0 || vocab_is_eog(v, id))
        return CI_OK;
    int32_t *p = ci_realloc(v->eog, ((size_t)v->n_eog + 1) * sizeof(int32_t));
    if (!p)
        return CI_ERR_NOMEM;
    v->eog = p;
    v->eog[v->n_eog++] = id;
    return CI_OK;
}

static void eog_remove(struct vocab *v, int32_t id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            v->eog[i] = v->eog[--v->n_eog];
            return;
        }
}

/* Text-based detection of EOT/EOM/FIM tokens and the end-of-generation set (llama.cpp's workaround for
 * converters that do not write these ids). */
static enum ci_status detect_special(struct vocab *v, struct ci_err *err) {
    static const char *const eot_names[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<|end_of_text|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>"};
    static const char *const eom_names[] = {"<|eom_id|>"};
    static const char *const fim_pre_names[] = {"<|fim_prefix|>",
                                                "<fim-prefix>",
                                                "<fim_prefix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "begin\xef\xbd\x9c>",
                                                "<PRE>",
                                                "\xe2\x96\x81<PRE>",
                                                "<|code_prefix|>",
                                                "<|prefix|>"};
    static const char *const fim_suf_names[] = {"<|fim_suffix|>",
                                                "<fim-suffix>",
                                                "<fim_suffix>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                                "<SUF>",
                                                "\xe2\x96\x81<SUF>",
                                                "<|code_suffix|>",
                                                "<|suffix|>"};
    static const char *const fim_mid_names[] = {"<|fim_middle|>",
                                                "<fim-middle>",
                                                "<fim_middle>",
                                                "<\xef\xbd\x9c"
                                                "fim\xe2\x96\x81"
                                                "end\xef\xbd\x9c>",
                                                "<MID>",
                                                "\xe2\x96\x81<MID>",
                                                "<|code_middle|>",
                                                "<|middle|>"};
    static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
    static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                                "<reponame>"};
    static const char *const fim_sep_names[] = {"<|file_sep|>"};
    static const char *const eog_names[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<|flush|>",
                                            "<|calls|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "</s>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<eos>",
                                            "<turn|>",
                                            "<|tool_response>",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "[e~["};
    struct {
        int32_t *id;
        const char *const *names;
        size_t n;
    } detect[] = {
        {&v->eot, eot_names, N_OF(eot_names)},
        {&v->eom, eom_names, N_OF(eom_names)},
        {&v->fim_pre, fim_pre_names, N_OF(fim_pre_names)},
        {&v->fim_suf, fim_suf_names, N_OF(fim_suf_names)},
        {&v->fim_mid, fim_mid_names, N_OF(fim_mid_names)},
        {&v->fim_pad, fim_pad_names, N_OF(fim_pad_names)},
        {&v->fim_rep, fim_rep_names, N_OF(fim_rep_names)},
        {&v->fim_sep, fim_sep_names, N_OF(fim_sep_names)},
    };
    for (size_t k = 0; k < N_OF(detect); k++) {
        if (*detect[k].id != VOCAB_TOKEN_NULL)
            continue;
        *detect[k].id = find_first(v, detect[k].names, detect[k].n);
        force_control(v, *detect[k].id);
    }

    // Control tokens named "unused" are placeholders.
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint32_t n;
        const char *t = vocab_text(v, i, &n);
        if ((v->attr[i] & VOCAB_ATTR_CONTROL) && strstr(t, "unused"))
            v->attr[i] |= VOCAB_ATTR_UNUSED;
    }

    bool ok =
        eog_add(v, v->fim_pad) == CI_OK && eog_add(v, v->fim_rep) == CI_OK && eog_add(v, v->fim_sep) == CI_OK;
    for (size_t i = 0; i < N_OF(eog_names) && ok; i++) {
        int32_t id = find_str(v, eog_names[i]);
        if (id >= 0) {
            ok = eog_add(v, id) == CI_OK;
            force_control(v, id);
        }
    }
    ok = ok && eog_add(v, v->eos) == CI_OK && eog_add(v, v->eot) == CI_OK && eog_add(v, v->eom) == CI_OK;
    if (!ok)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");

    // gpt-oss style vocabularies: "<|end|>" ends a message, not the generation, when "<|return|>" and
    // "<|call|>" (or "<|calls|>" and "<|flush|>") exist.
    int32_t end = find_str(v, "<|end|>");
    bool has_return = find_str(v, "<|return|>") >= 0, has_flush = find_str(v, "<|flush|>") >= 0;
    bool has_call = find_str(v, "<|call|>") >= 0 || find_str(v, "<|calls|>") >= 0;
    if (end >= 0 && vocab_is_eog(v, end) && ((has_return && has_call) || (has_call && has_flush))) {
        eog_remove(v, end);
        v->attr[end] = VOCAB_ATTR_USER_DEFINED;
    }
    // Gemma 4: "</s>" is an ordinary token there.
    int32_t s_end = find_str(v, "</s>");
    if (s_end >= 0 && find_str(v, "<|tool_response>") >= 0 && vocab_is_eog(v, s_end)) {
        eog_remove(v, s_end);
        v->attr[s_end] = VOCAB_ATTR_NORMAL;
    }
    if (v->n_eog > 1)
        qsort(v->eog, (size_t)v->n_eog, sizeof(int32_t), cmp_i32);
    return CI_OK;
}

/* ---- GGUF ---- */

static void copy_str(char *dst, size_t cap, struct gguf_str s) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n)
        memcpy(dst, s.data, n);
    dst[n] = 0;
}

static enum ci_status get_arr_typed(const struct gguf *g, const char *key, enum gguf_type want, bool alt_ok,
                                    enum gguf_type alt, bool required, struct gguf_arr *out, bool *present,
                                    struct ci_err *err) {
    *present = gguf_find_key(g, key) >= 0;
    if (!*present) {
        if (required)
            return ci_err_set(err, CI_ERR_FORMAT, "tokenizer: GGUF key '%s' is missing", key);
        return CI_OK;
    }
    enum ci_status st = gguf_get_arr(g, key, out, err);
    if (st)
        return st == CI_ERR_INVALID ? CI_ERR_FORMAT : st;
    if (out->elem_type != want && !(alt_ok && out->elem_type == alt))
        return ci_err_set(err, CI_ERR_FORMAT, "tokenizer: GGUF key '%s' is an array of %s, expected %s", key,
                          gguf_type_name(out->elem_type), gguf_type_name(want));
    return CI_OK;
}

/* Reads an optional special-token id key.  -1 / UINT32_MAX (what converters write for "none") leave the
 * default; any other value must be a valid id. */
static enum ci_status read_id(const struct gguf *g, const char *key, int32_t *id, int32_t n_tokens,
                              struct ci_err *err) {
    int64_t val = INT64_MIN;
    enum ci_status st = gguf_get_int_opt(g, key, &val, err);
    if (st)
        return st;
    if (val == INT64_MIN || val == -1 || val == (int64_t)UINT32_MAX)
        return CI_OK;
    if (val < 0 || val >= n_tokens)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "tokenizer: GGUF key '%s' = %lld is not a token id (vocabulary %d)", key,
                          (long long)val, n_tokens);
    *id = (int32_t)val;
    return CI_OK;
}

static enum ci_status load_merges(struct vocab *v, const struct gguf *g, struct ci_err *err) {
    struct gguf_arr arr;
    bool present;
    enum ci_status st = get_arr_typed(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, false, GGUF_TYPE_STRING,
                                      true, &arr, &present, err);
    if (st)
        return st;
    if (arr.n > (uint64_t)INT32_MAX - 1)
        return ci_err_set(err, CI_ERR_FORMAT, "tokenizer: %llu merges is too many",
                          (unsigned long long)arr.n);
    uint64_t total = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        struct gguf_str s = gguf_arr_str(&arr, i);
        if (s.len > 2 * (uint64_t)VOCAB_MAX_TOKEN_BYTES + 1)
            return ci_err_set(err, CI_ERR_FORMAT, "tokenizer: merge %llu is %llu bytes long",
                              (unsigned long long)i, (unsigned long long)s.len);
        total += s.len;
    }
    if (total > SIZE_MAX - 1)
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: merges too large");
    v->merge_pool = ci_malloc((size_t)total + 1);
    if (!v->merge_pool || vocab_map_init(&v->merges, v->merge_pool, arr.n))
        return ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                          (unsigned long long)arr.n);
    uint64_t off = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        struct gguf_str s = gguf_arr_str(&arr, i);
        memcpy(v->merge_pool + off, s.data, (size_t)s.len);
        // llama.cpp splits "left right" at the first space after the first byte; a merge without one can
        // never match a pair of non-empty symbols, so it is left out.
        const char *sp = s.len > 1 ? memchr(s.data + 1, ' ', (size_t)s.len - 1) : NULL;
        if (sp) {
            bool inserted;
            vocab_map_insert(&v->merges, off, (uint32_t)s.len, (int32_t)i, &inserted);
        }
        off += s.len;
    }
    v->n_merges = (int32_t)arr.n;
    return CI_OK;
}

enum ci_status vocab_load_gguf(struct vocab *v, const struct gguf *g, struct ci_err *err) {
    enum ci_status st;
    struct gguf_str model = {0}, pre = {0}, name = {0};
    struct gguf_arr toks, scores, types;
    bool have_scores = false, have_types = false, present;
    const struct bpe_pre *bp = NULL;
    init_empty(v);

    if ((st = gguf_get_str(g, "tokenizer.ggml.model", &model, err))) {
        if (st == CI_ERR_INVALID)
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: GGUF has no tokenizer.ggml.model");
        goto fail;
    }
    copy_str(v->model, sizeof(v->model), model);
    if ((st = gguf_get_str_opt(g, "tokenizer.ggml.pre", &pre, err)))
        goto fail;
    copy_str(v->pre, sizeof(v->pre), pre);
    if (strcmp(v->model, "llama") == 0) {
        v->type = VOCAB_TYPE_SPM;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_space_prefix = true;
        v->clean_spaces = false;
        v->add_bos = true;
        v->add_eos = false;
        if (!v->pre[0])
            strcpy(v->pre, "default");
    } else if (strcmp(v->model, "gpt2") == 0) {
        v->type = VOCAB_TYPE_BPE;
        v->bos = 11; // llama.cpp's defaults (from Falcon), dropped below if out of range
        v->eos = 11;
        if (!v->pre[0]) {
            CI_LOG_WARN("tokenizer: GGUF has no tokenizer.ggml.pre; using 'default' (quality may suffer)");
            strcpy(v->pre, "default");
        }
        bp = bpe_pre_find(v->pre);
        if (!bp) {
            st =
                ci_err_set(err, CI_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%s' is not supported", v->pre);
            goto fail;
        }
        v->clean_spaces = bp->clean_spaces;
        v->ignore_merges = bp->ignore_merges;
        v->add_bos = bp->add_bos;
    } else {
        st = ci_err_set(
            err, CI_ERR_UNSUPPORTED,
            "tokenizer: tokenizer model '%s' is not supported (cinfer handles 'llama' SentencePiece "
            "and 'gpt2' byte-level BPE vocabularies)",
            v->model);
        goto fail;
    }
    if ((st = gguf_get_bool_opt(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)))
        goto fail;

    if ((st = get_arr_typed(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, false, GGUF_TYPE_STRING, true,
                            &toks, &present, err)))
        goto fail;
    if ((st = get_arr_typed(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, true, GGUF_TYPE_INT32, false,
                            &scores, &have_scores, err)))
        goto fail;
    if ((st = get_arr_typed(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, false, GGUF_TYPE_INT32, false,
                            &types, &have_types, err)))
        goto fail;
    uint64_t n = toks.n;
    if (have_scores && scores.n != n) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: %llu scores for %llu tokens",
                        (unsigned long long)scores.n, (unsigned long long)n);
        goto fail;
    }
    if (have_types && types.n != n) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: %llu token types for %llu tokens",
                        (unsigned long long)types.n, (unsigned long long)n);
        goto fail;
    }
    if (v->type == VOCAB_TYPE_SPM && !have_scores)
        CI_LOG_WARN("tokenizer: SentencePiece vocabulary without scores; merges will be arbitrary");

    // Empty texts become "[EMPTY_<id>]" as in llama.cpp (at most 19 bytes).
    uint64_t pool = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(&toks, i);
        if (s.len > VOCAB_MAX_TOKEN_BYTES) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: token %llu is %llu bytes long",
                            (unsigned long long)i, (unsigned long long)s.len);
            goto fail;
        }
        pool += (s.len ? s.len : 20) + 1;
    }
    if ((st = alloc_tokens(v, n, pool, err)))
        goto fail;
    uint64_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(&toks, i);
        char *dst = v->text_pool + off;
        uint32_t len = (uint32_t)s.len;
        if (len == 0) {
            CI_LOG_WARN("tokenizer: empty token at id %llu", (unsigned long long)i);
            len = (uint32_t)snprintf(dst, 21, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            memcpy(dst, s.data, len);
        }
        dst[len] = 0;
        v->text_off[i] = off;
        v->text_len[i] = len;
        off += len + 1;
        if (have_scores) {
            double sc = gguf_arr_f64(&scores, i);
            if (sc != sc) {
                st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: score of token %llu is NaN",
                                (unsigned long long)i);
                goto fail;
            }
            v->scores[i] = (float)sc;
        }
        uint16_t attr = VOCAB_ATTR_NORMAL;
        if (have_types) {
            int64_t t = gguf_arr_i64(&types, i);
            static const uint16_t map[] = {VOCAB_ATTR_UNDEFINED, VOCAB_ATTR_NORMAL,       VOCAB_ATTR_UNKNOWN,
                                           VOCAB_ATTR_CONTROL,   VOCAB_ATTR_USER_DEFINED, VOCAB_ATTR_UNUSED,
                                           VOCAB_ATTR_BYTE};
            if (t < 0 || t > VOCAB_TOKEN_TYPE_BYTE) {
                st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: token %llu has unknown type %lld",
                                (unsigned long long)i, (long long)t);
                goto fail;
            }
            attr = map[t];
        }
        v->attr[i] = attr;
    }
    if ((st = build_token_map(v, err)))
        goto fail;
    if (v->type == VOCAB_TYPE_BPE && (st = load_merges(v, g, err)))
        goto fail;

    // Default ids outside the vocabulary are dropped (llama.cpp does the same).
    int32_t *ids[] = {&v->bos, &v->eos, &v->unk};
    for (size_t i = 0; i < N_OF(ids); i++)
        if (*ids[i] >= v->n_tokens)
            *ids[i] = VOCAB_TOKEN_NULL;
    struct {
        const char *key;
        int32_t *id;
    } id_keys[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},         {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.eot_token_id", &v->eot},         {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.unknown_token_id", &v->unk},     {"tokenizer.ggml.seperator_token_id", &v->sep},
        {"tokenizer.ggml.padding_token_id", &v->pad},     {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre},
        {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf}, {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid},
        {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad}, {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep}, {"tokenizer.ggml.prefix_token_id", &v->fim_pre},
        {"tokenizer.ggml.suffix_token_id", &v->fim_suf},  {"tokenizer.ggml.middle_token_id", &v->fim_mid},
    };
    for (size_t i = 0; i < N_OF(id_keys); i++)
        if ((st = read_id(g, id_keys[i].key, id_keys[i].id, v->n_tokens, err)))
            goto fail;
    if ((st = gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) ||
        (st = gguf_get_bool_opt(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)))
        goto fail;
    if (v->add_bos && v->bos == VOCAB_TOKEN_NULL) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: add_bos_token is true but there is no BOS token");
        goto fail;
    }
    if (v->add_eos && v->eos == VOCAB_TOKEN_NULL) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: add_eos_token is true but there is no EOS token");
        goto fail;
    }
    if ((st = detect_special(v, err)))
        goto fail;

    // Phi-3's special tokens swallow the whitespace after them when split out of text (llama.cpp keys this
    // on the model name).
    if ((st = gguf_get_str_opt(g, "general.name", &name, err)))
        goto fail;
    char lname[128];
    copy_str(lname, sizeof(lname), name);
    for (char *p = lname; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int32_t i = 0; i < v->n_tokens; i++)
            if (v->attr[i] & (VOCAB_ATTR_CONTROL | VOCAB_ATTR_USER_DEFINED | VOCAB_ATTR_UNKNOWN))
                v->attr[i] |= VOCAB_ATTR_RSTRIP;
        int32_t id = find_str(v, "</s>");
        if (id >= 0)
            v->attr[id] |= VOCAB_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < N_OF(keep); i++)
            if ((id = find_str(v, keep[i])) >= 0)
                v->attr[id] &= (uint16_t)~VOCAB_ATTR_RSTRIP;
    }
    if ((st = build_tables(v, err)))
        goto fail;
    for (int b = 0; b < 256 && v->type == VOCAB_TYPE_SPM; b++)
        if (v->byte_id[b] < 0 && v->unk < 0) {
            CI_LOG_WARN("tokenizer: SentencePiece vocabulary lacks byte token <0x%02X> and <unk>", b);
            break;
        }
    return CI_OK;
fail:
    vocab_deinit(v);
    return st;
}

/* ---- llama2.c tokenizer.bin ---- */

enum ci_status vocab_load_llama2c_mem(struct vocab *v, const void *data, size_t size, int n_vocab_expected,
                                      struct ci_err *err) {
    enum ci_status st;
    struct ci_reader r;
    int32_t max_len = 0;
    uint64_t n = 0, pool = 0;
    init_empty(v);
    ci_reader_init(&r, data, size);
    if (n_vocab_expected < 0) {
        st = ci_err_set(err, CI_ERR_INVALID, "tokenizer.bin: expected vocabulary size %d", n_vocab_expected);
        goto fail;
    }
    if (ci_rd_i32(&r, &max_len) || max_len <= 0 || (uint32_t)max_len > VOCAB_MAX_TOKEN_BYTES) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: bad max_token_length %d (file of %zu bytes)",
                        max_len, size);
        goto fail;
    }
    // Pass 1: validate every record and count.
    for (;;) {
        if (n_vocab_expected > 0 ? n == (uint64_t)n_vocab_expected : ci_reader_left(&r) == 0)
            break;
        float score;
        int32_t len;
        const uint8_t *bytes;
        uint64_t at = r.pos;
        if (ci_rd_f32(&r, &score) || ci_rd_i32(&r, &len)) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: token %llu truncated at byte %llu",
                            (unsigned long long)n, (unsigned long long)at);
            goto fail;
        }
        if (len < 0 || len > max_len) {
            st = ci_err_set(err, CI_ERR_FORMAT,
                            "tokenizer.bin: token %llu has length %d (max_token_length %d)",
                            (unsigned long long)n, len, max_len);
            goto fail;
        }
        if (ci_rd_view(&r, (uint64_t)len, &bytes)) {
            st = ci_err_set(err, CI_ERR_FORMAT,
                            "tokenizer.bin: token %llu (%d bytes) runs past the end of the file",
                            (unsigned long long)n, len);
            goto fail;
        }
        if (score != score) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: score of token %llu is NaN",
                            (unsigned long long)n);
            goto fail;
        }
        if (n == (uint64_t)INT32_MAX - 1) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: too many tokens");
            goto fail;
        }
        uint64_t spaces = 0;
        for (int32_t k = 0; k < len; k++)
            spaces += bytes[k] == ' ';
        pool += (uint64_t)(len ? len : 20) + 2 * spaces + 1;
        n++;
    }
    if (ci_reader_left(&r) != 0) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: %llu bytes left after %llu tokens",
                        (unsigned long long)ci_reader_left(&r), (unsigned long long)n);
        goto fail;
    }
    if (n < 3) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer.bin: %llu tokens; <unk>, <s>, </s> need ids 0-2",
                        (unsigned long long)n);
        goto fail;
    }
    if ((st = alloc_tokens(v, n, pool, err)))
        goto fail;
    // Pass 2: copy (the records were validated above).
    ci_reader_init(&r, data, size);
    enum ci_status rs = ci_rd_i32(&r, &max_len);
    CI_ASSERT(rs == CI_OK);
    uint64_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        float score = 0;
        int32_t len = 0;
        const uint8_t *bytes = NULL;
        rs = ci_rd_f32(&r, &score);
        rs = rs ? rs : ci_rd_i32(&r, &len);
        rs = rs ? rs : ci_rd_view(&r, (uint64_t)len, &bytes);
        CI_ASSERT(rs == CI_OK);
        char *dst = v->text_pool + off;
        uint32_t l = (uint32_t)len;
        uint16_t attr = VOCAB_ATTR_NORMAL;
        if (i == 0) {
            attr = VOCAB_ATTR_UNKNOWN;
        } else if (i == 1 || i == 2) {
            // llama2.c stores BOS/EOS as "\n<s>\n" / "\n</s>\n"; the GGUF form of the same vocabulary has
            // "<s>" / "</s>".
            attr = VOCAB_ATTR_CONTROL;
            const char *want = i == 1 ? "\n<s>\n" : "\n</s>\n";
            if (l == strlen(want) && memcmp(bytes, want, l) == 0) {
                bytes++;
                l -= 2;
            }
        } else if (byte_token_value((const char *)bytes, l) >= 0) {
            attr = VOCAB_ATTR_BYTE;
        }
        if (l == 0) {
            l = (uint32_t)snprintf(dst, 21, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            // llama2.c's export turned SentencePiece's "▁" into ' '; restore it so the vocabulary is the
            // same as the GGUF form of the model (the encoder escapes spaces the SentencePiece way).
            uint32_t o = 0;
            for (uint32_t k = 0; k < l; k++) {
                if (bytes[k] == ' ') {
                    memcpy(dst + o, "\xe2\x96\x81", 3);
                    o += 3;
                } else {
                    dst[o++] = (char)bytes[k];
                }
            }
            l = o;
        }
        dst[l] = 0;
        v->text_off[i] = off;
        v->text_len[i] = l;
        v->scores[i] = score;
        v->attr[i] = attr;
        off += l + 1;
    }
    v->type = VOCAB_TYPE_SPM;
    strcpy(v->model, "llama");
    strcpy(v->pre, "default");
    v->unk = 0;
    v->bos = 1;
    v->eos = 2;
    v->add_bos = true;
    v->add_eos = false;
    v->add_space_prefix = true;
    if ((st = build_token_map(v, err)) || (st = detect_special(v, err)) || (st = build_tables(v, err)))
        goto fail;
    return CI_OK;
fail:
    vocab_deinit(v);
    return st;
}

enum ci_status vocab_load_llama2c(struct vocab *v, const char *path, int n_vocab_expected,
                                  struct ci_err *err) {
    struct ci_mapfile m;
    init_empty(v);
    enum ci_status st = ci_mapfile_open(&m, path, err);
    if (st)
        return st;
    st = vocab_load_llama2c_mem(v, m.data ? (const void *)m.data : "", (size_t)m.size, n_vocab_expected, err);
    ci_mapfile_close(&m);
    if (st)
        ci_err_prefix(err, "%s", path);
    return st;
}
