/* Attention chunk kernels of the AVX-512 table.  Like dot_avx512.c this file is built portably and every
 * function carries a target attribute; dispatch.c calls in only after the CPU probe.
 *
 * The f32 chunk is the grouped f32 chunk below with all rows seeing the whole chunk (the AVX2 chunk's bits, its
 * chains interleaved; head_dim not a multiple of 16: the AVX2 chunk itself).  The q8_0 chunks are the AVX2
 * table's (integer scores, dot.h).  The f16 chunks (decode and grouped) widen the chunk's K rows (vcvtph2ps,
 * exact) straight into the grouped chunk's packed K layout and its V rows into float rows, once per chunk for
 * all rows, then run the grouped f32 chunk, so every table gives the same bits for a KV type on a given f32
 * chunk.  The grouped f32 chunk (dot.h, prefill) does the AVX2 chunk's arithmetic with two 8-lane chains per
 * 16-lane instruction (below), so each row still gives the AVX2 f32 chunk's bits. */
#include "kernels/dot.h"

#include "kernels/quant.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stddef.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

/* The decode chunk: the grouped chunk below with every head's row seeing all n positions, which gives each row
 * the AVX2 chunk's bits (dot.h) while running 8 positions' score chains and 8 value accumulators side by side
 * (the AVX2 chunk, one dependent FMA chain at a time, is latency-bound at decode's few heads per KV head). */
T512 void ci_avx512_attn_f32(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                             int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 16 != 0) {
        ci_dot_avx2_table()->attn_f32(k, v, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    int nn[8];
    for (int g = 0; g < 8; g++)
        nn[g] = n;
    for (int g0 = 0; g0 < ng; g0 += 8) {
        int nr = ng - g0 < 8 ? ng - g0 : 8;
        ci_avx512_attn_grp_f32(k, v, nn, nr, q + g0, hd, scale, m + g0, l + g0,
                               acc + (size_t)g0 * (size_t)hd);
    }
}

T512 static void attn_grp_f16_rows(const void *const *k, const void *const *v, const int *n, int nr,
                                   const float *const *q, int hd, float scale, float *m, float *l,
                                   float *acc);

/* The decode chunk on f16 rows: as ci_avx512_attn_f32 (every row sees all n positions, 8 rows a pass). */
T512 void ci_avx512_attn_f16(const void *const *k, const void *const *v, int n, const float *const *q, int ng,
                             int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 16 != 0) {
        ci_dot_avx2_table()->attn_f16(k, v, n, q, ng, hd, scale, m, l, acc);
        return;
    }
    int nn[8];
    for (int g = 0; g < 8; g++)
        nn[g] = n;
    for (int g0 = 0; g0 < ng; g0 += 8) {
        int nr = ng - g0 < 8 ? ng - g0 : 8;
        attn_grp_f16_rows(k, v, nn, nr, q + g0, hd, scale, m + g0, l + g0, acc + (size_t)g0 * (size_t)hd);
    }
}

/* Q8_0: the AVX2 table's integer-score chunk (dot.h: every table's Q8_0 scores are the same bits, and the
 * AVX2 softmax and value FMAs are the ones the AVX-512 f32 chunk reproduces).  A 512-bit VNNI score loop is
 * the next step where it pays; this keeps the AVX-512 table's results identical to the AVX2 table's. */
T512 void ci_avx512_attn_q8_0(const void *const *k, const void *const *v, int n,
                              const struct ci_block_q8_0 *const *q, int ng, int hd, float scale, float *m,
                              float *l, float *acc) {
    ci_dot_avx2_table()->attn_q8_0(k, v, n, q, ng, hd, scale, m, l, acc);
}

/* ---- the grouped f32 chunk: the AVX2 arithmetic, two 8-lane chains per 16-lane instruction ----
 * The AVX2 chunk's score of position i is reduce8 of an 8-lane FMA chain over head_dim; here the chains of
 * positions 2p and 2p + 1 run as the low and high halves of one 16-lane accumulator over a repacked K (per
 * 8 dimensions, row 2p's 8 values then row 2p + 1's).  The 16 positions' chains then take reduce8_ps's
 * adds, the scale, mask and max, and softmax_step's exp8 and lane sum (attn_simd8_inl.h) lane for lane, on
 * 512-bit vectors: one reduction and one exp for the whole chunk (scores16, softmax_step16).  The value FMAs
 * are per dimension lane anyway, so 16 lanes at a time give the same bits. */
#define AI static inline __attribute__((always_inline)) T512

#include "kernels/attn_simd8_inl.h"

