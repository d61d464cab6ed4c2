/* Kernel tests: every SIMD kernel against the scalar ground truth and against dequantize-then-double-dot,
 * the Q8 activation quantizer (bit-exact across implementations, ties to even, within half a step), matmul
 * bit-invariance across thread counts, tile shapes and batch composition, and rope/rmsnorm/softmax/silu/attention
 * against straightforward double-precision formulas written here (the thread pool: test_threadpool.c). */
#include "kernels/kernels.h"

#include "kernels/dot.h"
#include "kernels/pack16.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "test.h"

/* The loops below compare thousands of elements: each test reports only its first mismatch (FAIL_FIRST), so
 * one broken kernel shows up as one FAIL line (tests/run.sh counts FAIL lines). */
#define CHECK1(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            FAIL_FIRST("%s", #cond);                                                                         \
    } while (0)

static const uint32_t all_types[] = {CI_TYPE_F32, CI_TYPE_F16, CI_TYPE_BF16, CI_TYPE_Q8_0, CI_TYPE_Q4_0};
#define N_TYPES ((int)(sizeof all_types / sizeof all_types[0]))
/* Types tested on random blocks (every byte random, the scale fields set to finite values) rather than on
 * quantized floats: blocks a quantizer would never write are legal in a file and must compute exactly too. */
static const uint32_t block_types[] = {CI_TYPE_Q4_1,  CI_TYPE_Q5_0, CI_TYPE_Q5_1,  CI_TYPE_IQ4_NL,
                                       CI_TYPE_MXFP4, CI_TYPE_Q2_K, CI_TYPE_Q3_K,  CI_TYPE_Q4_K,
                                       CI_TYPE_Q5_K,  CI_TYPE_Q6_K, CI_TYPE_IQ4_XS};
#define N_BLOCK_TYPES ((int)(sizeof block_types / sizeof block_types[0]))

static bool is_quant(uint32_t type) {
    return ci_type_quantized(type);
}

/* Byte offsets of a block's fp16 scale d and min (-1: none), as ggml lays them out (quant.c). */
static void scale_fields(uint32_t type, int *d_at, int *min_at) {
    *min_at = -1;
    switch (type) {
    case CI_TYPE_Q2_K:
        *d_at = 80, *min_at = 82;
        return;
    case CI_TYPE_Q3_K:
        *d_at = 108;
        return;
    case CI_TYPE_Q6_K:
        *d_at = 208;
        return;
    case CI_TYPE_Q4_1:
    case CI_TYPE_Q5_1:
    case CI_TYPE_Q4_K:
    case CI_TYPE_Q5_K:
        *d_at = 0, *min_at = 2;
        return;
    case CI_TYPE_MXFP4:
        *d_at = -1; // an E8M0 byte
        return;
    default:
        *d_at = 0;
    }
}

/* Every table this CPU runs, best first, the scalar ground truth last: each test runs on all of them. */
static const struct ci_dot_table *tables[3];
static int n_tables;

/* Table t's dot for type, or the entry of the table below it that serves it (dot.h). */
static ci_dot_fn table_fn(const struct ci_dot_table *t, uint32_t type) {
    if (t->dot[type])
        return t->dot[type];
    return t == ci_dot_avx512_table() && ci_dot_avx2_table()->dot[type] ? ci_dot_avx2_table()->dot[type]
                                                                        : ci_dot_ref_table()->dot[type];
}

static void fill_normal(struct ci_rng *r, float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(ci_rng_normal(r) * scale);
}

/* Quantizes src into a fresh buffer of ci_row_bytes(type, n) (caller frees). */
static void *make_row(uint32_t type, const float *src, int64_t n) {
    uint64_t nb = 0;
    if (!ci_row_bytes(type, (uint64_t)n, &nb))
        return NULL;
    void *row = ci_malloc(nb ? (size_t)nb : 1);
    if (row)
        ci_quantize_row(type, src, row, n);
    return row;
}

/* A row of n elements of random blocks: random bytes, then each block's scale (and min) a random fp16 of
 * magnitude about `scale` (MXFP4: an E8M0 exponent within 2^+-4 of it).  NULL if the block does not divide
 * n.  Caller frees. */
static void *random_row(struct ci_rng *r, uint32_t type, int64_t n, double scale) {
    const struct ci_type_traits *tt = ci_type_traits(type);
    uint64_t nb = 0;
    if (!ci_row_bytes(type, (uint64_t)n, &nb))
        return NULL;
    uint8_t *row = ci_malloc(nb ? (size_t)nb : 1);
    if (!row)
        return NULL;
    for (uint64_t i = 0; i < nb; i++)
        row[i] = (uint8_t)(ci_rng_u64(r) >> 24);
    int d_at, min_at;
    scale_fields(type, &d_at, &min_at);
    for (uint64_t b = 0; b < nb / tt->type_size; b++) {
        uint8_t *blk = row + b * tt->type_size;
        if (type == CI_TYPE_MXFP4) {
            blk[0] = (uint8_t)(128 + (int)round(log2(scale)) - 4 + (int)(ci_rng_u64(r) % 9));
            continue;
        }
        uint16_t d = ci_fp32_to_fp16((float)(scale * (ci_rng_f64(r) - 0.5) * 2.0));
        memcpy(blk + d_at, &d, 2);
        if (min_at >= 0) {
            uint16_t m = ci_fp32_to_fp16((float)(scale * (ci_rng_f64(r) - 0.5) * 2.0));
            memcpy(blk + min_at, &m, 2);
        }
    }
    return row;
}

/* A row's weights split as w = a + b: a with the blocks' mins zeroed, b with their scales zeroed (b = 0 for
 * types without mins).  The canonical order adds the two parts in separate float steps, so its rounding
 * error scales with |a x| + |b x|, which may far exceed |w x| when they cancel. */
static void split_row(uint32_t type, const void *row, int64_t n, float *a, float *b) {
    int d_at, min_at;
    scale_fields(type, &d_at, &min_at);
    ci_dequantize_row(type, row, a, n);
    for (int64_t i = 0; i < n; i++)
        b[i] = 0.0f;
    if (min_at < 0)
        return;
    const struct ci_type_traits *tt = ci_type_traits(type);
    uint64_t nb = 0;
    ci_row_bytes(type, (uint64_t)n, &nb);
    uint8_t *c = ci_malloc((size_t)nb);
    memcpy(c, row, (size_t)nb);
    for (uint64_t k = 0; k < nb / tt->type_size; k++)
        memset(c + k * tt->type_size + min_at, 0, 2);
    ci_dequantize_row(type, c, a, n);
    memcpy(c, row, (size_t)nb);
    for (uint64_t k = 0; k < nb / tt->type_size; k++)
        memset(c + k * tt->type_size + d_at, 0, 2);
    ci_dequantize_row(type, c, b, n);
    ci_free(c);
}

/* dequantize (reference conversion) then dot in double; *abs_sum = sum |w_i * x_i| for tolerances. */
static double ref_dot(uint32_t type, const void *row, const float *x, int64_t n, double *abs_sum) {
    float *w = ci_malloc((size_t)n * sizeof(float) + 1);
    ci_dequantize_row(type, row, w, n);
    double s = 0.0, a = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)w[i] * (double)x[i];
        a += fabs((double)w[i] * (double)x[i]);
    }
    ci_free(w);
    *abs_sum = a;
    return s;
}

/* Float summation error relative to sum |w_i x_i|: observed at most ~2e-7 on these inputs (n up to 4160);
 * 4e-6 leaves a wide margin yet is far below any indexing, scaling or layout mistake (those are O(1)). */
#define DOT_REL_TOL 4e-6

/* The largest |ci_dot - exact dot of the stored weights with x| allowed; *want = that exact dot (double).
 * Float types: float summation error only, DOT_REL_TOL * sum |w x|.
 * Quantized types also quantize x to int8 blocks (32 elements, or 256 for the Q8_K types; scale d_b =
 * max_b |x| / 127, values rounded to nearest): each x_j moves by at most d_b / 2 = max_b |x| / 254 (x 1.0001
 * for the float rounding of d and 1/d), so the dot moves by at most qerr = sum_b (max_b |x| / 254) *
 * sum_{j in b} (|a_j| + |b_j|) (split_row: the scale and min parts the kernel sums separately).  The block
 * dots are exact integers; the float chain (per weight block at most two fmas, each product and the integer's
 * conversion rounded once) adds (4 * blocks + 2) * 2^-24 of the sum of the terms' magnitudes, which is at
 * most sum (|a_j| + |b_j|) |x_j| + qerr. */
static double dot_bound(uint32_t type, const void *row, const float *x, int64_t n, double *want) {
    double abs_sum;
    *want = ref_dot(type, row, x, n, &abs_sum);
    if (!is_quant(type))
        return DOT_REL_TOL * abs_sum;
    float *a = ci_malloc((size_t)n * sizeof(float)), *b = ci_malloc((size_t)n * sizeof(float));
    split_row(type, row, n, a, b);
    int64_t ab = ci_type_uses_q8k(type) ? 256 : 32;
    double qerr = 0.0, mag = 0.0;
    for (int64_t k = 0; k < n / ab; k++) {
        double amax = 0.0, wabs = 0.0;
        for (int64_t j = k * ab; j < (k + 1) * ab; j++) {
            amax = fmax(amax, fabs((double)x[j]));
            wabs += fabs((double)a[j]) + fabs((double)b[j]);
            mag += (fabs((double)a[j]) + fabs((double)b[j])) * fabs((double)x[j]);
        }
        qerr += amax / 254.0 * wabs;
    }
    ci_free(a);
    ci_free(b);
    double blocks = (double)(n / ci_type_traits(type)->block_size);
    return 1.0001 * qerr + (4.0 * blocks + 2.0) * 0x1p-24 * (mag + qerr);
}

