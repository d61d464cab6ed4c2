/* GGUF v2/v3 reader.  gguf_open_mem validates every byte of the header before handing anything out:
 *   magic, version, counts (bounded by the bytes left before any allocation), every key/value (all 13
 *   types, arrays nested up to GGUF_MAX_DEPTH), general.alignment, every tensor info (name, dims, type,
 *   offset alignment, size with overflow checks, range inside the file, no overlaps, unique names).
 * Parsing the key/values takes two passes over the same code: the first validates and counts the element
 * offsets that string and nested arrays need, the second fills one exactly-sized offsets pool, so a hostile
 * count can never trigger a large allocation.
 *
 * Ownership: struct gguf owns its mapping (gguf_open) or borrows the caller's bytes (gguf_open_mem), owns
 * NUL-terminated copies of every key and tensor name, and the offsets pool; all views point into those. */
#include "format/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"
#include "core/mapfile.h"
#include "core/mem.h"
#include "core/utf8.h"

#define GGUF_MAGIC         "GGUF"
#define GGUF_MAX_DEPTH     8     // nesting of arrays inside a value (top-level array = depth 1)
#define GGUF_MAX_NAME      256   // tensor name bytes (llama.cpp uses 64; be lenient)
#define GGUF_MAX_KEY       65536 // key bytes
#define GGUF_MAX_DIMS      4
#define GGUF_MIN_KV_BYTES  14 // key len(8) + 1 key byte + type(4) + 1 value byte
#define GGUF_MIN_TI_BYTES  33 // name len(8) + 1 byte + n_dims(4) + ne(8) + type(4) + offset(8)
#define GGUF_ARR_HDR_BYTES 12 // elem type(4) + count(8)
#define NO_POOL            UINT64_MAX

struct kv {
    char *key; // NUL-terminated copy
    uint64_t key_len;
    enum gguf_type type;
    const uint8_t *val; // value bytes in the file
    uint64_t val_len;
    struct gguf_arr arr; // type == ARRAY
};

/* Open-addressed name → index table (keys, tensor names).  slots hold index + 1; 0 is empty. */
struct name_index {
    int64_t *slots;
    uint64_t mask;
};

struct gguf {
    struct ci_mapfile map; // owned mapping (unused for gguf_open_mem)
    const uint8_t *base;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    struct kv *kv; // [n_kv]
    int64_t n_tensors;
    struct ci_tensor *tensors; // [n_tensors]
    uint64_t *tensor_offset;   // [n_tensors] relative to data_offset
    uint64_t *pool;            // element offsets of string/array arrays (see gguf_arr_arr for the layout)
    uint64_t pool_n;
    struct name_index key_index, tensor_index;
};

/* Parse state: the current key (for messages) and the pool being counted (pool == NULL) or filled. */
struct parser {
    struct gguf *g;
    struct ci_err *err;
    const char *what; // "key" or "tensor"
    char name[80];    // printable, truncated copy of the current key / tensor name
    uint64_t *pool;
    uint64_t pool_n;
};

