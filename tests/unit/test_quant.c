/* The scalar dequantizers of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4
 * (kernels/quant.c): their block
 * sizes against ggml's, one block per type whose values are worked out by hand from the block format (in
 * the comments), and a golden comparison against the independent numpy reference (tests/ref/gguf_np.py) on
 * seeded random and adversarial blocks stored in tests/unit/data/quant_golden.bin (written by
 * tests/ref/quant_golden.py; tests/ref/test_quant_np.py checks the file is what numpy gives now). */
#include "kernels/quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "test.h"

// Sets the little-endian fp16 field at byte off of block b to the half with bits h.
static void put16(uint8_t *b, int off, uint16_t h) {
    b[off] = (uint8_t)(h & 0xff);
    b[off + 1] = (uint8_t)(h >> 8);
}

#define H_1     0x3C00 // 1.0
#define H_HALF  0x3800 // 0.5
#define H_QUART 0x3400 // 0.25
#define H_2     0x4000 // 2.0
#define H_M1    0xBC00 // -1.0

struct want {
    int i;
    float v;
};

/* Dequantizes the one block b of type and checks the listed elements exactly (the values are small
 * integers or exact binary fractions). */
static void check_block(uint32_t type, const uint8_t *b, const struct want *w, int n) {
    float y[256];
    const struct ci_type_traits *t = ci_type_traits(type);
    ci_dequantize_row(type, b, y, t->block_size);
    for (int k = 0; k < n; k++)
        if (y[w[k].i] != w[k].v)
            TEST_FAILF("%s element %d: %g, want %g", t->name, w[k].i, (double)y[w[k].i], (double)w[k].v);
}
#define CHECK_BLOCK(type, b, ...)                                                                            \
    do {                                                                                                     \
        const struct want w_[] = {__VA_ARGS__};                                                              \
        check_block(type, b, w_, (int)(sizeof w_ / sizeof w_[0]));                                           \
    } while (0)

