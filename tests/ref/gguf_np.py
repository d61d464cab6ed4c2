"""Independent GGUF v2/v3 reader and dequantizer for the test suite's numpy reference.

Written from the GGUF format description (magic "GGUF", version, tensor/KV counts, typed KV pairs, tensor infos,
aligned data section) and ggml's block layouts, not from cinfer's C code, so that it can check cinfer's loader.
Uses only the standard library and numpy.  Every read is bounds-checked; a malformed file raises GGUFError.

Public API:
    g = GGUF(path)            g.version, g.kv {key: value}, g.kv_type {key: type id}, g.tensors {name: TensorInfo},
                              g.alignment, g.data_offset
    g.tensor(name)            float32 ndarray shaped [ne[n-1]]...[ne[0]] (row-major, ne[0] contiguous)
    g.raw(name)               the tensor's bytes
    dequantize(type, buf, n)  float32 ndarray of n elements from the raw bytes of a tensor of that type
"""

import struct

import numpy as np

GGUF_MAGIC = b"GGUF"

# KV value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = range(10)
T_UINT64, T_INT64, T_FLOAT64 = 10, 11, 12

_SCALAR_FMT = {
    T_UINT8: "<B",
    T_INT8: "<b",
    T_UINT16: "<H",
    T_INT16: "<h",
    T_UINT32: "<I",
    T_INT32: "<i",
    T_FLOAT32: "<f",
    T_BOOL: "<?",
    T_UINT64: "<Q",
    T_INT64: "<q",
    T_FLOAT64: "<d",
}
_SCALAR_NP = {
    T_UINT8: "<u1",
    T_INT8: "<i1",
    T_UINT16: "<u2",
    T_INT16: "<i2",
    T_UINT32: "<u4",
    T_INT32: "<i4",
    T_FLOAT32: "<f4",
    T_UINT64: "<u8",
    T_INT64: "<i8",
    T_FLOAT64: "<f8",
}

# Tensor element types (ggml numbering) this reader can dequantize: id -> (name, block elements, block bytes)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16 = 0, 1, 2, 3, 6, 7, 8, 30
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 10, 11, 12, 13, 14
IQ4_NL, IQ4_XS, MXFP4 = 20, 23, 39
TYPES = {
    F32: ("F32", 1, 4),
    F16: ("F16", 1, 2),
    Q4_0: ("Q4_0", 32, 18),
    Q4_1: ("Q4_1", 32, 20),
    Q5_0: ("Q5_0", 32, 22),
    Q5_1: ("Q5_1", 32, 24),
    Q8_0: ("Q8_0", 32, 34),
    Q2_K: ("Q2_K", 256, 84),
    Q3_K: ("Q3_K", 256, 110),
    Q4_K: ("Q4_K", 256, 144),
    Q5_K: ("Q5_K", 256, 176),
    Q6_K: ("Q6_K", 256, 210),
    IQ4_NL: ("IQ4_NL", 32, 18),
    IQ4_XS: ("IQ4_XS", 256, 136),
    BF16: ("BF16", 1, 2),
    MXFP4: ("MXFP4", 32, 17),
}
TYPE_IDS = {v[0]: k for k, v in TYPES.items()}


class GGUFError(ValueError):
    pass


class TensorInfo:
    __slots__ = ("name", "ne", "type", "offset", "nbytes")

    def __init__(self, name, ne, ttype, offset, nbytes):
        self.name = name
        self.ne = ne  # list, ne[0] is the contiguous row length
        self.type = ttype
        self.offset = offset  # relative to the data section
        self.nbytes = nbytes

    @property
    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def shape(self):  # numpy shape: outermost first
        return tuple(reversed(self.ne))

    def __repr__(self):
        return "TensorInfo(%s, ne=%s, type=%s, off=%d)" % (self.name, self.ne, type_name(self.type), self.offset)


def type_name(t):
    return TYPES[t][0] if t in TYPES else "type%d" % t


