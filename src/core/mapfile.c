#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum ci_status ci_mapfile_open(struct ci_mapfile *m, const char *path, struct ci_err *err) {
    m->data = NULL;
    m->size = 0;
    // A FIFO, socket or device as the path would block open() or read forever: refuse anything that is not
    // a regular file before opening it, and open without blocking in case the path changes in between
    // (fstat below checks the file actually opened).
    struct stat st;
    if (stat(path, &st) != 0)
        return ci_err_set(err, CI_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ci_err_set(err, CI_ERR_IO, "%s: not a regular file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ci_err_set(err, CI_ERR_IO, "%s: %s", path, strerror(errno));
    enum ci_status s = CI_OK;
    if (fstat(fd, &st) != 0) {
        s = ci_err_set(err, CI_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        s = ci_err_set(err, CI_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            s = ci_err_set(err, CI_ERR_IO, "%s: mmap: %s", path, strerror(errno));
            goto fail;
        }
        madvise(p, (size_t)st.st_size, MADV_WILLNEED);
        m->data = p;
        m->size = (uint64_t)st.st_size;
    }
fail:
    close(fd);
    return s;
}

void ci_mapfile_close(struct ci_mapfile *m) {
    if (m->data)
        munmap((void *)(uintptr_t)m->data, (size_t)m->size);
    m->data = NULL;
    m->size = 0;
}

void ci_reader_init(struct ci_reader *r, const void *base, uint64_t size) {
    r->base = base;
    r->size = size;
    r->pos = 0;
}

enum ci_status ci_rd_view(struct ci_reader *r, uint64_t n, const uint8_t **out) {
    if (n > ci_reader_left(r))
        return CI_ERR_FORMAT;
    *out = r->base + r->pos;
    r->pos += n;
    return CI_OK;
}

enum ci_status ci_rd_bytes(struct ci_reader *r, void *out, uint64_t n) {
    const uint8_t *p;
    enum ci_status s = ci_rd_view(r, n, &p);
    if (s == CI_OK && n)
        memcpy(out, p, (size_t)n);
    return s;
}

enum ci_status ci_rd_skip(struct ci_reader *r, uint64_t n) {
    const uint8_t *p;
    return ci_rd_view(r, n, &p);
}

// The formats we read are little-endian, as is every host we build for; memcpy keeps unaligned reads legal.
enum ci_status ci_rd_u8(struct ci_reader *r, uint8_t *v) {
    return ci_rd_bytes(r, v, 1);
}
enum ci_status ci_rd_u16(struct ci_reader *r, uint16_t *v) {
    return ci_rd_bytes(r, v, 2);
}
enum ci_status ci_rd_u32(struct ci_reader *r, uint32_t *v) {
    return ci_rd_bytes(r, v, 4);
}
enum ci_status ci_rd_u64(struct ci_reader *r, uint64_t *v) {
    return ci_rd_bytes(r, v, 8);
}
enum ci_status ci_rd_i32(struct ci_reader *r, int32_t *v) {
    return ci_rd_bytes(r, v, 4);
}
enum ci_status ci_rd_f32(struct ci_reader *r, float *v) {
    return ci_rd_bytes(r, v, 4);
}
enum ci_status ci_rd_f64(struct ci_reader *r, double *v) {
    return ci_rd_bytes(r, v, 8);
}
