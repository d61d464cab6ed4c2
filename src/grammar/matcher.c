/* The grammar matcher, the token trie and the mask (matcher.h). */
#include "grammar/matcher.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/mem.h"
#include "grammar/matcher_impl.h"
#include "grammar/token_cache.h"

#define NONE GRAM_NONE

/* ---- vocabulary trie ------------------------------------------------------------------------------------- */

void gram_vocab_free(struct gram_vocab *v) {
    if (!v)
        return;
    ci_free(v->pool);
    ci_free(v->off);
    ci_free(v->len);
    ci_free(v->is_eog);
    ci_free(v->eog);
    ci_free(v->nodes);
    ci_free(v->toks);
    ci_free(v->sub_max_len);
    ci_free(v->by_len);
    ci_free(v);
}

int gram_vocab_n(const struct gram_vocab *v) {
    return v->n_vocab;
}
int gram_vocab_n_nodes(const struct gram_vocab *v) {
    return (int)v->n_nodes;
}

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const struct gram_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->pool + v->off[x], v->pool + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int cmp_len_desc(const void *a, const void *b, void *ctx) {
    const struct gram_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->len[x] != v->len[y])
        return v->len[x] > v->len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* sub_max_len (a node's depth is the length of the tokens ending there; children come after their parent in
 * the node array) and by_len.  False when out of memory. */
static bool vocab_lengths(struct gram_vocab *v) {
    uint32_t *depth = ci_calloc(v->n_nodes, sizeof *depth);
    v->sub_max_len = ci_calloc(v->n_nodes, sizeof *v->sub_max_len);
    v->by_len = ci_malloc((v->n_toks ? v->n_toks : 1) * sizeof *v->by_len);
    if (!depth || !v->sub_max_len || !v->by_len) {
        ci_free(depth);
        return false;
    }
    for (uint32_t i = 0; i < v->n_nodes; i++)
        for (uint32_t c = v->nodes[i].first_child; c != NONE; c = v->nodes[c].next_sibling)
            depth[c] = depth[i] + 1;
    for (uint32_t i = v->n_nodes; i-- > 0;) {
        uint32_t m = v->nodes[i].tok_n ? depth[i] : 0;
        for (uint32_t c = v->nodes[i].first_child; c != NONE; c = v->nodes[c].next_sibling)
            m = v->sub_max_len[c] > m ? v->sub_max_len[c] : m;
        v->sub_max_len[i] = m;
    }
    ci_free(depth);
    memcpy(v->by_len, v->toks, v->n_toks * sizeof *v->by_len);
    qsort_r(v->by_len, v->n_toks, sizeof *v->by_len, cmp_len_desc, v);
    return true;
}