static const uint8_t type_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,  [GGUF_TYPE_UINT16] = 2,  [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4, [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_STRING] = 0,  [GGUF_TYPE_ARRAY] = 0, [GGUF_TYPE_UINT64] = 8,  [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

const char *gguf_type_name(enum gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        [GGUF_TYPE_UINT8] = "u8",    [GGUF_TYPE_INT8] = "i8",    [GGUF_TYPE_UINT16] = "u16",
        [GGUF_TYPE_INT16] = "i16",   [GGUF_TYPE_UINT32] = "u32", [GGUF_TYPE_INT32] = "i32",
        [GGUF_TYPE_FLOAT32] = "f32", [GGUF_TYPE_BOOL] = "bool",  [GGUF_TYPE_STRING] = "string",
        [GGUF_TYPE_ARRAY] = "array", [GGUF_TYPE_UINT64] = "u64", [GGUF_TYPE_INT64] = "i64",
        [GGUF_TYPE_FLOAT64] = "f64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

static bool is_numeric(enum gguf_type t) {
    return (unsigned)t < GGUF_TYPE_COUNT && type_size[t] != 0;
}

// Smallest encoding of one element, to bound counts by the bytes left.
static uint64_t min_elem_bytes(enum gguf_type t) {
    if (t == GGUF_TYPE_STRING)
        return 8;
    if (t == GGUF_TYPE_ARRAY)
        return GGUF_ARR_HDR_BYTES;
    return type_size[t];
}

static uint64_t rd_u64_at(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t rd_u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

// A printable copy of outside bytes for messages: truncated to fit cap with "...", control/NUL bytes shown as
// '?'.
static void printable(char *dst, size_t cap, const uint8_t *s, uint64_t n) {
    size_t k = 0, lim = cap - 4;
    for (uint64_t i = 0; i < n && k < lim; i++)
        dst[k++] = (s[i] < 0x20 || s[i] == 0x7f) ? '?' : (char)s[i];
    if (n > lim) {
        dst[k - 3] = dst[k - 2] = dst[k - 1] = '.';
    }
    dst[k] = '\0';
}

bool gguf_name_valid(const char *s, uint64_t n) {
    // Strict UTF-8 without NUL bytes (a NUL would cut the name short wherever it is used as a C string).
    return n > 0 && n <= SIZE_MAX && !memchr(s, 0, (size_t)n) &&
           utf8_valid_strict((const unsigned char *)s, (size_t)n);
}

static enum ci_status perr(struct parser *p, enum ci_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fails with "<what> '<name>': <message>" (or just the message outside any key/tensor). */
static enum ci_status perr(struct parser *p, enum ci_status code, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->what)
        return ci_err_set(p->err, code, "%s '%s': %s", p->what, p->name, msg);
    return ci_err_set(p->err, code, "%s", msg);
}

/* ---- name index ---- */

static uint64_t name_hash(const char *s, size_t n) {
    return ci_hash_bytes(0x9e3779b97f4a7c15ull, s, n);
}

static enum ci_status index_init(struct name_index *ix, int64_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    ix->slots = ci_calloc((size_t)cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? CI_OK : CI_ERR_NOMEM;
}

static const char *name_at(const struct gguf *g, const struct name_index *ix, int64_t i) {
    return ix == &g->key_index ? g->kv[i].key : g->tensors[i].name;
}

/* Slot holding name, or the empty slot where it would go. */
static uint64_t index_slot(const struct gguf *g, const struct name_index *ix, const char *name, size_t n) {
    uint64_t h = name_hash(name, n) & ix->mask;
    while (ix->slots[h] != 0) {
        const char *s = name_at(g, ix, ix->slots[h] - 1);
        if (strlen(s) == n && memcmp(s, name, n) == 0)
            break;
        h = (h + 1) & ix->mask;
    }
    return h;
}

static int64_t index_find(const struct gguf *g, const struct name_index *ix, const char *name) {
    if (!ix->slots || !name)
        return -1;
    return ix->slots[index_slot(g, ix, name, strlen(name))] - 1;
}

/* ---- values ---- */

static enum ci_status read_value(struct parser *p, struct ci_reader *r, enum gguf_type t, int depth,
                                 uint64_t *pool_idx);

/* An array value (after its type tag): elem type, count, elements.  With p->pool set, reserves and fills the
 * element offsets; *pool_idx gets where they start (NO_POOL for numeric elements). */
static enum ci_status read_array(struct parser *p, struct ci_reader *r, int depth, uint64_t *pool_idx) {
    uint32_t et;
    uint64_t n;
    *pool_idx = NO_POOL;
    if (depth > GGUF_MAX_DEPTH)
        return perr(p, CI_ERR_FORMAT, "arrays nested deeper than %d", GGUF_MAX_DEPTH);
    if (ci_rd_u32(r, &et) || ci_rd_u64(r, &n))
        return perr(p, CI_ERR_FORMAT, "array header truncated at offset %" PRIu64, r->pos);
    if (et >= GGUF_TYPE_COUNT)
        return perr(p, CI_ERR_FORMAT, "array of unknown value type %" PRIu32, et);
    uint64_t minb = min_elem_bytes((enum gguf_type)et);
    if (n > ci_reader_left(r) / minb)
        return perr(p, CI_ERR_FORMAT, "array of %" PRIu64 " %ss exceeds file size", n,
                    gguf_type_name((enum gguf_type)et));
    if (is_numeric((enum gguf_type)et))
        return ci_rd_skip(r, n * minb); // fits: checked just above
    const uint64_t data_pos = r->pos;
    uint64_t per = et == GGUF_TYPE_ARRAY ? 2 : 1; // string: offset; array: offset + inner pool index
    uint64_t base = p->pool_n;
    p->pool_n += per * n; // bounded by file size / 4: no overflow
    if (p->pool)
        *pool_idx = base;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = r->pos - data_pos, inner = NO_POOL;
        enum ci_status s = read_value(p, r, (enum gguf_type)et, depth, &inner);
        if (s)
            return s;
        if (p->pool) {
            p->pool[base + i] = off;
            if (et == GGUF_TYPE_ARRAY)
                p->pool[base + n + i] = inner;
        }
    }
    return CI_OK;
}

static enum ci_status read_value(struct parser *p, struct ci_reader *r, enum gguf_type t, int depth,
                                 uint64_t *pool_idx) {
    *pool_idx = NO_POOL;
    if (t == GGUF_TYPE_STRING) {
        uint64_t len;
        if (ci_rd_u64(r, &len))
            return perr(p, CI_ERR_FORMAT, "string length truncated at offset %" PRIu64, r->pos);
        if (ci_rd_skip(r, len))
            return perr(p, CI_ERR_FORMAT,
                        "string of %" PRIu64 " bytes at offset %" PRIu64 " exceeds file size", len, r->pos);
        return CI_OK;
    }
    if (t == GGUF_TYPE_ARRAY)
        return read_array(p, r, depth + 1, pool_idx);
    if ((unsigned)t >= GGUF_TYPE_COUNT)
        return perr(p, CI_ERR_FORMAT, "unknown value type %u", (unsigned)t);
    if (ci_rd_skip(r, type_size[t]))
        return perr(p, CI_ERR_FORMAT, "%s value truncated at offset %" PRIu64, gguf_type_name(t), r->pos);
    return CI_OK;
}

/* The array whose header (elem type, count) is at hdr; pool_idx locates its element offsets (if any). */
static struct gguf_arr make_arr(const struct gguf *g, const uint8_t *hdr, uint64_t pool_idx) {
    struct gguf_arr a;
    a.g = g;
    a.elem_type = (enum gguf_type)rd_u32_at(hdr);
    a.n = rd_u64_at(hdr + 4);
    a.data = hdr + GGUF_ARR_HDR_BYTES;
    a.elem_offsets = NULL;
    if ((a.elem_type == GGUF_TYPE_STRING || a.elem_type == GGUF_TYPE_ARRAY) && a.n) {
        CI_ASSERT(pool_idx < g->pool_n);
        a.elem_offsets = g->pool + pool_idx;
    }
    return a;
}

/* Pass 1 over the key/values: validates them, records keys and value spans, counts the pool. */
static enum ci_status parse_kvs(struct parser *p, struct ci_reader *r) {
    struct gguf *g = p->g;
    enum ci_status s = CI_OK;
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct kv *kv = &g->kv[i];
        uint64_t klen;
        const uint8_t *kb;
        p->what = NULL;
        if (ci_rd_u64(r, &klen))
            return perr(p, CI_ERR_FORMAT, "key %" PRId64 " of %" PRId64 ": truncated at offset %" PRIu64, i,
                        g->n_kv, r->pos);
        if (klen == 0)
            return perr(p, CI_ERR_FORMAT, "key %" PRId64 " is empty", i);
        if (klen > GGUF_MAX_KEY || ci_rd_view(r, klen, &kb))
            return perr(p, CI_ERR_FORMAT, "key %" PRId64 ": length %" PRIu64 " exceeds %s", i, klen,
                        klen > GGUF_MAX_KEY ? "the key size limit" : "file size");
        printable(p->name, sizeof p->name, kb, klen);
        p->what = "key";
        if (!gguf_name_valid((const char *)kb, klen))
            return perr(p, CI_ERR_FORMAT, "key is not valid UTF-8 (or holds a NUL)");
        kv->key = ci_malloc((size_t)klen + 1);
        if (!kv->key)
            return perr(p, CI_ERR_NOMEM, "out of memory");
        memcpy(kv->key, kb, (size_t)klen);
        kv->key[klen] = '\0';
        kv->key_len = klen;
        uint64_t slot = index_slot(g, &g->key_index, kv->key, (size_t)klen);
        if (g->key_index.slots[slot] != 0)
            return perr(p, CI_ERR_FORMAT, "duplicate key");
        g->key_index.slots[slot] = i + 1;
        uint32_t t;
        if (ci_rd_u32(r, &t))
            return perr(p, CI_ERR_FORMAT, "value type truncated at offset %" PRIu64, r->pos);
        if (t >= GGUF_TYPE_COUNT)
            return perr(p, CI_ERR_FORMAT, "unknown value type %" PRIu32, t);
        kv->type = (enum gguf_type)t;
        kv->val = r->base + r->pos;
        uint64_t start = r->pos, unused;
        s = read_value(p, r, kv->type, 0, &unused);
        if (s)
            return s;
        kv->val_len = r->pos - start;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_TYPE_UINT32)
                return perr(p, CI_ERR_FORMAT, "must be u32, not %s", gguf_type_name(kv->type));
            uint32_t a = rd_u32_at(kv->val);
            if (a == 0 || (a & (a - 1)) != 0)
                return perr(p, CI_ERR_FORMAT, "alignment %" PRIu32 " is not a power of two", a);
            g->alignment = a;
        }
    }
    p->what = NULL;
    return CI_OK;
}

/* Pass 2: fills the pool (exactly sized by pass 1) and the array views. */
static enum ci_status fill_arrays(struct parser *p) {
    struct gguf *g = p->g;
    if (p->pool_n) {
        size_t bytes;
        if (!ci_mul_size((size_t)p->pool_n, sizeof *g->pool, &bytes) || !(g->pool = ci_malloc(bytes)))
            return perr(p, CI_ERR_NOMEM, "out of memory for %" PRIu64 " array element offsets", p->pool_n);
    }
    g->pool_n = p->pool_n;
    p->pool = g->pool;
    p->pool_n = 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct kv *kv = &g->kv[i];
        if (kv->type != GGUF_TYPE_ARRAY)
            continue;
        struct ci_reader r;
        uint64_t idx;
        ci_reader_init(&r, kv->val, kv->val_len);
        enum ci_status s = read_value(p, &r, GGUF_TYPE_ARRAY, 0, &idx);
        CI_ASSERT(s == CI_OK && r.pos == kv->val_len); // pass 1 validated these bytes
        kv->arr = make_arr(g, kv->val, idx);
    }
    CI_ASSERT(p->pool_n == g->pool_n);
    return CI_OK;
}

