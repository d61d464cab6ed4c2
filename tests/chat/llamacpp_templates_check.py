#!/usr/bin/env python3
"""cinfer's chat-template rendering against llama.cpp's own server, request for request: for every
models/templates/*.jinja of the llama.cpp source that the pinned node-llama-cpp bundle carries, and the
conversation corpus of templates_check.py sent as OpenAI chat requests (tool_calls arguments as JSON strings,
tools, add_generation_prompt, chat_template_kwargs.enable_thinking), POST /apply-template to `cinfer serve
--chat-template-file T` and to `llama-server --jinja --chat-template-file T`, both on the same synthetic GGUF
(`cinfer synth --preset tiny`: the same bos/eos texts), and compare the prompts byte for byte.

llama.cpp's server does not render the template as given: it rewrites the conversation first (common/chat.cpp:
a system message folded into the first user message when the template has no system role, null content made
"", tool-call arguments parsed into objects when the template reads them as objects, enable_thinking always set,
per-family workarounds; it runs with --no-prefill-assistant here, so that a trailing assistant message is
closed as in cinfer's chat endpoint rather than continued).  Hugging Face's renderer
(@huggingface/jinja, pinned) is the tiebreak: where the two servers differ, cinfer must render exactly what
@huggingface/jinja renders for the request as sent, with tool-call arguments given to the template as
objects (as transformers documents them) when the template reads them so (a probe call's object argument shows
in the tiebreak's own render, the rule llama.cpp's supports_object_arguments and cinfer apply), else as the JSON
text sent; such a pair is a NOTE naming llama.cpp's difference.  A pair that differs from llama.cpp and from the tiebreak FAILs; one that differs where the
tiebreak cannot render is listed as a NOTE.  Requests that llama-server
cannot render, and templates it cannot load, are listed as NOTEs with its error (and what cinfer did).

Environment: LLAMA_SERVER (the binary), NPM_DIR (scripts/llamacpp-setup.sh's directory), CINFER_BIN,
TEMPLATES (optional: a comma-separated subset of the template names).
Prints PASS/FAIL/NOTE lines and a summary of the differences grouped by conversation."""
import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import templates_check as tc  # noqa: E402  (the corpus and the template loader)

ROOT = tc.ROOT
BIN = tc.BIN
LLAMA = os.environ.get("LLAMA_SERVER", "")

failures = 0


def check(name, ok, why=""):
    global failures
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
    failures += not ok


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body, timeout=30):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"error": {"message": raw.decode("utf-8", "replace")}}