/* The AVX2 chunk's reduce8 (attn_simd8_inl.h: lane sum ((v0 + v2) + (v1 + v3)) + ((v4 + v6) + (v5 + v7)))
 * of the 8 chains of positions 0..7, z[p] holding the chains of positions 2p (low half) and 2p + 1 (high
 * half), stopped before its last add: per 128-bit block, block 0 the low sums L = (v0 + v2) + (v1 + v3) of
 * positions 0, 2, 4, 6, block 1 their high sums H = (v4 + v6) + (v5 + v7), blocks 2 and 3 the same of
 * positions 1, 3, 5, 7.  The same unpack-and-add steps as reduce8_ps, on two positions' chains per
 * instruction, so each sum is the same bits. */
AI __m512 half_sums8(__m512 z0, __m512 z1, __m512 z2, __m512 z3) {
    __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(z0, z1), _mm512_unpackhi_ps(z0, z1));
    __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(z2, z3), _mm512_unpackhi_ps(z2, z3));
    __m512d d01 = _mm512_castps_pd(a01), d23 = _mm512_castps_pd(a23);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d01, d23)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(d01, d23)));
}

/* The scores of the chunk's 16 positions (kk: their 8 repacked row pairs; only the first 4 when nmax <= 8)
 * as the AVX2 chunk computes them, in one 512-bit vector: reduce8 of each position's 8-lane FMA chain over
 * head_dim, times scale, -inf at lanes >= n.  Eight independent chains, and one reduction for all 16
 * positions instead of two 8-wide ones with their extracts. */
AI __m512 scores16(const float *q, const float *kk, int hd, int n, int nmax, float scale) {
    const float *k0 = kk, *k1 = kk + 2 * hd, *k2 = kk + 4 * hd, *k3 = kk + 6 * hd;
    __m512 z0 = _mm512_setzero_ps(), z1 = z0, z2 = z0, z3 = z0, b0, b1;
    if (nmax > 8) { // named accumulators, not an array: GCC kept an array's in memory
        const float *k4 = kk + 8 * hd, *k5 = kk + 10 * hd, *k6 = kk + 12 * hd, *k7 = kk + 14 * hd;
        __m512 z4 = z0, z5 = z0, z6 = z0, z7 = z0;
        for (int d = 0; d < hd; d += 8) {
            const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + d));
            z0 = _mm512_fmadd_ps(qv, _mm512_load_ps(k0 + 2 * d), z0);
            z1 = _mm512_fmadd_ps(qv, _mm512_load_ps(k1 + 2 * d), z1);
            z2 = _mm512_fmadd_ps(qv, _mm512_load_ps(k2 + 2 * d), z2);
            z3 = _mm512_fmadd_ps(qv, _mm512_load_ps(k3 + 2 * d), z3);
            z4 = _mm512_fmadd_ps(qv, _mm512_load_ps(k4 + 2 * d), z4);
            z5 = _mm512_fmadd_ps(qv, _mm512_load_ps(k5 + 2 * d), z5);
            z6 = _mm512_fmadd_ps(qv, _mm512_load_ps(k6 + 2 * d), z6);
            z7 = _mm512_fmadd_ps(qv, _mm512_load_ps(k7 + 2 * d), z7);
        }
        b0 = half_sums8(z0, z1, z2, z3);
        b1 = half_sums8(z4, z5, z6, z7);
    } else {
        for (int d = 0; d < hd; d += 8) {
            const __m512 qv = _mm512_broadcast_f32x8(_mm256_loadu_ps(q + d));
            z0 = _mm512_fmadd_ps(qv, _mm512_load_ps(k0 + 2 * d), z0);
            z1 = _mm512_fmadd_ps(qv, _mm512_load_ps(k1 + 2 * d), z1);
            z2 = _mm512_fmadd_ps(qv, _mm512_load_ps(k2 + 2 * d), z2);
            z3 = _mm512_fmadd_ps(qv, _mm512_load_ps(k3 + 2 * d), z3);
        }
        b0 = b1 = half_sums8(z0, z1, z2, z3); // lanes 8..15 masked below (n <= nmax <= 8)
    }
    // L + H, as reduce8_ps's last add: lanes in the order 0 2 4 6 1 3 5 7 8 10 12 14 9 11 13 15, then put back.
    const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(b0, b1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 ordered =
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), s);
    const __mmask16 valid = n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
    return _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), valid, ordered, _mm512_set1_ps(scale));
}

/* exp8 (attn_simd8_inl.h) on 16 lanes: the same operations lane by lane, so the same bits. */
AI __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 p;
    EXP_POLY(_mm512, __m512, x, n, p);
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~tiny, p, _mm512_castsi512_ps(e));
}

