#!/usr/bin/env python3
"""Soak test of `cinfer serve` (run through bench/soak.sh; Python 3 standard library only).

Starts `cinfer serve` with a KV pool small enough to force preemption and a moderate --max-seqs, then runs N
client threads for M minutes.  Each client loops over requests drawn from its own seeded RNG (the sequence of
requests of a client depends on the seed only, never on the answers): completions and chat, streaming or not,
n 1..4, random sampling parameters, stop strings, logprobs, logit_bias, echo, text or token-array prompts.
A fraction of them disconnect mid-stream (after k events) or before a non-streaming answer, a fraction are
invalid (malformed JSON, bad parameter values, unknown routes, oversize bodies, wrong methods, bad UTF-8, NUL
escapes, huge n, context overflow, missing API key) and must get the right status with an OpenAI error body,
and a fraction re-send one of a fixed set of deterministic requests (temperature 0, or a fixed seed) whose
answers on the idle server were recorded before the load: each answer must be identical.  15% of the requests
travel with a chunked body, `Expect: 100-continue`, in small pieces, or with a GET pipelined behind them.

Checks (each reported with counts; the exit status is 1 when any fails):
  - every valid response complete and well-formed: HTTP framing, JSON, `object`, choices = prompts x n,
    finish_reason in {stop, length}, usage arithmetic, logprobs shapes, stop strings absent; streams: every SSE
    event parses, each choice ends with one finish_reason, the usage chunk when asked, then `data: [DONE]` and
    nothing after it;
  - every invalid request: the expected status and `{"error": {"message", "type", "param", "code"}}`
    (429 accepted for generation requests under load, and counted);
  - determinism: the fixed requests answered identically before, during and after the load;
  - after the load: /metrics shows 0 running, 0 waiting and KV usage 0 within --idle-timeout seconds, and
    cinfer:num_preemptions_total > 0 (the pool did force preemption);
  - RSS (VmRSS of /proc/PID/status, sampled every 2 s) grows by at most --rss-growth-mb from minute 1 of the
    load to its end;
  - the server never dies, its stderr holds no sanitizer report, and it exits 0 on SIGTERM.

Writes OUT/server.log, OUT/rss.csv, OUT/requests.csv, OUT/failures.log, OUT/summary.json and OUT/summary.md
(the table).  With --lines it also prints one "PASS name" / "FAIL name: why" line per check (the test suite's
format; tests/server/test_soak.py uses it)."""
import argparse
import collections
import itertools
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
API_KEY = "soak-key-0123456789"
MODEL_NAME = [None]  # the served model's name, once known

# MANIFEST.md of the models: greedy decoding of stories260K from BOS (computed with llama2.c, not cinfer).
GREEDY_FROM_BOS = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                   "One day, she saw a big, red ball. She wanted to play with it, but it was too high")

STORY_STARTS = [
    "Once upon a time", "One day", "Lily and Ben", "The cat", "Tom had a big", "The sun was", "There was a",
    "A little bird", "Sam liked to", "Mom said", "The dog ran", "In the park", "Sue found a", "The tree was",
    "Max wanted to", "It was a", "Once upon a time, there was a little boy named Tim. He liked to play",
    "The little girl looked at the sky and saw a big cloud. She said,",
    "Anna and her mom went to the store to buy some food. Anna saw a red ball and",
    "Ben had a toy car. He loved his car very much. One day, he went to the park with his car and",
    "Lucy was a happy girl. She had a dog named Max. Every day, Lucy and Max played in the garden. " * 3,
    "The big bear lived in the forest. He was very hungry. He looked for honey in the trees, but he could "
    "not find any. Then he saw a little bee. The bee said, \"Hello, bear! Why are you sad?\" The bear said, "
    "\"I am hungry and I want some honey.\" The bee smiled and",
    "Émile et Zoë", "naïve café — “quoted” ✓", "数字 and emoji 🙂 in a story",
]

CHATS = [
    [{"role": "user", "content": "Tell me a story."}],
    [{"role": "system", "content": "You tell short stories."}, {"role": "user", "content": "A story about a cat."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! What story do you want?"},
     {"role": "user", "content": "One about a dog and a ball."}],
    [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "What did Lily find?"}],
    [{"role": "user", "content": [{"type": "text", "text": "Once upon a time"},
                                  {"type": "text", "text": "there was a bird."}]}],
    [{"role": "user", "content": "Write about the sun, the moon and the stars. " * 4}],
    [{"role": "system", "content": "You are a friendly storyteller for children."},
     {"role": "user", "content": "Tom had a big red truck. What happened next?"}],
    [{"role": "user", "content": "Zoë’s café — a story 🙂"}],
]

STOPS = [".", " the", "Lily", "\n", "and", "!", "zzq", "\"", " was", ", ", "Once upon a time"]

# Streaming responses must carry these objects; non-streaming ones the others.
OBJ = {("completions", False): "text_completion", ("completions", True): "text_completion",
       ("chat", False): "chat.completion", ("chat", True): "chat.completion.chunk"}
PATH = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class Failure(Exception):
    pass


# ---- raw HTTP/1.1 -----------------------------------------------------------------------------------------

class Http:
    """One client connection: raw requests and strict response framing (Content-Length or chunked)."""

    def __init__(self, port, timeout):
        self.port = port
        self.timeout = timeout
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = bytearray()
        self.reusable = False
        self.used = 0

    def close(self, reset=False):
        try:
            if reset:  # RST instead of FIN: the abrupt kind of disconnect
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass

    def _more(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("the server closed the connection")
        self.buf += d

    def _line(self, limit=16384):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            if len(self.buf) > limit:
                raise Failure("an HTTP line over %d bytes" % limit)
            self._more()

    def _exact(self, n):
        while len(self.buf) < n:
            self._more()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def send(self, data):
        self.sock.sendall(data)
        self.used += 1

    def head(self, interim=False):
        """(status, headers with lower-case names); 1xx interim answers are skipped unless interim."""
        while True:
            st, hd = self._head()
            if interim or not 100 <= st < 200:
                return st, hd

    def _head(self):
        line = self._line()
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", line + b" ")
        if not m:
            raise Failure("bad status line %r" % line[:100])
        status = int(m.group(1))
        headers = {}
        while True:
            h = self._line()
            if not h:
                break
            k, sep, v = h.partition(b":")
            if not sep:
                raise Failure("bad header line %r" % h[:100])
            headers[k.decode("latin-1").strip().lower()] = v.decode("latin-1").strip()
        return status, headers

    def body(self, status, headers, method, more=False):
        """Yields the body in pieces; afterwards self.reusable says whether keep-alive may go on.  Unless more
        (a pipelined request's answer is to follow), nothing may follow the body."""
        close = headers.get("connection", "").lower() == "close"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self.reusable = not close
            return
        te = headers.get("transfer-encoding", "").lower()
        if te:
            if te != "chunked":
                raise Failure("transfer-encoding %r" % te)
            while True:
                size_line = self._line()
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise Failure("bad chunk size line %r" % size_line[:60])
                if size == 0:
                    while self._line():  # trailers
                        pass
                    break
                data = self._exact(size)
                if self._exact(2) != b"\r\n":
                    raise Failure("a chunk not ended by CRLF")
                yield data
        elif "content-length" in headers:
            n = int(headers["content-length"])
            while n > 0:
                if not self.buf:
                    self._more()
                take = min(n, len(self.buf))
                data = bytes(self.buf[:take])
                del self.buf[:take]
                n -= take
                yield data
        else:
            close = True
            while True:
                if self.buf:
                    data = bytes(self.buf)
                    self.buf.clear()
                    yield data
                try:
                    self._more()
                except EOFError:
                    break
        if self.buf and not more:
            raise Failure("%d bytes after the end of the response: %r" % (len(self.buf), bytes(self.buf[:80])))
        self.reusable = not close

    def nothing_more(self):
        """After a complete response: the server must not send anything before the next request."""
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
            if r:
                d = self.sock.recv(4096, socket.MSG_PEEK)
                if d:
                    raise Failure("bytes after the end of the response: %r" % d[:80])
                self.reusable = False  # closed: fine when the response said so, else not reusable anyway
        except OSError:
            self.reusable = False


def build_request(method, path, body=None, headers=None, key=API_KEY, content_length=None):
    h = {"Host": "127.0.0.1"}
    if key:
        h["Authorization"] = "Bearer " + key
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body) if content_length is None else content_length)
    h.update(headers or {})
    head = "%s %s HTTP/1.1\r\n" % (method, path) + "".join("%s: %s\r\n" % kv for kv in h.items()) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False).encode()


def strict_json(data, what):
    try:
        return json.loads(data.decode("utf-8", errors="strict"))
    except UnicodeDecodeError as e:
        raise Failure("%s is not valid UTF-8: %s" % (what, e))
    except ValueError as e:
        raise Failure("%s is not JSON (%s): %r" % (what, e, data[:200]))


def error_body_ok(j):
    e = j.get("error") if isinstance(j, dict) else None
    return isinstance(e, dict) and set(e) >= {"message", "type", "param", "code"} and \
        isinstance(e["message"], str) and e["message"] != "" and isinstance(e["type"], str) and \
        (e["param"] is None or isinstance(e["param"], str)) and (e["code"] is None or isinstance(e["code"], str))


# ---- the server -------------------------------------------------------------------------------------------

