/* llama2.c checkpoint loader: header validation, implied layout, F32 views under GGUF names. */
#include "format/llama2c.h"

#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/mem.h"

#define V1_HEADER_BYTES     256
#define LEGACY_HEADER_BYTES 28
#define NAME_MAX_BYTES      48

// Sanity bounds: far beyond any llama2.c-exported model, small enough that no size product overflows.
#define MAX_DIM     65536
#define MAX_HIDDEN  (1 << 20)
#define MAX_LAYERS  1024
#define MAX_HEADS   4096
#define MAX_VOCAB   (1 << 24)
#define MAX_SEQ_LEN (1 << 24)

struct llama2c {
    struct ci_mapfile map; // data NULL when the bytes are borrowed (llama2c_open_mem)
    const uint8_t *base;
    uint64_t size;
    int version;
    bool shared;
    struct llama2c_hparams hp; // vocab made positive
    int n_tensors;
    struct ci_tensor *tensors;     // [n_tensors]
    char (*names)[NAME_MAX_BYTES]; // [n_tensors]
};

/* Tensor kinds in the checkpoint.  Each is a run of `count` items of rows x cols floats. */
enum kind {
    K_TOK,
    K_ATT_NORM,
    K_WQ,
    K_WK,
    K_WV,
    K_WO,
    K_FFN_NORM,
    K_W1,
    K_W2,
    K_W3,
    K_OUT_NORM,
    K_FREQ_RE,
    K_FREQ_IM,
    K_WCLS,
    K_COUNT,
};

static const enum kind order_legacy[] = {K_TOK,      K_ATT_NORM, K_WQ,      K_WK,  K_WV,
                                         K_WO,       K_FFN_NORM, K_W1,      K_W2,  K_W3,
                                         K_OUT_NORM, K_FREQ_RE,  K_FREQ_IM, K_WCLS};
static const enum kind order_v1[] = {K_ATT_NORM, K_FFN_NORM, K_OUT_NORM, K_TOK, K_WQ, K_WK,
                                     K_WV,       K_WO,       K_W1,       K_W2,  K_W3, K_WCLS};

struct kind_shape {
    uint64_t count, rows, cols; // rows = 1 for vectors
};

static struct kind_shape kind_shape(const struct llama2c_hparams *hp, enum kind k) {
    uint64_t L = (uint64_t)hp->n_layers, d = (uint64_t)hp->dim, h = (uint64_t)hp->hidden;
    uint64_t v = (uint64_t)hp->vocab, hd = d / (uint64_t)hp->n_heads;
    uint64_t kv = hd * (uint64_t)hp->n_kv_heads;
    switch (k) {
    case K_TOK:
    case K_WCLS:
        return (struct kind_shape){1, v, d};
    case K_ATT_NORM:
    case K_FFN_NORM:
        return (struct kind_shape){L, 1, d};
    case K_WQ:
    case K_WO:
        return (struct kind_shape){L, d, d};
    case K_WK:
    case K_WV:
        return (struct kind_shape){L, kv, d};
    case K_W1:
    case K_W3:
        return (struct kind_shape){L, h, d};
    case K_W2:
        return (struct kind_shape){L, d, h};
    case K_OUT_NORM:
        return (struct kind_shape){1, 1, d};
    case K_FREQ_RE:
    case K_FREQ_IM:
        return (struct kind_shape){1, (uint64_t)hp->seq_len, hd / 2};
    case K_COUNT:
        break;
    }
    CI_UNREACHABLE();
}

static enum ci_status check_range(const char *what, int32_t v, int32_t max, struct ci_err *err) {
    if (v <= 0 || v > max)
        return ci_err_set(err, CI_ERR_FORMAT, "llama2.c header: %s = %d out of range [1, %d]", what, (int)v,
                          (int)max);
    return CI_OK;
}

