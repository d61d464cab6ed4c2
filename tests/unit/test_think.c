/* engine/think: the reasoning budget's bookkeeping over streamed token texts, against counts worked out by
 * hand for each sequence below (markers split across tokens, the block opened by the prompt, the end written
 * by the model before the budget, empty texts held back by the detokenizer). */
#include "engine/think.h" // first: the header must compile on its own

#include <string.h>

#include "test.h"

/* Feeds texts[0..n) one token each; returns the index of the token that spent the budget (-1: none) and
 * leaves the state in *t. */
static int feed(struct think *t, const char *const *texts, int n, int budget) {
    for (int i = 0; i < n; i++)
        if (think_push(t, "<think>", "</think>", budget, texts[i], strlen(texts[i])))
            return i;
    return -1;
}

TEST(start_marker_split_across_tokens) {
    // "<th" "ink>" opens the block (not counted); then 3 tokens inside: the third spends a budget of 3.
    static const char *const toks[] = {"<th", "ink>", "\n", "a", "b", "c"};
    struct think t;
    think_init(&t, false);
    CHECK(feed(&t, toks, 6, 3) == 4);
    CHECK(t.state == THINK_INSIDE && t.n == 3);
}

TEST(opened_by_the_prompt) {
    static const char *const toks[] = {"x", "y"};
    struct think t;
    think_init(&t, true);
    CHECK(feed(&t, toks, 2, 2) == 1); // the first token is already inside
}

TEST(end_written_before_the_budget) {
    static const char *const toks[] = {"<think>", "a", "</", "think", ">", "b", "c", "d"};
    struct think t;
    think_init(&t, false);
    CHECK(feed(&t, toks, 8, 4) == -1); // "</think>" completes at the 5th token: 3 inside, then done
    CHECK(t.state == THINK_DONE);
}

TEST(text_before_the_block_and_empty_texts) {
    // Nothing counts before "<think>"; a token whose text was held back (empty) still counts inside.
    static const char *const toks[] = {"Hi ", "there", "<think>", "", "", "a"};
    struct think t;
    think_init(&t, false);
    CHECK(feed(&t, toks, 6, 3) == 5);
}

TEST(marker_inside_one_long_text) {
    // One text holding the start, thoughts and the end: the block opens and closes within it.
    static const char *const toks[] = {"<think>hm</think>", "a", "b"};
    struct think t;
    think_init(&t, false);
    CHECK(feed(&t, toks, 3, 1) == -1 && t.state == THINK_DONE);
    // a long text (beyond the tail kept) before the marker does not hide it
    char big[300];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    static const char *toks2[3];
    toks2[0] = big;
    toks2[1] = "<think>";
    toks2[2] = "q";
    think_init(&t, false);
    CHECK(feed(&t, toks2, 3, 1) == 2);
}

TEST(budget_zero) {
    static const char *const toks[] = {"<think>"};
    struct think t;
    think_init(&t, false);
    CHECK(feed(&t, toks, 1, 0) == 0); // spent as the block opens
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(start_marker_split_across_tokens);
    RUN(opened_by_the_prompt);
    RUN(end_written_before_the_budget);
    RUN(text_before_the_block_and_empty_texts);
    RUN(marker_inside_one_long_text);
    RUN(budget_zero);
    return test_exit_code();
}
