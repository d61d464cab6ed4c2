/* AVX2 matmul of the K-quants (Q4_K, Q5_K, Q6_K, IQ4_XS), Q8_0 and Q4_0 packed in pack16.h's layout (built
 * with -mavx2 -mfma -mf16c as every *_avx2.c; dot_avx2.c's table points at it).
 *
 * Lanes are rows: the 8 rows of one half of a 16-row group sit in the low or the high 32 bytes of each 64-byte
 * lane vector, so one 32-byte load holds 4 codes of 8 rows, and maddubs against a token's 4 activation bytes
 * broadcast gives the 8 rows' products side by side, with no horizontal reduction and with each super-block's
 * scales decoded once for 8 rows.  (The file-layout tiles of dot_avx2.c decode every row's scales, shuffle a
 * scale per 32 codes and reduce 8 vectors per block: on a CPU without AVX-512 their single-token decode was
 * bound by those instructions, not by memory.)  A sub-block's chunk products add up exactly in int16 while
 * they cannot overflow (|x| <= 127: 8 chunks of Q4_K's 4-bit codes, 4 of Q5_K's 5-bit ones, 2 of Q6_K's 6-bit
 * ones), then one madd with the row's sub-block scale in both halves of the lane gives the int32 term.
 * IQ4_XS's signed values go through the sign trick (|v| against x with v's sign) and their scale at each
 * chunk.  The integer sums are exact, so the float steps of dot.h give the bits of every other table. */
#include "kernels/dot.h"
#include "kernels/pack16.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 16")
#else
#define UNROLL
#endif
#include "kernels/prefetch_inl.h" // needs AI

/* dot_avx2.c's KEEP_IN_REG, here for a second reason: an opaque register copy of a running sum keeps GCC from
 * reassociating a chunk chain's int16 adds into a tree, which holds every product of a sub-block at once and
 * spills them (measured: 787 stack moves for 512 maddubs).  LAUNDER hides a pointer's value, so a load is made
 * where it is used instead of being kept (spilled) from an earlier use. */
#define KEEP_IN_REG(v) __asm__("" : "+x"(v))
#define LAUNDER(p)     __asm__("" : "+r"(p))
#define KP_PREFETCH    4096 // bytes ahead in a group's stream that a single-pass (decode) tile prefetches
#define KP_SLICE       4    // super-blocks per slice when several token groups share the weights (prefill)
#define KP_TOKENS      256  // tokens sharing one slice's parked accumulators
// Q6_K batches of more tokens than this run unpacked (kp_unpacked); the other types always run packed
#define KP_Q6_UNPACK_TOKENS 6
#define KP_UNPACK_BYTES     (256 * 1024) // unpacked rows of a larger batch kept in L2

AI __m256i ld(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

AI __m256i bcast4(const int8_t *p) { // a token's 4 activation bytes in every lane
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

AI __m256i pair16(__m256i s) { // int32 lanes s (|s| < 2^15) as (s, s) int16 halves: madd then scales by s
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s, 16));
}

/* A pshufb mask putting bytes b0 and b1 of each 32-bit lane into its low and high int16 halves (zero-extended). */
AI __m256i lane_bytes(const int b0, const int b1) {
    const char z = (char)0x80;
    return _mm256_setr_epi8((char)b0, z, (char)b1, z, (char)(4 + b0), z, (char)(4 + b1), z, (char)(8 + b0), z,
                            (char)(8 + b1), z, (char)(12 + b0), z, (char)(12 + b1), z, (char)b0, z, (char)b1,
                            z, (char)(4 + b0), z, (char)(4 + b1), z, (char)(8 + b0), z, (char)(8 + b1), z,
                            (char)(12 + b0), z, (char)(12 + b1), z);
}

/* Chunk i (elements 4i..4i+3) of sub-block k of the half at ph, Q4_K's code order (Q4_K, Q5_K, IQ4_XS:
 * sub-blocks 2s and 2s + 1 in the low and high nibbles of vectors 8s..8s+7): Q4_K/Q5_K's unsigned codes,
 * IQ4_XS's signed table values. */
AI __m256i code4(uint32_t type, const uint8_t *ph, const int k, const int i) {
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    __m256i v = ld(ph + 64 * (8 * (k / 2) + i));
    __m256i u = _mm256_and_si256(k % 2 ? _mm256_srli_epi16(v, 4) : v, m0f);
    if (type == CI_TYPE_Q5_K) { // bit k of qh vector i is the 5th bit: moved to bit 4 (16-bit shifts: what
                                // crosses a byte is masked off)
        __m256i qh = ld(ph + 2048 + 64 * i);
        qh = k < 4 ? _mm256_slli_epi16(qh, 4 - k) : k > 4 ? _mm256_srli_epi16(qh, k - 4) : qh;
        u = _mm256_or_si256(u, _mm256_and_si256(qh, _mm256_set1_epi8(0x10)));
    }
    if (type == CI_TYPE_IQ4_XS)
        u = _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)ci_iq4nl_values)), u);
    return u;
}

