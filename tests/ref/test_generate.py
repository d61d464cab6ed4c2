"""Greedy generation of stories260K and `cinfer convert`, against MANIFEST.md and the numpy reference.

Reference checks (no cinfer needed): the reference's greedy decode from BOS on stories260K.gguf, .bin and _v1.bin
reproduces MANIFEST.md's 60 ids (which were produced elsewhere), and those ids decode with tok512.bin to the
MANIFEST text.
cinfer checks: `cinfer run -p "" -n 200 --temp 0 --ids --kv-type f32` from the .gguf and from the .bin + tok512.bin gives
MANIFEST's 60 ids first and the reference's 200 greedy ids in all; without --ids the text starts with MANIFEST's
sentence.  `cinfer convert stories260K.bin --tokenizer tok512.bin` writes a GGUF whose tensors equal the .bin's
bit for bit and whose logits are byte-identical to the .bin's; --type f16 rounds each weight to nearest even and
--type q8_0 stays within one block scale of it, and both give logits within ciref.logit_tolerance(type) *
max(1, max|ref|) of the reference run on the converted file's own dequantized weights.
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ciref  # noqa: E402
import gguf_np  # noqa: E402
import llama2c_np  # noqa: E402
import model_np  # noqa: E402
from ciref import CinferError, model_path  # noqa: E402

N_GEN = 200
BOS = 1


def check_reference(rep):
    """Returns the reference's 200 greedy ids (or None)."""
    try:
        want = ciref.manifest_greedy_ids()
    except (OSError, ValueError) as e:
        rep.fail("ref_manifest", e)
        return None
    ref_ids = None
    for f in ("stories260K.gguf", "stories260K.bin", "stories260K_v1.bin"):
        name = "ref_greedy_manifest_%s" % f
        try:
            ids = model_np.Model.load(model_path(f)).greedy([BOS], N_GEN)
        except (OSError, ValueError) as e:
            rep.fail(name, e)
            continue
        rep.check(ids[:60] == want, name, "reference greedy ids %s differ from MANIFEST.md %s" % (ids[:60], want))
        if ref_ids is None:
            ref_ids = ids
        elif ids != ref_ids:
            rep.fail("ref_greedy_formats_agree", "%s gives different 200-token greedy ids" % f)
    try:
        pieces, _ = llama2c_np.read_tokenizer(model_path("tok512.bin"), 512)
        text = ciref.decode_llama2c(pieces, want, BOS)
        rep.check(
            text.startswith(ciref.MANIFEST_TEXT),
            "ref_manifest_ids_decode_to_text",
            "MANIFEST ids decode to %r" % text[:120],
        )
    except (OSError, ValueError) as e:
        rep.fail("ref_manifest_ids_decode_to_text", e)
    return ref_ids


def run_ids(model, tokenizer=None, n=N_GEN):
    args = ["run", "-m", model]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    out, _ = ciref.cinfer(args + ["-p", "", "-n", n, "--temp", "0", "--ids", "--kv-type", "f32"])
    try:
        return [int(x) for x in out.decode("utf-8", "replace").split()]
    except ValueError:
        raise CinferError("run --ids printed something other than ids: %r" % out[:200])


def check_cinfer_run(rep, ref_ids):
    try:
        want = ciref.manifest_greedy_ids()
    except (OSError, ValueError) as e:
        return rep.fail("run_greedy", "MANIFEST.md: %s" % e)
    for label, model, tok in (
        ("gguf", model_path("stories260K.gguf"), None),
        ("bin", model_path("stories260K.bin"), model_path("tok512.bin")),
    ):
        name = "run_greedy_ids_%s" % label
        try:
            ids = run_ids(model, tok)
        except CinferError as e:
            rep.fail(name, e)
        else:
            rep.check(ids[:60] == want, name + "_manifest", "first 60 ids %s, MANIFEST %s" % (ids[:60], want))
            if ref_ids is not None:
                step = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), None)
                if step is None and len(ids) != len(ref_ids):
                    step = min(len(ids), len(ref_ids))
                if step is None:
                    rep.ok(name + "_reference_200", "%d ids" % len(ids))
                else:
                    rep.fail(
                        name + "_reference_200",
                        "%d ids; differs from the reference at step %d: cinfer %s... reference %s..."
                        % (len(ids), step, ids[step : step + 8], ref_ids[step : step + 8]),
                    )
        name = "run_text_%s" % label
        args = ["run", "-m", model] + (["--tokenizer", tok] if tok else []) + ["-p", "", "-n", 60, "--temp", "0",
                                                                           "--kv-type", "f32"]
        try:
            out, _ = ciref.cinfer(args)
        except CinferError as e:
            rep.fail(name, e)
            continue
        text = out.decode("utf-8", "replace")
        rep.check(text.startswith(ciref.MANIFEST_TEXT), name, "text starts %r" % text[:120])


