#!/usr/bin/env python3
"""A stand-in for `cinfer serve`, only for working on src/server/webui.html without the real server (the test in
tests/webui runs against the real one).  Serves the page at / and fakes /health, /v1/models, /metrics and a
streaming /v1/chat/completions that echoes words at a steady pace.

    /usr/bin/python3 tests/webui/mock_server.py [--port 8080] [--api-key KEY] [--delay 0.03] [--page FILE]
    CINFER_URL=http://127.0.0.1:8080 bash tests/webui/test_webui.sh
"""
import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "server", "webui.html")
WORDS = ("Once upon a time , there was a little robot named Bolt . He liked to count tokens and "
         "watch the cache fill up . One day , he met a friendly scheduler who shared her batch .").split()

lock = threading.Lock()
stats = {"running": 0, "gen": 0, "prompt": 0, "hits": 0, "queries": 0, "preempt": 0, "ttft_sum": 0.0, "n": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, code, msg, typ="invalid_request_error"):
        self.reply(code, json.dumps({"error": {"message": msg, "type": typ, "param": None, "code": None}}))

    def authorized(self):
        key = self.server.api_key
        if not key or self.headers.get("Authorization") == "Bearer " + key:
            return True
        self.error(401, "Invalid API key", "authentication_error")
        return False

    def do_GET(self):
        if self.path in ("/", "/index.html"):
            with open(self.server.page, "rb") as f:
                self.reply(200, f.read(), "text/html; charset=utf-8")
        elif self.path == "/health":
            self.reply(200, '{"status":"ok"}')
        elif self.path == "/v1/models":
            if self.authorized():
                self.reply(200, json.dumps({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}))
        elif self.path == "/metrics":
            with lock:
                s = dict(stats)
            kv = min(1.0, 0.05 + 0.2 * s["running"])
            text = f"""# HELP cinfer:num_requests_running Requests running.
# TYPE cinfer:num_requests_running gauge
cinfer:num_requests_running{{model_name="mock-model"}} {s['running']}
# TYPE cinfer:num_requests_waiting gauge
cinfer:num_requests_waiting{{model_name="mock-model"}} 0
# TYPE cinfer:kv_cache_usage_perc gauge
cinfer:kv_cache_usage_perc{{model_name="mock-model"}} {kv}
# TYPE cinfer:generation_tokens counter
cinfer:generation_tokens_total{{model_name="mock-model"}} {s['gen']}
cinfer:prompt_tokens_total{{model_name="mock-model"}} {s['prompt']}
cinfer:prefix_cache_hits_total {s['hits']}
cinfer:prefix_cache_queries_total {s['queries']}
cinfer:num_preemptions_total {s['preempt']}
# TYPE cinfer:time_to_first_token_seconds histogram
cinfer:time_to_first_token_seconds_bucket{{le="0.1"}} {s['n']}
cinfer:time_to_first_token_seconds_bucket{{le="+Inf"}} {s['n']}
cinfer:time_to_first_token_seconds_sum {s['ttft_sum']}
cinfer:time_to_first_token_seconds_count {s['n']}
"""
            self.reply(200, text, "text/plain; version=0.0.4")
        else:
            self.error(404, "not found")

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        if self.path != "/v1/chat/completions":
            return self.error(404, "not found")
        if not self.authorized():
            return
        try:
            req = json.loads(raw)
            msgs = req["messages"]
            max_tokens = int(req.get("max_tokens", 64))
            temp = float(req.get("temperature", 1.0))
        except (ValueError, KeyError, TypeError) as e:
            return self.error(400, f"bad request: {e}")
        if temp < 0 or max_tokens < 1:
            return self.error(400, "temperature must be >= 0 and max_tokens >= 1")
        prompt_len = sum(len(str(m.get("content", "")).split()) for m in msgs)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with lock:
            stats["running"] += 1
            stats["prompt"] += prompt_len
            stats["queries"] += prompt_len
            stats["hits"] += prompt_len // 2
        try:
            t0 = time.monotonic()
            for i in range(max_tokens):
                time.sleep(self.server.delay)
                if i == 0:
                    with lock:
                        stats["ttft_sum"] += time.monotonic() - t0
                        stats["n"] += 1
                word = WORDS[i % len(WORDS)]
                chunk = {"object": "chat.completion.chunk", "model": "mock-model",
                         "choices": [{"index": 0, "delta": {"content": ("" if i == 0 else " ") + word},
                                      "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
                with lock:
                    stats["gen"] += 1
            end = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
            self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client pressed Stop
        finally:
            with lock:
                stats["running"] -= 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--delay", type=float, default=0.03, help="seconds between tokens")
    ap.add_argument("--page", default=PAGE, help="the page to serve at / (default src/server/webui.html)")
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.api_key = a.api_key
    srv.delay = a.delay
    srv.page = a.page
    print(f"mock cinfer on http://127.0.0.1:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
