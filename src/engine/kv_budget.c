/* The default KV pool size (kv_budget.h). */
#include "engine/kv_budget.h"

#include "core/check.h"

int64_t kv_budget_blocks(const struct kv_budget *b, enum kv_sizing *why) {
    CI_ASSERT(b->block_bytes > 0 && b->max_blocks > 0);
    int64_t blocks;
    if (b->mem_available < 0) {
        blocks = KV_MEM_FALLBACK_BYTES / b->block_bytes;
        *why = KV_SIZED_FALLBACK;
    } else {
        double budget = b->fraction * (double)b->mem_available - (double)b->weight_bytes;
        double n = budget > 0 ? budget / (double)b->block_bytes : 0;
        int64_t floor_blocks = KV_MEM_FLOOR_BYTES / b->block_bytes;
        if (n >= (double)b->max_blocks) {
            *why = KV_SIZED_CAP;
            return b->max_blocks;
        }
        blocks = (int64_t)n;
        *why = KV_SIZED_MEMORY;
        if (blocks < floor_blocks || blocks < 1) {
            blocks = floor_blocks;
            *why = KV_SIZED_FLOOR;
        }
    }
    if (blocks < 1)
        blocks = 1;
    if (blocks >= b->max_blocks) {
        blocks = b->max_blocks;
        *why = KV_SIZED_CAP;
    }
    return blocks;
}

const char *kv_sizing_name(enum kv_sizing why) {
    switch (why) {
    case KV_SIZED_BLOCKS:
        return "--kv-blocks";
    case KV_SIZED_BYTES:
        return "--kv-mem";
    case KV_SIZED_MEMORY:
        return "memory";
    case KV_SIZED_CAP:
        return "cap";
    case KV_SIZED_FLOOR:
        return "floor";
    case KV_SIZED_FALLBACK:
        return "fallback";
    }
    return "?";
}
