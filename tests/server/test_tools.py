#!/usr/bin/env python3
"""Tool calling and reasoning in /v1/chat/completions, end to end through `cinfer serve`.

A random-weight model never writes a tool call by itself, so each case forces the exact raw text a model
family writes (its published format, written out here by hand) with the request's `grammar` (a GBNF grammar
of that one string), under a chat template of that family: a Hermes/Qwen-style template written here (always),
and, when llama.cpp's source bundle from the pinned node-llama-cpp package is installed (build/npm, see
scripts/llamacpp-setup.sh), the real templates of Qwen3, Hermes 3, QwQ, Llama 3.1, Mistral Nemo, DeepSeek R1
and V3.1 and gpt-oss (the server tells the format from the template's text).  Checked, against expectations
written from OpenAI's chat-completions reference:

- message.tool_calls (id "call_" + 24 letters/digits, type "function", function.name, function.arguments a
  JSON string that parses to the forced arguments), content null (or the text before the calls),
  reasoning_content from the <think> block (or the analysis channel), finish_reason "tool_calls";
- streaming: the deltas (reasoning_content, content, tool_calls by index: id, type and name first, then
  arguments pieces) add up to exactly the non-streamed message, and the last chunk says "tool_calls";
- a round trip (assistant tool_calls, then a tool message answering it) renders into the prompt;
- tool_choice "none" hides the tools from the template and leaves the raw text in the content;
- --reasoning-format none leaves <think> in the content; without tools no call is parsed;
- bad requests: 400 with the parameter named.
Prints PASS/FAIL lines."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_util  # noqa: E402
from server_util import BIN, ROOT, STORIES, Server, check, check_no_sanitizer_report, setup_ok  # noqa: E402

NPM = os.environ.get("NPM_DIR", os.path.join(ROOT, "build", "npm"))
BUNDLE = os.path.join(NPM, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ARGS = {"city": "Paris"}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'

# A Hermes/Qwen-style template (Qwen2.5's shape: tools in the system prompt, <tool_call> blocks,
# <tool_response> for tool messages) that opens <think> when asked to.
HERMES = r"""{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
For each function call, return a json object within <tool_call></tool_call> XML tags.<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for tc in message.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if open_think is defined and open_think %}<think>
{% endif %}{% endif %}"""

DS = lambda s: "<\uff5ctool\u2581" + s + "\uff5c>"  # noqa: E731  DeepSeek's markers

# (template, raw output, content, reasoning, calls) -- calls as [(name, arguments dict)]
HERMES_CASES = [
    ("hermes_call", "<tool_call>\n" + CALL + "\n</tool_call>", None, None, [("get_weather", ARGS)]),
    ("hermes_text_two_calls", "Let me look.\n<tool_call>\n" + CALL + "\n</tool_call>\n<tool_call>\n"
     '{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>', "Let me look.", None,
     [("get_weather", ARGS), ("get_time", {"tz": "CET"})]),
    ("hermes_think_call", "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n" + CALL + "\n</tool_call>",
     None, "The user wants the weather.", [("get_weather", ARGS)]),
    ("hermes_malformed_is_text", "<tool_call>\n{\"name\": get_weather}\n</tool_call>",
     "<tool_call>\n{\"name\": get_weather}\n</tool_call>", None, []),
]

REAL_CASES = [  # (template file, case name, raw output, content, reasoning, calls, extra request fields)
    ("Qwen-Qwen3-0.6B", "qwen3_think_call", "<think>\nweather needed\n</think>\n\n<tool_call>\n" + CALL +
     "\n</tool_call>", None, "weather needed", [("get_weather", ARGS)], {}),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes3_call", "<tool_call>\n" + CALL + "\n</tool_call>",
     None, None, [("get_weather", ARGS)], {}),
    ("Qwen-QwQ-32B", "qwq_opened_think", "I should call the tool.\n</think>\n\n<tool_call>\n" + CALL +
     "\n</tool_call>", None, "I should call the tool.", [("get_weather", ARGS)],
     {"chat_template_kwargs": {"enable_thinking": True}}),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama31_json",
     '{"name": "get_weather", "parameters": {"city": "Paris"}}', None, None, [("get_weather", ARGS)], {}),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral_nemo",
     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]', None, None,
     [("get_weather", ARGS)], {}),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_r1",
     "Need the weather.\n</think>\n\n" + DS("calls\u2581begin") + DS("call\u2581begin") + "function" + DS("sep") +
     'get_weather\n```json\n{"city": "Paris"}\n```' + DS("call\u2581end") + DS("calls\u2581end"),
     None, "Need the weather.", [("get_weather", ARGS)], {"chat_template_kwargs": {"enable_thinking": True}}),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek_v31",
     DS("calls\u2581begin") + DS("call\u2581begin") + "get_weather" + DS("sep") + '{"city": "Paris"}' +
     DS("call\u2581end") + DS("calls\u2581end"), None, None, [("get_weather", ARGS)], {}),
    ("openai-gpt-oss-120b", "gpt_oss",
     "<|channel|>analysis<|message|>Weather lookup.<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
     None, "Weather lookup.", [("get_weather", ARGS)], {"reasoning_effort": "low"}),
]


def literal(s):
    """A GBNF string literal of s."""
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def request(raw, **extra):
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS,
            "grammar": "root ::= " + literal(raw), "max_tokens": 800, "temperature": 1, "seed": 7}
    body.update(extra)
    return body


ID = re.compile(r"^call_[A-Za-z0-9]{24}$")


def check_message(name, st, j, content, reasoning, calls):
    if not check(name + "_status", st == 200 and isinstance(j, dict) and "choices" in j, f"{st} {j}"):
        return None
    ch = j["choices"][0]
    msg = ch["message"]
    got = msg.get("tool_calls") or []
    ok = len(got) == len(calls)
    for g, (n, a) in zip(got, calls):
        ok = ok and g.get("type") == "function" and bool(ID.match(g.get("id", ""))) and \
            g["function"]["name"] == n and json.loads(g["function"]["arguments"]) == a
    check(name + "_tool_calls", ok, f"{got} want {calls}")
    want_content = content if (content is not None or not calls) else None
    check(name + "_content", msg.get("content") == (want_content if calls else (content or "")),
          f"{msg.get('content')!r} want {want_content!r}")
    check(name + "_reasoning", msg.get("reasoning_content") == reasoning,
          f"{msg.get('reasoning_content')!r} want {reasoning!r}")
    check(name + "_finish", ch["finish_reason"] == ("tool_calls" if calls else "stop"), ch["finish_reason"])
    return msg


def assemble(events):
    """The message a client rebuilds from chat chunks (OpenAI's documented accumulation)."""
    content, reasoning, calls, finish = None, None, {}, None
    for e in events:
        for ch in e.get("choices", []):
            d = ch.get("delta", {})
            if d.get("content") is not None:
                content = (content or "") + d["content"]
            if d.get("reasoning_content") is not None:
                reasoning = (reasoning or "") + d["reasoning_content"]
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"id": None, "type": None, "name": "", "arguments": ""})
                c["id"] = tc.get("id") or c["id"]
                c["type"] = tc.get("type") or c["type"]
                fn = tc.get("function") or {}
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return content, reasoning, [calls[k] for k in sorted(calls)], finish


