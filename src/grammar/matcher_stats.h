/* The counters of a matcher's space (gram_matcher_stats in matcher.h): a header of their own so that the
 * matcher's private internals (matcher_impl.h), which hold them, need not include the matcher's public header
 * (matcher.c includes the internals, and token_cache.c, which matcher.c calls, uses them). */
#ifndef CINFER_GRAMMAR_MATCHER_STATS_H
#define CINFER_GRAMMAR_MATCHER_STATS_H

#include <stdint.h>

struct gram_matcher_stats { // of the matcher's space
    uint64_t masks, cache_hits, nodes_visited;
    uint64_t table_masks, table_dep_walks;       // masks from the table; those that checked dependent tokens
    uint64_t table_bytes, table_ns;              // the table's size and the time spent computing it
    uint64_t table_acc_tokens, table_dep_tokens; // summed over its entries
    uint32_t table_positions, table_unavailable; // entries computed; positions that fell back to the walk
    uint32_t table_shared, table_patched; // bounded repetitions: positions given another's entry, or patched
    uint32_t n_stacks, n_nodes;
};

#endif
