#include "kernels/pack16.h"

#include <string.h>

size_t ci_pk_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    if ((type != CI_TYPE_Q8_0 && type != CI_TYPE_Q4_0 && type != CI_TYPE_Q5_0 && type != CI_TYPE_IQ4_NL &&
         !ci_pk_kquant(type)) ||
        n_in % ci_pk_block_elems(type) != 0 || n_out < CI_PK_ROWS)
        return 0;
    return (size_t)(n_out / CI_PK_ROWS) * ci_pk_group_bytes(type, n_in / ci_pk_block_elems(type));
}

size_t ci_pk_float_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    if ((type != CI_TYPE_F16 && type != CI_TYPE_BF16) || n_in <= 0 || n_in % 16 != 0 || n_out < CI_PK_ROWS)
        return 0;
    return (size_t)(n_out / CI_PK_ROWS) * CI_PK_ROWS * (size_t)n_in * 2;
}

/* ci_pk_float_bytes' layout with R residues (16: the AVX-512 table's, 8: the AVX2 one's): group g's 16 rows,
 * residue-major.  Rows are read 2R contiguous bytes (a unit) at a time and residues written 32 at a time. */
void ci_pk_float_rows(int residues, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                      uint8_t *dst) {
    const int64_t n_units = n_in / residues;
    uint16_t unit[CI_PK_ROWS][16], out[CI_PK_ROWS];
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *o = dst + (size_t)g * CI_PK_ROWS * (size_t)n_in * 2;
        const uint8_t *rows = w + (size_t)(g * CI_PK_ROWS) * row_bytes;
        for (int64_t u = 0; u < n_units; u++) {
            for (int i = 0; i < CI_PK_ROWS; i++)
                memcpy(unit[i], rows + (size_t)i * row_bytes + (size_t)(u * residues) * 2,
                       (size_t)residues * 2);
            for (int j = 0; j < residues; j++) {
                for (int i = 0; i < CI_PK_ROWS; i++)
                    out[i] = unit[i][j];
                memcpy(o + (size_t)(j * n_units + u) * 32, out, 32);
            }
        }
    }
}

size_t ci_pk_float_act_bytes(int64_t n_in, int n_tok) {
    const size_t blocks = ((size_t)n_tok + CI_PK_FLOAT_TOKENS - 1) / CI_PK_FLOAT_TOKENS;
    return blocks * CI_PK_FLOAT_TOKENS * (size_t)n_in * sizeof(float);
}

/* Token t's lane of its block (element Ru + j of it: CI_PK_FLOAT_TOKENS (j n_units + u) floats further). */
static float *act_lane(float *xp, int64_t n_in, int t) {
    return xp + (size_t)(t / CI_PK_FLOAT_TOKENS) * CI_PK_FLOAT_TOKENS * (size_t)n_in + t % CI_PK_FLOAT_TOKENS;
}

void ci_pk_float_act(int residues, const float *x, int64_t n_in, int t0, int t1, float *xp) {
    const int64_t n_units = n_in / residues;
    for (int t = t0; t < t1; t++) {
        const float *xt = x + (size_t)t * (size_t)n_in;
        float *b = act_lane(xp, n_in, t);
        for (int j = 0; j < residues; j++)
            for (int64_t u = 0; u < n_units; u++)
                b[(size_t)(j * n_units + u) * CI_PK_FLOAT_TOKENS] = xt[residues * u + j];
    }
}

/* n bytes from src of each of the 16 rows (rows row_bytes apart) as 4-byte lanes: vector v, lane i = row i's
 * bytes 4v..4v+3 (n a multiple of 4). */
static void pack_lanes(const uint8_t *src, size_t row_bytes, size_t n, uint8_t *dst) {
    for (int i = 0; i < CI_PK_ROWS; i++)
        for (size_t v = 0; v < n / 4; v++)
            memcpy(dst + 64 * v + 4 * (size_t)i, src + (size_t)i * row_bytes + 4 * v, 4);
}

/* The 16 rows' 2-byte values at src + off of each row, side by side. */
static void pack_u16(const uint8_t *src, size_t row_bytes, size_t off, uint8_t *dst) {
    for (int i = 0; i < CI_PK_ROWS; i++)
        memcpy(dst + 2 * (size_t)i, src + (size_t)i * row_bytes + off, 2);
}

/* IQ4_XS's 128 code bytes of the 16 rows in Q4_K's packed order: lane vector v = 8p + i, byte k: element
 * 4i + k of sub-block 2p in the low nibble, of sub-block 2p + 1 in the high one (IQ4_XS keeps element e of
 * sub-block j in nibble e / 16 of qs[16j + e % 16]). */