def check_stream(name, srv, body, msg):
    st, events, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
    if not check(name + "_stream_status", st == 200 and done, f"{st} {events[:1]}"):
        return
    content, reasoning, calls, finish = assemble(events)
    want_calls = [(c["function"]["name"], c["function"]["arguments"], c["type"]) for c in msg.get("tool_calls") or []]
    got_calls = [(c["name"], c["arguments"], c["type"]) for c in calls]
    ids_ok = all(ID.match(c["id"] or "") for c in calls)
    check(name + "_stream_equals", (content or None) == (msg.get("content") or None) and
          reasoning == msg.get("reasoning_content") and got_calls == want_calls and ids_ok and
          finish == ("tool_calls" if want_calls else "stop"),
          f"stream {content!r} {reasoning!r} {calls} {finish} vs {msg}")
    # each call opens with its id, type and name and empty arguments, then the arguments follow
    firsts = {}
    for e in events:
        for ch in e.get("choices", []):
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                firsts.setdefault(tc["index"], tc)
    check(name + "_stream_call_heads", all("id" in f and f["function"].get("name") for f in firsts.values()),
          str(firsts))


def run_case(srv, name, raw, content, reasoning, calls, extra=None):
    body = request(raw, **(extra or {}))
    st, _, j = srv.json("POST", "/v1/chat/completions", body)
    msg = check_message(name, st, j, content, reasoning, calls)
    if msg is not None:
        check_stream(name, srv, body, msg)


