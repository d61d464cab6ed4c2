/* GGUF v3 writer (see gguf_write.h).  Key/values are serialized into per-key byte buffers as they are set,
 * so replacing a key or copying one verbatim from another file is a buffer swap; the header is assembled
 * in memory when written (it is small next to the tensor data, even with a 150k-token vocabulary) and the
 * tensor data is streamed.  Tensor offsets are computed at write time, so the alignment may be set last.
 *
 * Ownership: the writer owns copies of keys, values and tensor names; tensor data is borrowed. */
#include "format/gguf_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

#define GGUF_VERSION 3

struct wkv {
    char *key;
    enum gguf_type type;
    uint8_t *val; // encoded value bytes (as after the type tag in the file)
    size_t val_len;
};

struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;  // relative to the data start; set when the header is built
    const void *data; // borrowed, may be NULL (streaming)
};

struct gguf_writer {
    struct wkv *kv;
    int64_t n_kv, cap_kv;
    struct wtensor *t;
    int64_t n_t, cap_t;
    uint64_t alignment;
    struct ci_err err; // first failure (err.code != CI_OK)
    bool header_written;
    int64_t next_tensor; // streaming: the tensor whose data comes next
};

/* Growable byte buffer; a failed growth sets oom and drops further writes. */
struct buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

static void buf_put(struct buf *b, const void *src, size_t n) {
    if (b->oom || n == 0)
        return;
    size_t need;
    if (!ci_add_size(b->n, n, &need)) {
        b->oom = true;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        uint8_t *q = ci_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n = need;
}

static void buf_u32(struct buf *b, uint32_t v) {
    buf_put(b, &v, 4);
}
static void buf_u64(struct buf *b, uint64_t v) {
    buf_put(b, &v, 8);
}
static void buf_str(struct buf *b, const char *s, size_t n) {
    buf_u64(b, n);
    buf_put(b, s, n);
}

static size_t scalar_size(enum gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL:
        return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16:
        return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32:
        return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* Records the first failure and returns code. */
static enum ci_status fail_with(struct gguf_writer *w, enum ci_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum ci_status fail_with(struct gguf_writer *w, enum ci_status code, const char *fmt, ...) {
    if (w->err.code == CI_OK) {
        va_list ap;
        va_start(ap, fmt);
        w->err.code = code;
        vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

struct gguf_writer *gguf_writer_create(void) {
    struct gguf_writer *w = ci_calloc(1, sizeof *w);
    if (w)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w)
        return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        ci_free(w->kv[i].key);
        ci_free(w->kv[i].val);
    }
    for (int64_t i = 0; i < w->n_t; i++)
        ci_free(w->t[i].name);
    ci_free(w->kv);
    ci_free(w->t);
    ci_free(w);
}

enum ci_status gguf_writer_status(const struct gguf_writer *w, struct ci_err *err) {
    if (w->err.code != CI_OK && err)
        *err = w->err;
    return w->err.code;
}

static int64_t find_kv(const struct gguf_writer *w, const char *key) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0)
            return i;
    return -1;
}

/* Takes ownership of val (a ci_malloc'd encoded value) in every case. */
static enum ci_status set_kv(struct gguf_writer *w, const char *key, enum gguf_type type, uint8_t *val,
                             size_t val_len) {
    enum ci_status s = CI_OK;
    size_t klen = key ? strlen(key) : 0;
    if (!val) {
        s = fail_with(w, CI_ERR_NOMEM, "gguf writer: key '%.100s': out of memory", key ? key : "");
        goto fail;
    }
    if (w->header_written) {
        s = fail_with(w, CI_ERR_INVALID, "gguf writer: key '%.100s' set after the header was written", key);
        goto fail;
    }
    if (!key || klen > GGUF_MAX_KEY_BYTES || !gguf_name_valid(key, klen)) {
        s = fail_with(w, CI_ERR_INVALID, "gguf writer: invalid key '%.100s'", key ? key : "(null)");
        goto fail;
    }
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a = 0;
        if (type == GGUF_TYPE_UINT32)
            memcpy(&a, val, 4);
        if (type != GGUF_TYPE_UINT32 || a == 0 || (a & (a - 1)) != 0) {
            s = fail_with(w, CI_ERR_INVALID, "gguf writer: general.alignment must be a u32 power of two");
            goto fail;
        }
        w->alignment = a;
    }
    int64_t i = find_kv(w, key);
    if (i >= 0) {
        ci_free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = val;
        w->kv[i].val_len = val_len;
        return CI_OK;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        struct wkv *kv = ci_realloc(w->kv, (size_t)cap * sizeof *kv);
        if (!kv) {
            s = fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory");
            goto fail;
        }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = ci_strdup(key);
    if (!k) {
        s = fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory");
        goto fail;
    }
    w->kv[w->n_kv++] = (struct wkv){k, type, val, val_len};
    return CI_OK;
fail:
    ci_free(val);
    return s;
}

static enum ci_status set_scalar(struct gguf_writer *w, const char *key, enum gguf_type type, const void *v) {
    size_t n = scalar_size(type);
    uint8_t *val = ci_malloc(n);
    if (val)
        memcpy(val, v, n);
    return set_kv(w, key, type, val, n);
}

enum ci_status gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar(w, key, GGUF_TYPE_UINT8, &v);
}
enum ci_status gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, GGUF_TYPE_INT8, &v);
}
enum ci_status gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, GGUF_TYPE_UINT16, &v);
}
enum ci_status gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, GGUF_TYPE_INT16, &v);
}
enum ci_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, GGUF_TYPE_UINT32, &v);
}
enum ci_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, GGUF_TYPE_INT32, &v);
}
enum ci_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, GGUF_TYPE_UINT64, &v);
}
enum ci_status gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, GGUF_TYPE_INT64, &v);
}
enum ci_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, GGUF_TYPE_FLOAT32, &v);
}
enum ci_status gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v) {
    return set_scalar(w, key, GGUF_TYPE_FLOAT64, &v);
}
enum ci_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

