#!/usr/bin/env python3
"""`cinfer serve` against hostile input, each case a defect once found by probing the server as an attacker
would (docs/SECURITY.md): it must answer with a clear error or serve correctly, and keep serving.

- a prompt of UTF-8 lead bytes before spaces overflowed the SentencePiece encoder's buffers (SIGSEGV);
- escaped NULs ("ab\\u0000cd") were cut silently: now a 400 naming the field;
- a model file claiming a 16,777,216-token context grew the KV pool to gigabytes: now the pool keeps its
  budget and the context is clamped (and reported as max_model_len).

Prints PASS/FAIL lines."""
import json
import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import ALL, BIN, STORIES, Server  # noqa: E402

failures = 0


def check(name, cond, why=""):
    global failures
    if cond:
        print(f"PASS {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {why}")
    sys.stdout.flush()
    return cond


def error_of(data):
    try:
        j = json.loads(data)
    except ValueError:
        return None
    e = j.get("error") if isinstance(j, dict) else None
    return e if isinstance(e, dict) and all(k in e for k in ("message", "type", "param", "code")) else None


def alive(s):
    st, _, j = s.json("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 3, "temperature": 0})
    return st == 200 and j["usage"]["completion_tokens"] == 3


def test_spm_lead_bytes(s):
    # The reported body: 4 KB of "\xc7 " (the JSON carries it as the escape \u00c7 or raw UTF-8 of U+00C7
    # would be valid; the attack needs the raw invalid byte, which JSON strings may hold as bytes).
    raw = b"\xc7 " * 2048
    body = b'{"prompt": "' + raw + b'", "max_tokens": 2, "temperature": 0}'
    st, _, data = s.request("POST", "/v1/completions", body, headers={"Content-Type": "application/json"})
    check("spm_lead_bytes_completion", st in (200, 400) and (st == 200 or error_of(data)), f"{st} {data[:200]!r}")
    body = b'{"prompt": "' + raw + b'"}'
    st, _, data = s.request("POST", "/tokenize", body, headers={"Content-Type": "application/json"})
    check("spm_lead_bytes_tokenize", st in (200, 400), f"{st} {data[:200]!r}")
    for lead in range(0xC0, 0x100, 7):  # every kind of lead byte, with one, two and three spaces after it
        body = b'{"prompt": "' + (bytes([lead]) + b" " * (1 + lead % 3)) * 500 + b'"}'
        st, _, data = s.request("POST", "/tokenize", body, headers={"Content-Type": "application/json"})
        if st not in (200, 400):
            check("spm_lead_bytes_all", False, f"lead 0x{lead:02x}: {st}")
            break
    else:
        check("spm_lead_bytes_all", True)
    check("spm_lead_bytes_alive", s.proc.poll() is None and alive(s), "the server died")


def test_nul_escapes(s):
    cases = [
        ("/v1/completions", {"prompt": "ab\u0000cd", "max_tokens": 2}, "prompt"),
        ("/v1/completions", {"prompt": ["ok", "ab\u0000cd"], "max_tokens": 2}, "prompt[1]"),
        ("/v1/completions", {"prompt": "ab", "stop": ["x\u0000y"], "max_tokens": 2}, "stop[0]"),
        ("/v1/completions", {"prompt": "ab", "stop": "\u0000", "max_tokens": 2}, "stop"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"},
                                               {"role": "user", "content": "a\u0000"}]}, "messages[1].content"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "x\u0000"}]}]}, "messages[0].content[0].text"),
        ("/tokenize", {"prompt": "ab\u0000cd"}, "prompt"),
        ("/v1/completions", {"prompt": "ab", "model": "m\u0000", "max_tokens": 2}, "model"),
    ]
    for i, (path, body, param) in enumerate(cases):
        st, _, data = s.request("POST", path, json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        e = error_of(data)
        check(f"nul_escape_{i}_{param}", st == 400 and e and e["param"] == param and "NUL" in e["message"],
              f"{st} {data[:300]!r}")
    # An escaped backslash before "u0000" is not a NUL: "a\\u0000" is the 7 characters a\u0000.
    st, _, j = s.json("POST", "/tokenize", {"prompt": "a\\u0000b"})
    check("nul_escape_lookalike_is_text", st == 200 and j["count"] > 3, f"{st} {j}")
    check("nul_escape_alive", alive(s))


def patched_context(path_in, path_out, n_ctx):
    """A copy of a GGUF whose <arch>.context_length (a u32) says n_ctx."""
    data = bytearray(open(path_in, "rb").read())
    key = b"llama.context_length"
    at = data.find(key)
    assert at > 0
    typ = struct.unpack_from("<I", data, at + len(key))[0]
    assert typ == 4, typ  # GGUF_TYPE_UINT32
    struct.pack_into("<I", data, at + len(key) + 4, n_ctx)
    open(path_out, "wb").write(data)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_claimed_context():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "huge-ctx.gguf")
        patched_context(STORIES, path, 1 << 24)
        s = Server(model=path)
        try:
            time.sleep(1.0)
            rss = rss_kib(s.proc.pid)
            st, _, j = s.json("GET", "/v1/models")
            n_ctx = j["data"][0]["max_model_len"] if st == 200 else None
            check("claimed_context_clamped", n_ctx is not None and 0 < n_ctx < 1 << 24, f"{st} {j}")
            # stories260K's KV is 5 layers x 4 KV heads x 8 dims: the default 256 MiB pool holds its clamp.
            check("claimed_context_rss_bounded", rss < 400 * 1024, f"RSS {rss} KiB")
            check("claimed_context_warns", any("does not fit the KV pool" in line for line in s.lines), str(s.lines))
            check("claimed_context_serves", alive(s))
        finally:
            rc, _ = s.stop()
        check("claimed_context_exit", rc == 0, f"exit {rc}")


def main():
    if not os.path.exists(BIN) or not os.path.exists(STORIES):
        print(f"FAIL hardening_setup: no binary {BIN} or model {STORIES}")
        return 1
    s = Server()
    try:
        for t in (test_spm_lead_bytes, test_nul_escapes):
            try:
                t(s)
            except Exception as e:
                check(t.__name__, False, f"exception {e!r}")
    finally:
        rc, _ = s.stop()
    check("hardening_server_exit", rc == 0, f"exit {rc}")
    for t in (test_claimed_context,):
        try:
            t()
        except Exception as e:
            check(t.__name__, False, f"exception {e!r}")
    for srv in ALL:
        srv.kill()
    log = "\n".join(line for srv in ALL for line in srv.lines)
    check("hardening_no_sanitizer_report", "Sanitizer" not in log and "runtime error" not in log,
          "\n".join(line for line in log.splitlines() if "Sanitizer" in line or "runtime error" in line)[:500])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