/* softmax_step (attn_simd8_inl.h) on the 16 scores in one vector: the same max, factor, weights and lane sum,
 * with one 16-lane exp for the weights. */
AI float softmax_step16(__m512 sc, float *m, float *l, float *w) {
    float mx = chunk_max(_mm512_castps512_ps256(sc), _mm512_extractf32x8_ps(sc, 1), *m);
    float c = rescale_factor(*m, mx);
    const __m512 wv = exp16(_mm512_sub_ps(sc, _mm512_set1_ps(mx)));
    _mm512_store_ps(w, wv);
    *l = *l * c + hsum(_mm256_add_ps(_mm512_castps512_ps256(wv), _mm512_extractf32x8_ps(wv, 1)));
    *m = mx;
    return c;
}

#define PV_FMA(t, off) t = _mm512_fmadd_ps(wi, _mm512_loadu_ps(vi + (off)), t)

/* a[d] = a[d] * c + sum_{i < n} w[i] v[i][d], per dimension in the AVX2 chunk's order; hd a multiple of 16.
 */
AI void pv_row(float *a, const float *const *v, const float *w, int n, int hd, float c) {
    const __m512 vc = _mm512_set1_ps(c);
    int d = 0;
    for (; d + 128 <= hd; d += 128) {
        __m512 t0 = _mm512_mul_ps(_mm512_loadu_ps(a + d), vc),
               t1 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 16), vc),
               t2 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 32), vc),
               t3 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 48), vc),
               t4 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 64), vc),
               t5 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 80), vc),
               t6 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 96), vc),
               t7 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 112), vc);
        for (int i = 0; i < n; i++) {
            const __m512 wi = _mm512_set1_ps(w[i]);
            const float *vi = v[i] + d;
            PV_FMA(t0, 0);
            PV_FMA(t1, 16);
            PV_FMA(t2, 32);
            PV_FMA(t3, 48);
            PV_FMA(t4, 64);
            PV_FMA(t5, 80);
            PV_FMA(t6, 96);
            PV_FMA(t7, 112);
        }
        _mm512_storeu_ps(a + d, t0);
        _mm512_storeu_ps(a + d + 16, t1);
        _mm512_storeu_ps(a + d + 32, t2);
        _mm512_storeu_ps(a + d + 48, t3);
        _mm512_storeu_ps(a + d + 64, t4);
        _mm512_storeu_ps(a + d + 80, t5);
        _mm512_storeu_ps(a + d + 96, t6);
        _mm512_storeu_ps(a + d + 112, t7);
    }
    for (; d + 64 <= hd; d += 64) {
        __m512 t0 = _mm512_mul_ps(_mm512_loadu_ps(a + d), vc),
               t1 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 16), vc),
               t2 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 32), vc),
               t3 = _mm512_mul_ps(_mm512_loadu_ps(a + d + 48), vc);
        for (int i = 0; i < n; i++) {
            const __m512 wi = _mm512_set1_ps(w[i]);
            const float *vi = v[i] + d;
            PV_FMA(t0, 0);
            PV_FMA(t1, 16);
            PV_FMA(t2, 32);
            PV_FMA(t3, 48);
        }
        _mm512_storeu_ps(a + d, t0);
        _mm512_storeu_ps(a + d + 16, t1);
        _mm512_storeu_ps(a + d + 32, t2);
        _mm512_storeu_ps(a + d + 48, t3);
    }
    for (; d < hd; d += 16) {
        __m512 t0 = _mm512_mul_ps(_mm512_loadu_ps(a + d), vc);
        for (int i = 0; i < n; i++) {
            const __m512 wi = _mm512_set1_ps(w[i]);
            const float *vi = v[i] + d;
            PV_FMA(t0, 0);
        }
        _mm512_storeu_ps(a + d, t0);
    }
}

#undef PV_FMA

/* kk [CI_ATTN_CHUNK / 2][hd / 8][2][8]: rows 2p and 2p + 1 interleaved by 8 dimensions, for the positions
 * scored (8, or the whole chunk past 8); rows past nmax repeat the last one (their lanes are masked out). */
AI void pack_k_f32(const void *const *kr, int nmax, int hd, float *kk) {
    const int np = nmax > 8 ? CI_ATTN_CHUNK : 8;
    for (int i = 0; i < np; i++) {
        const float *k = kr[i < nmax ? i : nmax - 1];
        float *o = kk + (size_t)(i / 2) * 2 * (size_t)hd + (size_t)(i % 2) * 8;
        for (int d = 0; d < hd; d += 8)
            _mm256_store_ps(o + 2 * d, _mm256_loadu_ps(k + d));
    }
}