/* Q6_K: chunk i of sub-block k = 8q + 2r + s (elements 128q + 32r + 16s + 4i..): the low 4 bits from ql
 * vector 16q + 8(r % 2) + 4s + i (nibble r / 2), bits 4-5 from bits 2r.. of qh vector 8q + 4s + i. */
AI __m256i code6(const uint8_t *ph, const int k, const int i) {
    const int q = k / 8, r = k % 8 / 2, s = k % 2;
    __m256i lo = ld(ph + 64 * (16 * q + 8 * (r % 2) + 4 * s + i));
    lo = _mm256_and_si256(r >= 2 ? _mm256_srli_epi16(lo, 4) : lo, _mm256_set1_epi8(0x0f));
    __m256i qh = ld(ph + 2048 + 64 * (8 * q + 4 * s + i));
    qh = r == 0   ? _mm256_slli_epi16(qh, 4)
         : r == 1 ? _mm256_slli_epi16(qh, 2)
         : r == 3 ? _mm256_srli_epi16(qh, 2)
                  : qh;
    return _mm256_or_si256(lo, _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
}

/* One chunk of one token: the codes u (v: as maddubs takes them) against the token's 4 bytes x broadcast, into
 * the int16 sum a (added to sumi, times the sub-block scale sc, when it flushes); IQ4_XS's signed values
 * straight into sumi.  mem: sumi is kp_sub's opaque pointer, each flush a load and a store. */
AI void kp_chunk(const bool xs, const bool flushes, const bool mem, __m256i u, __m256i v, __m256i x,
                 __m256i sc, __m256i *a, __m256i *sumi) {
    if (xs) {
        *sumi =
            _mm256_add_epi32(*sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_sign_epi8(x, u)), sc));
        KEEP_IN_REG(*sumi); // the int32 chain too: reassociated into a tree, it spilled every product
        return;
    }
    *a = _mm256_add_epi16(*a, _mm256_maddubs_epi16(v, x));
    KEEP_IN_REG(*a);
    if (flushes && mem) {
        _mm256_store_si256(sumi, _mm256_add_epi32(_mm256_load_si256(sumi), _mm256_madd_epi16(*a, sc)));
        *a = _mm256_setzero_si256();
    } else if (flushes) {
        *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(*a, sc));
        *a = _mm256_setzero_si256();
    }
}

/* Sub-block k (and, with pair, k1, whose codes share k's bytes) of NH halves (ph + 32 h) against TN tokens:
 * sumi[h][j] += sc[h][k] sum u x (Q6_K's offset term is kp_tile's, once a block).  Two halves share each
 * token's broadcast activation bytes.  Their 8 int16 sums (2 halves x 4 tokens) take half of AVX2's 16
 * registers, so the 8 int32 sums stay in memory (L1), flushed into once per sub-block: held in registers too,
 * they pushed the int16 sums onto the stack, a store and a load at every chunk (measured on Zen 3, 16 tokens
 * against two 2048 x 5632 Q4_K matrices: 0.75-0.88 of the time). */
