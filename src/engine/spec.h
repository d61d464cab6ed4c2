/* Speculative decoding's proposers and its adaptive draft length (the engine verifies; see engine.h).
 *
 * N-gram (prompt lookup) proposal: the sequence's last n tokens (n from n_max down to 1) are looked up in
 * the sequence itself (prompt and output); at the longest n that occurs earlier, the most recent earlier
 * occurrence is taken and the tokens that followed it (up to k, never past the end) are the proposal.  No
 * extra model; it pays on text that repeats its context (summaries, edits, code, quotes).
 *
 * Adaptive length (as Hugging Face's assisted generation): after each verification the sequence's k grows by
 * 2 when every draft was accepted and shrinks by 1 otherwise, within [k_min, k_max]. */
#ifndef CINFER_ENGINE_SPEC_H
#define CINFER_ENGINE_SPEC_H

#include <stdint.h>

#define SPEC_MAX_K 32 // the longest proposal the engine accepts as a setting

/* Writes up to k proposed tokens continuing tokens[0..n) to out; returns how many (0: no match).  Bounded
 * work: the search looks back at most SPEC_NGRAM_WINDOW tokens. */
#define SPEC_NGRAM_WINDOW 8192
int spec_ngram_propose(const int32_t *tokens, int n, int n_max, int k, int32_t *out);

/* The next k after a verification that accepted `accepted` of `proposed` drafts. */
int spec_adapt_k(int k, int proposed, int accepted, int k_min, int k_max);

/* Backoff for proposals that never pay (a draft model that disagrees with the target): every verification
 * costs the draft's passes and wider target rows, so after SPEC_BACKOFF_MISSES
 * verifications in a row that accepted nothing the sequence proposes nothing for a pause that doubles with
 * each further miss (2, 4, ... up to SPEC_BACKOFF_MAX_PAUSE decode steps), then probes again; one accepted draft
 * ends it.  Updates *misses after a verification of `proposed` drafts with `accepted` kept and returns the
 * number of steps to decode without proposals.  The engine applies it to draft models (and proposer hooks),
 * not to n-gram lookup. */
#define SPEC_BACKOFF_MISSES    4
#define SPEC_BACKOFF_MAX_PAUSE 64
int spec_backoff(int *misses, int proposed, int accepted);

#endif
