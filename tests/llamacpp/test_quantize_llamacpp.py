"""`cinfer quantize` against native llama.cpp's `llama-quantize` on the same F32 models: every preset on the
`tiny` synth model, three on `tiny-qwen2`, the mixtures on models shaped like TinyLlama 1.1B and Qwen2 0.5B (the
layer rules and the fallbacks), and the mixture-of-experts presets tiny-mixtral (8 experts: llama.cpp's
8-expert rules), tiny-qwen3moe and tiny-qwen2moe with their 3-D expert tensors.  The per-tensor type choices and general.file_type must be identical, and
cinfer's dequantized weights no further from the F32 weights than llama-quantize's (relative RMSE at most 2%
above, per tensor); the detail line says how many tensors came out byte-identical.  The quality that matters
in use, per the issue: for Q4_K_M, Q6_K and IQ4_XS of `tiny`, the mean KL divergence of cinfer's next-token
distribution on cinfer's file from the F32 model's must be no worse than on llama-quantize's file (x 1.02;
both through cinfer's logits over a 48-token sequence, so only the files differ).  Values are read by the numpy
reader (tests/ref/gguf_np.py, IQ4 by tests/ref/test_quantize_np.py's dequantizer).

llama-quantize is the native build of scripts/llamacpp-native.sh (in ${CINFER_LLAMACPP_DIR:-~/.cache/cinfer/
llama.cpp}/build-cinfer/bin, or $CINFER_LLAMA_QUANTIZE); this test never builds it and prints SKIP without it."""

import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ref"))
import ciref  # noqa: E402
import gguf_np  # noqa: E402
import test_quantize_np as tq  # noqa: E402

MIX = ("Q4_K_M", "Q5_K_M", "Q3_K_M", "Q4_K_S", "Q2_K", "IQ4_XS")
# (model, how it is made, presets): every preset on `tiny`; the models shaped like TinyLlama 1.1B and Qwen2
# 0.5B (2 rows per matrix) exercise the layer rules and the fallbacks.
MODELS = (("tiny", "synth", tuple(tq.FTYPE)), ("tiny-qwen2", "synth", ("Q4_K_M", "Q6_K", "IQ4_XS")),
          ("tinyllama-1.1b", "shaped", MIX), ("qwen2-0.5b", "shaped", MIX),
          ("tiny-mixtral", "synth", ("Q4_K_M", "IQ4_XS")), ("tiny-qwen3moe", "synth", ("Q4_K_M", "Q2_K")),
          ("tiny-qwen2moe", "synth", ("Q4_K_M",)))
SHAPES = {"tinyllama-1.1b": ("llama", 22, 2048, 32, 4, 5632, False, False),
          "qwen2-0.5b": ("qwen2", 24, 896, 14, 2, 4864, True, True)}
SLACK = 1.02
KL_PRESETS = ("Q4_K_M", "Q6_K", "IQ4_XS")
KL_TOKENS = 48


def mean_kl(ref_logits, logits):
    """Mean over positions of KL(softmax(ref) || softmax(logits)), in nats."""
    def logsoftmax(z):
        z = z.astype(np.float64)
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    lp, lq = logsoftmax(ref_logits), logsoftmax(logits)
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=1)))


def check_kl(rep, name, tmp, src, ours, theirs):
    tokens = ciref.seeded_tokens(KL_TOKENS, int(gguf_np.GGUF(src).kv.get("llama.vocab_size", 1024) or 1024), 1)
    out = os.path.join(tmp, "kl.f32")
    try:
        ref = ciref.cinfer_logits(src, tokens, out)[0]
        kc = mean_kl(ref, ciref.cinfer_logits(ours, tokens, out)[0])
        kl = mean_kl(ref, ciref.cinfer_logits(theirs, tokens, out)[0])
    except ciref.CinferError as e:
        return rep.fail(name, e)
    rep.check(kc <= SLACK * kl + 1e-9, name, "KL cinfer %.6g > llama-quantize %.6g nats" % (kc, kl),
              "mean KL from F32: cinfer's file %.6g, llama-quantize's %.6g nats" % (kc, kl))


