"""cinfer's /v1/embeddings against llama.cpp's embeddings (node-llama-cpp@3.21.1's prebuilt llama.cpp, through
tests/llamacpp/embed.mjs) on the same synthetic GGUF files: `cinfer synth` tiny and tiny-qwen3 in F32 and
Q8_0, each with <arch>.pooling_type written as mean (1), cls (2) or last (3), which both engines read as their
default.  Both vectors are compared after scaling to unit length (llama.cpp's are raw): cosine >= COS_MIN.
llama.cpp's embedding context keeps K/V in F16 (node-llama-cpp sets no cache type for it), and so does the
cinfer server here.  F32: measured cosine 0.999995 or closer.  Q8_0: both quantize each matmul's activations,
and the prebuilt llama.cpp's CPU path is not the one cinfer matches to 1e-6 (tests/llamacpp/test_llamacpp.sh,
the native build): measured cosine 0.99933 to 0.99987 on an Intel Xeon, 0.99921 (last-token pooling; 0.99895
with cinfer's K/V in F32) on an AMD EPYC (Zen 5), hence 0.998.  A wrong pooling is far off (the
*_is_not_another_pooling checks of test_embeddings.py).
BERT: `cinfer synth --preset tiny-bert` (F32) with each pooling, on [CLS] ... [SEP] id inputs and on text that
each engine tokenizes itself with its WordPiece tokenizer (punctuation, accents, CJK): measured cosine 0.9999994.

Installs node-llama-cpp with scripts/llamacpp-setup.sh like test_llamacpp.sh; prints SKIP when node is missing or
npm cannot fetch the pinned packages (an offline machine with a cold cache)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))

import ciref  # noqa: E402
import gguf_np  # noqa: E402
import server_util  # noqa: E402
from test_arch import rewrite  # noqa: E402

COS_MIN = {"f32": 0.9999, "q8_0": 0.998}
INPUTS = [[1, 17, 300, 5, 99, 42, 7, 512, 3, 18, 250, 77, 31], [1, 900, 12], [1] + list(range(40, 100, 3))]
BERT_INPUTS = [[2, 573, 27, 183, 184, 5, 3], [2, 300, 301, 302, 3], "Hello, World! Unbelievable Führer 中文 café.",
               [2] + list(range(200, 900, 7)) + [3]]


def compare(rep, nlc, path, inputs, name, t):
    """llama.cpp's vectors (embed.mjs) against cinfer's /v1/embeddings for the file's default pooling."""
    p = subprocess.run(["node", os.path.join(HERE, "embed.mjs"), path, json.dumps(inputs)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300, env=dict(os.environ, NLC_DIR=nlc))
    if p.returncode != 0:
        rep.fail(name, f"embed.mjs exited {p.returncode}: {p.stderr[-300:]}")
        return
    theirs = [np.array(v, dtype=np.float64) for v in json.loads(p.stdout)]
    with server_util.Server(model=path, kv_type="f16") as s:
        st, _, body = s.request("POST", "/v1/embeddings", {"input": inputs})
    if st != 200:
        rep.fail(name, f"HTTP {st}: {body[:200]!r}")
        return
    ours = [np.array(d["embedding"], dtype=np.float64) for d in json.loads(body)["data"]]
    cos = [float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(ours, theirs)]
    rep.check(len(ours) == len(theirs) and min(cos) >= COS_MIN[t], name,
              f"cosines {[round(c, 7) for c in cos]} (min {COS_MIN[t]})", f"min cosine {min(cos):.7f}")


def main():
    rep = ciref.Report()
    if not shutil.which("node"):
        print("SKIP embeddings_llamacpp: node is not installed")
        return
    setup = subprocess.run(["bash", os.path.join(ROOT, "scripts", "llamacpp-setup.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if setup.returncode == 3:
        print("SKIP embeddings_llamacpp: " + (setup.stderr.strip().splitlines() or ["npm unavailable"])[-1])
        return
    nlc = setup.stdout.strip()
    if setup.returncode != 0 or not nlc:
        rep.fail("embeddings_llamacpp_setup", f"scripts/llamacpp-setup.sh exited {setup.returncode}: "
                 f"{setup.stderr[-300:]}")
        rep.exit()
    tmp = tempfile.mkdtemp(prefix="cinfer-embd-lc-")
    try:
        for preset, t in (("tiny", "f32"), ("tiny", "q8_0"), ("tiny-qwen3", "f32")):
            base = os.path.join(tmp, f"{preset}-{t}.gguf")
            ciref.cinfer(["synth", "--preset", preset, "--type", t, "--seed", "5", "-o", base])
            arch = gguf_np.GGUF(base).kv["general.architecture"]
            for code, pooling in ((1, "mean"), (2, "cls"), (3, "last")):
                path = os.path.join(tmp, f"{preset}-{t}-{pooling}.gguf")
                rewrite(base, path, set_kvs=[(f"{arch}.pooling_type", gguf_np.T_UINT32, code)])
                compare(rep, nlc, path, INPUTS, f"{preset}_{t}_{pooling}", t)
        base = os.path.join(tmp, "tiny-bert.gguf")
        ciref.cinfer(["synth", "--preset", "tiny-bert", "--seed", "5", "-o", base])
        for code, pooling in ((1, "mean"), (2, "cls"), (3, "last")):
            path = os.path.join(tmp, f"tiny-bert-{pooling}.gguf")
            rewrite(base, path, set_kvs=[("bert.pooling_type", gguf_np.T_UINT32, code)])
            compare(rep, nlc, path, BERT_INPUTS, f"tiny-bert_f32_{pooling}", "f32")
    except (RuntimeError, ciref.CinferError, subprocess.TimeoutExpired) as e:
        rep.fail("embeddings_llamacpp", str(e)[-400:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    server_util.check_no_sanitizer_report("embeddings_llamacpp_logs_clean")
    rep.exit()


if __name__ == "__main__":
    main()