AI void kp_sub(uint32_t type, const int TN, const int NH, const bool pair, const uint8_t *ph, const int k,
               const int k1, const int8_t *const *xb, const __m256i (*sc)[16], __m256i (*sumi)[4]) {
    const bool q6 = type == CI_TYPE_Q6_K, xs = type == CI_TYPE_IQ4_XS;
    const int nch = q6 ? 4 : 8, elems = q6 ? 16 : 32;
    const int flush = type == CI_TYPE_Q4_K ? 8 : type == CI_TYPE_Q5_K ? 4 : 2; // chunks an int16 sum holds
    __m256i a0[2][4], a1[2][4];
    if (NH == 2) // a pointer the compiler cannot follow: sumi's values are not kept in registers
        LAUNDER(sumi);
    UNROLL
    for (int h = 0; h < NH; h++)
        UNROLL
    for (int j = 0; j < TN; j++)
        a0[h][j] = a1[h][j] = _mm256_setzero_si256();
    UNROLL
    for (int i = 0; i < nch; i++) {
        __m256i u0[2], u1[2], v0[2], v1[2];
        UNROLL
        for (int h = 0; h < NH; h++) {
            const uint8_t *p = ph + 32 * h;
            if (!pair) // each load from L1 where it is used: kept from sub-block k to k + 1, the codes spill
                LAUNDER(p);
            u0[h] = q6 ? code6(p, k, i) : code4(type, p, k, i);
            u1[h] = !pair ? u0[h] : q6 ? code6(p, k1, i) : code4(type, p, k1, i);
            v0[h] = xs ? _mm256_sign_epi8(u0[h], u0[h]) : u0[h];
            v1[h] = xs ? _mm256_sign_epi8(u1[h], u1[h]) : u1[h];
        }
        const bool flushes = (i + 1) % flush == 0;
        UNROLL
        for (int j = 0; j < TN; j++) {
            const __m256i x0 = bcast4(xb[j] + elems * k + 4 * i);
            UNROLL
            for (int h = 0; h < NH; h++)
                kp_chunk(xs, flushes, NH == 2, u0[h], v0[h], x0, sc[h][k], &a0[h][j], &sumi[h][j]);
            if (pair) {
                const __m256i x1 = bcast4(xb[j] + elems * k1 + 4 * i);
                UNROLL
                for (int h = 0; h < NH; h++)
                    kp_chunk(xs, flushes, NH == 2, u1[h], v1[h], x1, sc[h][k1], &a1[h][j], &sumi[h][j]);
            }
        }
    }
}

/* A tile's float chains, park[2j + h] for token t + j and half h (rows r + 8h..): zeroed by the first slice
 * over the blocks, stored to y by the last. */
AI void park_open(const int TN, bool first, __m256 *park) {
    if (first)
        UNROLL
    for (int k = 0; k < 2 * TN; k++)
        park[k] = _mm256_setzero_ps();
}

AI void park_close(const int TN, const struct ci_mm *m, int64_t r, int t, bool last, const __m256 *park) {
    if (last)
        UNROLL
    for (int j = 0; j < TN; j++)
        UNROLL
    for (int h = 0; h < 2; h++)
        _mm256_storeu_ps(m->y + (size_t)(t + j) * (size_t)m->n_out + (size_t)(r + 8 * h), park[2 * j + h]);
}

/* 16 packed rows (group base gp) x TN tokens over super-blocks [b0, b1); the two halves' float accumulators
 * park[2j + h] between slices.  stream: where the prefetches ahead go, as the blocks come from memory (one
 * pass), or CI_PREFETCH_NONE (they are cached). */
