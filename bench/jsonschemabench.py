#!/usr/bin/env python3
"""JSONSchemaBench coverage of cinfer's JSON Schema front end (the `response_format` json_schema field).

For every schema of the chosen subsets (/work/shared/data/jsonschemabench/*.jsonl, one {"id", "schema"} per
line): send it to a `cinfer serve` running a random-weight model (`cinfer synth --preset tiny`), which
compiles it or answers 400 naming the keyword it cannot honour; sample N outputs (seeded, temperature 1) and
validate each with python3-jsonschema (tests/ref/schema_ref.py: the schema's draft, strict formats).

Per subset it prints: schemas, compiled, 400s (with the most common reasons), outputs that finished ("stop")
and validated, outputs that finished and FAILED validation (must be 0), outputs cut by max_tokens, coverage
(schemas compiled whose N outputs all finished and validated, over all schemas; and over those whose outputs
all finished), compile time (first request minus a cached one) and per-token time with and without a
grammar.

  bench/jsonschemabench.py [--subset Glaiveai2K,Github_trivial,Github_easy] [--every K] [--n 3]
                           [--max-tokens 448] [--jobs 4] [--bin build/release/cinfer] [--show-invalid]
Exit status 1 when an output failed validation."""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import schema_ref  # noqa: E402
import server_util  # noqa: E402

DATA = os.environ.get("JSONSCHEMABENCH") or os.path.join(ROOT, "..", "shared", "data", "jsonschemabench")


def load(subset, every=1, offset=0):
    return load_file(os.path.join(DATA, subset + ".jsonl"), every, offset)


def load_file(path, every=1, offset=0):
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if line.strip() and (i - offset) % every == 0 and i >= offset:
                d = json.loads(line)
                out.append((d.get("id", str(i)), d["schema"]))
    return out


BIAS = {}  # token id -> logit bias (closing_bias)


def closing_bias(srv, value=10.0):
    """A logit_bias making the tokens for '"', '}' and ']' likely: a random-weight model has no prior, so
    without it free strings and lists run to max_tokens (a string ends only when the one '"' token of 1024 is
    drawn).  The grammar still decides where they may appear; validity does not depend on it."""
    bias = {}
    for ch in '"}]':
        st, _, j = srv.json("POST", "/tokenize", {"prompt": "x" + ch, "add_special_tokens": False})
        if st == 200 and len(j["tokens"]) == 2:
            bias[str(j["tokens"][1])] = value
    return bias


def request(srv, schema, n, seed, max_tokens, field="response_format"):
    body = {"prompt": "x", "n": n, "seed": seed, "temperature": 1.0, "max_tokens": max_tokens}
    if BIAS:
        body["logit_bias"] = BIAS
    if field == "response_format":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    else:
        body[field] = schema
    t0 = time.monotonic()
    st, _, j = srv.json("POST", "/v1/completions", body, timeout=600)
    return st, j, time.monotonic() - t0


def reason(msg):
    m = re.search(r"'([^']+)'", msg)
    return m.group(1) if m else msg[:60]


def run_schema(srv, sid, schema, n, max_tokens, seed):
    """A dict describing what happened to one schema."""
    r = {"id": sid, "status": None, "valid": 0, "invalid": [], "length": 0, "error": ""}
    try:
        schema_ref.validator(schema).check_schema(schema)
    except Exception as e:  # not a schema the reference accepts: not counted
        r["status"] = "bad-schema"
        r["error"] = str(e)[:200]
        return r
    st, j, dt = request(srv, schema, 1, seed, 1)
    if st != 200:
        r["status"] = st
        r["error"] = j["error"]["message"] if isinstance(j, dict) and "error" in j else str(j)[:200]
        return r
    _, _, dt2 = request(srv, schema, 1, seed, 1)
    r["compile_s"] = max(0.0, dt - dt2)
    st, j, dt = request(srv, schema, n, seed, max_tokens)
    r["status"] = st
    if st != 200:
        r["error"] = str(j)[:300]
        return r
    r["tokens"] = j["usage"]["completion_tokens"]
    r["gen_s"] = dt
    for ch in j["choices"]:
        text = ch["text"]
        if ch["finish_reason"] != "stop":
            r["length"] += 1
            continue
        try:
            inst = json.loads(text)
        except ValueError as e:
            r["invalid"].append((text, f"not JSON: {e}"))
            continue
        try:
            why = schema_ref.errors(schema, inst)
        except Exception as e:  # e.g. a pattern Python's re cannot compile
            r["status"] = "ref-error"
            r["error"] = repr(e)[:200]
            return r
        if why:
            r["invalid"].append((text, why))
        else:
            r["valid"] += 1
    return r


def run_subset(srv, subset, schemas, n, max_tokens, jobs, show_invalid=False, log=print):
    results = [None] * len(schemas)
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(schemas):
                return
            sid, schema = schemas[i]
            try:
                results[i] = run_schema(srv, sid, schema, n, max_tokens, 1000 + i)
            except Exception as e:
                results[i] = {"id": sid, "status": "exception", "error": repr(e), "valid": 0, "invalid": [],
                              "length": 0}

    ts = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = summarize(subset, results, n)
    log(s["text"])
    if show_invalid:
        for r in results:
            for text, why in r["invalid"]:
                log(f"  INVALID {subset} {r['id']}: {why}\n    {text[:300]!r}")
    return s, results


