/* Bump arena over one 64-byte aligned buffer sized at creation: per-step temporaries and model-owned copies.
 * Allocation never grows the buffer (the per-step path must not malloc); it returns NULL when full. */
#ifndef CINFER_CORE_ARENA_H
#define CINFER_CORE_ARENA_H

#include <stddef.h>

#include "core/status.h"

struct ci_arena {
    unsigned char *base;
    size_t size;
    size_t used;
};

enum ci_status ci_arena_init(struct ci_arena *a, size_t size, struct ci_err *err);
void ci_arena_deinit(struct ci_arena *a);
/* 64-byte aligned; NULL if the arena is full or n*size overflows. */
void *ci_arena_alloc(struct ci_arena *a, size_t count, size_t size);
static inline size_t ci_arena_mark(const struct ci_arena *a) {
    return a->used;
}
static inline void ci_arena_reset(struct ci_arena *a, size_t mark) {
    a->used = mark;
}

#endif
