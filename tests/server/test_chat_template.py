#!/usr/bin/env python3
"""`cinfer serve` with a Jinja chat template (--chat-template-file): the prompt of /v1/chat/completions and
/tokenize (and the text of /apply-template) is the template rendered with the request's messages (developer read as system, text parts joined),
tools, add_generation_prompt and chat_template_kwargs; a template that writes bos_token gets one BOS, as in
llama.cpp (the BOS text is dropped and tokenization adds the token); a render error (raise_exception) is an
OpenAI 400 naming the template line; a file that does not parse stops the server with its line.  Then the
model's own tokenizer.chat_template (stories260K rewritten with one, by tests/ref's independent GGUF writer):
used by default and by `cinfer template -m`; one that does not parse falls back, with a warning, to the
built-in format detected from it (chatml here).

The expected prompts are derived by hand from the template below (Jinja semantics), never from cinfer; the
model is stories260K (SentencePiece, BOS id 1 added by the vocabulary).  Prints PASS/FAIL lines."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ref"))
import gguf_np  # noqa: E402
import gguf_write_np  # noqa: E402
import server_util  # noqa: E402
from server_util import BIN, STORIES, Server, check, setup_ok  # noqa: E402

TEMPLATE = """{{ bos_token }}
{%- for m in messages %}
[{{ m.role }}]{{ m.content if m.content is not none else '' }}
{%- if m.tool_calls is defined %} calls {{ m.tool_calls | map(attribute='function') | map(attribute='name') | join(',') }}{% endif %}
{%- if m.role == 'user' and m.content == 'boom' %}{{ raise_exception('no booms here') }}{% endif %}
{{ '\\n' }}
{%- endfor %}
{%- if tools %}tools: {% for t in tools %}{{ t.function.name }}{{ ',' if not loop.last }}{% endfor %}{{ '\\n' }}{% endif %}
{%- if enable_thinking is defined %}think={{ enable_thinking }}{{ '\\n' }}{% endif %}
{%- if add_generation_prompt %}[assistant]{% endif %}
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def with_template(dst, template):
    """stories260K.gguf copied to dst with tokenizer.chat_template set."""
    g = gguf_np.GGUF(STORIES)
    kvs = []
    for key, val in g.kv.items():
        if key == "tokenizer.chat_template":
            continue
        vt = g.kv_type[key]
        if vt == gguf_np.T_ARRAY:
            if isinstance(val, list):
                val = (gguf_np.T_STRING, val)
            else:
                et = {"<i4": gguf_np.T_INT32, "<f4": gguf_np.T_FLOAT32}[val.dtype.str]
                val = (et, val)
        kvs.append((key, vt, val))
    kvs.append(("tokenizer.chat_template", gguf_np.T_STRING, template))
    tensors = [(name, (t.ne, g.raw(name)), t.type) for name, t in g.tensors.items()]
    gguf_write_np.write_gguf(dst, kvs, tensors)


