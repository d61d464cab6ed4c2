/* The AVX2 table's matmul of F16/BF16 rows packed in pack16.h's float layout with 8 residues (built with
 * -mavx2 -mfma -mf16c as every *_avx2.c; dot_avx2.c's table points at it), with the bits of its row kernels.
 *
 * fpack_avx512.c's scheme at 8 lanes: dot_avx2.c's row tiles give each (row, token) an 8-lane accumulator
 * (lane j sums the products of elements 8u + j, u in order) and a horizontal sum, and convert each weight once
 * per group of up to 4 tokens.  Here one vector holds 8 rows (one half of a 16-row group's 32-byte chunk): per
 * residue j a pass over the units multiplies the 8 rows' element 8u + j by each token's element broadcast, so
 * lane i is exactly lane j of row i's accumulator there; the 8 passes then meet in hsum's pairing (j with
 * j + 4, then + 2, + 1).  Each weight is converted once for up to CI_PK_FLOAT_TOKENS tokens. */
#include "kernels/dot.h"
#include "kernels/pack16.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
#ifdef __OPTIMIZE__
#define UNROLL _Pragma("GCC unroll 16")
#else
#define UNROLL
#endif
#include "kernels/prefetch_inl.h" // needs AI

#define RESIDUES 8
// Bytes of each half-group stream prefetched ahead of the tile (the groups are read front to back).
#define PREFETCH_AHEAD 2048

/* 8 rows' values of one element (16 bytes) as floats. */
AI __m256 widen_rows(uint32_t type, const uint8_t *p) {
    const __m128i h = _mm_load_si128((const __m128i *)(const void *)p);
    if (type == CI_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); // BF16
}

/* H halves of 16-row groups from row r (half h: group h / 2's rows 8 (h % 2)..+8, at byte 16 (h % 2) of its
 * chunks) times tokens [t, t + nt) of one CI_PK_FLOAT_TOKENS block (xb: the block's permuted activations);
 * TN == nt, H * TN <= 12 (16 vector registers).  With pf, own prefetches the tile's own stream a little ahead
 * and next (a one-half tile's following group, or NULL) is prefetched whole over that group's two halves. */
AI void fptile(uint32_t type, const int H, const int TN, const struct ci_mm *m, const uint8_t *gp,
               size_t group_bytes, int64_t r, const float *xb, int t, int nt, enum ci_prefetch pf, int own,
               const uint8_t *next) {
    const int64_t n_units = m->n_in / RESIDUES;
    // A one-half tile reads its group twice (the second half from cache), so its own stream would come from
    // memory in bursts: instead each half fetches half of the next group's bytes (half 0 the first, half 1
    // the rest), a line every 4 units, and the memory streams at an even rate (2 threads, 9 tokens: 11-14%
    // faster than prefetching the own stream only).
    const uint8_t *spread = next ? next + ((r & 8) ? group_bytes / 2 : 0) : NULL;
    const size_t pass_bytes = (size_t)n_units * 32;
    xb += t % CI_PK_FLOAT_TOKENS;           // token t + k at xb[k]
    _Alignas(32) __m256 part[RESIDUES][12]; // [residue][H * TN]
    for (int j = 0; j < RESIDUES; j++) {
        const uint8_t *w[4];
        UNROLL
        for (int h = 0; h < H; h++)
            w[h] = gp + (size_t)(h / 2) * group_bytes + (size_t)j * pass_bytes + (size_t)(h % 2) * 16;
        const float *xu = xb + (size_t)j * (size_t)n_units * CI_PK_FLOAT_TOKENS;
        __m256 acc[12];
        UNROLL
        for (int k = 0; k < H * TN; k++)
            acc[k] = _mm256_setzero_ps();
        for (int64_t u = 0; u < n_units; u++, xu += CI_PK_FLOAT_TOKENS) {
            if (spread && pf != CI_PREFETCH_NONE && (u & 3) == 0)
                ci_prefetch_line(spread + ((size_t)j * pass_bytes + (size_t)u * 32) / 2, pf);
            if (own && pf != CI_PREFETCH_NONE && (u & 1) == 0) {
                UNROLL
                for (int h = 0; h < H; h += 2)
                    ci_prefetch_line(w[h] + (size_t)u * 32 + PREFETCH_AHEAD, pf);
            }
            __m256 wv[4];
            UNROLL
            for (int h = 0; h < H; h++)
                wv[h] = widen_rows(type, w[h] + (size_t)u * 32);
            UNROLL
            for (int k = 0; k < TN; k++) {
                const __m256 b = _mm256_broadcast_ss(xu + k);
                UNROLL
                for (int h = 0; h < H; h++)
                    acc[h * TN + k] = _mm256_fmadd_ps(wv[h], b, acc[h * TN + k]);
            }
        }
        UNROLL
        for (int k = 0; k < H * TN; k++)
            _mm256_store_ps((float *)&part[j][k], acc[k]);
    }
    for (int half = RESIDUES / 2; half >= 1; half /= 2) { // part[j] += part[j + half], j < half: hsum's tree
        for (int j = 0; j < half; j++) {
            UNROLL
            for (int k = 0; k < H * TN; k++)
                part[j][k] = _mm256_add_ps(part[j][k], part[j + half][k]);
        }
    }
    UNROLL
    for (int k = 0; k < TN; k++) {
        if (k >= nt)
            break;
        float *y = m->y + (size_t)(t + k) * (size_t)m->n_out + (size_t)r;
        UNROLL
        for (int h = 0; h < H; h++)
            _mm256_storeu_ps(y + 8 * h, part[0][h * TN + k]);
    }
}

