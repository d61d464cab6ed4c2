/* Searched quantizers of ggml's block formats (see quantize.h).  The algorithms are llama.cpp's reference ones
 * without an importance matrix (ggml-quants.c), written again here; block layouts as in ggml-common.h, all
 * multi-byte fields little-endian and written bytewise. */
#include "kernels/quantize.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define QK       32  // legacy and IQ4_NL block, K-quant sub-block of Q4_K/Q5_K/IQ4_XS
#define QK_K     256 // K-quant super-block
#define MAX_IN   1e30f
#define ZERO_EPS 1e-15f // a group whose largest magnitude is below this is all zero (ggml's GROUP_MAX_EPS)

const int8_t ci_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Round to nearest, ties to even, as ggml's nearest_int (adding 1.5 * 2^23 leaves the integer in the low
 * mantissa bits).  Clamped first, so a wild value (or NaN) gives a bounded integer instead of garbage. */
static int nearest_int(float v) {
    if (!(v > -4194303.0f)) // also NaN
        v = -4194303.0f;
    if (v > 4194303.0f)
        v = 4194303.0f;
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* IEEE half from a finite float within +-65504, rounded to nearest even, and back: the same results as
 * quant.c's ci_fp32_to_fp16 / ci_fp16_to_fp32, written again because quant.c dispatches into this file, which
 * therefore cannot include quant.h (the modules must not form a cycle). */
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax < 0x38800000u) { // below 2^-14: a subnormal half (or zero), value / 2^-24 rounded to nearest even
        float af;
        memcpy(&af, &ax, 4);
        return (uint16_t)(sign | (uint16_t)nearbyintf(af * 16777216.0f));
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | (ax & 0x7fffffu) >> 13, rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++; // a carry into the exponent is still correct
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? (float)m * 0x1p-24f : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Stores f as fp16 at p, saturated at +-65504 so an oversized scale never becomes an infinity (and NaN, which
 * cannot come from sanitized inputs, as 0); returns the value stored (what the dequantizer will use). */
static float put_f16(uint8_t *p, float f) {
    if (f != f)
        f = 0.0f;
    if (f > 65504.0f)
        f = 65504.0f;
    if (f < -65504.0f)
        f = -65504.0f;
    uint16_t h = f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
    return f16_to_f32(h);
}

/* Copies n inputs into buf with NaN and infinities read as 0 and magnitudes capped far beyond what any fp16
 * scale can express, so no sum below overflows.  Returns the largest magnitude. */
static float sanitize(const float *x, int n, float *buf) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (!(fabsf(v) <= MAX_IN))
            v = isnan(v) ? 0.0f : v > 0 ? MAX_IN : -MAX_IN;
        buf[i] = v;
        amax = fmaxf(amax, fabsf(v));
    }
    return amax;
}

/* Scales buf[n] by a power of two so its largest magnitude amax lands in [0.5, 1); returns the exponent e to
 * multiply results back by 2^e.  A power-of-two scaling rounds nothing, so the searches below give the same
 * choices as on the raw values, but their cubed and squared sums can neither overflow nor underflow. */
static int normalize(float *buf, int n, float amax) {
    int e;
    frexpf(amax, &e);
    float f = ldexpf(1.0f, -e);
    for (int i = 0; i < n; i++)
        buf[i] *= f;
    return e;
}

/* ---- legacy 32-element blocks ---- */

/* Q4_1 / Q5_1: x = q * d + m over [min, max] of the block (q 0..15 or 0..31). */
static void quantize_affine(const float *x, uint8_t *b, int nbits) {
    float v[QK];
    sanitize(x, QK, v);
    float min = v[0], max = v[0];
    for (int j = 1; j < QK; j++) {
        min = fminf(min, v[j]);
        max = fmaxf(max, v[j]);
    }
    const int qmax = (1 << nbits) - 1;
    const float d = (max - min) / (float)qmax;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    uint8_t *qh = nbits == 5 ? b + 4 : NULL, *qs = b + (nbits == 5 ? 8 : 4);
    uint32_t hbits = 0;
    for (int j = 0; j < QK / 2; j++) {
        int q0 = clampi((int)((v[j] - min) * id + 0.5f), 0, qmax);
        int q1 = clampi((int)((v[j + QK / 2] - min) * id + 0.5f), 0, qmax);
        qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
        hbits |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + QK / 2);
    }
    if (qh)
        for (int k = 0; k < 4; k++)
            qh[k] = (uint8_t)(hbits >> 8 * k);
}

