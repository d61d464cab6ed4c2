#!/usr/bin/env python3
"""bench/router.py — `cinfer router` on the shared-prefix workload: prefix-aware routing against round-robin
(and one replica alone, for scale).  For each setup: start fresh `cinfer serve` replicas of a `cinfer synth`
model on loopback ports, a router in front of them, run `cinfer bench serve --dataset shared-prefix` through
it, then read the replicas' own prefix-cache counters (cinfer:prefix_cache_hits_total / queries_total) from
their /metrics.  Prints one Markdown table (hit rate, TTFT p50/p99, request and output throughput).

    bench/router.py [--preset tiny] [--replicas 3] [-n 240] [--groups 29] [--prefix-len 384] [--suffix-len 16]
                    [--output-len 16] [--rate 16] [--threads 1] [--kv-mem 8M] [--bin build/release/cinfer]

The default KV pool (8M: 8192 tokens of the tiny model's f16 cache, 21 of the 29 groups' prefixes) is what
makes routing matter: round-robin shows every group to every replica, whose caches then evict each other's
prefixes, while prefix routing gives each replica a third of the groups.  `cinfer bench serve` deals the
requests to the groups in turn, so the group count must be prime to the replica count (29 and 3), else
round-robin would send each group to one replica by accident.

Standard library only.  Run it under nice when the machine is shared; the numbers are then indicative."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(cmd, pattern, timeout=60):
    """Starts cmd; waits for `pattern` (with a (\\d+) port group) and a ' ready ' line on stderr."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    port, ready, lines = [None], threading.Event(), []

    def read():
        for line in p.stderr:
            lines.append(line)
            m = re.search(pattern, line)
            if m and port[0] is None:
                port[0] = int(m.group(1))
            if " ready " in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(timeout):
        p.kill()
        sys.exit(f"{cmd[1]} did not start: {''.join(lines[-5:])}")
    return p, port[0]


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def run(a, model, policy, n_replicas, out):
    serve = [a.bin, "serve", "-m", model, "--port", "0", "--threads", str(a.threads), "--kv-mem", a.kv_mem]
    reps = [start(serve, r"listening on http://[^ ]+:(\d+)") for _ in range(n_replicas)]
    procs = [p for p, _ in reps]
    front = reps[0][1]
    if policy:
        cmd = [a.bin, "router", "--port", "0", "--policy", policy, "-m", model]
        for _, port in reps:
            cmd += ["--replica", f"http://127.0.0.1:{port}"]
        rp, front = start(cmd, r"listening on http://[^ ]+:(\d+)")
        procs.append(rp)
    try:
        before = [metrics(port) for _, port in reps]
        bench = [a.bin, "bench", "serve", "--url", f"http://127.0.0.1:{front}", "--endpoint",
                 "/v1/chat/completions", "--dataset", "shared-prefix", "-n", str(a.n), "--groups", str(a.groups),
                 "--prefix-len", str(a.prefix_len), "--suffix-len", str(a.suffix_len), "--output-len",
                 str(a.output_len), "--request-rate", str(a.rate), "--seed", "1", "-o", out, "--no-plots", "-q"]
        r = subprocess.run(bench, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench serve failed: {r.stderr[-500:]}")
        after = [metrics(port) for _, port in reps]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    hits = sum(y.get("cinfer:prefix_cache_hits_total", 0) - x.get("cinfer:prefix_cache_hits_total", 0)
               for x, y in zip(before, after))
    queries = sum(y.get("cinfer:prefix_cache_queries_total", 0) - x.get("cinfer:prefix_cache_queries_total", 0)
                  for x, y in zip(before, after))
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    ttfts = [t * 1000 for t in res["ttfts"] if t is not None]
    return {"hit": hits / queries if queries else 0, "ttft50": quantile(ttfts, 0.5), "ttft99": quantile(ttfts, 0.99),
            "req_s": res["request_throughput"], "tok_s": res["output_throughput"], "ok": res["completed"],
            "failed": res["failed"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("-n", type=int, default=240)
    ap.add_argument("--groups", type=int, default=29)
    ap.add_argument("--prefix-len", type=int, default=384)
    ap.add_argument("--suffix-len", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--rate", default="16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--kv-mem", default="8M")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "cinfer"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cinfer-router-bench-")
    model = os.path.join(tmp, f"{a.preset}.gguf")
    subprocess.run([a.bin, "synth", "--preset", a.preset, "--seed", "1", "-o", model], check=True,
                   capture_output=True)
    rows = [("one replica (no router)", None, 1), (f"router, prefix, {a.replicas} replicas", "prefix", a.replicas),
            (f"router, round-robin, {a.replicas} replicas", "round-robin", a.replicas)]
    print(f"shared-prefix workload: {a.n} chat requests, {a.groups} groups, prefix {a.prefix_len} + suffix "
          f"{a.suffix_len} tokens, {a.output_len} out, Poisson {a.rate} req/s; synth {a.preset}, "
          f"{a.threads} thread(s) and --kv-mem {a.kv_mem} per replica\n")
    print("| setup | prefix hit rate | TTFT p50 ms | TTFT p99 ms | req/s | out tok/s | ok/failed |")
    print("|---|---|---|---|---|---|---|")
    for name, policy, k in rows:
        r = run(a, model, policy, k, os.path.join(tmp, policy or "single"))
        print(f"| {name} | {r['hit']:.3f} | {r['ttft50']:.1f} | {r['ttft99']:.1f} | {r['req_s']:.2f} | "
              f"{r['tok_s']:.1f} | {r['ok']}/{r['failed']} |", flush=True)


if __name__ == "__main__":
    main()
