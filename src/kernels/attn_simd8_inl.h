/* 8-lane float helpers shared by the attention kernels of the AVX2 and AVX-512 tables (attn_avx2.c,
 * attn_avx512.c).  One copy on purpose: the AVX-512 grouped chunk must give exactly the AVX2 chunk's bits, so
 * both must run the same exp8 and the same reductions.  Not a standalone header: the includer defines AI (the
 * function qualifiers: static inline, always_inline, plus the target attribute where the file is not built
 * with -mavx2 -mfma) and includes <immintrin.h> first. */
#ifndef CINFER_KERNELS_ATTN_SIMD8_INL_H
#define CINFER_KERNELS_ATTN_SIMD8_INL_H

AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* exp8's polynomial on the remainder r of x = n ln 2 + r (x clamped, n = round(x log2 e)) into p, for V, T =
 * _mm256, __m256 or _mm512, __m512: exp16 (attn_avx512.c) runs the same operations on 16 lanes, so the same
 * bits lane for lane. */
#define EXP_POLY(V, T, x, n, p)                                                                              \
    do {                                                                                                     \
        const T r_ =                                                                                         \
            V##_fnmadd_ps(n, V##_set1_ps(-2.12194440e-4f), V##_fnmadd_ps(n, V##_set1_ps(0.693359375f), x));  \
        p = V##_set1_ps(1.9875691500e-4f);                                                                   \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(1.3981999507e-3f));                                              \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(8.3334519073e-3f));                                              \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(4.1665795894e-2f));                                              \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(1.6666665459e-1f));                                              \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(5.0000001201e-1f));                                              \
        p = V##_fmadd_ps(p, V##_mul_ps(r_, r_), V##_add_ps(r_, V##_set1_ps(1.0f)));                          \
    } while (0)

/* e^x in 8 lanes: Cephes' range reduction and degree-6 polynomial (about 2 ulp); below -87.3 the result is
 * flushed to 0 (so is -inf), above 88.3 it saturates at e^88.3. */
AI __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 p;
    EXP_POLY(_mm256, __m256, x, n, p);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lane l of the result = the sum of the 8 lanes of v[l] (a fixed order). */
AI __m256 reduce8_ps(const __m256 *v) {
    __m256 a0 = _mm256_add_ps(_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1]));
    __m256 a1 = _mm256_add_ps(_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3]));
    __m256 a2 = _mm256_add_ps(_mm256_unpacklo_ps(v[4], v[5]), _mm256_unpackhi_ps(v[4], v[5]));
    __m256 a3 = _mm256_add_ps(_mm256_unpacklo_ps(v[6], v[7]), _mm256_unpackhi_ps(v[6], v[7]));
    __m256 b0 =
        _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a0), _mm256_castps_pd(a1))),
                      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a0), _mm256_castps_pd(a1))));
    __m256 b1 =
        _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a2), _mm256_castps_pd(a3))),
                      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a2), _mm256_castps_pd(a3))));
    return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

/* The factor exp(m - mx) a row's accumulator and sum are rescaled by when its running max moves from m to
 * mx: 0 from the empty state; exactly 1 when the max stays (exp8(0) is 1.0 exactly, and at a long context
 * the max rarely moves, so the exp's dependent chain mostly drops out); else exp8 in lane 0. */
AI float rescale_factor(float m, float mx) {
    if (m == -INFINITY)
        return 0.0f;
    const float x = m - mx; // NaN for m = mx = +inf: not 0, so exp8 decides as before
    return x == 0.0f ? 1.0f : _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_set1_ps(x))));
}

/* The running max after a chunk whose scores are sc0 (positions 0..7) and sc1 (8..15): their max by a fixed
 * tree, or m where that is not above it. */
AI float chunk_max(__m256 sc0, __m256 sc1, float m) {
    __m256 mv = _mm256_max_ps(sc0, sc1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4) > m ? _mm_cvtss_f32(m4) : m;
}

/* One row's online-softmax step from the scores of a chunk's positions 0..7 (sc0) and 8..15 (sc1; -inf where
 * the row does not see them): the running max *m and sum *l updated, the weights into w[0..16), and the factor
 * the row's accumulator is rescaled by before its value FMAs returned. */
AI float softmax_step(__m256 sc0, __m256 sc1, float *m, float *l, float *w) {
    float mx = chunk_max(sc0, sc1, *m);
    float c = rescale_factor(*m, mx);
    __m256 vmx = _mm256_set1_ps(mx);
    __m256 w0 = exp8(_mm256_sub_ps(sc0, vmx)), w1 = exp8(_mm256_sub_ps(sc1, vmx));
    _mm256_store_ps(w, w0);
    _mm256_store_ps(w + 8, w1);
    *l = *l * c + hsum(_mm256_add_ps(w0, w1));
    *m = mx;
    return c;
}

#endif
