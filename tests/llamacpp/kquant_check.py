"""The GGUF files people download (issue 11): K-quants, the legacy 4/5-bit types, IQ4_NL, IQ4_XS and MXFP4, run
by cinfer and compared with the numpy reference and with llama.cpp.  Run by tests/llamacpp/test_kquant.sh.

Files come from sources, each a list of (label, path, tolerance key, main type) cases; a new source only has to
add its cases in main():
  - llama-quantize (llama_quantize_cases): llama.cpp's own quantizer (the native build of
    scripts/llamacpp-native.sh; LLAMA_QUANTIZE is its path, absent: a SKIP line) applied to three F32 bases:
    `cinfer synth --preset tiny` (rows of 256 and 768, so each tensor takes its preset's type) at every preset of
    PRESETS, and a random llama model (gguf_write_np.random_model, n_embd 160, n_ff 512, weights std ~0.16) at
    the 256-block presets, whose 160-element rows are not a multiple of 256: llama-quantize's fallback rules put
    Q4_0, Q5_0, Q5_1, Q8_0 or IQ4_NL there, next to the K-quants of the 512-element rows of ffn_down.  MXFP4 has
    no dense preset (MXFP4_MOE keeps dense tensors Q8_0), so its file is MXFP4_MOE with
    `--tensor-type blk\\.=mxfp4`, which makes every block matrix MXFP4.  The third base, qwen2t (tiny-qwen2
    without output.weight: Q/K/V biases, NeoX RoPE and a tied output head, so the quantized token embedding is
    the output matrix too), takes three presets;
  - `cinfer quantize` (cinfer_quantize_cases) on the same bases at the same presets (but MXFP4, which it has no
    preset for).  Where llama-quantize made the same file, every tensor must have its type and bytes (cinfer's
    quantizers reproduce ggml's; measured: all 804 tensors of the 23 files identical), so the checks of that
    file cover it; otherwise (without llama-quantize) the file goes through the checks below itself;
  - random blocks (random_block_cases, numpy only, so it runs everywhere): qwen2t with every matrix (the tied
    token embedding included) replaced by random blocks of one type, scaled to the base's standard deviation:
    weights no quantizer writes, but bytes every reader must read the same way.

For every file:
  - `cinfer info` lists the tensor types and counts the numpy reader finds;
  - cinfer's logits against the numpy reference (model_np on gguf_np's dequantization of the same file) over a
    seeded 24-token sequence; err = max over positions of max|cinfer - ref| / (max ref - min ref) at that
    position.  Against the plain float64 reference err <= TOL[key]: the difference is cinfer's int8 rounding of
    the activations before every integer dot (32-blocks for the 32-element types, ggml's Q8_K 256-blocks for the
    K-quants and IQ4_XS), which llama.cpp does too, amplified by the synthetic models' sharp attention
    (measured up to 0.087 of the spread, see TOL).  Against ActRoundModel, the reference with that same rounding,
    err <= TOL_ACT_ROUND = 0.03 for every type (what is left is float32 against float64 arithmetic: measured
    1e-7 on most files, up to 0.017 where one activation rounds the other way);
  - negative control: the reference reading the file's main type with two sub-block scales swapped (SWAPS)
    must miss cinfer by more than CONTROL_MARGIN times both tolerances, so each would catch such a bug;
  - llama.cpp's (node-llama-cpp's prebuilt build, as in llamacpp_check.py) next-token log-probabilities over the
    same sequence equal cinfer's logits up to a constant per position, within TOL_LLAMACPP = 0.06 of the spread;
  - llama.cpp decodes 32 greedy tokens from BOS; cinfer's argmax over BOS + llama.cpp's ids (teacher forcing)
    must pick llama.cpp's token at every step where llama.cpp's top-two log-probability gap exceeds TIE = 1.0
    logit; at least MIN_DECISIVE steps of each file, and more than half of all steps, must be decisive;
  - `cinfer run -p "" -n 32 --temp 0 --ids --ignore-eos --kv-type f32` prints 32 ids, which equal llama.cpp's until they
    fork, and they may fork only at one of llama.cpp's near ties (gap <= TIE).

Env: NLC_DIR (node-llama-cpp, from scripts/llamacpp-setup.sh; unset: the llama.cpp comparisons print a SKIP
line), LLAMA_QUANTIZE, CINFER_BIN, CINFER_MODELS.  KQUANT_MEASURE=1 adds a NOTE with the measured numbers of
every file.
"""

import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ref"))
sys.path.insert(0, HERE)

import ciref  # noqa: E402
import gguf_np  # noqa: E402
import gguf_write_np  # noqa: E402
import llamacpp_check  # noqa: E402
import model_np  # noqa: E402
from ciref import CinferError  # noqa: E402

