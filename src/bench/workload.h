/* The offline benchmark's workloads and their replay (cinfer bench).
 *
 * A workload is a list of requests (prompt token ids, output length, arrival time) generated from a seed:
 * the same parameters and seed give the same requests, token for token, so every policy of a comparison
 * serves exactly the same load.  Prompts are drawn from the vocabulary above the three special ids 0..2;
 * every request fits the context (n_prompt + max_tokens <= n_ctx).
 *
 *   random         uniform input/output lengths in [len·(1 − r), len·(1 + r)] (vLLM's random dataset)
 *   sharegpt-like  long-tailed: log-normal input and output lengths (median len, sigma), clipped to the
 * context shared-prefix  G groups × P prompts: each group shares a long system prompt, each prompt adds a
 * short unique suffix; requests are interleaved round-robin over the groups long-prompt    many short
 * streams, and one long prompt arriving after a fraction of them
 *
 * Arrivals: Poisson with rate R (exponential gaps of mean 1/R, the first request at 0), or all at 0 when R
 * is infinite.  Under an infinite rate the long prompt of long-prompt arrives at long_delay_s instead (and is
 * the last request), so that it still lands in the middle of the decoding streams.  Requests are stored in
 * arrival order (arrivals never decrease).
 *
 * The replay (bench_run_workload) drives one engine in synchronous mode: it submits each request at its
 * arrival time, passing the intended arrival so that latencies count from it even when a step was running,
 * steps the engine, sleeps while idle until the next arrival, and collects every request's metrics and every
 * step's record.  The policies of a comparison (enum bench_policy) are a cumulative progression, see
 * bench_policy_params.
 *
 * Ownership: a struct bench_workload owns its token storage; a struct bench_run owns its arrays; free them
 * with bench_workload_free / bench_run_free (both safe on a zeroed struct). */
#ifndef CINFER_BENCH_WORKLOAD_H
#define CINFER_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/engine.h"

struct model;

enum bench_workload_kind {
    BENCH_WORKLOAD_RANDOM,
    BENCH_WORKLOAD_SHAREGPT,
    BENCH_WORKLOAD_SHARED_PREFIX,
    BENCH_WORKLOAD_LONG_PROMPT,
};

const char *bench_workload_name(enum bench_workload_kind k);
bool bench_workload_parse(const char *name, enum bench_workload_kind *out);

struct bench_workload_params {
    enum bench_workload_kind kind;
    int num_prompts;     // requests in all (long-prompt: the short streams plus the one long prompt)
    double request_rate; // requests/s; 0 or infinity: every request arrives at 0
    uint64_t seed;
    int n_vocab; // token ids are drawn from [3, n_vocab)
    int n_ctx;   // every request: n_prompt + max_tokens <= n_ctx
    // random: lengths uniform in [len·(1 − range_ratio), len·(1 + range_ratio)]; sharegpt-like: medians;
    // long-prompt: the short streams' lengths (range_ratio applies); shared-prefix: output length.
    int input_len, output_len;
    double range_ratio;
    double input_sigma, output_sigma; // sharegpt-like: sigma of the log of the length
    // shared-prefix
    int n_groups;
    int prefix_len, suffix_len;
    // long-prompt
    int long_len;        // the long prompt's tokens
    int long_output_len; // its output tokens
    double long_at;      // fraction of the requests that arrive before it
    double long_delay_s; // its arrival under an infinite rate
};

/* Defaults per kind (sizes meant for a small model on a CPU; bench/README.md lists them). */
struct bench_workload_params bench_workload_params_default(enum bench_workload_kind k);

struct bench_request {
    const int32_t *prompt; // [n_prompt] (into the workload's storage)
    int n_prompt;
    int max_tokens;
    int64_t t_arrival_ns; // offset from the start of the run
    int group;            // shared-prefix: the group; long-prompt: 1 for the long prompt; else 0
};

struct bench_workload {
    struct bench_request *reqs; // [n] in arrival order
    int n;
    int32_t *tokens; // all prompts
    int64_t n_prompt_tokens, n_output_tokens;
    int long_index; // long-prompt: index of the long prompt; else -1
};

