/* A reasoning budget's bookkeeping.  See think.h. */
#include "engine/think.h"

#include <string.h>

void think_init(struct think *t, bool open) {
    memset(t, 0, sizeof *t);
    t->state = open ? THINK_INSIDE : THINK_BEFORE;
}

/* Appends text to the tail, keeping its last bytes. */
static void tail_add(struct think *t, const char *text, size_t n) {
    if (n >= sizeof t->tail) {
        memcpy(t->tail, text + n - sizeof t->tail, sizeof t->tail);
        t->tail_n = sizeof t->tail;
        return;
    }
    size_t keep = t->tail_n + n > sizeof t->tail ? sizeof t->tail - n : t->tail_n;
    memmove(t->tail, t->tail + t->tail_n - keep, keep);
    memcpy(t->tail + keep, text, n);
    t->tail_n = keep + n;
}

/* Where marker ends in the tail (the offset past it), or 0 when absent. */
static size_t find(const struct think *t, const char *marker) {
    size_t m = strlen(marker);
    for (size_t i = 0; m && i + m <= t->tail_n; i++)
        if (memcmp(t->tail + i, marker, m) == 0)
            return i + m;
    return 0;
}

bool think_push(struct think *t, const char *start, const char *end, int budget, const char *text, size_t n) {
    if (t->state == THINK_DONE)
        return false;
    tail_add(t, text, n);
    if (t->state == THINK_BEFORE) {
        size_t at = start ? find(t, start) : 0;
        if (!at)
            return false;
        // the block starts after the marker (this token is not counted); what follows it is inside already
        t->tail_n -= at;
        memmove(t->tail, t->tail + at, t->tail_n);
        t->state = THINK_INSIDE;
        t->n = 0;
        if (find(t, end)) {
            t->state = THINK_DONE;
            return false;
        }
        return budget <= 0;
    }
    if (find(t, end)) {
        t->state = THINK_DONE;
        return false;
    }
    if (t->state != THINK_INSIDE)
        return false;
    return ++t->n >= budget;
}
