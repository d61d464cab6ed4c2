#!/usr/bin/env python3
"""`cinfer serve` through raw HTTP (http.client): every endpoint, the OpenAI response and SSE shapes, every
error status with its OpenAI error body, 16 concurrent streams against the same requests run one at a time,
a client that disconnects mid-stream (its sequence must be freed: /metrics back to zero), the in-flight cap
(429), and SIGTERM (exit 0, promptly, with requests in flight).

Expected texts come from the model's own documentation (shared/models/MANIFEST.md: the greedy llama2.c
output of stories260K from BOS), never from cinfer.  Prints PASS/FAIL lines."""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import Server, check, check_no_sanitizer_report, setup_ok  # noqa: E402

KEY = "test-key-0123456789"
# MANIFEST.md: greedy decoding of stories260K from BOS (60 tokens), computed with llama2.c.
GREEDY_IDS = [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
              410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
              266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415]
GREEDY_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
               "she saw a big, red ball. She wanted to play with it, but it was too high")

def error_shape(body):
    e = body.get("error") if isinstance(body, dict) else None
    return isinstance(e, dict) and all(k in e for k in ("message", "type", "param", "code")) and \
        isinstance(e["message"], str) and e["message"] != ""


def expect_error(s, name, method, path, body, status, param=None, code=None, key=KEY, headers=None):
    st, hd, data = s.request(method, path, body, key=key, headers=headers)
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    ok = st == status and error_shape(j)
    if ok and param is not None:
        ok = j["error"]["param"] == param
    if ok and code is not None:
        ok = j["error"]["code"] == code
    check(name, ok, f"status {st} (want {status}), body {data[:300]!r}")
    return st, hd, j


def completion(s, body, key=KEY):
    st, hd, j = s.json("POST", "/v1/completions", body, key=key)
    if st != 200:
        raise AssertionError(f"status {st}: {j}")
    return j


def test_basics(s):
    st, hd, j = s.json("GET", "/health")
    check("health_ok", st == 200 and j == {"status": "ok"}, f"{st} {j}")
    st, hd, j = s.json("GET", "/v1/models", key=KEY)
    m = j["data"][0] if st == 200 and j.get("data") else {}
    check("models_list", st == 200 and j.get("object") == "list" and m.get("id") == "tiny-stories" and
          m.get("owned_by") == "cinfer" and m.get("max_model_len") == 2048 and m.get("object") == "model", f"{st} {j}")
    st, hd, j = s.json("GET", "/v1/models/tiny-stories", key=KEY)
    check("models_one", st == 200 and j.get("id") == "tiny-stories", f"{st} {j}")
    st, hd, data = s.request("GET", "/")
    check("webui_page", st == 200 and hd.get("content-type", "").startswith("text/html") and b"<html" in data,
          f"{st} {hd.get('content-type')}")
    st, hd, data = s.request("GET", "/metrics")
    check("metrics_text", st == 200 and hd.get("content-type") == "text/plain; version=0.0.4" and
          b"cinfer:num_requests_running" in data and b"cinfer:kv_cache_usage_perc" in data,
          f"{st} {hd.get('content-type')}")


def test_tokenize(s):
    st, hd, j = s.json("POST", "/tokenize", {"prompt": "Once upon a time"}, key=KEY)
    check("tokenize", st == 200 and j.get("tokens") == [1] + GREEDY_IDS[:4] and j.get("count") == 5 and
          j.get("max_model_len") == 2048, f"{st} {j}")
    st, hd, j = s.json("POST", "/tokenize", {"prompt": "Once upon a time", "add_special_tokens": False}, key=KEY)
    check("tokenize_no_bos", st == 200 and j.get("tokens") == GREEDY_IDS[:4], f"{st} {j}")
    st, hd, j = s.json("POST", "/detokenize", {"tokens": [1] + GREEDY_IDS}, key=KEY)
    check("detokenize", st == 200 and j.get("prompt") == GREEDY_TEXT, f"{st} {j}")
    # chatml (the model has no template): <|im_start|> is no token of this vocabulary, so only check the count.
    st, hd, j = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]}, key=KEY)
    check("tokenize_messages", st == 200 and j.get("count") == len(j.get("tokens", [])) > 3, f"{st} {j}")


