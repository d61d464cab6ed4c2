"""The test suite's reference transformer forward pass, in float64 numpy on dequantized weights.

Written from the model math (Llama: RMSNorm, rotary embedding on adjacent pairs, grouped-query causal attention,
SwiGLU FFN; Qwen2: the same plus Q/K/V biases and NeoX rotary pairing; Qwen3: NeoX pairing, no biases, an RMSNorm of
each query and key head before the rotation, head_dim from attention.key_length; RoPE scaling: linear (positions
divided by rope.scaling.factor), Llama 3's per-pair frequency divisors rope_freqs.weight, YaRN (the reference
implementation's / Hugging Face's: per-pair mix of interpolated and original frequencies by a linear ramp between the
correction dimensions of beta_fast and beta_slow, cos/sin scaled by 0.1 ln(factor) + 1) and Phi-3's LongRoPE (long or
short per-pair divisors by the served context vs the original one, cos/sin scaled by rope.scaling.attn_factor);
Phi-3: fused attn_qkv (Q rows, K rows, V rows) and fused ffn_up (gate rows, then up rows), NeoX pairing; Mistral's
sliding window on llama; Gemma 2 and Gemma 3 as their papers and Hugging Face modeling code define them, see _gemma
below; mixtures of experts: llama with expert_count (Mixtral), qwen3moe (qwen3 attention) and qwen2moe (qwen2
attention, plus a shared expert), see _moe), not from cinfer's C code, so it can check
cinfer's forward pass.  Plain attention over the whole sequence with an optional growing K/V cache; no paging,
no threads, nothing clever.

BERT encoders (bert: bge, MiniLM): the Bert class below, from the BERT paper (Devlin et al. 2019) and Hugging Face's
BertModel, with llama.cpp's GGUF tensor names.

Public API:
    m = Model.load(path)              GGUF (llama / qwen2 / qwen3 / qwen2moe / qwen3moe / bert: a Bert) or a llama2.c
                                      checkpoint
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

ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "qwen2moe", "qwen3moe", "phi3", "gpt-oss")
MOE_ARCHS = ("qwen2moe", "qwen3moe", "gpt-oss")


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
        self.neox = self.arch in ("qwen2", "qwen3", "gemma2", "gemma3", "qwen2moe", "qwen3moe", "phi3", "gpt-oss")
        # gpt-oss (OpenAI's reference model.py / HF GptOss): attention with per-head sinks and an output bias,
        # the MLP's input norm stored as post_attention_norm, a biased router whose top k logits are
        # softmaxed, biased experts with the clamped SwiGLU.
        self.gpt_oss = self.arch == "gpt-oss"
        self.qk_norm = self.arch in ("qwen3", "gemma3", "qwen3moe")
        self.qkv_bias = self.arch in ("qwen2", "qwen2moe", "gpt-oss")
        # Mixture of experts: n_expert 0 is a dense FFN.  Mixtral and Qwen3-MoE (norm_topk_prob) renormalise the
        # top-k router probabilities to sum 1; Qwen1.5/2-MoE does not, and adds a shared expert.  moe_norm and
        # n_expert_used are plain attributes a test may change (what a wrong router would compute).
        self.n_expert = int(hp.get("n_expert", 0))
        self.n_expert_used = int(hp.get("n_expert_used", 0))
        self.n_ff_exp = int(hp.get("n_ff_exp", self.n_ff))
        self.n_ff_shexp = int(hp.get("n_ff_shexp", 0))
        self.moe_norm = self.arch in ("llama", "qwen3moe")
        # Names of the weights whose matmuls round the activations to Q8_0-style blocks first (emulate_act_q8).
        self.act_q8 = set()
        if self.arch in MOE_ARCHS and self.n_expert == 0:
            raise ValueError("%s needs expert_count" % self.arch)
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
        self.gemma = self.arch in ("gemma2", "gemma3")
        # Sliding window: a query at position p sees keys at positions p - window < k <= p on the layers where
        # local[layer]; 0: none.  Soft-caps (0: none), the attention scale and the local layers' RoPE base.
        self.window = int(hp.get("sliding_window", 0))
        self.local = list(hp.get("local_layers", [self.window > 0] * self.n_layer))
        self.rope_base_local = float(hp.get("rope_base_local", self.rope_base))
        self.rope_pos_scale_local = float(hp.get("rope_pos_scale_local", self.rope_pos_scale))
        self.attn_softcap = float(hp.get("attn_softcap", 0.0))
        self.final_softcap = float(hp.get("final_softcap", 0.0))
        self.attn_scale = float(hp.get("attn_scale", 1.0 / math.sqrt(int(hp["head_dim"]))))
        # Sabotage switches for the tests: compute as if the feature were absent.
        self.ignore_window = False
        self.ignore_softcap = False
        self.ignore_sinks = False
        # Tests may replace the GeLU (e.g. to model llama.cpp's half-precision GeLU table); None: exact tanh GeLU.
        self.gelu_fn = None
        if self.n_head % self.n_kv_head or self.rope_dim % 2 or self.rope_dim > self.head_dim:
            raise ValueError("inconsistent hyper-parameters %s" % hp)
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        if self.arch == "phi3":
            self._split_phi3()
        self.tied = "output.weight" not in self.w
        # Optional rounding of each new K/V row [n][kv_heads][head_dim] as the cache stores it (cinfer's
        # --kv-type f16 / q8_0, see ciref.kv_round); None keeps float64 K/V (an f32 cache up to arithmetic).
        self.kv_round = None
        # Optional rounding of the query rows [n][heads][head_dim] before the scores (a q8_0 cache scores
        # against the query quantized to Q8_0 too, see ciref.q_round); not applied to soft-capped layers,
        # whose scores cinfer computes from the float query.
        self.q_round = None
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
        n_ff = key("feed_forward_length")
        n_expert = key("expert_count", 0)
        n_used = key("expert_used_count", 0)
        moe = {}
        if n_expert:
            # Expert FFN length: expert_feed_forward_length, else (the HF configs' intermediate sizes) n_ff for
            # Mixtral, n_ff / n_used for the Qwen MoEs; the shared expert's: expert_shared_feed_forward_length.
            default_exp = n_ff if arch == "llama" else n_ff // n_used
            moe = {
                "n_expert": n_expert,
                "n_expert_used": n_used,
                "n_ff_exp": key("expert_feed_forward_length", default_exp),
                "n_ff_shexp": key("expert_shared_feed_forward_length", n_ff) if arch == "qwen2moe" else 0,
            }
        hp = {
            "arch": arch,
            "n_embd": n_embd,
            "n_layer": key("block_count"),
            "n_head": n_head,
            "n_kv_head": key("attention.head_count_kv", n_head),
            "head_dim": head_dim,
            "n_ff": n_ff,
            "rope_dim": key("rope.dimension_count", head_dim),
            "rope_base": key("rope.freq_base", 10000.0),
            "rms_eps": key("attention.layer_norm_rms_epsilon"),
            "n_ctx": key("context_length"),
        }
        hp.update(moe)
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
        hp.update(cls._window_softcap(g, arch, hp))
        m = cls(hp, {name: g.tensor(name) for name in g.tensors})
        m.gguf = g
        return m

    @staticmethod
    def _window_softcap(g, arch, hp):
        """Sliding window and soft-capping hyper-parameters from the GGUF keys, by the models' definitions:
        - Mistral (arch llama with attention.sliding_window): every layer attends to the last `window` positions.
        - Gemma 2 (HF Gemma2DecoderLayer): even layers (layer_idx % 2 == 0) are sliding, window 4096 unless the
          file says; attention scores soft-capped at attn_logit_softcapping (50), final logits at
          final_logit_softcapping (30); queries scaled by query_pre_attn_scalar^-0.5, which GGUF files do not
          carry: head_dim, except 27B (46 layers) whose scalar is n_embd / n_head.
        - Gemma 3 (HF Gemma3DecoderLayer): layer i is sliding unless (i + 1) % 6 == 0; local layers rotate with
          rope_local_base_freq 10000 and no rope scaling, global ones with rope.freq_base and its scaling;
          final soft-cap only if the file gives one; the 27B (62 layers) query scalar as Gemma 2's."""
        out = {}
        n_layer = hp["n_layer"]
        window = g.get("%s.attention.sliding_window" % arch, None)
        if arch == "gemma2":
            window = 4096 if window is None else window
            out["local_layers"] = [i % 2 == 0 for i in range(n_layer)]
            out["attn_softcap"] = g.get("gemma2.attn_logit_softcapping", 50.0)
            out["final_softcap"] = g.get("gemma2.final_logit_softcapping", 30.0)
        elif arch == "gemma3":
            window = window or 0
            out["local_layers"] = [window > 0 and (i + 1) % 6 != 0 for i in range(n_layer)]
            out["rope_base_local"] = 10000.0
            out["rope_pos_scale_local"] = 1.0
            out["final_softcap"] = g.get("gemma3.final_logit_softcapping", 0.0)
        elif arch == "gpt-oss":  # HF GptOss layer_types: sliding_attention on even layers, full on odd
            window = window or 0
            out["local_layers"] = [window > 0 and i % 2 == 0 for i in range(n_layer)]
        else:
            window = window or 0
        out["sliding_window"] = window
        if (arch, n_layer) in (("gemma2", 46), ("gemma3", 62)):
            out["attn_scale"] = 1.0 / math.sqrt(hp["n_embd"] // hp["n_head"])
        return out

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
            if gguf_np.GGUF(path).arch == "bert":
                return Bert(path)
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
                }
            )
            if self.n_expert:
                ne, fe = self.n_expert, self.n_ff_exp
                want.update(
                    {
                        b + "ffn_gate_inp.weight": (ne, d),
                        b + "ffn_gate_exps.weight": (ne, fe, d),
                        b + "ffn_up_exps.weight": (ne, fe, d),
                        b + "ffn_down_exps.weight": (ne, d, fe),
                    }
                )
                if self.arch == "qwen2moe":
                    fs = self.n_ff_shexp
                    want.update(
                        {
                            b + "ffn_gate_inp_shexp.weight": (d,),
                            b + "ffn_gate_shexp.weight": (fs, d),
                            b + "ffn_up_shexp.weight": (fs, d),
                            b + "ffn_down_shexp.weight": (d, fs),
                        }
                    )
            else:
                want.update({b + "ffn_gate.weight": (ff, d), b + "ffn_up.weight": (ff, d), b + "ffn_down.weight": (d, ff)})
            if self.qk_norm:
                want.update({b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,)})
            if self.qkv_bias:
                want.update({b + "attn_q.bias": (q_dim,), b + "attn_k.bias": (kv_dim,), b + "attn_v.bias": (kv_dim,)})
            if self.gemma:
                want.update({b + "post_attention_norm.weight": (d,), b + "post_ffw_norm.weight": (d,)})
            if self.gpt_oss:
                ne, fe = self.n_expert, self.n_ff_exp
                del want[b + "ffn_norm.weight"]
                want.update(
                    {
                        b + "post_attention_norm.weight": (d,),
                        b + "attn_output.bias": (d,),
                        b + "attn_sinks.weight": (self.n_head,),
                        b + "ffn_gate_inp.bias": (ne,),
                        b + "ffn_gate_exps.bias": (ne, fe),
                        b + "ffn_up_exps.bias": (ne, fe),
                        b + "ffn_down_exps.bias": (ne, d),
                    }
                )
        for name, shape in want.items():
            if name not in self.w:
                raise ValueError("missing tensor %s" % name)
            if self.w[name].shape != shape:
                raise ValueError("tensor %s has shape %s, want %s" % (name, self.w[name].shape, shape))

    # ---- math ----------------------------------------------------------------------------------------------

    def _rmsnorm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.rms_eps) * weight

    def _rope(self, x, pos, local=False):
        """x: [n][heads][head_dim] rotated in a copy; pos: [n] positions; local: a sliding-window layer's base."""
        half = self.rope_dim // 2
        inv_freq, mscale = self.rope_inv_freq(local)
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

    def emulate_act_q8(self):
        """Makes every matmul with a 32-block quantized weight (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) first round its
        activations as ggml's Q8_0 activation blocks do (per 32 elements d = max|x| / 127, q = round(x / d) to
        nearest even, the block's value q * d with d stored in half precision), as llama.cpp's CPU backend and
        cinfer both compute.  GGUF models only."""
        q32 = (gguf_np.Q8_0, gguf_np.Q4_0, gguf_np.Q4_1, gguf_np.Q5_0, gguf_np.Q5_1, gguf_np.IQ4_NL)
        self.act_q8 = {name for name, t in self.gguf.tensors.items() if t.type in q32}

    def _act(self, x, name):
        if name not in self.act_q8:
            return x
        b = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
        d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
        q = np.rint(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
        return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)

    def rope_inv_freq(self, local=False):
        """Per-pair angular frequencies [rope_dim/2] (angle = pos * freq) and the cos/sin magnitude factor; local:
        a sliding-window layer's base and linear scale (gemma3)."""
        d = self.rope_dim
        base = self.rope_base_local if local else self.rope_base
        i = np.arange(d // 2, dtype=np.float64)
        inv_freq = base ** (-2.0 * i / d)  # [half]
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
                return d * math.log(L / (n_rot * 2 * math.pi)) / (2 * math.log(base))

            low = max(math.floor(corr_dim(self.yarn_beta_fast)), 0)
            high = min(math.ceil(corr_dim(self.yarn_beta_slow)), d - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((i - low) / (high - low), 0.0, 1.0)
            extrapolate = 1.0 - ramp  # 1: the original frequency
            inv_freq = inv_freq / s * (1.0 - extrapolate) + inv_freq * extrapolate
            if s > 1.0:
                mscale *= 0.1 * math.log(s) + 1.0
        else:  # linear: positions / factor
            inv_freq = inv_freq * (self.rope_pos_scale_local if local else self.rope_pos_scale)
        return inv_freq, mscale

    def _matmul(self, x, name, w, e=None):
        """x @ w.T for the weight called name (w: self.w[name], or its expert e), the hook that subclasses
        emulating an engine's arithmetic override."""
        return self._act(x, name) @ w.T

    def _linear(self, x, name, bias=None):
        y = self._matmul(x, name, self.w[name])
        if bias is not None:
            y = y + self.w[bias]
        return y

    def _swiglu(self, x, names, e=None):
        """down(silu(gate x) * up x) with the weights of names (gate, up, down); e: that expert of 3-D tensors."""
        gate, up, down = (self.w[n] if e is None else self.w[n][e] for n in names)
        g = self._matmul(x, names[0], gate, e)
        h = g / (1.0 + np.exp(-g)) * self._matmul(x, names[1], up, e)
        return self._matmul(h, names[2], down, e)

    def _moe(self, h, b):
        """Mixture-of-experts FFN of the normed rows h [n][d]: router probabilities softmax(W_r h); the
        n_expert_used most probable experts (lower index first on ties), weighted by their probabilities
        (renormalised to sum 1 where the architecture does); each expert a SwiGLU FFN; qwen2moe adds
        sigmoid(w_g . h) * shared_ffn(h)."""
        if self.gpt_oss:
            return self._moe_gpt_oss(h, b)
        logits = self._linear(h, b + "ffn_gate_inp.weight")  # [n][E]
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        k = self.n_expert_used
        top = np.argsort(-p, axis=1, kind="stable")[:, :k]  # [n][k]
        wts = np.take_along_axis(p, top, axis=1)
        if self.moe_norm:
            wts = wts / wts.sum(axis=1, keepdims=True)
        names = [b + "ffn_%s_exps.weight" % m for m in ("gate", "up", "down")]
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(k):
                out[t] += wts[t, j] * self._swiglu(h[t : t + 1], names, top[t, j])[0]
        if self.arch == "qwen2moe":
            g = h @ self.w[b + "ffn_gate_inp_shexp.weight"]  # [n]
            shared = self._swiglu(h, [b + "ffn_%s_shexp.weight" % m for m in ("gate", "up", "down")])
            out += (1.0 / (1.0 + np.exp(-g)))[:, None] * shared
        return out

    def _moe_gpt_oss(self, h, b):
        """gpt-oss's MLP block: router logits W_r h + b_r; the top k logits (sorted, lower index first on ties)
        softmaxed into the weights; expert e: g = W_g h + b_g, u = W_u h + b_u, g = min(g, 7),
        u = clamp(u, -7, 7), act = g sigmoid(1.702 g) (u + 1), out = W_d act + b_d."""
        logits = self._linear(h, b + "ffn_gate_inp.weight", b + "ffn_gate_inp.bias")  # [n][E]
        k = self.n_expert_used
        top = np.argsort(-logits, axis=1, kind="stable")[:, :k]  # [n][k]
        sel = np.take_along_axis(logits, top, axis=1)
        wts = np.exp(sel - sel.max(axis=1, keepdims=True))
        wts /= wts.sum(axis=1, keepdims=True)
        W = {m: self.w[b + "ffn_%s_exps.weight" % m] for m in ("gate", "up", "down")}
        B = {m: self.w[b + "ffn_%s_exps.bias" % m] for m in ("gate", "up", "down")}
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            x = h[t : t + 1]
            for j in range(k):
                e = top[t, j]
                g = self._matmul(x, b + "ffn_gate_exps.weight", W["gate"][e], e) + B["gate"][e]
                u = self._matmul(x, b + "ffn_up_exps.weight", W["up"][e], e) + B["up"][e]
                g = np.minimum(g, 7.0)
                u = np.clip(u, -7.0, 7.0)
                act = g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)
                y = self._matmul(act, b + "ffn_down_exps.weight", W["down"][e], e) + B["down"][e]
                out[t] += wts[t, j] * y[0]
        return out

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
        scale = self.attn_scale
        qwen = self.qkv_bias
        # causal mask over all cached + new keys: query at pos[i] sees keys 0..pos[i]
        kpos = np.arange(p0 + n)[None, :]
        mask = kpos > pos[:, None]  # [n][p0+n]
        # sliding-window layers also hide keys at pos[i] - window or earlier
        mask_local = mask | (pos[:, None] - kpos >= self.window) if self.window > 0 and not self.ignore_window else mask

        x = self.w["token_embd.weight"][tokens]  # [n][d]
        if self.gemma:  # Gemma scales the embeddings by sqrt(hidden size)
            x = x * math.sqrt(self.n_embd)
        for layer in range(self.n_layer):
            local = self.local[layer]
            b = "blk.%d." % layer
            h = self._rmsnorm(x, self.w[b + "attn_norm.weight"])
            q = self._linear(h, b + "attn_q.weight", b + "attn_q.bias" if qwen else None).reshape(n, H, hd)
            k = self._linear(h, b + "attn_k.weight", b + "attn_k.bias" if qwen else None).reshape(n, G, hd)
            v = self._linear(h, b + "attn_v.weight", b + "attn_v.bias" if qwen else None).reshape(n, G, hd)
            if self.qk_norm:  # per head, over head_dim
                q = self._rmsnorm(q, self.w[b + "attn_q_norm.weight"])
                k = self._rmsnorm(k, self.w[b + "attn_k_norm.weight"])
            q = self._rope(q, pos, local)
            k = self._rope(k, pos, local)
            if self.kv_round is not None:
                k, v = self.kv_round(k), self.kv_round(v)
            if self.q_round is not None and not (self.attn_softcap > 0 and not self.ignore_softcap):
                q = self.q_round(q)
            if cache["k"][layer] is not None:
                k = np.concatenate([cache["k"][layer], k], axis=0)
                v = np.concatenate([cache["v"][layer], v], axis=0)
            cache["k"][layer], cache["v"][layer] = k, v
            # expand KV heads to query heads: query head j reads KV head j // group
            kh = np.repeat(k, group, axis=1)  # [T][H][hd]
            vh = np.repeat(v, group, axis=1)
            s = np.einsum("nhd,thd->hnt", q, kh) * scale  # [H][n][T]
            if self.attn_softcap > 0 and not self.ignore_softcap:
                s = self.attn_softcap * np.tanh(s / self.attn_softcap)
            s = np.where((mask_local if local else mask)[None, :, :], -np.inf, s)
            if self.gpt_oss and not self.ignore_sinks:
                # a per-head sink logit joins each row's softmax and takes its share of the mass, adding no value
                sink = np.broadcast_to(self.w[b + "attn_sinks.weight"][:, None, None], s.shape[:2] + (1,))
                s = np.concatenate([s, sink], axis=-1)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            if self.gpt_oss and not self.ignore_sinks:
                p = p[:, :, :-1]
            att = np.einsum("hnt,thd->nhd", p, vh).reshape(n, H * hd)
            o = self._linear(att, b + "attn_output.weight", b + "attn_output.bias" if self.gpt_oss else None)
            if self.gemma:  # Gemma 2/3 norm each sub-block's output before adding it to the residual
                o = self._rmsnorm(o, self.w[b + "post_attention_norm.weight"])
            x = x + o

            h = self._rmsnorm(x, self.w[b + ("post_attention_norm.weight" if self.gpt_oss else "ffn_norm.weight")])
            if self.n_expert:
                x = x + self._moe(h, b)
            elif self.gemma:  # GeGLU with the tanh approximation of GeLU (gelu_pytorch_tanh)
                gate = self._linear(h, b + "ffn_gate.weight")
                up = self._linear(h, b + "ffn_up.weight")
                if self.gelu_fn is not None:
                    act = self.gelu_fn(gate)
                else:
                    act = 0.5 * gate * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate**3)))
                o = self._linear(act * up, b + "ffn_down.weight")
                x = x + self._rmsnorm(o, self.w[b + "post_ffw_norm.weight"])
            else:
                x = x + self._swiglu(h, [b + "ffn_gate.weight", b + "ffn_up.weight", b + "ffn_down.weight"])
        cache["n"] = p0 + n

        x = self._rmsnorm(x, self.w["output_norm.weight"])
        self.last_hidden = x  # the final normed hidden states: what embeddings pool
        logits = self._linear(x, "token_embd.weight" if self.tied else "output.weight")
        if self.final_softcap > 0 and not self.ignore_softcap:
            logits = self.final_softcap * np.tanh(logits / self.final_softcap)
        return logits

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


