#!/usr/bin/env python3
"""Tensor and pipeline parallelism over MPI (`mpirun -np 2 cinfer logits|run --tp 2`, `--pp 2`, and 4 ranks of
`--tp 2 --pp 2`; README "Past one machine").

On `cinfer synth` models of several architectures (llama with GQA, llama3 RoPE scaling, qwen2 with Q/K/V
biases, qwen3 with Q/K norms and head_dim != n_embd / n_head, gemma2 with post-norms and soft-capping,
mixtral / qwen3moe / qwen2moe experts, the last with a shared expert) in F32, Q8_0 and a K-quant:
  - the logits of two ranks (each a half of every layer, two all-reduces per layer) against the single
    process's, within a stated tolerance: the shards sum the same products in another order, so the logits
    are not bit-identical.  F32: max|d| <= F32_TOL * max(1, max|logit|) (measured: at most 4e-6 relative);
    quantized: QUANT_TOL (the activations of each matmul are rounded to int8 blocks, so a 1-ulp difference can
    move one rounding, and an expert router near a tie can choose differently: measured up to 0.028 relative);
  - the two-rank F32 logits of tiny and tiny-qwen3moe also against the numpy reference (tests/ref/model_np.py),
    within ciref.logit_tolerance("f32");
  - greedy `cinfer run` output (40 tokens) identical to the single process's;
  - `cinfer serve --tp 2`: concurrent greedy completions sharing a long prefix (prefix-cache hits) with n = 2
    (forked blocks and copy-on-write, which the other rank must repeat) return the single process's text, and
    SIGTERM to rank 0 ends every rank (mpirun exits 0); a worker killed (SIGKILL) mid-stream ends the client's
    stream early and every process, within bounds;
  - start-up errors, each bounded by a timeout (no hang): ranks given different options, ranks given different
    model files, a rank whose file does not load, head / KV head counts not divisible by the ranks, an
    architecture the shards do not cover, K-quant columns off their 256-element blocks, a world of another
    size than --tp, and --tp without mpirun.
Pipeline parallelism (`--pp 2`: two stages of contiguous layers, the batch in two micro-batches; `--tp 2 --pp 2`:
four ranks, two per stage), against the same single process and within the same tolerances: F32 logits of
every architecture above (4 ranks: tiny and tiny-qwen3moe) plus gemma3 (its one global layer in the last
stage), phi3 and gpt-oss (which --tp does not cover); the quantized logits (4 ranks: tiny-qwen3moe Q8_0); greedy
`run` (40 tokens; 4 ranks: 16 tokens of tiny and tiny-qwen3moe Q8_0); `serve --pp 2` with the prefix-cache and
n = 2 requests; `cinfer bench` under --tp 2 and --pp 2 (its all-reduce and hidden-state counts add up); errors
for more stages than layers, an encoder, and -np other than tp x pp.  The watchdog: a rank
stopped with SIGSTOP mid-stream under `--dist-timeout 4` (--pp 2: rank 0 waits point to point; --tp 2: in an
all-reduce, the gather of the logits or a broadcast) ends the client's stream and every process, the stopped one included, and stderr names the
stopped rank and the cause; rank 0 stopped while `serve --tp 2 --dist-timeout 2` idles ends every process with
rank 1 naming rank 0 (its idle ticks stopped), and a healthy server idle for three times the timeout (--tp 2
and --pp 2) still answers with the single process's text.
The token embedding: split by vocabulary with --tp (stage 0's ranks), as the head with --tp alone.  A rank
loads the file without reading it all ahead and then reads ahead its shard's bytes only (rank 0 reports them).
The output head: with --tp alone it is split by vocabulary (each rank a slice of the rows, rank 0 gathers the
logits: every --tp logits check above runs through it; tiny-gemma2's head is tied to the embedding), and
`run` reports rank 0's share of the rows; with --pp it stays whole on rank 0.
The serving invariance tests under `serve --tp 2`: policies (static, naive), chunked prefill off and 16-token
chunks, 8-token blocks, no prefix cache, and a pool small enough to preempt give the single process's text.
Speculative decoding with a draft model (whole on rank 0) under --tp 2, --pp 2 and both: greedy `run` output
equal to the single process's, with a draft mostly rejected and one always accepted.
Under the sanitizer builds (tests/run.sh sets CINFER_TEST_SAMPLE) the logits and greedy sweeps take a sample
of the models; every other check runs whole.
Skips (with a message, no PASS lines) only when mpirun is absent.  Prints PASS/FAIL lines."""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ref"))

import ciref  # noqa: E402
import model_np  # noqa: E402

BIN = ciref.BIN
TIMEOUT = 120
F32_TOL = 2e-5
QUANT_TOL = 0.05
TOKENS = [1 + (i * 37) % 1000 for i in range(48)]

