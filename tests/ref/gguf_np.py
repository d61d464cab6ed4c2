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
F32, F16, Q4_0, Q8_0, BF16 = 0, 1, 2, 8, 30
TYPES = {
    F32: ("F32", 1, 4),
    F16: ("F16", 1, 2),
    Q4_0: ("Q4_0", 32, 18),
    Q8_0: ("Q8_0", 32, 34),
    BF16: ("BF16", 1, 2),
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
    else:
        raise GGUFError("cannot dequantize type %d" % ttype)
    return np.ascontiguousarray(out, dtype=np.float32).reshape(n)