def llama_quantize():
    exe = os.environ.get("CINFER_LLAMA_QUANTIZE")
    if not exe:
        d = os.environ.get("CINFER_LLAMACPP_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cinfer",
                                                                  "llama.cpp")
        exe = os.path.join(d, "build-cinfer", "bin", "llama-quantize")
    return exe if os.access(exe, os.X_OK) else None


def rel_err(x, y):
    x = x.astype(np.float64)
    return float(np.sqrt(np.mean((y.astype(np.float64) - x) ** 2) / np.mean(x ** 2)))


def main():
    rep = ciref.Report()
    exe = llama_quantize()
    if not exe:
        print("SKIP quantize_llamacpp: no native llama-quantize (build it with scripts/llamacpp-native.sh; "
              "or set CINFER_LLAMA_QUANTIZE)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for model, how, presets in MODELS:
            src = os.path.join(tmp, model + ".gguf")
            try:
                if how == "synth":
                    ciref.cinfer(["synth", "--preset", model, "--type", "f32", "--seed", "11", "-o", src])
                else:
                    tq.shaped_model(src, *SHAPES[model])
            except ciref.CinferError as e:
                rep.fail("quantize_llamacpp_%s" % model, e)
                continue
            g0 = gguf_np.GGUF(src)
            for preset in presets:
                name = "quantize_llamacpp_%s_%s" % (model, preset.lower())
                ours, theirs = os.path.join(tmp, "c.gguf"), os.path.join(tmp, "l.gguf")
                try:
                    ciref.cinfer(["quantize", src, ours, preset, "--threads", "2"])
                    p = subprocess.run([exe, src, theirs, preset, "2"], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, timeout=600)
                    if p.returncode != 0:
                        raise ciref.CinferError("llama-quantize exited %d: %s" % (
                            p.returncode, p.stdout.decode("utf-8", "replace")[-400:]))
                    gc, gl = gguf_np.GGUF(ours), gguf_np.GGUF(theirs)
                except (ciref.CinferError, gguf_np.GGUFError, subprocess.TimeoutExpired) as e:
                    rep.fail(name, e)
                    continue
                type_diff = ["%s: %s vs %s" % (n, tq.NAMES.get(t.type), tq.NAMES.get(gl.tensors[n].type))
                             for n, t in gc.tensors.items()
                             if n not in gl.tensors or gl.tensors[n].type != t.type]
                type_diff += ["%s missing" % n for n in gl.tensors if n not in gc.tensors]
                worse, same, n_q, sc, sl = [], 0, 0, 0.0, 0.0
                for n, t in gc.tensors.items():
                    if n not in gl.tensors or t.type == gguf_np.F32:
                        continue
                    x = g0.tensor(n).reshape(-1)
                    ec, el = rel_err(x, tq.tensor_values(gc, n)), rel_err(x, tq.tensor_values(gl, n))
                    n_q, sc, sl = n_q + 1, sc + ec, sl + el
                    same += tq.tensor_raw(gc, n) == tq.tensor_raw(gl, n)
                    if ec > SLACK * el:
                        worse.append("%s %s: %.5f vs %.5f" % (n, tq.NAMES.get(t.type), ec, el))
                ft = (gc.kv.get("general.file_type"), gl.kv.get("general.file_type"))
                rep.check(not type_diff and not worse and ft[0] == ft[1], name,
                          "types differ: %s; worse than llama-quantize: %s; file_type %s" % (
                              type_diff[:3], worse[:3], ft),
                          "mean relative RMSE cinfer %.5f, llama-quantize %.5f; %d of %d tensors byte-identical"
                          % (sc / max(1, n_q), sl / max(1, n_q), same, n_q))
                if model == "tiny" and preset in KL_PRESETS:
                    check_kl(rep, name + "_kl", tmp, src, ours, theirs)
    rep.exit()


if __name__ == "__main__":
    main()
