#include "engine/sched.h"

#include <string.h>

#include "core/check.h"
#include "engine/prefix_cache.h"

// The token budget of a step that has none (naive recompute, a static batch's prompts): larger than any
// step can hold, since the scheduler caps the tokens of one step at 1 << 20.
#define NO_TOKEN_BUDGET (1 << 30)

const char *sched_policy_name(enum sched_policy p) {
    switch (p) {
    case SCHED_POLICY_NAIVE:
        return "naive";
    case SCHED_POLICY_STATIC:
        return "static";
    case SCHED_POLICY_CONTINUOUS:
        return "continuous";
    }
    return "unknown";
}

bool sched_policy_parse(const char *name, enum sched_policy *out) {
    static const enum sched_policy all[] = {SCHED_POLICY_NAIVE, SCHED_POLICY_STATIC, SCHED_POLICY_CONTINUOUS};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!strcmp(name, sched_policy_name(all[i]))) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

static bool seq_before(const struct seq *a, const struct seq *b) {
    return a->order < b->order || (a->order == b->order && a->sample < b->sample);
}

static void remove_at(struct seq **arr, int *n, int i) {
    memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
    (*n)--;
}

static int index_of(struct seq **arr, int n, const struct seq *s) {
    for (int i = 0; i < n; i++)
        if (arr[i] == s)
            return i;
    return -1;
}

/* Waiting is ordered by request order, so a preempted sequence goes back to its place ahead of newer ones. */
static void insert_waiting(struct sched_state *st, struct seq *s) {
    CI_ASSERT(st->n_waiting < st->cap);
    int i = st->n_waiting;
    while (i > 0 && seq_before(s, st->waiting[i - 1]))
        i--;
    memmove(st->waiting + i + 1, st->waiting + i, (size_t)(st->n_waiting - i) * sizeof *st->waiting);
    st->waiting[i] = s;
    st->n_waiting++;
}

/* A decode: the sequence's last token (and its drafts, if it has any). */
static bool is_decode(const struct seq *s, int from, int count) {
    return from + 1 == s->n_tokens && count == 1 + s->n_draft && s->n_tokens > s->n_prompt;
}

static void plan(struct sched_result *r, struct seq *s, int from, int count) {
    if (s->sched_count == 0)
        r->items[r->n_items++] = s;
    s->sched_from = from;
    s->sched_count = count;
    r->n_tokens += count;
    if (is_decode(s, from, count)) {
        r->n_decode_tokens += count;
        r->n_draft_tokens += s->n_draft;
    } else {
        r->n_prefill_tokens += count;
    }
}

static void unplan(struct sched_result *r, struct seq *s) {
    if (s->sched_count == 0)
        return;
    int i = index_of(r->items, r->n_items, s);
    CI_ASSERT(i >= 0);
    remove_at(r->items, &r->n_items, i);
    r->n_tokens -= s->sched_count;
    if (is_decode(s, s->sched_from, s->sched_count)) {
        r->n_decode_tokens -= s->sched_count;
        r->n_draft_tokens -= s->n_draft;
    } else {
        r->n_prefill_tokens -= s->sched_count;
    }
    s->sched_count = 0;
}

static void preempt(struct sched_state *st, struct sched_result *r, struct seq *s) {
    unplan(r, s);
    s->n_draft = 0;
    kv_seq_release(st->pool, &s->blocks);
    s->n_computed = 0;
    s->state = SEQ_STATE_WAITING;
    s->n_preempted++;
    int i = index_of(st->running, st->n_running, s);
    CI_ASSERT(i >= 0);
    remove_at(st->running, &st->n_running, i);
    insert_waiting(st, s);
    r->n_preempted++;
}

