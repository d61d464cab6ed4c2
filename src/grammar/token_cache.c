/* The per-position token table (token_cache.h). */
#include "grammar/token_cache.h"

#include <stdlib.h>
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
    // Bounded repetitions ("bounded repetitions" below): per rule, its depth in a chain (0: none) and the
    // deepest rule of its chain family.
    uint32_t *chain_depth, *chain_top;
    bool no_chains;        // CINFER_GRAMMAR_REPEAT=0: every position's entry computed alone (to compare)
    uint32_t *bits;        // scratch: a token bitset [(n_vocab + 31) / 32]
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

/* ---- bounded repetitions ----
 * x{0,n} is lowered into a chain of rules R_n ::= x R_(n-1) | ; ... R_2 ::= x R_1 | ; R_1 ::= x |  (grammar.c's
 * gram_repeat_rule; any rules of that shape are read the same way).  A stack inside R_k may take k more
 * items at most, and a token of b bytes spans at most b + 1 items (each item takes a byte at least, where it
 * takes any), so for the tokens shorter than k bytes every R_k of a family (the same x) classifies alike:
 * an entry keyed by a position in R_k is the entry of the same position in the family's deepest rule, with
 * only the tokens of k bytes or more classified again (few when k is large: the long ones).  A maxLength
 * of 255 then costs one full walk and 254 short ones, instead of 255 full walks. */

/* Rule r's shape "seq | (empty)": *s, *n the first alternative's elements; false otherwise. */
static bool opt_shape(const struct grammar *g, uint32_t r, uint32_t *s, uint32_t *n) {
    uint32_t i = g->rule_start[r], j = i;
    while (!gram_is_end(g->elems[j].op))
        j++;
    if (g->elems[j].op != GRAM_ALT || g->elems[j + 1].op != GRAM_END || j == i)
        return false;
    *s = i;
    *n = j - i;
    return true;
}

/* The link of r in a chain: the rule its first alternative ends by referring to, when that rule has the same
 * item (r ::= x R' | ; R' ::= x R'' | or R' ::= x |); else GRAM_NONE.  *item_n: x's length. */
static uint32_t chain_link(const struct grammar *g, uint32_t r, uint32_t *item_n) {
    uint32_t s, n, s2, n2;
    if (!opt_shape(g, r, &s, &n) || n < 2 || g->elems[s + n - 1].op != GRAM_REF)
        return GRAM_NONE;
    uint32_t next = g->elems[s + n - 1].val;
    if (next == r || !opt_shape(g, next, &s2, &n2))
        return GRAM_NONE;
    uint32_t item = n - 1;
    bool last_link = n2 == n && g->elems[s2 + n2 - 1].op == GRAM_REF; // R' ::= x R'' |
    if (!last_link && n2 != item)                                     // R' ::= x |
        return GRAM_NONE;
    if (memcmp(g->elems + s, g->elems + s2, item * sizeof *g->elems) != 0)
        return GRAM_NONE;
    *item_n = item;
    return next;
}

/* chain_depth (R_k: k, k >= 2; 0 for every other rule, R_1 included) and chain_top (the deepest rule of the
 * same family: the same last rule R_1).  Iterative: chains are up to GRAM_MAX_REPEAT long. */
