/* SentencePiece-style BPE encoder (see spm.h).  The work queue is a binary heap of candidate merges keyed by
 * (score desc, left index asc), as llama.cpp's priority queue; an entry whose symbols changed after it was
 * queued is recognised by its size and skipped.  Every merged symbol is a vocabulary token by
 * construction, so resegmenting only has to handle single characters (byte fallback). */
#include "tokenizer/spm.h"

#include <string.h>

#include "core/mem.h"
#include "core/utf8.h"
#include "tokenizer/vocab.h"

#define SPACE_ESC     "\xe2\x96\x81" // U+2581
#define SPACE_ESC_LEN 3

struct sym {
    int prev, next;
    uint32_t off, n; // bytes of the escaped text
};

struct bigram {
    float score;
    int left, right;
    uint32_t size; // left.n + right.n when queued
};

struct work {
    const struct vocab *v;
    const char *s;
    struct sym *sym;
    struct bigram *heap;
    size_t n_heap;
};

static bool before(const struct bigram *a, const struct bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct work *w, struct bigram g) {
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&g, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = g;
}

static struct bigram heap_pop(struct work *w) {
    struct bigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static void try_add(struct work *w, int left, int right) {
    if (left < 0 || right < 0)
        return;
    // Adjacent symbols are contiguous in the text, so their concatenation is a plain substring.
    uint32_t size = w->sym[left].n + w->sym[right].n;
    int32_t id = vocab_find(w->v, w->s + w->sym[left].off, size);
    if (id < 0)
        return;
    struct bigram g = {w->v->scores[id], left, right, size};
    heap_push(w, g);
}

enum ci_status spm_encode(const struct vocab *v, const char *text, size_t len, bool add_prefix,
                          struct tok_ids *out, struct ci_err *err) {
    enum ci_status st = CI_OK;
    struct work w = {v, NULL, NULL, NULL, 0};
    char *s = NULL;
    size_t cap, n = 0;
    if (!ci_mul_size(len + 1, SPACE_ESC_LEN, &cap)) { // every byte escapes to at most 3, plus the prefix
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    if (len + 1 > (size_t)INT32_MAX / (2 * SPACE_ESC_LEN)) { // symbol indices are int, offsets uint32_t
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    s = ci_malloc(cap);
    if (!s) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    if (add_prefix) {
        memcpy(s, SPACE_ESC, SPACE_ESC_LEN);
        n = SPACE_ESC_LEN;
    }
    n += vocab_escape_spaces(text, len, s + n);
    // The symbols are split from the escaped text, which is up to 3 times longer than the input (a lead byte
    // before a space is one symbol, the space's escape another): size everything from n, never from len.
    // At most n symbols; the heap holds the n - 1 initial bigrams plus at most two per merge (< n merges).
    size_t sym_bytes, heap_bytes;
    if (!ci_mul_size(n + 1, sizeof(struct sym), &sym_bytes) ||
        !ci_mul_size(3 * (n + 1), sizeof(struct bigram), &heap_bytes)) {
        st = ci_err_set(err, CI_ERR_LIMIT, "tokenizer: text too long");
        goto fail;
    }
    w.sym = ci_malloc(sym_bytes);
    w.heap = ci_malloc(heap_bytes);
    if (!w.sym || !w.heap) {
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    w.s = s;

    int n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = utf8_lead_len((unsigned char)s[off]);
        if (cl > n - off)
            cl = n - off;
        w.sym[n_sym] = (struct sym){n_sym - 1, off + cl == n ? -1 : n_sym + 1, (uint32_t)off, (uint32_t)cl};
        n_sym++;
        off += cl;
    }
    for (int i = 1; i < n_sym; i++)
        try_add(&w, i - 1, i);
    while (w.n_heap > 0) {
        struct bigram g = heap_pop(&w);
        struct sym *l = &w.sym[g.left], *r = &w.sym[g.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != g.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w.sym[r->next].prev = g.left;
        try_add(&w, l->prev, g.left);
        try_add(&w, g.left, l->next);
    }
    for (int i = 0; i != -1 && n_sym > 0 && st == CI_OK; i = w.sym[i].next) {
        const struct sym *sy = &w.sym[i];
        int32_t id = vocab_find(v, s + sy->off, sy->n);
        if (id >= 0) {
            st = tok_ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < sy->n && st == CI_OK; j++) {
            int32_t bid = v->byte_id[(unsigned char)s[sy->off + j]];
            if (bid < 0)
                bid = v->unk;
            if (bid < 0) {
                st = ci_err_set(err, CI_ERR_INVALID,
                                "tokenizer: byte 0x%02x has no token and there is no <unk>",
                                (unsigned char)s[sy->off + j]);
                goto fail;
            }
            st = tok_ids_push(out, bid);
        }
    }
    if (st)
        st = ci_err_set(err, CI_ERR_NOMEM, "tokenizer: out of memory");
fail:
    ci_free(s);
    ci_free(w.sym);
    ci_free(w.heap);
    return st;
}