/* Validates header values; hp->vocab must already be positive. */
static enum ci_status check_hparams(const struct llama2c_hparams *hp, struct ci_err *err) {
    enum ci_status s;
    if ((s = check_range("dim", hp->dim, MAX_DIM, err)) != CI_OK ||
        (s = check_range("hidden_dim", hp->hidden, MAX_HIDDEN, err)) != CI_OK ||
        (s = check_range("n_layers", hp->n_layers, MAX_LAYERS, err)) != CI_OK ||
        (s = check_range("n_heads", hp->n_heads, MAX_HEADS, err)) != CI_OK ||
        (s = check_range("n_kv_heads", hp->n_kv_heads, MAX_HEADS, err)) != CI_OK ||
        (s = check_range("vocab_size", hp->vocab, MAX_VOCAB, err)) != CI_OK ||
        (s = check_range("seq_len", hp->seq_len, MAX_SEQ_LEN, err)) != CI_OK)
        return s;
    if (hp->n_kv_heads > hp->n_heads || hp->n_heads % hp->n_kv_heads != 0)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "llama2.c header: n_heads %d is not a multiple of n_kv_heads %d", (int)hp->n_heads,
                          (int)hp->n_kv_heads);
    if (hp->dim % hp->n_heads != 0)
        return ci_err_set(err, CI_ERR_FORMAT, "llama2.c header: dim %d is not a multiple of n_heads %d",
                          (int)hp->dim, (int)hp->n_heads);
    if ((hp->dim / hp->n_heads) % 2 != 0)
        return ci_err_set(err, CI_ERR_FORMAT, "llama2.c header: head_dim %d is odd (rope needs pairs)",
                          (int)(hp->dim / hp->n_heads));
    return CI_OK;
}

static enum ci_status read_hparams(struct ci_reader *r, struct llama2c_hparams *hp) {
    int32_t v[7];
    for (int i = 0; i < 7; i++)
        if (ci_rd_i32(r, &v[i]) != CI_OK)
            return CI_ERR_FORMAT;
    *hp = (struct llama2c_hparams){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    return CI_OK;
}

/* Parses the header at r (positioned at 0): fills hp (vocab positive), version, shared, data start. */
static enum ci_status parse_header(struct ci_reader *r, struct llama2c_hparams *hp, int *version,
                                   bool *shared, uint64_t *data_start, struct ci_err *err) {
    uint32_t magic = 0;
    if (ci_reader_left(r) >= 4 && ci_rd_u32(r, &magic) == CI_OK && magic == LLAMA2C_MAGIC_V1) {
        int32_t ver;
        uint8_t sh;
        if (ci_rd_i32(r, &ver) != CI_OK || read_hparams(r, hp) != CI_OK || ci_rd_u8(r, &sh) != CI_OK ||
            r->size < V1_HEADER_BYTES)
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c v1 header truncated (%llu bytes, need %d)",
                              (unsigned long long)r->size, V1_HEADER_BYTES);
        if (ver != 1)
            return ci_err_set(err, CI_ERR_UNSUPPORTED,
                              "llama2.c checkpoint version %d not supported (only 1)", (int)ver);
        if (sh > 1)
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c v1 header: shared_classifier = %u (want 0 or 1)",
                              (unsigned)sh);
        if (hp->vocab < 0)
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c v1 header: negative vocab_size %d",
                              (int)hp->vocab);
        *version = 1;
        *shared = sh == 1;
        *data_start = V1_HEADER_BYTES;
    } else {
        r->pos = 0;
        if (read_hparams(r, hp) != CI_OK)
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c header truncated (%llu bytes, need %d)",
                              (unsigned long long)r->size, LEGACY_HEADER_BYTES);
        *version = 0;
        *shared = hp->vocab > 0;
        if (hp->vocab < 0) {
            if (hp->vocab == INT32_MIN)
                return ci_err_set(err, CI_ERR_FORMAT, "llama2.c header: vocab_size %d out of range",
                                  (int)hp->vocab);
            hp->vocab = -hp->vocab;
        }
        *data_start = LEGACY_HEADER_BYTES;
    }
    return check_hparams(hp, err);
}

static const char *kind_label(enum kind k) {
    static const char *labels[K_COUNT] = {
        "token_embedding", "rms_att",       "wq",  "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final",
        "freq_cis_real",   "freq_cis_imag", "wcls"};
    return labels[k];
}