void ci_quantize_row_q4_1(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++)
        quantize_affine(x + i * QK, (uint8_t *)dst + i * 20, 4);
}

void ci_quantize_row_q5_1(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++)
        quantize_affine(x + i * QK, (uint8_t *)dst + i * 24, 5);
}

/* Q5_0: x = (q - 16) * d with the signed extreme mapped to -16, as Q4_0 does with -8. */
void ci_quantize_row_q5_0(const float *x, void *dst, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++) {
        uint8_t *b = (uint8_t *)dst + i * 22;
        float v[QK], amax = 0.0f, max = 0.0f;
        sanitize(x + i * QK, QK, v);
        for (int j = 0; j < QK; j++)
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        put_f16(b, d);
        uint32_t hbits = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = clampi((int)(v[j] * id + 16.5f), 0, 31);
            int q1 = clampi((int)(v[j + QK / 2] * id + 16.5f), 0, 31);
            b[6 + j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            hbits |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK / 2);
        }
        for (int k = 0; k < 4; k++)
            b[2 + k] = (uint8_t)(hbits >> 8 * k);
    }
}

/* ---- the searches ---- */

/* x ~ scale * L - min_out with L in 0..nmax, for the K-quants with a min (make_qkx2_quants): start from the
 * min/max grid, then try nstep + 1 grids stretched by (nmax + rmin + rdelta * is) / nmax and, for each,
 * solve the weighted least squares for scale and min in closed form; keep the one of least weighted error
 * (squared, or absolute with use_mad).  The min is never positive (x = 0 stays representable).  Returns the
 * scale; *min_out gets the (non-negative) min to subtract. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *min_out,
                           float rmin, float rdelta, int nstep, bool use_mad) {
    uint8_t Laux[QK];
    float min = x[0], max = x[0], sum_w = 0.0f, sum_x = 0.0f;
    for (int i = 0; i < n; i++) {
        min = fminf(min, x[i]);
        max = fmaxf(max, x[i]);
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0.0f)
        min = 0.0f;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min), scale = 1.0f / iscale, best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        best_err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (!(det > 0.0f))
            continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / det;
        float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (m > 0.0f) { // a positive min would lose x = 0; refit the scale alone
            m = 0.0f;
            s = sum_xl / sum_l2;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float diff = s * Laux[i] + m - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err;
            scale = s;
            min = m;
        }
    }
    *min_out = -min;
    return scale;
}

/* x ~ scale * (L - nmax) with L - nmax in -nmax..nmax-1 and weights x^2 (make_qx_quants, rmse_type 1): the
 * scale mapping the signed extreme to -nmax, then 18 more around it ((nmax + 0.1 is) for is in -9..9), each
 * refitted by least squares; the best weighted fit wins.  Returns the (signed) scale. */
static float fit_scale_signed(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float best = 0.0f, scale = 0.0f;
    for (int is = 0; is <= 18; is++) { // is = 0 is the plain grid, then -9..-1, 1..9
        int step = is == 0 ? 0 : is <= 9 ? is - 10 : is - 9;
        float iscale = -((float)nmax + 0.1f * (float)step) / max;
        float sumlx = 0.0f, suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        bool first = is == 0;
        if (first || (suml2 > 0.0f && sumlx * sumlx > best * suml2)) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = suml2 > 0.0f ? sumlx / suml2 : 0.0f;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's sub-block fit (make_q3_quants with do_rmse): the plain grid, then up to 5 sweeps of coordinate
 * descent moving one quant at a time to its best level for the current least-squares scale, keeping a move
 * only when it improves the x^2-weighted fit.  L gets 0..2 nmax - 1 (offset by nmax). */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax < ZERO_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -(float)nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0.0f))
                continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            int l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (l == L[i])
                continue;
            slx += w * x[i] * (float)l;
            sl2 += w * (float)l * (float)l;
            if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---- K-quants: 256-element super-blocks ---- */

/* Reads one super-block into v (sanitized, normalized); false (and a zeroed block of block_bytes) when it is
 * all zero.  *e is the exponent to scale results back by. */