def test_completions(s):
    j = completion(s, {"model": "tiny-stories", "prompt": [1], "max_tokens": 60, "temperature": 0})
    c = j["choices"][0]
    check("completion_greedy_matches_reference", c["text"] == GREEDY_TEXT, repr(c["text"]))
    check("completion_shape", j["object"] == "text_completion" and j["id"].startswith("cmpl-") and
          isinstance(j["created"], int) and j["model"] == "tiny-stories" and c["index"] == 0 and
          c["finish_reason"] == "length" and c["logprobs"] is None, json.dumps(j)[:300])
    check("completion_usage", j["usage"] == {"prompt_tokens": 1, "completion_tokens": 60, "total_tokens": 61},
          str(j["usage"]))
    # The text prompt gets BOS: the same greedy continuation.
    j = completion(s, {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0})
    check("completion_text_prompt", len(j["choices"][0]["text"]) > 20 and
          GREEDY_TEXT.startswith("Once upon a time" + j["choices"][0]["text"]), repr(j["choices"][0]["text"]))
    check("completion_default_max_tokens_16", j["usage"]["prompt_tokens"] == 5 and
          completion(s, {"prompt": [1], "temperature": 0})["usage"]["completion_tokens"] == 16, str(j["usage"]))
    # Stop strings: cut where the text first holds them, the stop itself never shown; across token boundaries.
    for name, stop, want in (("stop_string", " girl", "Once upon a time, there was a little"),
                             ("stop_across_tokens", "le gi", "Once upon a time, there was a litt"),
                             ("stop_list", ["zzz", "Lily", "park"], "Once upon a time, there was a little girl named ")):
        j = completion(s, {"prompt": [1], "max_tokens": 60, "temperature": 0, "stop": stop})
        c = j["choices"][0]
        check(name, c["text"] == want and c["finish_reason"] == "stop", f"{c['text']!r} {c['finish_reason']}")
    # Several prompts × n: one choice per (prompt, sample), indexed in that order.
    j = completion(s, {"prompt": ["Once upon", [1, 403]], "max_tokens": 3, "temperature": 0, "n": 2,
                       "echo": True})
    texts = [c["text"] for c in j["choices"]]
    check("prompts_times_n", [c["index"] for c in j["choices"]] == [0, 1, 2, 3] and
          texts[0] == texts[1] and texts[2] == texts[3] and texts[0].startswith("Once upon a time") and
          texts[2].startswith("Once upon a") and j["usage"]["completion_tokens"] == 12 and
          j["usage"]["prompt_tokens"] == 3 + 2, f"{texts} {j['usage']}")
    # Sampling: the same seed gives the same text; n samples use seed, seed+1, ... so they differ.
    body = {"prompt": [1], "max_tokens": 24, "temperature": 1.0, "seed": 1234, "n": 2}
    a, b = completion(s, body), completion(s, body)
    ta, tb = [c["text"] for c in a["choices"]], [c["text"] for c in b["choices"]]
    check("seed_reproducible", ta == tb and ta[0] != ta[1], f"{ta} {tb}")
    # logit_bias -100 bans a token: the greedy first token (403, "Once") can no longer come first.
    j = completion(s, {"prompt": [1], "max_tokens": 3, "temperature": 0, "logit_bias": {"403": -100},
                       "logprobs": 0})
    check("logit_bias_ban", j["choices"][0]["logprobs"]["tokens"][0] != "Once" and
          not j["choices"][0]["text"].startswith("Once"), repr(j["choices"][0]["text"]))
    j = completion(s, {"prompt": [1], "max_tokens": 2, "temperature": 0, "logit_bias": {"261": 100}})
    check("logit_bias_force", j["choices"][0]["text"] == "a a", repr(j["choices"][0]["text"]))
    # Logprobs (completions shape): the greedy token is the most likely of its alternatives.
    j = completion(s, {"prompt": [1], "max_tokens": 5, "temperature": 0, "logprobs": 3})
    lp = j["choices"][0]["logprobs"]
    ok = lp and len(lp["tokens"]) == 5 and len(lp["token_logprobs"]) == 5 and len(lp["top_logprobs"]) == 5
    ok = ok and "".join(lp["tokens"]) == j["choices"][0]["text"] and lp["text_offset"][0] == 0
    for i in range(5 if ok else 0):
        top = lp["top_logprobs"][i]
        ok = ok and 3 <= len(top) <= 4 and lp["token_logprobs"][i] <= 0 and \
            abs(max(top.values()) - lp["token_logprobs"][i]) < 1e-6 and top.get(lp["tokens"][i]) is not None
    check("completion_logprobs", ok, json.dumps(lp)[:400])