G = gguf_np
N_SEQ = 24
N_GEN = 32
TIE = 1.0
MIN_DECISIVE = N_GEN // 4  # per file; over all files more than half the steps must be decisive
QUANTIZE_TIMEOUT = 120
WORKERS = 2  # files checked at once (cinfer and numpy both leave the GIL)

# llama-quantize presets: label -> (ftype argument, extra arguments, the main type the preset is named after)
PRESETS = collections.OrderedDict(
    [
        ("Q4_0", ("Q4_0", [], G.Q4_0)),
        ("Q4_1", ("Q4_1", [], G.Q4_1)),
        ("Q5_0", ("Q5_0", [], G.Q5_0)),
        ("Q5_1", ("Q5_1", [], G.Q5_1)),
        ("Q8_0", ("Q8_0", [], G.Q8_0)),
        ("Q2_K", ("Q2_K", [], G.Q2_K)),
        ("Q3_K_M", ("Q3_K_M", [], G.Q3_K)),
        ("Q4_K_S", ("Q4_K_S", [], G.Q4_K)),
        ("Q4_K_M", ("Q4_K_M", [], G.Q4_K)),
        ("Q5_K_M", ("Q5_K_M", [], G.Q5_K)),
        ("Q6_K", ("Q6_K", [], G.Q6_K)),
        ("IQ4_NL", ("IQ4_NL", [], G.IQ4_NL)),
        ("IQ4_XS", ("IQ4_XS", [], G.IQ4_XS)),
        ("MXFP4", ("MXFP4_MOE", ["--tensor-type", r"blk\.=mxfp4"], G.MXFP4)),
    ]
)

# Tolerance of cinfer's logits against the plain numpy reference as a fraction of the logit spread, per preset or
# type (see the file comment).  Measured (largest over the files of that key): Q4_0 0.055, Q4_1 0.041, Q5_0 0.055,
# Q5_1 0.041, Q8_0 0.050, the K-quant presets and types 0.024-0.087 (tiny Q4_K_M and random Q6_K blocks the
# largest), IQ4_NL 0.048, IQ4_XS 0.078, MXFP4 0.077 (with the AVX2 kernels; the scalar ones, CINFER_NO_SIMD=1,
# within 0.004 of these).
TOL = {k: 0.1 for k in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")}
TOL.update({k: 0.15 for k in list(PRESETS) + ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] if k not in TOL})
# Tolerance against the reference that rounds the activations as cinfer does (ActRoundModel), for every preset
# (measured: 1e-7 on most files, at most 0.0174, AVX2 or scalar).
TOL_ACT_ROUND = 0.03
# Tolerance of llama.cpp's log-probabilities against cinfer's logits, as a fraction of the spread.  cinfer
# quantizes activations as ggml does (Q8_0 blocks with a half-precision scale, Q8_1's half-precision s for Q4_1 /
# Q5_1, Q8_K's 1 / (127 / max) scale), so on most files the two agree to float32 rounding (measured on an Intel
# Xeon, AVX-512: below 4e-7 on 22 of 37 files; the rest 0.0025-0.026, where one activation of a sharp synthetic
# model rounds the other way and the attention carries it along).  Before, with float32 scales: 0.004-0.06.
TOL_LLAMACPP = 0.06
# A negative control must miss by more than this many tolerances (measured: at least 2.1 plain tolerances, on
# r160 Q4_K_M where one tensor holds the main type; over 10 tolerances against the rounding reference).
CONTROL_MARGIN = 1.5


# ---- the bases and the sources of quantized files --------------------------------------------------------------


def make_bases(tmp):
    """[(label, F32 path, the presets to quantize it to)]."""
    tiny = os.path.join(tmp, "tiny-f32.gguf")
    ciref.cinfer(["synth", "--preset", "tiny", "--type", "f32", "--seed", 1, "-o", tiny])
    r160 = os.path.join(tmp, "r160-f32.gguf")
    gguf_write_np.random_model(
        r160, ciref.MODELS, arch="llama", n_embd=160, n_layer=2, n_head=5, n_kv_head=1, n_ff=512, seed=31,
        scale=2.0,
    )
    # Qwen2 (Q/K/V biases, NeoX RoPE) with a tied output head: tiny-qwen2 without its output.weight, so the token
    # embedding is quantized as the output (llama-quantize gives it the output's type) and read by both.
    q2 = os.path.join(tmp, "tiny-qwen2-f32.gguf")
    ciref.cinfer(["synth", "--preset", "tiny-qwen2", "--type", "f32", "--seed", 1, "-o", q2])
    g = G.GGUF(q2)
    q2t = os.path.join(tmp, "qwen2t-f32.gguf")
    gguf_write_np.write_gguf(q2t, _kvs_of(g), [(n, g.tensor(n), G.F32) for n in g.tensors if n != "output.weight"])
    # The 160-element rows only change what the 256-block presets write (their fallbacks); the 32-block presets
    # would give the same types as on tiny.
    return [
        ("tiny", tiny, list(PRESETS)),
        ("r160", r160, [p for p, v in PRESETS.items() if v[2] in Q8K_TYPES]),
        ("qwen2t", q2t, ["Q5_0", "Q4_K_M", "IQ4_XS"]),
    ]