def summarize(subset, results, n):
    total = sum(1 for r in results if r["status"] not in ("bad-schema", "ref-error"))
    compiled = [r for r in results if r["status"] == 200]
    rejected = [r for r in results if r["status"] == 400]
    other = [r for r in results if r["status"] not in (200, 400, "bad-schema", "ref-error")]
    invalid = sum(len(r["invalid"]) for r in compiled)
    length = sum(r["length"] for r in compiled)
    valid = sum(r["valid"] for r in compiled)
    covered = sum(1 for r in compiled if r["valid"] == n)
    complete = [r for r in compiled if r["length"] == 0]
    covered_complete = sum(1 for r in complete if r["valid"] == n)
    reasons = collections.Counter(reason(r["error"]) for r in rejected)
    comp = sorted(r["compile_s"] for r in compiled if "compile_s" in r)
    tok = sum(r.get("tokens", 0) for r in compiled)
    gen = sum(r.get("gen_s", 0) for r in compiled)
    p = lambda q: comp[min(len(comp) - 1, int(q * len(comp)))] * 1000 if comp else 0  # noqa: E731
    text = (f"{subset}: {total} schemas, {len(compiled)} compiled ({100 * len(compiled) / max(1, total):.1f}%), "
            f"{len(rejected)} rejected (400), {len(other)} other errors; outputs: {valid} valid, "
            f"{invalid} INVALID, {length} cut by max_tokens; coverage {100 * covered / max(1, total):.1f}% "
            f"(schemas whose {n} outputs all finished and validated), "
            f"{100 * (len(compiled) - sum(1 for r in compiled if r['invalid'])) / max(1, total):.1f}% "
            f"(compiled with no invalid output); among compiled schemas whose outputs all finished: "
            f"{covered_complete}/{len(complete)}; compile ms p50 {p(0.5):.1f} p90 {p(0.9):.1f} max "
            f"{(comp[-1] * 1000 if comp else 0):.1f}; {tok} tokens in {gen:.1f} s of requests\n"
            f"  top 400 reasons: {reasons.most_common(12)}\n"
            f"  other errors: {[(r['id'], r['status'], r['error'][:100]) for r in other[:5]]}")
    return {"total": total, "compiled": len(compiled), "invalid": invalid, "covered": covered, "text": text}


def mask_overhead(srv, schemas, k=30, max_tokens=200):
    """Per-token cost of the constraint: for the first k schemas that compile, one sample (n 1) with the
    schema, then one without it of the same length (ignore_eos); the difference over the tokens, in ms."""
    rows = []
    for i, (sid, schema) in enumerate(schemas):
        if len(rows) >= k:
            break
        st, j, t1 = request(srv, schema, 1, 7 + i, max_tokens)
        if st != 200 or j["usage"]["completion_tokens"] < 20:
            continue
        n = j["usage"]["completion_tokens"]
        body = {"prompt": "x", "n": 1, "seed": 7 + i, "temperature": 1.0, "max_tokens": n, "ignore_eos": True}
        t0 = time.monotonic()
        st2, _, j2 = srv.json("POST", "/v1/completions", body, timeout=600)
        t2 = time.monotonic() - t0
        if st2 == 200 and j2["usage"]["completion_tokens"] == n:
            rows.append(((t1 - t2) / n * 1000, t2 / n * 1000))
    if not rows:
        return "mask overhead: no sample"
    rows.sort()
    d = [r[0] for r in rows]
    return (f"mask overhead over {len(rows)} schemas: {sum(d) / len(d):.3f} ms/token mean, p50 {d[len(d) // 2]:.3f}, "
            f"max {d[-1]:.3f} (unconstrained {sum(r[1] for r in rows) / len(rows):.3f} ms/token, request "
            f"overheads included)")


def synth_model(bin_path, tmp):
    model = os.path.join(tmp, "tiny.gguf")
    r = subprocess.run([bin_path, "synth", "--preset", "tiny", "--seed", "7", "-o", model], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("synth: " + r.stderr)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subset", default="Glaiveai2K,Github_trivial,Github_easy")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=448)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--bin", default=server_util.BIN)
    ap.add_argument("--show-invalid", action="store_true")
    ap.add_argument("--overhead", action="store_true", help="also time the mask per token (30 schemas)")
    ap.add_argument("--bias", type=float, default=10.0, help="logit bias of the closing tokens (0: none)")
    a = ap.parse_args()
    server_util.BIN = a.bin
    tmp = tempfile.mkdtemp(prefix="cinfer-jsb-")
    model = synth_model(a.bin, tmp)
    srv = server_util.Server("--max-seqs", "16", model=model)
    bad = 0
    if a.bias:
        BIAS.update(closing_bias(srv, a.bias))
    try:
        for subset in a.subset.split(","):
            s, _ = run_subset(srv, subset, load(subset, a.every), a.n, a.max_tokens, a.jobs, a.show_invalid)
            bad += s["invalid"]
            if a.overhead:
                print(mask_overhead(srv, load(subset, a.every)))
    finally:
        srv.kill()
        os.remove(model)
        os.rmdir(tmp)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