/* ---- tensors ---- */

struct span {
    uint64_t begin, end;
    int64_t i;
};

static int span_cmp(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static enum ci_status parse_tensor_info(struct parser *p, struct ci_reader *r, int64_t i) {
    struct gguf *g = p->g;
    struct ci_tensor *t = &g->tensors[i];
    uint64_t nlen;
    const uint8_t *nb;
    p->what = NULL;
    if (ci_rd_u64(r, &nlen))
        return perr(p, CI_ERR_FORMAT, "tensor info %" PRId64 " of %" PRId64 ": truncated at offset %" PRIu64,
                    i, g->n_tensors, r->pos);
    if (nlen == 0 || nlen > GGUF_MAX_NAME)
        return perr(p, CI_ERR_FORMAT, "tensor info %" PRId64 ": name length %" PRIu64 " not in 1..%d", i,
                    nlen, GGUF_MAX_NAME);
    if (ci_rd_view(r, nlen, &nb))
        return perr(p, CI_ERR_FORMAT, "tensor info %" PRId64 ": name truncated at offset %" PRIu64, i,
                    r->pos);
    printable(p->name, sizeof p->name, nb, nlen);
    p->what = "tensor";
    if (!gguf_name_valid((const char *)nb, nlen))
        return perr(p, CI_ERR_FORMAT, "name is not valid UTF-8 (or holds a NUL)");
    char *name = ci_malloc((size_t)nlen + 1);
    if (!name)
        return perr(p, CI_ERR_NOMEM, "out of memory");
    memcpy(name, nb, (size_t)nlen);
    name[nlen] = '\0';
    t->name = name;
    uint64_t slot = index_slot(g, &g->tensor_index, name, (size_t)nlen);
    if (g->tensor_index.slots[slot] != 0)
        return perr(p, CI_ERR_FORMAT, "duplicate tensor name");
    g->tensor_index.slots[slot] = i + 1;

    uint32_t n_dims, type;
    if (ci_rd_u32(r, &n_dims))
        return perr(p, CI_ERR_FORMAT, "info truncated at offset %" PRIu64, r->pos);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return perr(p, CI_ERR_FORMAT, "n_dims %" PRIu32 " not in 1..%d", n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < (int)n_dims && ci_rd_u64(r, &ne))
            return perr(p, CI_ERR_FORMAT, "info truncated at offset %" PRIu64, r->pos);
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return perr(p, CI_ERR_FORMAT, "ne[%d] = %" PRIu64 " is out of range", d, ne);
        if (n_elem > (uint64_t)INT64_MAX / ne)
            return perr(p, CI_ERR_FORMAT, "element count overflows int64 at ne[%d] = %" PRIu64, d, ne);
        n_elem *= ne;
        t->ne[d] = (int64_t)ne;
    }
    if (ci_rd_u32(r, &type) || ci_rd_u64(r, &g->tensor_offset[i]))
        return perr(p, CI_ERR_FORMAT, "info truncated at offset %" PRIu64, r->pos);
    const struct ci_type_traits *tt = ci_type_traits(type);
    if (!tt)
        return perr(p, CI_ERR_FORMAT, "unknown tensor type %" PRIu32, type);
    t->type = type;
    if ((uint64_t)t->ne[0] % tt->block_size != 0)
        return perr(p, CI_ERR_FORMAT, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32,
                    t->ne[0], tt->name, tt->block_size);
    if (!ci_row_bytes(type, (uint64_t)t->ne[0], &t->row_bytes) ||
        !ci_mul_u64(t->row_bytes, n_elem / (uint64_t)t->ne[0], &t->nbytes))
        return perr(p, CI_ERR_FORMAT, "size overflows 64 bits");
    if (g->tensor_offset[i] % g->alignment != 0)
        return perr(p, CI_ERR_FORMAT, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                    g->tensor_offset[i], g->alignment);
    return CI_OK;
}