enum ci_status gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *v, size_t len) {
    struct buf b = {0};
    buf_str(&b, v, len);
    if (b.oom) {
        ci_free(b.p);
        b.p = NULL;
    }
    return set_kv(w, key, GGUF_TYPE_STRING, b.p, b.n);
}

enum ci_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v) {
    return gguf_writer_set_strn(w, key, v, strlen(v));
}

/* Encodes an array value; false (with a message) for an invalid description. */
static bool encode_arr(struct buf *b, const struct gguf_warr *a, int depth, const char **why) {
    if (depth > GGUF_MAX_ARRAY_DEPTH) {
        *why = "arrays nested too deeply";
        return false;
    }
    if ((unsigned)a->elem_type >= GGUF_TYPE_COUNT) {
        *why = "unknown element type";
        return false;
    }
    if (a->n && !a->data) {
        *why = "NULL element data";
        return false;
    }
    buf_u32(b, (uint32_t)a->elem_type);
    buf_u64(b, a->n);
    if (a->elem_type == GGUF_TYPE_STRING) {
        const char *const *strs = a->data;
        for (uint64_t i = 0; i < a->n; i++)
            buf_str(b, strs[i], a->lens ? a->lens[i] : strlen(strs[i]));
    } else if (a->elem_type == GGUF_TYPE_ARRAY) {
        const struct gguf_warr *inner = a->data;
        for (uint64_t i = 0; i < a->n; i++)
            if (!encode_arr(b, &inner[i], depth + 1, why))
                return false;
    } else {
        size_t bytes;
        if (!ci_mul_size((size_t)a->n, scalar_size(a->elem_type), &bytes) || a->n > SIZE_MAX) {
            b->oom = true;
            return true;
        }
        buf_put(b, a->data, bytes);
    }
    return true;
}

enum ci_status gguf_writer_set_arr_v(struct gguf_writer *w, const char *key, const struct gguf_warr *a) {
    struct buf b = {0};
    const char *why = NULL;
    if (!encode_arr(&b, a, 1, &why)) {
        ci_free(b.p);
        return fail_with(w, CI_ERR_INVALID, "gguf writer: key '%.100s': %s", key ? key : "", why);
    }
    if (b.oom) {
        ci_free(b.p);
        b.p = NULL;
    }
    return set_kv(w, key, GGUF_TYPE_ARRAY, b.p, b.n);
}

enum ci_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                                   const void *data, uint64_t n) {
    if (elem == GGUF_TYPE_STRING || elem == GGUF_TYPE_ARRAY)
        return fail_with(w, CI_ERR_INVALID,
                         "gguf writer: key '%.100s': gguf_writer_set_arr takes numeric types",
                         key ? key : "");
    struct gguf_warr a = {elem, n, data, NULL};
    return gguf_writer_set_arr_v(w, key, &a);
}

enum ci_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                                       const size_t *lens, uint64_t n) {
    struct gguf_warr a = {GGUF_TYPE_STRING, n, strs, lens};
    return gguf_writer_set_arr_v(w, key, &a);
}