class Server:
    def __init__(self, binary, model, args, log_path, env):
        self.log_path = log_path
        self.log = open(log_path, "w", errors="replace")
        self.args = [binary, "serve", "-m", model, "--port", "0"] + args
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=env)
        self.lines = []
        self.port = None
        self.ready = threading.Event()
        self.have_port = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://[^ ]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self.have_port.set()
            if " ready " in line:
                self.ready.set()
        self.have_port.set()
        self.ready.set()

    def wait_ready(self, timeout):
        if not self.ready.wait(timeout) or self.proc.poll() is not None or self.port is None:
            raise RuntimeError("cinfer serve did not become ready: " + " | ".join(self.lines[-6:]))

    def request(self, method, path, body=None, key=API_KEY, timeout=120):
        c = Http(self.port, timeout)
        try:
            c.send(build_request(method, path, body if body is None or isinstance(body, bytes) else dumps(body),
                                 key=key))
            st, hd = c.head()
            data = b"".join(c.body(st, hd, method))
            return st, hd, data
        finally:
            c.close()

    def metrics(self):
        st, hd, data = self.request("GET", "/metrics", key=None, timeout=30)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self, timeout):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.reader.join(10)
        self.log.close()
        return rc


# ---- what the soak knows about the served model -----------------------------------------------------------

class Model:
    def __init__(self, srv):
        st, hd, data = srv.request("GET", "/v1/models")
        j = json.loads(data)
        self.name = MODEL_NAME[0] = j["data"][0]["id"]
        self.ctx = j["data"][0]["max_model_len"]
        self.text_tokens = {}
        for t in STORY_STARTS:
            st, hd, data = srv.request("POST", "/tokenize", {"prompt": t})
            self.text_tokens[t] = json.loads(data)["count"]
        self.chat_tokens = []
        for msgs in CHATS:
            st, hd, data = srv.request("POST", "/tokenize", {"messages": msgs})
            self.chat_tokens.append(json.loads(data)["count"])


# ---- request generation -----------------------------------------------------------------------------------

class Req:
    """A request and what its answer must look like."""

    def __init__(self, kind, method, path, body=None, key=API_KEY, **kw):
        self.kind = kind  # valid | valid_stream | disconnect_stream | disconnect_wait | invalid | det | misc
        self.method = method
        self.path = path
        self.body = body  # bytes or None
        self.key = key
        self.endpoint = kw.get("endpoint")
        self.stream = kw.get("stream", False)
        self.n_choices = kw.get("n_choices", 0)
        self.max_tokens = kw.get("max_tokens", 0)
        self.prompt_tokens = kw.get("prompt_tokens")
        self.stops = kw.get("stops", [])
        self.echo = kw.get("echo")  # list of prompt texts per prompt (text prompts) or None
        self.n = kw.get("n", 1)
        self.logprobs = kw.get("logprobs", -1)
        self.include_usage = kw.get("include_usage", False)
        self.expect = kw.get("expect")  # invalid: (status set, param or None, code or None)
        self.name = kw.get("name", kind)
        self.det = kw.get("det")  # the index of a deterministic request
        self.disconnect_after = kw.get("disconnect_after", 0)
        self.reset = kw.get("reset", False)
        self.raw = kw.get("raw")  # bytes sent as they are (no request building)
        self.check = kw.get("check")  # misc: a function of (status, headers, data) raising Failure
        self.huge_declared = kw.get("huge_declared", False)
        self.transport = None  # None | chunked | expect | slow | pipelined
        self.rng_cuts = None
        self.rng_piece = None


def sampling_params(rng, body, chat):
    if rng.random() < 0.25:
        body["temperature"] = 0
    elif rng.random() < 0.9:
        body["temperature"] = round(rng.uniform(0, 2), 3)
    if rng.random() < 0.3:
        body["top_p"] = round(rng.uniform(0.05, 1.0), 3)
    if rng.random() < 0.3:
        body["top_k"] = rng.choice([-1, 0, 1, 2, 5, 40, 400])
    if rng.random() < 0.2:
        body["min_p"] = round(rng.uniform(0, 0.5), 3)
    if rng.random() < 0.2:
        body["presence_penalty"] = round(rng.uniform(-2, 2), 3)
    if rng.random() < 0.2:
        body["frequency_penalty"] = round(rng.uniform(-2, 2), 3)
    if rng.random() < 0.15:
        body["repetition_penalty"] = round(rng.uniform(0.5, 2.0), 3)
    if rng.random() < 0.5:
        body["seed"] = rng.randrange(-(1 << 53), 1 << 53)
    if rng.random() < 0.3:
        body["stop"] = rng.sample(STOPS, rng.randint(1, 4))
        if len(body["stop"]) == 1 and rng.random() < 0.5:
            body["stop"] = body["stop"][0]
    if rng.random() < 0.15:
        bias = {}
        for _ in range(rng.randint(1, 6)):
            bias[str(rng.randrange(512))] = rng.choice([-100, 100, round(rng.uniform(-100, 100), 2)])
        body["logit_bias"] = bias
    if rng.random() < 0.2:
        body["ignore_eos"] = rng.random() < 0.7
    logprobs = -1
    if rng.random() < 0.2:
        if chat:
            body["logprobs"] = True
            logprobs = rng.randint(0, 5)
            if logprobs or rng.random() < 0.5:
                body["top_logprobs"] = logprobs
        else:
            logprobs = rng.randint(0, 5)
            body["logprobs"] = logprobs
    return logprobs


def random_tokens(rng, lo=1, hi=48):
    ids = [rng.randrange(3, 512) for _ in range(rng.randint(lo, hi))]
    if rng.random() < 0.5:
        ids[0] = 1
    return ids