/* pack_k_f32's layout straight from f16 rows: the 8 dimensions of both rows of a pair widened by one
 * vcvtph2ps into one 512-bit store, the unit the scores load back (a 256-bit store read back by a 512-bit
 * load cannot be forwarded: on Zen 4 the widen-then-repack path stalled on exactly that). */
AI void pack_k_f16(const void *const *kr, int nmax, int hd, float *kk) {
    const int np = nmax > 8 ? CI_ATTN_CHUNK : 8;
    for (int i = 0; i < np; i += 2) {
        const uint16_t *a = kr[i < nmax ? i : nmax - 1], *b = kr[i + 1 < nmax ? i + 1 : nmax - 1];
        float *o = kk + (size_t)(i / 2) * 2 * (size_t)hd;
        for (int d = 0; d < hd; d += 8) {
            const __m256i h = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(a + d))),
                _mm_loadu_si128((const __m128i *)(const void *)(b + d)), 1);
            _mm512_store_ps(o + 2 * d, _mm512_cvtph_ps(h));
        }
    }
}

/* Row r's scores over the packed K, its online-softmax update (m, l) and its weights w[0..16); returns the
 * factor c its accumulator is rescaled by before the value FMAs. */
AI float softmax_row(const float *kk, const float *q, int n, int nmax, int hd, float scale, float *m,
                     float *l, float *w) {
    return softmax_step16(scores16(q, kk, hd, n, nmax, scale), m, l, w);
}

/* The grouped chunk on K packed by pack_k_*: scores, online softmax and the value FMAs of each row. */
AI void grp_packed(const float *kk, const float *const *v, const int *n, int nr, int nmax,
                   const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    for (int r = 0; r < nr; r++) {
        _Alignas(64) float w[CI_ATTN_CHUNK];
        float c = softmax_row(kk, q[r], n[r], nmax, hd, scale, &m[r], &l[r], w);
        pv_row(acc + (size_t)r * (size_t)hd, v, w, n[r], hd, c);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#define UNROLL_PV _Pragma("GCC unroll 4")
#else
#define UNROLL_PV
#endif
#define PV_ROWS  4 // rows whose accumulators one pass over the f16 V rows updates
#define PV_SLABS 4 // 16-float slabs of head_dim per pass

/* One pass of pv_rows_f16 over 16 * NS dimensions at d0 for rows [0, NR): NR and NS are constants where the
 * callers below inline it, so the accumulators stay in registers and no guard runs per position except on
 * [nmin, nmax), where some rows see fewer positions (the last chunk of a prompt run). */
AI void pv_pass_f16(float *acc, const uint16_t *const *v, const float (*w)[CI_ATTN_CHUNK], const int *n,
                    int hd, const float *c, int d0, const int NR, const int NS, int nmin, int nmax) {
    __m512 t[PV_ROWS][PV_SLABS];
    UNROLL_PV
    for (int r = 0; r < NR; r++) {
        const __m512 vc = _mm512_set1_ps(c[r]);
        UNROLL_PV
        for (int sl = 0; sl < NS; sl++)
            t[r][sl] = _mm512_mul_ps(_mm512_loadu_ps(acc + (size_t)r * (size_t)hd + d0 + 16 * sl), vc);
    }
    for (int i = 0; i < nmax; i++) {
        __m512 vv[PV_SLABS];
        UNROLL_PV
        for (int sl = 0; sl < NS; sl++)
            vv[sl] =
                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(v[i] + d0 + 16 * sl)));
        UNROLL_PV
        for (int r = 0; r < NR; r++) {
            if (i >= nmin && i >= n[r])
                continue;
            const __m512 wi = _mm512_set1_ps(w[r][i]);
            UNROLL_PV
            for (int sl = 0; sl < NS; sl++)
                t[r][sl] = _mm512_fmadd_ps(wi, vv[sl], t[r][sl]);
        }
    }
    UNROLL_PV
    for (int r = 0; r < NR; r++)
        UNROLL_PV
    for (int sl = 0; sl < NS; sl++)
        _mm512_storeu_ps(acc + (size_t)r * (size_t)hd + d0 + 16 * sl, t[r][sl]);
}

#define PV_PASS_NS(nr, ns)                                                                                   \
    case ns:                                                                                                 \
        pv_pass_f16(acc, v, w, n, hd, c, d0, nr, ns, nmin, nmax);                                            \
        break;
