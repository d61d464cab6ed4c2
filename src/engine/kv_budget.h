/* The default size of the KV pool, from the machine's available memory (as vLLM sizes its cache from
 * gpu_memory_utilization): a stated fraction of what is available, minus the model's weights (they page in
 * from the mapping as they are used), never more than the running sequences could ever fill, never so little
 * that nothing can run.  The pool's pages are only touched as blocks are used (kv_pool.h), so a large
 * default costs address space, not resident memory, until the load needs it.  A pure function: the caller
 * supplies the measurements (core/sysmem.h, model_weight_bytes). */
#ifndef CINFER_ENGINE_KV_BUDGET_H
#define CINFER_ENGINE_KV_BUDGET_H

#include <stdint.h>

#define KV_MEM_FRACTION_DEFAULT 0.5           // of available memory, for the weights and the KV pool together
#define KV_MEM_FLOOR_BYTES      (64ll << 20)  // the least a default pool gets when memory is short
#define KV_MEM_FALLBACK_BYTES   (256ll << 20) // when the available memory cannot be read

/* Why the pool has its size (what cinfer_engine_info reports). */
enum kv_sizing {
    KV_SIZED_BLOCKS,   // --kv-blocks
    KV_SIZED_BYTES,    // --kv-mem
    KV_SIZED_MEMORY,   // fraction x available - weights
    KV_SIZED_CAP,      // max_seqs whole contexts: all the running sequences could ever use
    KV_SIZED_FLOOR,    // memory short: KV_MEM_FLOOR_BYTES (or the cap, if smaller)
    KV_SIZED_FALLBACK, // available memory unknown: KV_MEM_FALLBACK_BYTES (or the cap, if smaller)
};

struct kv_budget {
    int64_t mem_available; // bytes (ci_mem_available), -1 when unknown
    int64_t weight_bytes;  // the model's weights (plus a draft model's)
    double fraction;       // of mem_available, in (0, 1]
    int64_t block_bytes;   // K and V of one block in every layer (plus the draft's pool), > 0
    int64_t max_blocks;    // blocks of max_seqs whole contexts, > 0
};

/* Blocks of the default pool (>= 1), and why:
 *   budget = fraction * mem_available - weight_bytes;  blocks = floor(budget / block_bytes)     MEMORY
 *   more than max_blocks -> max_blocks                                                          CAP
 *   fewer than floor = max(1, KV_MEM_FLOOR_BYTES / block_bytes) (or budget <= 0) -> floor       FLOOR
 *   mem_available < 0 -> max(1, KV_MEM_FALLBACK_BYTES / block_bytes)                            FALLBACK
 * the floor and fallback themselves at most max_blocks (then CAP). */
int64_t kv_budget_blocks(const struct kv_budget *b, enum kv_sizing *why);

/* "--kv-blocks", "--kv-mem", "memory", "cap", "floor", "fallback". */
const char *kv_sizing_name(enum kv_sizing why);

#endif