def tensor_nbytes(ttype, ne):
    if ttype not in TYPES:
        raise GGUFError("unsupported tensor type %d" % ttype)
    _, bs, ts = TYPES[ttype]
    if ne[0] % bs:
        raise GGUFError("row of %d elements is not a multiple of the block size %d" % (ne[0], bs))
    n = 1
    for d in ne:
        n *= d
    return n // bs * ts


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("truncated file: need %d bytes at offset %d of %d" % (n, self.pos, len(self.buf)))
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.unpack("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="surrogateescape")


def _read_value(cur, vtype, depth=0):
    if vtype in _SCALAR_FMT:
        return cur.unpack(_SCALAR_FMT[vtype])
    if vtype == T_STRING:
        return cur.string()
    if vtype == T_ARRAY:
        if depth > 0:
            raise GGUFError("nested arrays are not supported")
        etype = cur.unpack("<I")
        count = cur.unpack("<Q")
        if etype in _SCALAR_NP:
            dt = np.dtype(_SCALAR_NP[etype])
            return np.frombuffer(cur.take(count * dt.itemsize), dtype=dt).copy()
        if etype == T_BOOL:
            return np.frombuffer(cur.take(count), dtype=np.uint8).astype(bool)
        if etype == T_STRING:
            if count > len(cur.buf):
                raise GGUFError("string array count %d exceeds the file size" % count)
            return [cur.string() for _ in range(count)]
        raise GGUFError("bad array element type %d" % etype)
    raise GGUFError("bad KV type %d" % vtype)


class GGUF:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.path = path
        cur = _Cursor(self.buf)
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError("not a GGUF file (bad magic)")
        self.version = cur.unpack("<I")
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d" % self.version)
        n_tensors = cur.unpack("<Q")
        n_kv = cur.unpack("<Q")
        self.kv = {}
        self.kv_type = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.unpack("<I")
            if key in self.kv:
                raise GGUFError("duplicate key %s" % key)
            self.kv[key] = _read_value(cur, vtype)
            self.kv_type[key] = vtype
        self.alignment = int(self.kv.get("general.alignment", 32))
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError("bad alignment %d" % self.alignment)
        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I")
            if not 1 <= n_dims <= 4:
                raise GGUFError("tensor %s: bad n_dims %d" % (name, n_dims))
            ne = [cur.unpack("<Q") for _ in range(n_dims)]
            ttype = cur.unpack("<I")
            off = cur.unpack("<Q")
            if name in self.tensors:
                raise GGUFError("duplicate tensor %s" % name)
            self.tensors[name] = TensorInfo(name, ne, ttype, off, None)
        a = self.alignment
        self.data_offset = (cur.pos + a - 1) // a * a
        for t in self.tensors.values():
            if t.type in TYPES:
                t.nbytes = tensor_nbytes(t.type, t.ne)
                if t.offset % a:
                    raise GGUFError("tensor %s: offset %d not aligned to %d" % (t.name, t.offset, a))
                if self.data_offset + t.offset + t.nbytes > len(self.buf):
                    raise GGUFError("tensor %s: data past end of file" % t.name)

    @property
    def arch(self):
        return self.kv.get("general.architecture")

    def get(self, key, default=None):
        return self.kv.get(key, default)

    def raw(self, name):
        t = self.tensors[name]
        if t.nbytes is None:
            raise GGUFError("tensor %s has unsupported type %d" % (name, t.type))
        start = self.data_offset + t.offset
        return self.buf[start : start + t.nbytes]

    def tensor(self, name):
        t = self.tensors[name]
        return dequantize(t.type, self.raw(name), t.n_elements).reshape(t.shape)


def fp16_to_f32(u16):
    return np.asarray(u16, dtype="<u2").view("<f2").astype(np.float32)


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


_Q8_0 = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])
_Q4_0 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
assert _Q8_0.itemsize == 34 and _Q4_0.itemsize == 18
# The other legacy quants and the K-quants (256-element super-blocks), field by field as ggml-common.h lays
# them out (all little-endian, no padding).
_Q4_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (16,))])
_Q5_0 = np.dtype([("d", "<f2"), ("qh", "<u4"), ("qs", "u1", (16,))])
_Q5_1 = np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "<u4"), ("qs", "u1", (16,))])
_Q2_K = np.dtype([("scales", "u1", (16,)), ("qs", "u1", (64,)), ("d", "<f2"), ("dmin", "<f2")])
_Q3_K = np.dtype([("hmask", "u1", (32,)), ("qs", "u1", (64,)), ("scales", "u1", (12,)), ("d", "<f2")])
_Q4_K = np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", (12,)), ("qs", "u1", (128,))])
_Q5_K = np.dtype(
    [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", (12,)), ("qh", "u1", (32,)), ("qs", "u1", (128,))]
)
_Q6_K = np.dtype([("ql", "u1", (128,)), ("qh", "u1", (64,)), ("scales", "i1", (16,)), ("d", "<f2")])
# The non-linear 4-bit types: a nibble indexes a table of 16 values.  IQ4_NL: one fp16 scale per 32 elements;
# IQ4_XS: 256-element super-blocks, an fp16 scale and a 6-bit scale per 32-element sub-block (low 4 bits in
# scales_l, top 2 bits in scales_h); MXFP4 (OCP microscaling FP4): a shared power-of-two exponent (E8M0, bias
# 127) per 32 elements and E2M1 values, which ggml stores doubled (so they are integers) with the exponent
# halved to match.
_IQ4_NL = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_IQ4_XS = np.dtype([("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", (4,)), ("qs", "u1", (128,))])
_MXFP4 = np.dtype([("e", "u1"), ("qs", "u1", (16,))])
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
# E2M1: sign bit 3, exponent bits 1-2, mantissa bit 0 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and negated); doubled.
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_BLOCK_DTYPES = {
    Q4_1: _Q4_1, Q5_0: _Q5_0, Q5_1: _Q5_1, Q2_K: _Q2_K, Q3_K: _Q3_K, Q4_K: _Q4_K, Q5_K: _Q5_K, Q6_K: _Q6_K,
    IQ4_NL: _IQ4_NL, IQ4_XS: _IQ4_XS, MXFP4: _MXFP4,
}
for _t, _dt in _BLOCK_DTYPES.items():
    assert _dt.itemsize == TYPES[_t][2], TYPES[_t][0]


def _bits(x, nbits):
    """Unpacks the last axis of uint8 array x into nbits-wide fields, least significant first:
    (..., k) -> (..., 8 // nbits, k), field f of byte b at [..., f, b]."""
    shifts = np.arange(0, 8, nbits, dtype=np.uint8).reshape(-1, 1)
    return (x[..., None, :] >> shifts) & np.uint8((1 << nbits) - 1)


def _kquant_scales_mins(sc):
    """Q4_K/Q5_K: the 12 scale bytes -> (scales, mins), each (nb, 8) 6-bit integers.  Sub-blocks 0-3 keep
    scale and min in the low 6 bits of bytes 0-3 and 4-7; sub-blocks 4-7 have their low 4 bits in the nibbles
    of bytes 8-11 (scale: low nibble, min: high nibble) and their top 2 bits in the top 2 bits of bytes 0-3
    (scale) and 4-7 (min)."""
    sc = sc.astype(np.int32)
    lo_s, lo_m = sc[:, 0:4] & 63, sc[:, 4:8] & 63
    hi_s = (sc[:, 8:12] & 15) | ((sc[:, 0:4] >> 6) << 4)
    hi_m = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return np.concatenate([lo_s, hi_s], axis=1), np.concatenate([lo_m, hi_m], axis=1)


def _q3k_scales(sc):
    """Q3_K: the 12 scale bytes -> (nb, 16) signed scales.  Scale k's low 4 bits: nibble k // 8 of byte
    k % 8; its top 2 bits: 2-bit field k // 4 of byte 8 + k % 4; stored with a bias of 32."""
    sc = sc.astype(np.int32)
    low = np.concatenate([sc[:, 0:8] & 15, sc[:, 0:8] >> 4], axis=1)  # k = 0..15
    high = _bits(sc[:, 8:12].astype(np.uint8), 2).astype(np.int32).reshape(-1, 16)  # [field, byte] = k
    return (low | (high << 4)) - 32


def e8m0_half_to_f32(e):
    """MXFP4's block exponent halved: 2^(e - 128) as float32, exactly (2^-127 and 2^-128 are subnormal)."""
    return np.ldexp(np.float32(1), np.asarray(e, dtype=np.int32) - 128).astype(np.float32)


def _nibbles16(qs):
    """(..., 16) bytes -> (..., 32) nibbles: the low nibbles are elements 0-15, the high ones 16-31."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _dequant_blocks(ttype, b):
    """(nb, block elements) float32 values of the structured blocks b."""
    f32 = np.float32
    if ttype in (Q4_1, Q5_0, Q5_1):
        q = np.concatenate([b["qs"] & 15, b["qs"] >> 4], axis=1).astype(np.int32)  # elements 0-15, 16-31
        if ttype != Q4_1:  # 5th bit of element j: bit j of qh
            q |= ((b["qh"][:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32) << 4
        d = b["d"].astype(f32)[:, None]
        if ttype == Q5_0:
            return (q - 16).astype(f32) * d
        return q.astype(f32) * d + b["m"].astype(f32)[:, None]
    nb = len(b)
    if ttype in (IQ4_NL, MXFP4):
        if ttype == IQ4_NL:
            d, kv = b["d"].astype(f32), KVALUES_IQ4NL
        else:
            d, kv = e8m0_half_to_f32(b["e"]), KVALUES_MXFP4
        with np.errstate(over="ignore"):  # e >= 253 overflows to inf, as in ggml
            return d[:, None] * kv[_nibbles16(b["qs"])].astype(f32)
    if ttype == IQ4_XS:
        # Sub-block j (elements 32j..32j+31): qs[16j..16j+15] laid out as one IQ4_NL block; 6-bit scale ls =
        # nibble j % 2 of scales_l[j // 2] | (bits 2j, 2j+1 of scales_h) << 4, stored with a bias of 32.
        lo = _bits(b["scales_l"], 4).transpose(0, 2, 1).reshape(nb, 8).astype(np.int32)  # [nb, j]
        hi = (b["scales_h"].astype(np.int32)[:, None] >> (2 * np.arange(8))) & 3
        dl = b["d"].astype(f32)[:, None] * ((lo | (hi << 4)) - 32).astype(f32)  # [nb, j]
        q = KVALUES_IQ4NL[_nibbles16(b["qs"].reshape(nb, 8, 16))].astype(f32)  # [nb, j, 32]
        return (dl[:, :, None] * q).reshape(nb, 256)
    if ttype in (Q2_K, Q3_K):
        # Element 128h + 32s + l: 2-bit field s of qs[32h + l]; sub-block of 16: 8h + 2s + l // 16.
        q = _bits(b["qs"].reshape(nb, 2, 32), 2).astype(np.int32)  # [nb, h, s, l]
        if ttype == Q2_K:
            sc = b["scales"]
            dl = b["d"].astype(f32)[:, None] * (sc & 15).astype(f32)
            ml = b["dmin"].astype(f32)[:, None] * (sc >> 4).astype(f32)
            dl, ml = np.repeat(dl, 16, axis=1), np.repeat(ml, 16, axis=1)
            return dl * q.reshape(nb, 256).astype(f32) - ml
        # Q3_K: the third bit of element 128h + 32s + l is bit 4h + s of hmask[l]; clear means minus 4.
        hbit = _bits(b["hmask"], 1).reshape(nb, 2, 4, 32).astype(np.int32)  # [nb, bit // 4, bit % 4, l]
        q = q - 4 * (1 - hbit)
        dl = np.repeat(b["d"].astype(f32)[:, None] * _q3k_scales(b["scales"]).astype(f32), 16, axis=1)
        return dl * q.reshape(nb, 256).astype(f32)
    if ttype in (Q4_K, Q5_K):
        # Element 64c + 32u + l: nibble u of qs[32c + l]; sub-block (32 elements) 2c + u; Q5_K's 5th bit
        # is bit 2c + u of qh[l].
        q = _bits(b["qs"].reshape(nb, 4, 32), 4).astype(np.int32).reshape(nb, 8, 32)
        if ttype == Q5_K:
            q |= _bits(b["qh"], 1).astype(np.int32) << 4  # [nb, bit, l]
        scales, mins = _kquant_scales_mins(b["scales"])
        d1 = b["d"].astype(f32)[:, None] * scales.astype(f32)
        m1 = b["dmin"].astype(f32)[:, None] * mins.astype(f32)
        return (d1[:, :, None] * q.astype(f32) - m1[:, :, None]).reshape(nb, 256)
    if ttype == Q6_K:
        # Element 128h + 32r + l: 4 low bits from nibble r // 2 of ql[64h + 32(r % 2) + l], 2 high bits from
        # field r of qh[32h + l]; value minus 32; sub-block of 16 elements with its int8 scale.
        lo = _bits(b["ql"].reshape(nb, 2, 2, 32), 4)  # [nb, h, r % 2, nibble, l]
        lo = lo.transpose(0, 1, 3, 2, 4).reshape(nb, 2, 4, 32)  # [nb, h, r, l]
        hi = _bits(b["qh"].reshape(nb, 2, 32), 2)  # [nb, h, r, l]
        q = (lo.astype(np.int32) | (hi.astype(np.int32) << 4)) - 32
        ds = np.repeat(b["d"].astype(f32)[:, None] * b["scales"].astype(f32), 16, axis=1)
        return ds * q.reshape(nb, 256).astype(f32)
    raise GGUFError("cannot dequantize type %d" % ttype)


def dequantize(ttype, buf, n):
    """Float32 values of n elements stored as ttype in buf (exactly as many bytes as they need)."""
    if ttype == F32:
        out = np.frombuffer(buf, dtype="<f4", count=n)
    elif ttype == F16:
        out = np.frombuffer(buf, dtype="<f2", count=n)
    elif ttype == BF16:
        out = bf16_to_f32(np.frombuffer(buf, dtype="<u2", count=n))
    elif ttype == Q8_0:
        if n % 32:
            raise GGUFError("Q8_0 needs a multiple of 32 elements")
        b = np.frombuffer(buf, dtype=_Q8_0, count=n // 32)
        d = b["d"].astype(np.float32)[:, None]
        out = b["qs"].astype(np.float32) * d
    elif ttype == Q4_0:
        if n % 32:
            raise GGUFError("Q4_0 needs a multiple of 32 elements")
        b = np.frombuffer(buf, dtype=_Q4_0, count=n // 32)
        d = b["d"].astype(np.float32)[:, None]
        q = np.concatenate([b["qs"] & 0x0F, b["qs"] >> 4], axis=1).astype(np.int32) - 8
        out = q.astype(np.float32) * d
    elif ttype in _BLOCK_DTYPES:
        name, bs, _ = TYPES[ttype]
        if n % bs:
            raise GGUFError("%s needs a multiple of %d elements" % (name, bs))
        out = _dequant_blocks(ttype, np.frombuffer(buf, dtype=_BLOCK_DTYPES[ttype], count=n // bs))
    else:
        raise GGUFError("cannot dequantize type %d" % ttype)
    return np.ascontiguousarray(out, dtype=np.float32).reshape(n)
