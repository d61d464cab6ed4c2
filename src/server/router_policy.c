/* The router's choice of replica (router_policy.h): per-replica counters, and the block-key table as a
 * chained hash map over a fixed array of entries with an intrusive LRU list (head: least recently used,
 * reused first when the array is full). */
#include "server/router_policy.h"

#include <pthread.h>
#include <string.h>

#include "core/mem.h"

struct key_entry {
    uint64_t key;
    uint64_t replicas;  // bit r: the block was sent to replica r
    int32_t chain;      // next entry in the bucket, -1 at the end
    int32_t prev, next; // LRU links, -1 at the ends
};

struct router_policy {
    pthread_mutex_t lock;
    struct router_policy_options o;
    struct router_replica_stats rep[ROUTER_MAX_REPLICAS];
    unsigned turn; // round-robin position, and the rotation of least-loaded ties
    // the prefix table
    struct key_entry *e; // [o.table_entries]
    int32_t *bucket;     // [mask + 1] first entry of each bucket, -1: empty
    uint64_t mask;
    int32_t head, tail; // LRU ends
    int n_used;         // entries in use: e[0 .. n_used) once, then recycled from the head
};

bool router_policy_parse(const char *name, enum router_policy_kind *out) {
    static const struct {
        const char *name;
        enum router_policy_kind k;
    } t[] = {{"prefix", ROUTER_POLICY_PREFIX},
             {"round-robin", ROUTER_POLICY_ROUND_ROBIN},
             {"least-loaded", ROUTER_POLICY_LEAST_LOADED}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(name, t[i].name) == 0) {
            *out = t[i].k;
            return true;
        }
    return false;
}

const char *router_policy_name(enum router_policy_kind k) {
    return k == ROUTER_POLICY_PREFIX        ? "prefix"
           : k == ROUTER_POLICY_ROUND_ROBIN ? "round-robin"
                                            : "least-loaded";
}

enum ci_status router_policy_create(const struct router_policy_options *o, struct router_policy **out,
                                    struct ci_err *err) {
    *out = NULL;
    if (o->n_replicas < 1 || o->n_replicas > ROUTER_MAX_REPLICAS)
        return ci_err_set(err, CI_ERR_INVALID, "%d replicas: the router takes 1 to %d", o->n_replicas,
                          ROUTER_MAX_REPLICAS);
    if (o->table_entries < 1 || o->table_entries > (1 << 26))
        return ci_err_set(err, CI_ERR_INVALID, "a prefix table of %d entries: 1 to %d", o->table_entries,
                          1 << 26);
    struct router_policy *p = ci_calloc(1, sizeof *p);
    if (!p)
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory");
    p->o = *o;
    uint64_t nb = 1;
    while (nb < 2 * (uint64_t)o->table_entries)
        nb *= 2;
    p->mask = nb - 1;
    p->e = ci_calloc((size_t)o->table_entries, sizeof *p->e);
    p->bucket = ci_malloc((size_t)nb * sizeof *p->bucket);
    if (!p->e || !p->bucket) {
        router_policy_free(p);
        return ci_err_set(err, CI_ERR_NOMEM, "out of memory for a prefix table of %d entries",
                          o->table_entries);
    }
    for (uint64_t i = 0; i < nb; i++)
        p->bucket[i] = -1;
    p->head = p->tail = -1;
    for (int r = 0; r < o->n_replicas; r++)
        p->rep[r].healthy = true; // until the first health check says otherwise
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return CI_OK;
}

void router_policy_free(struct router_policy *p) {
    if (!p)
        return;
    if (p->bucket)
        pthread_mutex_destroy(&p->lock);
    ci_free(p->e);
    ci_free(p->bucket);
    ci_free(p);
}

static uint64_t bucket_of(const struct router_policy *p, uint64_t key) {
    return (key ^ (key >> 29)) & p->mask;
}