static bool same_bits(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

// Magnitudes near each format's useful range (fp16 scales cap Q4_0's d = max/8 below 65504).
static double large_scale(uint32_t type) {
    switch (type) {
    case CI_TYPE_F32:
    case CI_TYPE_BF16:
        return 1e15;
    case CI_TYPE_F16:
        return 1e4;
    case CI_TYPE_Q8_0:
        return 1e5;
    default:
        return 5e4;
    }
}

TEST(dot_simd_matches_scalar) {
    if (n_tables == 1) {
        printf("note: no SIMD kernels on this CPU: scalar path only\n");
        return;
    }
    const struct ci_dot_table *ref = ci_dot_ref_table();
    const int64_t sizes[] = {32, 64, 96, 4096, 4128};
    const int64_t odd_sizes[] = {1, 7, 8, 9, 31, 33, 40, 1001}; // block-size-1 types: every tail length
    struct ci_rng r;
    ci_rng_seed(&r, 1234);
    for (int k = 0; k + 1 < n_tables; k++) {
        const struct ci_dot_table *simd = tables[k];
        double worst = 0.0;
        for (int ti = 0; ti < N_TYPES; ti++) {
            uint32_t type = all_types[ti];
            bool scalar_blocks = ci_type_traits(type)->block_size == 1;
            int n_sizes = 5 + (scalar_blocks ? 8 : 0);
            for (int si = 0; si < n_sizes; si++) {
                int64_t n = si < 5 ? sizes[si] : odd_sizes[si - 5];
                for (int trial = 0; trial < 4; trial++) {
                    double ws = trial == 3 ? large_scale(type) : 1.0, xs = trial == 3 ? 1e3 : 1.0;
                    float *w = ci_malloc((size_t)n * sizeof(float)),
                          *x = ci_malloc((size_t)n * sizeof(float));
                    ASSERT(w && x);
                    fill_normal(&r, w, n, ws);
                    fill_normal(&r, x, n, xs);
                    if (trial == 2) // offset activations: sums far from zero
                        for (int64_t i = 0; i < n; i++)
                            x[i] += 3.0f;
                    void *row = make_row(type, w, n);
                    ASSERT(row);
                    double abs_sum;
                    (void)ref_dot(type, row, x, n, &abs_sum);
                    float a = table_fn(ref, type)(row, x, n), b = table_fn(simd, type)(row, x, n);
                    double err = fabs((double)a - (double)b);
                    if (abs_sum > 0 && err / abs_sum > worst)
                        worst = err / abs_sum;
                    // Quantized types follow one canonical order in every table: the same bits.
                    bool ok = is_quant(type) ? same_bits(a, b) : err <= DOT_REL_TOL * abs_sum;
                    if (!ok || !isfinite(a))
                        FAIL_FIRST("%s n=%lld trial %d: scalar %.9g simd %.9g (abs sum %g)",
                                   ci_type_name(type), (long long)n, trial, a, b, abs_sum);
                    // ci_dot itself follows the selected table exactly
                    ci_kernels_force_table(simd);
                    CHECK1(same_bits(ci_dot(type, row, x, n), b));
                    ci_kernels_force_scalar(true);
                    CHECK1(same_bits(ci_dot(type, row, x, n), a));
                    ci_kernels_force_table(NULL);
                    ci_free(row);
                    ci_free(w);
                    ci_free(x);
                }
            }
        }
        printf("note: %s: worst |simd - scalar| / sum|w x| = %.3g\n", simd->isa, worst);
    }
}

TEST(dot_matches_dequantized_double_reference) {
    const int64_t sizes[] = {32, 64, 96, 4096, 4128};
    double worst_rel[N_TYPES] = {0}, worst_frac[N_TYPES] = {0};
    for (int pass = 0; pass < n_tables; pass++) {
        ci_kernels_force_table(tables[pass]);
        struct ci_rng r;
        ci_rng_seed(&r, 99);
        for (int ti = 0; ti < N_TYPES; ti++) {
            uint32_t type = all_types[ti];
            for (int si = 0; si < 5; si++) {
                int64_t n = sizes[si];
                for (int trial = 0; trial < 4; trial++) {
                    float *w = ci_malloc((size_t)n * sizeof(float)),
                          *x = ci_malloc((size_t)n * sizeof(float));
                    ASSERT(w && x);
                    fill_normal(&r, w, n, trial == 2 ? large_scale(type) : 0.1);
                    fill_normal(&r, x, n, trial == 2 ? 1e3 : 1.0);
                    if (trial == 3) // an outlier per block, as in real activations: coarse Q8 steps elsewhere
                        for (int64_t i = 5; i < n; i += 32)
                            x[i] *= 40.0f;
                    void *row = make_row(type, w, n);
                    ASSERT(row);
                    double want, bound = dot_bound(type, row, x, n, &want), abs_sum;
                    (void)ref_dot(type, row, x, n, &abs_sum);
                    float got = ci_dot(type, row, x, n);
                    double err = fabs(got - want);
                    if (!(err <= bound))
                        FAIL_FIRST("%s %s n=%lld trial %d: got %.9g want %.9g (bound %g)", ci_kernels_isa(),
                                   ci_type_name(type), (long long)n, trial, got, want, bound);
                    if (abs_sum > 0)
                        worst_rel[ti] = fmax(worst_rel[ti], err / abs_sum);
                    if (bound > 0)
                        worst_frac[ti] = fmax(worst_frac[ti], err / bound);
                    ci_free(row);
                    ci_free(w);
                    ci_free(x);
                }
            }
        }
    }
    for (int ti = 0; ti < N_TYPES; ti++)
        printf("note: %s worst |dot - exact| = %.3g of sum|w x|, %.3g of the stated bound\n",
               ci_type_name(all_types[ti]), worst_rel[ti], worst_frac[ti]);
    ci_kernels_force_table(NULL);
}

/* The block types on random blocks (random_row): every table's ci_dot within dot_bound of the exact dot of
 * the dequantized row, on normal, offset, outlier and large activations and large scales. */
TEST(block_types_dot_matches_double_reference) {
    const int64_t sizes32[] = {32, 96, 4128}, sizes256[] = {256, 768, 4096};
    double worst_frac[N_BLOCK_TYPES] = {0};
    for (int pass = 0; pass < n_tables; pass++) {
        ci_kernels_force_table(tables[pass]);
        struct ci_rng r;
        ci_rng_seed(&r, 7);
        for (int ti = 0; ti < N_BLOCK_TYPES; ti++) {
            uint32_t type = block_types[ti];
            for (int si = 0; si < 3; si++) {
                int64_t n = ci_type_uses_q8k(type) ? sizes256[si] : sizes32[si];
                for (int trial = 0; trial < 4; trial++) {
                    float *x = ci_malloc((size_t)n * sizeof(float));
                    ASSERT(x);
                    fill_normal(&r, x, n, trial == 3 ? 1e3 : 1.0);
                    for (int64_t i = 0; i < n && trial == 1; i++)
                        x[i] += 3.0f; // offset: the mins' correction is large
                    for (int64_t i = 5; i < n && trial == 2; i += 32)
                        x[i] *= 40.0f; // an outlier per block: coarse int8 steps elsewhere
                    void *row = random_row(&r, type, n, trial == 3 ? 1e3 : 0.05);
                    ASSERT(row);
                    double want, bound = dot_bound(type, row, x, n, &want);
                    float got = ci_dot(type, row, x, n);
                    double err = fabs(got - want);
                    if (!(err <= bound))
                        FAIL_FIRST("%s %s n=%lld trial %d: got %.9g want %.9g (bound %g)", ci_kernels_isa(),
                                   ci_type_name(type), (long long)n, trial, got, want, bound);
                    if (bound > 0)
                        worst_frac[ti] = fmax(worst_frac[ti], err / bound);
                    ci_free(row);
                    ci_free(x);
                }
            }
        }
    }
    for (int ti = 0; ti < N_BLOCK_TYPES; ti++)
        printf("note: %s worst |dot - exact| = %.3g of the stated bound\n", ci_type_name(block_types[ti]),
               worst_frac[ti]);
    ci_kernels_force_table(NULL);
}

TEST(dot_zero_rows_and_zero_activations) {
    enum { N = 4128 };
    static float w[N], x[N], zero[N];
    struct ci_rng r;
    ci_rng_seed(&r, 5);
    fill_normal(&r, w, N, 1.0);
    fill_normal(&r, x, N, 1.0);
    for (int pass = 0; pass < n_tables; pass++) {
        ci_kernels_force_table(tables[pass]);
        for (int ti = 0; ti < N_TYPES; ti++) {
            uint32_t type = all_types[ti];
            void *zrow = make_row(type, zero, N), *row = make_row(type, w, N);
            ASSERT(zrow && row);
            CHECK1(ci_dot(type, zrow, x, N) == 0.0f);
            CHECK1(ci_dot(type, row, zero, N) == 0.0f);
            ci_free(zrow);
            ci_free(row);
        }
    }
    ci_kernels_force_table(NULL);
}

/* Values worked out by hand from the block layouts in quant.h, not from any code.  For Q8_0/Q4_0 the
 * activations are chosen so that their Q8 quantization is exact: max |x| = 127 gives the scale d = 1. */
TEST(dot_known_values) {
    for (int pass = 0; pass < n_tables; pass++) {
        ci_kernels_force_table(tables[pass]);
        // F32: sum_{i=1..96} i*i = 96*97*193/6 = 299536, exact in float in any order.
        float w[96], x[96];
        for (int i = 0; i < 96; i++)
            w[i] = x[i] = (float)(i + 1);
        CHECK1(ci_dot(CI_TYPE_F32, w, x, 96) == 299536.0f);
        // F16 / BF16 of small integers are exact: 1.0 = 0x3c00 (f16), 0x3f80 (bf16); 2.0 = 0x4000, 0x4000.
        uint16_t h[40], bf[40];
        for (int i = 0; i < 40; i++) {
            h[i] = i % 2 ? 0x4000 : 0x3c00;
            bf[i] = i % 2 ? 0x4000 : 0x3f80;
            x[i] = (float)i;
        }
        // sum of even i (times 1) + 2 * sum of odd i, i < 40: 380 + 2*400 = 1180
        CHECK1(ci_dot(CI_TYPE_F16, h, x, 40) == 1180.0f);
        CHECK1(ci_dot(CI_TYPE_BF16, bf, x, 40) == 1180.0f);

        // Q8_0: two blocks, d = 0.5 (0x3800) and 2.0 (0x4000), q[j] = j - 16 (sum -16), x = 127:
        // 127 * (0.5 * (-16) + 2 * (-16)) = -5080.
        struct ci_block_q8_0 b8[2];
        b8[0].d = 0x3800;
        b8[1].d = 0x4000;
        for (int j = 0; j < 32; j++)
            b8[0].qs[j] = b8[1].qs[j] = (int8_t)(j - 16);
        float x127[64];
        for (int i = 0; i < 64; i++)
            x127[i] = 127.0f;
        CHECK1(ci_dot(CI_TYPE_Q8_0, b8, x127, 64) == -5080.0f);

        // Q4_0: d = 1, byte j = lo (j) | hi (15 - j) << 4 → element j = j - 8, element 16 + j = 7 - j
        // (low nibbles are elements 0..15); with x[0] = 127 and x[k] = k otherwise, the sum is accumulated
        // below from that rule alone.
        struct ci_block_q4_0 b4;
        b4.d = 0x3c00;
        float xk[32];
        for (int k = 0; k < 32; k++)
            xk[k] = k ? (float)k : 127.0f;
        double want = 0.0;
        for (int j = 0; j < 16; j++) {
            b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
            want += (double)(j - 8) * xk[j] + (double)(7 - j) * xk[16 + j];
        }
        CHECK1(ci_dot(CI_TYPE_Q4_0, &b4, xk, 32) == (float)want);
    }
    ci_kernels_force_table(NULL);
}

/* Runs every table's activation quantizer on one token (index n_tables - 1: scalar). */
static void quant_all(const float *x, int64_t n, int8_t **qs, float **d, int32_t **s, float **ms) {
    for (int i = 0; i < n_tables; i++)
        tables[i]->quant_act(x, n, qs[i], d[i], s[i], ms[i], 1);
}

/* The Q8_K activation quantizer: every table's gives the scalar one's bits (ties, outliers, tiny and zero
 * super-blocks included), and the scalar one is within half a step with exact group sums. */
TEST(quant_act_k_matches_scalar) {
    enum { N = 256 * 6 };
    static float x[N];
    static int8_t qs[2][N];
    static float d[2][N / 256];
    static int16_t bs[2][N / 16];
    struct ci_rng r;
    ci_rng_seed(&r, 5);
    fill_normal(&r, x, N, 1.0);
    for (int i = 256; i < 512; i++) // steps of exactly half a quantum: ties round to even
        x[i] = (float)(i - 384) * 0.5f;
    x[600] = 1e30f; // an outlier: everything else rounds to 0 or +-1
    for (int i = 768; i < 1024; i++)
        x[i] = 1e-35f; // below ACT_MIN_AMAX: d = 0, q = 0
    for (int i = 1024; i < 1280; i++)
        x[i] = 0.0f;
    ci_ref_quant_act_k(x, N, qs[0], d[0], bs[0]);
    for (int b = 0; b < N / 256; b++) {
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) {
                int i = b * 256 + g * 16 + j;
                sum += qs[0][i];
                CHECK1(fabs((double)qs[0][i] * d[0][b] - x[i]) <= 0.5 * d[0][b] * 1.0001 || d[0][b] == 0.0f);
            }
            CHECK1(bs[0][b * 16 + g] == sum);
        }
    }
    CHECK1(d[0][3] == 0.0f && d[0][4] == 0.0f);
    for (int t = 0; t < n_tables; t++) {
        ci_quant_act_k_select(tables[t])(x, N, qs[1], d[1], bs[1]);
        if (memcmp(qs[0], qs[1], sizeof qs[0]) || memcmp(d[0], d[1], sizeof d[0]) ||
            memcmp(bs[0], bs[1], sizeof bs[0]))
            FAIL_FIRST("%s: Q8_K activations differ from the scalar ones", tables[t]->isa);
    }
}

TEST(quant_act_rounds_to_nearest_even_within_half_a_step_with_a_half_precision_scale) {
    enum { N = 32 * 40 };
    static float x[N];
    static int8_t qbuf[3][N];
    static float dbuf[3][N / 32];
    static int32_t sbuf[3][N / 32];
    static float msbuf[3][N / 32];
    int8_t *qs[3] = {qbuf[0], qbuf[1], qbuf[2]};
    float *d[3] = {dbuf[0], dbuf[1], dbuf[2]};
    int32_t *s[3] = {sbuf[0], sbuf[1], sbuf[2]};
    float *ms[3] = {msbuf[0], msbuf[1], msbuf[2]};
    // the scalar ground truth's output, checked against the formulas below
    const int8_t *qa = qbuf[n_tables - 1];
    const float *da = dbuf[n_tables - 1];
    const int32_t *sa = sbuf[n_tables - 1];
    const float *msa = msbuf[n_tables - 1];

    // Worked by hand: max |x| = 127 makes d = 1 and 1/d = 1, so q = x rounded with ties to even.
    const float tie[8] = {2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 127.0f, 1.49f, -126.5f};
    const int8_t tie_q[8] = {2, -2, 4, 0, 0, 127, 1, -126};
    memset(x, 0, 32 * sizeof(float));
    memcpy(x, tie, sizeof tie);
    quant_all(x, 32, qs, d, s, ms);
    for (int i = 0; i < n_tables; i++) {
        CHECK1(d[i][0] == 1.0f);
        CHECK1(memcmp(qs[i], tie_q, sizeof tie_q) == 0);
        CHECK1(s[i][0] == 2 - 2 + 4 + 127 + 1 - 126);
        for (int j = 8; j < 32; j++)
            CHECK1(qs[i][j] == 0);
    }

    // Random blocks at many scales, a zero block, one-outlier blocks, denormal-sized values.
    struct ci_rng r;
    ci_rng_seed(&r, 31);
    for (int b = 0; b < N / 32; b++) {
        double scale = pow(10.0, (double)(b % 13) - 6.0);
        fill_normal(&r, x + b * 32, 32, scale);
        if (b % 7 == 3)
            x[b * 32 + b % 32] *= 1000.0f;
        if (b == 11)
            memset(x + b * 32, 0, 32 * sizeof(float));
        if (b == 12)
            for (int j = 0; j < 32; j++)
                x[b * 32 + j] = (float)(j - 16) * 1e-40f;
    }
    quant_all(x, N, qs, d, s, ms);
    for (int b = 0; b < N / 32; b++) {
        double amax = 0.0;
        int arg = 0;
        for (int j = 0; j < 32; j++)
            if (fabs(x[b * 32 + j]) > amax)
                amax = fabs(x[b * 32 + j]), arg = j;
        int32_t sum = 0, nonzero = 0;
        // q rounds x to the float32 step max|x| / 127; the stored scale is that step in half precision
        float step32 = amax >= 0x1p-100 ? (float)amax / 127.0f : 0.0f;
        for (int j = 0; j < 32; j++) {
            double step = step32;
            CHECK1(fabs((double)x[b * 32 + j] - step * qa[b * 32 + j]) <=
                   (amax >= 0x1p-100 ? 0.5001 * step : amax));
            sum += qa[b * 32 + j];
            nonzero += qa[b * 32 + j] != 0;
        }
        CHECK1(da[b] == ci_fp16_to_fp32(ci_fp32_to_fp16(step32)));
        CHECK1(sa[b] == sum);
        // ggml's block_q8_1 s (the min term of Q4_1 / Q5_1): the unrounded step times the sum, in half precision
        CHECK1(msa[b] == ci_fp16_to_fp32(ci_fp32_to_fp16(step32 * (float)sum)));
        if (amax >= 0x1p-100) // below: flushed to zero (dot.h), e.g. the block of values near 1e-40
            CHECK1(abs(qa[b * 32 + arg]) == 127);
        else
            CHECK1(da[b] == 0.0f && nonzero == 0);
    }
    for (int i = 0; i + 1 < n_tables; i++) { // the SIMD quantizers give the same bytes and scales
        CHECK1(memcmp(qa, qbuf[i], sizeof qbuf[i]) == 0);
        CHECK1(memcmp(da, dbuf[i], sizeof dbuf[i]) == 0);
        CHECK1(memcmp(sa, sbuf[i], sizeof sbuf[i]) == 0);
        CHECK1(memcmp(msa, msbuf[i], sizeof msbuf[i]) == 0);
    }
}

/* A weight tensor of n_out random rows (Q8_0: some weights -128, which files may hold). */
static struct ci_tensor make_weights(struct ci_rng *r, uint32_t type, int64_t n_in, int64_t n_out) {
    struct ci_tensor t = {.name = "w", .type = type, .n_dims = 2, .ne = {n_in, n_out, 1, 1}};
    uint64_t rb = 0;
    ci_row_bytes(type, (uint64_t)n_in, &rb);
    t.row_bytes = rb;
    t.nbytes = rb * (uint64_t)n_out;
    uint8_t *data = ci_malloc((size_t)t.nbytes);
    float *src = ci_malloc((size_t)n_in * sizeof(float));
    bool quantizable = false;
    for (int i = 0; i < N_TYPES; i++)
        quantizable |= all_types[i] == type;
    for (int64_t o = 0; o < n_out && !quantizable; o++) { // random blocks, some rows all zero bytes
        void *row = random_row(r, type, n_in, 0.05);
        memcpy(data + (size_t)o * rb, row, (size_t)rb);
        if (o % 11 == 3)
            memset(data + (size_t)o * rb, 0, (size_t)rb);
        ci_free(row);
    }
    for (int64_t o = 0; o < n_out && quantizable; o++) {
        fill_normal(r, src, n_in, 0.5);
        ci_quantize_row(type, src, data + (size_t)o * rb, n_in);
        if (type == CI_TYPE_Q8_0 && o % 3 == 1) {
            struct ci_block_q8_0 *b = (struct ci_block_q8_0 *)(void *)(data + (size_t)o * rb);
            b[0].qs[o % 32] = -128;
            b[n_in / 32 - 1].qs[(o * 7) % 32] = -128;
        }
    }
    ci_free(src);
    t.data = data;
    return t;
}

