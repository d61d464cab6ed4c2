/* cinfer bench: workload generation (seeded, deterministic) and its replay against the engine in synchronous
 * mode.  See bench_workload.h for the workloads and the policy progression. */
#include "bench/workload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/mem.h"
#include "core/queue.h"
#include "core/rng.h"
#include "model/model.h"

#define MAX_PROMPTS      (1 << 20)
#define MIN_SHAREGPT_LEN 4 // vLLM's ShareGPT loader drops prompts and outputs shorter than this

static const char *const workload_names[] = {"random", "sharegpt-like", "shared-prefix", "long-prompt"};

const char *bench_workload_name(enum bench_workload_kind k) {
    return (unsigned)k < sizeof workload_names / sizeof *workload_names ? workload_names[k] : "unknown";
}

bool bench_workload_parse(const char *name, enum bench_workload_kind *out) {
    for (int i = 0; i < (int)(sizeof workload_names / sizeof *workload_names); i++)
        if (!strcmp(name, workload_names[i])) {
            *out = (enum bench_workload_kind)i;
            return true;
        }
    return false;
}

struct bench_workload_params bench_workload_params_default(enum bench_workload_kind k) {
    struct bench_workload_params p = {0};
    p.kind = k;
    p.num_prompts = 32;
    p.request_rate = INFINITY;
    p.seed = 1;
    p.input_len = 128;
    p.output_len = 64;
    p.range_ratio = 0.5;
    p.input_sigma = 0.9;
    p.output_sigma = 0.7;
    p.n_groups = 4;
    p.prefix_len = 192;
    p.suffix_len = 16;
    p.long_len = 768;
    p.long_output_len = 16;
    p.long_at = 1.0 / 3.0;
    p.long_delay_s = 0.5;
    switch (k) {
    case BENCH_WORKLOAD_RANDOM:
        break;
    case BENCH_WORKLOAD_SHAREGPT:
        p.input_len = 96; // medians
        p.output_len = 64;
        break;
    case BENCH_WORKLOAD_SHARED_PREFIX:
        p.output_len = 32;
        p.range_ratio = 0;
        break;
    case BENCH_WORKLOAD_LONG_PROMPT:
        p.num_prompts = 17; // 16 short streams and the long prompt
        p.input_len = 32;
        p.output_len = 96;
        p.range_ratio = 0.25;
        break;
    }
    return p;
}

static int32_t rand_token(struct ci_rng *r, int n_vocab) {
    return 3 + (int32_t)(ci_rng_u64(r) % (uint64_t)(n_vocab - 3));
}

static void uniform_bounds(int len, double ratio, int *lo, int *hi) {
    *lo = (int)lround(len * (1 - ratio));
    *hi = (int)lround(len * (1 + ratio));
    if (*lo < 1)
        *lo = 1;
    if (*hi < *lo)
        *hi = *lo;
}

