/* Order statistics shared by the engine's metrics and the benchmarks: one sort and one percentile
 * definition, numpy's default (linear interpolation between closest ranks), so every figure cinfer reports
 * means the same thing and matches what a Python reference computes. */
#ifndef CINFER_CORE_STATS_H
#define CINFER_CORE_STATS_H

/* Sorts x[0..n) ascending. */
void ci_sort_doubles(double *x, int n);
/* The value at quantile q in [0, 1] of sorted[0..n) (numpy.quantile's "linear"); NAN when n == 0, so an
 * empty sample is never mistaken for a measured zero (callers that print decide what to show). */
double ci_quantile(const double *sorted, int n, double q);

#endif
