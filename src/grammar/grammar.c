/* Grammar representation: the builder, validation and the character-class queries (grammar.h). */
#include "grammar/grammar.h"

#include <stdio.h>
#include <string.h>

#include "core/mem.h"

struct brule {
    char *name;
    struct gram_elem *elems; // without the final GRAM_END
    size_t n, cap;
    bool defined;
    int line, col; // first reference (undefined-rule error) or definition
};

struct gram_builder {
    struct brule *rules;
    uint32_t n_rules, cap_rules;
    size_t total_elems;
    uint32_t n_generated;
    uint32_t *index; // open addressing over rule names: rule id + 1, 0 free; [index_mask + 1]
    uint32_t index_mask;
};

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

void gram_free(struct grammar *g) {
    if (!g)
        return;
    for (uint32_t i = 0; i < g->n_rules; i++)
        ci_free(g->rule_names[i]);
    ci_free(g->rule_names);
    ci_free(g->rule_start);
    ci_free(g->elems);
    ci_free(g);
}

uint32_t gram_class_end(const struct grammar *g, uint32_t i) {
    if (g->elems[i].op == GRAM_CHAR_ANY || gram_is_token(g->elems[i].op))
        return i + 1;
    i++;
    while (i < g->n_elems && (g->elems[i].op == GRAM_CHAR_RNG || g->elems[i].op == GRAM_CHAR_ALT))
        i++;
    return i;
}

/* The next range of a class: *j starts at the class's first element and moves past each range read. */
static bool class_range(const struct grammar *g, uint32_t first, uint32_t *j, uint32_t *lo, uint32_t *hi) {
    if (*j >= g->n_elems)
        return false;
    uint32_t op = g->elems[*j].op;
    if (*j == first ? !(op == GRAM_CHAR || op == GRAM_CHAR_NOT) : op != GRAM_CHAR_ALT)
        return false;
    *lo = *hi = g->elems[*j].val;
    (*j)++;
    if (*j < g->n_elems && g->elems[*j].op == GRAM_CHAR_RNG) {
        *hi = g->elems[*j].val;
        (*j)++;
    }
    return true;
}

bool gram_class_matches(const struct grammar *g, uint32_t i, uint32_t cp) {
    uint32_t op = g->elems[i].op;
    if (op == GRAM_CHAR_ANY)
        return true;
    if (gram_is_token(op))
        return false;
    bool in = false;
    uint32_t j = i, lo, hi;
    while (class_range(g, i, &j, &lo, &hi)) {
        if (cp >= lo && cp <= hi) {
            in = true;
            break;
        }
    }
    return op == GRAM_CHAR_NOT ? !in : in;
}

bool gram_class_intersects(const struct grammar *g, uint32_t i, uint32_t lo, uint32_t hi) {
    uint32_t op = g->elems[i].op;
    if (lo > hi || gram_is_token(op))
        return false;
    if (op == GRAM_CHAR_ANY)
        return true;
    uint32_t j, a, b;
    if (op == GRAM_CHAR) {
        for (j = i; class_range(g, i, &j, &a, &b);)
            if (a <= hi && b >= lo)
                return true;
        return false;
    }
    // Negated: some point of [lo, hi] outside every range.  Walk lo upwards past covering ranges.
    for (;;) {
        bool moved = false;
        for (j = i; class_range(g, i, &j, &a, &b);) {
            if (a <= lo && b >= lo) {
                if (b >= hi)
                    return false;
                lo = b + 1;
                moved = true;
            }
        }
        if (!moved)
            return true;
    }
}

enum ci_status gram_builder_create(struct gram_builder **out, struct ci_err *err) {
    *out = ci_calloc(1, sizeof **out);
    return *out ? CI_OK : ci_err_set(err, CI_ERR_NOMEM, "out of memory");
}

void gram_builder_free(struct gram_builder *b) {
    if (!b)
        return;
    for (uint32_t i = 0; i < b->n_rules; i++) {
        ci_free(b->rules[i].name);
        ci_free(b->rules[i].elems);
    }
    ci_free(b->rules);
    ci_free(b->index);
    ci_free(b);
}