typedef void (*fptile_fn)(const struct ci_mm *m, const uint8_t *gp, size_t group_bytes, int64_t r,
                          const float *xb, int t, int nt, enum ci_prefetch pf, int own, const uint8_t *next);

#define FPTILE(T, name, H, TN)                                                                               \
    static void name##_h##H##t##TN(const struct ci_mm *m, const uint8_t *gp, size_t group_bytes, int64_t r,  \
                                   const float *xb, int t, int nt, enum ci_prefetch pf, int own,             \
                                   const uint8_t *next) {                                                    \
        fptile(T, H, TN, m, gp, group_bytes, r, xb, t, nt, pf, own, next);                                   \
    }
// Tiles of H halves (8 rows each) x TN tokens, one for each token count: two groups' four halves over up to 3
// tokens (4 to 12 accumulators: a token's FMAs alone would wait on their latency), a whole group's two halves
// up to 6, then one half up to 12.
#define FPTILES(T, name)                                                                                     \
    FPTILE(T, name, 4, 1)                                                                                    \
    FPTILE(T, name, 4, 2)                                                                                    \
    FPTILE(T, name, 4, 3)                                                                                    \
    FPTILE(T, name, 2, 1)                                                                                    \
    FPTILE(T, name, 2, 2)                                                                                    \
    FPTILE(T, name, 2, 3)                                                                                    \
    FPTILE(T, name, 2, 4)                                                                                    \
    FPTILE(T, name, 2, 5)                                                                                    \
    FPTILE(T, name, 2, 6)                                                                                    \
    FPTILE(T, name, 1, 7)                                                                                    \
    FPTILE(T, name, 1, 8)                                                                                    \
    FPTILE(T, name, 1, 9)                                                                                    \
    FPTILE(T, name, 1, 10)                                                                                   \
    FPTILE(T, name, 1, 11)                                                                                   \
    FPTILE(T, name, 1, 12)                                                                                   \
    /* [token class: nt - 1]: the tile for 2 groups and the one for a single group */                        \
    static const fptile_fn name##_fptiles2[CI_PK_FLOAT_TOKENS] = {                                           \
        name##_h4t1, name##_h4t2, name##_h4t3, name##_h2t4,  name##_h2t5,  name##_h2t6,                      \
        name##_h1t7, name##_h1t8, name##_h1t9, name##_h1t10, name##_h1t11, name##_h1t12};                    \
    static const fptile_fn name##_fptiles1[CI_PK_FLOAT_TOKENS] = {                                           \
        name##_h2t1, name##_h2t2, name##_h2t3, name##_h2t4,  name##_h2t5,  name##_h2t6,                      \
        name##_h1t7, name##_h1t8, name##_h1t9, name##_h1t10, name##_h1t11, name##_h1t12};

FPTILES(CI_TYPE_F16, f16)
FPTILES(CI_TYPE_BF16, bf16)

// The halves a tile covers, [2 groups][class] (as the tables above).
static const int tile_halves[2][CI_PK_FLOAT_TOKENS] = {{2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1},
                                                       {4, 4, 4, 2, 2, 2, 1, 1, 1, 1, 1, 1}};

/* Rows [r0, r1) and tokens [t0, t1), row tiles outer (a tile's later token blocks find its groups in cache);
 * rows past the last whole group go to the row kernel. */
static void fpanel_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1,
                          const fptile_fn *tiles2, const fptile_fn *tiles1) {
    const int64_t packed_rows = m->n_out / CI_PK_ROWS * CI_PK_ROWS;
    const int64_t re = r1 < packed_rows ? r1 : packed_rows;
    const size_t group_bytes = (size_t)m->n_in * CI_PK_ROWS * 2;
    const enum ci_prefetch stream = ci_decode_prefetch();
    for (int64_t r = r0; r < re;) {
        const int g = re - r >= 2 * CI_PK_ROWS ? 2 : 1;
        const uint8_t *gp = m->packed + (size_t)(r / CI_PK_ROWS) * group_bytes;
        for (int t = t0; t < t1;) {
            const int nt = ci_pk_float_block_tokens(t, t1);
            const float *xb = m->xp + (size_t)(t / CI_PK_FLOAT_TOKENS) * CI_PK_FLOAT_TOKENS * (size_t)m->n_in;
            const int cls = ci_pk_float_tile_class(nt), halves = tile_halves[g - 1][cls];
            const fptile_fn tile = (g == 2 ? tiles2 : tiles1)[cls];
            for (int h = 0; h < 2 * g;
                 h += halves) { // the group's (or groups') halves, a tile's worth at a time
                const int64_t gr = r + (int64_t)h / 2 * CI_PK_ROWS; // the tile's group's first row
                // One-half tiles after the range's first group find it prefetched by the group before.
                const int own = halves > 1 || (gr == r0 && h % 2 == 0);
                const uint8_t *next =
                    halves == 1 && gr + 2 * CI_PK_ROWS <= re ? gp + (size_t)(h / 2 + 1) * group_bytes : NULL;
                tile(m, gp + (size_t)(h / 2) * group_bytes + (size_t)(h % 2) * 16, group_bytes,
                     r + (int64_t)h * 8, xb, t, nt, t == t0 ? stream : CI_PREFETCH_NONE, own, next);
            }
            t += nt;
        }
        r += (int64_t)g * CI_PK_ROWS;
    }
    if (r1 > packed_rows)
        ci_dot_avx2_table()->mm[m->type](m, r0 > packed_rows ? r0 : packed_rows, r1, t0, t1);
}