def llama_quantize_cases(rep, quantize, bases, tmp):
    """[(label, path, preset, main type)]: the bases through llama-quantize at their presets."""
    cases = []
    for base, src, presets in bases:
        for preset in presets:
            ftype, extra, _ = PRESETS[preset]
            label = "%s-%s" % (base, preset.lower())
            out = os.path.join(tmp, "%s.gguf" % label)
            cmd = [quantize] + extra + [src, out, ftype, "2"]
            try:
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=QUANTIZE_TIMEOUT)
            except subprocess.TimeoutExpired:
                rep.fail("kquant_quantize_%s" % label, "llama-quantize timed out")
                continue
            if p.returncode != 0 or not os.path.exists(out):
                tail = p.stdout.decode("utf-8", "replace").strip().splitlines()[-3:]
                why = "llama-quantize exited %d: %s" % (p.returncode, " | ".join(tail))
                rep.fail("kquant_quantize_%s" % label, why)
                continue
            cases.append((label, out, preset, PRESETS[preset][2]))
    return cases


# The second source, which needs nothing but numpy: the tiny base with every matrix replaced by random blocks of
# one type (random bytes, the fp16 scale fields set so that each tensor keeps the base's standard deviation and,
# for the types with a min, the sub-blocks centred on average).  Weights no quantizer would write, but files
# every reader must read the same way; they run when llama-quantize is absent too.
# type -> {fp16 field: its value relative to the scale d}
BLOCK_FIELDS = {
    G.Q4_0: {"d": 1.0},
    G.Q4_1: {"d": 1.0, "m": -7.5},
    G.Q5_0: {"d": 1.0},
    G.Q5_1: {"d": 1.0, "m": -15.5},
    G.Q8_0: {"d": 1.0},
    G.Q2_K: {"d": 1.0, "dmin": 1.5},
    G.Q3_K: {"d": 1.0},
    G.Q4_K: {"d": 1.0, "dmin": 7.5},
    G.Q5_K: {"d": 1.0, "dmin": 15.5},
    G.Q6_K: {"d": 1.0},
    G.IQ4_NL: {"d": 1.0},
    G.IQ4_XS: {"d": 1.0},
    G.MXFP4: {},  # the E8M0 exponent e
}


def random_blocks(ttype, n, std, rng):
    """n elements of random ttype blocks whose values have about the standard deviation std."""
    _, bs, size = G.TYPES[ttype]
    nb = n // bs
    b = np.frombuffer(rng.integers(0, 256, nb * size, dtype=np.uint8).tobytes(), dtype=_DTYPES[ttype]).copy()
    if ttype == G.MXFP4:
        b["e"] = 128
        s = float(G.dequantize(ttype, b.tobytes(), n).std())
        b["e"] = (128 + np.clip(np.round(np.log2(std / s) + rng.normal(0, 0.5, nb)), -20, 20)).astype(np.uint8)
        return b.tobytes()
    jitter = rng.uniform(0.5, 1.5, nb) * rng.choice([-1.0, 1.0], nb)  # signed: Q4_0 and IQ4_NL are not centred
    for f, k in BLOCK_FIELDS[ttype].items():
        b[f] = (jitter * k).astype(np.float16)
    c = std / float(G.dequantize(ttype, b.tobytes(), n).std())
    for f, k in BLOCK_FIELDS[ttype].items():
        b[f] = (jitter * k * c).astype(np.float16)
    return b.tobytes()


def _kvs_of(g):
    """g's metadata as gguf_write_np.write_gguf takes it."""
    arr = {np.dtype("float32"): G.T_FLOAT32, np.dtype("int32"): G.T_INT32, np.dtype("uint32"): G.T_UINT32}
    kvs = []
    for k, v in g.kv.items():
        t = g.kv_type[k]
        if t == G.T_ARRAY:
            v = (G.T_STRING, v) if isinstance(v, list) else (arr[v.dtype], v)
        kvs.append((k, t, v))
    return kvs


