#!/usr/bin/env python3
"""`cinfer router` in front of real `cinfer serve` replicas (a random-weight `cinfer synth --preset tiny` model,
chatml chat template, block size 16), judged by what the replicas themselves report:

- start-up errors: no replica, a malformed URL, a bad policy: exit 2 with the reason;
- a shared-prefix workload (5 groups of 4 chat requests, each group sharing a ~370-token system prompt,
  interleaved, sent one at a time): with --policy prefix every group lands on one replica (seen from which
  replica's prompt_tokens_total grew) and the aggregate prefix-cache hit rate of the replicas (their own
  cinfer:prefix_cache_hits_total / queries_total) is >= 90% of one replica serving the same workload alone,
  and above round-robin's, measured on fresh replicas in the same test;
- a replica killed (SIGKILL) while 36 requests run 6 at a time: every request gets a 200 with its
  completion, the router marks the replica down, and later requests go only to the others;
- a streamed chat completion and a streamed completion through the router are byte-identical to the same
  request sent straight to the replica (greedy, same seed), after replacing only the "id" and "created"
  values, which differ from one request to the next by design; the stream arrives while it is generated
  (the first event long before the end);
- a client that hangs up mid-stream: the replica's request is cancelled (its running count drops to 0 and
  request_success_total{finished_reason="abort"} grows);
- /v1/models (merged, with each replica listed) and /v1/models/NAME (that model's merged object, or a
  404), /metrics (every replica's samples with a replica label), /health; /v1/messages and /v1/embeddings
  answered as the replica answers them; all replicas down: 503 with an OpenAI-shaped error;
- data-parallel replicas under one mpirun (`--mpi-replicas`, skipped without mpirun): see test_mpi_replicas.
Prints PASS/FAIL lines."""
import concurrent.futures
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ref"))
import ciref  # noqa: E402
import server_util  # noqa: E402
from server_util import ALL, BIN, Server, check, check_no_sanitizer_report, parse_sse  # noqa: E402


