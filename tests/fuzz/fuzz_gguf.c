/* GGUF from outside bytes: the reader, and everything that reads a GGUF after it (model hyper-parameters,
 * weight binding, the tokenizer's vocabulary, chat-template detection), exactly as loading a model does.
 *
 * Properties checked on every file the reader accepts:
 *   - every view it hands out (key values, strings, nested arrays, tensor data) lies inside the input;
 *   - keys and tensor names are valid, unique, and found again by name at their own index;
 *   - tensors: 1..4 dims, positive sizes, nbytes = row_bytes x rows, data aligned and inside the data
 *     section, no two overlapping;
 *   - the typed getters agree with each value's type;
 *   - writing the file back with the GGUF writer (every key/value copied, every tensor re-added) and
 *     reading that image gives the same keys, values and tensors;
 *   - a model config read from it passes validation and binds; a tokenizer built from it encodes and
 *     decodes with ids in range.
 * A rejected file must come with a status and a message. */
#include <math.h>

#include "fuzz.h"
#include "model/config.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "model/weights.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

struct ctx {
    const uint8_t *base;
    size_t size;
};

static bool inside(const struct ctx *c, const void *p, uint64_t n) {
    const uint8_t *b = p;
    return b >= c->base && (uint64_t)(b - c->base) <= c->size && n <= c->size - (uint64_t)(b - c->base);
}

/* Walks an array value: every element inside the input, strings and nested arrays too. */
static void walk_arr(const struct ctx *c, const struct gguf_arr *a, int depth) {
    FUZZ_CHECK(depth <= GGUF_MAX_ARRAY_DEPTH, "array nested %d deep", depth);
    FUZZ_CHECK(a->elem_type < GGUF_TYPE_COUNT, "array of type %d", (int)a->elem_type);
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->elem_type == GGUF_TYPE_STRING) {
            struct gguf_str s = gguf_arr_str(a, i);
            FUZZ_CHECK(inside(c, s.data, s.len), "string element %llu outside the file",
                       (unsigned long long)i);
        } else if (a->elem_type == GGUF_TYPE_ARRAY) {
            struct gguf_arr inner = gguf_arr_arr(a, i);
            FUZZ_CHECK(inside(c, inner.data, 0), "nested array %llu outside the file", (unsigned long long)i);
            walk_arr(c, &inner, depth + 1);
        } else {
            double d = gguf_arr_f64(a, i);
            int64_t v = gguf_arr_i64(a, i);
            if (a->elem_type == GGUF_TYPE_BOOL)
                FUZZ_CHECK(v == 0 || v == 1, "bool element %lld", (long long)v);
            if (isfinite(d) && fabs(d) < 1e15)
                FUZZ_CHECK(v == (int64_t)d, "element %g read as %lld", d, (long long)v);
        }
    }
}

static void check_kvs(const struct ctx *c, const struct gguf *g) {
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        enum gguf_type t = gguf_kv_type(g, i);
        uint64_t n;
        const uint8_t *raw = gguf_kv_raw(g, i, &n);
        FUZZ_CHECK(gguf_name_valid(key, strlen(key)), "key %lld is not a valid name", (long long)i);
        FUZZ_CHECK(gguf_find_key(g, key) == i, "key '%s' found at %lld, not %lld", key,
                   (long long)gguf_find_key(g, key), (long long)i);
        FUZZ_CHECK(inside(c, raw, n), "value of '%s' outside the file", key);
        struct ci_err err = {0};
        int64_t iv;
        float fv;
        bool bv;
        struct gguf_str sv;
        struct gguf_arr av;
        bool is_int = t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
        enum ci_status s = gguf_get_int(g, key, &iv, &err);
        FUZZ_CHECK(is_int ? s == CI_OK || (t == GGUF_TYPE_UINT64 && s == CI_ERR_FORMAT) : s == CI_ERR_FORMAT,
                   "get_int of a %s: %d", gguf_type_name(t), (int)s);
        s = gguf_get_f32(g, key, &fv, &err);
        FUZZ_CHECK((s == CI_OK) == (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64), "get_f32 of a %s",
                   gguf_type_name(t));
        s = gguf_get_bool(g, key, &bv, &err);
        FUZZ_CHECK((s == CI_OK) == (t == GGUF_TYPE_BOOL), "get_bool of a %s", gguf_type_name(t));
        s = gguf_get_str(g, key, &sv, &err);
        FUZZ_CHECK((s == CI_OK) == (t == GGUF_TYPE_STRING), "get_str of a %s", gguf_type_name(t));
        if (s == CI_OK)
            FUZZ_CHECK(inside(c, sv.data, sv.len) && sv.len + 8 == n, "string '%s' outside its value", key);
        s = gguf_get_arr(g, key, &av, &err);
        FUZZ_CHECK((s == CI_OK) == (t == GGUF_TYPE_ARRAY), "get_arr of a %s", gguf_type_name(t));
        if (s == CI_OK)
            walk_arr(c, &av, 1);
    }
    FUZZ_CHECK(gguf_find_key(g, "") < 0, "the empty key was found");
}