def test_chat(s):
    body = {"model": "tiny-stories", "messages": [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Tell a story."}],
            "max_tokens": 12, "temperature": 0}
    st, hd, j = s.json("POST", "/v1/chat/completions", body, key=KEY)
    c = j["choices"][0] if st == 200 else {}
    check("chat_shape", st == 200 and j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-") and
          c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str) and
          c["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 12, json.dumps(j)[:300])
    # The prompt is the chatml text of the messages (the model has no template of its own).
    st2, hd2, t = s.json("POST", "/tokenize", {"messages": body["messages"]}, key=KEY)
    check("chat_prompt_is_template", st2 == 200 and j["usage"]["prompt_tokens"] == t["count"], f"{j['usage']} {t}")
    st3, hd3, raw = s.json("POST", "/tokenize", {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                                 "Tell a story.<|im_end|>\n<|im_start|>assistant\n"}, key=KEY)
    check("chat_template_chatml", st3 == 200 and raw["tokens"] == t["tokens"], f"{raw} {t}")
    # Content as a list of text parts, max_completion_tokens, and a default max_tokens of the rest of the context.
    body2 = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Tell a story."}]}],
             "max_completion_tokens": 3, "temperature": 0}
    st, hd, j = s.json("POST", "/v1/chat/completions", body2, key=KEY)
    check("chat_content_parts", st == 200 and j["usage"]["completion_tokens"] <= 3, f"{st} {j}")
    body3 = {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0, "logprobs": True, "top_logprobs": 2,
             "max_tokens": 4}
    st, hd, j = s.json("POST", "/v1/chat/completions", body3, key=KEY)
    lp = j["choices"][0]["logprobs"]["content"] if st == 200 else []
    ok = st == 200 and len(lp) == 4
    for e in lp:
        ok = ok and set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 2 and \
            e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"] and \
            abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-6 and bytes(e["bytes"]) == e["token"].encode()
    check("chat_logprobs", ok, json.dumps(j)[:400])


def test_streaming(s):
    st, events, done = s.stream("/v1/completions", {"prompt": [1], "max_tokens": 60, "temperature": 0,
                                                    "stream": True, "stream_options": {"include_usage": True}},
                                key=KEY)
    text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices")]
    usage = [e for e in events if e.get("usage")]
    check("stream_completion_text", st == 200 and done and text == GREEDY_TEXT, repr(text))
    check("stream_completion_finish", finish and finish[-1] == "length" and all(f is None for f in finish[:-1]),
          str(finish[-3:]))
    check("stream_usage_chunk", len(usage) == 1 and usage[0]["choices"] == [] and events[-1] is usage[0] and
          usage[0]["usage"] == {"prompt_tokens": 1, "completion_tokens": 60, "total_tokens": 61}, str(usage))
    body = {"messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 10, "temperature": 0}
    st0, hd0, whole = s.json("POST", "/v1/chat/completions", body, key=KEY)
    st, events, done = s.stream("/v1/chat/completions", dict(body, stream=True), key=KEY)
    deltas = [e["choices"][0]["delta"] for e in events]
    check("stream_chat_role_first", st == 200 and done and deltas[0].get("role") == "assistant" and
          all("role" not in d for d in deltas[1:]) and events[0]["object"] == "chat.completion.chunk", str(deltas[:2]))
    text = "".join(d.get("content", "") for d in deltas)
    check("stream_chat_equals_nonstream", text == whole["choices"][0]["message"]["content"] and
          events[-1]["choices"][0]["finish_reason"] == "length", f"{text!r} vs {whole['choices'][0]}")
    st, events, done = s.stream("/v1/completions", {"prompt": [1], "max_tokens": 60, "temperature": 0,
                                                    "stream": True, "stop": " girl"}, key=KEY)
    text = "".join(e["choices"][0]["text"] for e in events)
    check("stream_stop_not_leaked", done and text == "Once upon a time, there was a little" and
          events[-1]["choices"][0]["finish_reason"] == "stop", repr(text))


def test_errors(s):
    expect_error(s, "error_401_no_key", "GET", "/v1/models", None, 401, code="invalid_api_key", key=None)
    expect_error(s, "error_401_wrong_key", "POST", "/v1/completions", {"prompt": "x"}, 401, key=KEY[:-1] + "X")
    expect_error(s, "error_401_longer_key", "GET", "/v1/models", None, 401, key=KEY + "0")
    st, hd, j = s.json("GET", "/health")
    check("health_open_without_key", st == 200, str(st))
    expect_error(s, "error_400_bad_json", "POST", "/v1/completions", b'{"prompt": "x",', 400)
    expect_error(s, "error_400_not_object", "POST", "/v1/completions", b'[1, 2]', 400)
    expect_error(s, "error_400_temperature", "POST", "/v1/completions", {"prompt": "x", "temperature": 7}, 400,
                 param="temperature")
    expect_error(s, "error_400_n", "POST", "/v1/completions", {"prompt": "x", "n": 17}, 400, param="n")
    expect_error(s, "error_400_max_tokens_type", "POST", "/v1/completions", {"prompt": "x", "max_tokens": "5"},
                 400, param="max_tokens")
    expect_error(s, "error_400_max_tokens_over_context", "POST", "/v1/completions",
                 {"prompt": "x", "max_tokens": 5000}, 400, param="max_tokens")
    expect_error(s, "error_400_missing_prompt", "POST", "/v1/completions", {"max_tokens": 5}, 400, param="prompt")
    expect_error(s, "error_400_token_out_of_vocab", "POST", "/v1/completions", {"prompt": [1, 512]}, 400,
                 param="prompt")
    expect_error(s, "error_400_stop_count", "POST", "/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]},
                 400, param="stop")
    expect_error(s, "error_400_stop_length", "POST", "/v1/completions", {"prompt": "x", "stop": "s" * 257}, 400,
                 param="stop")
    expect_error(s, "error_400_logit_bias_key", "POST", "/v1/completions", {"prompt": "x", "logit_bias": {"foo": 1}},
                 400, param="logit_bias")
    expect_error(s, "error_400_logit_bias_value", "POST", "/v1/completions",
                 {"prompt": "x", "logit_bias": {"5": 101}}, 400, param="logit_bias")
    expect_error(s, "error_400_logit_bias_size", "POST", "/v1/completions",
                 {"prompt": "x", "logit_bias": {str(i): 1 for i in range(301)}}, 400, param="logit_bias")
    expect_error(s, "error_400_logprobs", "POST", "/v1/completions", {"prompt": "x", "logprobs": 21}, 400,
                 param="logprobs")
    expect_error(s, "error_400_top_logprobs_alone", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, param="top_logprobs")
    expect_error(s, "error_400_messages_missing", "POST", "/v1/chat/completions", {"prompt": "x"}, 400,
                 param="messages")
    expect_error(s, "error_400_message_role", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "tool", "content": "x"}]}, 400, param="messages[0].tool_call_id")
    expect_error(s, "error_400_too_many_prompts", "POST", "/v1/completions", {"prompt": ["x"] * 33}, 400,
                 param="prompt")
    st, hd, j = expect_error(s, "error_400_context_length", "POST", "/v1/completions",
                             {"prompt": "Once upon a time", "max_tokens": 2044}, 400, code="context_length_exceeded")
    check("error_context_message_names_lengths", j and "2048" in j["error"]["message"] and
          "2044" in j["error"]["message"] and "5" in j["error"]["message"], str(j))
    expect_error(s, "error_400_chat_context_length", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "word " * 2100}]}, 400, code="context_length_exceeded")
    expect_error(s, "error_404_route", "GET", "/v1/nothing", None, 404)
    expect_error(s, "error_404_model", "POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404,
                 param="model", code="model_not_found")
    expect_error(s, "error_404_model_retrieve", "GET", "/v1/models/gpt-4", None, 404, code="model_not_found")
    st, hd, j = expect_error(s, "error_405", "GET", "/v1/completions", None, 405)
    check("error_405_allow_header", hd.get("allow") == "POST", str(hd))
    st, hd, j = expect_error(s, "error_405_post_health", "POST", "/health", b"{}", 405)
    check("error_405_allow_get", hd.get("allow") == "GET, HEAD", str(hd))
    big = b'{"prompt": "' + b"a" * (1 << 21) + b'"}'
    expect_error(s, "error_413_body", "POST", "/v1/completions", big, 413, code="request_too_large")
    # The server stays healthy after all of it.
    check("alive_after_errors", s.json("POST", "/v1/completions", {"prompt": [1], "max_tokens": 2}, key=KEY)[0] == 200)


