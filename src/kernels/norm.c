/* RMS normalization.  The sum of squares and the scaling run in double and are rounded to float once per
 * element: the numpy reference computes in float64 and casts.  The sum of squares runs in 8 partial sums
 * (element i into sum i mod 8, combined pairwise in a fixed order): one serial chain of double adds was the
 * whole cost of the kernel (about 2% of a prefill). */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"
#include "kernels/dot.h"

/* The loop below is the reference; the SIMD tables run its operations lane by lane (dot.h rmsnorm): decode
 * runs two norms a layer on the main thread between pool jobs, where the loop cost a 135M model a few
 * percent. */
void ci_rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    CI_ASSERT(n > 0);
    const ci_rmsnorm_fn simd = ci_rmsnorm_select();
    if (simd) {
        simd(out, x, weight, n, eps);
        return;
    }
    double s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < n; i++)
        s[i % 8] += (double)x[i] * (double)x[i];
    double ss = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
    double inv = 1.0 / sqrt(ss / n + (double)eps);
    for (i = 0; i < n; i++) // out may alias x: each x[i] is read before out[i] is written
        out[i] = (float)((double)x[i] * inv * (double)weight[i]);
}

/* Mean and variance in double, as ci_rmsnorm's sums. */
void ci_layernorm(float *out, const float *x, const float *weight, const float *bias, int n, float eps) {
    CI_ASSERT(n > 0);
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += (double)x[i];
    double mean = sum / n, var = 0.0;
    for (int i = 0; i < n; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    double inv = 1.0 / sqrt(var / n + (double)eps);
    for (int i = 0; i < n; i++)
        out[i] = (float)(((double)x[i] - mean) * inv * (double)weight[i] + (bias ? (double)bias[i] : 0.0));
}
