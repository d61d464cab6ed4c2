"""The vocabulary files agree with each other, read by independent parsers (no cinfer code involved):
SentencePiece tokenizer.model (protobuf) and llama2.c tokenizer.bin hold the same pieces, scores and token types as
ggml-vocab-llama-spm.gguf (Llama 2's 32000 tokens); tok512.model and tok512.bin the same as stories260K.gguf.
cinfer's own tokenization through tokenizer.bin and through the GGUF is compared in tests/unit/test_tokenizer.c."""

import struct

import ciref
import gguf_np
import llama2c_np


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def fields(buf):
    """Yields (field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i : i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i : i + n], i + n
        elif wt == 5:
            v, i = buf[i : i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, wt, v


def read_spm_model(path):
    """ModelProto.pieces (field 1): SentencePiece {piece = 1 (string), score = 2 (float), type = 3 (enum,
    default NORMAL = 1)}.  The enum numbering equals GGUF's tokenizer.ggml.token_type."""
    pieces, scores, types = [], [], []
    with open(path, "rb") as f:
        data = f.read()
    for num, wt, v in fields(data):
        if num != 1 or wt != 2:
            continue
        piece, score, ttype = b"", 0.0, 1
        for n2, _, v2 in fields(v):
            if n2 == 1:
                piece = bytes(v2)
            elif n2 == 2:
                score = struct.unpack("<f", v2)[0]
            elif n2 == 3:
                ttype = v2
        pieces.append(piece.decode("utf-8"))
        scores.append(score)
        types.append(ttype)
    return pieces, scores, types


def gguf_vocab(path):
    g = gguf_np.GGUF(path)
    return (
        list(g.get("tokenizer.ggml.tokens")),
        [float(s) for s in g.get("tokenizer.ggml.scores")],
        [int(t) for t in g.get("tokenizer.ggml.token_type")],
    )


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "index %d: %r != %r" % (i, x, y)
    return None if len(a) == len(b) else "lengths %d != %d" % (len(a), len(b))


def compare(rep, name, got, want):
    for what, x, y in zip(("pieces", "scores", "types"), got, want):
        if x is None or y is None:  # tokenizer.bin stores no token types
            continue
        d = first_difference(x, y)
        if d:
            return rep.fail(name, "%s differ at %s" % (what, d))
    rep.ok(name, "%d tokens" % len(got[0]))


def bin_vocab(path, n_vocab):
    """tokenizer.bin as written by llama2.c's export: SentencePiece's U+2581 became a space and BOS/EOS read
    '\\n<s>\\n' / '\\n</s>\\n'; undo both to compare with the SentencePiece pieces."""
    pieces, scores = llama2c_np.read_tokenizer(path, n_vocab)
    fixed = []
    for i, p in enumerate(pieces):
        s = p.decode("utf-8") if isinstance(p, bytes) else p
        if i in (1, 2):
            s = s.strip("\n")
        fixed.append(s.replace(" ", "\u2581"))
    return fixed, [float(x) for x in scores], None


def main():
    rep = ciref.Report()
    cases = [
        ("vocab_tokenizer_model_vs_llama_spm_gguf", read_spm_model, "tokenizer.model",
         "ggml-vocab/ggml-vocab-llama-spm.gguf"),
        ("vocab_tokenizer_bin_vs_llama_spm_gguf", lambda p: bin_vocab(p, 32000), "tokenizer.bin",
         "ggml-vocab/ggml-vocab-llama-spm.gguf"),
        ("vocab_tok512_model_vs_stories260k_gguf", read_spm_model, "tok512.model", "stories260K.gguf"),
        ("vocab_tok512_bin_vs_stories260k_gguf", lambda p: bin_vocab(p, 512), "tok512.bin", "stories260K.gguf"),
    ]
    for name, reader, a, b in cases:
        try:
            compare(rep, name, reader(ciref.model_path(a)), gguf_vocab(ciref.model_path(b)))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            rep.fail(name, "%s: %s" % (type(e).__name__, e))
    rep.exit()


if __name__ == "__main__":
    main()