def valid_request(rng, model, stream, kind="valid", max_seqs=4):
    wide = rng.random() < 0.03  # at the limits: n = --max-seqs, or prompts x n = 64 (more sequences than run)
    chat = not wide and rng.random() < 0.4
    body = {}
    n = rng.choice([1, 1, 1, 1, 2, 2, 3, 4])
    echo = None
    if wide:
        n = rng.choice([max_seqs, min(max_seqs, 16), 2, 4, 1])
        k = max(1, min(32, 64 // n))
        prompts = []
        for _ in range(k):
            t = rng.choice(STORY_STARTS[:16])
            prompts.append((t, model.text_tokens[t]) if rng.random() < 0.5 else ([1, rng.randrange(3, 512)], 2))
        body["prompt"] = [p for p, _ in prompts]
        lens = [k for _, k in prompts]
    elif chat:
        i = rng.randrange(len(CHATS))
        body["messages"] = CHATS[i]
        lens = [model.chat_tokens[i]]
    else:
        form = rng.random()
        prompts = []
        for _ in range(1 if form < 0.75 else rng.randint(1, 3)):
            if rng.random() < 0.55:
                t = rng.choice(STORY_STARTS)
                prompts.append((t, model.text_tokens[t]))
            else:
                ids = random_tokens(rng)
                prompts.append((ids, len(ids)))
        body["prompt"] = prompts[0][0] if form < 0.75 else [p for p, _ in prompts]
        lens = [k for _, k in prompts]
        if rng.random() < 0.15:
            body["echo"] = True
            echo = [p if isinstance(p, str) else None for p, _ in prompts]
    r = rng.random()
    max_tokens = rng.randint(1, 32) if r < 0.7 else rng.randint(33, 128) if r < 0.95 else rng.randint(129, 300)
    if wide:
        max_tokens = rng.randint(1, 24)
    max_tokens = max(1, min(max_tokens, model.ctx - max(lens)))
    if chat and rng.random() < 0.3:
        body["max_completion_tokens"] = max_tokens
    elif not chat and rng.random() < 0.05:
        max_tokens = 16  # the default of completions
    else:
        body["max_tokens"] = max_tokens
    if n > 1 or rng.random() < 0.1:
        body["n"] = n
    logprobs = sampling_params(rng, body, chat)
    include_usage = False
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            include_usage = True
            body["stream_options"] = {"include_usage": True}
    elif rng.random() < 0.1:
        body["stream"] = False
    if rng.random() < 0.3:
        body["model"] = model.name
    stops = body.get("stop", [])
    stops = [stops] if isinstance(stops, str) else stops
    return Req(kind, "POST", PATH["chat" if chat else "completions"], dumps(body), endpoint="chat" if chat else
               "completions", stream=stream, n_choices=len(lens) * n, n=n, max_tokens=max_tokens,
               prompt_tokens=sum(lens), stops=stops, echo=echo, logprobs=logprobs, include_usage=include_usage,
               name=("chat" if chat else "completions_wide" if wide else "completions") + ("_stream" if stream else ""))


def invalid_request(rng, model, max_seqs):
    """An invalid request and its expected (statuses, param, code)."""
    ctx = model.ctx
    good = {"prompt": "Once upon a time", "max_tokens": 4}
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}

    def bad_param(base, param, value, expect_param=None, path="/v1/completions"):
        b = dict(base)
        b[param] = value
        return Req("invalid", "POST", path, dumps(b), expect=({400}, expect_param or param, None),
                   name="bad_" + param)

    cases = [
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "x",', expect=({400}, None, None),
                    name="malformed_json"),
        lambda: Req("invalid", "POST", "/v1/chat/completions", b'{"messages": [}', expect=({400}, None, None),
                    name="malformed_json"),
        lambda: Req("invalid", "POST", "/v1/completions", b'[1, 2]', expect=({400}, None, None), name="not_object"),
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "x"} trailing', expect=({400}, None, None),
                    name="trailing_garbage"),
        lambda: Req("invalid", "POST", "/v1/completions", b'', expect=({400}, None, None), name="empty_body"),
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "x", "max_tokens": 1e999}',
                    expect=({400}, None, None), name="json_overflow_number"),
        lambda: bad_param(good, "temperature", rng.choice([7, -0.5, "hot", [1]])),
        lambda: bad_param(good, "top_p", rng.choice([0, 1.5, -1, "1"])),
        lambda: bad_param(good, "top_k", rng.choice([-2, 1.5, "k"])),
        lambda: bad_param(good, "min_p", rng.choice([1.5, -0.1])),
        lambda: bad_param(good, "presence_penalty", rng.choice([2.5, -3])),
        lambda: bad_param(good, "frequency_penalty", rng.choice([2.5, -3])),
        lambda: bad_param(good, "repetition_penalty", rng.choice([0, -1, 101])),
        lambda: bad_param(good, "max_tokens", rng.choice([0, -1, "5", 2.5, ctx + 1, 10 ** 12])),
        lambda: bad_param(good, "seed", rng.choice([1.5, "x", [1]])),
        lambda: bad_param(good, "stream", rng.choice(["yes", 1])),
        lambda: bad_param(good, "echo", rng.choice(["yes", 1])),
        lambda: bad_param(good, "ignore_eos", rng.choice(["no", 0])),
        lambda: bad_param(good, "logprobs", rng.choice([21, -1, "3"])),
        lambda: bad_param(good, "stop", rng.choice([["a", "b", "c", "d", "e"], "", "s" * 257, 5, [1]])),
        lambda: bad_param(good, "logit_bias", rng.choice([{"foo": 1}, {"5": 101}, {"5": "x"}, {"512": 1}, {"-1": 1},
                                                          [1], {str(i): 1 for i in range(301)}])),
        lambda: bad_param(good, "stream_options", rng.choice([5, "x"])),
        lambda: bad_param(good, "model", rng.choice([5, ["x"]])),
        lambda: bad_param(good, "prompt", rng.choice([[], [1, 512], [1, -1], [1, 2.5], {}, 5, ["x"] * 33,
                                                      [[1, 2], 5]]), "prompt"),
        lambda: bad_param(good, "n", rng.choice([0, 17, 10 ** 9, 2.5, "2"])),
        lambda: bad_param(good, "n", max_seqs + 1) if max_seqs < 16 else bad_param(good, "n", 17),
        lambda: Req("invalid", "POST", "/v1/completions",
                    dumps({"prompt": ["a", "b", "c", "d", "e"], "n": 16, "max_tokens": 1}),
                    expect=({400}, "n", None), name="bad_prompts_times_n"),
        lambda: bad_param(chat, "messages", rng.choice([[], "hi", [5], [{"role": "tool", "content": "x"}],
                                                        [{"role": "user", "content": 5}],
                                                        [{"role": "user", "content": [{"type": "image"}]}]]),
                          path="/v1/chat/completions"),
        lambda: bad_param(chat, "top_logprobs", rng.choice([2, 21]), path="/v1/chat/completions"),
        lambda: Req("invalid", "POST", "/v1/chat/completions", dumps({"prompt": "x"}),
                    expect=({400}, "messages", None), name="chat_without_messages"),
        lambda: Req("invalid", "POST", "/v1/completions", dumps({"max_tokens": 3}), expect=({400}, "prompt", None),
                    name="missing_prompt"),
        # NUL: escaped in a field (400 naming it) and as a raw byte in the body.
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "a\\u0000b", "max_tokens": 2}',
                    expect=({400}, "prompt", None), name="nul_escape"),
        lambda: Req("invalid", "POST", "/v1/chat/completions",
                    b'{"messages": [{"role": "user", "content": "x\\u0000"}], "max_tokens": 2}',
                    expect=({400}, "messages[0].content", None), name="nul_escape_chat"),
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "ab", "stop": ["\\u0000"]}',
                    expect=({400}, "stop[0]", None), name="nul_escape_stop"),
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "a\x00b"}', expect=({400}, None, None),
                    name="nul_byte"),
        # Bad UTF-8: refused where it names a thing (role, model), served (byte fallback) in a prompt.
        lambda: Req("invalid", "POST", "/v1/chat/completions",
                    b'{"messages": [{"role": "\xff\xfe", "content": "x"}]}',
                    expect=({400}, "messages[0].role", None), name="bad_utf8_role"),
        lambda: Req("invalid", "POST", "/v1/completions", b'{"prompt": "x", "model": "\xc3\x28"}',
                    expect=({404}, "model", "model_not_found"), name="bad_utf8_model"),
        lambda: Req("invalid", "POST", "/v1/completions",
                    b'{"prompt": "Once \xff\xfe upon \xc3", "max_tokens": 5, "echo": true}', endpoint="completions",
                    n_choices=1, n=1, max_tokens=5, name="bad_utf8_prompt"),
        lambda: Req("invalid", "POST", "/v1/chat/completions",
                    b'{"messages": [{"role": "user", "content": "\xed\xa0\x80 \xf4\x90\x80\x80 x"}], "max_tokens": 5}',
                    endpoint="chat", n_choices=1, n=1, max_tokens=5, name="bad_utf8_chat"),
        # Context overflow: the engine's check (prompt + max_tokens) and the parser's (max_tokens alone).
        lambda: Req("invalid", "POST", "/v1/completions",
                    dumps({"prompt": [1] + [rng.randrange(3, 512) for _ in range(ctx - 20)], "max_tokens": 40}),
                    expect=({400}, None, "context_length_exceeded"), name="context_overflow"),
        lambda: Req("invalid", "POST", "/v1/completions",
                    dumps({"prompt": [[1, 2], [1] * (ctx + 5)], "max_tokens": 1}),
                    expect=({400}, None, "context_length_exceeded"), name="context_overflow_second_prompt"),
        lambda: Req("invalid", "POST", "/v1/chat/completions",
                    dumps({"messages": [{"role": "user", "content": "word " * (ctx + 50)}], "max_tokens": 8}),
                    expect=({400}, None, "context_length_exceeded"), name="context_overflow_chat"),
        lambda: Req("invalid", "POST", "/v1/completions", dumps({"prompt": "x", "model": "gpt-4"}),
                    expect=({404}, "model", "model_not_found"), name="unknown_model"),
        lambda: Req("invalid", *rng.choice([("GET", "/v1/nothing"), ("POST", "/v1/nothing"),
                                           ("POST", "/v2/completions"), ("POST", "/v1/completions/x"),
                                           ("POST", "/v1/chat"), ("GET", "/metrics/x"),
                                           ("GET", "/%2e%2e/etc/passwd"), ("GET", "/v1/models/x/y"), ("GET", "//"),
                                           ("POST", "/tokenize/x"), ("GET", "/v1/completions/x")]),
                    b"{}", expect=({404}, None, None), name="unknown_route"),
        lambda: Req("invalid", "GET", "/v1/models/gpt-4", None, expect=({404}, None, "model_not_found"),
                    name="unknown_model_retrieve"),
        lambda: Req("invalid", *rng.choice([("GET", "/v1/completions"), ("DELETE", "/v1/chat/completions"),
                                           ("PUT", "/v1/completions"), ("POST", "/health"), ("PUT", "/metrics"),
                                           ("DELETE", "/v1/models"), ("GET", "/tokenize")]),
                    b"{}", expect=({405}, None, "method_not_allowed"), name="wrong_method"),
        lambda: Req("invalid", "POST", "/v1/completions",
                    b'{"prompt": "' + b"a" * rng.randint(300 * 1024, 600 * 1024) + b'"}',
                    expect=({413}, None, "request_too_large"), name="oversize_body"),
        lambda: Req("invalid", "POST", "/v1/completions", b"", expect=({413}, None, "request_too_large"),
                    name="oversize_declared", huge_declared=True),
        lambda: Req("invalid", "POST", "/v1/completions", dumps(good), key=None,
                    expect=({401}, None, "invalid_api_key"), name="no_api_key"),
        lambda: Req("invalid", "GET", "/v1/models", None, key=API_KEY[:-1] + "X",
                    expect=({401}, None, "invalid_api_key"), name="wrong_api_key"),
        lambda: Req("invalid", "POST", "/tokenize", dumps({"prompt": 5}), expect=({400}, "prompt", None),
                    name="bad_tokenize"),
        lambda: Req("invalid", "POST", "/detokenize", dumps({"tokens": [1, 600]}), expect=({400}, "tokens", None),
                    name="bad_detokenize"),
    ]
    return rng.choice(cases)()


def misc_request(rng, model):
    t = rng.choice(STORY_STARTS)

    def health(st, hd, data):
        if st != 200 or json.loads(data) != {"status": "ok"}:
            raise Failure("/health: %d %r" % (st, data[:100]))

    def models(st, hd, data):
        j = strict_json(data, "/v1/models")
        if st != 200 or j.get("object") != "list" or j["data"][0]["id"] != model.name:
            raise Failure("/v1/models: %d %r" % (st, data[:200]))

    def metrics(st, hd, data):
        if st != 200 or not hd.get("content-type", "").startswith("text/plain") or \
                b"cinfer:num_requests_running" not in data:
            raise Failure("/metrics: %d %r" % (st, data[:100]))

    def tokenize(st, hd, data):
        j = strict_json(data, "/tokenize")
        if st != 200 or j.get("count") != model.text_tokens[t] or len(j.get("tokens", [])) != j["count"]:
            raise Failure("/tokenize %r: %d %r (want %d tokens)" % (t, st, data[:200], model.text_tokens[t]))

    ids = random_tokens(rng)

    def detokenize(st, hd, data):
        j = strict_json(data, "/detokenize")
        if st != 200 or not isinstance(j.get("prompt"), str):
            raise Failure("/detokenize: %d %r" % (st, data[:200]))

    return rng.choice([
        lambda: Req("misc", "GET", "/health", None, key=None, check=health, name="health"),
        lambda: Req("misc", "GET", "/v1/models", None, check=models, name="models"),
        lambda: Req("misc", "GET", "/metrics", None, key=None, check=metrics, name="metrics"),
        lambda: Req("misc", "POST", "/tokenize", dumps({"prompt": t}), check=tokenize, name="tokenize"),
        lambda: Req("misc", "POST", "/detokenize", dumps({"tokens": ids}), check=detokenize, name="detokenize"),
    ])()


