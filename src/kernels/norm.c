/* RMS normalization.  The sum of squares and the scaling run in double and are rounded to float once per
 * element: the numpy reference computes in float64 and casts, and n (the model width) is small enough per
 * token that double costs nothing measurable next to the matmuls. */
#include "kernels/kernels.h"

#include <math.h>

#include "core/check.h"

void ci_rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    CI_ASSERT(n > 0);
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    double inv = 1.0 / sqrt(ss / n + (double)eps);
    for (int i = 0; i < n; i++) // out may alias x: each x[i] is read before out[i] is written
        out[i] = (float)((double)x[i] * inv * (double)weight[i]);
}
