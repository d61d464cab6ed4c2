#!/usr/bin/env python3
"""The layers of src/ depend one way only (docs/ARCHITECTURE.md):

    core < kernels < format < tokenizer < grammar < chat < model < engine < {server, bench} < cli

A file may include headers of its own layer and of layers below it, never above.  The server reaches the
engine only through the public API (include/cinfer.h), as an embedding program would; the command line
includes only the public API, the bench and server layers and the core utilities, never an internal header
of the engine, the model, the tokenizer, the kernels or the file formats.  No two files include each other,
directly or through others (no include cycle).  Prints PASS/FAIL lines."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
RANK = {"core": 0, "kernels": 1, "format": 2, "tokenizer": 3, "grammar": 3.5, "chat": 3.6, "model": 4, "engine": 5, "server": 6, "bench": 6,
        "cli": 7}
# What a layer may include beyond the rank rule (None: the rank rule alone).
ONLY = {
    "grammar": {"core", "grammar"},  # grammars and token masks over byte strings: no tokenizer, no model
    "server": {"core", "server"},
    "cli": {"core", "bench", "server", "cli"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

failures = 0


def check(name, ok, why=""):
    global failures
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
    failures += not ok


def main():
    files = {}
    for layer in sorted(os.listdir(SRC)):
        d = os.path.join(SRC, layer)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")):
                files[f"{layer}/{f}"] = INCLUDE.findall(open(os.path.join(d, f), errors="replace").read())
    unknown = sorted({p.split("/")[0] for p in files} - set(RANK))
    check("every_layer_ranked", not unknown, f"directories of src/ with no place in the order: {unknown}")

    upward, internal = [], []
    for path, incs in files.items():
        layer = path.split("/")[0]
        for inc in incs:
            if inc == "cinfer.h":
                if RANK.get(layer, 0) < RANK["engine"]:
                    upward.append(f"{path} includes the public API")
                continue
            dep = inc.split("/")[0]
            if dep not in RANK:
                continue  # a generated or test header
            if RANK[dep] > RANK.get(layer, 99) or (dep in ("server", "bench") and layer in ("server", "bench")
                                                    and dep != layer):
                upward.append(f"{path} -> {inc}")
            elif layer in ONLY and dep not in ONLY[layer]:
                internal.append(f"{path} -> {inc}")
    check("no_upward_includes", not upward, "; ".join(upward[:20]))
    check("cli_and_server_use_the_public_api", not internal, "; ".join(internal[:20]))

    # Include cycles among src/ files (a .c counts as its own .h: foo.c and foo.h are one module).
    def module(p):
        return p[:-2]
    graph = {}
    for path, incs in files.items():
        m = module(path)
        graph.setdefault(m, set())
        for inc in incs:
            if inc.split("/")[0] in RANK and module(inc) != m and (inc in files or inc[:-2] + ".c" in files):
                graph[m].add(module(inc))
    cycles, state = [], {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n):] + [n]))
            elif not state.get(n):
                visit(n, stack)
        stack.pop()
        state[m] = 2
    for m in sorted(graph):
        if not state.get(m):
            visit(m, [])
    check("no_include_cycles", not cycles, "; ".join(cycles[:10]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
