/* The vocabulary of a llama2.c tokenizer.bin (see vocab_llama2c.h). */
#include "tokenizer/vocab_llama2c.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/mem.h"
#include "tokenizer/special.h"
#include "tokenizer/vocab.h"

/* ---- llama2.c tokenizer.bin ---- */

enum ci_status vocab_load_llama2c_mem(struct vocab *v, const void *data, size_t size, int n_vocab_expected,
                                      struct ci_err *err) {
    enum ci_status st;
    struct ci_reader r;
    int32_t max_len = 0;
    uint64_t n = 0, pool = 0;
    vocab_init_empty(v);
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
    if ((st = vocab_alloc_tokens(v, n, pool, err)))
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
        } else if (vocab_byte_token_value((const char *)bytes, l) >= 0) {
            attr = VOCAB_ATTR_BYTE;
        }
        if (l == 0) {
            l = (uint32_t)snprintf(dst, 21, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            // llama2.c's export turned SentencePiece's "▁" into ' '; restore it so the vocabulary is the
            // same as the GGUF form of the model (the encoder escapes spaces the SentencePiece way).
            l = (uint32_t)vocab_escape_spaces((const char *)bytes, l, dst);
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
    if ((st = vocab_build_token_map(v, err)) || (st = vocab_detect_special(v, err)) ||
        (st = vocab_build_tables(v, err)))
        goto fail;
    return CI_OK;
fail:
    vocab_deinit(v);
    return st;
}

enum ci_status vocab_load_llama2c(struct vocab *v, const char *path, int n_vocab_expected,
                                  struct ci_err *err) {
    struct ci_mapfile m;
    vocab_init_empty(v);
    enum ci_status st = ci_mapfile_open(&m, path, err);
    if (st)
        return st;
    st = vocab_load_llama2c_mem(v, m.data ? (const void *)m.data : "", (size_t)m.size, n_vocab_expected, err);
    ci_mapfile_close(&m);
    if (st)
        ci_err_prefix(err, "%s", path);
    return st;
}
