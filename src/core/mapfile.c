#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the SIGBUS guard ------------------------------------------------------------------------------------
 * A table of watched mappings, read by the signal handler: lock-free, so only atomics; a slot is claimed by
 * a CAS on its base and published by storing its size last. */
struct watched {
    _Atomic(uintptr_t) base; // 0: free
    _Atomic(size_t) size;    // 0 while being claimed or released
    atomic_int damaged;
};
static struct watched watched[CI_MAPFILE_MAX_WATCHED];
static struct sigaction old_sigbus;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uctx) {
    uintptr_t a = (uintptr_t)si->si_addr;
    // Only a fault the kernel raised for a read of ours (si_code > 0); a SIGBUS sent by a process is not.
    for (int i = 0; si->si_code > 0 && i < CI_MAPFILE_MAX_WATCHED; i++) {
        uintptr_t base = atomic_load(&watched[i].base);
        size_t size = atomic_load(&watched[i].size);
        if (!base || !size || a < base || a - base >= size)
            continue;
        // Zero pages over the rest of the mapping: this read and every later one of the lost part succeed.
        uintptr_t page = a & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
        if (mmap((void *)page, base + size - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) == MAP_FAILED)
            break;
        atomic_store(&watched[i].damaged, 1);
        return;
    }
    // Not ours: what would have happened without this handler.
    if (old_sigbus.sa_flags & SA_SIGINFO) {
        if (old_sigbus.sa_sigaction) {
            old_sigbus.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (old_sigbus.sa_handler != SIG_DFL && old_sigbus.sa_handler != SIG_IGN) {
        old_sigbus.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL); // and again, now with the default effect (a core dump)
    raise(SIGBUS);
}

static void guard_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_sigbus);
}

static int guard_watch(const void *data, size_t size) {
    pthread_once(&guard_once, guard_install);
    for (int i = 0; i < CI_MAPFILE_MAX_WATCHED; i++) {
        uintptr_t expect = 0;
        if (atomic_compare_exchange_strong(&watched[i].base, &expect, (uintptr_t)data)) {
            atomic_store(&watched[i].damaged, 0);
            atomic_store(&watched[i].size, size);
            return i;
        }
    }
    return -1;
}

static void guard_unwatch(int slot) {
    if (slot < 0)
        return;
    atomic_store(&watched[slot].size, 0);
    atomic_store(&watched[slot].base, 0);
}

bool ci_mapfile_damaged(const struct ci_mapfile *m) {
    return m->data && m->slot >= 0 && atomic_load(&watched[m->slot].damaged) != 0;
}

/* ---- mapping ------------------------------------------------------------------------------------------ */

enum ci_status ci_mapfile_open(struct ci_mapfile *m, const char *path, struct ci_err *err) {
    return ci_mapfile_open_ex(m, path, true, err);
}

enum ci_status ci_mapfile_open_ex(struct ci_mapfile *m, const char *path, bool read_ahead,
                                  struct ci_err *err) {
    m->data = NULL;
    m->size = 0;
    m->slot = -1;
    m->fd = -1;
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
        if (read_ahead)
            madvise(p, (size_t)st.st_size, MADV_WILLNEED);
        m->data = p;
        m->size = (uint64_t)st.st_size;
        m->slot = guard_watch(p, (size_t)st.st_size);
        m->fd = fd; // for ci_mapfile_read
        return CI_OK;
    }
fail:
    close(fd);
    return s;
}

void ci_mapfile_close(struct ci_mapfile *m) {
    // A zeroed struct (no mapping) has slot 0 too: only a real mapping owns its slot.
    if (m->data) {
        guard_unwatch(m->slot);
        munmap((void *)(uintptr_t)m->data, (size_t)m->size);
        close(m->fd);
    }
    m->data = NULL;
    m->size = 0;
    m->slot = -1;
    m->fd = -1;
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

void ci_mapfile_will_need(const struct ci_mapfile *m, const void *p, uint64_t n) {
    const uintptr_t base = (uintptr_t)m->data, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p, hi;
    if (!m->data || n == 0 || lo < base || lo - base >= m->size)
        return;
    hi = n > m->size - (lo - base) ? base + m->size : lo + n; // clamped to the mapping
    lo = lo / page * page;
    hi = (hi + page - 1) / page * page; // the mapping covers its last page whole
    madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

/* True when the n bytes at p lie inside m's mapping. */
static bool holds(const struct ci_mapfile *m, const void *p, uint64_t n) {
    const uintptr_t lo = (uintptr_t)p, base = (uintptr_t)m->data;
    return m->data && lo >= base && n <= m->size && lo - base <= m->size - n;
}

void ci_mapfile_release(const struct ci_mapfile *m, const void *p, uint64_t n) {
    if (!holds(m, p, n))
        return;
    const uintptr_t lo = (uintptr_t)p;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (lo + page - 1) / page * page, b = (lo + n) / page * page;
    if (a < b)
        madvise((void *)a, b - a, MADV_DONTNEED); // private read-only file pages: dropped, re-read on access
}

void ci_mapfile_read(const struct ci_mapfile *m, const void *p, uint64_t n, void *dst) {
    if (m->fd < 0 || !holds(m, p, n)) {
        memcpy(dst, p, (size_t)n);
        return;
    }
    const uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)m->data);
    uint8_t *out = dst;
    uint64_t got = 0;
    while (got < n) {
        ssize_t r = pread(m->fd, out + got, (size_t)(n - got), (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) { // an I/O error, or the file now ends before the range
            memset(out + got, 0, (size_t)(n - got));
            if (m->slot >= 0)
                atomic_store(&watched[m->slot].damaged, 1);
            return;
        }
        got += (uint64_t)r;
    }
}