class Proc:
    """A server process on a loopback port, stopped by its own pid."""

    def __init__(self, argv, port, log):
        self.port = port
        self.log = log
        self.p = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=dict(
            os.environ, TZ="UTC"))

    def wait_ready(self, timeout=60):
        t_end = time.time() + timeout
        while time.time() < t_end:
            if self.p.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        return False

    def tail(self, n=300):
        try:
            return open(self.log, "rb").read()[-n:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def request_of(ctx):
    """The OpenAI chat request a conversation of the corpus is (tool-call arguments as JSON text)."""
    msgs = copy.deepcopy(ctx["messages"])
    for m in msgs:
        for c in m.get("tool_calls") or []:
            if not isinstance(c["function"]["arguments"], str):
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    body = {"messages": msgs, "add_generation_prompt": ctx["add_generation_prompt"]}
    if "tools" in ctx:
        body["tools"] = ctx["tools"]
    if "enable_thinking" in ctx:
        body["chat_template_kwargs"] = {"enable_thinking": ctx["enable_thinking"]}
    return body


def hf_context(ctx, bos, eos, objects):
    """The tiebreak's context: the conversation with the model's bos/eos texts, tool-call arguments as objects
    (as transformers documents them) or as the JSON text OpenAI sends."""
    c = copy.deepcopy(ctx)
    c["bos_token"], c["eos_token"] = bos, eos
    for m in c["messages"]:
        for call in m.get("tool_calls") or []:
            a = call["function"]["arguments"]
            call["function"]["arguments"] = (json.loads(a) if isinstance(a, str) else a) if objects else (
                a if isinstance(a, str) else json.dumps(a))
    return c


# The rule by which a server gives a template tool-call arguments as objects (llama.cpp's
# supports_object_arguments; cinfer's object_arguments_probe): a call whose arguments are an object holding
# MARK, rendered by the tiebreak itself, shows MARK.
MARK = "probe-mark-5e1d"
PROBE = {"messages": [{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "", "tool_calls": [
                          {"id": "abcdefghi", "type": "function",
                           "function": {"name": "probe_fn", "arguments": {"probe_arg": MARK}}}]},
                      {"role": "tool", "tool_call_id": "abcdefghi", "name": "probe_fn", "content": "ok"}],
         "tools": [{"type": "function", "function": {
             "name": "probe_fn", "description": "A probe", "parameters": {
                 "type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]}}}],
         "add_generation_prompt": True}


def first_diff(a, b):
    k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
    return k, a[max(0, k - 30):k + 50], b[max(0, k - 30):k + 50]


def main():
    if not LLAMA or not os.access(LLAMA, os.X_OK):
        print(f"SKIP chat_templates_llamacpp: no llama-server at {LLAMA!r} (scripts/llamacpp-native.sh --server "
              "builds it, outside the repository)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        templates = tc.load_templates(tmp)
        check("llamacpp_templates_found", len(templates) >= 60, f"only {len(templates)} templates")
        if os.environ.get("TEMPLATES"):  # a comma-separated subset of the names, for debugging
            templates = {k: v for k, v in templates.items() if k in os.environ["TEMPLATES"].split(",")}
        model = os.path.join(tmp, "tiny.gguf")
        r = subprocess.run([BIN, "synth", "--preset", "tiny", "--seed", "1", "-o", model], capture_output=True)
        check("llamacpp_synth", r.returncode == 0, r.stderr.decode()[-300:])
        if r.returncode:
            return
        ctxs = tc.contexts()
        # The model's bos/eos texts (what both servers give a template), read from cinfer's own context.
        sample = os.path.join(tmp, "bos.jinja")
        with open(sample, "w") as f:
            f.write("{{ bos_token }}\n{{ eos_token }}")
        r = subprocess.run([BIN, "template", "-m", model, "--file", sample, "--messages", "[]"],
                           capture_output=True, text=True)
        bos, eos = (r.stdout.split("\n") + ["", ""])[:2]
        # The tiebreak, rendered once for every pair.
        jobs = os.path.join(tmp, "jobs.json")
        ref_path = os.path.join(tmp, "ref.json")
        with open(jobs, "w") as f:
            json.dump({"templates": templates, "contexts": [hf_context(c, bos, eos, True) for _, c in ctxs] +
                       [hf_context(c, bos, eos, False) for _, c in ctxs] + [dict(PROBE, bos_token=bos,
                                                                                   eos_token=eos)]}, f)
        r = subprocess.run(["node", os.path.join(ROOT, "tests", "chat", "hf_render.mjs"), tc.NPM, jobs, ref_path],
                           capture_output=True, text=True, env=dict(os.environ, TZ="UTC"))
        check("llamacpp_tiebreak_runs", r.returncode == 0, r.stderr[-500:])
        if r.returncode:
            return
        hf_all = json.load(open(ref_path))
        n = len(ctxs)
        hf = {}
        for tname, rs in hf_all.items():
            objects = rs[2 * n]["ok"] and MARK in rs[2 * n]["text"]
            hf[tname] = rs[:n] if objects else rs[n:2 * n]
        n_same = n_hf = n_fail = n_llama_err = n_both_err = n_untied = n_refused = 0
        by_conv = {}
        unloadable = []
        for tname, src in templates.items():
            tpath = os.path.join(tmp, tname + ".jinja")
            with open(tpath, "w") as f:
                f.write(src)
            pc, pl = free_port(), free_port()
            ci = Proc([BIN, "serve", "-m", model, "--port", str(pc), "--chat-template-file", tpath, "-t", "1"], pc,
                      os.path.join(tmp, "cinfer.log"))
            ll = Proc([LLAMA, "-m", model, "--port", str(pl), "--host", "127.0.0.1", "--jinja",
                       "--chat-template-file", tpath, "-c", "512", "-t", "1", "-np", "1", "--no-warmup",
                       "--no-prefill-assistant"], pl,
                      os.path.join(tmp, "llama.log"))
            try:
                ci_ok, ll_ok = ci.wait_ready(), ll.wait_ready()
                if not ci_ok:
                    check(f"llamacpp_template_{tname}", False, f"cinfer serve did not start: {ci.tail()}")
                    continue
                if not ll_ok:
                    unloadable.append(tname)
                    print(f"NOTE {tname}: llama-server cannot load the template ({ll.tail(200)!r})")
                    continue
                t_ok = True
                for i, (cname, ctx) in enumerate(ctxs):
                    body = request_of(ctx)
                    sc, jc = post(pc, "/apply-template", body)
                    sl, jl = post(pl, "/apply-template", body)
                    got = jc.get("prompt") if sc == 200 else None
                    want = jl.get("prompt") if sl == 200 else None
                    ref = hf[tname][i]
                    if want is None:
                        err = str(jl.get("error", {}).get("message", jl))[:160]
                        mine = "renders" if got is not None else "errors too: " + str(
                            jc.get("error", {}).get("message", ""))[:120]
                        print(f"NOTE {tname} x {cname}: llama-server cannot render it (HTTP {sl}: {err}); "
                              f"cinfer {mine}")
                        if got is None:
                            n_both_err += 1
                        else:
                            n_llama_err += 1
                        continue
                    if got == want:
                        n_same += 1
                        continue
                    tie = ref["text"] if ref["ok"] else None
                    if got is None and tie is None:
                        # llama.cpp rewrote the conversation into one the template accepts (e.g. the system
                        # message folded into the user's); cinfer refuses it as the tiebreak does.
                        n_refused += 1
                        print(f"NOTE {tname} x {cname}: llama.cpp renders what @huggingface/jinja refuses "
                              f"({ref['error'][:100]}); cinfer refuses it too (HTTP {sc})")
                        continue
                    if got is not None and got == tie:
                        n_hf += 1
                        k, a, b = first_diff(got, want)
                        by_conv.setdefault(cname, []).append(tname)
                        print(f"NOTE {tname} x {cname}: llama.cpp differs from Hugging Face (cinfer renders as "
                              f"@huggingface/jinja), at char {k}: cinfer/HF {a!r} vs llama.cpp {b!r}")
                        continue
                    if got is not None and tie is None:
                        # No tiebreak: listed, and not counted either way.
                        n_untied += 1
                        k, a, b = first_diff(got, want)
                        print(f"NOTE {tname} x {cname}: cinfer and llama.cpp differ and @huggingface/jinja cannot "
                              f"render it ({ref['error'][:80]}): at char {k}: cinfer {a!r} vs llama.cpp {b!r}")
                        continue
                    t_ok = False
                    n_fail += 1
                    if got is None:
                        why = f"cinfer HTTP {sc}: {str(jc.get('error', {}).get('message', jc))[:200]}"
                    else:
                        k, a, b = first_diff(got, want)
                        why = f"at char {k}: cinfer {a!r} vs llama.cpp {b!r}"
                        if tie is not None:
                            k2, a2, b2 = first_diff(got, tie)
                            why += f"; and vs @huggingface/jinja at char {k2}: {a2!r} vs {b2!r}"
                        else:
                            why += f"; @huggingface/jinja cannot render it ({ref['error'][:100]})"
                    print(f"FAIL {tname} x {cname}: differs from llama.cpp and the tiebreak: {why}")
                check(f"llamacpp_template_{tname}", t_ok, "differs from llama.cpp and from the tiebreak (above)")
            finally:
                ci.stop()
                ll.stop()
        for cname, names in sorted(by_conv.items()):
            print(f"NOTE llama.cpp differs from Hugging Face on {cname} for {len(names)} templates: "
                  f"{', '.join(names)}")
        print(f"NOTE {len(templates)} templates x {len(ctxs)} conversations against llama-server: {n_same} "
              f"byte-identical, {n_hf} where llama.cpp differs from @huggingface/jinja and cinfer matches it, "
              f"{n_refused} that llama.cpp renders (after its rewrites) and both @huggingface/jinja and cinfer refuse, "
              f"{n_fail} mismatches, {n_untied} differences without a tiebreak (@huggingface/jinja cannot render them), "
              f"{n_llama_err} llama-server cannot render (cinfer renders), {n_both_err} "
              f"neither renders, {len(unloadable)} templates llama-server cannot load"
              + (f" ({', '.join(unloadable)})" if unloadable else ""))


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
