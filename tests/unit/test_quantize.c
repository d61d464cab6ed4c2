/* The searched quantizers (kernels/quantize.c) through ci_quantize_row: rows of several distributions
 * (normal, uniform, heavy-tailed, a row with an outlier, values of 1e-30 and of 1e4) quantized and
 * dequantized (ci_dequantize_row; IQ4_NL and IQ4_XS with the dequantizer below, written from ggml's block
 * format), the error relative to the row's RMS under a bound per type, the K-quants' and IQ4's searches
 * against a naive max-scale quantizer of the same format, and no NaN or infinity for any input (zeros, NaN, Inf). */
#include "kernels/quantize.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/quant.h"
#include "test.h"

#define N_ROW 4096 // elements of a test row: 16 super-blocks

/* Relative RMSE bounds, about 1.25 x the worst measured over the distributions below (measured on x86-64:
 * normal / uniform / heavy-tailed / outlier rows; the 1e4 row measures as the normal one). */
static const struct {
    uint32_t type;
    double bound;
} types[] = {
    {CI_TYPE_Q4_1, 0.13},    // 0.076 / 0.061 / 0.106 / 0.102
    {CI_TYPE_Q5_0, 0.10},    // 0.042 / 0.032 / 0.064 / 0.082
    {CI_TYPE_Q5_1, 0.064},   // 0.037 / 0.029 / 0.051 / 0.049
    {CI_TYPE_Q2_K, 0.48},    // 0.289 / 0.237 / 0.381 / 0.266
    {CI_TYPE_Q3_K, 0.23},    // 0.150 / 0.127 / 0.181 / 0.173
    {CI_TYPE_Q4_K, 0.12},    // 0.069 / 0.055 / 0.096 / 0.095
    {CI_TYPE_Q5_K, 0.063},   // 0.036 / 0.028 / 0.050 / 0.047
    {CI_TYPE_Q6_K, 0.04},    // 0.018 / 0.013 / 0.026 / 0.031
    {CI_TYPE_IQ4_NL, 0.15},  // 0.077 / 0.064 / 0.098 / 0.122
    {CI_TYPE_IQ4_XS, 0.155}, // 0.078 / 0.065 / 0.099 / 0.124
};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

enum dist { DIST_NORMAL, DIST_UNIFORM, DIST_HEAVY, DIST_OUTLIER, DIST_TINY, DIST_HUGE, DIST_ZERO, N_DIST };
static const char *const dist_name[N_DIST] = {"normal", "uniform", "heavy", "outlier",
                                              "tiny",   "huge",    "zero"};

static float uniform01(struct ci_rng *r) {
    return (float)((ci_rng_u64(r) >> 40) + 0.5) / 16777216.0f;
}

static float normal(struct ci_rng *r) {
    float u = uniform01(r), v = uniform01(r);
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static void fill(enum dist d, uint64_t seed, float *x, int n) {
    struct ci_rng r;
    ci_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        switch (d) {
        case DIST_NORMAL:
        case DIST_OUTLIER:
            x[i] = normal(&r);
            break;
        case DIST_UNIFORM:
            x[i] = 2.0f * uniform01(&r) - 1.0f;
            break;
        case DIST_HEAVY: // Laplace-like: a normal times an exponential
            x[i] = normal(&r) * -logf(uniform01(&r));
            break;
        case DIST_TINY:
            x[i] = 1e-30f * normal(&r);
            break;
        case DIST_HUGE:
            x[i] = 1e4f * normal(&r);
            break;
        case DIST_ZERO:
            x[i] = 0.0f;
            break;
        default:
            break;
        }
    }
    if (d == DIST_OUTLIER) // one outlier per super-block, as real weight rows have
        for (int i = 37; i < n; i += 256)
            x[i] = 20.0f;
}

/* IQ4_NL (d fp16, qs[16]) and IQ4_XS (d fp16, scales_h u16, scales_l[4], qs[128]) from ggml's formats: the
 * index nibbles of a group of 32 as in Q4_0 (low: elements 0..15, high: 16..31); IQ4_XS's group scale ib
 * is 6 bits, low 4 from nibble ib % 2 of scales_l[ib / 2], top 2 from bits 2 ib of scales_h, minus 32. */