/* The newest running sequence holding blocks, other than keep (NULL if none). */
static struct seq *newest_victim(const struct sched_state *st, const struct seq *keep) {
    struct seq *best = NULL;
    for (int i = 0; i < st->n_running; i++) {
        struct seq *s = st->running[i];
        if (s == keep || s->state != SEQ_STATE_RUNNING || s->blocks.n == 0)
            continue;
        if (!best || seq_before(best, s))
            best = s;
    }
    return best;
}

/* Makes positions [from, to) of s writable: blocks reserved up to `to`, shared blocks in the range copied.
 * Preempts the newest other sequences while blocks are short; returns false (s preempted) if s itself is the
 * newest and still cannot grow. */
static bool make_room(struct sched_state *st, struct sched_result *r, struct seq *s, int from, int to) {
    for (;;) {
        if (kv_seq_reserve(st->pool, &s->blocks, to) == CI_OK &&
            kv_seq_prepare_write(st->pool, &s->blocks, from, to) == CI_OK)
            return true;
        struct seq *victim = newest_victim(st, s);
        if (!victim || seq_before(victim, s)) {
            preempt(st, r, s);
            return false;
        }
        preempt(st, r, victim);
    }
}

/* Blocks that reserving up to `to` would take from the pool (new blocks plus copies of shared ones). */
static int64_t blocks_needed(const struct sched_state *st, const struct seq *s, int from, int to) {
    int64_t need = kv_pool_blocks_for(st->pool, to) - s->blocks.n;
    if (need < 0)
        need = 0;
    int bs = kv_pool_block_size(st->pool);
    for (int b = from / bs; b < s->blocks.n && b * bs < to; b++)
        need += s->blocks.ids[b] >= 0 && kv_pool_refcount(st->pool, s->blocks.ids[b]) > 1;
    return need;
}

/* Sequences of the request at the head of waiting (its samples wait together before their first admission;
 * a preempted sample waits alone). */
static int head_group(const struct sched_state *st) {
    int n = 1;
    while (n < st->n_waiting && st->waiting[n]->req == st->waiting[0]->req && st->waiting[n]->sample > 0 &&
           st->waiting[n]->n_computed == 0 && st->waiting[n]->blocks.n == 0 && st->waiting[0]->sample == 0 &&
           st->waiting[n]->n_tokens == st->waiting[n]->n_prompt)
        n++;
    return n;
}

static void admit(struct sched_state *st, int group) {
    for (int g = 0; g < group; g++) {
        struct seq *s = st->waiting[0];
        remove_at(st->waiting, &st->n_waiting, 0);
        // Samples after the first share the first one's prompt blocks once it is computed (engine forks).
        s->state = g == 0 ? SEQ_STATE_RUNNING : SEQ_STATE_FORKING;
        CI_ASSERT(st->n_running < st->cap);
        st->running[st->n_running++] = s;
    }
}

/* Takes the head of waiting into running if the budget and the free blocks allow its first chunk.  Returns
 * false when admission must stop for this step. */
static bool try_admit(const struct sched_params *p, struct sched_state *st, struct sched_result *r,
                      int *budget, bool whole_prompt) {
    struct seq *s = st->waiting[0];
    int group = head_group(st);
    if (st->n_running + group > p->max_seqs)
        return false;
    int hit = 0;
    if (st->prefix && s->n_computed == 0 && s->blocks.n == 0 && !s->no_prefix_match) {
        hit = prefix_cache_match(st->prefix, s->tokens, s->n_tokens, &s->blocks);
        s->n_computed = hit;
    }
    int remaining = s->n_tokens - s->n_computed;
    int chunk = remaining;
    if (!whole_prompt && chunk > *budget)
        chunk = *budget;
    // Unchunked, a prompt enters whole: within the budget, or as the step's only prompt even if it overruns
    // the budget (so a long prompt cannot starve; it stalls the step's decodes instead, as the seeds warn).
    bool fits = whole_prompt ? (remaining <= *budget || r->n_prefill_tokens == 0) : chunk > 0;
    if (!fits || blocks_needed(st, s, s->n_computed, s->n_computed + chunk) > kv_pool_n_available(st->pool)) {
        if (hit) { // give the cached blocks back; the next attempt matches again
            kv_seq_release(st->pool, &s->blocks);
            s->n_computed = 0;
        }
        return false;
    }
    admit(st, group);
    bool ok = make_room(st, r, s, s->n_computed, s->n_computed + chunk);
    CI_ASSERT(ok); // the blocks were counted above and admission preempts nobody
    s->n_cached = hit;
    r->n_prefix_hit_tokens += hit;
    r->n_admitted += group;
    plan(r, s, s->n_computed, chunk);
    *budget = chunk < *budget ? *budget - chunk : 0;
    return true;
}