/* ci_matmul with a fresh workspace of exactly ci_matmul_work_bytes plus a guard that must stay intact. */
static bool matmul_guarded(struct ci_threadpool *tp, const struct ci_tensor *w, const float *x, int n_tok,
                           float *y) {
    size_t wb = ci_matmul_work_bytes(w->type, w->ne[0], n_tok);
    // float rows need a workspace only where the table packs them (their permuted activations)
    if (!is_quant(w->type) && wb != 0 && wb != ci_pk_float_act_bytes(w->ne[0], n_tok))
        return false;
    uint8_t *work = ci_malloc_aligned(wb + 64);
    if (!work)
        return false;
    memset(work + wb, 0xa5, 64);
    ci_matmul(tp, w, x, n_tok, y, work);
    bool ok = true;
    for (int i = 0; i < 64; i++)
        ok &= work[wb + (size_t)i] == 0xa5;
    ci_free_aligned(work);
    return ok;
}

/* The sanitizer builds run the threaded matmul test shorter (at -O1 and instrumented, it took minutes): both
 * leave out the pass that prefetches into L2 (a prefetch reads nothing the sanitizers check, and moves no
 * thread's share), and ThreadSanitizer's (make tsan) runs the CPU's own table only, since what TSan checks there
 * is the threads' split of the work, which no table changes.  The release build runs every table and pass. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

struct mm_case {
    int64_t n_in, n_out;
    int max_tok;
    bool quant; // also run Q8_0/Q4_0 (n_in a multiple of 32)
};

/* Every element equals ci_dot of its row and token (the reference order) for every thread count, every
 * batch size 1..max_tok (so every register tile shape and edge) and every position in a shuffled batch;
 * quantized types give the same bits in the scalar and the SIMD table; each is within dot_bound. */
static void matmul_case(const struct mm_case *c, struct ci_threadpool **pools, bool f16_only) {
    const int64_t n_in = c->n_in, n_out = c->n_out;
    const int max_tok = c->max_tok;
    float *x = ci_malloc((size_t)(max_tok * n_in) * sizeof(float)),
          *xb = ci_malloc((size_t)(max_tok * n_in) * sizeof(float));
    float *y = ci_malloc((size_t)((max_tok + 1) * n_out) * sizeof(float)),
          *yb = ci_malloc((size_t)(max_tok * n_out) * sizeof(float));
    float *want = ci_malloc((size_t)(max_tok * n_out) * sizeof(float)),
          *scalar_y = ci_malloc((size_t)(max_tok * n_out) * sizeof(float));
    struct ci_rng r;
    ci_rng_seed(&r, 42 + (uint64_t)n_in);
    for (int ti = 0; ti < N_TYPES + N_BLOCK_TYPES; ti++) {
        uint32_t type = ti < N_TYPES ? all_types[ti] : block_types[ti - N_TYPES];
        if ((is_quant(type) && !c->quant) || n_in % ci_type_traits(type)->block_size != 0 ||
            (f16_only && type != CI_TYPE_F16 && type != CI_TYPE_BF16))
            continue;
        struct ci_tensor w = make_weights(&r, type, n_in, n_out);
        ASSERT(w.data);
        fill_normal(&r, x, max_tok * n_in, 1.0);
        for (int pass = UNDER_TSAN ? n_tables - 1 : 0; pass < n_tables; pass++) {
            ci_kernels_force_table(tables[n_tables - 1 - pass]); // scalar first
            for (int t = 0; t < max_tok; t++) {
                for (int64_t o = 0; o < n_out; o++) {
                    const void *row = (const uint8_t *)w.data + (size_t)o * w.row_bytes;
                    float got = want[t * n_out + o] = ci_dot(type, row, x + t * n_in, n_in);
                    double exact, bound = dot_bound(type, row, x + t * n_in, n_in, &exact);
                    if (!(fabs(got - exact) <= bound))
                        FAIL_FIRST("%s t=%d o=%lld off the double reference", ci_type_name(type), t,
                                   (long long)o);
                }
            }
            if (pass > 0 && !UNDER_TSAN && is_quant(type) &&
                memcmp(want, scalar_y, (size_t)(max_tok * n_out) * 4) != 0)
                FAIL_FIRST("%s %s: SIMD and scalar differ", ci_kernels_isa(), ci_type_name(type));
            for (int p = 0; p < 4; p++) {
                for (int n_tok = 1; n_tok <= max_tok; n_tok++) {
                    if (max_tok > 20 && n_tok % 8 != 1 && n_tok != max_tok && n_tok != 24)
                        continue; // long batches: a sample of sizes (token-split task paths)
                    for (int64_t i = 0; i < (max_tok + 1) * n_out; i++)
                        y[i] = NAN;
                    CHECK1(matmul_guarded(pools[p], &w, x, n_tok, y));
                    if (memcmp(y, want, (size_t)(n_tok * n_out) * sizeof(float)) != 0)
                        FAIL_FIRST("%s %s n_in %lld n_out %lld pool %d n_tok %d: not bit-identical",
                                   ci_kernels_isa(), ci_type_name(type), (long long)n_in, (long long)n_out, p,
                                   n_tok);
                    CHECK1(isnan(y[n_tok * n_out])); // nothing written past n_tok rows
                }
            }
            if (pass == 0)
                memcpy(scalar_y, want, (size_t)(max_tok * n_out) * sizeof(float));
            // Token k alone vs. inside a batch of the other tokens in a shuffled order.
            for (int k = 0; k<max_tok; k += max_tok> 20 ? 7 : 1) {
                CHECK1(matmul_guarded(pools[2], &w, x + k * n_in, 1, y));
                int at = (k * 4 + 3) % max_tok;
                for (int s = 0, src = 0; s < max_tok; s++) {
                    if (s == at) {
                        memcpy(xb + s * n_in, x + k * n_in, (size_t)n_in * sizeof(float));
                        continue;
                    }
                    if (src == k)
                        src++;
                    memcpy(xb + s * n_in, x + ((src * 5) % max_tok) * n_in, (size_t)n_in * sizeof(float));
                    src++;
                }
                CHECK1(matmul_guarded(pools[3], &w, xb, max_tok, yb));
                CHECK1(memcmp(y, yb + at * n_out, (size_t)n_out * sizeof(float)) == 0);
            }
        }
        ci_free((void *)(uintptr_t)w.data);
    }
    ci_kernels_force_table(NULL);
    ci_free(x);
    ci_free(xb);
    ci_free(y);
    ci_free(yb);
    ci_free(want);
    ci_free(scalar_y);
}

TEST(matmul_bit_identical_across_threads_tiles_and_batches) {
    const struct mm_case cases[] = {
        {160, 203, 17, true}, // rows not a multiple of any tile, every batch size up to two 8-token tiles + 1
        {163, 37, 13, false}, // float rows with a tail (n mod 8 = 3)
        {4160, 21, 9, true},  // long rows: several k slices per tile (parked accumulators)
        {64, 24, 50, true},   // few rows, long batch: tasks split by tokens
        {7, 9, 7, false},     // a row shorter than one SIMD step
        {512, 37, 17, true},  // the 256-block types: two super-blocks, odd rows
        {4352, 21, 9, true},  // 17 super-blocks: several k slices
        {256, 24, 50, true},  // one super-block, long batch
    };
    struct ci_threadpool *pools[4] = {NULL, NULL, NULL, NULL}; // NULL, 1, 2, 3 threads
    for (int i = 1; i < 4; i++)
        ASSERT_STATUS(ci_threadpool_create(i, &pools[i], NULL), CI_OK);
    // F16/BF16 rows widened to F32 blocks above 8 tokens, with decode prefetching into L1 and into L2, then
    // F16/BF16 never widened (whichever settings this CPU's row picks; the last pass only runs the types that
    // setting concerns)
    const struct { int widen, prefetch_l2; } passes[3] = {{8, 0}, {8, 1}, {INT32_MAX, -1}};
    for (int pi = 0; pi < 3; pi++) {
        if ((UNDER_TSAN || UNDER_ASAN) && pi == 1)
            continue; // L2 prefetching: see UNDER_TSAN
        ci_kernels_force_f16_widen(passes[pi].widen);
        ci_kernels_force_decode_prefetch(passes[pi].prefetch_l2);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            matmul_case(&cases[i], pools, pi == 2);
    }
    ci_kernels_force_f16_widen(-1);
    ci_kernels_force_decode_prefetch(-1);
    for (int i = 1; i < 4; i++)
        ci_threadpool_free(pools[i]);
}

/* A group of matrices over one input (mixed weight kinds: Q8_K-, Q8- and float-activation types, so both
 * activation regions of the workspace are live at once) gives each matrix exactly ci_dot of its rows, for
 * decode and prefill batch sizes and every pool, within a workspace of exactly ci_matmul_group_work_bytes. */
TEST(matmul_group_equals_each_matmul) {
    const int64_t n_in = 512;
    const int max_tok = 9;
    // Four kinds of matrix, repeated up to the largest group (the MoE decode's gates and ups of 8 experts).
    const uint32_t kinds[][4] = {
        {CI_TYPE_Q4_K, CI_TYPE_Q6_K, CI_TYPE_Q8_0, CI_TYPE_F16},
        {CI_TYPE_Q8_0, CI_TYPE_Q4_0, CI_TYPE_Q5_K, CI_TYPE_Q4_K},
    };
    uint32_t types[2][CI_MATMUL_GROUP_MAX];
    int64_t n_out[CI_MATMUL_GROUP_MAX];
    for (int i = 0; i < CI_MATMUL_GROUP_MAX; i++) {
        types[0][i] = kinds[0][i % 4];
        types[1][i] = kinds[1][i % 4];
        n_out[i] = (int64_t[]){96, 32, 70, 200}[i % 4] + 16 * (i / 4);
    }
    struct ci_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int i = 1; i < 3; i++)
        ASSERT_STATUS(ci_threadpool_create(i + 1, &pools[i], NULL), CI_OK);
    struct ci_rng r;
    ci_rng_seed(&r, 7);
    float *x = ci_malloc((size_t)(max_tok * n_in) * sizeof(float));
    fill_normal(&r, x, max_tok * n_in, 1.0);
    for (size_t g = 0; g < sizeof types / sizeof types[0]; g++) {
        struct ci_tensor w[CI_MATMUL_GROUP_MAX];
        const struct ci_tensor *wp[CI_MATMUL_GROUP_MAX];
        float *y[CI_MATMUL_GROUP_MAX];
        for (int i = 0; i < CI_MATMUL_GROUP_MAX; i++) {
            w[i] = make_weights(&r, types[g][i], n_in, n_out[i]);
            wp[i] = &w[i];
            y[i] = ci_malloc((size_t)(max_tok * n_out[i]) * sizeof(float));
        }
        for (int n_w = 1; n_w <= CI_MATMUL_GROUP_MAX; n_w = n_w < 4                     ? n_w + 1
                                                            : n_w < CI_MATMUL_GROUP_MAX ? CI_MATMUL_GROUP_MAX
                                                                                        : n_w + 1) {
            size_t wb = ci_matmul_group_work_bytes(n_w, wp, max_tok);
            uint8_t *work = ci_malloc_aligned(wb + 64);
            for (int p = 0; p < 3; p++) {
                for (int n_tok = 1; n_tok <= max_tok; n_tok += 4) { // 1, 5 (GEMV shares), 9 (GEMM tiles)
                    memset(work + wb, 0xa5, 64);
                    ci_matmul_group(pools[p], n_w, wp, x, n_tok, y, work);
                    for (int i = 0; i < 64; i++)
                        CHECK1(work[wb + (size_t)i] == 0xa5);
                    for (int i = 0; i < n_w; i++)
                        for (int t = 0; t < n_tok; t++)
                            for (int64_t o = 0; o < n_out[i]; o++) {
                                const void *row = (const uint8_t *)w[i].data + (size_t)o * w[i].row_bytes;
                                float want = ci_dot(w[i].type, row, x + t * n_in, n_in);
                                if (memcmp(&want, &y[i][t * n_out[i] + o], sizeof want) != 0)
                                    FAIL_FIRST("group %zu of %d: %s t=%d o=%lld pool %d differs from ci_dot",
                                               g, n_w, ci_type_name(w[i].type), t, (long long)o, p);
                            }
                }
            }
            ci_free_aligned(work);
        }
        for (int i = 0; i < CI_MATMUL_GROUP_MAX; i++) {
            ci_free((void *)(uintptr_t)w[i].data);
            ci_free(y[i]);
        }
    }
    ci_free(x);
    for (int i = 1; i < 3; i++)
        ci_threadpool_free(pools[i]);
}

/* extreme: the int16 partial sums of the AVX2 packed kernels at their bounds: every code at its largest
 * magnitude (bytes all 0xff, or all 0 for IQ4_XS's -127; Q8_0: -128 and 127), scales 1, activations +-1
 * (quantized to +-127). */
static void extreme_blocks(struct ci_tensor *w, float *x, int64_t n) {
    const struct ci_type_traits *tt = ci_type_traits(w->type);
    int d_at, min_at;
    scale_fields(w->type, &d_at, &min_at);
    uint8_t *data = (uint8_t *)(uintptr_t)w->data;
    const uint16_t one = ci_fp32_to_fp16(1.0f);
    for (int64_t o = 0; o < w->ne[1]; o++)
        for (uint64_t b = 0; b < w->row_bytes / tt->type_size; b++) {
            uint8_t *blk = data + (size_t)o * w->row_bytes + b * tt->type_size;
            memset(blk, o % 2 ? 0xff : 0, tt->type_size);
            if (w->type == CI_TYPE_Q8_0) // -128 (|q| = 128 in the AVX2 sign trick) and 127
                memset(blk + 2, o % 2 ? 0x80 : 0x7f, 32);
            memcpy(blk + d_at, &one, 2);
            if (min_at >= 0)
                memcpy(blk + min_at, &one, 2);
        }
    for (int64_t i = 0; i < n; i++)
        x[i] = (i / w->ne[0]) % 2 ? -1.0f : 1.0f;
}

/* Weights packed at load (ci_pack) give ci_matmul exactly ci_dot's bits, for rows past the last whole
 * 16-row group too, at decode and prefill batch sizes and every pool; the packing holds the matrix's bytes
 * and no more.  For each kernel table this CPU runs; a table without a packed layout for a type has
 * ci_pack_bytes 0 for it. */
