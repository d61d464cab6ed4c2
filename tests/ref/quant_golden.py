"""Golden dequantization data for the C unit test (tests/unit/test_quant.c): seeded random and adversarial
blocks of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 with the values the numpy reference
(gguf_np.dequantize, written from ggml's block formats) gives them, in tests/unit/data/quant_golden.bin:

    "CIQG", u32 version (1), u32 records; per record: u32 type, u32 blocks, the blocks' bytes, then their
    blocks * block-size float32 values (all little-endian).

`python3 tests/ref/quant_golden.py --write` regenerates the file; tests/ref/test_quant_np.py checks that the
committed file is what this script makes now, so the C test compares against numpy, never against itself."""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(ROOT, "tests", "unit", "data", "quant_golden.bin")
SEED = 20261202
TYPES = [gguf_np.Q4_1, gguf_np.Q5_0, gguf_np.Q5_1, gguf_np.Q2_K, gguf_np.Q3_K, gguf_np.Q4_K, gguf_np.Q5_K,
         gguf_np.Q6_K, gguf_np.IQ4_NL, gguf_np.IQ4_XS, gguf_np.MXFP4]
# MXFP4's E8M0 exponents worth a block each: the subnormal scales 2^-128 and 2^-127 (e 0, 1), the first normal
# one, around 1, and the top, where 2^(e - 128) * 12 overflows float32 to inf (from e = 253; ggml computes the
# same inf, so numpy and C must agree on it bit for bit).
MXFP4_EXPONENTS = [0, 1, 2, 127, 128, 129, 252, 253, 255]
MAX_F16, MIN_SUB = np.uint16(0x7BFF), np.uint16(0x0001)  # 65504 and 2^-24


def _fp16_fields(dt):
    return [f for f in dt.names if dt[f] == np.dtype("<f2")]


def blocks(ttype, rng):
    """The test blocks of one type, as bytes: 4 random ones (random quants and scale bytes, random finite
    fp16 d/dmin/m of both signs), then adversarial ones: fp16 fields 0; d = max fp16 with dmin/m = -max;
    d = smallest subnormal with dmin/m = -smallest; negative fp16 fields with every other byte 0xFF; every
    byte 0x00; scale/quant bytes 0xFF with fp16 fields 1 (MXFP4 has no fp16 field: its exponent is 112..143
    in the random blocks, else random or the fill, and MXFP4_EXPONENTS adds a random block for each of those
    exponents)."""
    dt = gguf_np._BLOCK_DTYPES[ttype]
    f16 = _fp16_fields(dt)
    out = []

    def make(fill, values):
        raw = rng.integers(0, 256, dt.itemsize, dtype=np.uint8) if fill is None else np.full(dt.itemsize, fill,
                                                                                             np.uint8)
        b = np.frombuffer(raw.tobytes(), dtype=dt).copy()
        for f, v in zip(f16, values):
            b[f] = np.asarray(v, dtype=np.uint16).view(np.float16)
        out.append(b.tobytes())

    for _ in range(4):
        make(None, [rng.uniform(-4, 4, ()).astype(np.float16).view(np.uint16) for _ in f16])
        if ttype == gguf_np.MXFP4:  # a scale between 2^-16 and 2^15, as real weights have
            out[-1] = bytes([int(rng.integers(112, 144))]) + out[-1][1:]
    make(None, [0] * len(f16))
    make(None, [MAX_F16] + [MAX_F16 | 0x8000] * (len(f16) - 1))
    make(None, [MIN_SUB] + [MIN_SUB | 0x8000] * (len(f16) - 1))
    make(0xFF, [0xBE00, 0xBA00][: len(f16)])  # -1.5, -0.75
    make(0x00, [0] * len(f16))
    make(0xFF, [0x3C00] * len(f16))  # 1.0
    if ttype == gguf_np.MXFP4:
        for e in MXFP4_EXPONENTS:
            b = np.frombuffer(rng.integers(0, 256, dt.itemsize, dtype=np.uint8).tobytes(), dtype=dt).copy()
            b["e"] = e
            out.append(b.tobytes())
    return b"".join(out)


def golden():
    rng = np.random.default_rng(SEED)
    recs = []
    for t in TYPES:
        data = blocks(t, rng)
        _, bs, size = gguf_np.TYPES[t]
        nb = len(data) // size
        vals = gguf_np.dequantize(t, data, nb * bs).astype("<f4")
        recs.append(struct.pack("<II", t, nb) + data + vals.tobytes())
    return b"CIQG" + struct.pack("<II", 1, len(recs)) + b"".join(recs)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        with open(PATH, "wb") as f:
            f.write(golden())
        print("wrote", PATH)
    else:
        print(__doc__)
