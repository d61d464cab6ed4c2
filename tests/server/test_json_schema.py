#!/usr/bin/env python3
"""Structured outputs through `cinfer serve`: JSON Schema, regex and choice constraints (response_format,
json_schema, guided_json / guided_regex / guided_choice / guided_grammar, structured_outputs), judged by
independent references: python3-jsonschema with strict format checks (tests/ref/schema_ref.py) and Python's
`re.fullmatch`.  A random-weight model (`cinfer synth --preset tiny`) at temperature 1 has no prior, so every
output's shape comes from the grammar; a logit_bias on the '"', '}' and ']' tokens stands in for a prior that
closes strings and lists (bench/jsonschemabench.py's closing_bias), or free strings would run to max_tokens.

- the corpus tests/server/data/schemas.jsonl (248 schemas: every type, bounds, patterns, formats, enums,
  $ref recursion, allOf/anyOf/oneOf, drafts 4/7/2020-12): every one compiles, 3 seeded samples each, every
  finished output validates (no exception), and at most 5% of outputs are cut by max_tokens;
- a fixed subset of JSONSchemaBench (every 40th schema of Glaiveai2K, Github_trivial, Github_easy): no
  compiled schema yields an invalid output;
- under the sanitizer builds (tests/run.sh sets CINFER_TEST_SAMPLE), every K-th schema of both;
- regexes (guided_regex, structured_outputs.regex): finished outputs fullmatch; choices are one of the list;
- every request field and both endpoints (chat's message content), json_object;
- unsupported keywords and regex constructs are 400s naming them, with the field as param; invalid
  schemas, two constraints at once, deep and huge schemas are 400s (or compile in bounded time), no crash.
Prints PASS/FAIL lines."""
import json
import os
import re
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import jsonschemabench as jsb  # noqa: E402
import schema_ref  # noqa: E402
import server_util  # noqa: E402
from server_util import BIN, Server, check, check_no_sanitizer_report  # noqa: E402


def post(s, body, path="/v1/completions"):
    b = {"prompt": "x", "temperature": 1.0, "max_tokens": 200, "seed": 1}
    if path.endswith("chat/completions"):
        del b["prompt"]
        b["messages"] = [{"role": "user", "content": "hi"}]
    b.update(body)
    if jsb.BIAS and "logit_bias" not in b:
        b["logit_bias"] = jsb.BIAS
    return s.json("POST", path, b, timeout=300)


def test_corpus(s):
    schemas = jsb.load_file(os.path.join(HERE, "data", "schemas.jsonl"))
    out = []
    s_, results = jsb.run_subset(s, "corpus", schemas[::server_util.SAMPLE], 3, 480, 4, show_invalid=True,
                                 log=out.append)
    print("\n".join(out))
    not_compiled = [(r["id"], r["status"], r["error"][:120]) for r in results if r["status"] != 200]
    check("corpus_all_compile", not not_compiled, f"{not_compiled[:5]}")
    bad = [(r["id"], r["invalid"][:1]) for r in results if r.get("invalid")]
    check("corpus_all_outputs_valid", not bad, f"{len(bad)} schemas with invalid outputs: {bad[:3]}")
    cut = sum(r["length"] for r in results)
    total = 3 * len(results)
    check("corpus_outputs_finish", cut <= 0.05 * total, f"{cut} of {total} outputs cut by max_tokens")
    check("corpus_size", len(schemas) >= 200, f"{len(schemas)} schemas")


# multipleOf (integer divisors) and 'not' of types: compiled exactly; multipleOf as a list of multiples in a bounded range or a divisibility
# automaton (one rule per remainder) on an unbounded one; every sample is valid by python3-jsonschema, and the
# samples are not all alike (the grammar does not collapse to one value).
MULTIPLE_OF = [
    {"type": "integer", "multipleOf": 7},
    {"type": "integer", "multipleOf": 3, "minimum": 0},
    {"type": "integer", "multipleOf": 5, "minimum": 1},
    {"type": "integer", "multipleOf": 12, "maximum": -1},
    {"type": "integer", "multipleOf": 10, "minimum": -95, "maximum": 1000},
    {"type": "integer", "multipleOf": 250, "exclusiveMinimum": 0, "exclusiveMaximum": 100000},
    {"type": "integer", "multipleOf": 1000000, "minimum": 0, "maximum": 100000000},
    {"type": "number", "multipleOf": 4},
    {"type": "number", "multipleOf": 2, "minimum": 0.5, "maximum": 99.5},
    {"multipleOf": 9},
    {"type": ["integer", "string"], "multipleOf": 6, "maxLength": 3},
    {"allOf": [{"type": "integer", "multipleOf": 4}, {"multipleOf": 6}]},
    {"type": "object", "properties": {"qty": {"type": "integer", "multipleOf": 25, "minimum": 0},
                                      "price": {"type": "number", "multipleOf": 1}},
     "required": ["qty", "price"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "multipleOf": 13}, "minItems": 2, "maxItems": 4},
    # not {"type": ...}: compiled by removing the types
    {"not": {"type": "null"}},
    {"type": ["string", "integer", "null"], "not": {"type": ["string", "null"]}},
    {"type": "object", "properties": {"a": {"not": {"type": ["object", "array", "string"]}}}, "required": ["a"]},
]