def one_stream(s, body, out, i):
    try:
        st, events, done = s.stream("/v1/completions", body, key=KEY, timeout=120)
        out[i] = "".join(e["choices"][0]["text"] for e in events) if st == 200 and done else f"status {st}"
    except Exception as e:  # reported as a mismatch
        out[i] = f"exception {e!r}"


def test_concurrency(s):
    starts = ["Once upon a time", "One day", "Lily and Ben", "The cat", "Tom had a big", "The sun was",
              "There was a", "A little bird", "Sam liked to", "Mom said", "The dog ran", "In the park",
              "Sue found a", "The tree was", "Max wanted to", "It was a"]
    bodies = [{"prompt": p, "max_tokens": 48, "temperature": 0, "stream": True, "ignore_eos": True} for p in starts]
    seq = []
    for b in bodies:
        j = completion(s, dict(b, stream=False))
        seq.append(j["choices"][0]["text"])
    out = [None] * len(bodies)
    threads = [threading.Thread(target=one_stream, args=(s, b, out, i)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [i for i in range(len(bodies)) if out[i] != seq[i]]
    check("concurrent_16_streams_equal_sequential", not bad,
          "; ".join(f"{starts[i]!r}: {out[i]!r} != {seq[i]!r}" for i in bad[:3]))


def wait_idle(s, timeout):
    t0 = time.monotonic()
    m = {}
    while time.monotonic() - t0 < timeout:
        m = s.metrics()
        if m.get("cinfer:num_requests_running") == 0 and m.get("cinfer:kv_cache_usage_perc") == 0:
            return True, m
        time.sleep(0.05)
    return False, m


def test_disconnect(s):
    ok, m0 = wait_idle(s, 5)
    check("idle_before_disconnect", ok, str(m0))
    gen0 = m0.get("cinfer:generation_tokens_total", 0)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": [1], "max_tokens": 2000, "temperature": 0, "ignore_eos": True,
                       "stream": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    m1 = s.metrics()
    check("running_during_stream", got.startswith(b"HTTP/1.1 200") and m1.get("cinfer:num_requests_running") == 1 and
          m1.get("cinfer:kv_cache_usage_perc", 0) > 0, f"{got[:80]!r} {m1.get('cinfer:num_requests_running')}")
    sock.close()
    t0 = time.monotonic()
    ok, m2 = wait_idle(s, 3)
    gen = m2.get("cinfer:generation_tokens_total", 0) - gen0
    check("disconnect_frees_sequence", ok and gen < 2000,
          f"running {m2.get('cinfer:num_requests_running')} kv {m2.get('cinfer:kv_cache_usage_perc')} "
          f"generated {gen} after {time.monotonic() - t0:.2f}s")


def test_disconnect_nonstream(s):
    """A client that gives up on a non-streaming request cancels it too."""
    ok, m0 = wait_idle(s, 5)
    gen0 = m0.get("cinfer:generation_tokens_total", 0)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": [1], "max_tokens": 2000, "temperature": 0, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metrics().get("cinfer:num_requests_running", 0) < 1:
        time.sleep(0.01)
    sock.close()
    ok, m2 = wait_idle(s, 3)
    gen = m2.get("cinfer:generation_tokens_total", 0) - gen0
    check("disconnect_nonstream_frees_sequence", ok and gen < 2000,
          f"running {m2.get('cinfer:num_requests_running')} kv {m2.get('cinfer:kv_cache_usage_perc')} generated {gen}")


def test_limits_server():
    """A second server: one request in flight at most, one sequence, a 1 s idle timeout, a 700-token context."""
    s = Server("--max-requests", "1", "--max-seqs", "1", "--timeout", "1", "--allow-origin", "http://ui.test",
               "--ctx", "700")
    try:
        result = {}

        def long_request():
            result["r"] = s.json("POST", "/v1/completions", {"prompt": [1], "max_tokens": 600, "temperature": 0,
                                                             "ignore_eos": True}, timeout=120)

        t = threading.Thread(target=long_request)
        t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and s.metrics().get("cinfer:num_requests_running", 0) < 1:
            time.sleep(0.01)
        st, hd, j = expect_error(s, "error_429_in_flight", "POST", "/v1/completions", {"prompt": "x"}, 429,
                                 code="rate_limit_exceeded", key=None)
        check("error_429_retry_after", hd.get("retry-after") == "1", str(hd))
        t.join()
        st, hd, j = result.get("r", (0, {}, {}))
        # It outlived the 1 s idle timeout: generating is not idleness.
        check("long_request_outlives_idle_timeout", st == 200 and j["usage"]["completion_tokens"] == 600, str(st))
        # Without max_tokens a chat answer may run to the end of the context: a long prompt leaves little of it.
        msgs = [{"role": "user", "content": "Once upon a time " * 140}]
        st, hd, t = s.json("POST", "/tokenize", {"messages": msgs})
        st, hd, j = s.json("POST", "/v1/chat/completions", {"messages": msgs, "temperature": 0})
        u = j.get("usage", {})
        check("chat_default_max_tokens", st == 200 and 500 < t["count"] < 700 and u.get("prompt_tokens") == t["count"]
              and (u.get("total_tokens") == 700 if j["choices"][0]["finish_reason"] == "length" else
                   u.get("total_tokens", 9999) < 700), f"{st} {t.get('count')} {u}")
        expect_error(s, "error_400_n_over_max_seqs", "POST", "/v1/completions", {"prompt": "x", "n": 2}, 400,
                     param="n", key=None)
        # An idle keep-alive connection is closed after the timeout.
        st, hd, data = s.request("OPTIONS", "/v1/chat/completions",
                                 headers={"Origin": "http://ui.test", "Access-Control-Request-Method": "POST"})
        check("cors_preflight", st == 204 and hd.get("access-control-allow-origin") == "http://ui.test" and
              "Authorization" in hd.get("access-control-allow-headers", ""), f"{st} {hd}")
        st, hd, data = s.request("GET", "/health")
        check("cors_header", hd.get("access-control-allow-origin") == "http://ui.test", str(hd))
        c = s.conn()
        c.request("GET", "/health")
        c.getresponse().read()
        time.sleep(2.5)
        closed = False
        try:
            c.sock.settimeout(2)
            closed = c.sock.recv(1) == b""
        except OSError:
            closed = True
        check("idle_connection_closed", closed, "still open")
        c.close()
    finally:
        rc, secs = s.stop()
    check("limits_server_exit", rc == 0, f"exit {rc}")


def test_sigterm_in_flight(s):
    """SIGTERM with a stream and a non-streaming request running: exit 0 promptly."""
    results = [None, None]

    def plain():
        try:
            results[1] = s.request("POST", "/v1/completions", {"prompt": [1], "max_tokens": 2000, "ignore_eos": True},
                                   key=KEY)
        except Exception as e:
            results[1] = e

    def streamer():
        try:
            results[0] = s.stream("/v1/completions", {"prompt": [1], "max_tokens": 2000, "ignore_eos": True,
                                                      "stream": True}, key=KEY)
        except Exception as e:
            results[0] = e

    threads = [threading.Thread(target=streamer), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metrics().get("cinfer:num_requests_running", 0) < 2:
        time.sleep(0.01)
    rc, secs = s.stop()
    for t in threads:
        t.join(10)
    check("sigterm_exit_0", rc == 0, f"exit {rc}")
    check("sigterm_prompt", secs < 5, f"{secs:.1f}s")
    st = results[1][0] if isinstance(results[1], tuple) else results[1]
    check("sigterm_answers_503", st == 503, f"the request in flight got {st!r}")
    r0 = results[0]
    check("sigterm_ends_stream", isinstance(r0, tuple) and r0[0] == 200 and r0[2] and r0[1] and
          "shutting down" in r0[1][-1].get("error", {}).get("message", ""), f"the stream in flight got {r0!r}"[:300])


def test_loading_health():
    """/health answers while the model loads (503) or after (200): never a refused connection."""
    s = Server("--api-key", KEY, wait_ready=False)
    try:
        st, hd, j = s.json("GET", "/health")
        check("health_during_startup", (st, j) in ((503, {"status": "loading"}), (200, {"status": "ok"})), f"{st} {j}")
    finally:
        rc, _ = s.stop()
    check("startup_server_exit", rc == 0, f"exit {rc}")


def test_default_kv_type():
    """Without --kv-type, serve's KV cache is f16 (llama.cpp's default; the other tests pass f32 explicitly)."""
    s = Server(kv_type=None)
    try:
        # The start-up lines are read on a thread: the pool line may arrive just after /health turns 200.
        deadline = time.monotonic() + 10
        while not any("KV pool" in line for line in s.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        kv = [line for line in s.lines if "KV pool" in line]
        check("serve_kv_type_default_f16", len(kv) == 1 and "(f16, 640 bytes per token)" in kv[0], " | ".join(kv))
        check("serve_args_no_kv_type", "--kv-type" not in s.args, str(s.args))
    finally:
        s.kill()


def main():
    if not setup_ok("server"):
        return 1
    t0 = time.monotonic()
    try:
        test_loading_health()
        s = Server("--api-key", KEY, "--served-model-name", "tiny-stories")
    except Exception as e:
        print(f"FAIL server_start: {e}")
        return 1
    try:
        for t in (test_basics, test_tokenize, test_completions, test_chat, test_streaming, test_errors,
                  test_concurrency, test_disconnect, test_disconnect_nonstream):
            try:
                t(s)
            except Exception as e:  # a crash of one group is one failure, the others still run
                check(t.__name__, False, f"exception {e!r}")
        test_sigterm_in_flight(s)
    finally:
        s.kill()
    for t in (test_limits_server, test_default_kv_type):
        try:
            t()
        except Exception as e:
            check(t.__name__, False, f"exception {e!r}")
    check_no_sanitizer_report("no_sanitizer_report")
    print(f"server tests took {time.monotonic() - t0:.1f}s")
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