TEST(block_sizes_match_ggml) {
    static const struct {
        uint32_t type;
        const char *name;
        uint32_t block, bytes;
    } want[] = {
        {CI_TYPE_Q4_1, "Q4_1", 32, 20},     {CI_TYPE_Q5_0, "Q5_0", 32, 22},
        {CI_TYPE_Q5_1, "Q5_1", 32, 24},     {CI_TYPE_Q2_K, "Q2_K", 256, 84},
        {CI_TYPE_Q3_K, "Q3_K", 256, 110},   {CI_TYPE_Q4_K, "Q4_K", 256, 144},
        {CI_TYPE_Q5_K, "Q5_K", 256, 176},   {CI_TYPE_Q6_K, "Q6_K", 256, 210},
        {CI_TYPE_IQ4_NL, "IQ4_NL", 32, 18}, {CI_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
        {CI_TYPE_MXFP4, "MXFP4", 32, 17},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const struct ci_type_traits *t = ci_type_traits(want[k].type);
        ASSERT(t != NULL);
        CHECK(strcmp(t->name, want[k].name) == 0);
        CHECK(t->block_size == want[k].block && t->type_size == want[k].bytes);
        uint64_t rb = 0;
        CHECK(ci_row_bytes(want[k].type, 4 * (uint64_t)want[k].block, &rb) &&
              rb == 4 * (uint64_t)want[k].bytes);
        CHECK(!ci_row_bytes(want[k].type, want[k].block + 1, &rb));
        CHECK(ci_type_supported(want[k].type));
    }
}

TEST(q4_1_by_hand) {
    // d fp16 | m fp16 | qs[16]; element j: low nibble of qs[j], element j + 16: high nibble; x = q * d + m.
    uint8_t b[20] = {0};
    put16(b, 0, H_HALF); // d = 0.5
    put16(b, 2, H_M1);   // m = -1
    b[4 + 0] = 0x3A;     // element 0: 10 -> 10 * 0.5 - 1 = 4; element 16: 3 -> 0.5
    b[4 + 15] = 0xF0;    // element 15: 0 -> -1; element 31: 15 -> 6.5
    CHECK_BLOCK(CI_TYPE_Q4_1, b, {0, 4.0f}, {16, 0.5f}, {15, -1.0f}, {31, 6.5f}, {1, -1.0f});
}

TEST(q5_0_by_hand) {
    // d fp16 | qh u32 (bit j: 5th bit of element j) | qs[16]; x = (q - 16) * d.
    uint8_t b[22] = {0};
    put16(b, 0, H_2); // d = 2
    b[2] = 0x01;      // qh bit 0 (element 0)
    b[4] = 0x02;      // qh bit 17 (element 17)
    b[6 + 0] = 0x21;  // element 0: 1 | 16 = 17 -> (17 - 16) * 2 = 2; element 16: 2 -> -28
    b[6 + 1] = 0x0F;  // element 1: 15 -> -2; element 17: 0 | 16 -> 0
    CHECK_BLOCK(CI_TYPE_Q5_0, b, {0, 2.0f}, {16, -28.0f}, {1, -2.0f}, {17, 0.0f}, {2, -32.0f});
}

TEST(q5_1_by_hand) {
    // d fp16 | m fp16 | qh u32 | qs[16]; x = q * d + m.
    uint8_t b[24] = {0};
    put16(b, 0, H_QUART); // d = 0.25
    put16(b, 2, H_1);     // m = 1
    b[7] = 0x80;          // qh bit 31 (element 31)
    b[8 + 15] = 0x7F;     // element 15: 15 -> 4.75; element 31: 7 | 16 = 23 -> 6.75
    CHECK_BLOCK(CI_TYPE_Q5_1, b, {15, 4.75f}, {31, 6.75f}, {0, 1.0f}, {30, 1.0f});
}

TEST(q2_k_by_hand) {
    // scales[16] (low nibble: scale, high: min) | qs[64] | d fp16 @80 | dmin fp16 @82.  Element 128h + 32s + l:
    // bits 2s.. of qs[32h + l], sub-block (8h + 2s + l / 16); x = d * scale * q - dmin * min.
    uint8_t b[84] = {0};
    put16(b, 80, H_1);    // d = 1
    put16(b, 82, H_HALF); // dmin = 0.5
    b[0] = 0x21;          // sub-block 0: scale 1, min 2
    b[3] = 0x13;          // sub-block 3: scale 3, min 1
    b[10] = 0x04;         // sub-block 10: scale 4, min 0
    b[16 + 16] = 0x08;    // element 48 (h 0, s 1, l 16, sub-block 3): q 2 -> 3 * 2 - 0.5 = 5.5
    b[16 + 32] = 0x0C;    // element 160 (h 1, s 1, l 0, sub-block 10): q 3 -> 12; element 128: q 0 -> 0
    // element 0 and 1: q 0 in sub-block 0 -> -0.5 * 2 = -1; element 16 (sub-block 1, all 0) -> 0
    CHECK_BLOCK(CI_TYPE_Q2_K, b, {48, 5.5f}, {160, 12.0f}, {128, 0.0f}, {0, -1.0f}, {1, -1.0f}, {16, 0.0f});
}

TEST(q3_k_by_hand) {
    // hmask[32] | qs[64] @32 | scales[12] @96 | d fp16 @108.  Scale k (16 elements): low 4 bits from nibble
    // k / 8 of scales[k % 8], top 2 bits from bits 2(k / 4).. of scales[8 + k % 4], minus 32.  Element
    // 128h + 32s + l: bits 2s.. of qs[32h + l], minus 4 unless bit 4h + s of hmask[l] is set; x = d * scale * q.
    uint8_t b[110] = {0};
    put16(b, 108, H_HALF); // d = 0.5
    b[96 + 0] = 0x05;      // scale 0: low 5
    b[96 + 8] = 0x02;      // scale 0: top 2 -> 5 | 32 = 37 - 32 = 5
    b[96 + 5] = 0x70;      // scale 13: low 7 (high nibble of byte 5)
    b[96 + 9] = 0xC0;      // scale 13: top 3 (bits 6-7 of byte 9) -> 7 | 48 = 55 - 32 = 23; scale 1: 0 - 32
    b[32 + 0] = 0x03;      // element 0: q 3, hmask[0] bit 0 set -> 3 -> 0.5 * 5 * 3 = 7.5
    b[0] = 0x01;           // element 1: q 0, hmask bit clear -> -4 -> 0.5 * 5 * -4 = -10
    b[32 + 48] = 0x20;     // element 208 (h 1, s 2, l 16, scale 13): q 2,
    b[16] = 0x40;          //   hmask[16] bit 6 set -> 2 -> 0.5 * 23 * 2 = 23; element 209: -4 -> -46
    // element 16 (scale 1 = -32): q 0, hmask[16] bit 0 clear -> -4 -> 0.5 * -32 * -4 = 64
    CHECK_BLOCK(CI_TYPE_Q3_K, b, {0, 7.5f}, {1, -10.0f}, {208, 23.0f}, {209, -46.0f}, {16, 64.0f});
}

/* Q4_K and Q5_K share the scale packing: sub-block j < 4 has scale scales[j] & 63 and min scales[j + 4] & 63;
 * j >= 4 has scale (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4 and min (scales[j + 4] >> 4) |
 * (scales[j] >> 6) << 4.  Element 64c + 32u + l: nibble u of qs[32c + l], sub-block 2c + u (Q5_K: 5th bit =
 * bit 2c + u of qh[l]); x = d * scale * q - dmin * min.  Both tests use d = 1, dmin = 0.25 and: */
static void kq_scales(uint8_t *b) {
    put16(b, 0, H_1);     // d = 1
    put16(b, 2, H_QUART); // dmin = 0.25
    uint8_t *sc = b + 4;
    sc[0] = 3;     // sub-block 0: scale 3
    sc[4] = 8;     //              min 8
    sc[1] = 2;     // sub-block 1: scale 2
    sc[5] = 4;     //              min 4
    sc[2] = 0x40;  // sub-block 2: scale 0; top bits 01 of sub-block 6's scale
    sc[6] = 0x80;  // sub-block 2: min 0; top bits 10 of sub-block 6's min
    sc[10] = 0x31; // sub-block 6: scale 1 | 16 = 17, min 3 | 32 = 35
}

TEST(q4_k_by_hand) {
    // d @0 | dmin @2 | scales[12] @4 | qs[128] @16
    uint8_t b[144] = {0};
    kq_scales(b);
    b[16 + 0] = 0x95;  // element 0: 5 -> 3 * 5 - 0.25 * 8 = 13; element 32 (sub-block 1): 9 -> 2 * 9 - 1 = 17
    b[16 + 96] = 0x0A; // element 192 (c 3, sub-block 6): 10 -> 17 * 10 - 0.25 * 35 = 161.25
    // element 1: 0 - 2 = -2; element 64 (sub-block 2: scale 0, min 0): 0; element 193: -8.75
    CHECK_BLOCK(CI_TYPE_Q4_K, b, {0, 13.0f}, {32, 17.0f}, {192, 161.25f}, {1, -2.0f}, {64, 0.0f},
                {193, -8.75f});
}

TEST(q5_k_by_hand) {
    // d @0 | dmin @2 | scales[12] @4 | qh[32] @16 | qs[128] @48
    uint8_t b[176] = {0};
    kq_scales(b);
    b[48 + 0] = 0x95;  // element 0: 5, element 32: 9
    b[48 + 96] = 0x0A; // element 192: 10
    b[16 + 0] = 0x41;  // qh[0]: bit 0 (element 0: 5 | 16 = 21 -> 3 * 21 - 2 = 61), bit 6 (element 192:
                       // 10 | 16 = 26 -> 17 * 26 - 8.75 = 433.25); element 32 keeps 9 -> 17
    CHECK_BLOCK(CI_TYPE_Q5_K, b, {0, 61.0f}, {32, 17.0f}, {192, 433.25f}, {1, -2.0f}, {193, -8.75f});
}

TEST(q6_k_by_hand) {
    // ql[128] | qh[64] @128 | scales[16] int8 @192 | d fp16 @208.  Element 128h + 32r + l: nibble r / 2 of
    // ql[64h + 32(r % 2) + l] | bits 2r.. of qh[32h + l] << 4, minus 32; scale i / 16; x = d * scale * q.
    uint8_t b[210] = {0};
    put16(b, 208, H_HALF); // d = 0.5
    b[192 + 0] = 2;        // scale 0 = 2
    b[192 + 2] = 0xFD;     // scale 2 = -3
    b[192 + 13] = 4;       // scale 13 = 4
    b[0] = 0x07;           // element 0: 7 |
    b[128 + 0] = 0x02;     //   2 << 4 = 39 - 32 = 7 -> 0.5 * 2 * 7 = 7
    // element 32 (r 1, scale 2): ql[32] 0, qh[0] bits 2-3 0 -> -32 -> 0.5 * -3 * -32 = 48
    b[80] = 0xF0;       // element 208 (h 1, r 2, l 16, scale 13): high nibble of ql[80] 15 |
    b[128 + 48] = 0x30; //   bits 4-5 of qh[48] 3 << 4 = 63 - 32 = 31 -> 0.5 * 4 * 31 = 62
    // element 64 (scale 4 = 0): 0
    CHECK_BLOCK(CI_TYPE_Q6_K, b, {0, 7.0f}, {32, 48.0f}, {208, 62.0f}, {64, 0.0f});
}

/* The non-linear 4-bit values (IQ4_NL, IQ4_XS): -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113. */
TEST(iq4_nl_by_hand) {
    // d fp16 | qs[16]; element j: value[low nibble of qs[j]] * d, element j + 16: value[high nibble].
    uint8_t b[18] = {0};
    put16(b, 0, H_HALF); // d = 0.5
    b[2 + 0] = 0xF0;     // element 0: value[0] = -127 -> -63.5; element 16: value[15] = 113 -> 56.5
    b[2 + 15] = 0x98;    // element 15: value[8] = 1 -> 0.5; element 31: value[9] = 13 -> 6.5
    // element 1: value[0] -> -63.5
    CHECK_BLOCK(CI_TYPE_IQ4_NL, b, {0, -63.5f}, {16, 56.5f}, {15, 0.5f}, {31, 6.5f}, {1, -63.5f});
}

TEST(iq4_xs_by_hand) {
    // d fp16 @0 | scales_h u16 @2 | scales_l[4] @4 | qs[128] @8.  Sub-block j (32 elements): ls = nibble j % 2
    // of scales_l[j / 2] | bits 2j..2j+1 of scales_h << 4; x = d * (ls - 32) * value[q], its 16 bytes of qs
    // laid out as one IQ4_NL block.
    uint8_t b[136] = {0};
    put16(b, 0, H_QUART); // d = 0.25
    put16(b, 2, 0xC006);  // scales_h: sub-block 0 top bits 2, sub-block 1: 1, sub-block 7: 3
    b[4 + 0] = 0x01; // sub-block 0: 1 | 2 << 4 = 33 -> +1 (dl 0.25); sub-block 1: 0 | 1 << 4 = 16 -> -16 (-4)
    b[4 + 3] = 0xF0; // sub-block 7: 15 | 3 << 4 = 63 -> +31 (dl 7.75); sub-blocks 2-6: 0 -> -32 (-8)
    b[8 + 0] = 0xF0; // element 0: -127 * 0.25 = -31.75; element 16: 113 * 0.25 = 28.25
    b[8 + 16] = 0x08;  // element 32: 1 * -4 = -4; element 48: -127 * -4 = 508
    b[8 + 127] = 0xA7; // element 239: -10 * 7.75 = -77.5; element 255: 25 * 7.75 = 193.75
    // element 64 (sub-block 2): -127 * -8 = 1016
    CHECK_BLOCK(CI_TYPE_IQ4_XS, b, {0, -31.75f}, {16, 28.25f}, {32, -4.0f}, {48, 508.0f}, {64, 1016.0f},
                {239, -77.5f}, {255, 193.75f});
}

TEST(mxfp4_by_hand) {
    // e u8 (E8M0) | qs[16]; x = 2^(e - 128) * v[q], v = the E2M1 values doubled: 0 1 2 3 4 6 8 12, then the
    // same negated (sign bit 3); nibbles as IQ4_NL.
    uint8_t b[17] = {0};
    b[0] = 129;      // 2^1
    b[1 + 0] = 0x7F; // element 0: v[15] = -12 -> -24; element 16: v[7] = 12 -> 24
    b[1 + 5] = 0x93; // element 5: v[3] = 3 -> 6; element 21: v[9] = -1 -> -2
    CHECK_BLOCK(CI_TYPE_MXFP4, b, {0, -24.0f}, {16, 24.0f}, {5, 6.0f}, {21, -2.0f}, {1, 0.0f});
    uint8_t s[17] = {0};
    s[1 + 0] = 0x07; // e = 0: 2^-128 (subnormal); element 0: 12 * 2^-128; element 16: v[0] = 0
    CHECK_BLOCK(CI_TYPE_MXFP4, s, {0, 0x1.8p-125f}, {16, 0.0f}, {1, 0.0f});
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Every record of the golden file: the blocks dequantized as one row must give numpy's float32 values bit
 * for bit (both compute d * scale then * q, then - dmin * min, in float32). */
TEST(golden_numpy) {
    char path[4096];
    const char *root = getenv("CINFER_ROOT");
    snprintf(path, sizeof path, "%s/tests/unit/data/quant_golden.bin", root ? root : ".");
    size_t n = 0;
    uint8_t *buf = test_read_file(path, &n);
    ASSERT(buf != NULL);
    ASSERT(n >= 12 && memcmp(buf, "CIQG", 4) == 0 && rd32(buf + 4) == 1);
    uint32_t n_rec = rd32(buf + 8);
    CHECK(n_rec == 11);
    size_t off = 12;
    for (uint32_t r = 0; r < n_rec; r++) {
        if (off + 8 > n) {
            TEST_FAILF("record %u truncated", r);
            break;
        }
        uint32_t type = rd32(buf + off), nb = rd32(buf + off + 4);
        off += 8;
        const struct ci_type_traits *t = ci_type_traits(type);
        if (!t || nb == 0 || off + (size_t)nb * (t->type_size + 4 * t->block_size) > n) {
            TEST_FAILF("record %u: bad type %u or size", r, type);
            break;
        }
        size_t ne = (size_t)nb * t->block_size;
        const uint8_t *blocks = buf + off, *want = buf + off + (size_t)nb * t->type_size;
        float *got = malloc(ne * sizeof(float));
        ASSERT(got != NULL);
        ci_dequantize_row(type, blocks, got, (int64_t)ne);
        int bad = 0;
        for (size_t i = 0; i < ne; i++) {
            float w;
            memcpy(&w, want + 4 * i, 4); // little-endian host
            if (memcmp(&got[i], &w, 4) != 0 && bad++ == 0)
                TEST_FAILF("%s block %zu element %zu: %.9g, numpy %.9g", t->name, i / t->block_size,
                           i % t->block_size, (double)got[i], (double)w);
        }
        if (bad > 1)
            printf("  (%s: %d elements differ)\n", t->name, bad);
        free(got);
        off += (size_t)nb * (t->type_size + 4 * t->block_size);
    }
    CHECK(off == n);
    free(buf);
}

/* Q8_0 and Q4_0 rows holding NaN or an infinity (a q8_0 KV cache stores K/V rows of whatever the weights
 * produce): every code is defined, the finite elements of a NaN row keep their codes, and in a row with an
 * infinity (scale Inf, so the finite elements scale to 0 and the infinity to Inf * 0 = NaN) the finite
 * elements take the zero code and the infinity code 0.  The asan variant (UBSan, no recovery) failed here on
 * the float-to-int conversion of NaN. */
TEST(q8_0_q4_0_non_finite_rows) {
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) / 16.0f;
    struct ci_block_q8_0 ref8, q8;
    ci_quantize_row(CI_TYPE_Q8_0, x, &ref8, 32);
    x[5] = NAN;
    ci_quantize_row(CI_TYPE_Q8_0, x, &q8, 32);
    CHECK(q8.d == ref8.d && q8.qs[5] == 0);
    for (int i = 0; i < 32; i++)
        CHECK(i == 5 || q8.qs[i] == ref8.qs[i]);
    x[5] = INFINITY;
    ci_quantize_row(CI_TYPE_Q8_0, x, &q8, 32);
    CHECK(q8.d == 0x7c00); // +Inf in half precision
    for (int i = 0; i < 32; i++)
        CHECK(q8.qs[i] == 0);
    struct ci_block_q4_0 q4;
    x[5] = -INFINITY;
    ci_quantize_row(CI_TYPE_Q4_0, x, &q4, 32);
    // Scale -Inf / -8 = Inf: the finite elements take the zero code 8, the infinite one (NaN) code 0.
    for (int i = 0; i < 16; i++)
        CHECK(q4.qs[i] == (i == 5 ? 0x80 : 0x88));
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    RUN(block_sizes_match_ggml);
    RUN(q4_1_by_hand);
    RUN(q5_0_by_hand);
    RUN(q5_1_by_hand);
    RUN(q2_k_by_hand);
    RUN(q3_k_by_hand);
    RUN(q4_k_by_hand);
    RUN(q5_k_by_hand);
    RUN(q6_k_by_hand);
    RUN(iq4_nl_by_hand);
    RUN(iq4_xs_by_hand);
    RUN(mxfp4_by_hand);
    RUN(golden_numpy);
    RUN(q8_0_q4_0_non_finite_rows);
    return test_exit_code();
}
