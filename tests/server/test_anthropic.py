#!/usr/bin/env python3
"""`cinfer serve`'s Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens), checked against
Anthropic's published wire format, written here from the API reference (never from cinfer's code):

- the message object (id "msg_...", type, role, model, content [{"type":"text","text"}], stop_reason,
  stop_sequence, usage {input_tokens, output_tokens});
- the prompt: the Jinja template below (--chat-template-file) rendered with the conversation converted to
  OpenAI's shape (system first, tool_use -> assistant tool_calls whose arguments are the input object, which
  `{{ }}` writes as JSON with ", " and ": ", as @huggingface/jinja does,
  tool_result -> a "tool" message with tool_call_id, tools -> function tools): the expected prompt is written
  by hand; the request must cost exactly /tokenize's count of that prompt (usage.input_tokens and
  count_tokens) and, at temperature 0, generate exactly what /v1/completions generates from that prompt;
- an assistant prefill (a final assistant turn of text): the prompt ends with it and the answer continues it;
- earlier turns' thinking blocks: the template sees them as the message's reasoning_content (signature
  required, any value accepted), redacted_thinking blocks add nothing;
- stop reasons: max_tokens, stop_sequence (with the sequence, the text cut before its first occurrence, as
  the greedy text without stop sequences shows), end_turn (a grammar that completes);
- streaming: the event sequence message_start, content_block_start, ping, content_block_delta*,
  content_block_stop, message_delta, message_stop, each "event:" line naming its data's type, and the
  deltas joined equal to the non-streamed text;
- errors in Anthropic's shape {"type":"error","error":{"type","message"}} with the right status: missing
  max_tokens, bad role, image block, bad JSON, wrong or missing key (401 authentication_error, x-api-key
  and Authorization: Bearer both accepted, on every endpoint), unknown model (404 not_found_error).
Model: stories260K (SentencePiece, BOS added by the vocabulary).  Prints PASS/FAIL lines."""
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import Server, check, setup_ok  # noqa: E402

KEY = "anthropic-test-key"
NAME = "tiny"

TEMPLATE = """{%- for m in messages -%}
<{{ m.role }}>{% if m.reasoning_content is defined %}[thought: {{ m.reasoning_content }}]{% endif %}{{ m.content if m.content is not none else '(none)' }}
{%- if m.tool_calls is defined %}{% for c in m.tool_calls %} call {{ c.id }} {{ c.function.name }} {{ c.function.arguments }}{% endfor %}{% endif %}
{%- if m.tool_call_id is defined %} for {{ m.tool_call_id }}{% endif %}
{{ '\\n' }}
{%- endfor -%}
{%- if tools %}tools:{% for t in tools %} {{ t.function.name }}={{ t.function.description }}{% endfor %}{{ '\\n' }}{% endif -%}
{%- if add_generation_prompt %}<assistant>{% endif -%}
"""

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}

# A tool_use -> tool_result round trip and the prompt the template makes of it (by hand).
ROUND_TRIP = {
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "text", "text": "21 C and sunny"}]},
            {"type": "text", "text": "Thanks"}]},
    ],
    "tools": [WEATHER],
    "tool_choice": {"type": "auto"},
}
ROUND_TRIP_PROMPT = ("<system>Be brief.\nUse tools.\n"
                     "<user>Weather in Paris?\n"
                     "<assistant>Let me look. call toolu_01 get_weather {\"city\": \"Paris\"}\n"
                     "<tool>21 C and sunny for toolu_01\n"
                     "<user>Thanks\n"
                     "tools: get_weather=Weather of a city\n"
                     "<assistant>")

SIMPLE = {"messages": [{"role": "user", "content": "Once upon a time"}]}
SIMPLE_PROMPT = "<user>Once upon a time\n<assistant>"


def post(s, path, body, headers=None, key=KEY, raw=False):
    h = {"x-api-key": key} if key else {}
    h["anthropic-version"] = "2023-06-01"
    h.update(headers or {})
    data = body if raw else json.dumps(body).encode()
    st, hd, out = s.request("POST", path, data, headers=dict(h, **{"Content-Type": "application/json"}))
    try:
        return st, hd, json.loads(out)
    except ValueError:
        return st, hd, out