static enum ci_status add_rule(struct gram_builder *b, const char *name, size_t len, uint32_t *id,
                               struct ci_err *err) {
    if (b->n_rules >= GRAM_MAX_RULES)
        return ci_err_set(err, CI_ERR_LIMIT, "the grammar has more than %u rules", GRAM_MAX_RULES);
    if (b->n_rules == b->cap_rules) {
        uint32_t cap = b->cap_rules ? 2 * b->cap_rules : 16;
        struct brule *r = ci_realloc(b->rules, cap * sizeof *r);
        if (!r)
            return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        b->rules = r;
        b->cap_rules = cap;
    }
    struct brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = ci_malloc(len + 1)))
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    memcpy(r->name, name, len);
    r->name[len] = '\0';
    *id = b->n_rules++;
    if (2 * b->n_rules > b->index_mask) { // rebuild the index at twice the size
        uint32_t cap = b->index_mask ? 2 * (b->index_mask + 1) : 64;
        uint32_t *ix = ci_calloc(cap, sizeof *ix);
        if (!ix)
            return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        ci_free(b->index);
        b->index = ix;
        b->index_mask = cap - 1;
        for (uint32_t k = 0; k < b->n_rules; k++) {
            uint32_t i = (uint32_t)name_hash(b->rules[k].name, strlen(b->rules[k].name)) & b->index_mask;
            while (b->index[i])
                i = (i + 1) & b->index_mask;
            b->index[i] = k + 1;
        }
    } else {
        uint32_t i = (uint32_t)name_hash(name, len) & b->index_mask;
        while (b->index[i])
            i = (i + 1) & b->index_mask;
        b->index[i] = *id + 1;
    }
    return CI_OK;
}

static int find_rule(const struct gram_builder *b, const char *name, size_t len) {
    if (!b->index)
        return -1;
    for (uint32_t i = (uint32_t)name_hash(name, len) & b->index_mask; b->index[i];
         i = (i + 1) & b->index_mask) {
        const char *n = b->rules[b->index[i] - 1].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0)
            return (int)(b->index[i] - 1);
    }
    return -1;
}

enum ci_status gram_rule_id(struct gram_builder *b, const char *name, size_t len, int line, int col,
                            uint32_t *id, struct ci_err *err) {
    int f = find_rule(b, name, len);
    if (f >= 0) {
        *id = (uint32_t)f;
        return CI_OK;
    }
    enum ci_status s = add_rule(b, name, len, id, err);
    if (s == CI_OK) {
        b->rules[*id].line = line;
        b->rules[*id].col = col;
    }
    return s;
}

enum ci_status gram_rule_new(struct gram_builder *b, const char *base, uint32_t *id, struct ci_err *err) {
    char name[96];
    for (;;) {
        snprintf(name, sizeof name, "%.60s_%u", base, ++b->n_generated);
        if (find_rule(b, name, strlen(name)) < 0)
            break;
    }
    return add_rule(b, name, strlen(name), id, err);
}

enum ci_status gram_rule_define(struct gram_builder *b, uint32_t id, const struct gram_elem *elems, size_t n,
                                int line, int col, struct ci_err *err) {
    struct brule *r = &b->rules[id];
    if (r->defined)
        return ci_err_set(err, CI_ERR_INVALID, "line %d, column %d: rule '%s' is defined twice", line, col,
                          r->name);
    if (b->total_elems + n + 1 > GRAM_MAX_ELEMS)
        return ci_err_set(err, CI_ERR_LIMIT, "the grammar is too large (more than %u elements)",
                          GRAM_MAX_ELEMS);
    r->elems = ci_malloc((n ? n : 1) * sizeof *elems);
    if (!r->elems)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    if (n)
        memcpy(r->elems, elems, n * sizeof *elems);
    r->n = r->cap = n;
    r->defined = true;
    r->line = line;
    r->col = col;
    b->total_elems += n + 1;
    return CI_OK;
}