/* The alignment a tensor's data needs for its elements to be read in place: the largest power of two (at most
 * 8) dividing the block size, so that every block keeps the first one's alignment (F32 4, F16 2, Q8_0 2,
 * Q4_K 8, MXFP4 1).  A file whose general.alignment is below it (llama.cpp accepts any power of two) could put
 * an F32 tensor at an odd address, where the kernels' loads would be undefined behaviour. */
static uint64_t data_alignment(uint32_t type) {
    uint64_t a = 1;
    const struct ci_type_traits *tt = ci_type_traits(type);
    while (a < 8 && tt->type_size % (2 * a) == 0)
        a *= 2;
    return a;
}

/* Checks every tensor's data range against the file and the others, then points the views at it. */
static enum ci_status place_tensors(struct parser *p) {
    struct gguf *g = p->g;
    enum ci_status s = CI_OK;
    struct span *sp = NULL;
    if (g->n_tensors == 0)
        return CI_OK;
    sp = ci_calloc((size_t)g->n_tensors, sizeof *sp);
    if (!sp)
        return perr(p, CI_ERR_NOMEM, "out of memory");
    p->what = "tensor";
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct ci_tensor *t = &g->tensors[i];
        uint64_t begin, end;
        snprintf(p->name, sizeof p->name, "%.76s", t->name);
        if (!ci_add_u64(g->data_offset, g->tensor_offset[i], &begin) || !ci_add_u64(begin, t->nbytes, &end)) {
            s = perr(p, CI_ERR_FORMAT, "offset %" PRIu64 " + size %" PRIu64 " overflows", g->tensor_offset[i],
                     t->nbytes);
            goto fail;
        }
        if (end > g->size) {
            s = perr(p, CI_ERR_FORMAT,
                     "data [%" PRIu64 ", %" PRIu64 ") past end of file (%" PRIu64 " bytes): %s, %" PRIu64
                     " bytes",
                     begin, end, g->size, ci_type_name(t->type), t->nbytes);
            goto fail;
        }
        uint64_t need = data_alignment(t->type);
        if ((uintptr_t)(g->base + begin) % need != 0) {
            s = perr(p, CI_ERR_FORMAT,
                     "data at offset %" PRIu64 " is not aligned to %" PRIu64 " bytes, as %s blocks need "
                     "(general.alignment is %" PRIu64 ")",
                     begin, need, ci_type_name(t->type), g->alignment);
            goto fail;
        }
        t->data = g->base + begin;
        sp[i] = (struct span){begin, end, i};
    }
    qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
    for (int64_t k = 1; k < g->n_tensors; k++) {
        if (sp[k].begin < sp[k - 1].end) {
            snprintf(p->name, sizeof p->name, "%.76s", g->tensors[sp[k].i].name);
            s = perr(p, CI_ERR_FORMAT,
                     "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%.64s' [%" PRIu64 ", %" PRIu64 ")",
                     sp[k].begin, sp[k].end, g->tensors[sp[k - 1].i].name, sp[k - 1].begin, sp[k - 1].end);
            goto fail;
        }
    }