def test_keywords(s):
    schemas = [(f"k{i}", sc) for i, sc in enumerate(MULTIPLE_OF)]
    out = []
    _, results = jsb.run_subset(s, "keywords", schemas, 4, 400, 4, show_invalid=True, log=out.append)
    print("\n".join(out))
    not_compiled = [(r["id"], r["status"], r["error"][:160]) for r in results if r["status"] != 200]
    check("keywords_all_compile", not not_compiled, f"{not_compiled}")
    bad = [(r["id"], r["invalid"][:1]) for r in results if r.get("invalid")]
    check("keywords_outputs_valid", not bad, f"{bad[:3]}")
    cut = sum(r["length"] for r in results)
    check("keywords_outputs_finish", cut <= 5, f"{cut} outputs cut by max_tokens")
    # the outputs themselves: every sample of the unbounded {"multipleOf": 7} differs from "0" somewhere
    texts = set()
    for seed in range(4):
        st, _, j = post(s, {"guided_json": MULTIPLE_OF[0], "seed": 100 + seed, "max_tokens": 400})
        if st == 200 and j["choices"][0]["finish_reason"] == "stop":
            texts.add(j["choices"][0]["text"])
    ok = len(texts) >= 2 and all(int(t) % 7 == 0 for t in texts)
    check("multipleof_outputs_vary", ok, f"{texts}")


def test_bench_subset(s):
    for subset in ("Glaiveai2K", "Github_trivial", "Github_easy"):
        path = os.path.join(jsb.DATA, subset + ".jsonl")
        if not os.path.exists(path):
            check(f"jsonschemabench_{subset}", False, f"no {path}")
            continue
        out = []
        summ, results = jsb.run_subset(s, subset, jsb.load(subset, 40 * server_util.SAMPLE), 3, 400, 4,
                                       show_invalid=True, log=out.append)
        print("\n".join(out))
        bad = [r["id"] for r in results if r.get("invalid")]
        check(f"jsonschemabench_{subset}_no_invalid_output", not bad, f"{bad[:5]}")
        crashed = [r["id"] for r in results if r["status"] not in (200, 400, "bad-schema", "ref-error")]
        check(f"jsonschemabench_{subset}_answers", not crashed, f"{crashed[:5]}")


REGEXES = [
    r"[a-z]{3,6}",
    r"\d{3}-\d{4}",
    r"(cat|dog|bird)s?",
    r"^[A-Z][a-z]{0,8}( [A-Z][a-z]{0,8}){0,2}$",
    r"(?:0|[1-9]\d{0,3})(\.\d{1,2})?",
    r"[^\n]{1,10}\n",
    r"\w{1,8}@\w{1,8}\.(com|org)",
    r"a*b+c?d{2}",
    r"[\u4e00-\u4e2f]{1,3}",
    r"(ab|cd)*e",
    r"\s\S\d\D\w\W",
    r"[.*+?]{2}\.\*",
    r"x{2,}?y+?z??",
    r"\x41\u0042[\x43-\x45]\t",
]


def test_regex(s):
    bad, n_stop, unfinished = [], 0, []
    for i, rx in enumerate(REGEXES):
        for field in ("guided_regex", "structured_outputs"):
            body = {"n": 3, "seed": 10 * i, "max_tokens": 60}
            body[field] = rx if field == "guided_regex" else {"regex": rx}
            st, _, j = post(s, body)
            if st != 200:
                bad.append(f"{rx}: status {st} {j}")
                continue
            for ch in j["choices"]:
                if ch["finish_reason"] != "stop":
                    unfinished.append(rx)
                else:
                    n_stop += 1
                    if not re.fullmatch(rx, ch["text"]):
                        bad.append(f"{rx!r} via {field}: {ch['text']!r} does not fullmatch")
    check("regex_outputs_fullmatch", not bad, "; ".join(bad[:4]))
    check("regex_outputs_finish", n_stop >= 0.9 * 6 * len(REGEXES), f"{n_stop} finished; not: {unfinished}")


