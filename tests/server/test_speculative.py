#!/usr/bin/env python3
"""Speculative decoding through `cinfer serve` and `cinfer run` (stories260K, a real trained model whose stories
repeat names and phrases, and a Q4_0 quantization of it, made with `cinfer quantize`, as the draft model):

- greedy completions (several prompts, n = 2, a stop string, a grammar) are identical, text and finish
  reason, between a plain server and servers with --spec ngram and --spec draft;
- /metrics counts drafts and accepted drafts and reports tokens per step > 1 there, 0 drafts on the plain
  server; a request with {"speculative": {"n_max": 0}} adds no drafts; "speculative.n_max" (llama.cpp's flat
  name) is accepted; bad values get a 400 naming the parameter;
- `cinfer run` prints the same text with and without --spec, and rejects bad flags (exit 2) and a draft
  model of another vocabulary (exit 1, the reason on stderr).
Prints PASS/FAIL lines."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import BIN, STORIES, Server, check, check_no_sanitizer_report, setup_ok  # noqa: E402

PROMPTS = ["Once upon a time", "Lily and Ben went to the park. Lily and Ben", "The cat sat on the mat. The cat",
           "One day, a little boy named Tim"]


def completions(s, extra=None):
    out = []
    for p in PROMPTS:
        body = {"prompt": p, "max_tokens": 120, "temperature": 0, "n": 2}
        body.update(extra or {})
        st, _, j = s.json("POST", "/v1/completions", body)
        out.append((st, [(c["text"], c["finish_reason"]) for c in j["choices"]] if st == 200 else j))
    body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "stop": ["park"]}
    body.update(extra or {})
    st, _, j = s.json("POST", "/v1/completions", body)
    out.append((st, j["choices"][0]["text"] if st == 200 else j))
    body = {"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
            "grammar": 'root ::= ( " " [a-z]+ ){1,12} "."'}
    body.update(extra or {})
    st, _, j = s.json("POST", "/v1/completions", body)
    out.append((st, (j["choices"][0]["text"], j["choices"][0]["finish_reason"]) if st == 200 else j))
    return out


def spec_metrics(s):
    m = s.metrics()
    return (m.get("cinfer:spec_decode_num_draft_tokens_total", -1),
            m.get("cinfer:spec_decode_num_accepted_tokens_total", -1),
            m.get("cinfer:decode_tokens_per_step", -1))


def main():
    if not setup_ok("spec"):
        return 1
    tmp = tempfile.mkdtemp(prefix="cinfer-spec-")
    draft = os.path.join(tmp, "draft-q4.gguf")
    other = os.path.join(tmp, "tiny.gguf")
    r = subprocess.run([BIN, "quantize", STORIES, draft, "Q4_0", "--pure"], capture_output=True, text=True)
    r2 = subprocess.run([BIN, "synth", "--preset", "tiny", "--seed", "3", "-o", other], capture_output=True,
                        text=True)
    if r.returncode or r2.returncode:
        print(f"FAIL spec_setup: {r.stderr} {r2.stderr}")
        return 1
    with Server() as plain:
        want = completions(plain)
        d0 = spec_metrics(plain)
    check("spec_plain_ok", all(st == 200 for st, _ in want), str(want)[:300])
    check("spec_plain_no_drafts", d0[0] == 0 and d0[2] == 1, f"metrics {d0}")
    for mode, args in (("ngram", ["--spec", "ngram"]), ("draft", ["--spec", "draft", "--draft-model", draft])):
        with Server(*args) as s:
            got = completions(s)
            for i, (a, b) in enumerate(zip(want, got)):
                check(f"spec_{mode}_greedy_identical_{i}", a == b, f"plain {a!r}\n  spec  {b!r}")
            drafts, acc, tps = spec_metrics(s)
            check(f"spec_{mode}_metrics", drafts > 0 and 0 < acc <= drafts and tps > 1.0,
                  f"drafts {drafts} accepted {acc} tokens/step {tps}")
            print(f"  {mode}: {acc:.0f} of {drafts:.0f} drafts accepted, {tps:.2f} tokens per step")
            # Off per request: no drafts added.
            got_off = completions(s, {"speculative": {"n_max": 0}})
            after = spec_metrics(s)
            check(f"spec_{mode}_off_per_request", after[0] == drafts and got_off == want,
                  f"drafts {drafts} -> {after[0]}")
            got_flat = completions(s, {"speculative.n_max": 2})
            check(f"spec_{mode}_flat_n_max", got_flat == want and spec_metrics(s)[0] > after[0], "")
            for bad, param in (({"speculative": 3}, "speculative"),
                               ({"speculative": {"n_max": 99}}, "speculative.n_max"),
                               ({"speculative": {"n_min": 1}}, "speculative"),
                               ({"speculative.n_max": -1}, "speculative.n_max")):
                body = {"prompt": "x", "max_tokens": 2}
                body.update(bad)
                st, _, j = s.json("POST", "/v1/completions", body)
                check(f"spec_{mode}_rejects_{param}_{list(bad.values())[0]!r}",
                      st == 400 and j.get("error", {}).get("param") == param, f"{st} {j}")
    # cinfer run: same text; bad flags; a draft of another vocabulary.
    base = [BIN, "run", "-m", STORIES, "-p", "Lily and Ben", "-n", "80", "--temp", "0", "-t", "1"]
    outs = [subprocess.run(base + extra, capture_output=True, text=True)
            for extra in ([], ["--spec", "ngram", "--spec-k", "4"], ["--spec", "draft", "--draft-model", draft])]
    check("spec_run_identical", all(o.returncode == 0 for o in outs) and outs[0].stdout == outs[1].stdout ==
          outs[2].stdout, " | ".join(o.stderr[-200:] for o in outs))
    check("spec_run_reports", "drafts accepted" in outs[1].stderr and "drafts accepted" in outs[2].stderr,
          outs[1].stderr[-300:])
    for name, extra, rc, needle in (
            ("bad_mode", ["--spec", "eagle"], 2, "--spec"),
            ("draft_without_model", ["--spec", "draft"], 2, "--draft-model"),
            ("model_without_draft", ["--draft-model", draft], 2, "--spec draft"),
            ("bad_k", ["--spec", "ngram", "--spec-k", "99"], 2, "--spec-k"),
            ("other_vocabulary", ["--spec", "draft", "--draft-model", other], 1, "vocabulary")):
        o = subprocess.run(base + extra, capture_output=True, text=True)
        check(f"spec_run_{name}", o.returncode == rc and needle in o.stderr and "Sanitizer" not in o.stderr,
              f"exit {o.returncode}: {o.stderr[-300:]}")
    check_no_sanitizer_report("spec_no_sanitizer_report")
    for f in (draft, other):
        os.remove(f)
    os.rmdir(tmp)
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