static float f16le(const uint8_t *p) {
    return ci_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

static void dequant_iq4(uint32_t type, const uint8_t *b, float *y, int n) {
    if (type == CI_TYPE_IQ4_NL) {
        for (int ib = 0; ib < n / 32; ib++, b += 18, y += 32) {
            float d = f16le(b);
            for (int j = 0; j < 16; j++) {
                y[j] = d * (float)ci_iq4nl_values[b[2 + j] & 0x0f];
                y[j + 16] = d * (float)ci_iq4nl_values[b[2 + j] >> 4];
            }
        }
        return;
    }
    for (int ib = 0; ib < n / 256; ib++, b += 136) {
        float d = f16le(b);
        unsigned sh = (unsigned)(b[2] | b[3] << 8);
        for (int g = 0; g < 8; g++, y += 32) {
            int ls = (b[4 + g / 2] >> (4 * (g % 2)) & 0x0f) | (int)((sh >> (2 * g)) & 3) << 4;
            float dl = d * (float)(ls - 32);
            const uint8_t *qs = b + 8 + 16 * g;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ci_iq4nl_values[qs[j] & 0x0f];
                y[j + 16] = dl * (float)ci_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

static void roundtrip(uint32_t type, const float *x, float *y, int n) {
    uint64_t nb = 0;
    if (!ci_row_bytes(type, (uint64_t)n, &nb)) {
        TEST_FAILF("%s: no row of %d", ci_type_name(type), n);
        return;
    }
    uint8_t *q = malloc(nb);
    memset(q, 0xA5, nb); // every byte must be written
    ci_quantize_row(type, x, q, n);
    if (type == CI_TYPE_IQ4_NL || type == CI_TYPE_IQ4_XS)
        dequant_iq4(type, q, y, n);
    else
        ci_dequantize_row(type, q, y, n);
    free(q);
}

static double rel_rmse(const float *x, const float *y, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e / n);
}

static int n_nonfinite(const float *y, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += !isfinite(y[i]);
    return k;
}

TEST(quantize_error_bounds) {
    static float x[N_ROW], y[N_ROW];
    for (int t = 0; t < N_TYPES; t++) {
        const char *name = ci_type_name(types[t].type);
        for (int d = DIST_NORMAL; d <= DIST_HUGE; d++) {
            fill((enum dist)d, 1000 + (uint64_t)d, x, N_ROW);
            roundtrip(types[t].type, x, y, N_ROW);
            double e = rel_rmse(x, y, N_ROW);
            printf("# %-7s %-8s relative RMSE %.4f\n", name, dist_name[d], e);
            if (n_nonfinite(y, N_ROW))
                TEST_FAILF("%s %s: %d non-finite outputs", name, dist_name[d], n_nonfinite(y, N_ROW));
            // Tiny values (1e-30) are below any fp16 scale: they come back as zeros (relative error 1),
            // never as garbage.
            double bound = d == DIST_TINY ? 1.0 : types[t].bound;
            if (!(e <= bound))
                TEST_FAILF("%s %s: relative RMSE %.4f above %.4f", name, dist_name[d], e, bound);
        }
    }
}

TEST(quantize_zero_and_nonfinite) {
    static float x[N_ROW], y[N_ROW];
    for (int t = 0; t < N_TYPES; t++) {
        const char *name = ci_type_name(types[t].type);
        fill(DIST_ZERO, 1, x, N_ROW);
        roundtrip(types[t].type, x, y, N_ROW);
        for (int i = 0; i < N_ROW; i++)
            if (y[i] != 0.0f) {
                TEST_FAILF("%s: all-zero row gives %g at %d", name, (double)y[i], i);
                break;
            }
        // NaN, infinities and an overflowing magnitude among normal values: finite output, and the finite
        // values of the blocks without them still close.
        fill(DIST_NORMAL, 2, x, N_ROW);
        x[3] = NAN;
        x[300] = INFINITY;
        x[600] = -INFINITY;
        x[900] = 3e38f;
        roundtrip(types[t].type, x, y, N_ROW);
        if (n_nonfinite(y, N_ROW))
            TEST_FAILF("%s: %d non-finite outputs from NaN/Inf inputs", name, n_nonfinite(y, N_ROW));
        double e = rel_rmse(x + 1024, y + 1024, N_ROW - 1024);
        if (!(e <= types[t].bound))
            TEST_FAILF("%s: blocks without NaN/Inf: relative RMSE %.4f", name, e);
    }
}

/* A naive quantizer of a K-quant's format, simulated in float: each sub-block's scale (and min) from its
 * extremes, the sub-block scales rounded to the format's bits against their largest. */
struct naive_fmt {
    uint32_t type;
    int sub;         // elements per sub-block
    int lo, hi;      // quant range
    bool affine;     // x = s q - m (else x = s q)
    int scale_steps; // sub-block scales (and mins) are multiples 0..scale_steps of the largest / steps
};

static double naive_rmse(const struct naive_fmt *f, const float *x, int n) {
    static float y[N_ROW];
    for (int sb = 0; sb < n; sb += 256) {
        float s[16], m[16], max_s = 0, max_m = 0;
        int ns = 256 / f->sub;
        for (int j = 0; j < ns; j++) {
            const float *xs = x + sb + j * f->sub;
            float mn = 0, mx = 0, amax = 0;
            for (int i = 0; i < f->sub; i++) {
                mn = fminf(mn, xs[i]);
                mx = fmaxf(mx, xs[i]);
                amax = fmaxf(amax, fabsf(xs[i]));
            }
            s[j] = f->affine ? (mx - mn) / (float)f->hi : amax / (float)(f->hi > -f->lo ? f->hi : -f->lo);
            m[j] = f->affine ? -mn : 0;
            max_s = fmaxf(max_s, s[j]);
            max_m = fmaxf(max_m, m[j]);
        }
        for (int j = 0; j < ns; j++) {
            float d = max_s / (float)f->scale_steps, dm = max_m / (float)f->scale_steps;
            float sj = d > 0 ? d * roundf(s[j] / d) : 0, mj = dm > 0 ? dm * roundf(m[j] / dm) : 0;
            for (int i = 0; i < f->sub; i++) {
                int k = sb + j * f->sub + i;
                float q = sj > 0 ? roundf((x[k] + mj) / sj) : 0;
                q = fminf(fmaxf(q, (float)f->lo), (float)f->hi);
                y[k] = sj * q - mj;
            }
        }
    }
    return rel_rmse(x, y, n);
}

TEST(quantize_search_beats_naive) {
    static const struct naive_fmt fmts[] = {
        {CI_TYPE_Q2_K, 16, 0, 3, true, 15},      {CI_TYPE_Q3_K, 16, -4, 3, false, 31},
        {CI_TYPE_Q4_K, 32, 0, 15, true, 63},     {CI_TYPE_Q5_K, 32, 0, 31, true, 63},
        {CI_TYPE_Q6_K, 16, -32, 31, false, 127},
    };
    static float x[N_ROW], y[N_ROW];
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++)
        for (int d = DIST_NORMAL; d <= DIST_OUTLIER; d++) {
            fill((enum dist)d, 77 + (uint64_t)d, x, N_ROW);
            roundtrip(fmts[k].type, x, y, N_ROW);
            double searched = rel_rmse(x, y, N_ROW), naive = naive_rmse(&fmts[k], x, N_ROW);
            printf("# %-5s %-8s searched %.4f naive %.4f\n", ci_type_name(fmts[k].type), dist_name[d],
                   searched, naive);
            if (!(searched < naive))
                TEST_FAILF("%s %s: searched %.4f not below naive %.4f", ci_type_name(fmts[k].type),
                           dist_name[d], searched, naive);
        }
}

/* IQ4's naive quantizer: each group of 32 scaled so its signed extreme lands on the grid's -127, every value
 * to the nearest grid point; IQ4_XS's group scales then rounded to 6-bit signed multiples of the largest / 32. */
static double x2_weighted_err(const float *x, const float *y, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        double w = (double)x[i] * x[i];
        e += w * ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += w * w;
    }
    return sqrt(e / s);
}

static int nearest_grid(float v) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabsf(v - (float)ci_iq4nl_values[k]) < fabsf(v - (float)ci_iq4nl_values[best]))
            best = k;
    return best;
}

