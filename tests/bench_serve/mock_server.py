#!/usr/bin/env python3
"""A tiny OpenAI-compatible streaming server with known timings, for testing `cinfer bench serve`.

POST /v1/completions and /v1/chat/completions stream max_tokens tokens as SSE: the first token
--ttft-ms after the request body was read, then one every --itl-ms (token i is due at
ttft + i*itl; a chunk of --tokens-per-chunk tokens goes out when its last token is due).
Usage (prompt_tokens = --tokens-per-word * words + --bos, completion_tokens = max_tokens) comes in a
final chunk with empty choices unless --no-usage.  GET /v1/models names one model.  GET /stats returns
what the server saw: every request (arrival time, body fields, status, when each content chunk and
the last byte actually left, which may be later than due on a busy machine) and the peak number of
completion requests in flight.

Options that make the stream awkward on purpose (the client must cope): --crlf line endings,
--comments (": keep-alive" lines), --split N (write every event in N-byte pieces), --close (no
chunked encoding, Connection: close), --reject-field NAME (HTTP 400 when the body has field NAME),
--fail-every K / --fail-after S (HTTP 500 for every K-th completion request after the first S),
--error-event-every K (likewise, but status 200 and an error event after two tokens), --no-stream
(one JSON body instead of a stream).

Standard library only.  Prints "PORT <n>" on stdout once listening.
"""
import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

T0 = time.monotonic()


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.n_completion = 0
        self.n_500 = 0
        self.n_400 = 0
        self.requests = []


def make_handler(args, state):
    eol = "\r\n" if args.crlf else "\n"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0" if args.close else "HTTP/1.1"

        def setup(self):
            super().setup()
            # Each chunk must leave when written: Nagle + delayed ACK would add tens of ms to the gaps.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, fmt, *a):
            pass

        def send_json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
            elif self.path == "/stats":
                with state.lock:
                    self.send_json(200, {"peak": state.peak, "n_500": state.n_500, "n_400": state.n_400,
                                         "requests": state.requests})
            else:
                self.send_json(404, {"error": {"message": "not found"}})

        def write_raw(self, data):
            if args.close:
                self.wfile.write(data)
            else:
                self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

        def send_event(self, obj):
            text = ""
            if args.comments:
                text += ": keep-alive" + eol
            text += "data: " + ("[DONE]" if obj is None else json.dumps(obj)) + eol + eol
            data = text.encode()
            if args.split > 0:
                for i in range(0, len(data), args.split):
                    self.write_raw(data[i:i + args.split])
                    time.sleep(0.0005)
            else:
                self.write_raw(data)

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n)
            t_req = time.monotonic()
            chat = self.path.startswith("/v1/chat/completions")
            if not (chat or self.path.startswith("/v1/completions")):
                self.send_json(404, {"error": {"message": "no route " + self.path}})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self.send_json(400, {"error": {"message": "bad JSON"}})
                return
            prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
            max_tokens = int(body.get("max_tokens", 16))
            rec = {"t": t_req - T0, "max_tokens": max_tokens, "prompt": prompt, "model": body.get("model"),
                   "ignore_eos": body.get("ignore_eos"), "stream": body.get("stream"),
                   "stream_options": body.get("stream_options"), "temperature": body.get("temperature"),
                   "chat": chat, "status": 200, "sent": []}
            with state.lock:
                state.requests.append(rec)
                state.n_completion += 1
                idx = state.n_completion
            if args.reject_field and args.reject_field in body:
                rec["status"] = 400
                with state.lock:
                    state.n_400 += 1
                self.send_json(400, {"error": {"message": "unknown field: " + args.reject_field,
                                               "type": "invalid_request_error"}})
                return
            if args.fail_every > 0 and idx > args.fail_after and (idx - args.fail_after) % args.fail_every == 0:
                rec["status"] = 500
                with state.lock:
                    state.n_500 += 1
                self.send_json(500, {"error": {"message": "mock failure", "type": "server_error"}})
                return
            if args.no_stream:
                # A server that ignores stream=true and answers with one JSON body.
                text = "".join(" w%d" % t for t in range(max_tokens))
                self.send_json(200, {"id": "cmpl-mock", "object": "text_completion", "model": "mock-model",
                                     "choices": [{"index": 0, "text": text, "finish_reason": "length"}]})
                return
            error_event = (args.error_event_every > 0 and idx > args.fail_after
                           and (idx - args.fail_after) % args.error_event_every == 0)
            with state.lock:
                state.in_flight += 1
                state.peak = max(state.peak, state.in_flight)
            released = False
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                if args.close:
                    self.send_header("Connection", "close")
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                n_words = len(prompt.split())
                usage = {"prompt_tokens": args.tokens_per_word * n_words + args.bos,
                         "completion_tokens": max_tokens,
                         "total_tokens": args.tokens_per_word * n_words + args.bos + max_tokens}
                base = {"id": "cmpl-mock", "object": "chat.completion.chunk" if chat else "text_completion",
                        "created": int(time.time()), "model": "mock-model"}
                if chat:
                    # A role-only first chunk with empty content, as OpenAI sends: not a token.
                    self.send_event(dict(base, choices=[{"index": 0, "delta": {"role": "assistant",
                                                                               "content": ""},
                                                         "finish_reason": None}]))
                k = max(1, args.tokens_per_chunk)
                sent = rec["sent"]  # when each content chunk actually left, since the body was read
                i = 0
                while i < max_tokens:
                    j = min(i + k, max_tokens)
                    due = t_req + args.ttft_ms / 1000 + (j - 1) * args.itl_ms / 1000
                    dt = due - time.monotonic()
                    if dt > 0:
                        time.sleep(dt)
                    text = "".join(" w%d" % t for t in range(i, j))
                    fin = "length" if j == max_tokens else None
                    if chat:
                        choice = {"index": 0, "delta": {"content": text}, "finish_reason": fin}
                    else:
                        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": fin}
                    self.send_event(dict(base, choices=[choice]))
                    sent.append(time.monotonic() - t_req)
                    i = j
                    if error_event and i >= 2:
                        # vLLM's way of failing mid-stream: an error object in a data event, status 200.
                        rec["status"] = "error_event"
                        self.send_event({"error": {"message": "mock error event", "code": 500}})
                        break
                if not args.no_usage:
                    self.send_event(dict(base, choices=[], usage=usage))
                self.send_event(None)
                # Out of flight before the last bytes: the client may start its next request the moment
                # it has them, and must not be seen to exceed its cap because of this server's bookkeeping.
                with state.lock:
                    state.in_flight -= 1
                released = True
                if not args.close:
                    self.wfile.write(b"0\r\n\r\n")
                rec["end"] = time.monotonic() - t_req
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                if not released:
                    with state.lock:
                        state.in_flight -= 1

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: a burst of connections must not be refused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--tokens-per-word", type=int, default=2)
    ap.add_argument("--bos", type=int, default=1)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--crlf", action="store_true")
    ap.add_argument("--comments", action="store_true")
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--close", action="store_true")
    ap.add_argument("--reject-field", default="")
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--fail-after", type=int, default=0)
    ap.add_argument("--error-event-every", type=int, default=0)
    ap.add_argument("--no-stream", action="store_true")
    args = ap.parse_args()
    state = State()
    srv = Server(("127.0.0.1", args.port), make_handler(args, state))
    print("PORT %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