void ci_avx2_mm_f16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    fpanel_packed(m, r0, r1, t0, t1, f16_fptiles2, f16_fptiles1);
}

void ci_avx2_mm_bf16_packed(const struct ci_mm *m, int64_t r0, int64_t r1, int t0, int t1) {
    fpanel_packed(m, r0, r1, t0, t1, bf16_fptiles2, bf16_fptiles1);
}

/* ---- packing --------------------------------------------------------------------------------------------- */

/* The 8 x 8 transpose of 16-bit values inside each 128-bit lane of a[0..7]: lane half h of out[j] holds
 * element 8h + j of each of a[0..7] (unpacks at 16, 32 and 64 bits). */
AI void transpose8x8_lanes(const __m256i a[8], __m256i out[8]) {
    __m256i s[8], q[8];
    for (int i = 0; i < 4; i++) {
        s[2 * i] = _mm256_unpacklo_epi16(a[2 * i], a[2 * i + 1]);     // elements 0-3 of rows 2i, 2i + 1
        s[2 * i + 1] = _mm256_unpackhi_epi16(a[2 * i], a[2 * i + 1]); // elements 4-7
    }
    for (int h = 0; h < 2; h++) // rows 4h..4h+3: elements 0-1, 2-3, then 4-5, 6-7
        for (int k = 0; k < 2; k++) {
            q[4 * h + 2 * k] = _mm256_unpacklo_epi32(s[4 * h + k], s[4 * h + k + 2]);
            q[4 * h + 2 * k + 1] = _mm256_unpackhi_epi32(s[4 * h + k], s[4 * h + k + 2]);
        }
    for (int k = 0; k < 4; k++) { // elements 2k and 2k + 1 of the 8 rows
        out[2 * k] = _mm256_unpacklo_epi64(q[k], q[k + 4]);
        out[2 * k + 1] = _mm256_unpackhi_epi64(q[k], q[k + 4]);
    }
}

/* ci_pk_float_rows' bytes by 16-bit transposes, 16 elements of a group's 16 rows at a time (the scalar
 * function stays the definition; the tests compare the two). */
void ci_avx2_pk_float_rows(int residues, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0,
                           int64_t g1, uint8_t *dst) {
    const int64_t n_units = n_in / residues; // n_in a multiple of 16: with R = 8, an even count
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = dst + (size_t)g * CI_PK_ROWS * (size_t)n_in * 2;
        const uint8_t *rows = w + (size_t)(g * CI_PK_ROWS) * row_bytes;
        for (int64_t e = 0; e < n_in; e += 16) {
            __m256i a[8], lo[8], hi[8];
            for (int half = 0; half < 2; half++) {
                for (int i = 0; i < 8; i++)
                    a[i] = _mm256_loadu_si256(
                        (const __m256i *)(const void *)(rows + (size_t)(8 * half + i) * row_bytes + 2 * e));
                transpose8x8_lanes(a, half ? hi : lo);
            }
            // The 16 rows' elements e + j and e + 8 + j: with R = 16 residues j and 8 + j of unit e / 16, with
            // R = 8 residue j of units e / 8 and e / 8 + 1.
            const int64_t u = e / residues;
            const size_t second = residues == 16 ? (size_t)(8 * n_units) * 32 : 32;
            for (int j = 0; j < 8; j++) {
                uint8_t *at = o + (size_t)(j * n_units + u) * 32;
                _mm256_storeu_si256((__m256i *)(void *)at, _mm256_permute2x128_si256(lo[j], hi[j], 0x20));
                _mm256_storeu_si256((__m256i *)(void *)(at + second),
                                    _mm256_permute2x128_si256(lo[j], hi[j], 0x31));
            }
        }
    }
}

void ci_avx2_pk_rows(int float_residues, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in,
                     int64_t g0, int64_t g1, uint8_t *dst) {
    if (type == CI_TYPE_F16 || type == CI_TYPE_BF16)
        ci_avx2_pk_float_rows(float_residues, w, row_bytes, n_in, g0, g1, dst);
    else
        ci_pk_rows(type, w, row_bytes, n_in, g0, g1, dst);
}
#endif
