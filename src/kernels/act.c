/* Elementwise activations and small reductions over one row: SwiGLU, softmax, argmax. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"

void ci_silu_mul(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        // g / (1 + e^-g): for very negative g, e^-g overflows to inf and the quotient is the correct -0.
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* Max-subtracted, so no exp overflows; the normalizer is summed in double because n can be a vocabulary.
 * Entries at -inf (masked) get probability 0; at least one entry must be finite. */
void ci_softmax(float *x, int n) {
    CI_ASSERT(n > 0);
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    double inv = 1.0 / sum;
    for (int i = 0; i < n; i++)
        x[i] = (float)((double)x[i] * inv);
}

int ci_argmax(const float *x, int n) {
    CI_ASSERT(n > 0);
    int best = 0;
    for (int i = 1; i < n; i++) // strict >: the first of equal maxima wins
        if (x[i] > x[best])
            best = i;
    return best;
}