AI void kp_tile(uint32_t type, const int TN, const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1,
                int64_t r, int t, bool first, bool last, enum ci_prefetch stream, __m256 *park) {
    const struct ci_act_q8k *q = m->qk;
    const int64_t nsb = m->n_in / 256;
    const size_t bb = ci_pk_block_bytes(type);
    const bool q6 = type == CI_TYPE_Q6_K, xs = type == CI_TYPE_IQ4_XS, mins = !q6 && !xs;
    const bool pair = TN <= 2; // two sub-blocks sharing their code bytes at a time: registers allow it
    // 4 tokens take both halves at once (each broadcast serves 16 rows), except IQ4_XS, whose sign trick needs
    // the registers
    const int NH = TN == 4 && !xs ? 2 : 1;
    const size_t sc_at = type == CI_TYPE_Q5_K ? 2560 : 2048; // Q4_K, Q5_K: the scale bytes' lane vectors
    const size_t d_at = q6 ? 3328 : xs ? 2144 : sc_at + 192;
    const int nsub = q6 ? 16 : 8, n_steps = pair ? nsub / 2 : nsub;
    const int n_lines = (int)((bb + 63) / 64), per_step = (n_lines + 2 * n_steps - 1) / (2 * n_steps);
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    const int8_t *xt[4];
    const int16_t *st[4];
    const float *dt[4];
    UNROLL
    for (int j = 0; j < TN; j++) {
        xt[j] = q->qs + (size_t)(t + j) * (size_t)m->n_in;
        st[j] = q->bsum + (size_t)(t + j) * (size_t)(nsb * 16);
        dt[j] = q->d + (size_t)(t + j) * (size_t)nsb;
    }
    // The float chains live in park (L1) between blocks: held in registers across the integer loops, the 8 of
    // a 4-token tile pushed its integer accumulators onto the stack.
    park_open(TN, first, park);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = gp + (size_t)b * bb;
        const int8_t *xb[4];
        _Alignas(16)
            int32_t bs[4][4]; // Q4_K, Q5_K: sub-blocks 2e and 2e + 1's activation sums as int16 halves
        UNROLL
        for (int j = 0; j < TN; j++) {
            xb[j] = xt[j] + b * 256;
            const int16_t *s = st[j] + b * 16;
            if (mins) { // bsum pairs added (the 32-element sums, |.| < 2^13), then packed back to int16
                const __m128i ones = _mm_set1_epi16(1);
                const __m128i lo = _mm_madd_epi16(_mm_loadu_si128((const __m128i *)(const void *)s), ones);
                const __m128i hi =
                    _mm_madd_epi16(_mm_loadu_si128((const __m128i *)(const void *)(s + 8)), ones);
                _mm_store_si128((__m128i *)(void *)bs[j], _mm_packs_epi32(lo, hi));
            }
        }
        UNROLL
        for (int h0 = 0; h0 < 2; h0 += NH) {
            __m256i sc[2][16], mk[2][4];
            UNROLL
            for (int h = h0; h < h0 + NH; h++) {
                const uint8_t *ph = p + 32 * h;
                if (mins) { // kq_scale_min four at a time: scales 0-3 = low 6 bits of w0's bytes, 4-7 of f1's;
                            // mins 0-3 of w1's, 4-7 of f3's
                    const __m256i w0 = ld(ph + sc_at), w1 = ld(ph + sc_at + 64), w2 = ld(ph + sc_at + 128);
                    const __m256i f1 = _mm256_or_si256(_mm256_and_si256(m0f, w2),
                                                       _mm256_andnot_si256(m0f, _mm256_srli_epi32(w0, 2)));
                    const __m256i f3 = _mm256_or_si256(_mm256_and_si256(m0f, _mm256_srli_epi32(w2, 4)),
                                                       _mm256_andnot_si256(m0f, _mm256_srli_epi32(w1, 2)));
                    const __m256i m3f = _mm256_set1_epi8(0x3f);
                    const __m256i s03 = _mm256_and_si256(w0, m3f), s47 = _mm256_and_si256(f1, m3f);
                    const __m256i m03 = _mm256_and_si256(w1, m3f), m47 = _mm256_and_si256(f3, m3f);
                    UNROLL
                    for (int k = 0; k < 8; k++) // byte k % 4 of each lane into both int16 halves
                        sc[h - h0][k] = _mm256_shuffle_epi8(k < 4 ? s03 : s47, lane_bytes(k % 4, k % 4));
                    UNROLL
                    for (int e = 0; e < 4; e++) // mins 2e, 2e + 1 in the int16 halves
                        mk[h - h0][e] =
                            _mm256_shuffle_epi8(e < 2 ? m03 : m47, lane_bytes(2 * e % 4, 2 * e % 4 + 1));
                } else if (xs) { // 6-bit scales: 4 bits of scales_l, 2 of scales_h, minus 32
                    const __m256i l = ld(ph + 2048);
                    const __m256i hs = _mm256_cvtepu16_epi32(
                        _mm_loadu_si128((const __m128i *)(const void *)(p + 2112 + 16 * h)));
                    UNROLL
                    for (int k = 0; k < 8; k++)
                        sc[h - h0][k] = pair16(_mm256_sub_epi32(
                            _mm256_or_si256(
                                _mm256_and_si256(_mm256_srli_epi32(l, 4 * k), _mm256_set1_epi32(15)),
                                _mm256_slli_epi32(
                                    _mm256_and_si256(_mm256_srli_epi32(hs, 2 * k), _mm256_set1_epi32(3)), 4)),
                            _mm256_set1_epi32(32)));
                } else { // Q6_K: int8 scales as [sub-block][row]
                    UNROLL
                    for (int k = 0; k < 16; k++)
                        sc[h - h0][k] = pair16(_mm256_cvtepi8_epi32(
                            _mm_loadl_epi64((const __m128i *)(const void *)(p + 3072 + 16 * k + 8 * h))));
                }
            }
            __m256i sumi[2][4];
            UNROLL
            for (int h = 0; h < NH; h++)
                UNROLL
            for (int j = 0; j < TN; j++)
                sumi[h][j] = _mm256_setzero_si256();
            UNROLL
            for (int s = 0; s < n_steps; s++) {
                if (stream) // the next blocks' lines, spread over the steps (a burst of them stalls the loads)
                    for (int h = h0; h < h0 + NH; h++)
                        for (int c = (h * n_steps + s) * per_step;
                             c < (h * n_steps + s + 1) * per_step && c < n_lines; c++)
                            ci_prefetch_line(p + KP_PREFETCH + 64 * c, stream);
                // pairs: Q4_K, Q5_K, IQ4_XS (2s, 2s + 1); Q6_K (k, k + 4), k = 8 (s / 4) + s % 4
                const int k0 = !pair ? s : !q6 ? 2 * s : 8 * (s / 4) + s % 4;
                const int k1 = !q6 ? k0 + 1 : k0 + 4;
                __m256i(*scp)[16] = sc; // two halves' scales: loaded where used, as kp_sub's sums
                if (NH == 2)
                    LAUNDER(scp);
                kp_sub(type, TN, NH, pair, p + 32 * h0, k0, k1, xb, (const __m256i(*)[16])scp, sumi);
            }
            UNROLL
            for (int h = h0; h < h0 + NH; h++) {
                const __m256 d =
                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + d_at + 16 * h)));
                __m256i(*mkp)[4] = mk;
                if (NH == 2)
                    LAUNDER(mkp);
                // - dmin (- (dmin dx) = (- dmin) dx exactly); only Q4_K and Q5_K have the bytes
                const __m256 ndmin =
                    mins ? _mm256_xor_ps(_mm256_cvtph_ps(_mm_loadu_si128(
                                             (const __m128i *)(const void *)(p + d_at + 32 + 16 * h))),
                                         _mm256_set1_ps(-0.0f))
                         : _mm256_setzero_ps();
                __m256i sp6[8]; // Q6_K: the int8 scales of sub-blocks 2e, 2e + 1 as each lane's int16 halves
                UNROLL
                for (int e = 0; e < 8 && q6; e++)
                    sp6[e] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(
                        _mm_loadl_epi64((const __m128i *)(const void *)(p + 3072 + 32 * e + 8 * h)),
                        _mm_loadl_epi64((const __m128i *)(const void *)(p + 3072 + 32 * e + 16 + 8 * h))));
                UNROLL
                for (int j = 0; j < TN; j++) {
                    const __m256 dx = _mm256_set1_ps(dt[j][b]);
                    __m256i isum = sumi[h - h0][j];
                    if (q6) { // the codes are the values plus 32: - 32 sum_k sc_k bsum_k, two k a madd (the
                              // token's bsums are those int16 pairs already; |sum| < 2^23, times 32 fits)
                        const int16_t *bs16 = st[j] + b * 16;
                        __m256i off = _mm256_setzero_si256();
                        UNROLL
                        for (int e = 0; e < 8; e++) {
                            int32_t pair_e;
                            memcpy(&pair_e, bs16 + 2 * e, 4);
                            off = _mm256_add_epi32(off, _mm256_madd_epi16(sp6[e], _mm256_set1_epi32(pair_e)));
                        }
                        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
                    }
                    __m256 f =
                        _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum), park[2 * j + h]);
                    if (mins) { // - (dmin dx) summ, summ = sum_k m_k bs_k, two k a madd (m_k < 64, |bs_k| < 2^12)
                        __m256i summ = _mm256_setzero_si256();
                        UNROLL
                        for (int e = 0; e < 4; e++)
                            summ = _mm256_add_epi32(
                                summ, _mm256_madd_epi16(mkp[h - h0][e], _mm256_set1_epi32(bs[j][e])));
                        f = _mm256_fmadd_ps(_mm256_mul_ps(ndmin, dx), _mm256_cvtepi32_ps(summ), f);
                    }
                    park[2 * j + h] = f;
                }
            }
        }
    }
    park_close(TN, m, r, t, last, park);
}