#define PV_PASS_NR(nr)                                                                                       \
    case nr:                                                                                                 \
        switch (ns) {                                                                                        \
            PV_PASS_NS(nr, 1)                                                                                \
            PV_PASS_NS(nr, 2)                                                                                \
            PV_PASS_NS(nr, 3)                                                                                \
            PV_PASS_NS(nr, 4)                                                                                \
        }                                                                                                    \
        break;

/* pv_row for rows [0, nr) (nr <= PV_ROWS) at once on f16 V rows: each 16 values of V widened once, in
 * registers, for all the rows; per accumulator the same FMAs in the same order as pv_row, so the same bits.
 * One instance of the pass per row and slab count, without guards in the position loop (a generic loop with
 * per-row and per-slab guards ran some 15 branches a position). */
AI void pv_rows_f16(float *acc, const uint16_t *const *v, const float (*w)[CI_ATTN_CHUNK], const int *n,
                    int nr, int hd, const float *c) {
    _Static_assert(PV_ROWS == 4 && PV_SLABS == 4, "pv_rows_f16 instantiates 4 x 4 passes");
    int nmin = CI_ATTN_CHUNK, nmax = 0;
    for (int r = 0; r < nr; r++) {
        nmin = n[r] < nmin ? n[r] : nmin;
        nmax = n[r] > nmax ? n[r] : nmax;
    }
    for (int d0 = 0; d0 < hd; d0 += 16 * PV_SLABS) {
        const int ns = (hd - d0) / 16 < PV_SLABS ? (hd - d0) / 16 : PV_SLABS;
        switch (nr) {
            PV_PASS_NR(1)
            PV_PASS_NR(2)
            PV_PASS_NR(3)
            PV_PASS_NR(4)
        }
    }
}

#undef PV_PASS_NR
#undef PV_PASS_NS

static int max_n(const int *n, int nr) {
    int nmax = 0;
    for (int r = 0; r < nr; r++)
        nmax = n[r] > nmax ? n[r] : nmax;
    return nmax;
}

T512 void ci_avx512_attn_grp_f32(const void *const *kr, const void *const *vr, const int *n, int nr,
                                 const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 16 != 0) {
        ci_dot_avx2_table()->attn_grp_f32(kr, vr, n, nr, q, hd, scale, m, l, acc);
        return;
    }
    const int nmax = max_n(n, nr);
    if (nmax <= 0)
        return;
    _Alignas(64) float kk[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    pack_k_f32(kr, nmax, hd, kk);
    grp_packed(kk, (const float *const *)vr, n, nr, nmax, q, hd, scale, m, l, acc);
}

/* f16 K and V: K widened straight into the packed layout; V widened in registers by pv_rows_f16, PV_ROWS rows
 * at a time after their softmax steps. */
T512 static void attn_grp_f16_rows(const void *const *k, const void *const *v, const int *n, int nr,
                                   const float *const *q, int hd, float scale, float *m, float *l,
                                   float *acc) {
    const int nmax = max_n(n, nr);
    if (nmax <= 0)
        return;
    _Alignas(64) float kk[CI_ATTN_CHUNK * CI_ATTN_MAX_HEAD_DIM];
    pack_k_f16(k, nmax, hd, kk);
    for (int r0 = 0; r0 < nr; r0 += PV_ROWS) {
        const int rn = nr - r0 < PV_ROWS ? nr - r0 : PV_ROWS;
        _Alignas(64) float w[PV_ROWS][CI_ATTN_CHUNK];
        float c[PV_ROWS];
        for (int r = 0; r < rn; r++)
            c[r] = softmax_row(kk, q[r0 + r], n[r0 + r], nmax, hd, scale, &m[r0 + r], &l[r0 + r], w[r]);
        pv_rows_f16(acc + (size_t)r0 * (size_t)hd, (const uint16_t *const *)v,
                    (const float(*)[CI_ATTN_CHUNK])w, n + r0, rn, hd, c);
    }
}

T512 void ci_avx512_attn_grp_f16(const void *const *k, const void *const *v, const int *n, int nr,
                                 const float *const *q, int hd, float scale, float *m, float *l, float *acc) {
    if (hd % 16 != 0) {
        ci_dot_avx2_table()->attn_grp_f16(k, v, n, nr, q, hd, scale, m, l, acc);
        return;
    }
    attn_grp_f16_rows(k, v, n, nr, q, hd, scale, m, l, acc);
}

T512 void ci_avx512_attn_grp_q8_0(const void *const *k, const void *const *v, const int *n, int nr,
                                  const struct ci_block_q8_0 *const *q, int hd, float scale, float *m,
                                  float *l, float *acc) {
    ci_dot_avx2_table()->attn_grp_q8_0(k, v, n, nr, q, hd, scale, m, l, acc);
}

#endif