def test_choice(s):
    choices = ["yes", "no", "maybe so", "é\"quoted\\", "ça"]
    seen, bad = set(), []
    for seed in range(6):
        for body in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
            st, _, j = post(s, dict(body, n=4, seed=seed, logit_bias={}))
            if st != 200:
                bad.append(f"status {st} {j}")
                continue
            for ch in j["choices"]:
                seen.add(ch["text"])
                if ch["text"] not in choices or ch["finish_reason"] != "stop":
                    bad.append(repr(ch["text"]))
    check("choice_outputs_in_list", not bad, "; ".join(bad[:4]))
    check("choice_outputs_vary", len(seen) >= 2, f"{seen}")


def test_fields(s):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                                               "s": {"enum": ["a", "b"]}}, "required": ["n", "s"],
              "additionalProperties": False}
    ok = True
    for path in ("/v1/completions", "/v1/chat/completions"):
        for body in ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                                 "strict": True}}},
                     {"json_schema": schema}, {"guided_json": schema}, {"guided_json": json.dumps(schema)},
                     {"structured_outputs": {"json": schema}}):
            st, _, j = post(s, dict(body, n=2), path)
            if st != 200:
                ok = check(f"field_{list(body)[0]}_{path}", False, f"{st} {j}")
                continue
            for ch in j["choices"]:
                text = ch["text"] if "text" in ch else ch["message"]["content"]
                try:
                    why = schema_ref.errors(schema, json.loads(text))
                except ValueError as e:
                    why = str(e)
                if why or ch["finish_reason"] != "stop":
                    ok = check(f"field_{list(body)[0]}_{path}", False, f"{text!r}: {why}")
    check("fields_all_constrain", ok)
    good = True
    for body in ({"response_format": {"type": "json_object"}}, {"structured_outputs": {"json_object": True}}):
        st, _, j = post(s, dict(body, n=3, max_tokens=300))
        for ch in j.get("choices", []) if st == 200 else []:
            if ch["finish_reason"] == "stop":
                good &= isinstance(json.loads(ch["text"]), dict)
        good &= st == 200
    check("json_object_gives_objects", good)
    st, _, j = post(s, {"response_format": {"type": "text"}, "max_tokens": 5})
    check("response_format_text_is_free", st == 200, f"{st} {j}")
    st, _, j = post(s, {"guided_grammar": 'root ::= "ok" [0-9]', "n": 2})
    check("guided_grammar", st == 200 and all(re.fullmatch(r"ok\d", c["text"]) for c in j["choices"]),
          f"{st} {j}")
    st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "stream": True, "max_tokens": 50,
                                                  "guided_regex": "[0-9]{5}"})
    check("stream_status", st == 200, f"{st}")


def expect_400(s, name, body, param, words):
    st, _, j = post(s, body)
    err = j.get("error", {}) if isinstance(j, dict) else {}
    msg = err.get("message", "")
    ok = st == 400 and err.get("param") == param and all(w in msg for w in words)
    check(name, ok, f"status {st} param {err.get('param')!r} message {msg!r}")