static void step_continuous(const struct sched_params *p, struct sched_state *st, struct sched_result *r) {
    int budget = p->max_batch_tokens;
    // 1. One token for every decoding sequence, oldest first.
    for (int i = 0; i < st->n_running && budget > 0; i++) {
        struct seq *s = st->running[i];
        if (s->state != SEQ_STATE_RUNNING || !seq_is_decoding(s) || s->sched_count)
            continue;
        if (s->n_draft > budget - 1) // drafts only where the budget has room for them
            s->n_draft = budget - 1;
        if (!make_room(st, r, s, s->n_computed, s->n_tokens + s->n_draft)) {
            i = -1; // the running list changed under us: rescan (scheduled sequences are skipped)
            continue;
        }
        plan(r, s, s->n_computed, 1 + s->n_draft);
        budget -= 1 + s->n_draft;
    }
    // 2. Prompt chunks of admitted sequences still computing their prompt (or recomputing after preemption).
    bool unchunked = !p->chunked_prefill;
    for (int i = 0; i < st->n_running && (budget > 0 || (unchunked && r->n_prefill_tokens == 0)); i++) {
        struct seq *s = st->running[i];
        if (s->state != SEQ_STATE_RUNNING || s->sched_count || seq_is_decoding(s))
            continue;
        int remaining = s->n_tokens - s->n_computed, chunk = remaining;
        if (p->chunked_prefill && chunk > budget)
            chunk = budget;
        if (!p->chunked_prefill && chunk > budget && r->n_prefill_tokens > 0)
            continue;
        if (!make_room(st, r, s, s->n_computed, s->n_computed + chunk)) {
            i = -1;
            continue;
        }
        plan(r, s, s->n_computed, chunk);
        budget = chunk < budget ? budget - chunk : 0;
    }
    // 3. Admission, first come first served, unless this step had to preempt.
    while (st->n_waiting > 0 && (budget > 0 || (unchunked && r->n_prefill_tokens == 0)) &&
           r->n_preempted == 0)
        if (!try_admit(p, st, r, &budget, unchunked))
            break;
}

static void step_naive(const struct sched_params *p, struct sched_state *st, struct sched_result *r) {
    // Forget the cache: every running sequence recomputes all its tokens (its blocks are simply rewritten).
    for (int i = 0; i < st->n_running; i++) {
        struct seq *s = st->running[i];
        if (s->state != SEQ_STATE_RUNNING)
            continue;
        s->n_computed = 0;
        if (!make_room(st, r, s, 0, s->n_tokens + s->n_draft)) {
            i = -1;
            continue;
        }
        if (!s->sched_count)
            plan(r, s, 0, s->n_tokens + s->n_draft);
    }
    int budget = NO_TOKEN_BUDGET; // a naive step is as long as its prefixes
    while (st->n_waiting > 0 && r->n_preempted == 0)
        if (!try_admit(p, st, r, &budget, true))
            break;
}

