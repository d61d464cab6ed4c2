/* Special tokens recognised by their text (see special.h): llama.cpp's workaround for converters that do not
 * write the EOT, EOM and fill-in-the-middle ids, and its end-of-generation set.  The name lists are data,
 * kept in the order llama.cpp tries them (the first present wins). */
#include "tokenizer/special.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mem.h"
#include "tokenizer/vocab.h"

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Marks token id as control when the vocabulary forgot to (llama.cpp does the same for EOG-looking
 * tokens, so they are split out of text and not shown). */
static void force_control(struct vocab *v, int32_t id) {
    if (id >= 0 && !(v->attr[id] & VOCAB_ATTR_CONTROL))
        v->attr[id] |= VOCAB_ATTR_CONTROL;
}

static int32_t find_first(const struct vocab *v, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = vocab_find_str(v, names[i]);
        if (id >= 0)
            return id;
    }
    return VOCAB_TOKEN_NULL;
}

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

enum ci_status vocab_detect_special(struct vocab *v, struct ci_err *err) {
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
        {&v->eot, eot_names, CI_ARRAY_LEN(eot_names)},
        {&v->eom, eom_names, CI_ARRAY_LEN(eom_names)},
        {&v->fim_pre, fim_pre_names, CI_ARRAY_LEN(fim_pre_names)},
        {&v->fim_suf, fim_suf_names, CI_ARRAY_LEN(fim_suf_names)},
        {&v->fim_mid, fim_mid_names, CI_ARRAY_LEN(fim_mid_names)},
        {&v->fim_pad, fim_pad_names, CI_ARRAY_LEN(fim_pad_names)},
        {&v->fim_rep, fim_rep_names, CI_ARRAY_LEN(fim_rep_names)},
        {&v->fim_sep, fim_sep_names, CI_ARRAY_LEN(fim_sep_names)},
    };
    for (size_t k = 0; k < CI_ARRAY_LEN(detect); k++) {
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
    for (size_t i = 0; i < CI_ARRAY_LEN(eog_names) && ok; i++) {
        int32_t id = vocab_find_str(v, eog_names[i]);
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
    int32_t end = vocab_find_str(v, "<|end|>");
    bool has_return = vocab_find_str(v, "<|return|>") >= 0, has_flush = vocab_find_str(v, "<|flush|>") >= 0;
    bool has_call = vocab_find_str(v, "<|call|>") >= 0 || vocab_find_str(v, "<|calls|>") >= 0;
    if (end >= 0 && vocab_is_eog(v, end) && ((has_return && has_call) || (has_call && has_flush))) {
        eog_remove(v, end);
        v->attr[end] = VOCAB_ATTR_USER_DEFINED;
    }
    // Gemma 4: "</s>" is an ordinary token there.
    int32_t s_end = vocab_find_str(v, "</s>");
    if (s_end >= 0 && vocab_find_str(v, "<|tool_response>") >= 0 && vocab_is_eog(v, s_end)) {
        eog_remove(v, s_end);
        v->attr[s_end] = VOCAB_ATTR_NORMAL;
    }
    if (v->n_eog > 1)
        qsort(v->eog, (size_t)v->n_eog, sizeof(int32_t), cmp_i32);
    return CI_OK;
}
