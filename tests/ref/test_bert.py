"""BERT encoders (`cinfer synth --preset tiny-bert`) against the independent numpy reference (model_np.Bert, written
from the BERT definition), through a real `cinfer serve` /v1/embeddings.

Checks:
  - cls (the file's pooling_type), mean (--pooling mean) and last pooling match the reference's (F32: cosine and
    max |diff| tight), including an input of 200 tokens (position embeddings far into the table);
  - the reference itself with a causal mask, or without position embeddings, is far from cinfer's vectors (so the
    comparisons above detect either mistake in cinfer);
  - each input is computed whole: with --max-batch-tokens 16, inputs in one request give the vectors they give
    alone, and an input longer than the batch is a 400 naming it;
  - a text input equals the ids `cinfer tokenize` gives for it ([CLS] ... [SEP], WordPiece);
  - /v1/completions and /v1/chat/completions on an embedding model are a 400 saying so, and `cinfer run` fails
    with that message;
  - malformed bert files are refused with the reason: a missing or short position table, a missing LayerNorm
    bias, attention.causal true, an unknown extra tensor.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "server"))

import ciref  # noqa: E402
import gguf_np  # noqa: E402
import model_np  # noqa: E402
import server_util  # noqa: E402
from test_arch import rewrite  # noqa: E402

# F32 sums in another order; the reference is float64 (measured: max|diff| below 1e-7).
COS_MIN, TOL = 0.99999, 1e-5
# [CLS] ... [SEP] inputs of the synthetic WordPiece vocabulary (ids 0..1023; 2 = [CLS], 3 = [SEP]).
INPUTS = [
    [2, 573, 27, 183, 184, 5, 3],
    [2, 300, 301, 302, 3],
    [2, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 17, 3],
    [2] + [int(x) for x in np.random.default_rng(7).integers(5, 1024, 198)] + [3],
]


def post(s, path, body):
    status, _, data = s.request("POST", path, json.dumps(body))
    return status, data


def vectors(s, inputs):
    status, data = post(s, "/v1/embeddings", {"input": inputs})
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
    reply = json.loads(data)
    return [np.array(d["embedding"], dtype=np.float64) for d in sorted(reply["data"], key=lambda d: d["index"])]


def pooled(m, tokens, pooling):
    h = m.forward(tokens)
    v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
    return v / np.linalg.norm(v)


def cos_diff(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))), float(np.abs(a - b).max())


def main():
    rep = ciref.Report()
    tmp = tempfile.mkdtemp(prefix="cinfer-bert-")
    try:
        path = os.path.join(tmp, "tiny-bert.gguf")
        ciref.cinfer(["synth", "--preset", "tiny-bert", "--seed", "5", "-o", path])
        m = model_np.Model.load(path)
        rep.check(isinstance(m, model_np.Bert), "reference_is_bert", type(m).__name__)
        got = {}
        for pooling, args in (("cls", ()), ("mean", ("--pooling", "mean")), ("last", ("--pooling", "last"))):
            with server_util.Server(*args, model=path) as s:
                vs = vectors(s, INPUTS)
            for i, toks in enumerate(INPUTS):
                got[(pooling, i)] = vs[i]
                c, d = cos_diff(vs[i], pooled(m, toks, pooling))
                rep.check(c >= COS_MIN and d <= TOL, f"{pooling}_{i}_matches_reference",
                          f"cosine {c:.7f}, max|diff| {d:.2e}", f"cosine {c:.8f}, max|diff| {d:.1e}")

        # The reference with the two classic mistakes is far from cinfer: the checks above would catch them.
        for flag in ("causal", "no_positions"):
            setattr(m, flag, True)
            worst = min(cos_diff(got[("mean", i)], pooled(m, INPUTS[i], "mean"))[1] for i in (0, 3))
            rep.check(worst > 100 * TOL, f"reference_{flag}_differs", f"max|diff| only {worst:.2e}",
                      f"max|diff| {worst:.2e}")
            setattr(m, flag, False)

        # Whole inputs: a 16-token pass holds one input at a time; alone equals together.
        small = INPUTS[:3]
        with server_util.Server("--max-batch-tokens", "16", "--block-size", "4", "--pooling", "mean",
                                model=path) as s:
            together = vectors(s, small)
            alone = [vectors(s, x)[0] for x in small]
            status, data = post(s, "/v1/embeddings", {"input": INPUTS[3]})
            rep.check(status == 400 and b"one pass" in data, "input_longer_than_the_pass_refused",
                      f"HTTP {status}: {data[:200]!r}")
            after = vectors(s, small[0])[0]
        rep.check(all(np.array_equal(a, b) for a, b in zip(alone, together)), "alone_equals_batched",
                  "a vector changed with its batch")
        worst = max(float(np.abs(a - got[("mean", i)]).max()) for i, a in enumerate(together))
        rep.check(worst <= TOL, "small_batches_match", f"max|diff| {worst:.2e}")
        rep.check(np.array_equal(after, alone[0]), "serves_after_refusal", "vector changed")

        # Text: the WordPiece ids with [CLS] and [SEP] (cinfer tokenize), then the same vector.
        text = "Hello, World! unbelievable"
        out, _ = ciref.cinfer(["tokenize", "-m", path, text])
        ids = [int(x) for x in out.decode().split()]
        rep.check(ids[0] == 2 and ids[-1] == 3, "text_tokens_cls_sep", str(ids))
        with server_util.Server(model=path) as s:
            vt = vectors(s, text)[0]
            vi = vectors(s, ids)[0]
            rep.check(np.array_equal(vt, vi), "text_equals_its_ids", "text and ids differ")
            c, d = cos_diff(vt, pooled(m, ids, "cls"))
            rep.check(c >= COS_MIN and d <= TOL, "text_matches_reference", f"cosine {c:.7f}, max|diff| {d:.2e}")
            for route, body in (("/v1/completions", {"prompt": "hello", "max_tokens": 4}),
                                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
                status, data = post(s, route, body)
                rep.check(status == 400 and b"embedding model" in data, f"{route}_refused",
                          f"HTTP {status}: {data[:200]!r}")
            rep.check(len(vectors(s, INPUTS[1])[0]) == 128, "serves_after_completions", "wrong length")
        r = subprocess.run([ciref.BIN, "run", "-m", path, "-p", "hello", "-n", "4"], capture_output=True, text=True,
                           timeout=120)
        rep.check(r.returncode != 0 and "embedding model" in r.stderr, "cli_run_refused",
                  f"exit {r.returncode}: {r.stderr[-300:]}")

        # Malformed files: `cinfer info` fails naming the problem.
        pe = model_np.Bert(path).w["position_embd.weight"].astype(np.float32)
        extra = np.zeros(128, dtype=np.float32)
        bad = [
            ("no_position_table", {"drop_tensors": ["position_embd.weight"]}, "position_embd.weight"),
            ("short_position_table", {"replace_tensors": {"position_embd.weight": pe[:100]}}, "position_embd.weight"),
            ("no_layernorm_bias", {"drop_tensors": ["blk.1.attn_output_norm.bias"]}, "attn_output_norm.bias"),
            ("causal", {"set_kvs": [("bert.attention.causal", gguf_np.T_BOOL, True)]}, "causal"),
            ("unknown_tensor", {"add_tensors": [("blk.0.ffn_gate.weight", extra)]}, "ffn_gate"),
        ]
        for name, kw, want in bad:
            dst = os.path.join(tmp, name + ".gguf")
            rewrite(path, dst, **kw)
            r = subprocess.run([ciref.BIN, "info", "-m", dst], capture_output=True, text=True, timeout=60)
            rep.check(r.returncode != 0 and want in r.stderr, f"malformed_{name}",
                      f"exit {r.returncode}: {r.stderr[-300:]}")
    except (RuntimeError, ciref.CinferError, OSError, subprocess.SubprocessError) as e:
        rep.fail("bert", str(e)[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    server_util.check_no_sanitizer_report("bert_no_sanitizer_report")
    rep.exit()


if __name__ == "__main__":
    main()