static int cmp_u64_pair(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void check_tensors(const struct ctx *c, const struct gguf *g) {
    int64_t n = gguf_n_tensors(g);
    uint64_t align = gguf_alignment(g), start = gguf_data_offset(g);
    FUZZ_CHECK(align && (align & (align - 1)) == 0 && start % align == 0, "alignment %llu, data at %llu",
               (unsigned long long)align, (unsigned long long)start);
    uint64_t(*span)[2] = n ? malloc((size_t)n * sizeof *span) : NULL;
    for (int64_t i = 0; i < n; i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        FUZZ_CHECK(gguf_name_valid(t->name, strlen(t->name)), "tensor %lld name", (long long)i);
        FUZZ_CHECK(gguf_find_tensor(g, t->name) == i, "tensor '%s' not found at its index", t->name);
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4, "'%s': %d dims", t->name, t->n_dims);
        uint64_t rows = 1;
        for (int d = 0; d < 4; d++) {
            FUZZ_CHECK(t->ne[d] >= 1, "'%s': ne[%d] = %lld", t->name, d, (long long)t->ne[d]);
            if (d >= t->n_dims)
                FUZZ_CHECK(t->ne[d] == 1, "'%s': ne[%d] past n_dims", t->name, d);
            if (d > 0)
                rows *= (uint64_t)t->ne[d]; // fits: nbytes >= rows and nbytes lies inside the input
        }
        uint64_t rb;
        FUZZ_CHECK(ci_row_bytes(t->type, (uint64_t)t->ne[0], &rb) && rb == t->row_bytes, "'%s': row bytes",
                   t->name);
        FUZZ_CHECK(t->nbytes / (rows ? rows : 1) == t->row_bytes && t->nbytes % rows == 0, "'%s': nbytes",
                   t->name);
        FUZZ_CHECK(inside(c, t->data, t->nbytes), "'%s': data outside the file", t->name);
        uint64_t off = (uint64_t)((const uint8_t *)t->data - c->base);
        FUZZ_CHECK(off >= start && (off - start) % align == 0, "'%s': data at %llu not aligned", t->name,
                   (unsigned long long)off);
        span[i][0] = off;
        span[i][1] = off + t->nbytes;
    }
    if (n)
        qsort(span, (size_t)n, sizeof *span, cmp_u64_pair);
    for (int64_t i = 1; i < n; i++)
        FUZZ_CHECK(span[i][0] >= span[i - 1][1], "tensor data overlaps");
    free(span);
}

/* The writer's image of g, read back, must hold the same key/values and tensors. */
static void check_rewrite(const struct gguf *g) {
    struct gguf_writer *w = gguf_writer_create();
    struct ci_err err = {0};
    FUZZ_CHECK(w != NULL, "out of memory");
    for (int64_t i = 0; i < gguf_n_kv(g); i++)
        FUZZ_CHECK(gguf_writer_copy_kv(w, g, i) == CI_OK, "copy of key %lld", (long long)i);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct ci_tensor *t = gguf_tensor(g, i);
        FUZZ_CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == CI_OK,
                   "re-adding tensor '%s'", t->name);
    }
    uint8_t *img = NULL;
    uint64_t n = 0;
    FUZZ_CHECK(gguf_writer_write_mem(w, &img, &n, &err) == CI_OK, "write: %s", err.msg);
    FUZZ_CHECK(n == gguf_writer_file_size(w), "image of %llu bytes, announced %llu", (unsigned long long)n,
               (unsigned long long)gguf_writer_file_size(w));
    gguf_writer_free(w);
    struct gguf *h = NULL;
    FUZZ_CHECK(gguf_open_mem(img, n, &h, &err) == CI_OK, "the rewritten file does not load: %s", err.msg);
    FUZZ_CHECK(gguf_n_kv(h) == gguf_n_kv(g) && gguf_n_tensors(h) == gguf_n_tensors(g), "counts differ");
    FUZZ_CHECK(gguf_alignment(h) == gguf_alignment(g), "alignment differs");
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        uint64_t na, nb;
        const uint8_t *a = gguf_kv_raw(g, i, &na), *b = gguf_kv_raw(h, i, &nb);
        FUZZ_CHECK(strcmp(gguf_kv_key(g, i), gguf_kv_key(h, i)) == 0, "key %lld renamed", (long long)i);
        FUZZ_CHECK(gguf_kv_type(g, i) == gguf_kv_type(h, i) && na == nb && memcmp(a, b, (size_t)na) == 0,
                   "value of '%s' changed", gguf_kv_key(g, i));
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct ci_tensor *a = gguf_tensor(g, i), *b = gguf_tensor(h, i);
        FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->type == b->type && a->n_dims == b->n_dims &&
                       memcmp(a->ne, b->ne, sizeof a->ne) == 0 && a->nbytes == b->nbytes &&
                       memcmp(a->data, b->data, (size_t)a->nbytes) == 0,
                   "tensor '%s' changed", a->name);
    }
    gguf_free(h);
    ci_free(img);
}

static const struct ci_tensor *lookup(const void *src, const char *name) {
    int64_t i = gguf_find_tensor(src, name);
    return i < 0 ? NULL : gguf_tensor(src, i);
}