enum ci_status gram_vocab_create(int n_vocab, const char *const *bytes, const uint32_t *lens,
                                 const int32_t *eog, int n_eog, struct gram_vocab **out, struct ci_err *err) {
    *out = NULL;
    if (n_vocab <= 0 || n_eog < 0)
        return ci_err_set(err, CI_ERR_INVALID, "grammar vocabulary: %d tokens", n_vocab);
    struct gram_vocab *v = ci_calloc(1, sizeof *v);
    if (!v)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    v->n_vocab = n_vocab;
    uint64_t total = 0;
    for (int i = 0; i < n_vocab; i++)
        total += bytes[i] ? lens[i] : 0;
    v->pool = ci_malloc(total ? total : 1);
    v->off = ci_calloc((size_t)n_vocab, sizeof *v->off);
    v->len = ci_calloc((size_t)n_vocab, sizeof *v->len);
    v->is_eog = ci_calloc((size_t)n_vocab, 1);
    v->eog = ci_calloc((size_t)(n_eog ? n_eog : 1), sizeof *v->eog);
    v->toks = ci_calloc((size_t)n_vocab, sizeof *v->toks);
    v->nodes = ci_calloc(total + 1, sizeof *v->nodes); // at most one node per byte, plus the root
    uint32_t *path = NULL;
    if (!v->pool || !v->off || !v->len || !v->is_eog || !v->eog || !v->toks || !v->nodes)
        goto nomem;
    for (int i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n_vocab) {
            gram_vocab_free(v);
            return ci_err_set(err, CI_ERR_INVALID, "grammar vocabulary: end token %d outside [0, %d)", eog[i],
                              n_vocab);
        }
        v->is_eog[eog[i]] = 1;
        v->eog[v->n_eog++] = eog[i];
    }
    uint64_t at = 0;
    int n_toks = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->off[i] = at;
        if (!bytes[i] || !lens[i] || v->is_eog[i])
            continue;
        memcpy(v->pool + at, bytes[i], lens[i]);
        v->len[i] = lens[i];
        at += lens[i];
        v->max_len = lens[i] > v->max_len ? lens[i] : v->max_len;
        v->toks[n_toks++] = i;
    }
    qsort_r(v->toks, (size_t)n_toks, sizeof *v->toks, cmp_tok, v);
    if (!(path = ci_calloc(v->max_len + 1, sizeof *path)))
        goto nomem;
    v->nodes[0] = (struct trie_node){NONE, NONE, 0, 0, 0, (uint32_t)n_toks, 0};
    v->n_nodes = 1;
    uint32_t *lastc = ci_malloc((total + 1) * sizeof *lastc);
    if (!lastc)
        goto nomem;
    lastc[0] = NONE;
    int32_t prev = -1;
    for (int k = 0; k < n_toks; k++) {
        int32_t t = v->toks[k];
        const char *s = v->pool + v->off[t];
        uint32_t L = v->len[t], lcp = 0;
        if (prev >= 0) {
            const char *ps = v->pool + v->off[prev];
            uint32_t PL = v->len[prev];
            while (lcp < L && lcp < PL && s[lcp] == ps[lcp])
                lcp++;
        }
        path[0] = 0;
        for (uint32_t d = lcp; d < L; d++) {
            uint32_t p = path[d], c = v->n_nodes++;
            v->nodes[c] = (struct trie_node){NONE, NONE, 0, 0, (uint32_t)k, (uint32_t)k + 1, (uint8_t)s[d]};
            lastc[c] = NONE;
            if (lastc[p] == NONE)
                v->nodes[p].first_child = c;
            else
                v->nodes[lastc[p]].next_sibling = c;
            lastc[p] = c;
            path[d + 1] = c;
        }
        for (uint32_t d = 0; d <= L; d++) { // k is the largest rank under the path yet (ranks come in order)
            struct trie_node *pn = &v->nodes[path[d]];
            pn->sub_first = pn->sub_first < (uint32_t)k ? pn->sub_first : (uint32_t)k;
            pn->sub_end = (uint32_t)k + 1;
        }
        struct trie_node *n = &v->nodes[path[L]];
        if (n->tok_n == 0)
            n->tok_first = (uint32_t)k;
        n->tok_n++;
        prev = t;
    }
    ci_free(lastc);
    ci_free(path);
    v->n_toks = (uint32_t)n_toks;
    if (!vocab_lengths(v)) {
        gram_vocab_free(v);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    *out = v;
    return CI_OK;
nomem:
    ci_free(path);
    gram_vocab_free(v);
    return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
}

/* ---- matcher --------------------------------------------------------------------------------------------- */

struct gram_matcher {
    struct gram_space *sp;
    bool owns_space;
    uint32_t *st; // the current state: sorted stack node ids [n_st], and a partial character
    uint32_t n_st, cap_st;
    struct u8state u;
    bool done;
};

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static bool grow_nodes(struct gram_space *m) {
    uint32_t cap = m->cap_nodes ? 2 * m->cap_nodes : 256;
    uint32_t *p = ci_realloc(m->npos, cap * sizeof *p);
    if (!p)
        return false;
    m->npos = p;
    p = ci_realloc(m->nparent, cap * sizeof *p);
    if (!p)
        return false;
    m->nparent = p;
    uint32_t *h = ci_calloc(2 * (size_t)cap, sizeof *h);
    if (!h)
        return false;
    ci_free(m->htab);
    m->htab = h;
    m->hmask = 2 * cap - 1;
    m->cap_nodes = cap;
    for (uint32_t id = 1; id < m->n_nodes; id++) {
        uint32_t i = (uint32_t)mix(((uint64_t)m->npos[id] << 32) | m->nparent[id]) & m->hmask;
        while (m->htab[i])
            i = (i + 1) & m->hmask;
        m->htab[i] = id + 1;
    }
    return true;
}

uint32_t gram_intern(struct gram_space *m, uint32_t pos, uint32_t parent) {
    uint32_t i = (uint32_t)mix(((uint64_t)pos << 32) | parent) & m->hmask;
    for (; m->htab[i]; i = (i + 1) & m->hmask) {
        uint32_t id = m->htab[i] - 1;
        if (m->npos[id] == pos && m->nparent[id] == parent)
            return id;
    }
    if (m->n_nodes == m->cap_nodes || m->n_nodes >= UINT32_MAX / 4) {
        if (m->n_nodes >= UINT32_MAX / 4 || !grow_nodes(m)) {
            m->failed = true;
            return 0;
        }
        return gram_intern(m, pos, parent);
    }
    uint32_t id = m->n_nodes++;
    m->npos[id] = pos;
    m->nparent[id] = parent;
    m->htab[i] = id + 1;
    return id;
}

