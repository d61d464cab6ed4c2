"""The test suite's reference transformer forward pass, in float64 numpy on dequantized weights.

Written from the model math (Llama: RMSNorm, rotary embedding on adjacent pairs, grouped-query causal attention,
SwiGLU FFN; Qwen2: the same plus Q/K/V biases and NeoX rotary pairing; Qwen3: NeoX pairing, no biases, an RMSNorm of
each query and key head before the rotation, head_dim from attention.key_length; RoPE scaling: linear (positions
divided by rope.scaling.factor), Llama 3's per-pair frequency divisors rope_freqs.weight, YaRN (the reference
implementation's / Hugging Face's: per-pair mix of interpolated and original frequencies by a linear ramp between the
correction dimensions of beta_fast and beta_slow, cos/sin scaled by 0.1 ln(factor) + 1) and Phi-3's LongRoPE (long or
short per-pair divisors by the served context vs the original one, cos/sin scaled by rope.scaling.attn_factor);
Phi-3: fused attn_qkv (Q rows, K rows, V rows) and fused ffn_up (gate rows, then up rows), NeoX pairing), not from
cinfer's C code, so it can check
cinfer's forward pass.  Plain attention over the whole sequence with an optional growing K/V cache; no paging,
no threads, nothing clever.

Public API:
    m = Model.load(path)              GGUF (llama / qwen2) or llama2.c legacy / version 1 checkpoint
    m.forward(tokens) -> [n][vocab]   float64 logits for every position 0..n-1 of one sequence
    m.greedy(prompt, n_steps) -> ids  argmax decoding (first index on ties) of n_steps tokens after prompt
    m.n_vocab, m.n_ctx, m.arch, ...
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gguf_np  # noqa: E402
import llama2c_np  # noqa: E402

ARCHS = ("llama", "qwen2", "qwen3", "phi3")


class Model:
    def __init__(self, hp, weights):
        """hp: dict with arch, n_embd, n_layer, n_head, n_kv_head, head_dim, n_ff, rope_dim, rope_base, rms_eps,
        n_ctx; weights: GGUF tensor names -> arrays shaped [n_out][n_in] (any float dtype)."""
        self.arch = hp["arch"]
        if self.arch not in ARCHS:
            raise ValueError("unsupported architecture %r" % self.arch)
        self.n_embd = int(hp["n_embd"])
        self.n_layer = int(hp["n_layer"])
        self.n_head = int(hp["n_head"])
        self.n_kv_head = int(hp["n_kv_head"])
        self.head_dim = int(hp["head_dim"])
        self.n_ff = int(hp["n_ff"])
        self.rope_dim = int(hp["rope_dim"])
        self.rope_base = float(hp["rope_base"])
        self.rms_eps = float(hp["rms_eps"])
        self.n_ctx = int(hp["n_ctx"])
        self.neox = self.arch in ("qwen2", "qwen3", "phi3")
        self.qk_norm = self.arch == "qwen3"
        self.rope_pos_scale = float(hp.get("rope_pos_scale", 1.0))
        # YaRN (rope_scaling "yarn"): factor s = 1 / rope_pos_scale over the original context; attn_factor
        # multiplies cos and sin under every scaling (as llama.cpp's rope.scaling.attn_factor).
        self.rope_scaling = hp.get("rope_scaling", "none")
        self.rope_orig_ctx = int(hp.get("rope_orig_ctx", hp["n_ctx"]))
        self.rope_attn_factor = float(hp.get("rope_attn_factor", 1.0))
        self.yarn_beta_fast = float(hp.get("yarn_beta_fast", 32.0))
        self.yarn_beta_slow = float(hp.get("yarn_beta_slow", 1.0))
        # LongRoPE: the context served per sequence picks the long (above rope_orig_ctx) or short factors.
        self.serve_ctx = int(hp.get("serve_ctx", hp["n_ctx"]))
        if self.n_head % self.n_kv_head or self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError("inconsistent hyper-parameters %s" % hp)
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        if self.arch == "phi3":
            self._split_phi3()
        self.tied = "output.weight" not in self.w
        # Optional rounding of each new K/V row [n][kv_heads][head_dim] as the cache stores it (cinfer's
        # --kv-type f16 / q8_0, see ciref.kv_round); None keeps float64 K/V (an f32 cache up to arithmetic).
        self.kv_round = None
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        # Llama 3 scaling: theta_i = pos * base^(-2i/rope_dim) / rope_freqs[i]; ignore_rope_freqs drops them
        # (what a loader that skipped the tensor would compute).
        self.rope_freqs = self.w.get("rope_freqs.weight")
        self.rope_long = self.w.get("rope_factors_long.weight")
        self.rope_short = self.w.get("rope_factors_short.weight")
        if (self.rope_long is None) != (self.rope_short is None):
            raise ValueError("LongRoPE needs both rope_factors_long and rope_factors_short")
        self._check_shapes()

    def _split_phi3(self):
        """Phi-3's fused tensors as the separate ones: attn_qkv rows are Q (n_head*head_dim), K, V (each
        n_kv_head*head_dim); ffn_up rows are the gate's n_ff then the up projection's n_ff."""
        q_dim, kv_dim, ff = self.n_head * self.head_dim, self.n_kv_head * self.head_dim, self.n_ff
        for i in range(self.n_layer):
            b = "blk.%d." % i
            qkv = self.w.pop(b + "attn_qkv.weight", None)
            if qkv is not None:
                if qkv.shape[0] != q_dim + 2 * kv_dim:
                    raise ValueError("tensor %sattn_qkv.weight has %d rows" % (b, qkv.shape[0]))
                self.w[b + "attn_q.weight"] = qkv[:q_dim]
                self.w[b + "attn_k.weight"] = qkv[q_dim : q_dim + kv_dim]
                self.w[b + "attn_v.weight"] = qkv[q_dim + kv_dim :]
            up = self.w[b + "ffn_up.weight"]
            if up.shape[0] != 2 * ff:
                raise ValueError("tensor %sffn_up.weight has %d rows, want 2 * n_ff" % (b, up.shape[0]))
            self.w[b + "ffn_gate.weight"] = up[:ff]
            self.w[b + "ffn_up.weight"] = up[ff:]

    # ---- loading -------------------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path):
        g = gguf_np.GGUF(path)
        arch = g.arch
        if arch not in ARCHS:
            raise ValueError("unsupported architecture %r" % arch)

        def key(k, default=None):
            v = g.get("%s.%s" % (arch, k), default)
            if v is None:
                raise ValueError("missing GGUF key %s.%s" % (arch, k))
            return v

        n_embd = key("embedding_length")
        n_head = key("attention.head_count")
        head_dim = key("attention.key_length", n_embd // n_head)
        hp = {
            "arch": arch,
            "n_embd": n_embd,
            "n_layer": key("block_count"),
            "n_head": n_head,
            "n_kv_head": key("attention.head_count_kv", n_head),
            "head_dim": head_dim,
            "n_ff": key("feed_forward_length"),
            "rope_dim": key("rope.dimension_count", head_dim),
            "rope_base": key("rope.freq_base", 10000.0),
            "rms_eps": key("attention.layer_norm_rms_epsilon"),
            "n_ctx": key("context_length"),
        }
        factor = g.get("%s.rope.scaling.factor" % arch, 0.0) or 1.0
        stype = g.get("%s.rope.scaling.type" % arch, "linear" if factor != 1.0 else "none")
        if stype not in ("none", "linear", "llama3", "yarn", "longrope"):
            raise ValueError("unsupported rope scaling %r" % stype)
        hp["rope_scaling"] = stype
        hp["rope_pos_scale"] = 1.0 / factor if stype in ("linear", "yarn") else 1.0
        hp["rope_orig_ctx"] = g.get("%s.rope.scaling.original_context_length" % arch, hp["n_ctx"])
        hp["rope_attn_factor"] = g.get("%s.rope.scaling.attn_factor" % arch, 1.0)
        hp["yarn_beta_fast"] = g.get("%s.rope.scaling.yarn_beta_fast" % arch, 32.0)
        hp["yarn_beta_slow"] = g.get("%s.rope.scaling.yarn_beta_slow" % arch, 1.0)
        m = cls(hp, {name: g.tensor(name) for name in g.tensors})
        m.gguf = g
        return m

    @classmethod
    def from_llama2c(cls, path):
        c, w = llama2c_np.read(path)
        hp = {
            "arch": "llama",
            "n_embd": c["dim"],
            "n_layer": c["n_layers"],
            "n_head": c["n_heads"],
            "n_kv_head": c["n_kv_heads"],
            "head_dim": c["head_dim"],
            "n_ff": c["hidden_dim"],
            "rope_dim": c["head_dim"],
            "rope_base": 10000.0,
            "rms_eps": float(np.float32(1e-5)),  # llama2.c uses the float 1e-5f
            "n_ctx": c["seq_len"],
        }
        m = cls(hp, w)
        m.llama2c = c
        return m

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == gguf_np.GGUF_MAGIC:
            return cls.from_gguf(path)
        return cls.from_llama2c(path)

    def _check_shapes(self):
        d, hd, ff = self.n_embd, self.head_dim, self.n_ff
        q_dim, kv_dim = self.n_head * hd, self.n_kv_head * hd
        want = {"token_embd.weight": (self.n_vocab, d), "output_norm.weight": (d,)}
        if not self.tied:
            want["output.weight"] = (self.n_vocab, d)
        if self.rope_freqs is not None:
            want["rope_freqs.weight"] = (self.rope_dim // 2,)
        if self.rope_long is not None:
            want["rope_factors_long.weight"] = (self.rope_dim // 2,)
            want["rope_factors_short.weight"] = (self.rope_dim // 2,)
        for i in range(self.n_layer):
            b = "blk.%d." % i
            want.update(
                {
                    b + "attn_norm.weight": (d,),
                    b + "attn_q.weight": (q_dim, d),
                    b + "attn_k.weight": (kv_dim, d),
                    b + "attn_v.weight": (kv_dim, d),
                    b + "attn_output.weight": (d, q_dim),
                    b + "ffn_norm.weight": (d,),
                    b + "ffn_gate.weight": (ff, d),
                    b + "ffn_up.weight": (ff, d),
                    b + "ffn_down.weight": (d, ff),
                }
            )
            if self.qk_norm:
                want.update({b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,)})
            if self.arch == "qwen2":
                want.update({b + "attn_q.bias": (q_dim,), b + "attn_k.bias": (kv_dim,), b + "attn_v.bias": (kv_dim,)})
        for name, shape in want.items():
            if name not in self.w:
                raise ValueError("missing tensor %s" % name)
            if self.w[name].shape != shape:
                raise ValueError("tensor %s has shape %s, want %s" % (name, self.w[name].shape, shape))

    # ---- math ----------------------------------------------------------------------------------------------

    def _rmsnorm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.rms_eps) * weight

    def _rope(self, x, pos):
        """x: [n][heads][head_dim] rotated in a copy; pos: [n] positions."""
        half = self.rope_dim // 2
        inv_freq, mscale = self.rope_inv_freq()
        p = np.asarray(pos, dtype=np.float64)
        theta = p[:, None] * inv_freq[None, :]  # [n][half]
        cos = np.cos(theta)[:, None, :] * mscale
        sin = np.sin(theta)[:, None, :] * mscale
        y = x.copy()
        if self.neox:
            a = x[:, :, :half]
            b = x[:, :, half : self.rope_dim]
            y[:, :, :half] = a * cos - b * sin
            y[:, :, half : self.rope_dim] = a * sin + b * cos
        else:
            a = x[:, :, 0 : self.rope_dim : 2]
            b = x[:, :, 1 : self.rope_dim : 2]
            y[:, :, 0 : self.rope_dim : 2] = a * cos - b * sin
            y[:, :, 1 : self.rope_dim : 2] = a * sin + b * cos
        return y

    def rope_inv_freq(self):
        """Per-pair angular frequencies [rope_dim/2] (angle = pos * freq) and the cos/sin magnitude factor."""
        d = self.rope_dim
        i = np.arange(d // 2, dtype=np.float64)
        inv_freq = self.rope_base ** (-2.0 * i / d)  # [half]
        if self.rope_freqs is not None:  # Llama 3
            inv_freq = inv_freq / self.rope_freqs
        if self.rope_long is not None:  # LongRoPE: llama.cpp's choice by the served context
            inv_freq = inv_freq / (self.rope_long if self.serve_ctx > self.rope_orig_ctx else self.rope_short)
        mscale = self.rope_attn_factor
        if self.rope_scaling == "yarn":
            # YaRN (Peng et al. 2023; jquesnelle/yarn's and transformers' _compute_yarn_parameters): the dimension
            # whose wavelength 2 pi / freq fits n_rot times in the original context,
            # dim(n_rot) = d ln(L / (2 pi n_rot)) / (2 ln base); low = floor(dim(beta_fast)), high =
            # ceil(dim(beta_slow)), clamped to [0, d - 1]; pairs below low keep their frequency, above high are
            # interpolated (freq / s), a linear ramp between; attention scaled by 0.1 ln s + 1 via cos and sin.
            s = 1.0 / self.rope_pos_scale
            L = self.rope_orig_ctx

            def corr_dim(n_rot):
                return d * math.log(L / (n_rot * 2 * math.pi)) / (2 * math.log(self.rope_base))

            low = max(math.floor(corr_dim(self.yarn_beta_fast)), 0)
            high = min(math.ceil(corr_dim(self.yarn_beta_slow)), d - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((i - low) / (high - low), 0.0, 1.0)
            extrapolate = 1.0 - ramp  # 1: the original frequency
            inv_freq = inv_freq / s * (1.0 - extrapolate) + inv_freq * extrapolate
            if s > 1.0:
                mscale *= 0.1 * math.log(s) + 1.0
        else:
            inv_freq = inv_freq * self.rope_pos_scale  # linear: positions / factor
        return inv_freq, mscale

    def _linear(self, x, name, bias=None):
        y = x @ self.w[name].T
        if bias is not None:
            y = y + self.w[bias]
        return y

    def new_cache(self):
        return {"n": 0, "k": [None] * self.n_layer, "v": [None] * self.n_layer}

    def forward(self, tokens, cache=None):
        """Logits [len(tokens)][n_vocab] (float64) of tokens at positions cache.n .. cache.n+len-1 (0.. without a
        cache).  With a cache, the tokens' K/V are appended to it."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or len(tokens) == 0:
            raise ValueError("need a non-empty 1-d token list")
        if tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("token id out of range")
        if cache is None:
            cache = self.new_cache()
        n, p0 = len(tokens), cache["n"]
        pos = np.arange(p0, p0 + n)
        H, G, hd = self.n_head, self.n_kv_head, self.head_dim
        group = H // G
        scale = 1.0 / math.sqrt(hd)
        qwen = self.arch == "qwen2"
        # causal mask over all cached + new keys: query at pos[i] sees keys 0..pos[i]
        mask = np.arange(p0 + n)[None, :] > pos[:, None]  # [n][p0+n]

        x = self.w["token_embd.weight"][tokens]  # [n][d]
        for layer in range(self.n_layer):
            b = "blk.%d." % layer
            h = self._rmsnorm(x, self.w[b + "attn_norm.weight"])
            q = self._linear(h, b + "attn_q.weight", b + "attn_q.bias" if qwen else None).reshape(n, H, hd)
            k = self._linear(h, b + "attn_k.weight", b + "attn_k.bias" if qwen else None).reshape(n, G, hd)
            v = self._linear(h, b + "attn_v.weight", b + "attn_v.bias" if qwen else None).reshape(n, G, hd)
            if self.qk_norm:  # per head, over head_dim
                q = self._rmsnorm(q, self.w[b + "attn_q_norm.weight"])
                k = self._rmsnorm(k, self.w[b + "attn_k_norm.weight"])
            q = self._rope(q, pos)
            k = self._rope(k, pos)
            if self.kv_round is not None:
                k, v = self.kv_round(k), self.kv_round(v)
            if cache["k"][layer] is not None:
                k = np.concatenate([cache["k"][layer], k], axis=0)
                v = np.concatenate([cache["v"][layer], v], axis=0)
            cache["k"][layer], cache["v"][layer] = k, v
            # expand KV heads to query heads: query head j reads KV head j // group
            kh = np.repeat(k, group, axis=1)  # [T][H][hd]
            vh = np.repeat(v, group, axis=1)
            s = np.einsum("nhd,thd->hnt", q, kh) * scale  # [H][n][T]
            s = np.where(mask[None, :, :], -np.inf, s)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            att = np.einsum("hnt,thd->nhd", p, vh).reshape(n, H * hd)
            x = x + self._linear(att, b + "attn_output.weight")

            h = self._rmsnorm(x, self.w[b + "ffn_norm.weight"])
            gate = self._linear(h, b + "ffn_gate.weight")
            up = self._linear(h, b + "ffn_up.weight")
            silu = gate / (1.0 + np.exp(-gate))
            x = x + self._linear(silu * up, b + "ffn_down.weight")
        cache["n"] = p0 + n

        x = self._rmsnorm(x, self.w["output_norm.weight"])
        return self._linear(x, "token_embd.weight" if self.tied else "output.weight")

    def greedy(self, prompt, n_steps):
        """n_steps argmax tokens after prompt (incremental with a K/V cache; no stop tokens)."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)[-1]
        ids = []
        for step in range(n_steps):
            t = int(np.argmax(logits))
            ids.append(t)
            if step + 1 < n_steps:
                logits = self.forward([t], cache)[-1]
        return ids


def load(path):
    return Model.load(path)
