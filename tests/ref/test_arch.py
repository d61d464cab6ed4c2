"""Architecture features against the independent numpy reference (tests/ref/model_np.py): Llama 3's RoPE
frequency divisors (rope_freqs.weight), linear RoPE scaling, Qwen3 (per-head Q/K RMSNorm, head_dim from
attention.key_length with n_head * head_dim != n_embd), and the load errors for what cinfer does not implement.

Models: `cinfer synth` presets tiny-llama3, tiny-qwen3, tiny-phi3 (fused QKV and gate-up, LongRoPE, 24 of 32
dimensions rotated NeoX-style) and tiny-yarn (YaRN factor 4 over an original context of 128) in F32 and Q8_0, and files derived from them here by
rewriting the GGUF (gguf_write_np): rope_freqs.weight removed, a linear rope.scaling of the tiny preset, and the
malformed ones.  Tokens: BOS then 99 seeded ids, so positions run to 99 (the llama3 factors divide the angles
of all but the fastest pairs, which changes the logits well within that range).

Checks:
  - --threads 1/2 and --block-size 1/16/512 give byte-identical logits, and a prefix's logits are the first rows;
  - cinfer's logits match the reference at every position (ciref.logit_tolerance per type; Q8_0 over the
    first 24 positions within 0.15, see Q8_TOL);
  - the llama3 file: cinfer's logits differ from the same file without rope_freqs.weight, and from the
    reference with the factors ignored, by far more than the tolerance (the factors are really applied);
    the file without the tensor matches the reference that ignores them;
  - linear scaling: matches the reference with positions divided by the factor and differs from the unscaled;
  - YaRN and LongRoPE (check_rope_scalings): cinfer matches the reference; sabotage checks (the reference without
    the LongRoPE factors, with the short instead of the long ones, without the attention factor, without YaRN, with
    linear in place of YaRN's ramp, without YaRN's 0.1 ln s + 1) all differ by more than MIN_EFFECT; a served
    context at the original one picks the short factors; attn_factor / betas / a factor below 1 from the file;
    Phi-3 with separate Q/K/V equals the fused file; partial rotary with adjacent pairs;
  - malformed files are refused with a message naming the problem: rope_freqs.weight of the wrong length,
    key_length != value_length, unknown and unimplemented rope.scaling.type, an unknown tensor (and Q/K norms
    in a llama file), sliding-window attention (qwen3) and logit soft-capping keys (llama), and expert_count > 0
    (llama's sliding window and the Gemma architectures: test_window.py).
"""

import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ciref  # noqa: E402
import gguf_np  # noqa: E402
import gguf_write_np  # noqa: E402
import model_np  # noqa: E402
from ciref import CinferError  # noqa: E402

N_TOKENS = 100
SEED = 1
TYPES = ["f32", "q8_0"]
# The logits of the llama3 file with and without its factors must differ by at least this (relative, as
# compare_logits measures), far above every tolerance.
MIN_EFFECT = 0.5
# Q8_0 files are compared over the first Q8_POSITIONS positions (as test_logits.py's 24) within Q8_TOL: cinfer
# quantizes the activations of each matmul to Q8 blocks (as llama.cpp does) and the reference does not, and
# these presets' sharp attention (and qwen3's scaled Q/K norms) amplify that.  Measured relative max|diff| over
# 24 positions: tiny-llama3 0.095, tiny-qwen3 0.116, tiny-llama3 without rope_freqs 0.117; over 100 positions
# 0.13 and 0.24.  The F32 files are the exact check; the Q8_0 ones are checked tightly against llama.cpp
# (tests/llamacpp/llamacpp_check.py), which quantizes activations the same way.
Q8_POSITIONS = 24
Q8_TOL = 0.15