static int32_t find(const struct router_policy *p, uint64_t key) {
    for (int32_t i = p->bucket[bucket_of(p, key)]; i >= 0; i = p->e[i].chain)
        if (p->e[i].key == key)
            return i;
    return -1;
}

static void lru_unlink(struct router_policy *p, int32_t i) {
    struct key_entry *x = &p->e[i];
    if (x->prev >= 0)
        p->e[x->prev].next = x->next;
    else
        p->head = x->next;
    if (x->next >= 0)
        p->e[x->next].prev = x->prev;
    else
        p->tail = x->prev;
    x->prev = x->next = -1;
}

static void lru_push_tail(struct router_policy *p, int32_t i) {
    struct key_entry *x = &p->e[i];
    x->prev = p->tail;
    x->next = -1;
    if (p->tail >= 0)
        p->e[p->tail].next = i;
    else
        p->head = i;
    p->tail = i;
}

static void bucket_remove(struct router_policy *p, int32_t i) {
    int32_t *link = &p->bucket[bucket_of(p, p->e[i].key)];
    while (*link != i)
        link = &p->e[*link].chain;
    *link = p->e[i].chain;
}

/* Replica r has been sent the block of key: key's entry gains r, most recently used. */
static void record(struct router_policy *p, uint64_t key, int r) {
    int32_t i = find(p, key);
    if (i >= 0) {
        lru_unlink(p, i);
    } else {
        if (p->n_used < p->o.table_entries) {
            i = p->n_used++;
        } else { // full: the least recently used key goes
            i = p->head;
            lru_unlink(p, i);
            bucket_remove(p, i);
        }
        uint64_t b = bucket_of(p, key);
        p->e[i].key = key;
        p->e[i].replicas = 0;
        p->e[i].chain = p->bucket[b];
        p->bucket[b] = i;
    }
    p->e[i].replicas |= 1ull << r;
    lru_push_tail(p, i);
}

static bool usable(const struct router_policy *p, int r, uint64_t excluded) {
    return p->rep[r].healthy && !(excluded >> r & 1);
}

/* Fewest in flight, then lower KV usage, then fewer waiting; ties go to the first from the rotation. */
static int least_loaded(struct router_policy *p, uint64_t excluded) {
    int n = p->o.n_replicas, best = -1;
    unsigned start = p->turn++;
    for (int k = 0; k < n; k++) {
        int r = (int)((start + (unsigned)k) % (unsigned)n);
        if (!usable(p, r, excluded))
            continue;
        const struct router_replica_stats *a = &p->rep[r], *b = best >= 0 ? &p->rep[best] : NULL;
        if (!b || a->in_flight < b->in_flight ||
            (a->in_flight == b->in_flight &&
             (a->kv_usage < b->kv_usage || (a->kv_usage == b->kv_usage && a->n_waiting < b->n_waiting))))
            best = r;
    }
    return best;
}

static int round_robin(struct router_policy *p, uint64_t excluded) {
    int n = p->o.n_replicas;
    for (int k = 0; k < n; k++) {
        int r = (int)(p->turn++ % (unsigned)n);
        if (usable(p, r, excluded))
            return r;
    }
    return -1;
}

/* The replica with the longest match that is usable and within the load bound (ties: fewer in flight),
 * else -1.  A replica's match is the last of the request's blocks it was sent: the keys are a chain, so
 * having been sent block i means having been sent blocks 0 .. i. */
