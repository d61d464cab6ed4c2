/* See stats.h. */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ci_sort_doubles(double *x, int n) {
    if (n > 1)
        qsort(x, (size_t)n, sizeof *x, cmp_double);
}

double ci_quantile(const double *sorted, int n, double q) {
    if (n <= 0)
        return NAN;
    if (!(q > 0))
        return sorted[0];
    if (q >= 1)
        return sorted[n - 1];
    double h = (n - 1) * q;
    int lo = (int)floor(h);
    if (lo >= n - 1)
        return sorted[n - 1];
    return sorted[lo] + (h - lo) * (sorted[lo + 1] - sorted[lo]);
}
