#!/usr/bin/env python3
"""The cost of a grammar constraint on decoding (issue 13's target: a constrained decode step costs <= 5% more
than an unconstrained one), through `cinfer serve` with CINFER_DEBUG=sched, whose per-step log line gives the
step's time and the time spent on grammar masks (computing the mask, applying it to the logits, advancing
the matcher).

For each grammar and each batch size (n samples of one request: n sequences decoding together), requests
with and without the grammar alternate (order shuffled per repetition, same seeds), temperature 1 with
ignore_eos; the decode steps in which all n sequences decode (no prefill) are kept, the first k of both
requests of a pair when the constrained one ends early (k: its count).  Printed per case: the
median step time unconstrained and constrained, the overhead, and the median grammar time per step and per
mask (token).  Timings on a shared machine are noisy: the interleaving and the medians are there for that.
The overhead column is the median over repetitions of (median constrained step / median unconstrained step)
of that repetition's pair; the mask share (grammar time / constrained step time, both measured inside the
same steps) is the direct measure and does not depend on the noise between requests.

    bench/grammar.py -m MODEL [--grammars a.gbnf,b.gbnf] [--batch 1,16] [--reps 5] [--tokens 48]
                     [--schemas Github_easy:40,Glaiveai2K:100]   (JSONSchemaBench schemas, every K-th, as
                     response_format json_schema; then --grammars "" to run only those)
    cinfer synth --preset smollm2-135m --type q8_0 -o /tmp/smol.gguf && bench/grammar.py -m /tmp/smol.gguf

The compile time of the grammar corpus (tests/data/grammars) and the time of uncached masks are printed by
tests/unit/test_grammar_corpus.c.  Standard library only."""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP = re.compile(r"^step \d+: ([0-9.]+) ms, \d+ tokens \((\d+) prefill, (\d+) decode, \d+ pad\).*"
                  r"grammar ([0-9.]+) ms \((\d+) masks\)")


class Server:
    def __init__(self, binary, model, threads, max_seqs):
        env = dict(os.environ, CINFER_DEBUG="sched")
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--threads", str(threads),
                                      "--max-seqs", str(max_seqs)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.lock = threading.Lock()
        self.url = None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(120):
            self.proc.kill()
            sys.exit("cinfer serve did not start: " + " | ".join(self.lines[-5:]))

    def _read(self):
        for line in self.proc.stderr:
            with self.lock:
                self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on (http://[^ ]+:\d+)", line)
            if m and not self.url:
                self.url = m.group(1)
            if " ready " in line and self.url:
                self.ready.set()

    def mark(self):
        with self.lock:
            return len(self.lines)

    def since(self, k):
        with self.lock:
            return self.lines[k:]

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)


