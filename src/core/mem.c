#include "core/mem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

// Each block carries a 64-byte header holding its size (64 keeps ci_malloc's result 64-byte aligned too).
#define HDR 64

static atomic_size_t mem_in_use;
static atomic_size_t mem_limit;

// Fault injection: while fault_armed, every allocation takes a number from fault_count; number fault_at
// (1-based) fails.
static atomic_bool fault_armed;
static atomic_uint_fast64_t fault_count;
static atomic_uint_fast64_t fault_at;

static bool fault_hit(void) {
    if (!atomic_load_explicit(&fault_armed, memory_order_relaxed))
        return false;
    uint_fast64_t k = atomic_fetch_add(&fault_count, 1) + 1;
    return k == atomic_load(&fault_at);
}

static bool reserve(size_t n) {
    size_t limit = atomic_load(&mem_limit);
    size_t now = atomic_fetch_add(&mem_in_use, n) + n;
    if (limit && now > limit) {
        atomic_fetch_sub(&mem_in_use, n);
        return false;
    }
    return true;
}

void *ci_malloc(size_t n) {
    size_t total;
    if (fault_hit() || !ci_add_size(n, HDR, &total) || !reserve(n))
        return NULL;
    unsigned char *p = aligned_alloc(HDR, (total + HDR - 1) / HDR * HDR);
    if (!p) {
        atomic_fetch_sub(&mem_in_use, n);
        return NULL;
    }
    memcpy(p, &n, sizeof n);
    return p + HDR;
}

void *ci_calloc(size_t count, size_t size) {
    size_t n;
    if (!ci_mul_size(count, size, &n))
        return NULL;
    void *p = ci_malloc(n);
    if (p)
        memset(p, 0, n);
    return p;
}

void *ci_realloc(void *p, size_t n) {
    if (!p)
        return ci_malloc(n);
    size_t old;
    memcpy(&old, (unsigned char *)p - HDR, sizeof old);
    void *q = ci_malloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, old < n ? old : n);
    ci_free(p);
    return q;
}

void ci_free(void *p) {
    if (!p)
        return;
    unsigned char *base = (unsigned char *)p - HDR;
    size_t n;
    memcpy(&n, base, sizeof n);
    atomic_fetch_sub(&mem_in_use, n);
    free(base);
}

void *ci_malloc_aligned(size_t n) {
    return ci_malloc(n); // ci_malloc is already 64-byte aligned
}

void ci_free_aligned(void *p) {
    ci_free(p);
}

#define HUGE_PAGE ((uintptr_t)2 << 20)

size_t ci_mem_advise_huge(void *p, size_t n) {
    const char *off = getenv("CINFER_NO_HUGEPAGES");
    if (!p || (off && *off && strcmp(off, "0") != 0))
        return 0;
#ifdef MADV_HUGEPAGE
    if (n > (size_t)(UINTPTR_MAX - (uintptr_t)p - HUGE_PAGE))
        return 0;
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_HUGEPAGE) != 0)
        return 0;
    return hi - lo;
#else
    return 0;
#endif
}

char *ci_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ci_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

size_t ci_mem_in_use(void) {
    return atomic_load(&mem_in_use);
}

void ci_mem_set_limit(size_t bytes) {
    atomic_store(&mem_limit, bytes);
}

void ci_mem_fail_after(uint64_t n) {
    atomic_store(&fault_armed, false);
    if (n == 0)
        return;
    atomic_store(&fault_count, 0);
    atomic_store(&fault_at, n);
    atomic_store(&fault_armed, true);
}

bool ci_mem_fail_fired(void) {
    uint64_t at = atomic_load(&fault_at);
    return at != 0 && atomic_load(&fault_count) >= at;
}

uint64_t ci_mem_alloc_count(void) {
    return atomic_load(&fault_count);
}