enum ci_status gram_repeat_rule(struct gram_builder *b, const char *base, const struct gram_elem *item,
                                size_t n, int max_extra, uint32_t *id, struct ci_err *err) {
    *id = UINT32_MAX;
    if (max_extra == 0)
        return CI_OK;
    size_t len = n + 2;
    struct gram_elem *buf = ci_malloc(len * sizeof *buf);
    if (!buf)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    enum ci_status s = CI_OK;
    if (max_extra < 0) { // R ::= item R |
        if ((s = gram_rule_new(b, base, id, err)) == CI_OK) {
            memcpy(buf, item, n * sizeof *item);
            buf[n] = (struct gram_elem){GRAM_REF, *id};
            buf[n + 1] = (struct gram_elem){GRAM_ALT, 0};
            s = gram_rule_define(b, *id, buf, n + 2, 0, 0, err);
        }
    } else { // R_1 ::= item | ; R_k ::= item R_{k-1} |
        uint32_t prev = UINT32_MAX;
        for (int k = 1; k <= max_extra && s == CI_OK; k++) {
            uint32_t r;
            if ((s = gram_rule_new(b, base, &r, err)) != CI_OK)
                break;
            memcpy(buf, item, n * sizeof *item);
            size_t m = n;
            if (prev != UINT32_MAX)
                buf[m++] = (struct gram_elem){GRAM_REF, prev};
            buf[m++] = (struct gram_elem){GRAM_ALT, 0};
            s = gram_rule_define(b, r, buf, m, 0, 0, err);
            prev = r;
        }
        *id = prev;
    }
    ci_free(buf);
    return s;
}

/* ---- validation ------------------------------------------------------------------------------------------ */

static bool class_nonempty(const struct grammar *g, uint32_t i) {
    if (gram_is_token(g->elems[i].op))
        return true; // a token reference (its id is checked against the vocabulary by the parser)
    return gram_class_intersects(g, i, 0, 0xD7FF) || gram_class_intersects(g, i, 0xE000, GRAM_MAX_CODEPOINT);
}

/* nullable[r]: rule r derives the empty string.  productive[r]: it derives some string.  A worklist over
 * the alternatives (each counts the references it still waits for), linear in the grammar's size. */
static enum ci_status fixpoints(const struct grammar *g, bool *nullable, bool *productive,
                                struct ci_err *err) {
    uint32_t n_alts = 0, n_refs = 0;
    for (uint32_t i = 0; i < g->n_elems; i++) {
        n_alts += gram_is_end(g->elems[i].op);
        n_refs += g->elems[i].op == GRAM_REF;
    }
    uint32_t *alt_rule = ci_malloc((n_alts + 1) * sizeof *alt_rule);
    uint32_t *wait_null = ci_calloc(n_alts + 1, sizeof *wait_null),
             *wait_prod = ci_calloc(n_alts + 1, sizeof *wait_prod);
    uint32_t *occ_start = ci_calloc(g->n_rules + 1, sizeof *occ_start),
             *occ = ci_malloc((n_refs + 1) * sizeof *occ);
    uint32_t *work = ci_malloc(2 * ((size_t)g->n_rules + 1) * sizeof *work);
    bool *blocked = ci_calloc(n_alts + 1, 1); // holds a character: never nullable
    bool *dead = ci_calloc(n_alts + 1, 1);    // holds an empty class: never productive
    enum ci_status s = CI_OK;
    if (!alt_rule || !wait_null || !wait_prod || !occ_start || !occ || !work || !blocked || !dead) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto done;
    }
    // Pass 1: each alternative's rule and counts; occurrences per referenced rule (counting sort).
    uint32_t a = 0, r = 0;
    for (uint32_t i = 0; i < g->n_elems;) {
        while (r + 1 < g->n_rules && g->rule_start[r + 1] <= i)
            r++;
        alt_rule[a] = r;
        uint32_t op = g->elems[i].op;
        if (gram_is_end(op)) {
            a++;
            i++;
        } else if (op == GRAM_REF) {
            wait_null[a]++;
            wait_prod[a]++;
            occ_start[g->elems[i].val + 1]++;
            i++;
        } else {
            blocked[a] = true;
            dead[a] |= !class_nonempty(g, i);
            i = gram_class_end(g, i);
        }
    }
    for (uint32_t k = 0; k < g->n_rules; k++)
        occ_start[k + 1] += occ_start[k];
    a = 0;
    for (uint32_t i = 0; i < g->n_elems;) { // occurrences: the alternative of each reference
        uint32_t op = g->elems[i].op;
        if (gram_is_end(op)) {
            a++;
            i++;
        } else if (op == GRAM_REF) {
            occ[occ_start[g->elems[i].val]++] = a;
            i++;
        } else {
            i = gram_class_end(g, i);
        }
    }
    for (uint32_t k = g->n_rules; k > 0; k--) // back to the starts
        occ_start[k] = occ_start[k - 1];
    occ_start[0] = 0;
    // Pass 2: the worklist.  work holds (rule, kind) pairs: kind 0 nullable, 1 productive.
    size_t nw = 0;
    for (uint32_t k = 0; k < n_alts; k++) {
        uint32_t rr = alt_rule[k];
        if (!blocked[k] && wait_null[k] == 0 && !nullable[rr]) {
            nullable[rr] = true;
            work[nw++] = rr * 2;
        }
        if (!dead[k] && wait_prod[k] == 0 && !productive[rr]) {
            productive[rr] = true;
            work[nw++] = rr * 2 + 1;
        }
    }
    while (nw) {
        uint32_t w = work[--nw], rr = w / 2, kind = w % 2;
        for (uint32_t k = occ_start[rr]; k < occ_start[rr + 1]; k++) {
            uint32_t al = occ[k], owner = alt_rule[al];
            if (kind == 0 && --wait_null[al] == 0 && !blocked[al] && !nullable[owner]) {
                nullable[owner] = true;
                work[nw++] = owner * 2;
            }
            if (kind == 1 && --wait_prod[al] == 0 && !dead[al] && !productive[owner]) {
                productive[owner] = true;
                work[nw++] = owner * 2 + 1;
            }
        }
    }