ENV = ciref.mpi_env()

rep = ciref.Report()


def run(cmd, timeout=TIMEOUT):
    """(returncode, stdout, stderr); returncode None on a timeout (a hang)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=ENV)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace")
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def cause(err, n=600):
    """stderr's last n characters without Open MPI's framed notices, which follow every failed rank and would
    push the rank's own words out of the message; the line naming the rank and its signal stays."""
    keep, framed = [], False
    for line in err.strip().splitlines():
        if line.startswith("-----"):
            framed = not framed
        elif not framed or line.startswith("mpirun noticed"):
            keep.append(line)
    return "\n".join(keep)[-n:]


def mpirun(n, args):
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n), BIN] + args


def dist(args, tp=1, pp=1, threads="--threads"):
    """args alone (2 threads), or under mpirun on tp x pp ranks (1 thread each)."""
    if tp * pp == 1:
        return [BIN] + args + [threads, "2"]
    return mpirun(tp * pp, args + ["--tp", str(tp), "--pp", str(pp), threads, "1"])


def label(tp, pp):
    return "tp%d" % tp if pp == 1 else "pp%d" % pp if tp == 1 else "tp%dpp%d" % (tp, pp)


def read_logits(path, n):
    raw = np.fromfile(path, dtype="<f4")
    return raw.reshape(n, -1)


def logits(model, tmp, tp=1, kv="f32", pp=1):
    out = os.path.join(tmp, "out.f32")
    if os.path.exists(out):
        os.unlink(out)
    args = ["logits", "-m", model, "--tokens", ",".join(map(str, TOKENS)), "--kv-type", kv, "-o", out]
    cmd = dist(args, tp, pp)
    rc, _, err = run(cmd)
    if rc != 0:
        raise ciref.CinferError("%s exited %s: %s" % (" ".join(cmd[:8]), rc, cause(err)))
    return read_logits(out, len(TOKENS))


def rel(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / max(1.0, float(np.abs(b).max())))


def check_logits(name, model, tmp, tol, dists=((2, 1),)):
    """The logits of each (tp, pp) of dists against the single process's; the first's are returned.  Names
    after the first get the layout's label (pp2, tp2pp2)."""
    try:
        one = logits(model, tmp)
    except ciref.CinferError as e:
        rep.fail(name, e)
        return None
    first = None
    for i, (tp, pp) in enumerate(dists):
        n = name if i == 0 else "%s_%s" % (name, label(tp, pp))
        try:
            two = logits(model, tmp, tp=tp, pp=pp)
        except ciref.CinferError as e:
            rep.fail(n, e)
            continue
        d = rel(two, one)
        rep.check(d <= tol, n, "relative max|d| %.3g > %g" % (d, tol),
                  "relative max|d| %.3g, max|d| %.3g, tol %g" % (d, float(np.abs(two - one).max()), tol))
        first = two if i == 0 else first
    return first


def greedy(model, tp, pp=1, n=40):
    args = ["run", "-m", model, "-p", "hello world", "-n", str(n), "--temp", "0", "--ids", "--kv-type", "f32"]
    cmd = dist(args, tp, pp, "-t")
    rc, out, err = run(cmd)
    if rc != 0:
        raise ciref.CinferError("run exited %s: %s" % (rc, cause(err, 400)))
    return out.split()


def vocab_rows(n_vocab, rank, n):
    """The rows of the output head rank keeps of n (README: as even as can be on multiples of 64 rows)."""
    align = 64 if n_vocab >= 64 * n else 1
    units = n_vocab // align
    lo = units * rank // n * align
    hi = n_vocab if rank == n - 1 else units * (rank + 1) // n * align
    return hi - lo


