"""Independent readers for llama2.c checkpoints (legacy and "version 1" exports), for the numpy reference.

Written from llama2.c's export formats, not from cinfer's loader.  Both return (config, weights) where config is a
dict of the header fields and weights maps GGUF tensor names (token_embd.weight, blk.N.attn_q.weight, ...) to
float32 arrays shaped [n_out][n_in], so model_np can treat every format alike.

Legacy: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0 means an
unshared classifier), then fp32 token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
freq_cis_real, freq_cis_imag ([seq_len][head_dim/2] each), then wcls if unshared.
Version 1: 256-byte header (uint32 magic 0x616b3432, int32 version 1, the 7 int32 params, uint8
shared_classifier, zero padding), then fp32 all attn norms, all ffn norms, final norm, tok_emb, wq, wk, wv, wo,
w1, w2, w3, then wcls if not shared.  No freq_cis.
llama2.c's w1 is the FFN gate, w3 the up projection and w2 the down projection.
"""

import struct

import numpy as np

V1_MAGIC = 0x616B3432


class Llama2cError(ValueError):
    pass


def _config(vals):
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = vals
    c = {
        "dim": dim,
        "hidden_dim": hidden,
        "n_layers": n_layers,
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "vocab_size": abs(vocab),
        "seq_len": seq_len,
        "shared_classifier": vocab > 0,
    }
    if min(dim, hidden, n_layers, n_heads, n_kv_heads, abs(vocab), seq_len) <= 0:
        raise Llama2cError("non-positive hyper-parameter in %s" % (vals,))
    if dim % n_heads or n_heads % n_kv_heads:
        raise Llama2cError("inconsistent head counts in %s" % (vals,))
    c["head_dim"] = dim // n_heads
    c["kv_dim"] = c["head_dim"] * n_kv_heads
    return c


class _Floats:
    def __init__(self, buf, offset):
        self.buf = buf
        self.pos = offset

    def take(self, *shape):
        n = 1
        for d in shape:
            n *= d
        end = self.pos + 4 * n
        if end > len(self.buf):
            raise Llama2cError("file too short: need %d bytes, have %d" % (end, len(self.buf)))
        a = np.frombuffer(self.buf, dtype="<f4", count=n, offset=self.pos).reshape(shape).astype(np.float32)
        self.pos = end
        return a


def _layers(w, c, name, arrays):
    for i in range(c["n_layers"]):
        w["blk.%d.%s.weight" % (i, name)] = arrays[i]


def read_legacy(path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 28:
        raise Llama2cError("file too short for a header")
    c = _config(struct.unpack("<7i", buf[:28]))
    c["format"] = "legacy"
    L, d, h, kv, V, hd = c["n_layers"], c["dim"], c["hidden_dim"], c["kv_dim"], c["vocab_size"], c["head_dim"]
    r = _Floats(buf, 28)
    w = {}
    w["token_embd.weight"] = r.take(V, d)
    _layers(w, c, "attn_norm", r.take(L, d))
    _layers(w, c, "attn_q", r.take(L, d, d))
    _layers(w, c, "attn_k", r.take(L, kv, d))
    _layers(w, c, "attn_v", r.take(L, kv, d))
    _layers(w, c, "attn_output", r.take(L, d, d))
    _layers(w, c, "ffn_norm", r.take(L, d))
    _layers(w, c, "ffn_gate", r.take(L, h, d))
    _layers(w, c, "ffn_down", r.take(L, d, h))
    _layers(w, c, "ffn_up", r.take(L, h, d))
    w["output_norm.weight"] = r.take(d)
    c["freq_cis_real"] = r.take(c["seq_len"], hd // 2)
    c["freq_cis_imag"] = r.take(c["seq_len"], hd // 2)
    if not c["shared_classifier"]:
        w["output.weight"] = r.take(V, d)
    if r.pos != len(buf):
        raise Llama2cError("%d trailing bytes after the weights" % (len(buf) - r.pos))
    return c, w


def read_v1(path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 256:
        raise Llama2cError("file too short for a version 1 header")
    magic, version = struct.unpack("<Ii", buf[:8])
    if magic != V1_MAGIC or version != 1:
        raise Llama2cError("not a llama2.c version 1 file (magic %#x version %d)" % (magic, version))
    vals = list(struct.unpack("<7i", buf[8:36]))
    shared = buf[36]
    if vals[5] <= 0:
        raise Llama2cError("bad vocab size %d" % vals[5])
    if not shared:
        vals[5] = -vals[5]
    c = _config(vals)
    c["format"] = "v1"
    L, d, h, kv, V = c["n_layers"], c["dim"], c["hidden_dim"], c["kv_dim"], c["vocab_size"]
    r = _Floats(buf, 256)
    w = {}
    _layers(w, c, "attn_norm", r.take(L, d))
    _layers(w, c, "ffn_norm", r.take(L, d))
    w["output_norm.weight"] = r.take(d)
    w["token_embd.weight"] = r.take(V, d)
    _layers(w, c, "attn_q", r.take(L, d, d))
    _layers(w, c, "attn_k", r.take(L, kv, d))
    _layers(w, c, "attn_v", r.take(L, kv, d))
    _layers(w, c, "attn_output", r.take(L, d, d))
    _layers(w, c, "ffn_gate", r.take(L, h, d))
    _layers(w, c, "ffn_down", r.take(L, d, h))
    _layers(w, c, "ffn_up", r.take(L, h, d))
    if not c["shared_classifier"]:
        w["output.weight"] = r.take(V, d)
    if r.pos != len(buf):
        raise Llama2cError("%d trailing bytes after the weights" % (len(buf) - r.pos))
    return c, w


def read(path):
    """Either format, told apart by the version 1 magic."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) == 8 and struct.unpack("<I", head[:4])[0] == V1_MAGIC:
        return read_v1(path)
    return read_legacy(path)


def read_tokenizer(path, vocab_size):
    """llama2.c tokenizer.bin: int32 max_token_length, then per token float score, int32 length, bytes."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 4
    pieces, scores = [], []
    for _ in range(vocab_size):
        if pos + 8 > len(buf):
            raise Llama2cError("tokenizer file too short")
        score, n = struct.unpack("<fi", buf[pos : pos + 8])
        pos += 8
        if n < 0 or pos + n > len(buf):
            raise Llama2cError("bad token length")
        pieces.append(buf[pos : pos + n])
        scores.append(score)
        pos += n
    return pieces, scores