/* A new closure: forget the expansions of the last one. */
static void visit_reset(struct gram_space *m) {
    m->vn = 0;
    if (++m->vcur == 0) { // the stamps wrapped: clear them
        if (m->vgen)
            memset(m->vgen, 0, ((size_t)m->vmask + 1) * sizeof *m->vgen);
        m->vcur = 1;
    }
}

/* True the first time key is seen in this closure (false again after; also when out of memory, with failed
 * set). */
static bool visit_once(struct gram_space *m, uint64_t key) {
    if (!m->vkey || ((size_t)m->vn + 1) * 2 > (size_t)m->vmask + 1) {
        size_t cap = m->vkey ? 2 * ((size_t)m->vmask + 1) : 256;
        uint64_t *k = ci_malloc(cap * sizeof *k);
        uint32_t *gen = ci_calloc(cap, sizeof *gen);
        if (!k || !gen || cap > UINT32_MAX) {
            ci_free(k);
            ci_free(gen);
            m->failed = true;
            return false;
        }
        for (size_t i = 0; m->vkey && i <= m->vmask; i++)
            if (m->vgen[i] == m->vcur) {
                size_t j = (size_t)mix(m->vkey[i]) & (cap - 1);
                while (gen[j] == m->vcur)
                    j = (j + 1) & (cap - 1);
                k[j] = m->vkey[i];
                gen[j] = m->vcur;
            }
        ci_free(m->vkey);
        ci_free(m->vgen);
        m->vkey = k;
        m->vgen = gen;
        m->vmask = (uint32_t)(cap - 1);
    }
    uint32_t i = (uint32_t)mix(key) & m->vmask;
    for (; m->vgen[i] == m->vcur; i = (i + 1) & m->vmask)
        if (m->vkey[i] == key)
            return false;
    m->vkey[i] = key;
    m->vgen[i] = m->vcur;
    m->vn++;
    return true;
}

static bool arena_reserve(struct gram_space *m, size_t more) {
    if (m->n_arena + more <= m->cap_arena)
        return true;
    size_t cap = m->cap_arena ? m->cap_arena : 1024;
    while (cap < m->n_arena + more)
        cap *= 2;
    uint32_t *a = ci_realloc(m->arena, cap * sizeof *a);
    if (!a) {
        m->failed = true;
        return false;
    }
    m->arena = a;
    m->cap_arena = cap;
    return true;
}

static void arena_push(struct gram_space *m, uint32_t x) {
    if (arena_reserve(m, 1))
        m->arena[m->n_arena++] = x;
}

/* Appends to the arena every stack reached from (pos, parent) by expanding rule references at the left edge
 * and popping finished rules: stacks whose top is a character class, or the empty stack (0). */