static bool load_super(const float *x, float *v, int *e, uint8_t *b, int block_bytes) {
    float amax = sanitize(x, QK_K, v);
    if (amax < ZERO_EPS) {
        memset(b, 0, (size_t)block_bytes);
        return false;
    }
    *e = normalize(v, QK_K, amax);
    return true;
}

/* Packs 2-bit quants L[256] as Q2_K/Q3_K do: byte 32h + l holds elements 128h + l + 32s at bits 2s. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *p = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)(p[0] | p[32] << 2 | p[64] << 4 | p[96] << 6);
        }
}

void ci_quantize_row_q2_k(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        uint8_t *b = (uint8_t *)dst + ib * 84, *scales = b, *qs = b + 16;
        float v[QK_K], w[16], sc[16], mn[16], max_scale = 0.0f, max_min = 0.0f;
        uint8_t L[QK_K];
        int e;
        if (!load_super(x + ib * QK_K, v, &e, b, 84))
            continue;
        // 16 sub-blocks of 16, 2-bit quants: the fit is weighted by |x| and judged by absolute error.
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(v[16 * j + l]);
            sc[j] = fit_scale_min(16, 3, v + 16 * j, w, L + 16 * j, &mn[j], -0.5f, 0.1f, 15, true);
            max_scale = fmaxf(max_scale, sc[j]);
            max_min = fmaxf(max_min, mn[j]);
        }
        // Scales and mins become 4-bit multiples of the super-block's d and dmin.
        memset(scales, 0, 16);
        float d = 0.0f, dmin = 0.0f;
        if (max_scale > 0.0f) {
            float iscale = 15.0f / max_scale;
            for (int j = 0; j < 16; j++)
                scales[j] = (uint8_t)clampi(nearest_int(iscale * sc[j]), 0, 15);
            d = ldexpf(put_f16(b + 80, ldexpf(max_scale / 15.0f, e)), -e);
        } else {
            put_f16(b + 80, 0.0f);
        }
        if (max_min > 0.0f) {
            float iscale = 15.0f / max_min;
            for (int j = 0; j < 16; j++)
                scales[j] |= (uint8_t)(clampi(nearest_int(iscale * mn[j]), 0, 15) << 4);
            dmin = ldexpf(put_f16(b + 82, ldexpf(max_min / 15.0f, e)), -e);
        } else {
            put_f16(b + 82, 0.0f);
        }
        // Requantize against the scales as stored, which is what dequantization will use.
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(scales[j] & 0x0f);
            if (dl == 0.0f)
                continue;
            float ml = dmin * (float)(scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(nearest_int((v[16 * j + l] + ml) / dl), 0, 3);
        }
        pack_2bit(L, qs);
    }
}

void ci_quantize_row_q3_k(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        uint8_t *b = (uint8_t *)dst + ib * 110, *hmask = b, *qs = b + 32, *scales = b + 96;
        float v[QK_K], sc[16], max_scale = 0.0f, amax = 0.0f;
        int8_t L[QK_K];
        int e;
        if (!load_super(x + ib * QK_K, v, &e, b, 110))
            continue;
        // 16 sub-blocks of 16, quants -4..3 with a signed scale each.
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_scale_q3(16, 4, v + 16 * j, L + 16 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max_scale = sc[j];
            }
        }
        // Scales become 6-bit signed multiples (-32..31, stored + 32) of d, the largest mapped to -32.
        memset(scales, 0, 12);
        float d = 0.0f;
        if (max_scale != 0.0f) {
            float iscale = -32.0f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi(nearest_int(iscale * sc[j]), -32, 31) + 32;
                scales[j % 8] |= (uint8_t)((l & 0x0f) << (j < 8 ? 0 : 4));
                scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            d = ldexpf(put_f16(b + 108, ldexpf(1.0f / iscale, e)), -e);
        } else {
            put_f16(b + 108, 0.0f);
        }
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
            int hi = scales[8 + j % 4] >> (2 * (j / 4)) & 3;
            float dl = d * (float)((lo | hi << 4) - 32);
            if (dl == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest_int(v[16 * j + l] / dl), -4, 3) + 4);
        }
        // The third bit of element i goes to bit i / 32 of hmask[i % 32]; the low two bits as in Q2_K.
        uint8_t low[QK_K];
        memset(hmask, 0, 32);
        for (int i = 0; i < QK_K; i++) {
            if (L[i] > 3)
                hmask[i % 32] |= (uint8_t)(1u << (i / 32));
            low[i] = (uint8_t)(L[i] & 3);
        }
        pack_2bit(low, qs);
    }
}

/* Q4_K/Q5_K's 12 scale bytes: 8 pairs of 6-bit (scale, min), packed as quant.c's kq_scale_min reads them. */
static void pack_scale_min(uint8_t *sc, const uint8_t *ls, const uint8_t *lm) {
    memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] |= ls[j];
            sc[j + 4] |= lm[j];
        } else {
            sc[j + 4] = (uint8_t)((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
            sc[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            sc[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Q4_K (nbits 4) and Q5_K (nbits 5): 8 sub-blocks of 32 with a 6-bit scale and min each. */
static void quantize_k_affine(const float *x, uint8_t *b, int nbits) {
    const int nmax = (1 << nbits) - 1;
    float v[QK_K], w[QK], sc[8], mn[8], max_scale = 0.0f, max_min = 0.0f;
    uint8_t L[QK_K], ls[8], lm[8];
    int e;
    if (!load_super(x, v, &e, b, nbits == 4 ? 144 : 176))
        return;
    for (int j = 0; j < 8; j++) {
        const float *xs = v + 32 * j;
        // Weight |x| plus the sub-block's RMS: large values matter more, small ones still count.
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32.0f);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        if (nbits == 4)
            sc[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], -1.0f, 0.1f, 20, false);
        else
            sc[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], -0.5f, 0.1f, 15, false);
        max_scale = fmaxf(max_scale, sc[j]);
        max_min = fmaxf(max_min, mn[j]);
    }
    float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)clampi(nearest_int(inv_scale * sc[j]), 0, 63);
        lm[j] = (uint8_t)clampi(nearest_int(inv_min * mn[j]), 0, 63);
    }
    pack_scale_min(b + 4, ls, lm);
    float d = ldexpf(put_f16(b, ldexpf(max_scale / 63.0f, e)), -e);
    float dmin = ldexpf(put_f16(b + 2, ldexpf(max_min / 63.0f, e)), -e);
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)ls[j];
        if (dl == 0.0f)
            continue;
        float ml = dmin * (float)lm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(nearest_int((v[32 * j + l] + ml) / dl), 0, nmax);
    }
    // Byte 32c + l holds elements 64c + l (low nibble) and 64c + 32 + l (high); Q5_K's fifth bit of
    // sub-block j = 2c + u goes to bit j of qh[l].
    uint8_t *qh = nbits == 5 ? b + 16 : NULL, *qs = b + (nbits == 5 ? 48 : 16);
    if (qh)
        memset(qh, 0, 32);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int q0 = L[64 * c + l], q1 = L[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            if (qh)
                qh[l] |= (uint8_t)((q0 >> 4) << (2 * c) | (q1 >> 4) << (2 * c + 1));
        }
}