def test_errors(s):
    def js(schema):
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    for kw, schema in (("multipleOf", {"type": "number", "multipleOf": 0.01}),
                       ("multipleOf", {"type": "integer", "multipleOf": 1001}),
                       ("multipleOf", {"type": "integer", "multipleOf": 7, "minimum": 50}),
                       ("multipleOf", {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 3000}),
                       ("not", {"not": {"type": "string", "maxLength": 3}}),
                       ("not", {"type": "number", "not": {"type": "integer"}}),
                       ("if", {"if": {"type": "string"}, "then": {"maxLength": 2}}),
                       ("patternProperties", {"type": "object", "properties": {"\u00e9": {}},
                                              "patternProperties": {"^a": {}}}),
                       ("dependencies", {"type": "object", "properties": {"a": {}}, "required": ["a"],
                                         "additionalProperties": False, "dependencies": {"a": ["b"]}}),
                       ("dependentSchemas", {"type": "object", "properties": {"a": {}}, "required": ["a"],
                                             "dependentSchemas": {"a": {"required": ["c"]}}}),
                       ("propertyNames", {"type": "object", "propertyNames": {"maxLength": 2}}),
                       ("contains", {"type": "array", "contains": {"type": "integer"}}),
                       ("uniqueItems", {"type": "array", "uniqueItems": True, "minItems": 2}),
                       ("format", {"type": "string", "format": "ipv6"}),
                       ("oneOf", {"oneOf": [{"type": "integer"}, {"type": "number"}]})):
        expect_400(s, f"unsupported_{kw}", js(schema), "response_format", [kw])
    expect_400(s, "unsupported_nested_keyword", {"guided_json": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"not": {}}}}}}, "guided_json", ["not", "/properties/a/items"])
    for what, rx in (("backreferences", r"(a)\1"), ("lookahead", "(?=a)b"), ("lookbehind", "(?<=a)b"),
                     ("word boundary", r"\bx"), ("Unicode property", r"\p{L}"), ("anchor", "a^b")):
        expect_400(s, f"regex_unsupported_{what.replace(' ', '_')}", {"guided_regex": rx}, "guided_regex",
                   [what])
    expect_400(s, "pattern_unsupported_in_schema", js({"type": "string", "pattern": "(?!x)y"}),
               "response_format", ["pattern", "lookahead"])
    expect_400(s, "regex_syntax", {"guided_regex": "(ab"}, "guided_regex", ["missing ')'"])
    expect_400(s, "schema_not_json", {"guided_json": "{\"type\": "}, "guided_json", ["not valid JSON"])
    expect_400(s, "schema_bad_type", js({"type": 5}), "response_format", ["type"])
    expect_400(s, "schema_bad_multipleof", js({"type": "integer", "multipleOf": -2}), "response_format",
               ["multipleOf"])
    expect_400(s, "schema_multipleof_nothing_fits", js({"type": "integer", "multipleOf": 10, "minimum": 1,
                                                        "maximum": 9}), "response_format", ["multiple"])
    expect_400(s, "schema_bad_ref", js({"$ref": "#/$defs/nope"}), "response_format", ["$ref", "nope"])
    expect_400(s, "schema_remote_ref", js({"$ref": "http://example.com/s.json"}), "response_format",
               ["$ref", "within the schema"])
    expect_400(s, "schema_false", js(False), "response_format", ["false"])
    expect_400(s, "two_constraints", {"guided_regex": "a", "json_schema": {"type": "integer"}}, "guided_regex",
               ["json_schema", "guided_regex"])
    expect_400(s, "response_format_type", {"response_format": {"type": "yaml"}}, "response_format", ["type"])
    expect_400(s, "choice_not_strings", {"guided_choice": ["a", 3]}, "guided_choice", ["array of strings"])
    deep = {"type": "integer"}
    for _ in range(100):
        deep = {"type": "array", "items": deep}
    expect_400(s, "schema_too_deep", js(deep), "response_format", ["deeper"])
    deep_json = "[" * 5000 + "]" * 5000
    expect_400(s, "schema_deep_json", {"guided_json": deep_json}, "guided_json", ["deeper"])
    huge = {"type": "object", "properties": {f"p{i}": {"type": "integer", "minimum": i, "maximum": 10 * i + 5}
                                             for i in range(3000)}}
    t0 = time.monotonic()
    st, _, j = post(s, dict(js(huge), max_tokens=5))
    dt = time.monotonic() - t0
    check("schema_huge_bounded", st in (200, 400) and dt < 20, f"status {st} in {dt:.1f} s {str(j)[:200]}")
    wide = {"anyOf": [{"const": i} for i in range(300)]}
    expect_400(s, "schema_wide_anyof", js(wide), "response_format", ["anyOf", "256"])
    st, _, j = post(s, {"guided_regex": "(" * 40 + ")" * 40})
    check("regex_too_nested", st == 400 and "nested" in str(j), f"{st} {j}")
    st, _, j = post(s, {"guided_regex": "a{5000}{5000}"})
    check("regex_nothing_to_repeat", st == 400, f"{st} {j}")
    t0 = time.monotonic()
    st, _, j = post(s, {"guided_regex": "(a{1000}){3000}", "max_tokens": 5})
    dt = time.monotonic() - t0
    check("regex_blowup_bounded", st in (200, 400) and dt < 20, f"{st} in {dt:.1f} s {str(j)[:200]}")


def main():
    if not os.path.exists(BIN):
        print(f"FAIL json_schema_setup: no binary {BIN}")
        return 1
    tmp = tempfile.mkdtemp(prefix="cinfer-jsonschema-")
    try:
        model = jsb.synth_model(BIN, tmp)
    except RuntimeError as e:
        print(f"FAIL json_schema_setup: {e}")
        return 1
    s = Server("--max-seqs", "16", model=model)
    only = sys.argv[1:]
    try:
        jsb.BIAS.update(jsb.closing_bias(s))
        check("closing_bias_tokens", len(jsb.BIAS) == 3, f"{jsb.BIAS}")
        for t in (test_errors, test_fields, test_choice, test_regex, test_keywords, test_corpus,
                  test_bench_subset):
            if only and not any(o in t.__name__ for o in only):
                continue
            try:
                t(s)
            except Exception as e:
                check(t.__name__, False, f"exception {e!r}")
    finally:
        s.kill()
    check_no_sanitizer_report("json_schema_no_sanitizer_report")
    os.remove(model)
    os.rmdir(tmp)
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