static double naive_iq4_err(bool xs, const float *x, int n) {
    static float y[N_ROW];
    for (int sb = 0; sb < n; sb += 256) {
        float d[8], dmax = 0;
        for (int g = 0; g < 8; g++) {
            float amax = 0, max = 0;
            for (int i = 0; i < 32; i++)
                if (fabsf(x[sb + 32 * g + i]) > amax) {
                    amax = fabsf(x[sb + 32 * g + i]);
                    max = x[sb + 32 * g + i];
                }
            d[g] = max / -127.0f;
            dmax = fabsf(d[g]) > fabsf(dmax) ? d[g] : dmax;
        }
        for (int g = 0; g < 8; g++) {
            float dg = d[g];
            if (xs) {
                float ds = -dmax / 32.0f;
                dg = ds != 0 ? ds * fminf(fmaxf(roundf(d[g] / ds), -32), 31) : 0;
            }
            for (int i = 0; i < 32; i++) {
                int k = sb + 32 * g + i;
                y[k] = dg != 0 ? dg * (float)ci_iq4nl_values[nearest_grid(x[k] / dg)] : 0;
            }
        }
    }
    return x2_weighted_err(x, y, n);
}

/* IQ4's search minimizes the x^2-weighted squared error (large weights matter most), so that is what it is
 * compared on: on rows with an outlier its plain RMSE can come out a hair above the naive one. */
