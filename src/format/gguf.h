/* GGUF v2/v3 reader over a read-only mapping.  gguf_open validates the whole file before returning: header,
 * every key/value (every type, nested arrays, string lengths), every tensor info (name, dims, type, offset,
 * size, alignment) against the file size with overflow-checked 64-bit arithmetic.  After a successful open,
 * every view handed out lies inside the mapping.  Vocab-only files (tensor count 0, no trailing padding, so
 * the aligned data start may lie past EOF) are accepted.
 *
 * Ownership: struct gguf owns the mapping (or borrows the caller's bytes for gguf_open_mem); every pointer it
 * hands out (strings, array data, tensor data) is a view valid until gguf_free. */
#ifndef CINFER_FORMAT_GGUF_H
#define CINFER_FORMAT_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/quant.h"

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT,
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH   8     // arrays nested in one value (a plain array value is depth 1)
#define GGUF_MAX_NAME_BYTES    256   // tensor name length (llama.cpp's limit is 64; we read longer ones)
#define GGUF_MAX_KEY_BYTES     65536 // key length
#define GGUF_MAX_DIMS          4

/* A string view into the file: not NUL-terminated. */
struct gguf_str {
    const char *data;
    uint64_t len;
};

/* An array value.  For numeric/bool element types, data points at n packed little-endian elements.  For
 * strings and nested arrays, elements are reached through gguf_arr_str / gguf_arr_arr. */
struct gguf_arr {
    const struct gguf *g;
    enum gguf_type elem_type;
    uint64_t n;
    const uint8_t *data;          // first element's bytes in the file
    const uint64_t *elem_offsets; // for STRING/ARRAY elements: [n] offsets from data (NULL otherwise)
};

struct gguf;

enum ci_status gguf_open(const char *path, struct gguf **out, struct ci_err *err);
/* Parses caller-owned bytes (must outlive the struct gguf).  Used by tests and fuzzers. */
/* True once a read of the mapped file hit a part that was truncated away (see ci_mapfile_damaged). */
bool gguf_file_damaged(const struct gguf *g);
/* ci_mapfile_release on the file's mapping (tensor bytes no longer read in place). */
void gguf_release(const struct gguf *g, const void *p, uint64_t n);
/* ci_mapfile_read on the file's mapping: the n bytes at p into dst (a memcpy for gguf_open_mem's bytes). */
void gguf_read(const struct gguf *g, const void *p, uint64_t n, void *dst);
/* gguf_open without reading the whole file ahead unless read_ahead; gguf_will_need reads [p, p + n) ahead. */
enum ci_status gguf_open_ex(const char *path, bool read_ahead, struct gguf **out, struct ci_err *err);
void gguf_will_need(const struct gguf *g, const void *p, uint64_t n);
enum ci_status gguf_open_mem(const void *data, uint64_t size, struct gguf **out, struct ci_err *err);
void gguf_free(struct gguf *g);

uint32_t gguf_version(const struct gguf *g);
uint64_t gguf_alignment(const struct gguf *g);
uint64_t gguf_data_offset(const struct gguf *g); // aligned start of tensor data
uint64_t gguf_file_size(const struct gguf *g);

/* Key/values. */
int64_t gguf_n_kv(const struct gguf *g);
int64_t gguf_find_key(const struct gguf *g, const char *key); // -1 if absent
const char *gguf_kv_key(const struct gguf *g, int64_t i);     // NUL-terminated copy
enum gguf_type gguf_kv_type(const struct gguf *g, int64_t i);
/* The encoded value bytes of key/value i as stored in the file (after its type tag), for copying a value
 * verbatim into a new file (gguf_writer_copy_kv). */
const uint8_t *gguf_kv_raw(const struct gguf *g, int64_t i, uint64_t *n_bytes);
/* The array value of key/value i; CI_ERR_FORMAT (no message) if it is not an array. */
enum ci_status gguf_kv_arr(const struct gguf *g, int64_t i, struct gguf_arr *out);

/* Typed getters by key.  CI_ERR_INVALID (message naming the key) when the key is absent, CI_ERR_FORMAT when
 * its type does not fit.  gguf_get_int accepts any integer type whose value fits int64; gguf_get_f32 accepts
 * FLOAT32/FLOAT64; gguf_get_bool accepts BOOL.  The *_opt forms leave *out unchanged and return CI_OK when
 * the key is absent. */
enum ci_status gguf_get_int(const struct gguf *g, const char *key, int64_t *out, struct ci_err *err);
enum ci_status gguf_get_f32(const struct gguf *g, const char *key, float *out, struct ci_err *err);
enum ci_status gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct ci_err *err);
enum ci_status gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct ci_err *err);
enum ci_status gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out, struct ci_err *err);
enum ci_status gguf_get_int_opt(const struct gguf *g, const char *key, int64_t *out, struct ci_err *err);
enum ci_status gguf_get_f32_opt(const struct gguf *g, const char *key, float *out, struct ci_err *err);
enum ci_status gguf_get_bool_opt(const struct gguf *g, const char *key, bool *out, struct ci_err *err);
enum ci_status gguf_get_str_opt(const struct gguf *g, const char *key, struct gguf_str *out,
                                struct ci_err *err);
enum ci_status gguf_get_arr_opt(const struct gguf *g, const char *key, struct gguf_arr *out,
                                struct ci_err *err);

/* Array element access; i < arr->n is the caller's responsibility (CI_ASSERTed). */
struct gguf_str gguf_arr_str(const struct gguf_arr *arr, uint64_t i);
struct gguf_arr gguf_arr_arr(const struct gguf_arr *arr, uint64_t i);
/* Numeric element i converted to double / int64 (any numeric element type, bool as 0/1).  gguf_arr_i64
 * truncates floats toward zero and saturates values outside int64 (NaN gives 0). */
double gguf_arr_f64(const struct gguf_arr *arr, uint64_t i);
int64_t gguf_arr_i64(const struct gguf_arr *arr, uint64_t i);

/* Tensors: views with validated type, dims, size and in-file data. */
int64_t gguf_n_tensors(const struct gguf *g);
int64_t gguf_find_tensor(const struct gguf *g, const char *name); // -1 if absent
const struct ci_tensor *gguf_tensor(const struct gguf *g, int64_t i);

const char *gguf_type_name(enum gguf_type t);
/* The rule keys and tensor names follow: non-empty, valid UTF-8 without NUL bytes (length limits apart). */
bool gguf_name_valid(const char *s, uint64_t n);

#endif
