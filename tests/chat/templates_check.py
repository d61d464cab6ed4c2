#!/usr/bin/env python3
"""cinfer's Jinja engine against @huggingface/jinja (the renderer of transformers.js and the Hub), on real
chat templates: every models/templates/*.jinja of llama.cpp's source (read from the git bundle that the pinned
node-llama-cpp package carries, never copied into this repository) x a corpus of conversations (system or not,
multi-turn, tool definitions, assistant tool_calls and tool results, add_generation_prompt true/false,
enable_thinking true/false, text needing escapes).  For each pair, `cinfer template --file T --context @CTX`
must print exactly the bytes that @huggingface/jinja's Template(T).render(CTX) returns.  A pair the reference
itself cannot render is listed as a NOTE with its error (and cinfer's answer), not counted.

Environment: NPM_DIR (the scripts/llamacpp-setup.sh directory), CINFER_BIN.  Prints PASS/FAIL/NOTE lines."""
import copy
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM = os.environ.get("NPM_DIR", os.path.join(ROOT, "build", "npm"))
BIN = os.environ.get("CINFER_BIN", os.path.join(ROOT, "build", "release", "cinfer"))
BUNDLE = os.path.join(NPM, "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")

failures = 0


def check(name, ok, why=""):
    global failures
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
    failures += not ok


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "n": {"type": "integer"}},
                   "required": ["query"]}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL2 = {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": {"query": "cinfer", "n": 3}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "Hi there! How can I help?"}
U2 = {"role": "user", "content": "What is the capital of France?"}
A2 = {"role": "assistant", "content": "The capital of France is Paris."}
U3 = {"role": "user", "content": "And of Germany?"}

CONVERSATIONS = {
    "user": ([U1], {}),
    "system_user": ([SYS, U1], {}),
    "multi_turn": ([SYS, U1, A1, U2, A2, U3], {}),
    "no_system_multi_turn": ([U1, A1, U2], {}),
    "ends_with_assistant": ([SYS, U1, A1], {"add_generation_prompt": False}),
    "no_generation_prompt": ([U1, A1, U2], {"add_generation_prompt": False}),
    "escapes": ([{"role": "user", "content": "Quote \"this\" and 'that'\n\ttab, back\\slash, {{ braces }}, {% tag %}, "
                                           "café ☕ 日本語, <b>html</b>   "}], {}),
    "tools": ([SYS, {"role": "user", "content": "What's the weather in Paris?"}], {"tools": [WEATHER, SEARCH]}),
    "tools_no_system": ([{"role": "user", "content": "What's the weather in Paris?"}], {"tools": [WEATHER]}),
    "tool_call_and_result": ([SYS, {"role": "user", "content": "What's the weather in Paris?"},
                              {"role": "assistant", "content": None, "tool_calls": [CALL]},
                              {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                               "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
                             {"tools": [WEATHER]}),
    "parallel_tool_calls": ([{"role": "user", "content": "Weather in Paris, and search cinfer"},
                             {"role": "assistant", "content": "", "tool_calls": [CALL, CALL2]},
                             {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 C"},
                             {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "3 results"},
                             {"role": "assistant", "content": "It is 21 C in Paris."},
                             {"role": "user", "content": "Thanks"}],
                            {"tools": [WEATHER, SEARCH]}),
    "thinking_off": ([SYS, U1], {"enable_thinking": False}),
    "thinking_on": ([U1, {"role": "assistant", "content": "Hi!", "reasoning_content": "The user greets me."},
                     U2], {"enable_thinking": True}),
}


def contexts():
    out = []
    for name, (msgs, extra) in CONVERSATIONS.items():
        ctx = {"messages": copy.deepcopy(msgs), "add_generation_prompt": True, "bos_token": "<s>",
               "eos_token": "</s>"}
        ctx.update(copy.deepcopy(extra))
        out.append((name, ctx))
    return out


def load_templates(tmp):
    git = os.path.join(tmp, "llama.git")
    subprocess.run(["git", "clone", "-q", "--bare", BUNDLE, git], check=True)
    names = subprocess.run(["git", "--git-dir", git, "ls-tree", "--name-only", "HEAD", "models/templates/"],
                           check=True, capture_output=True, text=True).stdout.split()
    out = {}
    for n in sorted(names):
        if n.endswith(".jinja"):
            src = subprocess.run(["git", "--git-dir", git, "show", f"HEAD:{n}"], check=True,
                                 capture_output=True).stdout
            out[os.path.basename(n)[:-len(".jinja")]] = src.decode("utf-8")
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        templates = load_templates(tmp)
        check("templates_found", len(templates) >= 60, f"only {len(templates)} templates in the bundle")
        ctxs = contexts()
        jobs = os.path.join(tmp, "jobs.json")
        ref_path = os.path.join(tmp, "ref.json")
        with open(jobs, "w") as f:
            json.dump({"templates": templates, "contexts": [c for _, c in ctxs]}, f)
        env = dict(os.environ, TZ="UTC")
        r = subprocess.run(["node", os.path.join(ROOT, "tests", "chat", "hf_render.mjs"), NPM, jobs, ref_path],
                           capture_output=True, text=True, env=env)
        check("reference_runs", r.returncode == 0, r.stderr[-500:])
        if r.returncode:
            return
        ref = json.load(open(ref_path))
        ctx_files = []
        for i, (name, ctx) in enumerate(ctxs):
            p = os.path.join(tmp, f"ctx{i}.json")
            with open(p, "w") as f:
                json.dump(ctx, f)
            ctx_files.append(p)
        n_match = n_mismatch = n_ref_error = 0
        mismatches = []
        for tname, src in templates.items():
            tpath = os.path.join(tmp, tname + ".jinja")
            with open(tpath, "w") as f:
                f.write(src)
            t_ok = True
            for i, (cname, _) in enumerate(ctxs):
                want = ref[tname][i]
                got = subprocess.run([BIN, "template", "--file", tpath, "--context", "@" + ctx_files[i]],
                                     capture_output=True, env=env)
                got_text = got.stdout.decode("utf-8", "replace")
                if got.returncode not in (0, 1):
                    t_ok = False
                    n_mismatch += 1
                    mismatches.append(f"{tname} x {cname}: cinfer crashed (exit {got.returncode})")
                    continue
                if not want["ok"]:
                    n_ref_error += 1
                    mine = "renders" if got.returncode == 0 else "errors too: " + got.stderr.decode()[-120:].strip()
                    print(f"NOTE {tname} x {cname}: the reference cannot render it ({want['error'][:120]}); "
                          f"cinfer {mine}")
                    continue
                if got.returncode == 0 and got_text == want["text"]:
                    n_match += 1
                    continue
                t_ok = False
                n_mismatch += 1
                if got.returncode != 0:
                    why = "cinfer error: " + got.stderr.decode()[-200:].strip()
                else:
                    k = next((j for j in range(min(len(got_text), len(want["text"])))
                              if got_text[j] != want["text"][j]), min(len(got_text), len(want["text"])))
                    why = (f"differs at char {k}: cinfer {got_text[max(0, k - 30):k + 40]!r} vs "
                           f"reference {want['text'][max(0, k - 30):k + 40]!r}")
                mismatches.append(f"{tname} x {cname}: {why}")
            print(f"{'PASS' if t_ok else 'FAIL'} template_{tname}")
        total = n_match + n_mismatch
        for m in mismatches:
            print(f"  mismatch: {m}")
        print(f"NOTE {len(templates)} templates x {len(ctxs)} conversations: {n_match} byte-identical, "
              f"{n_mismatch} mismatches, {n_ref_error} the reference cannot render")
        global failures
        failures += 0  # each template's line above already counted
        check("all_byte_identical", n_mismatch == 0, f"{n_mismatch} of {total} renders differ")


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
