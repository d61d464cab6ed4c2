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
    struct ci_rope_params p = {.rope_dim = rope_dim,
                               .base = base,
                               .neox = neox,
                               .freq_factors = freq_factors,
                               .freq_scale = pos_scale,
                               .mscale = 1.0f};
    ci_rope_apply(x, n_head, head_dim, pos, &p);
}

void ci_rope_yarn_corr_dims(int rope_dim, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2]) {
    // The pair index whose wavelength 2 pi base^(2i/d) equals n_ctx_orig / beta, in float as ggml has it
    // (the floor and ceil make the bounds integers, so float vs double rounding matters only at ties).
    float lo = floorf((float)rope_dim * logf((float)n_ctx_orig / (beta_fast * 2.0f * (float)M_PI)) /
                      (2.0f * logf(base)));
    float hi = ceilf((float)rope_dim * logf((float)n_ctx_orig / (beta_slow * 2.0f * (float)M_PI)) /
                     (2.0f * logf(base)));
    dims[0] = lo > 0.0f ? lo : 0.0f;
    dims[1] = hi < (float)(rope_dim - 1) ? hi : (float)(rope_dim - 1);
}

void ci_rope_apply(float *x, int n_head, int head_dim, int pos, const struct ci_rope_params *rp) {
    double cs[2 * CI_ROPE_MAX_PAIRS];
    CI_ASSERT(rp->rope_dim / 2 <= CI_ROPE_MAX_PAIRS);
    ci_rope_cos_sin(pos, rp, cs);
    ci_rope_rotate(x, n_head, head_dim, rp, cs);
}

void ci_rope_cos_sin(int pos, const struct ci_rope_params *rp, double *cs) {
    int rope_dim = rp->rope_dim;
    CI_ASSERT(rope_dim > 0 && rope_dim % 2 == 0 && rp->base > 0.0f && rp->freq_scale > 0.0f);
    int half = rope_dim / 2;
    double mscale = (double)rp->mscale;
    // Multiplying by 1.0 and dividing by 1.0 are exact: unscaled rope keeps ci_rope's bits.
    double p = (double)pos * (double)rp->freq_scale;
    for (int i = 0; i < half; i++) {
        double inv = pow((double)rp->base, -2.0 * (double)i / (double)rope_dim);
        double theta = p * inv;
        if (rp->freq_factors)
            theta /= (double)rp->freq_factors[i];
        if (rp->ext_factor != 0.0f) { // YaRN: mix the interpolated and the original (extrapolated) angle
            double extrap = (double)pos * inv;
            if (rp->freq_factors)
                extrap /= (double)rp->freq_factors[i];
            double width = (double)rp->corr_high - (double)rp->corr_low;
            double y = ((double)i - (double)rp->corr_low) / (width > 0.001 ? width : 0.001);
            double ramp = 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
            double mix = ramp * (double)rp->ext_factor;
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        cs[2 * i] = cos(theta) * mscale;
        cs[2 * i + 1] = sin(theta) * mscale;
    }
}

void ci_rope_rotate(float *x, int n_head, int head_dim, const struct ci_rope_params *rp, const double *cs) {
    int rope_dim = rp->rope_dim;
    CI_ASSERT(n_head > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim);
    int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const double c = cs[2 * i], s = cs[2 * i + 1];
        // normal pairing: (2i, 2i+1); NeoX: (i, i + rope_dim/2)
        int i0 = rp->neox ? i : 2 * i;
        int i1 = rp->neox ? i + half : 2 * i + 1;
        for (int h = 0; h < n_head; h++) {
            float *xh = x + (size_t)h * (size_t)head_dim; // [head_dim]
            double x0 = xh[i0], x1 = xh[i1];
            xh[i0] = (float)(x0 * c - x1 * s);
            xh[i1] = (float)(x0 * s + x1 * c);
        }
    }
}
