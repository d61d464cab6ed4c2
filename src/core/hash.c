#include "core/hash.h"

#include <string.h>

// A 64-bit multiply-xorshift mix over 8-byte words (wyhash-like constants); not cryptographic.
static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v * 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 32)) * 0xd6e8feb86659fd93ULL;
    return h ^ (h >> 32);
}

uint64_t ci_hash_bytes(uint64_t seed, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = mix(seed ^ 0x243f6a8885a308d3ULL, (uint64_t)n);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = mix(h, v);
        p += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, n);
    return mix(h, tail ^ ((uint64_t)n << 56));
}

uint64_t ci_hash_chain_step(uint64_t prev, const int32_t *block, int block_size) {
    return ci_hash_bytes(prev, block, (size_t)block_size * sizeof *block);
}

size_t ci_hash_chain(const int32_t *toks, size_t n_tokens, int block_size, uint64_t *keys, size_t max_keys) {
    if (block_size < 1)
        return 0;
    size_t n = n_tokens / (size_t)block_size;
    if (n > max_keys)
        n = max_keys;
    uint64_t key = CI_HASH_CHAIN_SEED;
    for (size_t i = 0; i < n; i++)
        keys[i] = key = ci_hash_chain_step(key, toks + i * (size_t)block_size, block_size);
    return n;
}