# ---- the deterministic requests ---------------------------------------------------------------------------

LONG = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 4 +
        "One day, she saw a big dog.")
DET_BODIES = [
    ("completions", {"prompt": [1], "max_tokens": 60, "temperature": 0}),
    ("completions", {"prompt": "Lily and Ben", "max_tokens": 40, "temperature": 0}),
    ("completions", {"prompt": [1, 403, 407, 261], "max_tokens": 30, "temperature": 0, "logprobs": 2}),
    ("completions", {"prompt": ["The cat", "One day"], "n": 2, "max_tokens": 25, "temperature": 0}),
    ("chat", {"messages": [{"role": "user", "content": "Tell me a story about a dog."}], "max_tokens": 50,
              "temperature": 0}),
    ("chat", {"messages": CHATS[2], "max_tokens": 20, "temperature": 0, "logprobs": True, "top_logprobs": 3}),
    ("completions", {"prompt": "Tom had a big", "max_tokens": 48, "temperature": 0, "stop": [".", "!"]}),
    ("completions", {"prompt": LONG, "max_tokens": 40, "temperature": 0, "ignore_eos": True}),
    ("completions", {"prompt": "The sun was", "max_tokens": 30, "temperature": 0, "repetition_penalty": 1.3,
                     "presence_penalty": 0.5, "frequency_penalty": 0.5}),
    ("completions", {"prompt": "One day", "max_tokens": 24, "temperature": 0, "logit_bias": {"261": -100,
                                                                                               "267": 5}}),
    # Seeded sampling: the same seed must give the same tokens whatever the batch.
    ("completions", {"prompt": "Once upon a time", "n": 3, "max_tokens": 30, "temperature": 0.9, "seed": 7}),
    ("chat", {"messages": CHATS[1], "max_tokens": 30, "temperature": 1.2, "top_p": 0.9, "top_k": 40,
              "seed": 99}),
]


def det_request(i, stream, model):
    ep, body = DET_BODIES[i]
    b = dict(body)
    if stream:
        b["stream"] = True
        b["stream_options"] = {"include_usage": True}
    n = b.get("n", 1)
    if ep == "chat":
        lens = [model.chat_tokens[CHATS.index(b["messages"])]] if b["messages"] in CHATS else None
    else:
        ps = b["prompt"] if isinstance(b["prompt"], list) and isinstance(b["prompt"][0], (str, list)) else [b["prompt"]]
        lens = [model.text_tokens.get(p) if isinstance(p, str) else len(p) for p in ps]
        lens = None if None in lens else lens
    lp = b.get("top_logprobs", 0) if ep == "chat" and b.get("logprobs") else b.get("logprobs", -1) \
        if ep == "completions" else -1
    stops = b.get("stop", [])
    return Req("det", "POST", PATH[ep], dumps(b), endpoint=ep, stream=stream,
               n_choices=(len(lens) if lens else 1) * n, n=n, max_tokens=b["max_tokens"],
               prompt_tokens=sum(lens) if lens else None, stops=[stops] if isinstance(stops, str) else stops,
               logprobs=lp, include_usage=stream, det=i, name="det%d" % i)


# ---- checking answers -------------------------------------------------------------------------------------

def check_logprobs_entry(req, lp, where):
    """One choice's logprobs object (whole or one chunk's): returns its number of tokens."""
    k = req.logprobs
    if req.endpoint == "completions":
        if not isinstance(lp, dict) or set(lp) != {"tokens", "token_logprobs", "top_logprobs", "text_offset"}:
            raise Failure("%s: logprobs %r" % (where, lp))
        n = len(lp["tokens"])
        if not (len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n):
            raise Failure("%s: logprobs arrays of different lengths" % where)
        for t, v, top, off in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]):
            if not isinstance(t, str) or not isinstance(v, (int, float)) or v > 0 or not isinstance(off, int):
                raise Failure("%s: logprobs entry %r %r %r" % (where, t, v, off))
            if not isinstance(top, dict) or len(top) > k + 1 or (k > 0 and not top) or \
                    any(not isinstance(x, (int, float)) or x > 0 for x in top.values()):
                raise Failure("%s: top_logprobs %r (k = %d)" % (where, top, k))
        offs = lp["text_offset"]
        if any(b < a for a, b in zip(offs, offs[1:])):
            raise Failure("%s: text_offset decreasing %r" % (where, offs))
        return n
    if not isinstance(lp, dict) or set(lp) != {"content"} or not isinstance(lp["content"], list):
        raise Failure("%s: logprobs %r" % (where, lp))
    for e in lp["content"]:
        if not isinstance(e, dict) or set(e) != {"token", "logprob", "bytes", "top_logprobs"} or \
                not isinstance(e["logprob"], (int, float)) or e["logprob"] > 0 or \
                bytes(e["bytes"]) != e["token"].encode("utf-8", "surrogatepass") and "\ufffd" not in e["token"] or \
                len(e["top_logprobs"]) != k:
            raise Failure("%s: logprobs content entry %r (k = %d)" % (where, e, k))
        tops = [t["logprob"] for t in e["top_logprobs"]]
        if tops != sorted(tops, reverse=True):
            raise Failure("%s: top_logprobs not sorted %r" % (where, tops))
    return len(lp["content"])


def check_usage(req, usage, completion_counts, finishes, where):
    if not isinstance(usage, dict) or set(usage) != {"prompt_tokens", "completion_tokens", "total_tokens"}:
        raise Failure("%s: usage %r" % (where, usage))
    p, c, t = usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]
    if t != p + c:
        raise Failure("%s: usage total %d != %d + %d" % (where, t, p, c))
    if req.prompt_tokens is not None and p != req.prompt_tokens:
        raise Failure("%s: usage prompt_tokens %d, the prompts have %d" % (where, p, req.prompt_tokens))
    if c > req.n_choices * req.max_tokens:
        raise Failure("%s: completion_tokens %d > %d choices x max_tokens %d" % (where, c, req.n_choices,
                                                                                req.max_tokens))
    if all(f == "length" for f in finishes) and c != req.n_choices * req.max_tokens:
        raise Failure("%s: every choice ended by length but completion_tokens %d != %d x %d" %
                      (where, c, req.n_choices, req.max_tokens))
    if completion_counts is not None and c != sum(completion_counts):
        raise Failure("%s: completion_tokens %d != %d tokens in the logprobs" % (where, c, sum(completion_counts)))
    if completion_counts is not None:
        for n, f in zip(completion_counts, finishes):
            if n > req.max_tokens or (f == "length" and n != req.max_tokens):
                raise Failure("%s: a choice of %d tokens ended by %s (max_tokens %d)" % (where, n, f,
                                                                                       req.max_tokens))