static void packed_case_table(int64_t n_in, bool extreme) {
    const int64_t n_out = 16 * 5 + 7;
    const int max_tok = 19;
    struct ci_threadpool *pools[3] = {NULL, NULL, NULL};
    for (int i = 1; i < 3; i++)
        ASSERT_STATUS(ci_threadpool_create(i + 1, &pools[i], NULL), CI_OK);
    struct ci_rng r;
    ci_rng_seed(&r, 11);
    float *x = ci_malloc((size_t)(max_tok * n_in) * sizeof(float));
    float *y = ci_malloc((size_t)(max_tok * n_out) * sizeof(float));
    fill_normal(&r, x, max_tok * n_in, 1.0);
    // AVX-512 packs every type below and F16/BF16, AVX2 the K-quants, Q8_0, Q4_0 and F16/BF16, the scalar
    // table none
    const bool avx512 = strcmp(ci_kernels_isa(), "avx512+vnni") == 0;
    const bool avx2 = strcmp(ci_kernels_isa(), "avx2+fma+f16c") == 0;
    for (int ti = 0; ti < N_TYPES + N_BLOCK_TYPES; ti++) {
        uint32_t type = ti < N_TYPES ? all_types[ti] : block_types[ti - N_TYPES];
        if (n_in % ci_type_traits(type)->block_size != 0)
            continue;
        struct ci_tensor w = make_weights(&r, type, n_in, n_out);
        if (extreme && type != CI_TYPE_MXFP4)
            extreme_blocks(&w, x, max_tok * n_in);
        size_t pb = ci_pack_bytes(&w);
        const bool kquant =
            type == CI_TYPE_Q4_K || type == CI_TYPE_Q5_K || type == CI_TYPE_Q6_K || type == CI_TYPE_IQ4_XS;
        bool want_packing =
            (avx2 && (kquant || type == CI_TYPE_Q8_0 || type == CI_TYPE_Q4_0 || type == CI_TYPE_F16 ||
                      type == CI_TYPE_BF16)) ||
            (avx512 && (kquant || type == CI_TYPE_Q8_0 || type == CI_TYPE_Q4_0 || type == CI_TYPE_Q5_0 ||
                        type == CI_TYPE_IQ4_NL || type == CI_TYPE_F16 || type == CI_TYPE_BF16));
        if (!want_packing) {
            CHECK1(pb == 0);
            ci_free((void *)(uintptr_t)w.data);
            continue;
        }
        CHECK1(pb == (size_t)(n_out / 16 * 16) * w.row_bytes);
        uint8_t *packed = ci_malloc_aligned(pb);
        ci_pack(&w, packed);
        w.packed = packed;
        // The packing made in parts (as the model's loader does, giving back each part's file pages) is
        // the same bytes.
        uint8_t *parts = ci_malloc_aligned(pb);
        memset(parts, 0x5a, pb);
        const int64_t edges[] = {0, 16, 48, n_out / 16 * 16};
        for (int k = 0; k < 3; k++)
            ci_pack_part(&w, parts, edges[k], edges[k + 1]);
        CHECK1(ci_pack_rows() == 16 && memcmp(parts, packed, pb) == 0);
        ci_free_aligned(parts);
        // 1-4 decode, 9, 14, 19; F16/BF16 every count (their tiles: one per count of a 12-token block)
        const bool every = type == CI_TYPE_F16 || type == CI_TYPE_BF16;
        for (int p = 0; p < 3; p++)
            for (int n_tok = 1; n_tok <= max_tok; n_tok += (n_tok < 4 || every ? 1 : 5)) {
                size_t wb = ci_matmul_work_bytes(type, n_in, n_tok);
                uint8_t *work = ci_malloc_aligned(wb);
                for (int64_t i = 0; i < (int64_t)n_tok * n_out; i++)
                    y[i] = NAN;
                ci_matmul(pools[p], &w, x, n_tok, y, work);
                for (int t = 0; t < n_tok; t++)
                    for (int64_t o = 0; o < n_out; o++) {
                        const void *row = (const uint8_t *)w.data + (size_t)o * w.row_bytes;
                        float want = ci_dot(type, row, x + t * n_in, n_in);
                        if (memcmp(&want, &y[t * n_out + o], sizeof want) != 0)
                            FAIL_FIRST("packed %s t=%d o=%lld pool %d n_tok %d differs from ci_dot",
                                       ci_type_name(type), t, (long long)o, p, n_tok);
                    }
                ci_free_aligned(work);
            }
        ci_free_aligned(packed);
        ci_free((void *)(uintptr_t)w.data);
    }
    ci_free(x);
    ci_free(y);
    for (int i = 1; i < 3; i++)
        ci_threadpool_free(pools[i]);
}

static void packed_case(int64_t n_in) {
    for (int ti = 0; ti < n_tables; ti++) {
        ci_kernels_force_table(tables[ti]);
        packed_case_table(n_in, false);
        packed_case_table(n_in, true);
    }
    ci_kernels_force_table(NULL);
}

TEST(matmul_packed_equals_dot) {
    // 5 32-blocks: groups not a multiple of 64 bytes; 1280: 5 super-blocks of the K-quants (Q6_K's groups
    // not a multiple of 64 bytes either, prefill slices of 4 super-blocks and a short one)
    const int64_t n_ins[] = {160, 320, 256, 1280};
    // with each prefetch the tuning table can pick (the bits must not depend on it), and with packed F16/BF16
    // rows both in their tiles and widened back to F32 rows (prefill; widen 0: from 1 token on)
    for (int l2 = 0; l2 < 2; l2++) {
        ci_kernels_force_decode_prefetch(l2);
        ci_kernels_force_f16_widen(l2 ? 0 : -1);
        for (size_t i = 0; i < sizeof n_ins / sizeof n_ins[0]; i++)
            packed_case(n_ins[i]);
    }
    ci_kernels_force_decode_prefetch(-1);
    ci_kernels_force_f16_widen(-1);
}

/* The packed F16/BF16 matmuls have a register tile for each token count of a 12-token block, over one, two
 * or four 16-row groups: every count from 1 to 25 (two whole blocks and one token) on a matrix whose tasks
 * hold several groups (one thread: 64 rows a task; two: 32) gives ci_dot's bits in every table. */
TEST(matmul_packed_float_every_tile) {
    const int64_t n_in = 160, n_out = 16 * 24 + 7;
    const int max_tok = 25;
    struct ci_threadpool *pool2 = NULL;
    ASSERT_STATUS(ci_threadpool_create(2, &pool2, NULL), CI_OK);
    struct ci_rng r;
    ci_rng_seed(&r, 47);
    float *x = ci_malloc((size_t)(max_tok * n_in) * sizeof(float));
    float *y = ci_malloc((size_t)(max_tok * n_out) * sizeof(float));
    fill_normal(&r, x, max_tok * n_in, 1.0);
    const uint32_t types[] = {CI_TYPE_F16, CI_TYPE_BF16};
    for (int ti = 0; ti < n_tables; ti++) {
        if (!tables[ti]->mm_packed[CI_TYPE_F16])
            continue;
        ci_kernels_force_table(tables[ti]);
        for (int k = 0; k < 2; k++) {
            struct ci_tensor w = make_weights(&r, types[k], n_in, n_out);
            uint8_t *packed = ci_malloc_aligned(ci_pack_bytes(&w));
            ci_pack(&w, packed);
            w.packed = packed;
            for (int p = 0; p < 2; p++)
                for (int n_tok = 1; n_tok <= max_tok; n_tok++) {
                    uint8_t *work = ci_malloc_aligned(ci_matmul_work_bytes(types[k], n_in, n_tok));
                    for (int64_t i = 0; i < (int64_t)n_tok * n_out; i++)
                        y[i] = NAN;
                    ci_matmul(p ? pool2 : NULL, &w, x, n_tok, y, work);
                    for (int t = 0; t < n_tok; t++)
                        for (int64_t o = 0; o < n_out; o++) {
                            const void *row = (const uint8_t *)w.data + (size_t)o * w.row_bytes;
                            float want = ci_dot(types[k], row, x + t * n_in, n_in);
                            if (memcmp(&want, &y[t * n_out + o], sizeof want) != 0)
                                FAIL_FIRST(
                                    "%s: packed %s t=%d o=%lld threads %d n_tok %d differs from ci_dot",
                                    tables[ti]->isa, ci_type_name(types[k]), t, (long long)o, p + 1, n_tok);
                        }
                    ci_free_aligned(work);
                }
            ci_free_aligned(packed);
            ci_free((void *)(uintptr_t)w.data);
        }
    }
    ci_kernels_force_table(NULL);
    ci_threadpool_free(pool2);
    ci_free(x);
    ci_free(y);
}

/* The tables pack F16/BF16 rows with 16-bit transposes (fpack_avx2.c); the bytes are those of the layout's
 * definition, ci_pk_float_rows, for each table's residues: rows longer than a unit's 16 elements and shorter,
 * padded rows (row_bytes past the row), and group ranges that start past 0. */
TEST(float_pack_equals_definition) {
    const int64_t n_ins[] = {16, 32, 48, 272};
    struct ci_rng r;
    ci_rng_seed(&r, 31);
    for (int t = 0; t < n_tables; t++) {
        const struct ci_dot_table *tab = tables[t];
        if (!tab->mm_packed[CI_TYPE_F16])
            continue;
        for (size_t i = 0; i < sizeof n_ins / sizeof n_ins[0]; i++) {
            const int64_t n_in = n_ins[i], groups = 3;
            const size_t row_bytes = (size_t)n_in * 2 + 6 * i,
                         bytes = (size_t)groups * CI_PK_ROWS * (size_t)n_in * 2;
            uint8_t *w = ci_malloc(row_bytes * groups * CI_PK_ROWS), *want = ci_malloc(bytes),
                    *got = ci_malloc(bytes);
            for (size_t b = 0; b < row_bytes * groups * CI_PK_ROWS; b++)
                w[b] = (uint8_t)(ci_rng_u64(&r) >> 32);
            memset(want, 0xa5, bytes);
            memset(got, 0xa5, bytes);
            ci_pk_float_rows(tab->float_residues, w, row_bytes, n_in, 1, groups, want);
            tab->pack(CI_TYPE_F16, w, row_bytes, n_in, 1, groups, got);
            if (memcmp(want, got, bytes) != 0)
                FAIL_FIRST("%s: packed F16 rows of %lld elements differ from ci_pk_float_rows", tab->isa,
                           (long long)n_in);
            ci_free(w);
            ci_free(want);
            ci_free(got);
        }
    }
}

/* Every table's float -> half row conversion (the f16 KV cache's stores) is ci_fp32_to_fp16 on each element:
 * random values over the whole range, exact ties, subnormals, overflow to inf, inf and NaN, at every length
 * (SIMD steps and tails). */
TEST(f32_to_f16_row_matches_scalar) {
    enum { N = 203 };
    float x[N];
    uint16_t got[N];
    struct ci_rng r;
    ci_rng_seed(&r, 5);
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < N; i++) {
            uint32_t bits = (uint32_t)ci_rng_u64(&r);
            memcpy(&x[i], &bits, 4); // any float, NaNs and infs included
            if (i % 5 == 1)
                x[i] = (float)ci_rng_normal(&r) * 100.0f;
            if (i % 7 == 2) // a tie between two halves: 1 + (2k + 1) * 2^-11
                x[i] = 1.0f + (float)(2 * (i % 50) + 1) / 2048.0f;
            if (i % 11 == 3) // subnormal halves
                x[i] = (float)ci_rng_normal(&r) * 1e-6f;
            if (i % 13 == 4)
                x[i] = 65520.0f * (i % 2 ? 1.0f : -1.0f); // rounds to inf
        }
        for (int t = 0; t < n_tables; t++) {
            ci_kernels_force_table(tables[t]);
            for (int n = round % 9; n <= N; n += 97) {
                memset(got, 0xab, sizeof got);
                ci_f32_to_f16_row(x, got, n);
                for (int i = 0; i < n; i++)
                    if (got[i] != ci_fp32_to_fp16(x[i]))
                        FAIL_FIRST("%s: %a -> %04x, want %04x", tables[t]->isa, (double)x[i], got[i],
                                   ci_fp32_to_fp16(x[i]));
                CHECK1(n == N || got[n] == 0xabab); // nothing written past n
            }
        }
    }
    ci_kernels_force_table(NULL);
}

TEST(matmul_work_bytes) {
    CHECK1(ci_matmul_work_bytes(CI_TYPE_F32, 4096, 512) == 0);
    // F16/BF16: the SIMD tables' packed rows read the activations permuted into blocks of 12 tokens (a tile
    // reads its own tokens' lanes only: no padding)
    for (int t = 0; t < n_tables; t++) {
        ci_kernels_force_table(tables[t]);
        const bool packs = tables[t]->mm_packed[CI_TYPE_F16] != NULL;
        CHECK1(packs == (strcmp(tables[t]->isa, "scalar") != 0));
        CHECK1(ci_matmul_work_bytes(CI_TYPE_F16, 4096, 1) == (packs ? 12 * 4096 * sizeof(float) : 0));
        CHECK1(ci_matmul_work_bytes(CI_TYPE_BF16, 4096, 13) == (packs ? 24 * 4096 * sizeof(float) : 0));
        CHECK1(ci_matmul_work_bytes(CI_TYPE_F16, 4100, 1) == 0); // not packed: rows of 16-unit multiples only
    }
    ci_kernels_force_table(NULL);
    // Q8 activations: n_in int8 per token plus a float scale, an int32 sum and a float s per block and token
    // slot.
    size_t one = ci_matmul_work_bytes(CI_TYPE_Q4_0, 4096, 1),
           many = ci_matmul_work_bytes(CI_TYPE_Q8_0, 4096, 100);
    CHECK1(one >= 4096 + 3 * 128 * 4 && one < 4096 + 3 * 128 * 4 * 8 + 256);
    CHECK1(many >= 100 * 4096 + 3 * 128 * 100 * 4 && many < 100 * 4096 + 3 * 128 * 104 * 4 + 256);
    CHECK1(ci_matmul_work_bytes(CI_TYPE_Q8_0, (int64_t)1 << 62, 1 << 30) == SIZE_MAX);
}

/* Rotates by the formula in kernels.h, in double. */
static void rope_ref(double *x, int n_head, int head_dim, int rope_dim, int pos, double base, bool neox) {
    for (int h = 0; h < n_head; h++) {
        double *xh = x + h * head_dim;
        for (int i = 0; i < rope_dim / 2; i++) {
            double theta = pos * pow(base, -2.0 * i / rope_dim);
            int a = neox ? i : 2 * i, b = neox ? i + rope_dim / 2 : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * cos(theta) - x1 * sin(theta);
            xh[b] = x0 * sin(theta) + x1 * cos(theta);
        }
    }
}

