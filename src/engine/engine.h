/* The serving engine: one engine thread owns every sequence, the paged KV pool, the prefix cache and the
 * samplers (no locks inside).  Callers on any thread submit requests through a bounded queue and read each
 * sample's tokens from its own channel (src/core/queue.h); cancellation is per request.  Each step the
 * scheduler (sched.h) builds one batch and the model runs it with forward_batch (split into several passes
 * only when a step holds more tokens than the forward scratch, e.g. a naive recompute).
 *
 * Two ways to drive it: engine_start() runs the step loop on its own thread (the server), or the caller
 * calls engine_step() itself (the offline benchmark and the tests: deterministic, no thread).
 *
 * Ownership: struct engine_request is shared by the caller and the engine (refcounted): the caller drops its
 * reference with engine_request_release (which also cancels the request if it is still running); the engine
 * drops its own when every sample has finished.  Metrics of a sample are final once its channel delivered
 * the last event. */
#ifndef CINFER_ENGINE_ENGINE_H
#define CINFER_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/sched.h"

struct model;
struct tokenizer;
struct engine;
struct engine_request;
struct ci_channel;
struct dist;

/* Speculative decoding (spec.h): who proposes drafts for the decoding sequences.  Each step a decoding
 * sequence with a proposal of k tokens contributes k + 1 tokens to the batch (its last token and the drafts)
 * and all k + 1 positions are sampled in order with its own sampler (sampler_sample_draft): drafts are kept
 * while accepted, then the target's own token is appended (or, after all k, the bonus token), so greedy
 * output is the plain decode's and sampled output keeps the target distribution.  The KV of rejected
 * positions is rolled back (n_computed = n_tokens - 1, blocks past the tokens given back). */
enum engine_spec {
    ENGINE_SPEC_NONE,
    ENGINE_SPEC_NGRAM, // prompt lookup in the sequence's own tokens
    ENGINE_SPEC_DRAFT, // a small model of the same vocabulary proposes greedily
};
const char *engine_spec_name(enum engine_spec s);
bool engine_spec_parse(const char *name, enum engine_spec *out);

struct engine_params {
    enum engine_spec spec;
    int spec_k;       // longest proposal (1..SPEC_MAX_K; 0: 8)
    int spec_k_min;   // shortest proposal the adaptive length goes down to (0: 1)
    int spec_ngram_n; // ngram: longest suffix looked up (0: 3)
    // Speculate only in steps where at most this many sequences decode (0: any number).  Batched decode
    // already reads each weight once for many sequences, so past some batch size (bench/spec.sh's
    // crossover) a verification costs more than the tokens it saves; vLLM's disable_by_batch_size.
    int spec_max_batch;
    const struct model *draft; // ENGINE_SPEC_DRAFT: the proposer (same vocabulary as the model)
    int n_threads;
    struct sched_params sched; // policy, chunked prefill, token budget, max running sequences
    int block_size;            // tokens per KV block (0: 16)
    bool contiguous_kv;        // block size = the context length: one whole-context block per sequence
    int64_t kv_mem_bytes;      // KV pool size in bytes (0: use kv_blocks)
    uint32_t kv_type;          // KV element type: CI_TYPE_F32 (0, default), CI_TYPE_F16 or CI_TYPE_Q8_0
    int kv_blocks;          // KV pool size in blocks (0 with kv_mem_bytes 0: sized from memory, kv_budget.h)
    double kv_mem_fraction; // that default: the share of available memory (0: KV_MEM_FRACTION_DEFAULT)
    bool prefix_cache;      // share full prompt blocks across requests (not with naive)
    int n_ctx;              // context limit per sequence (0: the model's training context)
    int queue_capacity;     // pending submissions (0: 1024)
    bool check_invariants;  // kv_pool_check / sched_check / prefix_cache_check after every step
    struct dist *dist;      // tensor parallelism (rank 0 of a world whose model is sharded; dist.h), or NULL
};

struct engine_params engine_params_default(void);

enum engine_finish {
    ENGINE_FINISH_NONE,
    ENGINE_FINISH_STOP,      // end-of-generation token or a stop string
    ENGINE_FINISH_LENGTH,    // max_tokens reached
    ENGINE_FINISH_CANCELLED, // the caller cancelled (or disconnected)
    ENGINE_FINISH_ERROR,     // rejected or failed
};
const char *engine_finish_str(enum engine_finish f);

