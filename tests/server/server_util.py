"""Helpers for the `cinfer serve` tests: start a real server on a free loopback port, talk raw HTTP to it.
Standard library only (run by /usr/bin/python3)."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CINFER_BIN") or os.path.join(ROOT, "build", "release", "cinfer")
MODELS = os.environ.get("CINFER_MODELS") or os.path.join(ROOT, "..", "shared", "models")
STORIES = os.path.join(MODELS, "stories260K.gguf")
# Every how many items a corpus test takes: tests/run.sh sets CINFER_TEST_SAMPLE for the sanitizer builds (a
# sample reaches the same code; the release suite takes every item).
SAMPLE = max(1, int(os.environ.get("CINFER_TEST_SAMPLE") or 1))
ALL = []  # every Server started, so a test can check all their logs at the end
failures = 0  # FAIL lines printed by check()


def check(name, cond, why=""):
    """Prints "PASS name" or "FAIL name: why" (counted in failures); returns cond."""
    global failures
    if cond:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()
    return cond


def setup_ok(prefix):
    """True when the binary under test and the model exist; else prints "FAIL <prefix>_setup: ..."."""
    for what, path in (("binary", BIN), ("model", STORIES)):
        if not os.path.exists(path):
            print(f"FAIL {prefix}_setup: no {what} {path}")
            return False
    return True


def check_no_sanitizer_report(name):
    """Stops every Server started and checks that none of their logs holds a sanitizer report."""
    for srv in ALL:
        srv.kill()
    log = "\n".join(line for srv in ALL for line in srv.lines)
    bad = [line for line in log.splitlines() if "Sanitizer" in line or "runtime error" in line]
    return check(name, not bad, "\n".join(bad)[:500])


class Server:
    """A `cinfer serve` process on port 0 (the kernel picks a free port; the server prints its URL)."""

    def __init__(self, *args, model=STORIES, wait_ready=True, timeout=15.0, kv_type="f32", env=None):
        # The tests compare against references computed in float (llama2.c's greedy text, the numpy model), so
        # the server gets the f32 KV cache explicitly (serve's default is f16); kv_type=None: the default.
        kv = ["--kv-type", kv_type] if kv_type and "--kv-type" not in args else []
        self.args = ["serve", "-m", model, "--port", "0", "--threads", "1"] + kv + list(args)
        self.proc = subprocess.Popen([BIN] + self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace", env=dict(os.environ, **env) if env else None)
        self.lines = []
        ALL.append(self)
        self.url = None
        self.port = None
        self._have_url = threading.Event()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._have_url.wait(timeout):
            self.kill()
            raise RuntimeError("no URL from cinfer serve: " + " | ".join(self.lines[-5:]))
        if wait_ready and not self._ready.wait(timeout):
            self.kill()
            raise RuntimeError("cinfer serve never became ready: " + " | ".join(self.lines[-5:]))

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://([^ ]+):(\d+)", line)
            if m and not self.url:
                self.host, self.port = m.group(1), int(m.group(2))
                self.url = f"http://{self.host}:{self.port}"
                self._have_url.set()
            if " ready " in line:
                self._ready.set()

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, key=None, timeout=30):
        """Returns (status, headers dict with lower-case names, body bytes)."""
        h = dict(headers or {})
        if key:
            h["Authorization"] = "Bearer " + key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, key=None, timeout=60):
        st, hd, data = self.request(method, path, body, key=key, timeout=timeout)
        try:
            return st, hd, json.loads(data)
        except ValueError:
            return st, hd, data

    def stream(self, path, body, key=None, timeout=60):
        """POSTs a streaming request; returns (status, [parsed data events], saw_done)."""
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        try:
            c.request("POST", path, body=json.dumps(body).encode(), headers=h)
            r = c.getresponse()
            if r.status != 200:
                return r.status, [json.loads(r.read())], False
            events, done = parse_sse(r.read().decode())
            return r.status, events, done
        finally:
            c.close()

    def metrics(self):
        st, hd, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Sends sig; returns (exit status or None if it did not exit in time, seconds taken)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        if rc != 0:  # the cause in the log (a sanitizer's or libmicrohttpd's abort says why on stderr)
            self._reader.join(2.0)
            print(f"NOTE cinfer serve exited {rc}; its last stderr lines: " + " | ".join(self.lines[-6:]))
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def parse_sse(text):
    """data: events of an SSE body: (list of parsed JSON objects, whether [DONE] ended it)."""
    events, done = [], False
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert not done, "an event after [DONE]"
        data = "\n".join(line[6:] if line.startswith("data: ") else line[5:]
                         for line in block.split("\n") if line.startswith("data:"))
        if data == "[DONE]":
            done = True
        else:
            events.append(json.loads(data))
    return events, done