static void step_static(const struct sched_params *p, struct sched_state *st, struct sched_result *r) {
    if (st->static_batch_left == 0) {
        // Form a batch: up to max_seqs requests, each prompt computed whole in this step.
        int budget = NO_TOKEN_BUDGET;
        st->static_batch_size = 0;
        while (st->n_waiting > 0) {
            int group = head_group(st);
            if (!try_admit(p, st, r, &budget, true))
                break;
            for (int i = st->n_running - group; i < st->n_running; i++)
                st->running[i]->in_static_batch = true;
            st->static_batch_size += group;
        }
        st->static_batch_left = st->static_batch_size;
        // Padding: every prompt is padded to the batch's longest.
        int longest = 0;
        for (int i = 0; i < r->n_items; i++)
            longest = r->items[i]->n_tokens > longest ? r->items[i]->n_tokens : longest;
        for (int i = 0; i < r->n_items; i++)
            r->n_pad_tokens += longest - r->items[i]->n_tokens;
        return;
    }
    // Decode the batch; members that already finished still occupy their slot (one pad token each).
    r->n_pad_tokens = st->static_batch_size - st->static_batch_left;
    for (int i = 0; i < st->n_running; i++) {
        struct seq *s = st->running[i];
        if (s->state != SEQ_STATE_RUNNING || s->sched_count)
            continue;
        int count = s->n_tokens - s->n_computed; // 1 when decoding; more after a preemption
        if (count != 1)
            s->n_draft = 0;
        count += s->n_draft;
        if (!make_room(st, r, s, s->n_computed, s->n_computed + count)) {
            i = -1;
            continue;
        }
        plan(r, s, s->n_computed, count);
    }
    // A member preempted out of the batch comes back into it (static batches are never joined by others).
    while (st->n_waiting > 0 && st->waiting[0]->in_static_batch && r->n_preempted == 0) {
        int budget = NO_TOKEN_BUDGET;
        if (!try_admit(p, st, r, &budget, true))
            break;
    }
}

void sched_step(const struct sched_params *p, struct sched_state *st, struct sched_result *r) {
    struct seq **items = r->items;
    memset(r, 0, sizeof *r);
    r->items = items;
    for (int i = 0; i < st->n_running; i++)
        st->running[i]->sched_count = 0;
    for (int i = 0; i < st->n_waiting; i++)
        st->waiting[i]->sched_count = 0;
    switch (p->policy) {
    case SCHED_POLICY_NAIVE:
        step_naive(p, st, r);
        break;
    case SCHED_POLICY_STATIC:
        step_static(p, st, r);
        break;
    case SCHED_POLICY_CONTINUOUS:
        step_continuous(p, st, r);
        break;
    }
}

void sched_retire(struct sched_state *st, struct seq *s) {
    int i = index_of(st->running, st->n_running, s);
    if (i >= 0)
        remove_at(st->running, &st->n_running, i);
    else if ((i = index_of(st->waiting, st->n_waiting, s)) >= 0)
        remove_at(st->waiting, &st->n_waiting, i);
    if (s->in_static_batch) {
        CI_ASSERT(st->static_batch_left > 0);
        st->static_batch_left--;
        s->in_static_batch = false;
    }
}

void sched_check(const struct sched_state *st) {
    for (int i = 0; i < st->n_running; i++) {
        const struct seq *s = st->running[i];
        CI_ASSERT(s->state == SEQ_STATE_RUNNING || s->state == SEQ_STATE_FORKING);
        CI_ASSERT(s->n_computed <= s->n_tokens);
        CI_ASSERT(s->state == SEQ_STATE_RUNNING || s->blocks.n == 0);
        CI_ASSERT(index_of(st->running + i + 1, st->n_running - i - 1, s) < 0);
        CI_ASSERT(index_of(st->waiting, st->n_waiting, s) < 0);
    }
    for (int i = 0; i < st->n_waiting; i++) {
        const struct seq *s = st->waiting[i];
        CI_ASSERT(s->state == SEQ_STATE_WAITING);
        CI_ASSERT(s->blocks.n == 0 && s->n_computed == 0);
        CI_ASSERT(i == 0 || !seq_before(s, st->waiting[i - 1]));
    }
}