/* CI_ERR_INVALID when the parameters cannot give a workload that fits n_ctx (message says which). */
enum ci_status bench_workload_generate(const struct bench_workload_params *p, struct bench_workload *out,
                                       struct ci_err *err);
void bench_workload_free(struct bench_workload *w);

/* ---- policies ----------------------------------------------------------------------------------------- */

/* The cumulative progression of `cinfer bench --compare`:
 *   naive       policy naive (recompute the whole prefix every step)
 *   static      policy static (batch = max_seqs, padded, runs to the last member's end)
 *   continuous  iteration-level batching, chunked prefill off (a prompt enters whole: the token budget is
 *               the context, as vLLM's max_num_batched_tokens when chunking is off)
 *   chunked     continuous + chunked prefill (token budget max_batch_tokens)
 *   paged       chunked + paged KV (block_size tokens per block)
 *   prefix      paged + prefix cache
 * The first four use contiguous KV (one whole-context block per sequence) and no prefix cache.  All get the
 * same KV memory budget. */
enum bench_policy {
    BENCH_POLICY_NAIVE,
    BENCH_POLICY_STATIC,
    BENCH_POLICY_CONTINUOUS,
    BENCH_POLICY_CHUNKED,
    BENCH_POLICY_PAGED,
    BENCH_POLICY_PREFIX,
    BENCH_POLICY_COUNT,
};

const char *bench_policy_name(enum bench_policy p);
bool bench_policy_parse(const char *name, enum bench_policy *out);
/* Parses a comma-separated list of policy names into out[0..*n) (at most max).  False on an unknown name or
 * an empty list (msg gets the reason). */
bool bench_policy_list_parse(const char *list, enum bench_policy *out, int max, int *n, char *msg,
                             int msg_size);

struct dist;

struct bench_engine_config {
    int n_threads;
    int n_ctx;
    int max_seqs;
    int max_batch_tokens; // chunked prefill's per-step budget
    int block_size;       // paged KV
    int64_t kv_mem_bytes;
    uint32_t kv_type;          // KV element type (engine_params.kv_type)
    enum engine_spec spec;     // speculative decoding (engine.h)
    int spec_k;                // longest proposal (0: the engine's default)
    int spec_max_batch;        // engine_params.spec_max_batch
    const struct model *draft; // ENGINE_SPEC_DRAFT
    struct dist *dist;         // --tp/--pp: the other ranks mirror each engine's forward pass (rank 0)
};

struct engine_params bench_policy_params(enum bench_policy p, const struct bench_engine_config *c);

/* ---- replay ------------------------------------------------------------------------------------------- */

struct bench_req_result {
    int64_t t_arrival_ns, t_scheduled_ns, t_first_token_ns, t_finish_ns; // offsets from the run's start
    int64_t *t_token_ns; // [n_output] offsets from the run's start
    int n_prompt, n_output, n_preempted;
    int group;
    enum engine_finish finish;
};

struct bench_run {
    char label[32];
    struct bench_req_result *reqs; // [n_reqs] in the workload's order
    int n_reqs;
    struct step_metrics *steps; // [n_steps], times as offsets from the run's start
    int n_steps, cap_steps;
    struct engine_info info;
    struct engine_totals totals;
    int64_t wall_ns;
    int long_index; // copied from the workload
    int64_t n_workload_prompt_tokens;
    bool steps_truncated; // the step array could not grow (records dropped)
};

typedef void (*bench_progress_fn)(void *ctx, const char *label, int n_done, int n_total, int64_t elapsed_ns);

/* Replays w on a fresh engine built from p.  Every request must finish (CI_ERR_INTERNAL otherwise);
 * CI_ERR_LIMIT when the engine rejects a request (it does not fit the context or the KV pool).  progress
 * (may be NULL) is called after steps in which requests finished and about every 100 ms. */
enum ci_status bench_run_workload(const struct model *m, const struct engine_params *p,
                                  const struct bench_workload *w, const char *label,
                                  bench_progress_fn progress, void *progress_ctx, struct bench_run *out,
                                  struct ci_err *err);
void bench_run_free(struct bench_run *r);

#endif