def check_text(req, i, text, where):
    """The generated part of choice i never holds a stop string; an echo starts it."""
    start = 0
    if req.echo:
        e = req.echo[i // req.n]
        if e is None:  # a token-array prompt: its echoed text is not known here, and may hold a stop string
            return
        if not text.startswith(e):
            raise Failure("%s: choice %d does not start with its echoed prompt %r: %r" % (where, i, e, text[:80]))
        start = len(e)
    for s in req.stops:
        if s in text[start:]:
            raise Failure("%s: choice %d holds its stop string %r: %r" % (where, i, s, text[start:][:200]))


def check_head(req, st, hd, data, where):
    """A non-streaming answer (or a refused streaming one).  Returns the normalized result or raises."""
    if st == 429:
        j = strict_json(data, where)
        if not error_body_ok(j) or j["error"]["type"] != "rate_limit_error":
            raise Failure("%s: 429 without an OpenAI error body: %r" % (where, data[:200]))
        return "429"
    if st != 200:
        raise Failure("%s: status %d: %r" % (where, st, data[:300]))
    if hd.get("content-type") != "application/json":
        raise Failure("%s: content-type %r" % (where, hd.get("content-type")))
    j = strict_json(data, where)
    if j.get("object") != OBJ[(req.endpoint, False)] or not isinstance(j.get("id"), str) or \
            not isinstance(j.get("created"), int) or j.get("model") != MODEL_NAME[0]:
        raise Failure("%s: head %r" % (where, {k: j.get(k) for k in ("object", "id", "created", "model")}))
    ch = j.get("choices")
    if not isinstance(ch, list) or len(ch) != req.n_choices:
        raise Failure("%s: %s choices, want %d" % (where, len(ch) if isinstance(ch, list) else ch, req.n_choices))
    counts = [] if req.logprobs >= 0 else None
    finishes, texts, lps = [], [], []
    for i, c in enumerate(ch):
        if c.get("index") != i or c.get("finish_reason") not in ("stop", "length"):
            raise Failure("%s: choice %d: index %r finish_reason %r" % (where, i, c.get("index"),
                                                                     c.get("finish_reason")))
        if req.endpoint == "chat":
            m = c.get("message")
            if not isinstance(m, dict) or m.get("role") != "assistant" or not isinstance(m.get("content"), str):
                raise Failure("%s: choice %d message %r" % (where, i, m))
            text = m["content"]
        else:
            text = c.get("text")
            if not isinstance(text, str):
                raise Failure("%s: choice %d text %r" % (where, i, text))
        check_text(req, i, text, where)
        if req.logprobs >= 0:
            counts.append(check_logprobs_entry(req, c.get("logprobs"), "%s choice %d" % (where, i)))
            lps.append(logprob_values(req, c["logprobs"]))
        elif c.get("logprobs") is not None:
            raise Failure("%s: logprobs %r not asked for" % (where, c.get("logprobs")))
        finishes.append(c["finish_reason"])
        texts.append(text)
    check_usage(req, j.get("usage"), counts, finishes, where)
    return {"texts": texts, "finish": finishes, "logprobs": lps, "usage": j["usage"]}


def logprob_values(req, lp):
    if req.endpoint == "completions":
        return [[t, v, sorted(top.items())] for t, v, top in zip(lp["tokens"], lp["token_logprobs"],
                                                               lp["top_logprobs"])]
    return [[e["token"], e["logprob"], [[t["token"], t["logprob"]] for t in e["top_logprobs"]]]
            for e in lp["content"]]


class StreamCheck:
    """Feeds on SSE bytes; checks every event as it comes."""

    def __init__(self, req, where):
        self.req = req
        self.where = where
        self.pending = b""
        self.events = 0
        self.done = False
        self.id = None
        self.texts = [""] * req.n_choices
        self.finish = [None] * req.n_choices
        self.seen = [0] * req.n_choices
        self.counts = [0] * req.n_choices
        self.lps = [[] for _ in range(req.n_choices)]
        self.usage = None
        self.first_token_at = None
        self.echo_left = [1 if req.echo else 0] * req.n_choices

    def feed(self, data):
        self.pending += data
        while True:
            i = self.pending.find(b"\n\n")
            if i < 0:
                return
            block, self.pending = self.pending[:i], self.pending[i + 2:]
            self.event(block)

    def event(self, block):
        w = "%s event %d" % (self.where, self.events)
        if self.done:
            raise Failure("%s: an event after [DONE]: %r" % (w, block[:100]))
        datas = []
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                continue
            if not line.startswith(b"data: "):
                raise Failure("%s: not a data line: %r" % (w, line[:100]))
            datas.append(line[6:])
        if not datas:
            return
        self.events += 1
        data = b"\n".join(datas)
        if data == b"[DONE]":
            if self.req.include_usage and self.usage is None:
                raise Failure("%s: [DONE] without the usage chunk" % w)
            if any(f is None for f in self.finish):
                raise Failure("%s: [DONE] before every choice ended: %r" % (w, self.finish))
            self.done = True
            return
        j = strict_json(data, w)
        if "error" in j:
            raise Failure("%s: an error event %r" % (w, j))
        if self.usage is not None:
            raise Failure("%s: an event after the usage chunk" % w)
        if j.get("object") != OBJ[(self.req.endpoint, True)] or not isinstance(j.get("created"), int) or \
                j.get("model") != MODEL_NAME[0] or not isinstance(j.get("id"), str) or \
                (self.id is not None and j["id"] != self.id):
            raise Failure("%s: head %r" % (w, {k: j.get(k) for k in ("object", "id", "created")}))
        self.id = j["id"]
        ch = j.get("choices")
        if not isinstance(ch, list):
            raise Failure("%s: choices %r" % (w, ch))
        if not ch:
            if not self.req.include_usage or "usage" not in j:
                raise Failure("%s: a chunk without choices %r" % (w, j))
            if any(f is None for f in self.finish):
                raise Failure("%s: the usage chunk before every choice ended" % w)
            self.usage = j["usage"]
            check_usage(self.req, self.usage, self.counts if self.req.logprobs >= 0 else None, self.finish, w)
            return
        if j.get("usage") is not None:
            raise Failure("%s: usage in a chunk with choices" % w)
        for c in ch:
            i = c.get("index")
            if not isinstance(i, int) or not 0 <= i < self.req.n_choices:
                raise Failure("%s: choice index %r of %d" % (w, i, self.req.n_choices))
            if self.finish[i] is not None:
                raise Failure("%s: choice %d goes on after its finish_reason" % (w, i))
            f = c.get("finish_reason")
            if f not in (None, "stop", "length"):
                raise Failure("%s: finish_reason %r" % (w, f))
            if self.req.endpoint == "chat":
                d = c.get("delta")
                if not isinstance(d, dict) or ("role" in d) != (self.seen[i] == 0) or \
                        ("role" in d and d["role"] != "assistant"):
                    raise Failure("%s: choice %d delta %r (chunk %d of the choice)" % (w, i, d, self.seen[i]))
                text = d.get("content", "")
                if not isinstance(text, str):
                    raise Failure("%s: delta content %r" % (w, text))
            else:
                text = c.get("text")
                if not isinstance(text, str):
                    raise Failure("%s: text %r" % (w, text))
            lp = c.get("logprobs")
            if lp is not None:
                if self.req.logprobs < 0:
                    raise Failure("%s: logprobs not asked for" % w)
                self.counts[i] += check_logprobs_entry(self.req, lp, w)
                self.lps[i] += logprob_values(self.req, lp)
            is_echo = self.echo_left[i] > 0 and self.seen[i] == (1 if self.req.endpoint == "chat" else 0)
            if is_echo:
                self.echo_left[i] = 0
            elif self.first_token_at is None and (text or f):
                self.first_token_at = time.monotonic()
            self.seen[i] += 1
            self.texts[i] += text
            if f is not None:
                self.finish[i] = f
                check_text(self.req, i, self.texts[i], w)

    def end(self):
        if self.pending.strip():
            raise Failure("%s: an unterminated event at the end: %r" % (self.where, self.pending[:100]))
        if not self.done:
            raise Failure("%s: the stream ended without data: [DONE] (%d events)" % (self.where, self.events))
        return {"texts": self.texts, "finish": self.finish, "logprobs": self.lps if self.req.logprobs >= 0 else [],
                "usage": self.usage}


# ---- the soak ---------------------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.count = collections.Counter()  # request kind/name -> n
        self.status = collections.Counter()  # status -> n
        self.fail = collections.Counter()  # check -> failures
        self.ok = collections.Counter()  # check -> passes
        self.failures = []  # (check, message, request)
        self.ttft = []
        self.tokens = 0
        self.prompt_tokens = 0
        self.rows = []

    def passed(self, check, n=1):
        with self.lock:
            self.ok[check] += n

    def failed(self, check, msg, req=None):
        with self.lock:
            self.fail[check] += 1
            if len(self.failures) < 2000:
                body = None
                if req is not None:
                    raw = req.raw or req.body or b""
                    body = "%s %s %s" % (req.method, req.path, raw[:600].decode("utf-8", "backslashreplace"))
                self.failures.append((check, msg, body))


class Soak:
    def __init__(self, a, srv, model, stats, det_ref):
        self.a = a
        self.srv = srv
        self.model = model
        self.stats = stats
        self.det_ref = det_ref
        self.t_start = None
        self.deadline = None
        self.stop = threading.Event()
        self.phase = "idle"  # idle (before the load), load, after

    def pick(self, rng):
        r = rng.random()
        a = self.a
        if r < a.p_invalid:
            return invalid_request(rng, self.model, a.max_seqs)
        r -= a.p_invalid
        if r < a.p_det:
            return det_request(rng.randrange(len(DET_BODIES)), rng.random() < 0.5, self.model)
        r -= a.p_det
        if r < a.p_disconnect:
            stream = rng.random() < 0.6
            req = valid_request(rng, self.model, stream, "disconnect_stream" if stream else "disconnect_wait",
                                a.max_seqs)
            req.disconnect_after = rng.randint(1, 12) if stream else rng.uniform(0, 0.5)
            req.reset = rng.random() < 0.3
            return req
        r -= a.p_disconnect
        if r < a.p_misc:
            return misc_request(rng, self.model)
        return valid_request(rng, self.model, rng.random() < 0.5, "valid", self.a.max_seqs)

    def client(self, cid):
        rng = random.Random("%d/%d" % (self.a.seed, cid))
        conn = None
        seq = 0
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            req = self.pick(rng)
            seq += 1
            if req.kind != "disconnect_stream" and not req.huge_declared and req.name != "oversize_body":
                t = rng.random()
                req.transport = "chunked" if t < 0.04 else "expect" if t < 0.08 else "slow" if t < 0.11 else \
                    "pipelined" if t < 0.15 and req.kind != "disconnect_wait" else None
                cuts = [rng.randrange(1, 1 << 20) for _ in range(rng.randint(0, 2))]
                req.rng_cuts = lambda n, cuts=cuts: [c % n for c in cuts] if n else []
                sizes = [rng.randint(1, 300) for _ in range(64)]
                req.rng_piece = itertools.cycle(sizes).__next__
                with self.stats.lock:
                    self.stats.count["transport:%s" % req.transport] += 1
            reuse = rng.random() < 0.7
            if conn is not None and (not reuse or not conn.reusable):
                conn.close()
                conn = None
            t0 = time.monotonic()
            try:
                conn, status = self.one(conn, req, "client %d request %d (%s)" % (cid, seq, req.name))
            except Exception as e:  # a bug of the soak itself: report it, do not hide it
                status = "exception"
                self.stats.failed("soak_client", "client %d: %r" % (cid, e), req)
                if conn is not None:
                    conn.close()
                conn = None
            with self.stats.lock:
                self.stats.count[req.kind + ":" + req.name] += 1
                self.stats.count["kind:" + req.kind] += 1
                self.stats.count["status:%s:%s" % (req.kind, status)] += 1
                self.stats.status[str(status)] += 1
                self.stats.rows.append((cid, seq, round(t0 - self.t_start, 3), req.kind, req.name, status,
                                        round(time.monotonic() - t0, 3)))
            if status == 429:  # Retry-After: 1
                time.sleep(rng.uniform(0.5, 1.5))
        if conn is not None:
            conn.close()

    def connect(self, conn):
        if conn is None:
            conn = Http(self.srv.port, self.a.request_timeout)
        return conn

    def one(self, conn, req, where):
        """Sends req (on conn when it may be reused) and checks the answer.  Returns (conn or None, status)."""
        if req.huge_declared:  # Content-Length far over --max-body and no body: 413 at once, without reading
            if conn is not None:
                conn.close()
            conn = Http(self.srv.port, self.a.request_timeout)
            conn.send(build_request(req.method, req.path, b"", content_length=10 ** 9))
            return self.finish_simple(conn, req, where)
        if req.name == "oversize_body":
            return self.oversize(conn, req, where)
        fresh = conn is None
        conn = self.connect(conn)
        try:
            st, hd = self.send(conn, req)
            if st is None:
                time.sleep(req.disconnect_after)
                conn.close(req.reset)
                self.stats.passed("disconnects")
                return None, "disconnected"
        except (EOFError, ConnectionError) as e:
            if not fresh and not conn.buf:  # a keep-alive connection the server had closed: once more, fresh
                conn.close()
                with self.stats.lock:
                    self.stats.count["stale_keepalive_retries"] += 1
                return self.one(None, req, where)
            self.stats.failed("valid_complete" if req.kind != "invalid" else "invalid_status",
                              "%s: %r" % (where, e), req)
            conn.close()
            return None, "lost"
        except socket.timeout:
            self.stats.failed("no_hang", "%s: no answer within %ds" % (where, self.a.request_timeout), req)
            conn.close()
            return None, "timeout"
        try:
            if req.stream and st == 200:
                return self.read_stream(conn, req, st, hd, where)
            body = b"".join(conn.body(st, hd, req.method, req.transport == "pipelined"))
            self.pipelined_tail(conn, req, hd)
            conn.nothing_more()
        except socket.timeout:
            self.stats.failed("no_hang", "%s: the body stalled for %ds" % (where, self.a.request_timeout), req)
            conn.close()
            return None, "timeout"
        except (Failure, EOFError, ConnectionError) as e:
            self.stats.failed("http_framing", "%s: %s" % (where, e), req)
            conn.close()
            return None, "bad_framing"
        self.judge(req, st, hd, body, where)
        return (conn if conn.reusable else self.drop(conn)), st

    def drop(self, conn):
        conn.close()
        return None

    def send(self, conn, req):
        """Sends req the way req.transport says; returns the final (status, headers), or (None, None) for a
        request that is to be abandoned before its answer (disconnect_wait)."""
        t = req.transport
        body = req.body
        if t == "chunked" and body is not None:  # the body in 1 to 3 chunks, no Content-Length
            head = build_request(req.method, req.path, None, key=req.key,
                                 headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
            cuts = sorted(req.rng_cuts(len(body)))
            pieces = [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)]) if b > a]
            data = head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        else:
            extra = {"Expect": "100-continue"} if t == "expect" and body is not None else None
            data = build_request(req.method, req.path, body, key=req.key, headers=extra)
        if t == "pipelined":
            data += build_request("GET", "/health", key=None)
        if t == "expect" and body is not None:
            at = len(data) - len(body)
            conn.send(data[:at])
            r, _, _ = select.select([conn.sock], [], [], 5)
            if r:
                st, hd = conn.head(interim=True)
                if st != 100:  # a final answer without the body (it never goes out: close afterwards)
                    hd["connection"] = "close"
                    return st, hd
            conn.send(data[at:])
        elif t == "slow":  # in pieces of 1 to 300 bytes, a few ms apart
            i = 0
            while i < len(data):
                n = req.rng_piece()
                conn.send(data[i:i + n])
                i += n
                time.sleep(0.003)
        else:
            conn.send(data)
        if req.kind == "disconnect_wait":
            return None, None
        return conn.head()

    def pipelined_tail(self, conn, req, hd):
        """A pipelined request: GET /health went out right behind req; its answer must follow req's."""
        if req.transport != "pipelined" or hd.get("connection", "").lower() == "close":
            return
        st, hd2 = conn.head()
        data = b"".join(conn.body(st, hd2, "GET"))
        if st != 200 or data != b'{"status":"ok"}':
            raise Failure("the pipelined GET /health got %d %r" % (st, data[:100]))

    def oversize(self, conn, req, where):
        """A body over --max-body: the headers first; the server may answer 413 from the Content-Length alone
        (then the body is never sent: a server that closes on a client still sending may reset the connection
        and lose the answer).  Without an answer within 10 s, the body follows in pieces, stopping as soon as
        the answer is there."""
        if conn is not None:
            conn.close()
        conn = Http(self.srv.port, self.a.request_timeout)
        head = build_request(req.method, req.path, req.body, key=req.key)
        body_at = len(head) - len(req.body)
        try:
            conn.send(head[:body_at])
            view = memoryview(head)[body_at:]
            r, _, _ = select.select([conn.sock], [], [], 10)
            while view and not r:
                r, w, _ = select.select([conn.sock], [conn.sock], [], self.a.request_timeout)
                if not r and not w:
                    raise socket.timeout()
                if not r:
                    n = conn.sock.send(view[:65536])
                    view = view[n:]
        except (ConnectionError, socket.timeout) as e:
            self.stats.failed("invalid_status", "%s: %r while sending the body" % (where, e), req)
            conn.close()
            return None, "lost"
        return self.finish_simple(conn, req, where)

    def finish_simple(self, conn, req, where):
        try:
            st, hd = conn.head()
            body = b"".join(conn.body(st, hd, req.method))
        except (Failure, EOFError, ConnectionError, socket.timeout) as e:
            self.stats.failed("invalid_status", "%s: %r" % (where, e), req)
            conn.close()
            return None, "lost"
        self.judge(req, st, hd, body, where)
        conn.close()
        return None, st

    def read_stream(self, conn, req, st, hd, where):
        if hd.get("content-type", "").split(";")[0] != "text/event-stream":
            self.stats.failed("stream_complete", "%s: content-type %r" % (where, hd.get("content-type")), req)
        sc = StreamCheck(req, where)
        t0 = time.monotonic()
        try:
            for piece in conn.body(st, hd, req.method, req.transport == "pipelined"):
                sc.feed(piece)
                if req.kind == "disconnect_stream" and sc.events >= req.disconnect_after:
                    conn.close(req.reset)
                    self.stats.passed("disconnects")
                    return None, "disconnected"
            res = sc.end()
            self.pipelined_tail(conn, req, hd)
            conn.nothing_more()
        except socket.timeout:
            self.stats.failed("no_hang", "%s: the stream stalled for %ds" % (where, self.a.request_timeout), req)
            conn.close()
            return None, "timeout"
        except (Failure, EOFError, ConnectionError) as e:
            self.stats.failed("stream_complete", "%s: %s" % (where, e), req)
            conn.close()
            return None, "bad_stream"
        if req.kind == "disconnect_stream":  # it ended before the k-th event: a complete stream, also checked
            self.stats.passed("disconnects")
        self.stats.passed("stream_complete")
        if sc.first_token_at is not None and req.kind == "valid":
            with self.stats.lock:
                self.stats.ttft.append(sc.first_token_at - t0)
        self.account(res)
        if req.det is not None:
            self.compare_det(req, res, where)
        return (conn if conn.reusable else self.drop(conn)), st

    def account(self, res):
        u = res.get("usage")
        if u:
            with self.stats.lock:
                self.stats.tokens += u["completion_tokens"]
                self.stats.prompt_tokens += u["prompt_tokens"]

    def judge(self, req, st, hd, body, where):
        if req.kind == "misc":
            try:
                req.check(st, hd, body)
                self.stats.passed("misc_ok")
            except (Failure, ValueError, KeyError, TypeError, IndexError) as e:
                self.stats.failed("misc_ok", "%s: %s" % (where, e), req)
            return
        if req.kind == "invalid":
            self.judge_invalid(req, st, hd, body, where)
            return
        check = "stream_complete" if req.stream else "valid_complete"
        try:
            res = check_head(req, st, hd, body, where)
        except Failure as e:
            self.stats.failed(check, str(e), req)
            return
        if res == "429":
            self.stats.passed("429_well_formed")
            return
        self.stats.passed(check)
        self.account(res)
        if req.det is not None:
            self.compare_det(req, res, where)

    def judge_invalid(self, req, st, hd, body, where):
        if req.expect is None:  # served leniently (bad UTF-8 in a prompt): a well-formed answer, valid UTF-8
            try:
                res = check_head(req, st, hd, body, where)
                self.stats.passed("429_well_formed" if res == "429" else "invalid_status")
            except Failure as e:
                self.stats.failed("invalid_status", str(e), req)
            return
        statuses, param, code = req.expect
        try:
            j = strict_json(body, where)
        except Failure as e:
            self.stats.failed("invalid_status", str(e), req)
            return
        if st == 429 and req.method == "POST" and req.path in PATH.values():
            if error_body_ok(j) and j["error"]["code"] == "rate_limit_exceeded":
                self.stats.passed("429_well_formed")
            else:
                self.stats.failed("429_well_formed", "%s: %r" % (where, body[:200]), req)
            return
        why = None
        if st not in statuses:
            why = "status %d, want %s" % (st, sorted(statuses))
        elif not error_body_ok(j):
            why = "not an OpenAI error body"
        elif param is not None and j["error"]["param"] != param and \
                not (isinstance(j["error"]["param"], str) and j["error"]["param"].startswith(param + "[")):
            why = "param %r, want %r" % (j["error"]["param"], param)
        elif code is not None and j["error"]["code"] != code:
            why = "code %r, want %r" % (j["error"]["code"], code)
        elif st == 405 and not hd.get("allow"):
            why = "405 without an Allow header"
        elif st == 401 and j["error"]["type"] != "authentication_error":
            why = "type %r" % j["error"]["type"]
        elif 400 <= st < 500 and st not in (401, 429) and j["error"]["type"] != "invalid_request_error":
            why = "type %r" % j["error"]["type"]
        if why:
            self.stats.failed("invalid_status", "%s: %s: %r" % (where, why, body[:300]), req)
        else:
            self.stats.passed("invalid_status")

    def compare_det(self, req, res, where):
        ref = self.det_ref[req.det]
        keys = ("texts", "finish", "logprobs", "usage") if res.get("usage") else ("texts", "finish", "logprobs")
        got = {k: res[k] for k in keys}
        want = {k: ref[k] for k in keys}
        with self.stats.lock:
            self.stats.count["det_compared:" + self.phase] += 1
        if got == want:
            self.stats.passed("determinism")
        else:
            self.stats.failed("determinism", "%s: differs from the idle answer:\n  got  %s\n  want %s" %
                              (where, json.dumps(got)[:1500], json.dumps(want)[:1500]), req)


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    h = (len(xs) - 1) * q / 100
    lo = int(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def wait_idle(srv, timeout):
    t0 = time.monotonic()
    m = {}
    while time.monotonic() - t0 < timeout:
        m = srv.metrics()
        if m.get("cinfer:num_requests_running") == 0 and m.get("cinfer:num_requests_waiting") == 0 and \
                m.get("cinfer:kv_cache_usage_perc") == 0:
            return time.monotonic() - t0, m
        time.sleep(0.1)
    return None, m


def run_det_set(soak, stats, label, streams=(False, True)):
    """Every deterministic request, one at a time on the idle server; compared with the reference."""
    for i in range(len(DET_BODIES)):
        for stream in streams:
            req = det_request(i, stream, soak.model)
            conn, st = soak.one(None, req, "%s det%d%s" % (label, i, " stream" if stream else ""))
            if conn is not None:
                conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seconds", type=float, help="overrides --minutes")
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--binary")
    ap.add_argument("--model")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--kv-blocks", type=int, default=48, help="KV pool in blocks (default 48 = 768 tokens)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-seqs", type=int, default=12)
    ap.add_argument("--max-requests", type=int, help="default: 7/8 of --clients, so 429 happens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-body", default="256K")
    ap.add_argument("--p-invalid", type=float, default=0.12)
    ap.add_argument("--p-disconnect", type=float, default=0.10)
    ap.add_argument("--p-det", type=float, default=0.06)
    ap.add_argument("--p-misc", type=float, default=0.04)
    ap.add_argument("--request-timeout", type=int, default=180, help="seconds without progress = a hang")
    ap.add_argument("--idle-timeout", type=float, default=15, help="seconds for /metrics to come back to idle")
    ap.add_argument("--rss-growth-mb", type=float, default=64,
                    help="largest allowed RSS growth from minute 1 of the load to its end")
    ap.add_argument("--lines", action="store_true", help="print PASS/FAIL lines (the test suite's format)")
    a = ap.parse_args()
    duration = a.seconds if a.seconds is not None else a.minutes * 60
    models = os.environ.get("CINFER_MODELS") or os.path.join(ROOT, "..", "shared", "models")
    a.model = a.model or os.path.join(models, "stories260K.gguf")
    if not a.binary:
        asan = os.path.join(ROOT, "build", "asan", "cinfer")
        a.binary = asan if os.access(asan, os.X_OK) else os.path.join(ROOT, "build", "release", "cinfer")
    a.max_requests = a.max_requests or max(2, a.clients - a.clients // 8)
    a.out = a.out or os.path.join(ROOT, "bench", "out", "soak-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(a.out, exist_ok=True)
    for path, what in ((a.binary, "binary"), (a.model, "model")):
        if not os.path.exists(path):
            print("soak: no %s at %s" % (what, path), file=sys.stderr)
            return 2

    env = dict(os.environ)
    # LeakSanitizer runs at exit (a leak is a report); a bounded quarantine keeps the RSS check meaningful.
    # Appended, so it holds whatever else the caller (tests/run.sh) put in ASAN_OPTIONS: the last one wins.
    env["ASAN_OPTIONS"] = ":".join(o for o in (env.get("ASAN_OPTIONS", "detect_leaks=1"), "quarantine_size_mb=16") if o)
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
    args = ["--api-key", API_KEY, "--kv-blocks", str(a.kv_blocks), "--block-size", str(a.block_size),
            "--max-seqs", str(a.max_seqs), "--max-requests", str(a.max_requests), "--threads", str(a.threads),
            "--max-body", a.max_body, "--max-connections", str(max(256, 4 * a.clients))]
    stats = Stats()
    print("soak: %s serve %s, %d clients for %.0f s, seed %d, out %s" %
          (a.binary, " ".join(args[2:]), a.clients, duration, a.seed, a.out), flush=True)
    srv = Server(a.binary, a.model, args, os.path.join(a.out, "server.log"), env)
    result = {"config": {k: v for k, v in vars(a).items()}, "duration_s": duration}
    rss = []
    rss_stop = threading.Event()
    t_load0 = [None]

    load_peaks = collections.Counter()

    def sample_rss():
        while not rss_stop.is_set():
            v = srv.rss_kib()
            if v is not None:
                rss.append((time.monotonic(), v))
            if t_load0[0] is not None and srv.port:
                try:
                    m = srv.metrics()
                    for k in ("running", "waiting"):
                        load_peaks[k] = max(load_peaks[k], m.get("cinfer:num_requests_%s" % k, 0))
                    load_peaks["kv"] = max(load_peaks["kv"], m.get("cinfer:kv_cache_usage_perc", 0))
                except Exception:  # the server is gone: the main loop reports it
                    pass
            rss_stop.wait(2.0)

    try:
        srv.wait_ready(120)
        threading.Thread(target=sample_rss, daemon=True).start()
        model = Model(srv)
        print("soak: model %r, context %d, %d prompts and %d chats tokenized" %
              (model.name, model.ctx, len(model.text_tokens), len(model.chat_tokens)), flush=True)
        soak = Soak(a, srv, model, stats, None)
        m0 = srv.metrics()

        # The idle answers of the deterministic set (non-streaming, one at a time).
        ref = []
        for i in range(len(DET_BODIES)):
            req = det_request(i, False, model)
            st, hd, data = srv.request("POST", req.path, req.body)
            res = check_head(req, st, hd, data, "idle det%d" % i)
            if res == "429":
                raise RuntimeError("429 on the idle server")
            ref.append(res)
        if ref[0]["texts"][0] == GREEDY_FROM_BOS:
            stats.passed("greedy_matches_reference")
        else:
            stats.failed("greedy_matches_reference", "greedy from BOS %r != MANIFEST.md's %r" %
                         (ref[0]["texts"][0], GREEDY_FROM_BOS))
        for i, r in enumerate(ref):  # greedy samples of one prompt are equal
            if DET_BODIES[i][1].get("temperature") == 0:
                n = DET_BODIES[i][1].get("n", 1)
                for p in range(len(r["texts"]) // n):
                    if len(set(r["texts"][p * n:(p + 1) * n])) != 1:
                        stats.failed("determinism", "det%d: greedy samples of one prompt differ: %r" % (i, r["texts"]))
        soak.det_ref = ref
        run_det_set(soak, stats, "idle")  # the idle server answers the same twice, streaming or not

        # The load.
        rss_before = srv.rss_kib()
        soak.phase = "load"
        soak.t_start = t_load0[0] = time.monotonic()
        soak.deadline = soak.t_start + duration
        threads = [threading.Thread(target=soak.client, args=(c,), daemon=True) for c in range(a.clients)]
        for t in threads:
            t.start()
        last = time.monotonic()
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            if srv.proc.poll() is not None:
                stats.failed("server_alive", "the server exited with status %s during the load" % srv.proc.poll())
                soak.stop.set()
                break
            now = time.monotonic()
            if now - last >= 30:
                last = now
                with stats.lock:
                    done = sum(v for k, v in stats.count.items() if k.startswith("kind:"))
                    nf = sum(stats.fail.values())
                print("soak: %4.0f s, %d requests, %d failures, RSS %.1f MiB" %
                      (now - soak.t_start, done, nf, (srv.rss_kib() or 0) / 1024), flush=True)
            if now > soak.deadline + a.request_timeout + 60:
                stats.failed("no_hang", "client threads still running %d s after the end" % (now - soak.deadline))
                soak.stop.set()
                break
        t_load1 = time.monotonic()
        load_s = t_load1 - soak.t_start
        rss_load_end = srv.rss_kib()

        # Back to idle, then the deterministic set once more.
        alive = srv.proc.poll() is None
        soak.phase = "after"
        if alive:
            took, m = wait_idle(srv, a.idle_timeout)
            if took is None:
                stats.failed("idle_after_load", "not idle %.0f s after the load: running %s waiting %s kv %s" %
                             (a.idle_timeout, m.get("cinfer:num_requests_running"),
                              m.get("cinfer:num_requests_waiting"), m.get("cinfer:kv_cache_usage_perc")))
            else:
                stats.passed("idle_after_load")
            result["idle_after_s"] = took
            run_det_set(soak, stats, "after")
            took2, m = wait_idle(srv, a.idle_timeout)
            if took2 is not None:
                stats.passed("idle_after_load")
            else:
                stats.failed("idle_after_load", "not idle after the deterministic requests")
            m1 = m
            preempt = m1.get("cinfer:num_preemptions_total", 0) - m0.get("cinfer:num_preemptions_total", 0)
            if preempt > 0:
                stats.passed("preemption_happened")
            else:
                stats.failed("preemption_happened", "cinfer:num_preemptions_total is %d: the pool never forced "
                             "preemption (lower --kv-blocks)" % preempt)
            errors = m1.get('cinfer:request_success_total{finished_reason="error"}', 0)
            if errors:
                stats.failed("no_engine_errors", "%d requests ended with finished_reason=error" % errors)
            else:
                stats.passed("no_engine_errors")
            result["metrics"] = {k: v for k, v in m1.items() if "_bucket" not in k}
        else:
            m1 = {}
            preempt = 0
        rss_idle_end = srv.rss_kib()
    except Exception as e:
        stats.failed("soak_setup", repr(e))
        load_s = 0
        m1, preempt, rss_before, rss_load_end, rss_idle_end = {}, 0, None, None, None
    finally:
        rss_stop.set()
        alive = srv.proc.poll() is None
        rc = srv.stop(120)
    if not alive:
        stats.failed("server_alive", "the server died (status %s): %s" % (rc, " | ".join(srv.lines[-8:])))
    elif rc == 0:
        stats.passed("sigterm_exit_0")
    else:
        stats.failed("sigterm_exit_0", "exit status %s after SIGTERM" % rc)
    reports = [line for line in srv.lines if "Sanitizer" in line or "runtime error" in line or
               "AddressSanitizer" in line or "LeakSanitizer" in line]
    if reports:
        stats.failed("no_sanitizer_report", "\n".join(reports[:20]))
    else:
        stats.passed("no_sanitizer_report")

    # RSS: minute 1 of the load (or its first sixth when shorter) to its end.
    t0 = t_load0[0]
    during = [(t - t0, v) for t, v in rss if t0 is not None and t0 <= t <= t0 + load_s]
    mark = min(60.0, load_s / 6)
    after_mark = [v for t, v in during if t >= mark]
    rss_mark = after_mark[0] if after_mark else None
    busy = [v for t, v in during if t <= duration]
    rss_last = busy[-1] if busy else None  # the last sample with every client still at work
    rss_peak = max((v for _, v in rss), default=None)
    ends = [v for v in (rss_last, rss_load_end) if v]
    growth = (max(ends) - rss_mark) / 1024 if rss_mark and ends else None
    if growth is None:
        stats.failed("rss_bounded", "no RSS samples")
    elif growth > a.rss_growth_mb:
        stats.failed("rss_bounded", "RSS grew %.1f MiB from %.0f s into the load to its end (bound %.0f MiB)" %
                     (growth, mark, a.rss_growth_mb))
    else:
        stats.passed("rss_bounded")
    with open(os.path.join(a.out, "rss.csv"), "w") as f:
        f.write("t_s,rss_kib\n")
        for t, v in rss:
            f.write("%.1f,%d\n" % (t - (t0 or rss[0][0]), v))
    with open(os.path.join(a.out, "requests.csv"), "w") as f:
        f.write("client,seq,t_s,kind,name,status,secs\n")
        for row in stats.rows:
            f.write(",".join(str(x) for x in row) + "\n")
    with open(os.path.join(a.out, "failures.log"), "w") as f:
        for check, msg, body in stats.failures:
            f.write("[%s] %s\n" % (check, msg))
            if body:
                f.write("    request: %s\n" % body)

    # The table.
    c, s = stats.count, stats.status
    n_req = sum(v for k, v in c.items() if k.startswith("kind:"))
    mib = lambda k: "%.1f" % (k / 1024) if k else "-"  # noqa: E731
    rows = [
        ("duration", "%.0f s load, %d clients, seed %d" % (load_s, a.clients, a.seed)),
        ("server", "%s, --kv-blocks %d --block-size %d (%d tokens), --max-seqs %d, --max-requests %d, "
                   "--threads %d" % (os.path.relpath(a.binary, ROOT) if a.binary.startswith(ROOT) else a.binary,
                                     a.kv_blocks, a.block_size, a.kv_blocks * a.block_size, a.max_seqs,
                                     a.max_requests, a.threads)),
        ("requests", "%d (%.1f req/s)" % (n_req, n_req / load_s if load_s else 0)),
        ("valid", "%d sent (%d completions, %d chat, %d at the limits of n and prompts x n; %d streaming), "
                  "%d answered 200 and checked, %d got 429" %
         (c["kind:valid"], c["valid:completions"] + c["valid:completions_stream"],
          c["valid:chat"] + c["valid:chat_stream"], c["valid:completions_wide"] + c["valid:completions_wide_stream"],
          sum(v for k, v in c.items() if k.startswith("valid:") and k.endswith("_stream")),
          c["status:valid:200"], c["status:valid:429"])),
        ("disconnects", "%d mid-stream (%d streams ended before the k-th event), %d before a non-streaming answer" %
         (c["status:disconnect_stream:disconnected"], c["status:disconnect_stream:200"],
          c["kind:disconnect_wait"])),
        ("deterministic re-sends", "%d during the load (%d got 429, %d answered)" %
         (c["kind:det"], c["status:det:429"], c["status:det:200"])),
        ("invalid", "%d (%d kinds), %d answered as expected" %
         (c["kind:invalid"], len({r[4] for r in stats.rows if r[3] == "invalid"}), stats.ok["invalid_status"])),
        ("other endpoints", "%d (/health, /v1/models, /metrics, /tokenize, /detokenize)" % c["kind:misc"]),
        ("transports", "%d chunked bodies, %d Expect: 100-continue, %d sent in pieces, %d with a pipelined GET" %
         (c["transport:chunked"], c["transport:expect"], c["transport:slow"], c["transport:pipelined"])),
        ("statuses", ", ".join("%s: %d" % kv for kv in sorted(s.items(), key=lambda kv: str(kv[0])))),
        ("429 (in flight > --max-requests)", "%d" % s["429"]),
        ("tokens", "%d generated, %d prompt (in answers read whole); server: %d generated, %d prompt" %
         (stats.tokens, stats.prompt_tokens, m1.get("cinfer:generation_tokens_total", 0),
          m1.get("cinfer:prompt_tokens_total", 0))),
        ("TTFT (valid streams, client side, queueing included)", "p50 %.0f ms, p99 %.0f ms (%d streams)" %
         (percentile(stats.ttft, 50) * 1000, percentile(stats.ttft, 99) * 1000, len(stats.ttft))),
        ("preemptions", "%d" % preempt),
        ("engine peaks (sampled /metrics)", "running %d, waiting %d, KV usage %.0f%%" %
         (load_peaks["running"], load_peaks["waiting"], 100 * load_peaks["kv"])),
        ("finished (server)", ", ".join("%s %d" % (r, m1.get('cinfer:request_success_total{finished_reason="%s"}'
                                                                % r, 0)) for r in ("stop", "length", "abort",
                                                                                   "error"))),
        ("RSS MiB", "start %s, at %.0f s %s, peak %s, last sample of the load %s, after the load %s, idle end %s; "
                    "growth %s (bound %.0f)" %
         (mib(rss_before), mark, mib(rss_mark), mib(rss_peak), mib(rss_last), mib(rss_load_end), mib(rss_idle_end),
          "%.1f" % growth if growth is not None else "-", a.rss_growth_mb)),
        ("idle after load", "%.1f s" % result["idle_after_s"] if result.get("idle_after_s") is not None else "no"),
        ("determinism", "%d of %d answers identical to the idle reference (%d during the load, %d on the idle "
                        "server before it, %d after it)" %
         (stats.ok["determinism"], stats.ok["determinism"] + stats.fail["determinism"], c["det_compared:load"],
          c["det_compared:idle"], c["det_compared:after"])),
        ("server exit", "%s on SIGTERM; sanitizer reports: %d" % (rc, len(reports))),
    ]
    checks = sorted(set(stats.ok) | set(stats.fail))
    lines = ["| | |", "|---|---|"] + ["| %s | %s |" % r for r in rows]
    lines += ["", "| check | passed | failed |", "|---|---|---|"]
    lines += ["| %s | %d | %d |" % (k, stats.ok[k], stats.fail[k]) for k in checks]
    verdict = "FAIL" if stats.fail else "PASS"
    lines += ["", "Result: **%s**" % verdict]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(table + "\n")
    result.update({"rows": rows, "checks": {k: [stats.ok[k], stats.fail[k]] for k in checks},
                   "counts": dict(c), "statuses": {str(k): v for k, v in s.items()}, "verdict": verdict,
                   "rss": {"start": rss_before, "mark": rss_mark, "peak": rss_peak, "load_end": rss_load_end,
                           "idle_end": rss_idle_end, "growth_mib": growth}})
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(table)
    if stats.failures:
        print("\nfirst failures (all in %s):" % os.path.join(a.out, "failures.log"))
        for check, msg, body in stats.failures[:10]:
            print("  [%s] %s" % (check, msg[:600]))
            if body:
                print("      request: %s" % body[:300])
    if a.lines:
        for k in checks:
            if stats.fail[k]:
                first = next(m for ch, m, _ in stats.failures if ch == k) if any(
                    ch == k for ch, _, _ in stats.failures) else ""
                print("FAIL soak_%s: %d of %d failed; first: %s" % (k, stats.fail[k], stats.ok[k] + stats.fail[k],
                                                                    first[:400].replace("\n", " ")))
            else:
                print("PASS soak_%s" % k)
    sys.stdout.flush()
    return 1 if stats.fail else 0


if __name__ == "__main__":
    sys.exit(main())
