/* GGUF v3 writer: collects key/values and tensor infos, then writes a file that llama.cpp accepts (every
 * tensor's data offset a multiple of the alignment, the data section aligned, zero padding after each
 * tensor's data).  Used by `cinfer convert`, `cinfer synth` and the tests.
 *
 * Two ways to write:
 *  - whole file: add tensors with their data (borrowed: the pointer must stay valid until the write), then
 *    gguf_writer_write_file (or gguf_writer_write_mem for an in-memory image);
 *  - streaming, for models too big to hold in memory: add tensors with data = NULL, call
 *    gguf_writer_write_header, then gguf_writer_write_tensor_data for tensor 0, 1, ... in order.
 *
 * Errors are sticky: a failing setter (bad key, duplicate tensor name, out of memory) returns its status and
 * the writer remembers the first failure, which every later write reports.  Keys are unique: setting a key
 * again replaces its value (and keeps its position).  Keys and strings are copied; array data is copied.
 * A writer writes one file by streaming or write_file (write_mem may be called any number of times). */
#ifndef CINFER_FORMAT_GGUF_WRITE_H
#define CINFER_FORMAT_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/status.h"
#include "format/gguf.h"

struct gguf_writer;

/* A (possibly nested) array value for gguf_writer_set_arr_v.
 *   numeric/bool elements: data points at n packed elements of that type (bool: 1 byte each);
 *   GGUF_TYPE_STRING: data is const char *const [n]; lens[n] gives their byte lengths (NULL: strlen);
 *   GGUF_TYPE_ARRAY: data is const struct gguf_warr [n]. */
struct gguf_warr {
    enum gguf_type elem_type;
    uint64_t n;
    const void *data;
    const size_t *lens;
};

/* NULL when out of memory. */
struct gguf_writer *gguf_writer_create(void);
void gguf_writer_free(struct gguf_writer *w);

/* The first error recorded (CI_OK if none); err (may be NULL) gets its message. */
enum ci_status gguf_writer_status(const struct gguf_writer *w, struct ci_err *err);

enum ci_status gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
enum ci_status gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
enum ci_status gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
enum ci_status gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
/* Setting "general.alignment" (u32, a power of two) also sets the alignment used for tensor data. */
enum ci_status gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
enum ci_status gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
enum ci_status gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
enum ci_status gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
enum ci_status gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
enum ci_status gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
enum ci_status gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
enum ci_status gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
enum ci_status gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *v, size_t len);
/* Numeric (or bool) array of n packed elements. */
enum ci_status gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                                   const void *data, uint64_t n);
/* Array of n strings; lens may be NULL (NUL-terminated strings). */
enum ci_status gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                                       const size_t *lens, uint64_t n);
/* Any array, including nested arrays of arrays. */
enum ci_status gguf_writer_set_arr_v(struct gguf_writer *w, const char *key, const struct gguf_warr *a);
/* Copies key/value i of an open file verbatim (same key, type and value). */
enum ci_status gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf *g, int64_t i);
/* Removes a key if present. */
void gguf_writer_remove_key(struct gguf_writer *w, const char *key);

/* Adds a tensor (ne[0] is the row length; unused dims need not be given).  data (borrowed, may be NULL for
 * streaming) holds the tensor's bytes as stored: row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3]. */
enum ci_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                      const int64_t ne[], const void *data);
int64_t gguf_writer_n_tensors(const struct gguf_writer *w);
uint64_t gguf_writer_tensor_nbytes(const struct gguf_writer *w, int64_t i);
/* Size of the whole file as it will be written. */
uint64_t gguf_writer_file_size(const struct gguf_writer *w);

/* Streaming: the header (magic .. tensor infos, then padding up to the data start), then each tensor's data
 * in order 0, 1, ... (nbytes from data, then zero padding to the alignment).  No tensor may be added after
 * the header is written. */
enum ci_status gguf_writer_write_header(struct gguf_writer *w, FILE *f, struct ci_err *err);
enum ci_status gguf_writer_write_tensor_data(struct gguf_writer *w, FILE *f, int64_t i, const void *data,
                                             struct ci_err *err);

/* Whole file from the borrowed tensor data (every tensor must have data).  write_file removes a partial
 * file on failure; write_mem returns a ci_malloc'd image (free with ci_free). */
enum ci_status gguf_writer_write_file(struct gguf_writer *w, const char *path, struct ci_err *err);
enum ci_status gguf_writer_write_mem(struct gguf_writer *w, uint8_t **out, uint64_t *size,
                                     struct ci_err *err);

#endif
