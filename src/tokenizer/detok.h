/* Incremental detokenizer and stop-string matcher, for streaming generated tokens as text.
 *
 * struct detok turns one token at a time into the bytes that are now complete: it never emits part of a
 * UTF-8 character (an incomplete tail waits for the next token), and it replaces malformed sequences with
 * U+FFFD instead of waiting forever.  With a SentencePiece vocabulary that adds a space prefix it drops
 * the leading space of the first text at the start of the stream and after BOS (what sentencepiece and
 * llama2.c do: "▁Once" after BOS reads "Once").
 *
 * struct stop_matcher is fed that text and releases what can no longer be part of a stop string; it holds
 * back a possible partial match across calls and reports a full match, releasing the text before it and
 * never the stop string itself.
 *
 * Both allocate only in their init function (buffers sized from the tokenizer and the stop strings); the
 * per-token calls never allocate.  One instance per sequence; not shared between threads. */
#ifndef CINFER_TOKENIZER_DETOK_H
#define CINFER_TOKENIZER_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

struct tokenizer;

struct detok {
    const struct tokenizer *tok;
    bool render_special;   // show control tokens' text ("<s>", "<|im_end|>")
    bool strip_space;      // SPM: remove one leading space from the next non-empty text
    bool spm_prefix;       // vocabulary is SPM with add_space_prefix
    unsigned char pend[4]; // incomplete UTF-8 sequence held back
    int n_pend;
    char *out; // [cap] the bytes returned by the last call
    size_t cap;
};

/* at_text_start: the stream starts a text (nothing before it, or BOS last), so an SPM leading space is
 * dropped.  Pass false when continuing after prompt text (e.g. the prompt's last token was a word). */
enum ci_status detok_init(struct detok *d, const struct tokenizer *t, bool at_text_start, bool render_special,
                          struct ci_err *err);
void detok_deinit(struct detok *d);
/* Forgets held bytes and starts a new stream. */
void detok_reset(struct detok *d, bool at_text_start);
/* Feeds token id; *text and *n are the bytes now complete (valid UTF-8), valid until the next call.  An id
 * out of the vocabulary renders as U+FFFD. */
void detok_push(struct detok *d, int32_t id, const char **text, size_t *n);
/* Ends the stream: held bytes of an incomplete character come out as U+FFFD. */
void detok_flush(struct detok *d, const char **text, size_t *n);
/* Most bytes one detok_push can return (for sizing the stop matcher's chunks). */
size_t detok_max_out(const struct detok *d);

struct stop_matcher {
    char *stops; // the stop strings, concatenated
    size_t *off; // [n_stops] offsets into stops
    size_t *len; // [n_stops]
    int *index;  // [n_stops] position in the caller's list (empty strings are dropped)
    int n_stops;
    size_t max_len;   // longest stop string
    size_t max_chunk; // longest text one feed accepts
    char *buf;        // [max_len - 1 + max_chunk] held text followed by the new text
    size_t n_held;
    char *out;   // [max_len - 1 + max_chunk] released text of the last call
    int matched; // index of the stop string found, -1 while none
};

/* Copies the stop strings (empty ones are ignored).  max_chunk bounds the text of one feed call; use
 * detok_max_out() when feeding detok output. */
enum ci_status stop_matcher_init(struct stop_matcher *m, const char *const *stops, int n_stops,
                                 size_t max_chunk, struct ci_err *err);
void stop_matcher_deinit(struct stop_matcher *m);
void stop_matcher_reset(struct stop_matcher *m);
/* Feeds text[0..n) (n <= max_chunk, else CI_ERR_INVALID).  *out and *n_out: text released now (valid until
 * the next call).  *stop is the index of the stop string that matched (the release then ends right before
 * it and later feeds release nothing), or -1. */
enum ci_status stop_matcher_feed(struct stop_matcher *m, const char *text, size_t n, const char **out,
                                 size_t *n_out, int *stop);
/* Ends the stream without a match: releases the held text (nothing after a match). */
void stop_matcher_flush(struct stop_matcher *m, const char **out, size_t *n_out);

#endif
