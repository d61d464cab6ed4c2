/* The vocabulary of a GGUF file (see vocab_gguf.h).  The defaults and the special-token rules follow
 * llama.cpp's llama_vocab::impl::load so that the same GGUF tokenizes the same way: per-model default ids,
 * add_bos / add_space_prefix defaults, end-of-generation tokens recognised by their text, and the
 * special-token list (control, user-defined, unknown) that encoding splits out before running the tokenizer
 * proper.  Everything read from the file is validated here (types, array lengths, ids in range, string
 * sizes); after a successful load the other tokenizer files index these arrays without further checks. */
#include "tokenizer/vocab_gguf.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "core/mem.h"
#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/special.h"
#include "tokenizer/vocab.h"

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
    vocab_init_empty(v);

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
    } else if (strcmp(v->model, "gpt2") == 0 || strcmp(v->model, "gemma4") == 0) {
        v->type = VOCAB_TYPE_BPE;
        v->bos = 11; // llama.cpp's defaults (from Falcon), dropped below if out of range
        v->eos = 11;
        if (strcmp(v->model, "gemma4") == 0) { // Gemma 4's SentencePiece-style BPE: its own pre-tokenizer
            v->bos = v->eos = VOCAB_TOKEN_NULL;
            strcpy(v->pre, "gemma4");
        }
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
        v->bpe_raw = bp->raw;
    } else if (strcmp(v->model, "bert") == 0) {
        // llama.cpp's WordPiece defaults: BERT's usual ids ([CLS] as BOS, [SEP], [UNK], [PAD]), [CLS] ...
        // [SEP] around the text, and the BertNormalizer's lowercasing and accent stripping.
        v->type = VOCAB_TYPE_WPM;
        v->bos = 101;
        v->unk = 100;
        v->sep = 102;
        v->pad = 0;
        v->add_bos = true;
        v->add_eos = false;
        v->add_sep = true;
        v->clean_spaces = true;
        v->lowercase = true;
        if (!v->pre[0])
            strcpy(v->pre, "default");
    } else {
        st = ci_err_set(
            err, CI_ERR_UNSUPPORTED,
            "tokenizer: tokenizer model '%s' is not supported (cinfer handles 'llama' SentencePiece, "
            "'gpt2' byte-level BPE, 'gemma4' SentencePiece-style BPE and 'bert' WordPiece vocabularies)",
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
    if ((st = vocab_alloc_tokens(v, n, pool, err)))
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
    if ((st = vocab_build_token_map(v, err)))
        goto fail;
    if (v->type == VOCAB_TYPE_BPE && (st = load_merges(v, g, err)))
        goto fail;

    // Default ids outside the vocabulary are dropped (llama.cpp does the same).
    int32_t *ids[] = {&v->bos, &v->eos, &v->unk, &v->sep, &v->pad};
    for (size_t i = 0; i < CI_ARRAY_LEN(ids); i++)
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
    // The older cls_token_id key names BERT's [CLS], which is the BOS; bos_token_id wins when both exist.
    if (v->type == VOCAB_TYPE_WPM && gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0 &&
        (st = read_id(g, "tokenizer.ggml.cls_token_id", &v->bos, v->n_tokens, err)))
        goto fail;
    for (size_t i = 0; i < CI_ARRAY_LEN(id_keys); i++)
        if ((st = read_id(g, id_keys[i].key, id_keys[i].id, v->n_tokens, err)))
            goto fail;
    if ((st = gguf_get_bool_opt(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) ||
        (st = gguf_get_bool_opt(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) ||
        (st = gguf_get_bool_opt(g, "tokenizer.ggml.add_sep_token", &v->add_sep, err)))
        goto fail;
    if (strcmp(v->pre, "gemma4") == 0) // as llama.cpp: Gemma 4 always starts with BOS, whatever the file says
        v->add_bos = true;
    if (v->type == VOCAB_TYPE_WPM) {
        // As llama.cpp: strip_accents defaults to the lowercase setting.
        if ((st = gguf_get_bool_opt(g, "tokenizer.ggml.normalizer.lowercase", &v->lowercase, err)))
            goto fail;
        v->strip_accents = v->lowercase;
        if ((st = gguf_get_bool_opt(g, "tokenizer.ggml.normalizer.strip_accents", &v->strip_accents, err)))
            goto fail;
        if (v->unk == VOCAB_TOKEN_NULL) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: WordPiece vocabulary without an unknown token");
            goto fail;
        }
        if (v->add_sep && v->sep == VOCAB_TOKEN_NULL) {
            st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: add_sep_token is true but there is no separator");
            goto fail;
        }
    } else {
        v->add_sep = false;
    }
    if (v->add_bos && v->bos == VOCAB_TOKEN_NULL) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: add_bos_token is true but there is no BOS token");
        goto fail;
    }
    if (v->add_eos && v->eos == VOCAB_TOKEN_NULL) {
        st = ci_err_set(err, CI_ERR_FORMAT, "tokenizer: add_eos_token is true but there is no EOS token");
        goto fail;
    }
    if ((st = vocab_detect_special(v, err)))
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
        int32_t id = vocab_find_str(v, "</s>");
        if (id >= 0)
            v->attr[id] |= VOCAB_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < CI_ARRAY_LEN(keep); i++)
            if ((id = vocab_find_str(v, keep[i])) >= 0)
                v->attr[id] &= (uint16_t)~VOCAB_ATTR_RSTRIP;
    }
    if ((st = vocab_build_tables(v, err)))
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
