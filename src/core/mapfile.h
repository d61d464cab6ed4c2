/* Read-only mapping of a whole file, and a bounds-checked little-endian reader cursor over any byte range.
 * Every parser of outside bytes (GGUF, llama2.c, tokenizer.bin) reads through struct ci_reader, whose
 * functions check the remaining length before touching a byte and never advance past the end. */
#ifndef CINFER_CORE_MAPFILE_H
#define CINFER_CORE_MAPFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct ci_mapfile {
    const uint8_t *data; // PROT_READ mapping (NULL for an empty file)
    uint64_t size;
    int slot; // its entry in the table of mappings the SIGBUS handler knows (-1: none)
    int fd;   // the file, kept open for ci_mapfile_read (meaningful only while data is set)
};

/* Maps path read-only (a regular file only: FIFOs, devices and directories are refused before anything
 * could block on them).  An empty file maps to data = NULL, size = 0.
 *
 * A mapped file that is truncated while mapped makes every read past its new end raise SIGBUS.  The first
 * mapping installs a SIGBUS handler that, for an address inside a mapping made here, maps zero pages over
 * the rest of that mapping and marks it damaged (reads go on, seeing zeros; ci_mapfile_damaged tells the
 * owner, who must stop trusting what it read and report the file changed on disk); any other SIGBUS keeps
 * its default effect.  At most CI_MAPFILE_MAX_WATCHED mappings are watched at once; others still work
 * but are unprotected. */
enum ci_status ci_mapfile_open(struct ci_mapfile *m, const char *path, struct ci_err *err);
/* ci_mapfile_open, asking the kernel to read the whole file ahead (MADV_WILLNEED) only when read_ahead (a
 * tensor-parallel rank reads only its slices: ci_mapfile_will_need on those). */
enum ci_status ci_mapfile_open_ex(struct ci_mapfile *m, const char *path, bool read_ahead,
                                  struct ci_err *err);
/* Asks the kernel to read [p, p + n) of m ahead (the pages it touches; parts outside m are ignored). */
void ci_mapfile_will_need(const struct ci_mapfile *m, const void *p, uint64_t n);
void ci_mapfile_close(struct ci_mapfile *m);
#define CI_MAPFILE_MAX_WATCHED 64
/* True once a read of m hit a part of the file that is gone (the file was truncated while mapped). */
bool ci_mapfile_damaged(const struct ci_mapfile *m);
/* Gives back the resident pages wholly inside [p, p + n) (a part of m no longer read, e.g. weights copied
 * into another layout): they leave the process's RSS and come back from the file if read again.  Ranges
 * outside m are ignored. */
void ci_mapfile_release(const struct ci_mapfile *m, const void *p, uint64_t n);
/* Copies the n bytes at p (inside m) into dst with pread(2), not through the mapping, for a part read a few
 * rows at a time: a fault in the mapping maps the whole page-cache folio around the address (up to 2 MiB
 * after a cold start's read-ahead) into the process, where a read copies only the row.  A read that fails or
 * comes short (the file was truncated) zero-fills dst and marks m damaged, as a SIGBUS would.  A range
 * outside m is copied from p as it is (bytes that are not m's). */
void ci_mapfile_read(const struct ci_mapfile *m, const void *p, uint64_t n, void *dst);

struct ci_reader {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
};

void ci_reader_init(struct ci_reader *r, const void *base, uint64_t size);
static inline uint64_t ci_reader_left(const struct ci_reader *r) {
    return r->size - r->pos;
}
/* Each returns CI_ERR_FORMAT (cursor unchanged) when fewer bytes remain than needed. */
enum ci_status ci_rd_bytes(struct ci_reader *r, void *out, uint64_t n);
enum ci_status ci_rd_skip(struct ci_reader *r, uint64_t n);
enum ci_status ci_rd_u8(struct ci_reader *r, uint8_t *v);
enum ci_status ci_rd_u16(struct ci_reader *r, uint16_t *v);
enum ci_status ci_rd_u32(struct ci_reader *r, uint32_t *v);
enum ci_status ci_rd_u64(struct ci_reader *r, uint64_t *v);
enum ci_status ci_rd_i32(struct ci_reader *r, int32_t *v);
enum ci_status ci_rd_f32(struct ci_reader *r, float *v);
enum ci_status ci_rd_f64(struct ci_reader *r, double *v);
/* A view of the next n bytes (not copied), advancing past them. */
enum ci_status ci_rd_view(struct ci_reader *r, uint64_t n, const uint8_t **out);

#endif