def check_convert(rep, tmp):
    src = model_path("stories260K.bin")
    tok = model_path("tok512.bin")
    c, w = llama2c_np.read(src)
    tokens = ciref.seeded_tokens(24, c["vocab_size"], BOS, seed=4321)
    try:
        _, bin_raw = ciref.cinfer_logits(src, tokens, os.path.join(tmp, "bin.f32"), tok)
    except CinferError as e:
        rep.fail("convert_logits_bin", e)
        bin_raw = None
    for t in ("f32", "f16", "q8_0"):
        out = os.path.join(tmp, "conv-%s.gguf" % t)
        name = "convert_%s" % t
        args = ["convert", src, "--tokenizer", tok, "-o", out] + ([] if t == "f32" else ["--type", t])
        try:
            ciref.cinfer(args)
            g = gguf_np.GGUF(out)
        except (CinferError, OSError, ValueError) as e:
            rep.fail(name, e)
            continue
        # metadata and tensors
        bad = []
        arch = g.arch
        want_kv = {
            "embedding_length": c["dim"],
            "feed_forward_length": c["hidden_dim"],
            "block_count": c["n_layers"],
            "attention.head_count": c["n_heads"],
            "attention.head_count_kv": c["n_kv_heads"],
        }
        if arch != "llama":
            bad.append("architecture %r" % arch)
        for k, v in want_kv.items():
            if g.get("%s.%s" % (arch, k)) != v:
                bad.append("%s.%s = %r, want %r" % (arch, k, g.get("%s.%s" % (arch, k)), v))
        pieces, _ = llama2c_np.read_tokenizer(tok, c["vocab_size"])
        toks = g.get("tokenizer.ggml.tokens")
        if toks is None or len(toks) != c["vocab_size"]:
            bad.append("tokenizer.ggml.tokens missing or of the wrong length")
        qt = {"f32": gguf_np.F32, "f16": gguf_np.F16, "q8_0": gguf_np.Q8_0}[t]
        n_tensors = 0
        # a stored output.weight must be a converted copy of the shared classifier (token_embd)
        items = list(w.items())
        if "output.weight" in g.tensors:
            items.append(("output.weight", w["token_embd.weight"]))
        for n, x in items:
            if n not in g.tensors:
                bad.append("missing " + n)
                continue
            n_tensors += 1
            why = ciref.conversion_error(x, g, n)
            if why:
                bad.append(why)
            elif t == "f32" and g.tensors[n].type != gguf_np.F32:
                bad.append("%s is %s in an f32 conversion" % (n, gguf_np.type_name(g.tensors[n].type)))
        if t != "f32" and not any(g.tensors[n].type == qt for n in g.tensors):
            bad.append("no tensor was converted to %s" % t)
        rep.check(not bad, name + "_contents", "; ".join(bad[:5]), "%d tensors" % n_tensors)
        # logits
        name = "convert_%s_logits" % t
        try:
            got, raw = ciref.cinfer_logits(out, tokens, os.path.join(tmp, "conv.f32"))
        except CinferError as e:
            rep.fail(name, e)
            continue
        if t == "f32":
            if bin_raw is not None:
                rep.check(raw == bin_raw, name + "_equal_bin", "logits of the converted GGUF differ from the .bin's")
        ref = model_np.Model.load(out).forward(tokens)
        ciref.compare_logits(rep, name + "_reference", got, ref, ciref.logit_tolerance(t))


def main():
    rep = ciref.Report()
    ref_ids = check_reference(rep)
    check_cinfer_run(rep, ref_ids)
    tmp = tempfile.mkdtemp(prefix="cinfer-ref-gen-")
    try:
        check_convert(rep, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rep.exit()


if __name__ == "__main__":
    main()
