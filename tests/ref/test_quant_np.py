"""The numpy dequantizers of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 (gguf_np.py,
written from ggml's block formats) on the hand-worked blocks of tests/unit/test_quant.c (the same values, worked
out there in comments), and the golden file that test compares cinfer's C dequantizers against
(tests/unit/data/quant_golden.bin) is exactly what numpy gives now (regenerate: quant_golden.py --write)."""

import struct

import numpy as np

import ciref
import gguf_np
import quant_golden


def block(size, fields):
    """size bytes, zero but for fields: {offset: int 0..255 (one byte) or ("h", fp16 bits)}."""
    b = bytearray(size)
    for off, v in fields.items():
        if isinstance(v, tuple):
            b[off : off + 2] = struct.pack("<H", v[1])
        else:
            b[off] = v
    return bytes(b)


H1, HHALF, HQUART, H2, HM1 = ("h", 0x3C00), ("h", 0x3800), ("h", 0x3400), ("h", 0x4000), ("h", 0xBC00)
KQ = {0: H1, 2: HQUART, 4: 3, 8: 8, 5: 2, 9: 4, 6: 0x40, 10: 0x80, 14: 0x31}  # Q4_K/Q5_K d, dmin, scales
HAND = [
    ("Q4_1", gguf_np.Q4_1, block(20, {0: HHALF, 2: HM1, 4: 0x3A, 19: 0xF0}),
     {0: 4.0, 16: 0.5, 15: -1.0, 31: 6.5, 1: -1.0}),
    ("Q5_0", gguf_np.Q5_0, block(22, {0: H2, 2: 0x01, 4: 0x02, 6: 0x21, 7: 0x0F}),
     {0: 2.0, 16: -28.0, 1: -2.0, 17: 0.0, 2: -32.0}),
    ("Q5_1", gguf_np.Q5_1, block(24, {0: HQUART, 2: H1, 7: 0x80, 23: 0x7F}), {15: 4.75, 31: 6.75, 0: 1.0, 30: 1.0}),
    ("Q2_K", gguf_np.Q2_K, block(84, {80: H1, 82: HHALF, 0: 0x21, 3: 0x13, 10: 0x04, 32: 0x08, 48: 0x0C}),
     {48: 5.5, 160: 12.0, 128: 0.0, 0: -1.0, 1: -1.0, 16: 0.0}),
    ("Q3_K", gguf_np.Q3_K,
     block(110, {108: HHALF, 96: 0x05, 104: 0x02, 101: 0x70, 105: 0xC0, 32: 0x03, 0: 0x01, 80: 0x20, 16: 0x40}),
     {0: 7.5, 1: -10.0, 208: 23.0, 209: -46.0, 16: 64.0}),
    ("Q4_K", gguf_np.Q4_K, block(144, {**KQ, 16: 0x95, 112: 0x0A}),
     {0: 13.0, 32: 17.0, 192: 161.25, 1: -2.0, 64: 0.0, 193: -8.75}),
    ("Q5_K", gguf_np.Q5_K, block(176, {**KQ, 48: 0x95, 144: 0x0A, 16: 0x41}),
     {0: 61.0, 32: 17.0, 192: 433.25, 1: -2.0, 193: -8.75}),
    ("Q6_K", gguf_np.Q6_K, block(210, {208: HHALF, 192: 2, 194: 0xFD, 205: 4, 0: 0x07, 128: 0x02, 80: 0xF0, 176: 0x30}),
     {0: 7.0, 32: 48.0, 208: 62.0, 64: 0.0}),
    ("IQ4_NL", gguf_np.IQ4_NL, block(18, {0: HHALF, 2: 0xF0, 17: 0x98}),
     {0: -63.5, 16: 56.5, 15: 0.5, 31: 6.5, 1: -63.5}),
    ("IQ4_XS", gguf_np.IQ4_XS,
     block(136, {0: HQUART, 2: 0x06, 3: 0xC0, 4: 0x01, 7: 0xF0, 8: 0xF0, 24: 0x08, 135: 0xA7}),
     {0: -31.75, 16: 28.25, 32: -4.0, 48: 508.0, 64: 1016.0, 239: -77.5, 255: 193.75}),
    ("MXFP4", gguf_np.MXFP4, block(17, {0: 129, 1: 0x7F, 6: 0x93}), {0: -24.0, 16: 24.0, 5: 6.0, 21: -2.0, 1: 0.0}),
    ("MXFP4_subnormal", gguf_np.MXFP4, block(17, {0: 0, 1: 0x07}), {0: 12 * 2.0**-128, 16: 0.0, 1: 0.0}),
]


def main():
    rep = ciref.Report()
    for name, t, blk, want in HAND:
        _, bs, size = gguf_np.TYPES[t]
        got = gguf_np.dequantize(t, blk, bs)
        bad = {i: float(got[i]) for i, v in want.items() if got[i] != np.float32(v)}
        rep.check(len(blk) == size and not bad, "quant_np_by_hand_%s" % name.lower(), "got %s, want %s" % (
            bad, {i: want[i] for i in bad}))
    try:
        with open(quant_golden.PATH, "rb") as f:
            have = f.read()
        now = quant_golden.golden()
        rep.check(have == now, "quant_golden_file_is_numpy", "%s differs from what quant_golden.py makes now "
                  "(%d vs %d bytes): regenerate it with tests/ref/quant_golden.py --write" % (
                      quant_golden.PATH, len(have), len(now)))
        # Adversarial blocks (max fp16 scales, subnormals, all-0xFF) must still give finite values; MXFP4's
        # scale 2^(e - 128) times its largest value 12 overflows from e = 253 on, exactly there.
        bad = []
        for t in quant_golden.TYPES:
            data = quant_golden.blocks(t, np.random.default_rng(1))
            _, bs, size = gguf_np.TYPES[t]
            v = gguf_np.dequantize(t, data, len(data) // size * bs).reshape(-1, bs)
            finite = np.isfinite(v).all(axis=1)
            want = np.ones(len(v), bool)
            if t == gguf_np.MXFP4:
                raw = np.frombuffer(data, np.uint8).reshape(-1, size)
                big = np.abs(gguf_np.KVALUES_MXFP4[np.concatenate([raw[:, 1:] & 15, raw[:, 1:] >> 4], 1)]).max(1)
                want = np.ldexp(big.astype(np.float64), raw[:, 0].astype(np.int32) - 128) < 2.0**128
            bad += ["%s block %d" % (gguf_np.type_name(t), i) for i in np.flatnonzero(finite != want)]
        rep.check(not bad, "quant_golden_values_finite", "inf or nan where not expected (or the reverse): %s" % bad)
    except OSError as e:
        rep.fail("quant_golden_file_is_numpy", "%s: %s" % (type(e).__name__, e))
    rep.exit()


if __name__ == "__main__":
    main()
