/* Rotary position embedding.  Angles, cos/sin and the rotation itself are computed in double and rounded to
 * float once: for long contexts pos * freq is large, and float angles would drift from the reference.
 * cos/sin are computed once per frequency and applied to every head. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"

void ci_rope(float *x, int n_head, int head_dim, int rope_dim, int pos, float base, bool neox) {
    ci_rope_ext(x, n_head, head_dim, rope_dim, pos, base, neox, NULL, 1.0f);
}

void ci_rope_ext(float *x, int n_head, int head_dim, int rope_dim, int pos, float base, bool neox,
                 const float *freq_factors, float pos_scale) {
    CI_ASSERT(n_head > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim && base > 0.0f);
    CI_ASSERT(pos_scale > 0.0f);
    int half = rope_dim / 2;
    // Multiplying by 1.0 and dividing by 1.0 are exact: unscaled rope keeps ci_rope's bits.
    double p = (double)pos * (double)pos_scale;
    for (int i = 0; i < half; i++) {
        double theta = p * pow((double)base, -2.0 * (double)i / (double)rope_dim);
        if (freq_factors)
            theta /= (double)freq_factors[i];
        double c = cos(theta), s = sin(theta);
        // normal pairing: (2i, 2i+1); NeoX: (i, i + rope_dim/2)
        int i0 = neox ? i : 2 * i;
        int i1 = neox ? i + half : 2 * i + 1;
        for (int h = 0; h < n_head; h++) {
            float *xh = x + (size_t)h * (size_t)head_dim; // [head_dim]
            double x0 = xh[i0], x1 = xh[i1];
            xh[i0] = (float)(x0 * c - x1 * s);
            xh[i1] = (float)(x0 * s + x1 * c);
        }
    }
}