fail:
    ci_free(sp);
    return s;
}

static enum ci_status parse(struct gguf *g, struct ci_err *err) {
    struct parser p = {.g = g, .err = err};
    struct ci_reader r;
    char magic[4];
    uint64_t n_tensors, n_kv;
    enum ci_status s;
    ci_reader_init(&r, g->base, g->size);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (ci_rd_bytes(&r, magic, 4) || memcmp(magic, GGUF_MAGIC, 4) != 0)
        return perr(&p, CI_ERR_FORMAT, "not a GGUF file (bad magic)");
    if (ci_rd_u32(&r, &g->version))
        return perr(&p, CI_ERR_FORMAT, "header truncated (%" PRIu64 " bytes)", g->size);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return perr(&p, CI_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (g->version == 1)
        return perr(&p, CI_ERR_UNSUPPORTED, "GGUF version 1 is not supported (convert it to v3)");
    if (g->version != 2 && g->version != 3)
        return perr(&p, CI_ERR_UNSUPPORTED, "unsupported GGUF version %" PRIu32 " (want 2 or 3)", g->version);
    if (ci_rd_u64(&r, &n_tensors) || ci_rd_u64(&r, &n_kv))
        return perr(&p, CI_ERR_FORMAT, "header truncated (%" PRIu64 " bytes)", g->size);
    // Counts are bounded by the bytes left before anything is allocated for them.
    if (n_kv > ci_reader_left(&r) / GGUF_MIN_KV_BYTES)
        return perr(&p, CI_ERR_FORMAT, "kv_count %" PRIu64 " exceeds file size (%" PRIu64 " bytes)", n_kv,
                    g->size);
    if (n_tensors > ci_reader_left(&r) / GGUF_MIN_TI_BYTES)
        return perr(&p, CI_ERR_FORMAT, "tensor_count %" PRIu64 " exceeds file size (%" PRIu64 " bytes)",
                    n_tensors, g->size);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if ((n_kv && !(g->kv = ci_calloc((size_t)n_kv, sizeof *g->kv))) || index_init(&g->key_index, g->n_kv) ||
        index_init(&g->tensor_index, g->n_tensors) ||
        (n_tensors && (!(g->tensors = ci_calloc((size_t)n_tensors, sizeof *g->tensors)) ||
                       !(g->tensor_offset = ci_calloc((size_t)n_tensors, sizeof *g->tensor_offset)))))
        return perr(&p, CI_ERR_NOMEM, "out of memory");
    if ((s = parse_kvs(&p, &r)) || (s = fill_arrays(&p)))
        return s;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((s = parse_tensor_info(&p, &r, i)))
            return s;
    // Data starts at the next aligned offset; vocab-only files may end before it (no padding).
    g->data_offset = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    return place_tensors(&p);
}

enum ci_status gguf_open_mem(const void *data, uint64_t size, struct gguf **out, struct ci_err *err) {
    enum ci_status s;
    struct gguf *g = ci_calloc(1, sizeof *g);
    *out = NULL;
    if (!g)
        return ci_err_set(err, CI_ERR_NOMEM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    if ((s = parse(g, err))) {
        ci_err_prefix(err, "gguf");
        goto fail;
    }
    *out = g;
    return CI_OK;
fail:
    gguf_free(g);
    return s;
}

enum ci_status gguf_open(const char *path, struct gguf **out, struct ci_err *err) {
    return gguf_open_ex(path, true, out, err);
}

enum ci_status gguf_open_ex(const char *path, bool read_ahead, struct gguf **out, struct ci_err *err) {
    struct ci_mapfile m;
    enum ci_status s;
    *out = NULL;
    if ((s = ci_mapfile_open_ex(&m, path, read_ahead, err)))
        return s;
    struct gguf *g = ci_calloc(1, sizeof *g);
    if (!g) {
        ci_mapfile_close(&m);
        return ci_err_set(err, CI_ERR_NOMEM, "%s: out of memory", path);
    }
    g->map = m;
    g->base = m.data;
    g->size = m.size;
    if ((s = parse(g, err))) {
        ci_err_prefix(err, "%s", path);
        goto fail;
    }
    *out = g;
    return CI_OK;
fail:
    gguf_free(g);
    return s;
}

bool gguf_file_damaged(const struct gguf *g) {
    return ci_mapfile_damaged(&g->map);
}

void gguf_will_need(const struct gguf *g, const void *p, uint64_t n) {
    ci_mapfile_will_need(&g->map, p, n);
}

void gguf_release(const struct gguf *g, const void *p, uint64_t n) {
    ci_mapfile_release(&g->map, p, n);
}

void gguf_read(const struct gguf *g, const void *p, uint64_t n, void *dst) {
    ci_mapfile_read(&g->map, p, n, dst);
}

void gguf_free(struct gguf *g) {
    if (!g)
        return;
    for (int64_t i = 0; g->kv && i < g->n_kv; i++)
        ci_free(g->kv[i].key);
    for (int64_t i = 0; g->tensors && i < g->n_tensors; i++)
        ci_free((void *)(uintptr_t)g->tensors[i].name);
    ci_free(g->kv);
    ci_free(g->tensors);
    ci_free(g->tensor_offset);
    ci_free(g->pool);
    ci_free(g->key_index.slots);
    ci_free(g->tensor_index.slots);
    ci_mapfile_close(&g->map);
    ci_free(g);
}

/* ---- accessors ---- */

uint32_t gguf_version(const struct gguf *g) {
    return g->version;
}
uint64_t gguf_alignment(const struct gguf *g) {
    return g->alignment;
}
uint64_t gguf_data_offset(const struct gguf *g) {
    return g->data_offset;
}
uint64_t gguf_file_size(const struct gguf *g) {
    return g->size;
}
int64_t gguf_n_kv(const struct gguf *g) {
    return g->n_kv;
}
int64_t gguf_find_key(const struct gguf *g, const char *key) {
    return index_find(g, &g->key_index, key);
}
const char *gguf_kv_key(const struct gguf *g, int64_t i) {
    CI_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}
enum gguf_type gguf_kv_type(const struct gguf *g, int64_t i) {
    CI_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].type;
}
const uint8_t *gguf_kv_raw(const struct gguf *g, int64_t i, uint64_t *n_bytes) {
    CI_ASSERT(i >= 0 && i < g->n_kv);
    *n_bytes = g->kv[i].val_len;
    return g->kv[i].val;
}
enum ci_status gguf_kv_arr(const struct gguf *g, int64_t i, struct gguf_arr *out) {
    CI_ASSERT(i >= 0 && i < g->n_kv);
    if (g->kv[i].type != GGUF_TYPE_ARRAY)
        return CI_ERR_FORMAT;
    *out = g->kv[i].arr;
    return CI_OK;
}

/* The key's entry, or an error naming it (absent: INVALID). */
static enum ci_status lookup(const struct gguf *g, const char *key, const struct kv **kv,
                             struct ci_err *err) {
    int64_t i = gguf_find_key(g, key);
    if (i < 0)
        return ci_err_set(err, CI_ERR_INVALID, "gguf: key '%s' not found", key);
    *kv = &g->kv[i];
    return CI_OK;
}

static enum ci_status wrong_type(const struct kv *kv, const char *want, struct ci_err *err) {
    return ci_err_set(err, CI_ERR_FORMAT, "gguf: key '%.100s' has type %s, expected %s", kv->key,
                      gguf_type_name(kv->type), want);
}

/* Numeric scalar at p of type t (validated) as int64; false if it is not an integer or does not fit. */
static bool scalar_i64(enum gguf_type t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_TYPE_UINT8:
        *out = p[0];
        return true;
    case GGUF_TYPE_INT8:
        *out = (int8_t)p[0];
        return true;
    case GGUF_TYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return true;
    }
    case GGUF_TYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return true;
    }
    case GGUF_TYPE_UINT32:
        *out = rd_u32_at(p);
        return true;
    case GGUF_TYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    case GGUF_TYPE_UINT64: {
        uint64_t v = rd_u64_at(p);
        if (v > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)v;
        return true;
    }
    case GGUF_TYPE_INT64:
        memcpy(out, p, 8);
        return true;
    default:
        return false;
    }
}

