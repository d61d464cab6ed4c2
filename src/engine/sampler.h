/* Token sampler: turns one row of logits into a token id, per sequence.  A struct sampler is created per
 * request with its workspace for n_vocab sized up front, so sampling a token never allocates.  The RNG is
 * per sampler and seeded from sampling_params.seed: the same seed, logits and history give the same tokens.
 *
 * Order of operations in sampler_sample (llama.cpp's default chain, without DRY/typical/XTC):
 *   1. logit bias:  logit[id] += bias for each (id, bias) pair (-INFINITY bans a token)
 *   2. penalties over the last penalty_last_n tokens of history, once per distinct token id t with count c:
 *        repetition (CTRL / llama.cpp):  logit[t] = logit[t] > 0 ? logit[t] / rp : logit[t] * rp
 *        frequency and presence (OpenAI): logit[t] -= c * frequency_penalty + (c > 0) * presence_penalty
 *   3. temperature <= 0: greedy, return the argmax (lowest id on ties); nothing below runs, no RNG draw
 *   4. top-k:  keep the k largest logits (ties broken by lower id)
 *   5. top-p:  keep the smallest prefix, in descending order, whose softmax mass (over the top-k set) reaches
 *              top_p; always at least one token
 *   6. min-p:  keep tokens whose probability is >= min_p * the largest probability, i.e.
 *              logit >= max_logit + log(min_p) (before temperature, as llama.cpp)
 *   7. temperature: logit /= temperature, softmax over what is left, one uniform draw from the RNG
 * Steps 4-6 each keep the top token, so the result is never empty.  NaN logits are treated as -INFINITY; if
 * every logit is -INFINITY the lowest id is returned.
 *
 * Defaults (sampling_params_default): llama.cpp's — temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repetition 1.0 (off), presence/frequency 0 (off), penalty_last_n 64, seed SAMPLING_DEFAULT_SEED (fixed,
 * so runs are reproducible unless the caller picks a seed).  An OpenAI-style caller sets top_k 0, min_p 0,
 * top_p 1, temperature 1 for the plain softmax. */
#ifndef CINFER_ENGINE_SAMPLER_H
#define CINFER_ENGINE_SAMPLER_H

#include <stdint.h>

#include "core/status.h"

#define SAMPLING_DEFAULT_SEED 0x5eedULL

struct sampling_logit_bias {
    int32_t token;
    float bias; // added to the logit; -INFINITY bans the token, +INFINITY and NaN are invalid
};

struct sampling_params {
    float temperature;        // <= 0: greedy
    int top_k;                // <= 0 or >= n_vocab: off
    float top_p;              // in [0, 1]; 1: off
    float min_p;              // in [0, 1]; 0: off
    float repetition_penalty; // > 0; 1: off
    float presence_penalty;   // 0: off
    float frequency_penalty;  // 0: off
    int penalty_last_n;       // tokens of history the penalties look at; 0: off, -1: all of it
    uint64_t seed;
    const struct sampling_logit_bias *logit_bias; // [n_logit_bias]; copied by sampler_create
    int n_logit_bias;
};

struct sampling_params sampling_params_default(void);

/* CI_ERR_INVALID with the offending field named in err: NaN/infinite values, top_p or min_p outside [0, 1],
 * repetition_penalty <= 0, penalty_last_n < -1, n_vocab <= 0, a bias token outside [0, n_vocab) or a bias of
 * NaN/+INFINITY. */
enum ci_status sampling_params_validate(const struct sampling_params *p, int n_vocab, struct ci_err *err);

struct sampler;

/* Validates p (as above), copies it and its logit_bias array, and allocates the [n_vocab] workspace.
 * Free with sampler_free (NULL is fine). */
enum ci_status sampler_create(const struct sampling_params *p, int n_vocab, struct sampler **out,
                              struct ci_err *err);
void sampler_free(struct sampler *s);

/* Restarts the RNG stream from seed (the params are kept). */
void sampler_reset(struct sampler *s, uint64_t seed);

/* Picks a token from logits ([n_vocab], not modified; n_vocab must equal the sampler's).  history
 * ([n_history], oldest first: prompt then generated tokens) feeds the penalties; ids outside [0, n_vocab) in
 * it are ignored. */
int32_t sampler_sample(struct sampler *s, const float *logits, int n_vocab, const int32_t *history,
                       int n_history);

/* Speculative verification of a proposed token draft (0 <= draft < n_vocab) against these logits, with the
 * same pipeline as sampler_sample.  Greedy: the argmax (the draft is accepted iff it is the argmax).
 * Otherwise, with p the final distribution (after steps 1-7): the draft with probability p(draft), else a
 * token drawn from p with the draft removed and renormalized (the residual of speculative sampling for a
 * deterministic draft), so the result is distributed exactly as p.  The draft is accepted iff the result
 * equals it.  Uses up to two RNG draws. */
int32_t sampler_sample_draft(struct sampler *s, const float *logits, int n_vocab, const int32_t *history,
                             int n_history, int32_t draft);

/* Steps 1-2 above in place on logits [n_vocab]: what sampler_sample starts from (for logprobs and tests). */
void sampler_apply_penalties(struct sampler *s, float *logits, int n_vocab, const int32_t *history,
                             int n_history);

#endif
