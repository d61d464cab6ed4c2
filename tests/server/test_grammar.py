#!/usr/bin/env python3
"""GBNF-constrained generation through `cinfer serve` (the `grammar` request field), judged by an
independent recognizer (tests/ref/gbnf_ref.py: its own GBNF parser and an Earley recognizer, not cinfer's
code).  A random-weight model (`cinfer synth --preset tiny`, an SPM vocabulary with all 256 byte tokens)
sampled at temperature 1 has no prior for any grammar, so every token's validity comes from the mask:

- ~12 grammars (JSON, arithmetic, lists, chess moves, Japanese text through byte tokens, a C subset, English
  punctuation, balanced parentheses, bounded repetitions, a choice, emoji) x seeds x sampler settings
  (plain, top-k/top-p/min-p with the penalties, greedy with a logit_bias pushing a forbidden token), n = 2:
  a sample that ends with "stop" is a whole sentence of the grammar, one that ends with "length" a prefix of
  one;
- the chat endpoint, streaming, and preemption (a KV pool too small for the load, n > 1) keep that true;
- logprobs report the constrained distribution: with a grammar that allows only "7", the alternatives'
  probabilities sum to 1 (unconstrained, far from it);
- bad grammars get a 400 whose param is "grammar" and whose message names the problem;
- token references (<[id]>, !<[id]>, <text>) constrain by token id.
Prints PASS/FAIL lines."""
import json
import math
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ref"))
import gbnf_ref  # noqa: E402
import server_util  # noqa: E402
from server_util import BIN, Server, check, check_no_sanitizer_report  # noqa: E402

GRAMMARS = {
    "json": r'''root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= "-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws
ws     ::= | " " | "\n" [ \t]{0,20}
''',
    "arithmetic": '''root ::= (expr "=" ws term "\\n")+
expr ::= term ([-+*/] term)*
term ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num ::= [0-9]+ ws
ws ::= [ \\t\\n]*
''',
    "list": '''root ::= item{1,4}
item ::= "- " [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]{1,12} "\\n"
''',
    "chess": '''root ::= "1. " move " " move "\\n" ([1-9] [0-9]? ". " move " " move "\\n")+
move ::= (pawn | nonpawn | castle) [+#]?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle ::= "O-O" "-O"?
''',
    "japanese": '''root ::= jp{1,6} ([ \\t\\n] jp{1,6}){0,3}
jp ::= [ぁ-ゟ] | [ァ-ヿ] | [、-〾] | [\\u4e00-\\u9fff]
''',
    "c": '''root ::= decl+
decl ::= type ident "(" param? ")" "{" stmt{0,3} "}" ws
type ::= ("int" | "float" | "char") ws
param ::= type ident
stmt ::= ( type ident "=" ws expr ";" | ident "=" ws expr ";" | "return" ws expr ";" ) ws
expr ::= term (("+" | "-") ws term){0,3}
term ::= ident | [0-9]{1,4} ws | "(" expr ")" ws
ident ::= [a-zA-Z_] [a-zA-Z_0-9]{0,6} ws
ws ::= [ \\t\\n]?
''',
    "english": '''root ::= word{1,8} ([ \\t\\n] word{1,8}){0,5}
word ::= [A-Za-z] | [0-9] | punct
punct ::= [!"#$%&'()*+,-./:;<=>?@[\\\\\\]^_`{|}~]
''',
    "parens": '''root ::= p
p ::= "(" p ")" p | ""
''',
    "bounds": '''root ::= "a"{2,4} "b"{3} [xyz]{1,} "!"{0,2}
''',
    "choice": '''root ::= ("yes" | "no" | "maybe" | "yesterday") "."
''',
    "emoji": '''root ::= ("😀" | "é" | [\\U0001F600-\\U0001F64F]){1,5} "\\n"
''',
    "csv": '''root ::= row{2,3}
row ::= cell ("," cell){2} "\\n"
cell ::= [0-9]{1,3} | "\\"" [a-z ]{0,5} "\\""
''',
}

SETTINGS = [
    {"temperature": 1.0},
    {"temperature": 1.0, "top_k": 5, "top_p": 0.9, "min_p": 0.05, "presence_penalty": 1.0,
     "frequency_penalty": 0.5, "repetition_penalty": 1.3},
    {"temperature": 0.0, "logit_bias": {"300": 100}},  # a token the grammars forbid almost everywhere
]

failures_lock = threading.Lock()


def judge(g, text, finish):
    """'' when text fits the grammar for its finish reason, else why not."""
    r = gbnf_ref.recognize(g, text.rstrip("\ufffd") if finish == "length" else text)
    if finish == "stop" and r != "full":
        return f"finished 'stop' but the recognizer says {r}"
    if finish == "length" and r == "no":
        return "finished 'length' with text that no sentence starts with"
    if finish not in ("stop", "length"):
        return f"finish_reason {finish}"
    return ""


