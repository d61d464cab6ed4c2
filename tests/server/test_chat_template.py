#!/usr/bin/env python3
"""`cinfer serve` with a Jinja chat template (--chat-template-file): the prompt of /v1/chat/completions and
/tokenize is the template rendered with the request's messages (developer read as system, text parts joined),
tools, add_generation_prompt and chat_template_kwargs; a template that writes bos_token gets one BOS, as in
llama.cpp (the BOS text is dropped and tokenization adds the token); a render error (raise_exception) is an
OpenAI 400 naming the template line; a file that does not parse stops the server with its line.

The expected prompts are derived by hand from the template below (Jinja semantics), never from cinfer; the
model is stories260K (SentencePiece, BOS id 1 added by the vocabulary).  Prints PASS/FAIL lines."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