static const struct ci_tensor *tensor_at(const void *src, int64_t i) {
    return gguf_tensor(src, i);
}

/* What model_load does after opening the file. */
static void check_model(const struct gguf *g) {
    struct model_config cfg;
    struct ci_err err = {0};
    if (model_config_from_gguf(&cfg, g, &err) != CI_OK) {
        FUZZ_CHECK(err.msg[0], "config rejected without a message");
        return;
    }
    FUZZ_CHECK(model_config_validate(&cfg, &err) == CI_OK, "accepted config fails validation: %s", err.msg);
    FUZZ_CHECK(cfg.head_dim > 0 && cfg.n_head % cfg.n_kv_head == 0, "config shape");
    struct model_weights w;
    memset(&w, 0, sizeof w);
    if (model_weights_bind(&w, &cfg, lookup, g, &err) == CI_OK) {
        // An encoder (BERT) has no output head: its embedding norm takes that place.
        FUZZ_CHECK(w.tok_embd.data &&
                       (cfg.encoder ? w.tok_norm.data != NULL : w.output.data && w.output_norm.data),
                   "bound weights missing");
        if (model_weights_check_all_used(&w, &cfg, tensor_at, g, gguf_n_tensors(g), &err) != CI_OK)
            FUZZ_CHECK(err.msg[0], "unused tensor refused without a message");
        model_weights_deinit(&w);
    } else {
        FUZZ_CHECK(err.msg[0], "weights rejected without a message");
    }
}

/* What the server does with the vocabulary: build the tokenizer, encode, decode, pick a chat template. */
static void check_tokenizer(const struct gguf *g) {
    struct ci_err err = {0};
    struct tokenizer *t = NULL;
    struct gguf_str tmpl;
    if (gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == CI_OK) {
        enum chat_template_id id = chat_template_detect(tmpl.data, (size_t)tmpl.len);
        FUZZ_CHECK(id >= CHAT_TEMPLATE_UNKNOWN && id < CHAT_TEMPLATE_COUNT, "template id %d", (int)id);
    }
    if (tokenizer_from_gguf(g, &t, &err) != CI_OK) {
        FUZZ_CHECK(err.msg[0], "tokenizer rejected without a message");
        return;
    }
    int nv = tokenizer_n_vocab(t);
    FUZZ_CHECK(nv > 0, "empty vocabulary");
    int32_t special[] = {tokenizer_bos(t), tokenizer_eos(t), tokenizer_eot(t),
                         tokenizer_unk(t), tokenizer_pad(t), tokenizer_nl(t)};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        FUZZ_CHECK(special[i] == TOKENIZER_TOKEN_NULL || (special[i] >= 0 && special[i] < nv),
                   "special id %d of %d", special[i], nv);
    static const char text[] =
        "Hello world, \xc3\xbc \xe4\xbd\xa0\xe5\xa5\xbd <s> </s> <|im_start|> 12345\n\t!";
    for (int flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        int n = 0;
        enum ci_status s = tokenizer_encode(t, text, sizeof text - 1, flags & 1, flags & 2, &ids, &n, &err);
        if (s != CI_OK) { // only a vocabulary without byte tokens and <unk> can fail to encode
            FUZZ_CHECK(s == CI_ERR_INVALID && err.msg[0], "encode: %d %s", (int)s, err.msg);
            continue;
        }
        for (int i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv, "id %d of %d", ids[i], nv);
        char *out = NULL;
        size_t len = 0;
        FUZZ_CHECK(tokenizer_decode(t, ids, n, flags & 1, &out, &len, &err) == CI_OK, "decode: %s", err.msg);
        FUZZ_CHECK(strlen(out) <= len, "decode length");
        ci_free(out);
        ci_free(ids);
    }
    // Every token's bytes are reachable and bounded by the longest.
    for (int32_t id = 0; id < nv && id < 4096; id++) {
        size_t l;
        const char *p = tokenizer_token_bytes(t, id, true, &l);
        FUZZ_CHECK(p && l <= tokenizer_max_token_bytes(t), "token %d bytes", id);
    }
    tokenizer_free(t);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_MEM_BEGIN();
    struct ctx c = {data, size};
    struct ci_err err = {0};
    struct gguf *g = NULL;
    enum ci_status s = gguf_open_mem(data, size, &g, &err);
    if (s != CI_OK) {
        FUZZ_CHECK(g == NULL && err.code == s && err.msg[0], "a rejected file without status or message");
        FUZZ_CHECK(s == CI_ERR_FORMAT || s == CI_ERR_UNSUPPORTED, "rejected with status %d: %s", (int)s,
                   err.msg);
        FUZZ_MEM_END();
        return 0;
    }
    FUZZ_CHECK(gguf_version(g) == 2 || gguf_version(g) == 3, "version %u", gguf_version(g));
    FUZZ_CHECK(gguf_file_size(g) == size, "file size");
    check_kvs(&c, g);
    check_tensors(&c, g);
    check_rewrite(g);
    check_model(g);
    check_tokenizer(g);
    gguf_free(g);
    FUZZ_MEM_END();
    return 0;
}
