/* The scheduler against hand-written step traces, one per policy, and preemption in a tiny pool.  No model:
 * each test plays the engine's part (a scheduled chunk is computed; a sequence that reaches its last known
 * token samples one more), so the expected plans below are worked out by hand from the policy rules. */
#include "test.h"

#include "core/check.h"
#include "core/mem.h"
#include "engine/kv_pool.h"
#include "engine/sched.h"

#define MAX_SEQS 8

struct world {
    struct kv_pool *pool;
    struct seq seqs[MAX_SEQS];
    struct seq *running[MAX_SEQS], *waiting[MAX_SEQS], *items[MAX_SEQS];
    int max_tokens[MAX_SEQS];
    char reqs[MAX_SEQS]; // distinct request identities
    struct sched_state st;
    struct sched_result r;
};

static void world_init(struct world *w, int block_size, int n_blocks) {
    memset(w, 0, sizeof *w);
    struct kv_pool_params pp = {1, 1, 1, block_size, n_blocks, 0}; // f32 KV
    struct ci_err err = {0};
    CI_ASSERT(kv_pool_create(&pp, &w->pool, &err) == CI_OK);
    w->st.pool = w->pool;
    w->st.running = w->running;
    w->st.waiting = w->waiting;
    w->st.cap = MAX_SEQS;
    w->r.items = w->items;
}

/* Adds a request with a prompt of n_prompt tokens to the waiting queue (in order). */
static struct seq *add(struct world *w, int i, int n_prompt, int max_tokens) {
    struct seq *s = &w->seqs[i];
    s->req = (struct engine_request *)(void *)&w->reqs[i];
    s->order = (uint64_t)i;
    s->cap = n_prompt + max_tokens;
    s->tokens = ci_calloc((size_t)s->cap, sizeof *s->tokens);
    s->n_prompt = s->n_tokens = n_prompt;
    struct ci_err err = {0};
    CI_ASSERT(kv_seq_init(&s->blocks, 64, &err) == CI_OK);
    w->max_tokens[i] = max_tokens;
    w->st.waiting[w->st.n_waiting++] = s;
    return s;
}

/* Plays the engine: computes every planned chunk, samples where a sequence reached its end, retires
 * sequences that produced max_tokens. */
static void play(struct world *w) {
    for (int i = 0; i < w->r.n_items; i++) {
        struct seq *s = w->r.items[i];
        s->n_computed = s->sched_from + s->sched_count;
        if (s->n_computed == s->n_tokens)
            s->tokens[s->n_tokens++] = 7;
    }
    for (int i = 0; i < w->r.n_items; i++) {
        struct seq *s = w->r.items[i];
        int idx = (int)(s - w->seqs);
        if (seq_n_output(s) >= w->max_tokens[idx]) {
            sched_retire(&w->st, s);
            kv_seq_release(w->pool, &s->blocks);
            s->state = SEQ_STATE_FINISHED;
        }
    }
    sched_check(&w->st);
    const struct kv_seq_blocks *live[MAX_SEQS];
    for (int i = 0; i < w->st.n_running; i++)
        live[i] = &w->st.running[i]->blocks;
    kv_pool_check(w->pool, live, w->st.n_running, NULL);
}

static void world_free(struct world *w) {
    for (int i = 0; i < MAX_SEQS; i++) {
        if (w->seqs[i].blocks.ids) {
            kv_seq_release(w->pool, &w->seqs[i].blocks);
            kv_seq_deinit(&w->seqs[i].blocks);
        }
        ci_free(w->seqs[i].tokens);
    }
    kv_pool_free(w->pool);
}

/* The plan as text, "A0+5 B0+3" (sequence letter, first position, token count), in planning order. */
static const char *plan_str(struct world *w) {
    static char buf[256];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < w->r.n_items; i++) {
        const struct seq *s = w->r.items[i];
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%c%d+%d", i ? " " : "", 'A' + (int)(s - w->seqs),
                              s->sched_from, s->sched_count);
    }
    return buf;
}

static bool step_expect(struct world *w, const struct sched_params *p, const char *want, int want_pad) {
    sched_step(p, &w->st, &w->r);
    const char *got = plan_str(w);
    bool ok = !strcmp(got, want) && w->r.n_pad_tokens == want_pad;
    if (!ok)
        TEST_FAILF("plan '%s' (pad %d), want '%s' (pad %d)", got, w->r.n_pad_tokens, want, want_pad);
    play(w);
    return ok;
}

TEST(continuous_chunked_trace) {
    struct world w;
    world_init(&w, 4, 64);
    struct sched_params p = {SCHED_POLICY_CONTINUOUS, true, 8, 4};
    add(&w, 0, 5, 10);
    add(&w, 1, 10, 10);
    add(&w, 2, 3, 10);
    // Admission fills the budget of 8: A whole (5), then 3 of B's 10.
    step_expect(&w, &p, "A0+5 B0+3", 0);
    // A decodes first; B's remaining 7 fill the rest; C must wait (budget spent).
    step_expect(&w, &p, "A5+1 B3+7", 0);
    // Both decode; C's whole prompt fits in the 6 left.
    step_expect(&w, &p, "A6+1 B10+1 C0+3", 0);
    step_expect(&w, &p, "A7+1 B11+1 C3+1", 0);
    world_free(&w);
}