TEST(rope_matches_double_formula) {
    enum { N_HEAD = 3, HD = 64 };
    const int positions[] = {0, 1, 17, 4095, 100000};
    const int rope_dims[] = {64, 32};
    const float bases[] = {10000.0f, 1000000.0f};
    struct ci_rng r;
    ci_rng_seed(&r, 7);
    float x[N_HEAD * HD], orig[N_HEAD * HD];
    double ref[N_HEAD * HD];
    for (int neox = 0; neox < 2; neox++)
        for (int rd = 0; rd < 2; rd++)
            for (int bi = 0; bi < 2; bi++)
                for (int pi = 0; pi < 5; pi++) {
                    fill_normal(&r, orig, N_HEAD * HD, 1.0);
                    memcpy(x, orig, sizeof x);
                    for (int i = 0; i < N_HEAD * HD; i++)
                        ref[i] = orig[i];
                    ci_rope(x, N_HEAD, HD, rope_dims[rd], positions[pi], bases[bi], neox);
                    rope_ref(ref, N_HEAD, HD, rope_dims[rd], positions[pi], bases[bi], neox);
                    for (int h = 0; h < N_HEAD; h++)
                        for (int d = 0; d < HD; d++) {
                            int i = h * HD + d;
                            if (d >= rope_dims[rd]) {
                                CHECK1(same_bits(x[i], orig[i])); // past rope_dim: untouched
                            } else if (!(fabs(x[i] - ref[i]) <= 1e-6 * (1.0 + fabs(ref[i])))) {
                                FAIL_FIRST("neox=%d rope_dim=%d pos=%d h=%d d=%d: %.9g vs %.9g", neox,
                                           rope_dims[rd], positions[pi], h, d, x[i], ref[i]);
                                return;
                            }
                            if (positions[pi] == 0)
                                CHECK1(same_bits(x[i], orig[i]));
                        }
                }
    // The two pairings really differ: normal rotates (x0, x1), NeoX (x0, x32) for head_dim 64.
    float a[HD] = {0}, b[HD] = {0};
    a[1] = b[1] = 1.0f;
    ci_rope(a, 1, HD, HD, 1, 10000.0f, false); // i=0: theta = 1 → (x0, x1) = (-sin 1, cos 1)
    ci_rope(b, 1, HD, HD, 1, 10000.0f, true);  // x1 pairs with x33 at theta = 10000^(-2/64)
    ASSERT_NEAR(a[0], -sin(1.0), 1e-7);
    ASSERT_NEAR(a[1], cos(1.0), 1e-7);
    double t1 = pow(10000.0, -2.0 / 64);
    ASSERT_NEAR(b[1], cos(t1), 1e-7);
    ASSERT_NEAR(b[33], sin(t1), 1e-7);
    CHECK1(b[0] == 0.0f);
}

/* Scaled RoPE (llama3 frequency divisors, linear position scaling): theta_i = pos * scale * base^(-2i/d) /
 * ff[i], written out here independently; unscaled ci_rope_ext is ci_rope bit for bit. */
TEST(rope_ext_scaled_matches_double_formula) {
    enum { N_HEAD = 2, HD = 64 };
    const int positions[] = {0, 3, 99, 8191, 100000};
    const float scales[] = {1.0f, 0.25f};
    struct ci_rng r;
    ci_rng_seed(&r, 11);
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++) // llama3-like: 1 at high frequencies, up to 32 at low ones
        ff[i] = i < 8 ? 1.0f : i > 24 ? 32.0f : 1.0f + 31.0f * (float)(i - 8) / 16.0f;
    float x[N_HEAD * HD], y[N_HEAD * HD], orig[N_HEAD * HD];
    double ref[N_HEAD * HD];
    for (int neox = 0; neox < 2; neox++)
        for (int si = 0; si < 2; si++)
            for (int use_ff = 0; use_ff < 2; use_ff++)
                for (int pi = 0; pi < 5; pi++) {
                    fill_normal(&r, orig, N_HEAD * HD, 1.0);
                    memcpy(x, orig, sizeof x);
                    ci_rope_ext(x, N_HEAD, HD, HD, positions[pi], 500000.0f, neox, use_ff ? ff : NULL,
                                scales[si]);
                    for (int h = 0; h < N_HEAD; h++)
                        for (int i = 0; i < HD / 2; i++) {
                            double theta = positions[pi] * (double)scales[si] * pow(500000.0, -2.0 * i / HD) /
                                           (use_ff ? ff[i] : 1.0);
                            int a = neox ? i : 2 * i, b = neox ? i + HD / 2 : 2 * i + 1;
                            double x0 = orig[h * HD + a], x1 = orig[h * HD + b];
                            ref[h * HD + a] = x0 * cos(theta) - x1 * sin(theta);
                            ref[h * HD + b] = x0 * sin(theta) + x1 * cos(theta);
                        }
                    for (int i = 0; i < N_HEAD * HD; i++)
                        if (!(fabs(x[i] - ref[i]) <= 1e-6 * (1.0 + fabs(ref[i])))) {
                            FAIL_FIRST("neox=%d scale=%g ff=%d pos=%d i=%d: %.9g vs %.9g", neox,
                                       (double)scales[si], use_ff, positions[pi], i, x[i], ref[i]);
                            return;
                        }
                    memcpy(x, orig, sizeof x);
                    memcpy(y, orig, sizeof y);
                    ci_rope_ext(x, N_HEAD, HD, HD, positions[pi], 500000.0f, neox, NULL, 1.0f);
                    ci_rope(y, N_HEAD, HD, HD, positions[pi], 500000.0f, neox);
                    CHECK1(memcmp(x, y, sizeof x) == 0);
                }
    // The factors matter: the low-frequency pair of position 8191 rotates 32 times less.
    float a[HD] = {0}, b[HD] = {0};
    a[HD - 2] = b[HD - 2] = 1.0f;
    ci_rope_ext(a, 1, HD, HD, 8191, 500000.0f, false, ff, 1.0f);
    ci_rope_ext(b, 1, HD, HD, 8191, 500000.0f, false, NULL, 1.0f);
    double t = 8191.0 * pow(500000.0, -2.0 * 31 / HD);
    ASSERT_NEAR(a[HD - 2], cos(t / 32.0), 1e-6);
    ASSERT_NEAR(b[HD - 2], cos(t), 1e-6);
}

/* YaRN as its reference implementation defines it (jquesnelle/yarn, transformers' _compute_yarn_parameters),
 * written out here: the correction dimension of a rotation count b is d ln(L / (2 pi b)) / (2 ln base); low =
 * floor(dim(beta_fast)) >= 0, high = ceil(dim(beta_slow)) <= d - 1; pair i keeps its frequency with weight
 * 1 - clamp((i - low) / (high - low)) and is divided by the factor s with the rest; cos and sin are scaled by
 * mscale.  Also: the correction range for Llama-2-style numbers, partial rotary (dimensions past rope_dim
 * untouched), and the magnitude scaling multiplying the rotated pair's norm. */
TEST(rope_yarn_matches_definition) {
    enum { N_HEAD = 2, HD = 64 };
    float dims[2];
    // L = 4096, base 10000, d = 128: dim(32) = 128 ln(4096 / 201.06) / 18.42 = 20.94; dim(1) = 45.0x.
    ci_rope_yarn_corr_dims(128, 4096, 10000.0f, 32.0f, 1.0f, dims);
    CHECK1(dims[0] == 20.0f && dims[1] == 46.0f);
    ci_rope_yarn_corr_dims(32, 128, 10000.0f, 32.0f, 1.0f, dims); // dim(32) < 0: clamped to 0
    CHECK1(dims[0] == 0.0f && dims[1] == 6.0f);
    const int rope_dims[] = {64, 48};
    const int positions[] = {0, 5, 99, 3000};
    const double s = 8.0, L = 256.0, base = 10000.0, mscale = 1.3;
    struct ci_rng r;
    ci_rng_seed(&r, 12);
    float x[N_HEAD * HD], orig[N_HEAD * HD];
    for (int neox = 0; neox < 2; neox++)
        for (int rd = 0; rd < 2; rd++)
            for (int pi = 0; pi < 4; pi++) {
                int d = rope_dims[rd];
                double dim_fast = d * log(L / (32.0 * 2 * M_PI)) / (2 * log(base)),
                       dim_slow = d * log(L / (1.0 * 2 * M_PI)) / (2 * log(base));
                double low = fmax(floor(dim_fast), 0.0), high = fmin(ceil(dim_slow), d - 1.0);
                struct ci_rope_params p = {.rope_dim = d,
                                           .base = (float)base,
                                           .neox = neox,
                                           .freq_scale = (float)(1.0 / s),
                                           .ext_factor = 1.0f,
                                           .mscale = (float)mscale};
                ci_rope_yarn_corr_dims(d, (int)L, (float)base, 32.0f, 1.0f, dims);
                CHECK1(dims[0] == (float)low && dims[1] == (float)high);
                p.corr_low = dims[0];
                p.corr_high = dims[1];
                fill_normal(&r, orig, N_HEAD * HD, 1.0);
                memcpy(x, orig, sizeof x);
                ci_rope_apply(x, N_HEAD, HD, positions[pi], &p);
                for (int h = 0; h < N_HEAD; h++) {
                    for (int i = 0; i < d / 2; i++) {
                        double freq = pow(base, -2.0 * i / d);
                        double keep = 1.0 - fmin(fmax((i - low) / (high - low), 0.0), 1.0);
                        double theta = positions[pi] * (freq / s * (1.0 - keep) + freq * keep);
                        int a = neox ? i : 2 * i, b = neox ? i + d / 2 : 2 * i + 1;
                        double x0 = orig[h * HD + a], x1 = orig[h * HD + b];
                        double ra = mscale * (x0 * cos(theta) - x1 * sin(theta)),
                               rb = mscale * (x0 * sin(theta) + x1 * cos(theta));
                        if (!(fabs(x[h * HD + a] - ra) <= 1e-6 * (1.0 + fabs(ra))) ||
                            !(fabs(x[h * HD + b] - rb) <= 1e-6 * (1.0 + fabs(rb)))) {
                            FAIL_FIRST("neox=%d rope_dim=%d pos=%d h=%d i=%d", neox, d, positions[pi], h, i);
                            return;
                        }
                    }
                    for (int j = d; j < HD; j++) // partial rotary: the rest passes through
                        CHECK1(x[h * HD + j] == orig[h * HD + j]);
                }
            }
}

TEST(rmsnorm_matches_double) {
    enum { N = 4096 };
    static float x[N], w[N], out[N];
    struct ci_rng r;
    ci_rng_seed(&r, 11);
    const float eps[] = {1e-5f, 1e-6f};
    for (int k = 0; k < 2; k++) {
        fill_normal(&r, x, N, k ? 100.0 : 1.0);
        fill_normal(&r, w, N, 1.0);
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[i] * x[i];
        double inv = 1.0 / sqrt(ss / N + (double)eps[k]);
        ci_rmsnorm(out, x, w, N, eps[k]);
        for (int i = 0; i < N; i++) {
            double want = x[i] * inv * w[i];
            if (!(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-30)) {
                FAIL_FIRST("i=%d %.9g vs %.9g", i, out[i], want);
                return;
            }
        }
        ci_rmsnorm(x, x, w, N, eps[k]); // in place
        CHECK1(memcmp(x, out, sizeof out) == 0);
    }
    // eps dominates a zero vector: output zero, not NaN
    float z[8] = {0}, one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    ci_rmsnorm(z, z, one, 8, 1e-5f);
    CHECK1(z[0] == 0.0f && z[7] == 0.0f);
}

/* The SIMD tables' rmsnorm bit for bit against the scalar loop: whole and partial vectors at every offset
 * modulo 16, rows of decode's sizes, inputs from tiny to huge (squares far outside float's range), in place. */
TEST(rmsnorm_tables_agree) {
    enum { N = 4200 };
    static float x[N], w[N], want[N], got[2 * N];
    struct ci_rng r;
    ci_rng_seed(&r, 12);
    const double scales[] = {1.0, 1e-20, 3e37};
    const int sizes[] = {576, 2048, 2051, 4099};
    for (int k = 0; k < 3; k++) {
        fill_normal(&r, x, N, scales[k]);
        fill_normal(&r, w, N, 1.0);
        x[5] = 0.0f;
        for (int pass = 0; pass < n_tables - 1; pass++)
            for (int off = 0; off < 16; off++)
                for (int n = 1; n <= 44 + 4; n++) {
                    const int len = n <= 44 ? n : sizes[n - 45];
                    ci_kernels_force_table(tables[n_tables - 1]);
                    ci_rmsnorm(want, x + off, w + off, len, 1e-6f);
                    ci_kernels_force_table(tables[pass]);
                    ci_rmsnorm(got, x + off, w + off, len, 1e-6f);
                    memcpy(got + len, x + off, (size_t)len * sizeof *got); // in place, on a copy
                    ci_rmsnorm(got + len, got + len, w + off, len, 1e-6f);
                    if (memcmp(got, want, (size_t)len * sizeof *got) != 0 ||
                        memcmp(got + len, want, (size_t)len * sizeof *got) != 0) {
                        FAIL_FIRST("%s scale %g off %d n %d differs from scalar", tables[pass]->isa,
                                   scales[k], off, len);
                        ci_kernels_force_table(NULL);
                        return;
                    }
                }
    }
    ci_kernels_force_table(NULL);
}

TEST(softmax_matches_double) {
    enum { N = 1000 };
    static float x[N];
    static double ref[N];
    struct ci_rng r;
    ci_rng_seed(&r, 13);
    const double scales[] = {1.0, 10.0, 1e4};
    for (int k = 0; k < 3; k++) {
        fill_normal(&r, x, N, scales[k]);
        x[17] = -INFINITY; // masked entry
        double max = -INFINITY, sum = 0;
        for (int i = 0; i < N; i++)
            max = x[i] > max ? x[i] : max;
        for (int i = 0; i < N; i++)
            sum += ref[i] = exp((double)x[i] - max);
        ci_softmax(x, N);
        double total = 0;
        for (int i = 0; i < N; i++) {
            double want = ref[i] / sum;
            total += x[i];
            if (!(fabs(x[i] - want) <= 1e-6 * want + 1e-12)) {
                FAIL_FIRST("scale %g i=%d %.9g vs %.9g", scales[k], i, x[i], want);
                return;
            }
        }
        CHECK1(x[17] == 0.0f);
        ASSERT_NEAR(total, 1.0, 1e-5);
    }
    float one[1] = {123.0f};
    ci_softmax(one, 1);
    CHECK1(one[0] == 1.0f);
}

/* A gated activation (SwiGLU, GeGLU) in every table (scalar last) against its formula in double, within
 * rtol * |want| + atol, and the SIMD tables bit for bit against the scalar one over whole and partial vectors
 * (n = 1..40 and all n) at every offset modulo 16.  g0: the gate inputs, g: scratch, out: the scalar
 * table's result (for the caller's checks of special values).  Returns with the default table selected. */
