"""A minimal GGUF v3 writer and random-model builder, for test models made without cinfer.

Used to check the numpy reference against llama.cpp on shapes the staged models lack (Qwen2 with Q/K/V biases
and NeoX RoPE, GQA, partial RoPE, quantized weights), so that the reference is validated independently of the
code it judges.  Quantizers follow ggml's reference rounding: Q8_0 d = amax/127, q = round(x/d); Q4_0 d = m/-8
where m is the signed value of largest magnitude, q = min(15, trunc(x/d + 8.5)); F16 and BF16 round to nearest
even.

Public API:
    write_gguf(path, kvs, tensors)     kvs: [(key, value_type, value)], tensors: [(name, float32 array, type id)]
                                       (or (name, (ne, bytes), type id) for data already encoded)
    quantize(type, x) -> bytes         x float32 with a row length that is a multiple of the block size
    random_model(path, arch=..., ...)  writes a random llama/qwen2 model with the stories260K 512-token vocab
"""

import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gguf_np  # noqa: E402
from gguf_np import BF16, F16, F32, Q4_0, Q8_0  # noqa: E402

ALIGN = 32


def _str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


_FMT = {
    gguf_np.T_UINT32: "<I",
    gguf_np.T_INT32: "<i",
    gguf_np.T_FLOAT32: "<f",
    gguf_np.T_BOOL: "<?",
    gguf_np.T_UINT64: "<Q",
}
_NP = {gguf_np.T_INT32: "<i4", gguf_np.T_FLOAT32: "<f4", gguf_np.T_UINT32: "<u4"}


def _value(vtype, v):
    if vtype == gguf_np.T_STRING:
        return _str(v)
    if vtype in _FMT:
        return struct.pack(_FMT[vtype], v)
    if vtype == gguf_np.T_ARRAY:
        etype, items = v
        head = struct.pack("<IQ", etype, len(items))
        if etype == gguf_np.T_STRING:
            return head + b"".join(_str(s) for s in items)
        return head + np.asarray(items, dtype=_NP[etype]).tobytes()
    raise ValueError("unsupported KV type %d" % vtype)


def quantize(ttype, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if ttype == F32:
        return x.astype("<f4").tobytes()
    if ttype == F16:
        return x.astype("<f2").tobytes()
    if ttype == BF16:
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
    blocks = x.reshape(-1, 32)
    if ttype == Q8_0:
        amax = np.abs(blocks).max(axis=1)
        d = amax / 127.0
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0).astype(np.float32)
        q = np.round(blocks * inv[:, None]).astype(np.int8)  # numpy rounds half to even; ggml's roundf away
        out = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "i1", (32,))])
        out["d"] = d.astype(np.float16)
        out["qs"] = q
        return out.tobytes()
    if ttype == Q4_0:
        idx = np.abs(blocks).argmax(axis=1)
        m = blocks[np.arange(len(blocks)), idx]
        d = m / -8.0
        inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
        q = np.minimum(15, np.trunc(blocks * inv[:, None] + 8.5)).astype(np.uint8)
        out = np.zeros(len(blocks), dtype=[("d", "<f2"), ("qs", "u1", (16,))])
        out["d"] = d.astype(np.float16)
        out["qs"] = q[:, :16] | (q[:, 16:] << 4)
        return out.tobytes()
    raise ValueError("cannot quantize to type %d" % ttype)


def write_gguf(path, kvs, tensors):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += _str(key) + struct.pack("<I", vtype) + _value(vtype, v)
    datas, off = [], 0
    for name, arr, ttype in tensors:
        if isinstance(arr, tuple):  # (ne, the tensor's bytes already in ttype)
            ne, data = list(arr[0]), bytes(arr[1])
        else:
            arr = np.asarray(arr, dtype=np.float32)
            ne = list(reversed(arr.shape))
            data = quantize(ttype, arr)
        head += _str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", ttype, off)
        datas.append(data)
        off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % ALIGN))
        for data in datas:
            f.write(data)
            f.write(b"\0" * ((-len(data)) % ALIGN))


def stories_vocab(models_dir):
    """The 512-token SentencePiece vocabulary of stories260K.gguf, as GGUF tokenizer KVs."""
    g = gguf_np.GGUF(os.path.join(models_dir, "stories260K.gguf"))
    A = gguf_np.T_ARRAY
    return [
        ("tokenizer.ggml.model", gguf_np.T_STRING, "llama"),
        ("tokenizer.ggml.tokens", A, (gguf_np.T_STRING, g.kv["tokenizer.ggml.tokens"])),
        ("tokenizer.ggml.scores", A, (gguf_np.T_FLOAT32, g.kv["tokenizer.ggml.scores"])),
        ("tokenizer.ggml.token_type", A, (gguf_np.T_INT32, g.kv["tokenizer.ggml.token_type"])),
        ("tokenizer.ggml.bos_token_id", gguf_np.T_UINT32, 1),
        ("tokenizer.ggml.eos_token_id", gguf_np.T_UINT32, 2),
        ("tokenizer.ggml.unknown_token_id", gguf_np.T_UINT32, 0),
    ]