def prompt_text(srv, body):
    st, _, t = srv.json("POST", "/tokenize", body)
    if st != 200:
        return None
    st, _, d = srv.json("POST", "/detokenize", {"tokens": t["tokens"]})
    return d.get("prompt") if st == 200 else None


def bad_requests(srv):
    user = [{"role": "user", "content": "hi"}]
    cases = [
        ("bad_tool_choice_unknown", {"messages": user, "tools": TOOLS,
                                     "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ("bad_tool_without_name", {"messages": user, "tools": [{"type": "function", "function": {"parameters": {}}}]},
         "tools[0].function.name"),
        ("bad_image_part", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
         "messages[0].content"),
        ("bad_tool_message_unmatched", {"messages": user + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}], "tools": TOOLS},
         "messages[2].tool_call_id"),
        ("bad_required_without_tools", {"messages": user, "tool_choice": "required"}, "tool_choice"),
    ]
    for name, body, param in cases:
        st, _, j = srv.json("POST", "/v1/chat/completions", body)
        err = j.get("error", {}) if isinstance(j, dict) else {}
        check(name, st == 400 and err.get("param") == param and err.get("type") == "invalid_request_error",
              f"{st} {j}")
    st, _, j = srv.json("POST", "/v1/chat/completions", cases[2][1])
    check("bad_image_part_named", "image_url" in j.get("error", {}).get("message", ""), str(j))



# tool_choice "required" / a named function, forced without any "grammar" of the request: the server builds
# one from the template's format and the tools' parameters schemas.  Bounded schemas, so a random model at
# temperature 1 finishes its call well within max_tokens.
FORCED_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": -50, "maximum": 99},
                                         "b": {"type": "boolean"}},
        "required": ["a", "b"], "additionalProperties": False}}},
]


def test_tool_choice_forced(srv):
    import jsonschema  # python3-jsonschema (Debian): the independent judge of the arguments
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in FORCED_TOOLS}
    base = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": FORCED_TOOLS,
            "max_tokens": 300, "temperature": 1, "parallel_tool_calls": False}

    def judge(j, allowed):
        ch = j["choices"][0]
        calls = ch["message"].get("tool_calls") or []
        if ch["finish_reason"] != "tool_calls" or len(calls) != 1 or calls[0]["function"]["name"] not in allowed:
            return f"finish {ch['finish_reason']}, calls {calls}, content {ch['message'].get('content')!r}"
        name = calls[0]["function"]["name"]
        try:
            jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), schemas[name])
        except (ValueError, jsonschema.ValidationError) as e:
            return f"arguments of {name} invalid: {e}"
        return None

    for choice, allowed in ((("named", {"type": "function", "function": {"name": "add"}}), {"add"}),
                            (("named_weather", {"type": "function", "function": {"name": "get_weather"}}),
                             {"get_weather"}),
                            (("required", "required"), {"add", "get_weather"})):
        label, tc = choice
        bad, seen = [], set()
        for seed in range(6):
            st, _, j = srv.json("POST", "/v1/chat/completions", dict(base, tool_choice=tc, seed=seed))
            why = judge(j, allowed) if st == 200 else f"{st} {j}"
            if why:
                bad.append(f"seed {seed}: {why}")
            else:
                seen.add(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"])
        check(f"tool_choice_{label}_forced", not bad, "; ".join(bad[:3]))
        if label == "required":
            check("tool_choice_required_any_tool", seen == {"add", "get_weather"}, str(seen))
    # streamed: the deltas add up to the non-streamed forced call
    body = dict(base, tool_choice={"type": "function", "function": {"name": "add"}}, seed=3)
    st, _, j = srv.json("POST", "/v1/chat/completions", body)
    st2, ev, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
    content, _, calls, finish = assemble(ev) if st2 == 200 else (None, None, [], None)
    m = j["choices"][0]["message"] if st == 200 else {}
    check("tool_choice_forced_stream_equals", done and finish == "tool_calls" and
          [(c["name"], c["arguments"]) for c in calls] ==
          [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])], f"{calls} {m}")
    # control: the same requests with tool_choice auto are not calls (the force is what makes them)
    n_calls = 0
    for seed in range(6):
        st, _, j = srv.json("POST", "/v1/chat/completions", dict(base, tool_choice="auto", seed=seed))
        n_calls += st == 200 and bool(j["choices"][0]["message"].get("tool_calls"))
    check("tool_choice_auto_control", n_calls == 0, f"{n_calls} of 6 auto answers were calls")
    # a parameters schema the compiler cannot honour: 400 naming tools, only when the call is forced
    odd = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer", "multipleOf": 0.5}}, "required": ["x"]}}}]
    st, _, j = srv.json("POST", "/v1/chat/completions", dict(base, tools=odd, tool_choice="required"))
    err = j.get("error", {}) if isinstance(j, dict) else {}
    check("tool_choice_unenforceable_schema_400", st == 400 and err.get("param") == "tools" and
          "multipleOf" in err.get("message", ""), f"{st} {j}")
    st, _, j = srv.json("POST", "/v1/chat/completions", dict(base, tools=odd, tool_choice="auto", seed=1))
    check("tool_choice_auto_ignores_schema", st == 200, f"{st} {j}")