void ci_quantize_row_q4_k(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        quantize_k_affine(x + ib * QK_K, (uint8_t *)dst + ib * 144, 4);
}

void ci_quantize_row_q5_k(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++)
        quantize_k_affine(x + ib * QK_K, (uint8_t *)dst + ib * 176, 5);
}

void ci_quantize_row_q6_k(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        uint8_t *b = (uint8_t *)dst + ib * 210, *ql = b, *qh = b + 128;
        int8_t *scales = (int8_t *)(b + 192);
        float v[QK_K], sc[16], max_scale = 0.0f, amax = 0.0f;
        int8_t L[QK_K];
        int e;
        if (!load_super(x + ib * QK_K, v, &e, b, 210))
            continue;
        // 16 sub-blocks of 16, quants -32..31, 8-bit signed scales (the largest mapped to -128).
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_scale_signed(16, 32, v + 16 * j, L + 16 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max_scale = sc[j];
            }
        }
        if (amax < ZERO_EPS) {
            memset(b, 0, 210);
            continue;
        }
        float iscale = -128.0f / max_scale;
        float d = ldexpf(put_f16(b + 208, ldexpf(1.0f / iscale, e)), -e);
        for (int j = 0; j < 16; j++)
            scales[j] = (int8_t)clampi(nearest_int(iscale * sc[j]), -128, 127);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)scales[j];
            if (dl == 0.0f)
                continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(nearest_int(v[16 * j + l] / dl), -32, 31) + 32);
        }
        // Element 128h + 32r + l: low nibble in nibble r / 2 of ql[64h + 32(r % 2) + l], top two bits at
        // bits 2r of qh[32h + l].
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *p = L + 128 * h + l;
                ql[64 * h + l] = (uint8_t)((p[0] & 0x0f) | (p[64] & 0x0f) << 4);
                ql[64 * h + 32 + l] = (uint8_t)((p[32] & 0x0f) | (p[96] & 0x0f) << 4);
                qh[32 * h + l] =
                    (uint8_t)((p[0] >> 4) | (p[32] >> 4) << 2 | (p[64] >> 4) << 4 | (p[96] >> 4) << 6);
            }
    }
}