def random_model(
    path,
    models_dir,
    arch="llama",
    n_embd=64,
    n_layer=2,
    n_head=4,
    n_kv_head=2,
    n_ff=96,
    rope_dim=None,
    rope_base=10000.0,
    ctx=256,
    wtype=F32,
    tied=False,
    seed=0,
    scale=1.0,
    head_dim=None,
    rope_freqs=None,
    linear_factor=None,
):
    """A random model with the 512-token stories vocabulary.  Weights ~ N(0, scale^2 / n_in) (norm weights near 1),
    large enough that the next-token distribution is not flat.  Matrices are stored as wtype, norms and biases
    as F32.  head_dim: written as attention.key_length/value_length (n_head * head_dim may differ from n_embd);
    rope_freqs: a float32 array [rope_dim/2] written as rope_freqs.weight (llama3 scaling); linear_factor:
    rope.scaling.type linear with that factor.  arch qwen3 adds per-head Q/K norms.  Returns nothing; load it
    with model_np.Model.load(path)."""
    rng = np.random.default_rng(seed)
    n_vocab = 512
    hd = n_embd // n_head if head_dim is None else head_dim
    rope_dim = hd if rope_dim is None else rope_dim
    U, F = gguf_np.T_UINT32, gguf_np.T_FLOAT32
    kvs = [
        ("general.architecture", gguf_np.T_STRING, arch),
        ("general.name", gguf_np.T_STRING, "random-%s" % arch),
        ("%s.context_length" % arch, U, ctx),
        ("%s.embedding_length" % arch, U, n_embd),
        ("%s.feed_forward_length" % arch, U, n_ff),
        ("%s.block_count" % arch, U, n_layer),
        ("%s.attention.head_count" % arch, U, n_head),
        ("%s.attention.head_count_kv" % arch, U, n_kv_head),
        ("%s.rope.dimension_count" % arch, U, rope_dim),
        ("%s.rope.freq_base" % arch, F, rope_base),
        ("%s.attention.layer_norm_rms_epsilon" % arch, F, 1e-6 if arch != "llama" else 1e-5),
    ] + stories_vocab(models_dir)
    if head_dim is not None:
        kvs += [("%s.attention.key_length" % arch, U, hd), ("%s.attention.value_length" % arch, U, hd)]
    if linear_factor is not None:
        kvs += [
            ("%s.rope.scaling.type" % arch, gguf_np.T_STRING, "linear"),
            ("%s.rope.scaling.factor" % arch, F, linear_factor),
        ]

    def mat(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    q_dim, kv_dim = n_head * hd, n_kv_head * hd
    t = [("token_embd.weight", rng.standard_normal((n_vocab, n_embd)).astype(np.float32), wtype)]
    if rope_freqs is not None:
        t.append(("rope_freqs.weight", np.asarray(rope_freqs, dtype=np.float32), F32))
    for i in range(n_layer):
        b = "blk.%d." % i
        t += [
            (b + "attn_norm.weight", norm(n_embd), F32),
            (b + "attn_q.weight", mat(q_dim, n_embd), wtype),
            (b + "attn_k.weight", mat(kv_dim, n_embd), wtype),
            (b + "attn_v.weight", mat(kv_dim, n_embd), wtype),
            (b + "attn_output.weight", mat(n_embd, q_dim), wtype),
            (b + "ffn_norm.weight", norm(n_embd), F32),
            (b + "ffn_gate.weight", mat(n_ff, n_embd), wtype),
            (b + "ffn_up.weight", mat(n_ff, n_embd), wtype),
            (b + "ffn_down.weight", mat(n_embd, n_ff), wtype),
        ]
        if arch == "qwen3":
            t += [
                (b + "attn_q_norm.weight", (2.0 * norm(hd)).astype(np.float32), F32),
                (b + "attn_k_norm.weight", (2.0 * norm(hd)).astype(np.float32), F32),
            ]
        if arch == "qwen2":
            t += [
                (b + "attn_q.bias", (0.5 * rng.standard_normal(q_dim)).astype(np.float32), F32),
                (b + "attn_k.bias", (0.5 * rng.standard_normal(kv_dim)).astype(np.float32), F32),
                (b + "attn_v.bias", (0.5 * rng.standard_normal(kv_dim)).astype(np.float32), F32),
            ]
    t.append(("output_norm.weight", norm(n_embd), F32))
    if not tied:
        t.append(("output.weight", mat(n_vocab, n_embd) * 4.0, wtype))
    write_gguf(path, kvs, t)