static double scalar_f64(enum gguf_type t, const uint8_t *p) {
    if (t == GGUF_TYPE_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (t == GGUF_TYPE_BOOL)
        return p[0] != 0;
    if (t == GGUF_TYPE_UINT64)
        return (double)rd_u64_at(p);
    int64_t v = 0;
    bool ok = scalar_i64(t, p, &v);
    CI_ASSERT(ok);
    return (double)v;
}

static bool is_int_type(enum gguf_type t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

enum ci_status gguf_get_int(const struct gguf *g, const char *key, int64_t *out, struct ci_err *err) {
    const struct kv *kv = NULL;
    enum ci_status s = lookup(g, key, &kv, err);
    if (s)
        return s;
    if (!is_int_type(kv->type))
        return wrong_type(kv, "an integer", err);
    if (!scalar_i64(kv->type, kv->val, out))
        return ci_err_set(err, CI_ERR_FORMAT, "gguf: key '%.100s': value %" PRIu64 " does not fit int64",
                          kv->key, rd_u64_at(kv->val));
    return CI_OK;
}

enum ci_status gguf_get_f32(const struct gguf *g, const char *key, float *out, struct ci_err *err) {
    const struct kv *kv = NULL;
    enum ci_status s = lookup(g, key, &kv, err);
    if (s)
        return s;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64)
        return wrong_type(kv, "f32 or f64", err);
    *out = (float)scalar_f64(kv->type, kv->val);
    return CI_OK;
}

enum ci_status gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct ci_err *err) {
    const struct kv *kv = NULL;
    enum ci_status s = lookup(g, key, &kv, err);
    if (s)
        return s;
    if (kv->type != GGUF_TYPE_BOOL)
        return wrong_type(kv, "bool", err);
    *out = kv->val[0] != 0;
    return CI_OK;
}

