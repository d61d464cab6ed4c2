/* Per-sequence PRNG: splitmix64 seeding a xoshiro256** state.  Same seed, same stream, on every platform. */
#ifndef CINFER_CORE_RNG_H
#define CINFER_CORE_RNG_H

#include <stdint.h>

struct ci_rng {
    uint64_t s[4];
};

void ci_rng_seed(struct ci_rng *r, uint64_t seed);
uint64_t ci_rng_u64(struct ci_rng *r);
/* Uniform in [0, 1) with 24 bits of precision (exactly representable as float). */
float ci_rng_f32(struct ci_rng *r);
/* Uniform in [0, 1) with 53 bits. */
double ci_rng_f64(struct ci_rng *r);
/* Standard normal (Box-Muller). */
double ci_rng_normal(struct ci_rng *r);

#endif
