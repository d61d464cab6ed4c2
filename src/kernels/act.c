/* Elementwise activations and small reductions over one row: SwiGLU, softmax, argmax. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"
#include "kernels/dot.h"

/* The selected table's SwiGLU: the exp of dot.h, the same bits in every table (dot_ref.c holds the scalar
 * reference). */
void ci_silu_mul(float *gate, const float *up, int n) {
    CI_ASSERT(n >= 0);
    ci_kernels_table()->silu_mul(gate, up, n);
}

void ci_gelu_mul(float *gate, const float *up, int n) {
    CI_ASSERT(n >= 0);
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * up[i];
    }
}

void ci_gelu(float *x, int n) {
    CI_ASSERT(n >= 0);
    for (int i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

void ci_swiglu_oai_mul(float *gate, const float *up, int n, float alpha, float limit) {
    CI_ASSERT(n >= 0);
    for (int i = 0; i < n; i++) {
        float x = gate[i] < limit ? gate[i] : limit;
        float y = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        gate[i] = x / (1.0f + expf(alpha * -x)) * (y + 1.0f);
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