static void glu_tables_agree(void (*fn)(float *, const float *, int), double (*want_of)(double, double),
                             const float *g0, const float *u, float *g, float *out, int n_all, double rtol,
                             double atol) {
    for (int pass = n_tables - 1; pass >= 0; pass--) {
        ci_kernels_force_table(tables[pass]);
        memcpy(g, g0, (size_t)n_all * sizeof *g);
        fn(g, u, n_all);
        for (int i = 0; i < n_all; i++) {
            double want = want_of(g0[i], u[i]);
            if (!(fabs(g[i] - want) <= rtol * fabs(want) + atol)) {
                FAIL_FIRST("%s i=%d g=%g: %.9g vs %.9g", tables[pass]->isa, i, g0[i], g[i], want);
                break;
            }
        }
        if (pass == n_tables - 1) {
            memcpy(out, g, (size_t)n_all * sizeof *g);
            continue;
        }
        CHECK1(memcmp(g, out, (size_t)n_all * sizeof *g) == 0);
        for (int off = 0; off < 16; off++)
            for (int n = 1; n <= 40; n++) {
                memcpy(g, g0, (size_t)n_all * sizeof *g);
                fn(g + off, u + off, n);
                bool same = memcmp(g + off, out + off, (size_t)n * sizeof(float)) == 0 &&
                            memcmp(g, g0, (size_t)off * sizeof(float)) == 0 &&
                            memcmp(g + off + n, g0 + off + n, (size_t)(n_all - off - n) * sizeof(float)) == 0;
                if (!same) {
                    FAIL_FIRST("%s off=%d n=%d differs from scalar", tables[pass]->isa, off, n);
                    break;
                }
            }
    }
    ci_kernels_force_table(NULL);
}

static double silu_double(double g, double u) {
    return g / (1.0 + exp(-g)) * u;
}

static double gelu_tanh_double(double x, double u) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u;
}

TEST(silu_mul_matches_double) {
    enum { N = 1024 };
    static float g[N], u[N], g0[N], out[N];
    struct ci_rng r;
    ci_rng_seed(&r, 17);
    fill_normal(&r, g0, N, 4.0);
    fill_normal(&r, u, N, 2.0);
    g0[0] = -100.0f, g0[1] = 100.0f, g0[2] = -1e4f, g0[3] = 0.0f, g0[4] = 1e4f;
    g0[5] = -87.5f, g0[6] = 88.5f, g0[7] = -88.0f, g0[8] = 87.0f, g0[9] = -0.0f, g0[10] = 1e-30f,
    g0[11] = -20.0f;
    glu_tables_agree(ci_silu_mul, silu_double, g0, u, g, out, N, 1e-6, 1e-30);
    CHECK1(!isnan(out[2]) && out[3] == 0.0f && out[1] == 100.0f * u[1]);
}

/* GeGLU's tanh-form GeLU, and a few known values. */
TEST(gelu_mul_matches_double) {
    enum { N = 512 };
    static float g[N], u[N], g0[N], out[N];
    struct ci_rng r;
    ci_rng_seed(&r, 23);
    fill_normal(&r, g0, N, 3.0);
    fill_normal(&r, u, N, 2.0);
    g0[0] = 0.0f, g0[1] = 30.0f, g0[2] = -30.0f, g0[3] = 1.0f, g0[4] = -1e4f, g0[5] = 1e4f, g0[6] = -1e-30f;
    g0[7] = 5.0f, g0[8] = -5.0f, g0[9] = 1e20f, g0[10] = -1e20f;
    glu_tables_agree(ci_gelu_mul, gelu_tanh_double, g0, u, g, out, N, 1e-5, 1e-6);
    CHECK1(out[0] == 0.0f && out[1] == 30.0f * u[1] && fabs(out[2]) < 1e-20 && out[5] == 1e4f * u[5]);
    CHECK1(fabs(out[3] / u[3] - 0.8411920) < 1e-6); // gelu_tanh(1)
}

TEST(argmax_first_of_ties) {
    float a[] = {-5.0f, -1.0f, -3.0f, -1.0f};
    ASSERT_EQ_I64(ci_argmax(a, 4), 1);
    float b[] = {2.0f, 7.0f, 7.0f, 1.0f, 7.0f};
    ASSERT_EQ_I64(ci_argmax(b, 5), 1);
    float c[] = {-INFINITY, -1e30f};
    ASSERT_EQ_I64(ci_argmax(c, 2), 1);
    float d[] = {3.0f};
    ASSERT_EQ_I64(ci_argmax(d, 1), 0);
    float e[] = {9.0f, 9.0f};
    ASSERT_EQ_I64(ci_argmax(e, 2), 0);
}

/* The definition: the plain scan, the first of equal maxima, NaN never winning (NaN x[0] stays). */
static int scan_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

TEST(argmax_equals_scan) {
    static float x[49152 + 17];
    uint64_t st = 7;
    const int lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 49152, 49152 + 17};
    for (int rep = 0; rep < 40; rep++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int n = lens[li];
            for (int i = 0; i < n; i++) {
                st = st * 6364136223846793005ULL + 1442695040888963407ULL;
                uint32_t r = (uint32_t)(st >> 33);
                // few distinct values: many ties; some NaN, -inf, +-0 (rep-dependent mix)
                switch ((r >> 20) % (rep % 4 == 0 ? 9 : 40)) {
                case 0:
                    x[i] = NAN;
                    break;
                case 1:
                    x[i] = -INFINITY;
                    break;
                case 2:
                    x[i] = -0.0f;
                    break;
                case 3:
                    x[i] = 0.0f;
                    break;
                default:
                    x[i] = (float)((int)(r % 64) - 32) * (rep % 2 ? 0.25f : 1e-3f);
                }
            }
            CHECK1(ci_argmax(x, n) == scan_argmax(x, n));
        }
}

/* ---- attention ---- */

/* The batch mixes prefill runs (consecutive positions of one sequence, grouped: seq 0 at 10..36 across two
 * chunk edges, seq 2 at 2..9, seq 1 at 2..3) with lone decode-like tokens. */
enum { ATT_SEQS = 3, ATT_TOKENS = 41, ATT_MAX_SEQS = 4, ATT_MAX_TOKENS = 64 };
static const int att_seq_len_short[ATT_SEQS] = {37, 5, 20}; // positions written
static const int att_tok_seq_short[ATT_TOKENS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
                                                  1, 2, 0, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1};
static const int att_tok_pos_short[ATT_TOKENS] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
                                                  24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 0,
                                                  4,  19, 0,  2,  3,  4,  5,  6,  7,  8,  9,  2,  3};

/* Long contexts (the kernel cuts them into segments of 256 positions, merged by log-sum-exp, and splits a
 * decode over threads by segment): lengths that are no multiple of a block size or of 256; lone tokens at,
 * around and past segment edges (the 255 / 256 pair, 517, 599), and prefill runs that cross an edge
 * (seq 2 at 250..262, seq 1 at 510..515), so some rows of a run join at the second segment. */
enum { ATT_LONG_SEQS = 3, ATT_LONG_TOKENS = 25 };
static const int att_seq_len_long[ATT_LONG_SEQS] = {600, 531, 300};
static const int att_tok_seq_long[ATT_LONG_TOKENS] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                      2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
static const int att_tok_pos_long[ATT_LONG_TOKENS] = {599, 256, 255, 517, 530, 510, 511, 512, 513,
                                                      514, 515, 250, 251, 252, 253, 254, 255, 256,
                                                      257, 258, 259, 260, 261, 262, 299};

/* The batch the cases run on (the short one unless a test switches). */
static int att_n_seqs = ATT_SEQS, att_n_tokens = ATT_TOKENS;
static const int *att_seq_len = att_seq_len_short, *att_tok_seq = att_tok_seq_short,
                 *att_tok_pos = att_tok_pos_short;

struct att_case {
    int n_head, n_kv_head, head_dim, block_size;
};
static uint32_t att_type = CI_TYPE_F32; // KV element type of the cases run
// Optional features of the cases run (0 / NULL: off): sliding window, logit soft-cap, per-head sinks.
static int att_window = 0;
static float att_softcap = 0.0f;
static const float *att_sinks = NULL;
static const float att_sink_values[16] = {0.5f,  -1.0f, 2.0f, 0.0f,  1.5f,  -3.0f, 3.0f,  0.25f,
                                          -0.5f, 1.0f,  4.0f, -2.0f, 0.75f, 2.5f,  -1.5f, 0.1f};
#define ATT_MAX_HEADS 72 // the most query heads of a case (attention_paged_cases)
static float
    att_sinks_all[ATT_MAX_HEADS]; // att_sink_values repeated with an offset per repeat (att_sinks_fill)

static void att_sinks_fill(void) {
    for (int h = 0; h < ATT_MAX_HEADS; h++)
        att_sinks_all[h] = att_sink_values[h % 16] + 0.125f * (float)(h / 16);
}

static void attn_reference(const struct att_case *c, const float *q, double **kc, double **vc, float scale,
                           double *out) {
    int hd = c->head_dim, group = c->n_head / c->n_kv_head;
    int max_pos = 0;
    for (int t = 0; t < att_n_tokens; t++)
        max_pos = att_tok_pos[t] > max_pos ? att_tok_pos[t] : max_pos;
    double *sc = ci_malloc((size_t)(max_pos + 1) * sizeof(double));
    for (int t = 0; t < att_n_tokens; t++) {
        int s = att_tok_seq[t], pos = att_tok_pos[t];
        for (int h = 0; h < c->n_head; h++) {
            int kvh = h / group;
            const float *qh = q + ((size_t)t * c->n_head + h) * hd;
            // Straight from the definitions: keys in (pos - window, pos]; s = cap tanh(scale q.k / cap); the
            // sink's e^x joins the denominator only.
            int lo = att_window > 0 && pos - att_window + 1 > 0 ? pos - att_window + 1 : 0;
            double max = att_sinks ? att_sinks[h] : -INFINITY, sum = 0;
            for (int p = lo; p <= pos; p++) {
                const double *k = kc[s] + ((size_t)p * c->n_kv_head + kvh) * hd;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)qh[i] * k[i];
                sc[p] = d * scale;
                if (att_softcap > 0.0f)
                    sc[p] = att_softcap * tanh(sc[p] / att_softcap);
                max = sc[p] > max ? sc[p] : max;
            }
            for (int p = lo; p <= pos; p++)
                sum += sc[p] = exp(sc[p] - max);
            if (att_sinks)
                sum += exp(att_sinks[h] - max);
            double *o = out + ((size_t)t * c->n_head + h) * hd;
            for (int i = 0; i < hd; i++)
                o[i] = 0;
            for (int p = lo; p <= pos; p++) {
                const double *v = vc[s] + ((size_t)p * c->n_kv_head + kvh) * hd;
                for (int i = 0; i < hd; i++)
                    o[i] += sc[p] / sum * v[i];
            }
        }
    }
    ci_free(sc);
}

/* keep[pass] (may be NULL) receives the batch output of table `pass`.  The data depend on the heads and
 * head_dim only (the block permutation has its own stream), so cases that differ in block size alone must
 * produce the same bits. */