typedef void (*kp_tile_fn)(const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1, int64_t r, int t,
                           bool first, bool last, enum ci_prefetch stream, __m256 *park);

/* name_kp1, name_kp2, name_kp4: tile(pre TN, ...) for 1, 2 and 4 tokens, and the table name_kp_tiles of them
 * (pre: the arguments before TN, each with its comma, or nothing). */
#define KP_TILE(name, TN, tile, ...)                                                                         \
    static void name##_kp##TN(const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1, int64_t r,   \
                              int t, bool first, bool last, enum ci_prefetch stream, __m256 *park) {         \
        tile(__VA_ARGS__ TN, m, gp, b0, b1, r, t, first, last, stream, park);                                \
    }
#define KP_TILES(name, tile, ...)                                                                            \
    KP_TILE(name, 1, tile, __VA_ARGS__)                                                                      \
    KP_TILE(name, 2, tile, __VA_ARGS__)                                                                      \
    KP_TILE(name, 4, tile, __VA_ARGS__)                                                                      \
    static const kp_tile_fn name##_kp_tiles[5] = {NULL, name##_kp1, name##_kp2, NULL, name##_kp4};

KP_TILES(q4_k, kp_tile, CI_TYPE_Q4_K, )
KP_TILES(q5_k, kp_tile, CI_TYPE_Q5_K, )
KP_TILES(q6_k, kp_tile, CI_TYPE_Q6_K, )
KP_TILES(iq4_xs, kp_tile, CI_TYPE_IQ4_XS, )

