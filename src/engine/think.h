/* A reasoning budget's bookkeeping for one sample (Anthropic's thinking.budget_tokens, llama.cpp's reasoning
 * budget): where the generated text stands relative to the reasoning block, found in the streamed text (so
 * it works whatever tokens spell the markers), and how many tokens the block holds so far.  Pure: the engine
 * forces the end marker (engine.c) when think_push says the budget is spent. */
#ifndef CINFER_ENGINE_THINK_H
#define CINFER_ENGINE_THINK_H

#include <stdbool.h>
#include <stddef.h>

#define THINK_MARKER_MAX 48 // the longest marker text followed

enum think_state {
    THINK_BEFORE,  // the start marker not seen yet
    THINK_INSIDE,  // in the block, counting its tokens
    THINK_FORCING, // the budget is spent: the end marker is being forced
    THINK_DONE     // the block ended (or never will be tracked again)
};

struct think {
    enum think_state state;
    int n;                           // tokens generated inside the block
    char tail[2 * THINK_MARKER_MAX]; // the last bytes of text (markers spanning several tokens)
    size_t tail_n;
};

/* open: the prompt left the block open (the first token is inside). */
void think_init(struct think *t, bool open);
/* One generated token and its text [n] (possibly empty: held back by the detokenizer).  start may be NULL
 * (then the block begins only when open).  Returns true when this token spends the budget: the caller starts
 * forcing end and sets the state to THINK_FORCING.  A token whose text completes the end marker ends the
 * block (THINK_DONE) and is not counted. */
bool think_push(struct think *t, const char *start, const char *end, int budget, const char *text, size_t n);

#endif
