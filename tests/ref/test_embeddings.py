"""/v1/embeddings against the independent numpy reference (tests/ref/model_np.py), through a real `cinfer serve`.

The reference pools the final normed hidden states (after output_norm, before the head: what llama.cpp's
embeddings pool) of the input tokens: the mean over every token, the first token's (cls) or the last token's,
then scales the vector to unit length as OpenAI's embeddings are.  Models: `cinfer synth` tiny (f32 and
q8_0) and tiny-qwen3 (f32), and copies of tiny with <arch>.pooling_type written into the file.

Checks:
  - every pooling matches the reference (cosine above COS_MIN, max |diff| below the type's tolerance), and the
    three poolings give different vectors (the pooling really is applied);
  - the file's pooling_type is the default; --pooling overrides it; "rank" files refuse embeddings;
  - a request's vector does not depend on what runs beside it: alone, in a request of several inputs, with
    a 5-token step budget (chunked prefill) and after its prompt was cached (last pooling) are bit-identical;
  - base64 decodes to the float vector; `dimensions` keeps the first values, normalized again; usage counts
    the input tokens;
  - bad requests get OpenAI-style 400/404 errors naming the parameter, and the server keeps serving.
"""

import base64
import json
import os
import shutil
import struct
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

# Cosine and max |diff| of the unit vectors: f32 sums in another order (measured cosine 1 - 1e-8, max|diff|
# 8e-7); q8_0 quantizes every matmul's activations to Q8 blocks and the reference does not (measured on tiny:
# cosine >= 0.9975, max|diff| <= 1.3e-2).
COS_MIN = {"f32": 0.99999, "q8_0": 0.995}
TOL = {"f32": 1e-4, "q8_0": 2.5e-2}
INPUTS = [[1, 17, 300, 5, 99, 42, 7, 512, 3, 18, 250, 77, 31], [1, 900, 12], [1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]]


def post(s, body, name):
    status, _, data = s.request("POST", "/v1/embeddings", json.dumps(body))
    if status != 200:
        raise RuntimeError(f"{name}: HTTP {status}: {data[:300]!r}")
    return json.loads(data)


def vectors(reply):
    return [np.array(d["embedding"], dtype=np.float64) for d in sorted(reply["data"], key=lambda d: d["index"])]


def ref_embedding(m, tokens, pooling):
    m.forward(tokens)
    h = m.last_hidden
    v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
    return v / np.linalg.norm(v)


def compare(rep, name, got, ref, t="f32"):
    cos = float(np.dot(got, ref) / (np.linalg.norm(got) * np.linalg.norm(ref)))
    diff = float(np.abs(got - ref).max())
    rep.check(cos >= COS_MIN[t] and diff <= TOL[t], name, f"cosine {cos:.7f} (min {COS_MIN[t]}), max|diff| "
              f"{diff:.2e} (tol {TOL[t]:g})", f"cosine {cos:.7f}, max|diff| {diff:.1e}")


def check_model(rep, path, label, t):
    m = model_np.Model.load(path)
    got, ref = {}, {}
    for pooling in ("mean", "cls", "last"):
        with server_util.Server("--pooling", pooling, model=path) as s:
            vs = vectors(post(s, {"input": INPUTS}, label))
        for i, toks in enumerate(INPUTS):
            got[(pooling, i)], ref[(pooling, i)] = vs[i], ref_embedding(m, toks, pooling)
            compare(rep, f"{label}_{pooling}_{i}", vs[i], ref[(pooling, i)], t)
    # Each pooling's vector is far closer to its own reference than to another pooling's (input 0: 13 tokens).
    for p in ("mean", "cls", "last"):
        own = float(np.abs(got[(p, 0)] - ref[(p, 0)]).max())
        other = min(float(np.abs(got[(p, 0)] - ref[(q, 0)]).max()) for q in ("mean", "cls", "last") if q != p)
        rep.check(other > 10 * max(own, 1e-3), f"{label}_{p}_is_not_another_pooling",
                  f"{other:.2e} from another pooling's reference, {own:.2e} from its own")