def random_block_cases(base, tmp):
    """[(label, path, type name, type)]: base with its matrices as random blocks of each type of BLOCK_FIELDS."""
    g = G.GGUF(base)
    cases = []
    for i, (ttype, _) in enumerate(BLOCK_FIELDS.items()):
        rng = np.random.default_rng(100 + i)
        tensors = []
        for name, t in g.tensors.items():
            x = g.tensor(name)
            if len(t.ne) == 2 and t.ne[0] % G.TYPES[ttype][1] == 0:
                tensors.append((name, (t.ne, random_blocks(ttype, t.n_elements, float(x.std()), rng)), ttype))
            else:
                tensors.append((name, x, G.F32))
        label = "blocks-%s" % G.type_name(ttype).lower()
        path = os.path.join(tmp, label + ".gguf")
        gguf_write_np.write_gguf(path, _kvs_of(g), tensors)
        cases.append((label, path, G.type_name(ttype), ttype))
    return cases


def cinfer_quantize_cases(rep, bases, tmp):
    """[(label, path, preset, main type)]: the bases through `cinfer quantize` at their presets (it has no MXFP4
    preset)."""
    cases = []
    for base, src, presets in bases:
        for preset in presets:
            if preset == "MXFP4":
                continue
            label = "cq-%s-%s" % (base, preset.lower())
            out = os.path.join(tmp, "%s.gguf" % label)
            try:
                ciref.cinfer(["quantize", src, out, preset, "--threads", 2], timeout=QUANTIZE_TIMEOUT)
            except CinferError as e:
                rep.fail("kquant_cinfer_quantize_%s" % label, e)
                continue
            cases.append((label, out, preset, PRESETS[preset][2]))
    return cases


def check_same_file(rep, ours, theirs):
    """`cinfer quantize` chose llama-quantize's type for every tensor of the same base and preset, and wrote the
    same bytes (its quantizers reproduce ggml's reference ones).  Returns True if the tensors are identical."""
    label = ours[0][len("cq-"):]
    name = "kquant_cinfer_quantize_same_%s" % label
    try:
        a, b = G.GGUF(ours[1]), G.GGUF(theirs[1])
    except (OSError, ValueError) as e:
        rep.fail(name, e)
        return False
    ta = {n: G.type_name(t.type) for n, t in a.tensors.items()}
    tb = {n: G.type_name(t.type) for n, t in b.tensors.items()}
    diff = ["%s: cinfer %s, llama.cpp %s" % (n, ta.get(n), tb.get(n)) for n in sorted(set(ta) | set(tb))
            if ta.get(n) != tb.get(n)]
    if diff:
        rep.fail(name, "%d of %d tensors of another type: %s" % (len(diff), len(tb), "; ".join(diff[:4])))
        return False
    other = [n for n in ta if a.raw(n) != b.raw(n)]
    return rep.check(not other, name, "the same types as llama-quantize, but %d of %d tensors with other bytes: %s"
                     % (len(other), len(tb), ", ".join(other[:4])),
                     "the same type and bytes as llama-quantize for all %d tensors" % len(tb))


# ---- the negative control: a numpy reading with two sub-block scales swapped ---------------------------------

# type -> how the wrong reading swaps: ("pair", field): adjacent blocks trade that field (the 32-element types,
# whose scale is per block); ("cols", field, [(i, j)...]): columns i and j of the field trade within each block.
SWAPS = {
    G.Q4_0: ("pair", "d"),
    G.Q4_1: ("pair", "d"),
    G.Q5_0: ("pair", "d"),
    G.Q5_1: ("pair", "d"),
    G.Q8_0: ("pair", "d"),
    G.IQ4_NL: ("pair", "d"),
    G.MXFP4: ("pair", "e"),
    G.Q2_K: ("cols", "scales", [(0, 1)]),  # sub-blocks 0 and 1 (scale and min nibbles)
    G.Q3_K: ("cols", "scales", [(0, 1)]),  # the low 4 bits of scales 0/1 and 8/9
    G.Q4_K: ("cols", "scales", [(0, 1), (4, 5)]),  # scale and min of sub-blocks 0 and 1
    G.Q5_K: ("cols", "scales", [(0, 1), (4, 5)]),
    G.Q6_K: ("cols", "scales", [(0, 1)]),
    G.IQ4_XS: ("iq4xs",),  # scales of sub-blocks 0 and 1 (nibbles of scales_l[0], bits 0-3 of scales_h)
}
_DTYPES = dict(G._BLOCK_DTYPES)
_DTYPES[G.Q8_0], _DTYPES[G.Q4_0] = G._Q8_0, G._Q4_0