/* The quantized activation rows of tokens t.. t + TN - 1 (32-block types). */
AI void token_rows(const int TN, const struct ci_mm *m, const int8_t *qs, int t, const int8_t **xt) {
    UNROLL
    for (int j = 0; j < TN; j++)
        xt[j] = qs + (size_t)(t + j) * (size_t)m->n_in;
}

/* Q4_0 packed (pack16.h: per block the 4 chunk vectors, lane i = row i's qs[4c..4c+3], whose low nibbles are
 * elements 4c.. and high nibbles 16 + 4c.., then the 16 rows' fp16 d): 16 rows x TN tokens over blocks
 * [b0, b1), the two halves' float chains parked as kp_tile's.  The 8 chunk products of a block fit int16
 * (codes 0..15, |x| <= 127); less 8 times the token's block sum, one float step per block (dot.h). */
AI void q4_0_tile(const int TN, const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1, int64_t r,
                  int t, bool first, bool last, enum ci_prefetch stream, __m256 *park) {
    const struct ci_act_q8 *q = m->q;
    const size_t step = 256 + CI_PK_SCALE_BYTES;
    const __m256i m0f = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const int8_t *xt[4];
    token_rows(TN, m, q->qs, t, xt);
    park_open(TN, first, park);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = gp + (size_t)b * step;
        if (stream)
            UNROLL
        for (size_t c = 0; c < (step + 63) / 64; c++)
            ci_prefetch_line(p + KP_PREFETCH + 64 * c, stream);
        UNROLL
        for (int h = 0; h < 2; h++) {
            __m256i a[4];
            UNROLL
            for (int j = 0; j < TN; j++)
                a[j] = _mm256_setzero_si256();
            UNROLL
            for (int c = 0; c < 4; c++) {
                const __m256i v = ld(p + 64 * c + 32 * h);
                const __m256i lo = _mm256_and_si256(v, m0f),
                              hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
                UNROLL
                for (int j = 0; j < TN; j++) {
                    a[j] = _mm256_add_epi16(a[j], _mm256_maddubs_epi16(lo, bcast4(xt[j] + 32 * b + 4 * c)));
                    a[j] =
                        _mm256_add_epi16(a[j], _mm256_maddubs_epi16(hi, bcast4(xt[j] + 32 * b + 16 + 4 * c)));
                }
            }
            const __m256 d =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 256 + 16 * h)));
            UNROLL
            for (int j = 0; j < TN; j++) {
                const size_t at = (size_t)b * (size_t)q->tok_stride + (size_t)(t + j);
                __m256i s =
                    _mm256_sub_epi32(_mm256_madd_epi16(a[j], ones), _mm256_set1_epi32(q->sum[at] * 8));
                park[2 * j + h] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(q->d[at])),
                                                  _mm256_cvtepi32_ps(s), park[2 * j + h]);
            }
        }
    }
    park_close(TN, m, r, t, last, park);
}

KP_TILES(q4_0, q4_0_tile, )

/* Q8_0 packed (pack16.h: per block the 8 chunk vectors, lane i = row i's qs[4c..4c+3] plus 128 (x ^ 0x80), then
 * the 16 rows' fp16 d): 16 rows x TN tokens over blocks [b0, b1), the float chains parked as kp_tile's.  The
 * codes are signed again (^ 0x80) and go through the sign trick (|q| against x with q's sign: the pair sums
 * reach 2 * 128 * 127, so each chunk is widened to int32 with one madd); one float step per block. */
AI void q8_0_tile(const int TN, const struct ci_mm *m, const uint8_t *gp, int64_t b0, int64_t b1, int64_t r,
                  int t, bool first, bool last, enum ci_prefetch stream, __m256 *park) {
    const struct ci_act_q8 *q = m->q;
    const size_t step = 512 + CI_PK_SCALE_BYTES;
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    const int8_t *xt[4];
    token_rows(TN, m, q->qs, t, xt);
    park_open(TN, first, park);
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *p = gp + (size_t)b * step;
        UNROLL
        for (int h = 0; h < 2; h++) {
            if (stream) // the block's 9 lines ahead, spread over its two halves
                for (size_t c = (size_t)h * 5; c < (h ? (step + 63) / 64 : 5); c++)
                    ci_prefetch_line(p + KP_PREFETCH + 64 * c, stream);
            __m256i s[4];
            UNROLL
            for (int j = 0; j < TN; j++)
                s[j] = _mm256_setzero_si256();
            UNROLL
            for (int c = 0; c < 8; c++) {
                const __m256i w = _mm256_xor_si256(ld(p + 64 * c + 32 * h), flip),
                              aw = _mm256_sign_epi8(w, w);
                UNROLL
                for (int j = 0; j < TN; j++) {
                    const __m256i x = _mm256_sign_epi8(bcast4(xt[j] + 32 * b + 4 * c), w);
                    s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones));
                    KEEP_IN_REG(s[j]);
                }
            }
            const __m256 d =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 512 + 16 * h)));
            UNROLL
            for (int j = 0; j < TN; j++) {
                const size_t at = (size_t)b * (size_t)q->tok_stride + (size_t)(t + j);
                park[2 * j + h] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(q->d[at])),
                                                  _mm256_cvtepi32_ps(s[j]), park[2 * j + h]);
            }
        }
    }
    park_close(TN, m, r, t, last, park);
}