done:
    ci_free(alt_rule);
    ci_free(wait_null);
    ci_free(wait_prod);
    ci_free(occ_start);
    ci_free(occ);
    ci_free(work);
    ci_free(blocked);
    ci_free(dead);
    return s;
}

/* Left recursion.  A "left edge" r -> t: rule r has an alternative whose elements before a reference to t are
 * all nullable (r may start with t).  A cycle of left edges makes the matcher's expansion loop; where every
 * edge of the cycle is a tail call (the reference ends its alternative, so the matcher pushes no return
 * frame: struct gram_space's expand), the loop comes back to the very same stack and the expansion's
 * visited set ends it ("( [x]* )*", a repetition of a nullable item, which llama.cpp accepts too).  A cycle
 * with one non-tail edge grows the stack at each turn: that grammar is refused.  So: strongly connected
 * components of the left edges (Tarjan), then any non-tail edge inside one component is left recursion. */
struct left_scc {
    const struct grammar *g;
    const bool *nullable;
    uint32_t *idx, *low, *stk, *comp;
    bool *on;
    uint32_t n_stk, counter, n_comp;
};

/* Calls fn(ctx, t, tail) for each left edge of rule r; stops early when fn returns true. */
static bool each_left_edge(const struct grammar *g, const bool *nullable, uint32_t r,
                           bool (*fn)(void *ctx, uint32_t t, bool tail), void *ctx) {
    uint32_t i = g->rule_start[r];
    for (;;) {
        while (!gram_is_end(g->elems[i].op)) {
            if (g->elems[i].op != GRAM_REF)
                break;
            uint32_t t = g->elems[i].val;
            if (fn(ctx, t, gram_is_end(g->elems[i + 1].op)))
                return true;
            if (!nullable[t])
                break;
            i++;
        }
        while (!gram_is_end(g->elems[i].op))
            i++;
        if (g->elems[i].op == GRAM_END)
            return false;
        i++;
    }
}

static bool tarjan(struct left_scc *t, uint32_t v, uint32_t depth);

struct tarjan_edge {
    struct left_scc *t;
    uint32_t v, depth;
};