enum ci_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf *g, int64_t i) {
    uint64_t n;
    const uint8_t *raw = gguf_kv_raw(g, i, &n);
    uint8_t *val = ci_malloc(n ? (size_t)n : 1);
    if (val && n)
        memcpy(val, raw, (size_t)n);
    return set_kv(w, gguf_kv_key(g, i), gguf_kv_type(g, i), val, (size_t)n);
}

void gguf_writer_remove_key(struct gguf_writer *w, const char *key) {
    int64_t i = find_kv(w, key);
    if (i < 0 || w->header_written)
        return;
    if (strcmp(key, "general.alignment") == 0)
        w->alignment = GGUF_DEFAULT_ALIGNMENT;
    ci_free(w->kv[i].key);
    ci_free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
}

enum ci_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                      const int64_t ne[], const void *data) {
    size_t nlen = name ? strlen(name) : 0;
    const char *shown = name ? name : "(null)";
    if (w->header_written)
        return fail_with(w, CI_ERR_INVALID, "gguf writer: tensor '%.100s' added after the header was written",
                         shown);
    if (!name || nlen > GGUF_MAX_NAME_BYTES || !gguf_name_valid(name, nlen))
        return fail_with(w, CI_ERR_INVALID, "gguf writer: invalid tensor name '%.100s'", shown);
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return fail_with(w, CI_ERR_INVALID, "gguf writer: duplicate tensor '%.100s'", name);
    const struct ci_type_traits *tt = ci_type_traits(type);
    if (!tt)
        return fail_with(w, CI_ERR_INVALID, "gguf writer: tensor '%.100s': unknown type %" PRIu32, name,
                         type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return fail_with(w, CI_ERR_INVALID, "gguf writer: tensor '%.100s': n_dims %d not in 1..%d", name,
                         n_dims, GGUF_MAX_DIMS);
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    uint64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] < 1 || n_elem > (uint64_t)INT64_MAX / (uint64_t)t.ne[d])
            return fail_with(w, CI_ERR_INVALID, "gguf writer: tensor '%.100s': bad ne[%d] = %" PRId64, name,
                             d, t.ne[d]);
        n_elem *= (uint64_t)t.ne[d];
    }
    uint64_t row_bytes;
    if (!ci_row_bytes(type, (uint64_t)t.ne[0], &row_bytes) ||
        !ci_mul_u64(row_bytes, n_elem / (uint64_t)t.ne[0], &t.nbytes))
        return fail_with(w, CI_ERR_INVALID,
                         "gguf writer: tensor '%.100s': ne[0] = %" PRId64
                         " not a multiple of the %s block size",
                         name, t.ne[0], tt->name);
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        struct wtensor *nt = ci_realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt)
            return fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    if (!(t.name = ci_strdup(name)))
        return fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory");
    w->t[w->n_t++] = t;
    return CI_OK;
}

int64_t gguf_writer_n_tensors(const struct gguf_writer *w) {
    return w->n_t;
}

uint64_t gguf_writer_tensor_nbytes(const struct gguf_writer *w, int64_t i) {
    return i >= 0 && i < w->n_t ? w->t[i].nbytes : 0;
}

/* Lays out tensor offsets; returns the size of the data section (each tensor padded to the alignment). */
static uint64_t layout(struct gguf_writer *w) {
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += align_up(w->t[i].nbytes, w->alignment);
    }
    return off;
}

/* The header bytes up to (not including) the padding before the data section. */
static enum ci_status build_header(struct gguf_writer *w, struct buf *b) {
    layout(w);
    buf_put(b, "GGUF", 4);
    buf_u32(b, GGUF_VERSION);
    buf_u64(b, (uint64_t)w->n_t);
    buf_u64(b, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        buf_str(b, w->kv[i].key, strlen(w->kv[i].key));
        buf_u32(b, (uint32_t)w->kv[i].type);
        buf_put(b, w->kv[i].val, w->kv[i].val_len);
    }
    for (int64_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        buf_str(b, t->name, strlen(t->name));
        buf_u32(b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            buf_u64(b, (uint64_t)t->ne[d]);
        buf_u32(b, t->type);
        buf_u64(b, t->offset);
    }
    if (b->oom)
        return fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory for the header");
    return CI_OK;
}

uint64_t gguf_writer_file_size(const struct gguf_writer *w) {
    // The header size is computed without building it: the same sums as build_header.
    uint64_t n = 4 + 4 + 8 + 8, data = 0;
    for (int64_t i = 0; i < w->n_kv; i++)
        n += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].val_len;
    for (int64_t i = 0; i < w->n_t; i++) {
        n += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
        data += align_up(w->t[i].nbytes, w->alignment);
    }
    return align_up(n, w->alignment) + data;
}

static enum ci_status write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k)
            return CI_ERR_IO;
        n -= k;
    }
    return CI_OK;
}

