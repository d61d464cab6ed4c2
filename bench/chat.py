#!/usr/bin/env python3
"""Chat benchmarks (issue 14) and the JSON-schema decode side by side with llama.cpp (issue 13), printed as
markdown tables for bench/RESULTS.md.  Parts (--parts, comma-separated; default all):

  templates  every models/templates/*.jinja of llama.cpp's source (the pinned node-llama-cpp bundle, as
             tests/chat reads it) parsed and rendered with a 4-turn conversation (system, 4 user turns, 3
             assistant answers, add_generation_prompt) by `cinfer template --time N`: per template the median
             render and parse time; over the templates their median and maximum.
  ttft       that conversation as a streamed /v1/chat/completions request (max_tokens 1) to `cinfer serve`
             with each of a few templates on MODEL: median TTFT, and the render's share of it.
  tools      tool-call latency end to end through the official OpenAI SDK (npm `openai`, pinned, in
             build/npm-openai as tests/server/test_openai_sdk.sh installs it): tool_choice "required" and a
             named function, non-streamed, against `cinfer serve` and llama-server (--jinja) on the same
             MODEL with the same template (Qwen2.5's Hermes <tool_call> format), temperature 0, max_tokens 192.
             Per server and choice: median latency, completion tokens, and whether the arguments parsed.
  schema     decode with a JSON-schema constraint against unconstrained, on both servers, 1 and 16 streams
             (separate concurrent /v1/completions requests, llama.cpp's "json_schema" field on both),
             temperature 1, seeded, max_tokens 64: per stream the decode interval (last token time - first
             token time) / (tokens - 1), median over streams and repetitions, and the ratios.

    bench/chat.py -m MODEL [--llama-server BIN] [--parts templates,ttft,tools,schema] [--reps 3]
    cinfer synth --preset smollm2-135m --type q8_0 --seed 1 -o /tmp/smol.gguf && bench/chat.py -m /tmp/smol.gguf

llama-server is scripts/llamacpp-native.sh --server's build (default ${CINFER_LLAMACPP_DIR:-~/.cache/cinfer/
llama.cpp}/build-cinfer-server/bin/llama-server); without it the llama.cpp columns are left out.  Run it
under `nice -n 19` on a shared machine, and say so with the figures.  Standard library only (and node)."""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))
import templates_check as tc  # noqa: E402  (the bundle's templates)

SYS = {"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely."}
TURNS = [("Hello! Can you help me plan a trip?", "Of course. Where would you like to go, and when?"),
         ("To Lisbon, for four days in May.", "Lisbon in May is lovely: mild weather, few crowds. What do you "
          "enjoy most: museums, food, walking, beaches?"),
         ("Food and walking, mostly. Some history too.", "Then plan Alfama and Mouraria on foot, the Time Out "
          "market, Belem for the monastery and the tower, and a day trip to Sintra."),
         ("Great. Which day should be Sintra, and how do I get there?", None)]
CONVERSATION = [SYS] + [m for u, a in TURNS for m in ([{"role": "user", "content": u}] +
                                                     ([{"role": "assistant", "content": a}] if a else []))]
TTFT_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "openai-gpt-oss-120b"]
TOOL_TEMPLATE = "Qwen-Qwen2.5-7B-Instruct"
TOOLS = [{"type": "function", "function": {
    "name": "get_forecast", "description": "The weather forecast for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Lisbon", "Porto", "Sintra"]},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "book_table", "description": "Book a restaurant table",
        "parameters": {"type": "object", "properties": {
            "people": {"type": "string", "enum": ["1", "2", "4"]},
            "time": {"type": "string", "enum": ["19:00", "20:00", "21:00"]}},
            "required": ["people", "time"], "additionalProperties": False}}}]
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                "required": ["street", "city"]}},
    "required": ["name", "age", "tags", "address"]}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Proc:
    def __init__(self, argv, port, logpath):
        self.port, self.logpath = port, logpath
        self.p = subprocess.Popen(argv, stdout=open(logpath, "wb"), stderr=subprocess.STDOUT)
        t_end = time.time() + 180
        while time.time() < t_end:
            if self.p.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited: {open(logpath, 'rb').read()[-400:]!r}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{argv[0]} did not become ready")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def cinfer_server(a, tmp, extra, slots=1):
    port = free_port()
    return Proc([a.bin, "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads), "--max-seqs",
                 str(slots)] + extra, port, os.path.join(tmp, "cinfer.log"))