static bool find_chains(struct gram_tcache *tc) {
    const struct grammar *g = tc->g;
    uint32_t n = g->n_rules;
    uint32_t *next = ci_malloc((size_t)n * sizeof *next), *last = ci_malloc((size_t)n * sizeof *last),
             *path = ci_malloc((size_t)n * sizeof *path);
    tc->chain_depth = ci_calloc(n, sizeof *tc->chain_depth);
    tc->chain_top = ci_malloc((size_t)n * sizeof *tc->chain_top);
    if (!next || !last || !path || !tc->chain_depth || !tc->chain_top) {
        ci_free(next);
        ci_free(last);
        ci_free(path);
        return false;
    }
    for (uint32_t r = 0; r < n; r++) {
        uint32_t item;
        next[r] = chain_link(g, r, &item);
        last[r] = GRAM_NONE;
        tc->chain_top[r] = r;
    }
    // Depths along each chain, from its end R_1 (a rule with a link to a rule without one); a cycle of
    // links (never made by gram_repeat_rule) is left out.  d[]: 0 not seen, ON_PATH, NOT_CHAIN, or k.
    enum { ON_PATH = UINT32_MAX, NOT_CHAIN = UINT32_MAX - 1 };
    uint32_t *d = tc->chain_depth;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t np = 0, x = r;
        while (next[x] != GRAM_NONE && d[x] == 0) {
            path[np++] = x;
            d[x] = ON_PATH;
            x = next[x];
        }
        uint32_t k = 0, end = GRAM_NONE;
        if (next[x] == GRAM_NONE) { // x is R_1
            k = 1;
            end = x;
        } else if (d[x] != ON_PATH && d[x] != NOT_CHAIN) { // a chain already measured
            k = d[x];
            end = last[x];
        }
        while (np > 0) {
            uint32_t y = path[--np];
            d[y] = k ? ++k : NOT_CHAIN;
            last[y] = end;
        }
    }
    for (uint32_t r = 0; r < n; r++)
        d[r] = d[r] == NOT_CHAIN || next[r] == GRAM_NONE ? 0 : d[r];
    // The family's deepest rule, through its last rule.
    uint32_t *deepest = path; // reused: [last rule] -> deepest member
    for (uint32_t r = 0; r < n; r++)
        deepest[r] = GRAM_NONE;
    for (uint32_t r = 0; r < n; r++)
        if (tc->chain_depth[r] >= 2) {
            uint32_t e = last[r];
            if (deepest[e] == GRAM_NONE || tc->chain_depth[deepest[e]] < tc->chain_depth[r])
                deepest[e] = r;
        }
    for (uint32_t r = 0; r < n; r++)
        if (tc->chain_depth[r] >= 2)
            tc->chain_top[r] = deepest[last[r]];
    ci_free(next);
    ci_free(last);
    ci_free(path);
    return true;
}

