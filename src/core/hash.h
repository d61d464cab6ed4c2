/* 64-bit hashing for prefix-cache block keys: a chain hash(prev, tokens) so equal keys imply (with
 * overwhelming probability) equal whole prefixes; hits are still verified token by token. */
#ifndef CINFER_CORE_HASH_H
#define CINFER_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t ci_hash_bytes(uint64_t seed, const void *data, size_t n);

#endif