static int uniform_len(struct ci_rng *r, int len, double ratio) {
    int lo, hi;
    uniform_bounds(len, ratio, &lo, &hi);
    return lo + (int)(ci_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

/* round(median · e^(sigma·z)) clamped to [lo, hi]. */
static int lognormal_len(struct ci_rng *r, int median, double sigma, int lo, int hi) {
    double x = (double)median * exp(sigma * ci_rng_normal(r));
    if (!(x < (double)hi)) // also catches an overflowing exp
        return hi;
    int v = (int)lround(x);
    return v < lo ? lo : v > hi ? hi : v;
}

static bool infinite_rate(double rate) {
    return !(rate > 0) || isinf(rate);
}

static enum ci_status validate(const struct bench_workload_params *p, struct ci_err *err) {
    if (p->num_prompts < 1 || p->num_prompts > MAX_PROMPTS)
        return ci_err_set(err, CI_ERR_INVALID, "--num-prompts %d outside [1, %d]", p->num_prompts,
                          MAX_PROMPTS);
    if (p->n_vocab < 4)
        return ci_err_set(err, CI_ERR_INVALID, "the vocabulary (%d tokens) has no ordinary tokens",
                          p->n_vocab);
    if (p->n_ctx < 2)
        return ci_err_set(err, CI_ERR_INVALID, "context of %d tokens is too small", p->n_ctx);
    if (isnan(p->request_rate) || p->request_rate < 0)
        return ci_err_set(err, CI_ERR_INVALID, "request rate must be positive or inf");
    if (p->input_len < 1 || p->output_len < 1)
        return ci_err_set(err, CI_ERR_INVALID, "--input-len and --output-len must be at least 1");
    if (!(p->range_ratio >= 0 && p->range_ratio < 1))
        return ci_err_set(err, CI_ERR_INVALID, "--range-ratio %g outside [0, 1)", p->range_ratio);
    int in_lo, in_hi, out_lo, out_hi;
    uniform_bounds(p->input_len, p->range_ratio, &in_lo, &in_hi);
    uniform_bounds(p->output_len, p->range_ratio, &out_lo, &out_hi);
    switch (p->kind) {
    case BENCH_WORKLOAD_RANDOM:
        if ((int64_t)in_hi + out_hi > p->n_ctx)
            return ci_err_set(
                err, CI_ERR_INVALID,
                "random: input up to %d plus output up to %d tokens exceed the %d-token context", in_hi,
                out_hi, p->n_ctx);
        break;
    case BENCH_WORKLOAD_SHAREGPT:
        if (p->n_ctx < 2 * MIN_SHAREGPT_LEN)
            return ci_err_set(err, CI_ERR_INVALID, "sharegpt-like needs a context of at least %d tokens",
                              2 * MIN_SHAREGPT_LEN);
        if (!(p->input_sigma >= 0 && p->input_sigma <= 10 && p->output_sigma >= 0 && p->output_sigma <= 10))
            return ci_err_set(err, CI_ERR_INVALID, "sharegpt-like: sigmas must be in [0, 10]");
        break;
    case BENCH_WORKLOAD_SHARED_PREFIX:
        if (p->n_groups < 1 || p->n_groups > p->num_prompts)
            return ci_err_set(err, CI_ERR_INVALID, "shared-prefix: %d groups for %d prompts", p->n_groups,
                              p->num_prompts);
        if (p->prefix_len < 1 || p->suffix_len < 1)
            return ci_err_set(err, CI_ERR_INVALID,
                              "shared-prefix: prefix and suffix need at least one token");
        if ((int64_t)p->prefix_len + p->suffix_len + out_hi > p->n_ctx)
            return ci_err_set(err, CI_ERR_INVALID,
                              "shared-prefix: prefix %d + suffix %d + output up to %d exceed the %d-token "
                              "context",
                              p->prefix_len, p->suffix_len, out_hi, p->n_ctx);
        break;
    case BENCH_WORKLOAD_LONG_PROMPT:
        if (p->num_prompts < 2)
            return ci_err_set(err, CI_ERR_INVALID, "long-prompt needs at least 2 prompts");
        if ((int64_t)in_hi + out_hi > p->n_ctx)
            return ci_err_set(err, CI_ERR_INVALID,
                              "long-prompt: short input up to %d plus output up to %d exceed the %d-token "
                              "context",
                              in_hi, out_hi, p->n_ctx);
        if (p->long_len < 1 || p->long_output_len < 1 || (int64_t)p->long_len + p->long_output_len > p->n_ctx)
            return ci_err_set(
                err, CI_ERR_INVALID,
                "long-prompt: the long prompt (%d tokens) plus its %d outputs exceed the %d-token "
                "context",
                p->long_len, p->long_output_len, p->n_ctx);
        if (!(p->long_at >= 0 && p->long_at <= 1) || !(p->long_delay_s >= 0 && p->long_delay_s < 1e6))
            return ci_err_set(err, CI_ERR_INVALID, "long-prompt: bad arrival fraction or delay");
        break;
    default:
        return ci_err_set(err, CI_ERR_INVALID, "unknown workload %d", (int)p->kind);
    }
    return CI_OK;
}

enum ci_status bench_workload_generate(const struct bench_workload_params *p, struct bench_workload *out,
                                       struct ci_err *err) {
    memset(out, 0, sizeof *out);
    out->long_index = -1;
    enum ci_status s = validate(p, err);
    if (s != CI_OK)
        return s;
    int n = p->num_prompts;
    int32_t *prefixes = NULL; // [n_groups][prefix_len]
    // Lengths, tokens and arrivals come from separate streams so that changing one leaves the others alone.
    struct ci_rng rl, rt, ra;
    ci_rng_seed(&rl, p->seed);
    ci_rng_seed(&rt, p->seed ^ 0x746f6b656e73ull);
    ci_rng_seed(&ra, p->seed ^ 0x617272697661ull);
    if (!(out->reqs = ci_calloc((size_t)n, sizeof *out->reqs)))
        goto nomem;
    out->n = n;
    bool inf = infinite_rate(p->request_rate);
    if (p->kind == BENCH_WORKLOAD_LONG_PROMPT) {
        int k = (int)lround(p->long_at * n);
        out->long_index = inf ? n - 1 : (k < 0 ? 0 : k > n - 1 ? n - 1 : k);
    }

    // Pass 1: lengths and arrivals.
    int64_t total = 0;
    double t = 0;
    for (int i = 0; i < n; i++) {
        struct bench_request *q = &out->reqs[i];
        switch (p->kind) {
        case BENCH_WORKLOAD_RANDOM:
            q->n_prompt = uniform_len(&rl, p->input_len, p->range_ratio);
            q->max_tokens = uniform_len(&rl, p->output_len, p->range_ratio);
            break;
        case BENCH_WORKLOAD_SHAREGPT:
            q->n_prompt = lognormal_len(&rl, p->input_len, p->input_sigma, MIN_SHAREGPT_LEN,
                                        p->n_ctx - MIN_SHAREGPT_LEN);
            q->max_tokens =
                lognormal_len(&rl, p->output_len, p->output_sigma, MIN_SHAREGPT_LEN, p->n_ctx - q->n_prompt);
            break;
        case BENCH_WORKLOAD_SHARED_PREFIX:
            q->group = i % p->n_groups;
            q->n_prompt = p->prefix_len + p->suffix_len;
            q->max_tokens = uniform_len(&rl, p->output_len, p->range_ratio);
            break;
        case BENCH_WORKLOAD_LONG_PROMPT:
            if (i == out->long_index) {
                q->group = 1;
                q->n_prompt = p->long_len;
                q->max_tokens = p->long_output_len;
            } else {
                q->n_prompt = uniform_len(&rl, p->input_len, p->range_ratio);
                q->max_tokens = uniform_len(&rl, p->output_len, p->range_ratio);
            }
            break;
        }
        if (!inf && i > 0)
            t += -log(1.0 - ci_rng_f64(&ra)) / p->request_rate;
        q->t_arrival_ns = (int64_t)llround(t * 1e9);
        if (inf && i == out->long_index)
            q->t_arrival_ns = (int64_t)llround(p->long_delay_s * 1e9);
        total += q->n_prompt;
        out->n_output_tokens += q->max_tokens;
    }
    out->n_prompt_tokens = total;

    // Pass 2: tokens.
    size_t bytes;
    if (!ci_mul_size((size_t)total, sizeof(int32_t), &bytes) || !(out->tokens = ci_malloc(bytes)))
        goto nomem;
    if (p->kind == BENCH_WORKLOAD_SHARED_PREFIX) {
        if (!(prefixes = ci_malloc((size_t)p->n_groups * (size_t)p->prefix_len * sizeof *prefixes)))
            goto nomem;
        for (size_t i = 0; i < (size_t)p->n_groups * (size_t)p->prefix_len; i++)
            prefixes[i] = rand_token(&rt, p->n_vocab);
    }
    int32_t *dst = out->tokens;
    for (int i = 0; i < n; i++) {
        struct bench_request *q = &out->reqs[i];
        int from = 0;
        if (prefixes) {
            memcpy(dst, prefixes + (size_t)q->group * (size_t)p->prefix_len,
                   (size_t)p->prefix_len * sizeof *dst);
            from = p->prefix_len;
        }
        for (int k = from; k < q->n_prompt; k++)
            dst[k] = rand_token(&rt, p->n_vocab);
        q->prompt = dst;
        dst += q->n_prompt;
    }
    ci_free(prefixes);
    return CI_OK;
nomem:
    ci_free(prefixes);
    bench_workload_free(out);
    return ci_err_set(err, CI_ERR_NOMEM, "out of memory for a workload of %d prompts", n);
}

void bench_workload_free(struct bench_workload *w) {
    ci_free(w->reqs);
    ci_free(w->tokens);
    memset(w, 0, sizeof *w);
    w->long_index = -1;
}

/* ---- policies ----------------------------------------------------------------------------------------- */

static const char *const policy_names[] = {"naive", "static", "continuous", "chunked", "paged", "prefix"};

const char *bench_policy_name(enum bench_policy p) {
    return (unsigned)p < BENCH_POLICY_COUNT ? policy_names[p] : "unknown";
}

bool bench_policy_parse(const char *name, enum bench_policy *out) {
    for (int i = 0; i < BENCH_POLICY_COUNT; i++)
        if (!strcmp(name, policy_names[i])) {
            *out = (enum bench_policy)i;
            return true;
        }
    return false;
}

bool bench_policy_list_parse(const char *list, enum bench_policy *out, int max, int *n, char *msg,
                             int msg_size) {
    *n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[32];
        if (len == 0 || len >= sizeof name) {
            snprintf(msg, (size_t)msg_size, "empty or overlong policy name in '%s'", list);
            return false;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (*n >= max) {
            snprintf(msg, (size_t)msg_size, "more than %d policies in '%s'", max, list);
            return false;
        }
        if (!bench_policy_parse(name, &out[*n])) {
            snprintf(msg, (size_t)msg_size,
                     "unknown policy '%s' (known: naive, static, continuous, chunked, paged, prefix)", name);
            return false;
        }
        (*n)++;
        if (!end)
            return true;
        p = end + 1;
    }
}

struct engine_params bench_policy_params(enum bench_policy p, const struct bench_engine_config *c) {
    struct engine_params ep = engine_params_default();
    ep.n_threads = c->n_threads;
    ep.n_ctx = c->n_ctx;
    ep.kv_mem_bytes = c->kv_mem_bytes;
    ep.kv_type = c->kv_type;
    ep.sched.max_seqs = c->max_seqs;
    ep.sched.max_batch_tokens = c->max_batch_tokens;
    ep.block_size = c->block_size;
    ep.spec = c->spec;
    ep.spec_k = c->spec_k;
    ep.spec_max_batch = c->spec_max_batch;
    ep.draft = c->draft;
    ep.dist = c->dist;
    ep.contiguous_kv = p < BENCH_POLICY_PAGED;
    ep.prefix_cache = p == BENCH_POLICY_PREFIX;
    ep.sched.chunked_prefill = p >= BENCH_POLICY_CHUNKED;
    ep.sched.policy = p == BENCH_POLICY_NAIVE    ? SCHED_POLICY_NAIVE
                      : p == BENCH_POLICY_STATIC ? SCHED_POLICY_STATIC
                                                 : SCHED_POLICY_CONTINUOUS;
    // Without chunking a prompt must enter one step whole, so the budget is the context (vLLM's
    // max_num_batched_tokens = max_model_len); naive and static ignore the budget, and a pass this large lets
    // them run each prompt in one forward pass too.
    if (p < BENCH_POLICY_CHUNKED && ep.sched.max_batch_tokens < c->n_ctx)
        ep.sched.max_batch_tokens = c->n_ctx;
    return ep;
}

/* ---- replay ------------------------------------------------------------------------------------------- */

struct step_log {
    struct bench_run *run;
    int64_t t0;
};

static void on_step(void *ctx, const struct step_metrics *m) {
    struct step_log *log = ctx;
    struct bench_run *r = log->run;
    if (r->n_steps == r->cap_steps) {
        int cap = r->cap_steps ? r->cap_steps * 2 : 1024;
        struct step_metrics *grown = ci_realloc(r->steps, (size_t)cap * sizeof *grown);
        if (!grown) {
            r->steps_truncated = true;
            return;
        }
        r->steps = grown;
        r->cap_steps = cap;
    }
    struct step_metrics *s = &r->steps[r->n_steps++];
    *s = *m;
    s->t_start_ns -= log->t0;
    s->t_end_ns -= log->t0;
}

static void sleep_until(int64_t t_ns) {
    int64_t d = t_ns - ci_now_ns();
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)(d / 1000000000), (long)(d % 1000000000)};
    nanosleep(&ts, NULL);
}

