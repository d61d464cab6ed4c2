/* Counted allocation.  Every heap allocation of the library goes through these, so the bytes in use can be
 * reported and a test can force CI_ERR_NOMEM paths by setting a limit. */
#ifndef CINFER_CORE_MEM_H
#define CINFER_CORE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *ci_malloc(size_t n);
void *ci_calloc(size_t count, size_t size);
void *ci_realloc(void *p, size_t n);
void ci_free(void *p);
/* 64-byte aligned, counted; free with ci_free_aligned. */
void *ci_malloc_aligned(size_t n);
void ci_free_aligned(void *p);
char *ci_strdup(const char *s);

size_t ci_mem_in_use(void);
/* 0 = unlimited.  Allocations that would exceed the limit fail (tests use this to reach NOMEM paths). */
void ci_mem_set_limit(size_t bytes);

/* Overflow-checked size arithmetic: returns false (and leaves *out untouched) on overflow. */
static inline bool ci_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *out = a * b;
    return true;
}
static inline bool ci_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a)
        return false;
    *out = a + b;
    return true;
}
static inline bool ci_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}
static inline bool ci_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (b > UINT64_MAX - a)
        return false;
    *out = a + b;
    return true;
}

#endif