def test_model_template(tmp):
    own = os.path.join(tmp, "own.gguf")
    with_template(own, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                       "{% if add_generation_prompt %}<assistant>{% endif %}")
    r = subprocess.run([BIN, "template", "-m", own, "--messages", '[{"role": "user", "content": "Hi"}]',
                        "--add-generation-prompt"], capture_output=True, text=True, timeout=30)
    check("cli_template_from_model", r.returncode == 0 and r.stdout == "<user>Hi<assistant>", f"{r.returncode} "
          f"{r.stdout!r} {r.stderr}")
    # --time N (bench/chat.py): the same prompt, then N timed parses and renders summarized on stderr
    r = subprocess.run([BIN, "template", "-m", own, "--messages", '[{"role": "user", "content": "Hi"}]',
                        "--add-generation-prompt", "--time", "5"], capture_output=True, text=True, timeout=30)
    m = re.search(r"template timing: 5 runs: render median ([0-9.]+) us \(min ([0-9.]+), max ([0-9.]+)\); "
                  r"parse median ([0-9.]+) us", r.stderr)
    check("cli_template_time", r.returncode == 0 and r.stdout == "<user>Hi<assistant>" and m is not None and
          float(m.group(2)) <= float(m.group(1)) <= float(m.group(3)), f"{r.returncode} {r.stdout!r} {r.stderr}")
    r = subprocess.run([BIN, "template", "-m", own, "--messages", "[]", "--time", "0"], capture_output=True,
                       text=True, timeout=30)
    check("cli_template_time_bad", r.returncode == 2 and "--time" in r.stderr, f"{r.returncode} {r.stderr}")
    s = Server(model=own)
    try:
        st, _, got = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi"}],
                                                  "add_generation_prompt": True})
        st2, _, ref = s.json("POST", "/tokenize", {"prompt": "<user>Hi<assistant>"})
        check("model_template_used", st == 200 and got.get("tokens") == ref.get("tokens"), f"{got} {ref}")
        ready = [ln for ln in s.lines if " ready " in ln]
        check("ready_names_model_jinja", ready and "the model's own (Jinja)" in ready[0], str(ready))
    finally:
        rc, _ = s.stop()
    check("model_template_server_exit", rc == 0, f"exit {rc}")

    broken = os.path.join(tmp, "broken.gguf")
    with_template(broken, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif")
    s = Server(model=broken)
    try:
        st, _, got = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi"}],
                                                  "add_generation_prompt": True})
        st2, _, ref = s.json("POST", "/tokenize", {"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"})
        check("broken_template_falls_back", st == 200 and got.get("tokens") == ref.get("tokens"), f"{got} {ref}")
        warned = [ln for ln in s.lines if "does not parse" in ln]
        ready = [ln for ln in s.lines if " ready " in ln]
        check("broken_template_warned", warned and "line 4" in warned[0] and ready and "chatml" in ready[0],
              f"{warned} {ready}")
    finally:
        rc, _ = s.stop()
    check("broken_template_server_exit", rc == 0, f"exit {rc}")


def test_null_content(tmp):
    """A template that cannot take a null content ('+' on it, as Qwen3's and gpt-oss's templates do with an
    assistant turn of tool calls) is rendered with "" there instead of failing (llama.cpp's rule), and only
    then: the template above renders null itself (as ''), and a real error still names its line."""
    path = os.path.join(tmp, "plus.jinja")
    with open(path, "w") as f:
        f.write("{% for m in messages %}{{ m.role + ':' + m.content + '\\n' }}"
                "{% if m.content == 'boom' %}{{ raise_exception('no booms') }}{% endif %}{% endfor %}")
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "21"}]
    s = Server("--chat-template-file", path)
    try:
        st, _, j = s.json("POST", "/apply-template", {"messages": msgs, "tools": TOOLS})
        check("null_content_as_empty", st == 200 and j == {"prompt": "user:Hi\nassistant:\ntool:21\n"}, f"{st} {j}")
        st, _, j = s.json("POST", "/apply-template", {"messages": msgs + [{"role": "user", "content": "boom"}],
                                                      "tools": TOOLS})
        e = j.get("error", {}) if isinstance(j, dict) else {}
        check("null_content_real_error", st == 400 and "line 1" in e.get("message", ""), f"{st} {j}")
    finally:
        rc, _ = s.stop()
    check("null_content_server_exit", rc == 0, f"exit {rc}")