/* Reads whatever the request's stream holds; true once it has ended. */
static bool stream_done(struct engine_request *h) {
    struct ci_event ev;
    struct ci_channel *ch = engine_request_channel(h, 0);
    while (ci_channel_recv(ch, &ev, 0) == CI_OK)
        if (ev.kind == CI_EVENT_DONE || ev.kind == CI_EVENT_ERROR)
            return true;
    return false;
}

static int64_t rel(int64_t t, int64_t t0) {
    return t ? t - t0 : 0;
}

static enum ci_status collect(struct engine_request *h, int64_t t0, int group, struct bench_req_result *o) {
    const struct request_metrics *m = engine_request_metrics(h, 0);
    o->t_arrival_ns = rel(m->t_arrival_ns, t0);
    o->t_scheduled_ns = rel(m->t_scheduled_ns, t0);
    o->t_first_token_ns = rel(m->t_first_token_ns, t0);
    o->t_finish_ns = rel(m->t_finish_ns, t0);
    o->n_prompt = m->n_prompt;
    o->n_output = m->n_output;
    o->n_preempted = m->n_preempted;
    o->finish = m->finish;
    o->group = group;
    if (m->n_output > 0) {
        if (!(o->t_token_ns = ci_malloc((size_t)m->n_output * sizeof *o->t_token_ns)))
            return CI_ERR_NOMEM;
        for (int i = 0; i < m->n_output; i++)
            o->t_token_ns[i] = rel(m->t_token_ns[i], t0);
    }
    return CI_OK;
}