TEST(quantize_iq4_search_beats_naive) {
    static float x[N_ROW], y[N_ROW];
    for (int xs = 0; xs < 2; xs++)
        for (int d = DIST_NORMAL; d <= DIST_OUTLIER; d++) {
            uint32_t type = xs ? CI_TYPE_IQ4_XS : CI_TYPE_IQ4_NL;
            fill((enum dist)d, 91 + (uint64_t)d, x, N_ROW);
            roundtrip(type, x, y, N_ROW);
            double searched = x2_weighted_err(x, y, N_ROW), naive = naive_iq4_err(xs, x, N_ROW);
            printf("# %-6s %-8s x^2-weighted error: searched %.4f naive %.4f\n", ci_type_name(type),
                   dist_name[d], searched, naive);
            if (!(searched < naive))
                TEST_FAILF("%s %s: searched %.4f not below naive %.4f", ci_type_name(type), dist_name[d],
                           searched, naive);
        }
}

/* The row quantizers are per block: a row quantizes to the concatenation of its blocks, so the model
 * quantizer may split rows across threads anywhere. */
TEST(quantize_rows_are_blockwise) {
    static float x[N_ROW];
    fill(DIST_HEAVY, 5, x, N_ROW);
    for (int t = 0; t < N_TYPES; t++) {
        uint64_t nb = 0, nh = 0;
        ci_row_bytes(types[t].type, N_ROW, &nb);
        ci_row_bytes(types[t].type, N_ROW / 2, &nh);
        uint8_t *a = calloc(1, nb), *b = calloc(1, nb);
        ci_quantize_row(types[t].type, x, a, N_ROW);
        ci_quantize_row(types[t].type, x, b, N_ROW / 2);
        ci_quantize_row(types[t].type, x + N_ROW / 2, b + nh, N_ROW / 2);
        CHECK(memcmp(a, b, nb) == 0);
        free(a);
        free(b);
    }
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(quantize_error_bounds);
    RUN(quantize_zero_and_nonfinite);
    RUN(quantize_search_beats_naive);
    RUN(quantize_iq4_search_beats_naive);
    RUN(quantize_rows_are_blockwise);
    return test_exit_code();
}