static void expand(struct gram_space *m, uint32_t pos, uint32_t parent, int depth, size_t base) {
    if (m->failed)
        return;
    if (depth > 2 * GRAM_MAX_DEPTH + 16 || m->n_arena - base > 8 * GRAM_MAX_STACKS) {
        m->failed = true;
        return;
    }
    const struct grammar *g = m->g;
    uint32_t op = g->elems[pos].op;
    if (gram_is_end(op)) {
        if (parent == m->unknown)
            m->escaped = true; // the table's scratch: what follows depends on the stack below
        else if (parent == 0)
            arena_push(m, 0);
        else
            expand(m, m->npos[parent], m->nparent[parent], depth + 1, base);
    } else if (op == GRAM_REF) {
        uint32_t ret = pos + 1;
        uint32_t retnode = gram_is_end(g->elems[ret].op) ? parent : gram_intern(m, ret, parent);
        // the same rule over the same stack again in this closure adds nothing (and may be a tail-call cycle)
        if (!visit_once(m, ((uint64_t)g->elems[pos].val << 32) | retnode))
            return;
        uint32_t i = g->rule_start[g->elems[pos].val];
        for (;;) {
            expand(m, i, retnode, depth + 1, base);
            while (!gram_is_end(g->elems[i].op))
                i++;
            if (g->elems[i].op == GRAM_END)
                break;
            i++;
        }
    } else {
        arena_push(m, gram_intern(m, pos, parent));
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts and deduplicates arena[base ..]; returns the count. */
static uint32_t finish_set(struct gram_space *m, size_t base) {
    size_t n = m->n_arena - base;
    uint32_t *a = m->arena + base;
    qsort(a, n, sizeof *a, cmp_u32);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || a[i] != a[k - 1])
            a[k++] = a[i];
    m->n_arena = base + k;
    if (k > GRAM_MAX_STACKS)
        m->failed = true;
    return (uint32_t)k;
}

/* The stacks after code point cp from the set in->off/n; appended to the arena as out. */
static void advance_cp(struct gram_space *m, const struct mstate *in, uint32_t cp, struct mstate *out) {
    size_t base = m->n_arena;
    visit_reset(m);
    for (uint32_t k = 0; k < in->n; k++) {
        uint32_t id = m->arena[in->off + k];
        if (id == 0)
            continue;
        uint32_t pos = m->npos[id];
        if (gram_class_matches(m->g, pos, cp))
            expand(m, gram_class_end(m->g, pos), m->nparent[id], 0, base);
    }
    out->off = base;
    out->n = finish_set(m, base);
    out->u = (struct u8state){0, 0, 0, 0};
}

static bool some_top_intersects(struct gram_space *m, const struct mstate *s, uint32_t lo, uint32_t hi) {
    for (uint32_t k = 0; k < s->n; k++) {
        uint32_t id = m->arena[s->off + k];
        if (id != 0 && gram_class_intersects(m->g, m->npos[id], lo, hi))
            return true;
    }
    return false;
}

bool gram_step_byte(struct gram_space *m, const struct mstate *in, uint8_t b, struct mstate *out) {
    if (in->u.rem == 0) {
        if (b < 0x80) {
            advance_cp(m, in, b, out);
            return !m->failed && out->n > 0;
        }
        uint8_t rem, lo = 0x80, hi = 0xBF;
        uint32_t acc;
        if (b >= 0xC2 && b <= 0xDF) {
            rem = 1;
            acc = b & 0x1F;
        } else if (b >= 0xE0 && b <= 0xEF) {
            rem = 2;
            acc = b & 0x0F;
            if (b == 0xE0)
                lo = 0xA0;
            if (b == 0xED)
                hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            rem = 3;
            acc = b & 0x07;
            if (b == 0xF0)
                lo = 0x90;
            if (b == 0xF4)
                hi = 0x8F;
        } else {
            return false;
        }
        *out = *in;
        out->u = (struct u8state){acc, rem, lo, hi};
        unsigned sh = 6u * (rem - 1u);
        uint32_t clo = ((acc << 6) | (lo & 0x3Fu)) << sh,
                 chi = (((acc << 6) | (hi & 0x3Fu)) << sh) | ((1u << sh) - 1);
        return some_top_intersects(m, in, clo, chi);
    }
    if (b < in->u.lo || b > in->u.hi)
        return false;
    uint32_t acc = (in->u.acc << 6) | (b & 0x3Fu);
    uint8_t rem = (uint8_t)(in->u.rem - 1);
    if (rem == 0) {
        advance_cp(m, in, acc, out);
        return !m->failed && out->n > 0;
    }
    *out = *in;
    out->u = (struct u8state){acc, rem, 0x80, 0xBF};
    unsigned sh = 6u * rem;
    return some_top_intersects(m, in, acc << sh, (acc << sh) | ((1u << sh) - 1));
}

/* Copies the matcher's state into the space's (emptied) arena. */
static bool load_state(struct gram_matcher *mt, struct mstate *s) {
    struct gram_space *m = mt->sp;
    m->n_arena = 0;
    m->failed = false;
    if (!arena_reserve(m, mt->n_st))
        return false;
    memcpy(m->arena, mt->st, mt->n_st * sizeof *mt->st);
    m->n_arena = mt->n_st;
    *s = (struct mstate){0, mt->n_st, mt->u};
    return true;
}

static bool run_bytes(struct gram_matcher *mt, const char *bytes, size_t n, struct mstate *s) {
    struct gram_space *m = mt->sp;
    if (mt->done || !load_state(mt, s))
        return false;
    for (size_t i = 0; i < n; i++) {
        struct mstate next;
        if (!gram_step_byte(m, s, (uint8_t)bytes[i], &next) || m->failed)
            return false;
        *s = next;
    }
    return true;
}

bool gram_matcher_try_bytes(struct gram_matcher *m, const char *bytes, size_t n) {
    struct mstate s;
    return run_bytes(m, bytes, n, &s);
}

/* Makes s (in the space's arena) the matcher's state. */
static bool commit_state(struct gram_matcher *m, const struct mstate *s) {
    if (s->n > m->cap_st) {
        uint32_t *p = ci_realloc(m->st, s->n * sizeof *p);
        if (!p)
            return false;
        m->st = p;
        m->cap_st = s->n;
    }
    memmove(m->st, m->sp->arena + s->off, s->n * sizeof *m->st);
    m->n_st = s->n;
    m->u = s->u;
    return true;
}

bool gram_matcher_accept_bytes(struct gram_matcher *m, const char *bytes, size_t n) {
    struct mstate s;
    return run_bytes(m, bytes, n, &s) && commit_state(m, &s);
}

/* Whether the state has a stack whose top is a token reference (they take whole tokens, at a character
 * boundary only). */
static bool has_token_tops(const struct gram_matcher *mt) {
    const struct gram_space *m = mt->sp;
    if (mt->u.rem != 0)
        return false;
    for (uint32_t k = 0; k < mt->n_st; k++)
        if (mt->st[k] != 0 && gram_is_token(m->g->elems[m->npos[mt->st[k]]].op))
            return true;
    return false;
}

/* Token id over a state with token references on top (llama.cpp's llama_grammar_accept_token): the stacks
 * whose top takes id by its id move past it, the others take its bytes; the new state is both.  A byte
 * path that ends inside a character cannot share a state with whole-token stacks: it is dropped when the
 * token path has any (so the token keeps exactly the parses that named it). */
static bool accept_token_tops(struct gram_matcher *mt, int32_t id) {
    struct gram_space *m = mt->sp;
    const struct gram_vocab *v = m->v;
    struct mstate s = {0};
    bool by_bytes = v->len[id] && run_bytes(mt, v->pool + v->off[id], v->len[id], &s) && !m->failed;
    if (!by_bytes) {
        m->n_arena = 0;
        m->failed = false;
        s = (struct mstate){0};
    }
    size_t base = m->n_arena;
    visit_reset(m);
    for (uint32_t k = 0; k < mt->n_st; k++) {
        uint32_t node = mt->st[k];
        if (node != 0 && gram_token_matches(m->g, m->npos[node], id))
            expand(m, m->npos[node] + 1, m->nparent[node], 0, base);
    }
    if (m->failed)
        return false;
    if (m->n_arena == base) // no stack named the token: its bytes alone
        return by_bytes && commit_state(mt, &s);
    if (by_bytes && s.u.rem == 0)
        for (uint32_t k = 0; k < s.n; k++)
            arena_push(m, m->arena[s.off + k]);
    struct mstate out = {base, finish_set(m, base), {0, 0, 0, 0}};
    return !m->failed && commit_state(mt, &out);
}

bool gram_matcher_is_accepting(const struct gram_matcher *m) {
    return m->done || (m->u.rem == 0 && m->n_st > 0 && m->st[0] == 0);
}

bool gram_matcher_is_done(const struct gram_matcher *m) {
    return m->done || (m->u.rem == 0 && m->n_st == 1 && m->st[0] == 0);
}

bool gram_matcher_accept_token(struct gram_matcher *m, int32_t id) {
    const struct gram_vocab *v = m->sp->v;
    if (m->done || id < 0 || id >= v->n_vocab)
        return false;
    if (v->is_eog[id]) {
        if (!gram_matcher_is_accepting(m))
            return false;
        m->done = true;
        return true;
    }
    if (has_token_tops(m))
        return accept_token_tops(m, id);
    if (!v->len[id])
        return false;
    return gram_matcher_accept_bytes(m, v->pool + v->off[id], v->len[id]);
}

void gram_space_free(struct gram_space *m) {
    if (!m)
        return;
    ci_free(m->npos);
    ci_free(m->nparent);
    ci_free(m->htab);
    ci_free(m->arena);
    ci_free(m->vkey);
    ci_free(m->vgen);
    ci_free(m->frames);
    ci_free(m->start);
    ci_free(m->dep);
    gram_tcache_free(m->tc);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        ci_free(m->cache[i].key);
        ci_free(m->cache[i].bits);
    }
    ci_free(m);
}