static bool tarjan_edge(void *ctx, uint32_t w, bool tail) {
    (void)tail;
    struct tarjan_edge *e = ctx;
    struct left_scc *t = e->t;
    if (t->idx[w] == 0) {
        if (tarjan(t, w, e->depth + 1))
            return true;
        if (t->low[w] < t->low[e->v])
            t->low[e->v] = t->low[w];
    } else if (t->on[w] && t->idx[w] < t->low[e->v]) {
        t->low[e->v] = t->idx[w];
    }
    return false;
}

/* True when a chain of left edges is deeper than GRAM_MAX_DEPTH (the matcher's recursion bound). */
static bool tarjan(struct left_scc *t, uint32_t v, uint32_t depth) {
    if (depth >= GRAM_MAX_DEPTH)
        return true;
    t->idx[v] = t->low[v] = ++t->counter;
    t->stk[t->n_stk++] = v;
    t->on[v] = true;
    struct tarjan_edge e = {t, v, depth};
    if (each_left_edge(t->g, t->nullable, v, tarjan_edge, &e))
        return true;
    if (t->low[v] == t->idx[v]) {
        uint32_t w;
        do {
            w = t->stk[--t->n_stk];
            t->on[w] = false;
            t->comp[w] = t->n_comp;
        } while (w != v);
        t->n_comp++;
    }
    return false;
}

struct harmful {
    const uint32_t *comp;
    uint32_t r, target;
};

static bool non_tail_in_component(void *ctx, uint32_t t, bool tail) {
    struct harmful *h = ctx;
    if (!tail && h->comp[t] == h->comp[h->r]) {
        h->target = t;
        return true;
    }
    return false;
}

struct path_bfs {
    const uint32_t *comp;
    uint32_t *prev, *queue, n_queue, from, c;
};

static bool bfs_edge(void *ctx, uint32_t t, bool tail) {
    (void)tail;
    struct path_bfs *b = ctx;
    if (b->comp[t] == b->c && b->prev[t] == UINT32_MAX) {
        b->prev[t] = b->from;
        b->queue[b->n_queue++] = t;
    }
    return false;
}

/* The message for a non-tail left edge r -> v inside a component: "r -> v -> ... -> r" (a shortest path
 * from v back to r through the component's left edges). */
static enum ci_status left_recursion_error(const struct grammar *g, const bool *nullable,
                                           const uint32_t *comp, uint32_t r, uint32_t v, uint32_t *prev,
                                           uint32_t *queue, struct ci_err *err) {
    for (uint32_t k = 0; k < g->n_rules; k++)
        prev[k] = UINT32_MAX;
    struct path_bfs b = {comp, prev, queue, 0, 0, comp[r]};
    prev[v] = v;
    queue[b.n_queue++] = v;
    for (uint32_t q = 0; q < b.n_queue && prev[r] == UINT32_MAX; q++) {
        b.from = queue[q];
        each_left_edge(g, nullable, queue[q], bfs_edge, &b);
    }
    // the path r <- ... <- v, read backwards from r (r == v: the edge is a loop)
    uint32_t n = 0;
    if (r != v)
        for (uint32_t k = r; k != v && n < g->n_rules; k = prev[k])
            queue[n++] = k;
    queue[n++] = v;
    char chain[512];
    size_t o = (size_t)snprintf(chain, sizeof chain, "%.60s", g->rule_names[r]);
    for (uint32_t k = n; k-- > 0 && o + 70 < sizeof chain;)
        o += (size_t)snprintf(chain + o, sizeof chain - o, " -> %.60s", g->rule_names[queue[k]]);
    return ci_err_set(err, CI_ERR_INVALID, "the grammar is left-recursive: %s", chain);
}