static void attn_case_run(const struct att_case *c, struct ci_threadpool *const *pools /* 1..4 threads */,
                          float **keep) {
    struct ci_rng r, rp;
    ci_rng_seed(&r, 1000 + (uint64_t)(c->n_head * 131 + c->head_dim * 7));
    ci_rng_seed(&rp, 77 + (uint64_t)c->block_size);
    int hd = c->head_dim, bs = c->block_size;
    int n_blk[ATT_MAX_SEQS], total = 0;
    for (int s = 0; s < att_n_seqs; s++)
        total += n_blk[s] = (att_seq_len[s] + bs - 1) / bs;
    int pool_blocks = total + 5; // a few blocks no sequence owns
    size_t row_bytes = ci_kv_row_bytes(att_type, hd);
    size_t per_block = (size_t)c->n_kv_head * bs * row_bytes; // bytes
    unsigned char *k = ci_malloc(pool_blocks * per_block), *v = ci_malloc(pool_blocks * per_block);
    float *kf = ci_malloc(hd * sizeof(float)), *vf = ci_malloc(hd * sizeof(float));
    int32_t *perm = ci_malloc(pool_blocks * sizeof(int32_t));
    size_t qn = (size_t)att_n_tokens * c->n_head * hd;
    float *q = ci_malloc(qn * sizeof(float)), *out = ci_malloc(qn * sizeof(float));
    float *out2 = ci_malloc(qn * sizeof(float)), *out1 = ci_malloc(hd * c->n_head * sizeof(float));
    float *q2 = ci_malloc(qn * sizeof(float));
    double *ref = ci_malloc(qn * sizeof(double));
    double *kc[ATT_MAX_SEQS], *vc[ATT_MAX_SEQS];
    for (int s = 0; s < att_n_seqs; s++) {
        kc[s] = ci_malloc((size_t)att_seq_len[s] * c->n_kv_head * hd * sizeof(double));
        vc[s] = ci_malloc((size_t)att_seq_len[s] * c->n_kv_head * hd * sizeof(double));
    }
    // Unwritten slots hold NaN: reading any slot the kernel must not touch poisons the result (f16 and q8_0:
    // every 2-byte unit is a half NaN, so every element or block scale is).
    for (size_t i = 0; i < pool_blocks * per_block; i += att_type == CI_TYPE_F32 ? 4 : 2) {
        if (att_type == CI_TYPE_F32) {
            float nan = NAN;
            memcpy(k + i, &nan, 4);
            memcpy(v + i, &nan, 4);
        } else {
            uint16_t nan = 0x7e00;
            memcpy(k + i, &nan, 2);
            memcpy(v + i, &nan, 2);
        }
    }
    for (int i = 0; i < pool_blocks; i++)
        perm[i] = i;
    for (int i = pool_blocks - 1; i > 0; i--) { // shuffled block tables
        int j = (int)(ci_rng_u64(&rp) % (uint64_t)(i + 1));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    struct ci_attn_seq seqs[ATT_MAX_SEQS];
    struct ci_kv_layer kv = {.k = k,
                             .v = v,
                             .type = att_type,
                             .row_bytes = row_bytes,
                             .block_size = bs,
                             .n_kv_head = c->n_kv_head,
                             .head_dim = hd};
    for (int s = 0, used = 0; s < att_n_seqs; s++) {
        seqs[s].block_table = perm + used;
        seqs[s].n_blocks = n_blk[s];
        used += n_blk[s];
        for (int p = 0; p < att_seq_len[s]; p++)
            for (int kvh = 0; kvh < c->n_kv_head; kvh++) {
                size_t off = ci_kv_offset(&kv, seqs[s].block_table[p / bs], kvh, p % bs);
                for (int i = 0; i < hd; i++) {
                    kf[i] = (float)ci_rng_normal(&r);
                    vf[i] = (float)ci_rng_normal(&r);
                }
                // Stored as the KV type; the double reference reads the values the cache holds.
                ci_kv_store_row(att_type, kf, k + off, hd);
                ci_kv_store_row(att_type, vf, v + off, hd);
                ci_dequantize_row(att_type, k + off, kf, hd);
                ci_dequantize_row(att_type, v + off, vf, hd);
                for (int i = 0; i < hd; i++) {
                    kc[s][((size_t)p * c->n_kv_head + kvh) * hd + i] = kf[i];
                    vc[s][((size_t)p * c->n_kv_head + kvh) * hd + i] = vf[i];
                }
            }
    }
    fill_normal(&r, q, (int64_t)qn, 1.5); // sharper than unit scores: the max really moves
    int32_t pos[ATT_MAX_TOKENS], seq[ATT_MAX_TOKENS];
    for (int t = 0; t < att_n_tokens; t++) {
        pos[t] = att_tok_pos[t];
        seq[t] = att_tok_seq[t];
    }
    float scale = 1.0f / sqrtf((float)hd);
    // A Q8_0 cache scores against the query quantized to Q8_0 as well (dot.h; not under soft-capping): the
    // reference takes the query values those blocks hold.
    float *qref = q;
    if (att_type == CI_TYPE_Q8_0 && !(att_softcap > 0.0f)) {
        struct ci_block_q8_0 qb[CI_ATTN_MAX_HEAD_DIM / CI_QK8_0];
        qref = q2;
        for (size_t row = 0; row < qn / (size_t)hd; row++) {
            ci_quantize_row(CI_TYPE_Q8_0, q + row * hd, qb, hd);
            ci_dequantize_row(CI_TYPE_Q8_0, qb, qref + row * hd, hd);
        }
    }
    attn_reference(c, qref, kc, vc, scale, ref);
    struct ci_attn_args a = {.n_tokens = att_n_tokens,
                             .q = q,
                             .pos = pos,
                             .seq = seq,
                             .seqs = seqs,
                             .kv = &kv,
                             .n_head = c->n_head,
                             .scale = scale,
                             .out = out,
                             .window = att_window,
                             .softcap = att_softcap,
                             .sinks = att_sinks};
    for (int pass = 0; pass < n_tables; pass++) {
        ci_kernels_force_table(tables[pass]);
        a.out = out;
        ci_attention_paged(NULL, &a);
        if (keep && keep[pass])
            memcpy(keep[pass], out, qn * sizeof(float));
        for (size_t i = 0; i < qn; i++)
            if (!(fabs(out[i] - ref[i]) <= 1e-5)) {
                FAIL_FIRST("kv %s heads %d:%d hd %d bs %d %s: out[%zu] %.9g vs %.9g", ci_type_name(att_type),
                           c->n_head, c->n_kv_head, hd, bs, ci_kernels_isa(), i, out[i], ref[i]);
                goto done;
            }
        for (int p = 0; p < 4; p++) {
            a.out = out2;
            ci_attention_paged(pools[p], &a);
            if (memcmp(out, out2, qn * sizeof(float)) != 0)
                FAIL_FIRST("heads %d:%d hd %d bs %d: threads %d differ", c->n_head, c->n_kv_head, hd, bs,
                           p + 1);
        }
        // Each token alone (the per-token path, split over 2, 3 or 4 threads where its context spans several
        // segments) gives the same bits as inside the batch (grouped with its run), and so does the batch
        // cut into pieces of 7 or 2 tokens (runs cut elsewhere).
        for (int t = 0; t < att_n_tokens; t++) {
            struct ci_attn_args one = a;
            one.n_tokens = 1;
            one.q = q + (size_t)t * c->n_head * hd;
            one.pos = pos + t;
            one.seq = seq + t;
            one.out = out1;
            ci_attention_paged(pools[1 + t % 3], &one);
            CHECK1(memcmp(out1, out + (size_t)t * c->n_head * hd, (size_t)c->n_head * hd * sizeof(float)) ==
                   0);
        }
        // Every 4th token: a decode batch (no two at consecutive positions), split over 4 threads when it
        // has few (token, KV head) items.
        {
            int32_t dpos[ATT_MAX_TOKENS], dseq[ATT_MAX_TOKENS];
            size_t row = (size_t)c->n_head * hd;
            int nd = 0;
            for (int t = 0; t < att_n_tokens; t += 4, nd++) {
                dpos[nd] = pos[t];
                dseq[nd] = seq[t];
                memcpy(q2 + (size_t)nd * row, q + (size_t)t * row, row * sizeof(float));
            }
            struct ci_attn_args dec = a;
            dec.n_tokens = nd;
            dec.q = q2;
            dec.pos = dpos;
            dec.seq = dseq;
            dec.out = out2;
            ci_attention_paged(pools[3], &dec);
            for (int i = 0; i < nd; i++)
                CHECK1(memcmp(out2 + (size_t)i * row, out + (size_t)(4 * i) * row, row * sizeof(float)) == 0);
        }
        for (int piece = 7; piece >= 2; piece -= 5) {
            for (int t = 0; t < att_n_tokens; t += piece) {
                struct ci_attn_args part = a;
                part.n_tokens = att_n_tokens - t < piece ? att_n_tokens - t : piece;
                part.q = q + (size_t)t * c->n_head * hd;
                part.pos = pos + t;
                part.seq = seq + t;
                part.out = out2 + (size_t)t * c->n_head * hd;
                ci_attention_paged(t % 2 ? pools[0] : NULL, &part);
            }
            if (memcmp(out, out2, qn * sizeof(float)) != 0)
                FAIL_FIRST("heads %d:%d hd %d bs %d: batch in pieces of %d differs", c->n_head, c->n_kv_head,
                           hd, bs, piece);
        }
    }
done:
    ci_kernels_force_scalar(false);
    for (int s = 0; s < att_n_seqs; s++) {
        ci_free(kc[s]);
        ci_free(vc[s]);
    }
    ci_free(ref);
    ci_free(out1);
    ci_free(q2);
    ci_free(out2);
    ci_free(out);
    ci_free(q);
    ci_free(perm);
    ci_free(v);
    ci_free(k);
    ci_free(vf);
    ci_free(kf);
}

/* Every KV element type (f32, f16, q8_0): against the double reference on the values the cache holds, the
 * same bits for 1 and 2 threads, alone or in the batch, and for block sizes 16, 1 and 3. */
static void attention_paged_cases(uint32_t type) {
    const struct att_case cases[] = {
        {8, 2, 64, 16},                                // GQA 8:2
        {8, 2, 64, 1},   {8, 2, 64, 3}, {4, 4, 40, 3}, // MHA, head_dim not a multiple of 8
        {8, 1, 32, 1},                                 // MQA
        {12, 1, 64, 16},                               // MQA with more heads than one pass serves
        {4, 2, 256, 3},                                // the largest supported head_dim
        {72, 1, 32, 16}, // a group larger than one decode task serves (ATTN_ITEM_ROWS): the per-token walk
    };
    att_type = type;
    struct ci_threadpool *pools[4] = {NULL};
    for (int p = 0; p < 4; p++)
        ASSERT_STATUS(ci_threadpool_create(p + 1, &pools[p], NULL), CI_OK);
    // The first three cases differ only in block size (16, 1, 3): the same bits, table by table.
    size_t qn = (size_t)att_n_tokens * 8 * 64;
    float *keep[3][3] = {{NULL}};
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < n_tables; t++)
            keep[c][t] = ci_malloc(qn * sizeof(float));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ci_kv_row_bytes(type, cases[i].head_dim)) // q8_0: head_dim a multiple of 32
            attn_case_run(&cases[i], pools, i < 3 ? keep[i] : NULL);
    for (int t = 0; t < n_tables; t++) {
        CHECK1(memcmp(keep[0][t], keep[1][t], qn * sizeof(float)) == 0);
        CHECK1(memcmp(keep[0][t], keep[2][t], qn * sizeof(float)) == 0);
    }
    // The SIMD tables (all but the scalar one, last) agree bit for bit (dot.h: each gives the AVX2 chunk's bits).
    for (int t = 1; t + 1 < n_tables; t++)
        if (memcmp(keep[0][0], keep[0][t], qn * sizeof(float)) != 0)
            FAIL_FIRST("kv %s: tables %s and %s differ", ci_type_name(type), tables[0]->isa, tables[t]->isa);
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < n_tables; t++)
            ci_free(keep[c][t]);
    for (int p = 0; p < 4; p++)
        ci_threadpool_free(pools[p]);
    att_type = CI_TYPE_F32;
}

TEST(attention_paged_matches_contiguous_double) {
    attention_paged_cases(CI_TYPE_F32);
}

TEST(attention_paged_f16_kv) {
    attention_paged_cases(CI_TYPE_F16);
}

TEST(attention_paged_q8_0_kv) {
    attention_paged_cases(CI_TYPE_Q8_0);
}

/* Sliding window (5 positions: windows start inside chunks and cross their edges), logit soft-capping (a
 * cap of 2 against scores of about +-1.5: tanh bends them well away from linear) and attention sinks, each
 * alone and all together, for every KV type: the same double-reference, thread, alone-vs-batch and
 * block-size checks as above (the reference applies each feature from its definition). */
struct att_feature {
    int window;
    float cap;
    bool sinks;
};

/* attention_paged_cases for every KV type under each of the n feature sets, then none again. */
static void attention_feature_cases(const struct att_feature *feats, size_t n) {
    const uint32_t types[] = {CI_TYPE_F32, CI_TYPE_F16, CI_TYPE_Q8_0};
    for (size_t f = 0; f < n; f++)
        for (size_t ty = 0; ty < 3; ty++) {
            att_window = feats[f].window;
            att_softcap = feats[f].cap;
            att_sinks = feats[f].sinks ? att_sinks_all : NULL;
            attention_paged_cases(types[ty]);
        }
    att_window = 0;
    att_softcap = 0.0f;
    att_sinks = NULL;
}

TEST(attention_paged_window_softcap_sinks) {
    att_sinks_fill();
    const struct att_feature feats[] = {{5, 0.0f, false}, {1, 0.0f, false}, {16, 0.0f, false},
                                        {0, 2.0f, false}, {0, 0.0f, true},  {7, 2.0f, true}};
    attention_feature_cases(feats, sizeof feats / sizeof feats[0]);
}

/* Long contexts (up to 600 positions: several 256-position segments merged by log-sum-exp, decodes split
 * over threads by segment), for every KV type, plain, with a window that starts inside a segment (300), and
 * with that window, soft-capping and sinks together: against the double reference, the same bits for 1..4
 * threads, alone, as a decode batch, in pieces and for block sizes 16, 1 and 3 (attention_paged_cases). */
TEST(attention_paged_long_context_split) {
    att_sinks_fill();
    const struct att_feature feats[] = {{0, 0.0f, false}, {300, 0.0f, false}, {300, 2.0f, true}};
    att_n_seqs = ATT_LONG_SEQS;
    att_n_tokens = ATT_LONG_TOKENS;
    att_seq_len = att_seq_len_long;
    att_tok_seq = att_tok_seq_long;
    att_tok_pos = att_tok_pos_long;
    // Both prefetch forms of the decode walk over several KV heads (whole next chunks, two lines a head), on
    // blocks of 16, 1 and 3 slots: each must give the reference's results with every invariance checked there.
    for (int pf = 0; pf < 2; pf++) {
        ci_kernels_force_attn_prefetch(pf);
        attention_feature_cases(feats, sizeof feats / sizeof feats[0]);
    }
    ci_kernels_force_attn_prefetch(-1);
    att_n_seqs = ATT_SEQS;
    att_n_tokens = ATT_TOKENS;
    att_seq_len = att_seq_len_short;
    att_tok_seq = att_tok_seq_short;
    att_tok_pos = att_tok_pos_short;
}

/* The features really change the result: a window of 5 against none, a cap of 2 against none, sinks
 * against none, on the same data (a kernel ignoring a feature would pass the reference above only if the
 * reference ignored it too). */
TEST(attention_features_change_output) {
    enum { H = 4, HD = 32, NP = 40 };
    float *k = ci_malloc(NP * HD * sizeof(float)), *v = ci_malloc(NP * HD * sizeof(float));
    float q[H * HD], base[H * HD], other[H * HD];
    const float big_sinks[H] = {3.0f, 3.0f, 3.0f, 3.0f};
    struct ci_rng r;
    ci_rng_seed(&r, 4242);
    fill_normal(&r, k, NP * HD, 1.0);
    fill_normal(&r, v, NP * HD, 1.0);
    fill_normal(&r, q, H * HD, 1.5);
    int32_t table[NP], pos = NP - 1, seq = 0;
    for (int i = 0; i < NP; i++)
        table[i] = i;
    struct ci_attn_seq sq = {.block_table = table, .n_blocks = NP};
    struct ci_kv_layer kv = {.k = k,
                             .v = v,
                             .type = CI_TYPE_F32,
                             .row_bytes = HD * sizeof(float),
                             .block_size = 1,
                             .n_kv_head = 1,
                             .head_dim = HD};
    struct ci_attn_args a = {.n_tokens = 1,
                             .q = q,
                             .pos = &pos,
                             .seq = &seq,
                             .seqs = &sq,
                             .kv = &kv,
                             .n_head = H,
                             .scale = 1.0f / sqrtf((float)HD),
                             .out = base};
    ci_attention_paged(NULL, &a);
    for (int f = 0; f < 3; f++) {
        struct ci_attn_args b = a;
        b.out = other;
        if (f == 0)
            b.window = 5;
        else if (f == 1)
            b.softcap = 2.0f;
        else
            b.sinks = big_sinks;
        ci_attention_paged(NULL, &b);
        double diff = 0;
        for (int i = 0; i < H * HD; i++)
            diff = fmax(diff, fabs(other[i] - base[i]));
        if (!(diff > 0.05))
            FAIL_FIRST("feature %d changes the output by only %g", f, diff);
    }
    ci_free(k);
    ci_free(v);
}

TEST(kv_row_bytes) {
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_F32, 64), 256);
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_F16, 64), 128);
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_Q8_0, 64), 68);
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_Q8_0, 48), 0); // not a multiple of 32
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_Q4_0, 64), 0); // not a KV type
    ASSERT_EQ_I64(ci_kv_row_bytes(CI_TYPE_F16, 0), 0);
}

/* Chunk kernels on their own: random q/K/V, n = 1..16 positions (two chunks in a row, so the running max,
 * sum and accumulator carry over), ng = 1, 3, 8 heads, head_dim 32, 64, 80, 112, 128 (q8_0: the multiples of
 * 32).  For every table and KV type: within 1e-5 of the scalar f32 chunk on the dequantized rows (q8_0: and the
 * dequantized Q8_0 query, which its integer scores use); for f16 the exact bits of the same table's f32 chunk
 * on the widened rows (the widening is exact); for q8_0 the running max, a pure function of the integer
 * scores, the exact bits of the scalar q8_0 chunk in every table. */