def swapped_scales(ttype, raw):
    b = np.frombuffer(raw, dtype=_DTYPES[ttype]).copy()
    how = SWAPS[ttype]
    if how[0] == "pair":
        f = b[how[1]]
        n = len(f) // 2 * 2
        f[0:n:2], f[1:n:2] = f[1:n:2].copy(), f[0:n:2].copy()
        b[how[1]] = f
    elif how[0] == "cols":
        f = b[how[1]]
        for i, j in how[2]:
            f[:, i], f[:, j] = f[:, j].copy(), f[:, i].copy()
        b[how[1]] = f
    else:
        sl, sh = b["scales_l"], b["scales_h"]
        sl[:, 0] = ((sl[:, 0] >> 4) | (sl[:, 0] << 4)).astype(np.uint8)
        b["scales_l"] = sl
        b["scales_h"] = (sh & 0xFFF0) | ((sh & 3) << 2) | ((sh >> 2) & 3)
    return b.tobytes()


# ---- helpers --------------------------------------------------------------------------------------------------


# The types whose products take Q8_K (256-element) activation blocks in cinfer and ggml; the other block types
# take 32-element ones.
Q8K_TYPES = {G.Q2_K, G.Q3_K, G.Q4_K, G.Q5_K, G.Q6_K, G.IQ4_XS}
FLOAT_TYPES = {G.F32, G.F16, G.BF16}