static void set_tensor(struct ci_tensor *t, const char *name, const uint8_t *data, uint64_t rows,
                       uint64_t cols) {
    t->name = name;
    t->type = CI_TYPE_F32;
    t->n_dims = rows == 1 ? 1 : 2;
    t->ne[0] = (int64_t)cols;
    t->ne[1] = (int64_t)rows;
    t->ne[2] = 1;
    t->ne[3] = 1;
    t->row_bytes = cols * sizeof(float);
    t->nbytes = rows * cols * sizeof(float);
    t->data = data;
}

static enum ci_status parse(struct llama2c *l, struct ci_err *err) {
    struct ci_reader r;
    ci_reader_init(&r, l->base, l->size);
    uint64_t start = 0;
    enum ci_status s = parse_header(&r, &l->hp, &l->version, &l->shared, &start, err);
    if (s != CI_OK)
        return s;

    // Byte offset of each kind's first item, walking the version's order.
    const enum kind *order = l->version == 1 ? order_v1 : order_legacy;
    size_t n_order =
        l->version == 1 ? sizeof order_v1 / sizeof *order_v1 : sizeof order_legacy / sizeof *order_legacy;
    uint64_t off[K_COUNT] = {0}, item_bytes[K_COUNT] = {0}, pos = start;
    for (size_t i = 0; i < n_order; i++) {
        enum kind k = order[i];
        if (k == K_WCLS && l->shared)
            continue;
        struct kind_shape ks = kind_shape(&l->hp, k);
        uint64_t ib, total;
        if (!ci_mul_u64(ks.rows, ks.cols, &ib) || !ci_mul_u64(ib, sizeof(float), &ib) ||
            !ci_mul_u64(ib, ks.count, &total))
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c: size of %s overflows", kind_label(k));
        off[k] = pos;
        item_bytes[k] = ib;
        if (!ci_add_u64(pos, total, &pos))
            return ci_err_set(err, CI_ERR_FORMAT, "llama2.c: size of %s overflows", kind_label(k));
        if (pos > l->size)
            return ci_err_set(err, CI_ERR_FORMAT,
                              "llama2.c checkpoint truncated: %s ends at byte %llu, file has %llu bytes "
                              "(dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq_len %d)",
                              kind_label(k), (unsigned long long)pos, (unsigned long long)l->size,
                              (int)l->hp.dim, (int)l->hp.hidden, (int)l->hp.n_layers, (int)l->hp.n_heads,
                              (int)l->hp.n_kv_heads, (int)l->hp.vocab, (int)l->hp.seq_len);
    }
    // Exact size: a corrupted header that implies a smaller model must not pass with the rest ignored.
    if (pos != l->size)
        return ci_err_set(err, CI_ERR_FORMAT,
                          "llama2.c checkpoint has %llu bytes but its header implies %llu "
                          "(dim %d, hidden %d, layers %d, heads %d/%d, vocab %d, seq_len %d)",
                          (unsigned long long)l->size, (unsigned long long)pos, (int)l->hp.dim,
                          (int)l->hp.hidden, (int)l->hp.n_layers, (int)l->hp.n_heads, (int)l->hp.n_kv_heads,
                          (int)l->hp.vocab, (int)l->hp.seq_len);
    if (l->shared) {
        off[K_WCLS] = off[K_TOK];
        item_bytes[K_WCLS] = item_bytes[K_TOK];
    }

    // GGUF-named views: token_embd, output_norm, output, then 9 per layer.
    static const struct {
        const char *suffix;
        enum kind k;
    } per_layer[] = {
        {"attn_norm", K_ATT_NORM}, {"attn_q", K_WQ},      {"attn_k", K_WK},
        {"attn_v", K_WV},          {"attn_output", K_WO}, {"ffn_norm", K_FFN_NORM},
        {"ffn_gate", K_W1},        {"ffn_down", K_W2},    {"ffn_up", K_W3},
    };
    const int n_per_layer = (int)(sizeof per_layer / sizeof *per_layer);
    int n = 3 + n_per_layer * l->hp.n_layers;
    l->tensors = ci_calloc((size_t)n, sizeof *l->tensors);
    l->names = ci_calloc((size_t)n, sizeof *l->names);
    if (!l->tensors || !l->names)
        return ci_err_set(err, CI_ERR_NOMEM, "llama2.c: out of memory for %d tensor views", n);
    l->n_tensors = n;