def rewrite(src, dst, drop_tensors=(), add_tensors=(), set_kvs=(), drop_kvs=(), replace_tensors=None):
    """Copies the GGUF src to dst with tensors dropped / added (name, float32 array) / replaced, and keys set
    ((key, gguf type, value)) or dropped."""
    g = gguf_np.GGUF(src)
    kvs = []
    overrides = {k: (t, v) for k, t, v in set_kvs}
    for key, val in g.kv.items():
        if key in drop_kvs or key in overrides:
            continue
        vt = g.kv_type[key]
        if vt == gguf_np.T_ARRAY:
            if isinstance(val, list):
                val = (gguf_np.T_STRING, val)
            else:
                et = {np.dtype("<i4"): gguf_np.T_INT32, np.dtype("<f4"): gguf_np.T_FLOAT32}[val.dtype]
                val = (et, val)
        kvs.append((key, vt, val))
    kvs += [(k, t, v) for k, (t, v) in overrides.items()]
    tensors = []
    for name, t in g.tensors.items():
        if name in drop_tensors:
            continue
        if replace_tensors and name in replace_tensors:
            tensors.append((name, replace_tensors[name], gguf_np.F32))
        else:
            tensors.append((name, (t.ne, g.raw(name)), t.type))
    tensors += [(name, arr, gguf_np.F32) for name, arr in add_tensors]
    gguf_write_np.write_gguf(dst, kvs, tensors)


def ref_logits(path, tokens, ignore_rope_freqs=False):
    m = model_np.Model.load(path)
    if ignore_rope_freqs:
        m.rope_freqs = None
    return m.forward(tokens)


def rel_diff(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(1.0, float(np.abs(b).max())))


def expect_refused(rep, name, path, words, tmp):
    """cinfer logits on path must fail, its message containing every string of words."""
    try:
        ciref.cinfer_logits(path, [1, 2, 3], os.path.join(tmp, "bad.f32"))
    except CinferError as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        rep.check(not missing, name, "message lacks %s: %s" % (missing, msg[-300:]), msg.strip()[-160:])
        return
    rep.fail(name, "cinfer accepted the file")


def rope_scaling_malformed(paths):
    """Malformed YaRN / LongRoPE / Phi-3 files: (name, source, rewrite arguments, words of the message)."""
    ph, ya = paths["tiny-phi3", "f32"], paths["tiny-yarn", "f32"]
    half = 12  # tiny-phi3 rotates 24 dimensions
    return [
        ("longrope_long_wrong_length", ph, {"replace_tensors": {"rope_factors_long.weight": np.ones(16, np.float32)}},
         ["rope_factors_long.weight", "shape"]),
        ("longrope_short_zero", ph, {"replace_tensors": {"rope_factors_short.weight": np.zeros(half, np.float32)}},
         ["rope_factors_short.weight", "not positive"]),
        ("longrope_missing_short", ph, {"drop_tensors": ["rope_factors_short.weight"]},
         ["rope_factors_short.weight", "missing"]),
        ("longrope_type_without_factors", ph, {
            "drop_tensors": ["rope_factors_short.weight", "rope_factors_long.weight"],
            "set_kvs": [("phi3.rope.scaling.type", gguf_np.T_STRING, "longrope")]}, ["rope_factors_long.weight"]),
        ("longrope_factors_with_yarn", ph, {"set_kvs": [("phi3.rope.scaling.type", gguf_np.T_STRING, "yarn"),
                                                        ("phi3.rope.scaling.factor", gguf_np.T_FLOAT32, 4.0)]},
         ["LongRoPE", "yarn"]),
        ("phi3_ffn_up_not_fused", ph, {"replace_tensors": {"blk.1.ffn_up.weight": np.ones((768, 256), np.float32)}},
         ["blk.1.ffn_up.weight", "shape"]),
        ("phi3_qkv_missing_in_layer", ph, {"drop_tensors": ["blk.2.attn_qkv.weight"]}, ["blk.2.attn_qkv.weight"]),
        ("phi3_qkv_wrong_rows", ph, {"replace_tensors": {"blk.0.attn_qkv.weight": np.ones((256 * 3, 256), np.float32)}},
         ["blk.0.attn_qkv.weight", "shape"]),
        ("yarn_beta_order", ya, {"set_kvs": [("llama.rope.scaling.yarn_beta_fast", gguf_np.T_FLOAT32, 0.5)]},
         ["yarn_beta_fast", "beta_slow"]),
        ("yarn_attn_factor_negative", ya, {"set_kvs": [("llama.rope.scaling.attn_factor", gguf_np.T_FLOAT32, -1.0)]},
         ["rope.scaling.attn_factor"]),
        ("yarn_factor_negative", ya, {"set_kvs": [("llama.rope.scaling.factor", gguf_np.T_FLOAT32, -4.0)]},
         ["rope.scaling.factor", "positive"]),
        ("yarn_orig_ctx_zero", ya, {"set_kvs": [("llama.rope.scaling.original_context_length", gguf_np.T_UINT32, 0)]},
         ["original_context_length"]),
        ("yarn_log_multiplier", ya, {"set_kvs": [("llama.rope.scaling.yarn_log_multiplier", gguf_np.T_FLOAT32, 0.1)]},
         ["yarn_log_multiplier"]),
        ("longrope_tensors_in_llama", paths["tiny", "f32"], {"add_tensors": [
            ("rope_factors_long.weight", np.ones(16, np.float32)), ("rope_factors_short.weight", np.ones(16, np.float32))]},
         ["rope_factors_"]),
    ]


