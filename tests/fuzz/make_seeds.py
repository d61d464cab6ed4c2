#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<target>/), small and hand-made, so
that each harness starts from inputs that reach deep: valid files and requests, texts in several scripts.
The files are committed; rerun this only to change them (python3 tests/fuzz/make_seeds.py)."""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- GGUF ----------------------------------------------------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
          I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, type, dims, bytes)] with data laid out in order."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off, data = 0, b""
    for name, ttype, dims, payload in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, off)
        pad = (-len(payload)) % align
        data += payload + b"\0" * pad
        off += len(payload) + pad
    if tensors:
        out += b"\0" * ((-len(out)) % align) + data
    return out


def f32s(n, scale=0.01):
    return struct.pack("<%df" % n, *[(i % 7 - 3) * scale for i in range(n)])


GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30


def spm_vocab_kvs():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in (0x0A, 0x20, 0xC3, 0xA9, 0xE2, 0xFF)]
    toks += ["\u2581", "\u2581a", "\u2581the", "he", "llo", "\u2581hello", "\u2581world", "or", "ld", "<|im_start|>",
             "<|im_end|>", "a", "e", "h", "l", "o", "w", "r", "d", "t", "\u00e9"]
    types = [2, 3, 3] + [6] * 6 + [1] * (len(toks) - 9)
    types[toks.index("<|im_start|>")] = 3
    types[toks.index("<|im_end|>")] = 4
    scores = [0.0] * 9 + [-float(i) for i in range(len(toks) - 9)]
    return [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, toks)),
            ("tokenizer.ggml.scores", ARR, (F32, scores)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
            ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
            ("tokenizer.ggml.add_bos_token", BOOL, True),
            ("tokenizer.chat_template", STR, "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% endfor %}")]


def bpe_vocab_kvs():
    g = lambda s: "".join(chr(0x100 + ord(c)) if c == " " else c for c in s)  # GPT-2's space is U+0120
    toks = ["<|endoftext|>", "!", "a", "b", "c", "d", "e", "h", "l", "o", "r", "w", g(" "), "he", "ll", "hell",
            "hello", g(" w"), g(" wo"), "or", "ld", "\u00c3", "\u00a9", "1", "2", "3"]
    merges = ["h e", "l l", "he ll", "hell o", g(" ") + " w", g(" w") + " o", "o r", "l d"]
    return [("general.architecture", STR, "gpt2"), ("tokenizer.ggml.model", STR, "gpt2"),
            ("tokenizer.ggml.pre", STR, "gpt-2"), ("tokenizer.ggml.tokens", ARR, (STR, toks)),
            ("tokenizer.ggml.token_type", ARR, (I32, [3] + [1] * (len(toks) - 1))),
            ("tokenizer.ggml.merges", ARR, (STR, merges)), ("tokenizer.ggml.bos_token_id", U32, 0),
            ("tokenizer.ggml.eos_token_id", U32, 0)]


def model_kvs(arch, n_embd=4, n_head=2, n_kv=1, n_ff=4, n_layer=1, ctx=32):
    return [("general.architecture", STR, arch), ("general.name", STR, "fuzz-seed"),
            (arch + ".embedding_length", U32, n_embd), (arch + ".block_count", U32, n_layer),
            (arch + ".feed_forward_length", U32, n_ff), (arch + ".attention.head_count", U32, n_head),
            (arch + ".attention.head_count_kv", U32, n_kv), (arch + ".context_length", U32, ctx),
            (arch + ".rope.freq_base", F32, 10000.0), (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5)]


def model_tensors(n_embd=4, n_head=2, n_kv=1, n_ff=4, n_vocab=8, biases=False):
    hd = n_embd // n_head
    t = [("token_embd.weight", GGML_F32, [n_embd, n_vocab], f32s(n_embd * n_vocab)),
         ("output_norm.weight", GGML_F32, [n_embd], f32s(n_embd))]
    shapes = [("attn_norm.weight", [n_embd]), ("attn_q.weight", [n_embd, n_head * hd]),
              ("attn_k.weight", [n_embd, n_kv * hd]), ("attn_v.weight", [n_embd, n_kv * hd]),
              ("attn_output.weight", [n_head * hd, n_embd]), ("ffn_norm.weight", [n_embd]),
              ("ffn_gate.weight", [n_embd, n_ff]), ("ffn_up.weight", [n_embd, n_ff]),
              ("ffn_down.weight", [n_ff, n_embd])]
    if biases:
        shapes += [("attn_q.bias", [n_head * hd]), ("attn_k.bias", [n_kv * hd]), ("attn_v.bias", [n_kv * hd])]
    for name, dims in shapes:
        n = 1
        for d in dims:
            n *= d
        t.append(("blk.0." + name, GGML_F32, dims, f32s(n)))
    return t


def pos32s(n, base=1.0):
    """n positive float32 values (RoPE frequency factors)."""
    return struct.pack("<%df" % n, *[base + 0.5 * (i % 3) for i in range(n)])


def layer_tensors(n_layer, shapes, data=f32s):
    """blk.<i>.<name> for every layer; shapes [(name, dims)]."""
    t = []
    for il in range(n_layer):
        for name, dims in shapes:
            n = 1
            for d in dims:
                n *= d
            t.append(("blk.%d.%s" % (il, name), GGML_F32, dims, data(n)))
    return t


def arch_seeds(tok):
    """One small, valid model per architecture and feature of issue 12 (what model loading accepts), so the
    fuzzer starts inside each architecture's keys and tensors: RoPE scaling, sliding windows, soft-capping,
    Q/K norms, fused tensors, experts.  2 layers, n_embd 8, 2 heads (1 KV) of 4, vocabulary 8."""
    E, H, KV, HD, FF, V, L, NX, FX = 8, 2, 1, 4, 8, 8, 2, 4, 4

    def common(arch, hd=HD, **kw):
        return model_kvs(arch, n_embd=E, n_head=H, n_kv=KV, n_ff=FF, n_layer=L, **kw) + [
            (arch + ".rope.dimension_count", U32, hd)] + tok

    def globals_(tied=False):
        t = [("token_embd.weight", GGML_F32, [E, V], f32s(E * V)), ("output_norm.weight", GGML_F32, [E], f32s(E))]
        return t if tied else t + [("output.weight", GGML_F32, [E, V], f32s(E * V))]

    def attn(hd=HD, biases=False, qk_norm=False):
        q, kv = H * hd, KV * hd
        s = [("attn_norm.weight", [E]), ("attn_q.weight", [E, q]), ("attn_k.weight", [E, kv]),
             ("attn_v.weight", [E, kv]), ("attn_output.weight", [q, E])]
        if biases:
            s += [("attn_q.bias", [q]), ("attn_k.bias", [kv]), ("attn_v.bias", [kv])]
        if qk_norm:
            s += [("attn_q_norm.weight", [hd]), ("attn_k_norm.weight", [hd])]
        return s

    dense = [("ffn_norm.weight", [E]), ("ffn_gate.weight", [E, FF]), ("ffn_up.weight", [E, FF]),
             ("ffn_down.weight", [FF, E])]

    def experts(ff, bias=False):
        s = [("ffn_gate_inp.weight", [E, NX]), ("ffn_gate_exps.weight", [E, ff, NX]),
             ("ffn_up_exps.weight", [E, ff, NX]), ("ffn_down_exps.weight", [ff, E, NX])]
        if bias:
            s += [("ffn_gate_inp.bias", [NX]), ("ffn_gate_exps.bias", [ff, NX]), ("ffn_up_exps.bias", [ff, NX]),
                  ("ffn_down_exps.bias", [E, NX])]
        return s

    moe_kvs = lambda a, ff=None: [(a + ".expert_count", U32, NX), (a + ".expert_used_count", U32, 2)] + (
        [(a + ".expert_feed_forward_length", U32, ff)] if ff else [])
    yarn = lambda a: [(a + ".rope.scaling.type", STR, "yarn"), (a + ".rope.scaling.factor", F32, 4.0),
                      (a + ".rope.scaling.original_context_length", U32, 8)]
    llama3_kvs = [kv for kv in common("llama") if kv[0] != "llama.rope.freq_base"]
    put("gguf", "model-llama3.gguf", gguf(llama3_kvs + [("llama.rope.freq_base", F32, 500000.0)],
                                          globals_()
                                          + [("rope_freqs.weight", GGML_F32, [HD // 2], pos32s(HD // 2))]
                                          + layer_tensors(L, attn() + dense)))
    put("gguf", "model-mistral-yarn.gguf", gguf(common("llama") + [("llama.attention.sliding_window", U32, 4)]
                                                + yarn("llama"), globals_() + layer_tensors(L, attn() + dense)))
    put("gguf", "model-mixtral.gguf", gguf(common("llama") + moe_kvs("llama"),
                                           globals_() + layer_tensors(L, attn() + dense[:1] + experts(FF))))
    qk = [("qwen3.attention.key_length", U32, 8), ("qwen3.attention.value_length", U32, 8)]
    put("gguf", "model-qwen3.gguf", gguf(common("qwen3", hd=8) + qk,
                                         globals_(tied=True) + layer_tensors(L, attn(hd=8, qk_norm=True) + dense)))
    put("gguf", "model-qwen3moe.gguf",
        gguf(common("qwen3moe") + moe_kvs("qwen3moe", FX),
             globals_(tied=True) + layer_tensors(L, attn(qk_norm=True) + dense[:1] + experts(FX))))
    shexp = [("ffn_gate_inp_shexp.weight", [E]), ("ffn_gate_shexp.weight", [E, FF]),
             ("ffn_up_shexp.weight", [E, FF]), ("ffn_down_shexp.weight", [FF, E])]
    put("gguf", "model-qwen2moe.gguf",
        gguf(common("qwen2moe") + moe_kvs("qwen2moe", FX)
             + [("qwen2moe.expert_shared_feed_forward_length", U32, FF)],
             globals_() + layer_tensors(L, attn(biases=True) + dense[:1] + experts(FX) + shexp)))
    post = [("post_attention_norm.weight", [E]), ("post_ffw_norm.weight", [E])]
    put("gguf", "model-gemma2.gguf",
        gguf(common("gemma2") + [("gemma2.attention.sliding_window", U32, 4),
                                 ("gemma2.attn_logit_softcapping", F32, 50.0),
                                 ("gemma2.final_logit_softcapping", F32, 30.0)],
             globals_(tied=True) + layer_tensors(L, attn() + dense + post)))
    put("gguf", "model-gemma3.gguf",
        gguf(common("gemma3") + [("gemma3.attention.sliding_window", U32, 4),
                                 ("gemma3.attention.sliding_window_pattern", U32, 2),
                                 ("gemma3.rope.scaling.type", STR, "linear"),
                                 ("gemma3.rope.scaling.factor", F32, 8.0)],
             globals_(tied=True) + layer_tensors(L, attn(qk_norm=True) + dense + post)))
    phi = [("attn_norm.weight", [E]), ("attn_qkv.weight", [E, (H + 2 * KV) * HD]),
           ("attn_output.weight", [H * HD, E]),
           ("ffn_norm.weight", [E]), ("ffn_up.weight", [E, 2 * FF]), ("ffn_down.weight", [FF, E])]
    put("gguf", "model-phi3.gguf",
        gguf(common("phi3", hd=2) + [("phi3.rope.scaling.original_context_length", U32, 8),
                                     ("phi3.rope.scaling.attn_factor", F32, 1.2)],
             globals_() + [("rope_factors_long.weight", GGML_F32, [1], pos32s(1, 2.0)),
                           ("rope_factors_short.weight", GGML_F32, [1], pos32s(1))] + layer_tensors(L, phi)))
    oss = attn(biases=True) + [("attn_output.bias", [E]), ("attn_sinks.weight", [H]),
                                             ("post_attention_norm.weight", [E])] + experts(FX, bias=True)
    put("gguf", "model-gpt-oss.gguf",
        gguf(common("gpt-oss") + moe_kvs("gpt-oss", FX) + yarn("gpt-oss")
             + [("gpt-oss.attention.sliding_window", U32, 4)], globals_() + layer_tensors(L, oss)))
    bert = [("attn_q.weight", [E, E]), ("attn_q.bias", [E]), ("attn_k.weight", [E, E]), ("attn_k.bias", [E]),
            ("attn_v.weight", [E, E]), ("attn_v.bias", [E]), ("attn_output.weight", [E, E]),
            ("attn_output.bias", [E]), ("attn_output_norm.weight", [E]), ("attn_output_norm.bias", [E]),
            ("ffn_up.weight", [E, FF]), ("ffn_up.bias", [FF]), ("ffn_down.weight", [FF, E]),
            ("ffn_down.bias", [E]),
            ("layer_output_norm.weight", [E]), ("layer_output_norm.bias", [E])]
    bert_kvs = [("general.architecture", STR, "bert"), ("bert.embedding_length", U32, E),
                ("bert.block_count", U32, L), ("bert.feed_forward_length", U32, FF),
                ("bert.attention.head_count", U32, H), ("bert.context_length", U32, 8),
                ("bert.pooling_type", U32, 2),
                ("bert.attention.layer_norm_epsilon", F32, 1e-12), ("bert.attention.causal", BOOL, False)]
    put("gguf", "model-bert.gguf",
        gguf(bert_kvs + tok, [("token_embd.weight", GGML_F32, [E, V], f32s(E * V)),
                              ("position_embd.weight", GGML_F32, [E, 8], f32s(E * 8)),
                              ("token_types.weight", GGML_F32, [E, 2], f32s(E * 2)),
                              ("token_embd_norm.weight", GGML_F32, [E], f32s(E)),
                              ("token_embd_norm.bias", GGML_F32, [E], f32s(E))] + layer_tensors(L, bert)))


# Block layouts of the quantized types: (type id, elements, bytes, offsets of the f16 scales in a block).
QBLOCK = {"q4_0": (2, 32, 18, [0]), "q4_1": (3, 32, 20, [0, 2]), "q5_0": (6, 32, 22, [0]),
          "q5_1": (7, 32, 24, [0, 2]), "q8_0": (8, 32, 34, [0]), "q2_k": (10, 256, 84, [80, 82]),
          "q3_k": (11, 256, 110, [108]), "q4_k": (12, 256, 144, [0, 2]), "q5_k": (13, 256, 176, [0, 2]),
          "q6_k": (14, 256, 210, [208]), "iq4_nl": (20, 32, 18, [0]), "iq4_xs": (23, 256, 136, [0]),
          "mxfp4": (39, 32, 17, [])}


def qtensor(name, tname, dims, seed):
    """A tensor of quantized type tname: pseudo-random code bytes with small finite scales (f16 0x2000, and
    MXFP4's shared exponent 2^-7), so the forward pass computes numbers rather than NaNs."""
    if tname == "f16":
        n = dims[0] * (dims[1] if len(dims) > 1 else 1)
        return (name, GGML_F16, dims, b"".join(struct.pack("<H", 0x2000 + (i * 7 + seed) % 512) for i in range(n)))
    tid, qk, nb, scales = QBLOCK[tname]
    n_blocks = dims[0] // qk * (dims[1] if len(dims) > 1 else 1) * (dims[2] if len(dims) > 2 else 1)
    out = bytearray((i * 131 + seed * 17 + (i >> 5)) % 251 for i in range(n_blocks * nb))
    for b in range(n_blocks):
        for o in scales:
            out[b * nb + o:b * nb + o + 2] = struct.pack("<H", 0x2000)
        if tname == "mxfp4":
            out[b * nb] = 120
    return (name, tid, dims, bytes(out))


def quant_seeds():
    """Models whose matrices are quantized (issue 11), so the fuzzer reaches the packed kernels and their
    tails: a vocabulary of 17 (rows not a multiple of the kernels' 16-row groups).  kquants: 256-element rows,
    a K-quant or IQ4_XS per matrix, head_dim 128; legacy: 64-element rows, the 32-element block types, F16."""
    V = 17
    pieces = ["<unk>", "<s>", "</s>", "\u2581a", "a", "b", "<0x0A>", "c"] + [chr(ord("d") + i) for i in range(9)]
    tok = [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, pieces)),
           ("tokenizer.ggml.scores", ARR, (F32, [0.0] * V)),
           ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1, 1, 6] + [1] * (V - 7)))]

    def model(name, arch, E, embd, out, types, extra=()):
        """One layer of n_embd = n_ff = E, 2 heads (1 KV); types: the matrices' types in attn_q, attn_k,
        attn_v, attn_output, ffn_gate, ffn_up, ffn_down order; out None: a tied head."""
        mats = [("attn_q", [E, E]), ("attn_k", [E, E // 2]), ("attn_v", [E, E // 2]), ("attn_output", [E, E]),
                ("ffn_gate", [E, E]), ("ffn_up", [E, E]), ("ffn_down", [E, E])]
        t = [qtensor("token_embd.weight", embd, [E, V], 1), ("output_norm.weight", GGML_F32, [E], f32s(E, 0.1))]
        t += [qtensor("output.weight", out, [E, V], 2)] if out else []
        t += [("blk.0.attn_norm.weight", GGML_F32, [E], f32s(E, 0.1)),
              ("blk.0.ffn_norm.weight", GGML_F32, [E], f32s(E, 0.1))] + list(extra)
        t += [qtensor("blk.0.%s.weight" % m, ty, dims, i + 3)
              for i, ((m, dims), ty) in enumerate(zip(mats, types))]
        put("gguf", name, gguf(model_kvs(arch, n_embd=E, n_head=2, n_kv=1, n_ff=E, n_layer=1) + tok, t))

    model("model-llama-kquants.gguf", "llama", 256, "q4_k", "q6_k",
          ["q4_k", "q5_k", "q6_k", "iq4_xs", "q2_k", "q3_k", "q4_k"])
    biases = [("blk.0.attn_q.bias", GGML_F32, [64], f32s(64)), ("blk.0.attn_k.bias", GGML_F32, [32], f32s(32)),
              ("blk.0.attn_v.bias", GGML_F32, [32], f32s(32))]
    model("model-qwen2-legacy-quants.gguf", "qwen2", 64, "q8_0", None,
          ["q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "mxfp4", "f16"], biases)


def gguf_seeds():
    put("gguf", "vocab-spm.gguf", gguf(spm_vocab_kvs()))
    put("gguf", "vocab-bpe.gguf", gguf(bpe_vocab_kvs()))
    llama_tok = [("tokenizer.ggml.model", STR, "llama"),
                 ("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "\u2581a", "a", "b", "<0x0A>", "c"])),
                 ("tokenizer.ggml.scores", ARR, (F32, [0.0] * 8)),
                 ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1, 1, 6, 1]))]
    put("gguf", "model-llama.gguf", gguf(model_kvs("llama") + llama_tok, model_tensors()))
    put("gguf", "model-qwen2.gguf", gguf(model_kvs("qwen2", n_kv=2) + [("general.alignment", U32, 64)],
                                         model_tensors(n_kv=2, biases=True), align=64))
    types = [("f32", GGML_F32, [3, 2], f32s(6)), ("f16", GGML_F16, [32], b"\x00\x3c" * 32),
             ("bf16", GGML_BF16, [32], b"\x80\x3f" * 32), ("q8_0", GGML_Q8_0, [32], b"\x00\x3c" + bytes(range(32))),
             ("q4_0", GGML_Q4_0, [32, 1, 1, 1], b"\x00\x3c" + bytes(range(16)))]
    put("gguf", "tensor-types.gguf", gguf([("general.architecture", STR, "none")], types))
    # The block types of the quantized files people download (issue 11), one block each (two for 32-element
    # types); what is inside is arbitrary, the reader only checks sizes.
    blocks = [("q4_1", 3, 32, 20), ("q5_0", 6, 32, 22), ("q5_1", 7, 32, 24), ("q2_k", 10, 256, 84),
              ("q3_k", 11, 256, 110), ("q4_k", 12, 256, 144), ("q5_k", 13, 256, 176), ("q6_k", 14, 256, 210),
              ("iq4_nl", 20, 64, 36), ("iq4_xs", 23, 256, 136), ("mxfp4", 39, 64, 34)]
    kq = [(name, t, [n], bytes((i * 37 + 11) % 251 for i in range(nb))) for name, t, n, nb in blocks]
    put("gguf", "tensor-types-k.gguf", gguf([("general.architecture", STR, "none")], kq))
    arch_seeds(llama_tok)
    quant_seeds()
    every = [("u8", U8, 255), ("i8", I8, -128), ("u16", U16, 65535), ("i16", I16, -32768), ("u32", U32, 2**32 - 1),
             ("i32", I32, -2**31), ("f32", F32, 1.5), ("bool", BOOL, True), ("str", STR, "h\u00e9llo"),
             ("u64", U64, 2**64 - 1), ("i64", I64, -2**63), ("f64", F64, -0.25),
             ("arr.u8", ARR, (U8, [1, 2, 3])), ("arr.str", ARR, (STR, ["a", "", "\u4f60\u597d"])),
             ("arr.nested", ARR, (ARR, [(STR, ["x", "y"]), (I32, [7]), (ARR, [(F64, [1.0])])])),
             ("arr.empty", ARR, (U64, [])), ("general.alignment", U32, 16)]
    put("gguf", "every-kv-type.gguf", gguf(every, [("t", GGML_F32, [4], f32s(4))], align=16))
    put("gguf", "v2.gguf", gguf([("general.architecture", STR, "llama"), ("llama.block_count", U64, 1)],
                                [("token_embd.weight", GGML_F32, [2, 2], f32s(4))], version=2))


# ---- llama2.c checkpoints and tokenizer.bin ------------------------------------------------------------

def llama2c(dim=4, hidden=3, n_layers=1, n_heads=2, n_kv=1, vocab=5, seq_len=2, shared=True, v1=False):
    hd = dim // n_heads
    kv = n_kv * hd
    sizes = {"tok": vocab * dim, "att": n_layers * dim, "wq": n_layers * dim * dim, "wk": n_layers * kv * dim,
             "wv": n_layers * kv * dim, "wo": n_layers * dim * dim, "ffn": n_layers * dim,
             "w1": n_layers * hidden * dim, "w2": n_layers * dim * hidden, "w3": n_layers * hidden * dim,
             "out": dim, "fre": seq_len * hd // 2, "fim": seq_len * hd // 2, "cls": vocab * dim}
    if v1:
        order = ["att", "ffn", "out", "tok", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "cls"]
        hdr = struct.pack("<Ii7iB", 0x616B3432, 1, dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len, shared)
        hdr += b"\0" * (256 - len(hdr))
    else:
        order = ["tok", "att", "wq", "wk", "wv", "wo", "ffn", "w1", "w2", "w3", "out", "fre", "fim", "cls"]
        hdr = struct.pack("<7i", dim, hidden, n_layers, n_heads, n_kv, vocab if shared else -vocab, seq_len)
    body = b"".join(f32s(sizes[k]) for k in order if not (k == "cls" and shared))
    return hdr + body


def llama2c_seeds():
    put("llama2c", "legacy-shared.bin", llama2c())
    put("llama2c", "legacy-wcls.bin", llama2c(shared=False, n_layers=2, n_kv=2))
    put("llama2c", "v1-shared.bin", llama2c(v1=True))
    put("llama2c", "v1-wcls.bin", llama2c(v1=True, shared=False, dim=8, n_heads=2, n_kv=1, hidden=5))


def tokbin(pieces, max_len=None):
    max_len = max_len or max(len(p.encode()) for _, p in pieces)
    return struct.pack("<i", max_len) + b"".join(
        struct.pack("<fi", s, len(p.encode())) + p.encode() for s, p in pieces)


def tokbin_seeds():
    base = [(0.0, "<unk>"), (0.0, "\n<s>\n"), (0.0, "\n</s>\n")] + [(0.0, "<0x%02X>" % b) for b in range(0, 256, 17)]
    words = [" ", " a", " the", "he", "llo", " hello", "or", "ld", " world", "a", "e", "h", "l", "o", "w", "\u00e9"]
    put("tokbin", "small.bin", tokbin(base + [(-float(i), w) for i, w in enumerate(words)]))
    put("tokbin", "bytes-only.bin", tokbin([(0.0, "<unk>"), (0.0, "<s>"), (0.0, "</s>")] +
                                           [(0.0, "<0x%02X>" % b) for b in range(256)]))
    put("tokbin", "odd.bin", tokbin([(0.0, "<unk>"), (0.0, "\n<s>\n"), (0.0, "\n</s>\n"), (1.0, ""), (2.0, "  "),
                                     (0.5, "<0x41>"), (0.25, "<0x4G>"), (-1.0, "x y")], max_len=9))


# ---- tokenizer texts -----------------------------------------------------------------------------------

TEXTS = {
    "english": "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n",
    "code": "def f(x):\n    return x ** 2  # square\n\tif (a != b) { y = 3.14e-10; }\n",
    "german": "Gr\u00fc\u00dfe aus M\u00fcnchen! Der F\u00fchrerschein kostet 1.234,56 \u20ac.",
    "cjk": "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "russian-arabic": "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "emoji-space": "  \U0001f600\U0001f44d\U0001f3fd  \u2581\u2581 multiple   spaces\n\n\n\t\r\n 3333 12345678",
    "special": "<s>[INST] hi [/INST]</s><|im_start|>user\nhello<|im_end|>\n<|endoftext|><|eot_id|>",
    "contractions": "I'm you're they've we'll it's He'D SHE'LL don't 's 't",
}


def tokenize_seeds():
    for i, (name, text) in enumerate(TEXTS.items()):
        # byte 0: tokenizer (spread over the list), byte 1: flags
        put("tokenize", name, bytes([i * 3, i % 8]) + text.encode())
    put("tokenize", "invalid-utf8", bytes([5, 0]) + b"ab\xff\xc3(\xe2\x82\xf0\x9f\x98 \xed\xa0\x80 end\xc3")


def u24(ids):
    return b"".join(bytes([i & 255, (i >> 8) & 255, i >> 16]) for i in ids)


def detok_seeds():
    # byte 0: tokenizer (0 llama-spm, 1 phi-3, 2 tok512, 3 gpt-2, 4 deepseek-llm), byte 1: flags, stop, ids
    # "Once upon a time, there was a little girl. \u00dcn\u00efc\u00f6d\u00e9 \u2713 \u4f60\u597d" (cinfer tokenize)
    llama = [1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 29889, 7189, 29876, 30085, 29883, 9289,
             29948, 29871, 30706, 29871, 30919, 31076, 2]
    put("detok", "llama-story", bytes([0, 2]) + b"\x04girl" + u24(llama))
    put("detok", "llama-bytes", bytes([0, 3, 0]) + u24([1, 232, 153, 132, 13, 31999, 32003, 0xffffff]))
    put("detok", "tok512", bytes([2, 6, 3]) + b"the" + u24([1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                                            315, 421, 426, 2, 1, 403]))
    # "Hello, world! \u00dcn\u00efc\u00f6d\u00e9 \u2713 \u4f60\u597d"
    put("detok", "gpt2", bytes([3, 0, 1]) + b"!" + u24([15496, 11, 995, 0, 49363, 77, 26884, 66, 9101, 67, 2634,
                                                        24762, 220, 19526, 254, 25001, 121, 50256, 50263]))
    put("detok", "deepseek", bytes([4, 1, 2]) + b"\xc3" + u24([100000, 17464, 11, 1843, 0, 78307, 77, 2865, 66,
                                                             100003, 67, 587, 207, 86377, 207, 84313, 100001]))


def stop_seeds():
    def chunks(text, size):
        b = text.encode()
        return b"".join(bytes([len(b[i:i + size])]) + b[i:i + size] for i in range(0, len(b), size))

    put("stop", "two-stops", bytes([2]) + b"\x03END" + b"\x02\n\n" + bytes([7]) +
        chunks("Hello world, the answer is 42.\n\nEN", 3))
    put("stop", "overlap", bytes([0x83]) + b"\x03aab" + b"\x02ab" + b"\x00" + bytes([4]) + chunks("aaaaaab", 2))
    put("stop", "none", bytes([0]) + bytes([15]) + chunks("no stop strings at all", 16))
    put("stop", "utf8", bytes([1]) + b"\x03\xe4\xbd\xa0" + bytes([1]) + chunks("\u4e16\u754c\u4f60\u597d", 1))


def openai_seeds():
    def req(head, body):
        return bytes([head]) + (body if isinstance(body, bytes) else json.dumps(body).encode())

    put("openai", "completion", req(0, {"model": "m", "prompt": "Once upon a time", "max_tokens": 16,
                                        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 2,
                                        "stop": ["\n\n", "END"], "seed": 42, "stream": True,
                                        "stream_options": {"include_usage": True}, "logprobs": 3, "echo": True,
                                        "logit_bias": {"15": -100, "7": 2.5}, "ignore_eos": False}))
    put("openai", "completion-tokens", req(4 * 3, {"prompt": [[1, 2, 3], [4]], "max_tokens": 1,
                                                   "presence_penalty": -2, "frequency_penalty": 2,
                                                   "repetition_penalty": 1.1}))
    put("openai", "chat-tools", req(1, {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                                    "parameters": {"type": "object", "properties": {}}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": False,
        "reasoning_effort": "low"}))
    put("openai", "chat", req(1, {"model": "m", "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": "Hello!"}, {"role": "developer", "content": None},
        {"role": "user", "content": "\u4f60\u597d \\u00e9"}],
        "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 2, "stop": "x"}))
    put("openai", "chat-bad", req(1 + 32, b'{"messages": [{"role": "tool", "content": "x"}], "n": 99}'))
    put("openai", "tokenize", req(2, {"prompt": "hello world", "add_special_tokens": False}))
    put("openai", "tokenize-chat", req(2, {"messages": [{"role": "user", "content": "hi"}],
                                           "add_generation_prompt": True}))
    put("openai", "detokenize", req(3 + 4 * 2, {"tokens": [0, 1, 2, 3]}))
    put("openai", "nul-escape", req(1, b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}'))


def anthropic_seeds():
    def req(head, body):
        return bytes([head]) + (body if isinstance(body, bytes) else json.dumps(body).encode())

    weather = {"name": "get_weather", "description": "Weather of a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    put("anthropic", "message", req(0, {
        "model": "m", "max_tokens": 64, "system": "Be brief.", "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "stop_sequences": ["\n\nHuman:", "END"], "stream": True, "metadata": {"user_id": "u1"},
        "messages": [{"role": "user", "content": "Hi \u00e9"}, {"role": "assistant", "content": "Hello"},
                     {"role": "user", "content": [{"type": "text", "text": "Weather?"}]}]}))
    put("anthropic", "tool-round-trip", req(0, {
        "model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "Use tools."}], "tools": [weather],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": [
                         {"type": "thinking", "thinking": "hm", "signature": "x"},
                         {"type": "text", "text": "Checking."},
                         {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
                          "content": [{"type": "text", "text": "21 C"}]},
                         {"type": "text", "text": "Thanks"}]}]}))
    put("anthropic", "count-tokens", req(1, {"model": "m", "messages": [{"role": "user", "content": "x"}],
                                             "tools": [weather], "tool_choice": {"type": "any"}}))
    put("anthropic", "image", req(0, {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}))
    put("anthropic", "bad", req(0, b'{"model": "m", "messages": [{"role": "system", "content": "a\\u0000b"}]}'))


def chat_seeds():
    def msgs(flags, items):
        return bytes([flags]) + b"\0".join(bytes([r]) + c.encode() for r, c in items)

    put("chat", "conversation", msgs(1, [(0, "You are helpful."), (1, "Hello!"), (2, "  Hi, how can I help?  "),
                                         (1, "Tell me a story.")]))
    put("chat", "system-last", msgs(0, [(1, "question"), (0, " system at the end "), (0, "")]))
    put("chat", "utf8", msgs(1, [(1, "\u4f60\u597d\uff0c\u4e16\u754c"), (2, "\U0001f600"), (1, "\tx\n")]))
    put("chat", "bad-role", msgs(1, [(1, "fine"), (5, "developer is not a chat_apply role")]))
    put("chat", "template-text", "{% for message in messages %}<|im_start|>{{ message['role'] }}\n[INST]")
    put("chat", "zephyr", "<|user|>\n{{ eos_token }}<|assistant|>")


def sse_seeds():
    def lstr(b):
        return bytes([len(b)]) + b

    put("sse", "completion-stream", bytes([0]) + lstr(b"Once") + b"\x00" + bytes([6, 5, 0]) + bytes([0]) +
        lstr(b" upon") + b"\x01" + bytes([5, 3, 0, 9, 0, 7]))
    put("sse", "chat-stream", bytes([1]) + lstr("Hi \u00e9".encode()) + b"\x04" + bytes([1]) + lstr(b"") + b"\x08" +
        bytes([2]) + lstr(b"full\nmessage \"quoted\"") + b"\x02" + bytes([7]))
    put("sse", "logprobs", bytes([3]) + lstr(b"tok") + b"\x10\x02" + lstr(b"a") + lstr(b"a") + bytes([4]) +
        lstr(b"\xe2\x96") + b"\x20\x03" + lstr(b"\xff") + lstr(b"\x00") + lstr("\u4f60".encode()))
    put("sse", "invalid-bytes", bytes([0]) + lstr(b"a\xff\xfe\x00b\xc3\x28\xed\xa0\x80") + b"\x01" +
        bytes([6, 1, 0, 6, 2, 0, 2]) + lstr(b"\r\n\t\x7f\x01") + b"\x00")


def tool_parse_seeds():
    # byte 0: format (0 generic, 1 hermes, 2 llama3, 3 mistral, 4 harmony, 5 deepseek) | 8 tools | 16 reasoning
    # | 32 starts inside <think>; then the generated text
    ds = lambda s: "<\uff5ctool\u2581" + s + "\uff5c>"
    put("tool_parse", "hermes", bytes([1 | 8 | 16]) + '<think>\nhm\n</think>\n\nOk <tool_call>\n{"name": "f", '
        '"arguments": {"a": 1}}\n</tool_call>\n<tool_call>{"name": "g", "arguments": "{}"}</tool_call>'.encode())
    put("tool_parse", "hermes-bad", bytes([1 | 8]) + b'<tool_call>{"name": 3}</tool_call><tool_call>{"na')
    put("tool_parse", "llama3", bytes([2 | 8]) + b'{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1]}}')
    put("tool_parse", "llama3-tag", bytes([2 | 8]) + b'hi <|python_tag|>{"name": "a", "parameters": {}}')
    put("tool_parse", "mistral", bytes([3 | 8]) + b'x[TOOL_CALLS][{"name": "a", "arguments": {}}][TOOL_CALLS]b[ARGS]{"k": "v"}')
    put("tool_parse", "mistral-id", bytes([3 | 8]) + b'[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{}')
    put("tool_parse", "harmony", bytes([4 | 8 | 16]) + b'<|channel|>analysis<|message|>think<|end|><|start|>assistant'
        b'<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>')
    put("tool_parse", "harmony-final", bytes([4 | 16]) + b'<|channel|>final<|message|>answer<|return|>')
    put("tool_parse", "deepseek", bytes([5 | 8 | 16]) + ("<think>r</think>" + ds("calls\u2581begin") + ds("call\u2581begin") +
        "function" + ds("sep") + 'f\n```json\n{"a": 1}\n```' + ds("call\u2581end") + ds("calls\u2581end")).encode())
    put("tool_parse", "deepseek-v3", bytes([5 | 8]) + (ds("calls\u2581begin") + ds("call\u2581begin") + "f" + ds("sep") +
        '{"a": 1}' + ds("call\u2581end")).encode())
    put("tool_parse", "generic", bytes([0 | 8]) + b'{"tool_calls": [{"name": "f", "arguments": {}}]}')
    put("tool_parse", "in-think", bytes([1 | 8 | 16 | 32]) + b'reasoning</think>answer')


if __name__ == "__main__":
    gguf_seeds()
    llama2c_seeds()
    tokbin_seeds()
    tokenize_seeds()
    detok_seeds()
    stop_seeds()
    openai_seeds()
    anthropic_seeds()
    chat_seeds()
    sse_seeds()
    tool_parse_seeds()