/* How an embedding request pools the prompt's final hidden states (llama.cpp's llama_pooling_type values). */
enum engine_pooling {
    ENGINE_POOLING_NONE = 0, // not an embedding request
    ENGINE_POOLING_MEAN = 1, // the mean over every prompt token
    ENGINE_POOLING_CLS = 2,  // the first token's
    ENGINE_POOLING_LAST = 3, // the last token's
};
const char *engine_pooling_str(enum engine_pooling p);

struct engine_request_params {
    const int32_t *prompt; // [n_prompt], copied
    int n_prompt;
    int max_tokens; // >= 1
    int n;          // samples (>= 1); sample i uses seed + i
    struct sampling_params sampling;
    const char *const *stop; // [n_stop] stop strings (need a tokenizer), copied
    int n_stop;
    bool ignore_eos;
    bool want_text;       // send detokenized text with each token (needs a tokenizer)
    bool render_special;  // that text shows special tokens' text too
    int64_t t_arrival_ns; // when the request arrived (ci_now_ns clock); 0: now.  Latencies count from here.
    int logprobs; // -1: none; 0..ENGINE_MAX_LOGPROBS: the sampled token's log-probability and this many
                  // most likely alternatives per token (log-softmax of the raw logits; with a grammar, of
                  // the logits it allows)
    const char *grammar; // GBNF text [grammar_len] constraining every sample (NULL: none); compiled at submit
    size_t grammar_len;  // (CI_ERR_INVALID / CI_ERR_LIMIT naming the problem), cached by its text
    int grammar_front;   // what the text is: enum gram_front (grammar/cache.h; 0: GBNF)
    // Not NONE: an embedding request (max_tokens 0, n 1): the prompt is computed (a prefill, chunked and
    // batched like any other) and its final hidden states pooled; nothing is sampled.  The sample's stream
    // ends with DONE (finish "stop"), after which engine_request_embedding holds the vector.
    enum engine_pooling pooling;
    // Speculative decoding for this request when the engine has a proposer: 0: the engine's k; > 0: at
    // most this many drafts; < 0: off.
    int spec_k;
    // Reasoning budget (cinfer.h's think_*): think_end NULL: none; else needs want_text.
    const char *think_start, *think_end;
    int think_budget;
    bool think_open;
};

#define ENGINE_MAX_LOGPROBS 20

struct request_metrics {
    int64_t t_arrival_ns;     // submit
    int64_t t_scheduled_ns;   // first admitted (queue time = scheduled - arrival)
    int64_t t_first_token_ns; // TTFT = first token - arrival
    int64_t t_finish_ns;
    int64_t *t_token_ns; // [max_tokens] when each output token was sampled (inter-token gaps)
    int n_prompt;
    int n_output;
    int n_cached; // prompt tokens served by the prefix cache
    int n_preempted;
    enum engine_finish finish;
    // With logprobs >= 0: row k (written before token k's event is sent) holds the sampled token's
    // log-probability and the top alternatives.
    float *logprob;     // [max_tokens]
    int32_t *top_ids;   // [max_tokens][logprobs]
    float *top_logprob; // [max_tokens][logprobs]
};

/* Per-step record (for benchmarks and live metrics). */
struct step_metrics {
    int64_t t_start_ns, t_end_ns;
    int n_tokens, n_prefill_tokens, n_decode_tokens, n_pad_tokens;
    int n_running, n_waiting;
    int n_passes; // forward passes the step needed
    int n_preempted;
    int n_prefix_hit_tokens;
    int n_draft_tokens;         // speculative drafts verified
    int n_accepted_tokens;      // of which accepted
    int n_draft_model_tokens;   // positions the draft model computed (following prompts, then proposing)
    int n_decode_seqs;          // decoding sequences that sampled (each emits 1 + its accepted drafts)
    int n_decode_emitted;       // tokens they emitted
    int kv_blocks_used;         // blocks referenced by sequences
    int64_t kv_slots_used;      // token positions stored
    int64_t kv_slots_allocated; // blocks_used * block_size (allocated - used = waste)
    double flops; // estimated: linear 2·params·tokens (+ output head per sampled row) + attention 4·L·d·ctx
    double bytes;        // estimated: weights once per pass + KV read and written
    int64_t grammar_ns;  // time spent on grammar masks (computing and applying them) and advancing matchers
    int n_grammar_masks; // samples drawn under a grammar
};

typedef void (*engine_step_fn)(void *ctx, const struct step_metrics *m);