enum ci_status gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct ci_err *err) {
    const struct kv *kv = NULL;
    enum ci_status s = lookup(g, key, &kv, err);
    if (s)
        return s;
    if (kv->type != GGUF_TYPE_STRING)
        return wrong_type(kv, "string", err);
    out->len = rd_u64_at(kv->val);
    out->data = (const char *)kv->val + 8;
    return CI_OK;
}

enum ci_status gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out, struct ci_err *err) {
    const struct kv *kv = NULL;
    enum ci_status s = lookup(g, key, &kv, err);
    if (s)
        return s;
    if (kv->type != GGUF_TYPE_ARRAY)
        return wrong_type(kv, "array", err);
    *out = kv->arr;
    return CI_OK;
}

enum ci_status gguf_get_int_opt(const struct gguf *g, const char *key, int64_t *out, struct ci_err *err) {
    return gguf_find_key(g, key) < 0 ? CI_OK : gguf_get_int(g, key, out, err);
}
enum ci_status gguf_get_f32_opt(const struct gguf *g, const char *key, float *out, struct ci_err *err) {
    return gguf_find_key(g, key) < 0 ? CI_OK : gguf_get_f32(g, key, out, err);
}
enum ci_status gguf_get_bool_opt(const struct gguf *g, const char *key, bool *out, struct ci_err *err) {
    return gguf_find_key(g, key) < 0 ? CI_OK : gguf_get_bool(g, key, out, err);
}
enum ci_status gguf_get_str_opt(const struct gguf *g, const char *key, struct gguf_str *out,
                                struct ci_err *err) {
    return gguf_find_key(g, key) < 0 ? CI_OK : gguf_get_str(g, key, out, err);
}
enum ci_status gguf_get_arr_opt(const struct gguf *g, const char *key, struct gguf_arr *out,
                                struct ci_err *err) {
    return gguf_find_key(g, key) < 0 ? CI_OK : gguf_get_arr(g, key, out, err);
}

