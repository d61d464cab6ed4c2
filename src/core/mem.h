/* Counted allocation.  Every heap allocation of the library goes through these (cJSON is hooked to them by
 * openai_init, PCRE2 through the general context of tokenizer/bpe.c), so the bytes in use can be reported
 * and a test can force CI_ERR_NOMEM paths, by setting a limit or by fault injection.
 *
 * Fault injection (SQLite's discipline): ci_mem_fail_after(n) arms a single failure, of the n-th counted
 * allocation from now (ci_malloc, ci_calloc, ci_realloc, ci_strdup, ci_malloc_aligned; any thread).  That
 * one returns NULL and allocation works again after it; ci_mem_fail_fired() says whether it has happened and
 * ci_mem_alloc_count() how many allocations were counted since arming.  A test runs an operation for
 * n = 1, 2, 3, ...: each run must fail cleanly (an error status and message, ci_mem_in_use() back where it
 * was), until a run completes without reaching the n-th allocation (ci_mem_fail_fired() false): every
 * allocation of the operation has then failed once.  tests/unit/test_faults.c does this for model load,
 * tokenizer build, engine creation and whole server requests.  Unarmed, the cost is one relaxed atomic load
 * per allocation.  ci_mem_fail_after(0) disarms (and stops the count). */
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
/* Asks the kernel to back the whole 2 MiB pages inside [p, p + n) with transparent huge pages (Linux
 * madvise(MADV_HUGEPAGE); nothing where that is missing, or with CINFER_NO_HUGEPAGES set to anything but 0).
 * For large buffers that every step streams through (the packed weights): on 4 KiB pages a pass misses the
 * TLB every 4 KiB.  Returns the bytes advised. */
size_t ci_mem_advise_huge(void *p, size_t n);

size_t ci_mem_in_use(void);
/* 0 = unlimited.  Allocations that would exceed the limit fail (tests use this to reach NOMEM paths). */
void ci_mem_set_limit(size_t bytes);

/* Fault injection (see above).  n >= 1: the n-th counted allocation from now fails, once; n = 0: disarmed.
 * Arming resets the count and the fired flag. */
void ci_mem_fail_after(uint64_t n);
/* Whether the armed failure has happened since the last ci_mem_fail_after. */
bool ci_mem_fail_fired(void);
/* Counted allocations (failed ones included) since the last ci_mem_fail_after(n >= 1); counting stops at
 * ci_mem_fail_after(0). */
uint64_t ci_mem_alloc_count(void);

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