class Bert:
    """A BERT encoder, written from its definition (BERT paper; Hugging Face BertModel / BertLayer):

        x = LayerNorm(E_token[t] + E_position[p] + E_type[0])            (segment A: token type 0)
        per layer:
            q, k, v = x Wq + bq, x Wk + bk, x Wv + bv, split into heads
            a = softmax(q k^T / sqrt(head_dim)) v                         (every position sees every position)
            x = LayerNorm(x + (a Wo + bo))                                (post-norm)
            x = LayerNorm(x + (gelu(x W1 + b1) W2 + b2))
        the last layer's x is the sequence output (no final norm); embeddings pool it.

    GeLU: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) by default, which is what
    llama.cpp's bert graph (ggml_gelu) computes for these GGUF files; gelu="erf" gives BERT's exact form.
    LayerNorm: population variance, epsilon <arch>.attention.layer_norm_epsilon.

    Sabotage switches for the tests: causal (mask future keys), no_positions (drop E_position)."""

    def __init__(self, path, gelu="tanh"):
        g = gguf_np.GGUF(path)
        if g.arch != "bert":
            raise ValueError("not a bert model: %r" % g.arch)
        self.arch = "bert"
        self.n_embd = g.kv["bert.embedding_length"]
        self.n_layer = g.kv["bert.block_count"]
        self.n_head = g.kv["bert.attention.head_count"]
        self.head_dim = self.n_embd // self.n_head
        self.n_ff = g.kv["bert.feed_forward_length"]
        self.n_ctx = g.kv["bert.context_length"]
        self.eps = float(g.kv["bert.attention.layer_norm_epsilon"])
        self.w = {name: np.asarray(g.tensor(name), dtype=np.float64) for name in g.tensors}
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        self.gelu = gelu
        self.causal = False
        self.no_positions = False
        self.gguf = g

    def _ln(self, x, name):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        return y

    def _gelu(self, x):
        if self.gelu == "erf":
            return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))

    def forward(self, tokens):
        """The sequence output [n][n_embd] (float64) of one input; also kept as last_hidden."""
        tokens = np.asarray(tokens, dtype=np.int64)
        n, H, hd = len(tokens), self.n_head, self.head_dim
        if n == 0 or n > self.n_ctx or tokens.min() < 0 or tokens.max() >= self.n_vocab:
            raise ValueError("bad input")
        x = self.w["token_embd.weight"][tokens]
        if not self.no_positions:
            x = x + self.w["position_embd.weight"][np.arange(n)]
        if "token_types.weight" in self.w:
            x = x + self.w["token_types.weight"][0]
        x = self._ln(x, "token_embd_norm")
        mask = np.arange(n)[None, :] > np.arange(n)[:, None] if self.causal else np.zeros((n, n), dtype=bool)
        for layer in range(self.n_layer):
            b = "blk.%d." % layer
            q = self._lin(x, b + "attn_q").reshape(n, H, hd)
            k = self._lin(x, b + "attn_k").reshape(n, H, hd)
            v = self._lin(x, b + "attn_v").reshape(n, H, hd)
            s = np.einsum("nhd,thd->hnt", q, k) / math.sqrt(hd)
            s = np.where(mask[None], -np.inf, s)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            a = np.einsum("hnt,thd->nhd", p, v).reshape(n, H * hd)
            x = self._ln(x + self._lin(a, b + "attn_output"), b + "attn_output_norm")
            f = self._lin(self._gelu(self._lin(x, b + "ffn_up")), b + "ffn_down")
            x = self._ln(x + f, b + "layer_output_norm")
        self.last_hidden = x
        return x


def load(path):
    return Model.load(path)