void gram_matcher_free(struct gram_matcher *m) {
    if (!m)
        return;
    if (m->owns_space)
        gram_space_free(m->sp);
    ci_free(m->st);
    ci_free(m);
}

struct gram_space *gram_space_scratch(const struct grammar *g, const struct gram_vocab *v) {
    struct gram_space *m = ci_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = g;
    m->v = v;
    m->unknown = NONE;
    m->frames = ci_calloc(v->max_len + 2, sizeof *m->frames);
    if (!m->frames || !grow_nodes(m)) {
        gram_space_free(m);
        return NULL;
    }
    m->npos[0] = NONE;
    m->nparent[0] = 0;
    m->n_nodes = 1;
    return m;
}

void gram_space_reset_nodes(struct gram_space *m) {
    if ((size_t)m->n_nodes * 8 > (size_t)m->hmask + 1) {
        memset(m->htab, 0, ((size_t)m->hmask + 1) * sizeof *m->htab);
    } else { // few nodes in a table grown by an earlier walk: clear just theirs (each is on its probe path)
        for (uint32_t id = 1; id < m->n_nodes; id++) {
            uint32_t i = (uint32_t)mix(((uint64_t)m->npos[id] << 32) | m->nparent[id]) & m->hmask;
            while (m->htab[i] != id + 1)
                i = (i + 1) & m->hmask;
            m->htab[i] = 0;
        }
    }
    m->n_nodes = 1;
}