/* ---- IQ4_NL / IQ4_XS: 4-bit indices into the non-linear grid ---- */

/* Index of the grid value nearest to v (the lower one on a tie, as ggml). */
static int nearest_iq4(float v) {
    const int8_t *g = ci_iq4nl_values;
    if (!(v > g[0]))
        return 0;
    if (v >= g[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < g[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - g[hi - 1] < g[hi] - v ? hi - 1 : hi;
}

/* The best scale of one group of 32 on the grid, x^2-weighted: the scale mapping the signed extreme to
 * -127, refitted by least squares, then 15 candidates (-127 + t) / max for t in -7..7, each refitted. */
static float fit_scale_iq4(const float *x) {
    const int8_t *g = ci_iq4nl_values;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax < ZERO_EPS)
        return 0.0f;
    float best = 0.0f, d = 0.0f;
    for (int t = -8; t <= 7; t++) { // t = -8 stands for the first guess
        float id = t == -8 ? 1.0f / (-max / (float)g[0]) : ((float)t + (float)g[0]) / max;
        float sumqx = 0.0f, sumq2 = 0.0f;
        for (int j = 0; j < QK; j++) {
            float q = (float)g[nearest_iq4(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (t == -8) {
            d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
            best = d * sumqx;
        } else if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs the 4-bit indices of a group of 32: byte j holds elements j (low nibble) and j + 16 (high). */
static void pack_iq4(const float *x, float id, uint8_t *qs) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(nearest_iq4(id * x[j]) | nearest_iq4(id * x[j + 16]) << 4);
}

void ci_quantize_row_iq4_nl(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK; ib++) {
        uint8_t *b = (uint8_t *)dst + ib * 18;
        float v[QK];
        float amax = sanitize(x + ib * QK, QK, v);
        int e = amax >= ZERO_EPS ? normalize(v, QK, amax) : 0;
        float d = fit_scale_iq4(v);
        put_f16(b, ldexpf(d, e));
        pack_iq4(v, d != 0.0f ? 1.0f / d : 0.0f, b + 2);
    }
}

void ci_quantize_row_iq4_xs(const float *x, void *dst, int64_t n) {
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        uint8_t *b = (uint8_t *)dst + ib * 136, *scales_l = b + 4, *qs = b + 8;
        float v[QK_K], sc[8], max_scale = 0.0f, amax_scale = 0.0f;
        float amax = sanitize(x + ib * QK_K, QK_K, v);
        int e = amax >= ZERO_EPS ? normalize(v, QK_K, amax) : 0;
        for (int j = 0; j < 8; j++) {
            sc[j] = fit_scale_iq4(v + 32 * j);
            if (fabsf(sc[j]) > amax_scale) {
                amax_scale = fabsf(sc[j]);
                max_scale = sc[j];
            }
        }
        // Group scales become 6-bit signed multiples (-32..31, stored + 32) of d, the largest mapped to -32;
        // the groups are then requantized with their stored scale.
        float d = -max_scale / 32.0f;
        put_f16(b, ldexpf(d, e));
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t scales_h = 0;
        memset(scales_l, 0, 4);
        for (int j = 0; j < 8; j++) {
            int l = clampi(nearest_int(id * sc[j]), -32, 31);
            float dl = d * (float)l;
            pack_iq4(v + 32 * j, dl != 0.0f ? 1.0f / dl : 0.0f, qs + 16 * j);
            l += 32;
            scales_l[j / 2] |= (uint8_t)((l & 0x0f) << (4 * (j % 2)));
            scales_h |= (uint16_t)((l >> 4) << (2 * j));
        }
        b[2] = (uint8_t)scales_h;
        b[3] = (uint8_t)(scales_h >> 8);
    }
}
