#include "core/arena.h"

#include "core/mem.h"

enum ci_status ci_arena_init(struct ci_arena *a, size_t size, struct ci_err *err) {
    a->used = 0;
    a->size = size;
    a->base = size ? ci_malloc_aligned(size) : NULL;
    if (size && !a->base)
        return ci_err_set(err, CI_ERR_NOMEM, "arena: out of memory for %zu bytes", size);
    return CI_OK;
}

void ci_arena_deinit(struct ci_arena *a) {
    ci_free_aligned(a->base);
    a->base = NULL;
    a->size = a->used = 0;
}

void *ci_arena_alloc(struct ci_arena *a, size_t count, size_t size) {
    size_t n, start = (a->used + 63) & ~(size_t)63, end;
    if (!ci_mul_size(count, size, &n) || !ci_add_size(start, n, &end) || end > a->size)
        return NULL;
    a->used = end;
    return a->base + start;
}
