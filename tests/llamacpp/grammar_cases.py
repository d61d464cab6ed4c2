#!/usr/bin/env python3
"""Extracts llama.cpp's grammar-integration cases from the C++ source of tests/test-grammar-integration.cpp
(read from the pinned node-llama-cpp bundle by test_grammar_bundle.sh) into the JSON file that
tests/unit/test_grammar_cases.c reads: every test_grammar / test_schema call whose four arguments are string
literals (a description, the grammar or schema, the strings it accepts, the strings it refuses), strings
hex-encoded; and, from tests/test-json-schema-to-grammar.cpp, every schema with whether llama.cpp compiles
it (SUCCESS / FAILURE: its expected grammar text is llama.cpp's own and not compared).  C++ string literals
are decoded here (escapes, raw strings, adjacent literals concatenated), and so are `token(N) + "text"`
concatenations: a token is 0xff and its id in 4 bytes big-endian, as llama.cpp's test encodes it.

KNOWN marks the strings on which cinfer differs from llama.cpp on purpose, with the reason; a case that
llama.cpp's source no longer has is simply absent.  Usage: grammar_cases.py INTEGRATION.cpp SCHEMA_TO_GRAMMAR.cpp OUT.json"""
import json
import re
import sys

# (kind, description, string) -> why cinfer judges it otherwise
KNOWN = {
    ("schema", "min 2", "12345678900000000"):
        "a valid integer >= 2 in JSON Schema; llama.cpp caps integers at 16 digits",
    ("schema", "empty schema (object)", "[]"): "JSON Schema's {} accepts every value; llama.cpp reads it as any object",
    ("schema", "empty schema (object)", "null"): "JSON Schema's {} accepts every value",
    ("schema", "empty schema (object)", '""'): "JSON Schema's {} accepts every value",
    ("schema", "empty schema (object)", "true"): "JSON Schema's {} accepts every value",
}
KNOWN_PREFIX = {
    # uniqueItems cannot be checked by a context-free grammar: cinfer produces at most one item (never an
    # array with duplicates); llama.cpp ignores the keyword
    ("schema", "required props", '{"productId": 1, "productName": "A green door", "price": 12.50, "tags": ["home", "green"]'):
        "uniqueItems: cinfer produces at most one item (llama.cpp ignores uniqueness and may repeat one)",
}

SIMPLE = {"n": 10, "t": 9, "r": 13, "\\": 92, '"': 34, "'": 39, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}
# a backslash before a newline continues the literal on the next line (it stands for nothing)


def lex(src):
    i, n, out = 0, len(src), []
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            i = src.index("*/", i) + 2
        elif c.isspace():
            i += 1
        elif c == "R" and src.startswith('R"', i):
            j = src.index("(", i)
            delim = src[i + 2:j]
            end = src.index(")" + delim + '"', j)
            out.append(("str", src[j + 1:end].encode()))
            i = end + len(delim) + 2
        elif c == '"':
            j, buf = i + 1, bytearray()
            while src[j] != '"':
                if src[j] != "\\":
                    buf += src[j].encode()
                    j += 1
                    continue
                e = src[j + 1]
                if e == "x":
                    m = re.match(r"[0-9a-fA-F]+", src[j + 2:])
                    buf.append(int(m.group(0), 16) & 0xFF)
                    j += 2 + len(m.group(0))
                elif e in "uU":
                    k = 4 if e == "u" else 8
                    buf += chr(int(src[j + 2:j + 2 + k], 16)).encode()
                    j += 2 + k
                elif e in "01234567":
                    m = re.match(r"[0-7]{1,3}", src[j + 1:])
                    buf.append(int(m.group(0), 8))
                    j += 1 + len(m.group(0))
                elif e == "\n":
                    j += 2
                else:
                    buf.append(SIMPLE[e])
                    j += 2
            out.append(("str", bytes(buf)))
            i = j + 1
        elif c == "'":  # a character literal: skipped (never an argument of the calls read here)
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            out.append(("id", "'char'"))
            i = j + 1
        elif c in "{}(),;":
            out.append((c, None))
            i += 1
        else:
            m = re.match(r"[A-Za-z_][A-Za-z_0-9:]*|\d+|.", src[i:])
            out.append(("id", m.group(0)))
            i += len(m.group(0))
    return out