KP_TILES(q8_0, q8_0_tile, )

/* pack16.c's pack_lanes undone: lane vector v's 16 dwords back to bytes 4v.. of their rows, for n bytes of each
 * row (a multiple of 4), 8 vectors at a time as two 8x8 dword transposes. */
AI void unpack_lanes(const uint8_t *src, size_t n, uint8_t *dst, size_t row_bytes) {
    size_t v = 0;
    for (; v + 8 <= n / 4; v += 8)
        for (int h = 0; h < 2; h++) {
            __m256i x[8], t[8], u[8];
            UNROLL
            for (int k = 0; k < 8; k++)
                x[k] = ld(src + 64 * (v + (size_t)k) + 32 * h);
            UNROLL
            for (int k = 0; k < 4; k++) {
                t[2 * k] = _mm256_unpacklo_epi32(x[2 * k], x[2 * k + 1]);
                t[2 * k + 1] = _mm256_unpackhi_epi32(x[2 * k], x[2 * k + 1]);
            }
            UNROLL
            for (int k = 0; k < 8; k += 4) { // u[k + i]: row i (and i + 4) of dwords v + k.. (low, high lane)
                u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);
                u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);
                u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);
                u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);
            }
            UNROLL
            for (int i = 0; i < 4; i++) {
                uint8_t *row = dst + (size_t)(8 * h + i) * row_bytes + 4 * v;
                _mm256_storeu_si256((__m256i *)(void *)row, _mm256_permute2x128_si256(u[i], u[4 + i], 0x20));
                _mm256_storeu_si256((__m256i *)(void *)(row + 4 * row_bytes),
                                    _mm256_permute2x128_si256(u[i], u[4 + i], 0x31));
            }
        }
    for (; v < n / 4; v++)
        for (int i = 0; i < CI_PK_ROWS; i++)
            memcpy(dst + (size_t)i * row_bytes + 4 * v, src + 64 * v + 4 * (size_t)i, 4);
}

/* One packed Q6_K group's nb super-blocks back to the file's layout, its 16 rows at dst, row_bytes apart. */
static void unpack_q6_k(const uint8_t *group, int64_t nb, uint8_t *dst, size_t row_bytes) {
    const size_t gb = ci_pk_block_bytes(CI_TYPE_Q6_K), sb = gb / CI_PK_ROWS;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = group + (size_t)b * gb;
        uint8_t *rows = dst + (size_t)b * sb;
        unpack_lanes(o, 192, rows, row_bytes); // ql, qh
        for (int i = 0; i < CI_PK_ROWS; i++) {
            for (int k = 0; k < 16; k++) // scales [sub-block][row]
                rows[(size_t)i * row_bytes + 192 + (size_t)k] = o[3072 + 16 * k + i];
            memcpy(rows + (size_t)i * row_bytes + 208, o + 3328 + 2 * i, 2); // d
        }
    }
}

/* Q6_K batches of more than KP_Q6_UNPACK_TOKENS tokens (prefill, batched decode): row blocks of whole groups
 * unpacked into a buffer that stays in L2 and run through dot_avx2.c's file-layout tiles, whose 1-row x 8-token
 * tile decodes each row's codes once for 8 tokens; Q6_K's 6-bit codes cost the 4-token packed tile too much.
 * Measured on Zen 4, 2 threads, 4 matrices of 2048 x 5632, ms a call (bench/gemv_read.c, medians of 3 runs of 5
 * passes): 16 tokens: packed 7.7, unpacked 8.0, file layout 6.3; 128 tokens: packed 57.3, unpacked 48.9, file
 * layout 47.3.  (Q4_K's packed tile is ahead of the file layout's at both: 5.6 / 5.9 and 43.5 / 45.5; Q5_K and
 * IQ4_XS level with it at 128 tokens.)  The unpacking costs one pass over the block per call.  On a real AVX2
 * CPU (Zen 3, the same matrices, ms a pass) the packed tile falls behind from 7 tokens: 8 tokens packed 11.0-12.2,
 * unpacked 7.7-9.3; 12: 18.2 / 10.6; 16: 26.3 / 16.0; 5 and 6 level (bench/KERNELS.md). */