TEST(continuous_unchunked_trace) {
    struct world w;
    world_init(&w, 4, 64);
    struct sched_params p = {SCHED_POLICY_CONTINUOUS, false, 8, 4};
    add(&w, 0, 5, 10);
    add(&w, 1, 10, 10);
    add(&w, 2, 3, 10);
    // A fits; B (10) does not fit the 3 left and a prompt already entered: B waits, and so does C (FCFS).
    step_expect(&w, &p, "A0+5", 0);
    // No prompt yet this step: B enters whole although it overruns the budget (it cannot starve).
    step_expect(&w, &p, "A5+1 B0+10", 0);
    step_expect(&w, &p, "A6+1 B10+1 C0+3", 0);
    world_free(&w);
}

TEST(max_seqs_bounds_admission) {
    struct world w;
    world_init(&w, 4, 64);
    struct sched_params p = {SCHED_POLICY_CONTINUOUS, true, 64, 2};
    add(&w, 0, 2, 2);
    add(&w, 1, 2, 1);
    add(&w, 2, 2, 2);
    step_expect(&w, &p, "A0+2 B0+2", 0); // two running at most: C waits; B finishes after one token
    step_expect(&w, &p, "A2+1 C0+2",
                0); // B retired: C is admitted in the same step A decodes (iteration level)
    world_free(&w);
}

TEST(static_trace) {
    struct world w;
    world_init(&w, 4, 64);
    struct sched_params p = {SCHED_POLICY_STATIC, true, 8, 2};
    add(&w, 0, 5, 2);
    add(&w, 1, 10, 3);
    add(&w, 2, 3, 1);
    // A batch of 2: both prompts whole (budget ignored), A padded to B's 10: 5 pad tokens.
    step_expect(&w, &p, "A0+5 B0+10", 5);
    step_expect(&w, &p, "A5+1 B10+1", 0); // A ends here (2 tokens)
    step_expect(&w, &p, "B11+1", 1);      // A's slot still computes a pad token: the straggler
    // The batch is over; only now does C start, in a batch of its own.
    step_expect(&w, &p, "C0+3", 0);
    world_free(&w);
}

TEST(naive_trace) {
    struct world w;
    world_init(&w, 4, 64);
    struct sched_params p = {SCHED_POLICY_NAIVE, true, 8, 4};
    add(&w, 0, 5, 3);
    add(&w, 1, 3, 3);
    // No KV reuse: every step recomputes each sequence's whole prefix.
    step_expect(&w, &p, "A0+5 B0+3", 0);
    step_expect(&w, &p, "A0+6 B0+4", 0);
    step_expect(&w, &p, "A0+7 B0+5", 0);
    world_free(&w);
}

TEST(preemption_newest_first) {
    struct world w;
    world_init(&w, 4, 5); // 20 positions
    struct sched_params p = {SCHED_POLICY_CONTINUOUS, true, 64, 4};
    add(&w, 0, 8, 8);
    add(&w, 1, 8, 8);
    struct seq *c = add(&w, 2, 4, 8);
    step_expect(&w, &p, "A0+8 B0+8 C0+4", 0); // 2 + 2 + 1 blocks: the pool is full
    CHECK(kv_pool_n_available(w.pool) == 0);
    // A's 9th position needs a block: the newest (C) is preempted; B then needs one too: the next newest is B
    // itself, which cannot take from an older sequence, so B is preempted as well.
    sched_step(&p, &w.st, &w.r);
    CHECK(!strcmp(plan_str(&w), "A8+1"));
    CHECK(w.r.n_preempted == 2);
    CHECK(c->state == SEQ_STATE_WAITING && c->n_computed == 0 && c->n_tokens == 5 && c->blocks.n == 0);
    CHECK(w.st.n_waiting == 2 && w.st.waiting[0] == &w.seqs[1] && w.st.waiting[1] == c); // request order kept
    play(&w);
    // B's recomputation (9 positions, 3 blocks) does not fit the 2 free blocks, and C may not jump ahead of
    // it (first come, first served): A decodes alone until it ends.
    step_expect(&w, &p, "A9+1", 0);
    for (int pos = 10; pos < 15; pos++) {
        char want[16];
        snprintf(want, sizeof want, "A%d+1", pos);
        step_expect(&w, &p, want, 0);
    }
    CHECK(w.seqs[0].state == SEQ_STATE_FINISHED);
    // Then B recomputes its prompt and first token, and C its prompt and first token, both kept from before.
    step_expect(&w, &p, "B0+9 C0+5", 0);
    world_free(&w);
}

TEST(a_lone_sequence_preempts_itself_and_waits) {
    struct world w;
    world_init(&w, 4, 2); // 8 positions
    struct sched_params p = {SCHED_POLICY_CONTINUOUS, true, 64, 4};
    struct seq *a = add(&w, 0, 8, 4); // its prompt fills the pool; its first decode needs a 3rd block
    step_expect(&w, &p, "A0+8", 0);
    sched_step(&p, &w.st, &w.r);
    CHECK(w.r.n_items == 0 && w.r.n_preempted == 1 && a->state == SEQ_STATE_WAITING);
    // It can never be re-admitted (9 positions > 8): the engine rejects such requests at submission.
    sched_step(&p, &w.st, &w.r);
    CHECK(w.r.n_items == 0 && w.st.n_waiting == 1);
    world_free(&w);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(continuous_chunked_trace);
    RUN(continuous_unchunked_trace);
    RUN(max_seqs_bounds_admission);
    RUN(static_trace);
    RUN(naive_trace);
    RUN(preemption_newest_first);
    RUN(a_lone_sequence_preempts_itself_and_waits);
    return test_exit_code();
}