void gram_space_use_table(struct gram_space *sp, bool on) {
    sp->tc_off = !on;
}

void gram_space_table_limit(struct gram_space *sp, uint64_t bytes) {
    sp->tc_limit = bytes;
    if (sp->tc)
        gram_tcache_set_limit(sp->tc, bytes);
}

enum ci_status gram_space_create(const struct grammar *g, const struct gram_vocab *v, struct gram_space **out,
                                 struct ci_err *err) {
    *out = NULL;
    struct gram_space *m = gram_space_scratch(g, v);
    if (!m)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    const char *env = getenv("CINFER_GRAMMAR_TABLE"); // "0": the trie walk only (to compare, README)
    m->tc_off = env && !strcmp(env, "0");
    // The start state: every alternative of the start rule expanded with nothing below it.
    m->n_arena = 0;
    visit_reset(m);
    uint32_t i = g->rule_start[g->start];
    for (;;) {
        expand(m, i, 0, 0, 0);
        while (!gram_is_end(g->elems[i].op))
            i++;
        if (g->elems[i].op == GRAM_END)
            break;
        i++;
    }
    uint32_t n = finish_set(m, 0);
    if (m->failed) {
        gram_space_free(m);
        return ci_err_set(err, CI_ERR_LIMIT, "the grammar's start needs more than %d parses at once",
                          GRAM_MAX_STACKS);
    }
    if (!(m->start = ci_malloc((n ? n : 1) * sizeof *m->start))) {
        gram_space_free(m);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    memcpy(m->start, m->arena, n * sizeof *m->start);
    m->n_start = n;
    *out = m;
    return CI_OK;
}

static enum ci_status set_state(struct gram_matcher *m, const uint32_t *ids, uint32_t n, struct ci_err *err) {
    uint32_t *p = ci_malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    memcpy(p, ids, n * sizeof *p);
    ci_free(m->st);
    m->st = p;
    m->n_st = m->cap_st = n;
    return CI_OK;
}

enum ci_status gram_matcher_create_in(struct gram_space *sp, struct gram_matcher **out, struct ci_err *err) {
    *out = NULL;
    struct gram_matcher *m = ci_calloc(1, sizeof *m);
    if (!m)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    m->sp = sp;
    enum ci_status s = set_state(m, sp->start, sp->n_start, err);
    if (s != CI_OK) {
        ci_free(m);
        return s;
    }
    *out = m;
    return CI_OK;
}

enum ci_status gram_matcher_create(const struct grammar *g, const struct gram_vocab *v,
                                   struct gram_matcher **out, struct ci_err *err) {
    *out = NULL;
    struct gram_space *sp;
    enum ci_status s = gram_space_create(g, v, &sp, err);
    if (s != CI_OK)
        return s;
    if ((s = gram_matcher_create_in(sp, out, err)) != CI_OK) {
        gram_space_free(sp);
        return s;
    }
    (*out)->owns_space = true;
    return CI_OK;
}

enum ci_status gram_matcher_clone(const struct gram_matcher *src, struct gram_matcher **out,
                                  struct ci_err *err) {
    *out = NULL;
    enum ci_status s = gram_matcher_create_in(src->sp, out, err); // shares src's space (not owned)
    if (s == CI_OK && (s = set_state(*out, src->st, src->n_st, err)) != CI_OK) {
        gram_matcher_free(*out);
        *out = NULL;
    }
    if (s == CI_OK) {
        (*out)->u = src->u;
        (*out)->done = src->done;
    }
    return s;
}

/* ---- the mask -------------------------------------------------------------------------------------------- */

static void set_node_tokens(const struct gram_vocab *v, uint32_t node, uint32_t *bits) {
    const struct trie_node *t = &v->nodes[node];
    for (uint32_t k = 0; k < t->tok_n; k++) {
        int32_t id = v->toks[t->tok_first + k];
        bits[id >> 5] |= 1u << (id & 31);
    }
}

/* The first set rank >= from in dep (ranks [0, n)), or UINT32_MAX. */
static uint32_t next_dep(const uint32_t *dep, uint32_t n, uint32_t from) {
    uint32_t nw = (n + 31) / 32;
    for (uint32_t w = from >> 5; w < nw; w++) {
        uint32_t x = dep[w] & (w == from >> 5 ? ~0u << (from & 31) : ~0u);
        if (x)
            return w * 32 + (uint32_t)__builtin_ctz(x);
    }
    return UINT32_MAX;
}

/* Walks the trie depth first from the state, advancing a copy of it one byte per edge (a dead prefix prunes
 * its subtree), and sets the bits of the tokens the state takes.  dep (a bitset of ranks; NULL: every
 * token): only those tokens, and subtrees without one are skipped.  False when out of memory. */
static bool walk(struct gram_matcher *mt, uint32_t *bits, const uint32_t *dep) {
    struct gram_space *m = mt->sp;
    const struct gram_vocab *v = m->v;
    struct mstate s0;
    if (!load_state(mt, &s0))
        return false;
    // The first dependent rank at or after the last subtree looked at: subtrees come in rank order.
    uint32_t cur = dep ? next_dep(dep, v->n_toks, 0) : 0;
    struct frame *fr = m->frames;
    int top = 0;
    fr[0] = (struct frame){v->nodes[0].first_child, m->n_arena, s0};
    while (top >= 0) {
        struct frame *f = &fr[top];
        uint32_t c = f->child;
        if (c == NONE) {
            m->n_arena = f->mark;
            top--;
            continue;
        }
        const struct trie_node *t = &v->nodes[c];
        f->child = t->next_sibling;
        if (dep) {
            if (cur < t->sub_first)
                cur = next_dep(dep, v->n_toks, t->sub_first);
            if (cur >= t->sub_end)
                continue;
        }
        size_t mark = m->n_arena;
        struct mstate ns;
        m->stats.nodes_visited++;
        m->failed = false;
        if (!gram_step_byte(m, &f->s, t->byte, &ns) || m->failed) {
            m->n_arena = mark;
            continue;
        }
        if (!dep) {
            set_node_tokens(v, c, bits);
        } else {
            for (uint32_t r = t->tok_first; r < t->tok_first + t->tok_n; r++)
                if ((dep[r >> 5] >> (r & 31)) & 1u) {
                    int32_t id = v->toks[r];
                    bits[id >> 5] |= 1u << (id & 31);
                }
        }
        if (t->first_child != NONE) {
            fr[++top] = (struct frame){t->first_child, mark, ns};
        } else {
            m->n_arena = mark;
        }
    }
    return true;
}

static void set_ranks(uint32_t *dep, uint32_t a, uint32_t b) {
    for (; a < b && (a & 31); a++)
        dep[a >> 5] |= 1u << (a & 31);
    for (; a + 32 <= b; a += 32)
        dep[a >> 5] = ~0u;
    for (; a < b; a++)
        dep[a >> 5] |= 1u << (a & 31);
}

/* The space's table, made on first use; false when out of memory (the space then masks by the walk). */
static bool ensure_table(struct gram_space *m) {
    if (m->tc)
        return true;
    m->tc = gram_tcache_create(m->g, m->v);
    if (m->tc && m->tc_limit)
        gram_tcache_set_limit(m->tc, m->tc_limit);
    m->dep = ci_calloc(((size_t)m->v->n_toks + 31) / 32 + 1, sizeof *m->dep);
    if (!m->tc || !m->dep) {
        gram_tcache_free(m->tc);
        ci_free(m->dep);
        m->tc = NULL;
        m->dep = NULL;
        m->tc_off = true;
        return false;
    }
    return true;
}

/* The mask from the per-position table (token_cache.h): the union of the tops' accepted tokens, plus their
 * dependent tokens that the whole state takes.  False (bits then partly written) when the table is off or
 * does not apply: a partial character pending, or a top's entry unavailable. */
static bool mask_from_table(struct gram_matcher *mt, uint32_t *bits) {
    struct gram_space *m = mt->sp;
    const struct gram_vocab *v = m->v;
    // Many parses at once: the walk, whose GRAM_MAX_STACKS limits the table cannot see (token_cache.h).
    if (m->tc_off || mt->u.rem != 0 || mt->n_st > GRAM_MAX_STACKS / 16)
        return false;
    size_t dwords = ((size_t)v->n_toks + 31) / 32;
    if (!ensure_table(m))
        return false;
    gram_tcache_new_mask(m->tc);
    bool any_dep = false, ok = true;
    for (uint32_t k = 0; k < mt->n_st && ok; k++) {
        uint32_t id = mt->st[k];
        if (id == 0 || gram_is_token(m->g->elems[m->npos[id]].op)) // token references: mask_token_tops
            continue;
        bool first;
        const struct gram_tc_entry *e = gram_tcache_get(m->tc, m, id, &first);
        if (!e) {
            ok = false;
            break;
        }
        if (!first)
            continue;
        if (e->acc_bits)
            for (uint32_t w = 0; w < e->n_acc; w++)
                bits[w] |= e->acc[w];
        else
            for (uint32_t i = 0; i < e->n_acc; i++)
                bits[e->acc[i] >> 5] |= 1u << (e->acc[i] & 31);
        for (uint32_t i = 0; i < e->n_dep; i++)
            set_ranks(m->dep, e->dep[2 * i], e->dep[2 * i + 1]);
        any_dep |= e->n_dep > 0;
    }
    if (ok && any_dep) {
        ok = walk(mt, bits, m->dep);
        m->stats.table_dep_walks++;
    }
    if (any_dep)
        memset(m->dep, 0, dwords * sizeof *m->dep);
    if (ok)
        m->stats.table_masks++;
    return ok;
}

/* The tokens that the state's token references take (by id; end-of-generation tokens never). */
static void mask_token_tops(const struct gram_matcher *mt, uint32_t *bits) {
    const struct gram_space *m = mt->sp;
    const struct gram_vocab *v = m->v;
    for (uint32_t k = 0; k < mt->n_st; k++) {
        if (mt->st[k] == 0)
            continue;
        const struct gram_elem *e = &m->g->elems[m->npos[mt->st[k]]];
        if (e->op == GRAM_TOKEN && e->val < (uint32_t)v->n_vocab && !v->is_eog[e->val]) {
            bits[e->val >> 5] |= 1u << (e->val & 31);
        } else if (e->op == GRAM_TOKEN_NOT) {
            for (int id = 0; id < v->n_vocab; id++)
                if (!v->is_eog[id] && (uint32_t)id != e->val)
                    bits[id >> 5] |= 1u << (id & 31);
        }
    }
}

enum ci_status gram_matcher_mask(struct gram_matcher *mt, uint32_t *bits, struct ci_err *err) {
    struct gram_space *m = mt->sp;
    const struct gram_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    memset(bits, 0, words * sizeof *bits);
    m->stats.masks++;
    if (mt->done)
        return CI_OK;
    // The cache key: the stack set, then the UTF-8 state.
    uint64_t h =
        ci_hash_bytes(mt->u.acc * 0x10001ULL + mt->u.rem * 0x100ULL + mt->u.lo + ((uint64_t)mt->u.hi << 40),
                      mt->st, mt->n_st * sizeof *mt->st);
    uint32_t ukey[4] = {mt->u.acc, mt->u.rem, mt->u.lo, mt->u.hi};
    for (int i = 0; i < CACHE_SLOTS; i++) {
        struct cache_entry *c = &m->cache[i];
        if (c->bits && c->hash == h && c->n_key == mt->n_st + 4 &&
            memcmp(c->key, mt->st, mt->n_st * sizeof *mt->st) == 0 &&
            memcmp(c->key + mt->n_st, ukey, sizeof ukey) == 0) {
            memcpy(bits, c->bits, words * sizeof *bits);
            m->stats.cache_hits++;
            return CI_OK;
        }
    }
    if (!mask_from_table(mt, bits)) {
        memset(bits, 0, words * sizeof *bits);
        if (!walk(mt, bits, NULL))
            return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    if (has_token_tops(mt))
        mask_token_tops(mt, bits);
    if (gram_matcher_is_accepting(mt))
        for (int i = 0; i < v->n_eog; i++)
            bits[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    // Remember it (round robin).
    struct cache_entry *c = &m->cache[m->cache_next];
    m->cache_next = (m->cache_next + 1) % CACHE_SLOTS;
    uint32_t *key = ci_realloc(c->key, (mt->n_st + 4) * sizeof *key);
    if (key) {
        c->key = key;
        if (!c->bits)
            c->bits = ci_malloc(words * sizeof *bits);
    }
    if (key && c->bits) {
        memcpy(key, mt->st, mt->n_st * sizeof *key);
        memcpy(key + mt->n_st, ukey, sizeof ukey);
        c->n_key = mt->n_st + 4;
        c->hash = h;
        memcpy(c->bits, bits, words * sizeof *bits);
    } else {
        c->n_key = 0;
    }
    return CI_OK;
}

void gram_matcher_stats(const struct gram_matcher *m, struct gram_matcher_stats *out) {
    *out = m->sp->stats;
    if (m->sp->tc) {
        struct gram_tcache_stats ts;
        gram_tcache_stats(m->sp->tc, &ts);
        out->table_positions = ts.computed;
        out->table_shared = ts.shared;
        out->table_patched = ts.patched;
        out->table_unavailable = ts.unavailable;
        out->table_bytes = ts.bytes;
        out->table_ns = ts.ns;
        out->table_acc_tokens = ts.acc_tokens;
        out->table_dep_tokens = ts.dep_tokens;
    }
    out->n_stacks = m->n_st;
    out->n_nodes = m->sp->n_nodes;
}