static void kp_unpacked(const struct ci_mm *m, int64_t r0, int64_t re, int t0, int t1, uint8_t *buf) {
    const int64_t nb = m->n_in / 256;
    const size_t rb = (size_t)nb * (ci_pk_block_bytes(m->type) / CI_PK_ROWS), gbytes = CI_PK_ROWS * rb;
    const int64_t block = (int64_t)(KP_UNPACK_BYTES / gbytes) * CI_PK_ROWS;
    struct ci_mm u = *m;
    u.w = buf;
    u.row_bytes = rb;
    u.packed = NULL;
    for (int64_t r = r0; r < re; r += block) {
        const int64_t n = re - r < block ? re - r : block;
        for (int64_t g = 0; g < n / CI_PK_ROWS; g++)
            unpack_q6_k(m->packed + (size_t)(r / CI_PK_ROWS + g) * ci_pk_group_bytes(m->type, nb), nb,
                        buf + (size_t)g * gbytes, rb);
        u.y = m->y + r; // rows [0, n) of the buffer are rows [r, r + n): y keeps its n_out stride
        ci_dot_avx2_table()->mm[m->type](&u, 0, n, t0, t1);
    }
}

/* The packed groups inside [r0, r1): one token group (decode) makes one pass over each group's super-blocks;
 * more tokens take slices of KP_SLICE super-blocks under token groups of up to 4, except Q6_K's batches of 7 on
 * (kp_unpacked).  Rows past the last whole group run the file-layout kernel. */
void ci_avx2_mm_kpacked(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    _Alignas(32) __m256 park[2 * KP_TOKENS];
    const kp_tile_fn *tiles = m->type == CI_TYPE_Q8_0   ? q8_0_kp_tiles
                              : m->type == CI_TYPE_Q4_0 ? q4_0_kp_tiles
                              : m->type == CI_TYPE_Q4_K ? q4_k_kp_tiles
                              : m->type == CI_TYPE_Q5_K ? q5_k_kp_tiles
                              : m->type == CI_TYPE_Q6_K ? q6_k_kp_tiles
                                                        : iq4_xs_kp_tiles;
    const int64_t nb = m->n_in / ci_pk_block_elems(m->type), packed_rows = m->n_out / CI_PK_ROWS * CI_PK_ROWS;
    const int64_t slice = t1 - t0 <= 4 ? nb : KP_SLICE * 256 / ci_pk_block_elems(m->type);
    const int64_t re = r1 < packed_rows ? r1 : packed_rows;
    const size_t group_bytes = ci_pk_group_bytes(m->type, nb);
    // the first token group over a block reads it from memory: it prefetches ahead (the later ones find it cached)
    const enum ci_prefetch stream = ci_decode_prefetch();
    int64_t rp = r0;
    if (m->type == CI_TYPE_Q6_K && t1 - t0 > KP_Q6_UNPACK_TOKENS && group_bytes <= KP_UNPACK_BYTES) {
        _Alignas(64) uint8_t buf[KP_UNPACK_BYTES];
        kp_unpacked(m, r0, re, t0, t1, buf);
        rp = re; // nothing left for the packed tiles
    }
    for (int64_t r = rp; r < re; r += CI_PK_ROWS) {
        const uint8_t *gp = m->packed + (size_t)(r / CI_PK_ROWS) * group_bytes;
        for (int tp = t0; tp < t1; tp += KP_TOKENS) {
            int tp1 = t1 - tp < KP_TOKENS ? t1 : tp + KP_TOKENS;
            for (int64_t b0 = 0; b0 < nb; b0 += slice) {
                int64_t b1 = nb - b0 < slice ? nb : b0 + slice;
                for (int t = tp; t < tp1;) {
                    int tn = tp1 - t >= 4 ? 4 : tp1 - t >= 2 ? 2 : 1;
                    tiles[tn](m, gp, b0, b1, r, t, b0 == 0, b1 == nb, t == tp ? stream : CI_PREFETCH_NONE,
                              park + 2 * (t - tp));
                    t += tn;
                }
            }
        }
    }
    if (r1 > packed_rows)
        ci_dot_avx2_table()->mm[m->type](m, r0 > packed_rows ? r0 : packed_rows, r1, t0, t1);
}

#endif