def check_rope_scalings(rep, paths, got, tokens, out, tmp):
    """YaRN, LongRoPE, partial rotary and Phi-3's fused tensors: cinfer against the reference, and sabotage checks
    showing each mechanism moves the logits far beyond the tolerance."""
    tol = ciref.logit_tolerance("f32")
    ph, ya = paths["tiny-phi3", "f32"], paths["tiny-yarn", "f32"]
    cph, cya = got["tiny-phi3", "f32"].astype(np.float64), got["tiny-yarn", "f32"].astype(np.float64)
    # Phi-3 files carry attention.sliding_window as the converters wrote it; as llama.cpp, cinfer warns and
    # computes full attention: the same logits as without the key (the window of 16 would cut the 100 tokens).
    swa = os.path.join(tmp, "phi3-swa.gguf")
    rewrite(ph, swa, set_kvs=[("phi3.attention.sliding_window", gguf_np.T_UINT32, 16)])
    with_key = ciref.cinfer_logits(swa, tokens, out)[0]
    rep.check(np.array_equal(with_key, got["tiny-phi3", "f32"]), "phi3_sliding_window_not_applied",
              "the key changed the logits")

    def sabotage(name, path, mutate, base):
        m = model_np.Model.load(path)
        mutate(m)
        d = rel_diff(base, m.forward(tokens))
        rep.check(d > MIN_EFFECT, name, "the reference without it is only %.3g away" % d, "%.3g" % d)

    # LongRoPE: the context of 512 is above the original 64, so the long factors; each part matters.
    sabotage("longrope_factors_matter", ph, lambda m: setattr(m, "rope_long", None) or setattr(m, "rope_short", None), cph)
    sabotage("longrope_long_not_short", ph, lambda m: setattr(m, "serve_ctx", 64), cph)
    sabotage("longrope_attn_factor_matters", ph, lambda m: setattr(m, "rope_attn_factor", 1.0), cph)
    # A served context at the original one picks the short factors (the file's context_length 64: cinfer logits
    # serves the training context), over 60 positions.
    short = os.path.join(tmp, "phi3-short.gguf")
    rewrite(ph, short, set_kvs=[("phi3.context_length", gguf_np.T_UINT32, 64)])
    gs = ciref.cinfer_logits(short, tokens[:60], out)[0]
    ciref.compare_logits(rep, "longrope_short_factors", gs, ref_logits(short, tokens[:60]), tol)
    d = rel_diff(gs, cph[:60])
    rep.check(d > MIN_EFFECT, "longrope_short_differs_from_long", "only %.3g apart" % d, "%.3g" % d)
    # The engine's served context picks the factors: `cinfer run --ctx 64` decodes with the short ones, the
    # default (the training context 512) with the long ones, each equal to the reference's greedy ids.
    ref_ids = {}
    for ctx in (64, 512):
        m = model_np.Model.load(ph)
        m.serve_ctx = ctx
        ref_ids[ctx] = m.greedy([1], 40)
        args = ["run", "-m", ph, "-p", "", "-n", 40, "--temp", 0, "--ids", "--kv-type", "f32"]
        args += ["--ctx", ctx] if ctx == 64 else []
        ids = [int(x) for x in ciref.cinfer(args)[0].decode().split()]
        rep.check(ids == ref_ids[ctx], "longrope_engine_ctx_%d" % ctx, "cinfer %s, reference %s" % (ids, ref_ids[ctx]))
    rep.check(ref_ids[64] != ref_ids[512], "longrope_engine_ctx_matters", "the same ids with either factors")
    # Phi-3 with separate Q/K/V tensors (llama.cpp accepts either): the same model.
    g = gguf_np.GGUF(ph)
    q_dim, kv_dim = 256, 64
    sep = os.path.join(tmp, "phi3-sep.gguf")
    drops, adds = [], []
    for i in range(4):
        qkv = g.tensor("blk.%d.attn_qkv.weight" % i).astype(np.float32)
        drops.append("blk.%d.attn_qkv.weight" % i)
        adds += [("blk.%d.attn_q.weight" % i, qkv[:q_dim]), ("blk.%d.attn_k.weight" % i, qkv[q_dim : q_dim + kv_dim]),
                 ("blk.%d.attn_v.weight" % i, qkv[q_dim + kv_dim :])]
    rewrite(ph, sep, drop_tensors=drops, add_tensors=adds)
    ciref.compare_logits(rep, "phi3_separate_qkv", ciref.cinfer_logits(sep, tokens, out)[0], cph, tol)
    # A tied Phi-3 (no output.weight; llama.cpp falls back to token_embd): against the reference.
    tied = os.path.join(tmp, "phi3-tied.gguf")
    rewrite(ph, tied, drop_tensors=["output.weight"])
    ciref.compare_logits(rep, "phi3_tied_output", ciref.cinfer_logits(tied, tokens, out)[0], ref_logits(tied, tokens), tol)
    # The fused gate-up order: swapping the halves (up first) is another model.
    sabotage("phi3_gate_up_order_matters", ph, lambda m: [m.w.update({
        "blk.%d.ffn_gate.weight" % i: m.w["blk.%d.ffn_up.weight" % i],
        "blk.%d.ffn_up.weight" % i: m.w["blk.%d.ffn_gate.weight" % i]}) for i in range(m.n_layer)], cph)

    # YaRN: the ramp and the magnitude scaling each matter; attn_factor and the betas as the file sets them.
    sabotage("yarn_scaling_matters", ya, lambda m: setattr(m, "rope_scaling", "none") or setattr(m, "rope_pos_scale", 1.0), cya)
    sabotage("yarn_ramp_matters", ya, lambda m: setattr(m, "rope_scaling", "linear"), cya)
    # (an attention factor of 1 / (0.1 ln 4 + 1) cancels YaRN's magnitude scaling in the reference)
    sabotage("yarn_mscale_matters", ya, lambda m: setattr(m, "rope_attn_factor", 1.0 / (0.1 * np.log(4.0) + 1.0)), cya)
    for name, kvs in (
        ("yarn_attn_factor", [("llama.rope.scaling.attn_factor", gguf_np.T_FLOAT32, 0.8)]),
        ("yarn_betas", [("llama.rope.scaling.yarn_beta_fast", gguf_np.T_FLOAT32, 8.0),
                        ("llama.rope.scaling.yarn_beta_slow", gguf_np.T_FLOAT32, 0.5)]),
        ("yarn_factor_below_1", [("llama.rope.scaling.factor", gguf_np.T_FLOAT32, 0.5)]),
    ):
        p = os.path.join(tmp, name + ".gguf")
        rewrite(ya, p, set_kvs=kvs)
        gy = ciref.cinfer_logits(p, tokens, out)[0]
        ciref.compare_logits(rep, name, gy, ref_logits(p, tokens), tol)
        d = rel_diff(gy, cya)
        rep.check(d > MIN_EFFECT, name + "_differs", "only %.3g from the preset" % d, "%.3g" % d)
    # attn_factor under plain RoPE (llama.cpp applies it to every scaling type).
    p = os.path.join(tmp, "attn-factor.gguf")
    rewrite(paths["tiny", "f32"], p, set_kvs=[("llama.rope.scaling.attn_factor", gguf_np.T_FLOAT32, 1.25)])
    ciref.compare_logits(rep, "attn_factor_plain_rope", ciref.cinfer_logits(p, tokens, out)[0], ref_logits(p, tokens), tol)

    # Partial rotary with adjacent pairs (tiny-phi3 covers NeoX): 16 of the tiny llama's 32 dimensions.
    p = os.path.join(tmp, "partial.gguf")
    rewrite(paths["tiny", "f32"], p, set_kvs=[("llama.rope.dimension_count", gguf_np.T_UINT32, 16)])
    gp = ciref.cinfer_logits(p, tokens, out)[0]
    ciref.compare_logits(rep, "partial_rotary_normal", gp, ref_logits(p, tokens), tol)
    d = rel_diff(gp, got["tiny", "f32"].astype(np.float64))
    rep.check(d > MIN_EFFECT, "partial_rotary_differs", "only %.3g from full rotary" % d, "%.3g" % d)
    m = model_np.Model.load(ph)
    rep.check(m.rope_dim < m.head_dim and m.neox, "phi3_partial_neox", "rope_dim %d" % m.rope_dim)