/* The rule holding element pos (rules are laid out in order). */
static uint32_t rule_of(const struct grammar *g, uint32_t pos) {
    uint32_t lo = 0, hi = g->n_rules; // rule_start[lo] <= pos < rule_start[hi]
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->rule_start[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

struct gram_tcache *gram_tcache_create(const struct grammar *g, const struct gram_vocab *v) {
    struct gram_tcache *tc = ci_calloc(1, sizeof *tc);
    if (!tc)
        return NULL;
    tc->g = g;
    tc->v = v;
    tc->max_bytes = GRAM_TCACHE_MAX_BYTES;
    const char *env = getenv("CINFER_GRAMMAR_REPEAT");
    tc->no_chains = env && !strcmp(env, "0");
    tc->sc = gram_space_scratch(g, v);
    tc->frames = ci_calloc(v->max_len + 2, sizeof *tc->frames);
    tc->bits = ci_calloc(((size_t)v->n_vocab + 31) / 32, sizeof *tc->bits);
    if (!tc->sc || !tc->frames || !tc->bits || !grow_slots(tc) || !find_chains(tc)) {
        gram_tcache_free(tc);
        return NULL;
    }
    return tc;
}

void gram_tcache_free(struct gram_tcache *tc) {
    if (!tc)
        return;
    gram_space_free(tc->sc);
    ci_free(tc->chain_depth);
    ci_free(tc->chain_top);
    ci_free(tc->bits);
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
 * when k reaches the bottom), sorting the tokens into tc->acc and tc->dep.  minlen > 0: only the tokens of
 * at least minlen bytes (subtrees without one are skipped; tc->dep may still name shorter ones). */
static bool classify(struct gram_tcache *tc, const struct tkey *k, uint32_t minlen) {
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
        if (bad_utf8(&f->s.u, t->byte) || v->sub_max_len[c] < minlen)
            continue;
        bool here =
            (uint32_t)depth + 1 >= minlen; // the tokens ending at t (of depth + 1 bytes) are asked for
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
        if (t->tok_n && here) {
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

/* Makes the accepted tokens (from_bits: the bitset tc->bits holding tc->n_acc tokens, else the ids tc->acc)
 * and tc->dep (rank ranges) the entry of slot sl, within the byte bound; false when unavailable (the bound,
 * or memory). */
static bool store(struct gram_tcache *tc, struct tslot *sl, bool from_bits) {
    size_t words = ((size_t)tc->v->n_vocab + 31) / 32;
    struct gram_tc_entry e = {0};
    e.acc_bits = tc->n_acc >= words; // a list of n ids or a bitset of `words` words: the smaller
    e.n_acc = e.acc_bits ? (uint32_t)words : (uint32_t)tc->n_acc;
    e.n_dep = (uint32_t)(tc->n_dep / 2);
    uint64_t bytes = ((uint64_t)e.n_acc + 2 * (uint64_t)e.n_dep) * sizeof(uint32_t) + sizeof e;
    bool ok = tc->stats.bytes + bytes <= tc->max_bytes;
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
    if (!ok) {
        ci_free(e.acc);
        ci_free(e.dep);
        return false;
    }
    if (from_bits && e.acc_bits) {
        memcpy(e.acc, tc->bits, words * sizeof *e.acc);
    } else if (from_bits) {
        uint32_t n = 0;
        for (size_t w = 0; w < words; w++)
            for (uint32_t x = tc->bits[w]; x; x &= x - 1)
                e.acc[n++] = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(x));
    } else if (e.acc_bits) {
        for (size_t i = 0; i < tc->n_acc; i++)
            e.acc[tc->acc[i] >> 5] |= 1u << (tc->acc[i] & 31);
    } else if (tc->n_acc) { // (the buffers are NULL until a first token)
        memcpy(e.acc, tc->acc, tc->n_acc * sizeof *e.acc);
    }
    if (tc->n_dep)
        memcpy(e.dep, tc->dep, tc->n_dep * sizeof *e.dep);
    tc->stats.bytes += bytes;
    tc->stats.acc_tokens += tc->n_acc;
    for (uint32_t i = 0; i < e.n_dep; i++)
        tc->stats.dep_tokens += e.dep[2 * i + 1] - e.dep[2 * i];
    sl->ent = tc->n_ents;
    tc->ents[tc->n_ents++] = e;
    tc->stats.computed++;
    return true;
}

/* The entry of the family's deepest rule (base) with the tokens of minlen bytes or more replaced by those
 * classify() just put into tc->acc / tc->dep: the accepted tokens into tc->bits (their count in tc->n_acc),
 * the dependent ranges (the base's and the new ones, united: a dependent token is checked against the whole
 * state, so more is safe) into tc->dep. */
static bool patch(struct gram_tcache *tc, const struct gram_tc_entry *base, uint32_t minlen) {
    const struct gram_vocab *v = tc->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    uint32_t *bits = tc->bits;
    memset(bits, 0, words * sizeof *bits);
    if (base->acc_bits)
        memcpy(bits, base->acc, words * sizeof *bits);
    else
        for (uint32_t i = 0; i < base->n_acc; i++)
            bits[base->acc[i] >> 5] |= 1u << (base->acc[i] & 31);
    for (uint32_t i = 0; i < v->n_toks && v->len[v->by_len[i]] >= minlen; i++)
        bits[v->by_len[i] >> 5] &= ~(1u << (v->by_len[i] & 31));
    for (size_t i = 0; i < tc->n_acc; i++)
        bits[tc->acc[i] >> 5] |= 1u << (tc->acc[i] & 31);
    tc->n_acc = 0;
    for (size_t w = 0; w < words; w++)
        tc->n_acc += (size_t)__builtin_popcount(bits[w]);
    // The union of two sorted range lists.
    size_t nb = 2 * (size_t)base->n_dep, nn = tc->n_dep;
    uint32_t *mine = ci_malloc((nn ? nn : 1) * sizeof *mine);
    if (!mine)
        return false;
    if (nn)
        memcpy(mine, tc->dep, nn * sizeof *mine);
    tc->n_dep = 0;
    for (size_t i = 0, j = 0; i < nb || j < nn;) {
        const uint32_t *r =
            j >= nn || (i < nb && base->dep[i] <= mine[j]) ? &base->dep[(i += 2) - 2] : &mine[(j += 2) - 2];
        if (tc->n_dep && r[0] <= tc->dep[tc->n_dep - 1]) {
            if (r[1] > tc->dep[tc->n_dep - 1])
                tc->dep[tc->n_dep - 1] = r[1];
        } else {
            add_dep(tc, r[0], r[1]);
        }
    }
    ci_free(mine);
    return !tc->oom;
}

/* The tokens longer than len bytes. */
static uint32_t n_longer(const struct gram_vocab *v, uint32_t len) {
    uint32_t lo = 0, hi = v->n_toks; // by_len is longest first: the first index whose token is not longer
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v->len[v->by_len[mid]] > len)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Key k's entry; computed when new.  mark: count this as the mask's use of the slot (*first). */
static const struct gram_tc_entry *get_key(struct gram_tcache *tc, const struct tkey *k, bool mark,
                                           bool *first) {
    struct tslot *sl = find_slot(tc, k);
    if (!slot_free(sl)) {
        *first = sl->seen != tc->gen;
        if (mark)
            sl->seen = tc->gen;
        return sl->ent == UNAVAILABLE ? NULL : &tc->ents[sl->ent];
    }
    // A position inside bounded repetitions: the same position in their deepest rules gives the tokens
    // shorter than min(k) - 1 bytes (see "bounded repetitions" above).
    const struct grammar *g = tc->g;
    struct tkey base_key = *k;
    uint32_t short_max = UINT32_MAX; // the tokens of at most this many bytes classify as the base's
    for (int i = 0; i < GRAM_TCACHE_DEPTH && k->pos[i] != GRAM_NONE; i++) {
        uint32_t r = rule_of(g, k->pos[i]), depth = tc->chain_depth[r];
        if (depth >= 2) {
            short_max = depth - 1 < short_max ? depth - 1 : short_max;
            base_key.pos[i] = k->pos[i] - g->rule_start[r] + g->rule_start[tc->chain_top[r]];
        }
    }
    int64_t base_ent = -1;
    // Worth it only when few tokens are that long (else the patch walks nearly the whole trie anyway).
    if (!tc->no_chains && memcmp(&base_key, k, sizeof *k) != 0 &&
        n_longer(tc->v, short_max) <= tc->v->n_toks / 8) {
        bool unused;
        const struct gram_tc_entry *be = get_key(tc, &base_key, false, &unused);
        base_ent = be ? be - tc->ents : -1;
    }
    *first = true;
    if (2 * (tc->n_slots + 1) > tc->mask_slots + 1 && !grow_slots(tc)) // keep the table at most half full
        return NULL;
    sl = find_slot(tc, k);
    tc->n_slots++;
    sl->key = *k;
    sl->seen = mark ? tc->gen : 0;
    if (base_ent >= 0 && short_max >= tc->v->max_len) { // no token is long enough to tell them apart
        sl->ent = (uint32_t)base_ent;
        tc->stats.shared++;
        return &tc->ents[base_ent];
    }
    int64_t t0 = ci_now_ns();
    tc->oom = false;
    bool ok;
    if (base_ent >= 0) {
        ok = classify(tc, k, short_max + 1) && patch(tc, &tc->ents[base_ent], short_max + 1) &&
             store(tc, sl, true);
        tc->stats.patched += ok;
    } else {
        ok = classify(tc, k, 0) && store(tc, sl, false);
    }
    if (!ok) {
        sl->ent = UNAVAILABLE;
        tc->stats.unavailable++;
    }
    tc->stats.ns += (uint64_t)(ci_now_ns() - t0);
    return ok ? &tc->ents[sl->ent] : NULL;
}

const struct gram_tc_entry *gram_tcache_get(struct gram_tcache *tc, const struct gram_space *sp,
                                            uint32_t node, bool *first) {
    struct tkey key;
    for (int i = 0; i < GRAM_TCACHE_DEPTH; i++) {
        key.pos[i] = node ? sp->npos[node] : GRAM_NONE;
        node = node ? sp->nparent[node] : 0;
    }
    return get_key(tc, &key, true, first);
}