static int prefix_match(struct router_policy *p, const uint64_t *keys, int n_keys, uint64_t excluded,
                        int *matched) {
    int n = p->o.n_replicas, min_in_flight = -1, best = -1;
    int match[ROUTER_MAX_REPLICAS] = {0};
    for (int r = 0; r < n; r++)
        if (usable(p, r, excluded) && (min_in_flight < 0 || p->rep[r].in_flight < min_in_flight))
            min_in_flight = p->rep[r].in_flight;
    uint64_t all = n == 64 ? ~0ull : (1ull << n) - 1, seen = 0;
    for (int i = n_keys - 1; i >= 0 && seen != all; i--) {
        int32_t x = find(p, keys[i]);
        if (x < 0)
            continue;
        uint64_t fresh = p->e[x].replicas & ~seen & all;
        for (int r = 0; r < n; r++)
            if (fresh >> r & 1)
                match[r] = i + 1;
        seen |= fresh;
    }
    int least = (int)(p->o.min_match * n_keys + 0.999999); // blocks a match must cover
    if (least < 1)
        least = 1;
    for (int r = 0; r < n; r++) {
        const struct router_replica_stats *s = &p->rep[r];
        if (match[r] < least || !usable(p, r, excluded) || s->in_flight > min_in_flight + p->o.balance_abs ||
            s->kv_usage > p->o.kv_high)
            continue;
        if (best < 0 || match[r] > match[best] ||
            (match[r] == match[best] && s->in_flight < p->rep[best].in_flight))
            best = r;
    }
    if (best >= 0)
        *matched = match[best];
    return best;
}

int router_policy_pick(struct router_policy *p, const uint64_t *keys, int n_keys, uint64_t excluded,
                       int *matched_blocks) {
    int matched = 0, r = -1;
    pthread_mutex_lock(&p->lock);
    switch (p->o.kind) {
    case ROUTER_POLICY_PREFIX:
        r = prefix_match(p, keys, n_keys, excluded, &matched);
        if (r < 0)
            r = least_loaded(p, excluded);
        break;
    case ROUTER_POLICY_ROUND_ROBIN:
        r = round_robin(p, excluded);
        break;
    case ROUTER_POLICY_LEAST_LOADED:
        r = least_loaded(p, excluded);
        break;
    }
    if (r >= 0) {
        p->rep[r].in_flight++;
        p->rep[r].n_routed++;
        if (matched > 0)
            p->rep[r].n_prefix++;
        if (p->o.kind == ROUTER_POLICY_PREFIX)
            for (int i = 0; i < n_keys; i++)
                record(p, keys[i], r);
    }
    pthread_mutex_unlock(&p->lock);
    if (matched_blocks)
        *matched_blocks = matched;
    return r;
}

void router_policy_done(struct router_policy *p, int r, bool failed_over) {
    pthread_mutex_lock(&p->lock);
    if (r >= 0 && r < p->o.n_replicas) {
        if (p->rep[r].in_flight > 0)
            p->rep[r].in_flight--;
        if (failed_over)
            p->rep[r].n_failovers++;
    }
    pthread_mutex_unlock(&p->lock);
}

void router_policy_set_healthy(struct router_policy *p, int r, bool healthy) {
    pthread_mutex_lock(&p->lock);
    if (r >= 0 && r < p->o.n_replicas)
        p->rep[r].healthy = healthy;
    pthread_mutex_unlock(&p->lock);
}

void router_policy_set_load(struct router_policy *p, int r, double kv_usage, int n_running, int n_waiting) {
    pthread_mutex_lock(&p->lock);
    if (r >= 0 && r < p->o.n_replicas) {
        p->rep[r].kv_usage = kv_usage;
        p->rep[r].n_running = n_running;
        p->rep[r].n_waiting = n_waiting;
    }
    pthread_mutex_unlock(&p->lock);
}

void router_policy_stats(struct router_policy *p, int r, struct router_replica_stats *out) {
    pthread_mutex_lock(&p->lock);
    *out = p->rep[r];
    pthread_mutex_unlock(&p->lock);
}

int router_policy_n_healthy(struct router_policy *p) {
    int n = 0;
    pthread_mutex_lock(&p->lock);
    for (int r = 0; r < p->o.n_replicas; r++)
        n += p->rep[r].healthy;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int router_policy_table_size(struct router_policy *p) {
    pthread_mutex_lock(&p->lock);
    int n = p->n_used;
    pthread_mutex_unlock(&p->lock);
    return n;
}
