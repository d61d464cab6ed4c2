/* The per-position token table (token_cache.h). */
#include "grammar/token_cache.h"

#include <string.h>

#include "core/clock.h"
#include "core/mem.h"

#define UNAVAILABLE UINT32_MAX
#define SENTINEL    (GRAM_NONE - 1) // the unknown parent's position: never read (expand stops at it)

struct tframe {
    uint32_t child; // next child to visit
    size_t mark;    // arena length to restore when this frame is left
    struct mstate s;
    bool esc; // some parse reached the stack below at or before this node's last whole character
};

/* An entry's key: the positions of the stack's top GRAM_TCACHE_DEPTH nodes, GRAM_NONE past its bottom. */
struct tkey {
    uint32_t pos[GRAM_TCACHE_DEPTH];
};

struct tslot {
    struct tkey key;
    uint32_t ent;  // index into ents, or UNAVAILABLE
    uint32_t seen; // the generation (mask) it was last visited in
};

struct gram_tcache {
    const struct grammar *g;
    const struct gram_vocab *v;
    struct gram_space *sc; // scratch space: the stacks above the unknown part
    struct tslot *slots;   // open addressing; ent == 0 with seen == 0 and key.pos[0] == GRAM_NONE: free
    uint32_t n_slots, mask_slots;
    struct gram_tc_entry *ents;
    uint32_t n_ents, cap_ents;
    uint32_t gen;
    struct tframe *frames;
    uint32_t *acc, *dep; // the position being computed
    size_t n_acc, cap_acc, n_dep, cap_dep;
    bool oom;
    uint64_t max_bytes;
    struct gram_tcache_stats stats;
};