static void pack_iq4_xs_codes(const uint8_t *qs, size_t row_bytes, uint8_t *dst) {
    for (int i = 0; i < CI_PK_ROWS; i++) {
        const uint8_t *q = qs + (size_t)i * row_bytes;
        for (int v = 0; v < 32; v++)
            for (int k = 0; k < 4; k++) {
                const int e = 4 * (v % 8) + k, j = 2 * (v / 8);
                const int n0 = q[16 * j + e % 16] >> (4 * (e / 16)) & 15;
                const int n1 = q[16 * (j + 1) + e % 16] >> (4 * (e / 16)) & 15;
                dst[64 * v + 4 * i + k] = (uint8_t)(n0 | n1 << 4);
            }
    }
}

/* The K-quant layouts (per group, super-block after super-block, ci_pk_block_bytes each, lanes = rows):
 *  Q4_K: qs as 32 lane vectors (vector v: qs[4v..4v+3]; its low nibbles are elements 32j + 4kk.. of
 *        sub-block j = 2 (v / 8), kk = v % 8, its high nibbles those of sub-block j + 1), the 12 scale bytes
 *        as 3 lane vectors, then the 16 d and the 16 dmin (fp16).
 *  Q5_K: Q4_K's qs vectors, then qh as 8 lane vectors (vector kk: qh[4kk..4kk+3], whose bit j is the 5th
 *        bit of sub-block j's elements 4kk..), then Q4_K's scales, d and dmin.
 *  IQ4_XS: the codes as Q4_K's (its nibbles regrouped so: the file keeps each 32-element sub-block as an
 *        IQ4_NL block), scales_l as one lane vector, the 16 scales_h (u16), the 16 d (fp16).
 *  Q6_K: ql then qh as 48 lane vectors (ql vector 16h + 8p + kk: ql[64h + 32p + 4kk..]; qh vector 8h + kk:
 *        qh[32h + 4kk..]), the 16 sub-block scales as [sub-block][row] int8, then the 16 d (fp16). */
static void pack_kq(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t nb, int64_t g0, int64_t g1,
                    uint8_t *dst) {
    const size_t gb = ci_pk_block_bytes(type), sb = gb / CI_PK_ROWS;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *src = w + (size_t)(g * CI_PK_ROWS) * row_bytes + (size_t)b * sb;
            uint8_t *o = dst + (size_t)g * ci_pk_group_bytes(type, nb) + (size_t)b * gb;
            if (type == CI_TYPE_IQ4_XS) {
                pack_iq4_xs_codes(src + 8, row_bytes, o);
                pack_lanes(src + 4, row_bytes, 4, o + 2048);
                pack_u16(src, row_bytes, 2, o + 2112);
                pack_u16(src, row_bytes, 0, o + 2144);
            } else if (type != CI_TYPE_Q6_K) {
                const bool q5 = type == CI_TYPE_Q5_K;
                const size_t sc = q5 ? 2560 : 2048; // the scales' vectors
                pack_lanes(src + (q5 ? 48 : 16), row_bytes, 128, o);
                if (q5)
                    pack_lanes(src + 16, row_bytes, 32, o + 2048);
                pack_lanes(src + 4, row_bytes, 12, o + sc);
                pack_u16(src, row_bytes, 0, o + sc + 192);
                pack_u16(src, row_bytes, 2, o + sc + 224);
            } else {
                pack_lanes(src, row_bytes, 192, o);
                for (int i = 0; i < CI_PK_ROWS; i++)
                    for (int k = 0; k < 16; k++)
                        o[3072 + 16 * k + i] = src[(size_t)i * row_bytes + 192 + (size_t)k];
                pack_u16(src, row_bytes, 208, o + 3328);
            }
        }
}

void ci_pk_rows(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in, int64_t g0, int64_t g1,
                uint8_t *dst) {
    if (ci_pk_kquant(type)) {
        pack_kq(type, w, row_bytes, n_in / 256, g0, g1, dst);
        return;
    }
    const int64_t nb = n_in / 32;
    const size_t bb = ci_pk_block_bytes(type) / CI_PK_ROWS;
    const size_t cb = ci_pk_chunk_bytes(type);
    // Q5_0's vectors: qs (at 6 in the block) then qh (at 2); the others' are their bytes from 2 on
    const size_t at = type == CI_TYPE_Q5_0 ? 6 : 2;
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *group = dst + (size_t)g * ci_pk_group_bytes(type, nb);
        for (int i = 0; i < CI_PK_ROWS; i++) {
            const uint8_t *row = w + (size_t)(g * CI_PK_ROWS + i) * row_bytes;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * bb;
                uint8_t *chunks = group + (size_t)b * (cb + CI_PK_SCALE_BYTES);
                memcpy(chunks + cb + 2 * (size_t)i, blk, 2);
                for (size_t c = 0; c < cb / 64; c++)
                    for (int k = 0; k < 4; k++) {
                        uint8_t v = at == 6 && c == 4 ? blk[2 + (size_t)k] : blk[at + 4 * c + (size_t)k];
                        chunks[64 * c + 4 * (size_t)i + (size_t)k] =
                            type == CI_TYPE_Q8_0 ? (uint8_t)(v ^ 0x80) : v;
                    }
            }
        }
    }
}
