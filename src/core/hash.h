/* 64-bit hashing for prefix-cache block keys: a chain hash(prev, tokens) so equal keys imply (with
 * overwhelming probability) equal whole prefixes; hits are still verified token by token.  The chain itself
 * (seed and step) lives here so that the engine's prefix cache and `cinfer router` compute the same keys. */
#ifndef CINFER_CORE_HASH_H
#define CINFER_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define CI_HASH_CHAIN_SEED 0x63696e6665722d70ULL // "cinfer-p": key_{-1} of every block chain

uint64_t ci_hash_bytes(uint64_t seed, const void *data, size_t n);

/* One step of the block chain: key_i = H(key_{i-1}, tokens of block i) over block_size int32 tokens. */
uint64_t ci_hash_chain_step(uint64_t prev, const int32_t *block, int block_size);

/* The keys of the full blocks of toks[0..n_tokens): keys[i] = key_i, at most max_keys of them.  Returns how
 * many were written (min(n_tokens / block_size, max_keys); 0 when block_size < 1). */
size_t ci_hash_chain(const int32_t *toks, size_t n_tokens, int block_size, uint64_t *keys, size_t max_keys);

#endif