static uint32_t key_hash(const struct tkey *k) {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (int i = 0; i < GRAM_TCACHE_DEPTH; i++) {
        h = (h ^ k->pos[i]) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static bool slot_free(const struct tslot *s) {
    return s->key.pos[0] == GRAM_NONE;
}

/* The slot of key k, or the free slot where it goes. */
static struct tslot *find_slot(struct gram_tcache *tc, const struct tkey *k) {
    uint32_t i = key_hash(k) & tc->mask_slots;
    for (;; i = (i + 1) & tc->mask_slots) {
        struct tslot *s = &tc->slots[i];
        if (slot_free(s) || memcmp(&s->key, k, sizeof *k) == 0)
            return s;
    }
}

static bool grow_slots(struct gram_tcache *tc) {
    uint32_t cap = tc->slots ? 2 * (tc->mask_slots + 1) : 256;
    struct tslot *old = tc->slots, *p = ci_malloc(cap * sizeof *p);
    if (!p)
        return false;
    for (uint32_t i = 0; i < cap; i++)
        p[i].key.pos[0] = GRAM_NONE;
    uint32_t n_old = old ? tc->mask_slots + 1 : 0;
    tc->slots = p;
    tc->mask_slots = cap - 1;
    for (uint32_t i = 0; i < n_old; i++)
        if (!slot_free(&old[i]))
            *find_slot(tc, &old[i].key) = old[i];
    ci_free(old);
    return true;
}

struct gram_tcache *gram_tcache_create(const struct grammar *g, const struct gram_vocab *v) {
    struct gram_tcache *tc = ci_calloc(1, sizeof *tc);
    if (!tc)
        return NULL;
    tc->g = g;
    tc->v = v;
    tc->max_bytes = GRAM_TCACHE_MAX_BYTES;
    tc->sc = gram_space_scratch(g, v);
    tc->frames = ci_calloc(v->max_len + 2, sizeof *tc->frames);
    if (!tc->sc || !tc->frames || !grow_slots(tc)) {
        gram_tcache_free(tc);
        return NULL;
    }
    return tc;
}

void gram_tcache_free(struct gram_tcache *tc) {
    if (!tc)
        return;
    gram_space_free(tc->sc);
    for (uint32_t i = 0; i < tc->n_ents; i++) {
        ci_free(tc->ents[i].acc);
        ci_free(tc->ents[i].dep);
    }
    ci_free(tc->ents);
    ci_free(tc->slots);
    ci_free(tc->frames);
    ci_free(tc->acc);
    ci_free(tc->dep);
    ci_free(tc);
}

void gram_tcache_set_limit(struct gram_tcache *tc, uint64_t bytes) {
    tc->max_bytes = bytes;
}

void gram_tcache_new_mask(struct gram_tcache *tc) {
    if (++tc->gen == 0) { // wrapped: forget the old generations
        for (uint32_t i = 0; i <= tc->mask_slots; i++)
            tc->slots[i].seen = 0;
        tc->gen = 1;
    }
}

void gram_tcache_stats(const struct gram_tcache *tc, struct gram_tcache_stats *out) {
    *out = tc->stats;
}

static void push(struct gram_tcache *tc, uint32_t **a, size_t *n, size_t *cap, uint32_t x) {
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        uint32_t *p = ci_realloc(*a, nc * sizeof *p);
        if (!p) {
            tc->oom = true;
            return;
        }
        *a = p;
        *cap = nc;
    }
    (*a)[(*n)++] = x;
}

/* Ranks [a, b) are dependent (merged with the previous range when adjacent: ranks come in order). */
static void add_dep(struct gram_tcache *tc, uint32_t a, uint32_t b) {
    if (a >= b)
        return;
    if (tc->n_dep && tc->dep[tc->n_dep - 1] == a) {
        tc->dep[tc->n_dep - 1] = b;
        return;
    }
    push(tc, &tc->dep, &tc->n_dep, &tc->cap_dep, a);
    push(tc, &tc->dep, &tc->n_dep, &tc->cap_dep, b);
}

static void add_acc(struct gram_tcache *tc, const struct trie_node *t) {
    for (uint32_t k = 0; k < t->tok_n; k++)
        push(tc, &tc->acc, &tc->n_acc, &tc->cap_acc, (uint32_t)tc->v->toks[t->tok_first + k]);
}

/* Whether byte b can never follow state u (invalid UTF-8 whatever the grammar): its subtree is rejected. */
static bool bad_utf8(const struct u8state *u, uint8_t b) {
    if (u->rem)
        return b < u->lo || b > u->hi;
    return (b >= 0x80 && b < 0xC2) || b > 0xF4;
}

/* Walks the trie from the single stack of key k (its known top, then the unknown rest, or the empty stack
 * when k reaches the bottom), sorting the tokens into tc->acc and tc->dep. */
static bool classify(struct gram_tcache *tc, const struct tkey *k) {
    struct gram_space *sc = tc->sc;
    const struct gram_vocab *v = tc->v;
    gram_space_reset_nodes(sc);
    sc->failed = false;
    sc->unknown = GRAM_NONE;
    int n = 0;
    while (n < GRAM_TCACHE_DEPTH && k->pos[n] != GRAM_NONE)
        n++;
    uint32_t unknown = n == GRAM_TCACHE_DEPTH ? gram_intern(sc, SENTINEL, 0) : GRAM_NONE;
    uint32_t top = n == GRAM_TCACHE_DEPTH ? unknown : 0;
    for (int i = n - 1; i >= 0; i--)
        top = gram_intern(sc, k->pos[i], top);
    if (sc->failed)
        return false;
    sc->unknown = unknown;
    if (sc->cap_arena < 1) {
        uint32_t *a = ci_realloc(sc->arena, 1024 * sizeof *a);
        if (!a)
            return false;
        sc->arena = a;
        sc->cap_arena = 1024;
    }
    sc->arena[0] = top;
    sc->n_arena = 1;
    tc->n_acc = tc->n_dep = 0;
    struct tframe *fr = tc->frames;
    int depth = 0;
    fr[0] = (struct tframe){v->nodes[0].first_child, 1, {0, 1, {0, 0, 0, 0}}, false};
    while (depth >= 0) {
        struct tframe *f = &fr[depth];
        uint32_t c = f->child;
        if (c == GRAM_NONE) {
            sc->n_arena = f->mark;
            depth--;
            continue;
        }
        const struct trie_node *t = &v->nodes[c];
        f->child = t->next_sibling;
        size_t mark = sc->n_arena;
        if (bad_utf8(&f->s.u, t->byte))
            continue;
        bool whole = f->s.u.rem == 0 ? t->byte < 0x80 : f->s.u.rem == 1; // this byte ends a character
        struct mstate ns;
        sc->failed = sc->escaped = false;
        bool ok = gram_step_byte(sc, &f->s, t->byte, &ns);
        if (sc->failed) { // a limit: let the whole state decide
            sc->n_arena = mark;
            add_dep(tc, t->sub_first, t->sub_end);
            continue;
        }
        bool esc_now = whole && sc->escaped, esc = f->esc || esc_now;
        if (t->tok_n) {
            if (ok || esc_now)
                add_acc(tc, t);
            else if (f->esc)
                add_dep(tc, t->tok_first, t->tok_first + t->tok_n);
        }
        if (t->first_child != GRAM_NONE && ok) {
            fr[++depth] = (struct tframe){t->first_child, mark, ns, esc};
            continue;
        }
        sc->n_arena = mark;
        if (t->first_child != GRAM_NONE && esc) // no parse above: only the stack below can take the rest
            add_dep(tc, t->sub_first + t->tok_n, t->sub_end);
    }
    return !tc->oom;
}

const struct gram_tc_entry *gram_tcache_get(struct gram_tcache *tc, const struct gram_space *sp,
                                            uint32_t node, bool *first) {
    struct tkey key;
    for (int i = 0; i < GRAM_TCACHE_DEPTH; i++) {
        key.pos[i] = node ? sp->npos[node] : GRAM_NONE;
        node = node ? sp->nparent[node] : 0;
    }
    struct tslot *sl = find_slot(tc, &key);
    if (!slot_free(sl)) {
        *first = sl->seen != tc->gen;
        sl->seen = tc->gen;
        return sl->ent == UNAVAILABLE ? NULL : &tc->ents[sl->ent];
    }
    *first = true;
    if (2 * (tc->n_slots + 1) > tc->mask_slots + 1) { // keep the table at most half full
        if (!grow_slots(tc))
            return NULL;
        sl = find_slot(tc, &key);
    }
    tc->n_slots++;
    sl->key = key;
    sl->seen = tc->gen;
    int64_t t0 = ci_now_ns();
    tc->oom = false;
    size_t words = ((size_t)tc->v->n_vocab + 31) / 32;
    struct gram_tc_entry e = {0};
    bool ok = classify(tc, &key);
    if (ok) {
        e.acc_bits = tc->n_acc >= words; // a list of n ids or a bitset of `words` words: the smaller
        e.n_acc = e.acc_bits ? (uint32_t)words : (uint32_t)tc->n_acc;
        e.n_dep = (uint32_t)(tc->n_dep / 2);
        uint64_t bytes = ((uint64_t)e.n_acc + 2 * (uint64_t)e.n_dep) * sizeof(uint32_t) + sizeof e;
        ok = tc->stats.bytes + bytes <= tc->max_bytes;
        if (ok && tc->n_ents == tc->cap_ents) {
            uint32_t cap = tc->cap_ents ? 2 * tc->cap_ents : 64;
            struct gram_tc_entry *p = ci_realloc(tc->ents, cap * sizeof *p);
            ok = p != NULL;
            if (ok) {
                tc->ents = p;
                tc->cap_ents = cap;
            }
        }
        if (ok) {
            e.acc = ci_calloc(e.n_acc ? e.n_acc : 1, sizeof *e.acc);
            e.dep = ci_malloc((e.n_dep ? 2 * e.n_dep : 1) * sizeof *e.dep);
            ok = e.acc && e.dep;
        }
        if (ok) {
            if (e.acc_bits)
                for (size_t i = 0; i < tc->n_acc; i++)
                    e.acc[tc->acc[i] >> 5] |= 1u << (tc->acc[i] & 31);
            else if (tc->n_acc) // (the buffers are NULL until a first token)
                memcpy(e.acc, tc->acc, tc->n_acc * sizeof *e.acc);
            if (tc->n_dep)
                memcpy(e.dep, tc->dep, tc->n_dep * sizeof *e.dep);
            tc->stats.bytes += bytes;
            tc->stats.acc_tokens += tc->n_acc;
            for (uint32_t i = 0; i < e.n_dep; i++)
                tc->stats.dep_tokens += e.dep[2 * i + 1] - e.dep[2 * i];
            sl->ent = tc->n_ents;
            tc->ents[tc->n_ents++] = e;
            tc->stats.computed++;
        }
    }
    if (!ok) {
        ci_free(e.acc);
        ci_free(e.dep);
        sl->ent = UNAVAILABLE;
        tc->stats.unavailable++;
    }
    tc->stats.ns += (uint64_t)(ci_now_ns() - t0);
    return ok ? &tc->ents[tc->n_ents - 1] : NULL;
}
