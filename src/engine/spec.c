#include "engine/spec.h"

#include <string.h>

int spec_ngram_propose(const int32_t *tokens, int n, int n_max, int k, int32_t *out) {
    if (k <= 0 || n < 2)
        return 0;
    int lo = n > SPEC_NGRAM_WINDOW ? n - SPEC_NGRAM_WINDOW : 0;
    for (int m = n_max < n - 1 ? n_max : n - 1; m >= 1; m--) {
        const int32_t *pat = tokens + n - m;
        // The most recent occurrence that ends before the pattern itself: start i, i + m <= n - 1.
        for (int i = n - m - 1; i >= lo; i--) {
            if (tokens[i] != pat[0] || memcmp(tokens + i, pat, (size_t)m * sizeof *pat) != 0)
                continue;
            int from = i + m, got = n - from < k ? n - from : k;
            memcpy(out, tokens + from, (size_t)got * sizeof *out);
            return got;
        }
    }
    return 0;
}

int spec_adapt_k(int k, int proposed, int accepted, int k_min, int k_max) {
    k = accepted >= proposed ? k + 2 : k - 1;
    return k < k_min ? k_min : k > k_max ? k_max : k;
}

int spec_backoff(int *misses, int proposed, int accepted) {
    if (proposed <= 0)
        return 0;
    if (accepted > 0) {
        *misses = 0;
        return 0;
    }
    if (*misses < SPEC_BACKOFF_MISSES + 16) // bounded: the pause is capped long before the shift overflows
        (*misses)++;
    if (*misses < SPEC_BACKOFF_MISSES)
        return 0;
    int pause = 2 << (*misses - SPEC_BACKOFF_MISSES);
    return pause < SPEC_BACKOFF_MAX_PAUSE ? pause : SPEC_BACKOFF_MAX_PAUSE;
}