def test_generations(s):
    total = stops = 0
    bad = []
    for name, text in GRAMMARS.items():
        g = gbnf_ref.parse(text)
        for k, setting in enumerate(SETTINGS):
            for seed in range(2):
                body = {"prompt": "x", "grammar": text, "max_tokens": 120, "n": 2, "seed": 1000 * k + seed}
                body.update(setting)
                st, _, j = s.json("POST", "/v1/completions", body)
                if st != 200:
                    bad.append(f"{name}: status {st} {j}")
                    continue
                for c in j["choices"]:
                    total += 1
                    stops += c["finish_reason"] == "stop"
                    why = judge(g, c["text"], c["finish_reason"])
                    if why:
                        bad.append(f"{name} {setting} seed {seed}: {why}: {c['text']!r}")
    # Sabotage: the same model without the grammar writes text the recognizer rejects (so the check above
    # can fail).
    rejected = 0
    for name, text in GRAMMARS.items():
        st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 40, "seed": 3,
                                                      "temperature": 1})
        rejected += st == 200 and gbnf_ref.recognize(gbnf_ref.parse(text), j["choices"][0]["text"]) == "no"
    check("grammar_unconstrained_rejected", rejected == len(GRAMMARS),
          f"only {rejected} of {len(GRAMMARS)} unconstrained texts rejected")
    check("grammar_generations_valid", not bad and total > 0, f"{len(bad)} of {total}: " + " | ".join(bad[:3]))
    check("grammar_generations_finish", stops >= total // 2, f"only {stops} of {total} finished with 'stop'")
    print(f"  {total} samples over {len(GRAMMARS)} grammars, {stops} finished 'stop', all accepted")


def test_chat_and_stream(s):
    g = gbnf_ref.parse(GRAMMARS["json"])
    st, _, j = s.json("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "give me JSON"}], "grammar": GRAMMARS["json"],
        "max_tokens": 150, "seed": 5, "temperature": 1})
    ok = st == 200 and not judge(g, j["choices"][0]["message"]["content"], j["choices"][0]["finish_reason"])
    check("grammar_chat", ok, f"{st} {j}")
    g = gbnf_ref.parse(GRAMMARS["chess"])
    st, events, done = s.stream("/v1/completions", {"prompt": "x", "grammar": GRAMMARS["chess"],
                                                    "max_tokens": 80, "seed": 9, "stream": True})
    text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    finish = [e["choices"][0]["finish_reason"] for e in events if e.get("choices") and
              e["choices"][0].get("finish_reason")]
    check("grammar_stream", st == 200 and done and finish and not judge(g, text, finish[-1]),
          f"{st} {text!r} {finish}")


def test_logprobs(s):
    # Only "7" then the end: the vocabulary has two tokens for "7" (a piece and the byte token), and the
    # constrained distribution over them sums to 1; every other alternative is at the -9999 floor.
    body = {"messages": [{"role": "user", "content": "hi"}], "grammar": 'root ::= "7"\n', "max_tokens": 3,
            "logprobs": True, "top_logprobs": 5, "seed": 1}
    st, _, j = s.json("POST", "/v1/chat/completions", body)
    ok = st == 200 and j["choices"][0]["message"]["content"] == "7"
    tops = j["choices"][0]["logprobs"]["content"][0]["top_logprobs"] if ok else []
    live = [t for t in tops if t["logprob"] > -9999]
    total = sum(math.exp(t["logprob"]) for t in live)
    check("grammar_logprobs_constrained", ok and abs(total - 1.0) < 1e-4 and len(live) >= 1 and
          all(t["token"] == "7" for t in live), f"{st} {j if not ok else tops} sum {total}")
    # The same request without the grammar: other tokens are among the alternatives, and the two "7"
    # tokens do not hold the whole mass.
    del body["grammar"]
    st, _, j = s.json("POST", "/v1/chat/completions", body)
    tops = j["choices"][0]["logprobs"]["content"][0]["top_logprobs"] if st == 200 else []
    sevens = sum(math.exp(t["logprob"]) for t in tops if t["token"] == "7")
    check("grammar_logprobs_sabotage", st == 200 and any(t["token"] != "7" for t in tops) and sevens < 0.99,
          f"unconstrained: {tops}")


def test_errors(s):
    cases = [
        ("undefined", "root ::= foo\n", "undefined rule 'foo'"),
        ("syntax", 'root ::= "a"\nb ::= [a-\n', "line 2"),
        ("left_recursion", 'root ::= root "a" | "b"\n', "left-recursive"),
        ("empty_language", 'root ::= "a" root\n', "empty"),
        ("no_root", 'start ::= "a"\n', "no rule named 'root'"),
        ("bad_escape", 'root ::= "\\q"\n', "unknown escape"),
        ("too_deep", "root ::= " + "(" * 100 + '"a"' + ")" * 100 + "\n", "nested more than 64 deep"),
        ("too_large", 'root ::= "' + "abcdefghij" * 40 + '"{10000}\n', "too large"),
    ]
    for name, text, want in cases:
        for ep, body in (("completions", {"prompt": "x"}), ("chat", {"messages": [{"role": "user",
                                                                                    "content": "hi"}]})):
            body = dict(body, grammar=text, max_tokens=4)
            st, _, j = s.json("POST", f"/v1/{'chat/' if ep == 'chat' else ''}completions", body)
            e = j.get("error", {}) if isinstance(j, dict) else {}
            check(f"grammar_400_{name}_{ep}", st == 400 and e.get("param") == "grammar" and
                  want in e.get("message", "") and e.get("type") == "invalid_request_error" and
                  e.get("code") is None, f"{st} {j}")
    st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": 5})
    check("grammar_400_not_a_string", st == 400 and j["error"]["param"] == "grammar", f"{st} {j}")
    st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": "", "max_tokens": 2})
    check("grammar_empty_is_none", st == 200, f"{st} {j}")