def parse_args(toks, k):
    """toks[k] is '(': the call's arguments if each is a string literal or a braced list of them."""
    i = k + 1

    def term():
        nonlocal i
        if toks[i][0] == "str":
            s = b""
            while toks[i][0] == "str":
                s += toks[i][1]
                i += 1
            return s
        # token(N): llama.cpp's test encodes a token id as 0xff and 4 bytes big-endian (never valid UTF-8)
        if toks[i] == ("id", "token") and toks[i + 1][0] == "(" and toks[i + 2][1].isdigit() and toks[i + 3][0] == ")":
            n = int(toks[i + 2][1])
            i += 4
            return b"\xff" + n.to_bytes(4, "big")
        return None

    def value():
        nonlocal i
        s = term()
        while isinstance(s, bytes) and toks[i] == ("id", "+"):  # concatenation
            i += 1
            t = term()
            s = s + t if t is not None else None
        if s is not None:
            return s
        if toks[i][0] == "{":
            i += 1
            items = []
            while toks[i][0] != "}":
                v = value()
                if not isinstance(v, bytes):
                    return None
                items.append(v)
                if toks[i][0] == ",":
                    i += 1
            i += 1
            return items
        return None

    args = []
    while True:
        v = value()
        if v is None:
            return None
        args.append(v)
        if toks[i][0] == ",":
            i += 1
        elif toks[i][0] == ")":
            return args
        else:
            return None


def compile_cases(path):
    """test-json-schema-to-grammar.cpp's test({STATUS, name, schema, grammar}) cases."""
    toks = lex(open(path, encoding="utf-8").read())
    out = []
    for k, t in enumerate(toks):
        if t != ("id", "test") or toks[k + 1][0] != "(" or toks[k + 2][0] != "{":
            continue
        if toks[k + 3][0] != "id" or toks[k + 3][1] not in ("SUCCESS", "FAILURE") or toks[k + 4][0] != ",":
            continue
        i, vals = k + 5, []
        while toks[i][0] == "str":
            v = b""
            while toks[i][0] == "str":
                v += toks[i][1]
                i += 1
            vals.append(v)
            if toks[i][0] == ",":
                i += 1
        if len(vals) >= 2:
            out.append({"kind": "schema", "desc": vals[0].decode("utf-8", "replace"),
                        "text": vals[1].decode("utf-8", "surrogateescape"), "compiles": toks[k + 3][1] == "SUCCESS"})
    return out


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    toks = lex(src)
    cases, skipped = [], 0
    for k, t in enumerate(toks):
        if t not in (("id", "test_grammar"), ("id", "test_schema")) or toks[k + 1][0] != "(":
            continue
        if k > 0 and toks[k - 1] == ("id", "void"):  # the definitions themselves
            continue
        args = parse_args(toks, k + 1)
        if not args or len(args) != 4 or not isinstance(args[2], list) or not isinstance(args[3], list):
            skipped += 1
            continue
        kind = "gbnf" if t[1] == "test_grammar" else "schema"
        desc = args[0].decode("utf-8", "replace")
        known = {}
        for s in args[2] + args[3]:
            text = s.decode("utf-8", "replace")
            why = KNOWN.get((kind, desc, text))
            for (kk, kd, prefix), reason in KNOWN_PREFIX.items():
                if why is None and kk == kind and kd == desc and text.startswith(prefix):
                    why = reason
            if why:
                known[s.hex()] = why
        cases.append({"kind": kind, "desc": desc, "text": args[1].decode("utf-8", "surrogateescape"),
                      "pass": [s.hex() for s in args[2]], "fail": [s.hex() for s in args[3]], "known": known})
    compiles = compile_cases(sys.argv[2])
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(cases + compiles, f)
    print(f"grammar_cases.py: {len(cases)} cases with strings ({skipped} calls with computed arguments left "
          f"out), {len(compiles)} schemas to compile or refuse")


if __name__ == "__main__":
    main()