TEST(attn_chunk_kernels_match_scalar) {
    enum { MAXG = 8, MAXD = 128 };
    static const uint32_t types[] = {CI_TYPE_F32, CI_TYPE_F16, CI_TYPE_Q8_0};
    // 80 and 112: the AVX-512 f16 value pass's 1- and 3-slab instances (head_dim % 64 of 16 and 48).
    static const int hds[] = {32, 64, 80, 112, 128}, ngs[] = {1, 2, 3, 8}, ns[] = {1, 5, 15, 16};
    struct ci_rng r;
    ci_rng_seed(&r, 4242);
    float qv[MAXG * MAXD], kf[2 * CI_ATTN_CHUNK * MAXD], vf[2 * CI_ATTN_CHUNK * MAXD];
    float kd[2 * CI_ATTN_CHUNK * MAXD], vd[2 * CI_ATTN_CHUNK * MAXD]; // the stored values, dequantized
    float qdv[MAXG * MAXD];                                           // the query as Q8_0 holds it
    struct ci_block_q8_0 qb[MAXG * MAXD / CI_QK8_0];
    unsigned char kb[2 * CI_ATTN_CHUNK * MAXD * 4], vb[2 * CI_ATTN_CHUNK * MAXD * 4];
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (size_t gi = 0; gi < 4; gi++)
                for (size_t ni = 0; ni < 4; ni++) {
                    uint32_t type = types[ti];
                    int hd = hds[hi], ng = ngs[gi], n = ns[ni];
                    size_t rb = ci_kv_row_bytes(type, hd);
                    if (rb == 0) // q8_0: head_dim a multiple of 32
                        continue;
                    bool q8 = type == CI_TYPE_Q8_0;
                    fill_normal(&r, qv, ng * hd, 1.5);
                    fill_normal(&r, kf, 2 * n * hd, 1.0);
                    fill_normal(&r, vf, 2 * n * hd, 1.0);
                    const void *kp[2][CI_ATTN_CHUNK], *vp[2][CI_ATTN_CHUNK];   // stored rows
                    const void *kdp[2][CI_ATTN_CHUNK], *vdp[2][CI_ATTN_CHUNK]; // dequantized rows
                    for (int c = 0; c < 2; c++)
                        for (int i = 0; i < n; i++) {
                            size_t e = (size_t)(c * n + i);
                            ci_kv_store_row(type, kf + e * hd, kb + e * rb, hd);
                            ci_kv_store_row(type, vf + e * hd, vb + e * rb, hd);
                            ci_dequantize_row(type, kb + e * rb, kd + e * hd, hd);
                            ci_dequantize_row(type, vb + e * rb, vd + e * hd, hd);
                            kp[c][i] = kb + e * rb;
                            vp[c][i] = vb + e * rb;
                            kdp[c][i] = kd + e * hd;
                            vdp[c][i] = vd + e * hd;
                        }
                    const float *q[MAXG], *qd[MAXG];
                    const struct ci_block_q8_0 *qq[MAXG];
                    for (int g = 0; g < ng; g++) {
                        q[g] = qv + g * hd;
                        qq[g] = qb + g * (hd / CI_QK8_0);
                        ci_quantize_row(CI_TYPE_Q8_0, q[g], qb + g * (hd / CI_QK8_0), hd);
                        ci_dequantize_row(CI_TYPE_Q8_0, qq[g], qdv + g * hd, hd);
                        qd[g] = q8 ? qdv + g * hd : q[g];
                    }
                    float scale = 1.0f / sqrtf((float)hd);
                    // The scalar f32 chunk on the dequantized rows: the reference; and the scalar q8_0 chunk.
                    float m0[MAXG], l0[MAXG], a0[MAXG * MAXD], mq[MAXG], lq[MAXG], aq[MAXG * MAXD];
                    for (int g = 0; g < ng; g++) {
                        m0[g] = mq[g] = -INFINITY;
                        l0[g] = lq[g] = 0;
                    }
                    memset(a0, 0, sizeof a0);
                    memset(aq, 0, sizeof aq);
                    for (int c = 0; c < 2; c++) {
                        ci_ref_attn_f32(kdp[c], vdp[c], n, qd, ng, hd, scale, m0, l0, a0);
                        if (q8)
                            ci_ref_attn_q8_0(kp[c], vp[c], n, qq, ng, hd, scale, mq, lq, aq);
                    }
                    for (int t = 0; t < n_tables; t++) {
                        const struct ci_dot_table *tab = tables[t];
                        float m1[MAXG], l1[MAXG], a1[MAXG * MAXD], m2[MAXG], l2[MAXG], a2[MAXG * MAXD];
                        for (int g = 0; g < ng; g++) {
                            m1[g] = m2[g] = -INFINITY;
                            l1[g] = l2[g] = 0;
                        }
                        memset(a1, 0, sizeof a1);
                        memset(a2, 0, sizeof a2);
                        for (int c = 0; c < 2; c++) {
                            if (q8)
                                tab->attn_q8_0(kp[c], vp[c], n, qq, ng, hd, scale, m1, l1, a1);
                            else
                                (type == CI_TYPE_F32 ? tab->attn_f32 : tab->attn_f16)(kp[c], vp[c], n, q, ng,
                                                                                      hd, scale, m1, l1, a1);
                            tab->attn_f32(kdp[c], vdp[c], n, q, ng, hd, scale, m2, l2, a2);
                        }
                        for (int g = 0; g < ng; g++) {
                            // Scores round differently per table: the max and sum agree to float precision.
                            CHECK1(fabsf(m1[g] - m0[g]) <= 1e-5f * (1 + fabsf(m0[g])));
                            CHECK1(fabsf(l1[g] - l0[g]) <= 1e-4f * l0[g]);
                            for (int d = 0; d < hd; d++) {
                                float o1 = a1[g * hd + d] / l1[g], o0 = a0[g * hd + d] / l0[g];
                                if (!(fabsf(o1 - o0) <= 1e-5f))
                                    FAIL_FIRST("%s kv %s hd %d ng %d n %d: out[%d][%d] %.9g vs scalar %.9g",
                                               tab->isa, ci_type_name(type), hd, ng, n, g, d, o1, o0);
                            }
                        }
                        if (q8) {
                            CHECK1(memcmp(m1, mq, ng * sizeof(float)) == 0);
                        } else {
                            CHECK1(memcmp(m1, m2, ng * sizeof(float)) == 0);
                            CHECK1(memcmp(l1, l2, ng * sizeof(float)) == 0);
                            CHECK1(memcmp(a1, a2, (size_t)ng * hd * sizeof(float)) == 0);
                        }
                    }
                }
}

/* The grouped chunks against the per-token ones, every table and KV type: G = 1..8 tokens at consecutive
 * positions from p_first (the group straddling chunk edges, tokens joining the group's chunks late or
 * seeing fewer of the last chunk's positions than others), ng = 1, 3, 8 heads, head_dim 32, 64, 80, 112, 128
 * (q8_0: the multiples of 32).  The grouped call is made as attn.c makes it; every row's m, l and accumulator
 * must be the same bits as that token's heads walked alone through the table's chunk kernel. */
TEST(attn_group_kernels_match_per_token) {
    enum { MAXT = 8, MAXG = 8, MAXD = 128, MAXP = 48, MAXR = MAXT * MAXG };
    static const uint32_t types[] = {CI_TYPE_F32, CI_TYPE_F16, CI_TYPE_Q8_0};
    static const int hds[] = {32, 64, 80, 112, 128}, ngs[] = {1, 2, 3, 8},
                     firsts[] = {0, 3, 9, 15, 16, 26, 40};
    struct ci_rng r;
    ci_rng_seed(&r, 5151);
    static float qv[MAXR * MAXD], kf[MAXP * MAXD], vf[MAXP * MAXD];
    static unsigned char kb[MAXP * MAXD * 4], vb[MAXP * MAXD * 4];
    static float a1[MAXR * MAXD], a2[MAXR * MAXD];
    static struct ci_block_q8_0 qb[MAXR * MAXD / CI_QK8_0];
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            uint32_t type = types[ti];
            int hd = hds[hi];
            size_t rb = ci_kv_row_bytes(type, hd);
            if (rb == 0) // q8_0: head_dim a multiple of 32
                continue;
            fill_normal(&r, kf, MAXP * hd, 1.0);
            fill_normal(&r, vf, MAXP * hd, 1.0);
            const void *kp[MAXP], *vp[MAXP];
            for (int p = 0; p < MAXP; p++) {
                ci_kv_store_row(type, kf + (size_t)p * hd, kb + p * rb, hd);
                ci_kv_store_row(type, vf + (size_t)p * hd, vb + p * rb, hd);
                kp[p] = kb + p * rb;
                vp[p] = vb + p * rb;
            }
            float scale = 1.0f / sqrtf((float)hd);
            for (size_t gi = 0; gi < 4; gi++)
                for (int nt = 1; nt <= MAXT; nt++)
                    for (size_t fi = 0; fi < sizeof firsts / sizeof firsts[0]; fi++) {
                        int ng = ngs[gi], nr = nt * ng, p_first = firsts[fi], p_last = p_first + nt - 1;
                        fill_normal(&r, qv, (int64_t)nr * hd, 1.5);
                        const float *q[MAXR];
                        const struct ci_block_q8_0 *qq[MAXR];
                        for (int i = 0; i < nr; i++) {
                            q[i] = qv + (size_t)i * hd;
                            qq[i] = qb + (size_t)i * (hd / CI_QK8_0);
                            ci_quantize_row(CI_TYPE_Q8_0, q[i], qb + (size_t)i * (hd / CI_QK8_0), hd);
                        }
                        const bool q8 = type == CI_TYPE_Q8_0;
                        for (int t = 0; t < n_tables; t++) {
                            const struct ci_dot_table *tab = tables[t];
                            ci_attn_chunk_fn fn = type == CI_TYPE_F32 ? tab->attn_f32 : tab->attn_f16;
                            ci_attn_group_fn gfn =
                                type == CI_TYPE_F32 ? tab->attn_grp_f32 : tab->attn_grp_f16;
                            float m1[MAXR], l1[MAXR], m2[MAXR], l2[MAXR];
                            for (int i = 0; i < nr; i++) {
                                m1[i] = m2[i] = -INFINITY;
                                l1[i] = l2[i] = 0;
                            }
                            memset(a1, 0, (size_t)nr * hd * sizeof(float));
                            memset(a2, 0, (size_t)nr * hd * sizeof(float));
                            for (int i = 0; i < nt; i++) // per token: its ng heads, chunk by chunk
                                for (int p0 = 0; p0 <= p_first + i; p0 += CI_ATTN_CHUNK) {
                                    int n = p_first + i + 1 - p0 < CI_ATTN_CHUNK ? p_first + i + 1 - p0
                                                                                 : CI_ATTN_CHUNK;
                                    if (q8)
                                        tab->attn_q8_0(kp + p0, vp + p0, n, qq + i * ng, ng, hd, scale,
                                                       m1 + i * ng, l1 + i * ng, a1 + (size_t)i * ng * hd);
                                    else
                                        fn(kp + p0, vp + p0, n, q + i * ng, ng, hd, scale, m1 + i * ng,
                                           l1 + i * ng, a1 + (size_t)i * ng * hd);
                                }
                            for (int p0 = 0; p0 <= p_last; p0 += CI_ATTN_CHUNK) { // grouped, as attn.c
                                int n[MAXR], i0 = p0 > p_first ? p0 - p_first : 0;
                                for (int i = i0; i < nt; i++)
                                    for (int g = 0; g < ng; g++)
                                        n[i * ng + g] = p_first + i + 1 - p0 < CI_ATTN_CHUNK
                                                            ? p_first + i + 1 - p0
                                                            : CI_ATTN_CHUNK;
                                int r0 = i0 * ng;
                                if (q8)
                                    tab->attn_grp_q8_0(kp + p0, vp + p0, n + r0, nr - r0, qq + r0, hd, scale,
                                                       m2 + r0, l2 + r0, a2 + (size_t)r0 * hd);
                                else
                                    gfn(kp + p0, vp + p0, n + r0, nr - r0, q + r0, hd, scale, m2 + r0,
                                        l2 + r0, a2 + (size_t)r0 * hd);
                            }
                            if (memcmp(m1, m2, nr * sizeof(float)) != 0 ||
                                memcmp(l1, l2, nr * sizeof(float)) != 0 ||
                                memcmp(a1, a2, (size_t)nr * hd * sizeof(float)) != 0)
                                FAIL_FIRST("%s kv %s hd %d ng %d tokens %d from pos %d: grouped differs",
                                           tab->isa, ci_type_name(type), hd, ng, nt, p_first);
                        }
                    }
        }
}

TEST(isa_names) {
    ci_kernels_init();
    const char *isa = ci_kernels_isa();
    CHECK1(strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2+fma+f16c") == 0 ||
           strcmp(isa, "avx512+vnni") == 0);
    CHECK1(n_tables >= 1 && strcmp(tables[n_tables - 1]->isa, "scalar") == 0);
    ci_kernels_force_scalar(true);
    CHECK1(strcmp(ci_kernels_isa(), "scalar") == 0);
    ci_kernels_force_scalar(false);
    CHECK1(strcmp(ci_kernels_isa(), isa) == 0);
    printf("note: kernels isa %s\n", isa);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    ci_kernels_init();
    n_tables = ci_kernels_tables(tables);
    RUN(isa_names);
    RUN(dot_known_values);
    RUN(dot_simd_matches_scalar);
    RUN(dot_matches_dequantized_double_reference);
    RUN(block_types_dot_matches_double_reference);
    RUN(dot_zero_rows_and_zero_activations);
    RUN(quant_act_rounds_to_nearest_even_within_half_a_step_with_a_half_precision_scale);
    RUN(quant_act_k_matches_scalar);
    RUN(matmul_work_bytes);
    RUN(matmul_bit_identical_across_threads_tiles_and_batches);
    RUN(matmul_group_equals_each_matmul);
    RUN(matmul_packed_equals_dot);
    RUN(matmul_packed_float_every_tile);
    RUN(float_pack_equals_definition);
    RUN(f32_to_f16_row_matches_scalar);
    RUN(rope_matches_double_formula);
    RUN(rope_ext_scaled_matches_double_formula);
    RUN(rope_yarn_matches_definition);
    RUN(rmsnorm_matches_double);
    RUN(rmsnorm_tables_agree);
    RUN(softmax_matches_double);
    RUN(silu_mul_matches_double);
    RUN(argmax_first_of_ties);
    RUN(argmax_equals_scan);
    RUN(attention_paged_matches_contiguous_double);
    RUN(attention_paged_f16_kv);
    RUN(attention_paged_q8_0_kv);
    RUN(kv_row_bytes);
    RUN(gelu_mul_matches_double);
    RUN(attention_paged_window_softcap_sinks);
    RUN(attention_paged_long_context_split);
    RUN(attention_features_change_output);
    RUN(attn_chunk_kernels_match_scalar);
    RUN(attn_group_kernels_match_per_token);
    return test_exit_code();
}
