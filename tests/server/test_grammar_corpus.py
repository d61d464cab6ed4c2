#!/usr/bin/env python3
"""Every grammar of the corpus (tests/data/grammars: llama.cpp's examples and grammars written for the tests)
through `cinfer serve`'s `grammar` field, judged by the independent recognizer (tests/ref/gbnf_ref.py: its own
GBNF parser and an Earley recognizer, not cinfer's code).  Two random-weight models, sampled at temperature
1 (seeded), so every token's validity comes from the mask:

- `cinfer synth --preset tiny`: a 1024-token SentencePiece-style vocabulary with the 256 byte tokens;
- a small random llama with GPT-2's 50,257-token byte-level BPE vocabulary (tokenizer KVs copied from
  ggml-vocab-gpt-2.gguf into a GGUF written by tests/ref/gguf_write_np.py): multi-byte characters come as
  several tokens, and tokens end inside characters.

A sample that ends with "stop" must be a whole sentence of the grammar, one that ends with "length" a prefix
of one.  Sabotage: the same requests without the grammar give texts the recognizer rejects for most grammars.
Prints PASS/FAIL lines."""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ref"))
import gbnf_ref  # noqa: E402
import gguf_np  # noqa: E402
import gguf_write_np  # noqa: E402
import server_util  # noqa: E402
from server_util import BIN, Server, check, check_no_sanitizer_report  # noqa: E402

CORPUS = os.path.join(os.path.dirname(HERE), "data", "grammars")
MODELS = os.environ.get("CINFER_MODELS", os.path.join(os.path.dirname(os.path.dirname(HERE)), "..", "shared",
                                                      "models"))


def judge(g, text, finish):
    """'' when text fits the grammar for its finish reason, else why not.  A "length" text may end inside a
    character (the server shows the partial bytes as U+FFFD)."""
    if finish == "stop":
        r = gbnf_ref.recognize(g, text)
        return "" if r == "full" else f"finished 'stop' but the recognizer says {r}"
    if finish == "length":
        r = gbnf_ref.recognize(g, text.rstrip("\ufffd"))
        return "" if r != "no" else "finished 'length' with text that no sentence starts with"
    return f"finish_reason {finish}"