def act_round(x, block):
    """x rounded as cinfer (and ggml) quantize activations before an integer dot: per block of the last axis,
    q = x * (127 / max|x|) rounded half to even, in float32; returns q * d with the block's scale d as ggml stores
    it: max|x| / 127 in half precision for 32-element blocks (block_q8_0), 1 / (127 / max|x|) in float32 for
    256-element ones (block_q8_K)."""
    f32 = np.float32
    xb = np.asarray(x, dtype=f32).reshape(x.shape[:-1] + (x.shape[-1] // block, block))
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    live = amax >= f32(2.0**-100)
    inv = np.where(live, f32(127) / np.where(live, amax, f32(1)), f32(0)).astype(f32)
    q = np.clip(np.rint(xb * inv), -128, 127)
    if block == 32:
        d = np.where(live, amax / f32(127), f32(0)).astype(np.float16)
    else:
        d = np.where(live, f32(1) / np.where(live, inv, f32(1)), f32(0)).astype(f32)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def act_s_error(x):
    """ggml's Q8_1 activations (the products with Q4_1 / Q5_1 weights) also carry s = d * sum(q) in half precision,
    with d unrounded, and the weight block's min multiplies s: per 32-block of the last axis, s minus the
    d16 * sum(q) that act_round's values give (what a Q4_1 / Q5_1 product adds besides them, times the mins)."""
    f32 = np.float32
    xb = np.asarray(x, dtype=f32).reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    amax = np.abs(xb).max(axis=-1)
    live = amax >= f32(2.0**-100)
    inv = np.where(live, f32(127) / np.where(live, amax, f32(1)), f32(0)).astype(f32)
    qsum = np.clip(np.rint(xb * inv[..., None]), -128, 127).sum(axis=-1).astype(f32)
    d = np.where(live, amax / f32(127), f32(0)).astype(f32)
    s = (d * qsum).astype(np.float16).astype(np.float64)
    return s - d.astype(np.float16).astype(np.float64) * qsum.astype(np.float64)


class ActRoundModel(model_np.Model):
    """The numpy reference with the activation rounding of act_round before every product with a quantized
    weight (and, for Q4_1 / Q5_1 weights, the min term as ggml's s rounds it), so that what is left between it
    and cinfer is float32 against float64 arithmetic."""

    rounding = True  # False: the plain reference

    def _act(self, x, name):  # the reference's hook before every product with a weight (model_np.Model._act)
        t = self.gguf.tensors[name].type
        if self.rounding and t not in FLOAT_TYPES:
            return act_round(x, 256 if t in Q8K_TYPES else 32)
        return x

    def _matmul(self, x, name, w, e=None):
        y = super()._matmul(x, name, w, e)
        t = self.gguf.tensors[name]
        if self.rounding and t.type in (G.Q4_1, G.Q5_1):
            mins = np.frombuffer(self.gguf.raw(name), dtype=G._BLOCK_DTYPES[t.type])["m"].astype(np.float64)
            mins = mins.reshape(-1, w.shape[0], w.shape[1] // 32)  # [expert (or 1)][row][block]
            mins = mins[e if e is not None else 0]
            y = y + act_s_error(x) @ mins.T
        return y


def rel_err(got, ref):
    """max over positions of max|got - ref| / (max ref - min ref), and the worst position."""
    ref = np.asarray(ref, dtype=np.float64)
    per = np.abs(np.asarray(got, dtype=np.float64) - ref).max(axis=1) / (ref.max(axis=1) - ref.min(axis=1))
    return float(per.max()), int(per.argmax())


def info_types(path):
    out, _ = ciref.cinfer(["info", "-m", path])
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("tensor types"):
            return {k: int(v) for k, v in re.findall(r"([A-Z][A-Z0-9_]*)\u00d7(\d+)", line)}, line
    raise CinferError("cinfer info printed no 'tensor types' line")


def counts_by_id(g):
    return collections.Counter(t.type for t in g.tensors.values())


def gap_of(m):
    return float(np.log(m["p"] / m["p2"])) if m["p2"] > 0 else float("inf")


# ---- the checks of one file ----------------------------------------------------------------------------------


def check_file(rep, label, path, preset, main, tokens, measure):
    g = G.GGUF(path)
    counts = collections.Counter(G.type_name(t.type) for t in g.tensors.values())
    name = "kquant_info_%s" % label
    try:
        listed, line = info_types(path)
        rep.check(listed == dict(counts), name, "cinfer info lists %s, the file holds %s" % (listed, dict(counts)),
                  " ".join(line.split()[2:]))
    except CinferError as e:
        rep.fail(name, e)

    run = run_greedy(rep, label, path)

    name = "kquant_vs_numpy_%s" % label
    try:
        m = ActRoundModel.load(path)
        got, _ = ciref.cinfer_logits(path, tokens, path + ".logits.f32")
        err_ar = rel_err(got, m.forward(tokens))
        m.rounding = False
        err = rel_err(got, m.forward(tokens))
    except (CinferError, OSError, ValueError) as e:
        rep.fail(name, e)
        return None, run
    tol, tol_ar = TOL[preset], TOL_ACT_ROUND
    rep.check(err[0] <= tol, name, "max|cinfer - numpy| = %.4g of the spread at position %d, tolerance %g" % (
        err[0], err[1], tol), "%.4g of the logit spread (tol %g)" % (err[0], tol))
    name = "kquant_vs_numpy_act_round_%s" % label
    rep.check(err_ar[0] <= tol_ar, name, "max|cinfer - numpy with rounded activations| = %.4g of the spread at "
              "position %d, tolerance %g" % (err_ar[0], err_ar[1], tol_ar), "%.3g of the logit spread (tol %g)" % (
                  err_ar[0], tol_ar))

    # negative control: the main type read with two sub-block scales swapped, in both references
    name = "kquant_negative_control_%s" % label
    if main not in counts_by_id(g):  # all its tensors fell back: the file's most common block type instead
        main = max((t for t in counts_by_id(g) if t in SWAPS), key=lambda t: counts_by_id(g)[t], default=None)
    wrong = [n for n, t in g.tensors.items() if t.type == main]
    bug = bug_ar = None
    if not wrong:
        rep.fail(name, "no block-quantized tensor to read wrong")
    else:
        for n in wrong:
            t = g.tensors[n]
            w = G.dequantize(main, swapped_scales(main, g.raw(n)), t.n_elements).reshape(t.shape)
            m.w[n] = w.astype(np.float64)
        bug, _ = rel_err(got, m.forward(tokens))
        m.rounding = True
        bug_ar, _ = rel_err(got, m.forward(tokens))
        rep.check(bug > CONTROL_MARGIN * tol and bug_ar > CONTROL_MARGIN * tol_ar, name,
                  "two %s sub-block scales swapped in numpy move the logits only %.3g (plain) / %.3g (rounded "
                  "activations) of the spread: tolerances %g / %g cannot tell" % (
                      G.type_name(main), bug, bug_ar, tol, tol_ar),
                  "%s scales swapped in %d tensors: %.3g / %.3g of the spread off, %.1f / %.0f tolerances" % (
                      G.type_name(main), len(wrong), bug, bug_ar, bug / tol, bug_ar / tol_ar))
    if measure:
        rep.note("measured %s: err %.5f  act-round err %.2e  control %s / %s  types %s" % (
            label, err[0], err_ar[0], "%.4f" % bug if bug else "-", "%.4f" % bug_ar if bug_ar else "-",
            dict(counts)))
    return got, run


def logprob_err(probs, logits):
    """llama.cpp's next-token probabilities against cinfer's logits, up to a constant per position: max over
    positions of max |(log p_i - log p_top) - (l_i - l_top)| / (max l - min l) over the tokens whose probability
    under cinfer's logits exceeds 1e-12 (top: cinfer's argmax), and the worst position."""
    lg = np.asarray(logits, dtype=np.float64)
    rows = np.arange(len(lg))
    top = lg.argmax(axis=1)
    rel = lg - lg[rows, top][:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lp = np.log(probs)
        diff = np.where(rel > np.log(1e-12), np.abs(lp - lp[rows, top][:, None] - rel), 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    per = diff.max(axis=1) / (lg.max(axis=1) - lg.min(axis=1))
    return float(per.max()), int(per.argmax())


def check_llamacpp_probs(rep, label, probs, got, measure):
    name = "kquant_llamacpp_logits_%s" % label
    if probs.shape != got.shape:
        return rep.fail(name, "llama.cpp gives %s probabilities, cinfer %s logits" % (probs.shape, got.shape))
    err, pos = logprob_err(probs, got)
    rep.check(err <= TOL_LLAMACPP, name, "llama.cpp's log-probabilities differ from cinfer's logits by %.4g of the "
              "spread at position %d, tolerance %g" % (err, pos, TOL_LLAMACPP), "%.3g of the logit spread (tol %g)" % (
                  err, TOL_LLAMACPP))
    if measure:
        rep.note("measured %s: llama.cpp logits err %.5f" % (label, err))


def run_greedy(rep, label, path):
    """`cinfer run`'s greedy ids from BOS (None if it failed)."""
    name = "kquant_run_greedy_%s" % label
    try:
        out, _ = ciref.cinfer(["run", "-m", path, "-p", "", "-n", N_GEN, "--temp", "0", "--ids", "--ignore-eos",
                               "--kv-type", "f32"])
        run = [int(x) for x in out.split()]
    except (CinferError, ValueError) as e:
        rep.fail(name, e)
        return None
    rep.check(len(run) == N_GEN, name, "cinfer run printed %d ids, not %d" % (len(run), N_GEN), "%d ids" % len(run))
    return run


def check_llamacpp(rep, label, path, theirs, run, measure):
    """Teacher-forced agreement with llama.cpp's greedy ids (theirs: a batch.mjs greedy result), and cinfer's own
    greedy ids (run) against them.  Returns the number of decisive steps, or None."""
    ids, margins = theirs["ids"], theirs["margins"]
    bos = int(G.GGUF(path).get("tokenizer.ggml.bos_token_id", 1))
    name = "kquant_llamacpp_forced_%s" % label
    try:
        logits, _ = ciref.cinfer_logits(path, [bos] + ids[:-1], path + ".forced.f32")
    except CinferError as e:
        rep.fail(name, e)
        return None
    ours = [int(x) for x in logits.argmax(axis=1)]
    gaps = [gap_of(m) for m in margins]
    decisive = [s for s in range(len(ids)) if gaps[s] > TIE]
    bad = [s for s in decisive if ours[s] != ids[s]]
    if bad:
        s = bad[0]
        rep.fail(name, "%d of %d decisive steps differ; first: step %d, cinfer %d, llama.cpp %d (p=%.4g, runner-up %d "
                 "p=%.4g, gap %.3g)" % (len(bad), len(decisive), s, ours[s], ids[s], margins[s]["p"],
                                        margins[s]["second"], margins[s]["p2"], gaps[s]))
    else:
        rep.check(len(decisive) >= MIN_DECISIVE, name, "only %d of %d steps decisive (gap > %g)" % (
            len(decisive), len(ids), TIE), "same top token at all %d decisive steps of %d (gap > %g)" % (
            len(decisive), len(ids), TIE))

    # cinfer's own greedy decoding (the engine path, run_greedy): the same ids as llama.cpp's until they fork,
    # which they may only at one of llama.cpp's near ties.
    name = "kquant_run_vs_llamacpp_%s" % label
    if run is None:
        return len(decisive)
    fork = llamacpp_check.first_diff(run, ids)
    if fork is not None and fork < len(ids) and gaps[fork] <= TIE:
        rep.ok(name, "%d ids, forking from llama.cpp's at step %d, a near tie (gap %.3g)" % (
            len(run), fork, gaps[fork]))
    else:
        rep.check(fork is None, name, "cinfer run forks from llama.cpp at step %d, where llama.cpp's gap is %.3g > %g: "
                  "cinfer %s, llama.cpp %s" % (fork or 0, gaps[fork] if fork is not None and fork < len(gaps) else 0,
                                               TIE, run, ids), "%d ids, equal to llama.cpp's" % len(run))
    if measure:
        rep.note("measured %s: decisive %d/%d, fork %s, min gap %.3f" % (label, len(decisive), len(ids), fork,
                                                                      min(gaps)))
    return len(decisive)


class Deferred:
    """Report calls recorded by a worker thread, replayed in order onto the real report."""

    def __init__(self):
        self.calls = []

    def ok(self, *a):
        self.calls.append(("ok", a))

    def fail(self, *a):
        self.calls.append(("fail", a))

    def note(self, *a):
        self.calls.append(("note", a))

    def check(self, cond, *a):
        self.calls.append(("check", (cond,) + a))
        return cond

    def replay(self, rep):
        for m, a in self.calls:
            getattr(rep, m)(*a)


def main():
    rep = ciref.Report()
    measure = os.environ.get("KQUANT_MEASURE") == "1"
    quantize = os.environ.get("LLAMA_QUANTIZE", "")
    tmp = tempfile.mkdtemp(prefix="cinfer-kquant-")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS)
    node_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        try:
            bases = make_bases(tmp)
        except (CinferError, OSError, ValueError) as e:
            rep.fail("kquant_bases", e)
            rep.exit()
        cases = []
        if quantize and os.access(quantize, os.X_OK):
            cases += llama_quantize_cases(rep, quantize, bases, tmp)
        else:
            print("SKIP kquant_llama_quantize: no llama-quantize at %r (scripts/llamacpp-native.sh builds it)"
                  % quantize, flush=True)
        try:
            cases += random_block_cases(bases[2][1], tmp)  # qwen2t
        except (OSError, ValueError) as e:
            rep.fail("kquant_random_blocks", e)
        # cinfer's own quantizer on the same bases and presets: where llama-quantize made the same file, its
        # tensors must be that file's, byte for byte, and the checks below of that file cover it; the others
        # (all of them without llama-quantize) go through the checks themselves.
        by_label = {c[0]: c for c in cases}
        for c in cinfer_quantize_cases(rep, bases, tmp):
            theirs = by_label.get(c[0][len("cq-"):])
            if not theirs or not check_same_file(rep, c, theirs):
                cases.append(c)
        # A further source of files appends its (label, path, preset, type) cases here.

        # llama.cpp decodes every file in one node process while the workers check the files against numpy.
        seqs = []
        for _, path, _, _ in cases:
            g = G.GGUF(path)
            n_vocab = g.tensors["token_embd.weight"].ne[1]
            seqs.append(ciref.seeded_tokens(N_SEQ, n_vocab, int(g.get("tokenizer.ggml.bos_token_id", 1)), seed=8))
        jobs = None
        if os.environ.get("NLC_DIR"):
            jobs = llamacpp_check.Jobs(tmp)
            planned = [(jobs.greedy(c[1], N_GEN), jobs.probs(c[1], seq)) for c, seq in zip(cases, seqs)]
            node = node_pool.submit(jobs.run)
        else:
            print("SKIP kquant_llamacpp: NLC_DIR is not set (node-llama-cpp missing)", flush=True)

        def one_file(k):
            label, path, preset, main = cases[k]
            d = Deferred()
            try:
                return d, check_file(d, label, path, preset, main, seqs[k], measure)
            except (OSError, ValueError, KeyError) as e:
                d.fail("kquant_vs_numpy_%s" % label, e)
            return d, (None, None)

        logits, runs = [], []
        for d, (got, run) in pool.map(one_file, range(len(cases))):
            d.replay(rep)
            logits.append(got)
            runs.append(run)
        if jobs is None:
            rep.exit()
        try:
            node.result()
        except llamacpp_check.NodeError as e:
            rep.fail("kquant_llamacpp", e)
            rep.exit()

        def one_llamacpp(k):
            label, path, _, _ = cases[k]
            d = Deferred()
            try:
                if logits[k] is not None:
                    check_llamacpp_probs(d, label, jobs.get(planned[k][1]), logits[k], measure)
            except llamacpp_check.NodeError as e:
                d.fail("kquant_llamacpp_logits_%s" % label, e)
            try:
                theirs = jobs.get(planned[k][0])
            except llamacpp_check.NodeError as e:
                d.fail("kquant_llamacpp_forced_%s" % label, e)
                return d, None
            return d, check_llamacpp(d, label, path, theirs, runs[k], measure)

        total = decisive = 0
        for d, n in pool.map(one_llamacpp, range(len(cases))):
            d.replay(rep)
            if n is not None:
                total += N_GEN
                decisive += n
        rep.check(2 * decisive > total, "kquant_llamacpp_decisive", "only %d of %d greedy steps decisive" % (
            decisive, total), "%d of %d greedy steps over %d files decisive (gap > %g), cinfer agrees at all" % (
            decisive, total, len(cases), TIE))
    finally:
        pool.shutdown()
        node_pool.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    rep.exit()


if __name__ == "__main__":
    main()