enum ci_status gguf_writer_write_header(struct gguf_writer *w, FILE *f, struct ci_err *err) {
    struct buf b = {0};
    enum ci_status s = gguf_writer_status(w, err);
    if (s)
        goto fail;
    if (w->header_written) {
        fail_with(w, CI_ERR_INVALID, "gguf writer: header written twice (a writer writes one file)");
        s = gguf_writer_status(w, err);
        goto fail;
    }
    if ((s = build_header(w, &b))) {
        gguf_writer_status(w, err);
        goto fail;
    }
    if (fwrite(b.p, 1, b.n, f) != b.n || write_zeros(f, align_up(b.n, w->alignment) - b.n)) {
        fail_with(w, CI_ERR_IO, "gguf writer: write failed: %s", strerror(errno));
        s = gguf_writer_status(w, err);
        goto fail;
    }
    w->header_written = true;
    w->next_tensor = 0;
fail:
    ci_free(b.p);
    return s;
}

enum ci_status gguf_writer_write_tensor_data(struct gguf_writer *w, FILE *f, int64_t i, const void *data,
                                             struct ci_err *err) {
    enum ci_status s = gguf_writer_status(w, err);
    if (s)
        return s;
    if (!w->header_written || i != w->next_tensor || i >= w->n_t || !data) {
        fail_with(w, CI_ERR_INVALID,
                  "gguf writer: tensor data %" PRId64 " written out of order (expected %" PRId64
                  " of %" PRId64 ", header %s)",
                  i, w->next_tensor, w->n_t, w->header_written ? "written" : "not written");
        return gguf_writer_status(w, err);
    }
    const struct wtensor *t = &w->t[i];
    if (fwrite(data, 1, (size_t)t->nbytes, f) != t->nbytes ||
        write_zeros(f, align_up(t->nbytes, w->alignment) - t->nbytes)) {
        fail_with(w, CI_ERR_IO, "gguf writer: tensor '%.100s': write failed", t->name);
        return gguf_writer_status(w, err);
    }
    w->next_tensor++;
    return CI_OK;
}

static enum ci_status check_all_data(struct gguf_writer *w, struct ci_err *err) {
    for (int64_t i = 0; i < w->n_t; i++)
        if (!w->t[i].data) {
            fail_with(w, CI_ERR_INVALID, "gguf writer: tensor '%.100s' has no data", w->t[i].name);
            break;
        }
    return gguf_writer_status(w, err);
}

enum ci_status gguf_writer_write_file(struct gguf_writer *w, const char *path, struct ci_err *err) {
    enum ci_status s = check_all_data(w, err);
    FILE *f = NULL;
    if (s)
        return s;
    if (!(f = fopen(path, "wb")))
        return ci_err_set(err, CI_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if ((s = gguf_writer_write_header(w, f, err)))
        goto fail;
    for (int64_t i = 0; i < w->n_t; i++)
        if ((s = gguf_writer_write_tensor_data(w, f, i, w->t[i].data, err)))
            goto fail;
    if (fflush(f) != 0 || ferror(f)) {
        s = ci_err_set(err, CI_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        goto fail;
    }
fail:
    if (fclose(f) != 0 && s == CI_OK)
        s = ci_err_set(err, CI_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (s)
        remove(path);
    return s;
}

enum ci_status gguf_writer_write_mem(struct gguf_writer *w, uint8_t **out, uint64_t *size,
                                     struct ci_err *err) {
    struct buf b = {0};
    uint8_t *img = NULL;
    enum ci_status s = check_all_data(w, err);
    *out = NULL;
    *size = 0;
    if (s)
        goto fail;
    if ((s = build_header(w, &b))) {
        gguf_writer_status(w, err);
        goto fail;
    }
    uint64_t hdr = align_up(b.n, w->alignment), total = hdr, data = 0;
    for (int64_t i = 0; i < w->n_t; i++)
        data += align_up(w->t[i].nbytes, w->alignment);
    if (!ci_add_u64(total, data, &total) || total > SIZE_MAX || !(img = ci_calloc(1, (size_t)total))) {
        fail_with(w, CI_ERR_NOMEM, "gguf writer: out of memory for a %" PRIu64 "-byte image", total);
        s = gguf_writer_status(w, err);
        goto fail;
    }
    memcpy(img, b.p, b.n);
    for (int64_t i = 0; i < w->n_t; i++)
        memcpy(img + hdr + w->t[i].offset, w->t[i].data, (size_t)w->t[i].nbytes);
    *out = img;
    *size = total;
fail:
    ci_free(b.p);
    return s;
}