def main():
    if not setup_ok("tools"):
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hermes.jinja")
        with open(path, "w") as f:
            f.write(HERMES)
        with Server("--chat-template-file", path) as srv:
            for case in HERMES_CASES:
                run_case(srv, *case)
            test_tool_choice_forced(srv)
            # n = 2 with logprobs and usage: each choice's deltas add up to its message, every token's logprob
            # entry is streamed (on chunks whose text is held back too)
            body = request(HERMES_CASES[2][1], n=2, logprobs=True, top_logprobs=2,
                           stream_options={"include_usage": True})
            st, _, j = srv.json("POST", "/v1/chat/completions", body)
            st2, ev, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
            ok = st == 200 and st2 == 200 and done
            for idx in range(2 if ok else 0):
                content, reasoning, calls, finish = assemble(
                    [dict(e, choices=[c for c in e["choices"] if c["index"] == idx]) for e in ev])
                m = j["choices"][idx]["message"]
                ok = ok and not content and m["content"] is None and reasoning == m["reasoning_content"] and \
                    [(c["name"], c["arguments"]) for c in calls] == \
                    [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]] and finish == "tool_calls"
            lp = sum(len(c["logprobs"]["content"]) for e in ev for c in e.get("choices", []) if c.get("logprobs"))
            check("n2_logprobs_stream_equals", ok and lp == sum(len(c["logprobs"]["content"]) for c in j["choices"]) ==
                  j["usage"]["completion_tokens"] and ev[-1].get("usage") == j["usage"], f"{lp} {j.get('usage')}")
            # the prompt opened <think>: the answer starts inside the reasoning
            run_case(srv, "hermes_opened_think", "weighing it\n</think>\n\nIt is sunny.", "It is sunny.",
                     "weighing it", [], {"chat_template_kwargs": {"open_think": True}})
            # tool_choice none: the template does not see the tools, and the call stays text
            raw = "<tool_call>\n" + CALL + "\n</tool_call>"
            run_case(srv, "choice_none_is_text", raw, raw, None, [], {"tool_choice": "none"})
            base = {"messages": [{"role": "user", "content": "hi"}]}
            check("choice_none_hides_tools",
                  prompt_text(srv, dict(base, tools=TOOLS, tool_choice="none")) == prompt_text(srv, base) and
                  "get_weather" in (prompt_text(srv, dict(base, tools=TOOLS)) or ""))
            # no tools: nothing is parsed as a call
            body = request(raw)
            del body["tools"]
            st, _, j = srv.json("POST", "/v1/chat/completions", body)
            check("no_tools_no_calls", st == 200 and j["choices"][0]["message"]["content"] == raw and
                  "tool_calls" not in j["choices"][0]["message"], str(j))
            # parallel_tool_calls false: the first call only
            st, _, j = srv.json("POST", "/v1/chat/completions",
                                request(HERMES_CASES[1][1], parallel_tool_calls=False))
            calls = j["choices"][0]["message"].get("tool_calls", []) if st == 200 else []
            check("parallel_false_one_call", len(calls) == 1 and calls[0]["function"]["name"] == "get_weather",
                  str(j))
            # the round trip: the call and the tool's answer render into the next prompt
            msgs = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call_abc", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                    {"role": "tool", "tool_call_id": "call_abc", "content": [{"type": "text", "text": "sunny, 21C"}]}]
            text = prompt_text(srv, {"messages": msgs, "tools": TOOLS}) or ""
            check("round_trip_renders",
                  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text and
                  "<tool_response>\nsunny, 21C\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n"),
                  repr(text[-300:]))
            st, _, j = srv.json("POST", "/v1/chat/completions",
                                {"messages": msgs, "tools": TOOLS, "max_tokens": 4})
            check("round_trip_answers", st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length"), str(j))
            bad_requests(srv)
        with Server("--chat-template-file", path, "--reasoning-format", "none") as srv:
            raw = "<think>\nhm\n</think>\n\nHello"
            run_case(srv, "reasoning_format_none", raw, raw, None, [])
        # A format made of special tokens (Mistral's [TOOL_CALLS] is a control token of its vocabulary):
        # with tools the streamed text shows control tokens' text -- here the vocabulary's <s>, forced by
        # logit_bias -- and without tools it does not, as before.
        mpath = os.path.join(tmp, "mistral.jinja")
        with open(mpath, "w") as f:
            f.write("{%- for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}{# [TOOL_CALLS] #}")
        with Server("--chat-template-file", mpath) as srv:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logit_bias": {"1": 100}}
            st, _, j = srv.json("POST", "/v1/chat/completions", dict(body, tools=TOOLS))
            st2, _, j2 = srv.json("POST", "/v1/chat/completions", body)
            check("special_tokens_rendered_for_tools",
                  st == 200 and j["choices"][0]["message"]["content"] == "<s><s><s>" and st2 == 200 and
                  j2["choices"][0]["message"]["content"] == "", f"{j} {j2}")
        r = subprocess.run([BIN, "serve", "-m", STORIES, "--reasoning-format", "bogus"],
                           capture_output=True, text=True, timeout=30)
        check("reasoning_format_bad_flag", r.returncode == 2 and "--reasoning-format" in r.stderr, r.stderr)

        bundle = BUNDLE
        if not os.path.exists(bundle) and "NPM_DIR" not in os.environ:
            # the pinned packages, installed as tests/chat/test_templates.sh installs them (a no-op when cached)
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "llamacpp-setup.sh")], capture_output=True,
                               text=True, timeout=900)
            if r.returncode == 0 and r.stdout.strip():
                bundle = os.path.join(r.stdout.strip().splitlines()[-1], "node_modules", "node-llama-cpp", "llama",
                                      "gitRelease.bundle")
            elif r.returncode != 3:  # 3: node, npm or the registry is not there (an offline machine)
                check("tools_llamacpp_setup", False, f"scripts/llamacpp-setup.sh exited {r.returncode}: "
                      f"{r.stderr[-300:]}")
        if not os.path.exists(bundle):
            print(f"SKIP tools_real_templates: no llama.cpp bundle at {bundle} (scripts/llamacpp-setup.sh)")
        else:
            git = os.path.join(tmp, "llama.git")
            subprocess.run(["git", "clone", "-q", "--bare", bundle, git], check=True)
            for tname, name, raw, content, reasoning, calls, extra in REAL_CASES:
                src = subprocess.run(["git", "--git-dir", git, "show", f"HEAD:models/templates/{tname}.jinja"],
                                     capture_output=True)
                if not check(name + "_template", src.returncode == 0, tname):
                    continue
                p = os.path.join(tmp, tname + ".jinja")
                with open(p, "wb") as f:
                    f.write(src.stdout)
                with Server("--chat-template-file", p) as srv:
                    run_case(srv, name, raw, content, reasoning, calls, extra)
    check_no_sanitizer_report("tools_no_sanitizer_report")
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
