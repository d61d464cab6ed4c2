/* Helpers shared by the unit tests that reach cinfer's internals (tests/test.h holds the harness and the
 * helpers that need only libc): the shared models opened, loaded or searched.  Each reports a failure as a
 * FAIL line of the running test ("setup" in main) and returns NULL or a sentinel. */
#ifndef CINFER_TESTS_TEST_UTIL_H
#define CINFER_TESTS_TEST_UTIL_H

#include <stdint.h>

#include "format/gguf.h"
#include "grammar/matcher.h"
#include "model/model.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

/* <models dir>/name opened as GGUF; NULL after a FAIL line. */
static inline struct gguf *test_open_gguf(const char *name) {
    char p[1024];
    struct ci_err err = {0};
    struct gguf *g = NULL;
    if (gguf_open(test_model_path(p, sizeof p, name), &g, &err) != CI_OK) {
        TEST_FAILF("gguf_open %s: %s", p, err.msg);
        return NULL;
    }
    return g;
}

/* The tokenizer of the GGUF file <models dir>/name (the file is closed again: a tokenizer must not depend on
 * its mapping); NULL after a FAIL line. */
static inline struct tokenizer *test_load_tokenizer(const char *name) {
    struct gguf *g = test_open_gguf(name);
    if (!g)
        return NULL;
    struct ci_err err = {0};
    struct tokenizer *t = NULL;
    if (tokenizer_from_gguf(g, &t, &err) != CI_OK)
        TEST_FAILF("tokenizer_from_gguf %s: %s", name, err.msg);
    gguf_free(g);
    return t;
}

/* The model file <models dir>/name (GGUF or llama2.c) loaded; NULL after a FAIL line. */
static inline struct model *test_load_model(const char *name) {
    char p[1024];
    struct ci_err err = {0};
    struct model *m = NULL;
    if (model_load(test_model_path(p, sizeof p, name), &m, &err) != CI_OK) {
        TEST_FAILF("model_load %s: %s", p, err.msg);
        return NULL;
    }
    return m;
}

/* The id of the token whose piece is exactly s; -1 when there is none. */
static inline int32_t test_find_piece(const struct tokenizer *t, const char *s) {
    for (int32_t i = 0; i < tokenizer_n_vocab(t); i++) {
        size_t l;
        const char *p = tokenizer_piece(t, i, &l);
        if (l == strlen(s) && memcmp(p, s, l) == 0)
            return i;
    }
    return -1;
}

/* The integer value of key; -12345 (a value no test expects) when it is missing or not an integer. */
static inline int64_t test_gguf_int(const struct gguf *g, const char *key) {
    int64_t v;
    struct ci_err err = {0};
    if (gguf_get_int(g, key, &v, &err) != CI_OK) {
        printf("  %s: %s\n", key, err.msg);
        return -12345;
    }
    return v;
}

/* A grammar vocabulary of the 255 one-byte tokens (id = the byte; 0 has no text) and an end token 256: a
 * matcher over it takes any bytes (the grammar tests judge strings with it). */
static inline struct gram_vocab *test_byte_vocab(void) {
    static char b[256];
    const char *ptrs[257] = {0};
    uint32_t lens[257] = {0};
    for (int i = 1; i < 256; i++) {
        b[i] = (char)i;
        ptrs[i] = &b[i];
        lens[i] = 1;
    }
    int32_t eog = 256;
    struct gram_vocab *v = NULL;
    struct ci_err err = {0};
    if (gram_vocab_create(257, ptrs, lens, &eog, 1, &v, &err) != CI_OK)
        TEST_FAILF("vocab: %s", err.msg);
    return v;
}

#endif