def bpe_model(path):
    """A random 2-layer llama with GPT-2's tokenizer (every tokenizer.* KV of ggml-vocab-gpt-2.gguf)."""
    v = gguf_np.GGUF(os.path.join(MODELS, "ggml-vocab", "ggml-vocab-gpt-2.gguf"))
    kvs = []
    for key, val in v.kv.items():
        if not key.startswith("tokenizer."):
            continue
        vt = v.kv_type[key]
        if vt == gguf_np.T_ARRAY:
            if isinstance(val, list):
                val = (gguf_np.T_STRING, val)
            else:
                et = {"<i4": gguf_np.T_INT32, "<f4": gguf_np.T_FLOAT32, "<u4": gguf_np.T_UINT32}[val.dtype.str]
                val = (et, val)
        kvs.append((key, vt, val))
    n_vocab = len(v.kv["tokenizer.ggml.tokens"])
    d, ff, layers, heads = 64, 128, 2, 4
    U, F = gguf_np.T_UINT32, gguf_np.T_FLOAT32
    kvs = [("general.architecture", gguf_np.T_STRING, "llama"), ("general.name", gguf_np.T_STRING, "bpe-rand"),
           ("llama.context_length", U, 512), ("llama.embedding_length", U, d), ("llama.feed_forward_length", U, ff),
           ("llama.block_count", U, layers), ("llama.attention.head_count", U, heads),
           ("llama.attention.head_count_kv", U, heads), ("llama.rope.dimension_count", U, d // heads),
           ("llama.rope.freq_base", F, 10000.0), ("llama.attention.layer_norm_rms_epsilon", F, 1e-5)] + kvs
    rng = np.random.default_rng(3)

    def mat(n_out, n_in, scale=1.0):
        return (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)

    t = [("token_embd.weight", rng.standard_normal((n_vocab, d)).astype(np.float32), gguf_np.F32)]
    for i in range(layers):
        b = f"blk.{i}."
        t += [(b + "attn_norm.weight", np.ones(d, np.float32), gguf_np.F32),
              (b + "attn_q.weight", mat(d, d), gguf_np.F32), (b + "attn_k.weight", mat(d, d), gguf_np.F32),
              (b + "attn_v.weight", mat(d, d), gguf_np.F32), (b + "attn_output.weight", mat(d, d), gguf_np.F32),
              (b + "ffn_norm.weight", np.ones(d, np.float32), gguf_np.F32),
              (b + "ffn_gate.weight", mat(ff, d), gguf_np.F32), (b + "ffn_up.weight", mat(ff, d), gguf_np.F32),
              (b + "ffn_down.weight", mat(d, ff), gguf_np.F32)]
    t += [("output_norm.weight", np.ones(d, np.float32), gguf_np.F32),
          ("output.weight", mat(n_vocab, d, 4.0), gguf_np.F32)]
    gguf_write_np.write_gguf(path, kvs, t)


def run_corpus(s, label, grammars, seeds, n, max_tokens):
    total = stops = 0
    bad = []
    for name, text, g in grammars:
        for seed in seeds:
            body = {"prompt": "x", "grammar": text, "max_tokens": max_tokens, "n": n, "seed": seed,
                    "temperature": 1.0}
            st, _, j = s.json("POST", "/v1/completions", body)
            if st != 200:
                bad.append(f"{name}: status {st} {j}")
                continue
            for c in j["choices"]:
                total += 1
                stops += c["finish_reason"] == "stop"
                why = judge(g, c["text"], c["finish_reason"])
                if why:
                    bad.append(f"{name} seed {seed}: {why}: {c['text']!r}")
    check(f"corpus_generations_valid_{label}", not bad and total == len(grammars) * len(seeds) * n,
          f"{len(bad)} bad of {total}: " + " | ".join(bad[:3]))
    print(f"  {label}: {total} samples over {len(grammars)} grammars, {stops} finished 'stop', "
          f"{total - len(bad)} accepted by the reference")
    # Sabotage: without the grammar, the texts are rejected for most grammars (so the check above can fail).
    rejected = 0
    for name, text, g in grammars:
        st, _, j = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": max_tokens, "seed": seeds[0],
                                                      "temperature": 1.0})
        rejected += st == 200 and gbnf_ref.recognize(g, j["choices"][0]["text"].rstrip("\ufffd")) == "no"
    check(f"corpus_unconstrained_rejected_{label}", rejected >= 0.8 * len(grammars),
          f"only {rejected} of {len(grammars)} unconstrained texts rejected")


def main():
    if not os.path.exists(BIN):
        print(f"FAIL corpus_setup: no binary {BIN}")
        return 1
    grammars = []
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.gbnf"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        grammars.append((os.path.basename(path)[:-5], text, gbnf_ref.parse(text)))
    check("corpus_size", len(grammars) >= 50, f"{len(grammars)} grammars in {CORPUS}")
    grammars = grammars[::server_util.SAMPLE]
    tmp = tempfile.mkdtemp(prefix="cinfer-grammar-corpus-")
    try:
        tiny = os.path.join(tmp, "tiny.gguf")
        r = subprocess.run([BIN, "synth", "--preset", "tiny", "--seed", "11", "-o", tiny], capture_output=True,
                           text=True)
        check("corpus_setup_tiny", r.returncode == 0, r.stderr)
        s = Server("--max-seqs", "16", model=tiny)
        try:
            run_corpus(s, "tiny_spm", grammars, [1, 2], 4, 64)
        finally:
            s.kill()
        if os.path.exists(os.path.join(MODELS, "ggml-vocab", "ggml-vocab-gpt-2.gguf")):
            bpe = os.path.join(tmp, "bpe.gguf")
            bpe_model(bpe)
            s = Server("--max-seqs", "16", model=bpe, timeout=60)
            try:
                run_corpus(s, "gpt2_bpe", grammars, [3], 4, 48)
            finally:
                s.kill()
        else:
            print("SKIP corpus_generations_valid_gpt2_bpe (no ggml-vocab-gpt-2.gguf)")
    finally:
        for f in glob.glob(os.path.join(tmp, "*")):
            os.remove(f)
        os.rmdir(tmp)
    check_no_sanitizer_report("corpus_no_sanitizer_report")
    return 1 if server_util.failures else 0


if __name__ == "__main__":
    sys.exit(main())
