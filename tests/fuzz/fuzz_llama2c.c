/* llama2.c checkpoints (legacy and version-1 exports) from outside bytes, and the steps model_load takes
 * after opening one (config, validation, weight binding).
 *
 * Properties checked on every checkpoint the loader accepts:
 *   - the cheap format probe (llama2c_sniff) agrees;
 *   - the header's config is consistent (head_dim x n_head = n_embd, GQA divides) and passes
 *     model_config_validate unless only the head size is beyond what the kernels support;
 *   - the tensor list is token_embd, output_norm, output, then 9 per layer, each an F32 view inside the
 *     input with the shape the config implies, found again by name; a shared classifier is token_embd's
 *     data, and no two of the others overlap;
 *   - the weights bind. */
#include "fuzz.h"
#include "model/config.h"
#include "format/llama2c.h"
#include "model/weights.h"

struct span {
    uint64_t begin, end;
};

static int cmp_span(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static void check_shape(const struct ci_tensor *t, int64_t ne0, int64_t ne1) {
    FUZZ_CHECK(t->type == CI_TYPE_F32 && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1,
               "'%s': [%lld, %lld], want [%lld, %lld]", t->name, (long long)t->ne[0], (long long)t->ne[1],
               (long long)ne0, (long long)ne1);
    FUZZ_CHECK(t->row_bytes == (uint64_t)ne0 * 4 && t->nbytes == t->row_bytes * (uint64_t)ne1, "'%s': sizes",
               t->name);
}

static void check(const struct llama2c *l, const uint8_t *data, size_t size) {
    struct model_config c;
    struct ci_err err = {0};
    model_config_from_llama2c(&c, l);
    FUZZ_CHECK(llama2c_sniff(data, size), "an accepted checkpoint fails the probe");
    FUZZ_CHECK(llama2c_version(l) == 0 || llama2c_version(l) == 1, "version %d", llama2c_version(l));
    FUZZ_CHECK(c.n_vocab > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_ff > 0 && c.n_ctx_train > 0,
               "non-positive size");
    FUZZ_CHECK(c.head_dim * c.n_head == c.n_embd && c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0 &&
                   c.head_dim % 2 == 0,
               "inconsistent heads");
    enum ci_status vs = model_config_validate(&c, &err);
    FUZZ_CHECK(vs == CI_OK || (vs == CI_ERR_UNSUPPORTED && c.head_dim > 256), "config rejected: %s", err.msg);

    int n = llama2c_n_tensors(l);
    FUZZ_CHECK(n == 3 + 9 * c.n_layer, "%d tensors for %d layers", n, c.n_layer);
    struct span *sp = malloc((size_t)n * sizeof *sp);
    int n_sp = 0;
    const struct ci_tensor *emb = llama2c_tensor(l, 0), *out = llama2c_tensor(l, 2);
    FUZZ_CHECK(strcmp(emb->name, "token_embd.weight") == 0 && strcmp(out->name, "output.weight") == 0,
               "tensor order");
    FUZZ_CHECK((out->data == emb->data) == llama2c_shared_classifier(l), "shared classifier");
    int64_t kv = (int64_t)c.n_kv_head * c.head_dim;
    const int64_t layer_shape[9][2] = {{c.n_embd, 1},      {c.n_embd, c.n_embd}, {c.n_embd, kv},
                                       {c.n_embd, kv},     {c.n_embd, c.n_embd}, {c.n_embd, 1},
                                       {c.n_embd, c.n_ff}, {c.n_ff, c.n_embd},   {c.n_embd, c.n_ff}};
    for (int i = 0; i < n; i++) {
        const struct ci_tensor *t = llama2c_tensor(l, i);
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= data && (uint64_t)(p - data) <= size && t->nbytes <= size - (uint64_t)(p - data),
                   "'%s' outside the file", t->name);
        FUZZ_CHECK(llama2c_find_tensor(l, t->name) == t, "'%s' not found by name", t->name);
        if (i == 0 || i == 2)
            check_shape(t, c.n_embd, c.n_vocab);
        else if (i == 1)
            check_shape(t, c.n_embd, 1);
        else
            check_shape(t, layer_shape[(i - 3) % 9][0], layer_shape[(i - 3) % 9][1]);
        if (i != 2 || !llama2c_shared_classifier(l))
            sp[n_sp++] = (struct span){(uint64_t)(p - data), (uint64_t)(p - data) + t->nbytes};
    }
    qsort(sp, (size_t)n_sp, sizeof *sp, cmp_span);
    for (int i = 1; i < n_sp; i++)
        FUZZ_CHECK(sp[i].begin >= sp[i - 1].end, "tensor data overlaps");
    free(sp);
    FUZZ_CHECK(llama2c_find_tensor(l, "blk.0.attn_q.bias") == NULL, "a bias appeared");

    struct model_weights w;
    if (vs == CI_OK) {
        FUZZ_CHECK(model_weights_bind(&w, &c, llama2c_find_tensor, l, &err) == CI_OK, "bind: %s", err.msg);
        model_weights_deinit(&w);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct llama2c *l = NULL;
    struct ci_err err = {0};
    enum ci_status s = llama2c_open_mem(data, size, &l, &err);
    if (s == CI_OK) {
        check(l, data, size);
        llama2c_free(l);
    } else {
        FUZZ_CHECK(l == NULL && err.msg[0], "rejected without a message");
        FUZZ_CHECK(s == CI_ERR_FORMAT || s == CI_ERR_UNSUPPORTED, "status %d: %s", (int)s, err.msg);
    }
    FUZZ_MEM_END();
    return 0;
}