    int t = 0;
    const struct {
        const char *name;
        enum kind k;
    } globals[] = {
        {"token_embd.weight", K_TOK}, {"output_norm.weight", K_OUT_NORM}, {"output.weight", K_WCLS}};
    for (int i = 0; i < 3; i++, t++) {
        struct kind_shape ks = kind_shape(&l->hp, globals[i].k);
        snprintf(l->names[t], NAME_MAX_BYTES, "%s", globals[i].name);
        set_tensor(&l->tensors[t], l->names[t], l->base + off[globals[i].k], ks.rows, ks.cols);
    }
    for (int il = 0; il < l->hp.n_layers; il++) {
        for (int j = 0; j < n_per_layer; j++, t++) {
            enum kind k = per_layer[j].k;
            struct kind_shape ks = kind_shape(&l->hp, k);
            snprintf(l->names[t], NAME_MAX_BYTES, "blk.%d.%s.weight", il, per_layer[j].suffix);
            set_tensor(&l->tensors[t], l->names[t], l->base + off[k] + (uint64_t)il * item_bytes[k], ks.rows,
                       ks.cols);
        }
    }
    CI_ASSERT(t == n);
    return CI_OK;
}

enum ci_status llama2c_open_mem(const void *data, uint64_t size, struct llama2c **out, struct ci_err *err) {
    *out = NULL;
    struct llama2c *l = ci_calloc(1, sizeof *l);
    if (!l)
        return ci_err_set(err, CI_ERR_NOMEM, "llama2.c: out of memory");
    l->base = data;
    l->size = size;
    enum ci_status s = parse(l, err);
    if (s != CI_OK)
        goto fail;
    *out = l;
    return CI_OK;
fail:
    llama2c_free(l);
    return s;
}

enum ci_status llama2c_open(const char *path, struct llama2c **out, struct ci_err *err) {
    *out = NULL;
    struct ci_mapfile m;
    struct llama2c *l = NULL;
    enum ci_status s = ci_mapfile_open(&m, path, err);
    if (s != CI_OK)
        return s;
    s = llama2c_open_mem(m.data, m.size, &l, err);
    if (s != CI_OK) {
        ci_err_prefix(err, "%s", path);
        goto fail;
    }
    l->map = m;
    *out = l;
    return CI_OK;
fail:
    ci_mapfile_close(&m);
    return s;
}

bool llama2c_file_damaged(const struct llama2c *l) {
    return ci_mapfile_damaged(&l->map);
}

void llama2c_free(struct llama2c *l) {
    if (!l)
        return;
    ci_mapfile_close(&l->map);
    ci_free(l->tensors);
    ci_free(l->names);
    ci_free(l);
}

const struct llama2c_hparams *llama2c_hparams(const struct llama2c *l) {
    return &l->hp;
}

int llama2c_version(const struct llama2c *l) {
    return l->version;
}

bool llama2c_shared_classifier(const struct llama2c *l) {
    return l->shared;
}

const struct ci_tensor *llama2c_find_tensor(const void *src, const char *name) {
    const struct llama2c *l = src;
    for (int i = 0; i < l->n_tensors; i++)
        if (strcmp(l->tensors[i].name, name) == 0)
            return &l->tensors[i];
    return NULL;
}

int llama2c_n_tensors(const struct llama2c *l) {
    return l->n_tensors;
}

const struct ci_tensor *llama2c_tensor(const struct llama2c *l, int i) {
    CI_ASSERT(i >= 0 && i < l->n_tensors);
    return &l->tensors[i];
}

bool llama2c_sniff(const void *data, size_t n) {
    struct ci_reader r;
    ci_reader_init(&r, data, n);
    if (n >= 4 && memcmp(data, "GGUF", 4) == 0)
        return false;
    uint32_t magic;
    if (ci_rd_u32(&r, &magic) == CI_OK && magic == LLAMA2C_MAGIC_V1)
        return true;
    r.pos = 0;
    struct llama2c_hparams hp;
    int version;
    bool shared;
    uint64_t start;
    return parse_header(&r, &hp, &version, &shared, &start, NULL) == CI_OK;
}