enum ci_status bench_run_workload(const struct model *m, const struct engine_params *p,
                                  const struct bench_workload *w, const char *label,
                                  bench_progress_fn progress, void *progress_ctx, struct bench_run *out,
                                  struct ci_err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->label, sizeof out->label, "%s", label);
    out->long_index = w->long_index;
    out->n_workload_prompt_tokens = w->n_prompt_tokens;
    struct engine *e = NULL;
    struct engine_request **h = NULL;
    int *active = NULL; // [n] indices of submitted, unfinished requests
    enum ci_status s;
    struct engine_params ep = *p;
    if (ep.queue_capacity < w->n + 1)
        ep.queue_capacity = w->n + 1; // an infinite rate submits everything before the first step
    if (!(out->reqs = ci_calloc((size_t)w->n, sizeof *out->reqs)) ||
        !(h = ci_calloc((size_t)w->n, sizeof *h)) || !(active = ci_calloc((size_t)w->n, sizeof *active))) {
        s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
        goto fail;
    }
    out->n_reqs = w->n;
    if ((s = engine_create(m, NULL, &ep, &e, err)) != CI_OK)
        goto fail;
    engine_info(e, &out->info);
    struct step_log log = {out, 0};
    engine_set_step_hook(e, on_step, &log);

    int next = 0, n_active = 0, n_done = 0;
    int64_t idle_spins = 0, last_report = 0;
    int64_t t0 = ci_now_ns();
    log.t0 = t0;
    while (n_done < w->n) {
        int64_t now = ci_now_ns();
        for (; next < w->n && t0 + w->reqs[next].t_arrival_ns <= now; next++) {
            const struct bench_request *q = &w->reqs[next];
            struct engine_request_params rp = {0};
            rp.prompt = q->prompt;
            rp.n_prompt = q->n_prompt;
            rp.max_tokens = q->max_tokens;
            rp.n = 1;
            rp.sampling = sampling_params_default();
            rp.sampling.temperature = 0; // greedy
            rp.ignore_eos = true;        // every request produces exactly its max_tokens
            rp.t_arrival_ns = t0 + q->t_arrival_ns;
            if ((s = engine_submit(e, &rp, &h[next], err)) != CI_OK) {
                ci_err_prefix(err, "request %d (%d prompt + %d output tokens)", next, q->n_prompt,
                              q->max_tokens);
                goto fail;
            }
            active[n_active++] = next;
        }
        bool worked = engine_step(e);
        int finished_now = 0;
        for (int i = 0; i < n_active;) {
            int r = active[i];
            if (!stream_done(h[r])) {
                i++;
                continue;
            }
            if (collect(h[r], t0, w->reqs[r].group, &out->reqs[r]) != CI_OK) {
                s = ci_err_set(err, CI_ERR_NOMEM, "out of memory");
                goto fail;
            }
            engine_request_release(h[r]);
            h[r] = NULL;
            active[i] = active[--n_active];
            n_done++;
            finished_now++;
        }
        now = ci_now_ns();
        if (progress && (finished_now || now - last_report > 100000000)) {
            progress(progress_ctx, label, n_done, w->n, now - t0);
            last_report = now;
        }
        if (worked) {
            idle_spins = 0;
        } else if (engine_idle(e) && n_active == 0 && next < w->n) {
            sleep_until(t0 + w->reqs[next].t_arrival_ns);
        } else if (++idle_spins > 1000000) {
            s = ci_err_set(err, CI_ERR_INTERNAL,
                           "%s: the engine stopped making progress (%d of %d requests done)", label, n_done,
                           w->n);
            goto fail;
        }
    }
    out->wall_ns = ci_now_ns() - t0;
    engine_totals(e, &out->totals);
    for (int i = 0; i < w->n; i++)
        if (out->reqs[i].finish != ENGINE_FINISH_LENGTH) {
            s = ci_err_set(err, CI_ERR_INTERNAL, "%s: request %d ended with '%s', not 'length'", label, i,
                           engine_finish_str(out->reqs[i].finish));
            goto fail;
        }
    engine_free(e);
    ci_free(h);
    ci_free(active);
    return CI_OK;
fail:
    for (int i = 0; h && i < w->n; i++)
        engine_request_release(h[i]);
    engine_free(e);
    ci_free(h);
    ci_free(active);
    bench_run_free(out);
    return s;
}

void bench_run_free(struct bench_run *r) {
    for (int i = 0; r->reqs && i < r->n_reqs; i++)
        ci_free(r->reqs[i].t_token_ns);
    ci_free(r->reqs);
    ci_free(r->steps);
    memset(r, 0, sizeof *r);
}