def main():
    rep = ciref.Report()
    tmp = tempfile.mkdtemp(prefix="cinfer-arch-")
    try:
        paths = {}
        for preset in ("tiny-llama3", "tiny-qwen3", "tiny-phi3", "tiny-yarn", "tiny"):
            for t in TYPES if preset != "tiny" else ["f32"]:
                path = os.path.join(tmp, "%s-%s.gguf" % (preset, t))
                ciref.cinfer(["synth", "--preset", preset, "--type", t, "--seed", SEED, "-o", path])
                paths[preset, t] = path
        tokens = ciref.seeded_tokens(N_TOKENS, 1024, 1)
        out = os.path.join(tmp, "logits.f32")

        # Logits against the reference.
        got = {}
        for (preset, t), path in paths.items():
            got[preset, t] = ciref.cinfer_logits(path, tokens, out)[0]
            ref = ref_logits(path, tokens)
            n, tol = (N_TOKENS, ciref.logit_tolerance(t)) if t == "f32" else (Q8_POSITIONS, Q8_TOL)
            ciref.compare_logits(rep, "logits_%s_%s" % (preset, t), got[preset, t][:n], ref[:n], tol)

        # Invariance: threads, KV block size and a prefix give byte-identical logits (as test_logits.py checks
        # for the older presets).
        for preset in ("tiny-llama3", "tiny-qwen3", "tiny-phi3", "tiny-yarn"):
            path = paths[preset, "f32"]
            base = ciref.cinfer_logits(path, tokens, out, threads=1, block_size=16)[1]
            for th, bs in ((2, 16), (1, 1), (2, 512)):
                raw = ciref.cinfer_logits(path, tokens, out, threads=th, block_size=bs)[1]
                rep.check(raw == base, "invariance_%s_t%d_b%d" % (preset, th, bs), "logits differ")
            pre = ciref.cinfer_logits(path, tokens[:37], out)[1]
            rep.check(pre == base[: len(pre)], "invariance_%s_prefix" % preset, "prefix logits differ")

        # The reference's qwen3 is really different from qwen2-style math (Q/K norms matter).
        m = model_np.Model.load(paths["tiny-qwen3", "f32"])
        rep.check(m.head_dim * m.n_head != m.n_embd, "qwen3_head_dim", "head_dim %d" % m.head_dim)
        full = m.forward(tokens[:20])
        m.qk_norm = False
        rep.check(
            rel_diff(full, m.forward(tokens[:20])) > MIN_EFFECT,
            "qwen3_qk_norm_matters",
            "the reference without Q/K norms is as close as %g" % rel_diff(full, m.forward(tokens[:20])),
        )

        # llama3: the factors are applied, and a file without them is another model.
        for t in TYPES:
            src = paths["tiny-llama3", t]
            ignored = ref_logits(src, tokens, ignore_rope_freqs=True)
            d = rel_diff(got["tiny-llama3", t], ignored)
            rep.check(d > MIN_EFFECT, "llama3_factors_applied_%s" % t, "only %.3g from ignoring them" % d, "%.3g" % d)
            nofreq = os.path.join(tmp, "nofreq-%s.gguf" % t)
            rewrite(src, nofreq, drop_tensors=["rope_freqs.weight"])
            g2 = ciref.cinfer_logits(nofreq, tokens, out)[0]
            d = rel_diff(g2, got["tiny-llama3", t].astype(np.float64))
            rep.check(d > MIN_EFFECT, "llama3_without_tensor_differs_%s" % t, "only %.3g apart" % d, "%.3g" % d)
            n, tol = (N_TOKENS, ciref.logit_tolerance(t)) if t == "f32" else (Q8_POSITIONS, Q8_TOL)
            ciref.compare_logits(rep, "llama3_without_tensor_%s" % t, g2[:n], ignored[:n], tol)

        # Linear scaling of the tiny llama file: positions / 4.
        lin = os.path.join(tmp, "linear.gguf")
        rewrite(
            paths["tiny", "f32"],
            lin,
            set_kvs=[
                ("llama.rope.scaling.type", gguf_np.T_STRING, "linear"),
                ("llama.rope.scaling.factor", gguf_np.T_FLOAT32, 4.0),
            ],
        )
        gl = ciref.cinfer_logits(lin, tokens, out)[0]
        ciref.compare_logits(rep, "linear_scaling", gl, ref_logits(lin, tokens), 1e-4)
        d = rel_diff(gl, got["tiny", "f32"].astype(np.float64))
        rep.check(d > MIN_EFFECT, "linear_scaling_differs", "only %.3g from unscaled" % d, "%.3g" % d)

        # Malformed and unimplemented.
        l3, q3, ti = paths["tiny-llama3", "f32"], paths["tiny-qwen3", "f32"], paths["tiny", "f32"]
        bad = os.path.join(tmp, "bad.gguf")
        cases = [
            ("bad_rope_freqs_length", l3, {"replace_tensors": {"rope_freqs.weight": np.ones(8, np.float32)}},
             ["rope_freqs.weight", "shape"]),
            ("bad_rope_freqs_value", l3, {"replace_tensors": {"rope_freqs.weight": np.zeros(16, np.float32)}},
             ["rope_freqs.weight", "not positive"]),
            ("key_length_ne_value_length", q3, {"set_kvs": [("qwen3.attention.value_length", gguf_np.T_UINT32, 32)]},
             ["key_length", "value_length"]),
            ("rope_scaling_unknown", ti, {"set_kvs": [("llama.rope.scaling.type", gguf_np.T_STRING, "wobble")]},
             ["rope.scaling.type", "wobble"]),
            ("yarn_without_factor", ti, {"set_kvs": [("llama.rope.scaling.type", gguf_np.T_STRING, "yarn")]},
             ["yarn", "rope.scaling.factor"]),
            ("llama3_type_without_tensor", ti, {"set_kvs": [("llama.rope.scaling.type", gguf_np.T_STRING, "llama3")]},
             ["rope_freqs.weight"]),
            ("unknown_tensor", ti, {"add_tensors": [("blk.0.attn_mystery.weight", np.ones(256, np.float32))]},
             ["blk.0.attn_mystery.weight"]),
            ("qk_norm_in_llama", ti, {"add_tensors": [("blk.1.attn_q_norm.weight", np.ones(32, np.float32))]},
             ["blk.1.attn_q_norm.weight"]),
            ("rope_freqs_in_qwen3", q3, {"add_tensors": [("rope_freqs.weight", np.ones(32, np.float32))]},
             ["rope_freqs.weight"]),
            ("missing_q_norm", q3, {"drop_tensors": ["blk.2.attn_q_norm.weight"]}, ["blk.2.attn_q_norm.weight"]),
            ("sliding_window", q3, {"set_kvs": [("qwen3.attention.sliding_window", gguf_np.T_UINT32, 64)]},
             ["sliding_window"]),
            ("attn_softcap", ti, {"set_kvs": [("llama.attn_logit_softcapping", gguf_np.T_FLOAT32, 50.0)]},
             ["attn_logit_softcapping"]),
            ("final_softcap", ti, {"set_kvs": [("llama.final_logit_softcapping", gguf_np.T_FLOAT32, 30.0)]},
             ["final_logit_softcapping"]),
            ("experts_without_tensors", ti, {"set_kvs": [("llama.expert_count", gguf_np.T_UINT32, 8),
                                                           ("llama.expert_used_count", gguf_np.T_UINT32, 2)]},
             ["blk.0.ffn_gate_inp.weight", "missing"]),
        ]
        cases += rope_scaling_malformed(paths)
        for name, src, kw, words in cases:
            rewrite(src, bad, **kw)
            expect_refused(rep, name, bad, words, tmp)
        check_rope_scalings(rep, paths, got, tokens, out, tmp)
        # Zero means off: expert_count 0 and sliding_window 0 load.
        rewrite(ti, bad, set_kvs=[("llama.expert_count", gguf_np.T_UINT32, 0)])
        try:
            g0 = ciref.cinfer_logits(bad, tokens[:8], out)[0]
            rep.check(np.array_equal(g0, got["tiny", "f32"][:8]), "expert_count_zero_loads", "other logits")
        except CinferError as e:
            rep.fail("expert_count_zero_loads", str(e)[-200:])
        moe_checks(rep, tmp, tokens, out, paths["tiny-qwen3", "f32"])
    except CinferError as e:
        rep.fail("cinfer", str(e)[-400:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep.exit()


MOE_PRESETS = ("tiny-mixtral", "tiny-qwen3moe", "tiny-qwen2moe", "tiny-gpt-oss")
# Q8_0 MoE files against the reference that rounds activations as the engines do (Model.emulate_act_q8): exact
# (~1e-7) until an int8 rounding decided differently by float32 and float64 arithmetic, then a step of ~1e-2 that
# attention carries along (measured over 24 positions: tiny-mixtral 0.0078, tiny-qwen2moe 0.017, tiny-qwen3moe
# 0.057, where a near tie of the 4th and 5th expert follows).  Without the emulation a near-tied router choice
# flips far more often (0.38 / 0.29 / 0.28): the routing is a discrete function of the activations.
MOE_Q8_TOL = ciref.logit_tolerance("q8_0")


def moe_checks(rep, tmp, tokens, out, dense_qwen3):
    """Mixture-of-experts presets: logits against the reference, sabotaged routing, invariance, malformed files."""
    paths = {}
    for preset in MOE_PRESETS:
        for t in TYPES:
            paths[preset, t] = path = os.path.join(tmp, "%s-%s.gguf" % (preset, t))
            ciref.cinfer(["synth", "--preset", preset, "--type", t, "--seed", SEED, "-o", path])
    for preset in MOE_PRESETS:
        for t in TYPES:
            got = ciref.cinfer_logits(paths[preset, t], tokens, out)[0]
            m = model_np.Model.load(paths[preset, t])
            if t == "f32":
                ref = m.forward(tokens)
                ciref.compare_logits(rep, "moe_logits_%s_%s" % (preset, t), got, ref, ciref.logit_tolerance(t))
                # Sabotage: the reference with one expert per token, and with the top-k weights renormalised
                # the other way (qwen2moe's unnormalised vs Mixtral/qwen3moe's normalised), is far from cinfer.
                tol = ciref.logit_tolerance(t)
                # gpt-oss weights its experts by a softmax of the chosen logits (no renormalisation to flip):
                # there the second sabotage drops the attention sinks.
                k = m.n_expert_used
                m.n_expert_used = 1
                d1 = rel_diff(got[:20], m.forward(tokens[:20]))
                m.n_expert_used = k
                if m.gpt_oss:
                    m.ignore_sinks = True
                else:
                    m.moe_norm = not m.moe_norm
                d2 = rel_diff(got[:20], m.forward(tokens[:20]))
                other = "sinks ignored" if m.gpt_oss else "flipped normalisation"
                rep.check(
                    min(d1, d2) > 100 * tol,
                    "moe_routing_matters_%s" % preset,
                    "top-1 routing %.3g, %s %.3g from cinfer" % (d1, other, d2),
                    "top-1 %.3g, %s %.3g, tolerance %g" % (d1, other, d2, tol),
                )
            else:
                m.emulate_act_q8()
                ref = m.forward(tokens[:Q8_POSITIONS])
                ciref.compare_logits(rep, "moe_logits_%s_%s" % (preset, t), got[:Q8_POSITIONS], ref, MOE_Q8_TOL)

    # Invariance: threads, KV block size, and a token alone, in a short prefix or in the whole batch (the
    # grouping by expert must not change a token's result) give byte-identical logits.
    for preset in MOE_PRESETS:
        for t in TYPES:
            path = paths[preset, t]
            base = ciref.cinfer_logits(path, tokens, out, threads=1, block_size=16)[1]
            row = len(base) // len(tokens)
            for th, bs in ((2, 16), (1, 1), (2, 512)):
                raw = ciref.cinfer_logits(path, tokens, out, threads=th, block_size=bs)[1]
                rep.check(raw == base, "moe_invariance_%s_%s_t%d_b%d" % (preset, t, th, bs), "logits differ")
            for n in (1, 5, 37):
                pre = ciref.cinfer_logits(path, tokens[:n], out, threads=2)[1]
                rep.check(pre == base[: n * row], "moe_invariance_%s_%s_first%d" % (preset, t, n), "logits differ")

    # Packed expert stacks (model/pack.c packs them expert by expert where the kernels have a layout of their
    # own: AVX-512 VNNI) give the bits of the file's layout (CINFER_NO_PACK=1), in Q8_0 and in a K-quant mix.
    for preset in MOE_PRESETS:
        kq = os.path.join(tmp, "%s-q4_k_m.gguf" % preset)
        ciref.cinfer(["synth", "--preset", preset, "--type", "Q4_K_M", "--seed", SEED, "-o", kq])
        for t, path in (("q8_0", paths[preset, "q8_0"]), ("q4_k_m", kq)):
            packed = ciref.cinfer_logits(path, tokens, out, threads=2)[1]
            plain = ciref.cinfer_logits(path, tokens, out, threads=2, env={"CINFER_NO_PACK": "1"})[1]
            rep.check(packed == plain, "moe_packed_experts_%s_%s" % (preset, t), "logits differ from unpacked")

    # Malformed.
    mx, q3, q2 = paths["tiny-mixtral", "f32"], paths["tiny-qwen3moe", "f32"], paths["tiny-qwen2moe", "f32"]
    go = paths["tiny-gpt-oss", "f32"]
    bad = os.path.join(tmp, "bad-moe.gguf")
    u32 = gguf_np.T_UINT32
    cases = [
        ("moe_missing_expert_tensor", mx, {"drop_tensors": ["blk.1.ffn_up_exps.weight"]},
         ["blk.1.ffn_up_exps.weight", "missing"]),
        ("moe_missing_router", q3, {"drop_tensors": ["blk.0.ffn_gate_inp.weight"]}, ["blk.0.ffn_gate_inp.weight"]),
        ("moe_missing_shared_gate", q2, {"drop_tensors": ["blk.3.ffn_gate_inp_shexp.weight"]},
         ["blk.3.ffn_gate_inp_shexp.weight"]),
        ("moe_expert_count_mismatch", mx, {"set_kvs": [("llama.expert_count", u32, 4)]},
         ["blk.0.ffn_gate_inp.weight", "shape"]),
        ("moe_expert_tensor_wrong_count", mx,
         {"replace_tensors": {"blk.2.ffn_down_exps.weight": np.zeros((7, 256, 256), np.float32)}},
         ["blk.2.ffn_down_exps.weight", "expected [256, 256, 8]"]),
        ("moe_used_above_count", q3, {"set_kvs": [("qwen3moe.expert_used_count", u32, 17)]},
         ["expert_used_count", "17"]),
        ("moe_used_zero", mx, {"set_kvs": [("llama.expert_used_count", u32, 0)]}, ["expert_used_count", "0"]),
        ("moe_count_zero_required", q2, {"set_kvs": [("qwen2moe.expert_count", u32, 0)]}, ["expert_count"]),
        ("moe_dense_ffn_extra", mx, {"add_tensors": [("blk.0.ffn_gate.weight", np.ones((256, 256), np.float32))]},
         ["blk.0.ffn_gate.weight"]),
        ("moe_experts_in_dense_arch", dense_qwen3, {"set_kvs": [("qwen3.expert_count", u32, 8)]},
         ["qwen3.expert_count", "not implemented"]),
        ("gpt_oss_missing_sinks", go, {"drop_tensors": ["blk.1.attn_sinks.weight"]},
         ["blk.1.attn_sinks.weight", "missing"]),
        ("gpt_oss_sinks_wrong_length", go,
         {"replace_tensors": {"blk.0.attn_sinks.weight": np.zeros((4,), np.float32)}},
         ["blk.0.attn_sinks.weight", "shape"]),
        ("gpt_oss_missing_expert_bias", go, {"drop_tensors": ["blk.2.ffn_down_exps.bias"]},
         ["blk.2.ffn_down_exps.bias", "missing"]),
        ("gpt_oss_missing_router_bias", go, {"drop_tensors": ["blk.3.ffn_gate_inp.bias"]},
         ["blk.3.ffn_gate_inp.bias"]),
        ("gpt_oss_sinks_in_llama", mx, {"add_tensors": [("blk.0.attn_sinks.weight", np.zeros((8,), np.float32))]},
         ["blk.0.attn_sinks.weight", "not used"]),
    ]
    for name, src, kw, words in cases:
        rewrite(src, bad, **kw)
        expect_refused(rep, name, bad, words, tmp)


if __name__ == "__main__":
    main()