def spec_draft(model, tmp):
    """`run --spec draft` under --tp 2, --pp 2 and --tp 2 --pp 2: the draft model runs whole on rank 0, the
    target's verification passes go through the ranks as any batch.  Greedy output equals the single
    process's without speculation, with a draft that is mostly rejected (a Q4_0 of the model) and with one
    that is always accepted (the model itself: several drafts verified per pass, the rest rolled back)."""
    q4 = quantize(tmp, model, "Q4_0")
    args = ["run", "-m", model, "-p", "hello world", "--temp", "0", "--ids", "--kv-type", "f32"]
    single = {n: run(dist(args + ["-n", str(n)], 1, 1, "-t"))[1].split() for n in (40, 16)}
    for tp, pp, n in ((2, 1, 40), (1, 2, 40), (2, 2, 16)):
        want = single[n]
        for draft, kind in ((q4, "q4_0"), (model, "self")):
            name = "spec_draft_%s_%s" % (kind, label(tp, pp))
            rc, out, err = run(dist(args + ["-n", str(n), "--spec", "draft", "--draft-model", draft], tp, pp, "-t"))
            m = re.search(r"draft: (\d+) of (\d+) drafts accepted", err)
            acc, drafts = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
            enough = drafts > 0 and (acc > drafts // 2 if kind == "self" else acc >= 0)
            ok = rc == 0 and out.split() == want and len(want) == n and enough
            rep.check(ok, name, "exit %s, single %s, got %s: %s" % (rc, want, out.split(), cause(err, 300)),
                      "%d tokens equal, %d of %d drafts accepted" % (n, acc, drafts))


def head_split(model, n_vocab):
    """`run --tp 2` splits the output head by vocabulary (rank 0 says how many rows it holds and how many
    gathers of logits it made: one per forward pass that wants logits), `--pp 2` and `--tp 2 --pp 2` keep it
    whole on rank 0 (no such line).  The token embedding is split by vocabulary under --tp 2 and --tp 2
    --pp 2 (stage 0's two ranks), whole under --pp 2.  That the split logits are right is the logits checks'
    business: every --tp logits check embeds through the split."""
    args = ["run", "-m", model, "-p", "hello world", "-n", "4", "--temp", "0", "--kv-type", "f32"]
    for tp, pp in ((2, 1), (1, 2), (2, 2)):
        name = "head_split_by_vocab_%s" % label(tp, pp)
        rc, _, err = run(dist(args, tp, pp, "-t"))
        m = re.search(r"output head split by vocabulary: rank 0 holds (\d+) of (\d+) rows; (\d+) gathers", err)
        if pp == 1:
            want = vocab_rows(n_vocab, 0, tp)
            ok = rc == 0 and m and int(m.group(1)) == want and int(m.group(2)) == n_vocab and int(m.group(3)) >= 4
            rep.check(ok, name, "exit %s, want %d of %d rows: %s" % (rc, want, n_vocab, cause(err, 400)),
                      m.group(0) if m else "")
        else:
            rep.check(rc == 0 and not m, name, "exit %s: %s" % (rc, cause(err, 400)), "head whole on rank 0")
        # Each rank reads ahead only its shard of the file (loaded without reading the whole file ahead).
        m = re.search(r"rank 0 read ahead ([0-9.]+) of the model file's ([0-9.]+) MiB", err)
        ok = rc == 0 and m and 0 < float(m.group(1)) < 0.9 * float(m.group(2))
        rep.check(ok, "read_ahead_shard_%s" % label(tp, pp), "exit %s: %s" % (rc, cause(err, 400)),
                  m.group(0) if m else "")
        name = "embedding_split_by_vocab_%s" % label(tp, pp)
        m = re.search(r"token embedding split by vocabulary: rank 0 holds (\d+) of (\d+) rows", err)
        if tp > 1:
            want = vocab_rows(n_vocab, 0, tp)
            ok = rc == 0 and m and int(m.group(1)) == want and int(m.group(2)) == n_vocab
            rep.check(ok, name, "exit %s, want %d of %d rows: %s" % (rc, want, n_vocab, cause(err, 400)),
                      m.group(0) if m else "")
        else:
            rep.check(rc == 0 and not m, name, "exit %s: %s" % (rc, cause(err, 400)), "embedding whole on rank 0")


def expect_error(name, cmd, words, timeout=60):
    """cmd must fail (non-zero, within the timeout) with every string of words on stderr."""
    rc, _, err = run(cmd, timeout)
    if rc is None:
        rep.fail(name, "hung: no exit within %d s" % timeout)
        return
    missing = [w for w in words if w not in err]
    rep.check(rc != 0 and not missing, name, "exit %s, missing %s in: %s" % (rc, missing, cause(err, 400)),
              err.strip().splitlines()[0] if err.strip() else "")


class Serve:
    """`cinfer serve` on a free port, alone or as rank 0 of `mpirun -np tp`; its stderr read on a thread."""

    def __init__(self, model, tp, extra=(), pp=1):
        args = ["serve", "-m", model, "--port", "0", "--kv-type", "f32", "--max-seqs", "16"] + list(extra)
        cmd = dist(args, tp, pp, "-t")
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        self.lines, self.port, self.ready = [], None, threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(60):
            raise ciref.CinferError("serve did not become ready: %s" % " | ".join(self.lines[-5:]))

    def _read(self):
        for raw in self.p.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self.lines.append(line)
            m = re.search(r"listening on http://[0-9.]+:([0-9]+)", line)
            if m:
                self.port = int(m.group(1))
            if " ready (" in line:
                self.ready.set()

    def complete(self, prompt, n):
        body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "n": n}).encode()
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = json.loads(r.read())
        if r.status != 200:
            raise ciref.CinferError("HTTP %d: %s" % (r.status, data))
        return [ch["text"] for ch in sorted(data["choices"], key=lambda ch: ch["index"])]

    def batch(self, prompts, n):
        """The prompts sent at once (one thread each): {prompt: [texts]}."""
        out, errs = {}, []

        def one(p):
            try:
                out[p] = self.complete(p, n)
            except Exception as e:  # noqa: BLE001 (reported as the test's failure)
                errs.append(e)

        ts = [threading.Thread(target=one, args=(p,)) for p in prompts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise ciref.CinferError(errs[0])
        return out

    def rank(self, r):
        """The pid of rank r (mpirun's child whose environment says so), or mpirun's own without one."""
        try:
            with open("/proc/%d/task/%d/children" % (self.p.pid, self.p.pid)) as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            return self.p.pid
        for k in kids:
            try:
                with open("/proc/%d/environ" % k, "rb") as f:
                    if b"OMPI_COMM_WORLD_RANK=%d\0" % r in f.read():
                        return k
            except OSError:
                pass
        return self.p.pid

    def rank0(self):
        return self.rank(0)

    def stop(self, timeout=30):
        """SIGTERM to the server (rank 0 under mpirun: it stops the other ranks); the exit status of the whole
        (mpirun's), or None when something still runs after the timeout."""
        os.kill(self.rank0(), signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def serving(rep_name, model, dists=((2, 1),)):
    """Concurrent greedy completions (a shared 100-token-long prefix, so the prefix cache hits from the second
    round on; n = 2 samples fork the prompt's blocks and copy-on-write the shared partial block) through
    `cinfer serve` on each (tp, pp) of dists equal the single process's; then SIGTERM ends every rank.  Names
    after the first get the layout's label."""
    prefix = " ".join("w%d" % (i % 17) for i in range(60))
    prompts = [prefix + " tail %d" % i for i in range(4)] + ["short %d" % i for i in range(2)]
    results = {}
    for i, (tp, pp) in enumerate(((1, 1),) + tuple(dists)):
        name = rep_name if i <= 1 else "%s_%s" % (rep_name, label(tp, pp))
        srv = None
        try:
            srv = Serve(model, tp, pp=pp)
            results[(tp, pp)] = [srv.batch(prompts, 2), srv.batch(prompts, 2)]
        except ciref.CinferError as e:
            rep.fail(name, "--tp %d --pp %d: %s" % (tp, pp, e))
            if srv:
                srv.stop()
            if i == 0:
                return
            continue
        rc = srv.stop()
        if i == 0:
            continue
        stopped = any("cinfer serve: stopped" in line for line in srv.lines)
        rep.check(rc == 0 and stopped, name + "_sigterm_ends_all",
                  "mpirun exit %s; stderr: %s" % (rc, srv.lines[-4:]), "rank 0 stopped, mpirun exited 0")
        one, two = results[(1, 1)], results[(tp, pp)]
        same_pairs = all(len(t) == 2 and t[0] == t[1] for r in two for t in r.values())
        rep.check(one == two and same_pairs, name, "single %s\n--tp %d --pp %d %s" % (one, tp, pp, two),
                  "%d prompts x 2 samples x 2 rounds equal" % len(prompts))


def serving_invariance(model):
    """The serving invariance tests under --tp 2: the same concurrent greedy batch (the shared-prefix prompts of
    serving(), n = 2) through `cinfer serve --tp 2` under each policy, without chunked prefill, with small
    chunks, small blocks, no prefix cache, and a KV pool so small that sequences are preempted and recomputed,
    equals the single process's with the defaults."""
    prefix = " ".join("w%d" % (i % 17) for i in range(60))
    prompts = [prefix + " tail %d" % i for i in range(4)] + ["short %d" % i for i in range(2)]
    try:
        srv = Serve(model, 1)
        want = srv.batch(prompts, 2)
        srv.stop()
    except ciref.CinferError as e:
        rep.fail("serve_invariance_setup", e)
        return
    for name, extra in (("policy_static", ["--policy", "static"]), ("policy_naive", ["--policy", "naive"]),
                        ("no_chunked_prefill", ["--no-chunked-prefill"]), ("chunk_16", ["--max-batch-tokens", "16"]),
                        ("block_8", ["--block-size", "8"]), ("no_prefix_cache", ["--no-prefix-cache"]),
                        ("preemption", ["--kv-blocks", "14", "--block-size", "16"])):
        srv = None
        try:
            srv = Serve(model, 2, extra)
            got = srv.batch(prompts, 2)
            preempted = None
            if name == "preemption":  # the pool did force preemption
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
                c.request("GET", "/metrics")
                text = c.getresponse().read().decode()
                preempted = sum(float(line.split()[-1]) for line in text.splitlines()
                                if "preempt" in line and not line.startswith("#"))
            srv.stop()
            rep.check(got == want and preempted != 0, "serve_tp2_invariant_" + name,
                      "single %s\n--tp 2 %s %s (preempted %s)" % (want, extra, got, preempted),
                      "%d prompts x 2 samples equal the single process's%s" % (
                          len(prompts), "" if preempted is None else ", %d preemptions" % preempted))
        except ciref.CinferError as e:
            rep.fail("serve_tp2_invariant_" + name, e)
            if srv:
                srv.stop()


def start_stream(srv):
    """A long streamed greedy completion on a thread; returns (thread, chunks) once some tokens have come."""
    body = json.dumps({"prompt": "hello", "max_tokens": 480, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    got = []

    def stream():
        try:
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=90)
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            while True:
                chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
                if not chunk:
                    break
                got.append(chunk)
        except Exception as e:  # noqa: BLE001 (a cut connection is one of the expected endings)
            got.append(("error: %s" % e).encode())

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and sum(len(g) for g in got) < 2000:  # some tokens have streamed
        time.sleep(0.05)
    return t, got


def stream_ended(name, srv, t, got, extra_ok=True, extra_msg=""):
    """The stream ended without the whole completion and mpirun exited, both within bounds."""
    t.join(60)
    try:
        rc = srv.p.wait(60)
    except subprocess.TimeoutExpired:
        srv.p.kill()
        rc = None
    text = b"".join(got).decode("utf-8", "replace")
    whole = text.count('"finish_reason":"length"') > 0
    tokens = text.count('"text":')
    rep.check(not t.is_alive() and rc is not None and not whole and tokens >= 5 and extra_ok, name,
              "stream ended %s, mpirun exit %s, whole completion %s, %d tokens before the fault%s: %s" % (
                  not t.is_alive(), rc, whole, tokens, extra_msg, text[-200:].replace("\n", " / ")),
              "the stream ended after %d tokens (%s), mpirun exited %s%s" % (
                  tokens, "error event" if '"error"' in text else "cut", rc, extra_msg))


def rank_killed(model):
    """A worker rank killed (SIGKILL) in the middle of a streamed completion: the client's stream ends without
    the whole completion (an error event or a cut connection), and every process exits; both within bounds.
    The naive policy (each step recomputes the whole sequence) keeps the generation slow enough to be
    interrupted."""
    name = "serve_rank_killed_mid_stream"
    try:
        srv = Serve(model, 2, ["--policy", "naive"])
    except ciref.CinferError as e:
        rep.fail(name, e)
        return
    t, got = start_stream(srv)
    victim = srv.rank(1)
    if victim == srv.p.pid:
        rep.fail(name, "no rank 1 process found")
        srv.stop()
        return
    os.kill(victim, signal.SIGKILL)
    stream_ended(name, srv, t, got)


def alive(pid):
    """True while pid runs or is stopped (not gone, not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def rank_hung(name, model, tp, pp, victim_rank, alternatives, timeout_s=4):
    """The watchdog: a rank stopped (SIGSTOP: alive but never answering) in the middle of a streamed
    completion under --dist-timeout: the client's stream ends without the whole completion, every process
    exits (the stopped one included) within bounds, and stderr names the cause (all the words of one of the
    alternatives: which wait timed out depends on where in a step the stop lands).  The stopped
    process is continued and killed afterwards whatever happened."""
    try:
        srv = Serve(model, tp, ["--policy", "naive", "--dist-timeout", str(timeout_s)], pp=pp)
    except ciref.CinferError as e:
        rep.fail(name, e)
        return
    t, got = start_stream(srv)
    victim = srv.rank(victim_rank)
    if victim == srv.p.pid:
        rep.fail(name, "no rank %d process found" % victim_rank)
        srv.stop()
        return
    t0 = time.time()
    os.kill(victim, signal.SIGSTOP)
    try:
        t.join(60)
        try:
            srv.p.wait(60)
        except subprocess.TimeoutExpired:
            pass
        took = time.time() - t0
        gone = not alive(victim)
        time.sleep(0.3)  # the reader thread takes the last lines
        log = "\n".join(srv.lines)
        missing = min(([w for w in words if w not in log] for words in alternatives), key=len)
        stream_ended(name, srv, t, got, gone and not missing and took < 60,
                     "; stopped rank %s, %.1f s after the stop, missing %s in stderr%s" % (
                         "gone" if gone else "STILL ALIVE", took, missing,
                         "" if not missing else ": " + log[-600:].replace("\n", " / ")))
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(victim, sig)
            except OSError:
                pass


def rank0_hung_idle(model, timeout_s=2):
    """Rank 0 of an idle `serve --tp 2` stopped (SIGSTOP): its idle ticks stop, so rank 1, which waits for
    the next step, gives up after --dist-timeout, names rank 0, and every process exits (the stopped rank 0
    included), within bounds.  Without the ticks a worker waits for rank 0 without a limit."""
    name = "serve_rank0_hung_idle_watchdog"
    try:
        srv = Serve(model, 2, ["--dist-timeout", str(timeout_s)])
    except ciref.CinferError as e:
        rep.fail(name, e)
        return
    victim, worker = srv.rank(0), srv.rank(1)
    if srv.p.pid in (victim, worker):
        rep.fail(name, "rank processes not found")
        srv.stop()
        return
    time.sleep(2 * timeout_s)  # idle past the timeout first: the ticks keep the worker waiting
    t0 = time.time()
    os.kill(victim, signal.SIGSTOP)
    try:
        try:
            rc = srv.p.wait(60)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.time() - t0
        time.sleep(0.3)  # the reader thread takes the last lines
        log = "\n".join(srv.lines)
        words = ["rank 1: the wait for rank 0's next step or idle tick",
                 "within %d s: rank 0 hung, stopped or too slow (--dist-timeout)" % timeout_s]
        missing = [w for w in words if w not in log]
        gone = not alive(victim) and not alive(worker)
        rep.check(rc is not None and gone and not missing and took < 30, name,
                  "mpirun exit %s after %.1f s, ranks gone %s, missing %s in: %s" % (
                      rc, took, gone, missing, log[-600:]),
                  "every process ended %.1f s after the stop (mpirun exit %s), rank 1 named rank 0" % (took, rc))
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(victim, sig)
            except OSError:
                pass
        if srv.p.poll() is None:
            srv.p.kill()


def idle_then_request(model, tp, pp, timeout_s=2):
    """A healthy server idle for three times --dist-timeout still serves: rank 0's idle ticks keep the
    workers' deadline from expiring, and its answer is the single process's (a greedy completion); then
    SIGTERM still ends every rank cleanly."""
    name = "serve_idle_past_timeout_%s" % label(tp, pp)
    try:
        one = Serve(model, 1)
        want = one.complete("idle test", 1)
        one.stop()
        srv = Serve(model, tp, ["--dist-timeout", str(timeout_s)], pp=pp)
    except ciref.CinferError as e:
        rep.fail(name, e)
        return
    time.sleep(3 * timeout_s)
    try:
        got = srv.complete("idle test", 1)
    except (ciref.CinferError, OSError) as e:
        got = "error: %s" % e
    rc = srv.stop()
    rep.check(got == want and rc == 0, name, "after %d s idle: %s (single process %s), exit %s; %s" % (
        3 * timeout_s, got, want, rc, srv.lines[-4:]),
        "served the single process's text after %d s idle (timeout %d s), exit 0" % (3 * timeout_s, timeout_s))


def bench(model, tmp):
    """`cinfer bench` (offline) under --tp 2 and --pp 2: it completes the workload and its communication line
    adds up: two all-reduces per layer of rank 0 and batch and one for the split embedding (--tp), and (--pp) rank 0 receives the hidden state
    of every token computed: each prompt token and each output token but the first of each request (which the
    prompt's pass gives), n_embd float32 each."""
    args = ["bench", "-m", model, "-n", "8", "--input-len", "32", "--output-len", "16", "--policy", "paged",
            "--kv-type", "f32", "--no-plots", "-q", "-o", os.path.join(tmp, "bench")]
    for tp, pp in ((2, 1), (1, 2)):
        name = "bench_offline_%s" % label(tp, pp)
        rc, out, err = run(dist(args, tp, pp, "-t"))
        w = re.search(r"random, (\d+) requests.*?; (\d+) prompt \+ (\d+) output tokens", out)
        d = re.search(r"distributed (\d+) ranks \(rank 0 holds (\d+) of (\d+) layers\): (\d+) batches broadcast "
                      r".*?; (\d+) all-reduces", out)
        e = re.search(r"d (\d+), ", out)
        if rc != 0 or not w or not d or not e or "\npaged " not in out:
            rep.fail(name, "exit %s: %s %s" % (rc, out[-600:], err[-400:]))
            continue
        reqs, prompt, output = map(int, w.groups())
        ranks, held, layers, batches, allreduces = map(int, d.groups())
        if pp == 1:
            ok = ranks == 2 and held == layers and allreduces == (2 * held + 1) * batches
            what = "%d all-reduces = (2 x %d layers + 1) x %d batches" % (allreduces, held, batches)
        else:
            h = re.search(r"([0-9.]+) MiB of hidden states received by rank 0", out)
            want = (prompt + output - reqs) * int(e.group(1)) * 4 / (1 << 20)
            ok = ranks == 2 and held == layers // 2 and allreduces == 0 and h and abs(float(h.group(1)) - want) < 0.01
            what = "%s MiB of hidden states received, %.2f expected; rank 0 holds %d of %d layers" % (
                h.group(1) if h else None, want, held, layers)
        rep.check(ok, name, what + ": " + out[-400:], what)


def synth(tmp, preset, typ, seed=1):
    path = os.path.join(tmp, "%s-%s-%d.gguf" % (preset, typ, seed))
    if not os.path.exists(path):
        ciref.cinfer(["synth", "--preset", preset, "--type", typ, "--seed", str(seed), "-o", path])
    return path


def quantize(tmp, src, typ):
    path = src.replace(".gguf", "-%s.gguf" % typ)
    ciref.cinfer(["quantize", src, path, typ, "--pure"])
    return path


def main():
    if not shutil.which("mpirun"):
        print("SKIP test_tp: mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev; scripts/deps.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="cinfer-tp-")
    try:
        f32 = {p: synth(tmp, p, "f32") for p in ("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-llama3", "tiny-gemma2",
                                                 "tiny-mixtral", "tiny-qwen3moe", "tiny-qwen2moe")}
        # --tp without mpirun: a world of one process.
        expect_error("tp_without_mpirun", [BIN, "logits", "-m", f32["tiny"], "--tokens", "1,2", "-o",
                                           os.path.join(tmp, "x.f32"), "--tp", "2"], ["--tp 2"])
        pp = ((1, 2),)
        tp_pp = ((1, 2), (2, 2))
        # Under a sanitizer build (ciref.SAMPLE) a sample of the architectures, the two the 4-rank checks use
        # always among them.
        for p in ciref.sample(list(f32), keep=("tiny", "tiny-qwen3moe")):
            path = f32[p]
            # --tp 2 --pp 2 (4 ranks on 2 cores: slow) on a dense model and on an MoE; --pp 2 on every one.
            two = check_logits("logits_f32_%s" % p, path, tmp, F32_TOL,
                               ((2, 1),) + (tp_pp if p in ("tiny", "tiny-qwen3moe") else pp))
            if two is not None and p in ("tiny", "tiny-qwen3moe"):
                ref = model_np.Model.load(path).forward(TOKENS)
                tol = ciref.logit_tolerance("f32")
                ciref.compare_logits(rep, "logits_f32_%s_vs_numpy" % p, two, ref, tol)
        # Pipeline stages only (--tp does not cover these): gemma3's global layer is the last of six (one KV
        # head), so stage 1 must know its layers' indices in the whole model (local or global, RoPE base);
        # phi3's fused Q/K/V and gate/up, gpt-oss's biased experts and sinks stay whole in their stage.
        for p in ciref.sample(["tiny-gemma3", "tiny-phi3", "tiny-gpt-oss"]):
            check_logits("logits_f32_%s_pp2" % p, synth(tmp, p, "f32"), tmp, F32_TOL, pp)
        quant = [synth(tmp, p, "q8_0") for p in ("tiny", "tiny-qwen2", "tiny-qwen3moe")]
        # A K-quant: tiny-qwen3's attention output (512 columns) splits 256 + 256 on Q4_K blocks, its FFN of 768
        # splits 512 + 256 (the shares round to down's 256-element blocks).
        kq = quantize(tmp, f32["tiny-qwen3"], "Q4_K_M")
        for path in ciref.sample(quant + [kq], keep=(quant[2],)):
            base_name = os.path.basename(path)[:-5]
            check_logits("logits_%s" % base_name, path, tmp, QUANT_TOL,
                         ((2, 1),) + (tp_pp if base_name == "tiny-qwen3moe-q8_0-1" else pp))

        for path in ciref.sample([f32["tiny"], f32["tiny-qwen3"], f32["tiny-mixtral"], quant[1], kq]):
            name = "greedy_" + os.path.basename(path)[:-5]
            try:
                a, b, c = greedy(path, 1), greedy(path, 2), greedy(path, 1, 2)
                rep.check(a == b and len(a) == 40, name, "single %s, --tp 2 %s" % (a, b), "40 tokens equal")
                rep.check(a == c, name + "_pp2", "single %s, --pp 2 %s" % (a, c), "40 tokens equal")
            except ciref.CinferError as e:
                rep.fail(name, e)
        head_split(f32["tiny"], 1024)
        spec_draft(f32["tiny"], tmp)
        for path in (f32["tiny"], quant[2]):  # 4 ranks on 2 cores: fewer tokens
            name = "greedy_%s_tp2pp2" % os.path.basename(path)[:-5]
            try:
                a, b = greedy(path, 1, n=16), greedy(path, 2, 2, n=16)
                rep.check(a == b and len(a) == 16, name, "single %s, --tp 2 --pp 2 %s" % (a, b), "16 tokens equal")
            except ciref.CinferError as e:
                rep.fail(name, e)

        serving("serve_greedy_tiny", f32["tiny"], ((2, 1), (1, 2)))
        serving("serve_greedy_qwen3moe", f32["tiny-qwen3moe"], ((2, 1), (1, 2)))
        serving_invariance(f32["tiny"])
        bench(f32["tiny"], tmp)
        rank_killed(f32["tiny"])
        # The watchdog: rank 0 waits for the stopped last stage's hidden states (point to point), or for its
        # tensor-parallel partner in an all-reduce (a collective).
        # (rank 0 may also be caught in the next step's broadcast: seen under load.)
        rank_hung("serve_rank_hung_pp2_watchdog", f32["tiny"], 1, 2, 1,
                  [["of hidden states", "rank 1 did not complete within 4 s: rank 1 hung, stopped or too slow"],
                   ["rank 0: MPI_Bcast", "did not complete within 4 s: rank 1 hung, stopped or too slow"]])
        # Under --tp rank 0 may be caught in an all-reduce, the gather of the logits or the next step's
        # broadcast (a root may wait for its receivers), whichever it was in when rank 1 stopped.
        rank_hung("serve_rank_hung_tp2_watchdog", f32["tiny"], 2, 1, 1,
                  [["rank 0: MPI_", "did not complete within 4 s: rank 1 hung, stopped or too slow"]])
        # Rank 0 itself stopped while the server idles: the workers see its idle ticks stop.
        idle_then_request(f32["tiny"], 2, 1)
        idle_then_request(f32["tiny"], 1, 2)
        rank0_hung_idle(f32["tiny"])

        out = os.path.join(tmp, "x.f32")
        base = ["logits", "--tokens", "1,2,3", "-o", out, "--tp", "2"]
        tiny = f32["tiny"]
        expect_error("mismatched_options",
                     ["mpirun", "--oversubscribe", "-np", "1", BIN] + base + ["-m", tiny, "--kv-type", "f32"] +
                     [":", "-np", "1", BIN] + base + ["-m", tiny, "--kv-type", "f16"],
                     ["rank 1 was started with other options than rank 0"])
        other = synth(tmp, "tiny", "f32", seed=2)
        # Same command line, different files: rank 1 runs in a directory whose file of that name is another
        # seed's (same shapes, other weights).
        rel_name = os.path.basename(tiny)
        other_dir = os.path.join(tmp, "other")
        os.makedirs(other_dir)
        shutil.copy(other, os.path.join(other_dir, rel_name))
        expect_error("mismatched_model",
                     ["mpirun", "--oversubscribe", "-np", "1", "--wdir", tmp, BIN] + base + ["-m", rel_name] +
                     [":", "-np", "1", "--wdir", other_dir, BIN] + base + ["-m", rel_name],
                     ["rank 1 loaded a different model than rank 0"])
        missing_dir = os.path.join(tmp, "empty")
        os.makedirs(missing_dir)
        expect_error("rank_fails_to_load",
                     ["mpirun", "--oversubscribe", "-np", "1", "--wdir", tmp, BIN] + base + ["-m", rel_name] +
                     [":", "-np", "1", "--wdir", missing_dir, BIN] + base + ["-m", rel_name],
                     ["rank 1 of 2 failed to start"])
        expect_error("kv_heads_not_divisible", mpirun(2, base + ["-m", synth(tmp, "tiny-gemma3", "f32")]),
                     ["KV head count (1) is not divisible by 2"])
        base3 = [a if a != "2" else "3" for a in base]
        expect_error("heads_not_divisible", mpirun(3, base3 + ["-m", tiny]), ["head count (8) is not divisible by 3"])
        expect_error("arch_not_supported", mpirun(2, base + ["-m", synth(tmp, "tiny-phi3", "f32")]),
                     ["phi3", "not supported with tensor parallelism"])
        expect_error("kquant_columns_off_blocks", mpirun(2, base + ["-m", quantize(tmp, tiny, "Q4_K_M")]),
                     ["attn_output.weight (Q4_K)", "256-element block"])
        expect_error("world_size_mismatch", mpirun(2, base[:-1] + ["3", "-m", tiny]),
                     ["--tp 3 --pp 1 needs 3 ranks but this MPI world has 2 process(es)"])
        expect_error("world_size_mismatch_tp2pp2", mpirun(2, base + ["--pp", "2", "-m", tiny]),
                     ["--tp 2 --pp 2 needs 4 ranks but this MPI world has 2 process(es)", "mpirun -np 4"])
        base_pp = base[:-2] + ["--pp", "5"]  # tiny has 4 layers
        expect_error("pp_more_stages_than_layers", mpirun(5, base_pp + ["-m", tiny]),
                     ["--pp 5: the model has 4 layer(s), fewer than the 5 pipeline stages"])
        expect_error("pp_encoder", mpirun(2, base[:-2] + ["--pp", "2", "-m", synth(tmp, "tiny-bert", "f32")]),
                     ["--pp 2", "encoder", "not supported with pipeline parallelism"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.exit()


if __name__ == "__main__":
    sys.exit(main())