def message(s, body, **kw):
    return post(s, "/v1/messages", dict({"model": NAME}, **body), **kw)


def tokens(s, prompt):
    st, _, j = s.json("POST", "/tokenize", {"prompt": prompt}, key=KEY)
    assert st == 200, j
    return j["tokens"]


def completion(s, prompt, max_tokens):
    st, _, j = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                      key=KEY)
    assert st == 200, j
    return j["choices"][0]["text"]


def is_anthropic_error(st, j, status, etype):
    return (st == status and isinstance(j, dict) and set(j) == {"type", "error"} and j["type"] == "error"
            and j["error"].get("type") == etype and isinstance(j["error"].get("message"), str)
            and j["error"]["message"])


def parse_events(text):
    """[(event name, data object)] of an Anthropic SSE body."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        out.append((name, json.loads("\n".join(data))))
    return out


def stream(s, body, key=KEY):
    c = s.conn(60)
    try:
        c.request("POST", "/v1/messages", body=json.dumps(dict({"model": NAME, "stream": True}, **body)).encode(),
                  headers=dict({"Content-Type": "application/json"}, **({"x-api-key": key} if key else {})))
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        c.close()


def test_message(s):
    st, _, j = message(s, dict(SIMPLE, max_tokens=8, temperature=0))
    ok = st == 200 and isinstance(j, dict)
    check("message_status", ok, f"{st} {j}")
    if not ok:
        return
    check("message_shape", j.get("type") == "message" and j.get("role") == "assistant" and j.get("model") == NAME
          and isinstance(j.get("id"), str) and j["id"].startswith("msg_") and len(j["id"]) > 4
          and set(j) >= {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"},
          json.dumps(j))
    content = j.get("content")
    check("message_content", isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text"
          and isinstance(content[0].get("text"), str), json.dumps(content))
    check("message_max_tokens", j.get("stop_reason") == "max_tokens" and j.get("stop_sequence") is None
          and j["usage"].get("output_tokens") == 8, json.dumps(j))
    want = tokens(s, SIMPLE_PROMPT)
    check("message_input_tokens", j["usage"].get("input_tokens") == len(want),
          f"{j['usage']} vs {len(want)} tokens of {SIMPLE_PROMPT!r}")
    ref = completion(s, SIMPLE_PROMPT, 8)
    check("message_greedy_equals_completion", content[0]["text"] == ref, f"{content[0]['text']!r} vs {ref!r}")


def test_stop_reasons(s):
    _, _, j = message(s, dict(SIMPLE, max_tokens=40, temperature=0))
    full = j["content"][0]["text"]
    # a stop string from the middle of the greedy text: the answer ends before its first occurrence
    seq = None
    for a in range(4, len(full) - 4):
        cand = full[a:a + 3]
        if cand.strip() == cand and cand.isalpha():
            seq = cand
            break
    if not check("stop_sequence_found", seq is not None, repr(full)):
        return
    cut = full.find(seq)
    st, _, j = message(s, dict(SIMPLE, max_tokens=40, temperature=0, stop_sequences=["\u2603never", seq]))
    check("stop_sequence", st == 200 and j.get("stop_reason") == "stop_sequence" and j.get("stop_sequence") == seq
          and j["content"][0]["text"] == full[:cut], f"{seq!r} in {full!r}: {json.dumps(j)}")
    # a stop string that never comes: max_tokens, stop_sequence null
    st, _, j = message(s, dict(SIMPLE, max_tokens=40, temperature=0, stop_sequences=["\u2603never"]))
    check("stop_sequence_absent", st == 200 and j.get("stop_reason") == "max_tokens" and j.get("stop_sequence") is None
          and j["content"][0]["text"] == full, json.dumps(j))
    # the model ends its turn: a grammar that is complete after "Once upon"
    st, _, j = message(s, dict(SIMPLE, max_tokens=40, temperature=0, grammar='root ::= "Once upon"'))
    check("end_turn", st == 200 and j.get("stop_reason") == "end_turn" and j.get("stop_sequence") is None
          and j["content"][0]["text"] == "Once upon", json.dumps(j))
    # ... also with stop strings given that did not match
    st, _, j = message(s, dict(SIMPLE, max_tokens=40, temperature=0, grammar='root ::= "Once upon"',
                               stop_sequences=["zzz"]))
    check("end_turn_with_stop_sequences", st == 200 and j.get("stop_reason") == "end_turn"
          and j.get("stop_sequence") is None, json.dumps(j))
    return full, seq


def test_stream(s, full, seq):
    for name, extra, want_text, want_reason, want_seq in (
            ("stream_max_tokens", {}, full, "max_tokens", None),
            ("stream_stop_sequence", {"stop_sequences": [seq]}, full[:full.find(seq)], "stop_sequence", seq)):
        st, ctype, text = stream(s, dict(SIMPLE, max_tokens=40, temperature=0, **extra))
        if not check(name + "_status", st == 200 and ctype.startswith("text/event-stream"), f"{st} {ctype} {text[:300]}"):
            continue
        ev = parse_events(text)
        names = [n for n, _ in ev]
        check(name + "_event_names_match_types", all(n == d.get("type") for n, d in ev), str(ev[:4]))
        n_delta = names.count("content_block_delta")
        want = (["message_start", "content_block_start", "ping"] + ["content_block_delta"] * n_delta
                + ["content_block_stop", "message_delta", "message_stop"])
        check(name + "_event_order", names == want and n_delta > 0, str(names))
        start = ev[0][1].get("message", {})
        check(name + "_message_start", start.get("id", "").startswith("msg_") and start.get("role") == "assistant"
              and start.get("type") == "message" and start.get("content") == [] and start.get("model") == NAME
              and start.get("stop_reason") is None and start.get("usage", {}).get("input_tokens")
              == len(tokens(s, SIMPLE_PROMPT)), json.dumps(start))
        check(name + "_block_start", ev[1][1] == {"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}}, json.dumps(ev[1][1]))
        deltas = [d for n, d in ev if n == "content_block_delta"]
        check(name + "_deltas", all(d.get("index") == 0 and d["delta"].get("type") == "text_delta" for d in deltas),
              json.dumps(deltas[:3]))
        joined = "".join(d["delta"]["text"] for d in deltas)
        check(name + "_text_equals_non_streamed", joined == want_text, f"{joined!r} vs {want_text!r}")
        md = ev[-2][1]
        check(name + "_message_delta", md.get("delta", {}).get("stop_reason") == want_reason
              and md["delta"].get("stop_sequence") == want_seq and isinstance(md.get("usage", {}).get("output_tokens"), int)
              and md["usage"]["output_tokens"] > 0, json.dumps(md))
    # an error before the stream starts is a plain Anthropic error, not an event stream
    st, ctype, text = stream(s, {"messages": [{"role": "user", "content": "x"}]})
    check("stream_error_before_start", st == 400 and is_anthropic_error(st, json.loads(text), 400,
                                                                         "invalid_request_error"), text)


def test_count_tokens(s):
    want = len(tokens(s, SIMPLE_PROMPT))
    st, _, j = post(s, "/v1/messages/count_tokens", dict({"model": NAME}, **SIMPLE))
    check("count_tokens_simple", st == 200 and j == {"input_tokens": want}, f"{st} {j} vs {want}")
    want = len(tokens(s, ROUND_TRIP_PROMPT))
    st, _, j = post(s, "/v1/messages/count_tokens", dict({"model": NAME}, **ROUND_TRIP))
    check("count_tokens_round_trip", st == 200 and j == {"input_tokens": want}, f"{st} {j} vs {want}")
    st, _, j = post(s, "/v1/messages/count_tokens", {"model": NAME, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]})
    check("count_tokens_error_shape", is_anthropic_error(st, j, 400, "invalid_request_error"), f"{st} {j}")


def test_round_trip(s):
    st, _, j = message(s, dict(ROUND_TRIP, max_tokens=6, temperature=0))
    ok = check("round_trip_status", st == 200, f"{st} {j}")
    want = tokens(s, ROUND_TRIP_PROMPT)
    check("round_trip_renders_tool_result", ok and j["usage"]["input_tokens"] == len(want),
          f"{j.get('usage') if ok else j} vs {len(want)} tokens of {ROUND_TRIP_PROMPT!r}")
    ref = completion(s, ROUND_TRIP_PROMPT, 6)
    check("round_trip_prompt_exact", ok and j["content"][0]["text"] == ref, f"{j} vs {ref!r}")
    # tool_result content as a plain string, is_error, and an assistant turn of tool calls alone (content "")
    body = {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "oops",
                                      "is_error": True}]}],
        "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}}
    prompt = "<user>Hi\n<assistant> call t1 get_weather {}\n<tool>oops for t1\ntools: get_weather=Weather of a city\n<assistant>"
    st, _, j = post(s, "/v1/messages/count_tokens", dict({"model": NAME}, **body))
    check("round_trip_tool_calls_only", st == 200 and j.get("input_tokens") == len(tokens(s, prompt)), f"{st} {j}")


def test_thinking_history(s):
    """An earlier assistant turn's thinking blocks reach the template as that message's reasoning_content
    (joined by "\n", as text blocks are), with any signature; redacted_thinking blocks add nothing."""
    body = {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Greet back.", "signature": "from-elsewhere"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "thinking", "thinking": "Briefly.", "signature": ""},
            {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "Bye"}]}
    prompt = "<user>Hi\n<assistant>[thought: Greet back.\nBriefly.]Hello\n<user>Bye\n<assistant>"
    st, _, j = post(s, "/v1/messages/count_tokens", dict({"model": NAME}, **body))
    want = len(tokens(s, prompt))
    check("thinking_history_reasoning_content", st == 200 and j.get("input_tokens") == want,
          f"{st} {j} vs {want} tokens of {prompt!r}")
    st, _, j = message(s, dict(body, max_tokens=5, temperature=0))
    ref = completion(s, prompt, 5)
    check("thinking_history_generation", st == 200 and j["content"][0]["text"] == ref, f"{st} {j} vs {ref!r}")


def test_prefill(s):
    """A final assistant turn of text is a prefill: the prompt is the template's generation prompt followed
    by that text, and the answer continues it (the prefill itself is not repeated)."""
    body = {"messages": [{"role": "user", "content": "Tell me a story"},
                         {"role": "assistant", "content": [{"type": "text", "text": "Once upon a"}]}]}
    prompt = "<user>Tell me a story\n<assistant>Once upon a"
    st, _, j = post(s, "/v1/messages/count_tokens", dict({"model": NAME}, **body))
    want = len(tokens(s, prompt))
    check("prefill_count_tokens", st == 200 and j == {"input_tokens": want}, f"{st} {j} vs {want}")
    st, _, j = message(s, dict(body, max_tokens=6, temperature=0))
    ref = completion(s, prompt, 6)
    check("prefill_continues", st == 200 and j["content"][0]["text"] == ref and j["usage"]["input_tokens"] == want,
          f"{st} {j} vs {ref!r}")
    # A stop sequence right at the start, with the space its first token carries (a SentencePiece vocabulary
    # drops that space when a text starts with the token): found, and nothing is answered before it.
    seq = " " + ref.split()[0] if ref.startswith(" ") and ref.split() else None
    if check("prefill_space_first", seq is not None, repr(ref)):
        st, _, j = message(s, dict(body, max_tokens=6, temperature=0, stop_sequences=[seq]))
        check("stop_sequence_at_start", st == 200 and j.get("stop_reason") == "stop_sequence"
              and j.get("stop_sequence") == seq and j["content"][0]["text"] == "", f"{seq!r}: {j}")



def gbnf_literal(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_tool_use(s):
    """The model's tool call as tool_use blocks (Anthropic's shape): the template above shows no tool-call
    markers, so the answer is read as a generic JSON call (the whole text one object {"name", "arguments"});
    a grammar makes the random model write one.  Non-streamed: one tool_use block (id toolu_..., name, input
    the arguments as an object) and stop_reason tool_use; streamed: no text block, the tool_use block opened
    with input {} and its input as input_json_delta pieces that join into the same object; tool_choice none:
    the same text is plain text (end_turn)."""
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    body = dict(SIMPLE, max_tokens=60, temperature=0, tools=[WEATHER], grammar="root ::= " + gbnf_literal(call))
    st, _, j = message(s, body)
    content = j.get("content") if isinstance(j, dict) else None
    ok = (st == 200 and j.get("stop_reason") == "tool_use" and isinstance(content, list) and len(content) == 1
          and content[0].get("type") == "tool_use" and content[0].get("name") == "get_weather"
          and content[0].get("input") == {"city": "Paris"} and str(content[0].get("id", "")).startswith("toolu_")
          and len(content[0]["id"]) == 30)
    check("tool_use_block", ok, f"{st} {j}")
    st, ctype, text = stream(s, body)
    ev = parse_events(text) if st == 200 else []
    names = [n for n, _ in ev]
    starts = [d for n, d in ev if n == "content_block_start"]
    pieces = "".join(d["delta"].get("partial_json", "") for n, d in ev
                     if n == "content_block_delta" and d["delta"].get("type") == "input_json_delta")
    md = [d for n, d in ev if n == "message_delta"]
    ok = (st == 200 and names[0] == "message_start" and names[-1] == "message_stop" and len(starts) == 1
          and starts[0]["index"] == 0  # the id is the request's own: a second request draws another
          and starts[0]["content_block"] == dict(content[0], input={}, id=starts[0]["content_block"].get("id"))
          and str(starts[0]["content_block"]["id"]).startswith("toolu_")
          and json.loads(pieces or "null") == {"city": "Paris"}
          and [d["index"] for n, d in ev if n == "content_block_stop"] == [0]
          and md and md[0]["delta"]["stop_reason"] == "tool_use") if content else False
    check("tool_use_stream", ok, f"{st} {names} {starts} {pieces!r} {md}")
    st, _, j = message(s, dict(body, tool_choice={"type": "none"}))
    ok = (st == 200 and j.get("stop_reason") == "end_turn" and j.get("content") == [{"type": "text", "text": call}])
    check("tool_choice_none_is_text", ok, f"{st} {j}")


def test_tool_choice_forced(s):
    """tool_choice any / tool: the answer is a call (of that tool), its input valid against the tool's
    input_schema (python3-jsonschema), without a grammar in the request: the server enforces it as for
    /v1/chat/completions.  Bounded schemas, so a random model at temperature 1 finishes within max_tokens."""
    import jsonschema
    tools = [{"name": "pick", "description": "Pick a city",
              "input_schema": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                               "required": ["city"], "additionalProperties": False}},
             {"name": "count", "input_schema": {"type": "object", "properties": {
                 "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"],
                 "additionalProperties": False}}]
    schemas = {t["name"]: t["input_schema"] for t in tools}
    for label, tc, allowed in (("any", {"type": "any"}, {"pick", "count"}),
                               ("tool", {"type": "tool", "name": "count"}, {"count"})):
        bad = []
        for seed in range(4):
            st, _, j = message(s, dict(SIMPLE, max_tokens=120, temperature=1, top_k=0, tools=tools,
                                       tool_choice=tc, metadata={"user_id": str(seed)}))
            blocks = [b for b in j.get("content", [])] if st == 200 else []
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            why = None
            if st != 200 or j.get("stop_reason") != "tool_use" or len(uses) < 1 or uses[0]["name"] not in allowed:
                why = f"{st} {j}"
            else:
                try:
                    jsonschema.validate(uses[0]["input"], schemas[uses[0]["name"]])
                except jsonschema.ValidationError as e:
                    why = f"input invalid: {e.message}"
            if why:
                bad.append(f"seed {seed}: {why}")
        check(f"tool_choice_{label}_forced", not bad, "; ".join(bad[:2]))

def test_errors(s):
    base = dict(SIMPLE, max_tokens=4)
    cases = [
        ("error_missing_max_tokens", SIMPLE, 400, "invalid_request_error"),
        ("error_system_role", {"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}, 400,
         "invalid_request_error"),
        ("error_bad_role", {"messages": [{"role": "tool", "content": "x"}], "max_tokens": 4}, 400,
         "invalid_request_error"),
        ("error_image_block", {"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}],
            "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_document_block", {"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}],
            "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_tool_use_in_user", {"messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "a", "name": "b", "input": {}}]}], "max_tokens": 4}, 400,
         "invalid_request_error"),
        ("error_empty_messages", {"messages": [], "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_temperature", dict(base, temperature=1.5), 400, "invalid_request_error"),
        ("error_max_tokens_zero", dict(SIMPLE, max_tokens=0), 400, "invalid_request_error"),
        ("error_too_many_stop_sequences", dict(base, stop_sequences=["a", "b", "c", "d", "e"]), 400,
         "invalid_request_error"),
        ("error_tool_choice_unknown_tool", dict(base, tools=[WEATHER], tool_choice={"type": "tool", "name": "x"}),
         400, "invalid_request_error"),
        ("error_tool_without_schema", dict(base, tools=[{"name": "x"}]), 400, "invalid_request_error"),
        ("error_unknown_model", dict(base, model="claude-3-opus"), 404, "not_found_error"),
        ("error_tool_result_without_tool_use", {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "x"}]}],
            "tools": [WEATHER], "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_tool_result_first", {"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}],
            "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_thinking_unsigned", {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "a"}]},
            {"role": "user", "content": "b"}], "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_thinking_not_string", {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": 3, "signature": "s"}]},
            {"role": "user", "content": "b"}], "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_thinking_in_user", {"messages": [{"role": "user", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"}]}], "max_tokens": 4}, 400,
         "invalid_request_error"),
        ("error_redacted_thinking_without_data", {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "redacted_thinking"}, {"type": "text", "text": "a"}]},
            {"role": "user", "content": "b"}], "max_tokens": 4}, 400, "invalid_request_error"),
        ("error_thinking_budget_below_1024", dict(base, max_tokens=2048,
                                                  thinking={"type": "enabled", "budget_tokens": 1023}), 400,
         "invalid_request_error"),
        ("error_thinking_budget_not_below_max_tokens", dict(base, max_tokens=1024,
                                                            thinking={"type": "enabled", "budget_tokens": 1024}),
         400, "invalid_request_error"),
        ("error_thinking_with_forced_tool", dict(base, max_tokens=2048, tools=[WEATHER], tool_choice={"type": "any"},
                                                 thinking={"type": "enabled", "budget_tokens": 1024}), 400,
         "invalid_request_error"),
    ]
    for name, body, status, etype in cases:
        st, _, j = message(s, body)
        check(name, is_anthropic_error(st, j, status, etype), f"{st} {j}")
    st, _, j = post(s, "/v1/messages", b'{"model": "tiny", "max_tokens": 4, "messages": [', raw=True)
    check("error_bad_json", is_anthropic_error(st, j, 400, "invalid_request_error"), f"{st} {j}")
    st, _, j = post(s, "/v1/messages", b'[1, 2]', raw=True)
    check("error_not_object", is_anthropic_error(st, j, 400, "invalid_request_error"), f"{st} {j}")
    # the key: wrong or missing -> 401 in Anthropic's shape under /v1/messages, OpenAI's elsewhere
    st, _, j = message(s, base, key="wrong")
    check("error_wrong_key", is_anthropic_error(st, j, 401, "authentication_error"), f"{st} {j}")
    st, _, j = message(s, base, key=None)
    check("error_missing_key", is_anthropic_error(st, j, 401, "authentication_error"), f"{st} {j}")
    st, _, j = post(s, "/v1/messages/count_tokens", {"model": NAME, **SIMPLE}, key="wrong")
    check("error_wrong_key_count_tokens", is_anthropic_error(st, j, 401, "authentication_error"), f"{st} {j}")
    st, _, j = message(s, base, key=None, headers={"Authorization": "Bearer " + KEY})
    check("bearer_key_accepted", st == 200 and j.get("type") == "message", f"{st} {j}")
    st, _, j = s.json("GET", "/v1/models", key=None)
    check("openai_endpoint_error_stays_openai", st == 401 and "error" in j and "type" not in j, f"{st} {j}")
    st, _, out = s.request("GET", "/v1/models", headers={"x-api-key": KEY})
    check("x_api_key_on_openai_endpoint", st == 200 and json.loads(out)["data"][0]["id"] == NAME, f"{st} {out[:200]}")
    st, _, j = post(s, "/v1/messages/nope", base)
    check("error_unknown_path", is_anthropic_error(st, j, 404, "not_found_error"), f"{st} {j}")
    st, _, out = s.request("GET", "/v1/messages", headers={"x-api-key": KEY})
    j = json.loads(out)
    check("error_wrong_method", is_anthropic_error(st, j, 405, "invalid_request_error"), f"{st} {j}")


def test_sigterm_in_flight():
    """SIGTERM with a stream and a non-streaming request running: the stream ends with an error event
    (Anthropic's shape, after the events so far), the other answers 503 overloaded_error."""
    s = Server()
    long = {"model": s_name(s), "max_tokens": 1500, "messages": [{"role": "user", "content": "Hi"}],
            "grammar": "root ::= [a-z]{1500}"}  # nothing can end it early
    results = [None, None]

    def streamer():
        try:
            results[0] = stream(s, dict(long, model=long["model"]), key=None)
        except Exception as e:  # noqa: BLE001
            results[0] = e

    def plain():
        try:
            results[1] = message(s, long, key=None)
        except Exception as e:  # noqa: BLE001
            results[1] = e

    threads = [threading.Thread(target=streamer), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and s.metrics().get("cinfer:num_requests_running", 0) < 2:
        time.sleep(0.01)
    rc, _ = s.stop()
    for t in threads:
        t.join(10)
    check("sigterm_exit_0", rc == 0, f"exit {rc}")
    r1 = results[1]
    check("sigterm_answers_overloaded", isinstance(r1, tuple) and is_anthropic_error(r1[0], r1[2], 503,
                                                                                     "overloaded_error"), repr(r1)[:300])
    r0 = results[0]
    ok = isinstance(r0, tuple) and r0[0] == 200
    ev = parse_events(r0[2]) if ok else []
    names = [n for n, _ in ev]
    check("sigterm_stream_error_event", ok and names[:3] == ["message_start", "content_block_start", "ping"]
          and names[-1] == "error" and "message_stop" not in names
          and is_anthropic_error(500, ev[-1][1], 500, "api_error"), repr(r0)[:300] + repr(ev[-2:]))


def s_name(s):
    st, _, j = s.json("GET", "/v1/models")
    return j["data"][0]["id"]


def main():
    if not setup_ok("anthropic"):
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.jinja")
        with open(path, "w") as f:
            f.write(TEMPLATE)
        s = Server("--chat-template-file", path, "--api-key", KEY, "--served-model-name", NAME)
        try:
            test_message(s)
            got = test_stop_reasons(s)
            if got:
                test_stream(s, *got)
            test_count_tokens(s)
            test_round_trip(s)
            test_thinking_history(s)
            test_prefill(s)
            test_tool_use(s)
            test_tool_choice_forced(s)
            test_errors(s)
        finally:
            rc, _ = s.stop()
        check("server_exit", rc == 0, f"exit {rc}")
    test_sigterm_in_flight()
    server_util.check_no_sanitizer_report("no_sanitizer_report")
    print(f"{server_util.failures} failure(s)")
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
