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

/* GeGLU: the selected table's, the same bits in every table (dot.h, CI_GELU_A). */
void ci_gelu_mul(float *gate, const float *up, int n) {
    CI_ASSERT(n >= 0);
    ci_kernels_table()->gelu_mul(gate, up, n);
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

/* The first index of the largest value, NaNs never winning (a NaN x[0] stays the answer, as the plain scan
 * `if (x[i] > x[best]) best = i` gives).  Two passes instead of that scan, whose every step waits for the
 * previous compare: the maximum by 8 independent running maxima (a vocabulary row in a fraction of the
 * time), then the first index holding it. */
int ci_argmax(const float *x, int n) {
    CI_ASSERT(n > 0);
    if (isnan(x[0]))
        return 0;
    float m[8];
    for (int j = 0; j < 8; j++)
        m[j] = x[0];
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    for (; i < n; i++)
        m[0] = x[i] > m[0] ? x[i] : m[0];
    float max = m[0];
    for (int j = 1; j < 8; j++)
        max = m[j] > max ? m[j] : max;
    for (i = 0; i < n; i++) // -0 == +0: the first of equal maxima wins either way
        if (x[i] == max)
            return i;
    return 0; // unreachable: max is one of the x[i]
}