def run_case(s, grammar, n, seed, tokens):
    body = {"prompt": "Once upon a time", "max_tokens": tokens, "n": n, "temperature": 1.0, "seed": seed,
            "ignore_eos": True}
    if isinstance(grammar, dict):  # a JSON schema
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": grammar}}
    elif grammar is not None:
        body["grammar"] = grammar
    k = s.mark()
    s.post("/v1/completions", body)
    time.sleep(0.05)  # the last step's log line
    steps = []
    for line in s.since(k):
        m = STEP.match(line)
        if m and int(m.group(2)) == 0 and int(m.group(3)) == n:
            steps.append((float(m.group(1)), float(m.group(4)), int(m.group(5))))
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/release/cinfer"))
    ap.add_argument("--grammars", default="llamacpp_json,llamacpp_c,llamacpp_english,sql_select",
                    help="names in tests/data/grammars or .gbnf paths, comma-separated")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schemas", default="", help="JSONSchemaBench subsets (SUBSET:K, every K-th schema)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each repetition's ratio")
    a = ap.parse_args()
    batches = [int(x) for x in a.batch.split(",")]
    grammars = []
    for g in filter(None, a.grammars.split(",")):
        path = g if g.endswith(".gbnf") else os.path.join(ROOT, "tests/data/grammars", g + ".gbnf")
        with open(path, encoding="utf-8") as f:
            grammars.append((os.path.basename(path)[:-5], f.read()))
    data = os.environ.get("JSONSCHEMABENCH") or os.path.join(ROOT, "..", "shared", "data", "jsonschemabench")
    for spec in filter(None, a.schemas.split(",")):
        subset, _, every = spec.partition(":")
        with open(os.path.join(data, subset + ".jsonl"), encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip() and i % int(every or 1) == 0:
                    grammars.append((f"{subset[:10]}:{i}", json.loads(line)["schema"]))
    s = Server(a.bin, a.model, a.threads, max(batches))
    rng = random.Random(1)
    print(f"{'grammar':<18} {'n':>3} {'steps':>11} {'plain ms':>9} {'gram ms':>9} {'overhead':>9} "
          f"{'mask ms/step':>12} {'mask us/tok':>11} {'p90 us/tok':>10} {'max us/tok':>10} {'mask share':>10}")
    every_tok, shares = {}, {}  # per batch size: mask us/token of every constrained step; mask shares
    try:
        s.post("/v1/completions", {"prompt": "warm up", "max_tokens": 4})
        for name, text in grammars:
            for n in batches:
                plain, gram, ratios = [], [], []
                for rep in range(a.reps):
                    order = [False, True]
                    rng.shuffle(order)
                    got = {}
                    for constrained in order:
                        try:
                            got[constrained] = run_case(s, text if constrained else None, n, 100 + rep, a.tokens)
                        except urllib.error.HTTPError:  # a schema the front end declines (400)
                            got[constrained] = []
                    # A constrained request may end early (the grammar complete): compare the same steps (the
                    # first k of each request), as the first decode steps can differ from later ones.
                    k = min(len(got[False]), len(got[True]))
                    plain.extend(got[False][:k])
                    gram.extend(got[True][:k])
                    if k:  # this repetition's pair: the ratio of its medians
                        ratios.append(statistics.median(x[0] for x in got[True][:k]) /
                                      statistics.median(x[0] for x in got[False][:k]))
                if a.verbose:
                    print(f"  {name} n={n} per-repetition ratios: " + " ".join(f"{r:.3f}" for r in ratios))
                if not plain or not gram or not ratios:
                    print(f"{name:<18} {n:>3} no full decode steps (plain {len(plain)}, grammar {len(gram)})")
                    continue
                p = statistics.median(x[0] for x in plain)
                g = statistics.median(x[0] for x in gram)
                gm = statistics.median(x[1] for x in gram)
                toks = sorted(1e3 * x[1] / x[2] for x in gram if x[2])
                every_tok.setdefault(n, []).extend(toks)
                shares.setdefault(n, []).append(gm / g)
                per_tok = statistics.median(toks)
                print(f"{name:<18} {n:>3} {len(plain):>5}/{len(gram):<5} {p:>9.2f} {g:>9.2f} "
                      f"{100 * (statistics.median(ratios) - 1):>+8.1f}% {gm:>12.3f} {per_tok:>11.1f} "
                      f"{toks[len(toks) * 9 // 10]:>10.1f} {toks[-1]:>10.1f} {100 * gm / g:>9.1f}%", flush=True)
        for n, toks in sorted(every_tok.items()):
            toks.sort()
            sh = sorted(shares[n])
            print(f"all {len(sh)} grammars, n={n}: mask per token (a step's grammar time / its masks) median "
                  f"{statistics.median(toks):.1f} us, p90 {toks[len(toks) * 9 // 10]:.1f} us, max {toks[-1]:.1f} us "
                  f"over {len(toks)} steps; mask share of the step median {100 * statistics.median(sh):.2f}%, "
                  f"max {100 * sh[-1]:.2f}%")
    finally:
        s.close()


if __name__ == "__main__":
    main()