enum ci_status gram_builder_finish(struct gram_builder *b, const char *start, struct grammar **out,
                                   struct ci_err *err) {
    *out = NULL;
    for (uint32_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined) {
            if (b->rules[r].line > 0)
                return ci_err_set(err, CI_ERR_INVALID, "line %d, column %d: undefined rule '%s'",
                                  b->rules[r].line, b->rules[r].col, b->rules[r].name);
            return ci_err_set(err, CI_ERR_INVALID, "undefined rule '%s'", b->rules[r].name);
        }
    int root = find_rule(b, start, strlen(start));
    if (root < 0 || !b->rules[root].defined)
        return ci_err_set(err, CI_ERR_INVALID, "the grammar has no rule named '%s' (the start rule)", start);
    struct grammar *g = ci_calloc(1, sizeof *g);
    if (!g)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    enum ci_status s = CI_OK;
    g->n_rules = b->n_rules;
    g->start = (uint32_t)root;
    g->n_elems = (uint32_t)b->total_elems;
    g->elems = ci_malloc((b->total_elems ? b->total_elems : 1) * sizeof *g->elems);
    g->rule_start = ci_calloc(b->n_rules, sizeof *g->rule_start);
    g->rule_names = ci_calloc(b->n_rules, sizeof *g->rule_names);
    bool *nullable = ci_calloc(b->n_rules, 1), *productive = ci_calloc(b->n_rules, 1),
         *reach = ci_calloc(b->n_rules, 1);
    bool *on = ci_calloc(b->n_rules, 1);
    uint32_t *idx = ci_calloc(b->n_rules + 1, sizeof *idx), *low = ci_calloc(b->n_rules + 1, sizeof *low),
             *stk = ci_calloc(b->n_rules + 1, sizeof *stk), *comp = ci_calloc(b->n_rules + 1, sizeof *comp),
             *work = ci_calloc(b->n_rules, sizeof *work);
    if (!g->elems || !g->rule_start || !g->rule_names || !nullable || !productive || !reach || !on || !idx ||
        !low || !stk || !comp || !work) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint32_t at = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        g->rule_start[r] = at;
        g->rule_names[r] = b->rules[r].name;
        b->rules[r].name = NULL;
        memcpy(g->elems + at, b->rules[r].elems, b->rules[r].n * sizeof *g->elems);
        at += (uint32_t)b->rules[r].n;
        g->elems[at++] = (struct gram_elem){GRAM_END, 0};
    }
    if ((s = fixpoints(g, nullable, productive, err)) != CI_OK)
        goto done;
    // Reachable rules from the start; each must be productive.
    uint32_t nw = 0;
    reach[g->start] = true;
    work[nw++] = g->start;
    while (nw) {
        uint32_t r = work[--nw];
        for (uint32_t i = g->rule_start[r]; g->elems[i].op != GRAM_END; i++) {
            if (g->elems[i].op == GRAM_REF && !reach[g->elems[i].val]) {
                reach[g->elems[i].val] = true;
                work[nw++] = g->elems[i].val;
            }
        }
    }
    struct left_scc t = {g, nullable, idx, low, stk, comp, on, 0, 0, 0};
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (idx[r] == 0 && tarjan(&t, r, 0)) {
            s = ci_err_set(err, CI_ERR_LIMIT,
                           "the grammar nests too deeply (a chain of more than %d rules "
                           "that can start one another)",
                           GRAM_MAX_DEPTH);
            goto done;
        }
    for (uint32_t r = 0; r < g->n_rules; r++) {
        struct harmful h = {comp, r, 0};
        if (each_left_edge(g, nullable, r, non_tail_in_component, &h)) {
            s = left_recursion_error(g, nullable, comp, r, h.target, idx, stk, err);
            goto done;
        }
    }
    if (!productive[g->start]) {
        s = ci_err_set(err, CI_ERR_INVALID,
                       "the grammar's language is empty: rule '%s' can never be completed (it has no "
                       "alternative that ends)",
                       g->rule_names[g->start]);
        goto done;
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (reach[r] && !productive[r]) {
            s = ci_err_set(err, CI_ERR_INVALID,
                           "rule '%s' can never be completed (its language is empty: every alternative "
                           "needs itself or an empty character class)",
                           g->rule_names[r]);
            goto done;
        }
done:
    ci_free(nullable);
    ci_free(productive);
    ci_free(reach);
    ci_free(on);
    ci_free(idx);
    ci_free(low);
    ci_free(stk);
    ci_free(comp);
    ci_free(work);
    if (s != CI_OK) {
        gram_free(g);
        return s;
    }
    *out = g;
    return CI_OK;
}