def llama_server(a, tmp, extra, slots=1, ctx=1024):
    port = free_port()
    return Proc([a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1", "-t", str(a.threads),
                 "-tb", str(a.threads), "-np", str(slots), "-c", str(ctx * slots), "--no-warmup"] + extra, port,
                os.path.join(tmp, "llama.log"))


def stream(url, path, body, out):
    """POSTs a streamed request; out gets (t_start, [arrival time of each content chunk], usage or None)."""
    t0 = time.perf_counter()
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times, usage = [], None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            j = json.loads(line[5:])
            if j.get("usage"):
                usage = j["usage"]
            for c in j.get("choices") or []:
                d = c.get("delta") or {}
                if c.get("text") or d.get("content") or d.get("reasoning_content"):
                    times.append(time.perf_counter())
    out.append((t0, times, usage))


def part_templates(a, tmp, templates):
    log("templates: rendering", len(templates), "templates ...")
    base = {"messages": CONVERSATION, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    # A template that refuses the conversation (no system role; tools required) gets it without the system
    # message, then with tools; the variant used is named.
    variants = [("", base), (" (no system)", dict(base, messages=CONVERSATION[1:])),
                (" (with tools)", dict(base, tools=TOOLS))]
    paths = []
    for i, (_, ctx) in enumerate(variants):
        paths.append(os.path.join(tmp, f"conv{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(ctx, f)
    rx = re.compile(r"render median ([0-9.]+) us.*parse median ([0-9.]+) us")
    rows, failed = [], []
    for name, src in templates.items():
        tpath = os.path.join(tmp, name + ".jinja")
        with open(tpath, "w") as f:
            f.write(src)
        for (note, _), cpath in zip(variants, paths):
            r = subprocess.run([a.bin, "template", "--file", tpath, "--context", "@" + cpath, "--time",
                                str(a.renders)], capture_output=True, text=True, env=dict(os.environ, TZ="UTC"))
            m = rx.search(r.stderr)
            if r.returncode == 0 and m:
                rows.append((float(m.group(1)), float(m.group(2)), name + note, len(r.stdout)))
                break
        else:
            failed.append(f"{name} ({r.stderr.strip()[-100:]})")
    rows.sort()
    render = [x[0] for x in rows]
    parse = [x[1] for x in rows]
    slow = max(rows, key=lambda x: x[0])
    slowp = max(rows, key=lambda x: x[1])
    print(f"\nTemplate rendering, {len(rows)} templates, the 4-turn conversation ({a.renders} renders each, "
          f"median per template):\n")
    print("| | median over templates | max | slowest template |")
    print("|---|---:|---:|---|")
    print(f"| render (context JSON → prompt) | {statistics.median(render):.1f} µs | {slow[0]:.1f} µs | "
          f"{slow[2]} ({slow[3]} bytes) |")
    print(f"| parse (once per template: at load) | {statistics.median(parse):.1f} µs | {slowp[1]:.1f} µs | "
          f"{slowp[2]} |")
    if failed:
        print(f"\nNot rendered (the template rejects this conversation): {', '.join(failed)}")
    return {x[2].split(" (")[0]: x[0] for x in rows}


def part_ttft(a, tmp, templates, render_us):
    print("\nShare of TTFT (streamed chat request, the 4-turn conversation, max_tokens 1, median of "
          f"{a.reps * 4} requests after one warm-up; prefix cache off):\n")
    print("| template | prompt tokens | render µs | TTFT ms | render share |")
    print("|---|---:|---:|---:|---:|")
    for name in TTFT_TEMPLATES:
        if name not in templates:
            continue
        tpath = os.path.join(tmp, name + ".jinja")
        with open(tpath, "w") as f:
            f.write(templates[name])
        log("ttft:", name)
        s = cinfer_server(a, tmp, ["--chat-template-file", tpath, "--no-prefix-cache"])
        try:
            body = {"messages": CONVERSATION, "max_tokens": 1, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            ttfts, ntok = [], 0
            for i in range(a.reps * 4 + 1):
                out = []
                stream(s.url, "/v1/chat/completions", body, out)
                t0, times, usage = out[0]
                if usage:
                    ntok = usage.get("prompt_tokens", ntok)
                if i and times:
                    ttfts.append((times[0] - t0) * 1e3)
        finally:
            s.stop()
        ttft = statistics.median(ttfts)
        r = render_us.get(name, float("nan"))
        print(f"| {name} | {ntok} | {r:.1f} | {ttft:.2f} | {r / 1e3 / ttft * 100:.3f}% |")


def part_tools(a, tmp, templates):
    sdk = os.path.join(ROOT, "build", "npm-openai")
    if not os.path.isfile(os.path.join(sdk, "node_modules", "openai", "package.json")):
        print("\n(tools: the openai SDK is not installed in build/npm-openai: run tests/server/test_openai_sdk.sh)")
        return
    tpath = os.path.join(tmp, TOOL_TEMPLATE + ".jinja")
    with open(tpath, "w") as f:
        f.write(templates[TOOL_TEMPLATE])
    servers = [("cinfer", lambda: cinfer_server(a, tmp, ["--chat-template-file", tpath]))]
    if a.llama_server:
        # llama.cpp's prompt for these tools is longer than cinfer's (its tool system prompt): room for it
        servers.append(("llama.cpp", lambda: llama_server(a, tmp, ["--jinja", "--chat-template-file", tpath],
                                                          ctx=4096)))
    print(f"\nTool-call latency through the OpenAI SDK (openai@6.49.0, non-streamed, {TOOL_TEMPLATE}'s template, "
          f"temperature 0, max_tokens 192, {a.reps * 4} requests after one warm-up):\n")
    print("| server | tool_choice | median ms | min ms | completion tokens | calls parsed (valid arguments) |")
    print("|---|---|---:|---:|---:|---:|")
    spec = os.path.join(tmp, "tools.json")
    with open(spec, "w") as f:
        json.dump({"tools": TOOLS, "messages": CONVERSATION[:-1] + [
            {"role": "user", "content": "What will the weather be in Sintra? Then book a table for 2 at 20:00."}],
            "n": a.reps * 4}, f)
    res = {}
    for label, start in servers:
        log("tools:", label)
        s = start()
        try:
            r = subprocess.run(["node", os.path.join(ROOT, "bench", "chat_tools.mjs"), sdk, s.url, spec],
                               capture_output=True, text=True, timeout=1800)
        finally:
            s.stop()
        if r.returncode:
            print(f"| {label} | - | failed: {r.stderr.strip()[-200:]} | | | |")
            continue
        for row in json.loads(r.stdout):
            res[(label, row["choice"])] = row["median_ms"]
            print(f"| {label} | {row['choice']} | {row['median_ms']:.1f} | {row['min_ms']:.1f} | "
                  f"{row['completion_tokens']} | {row['ok']}/{row['n']} |")
    for choice in ("required", "named"):
        if ("cinfer", choice) in res and ("llama.cpp", choice) in res:
            print(f"\n{choice}: llama.cpp / cinfer latency = {res[('llama.cpp', choice)] / res[('cinfer', choice)]:.2f}")


def decode_intervals(url, body, n, path="/v1/completions"):
    outs, threads = [], []
    for i in range(n):
        b = dict(body, seed=body["seed"] + i)
        t = threading.Thread(target=stream, args=(url, path, b, outs))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    ivs, toks = [], []
    for _, times, usage in outs:
        k = (usage or {}).get("completion_tokens") or len(times)
        if len(times) >= 2 and k >= 8:
            ivs.append((times[-1] - times[0]) * 1e3 / (k - 1))
            toks.append(k)
    return ivs, toks


def part_schema(a, tmp):
    print(f"\nJSON-schema constrained vs unconstrained decode (/v1/completions, llama.cpp's `json_schema` field, "
          f"temperature 1, seeds 1.., max_tokens 64, {a.reps} repetitions; ms per token per stream = (last token - "
          f"first token) / (tokens - 1), median over streams and repetitions):\n")
    print("| server | streams | plain ms/token | schema ms/token | schema / plain | tokens/stream (plain, schema) |")
    print("|---|---:|---:|---:|---:|---|")
    servers = [("cinfer", lambda n: cinfer_server(a, tmp, [], slots=n))]
    if a.llama_server:
        servers.append(("llama.cpp", lambda n: llama_server(a, tmp, [], slots=n, ctx=256)))
    per = {}
    for label, start in servers:
        for n in (1, 16):
            log("schema:", label, n)
            s = start(n)
            try:
                body = {"prompt": "Here is a JSON record of a person:", "max_tokens": 64, "temperature": 1.0,
                        "seed": 1, "stream": True, "stream_options": {"include_usage": True}}
                plain, cons, tp, tcn = [], [], [], []
                decode_intervals(s.url, body, n)  # warm-up
                for rep in range(a.reps):
                    b = dict(body, seed=1 + 100 * rep)
                    iv, tk = decode_intervals(s.url, b, n)
                    plain += iv
                    tp += tk
                    iv, tk = decode_intervals(s.url, dict(b, json_schema=SCHEMA), n)
                    cons += iv
                    tcn += tk
            finally:
                s.stop()
            if not plain or not cons:
                print(f"| {label} | {n} | - | - | - | too few tokens ({tp}, {tcn}) |")
                continue
            mp, mc = statistics.median(plain), statistics.median(cons)
            per[(label, n)] = (mp, mc)
            print(f"| {label} | {n} | {mp:.2f} | {mc:.2f} | {mc / mp:.3f} | {statistics.median(tp):.0f}, "
                  f"{statistics.median(tcn):.0f} |")
    for n in (1, 16):
        if ("cinfer", n) in per and ("llama.cpp", n) in per:
            c, l = per[("cinfer", n)], per[("llama.cpp", n)]
            print(f"\n{n} stream(s): constrained decode, llama.cpp / cinfer ms per token = {l[1] / c[1]:.2f} "
                  f"(unconstrained {l[0] / c[0]:.2f}); constraint overhead cinfer {100 * (c[1] / c[0] - 1):+.1f}%, "
                  f"llama.cpp {100 * (l[1] / l[0] - 1):+.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "release", "cinfer"))
    d = os.environ.get("CINFER_LLAMACPP_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cinfer",
                                                              "llama.cpp")
    ap.add_argument("--llama-server", default=os.path.join(d, "build-cinfer-server", "bin", "llama-server"))
    ap.add_argument("--parts", default="templates,ttft,tools,schema")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--renders", type=int, default=200)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    if not os.access(a.llama_server, os.X_OK):
        log(f"no llama-server at {a.llama_server}: cinfer only")
        a.llama_server = None
    parts = a.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        templates = tc.load_templates(tmp)
        render_us = {}
        if "templates" in parts or "ttft" in parts:
            render_us = part_templates(a, tmp, templates)
        if "ttft" in parts:
            part_ttft(a, tmp, templates, render_us)
        if "tools" in parts:
            part_tools(a, tmp, templates)
        if "schema" in parts:
            part_schema(a, tmp)


if __name__ == "__main__":
    main()