def main():
    rep = ciref.Report()
    if not os.path.exists(server_util.BIN):
        rep.fail("embeddings_setup", "no binary " + server_util.BIN)
        rep.exit()
    tmp = tempfile.mkdtemp(prefix="cinfer-embd-")
    try:
        files = {}
        for preset, t in (("tiny", "f32"), ("tiny", "q8_0"), ("tiny-qwen3", "f32")):
            path = os.path.join(tmp, f"{preset}-{t}.gguf")
            ciref.cinfer(["synth", "--preset", preset, "--type", t, "--seed", "3", "-o", path])
            files[(preset, t)] = path
            check_model(rep, path, f"{preset}_{t}", t)

        base = files[("tiny", "f32")]
        m = model_np.Model.load(base)
        arch = gguf_np.GGUF(base).kv["general.architecture"]
        # The file's pooling_type is the default, and --pooling overrides it.
        for code, pooling in ((1, "mean"), (2, "cls"), (3, "last")):
            path = os.path.join(tmp, f"pool{code}.gguf")
            rewrite(base, path, set_kvs=[(f"{arch}.pooling_type", gguf_np.T_UINT32, code)])
            with server_util.Server(model=path) as s:
                got = vectors(post(s, {"input": INPUTS[0]}, "file_pooling"))[0]
            compare(rep, f"file_pooling_{pooling}", got, ref_embedding(m, INPUTS[0], pooling))
        with server_util.Server("--pooling", "cls", model=os.path.join(tmp, "pool1.gguf")) as s:
            got = vectors(post(s, {"input": INPUTS[0]}, "flag_overrides"))[0]
        compare(rep, "pooling_flag_overrides_file", got, ref_embedding(m, INPUTS[0], "cls"))
        rank = os.path.join(tmp, "rank.gguf")
        rewrite(base, rank, set_kvs=[(f"{arch}.pooling_type", gguf_np.T_UINT32, 4)])
        with server_util.Server(model=rank) as s:
            status, _, data = s.request("POST", "/v1/embeddings", json.dumps({"input": [1, 2]}))
            rep.check(status == 400 and b"rank" in data, "rank_pooling_refused", f"HTTP {status}: {data[:200]!r}")
            status, _, _ = s.request("POST", "/v1/completions", json.dumps({"prompt": [1, 2], "max_tokens": 2}))
            rep.check(status == 200, "rank_file_still_generates", f"HTTP {status}")

        # Independence from the batch: alone vs together vs chunked vs cached.
        for pooling in ("mean", "last"):
            with server_util.Server("--pooling", pooling, model=base) as s:
                together = vectors(post(s, {"input": INPUTS}, "together"))
                alone = [vectors(post(s, {"input": x}, "alone"))[0] for x in INPUTS]
                again = vectors(post(s, {"input": INPUTS}, "again"))  # last: the prompts' blocks are cached now
            with server_util.Server("--pooling", pooling, "--max-batch-tokens", "5", "--block-size", "4",
                                    model=base) as s:
                chunked = vectors(post(s, {"input": INPUTS}, "chunked"))
            same = all(np.array_equal(a, b) for a, b in zip(alone, together))
            rep.check(same, f"{pooling}_alone_equals_batched", "a vector changed with its batch")
            rep.check(all(np.array_equal(a, b) for a, b in zip(together, again)), f"{pooling}_repeat_identical",
                      "the second request (prefix cache warm) differs")
            worst = max(float(np.abs(a - b).max()) for a, b in zip(together, chunked))
            rep.check(worst <= TOL["f32"], f"{pooling}_chunked_prefill", f"max|diff| {worst:.2e}")

        with server_util.Server(model=base) as s:
            r = post(s, {"input": [INPUTS[0], INPUTS[1]]}, "usage")
            rep.check(r.get("object") == "list" and r["usage"]["prompt_tokens"] == len(INPUTS[0]) + len(INPUTS[1])
                      and r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"], "usage_counts_tokens",
                      json.dumps(r.get("usage")))
            rep.check([d["index"] for d in r["data"]] == [0, 1] and all(d["object"] == "embedding"
                                                                       for d in r["data"]), "response_shape",
                      json.dumps(r)[:200])
            flt = vectors(r)[0]
            rep.check(abs(np.linalg.norm(flt) - 1) < 1e-5, "unit_length", f"norm {np.linalg.norm(flt)}")
            b = post(s, {"input": INPUTS[0], "encoding_format": "base64"}, "base64")["data"][0]["embedding"]
            raw = base64.b64decode(b)
            dec = np.array(struct.unpack("<%df" % (len(raw) // 4), raw), dtype=np.float64)
            rep.check(len(dec) == len(flt) and np.abs(dec - flt).max() < 1e-7, "base64_is_float32_le",
                      f"{len(dec)} values, max|diff| {np.abs(dec[:len(flt)] - flt[:len(dec)]).max():.1e}")
            short = vectors(post(s, {"input": INPUTS[0], "dimensions": 16}, "dimensions"))[0]
            want = flt[:16] / np.linalg.norm(flt[:16])
            rep.check(len(short) == 16 and np.abs(short - want).max() < 1e-6, "dimensions_truncate_renormalize",
                      f"{len(short)} values")
            text = post(s, {"input": "hello world"}, "text")
            rep.check(text["usage"]["prompt_tokens"] >= 2 and len(text["data"][0]["embedding"]) == 256,
                      "text_input", json.dumps(text["usage"]))
            bad = [
                ({}, 400, "input"),
                ({"input": ""}, 400, "input"),
                ({"input": []}, 400, "input"),
                ({"input": [[]]}, 400, "input[0]"),
                ({"input": [1, 99999]}, 400, "input"),
                ({"input": [1, 2], "encoding_format": "hex"}, 400, "encoding_format"),
                ({"input": [1, 2], "dimensions": 0}, 400, "dimensions"),
                ({"input": [1, 2], "dimensions": 257}, 400, "dimensions"),
                ({"input": [1, 2], "model": "nope"}, 404, "model"),
                ({"input": [[1, 2]] * 257}, 400, "input"),
                ({"input": 5}, 400, "input"),
            ]
            for i, (body, status, param) in enumerate(bad):
                st, _, data = s.request("POST", "/v1/embeddings", json.dumps(body))
                try:
                    err = json.loads(data)["error"]
                except (ValueError, KeyError, TypeError):
                    err = {}
                rep.check(st == status and err.get("param") == param, f"bad_request_{i}",
                          f"{json.dumps(body)[:60]}: HTTP {st} param {err.get('param')!r}, want {status} {param}")
            st, _, data = s.request("POST", "/v1/embeddings", "{not json")
            rep.check(st == 400, "bad_json", f"HTTP {st}")
            rep.check(len(vectors(post(s, {"input": INPUTS[1]}, "after_errors"))[0]) == 256, "serves_after_errors", "wrong length")
    except (RuntimeError, ciref.CinferError) as e:
        rep.fail("embeddings", str(e)[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    server_util.check_no_sanitizer_report("embeddings_no_sanitizer_report")
    rep.exit()


if __name__ == "__main__":
    main()
