/* Single-request generation without the scheduler: prefill the prompt (in batches of up to max_batch
 * tokens), then decode one token per step, each step one forward_batch over the paged KV cache, sampling
 * with a per-request sampler.  It measures the seeds' metrics: TTFT (the prefill, up to the first sampled
 * token), every inter-token gap (TBT), TPS and end-to-end latency.
 *
 * This is the batch-of-one path behind the public cinfer_generate (cinfer embedded as a library, without an
 * engine thread).  `cinfer run`, `cinfer bench` and the server go through the serving engine (engine.c),
 * which drives forward_batch the same way for many sequences at once. */
#ifndef CINFER_ENGINE_GENERATE_H
#define CINFER_ENGINE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "engine/metrics.h"
#include "engine/sampler.h"

struct model;

struct gen_params {
    int n_threads;
    int block_size; // KV block size in tokens (0 = 16)
    int max_batch;  // prompt tokens per forward pass (0 = 512)
    int max_tokens; // tokens to generate
    int n_ctx;      // context limit (0 = the model's training context)
    bool ignore_eos;
    const int32_t *stop_tokens; // [n_stop_tokens] end generation (the end-of-generation ids)
    int n_stop_tokens;
    struct sampling_params sampling;
};

struct gen_params gen_params_default(void);

enum gen_finish { GEN_FINISH_LENGTH, GEN_FINISH_STOP, GEN_FINISH_CALLER };

struct gen_metrics {
    int n_prompt;
    int n_generated;
    struct token_timing timing; // TTFT, TBT, TPS and latency from the tokens' timestamps (engine/metrics.h)
    enum gen_finish finish;
    uint64_t kv_bytes; // KV pool allocated for this request
};

const char *gen_finish_str(enum gen_finish f);

/* Called for every generated token (stop tokens included, flagged by is_stop); return false to end early. */
typedef bool (*gen_token_fn)(void *user, int32_t token, bool is_stop);

/* prompt must hold at least one token.  CI_ERR_LIMIT if prompt + max_tokens exceeds the context. */
enum ci_status generate(const struct model *m, const int32_t *prompt, int n_prompt,
                        const struct gen_params *p, gen_token_fn on_token, void *user,
                        struct gen_metrics *metrics, struct ci_err *err);

#endif
