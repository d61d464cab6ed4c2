/* The compiled-grammar cache (cache.h): a small array searched by hash, least recently used out. */
#include "grammar/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/hash.h"
#include "core/mem.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

struct gram_ref {
    atomic_int refs;
    struct grammar *g;
};

struct entry {
    uint64_t hash;
    enum gram_front front;
    char *text;
    size_t len;
    struct gram_ref *ref;
    uint64_t used; // tick of the last use
};

struct gram_cache {
    pthread_mutex_t mu;
    struct gram_tokens tk; // what GBNF token references name (n_vocab 0: none)
    struct entry *e;
    int n, cap;
    uint64_t tick;
    long hits, misses;
};

const struct grammar *gram_ref_grammar(const struct gram_ref *r) {
    return r->g;
}

struct gram_ref *gram_ref_retain(struct gram_ref *r) {
    atomic_fetch_add(&r->refs, 1);
    return r;
}

void gram_ref_release(struct gram_ref *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
        gram_free(r->g);
        ci_free(r);
    }
}

enum ci_status gram_cache_create(int capacity, struct gram_cache **out, struct ci_err *err) {
    *out = NULL;
    if (capacity < 1)
        return ci_err_set(err, CI_ERR_INVALID, "grammar cache capacity %d", capacity);
    struct gram_cache *c = ci_calloc(1, sizeof *c);
    if (!c || !(c->e = ci_calloc((size_t)capacity, sizeof *c->e))) {
        ci_free(c);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    c->cap = capacity;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return CI_OK;
}

void gram_cache_free(struct gram_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        ci_free(c->e[i].text);
        gram_ref_release(c->e[i].ref);
    }
    ci_free(c->e);
    pthread_mutex_destroy(&c->mu);
    ci_free(c);
}

void gram_cache_set_tokens(struct gram_cache *c, const struct gram_tokens *tk) {
    c->tk = *tk;
}

/* The grammar for text; a front end other than GBNF: its GBNF text, parsed. */
static enum ci_status compile(const struct gram_cache *c, enum gram_front front, const char *text, size_t len,
                              struct grammar **g, struct ci_err *err) {
    const struct gram_tokens *tk = c->tk.n_vocab > 0 ? &c->tk : NULL;
    if (front == GRAM_FRONT_GBNF)
        return gram_parse_gbnf_tokens(text, len, tk, g, err);
    struct gtext t = {0};
    enum ci_status s = front == GRAM_FRONT_JSON_SCHEMA ? gram_json_schema_to_gbnf(text, len, &t, err)
                       : front == GRAM_FRONT_REGEX
                           ? gram_regex_to_gbnf(text, len, 0, &t, err)
                           : ci_err_set(err, CI_ERR_INVALID, "unknown grammar front end");
    if (s == CI_OK)
        s = gram_parse_gbnf(t.s, t.n, g, err);
    gtext_free(&t);
    return s;
}

enum ci_status gram_cache_get_gbnf(struct gram_cache *c, const char *text, size_t len, struct gram_ref **out,
                                   struct ci_err *err) {
    return gram_cache_get(c, GRAM_FRONT_GBNF, text, len, out, err);
}

enum ci_status gram_cache_get(struct gram_cache *c, enum gram_front front, const char *text, size_t len,
                              struct gram_ref **out, struct ci_err *err) {
    *out = NULL;
    if ((unsigned)front >= GRAM_FRONT_COUNT)
        return ci_err_set(err, CI_ERR_INVALID, "unknown grammar front end %d", (int)front);
    uint64_t h = ci_hash_bytes(0x9b7f + (uint64_t)front, text, len);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].front == front && c->e[i].len == len &&
            memcmp(c->e[i].text, text, len) == 0) {
            c->e[i].used = ++c->tick;
            c->hits++;
            *out = gram_ref_retain(c->e[i].ref);
            pthread_mutex_unlock(&c->mu);
            return CI_OK;
        }
    c->misses++;
    pthread_mutex_unlock(&c->mu);
    // Compiled outside the lock: two threads may compile the same text at once; the second insert wins a
    // slot too, which is harmless.
    struct grammar *g = NULL;
    enum ci_status s = compile(c, front, text, len, &g, err);
    if (s != CI_OK)
        return s;
    struct gram_ref *r = ci_calloc(1, sizeof *r);
    char *copy = ci_malloc(len ? len : 1);
    if (!r || !copy) {
        ci_free(r);
        ci_free(copy);
        gram_free(g);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    }
    memcpy(copy, text, len);
    atomic_init(&r->refs, 2); // the cache's and the caller's
    r->g = g;
    pthread_mutex_lock(&c->mu);
    int slot = c->n;
    if (c->n == c->cap) { // evict the least recently used
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used)
                slot = i;
        ci_free(c->e[slot].text);
        gram_ref_release(c->e[slot].ref);
    } else {
        c->n++;
    }
    c->e[slot] = (struct entry){h, front, copy, len, r, ++c->tick};
    pthread_mutex_unlock(&c->mu);
    *out = r;
    return CI_OK;
}

void gram_cache_stats(struct gram_cache *c, struct gram_cache_stats *out) {
    pthread_mutex_lock(&c->mu);
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->n;
    pthread_mutex_unlock(&c->mu);
}