struct gguf_str gguf_arr_str(const struct gguf_arr *arr, uint64_t i) {
    CI_ASSERT(arr->elem_type == GGUF_TYPE_STRING && i < arr->n);
    const uint8_t *p = arr->data + arr->elem_offsets[i];
    struct gguf_str s = {(const char *)p + 8, rd_u64_at(p)};
    return s;
}

/* For ARRAY elements, elem_offsets holds 2n entries: [0, n) offsets of each inner array's header from data,
 * [n, 2n) the pool index of each inner array's own element offsets (NO_POOL for numeric inner arrays). */
struct gguf_arr gguf_arr_arr(const struct gguf_arr *arr, uint64_t i) {
    CI_ASSERT(arr->elem_type == GGUF_TYPE_ARRAY && i < arr->n);
    return make_arr(arr->g, arr->data + arr->elem_offsets[i], arr->elem_offsets[arr->n + i]);
}

double gguf_arr_f64(const struct gguf_arr *arr, uint64_t i) {
    CI_ASSERT(is_numeric(arr->elem_type) && i < arr->n);
    return scalar_f64(arr->elem_type, arr->data + i * type_size[arr->elem_type]);
}

int64_t gguf_arr_i64(const struct gguf_arr *arr, uint64_t i) {
    CI_ASSERT(is_numeric(arr->elem_type) && i < arr->n);
    const uint8_t *p = arr->data + i * type_size[arr->elem_type];
    int64_t v;
    if (scalar_i64(arr->elem_type, p, &v))
        return v;
    if (arr->elem_type == GGUF_TYPE_UINT64)
        return INT64_MAX; // saturate values above INT64_MAX
    if (arr->elem_type == GGUF_TYPE_BOOL)
        return p[0] != 0;
    // Floats: truncate toward zero, saturating (NaN → 0) so the conversion is always defined.
    double d = scalar_f64(arr->elem_type, p);
    if (!(d == d))
        return 0;
    if (d >= 9223372036854775807.0)
        return INT64_MAX;
    if (d <= -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)d;
}

int64_t gguf_n_tensors(const struct gguf *g) {
    return g->n_tensors;
}
int64_t gguf_find_tensor(const struct gguf *g, const char *name) {
    return index_find(g, &g->tensor_index, name);
}
const struct ci_tensor *gguf_tensor(const struct gguf *g, int64_t i) {
    CI_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}