class Router(Server):
    """A `cinfer router` on port 0 in front of the given replicas (Server's helpers talk to it)."""

    def __init__(self, replicas, *args, model=None, timeout=15.0):
        self.args = ["router", "--port", "0", "--health-interval-ms", "200"]
        for r in replicas:
            self.args += ["--replica", r.url]
        if model:
            self.args += ["-m", model]
        self.args += list(args)
        self.proc = subprocess.Popen([BIN] + self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self.lines = []
        ALL.append(self)
        self.url = None
        self.port = None
        self._have_url = threading.Event()
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._have_url.wait(timeout) or not self._ready.wait(timeout):
            self.kill()
            raise RuntimeError("cinfer router did not start: " + " | ".join(self.lines[-5:]))


def replica(model):
    return Server("--kv-mem", "32M", "--block-size", "16", model=model)


SYSTEM_WORDS = ("the quick brown fox jumps over the lazy dog while seven small birds sing in the old oak "
                "tree near the river bank").split()


def system_prompt(g):
    # distinct from the first word on, so groups share no block
    words = [f"group{g}"] + [SYSTEM_WORDS[(i * (g + 3)) % len(SYSTEM_WORDS)] for i in range(90)]
    return " ".join(words)


def chat_body(g, q, **extra):
    body = {"messages": [{"role": "system", "content": system_prompt(g)},
                         {"role": "user", "content": f"question {q} of group {g}: what now?"}],
            "max_tokens": 4, "temperature": 0}
    body.update(extra)
    return body


N_GROUPS, PER_GROUP = 5, 4  # 5 is prime to 3 replicas: round-robin spreads each group


def prompt_tokens(replicas):
    return [r.metrics().get("cinfer:prompt_tokens_total", 0) for r in replicas]


def hit_rate(replicas, before):
    hits = queries = 0
    for r, (h0, q0) in zip(replicas, before):
        m = r.metrics()
        hits += m.get("cinfer:prefix_cache_hits_total", 0) - h0
        queries += m.get("cinfer:prefix_cache_queries_total", 0) - q0
    return hits / queries if queries else 0.0


def cache_counters(replicas):
    out = []
    for r in replicas:
        m = r.metrics()
        out.append((m.get("cinfer:prefix_cache_hits_total", 0), m.get("cinfer:prefix_cache_queries_total", 0)))
    return out


def run_workload(front, replicas):
    """The shared-prefix workload, one request at a time: (hit rate, {group: set of replica indices}, ok)."""
    before = cache_counters(replicas)
    where = {g: set() for g in range(N_GROUPS)}
    ok = True
    for q in range(PER_GROUP):
        for g in range(N_GROUPS):
            t0 = prompt_tokens(replicas)
            st, _, j = front.json("POST", "/v1/chat/completions", chat_body(g, q))
            ok = ok and st == 200 and isinstance(j, dict) and j["choices"][0]["finish_reason"] == "length"
            t1 = prompt_tokens(replicas)
            grew = [i for i in range(len(replicas)) if t1[i] > t0[i]]
            where[g].update(grew)
            ok = ok and len(grew) == 1
    return hit_rate(replicas, before), where, ok


def stop_all(servers):
    for s in servers:
        s.stop()


def test_startup_errors(model):
    cases = [([], "no replica"), (["--replica", "ftp://127.0.0.1:1"], "scheme"),
             (["--replica", "127.0.0.1:8080x"], "--replica"), (["--replica", "http://127.0.0.1:1/v1"], "path"),
             (["--replica", "http://127.0.0.1:1", "--policy", "random"], "--policy"),
             (["--replica", "http://127.0.0.1:1,http://127.0.0.1:1"], "twice")]
    for args, why in cases:
        r = subprocess.run([BIN, "router", "--port", "0"] + args, capture_output=True, text=True, timeout=20)
        check(f"router_startup_error_{why.strip('-').replace(' ', '_')}", r.returncode == 2 and why in r.stderr,
              f"rc {r.returncode}, stderr {r.stderr!r}")
    r = subprocess.run([BIN, "router", "--help"], capture_output=True, text=True, timeout=20)
    out = r.stdout + r.stderr
    check("router_help", r.returncode == 0 and "--replica" in out and "--policy" in out, out[:300])


def test_prefix_workload(model):
    single = [replica(model)]
    rate_single, _, ok_single = run_workload(single[0], single)
    stop_all(single)
    check("router_single_workload_ok", ok_single)

    reps = [replica(model) for _ in range(3)]
    rt = Router(reps, "--policy", "prefix", model=model)
    rate_prefix, where_prefix, ok_prefix = run_workload(rt, reps)
    st, _, metrics = rt.request("GET", "/metrics")
    rt.stop()
    stop_all(reps)

    reps = [replica(model) for _ in range(3)]
    rt = Router(reps, "--policy", "round-robin", model=model)
    rate_rr, where_rr, ok_rr = run_workload(rt, reps)
    rt.stop()
    stop_all(reps)

    print(f"# prefix hit rate: single replica {rate_single:.3f}, router prefix {rate_prefix:.3f}, "
          f"round-robin {rate_rr:.3f}; groups on replicas: prefix {where_prefix}, round-robin {where_rr}")
    check("router_prefix_workload_ok", ok_prefix and ok_rr)
    check("router_prefix_groups_on_one_replica", all(len(v) == 1 for v in where_prefix.values()),
          str(where_prefix))
    check("router_prefix_groups_spread", len({min(v) for v in where_prefix.values()}) > 1, str(where_prefix))
    check("router_prefix_hit_rate_vs_single", rate_single > 0.5 and rate_prefix >= 0.9 * rate_single,
          f"prefix {rate_prefix:.3f}, single {rate_single:.3f}")
    check("router_prefix_hit_rate_vs_round_robin", rate_prefix > rate_rr + 0.1,
          f"prefix {rate_prefix:.3f}, round-robin {rate_rr:.3f}")
    text = metrics.decode()
    routed = sum(float(v) for v in re.findall(r'^cinfer_router:requests_prefix_routed_total\{[^}]*\} (\S+)$',
                                              text, re.M))
    check("router_prefix_metrics", st == 200 and routed == N_GROUPS * (PER_GROUP - 1),
          f"prefix-routed {routed}, expected {N_GROUPS * (PER_GROUP - 1)}")


def test_replica_killed(model):
    reps = [replica(model) for _ in range(3)]
    rt = Router(reps, model=model)
    victim = reps[1]
    n, done = 36, []
    killed = threading.Event()

    def one(i):
        body = {"prompt": f"request {i}: " + "tell me a long story " * (i % 5 + 1), "max_tokens": 48,
                "temperature": 0, "ignore_eos": True}
        st, _, j = rt.json("POST", "/v1/completions", body, timeout=120)
        done.append(i)
        if len(done) == 8 and not killed.is_set():
            killed.set()
            victim.proc.send_signal(signal.SIGKILL)
        return st, j

    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        results = list(ex.map(one, range(n)))
    good = [st == 200 and j["choices"][0]["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 48
            for st, j in results]
    check("router_kill_no_request_lost", killed.is_set() and all(good),
          f"{good.count(False)} of {n} failed: {[r for r, g in zip(results, good) if not g][:2]}")

    def routed(url):
        _, _, text = rt.request("GET", "/metrics")
        m = re.search(r'^cinfer_router:requests_routed_total\{replica="' + re.escape(url) + r'"\} (\S+)$',
                      text.decode(), re.M)
        return float(m.group(1)) if m else -1, text.decode()

    time.sleep(0.5)  # a health round
    before, text = routed(victim.url)
    up = re.search(r'^cinfer_router:replica_up\{replica="' + re.escape(victim.url) + r'"\} (\S+)$', text, re.M)
    later = [rt.json("POST", "/v1/completions", {"prompt": f"after {i}", "max_tokens": 2})[0] for i in range(9)]
    after, _ = routed(victim.url)
    check("router_kill_marked_down", up is not None and float(up.group(1)) == 0, text[:400])
    check("router_kill_later_requests_elsewhere", all(s == 200 for s in later) and before == after,
          f"statuses {later}, routed to the dead replica {before} -> {after}")
    st, hd, j = rt.json("GET", "/health")
    check("router_health_partial", st == 200 and j.get("replicas_up") == 2, str(j))
    rt.stop()
    stop_all(reps)


def normalise(raw):
    """Only the per-request values: "id" and "created"."""
    s = re.sub(rb'"id":"(chatcmpl|cmpl)-[0-9a-f]+"', rb'"id":"ID"', raw)
    return re.sub(rb'"created":\d+', rb'"created":0', s)


def raw_stream(port, path, body, timeout=60):
    """(status, content type, body bytes, seconds to the first body byte, seconds to the end)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.read1(1 << 16) if hasattr(r, "read1") else r.read(1)
    t_first = time.monotonic() - t0
    rest = r.read()
    t_end = time.monotonic() - t0
    c.close()
    return r.status, r.getheader("Content-Type"), first + rest, t_first, t_end


def sse_or_nothing(raw):
    try:
        return parse_sse(raw.decode())
    except (ValueError, AssertionError, UnicodeDecodeError):
        return [], False


def test_streams_and_endpoints(model):
    reps = [replica(model)]
    rt = Router(reps, model=model)
    rep = reps[0]
    chat = chat_body(1, 0, stream=True, max_tokens=24, seed=5, stream_options={"include_usage": True})
    comp = {"prompt": "once upon a time", "max_tokens": 24, "temperature": 0, "seed": 5, "stream": True,
            "logprobs": 2}
    for name, path, body in (("chat", "/v1/chat/completions", chat), ("completions", "/v1/completions", comp)):
        a = raw_stream(rep.port, path, body)
        b = raw_stream(rt.port, path, body)
        events, done = sse_or_nothing(b[2])
        check(f"router_sse_{name}_identical",
              a[0] == b[0] == 200 and a[1] == b[1] and normalise(a[2]) == normalise(b[2]) and done and
              len(events) > 5 and a[2] != normalise(a[2]),
              f"direct {a[0]} {a[1]} {a[2][:200]!r}\nrouter {b[0]} {b[1]} {b[2][:200]!r}")
    # While it is generated: a long stream's first bytes come long before its end.
    long = {"prompt": "x", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}
    st, _, body, t_first, t_end = raw_stream(rt.port, "/v1/completions", long)
    events, done = sse_or_nothing(body)
    check("router_sse_streamed_not_buffered", st == 200 and done and len(events) >= 400 and t_end > 0.1 and
          t_first < 0.5 * t_end, f"first byte {t_first:.3f} s, end {t_end:.3f} s, {len(events)} events")

    # A client that hangs up: the replica's request is cancelled.
    abort_key = 'cinfer:request_success_total{finished_reason="abort"}'
    aborted0 = rep.metrics().get(abort_key, 0)
    c = http.client.HTTPConnection("127.0.0.1", rt.port, timeout=30)
    # 16 samples of 480 tokens: long enough that the hang-up comes mid-generation
    c.request("POST", "/v1/completions", body=json.dumps(dict(long, n=16)).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.read1(100)
    # the samples are there (running, or waiting for admission on a slow build); the engine publishes its
    # counts at the end of a step, which may come a little after the first token
    running_mid, until = 0, time.monotonic() + 1
    while running_mid == 0 and time.monotonic() < until:
        m = rep.metrics()
        running_mid = m.get("cinfer:num_requests_running", 0) + m.get("cinfer:num_requests_waiting", 0)
    c.sock.shutdown(2)
    c.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = rep.metrics()
        if m.get("cinfer:num_requests_running", 1) == 0 and m.get(abort_key, 0) > aborted0:
            break
        time.sleep(0.05)
    m = rep.metrics()
    check("router_client_disconnect_cancels", running_mid >= 1 and m.get("cinfer:num_requests_running") == 0 and
          m.get(abort_key, 0) > aborted0,
          f"running or waiting mid-stream {running_mid}, after {m.get('cinfer:num_requests_running')}, aborts "
          f"{aborted0} -> {m.get(abort_key)}; status {r.status}, first bytes {first[:60]!r}")

    # The other endpoints answer as the replica answers.
    msg = {"model": "cinfer-synth-tiny", "max_tokens": 6, "temperature": 0,
           "messages": [{"role": "user", "content": "hello there"}]}
    a = rep.json("POST", "/v1/messages", msg)
    b = rt.json("POST", "/v1/messages", msg)
    check("router_messages", a[0] == b[0] == 200 and a[2]["content"] == b[2]["content"], f"{a[2]} {b[2]}")
    emb = {"input": ["a cat", "a dog"]}
    a = rep.json("POST", "/v1/embeddings", emb)
    b = rt.json("POST", "/v1/embeddings", emb)
    check("router_embeddings", a[0] == b[0] and a[2] == b[2], f"{a[0]} {b[0]} {str(b[2])[:200]}")
    bad = rt.json("POST", "/v1/chat/completions", {"messages": "nope"})
    direct = rep.json("POST", "/v1/chat/completions", {"messages": "nope"})
    check("router_replica_errors_passed", bad[0] == direct[0] == 400 and bad[2] == direct[2], str(bad))
    rt.stop()
    stop_all(reps)


def test_aggregation(model):
    reps = [replica(model) for _ in range(2)]
    rt = Router(reps, model=model)
    st, _, j = rt.json("GET", "/v1/models")
    data = j.get("data", []) if isinstance(j, dict) else []
    check("router_models_merged", st == 200 and len(data) == 1 and
          data[0]["id"] == reps[0].json("GET", "/v1/models")[2]["data"][0]["id"] and
          sorted(data[0].get("replicas", [])) == sorted(r.url for r in reps), str(j))
    name = reps[0].json("GET", "/v1/models")[2]["data"][0]["id"]
    st, _, one = rt.json("GET", "/v1/models/" + name)
    want = reps[0].json("GET", "/v1/models/" + name)[2]
    check("router_model_by_name", st == 200 and isinstance(one, dict) and one.get("id") == name and
          one.get("object") == want.get("object") == "model" and
          sorted(one.get("replicas", [])) == sorted(r.url for r in reps), str(one))
    st, _, j = rt.json("GET", "/v1/models/no-such-model")
    st1, _, j1 = reps[0].json("GET", "/v1/models/no-such-model")
    check("router_model_by_name_404", st == st1 == 404 and isinstance(j, dict) and
          j.get("error", {}).get("code") == j1.get("error", {}).get("code") == "model_not_found", str(j))
    for r in reps:  # distinct counters on each, so the labelled samples can be told apart
        r.json("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1})
    reps[1].json("POST", "/v1/completions", {"prompt": "hi again", "max_tokens": 1})
    st, hd, text = rt.request("GET", "/metrics")
    text = text.decode()
    ok = st == 200 and hd.get("content-type", "").startswith("text/plain")
    for r in reps:
        want = r.metrics()["cinfer:prompt_tokens_total"]
        m = re.search(r'^cinfer:prompt_tokens_total\{replica="' + re.escape(r.url) + r'"\} (\S+)$', text, re.M)
        ok = ok and m is not None and float(m.group(1)) == want
    ok = ok and text.count("# TYPE cinfer:prompt_tokens_total ") == 1
    ok = ok and len(re.findall(r'^cinfer:time_to_first_token_seconds_bucket\{replica="', text, re.M)) > 2
    check("router_metrics_labelled", ok, text[:600])
    st, _, j = rt.json("GET", "/health")
    check("router_health", st == 200 and j == {"status": "ok", "replicas_up": 2, "replicas": 2}, str(j))
    stop_all(reps)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and rt.json("GET", "/health")[0] != 503:
        time.sleep(0.1)
    st, hd, j = rt.json("POST", "/v1/chat/completions", chat_body(0, 0))
    check("router_all_down_503", st == 503 and j["error"]["type"] and "no replica" in j["error"]["message"] and
          rt.json("GET", "/health")[0] == 503, f"{st} {j}")
    rt.stop()


def free_port_pair():
    """A port P with P and P + 1 free on 127.0.0.1 (for the two replica ranks of --mpi-replicas)."""
    import random
    import socket
    for _ in range(200):
        p = random.randint(20000, 60000)
        socks = []
        try:
            for q in (p, p + 1):
                k = socket.socket()
                socks.append(k)
                k.bind(("127.0.0.1", q))
            return p
        except OSError:
            pass
        finally:
            for k in socks:
                k.close()
    raise RuntimeError("no free port pair")


def test_mpi_replicas(model):
    """`mpirun -np 3 cinfer router --mpi-replicas P -- SERVE_OPTIONS`: rank 0 routes to ranks 1 and 2, each a
    `cinfer serve` on P and P + 1; a greedy completion through the router equals one asked of the replica
    directly; SIGTERM to mpirun stops every rank gracefully.  Misuse is a usage error (exit 2)."""
    if not shutil.which("mpirun"):
        print("SKIP router_mpi_replicas: mpirun not found (scripts/deps.sh installs openmpi-bin)")
        return
    # mpirun SIGKILLs ranks 1 s after forwarding SIGTERM by default; a router draining takes longer
    env = ciref.mpi_env(OMPI_MCA_odls_base_sigkill_timeout="10")
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none"]
    serve_args = ["-m", model, "--kv-mem", "32M", "-t", "1"]

    def usage_error(name, cmd, want):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        check(name, r.returncode == 2 and want in r.stderr, f"exit {r.returncode}: {r.stderr[-300:]}")

    usage_error("router_mpi_one_process", mpirun + ["-np", "1", BIN, "router", "--port", "0", "--mpi-replicas",
                                                     "20000", "--"] + serve_args, "mpirun -np 1+N")
    usage_error("router_mpi_replica_port_given", mpirun + ["-np", "2", BIN, "router", "--port", "0",
                                                           "--mpi-replicas", "20000", "--"] + serve_args +
                ["--port", "9"], "'--port' is not a replica option")
    usage_error("router_mpi_and_replica", [BIN, "router", "--replica", "http://127.0.0.1:9", "--mpi-replicas",
                                           "20000"], "not both")
    usage_error("router_serve_options_without_mpi", [BIN, "router", "--replica", "http://127.0.0.1:9", "--"] +
                serve_args, "after `--`")

    base = free_port_pair()
    proc = subprocess.Popen(mpirun + ["-np", "3", BIN, "router", "--port", "0", "--health-interval-ms", "200",
                                      "--mpi-replicas", str(base), "-m", model, "--"] + serve_args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=env)
    lines = []
    port_seen = threading.Event()
    router_port = []

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip())
            m = re.search(r"cinfer router: listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                router_port.append(int(m.group(1)))
                port_seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def ask(port, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, json.loads(data) if data else None

    try:
        ok = port_seen.wait(60)
        health = None
        deadline = time.monotonic() + 90
        while ok and time.monotonic() < deadline:
            try:
                st, health = ask(router_port[0], "GET", "/health")
                if st == 200 and health.get("replicas_up") == 2:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        up = ok and isinstance(health, dict) and health.get("replicas_up") == 2 and health.get("replicas") == 2
        check("router_mpi_replicas_up", up, f"{health} {lines[-6:]}")
        if not up:  # nothing further to ask
            return
        # A gather skips a replica that does not answer it; seen once under ASan right after both were up (not
        # explained), so the list is asked again for a while.
        want = ["http://127.0.0.1:%d" % base, "http://127.0.0.1:%d" % (base + 1)]
        deadline = time.monotonic() + 30
        while True:
            st, j = ask(router_port[0], "GET", "/v1/models")
            reps = j["data"][0].get("replicas", []) if st == 200 and j.get("data") else []
            if sorted(reps) == want or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        check("router_mpi_replica_urls", sorted(reps) == ["http://127.0.0.1:%d" % base,
                                                         "http://127.0.0.1:%d" % (base + 1)], str(j))
        body = {"prompt": "The mpi replicas", "max_tokens": 8, "temperature": 0}
        st, via = ask(router_port[0], "POST", "/v1/completions", body)
        st1, direct = ask(base, "POST", "/v1/completions", body)
        check("router_mpi_completion", st == st1 == 200 and via["choices"][0]["text"] ==
              direct["choices"][0]["text"] and via["usage"] == direct["usage"], f"{via} | {direct}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    reader.join(10)  # the last lines (each rank's "stopped") are read to the end of mpirun's stderr
    stopped = sum(1 for ln in lines if re.match(r"cinfer (router|serve): stopped", ln))
    left = subprocess.run(["pgrep", "-f", "--mpi-replicas %d" % base], capture_output=True, text=True).stdout
    check("router_mpi_sigterm_stops_all", stopped == 3 and not left.strip(),
          f"{stopped} of 3 ranks stopped gracefully, mpirun exit {proc.returncode}; still running: "
          f"{left.split()}; {lines[-8:]}")


def main():
    if not os.path.exists(BIN):
        print(f"FAIL router_setup: no binary {BIN}")
        return 1
    tmp = tempfile.mkdtemp(prefix="cinfer-router-")
    model = os.path.join(tmp, "tiny.gguf")
    r = subprocess.run([BIN, "synth", "--preset", "tiny", "--seed", "7", "-o", model], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print(f"FAIL router_setup: synth: {r.stderr}")
        return 1
    try:
        test_startup_errors(model)
        test_prefix_workload(model)
        test_replica_killed(model)
        test_streams_and_endpoints(model)
        test_aggregation(model)
        test_mpi_replicas(model)
    finally:
        check_no_sanitizer_report("router_no_sanitizer_report")
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