def test_token_references(s):
    """llama.cpp's token references: <[id]> is that token whole (never the same text spelled by other tokens),
    !<[id]> any one token but that one, <text> the token the text encodes to (special tokens too).  The tiny
    vocabulary's 611 is "el", 981 "lo", 0 "<unk>"."""
    pieces = {}
    for i in (611, 981):
        st, _, j = s.json("POST", "/detokenize", {"tokens": [i]})
        pieces[i] = j.get("prompt") if st == 200 else j
    check("grammar_tokens_setup", pieces == {611: "el", 981: "lo"}, f"{pieces}")
    for seed in (1, 2, 3):
        body = {"prompt": "x", "grammar": "root ::= <[611]> (!<[611]>){3} <[981]>\n", "max_tokens": 10,
                "temperature": 1, "seed": seed}
        st, _, j = s.json("POST", "/v1/completions", body)
        c = j["choices"][0] if st == 200 else {}
        text = c.get("text", "")
        ok = (st == 200 and c.get("finish_reason") == "stop" and text.startswith("el") and text.endswith("lo")
              and j["usage"]["completion_tokens"] == 5)
        check(f"grammar_tokens_by_id_{seed}", ok, f"{st} {j}")
    # By text, a special token: <unk> decodes to nothing, so "a" <unk> "b" gives "ab" in 3 tokens.
    st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": 'root ::= "a" <unk> "b"\n',
                                                  "max_tokens": 6, "temperature": 1, "seed": 4})
    check("grammar_tokens_by_text", st == 200 and j["choices"][0]["finish_reason"] == "stop" and
          j["usage"]["completion_tokens"] == 3 and j["choices"][0]["text"].replace("<unk>", "") == "ab",
          f"{st} {j}")
    for name, g, want in (("id_out_of_range", "root ::= <[5000]>\n", "the vocabulary has 1024 tokens"),
                          ("not_one_token", "root ::= <hello world>\n", "is not a single token"),
                          ("negation_without_token", "root ::= !x\n", "expected '<' after '!'")):
        st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": g, "max_tokens": 2})
        e = j.get("error", {}) if isinstance(j, dict) else {}
        check(f"grammar_400_tokens_{name}", st == 400 and e.get("param") == "grammar" and
              want in e.get("message", ""), f"{st} {j}")


def test_preemption(model):
    # 16 blocks of 16 tokens for 4 requests of n = 2 that each want up to ~100 tokens: sequences are
    # preempted and recomputed; each sample's matcher must still follow its own tokens.
    s = Server("--kv-blocks", "16", "--block-size", "16", "--max-seqs", "8", model=model)
    try:
        g = gbnf_ref.parse(GRAMMARS["json"])
        results, bad = [], []

        def one(i):
            st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "grammar": GRAMMARS["json"], "n": 2,
                                                          "max_tokens": 90, "seed": 77 + i, "temperature": 1})
            results.append((st, j))

        ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for st, j in results:
            if st != 200:
                bad.append(f"status {st} {j}")
                continue
            for c in j["choices"]:
                why = judge(g, c["text"], c["finish_reason"])
                if why:
                    bad.append(f"{why}: {c['text']!r}")
        m = s.metrics()
        pre = sum(v for k, v in m.items() if "preempt" in k)
        check("grammar_preemption_valid", len(results) == 4 and not bad, " | ".join(bad[:3]))
        check("grammar_preemption_happened", pre > 0, f"preemption metrics {pre}")
    finally:
        s.kill()


def main():
    if not os.path.exists(BIN):
        print(f"FAIL grammar_setup: no binary {BIN}")
        return 1
    tmp = tempfile.mkdtemp(prefix="cinfer-grammar-")
    model = os.path.join(tmp, "tiny.gguf")
    import subprocess
    r = subprocess.run([BIN, "synth", "--preset", "tiny", "--seed", "7", "-o", model], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print(f"FAIL grammar_setup: synth: {r.stderr}")
        return 1
    s = Server("--max-seqs", "16", model=model)
    try:
        for t in (test_generations, test_chat_and_stream, test_logprobs, test_errors, test_token_references):
            try:
                t(s)
            except Exception as e:
                check(t.__name__, False, f"exception {e!r}")
    finally:
        s.kill()
    try:
        test_preemption(model)
    except Exception as e:
        check("test_preemption", False, f"exception {e!r}")
    check_no_sanitizer_report("grammar_no_sanitizer_report")
    os.remove(model)
    os.rmdir(tmp)
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