/* Tests: a proposer that replaces the engine's (with speculation on): up to k drafts continuing the
 * sample's tokens[0..n_tokens) (prompt then output) into out; returns how many. */
typedef int (*engine_propose_fn)(void *ctx, const struct engine_request *r, int sample, const int32_t *tokens,
                                 int n_tokens, int k, int32_t *out);
void engine_set_proposer(struct engine *e, engine_propose_fn fn, void *ctx);

/* tok may be NULL (no text, no stop strings). */
enum ci_status engine_create(const struct model *m, const struct tokenizer *tok,
                             const struct engine_params *p, struct engine **out, struct ci_err *err);
/* Stops the thread if running; requests still in flight end with ENGINE_FINISH_CANCELLED. */
void engine_free(struct engine *e);
void engine_set_step_hook(struct engine *e, engine_step_fn fn, void *ctx);

/* Any thread.  Validates (CI_ERR_INVALID), rejects a request that can never fit (CI_ERR_LIMIT: prompt +
 * max_tokens beyond the context or the whole KV pool), CI_ERR_BUSY when the queue is full. */
enum ci_status engine_submit(struct engine *e, const struct engine_request_params *p,
                             struct engine_request **out, struct ci_err *err);
/* Compiles a grammar's text (front: enum gram_front) into the engine's grammar cache (any thread): CI_OK, or the error naming the problem. */
enum ci_status engine_check_grammar(struct engine *e, int front, const char *text, size_t len,
                                    struct ci_err *err);
struct ci_channel *engine_request_channel(struct engine_request *r, int sample);
const struct request_metrics *engine_request_metrics(const struct engine_request *r, int sample);
int engine_request_n(const struct engine_request *r);
/* An embedding request's pooled vector [n_embd] (not normalized), final once its stream delivered DONE;
 * NULL before that and for other requests. */
const float *engine_request_embedding(const struct engine_request *r, int *n);
void engine_request_cancel(struct engine_request *r);
void engine_request_release(struct engine_request *r);

/* Synchronous mode: one step (drain submissions, schedule, run, sample, stream).  Returns false if there was
 * nothing to do. */
bool engine_step(struct engine *e);
/* True when no request is queued, waiting or running. */
bool engine_idle(struct engine *e);

/* Thread mode. */
enum ci_status engine_start(struct engine *e, struct ci_err *err);
void engine_stop(struct engine *e);

struct engine_info {
    int n_ctx;
    int block_size;
    int n_blocks;
    int64_t kv_bytes;
    int64_t kv_bytes_per_token; // K and V of every layer for one token, in the pool's element type
    uint32_t kv_type;           // the pool's element type (kv_pool.h: kv_type_name)
    int full_context_seqs;      // sequences of the whole context the pool holds at once
    int kv_sizing;              // enum kv_sizing (kv_budget.h): what decided the pool's size
    double kv_mem_fraction;     // the share of available memory used for the default pool
    int64_t mem_available;      // available memory when the engine was created (-1 unknown)
    int64_t weight_bytes;       // the model's (and draft's) weights, subtracted from that share
};
void engine_info(const struct engine *e, struct engine_info *out);
/* NULL while the engine works; once it cannot go on (its model file changed on disk), why, as a message.
 * Every request then fails with it.  Any thread. */
const char *engine_failure(const struct engine *e);

struct engine_totals {
    int64_t n_steps, n_requests_finished, n_preemptions;
    int64_t n_prompt_tokens, n_generated_tokens, n_pad_tokens;
    int64_t prefix_query_tokens, prefix_hit_tokens;
    // Speculative decoding: drafts verified and accepted; decoding sequence-steps and the tokens they gave
    // (tokens per step = decode_emitted / decode_seq_steps: 1 without speculation).
    int64_t spec_draft_tokens, spec_accepted_tokens, decode_seq_steps, decode_emitted;
    int n_running, n_waiting, kv_blocks_used;
};
/* A snapshot (engine thread, or any thread for the approximate live values). */
void engine_totals(const struct engine *e, struct engine_totals *out);

/* Prometheus text exposition of the engine's metrics under the prefix "cinfer:" (vLLM's names): running and
 * waiting requests, KV cache usage, prefix cache queries and hits, prompt and generation tokens, finished
 * requests by reason, preemptions, and histograms of TTFT, inter-token latency, end-to-end latency and queue
 * time.  Any thread.  Returns false if buf[cap] was too small. */
bool engine_metrics_text(const struct engine *e, char *buf, size_t cap, size_t *len);

#endif