def main():
    if not setup_ok("chat_template"):
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.jinja")
        with open(path, "w") as f:
            f.write(TEMPLATE)
        bad = os.path.join(tmp, "bad.jinja")
        with open(bad, "w") as f:
            f.write("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}")
        r = subprocess.run([BIN, "serve", "-m", STORIES, "--port", "0", "--chat-template-file", bad],
                           capture_output=True, text=True, timeout=30)
        check("bad_template_file_refused", r.returncode == 2 and "line 3" in r.stderr, f"{r.returncode} {r.stderr}")
        # --chat-template FILE.jinja reads the file as --chat-template-file does (the same error, its line)
        r = subprocess.run([BIN, "serve", "-m", STORIES, "--port", "0", "--chat-template", bad],
                           capture_output=True, text=True, timeout=30)
        check("chat_template_jinja_path_is_a_file", r.returncode == 2 and "line 3" in r.stderr,
              f"{r.returncode} {r.stderr}")
        r = subprocess.run([BIN, "serve", "-m", STORIES, "--port", "0", "--chat-template", "nope"],
                           capture_output=True, text=True, timeout=30)
        check("chat_template_unknown_name", r.returncode == 2 and "not a known template" in r.stderr,
              f"{r.returncode} {r.stderr}")

        s = Server("--chat-template-file", path)
        try:
            msgs = [{"role": "developer", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "text", "text": "Once upon"}, {"type": "text", "text": "a time"}]},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
                    {"role": "user", "content": "Hi"}]
            body = {"messages": msgs, "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False},
                    "add_generation_prompt": True}
            # By hand: bos_token "<s>" first (dropped again: the vocabulary adds BOS), one line per message,
            # text parts joined by "\n", null content rendered as '', the tools' names, the kwarg, the prompt.
            want = ("[system]Be brief.\n[user]Once upon\na time\n[assistant] calls search\n[user]Hi\n"
                    "tools: get_weather,search\nthink=false\n[assistant]")
            st, _, got = s.json("POST", "/tokenize", body)
            st2, _, ref = s.json("POST", "/tokenize", {"prompt": want})
            toks = got.get("tokens", []) if isinstance(got, dict) else []
            check("tokenize_renders_template", st == 200 and st2 == 200 and toks == ref.get("tokens"),
                  f"{st} {got} vs {ref}")
            check("one_bos", toks[:1] == [1] and 1 not in toks[1:], str(toks[:8]))
            # /apply-template (llama-server's endpoint): the same prompt as text, the BOS text dropped as above
            st, _, j = s.json("POST", "/apply-template", body)
            check("apply_template_prompt", st == 200 and j == {"prompt": want}, f"{st} {j}")
            st, _, j = s.json("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "add_generation_prompt": False})
            check("apply_template_no_generation_prompt", st == 200 and j == {"prompt": "[user]Hi\n"}, f"{st} {j}")
            for bad, param in (({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": 1},
                                "add_generation_prompt"), ({"messages": "Hi"}, "messages"),
                               ({"messages": [{"role": "user", "content": "boom"}]}, "messages")):
                st, _, j = s.json("POST", "/apply-template", bad)
                e = j.get("error", {}) if isinstance(j, dict) else {}
                check(f"apply_template_400_{param}", st == 400 and e.get("param") == param, f"{st} {j}")
            st, _, j = s.json("POST", "/v1/chat/completions", dict(body, max_tokens=3, temperature=0))
            check("chat_uses_template", st == 200 and j["usage"]["prompt_tokens"] == len(toks), f"{st} {j}")
            # Without tools or kwargs those parts vanish; without add_generation_prompt (tokenize) no prompt.
            st, _, got = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "Hi"}],
                                                      "add_generation_prompt": False})
            st2, _, ref = s.json("POST", "/tokenize", {"prompt": "[user]Hi\n"})
            check("tokenize_plain", st == 200 and got.get("tokens") == ref.get("tokens"), f"{got} {ref}")
            st, _, j = s.json("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "boom"}], "max_tokens": 2})
            e = j.get("error", {}) if isinstance(j, dict) else {}
            check("render_error_400", st == 400 and e.get("param") == "messages" and
                  "no booms here" in e.get("message", "") and "line 5" in e.get("message", ""), f"{st} {j}")
            ready = [ln for ln in s.lines if " ready " in ln]
            check("ready_names_jinja", ready and "--chat-template-file" in ready[0], str(ready))
        finally:
            rc, _ = s.stop()
        check("server_exit", rc == 0, f"exit {rc}")
        test_null_content(tmp)
        test_model_template(tmp)
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
