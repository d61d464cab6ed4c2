"""Shared helpers of the reference tests (tests/ref/test_*.py): paths, running the cinfer CLI, PASS/FAIL lines,
logit comparison, the MANIFEST.md greedy vector and a llama2.c tokenizer decoder.

Environment (set by tests/run.sh): CINFER_BIN (default build/release/cinfer), CINFER_MODELS (default
../shared/models relative to the repo root, which is the cwd).
"""

import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("CINFER_ROOT") or os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("CINFER_BIN") or os.path.join(ROOT, "build", "release", "cinfer")
MODELS = os.environ.get("CINFER_MODELS") or os.path.join(ROOT, "..", "shared", "models")
TIMEOUT = 300
# Every how many cases a sweep takes: tests/run.sh sets CINFER_TEST_SAMPLE for the sanitizer builds.
SAMPLE = max(1, int(os.environ.get("CINFER_TEST_SAMPLE") or 1))


def sample(items, keep=()):
    """Every SAMPLE-th of items (in order), and those in keep whatever their place."""
    return [x for i, x in enumerate(items) if i % SAMPLE == 0 or x in keep]
LSAN_SUPP = os.path.join(ROOT, "tests", "tp", "lsan.supp")


def mpi_env(**extra):
    """os.environ (plus extra) for the tests' mpirun: Open MPI as root, ranks sharing cores, no single-copy
    mechanism (it needs ptrace rights containers often lack); under `make asan`, Open MPI's own allocations left at
    exit suppressed as not cinfer's leaks (tests/tp/lsan.supp).  Those suppressions go by library name, which needs
    whole stacks (no fast unwinding through Open MPI's frame-pointer-less code) and its plugins still loaded at
    exit to name them.
    intercept_tls_get_addr=0: GCC 12's LeakSanitizer misreads the dynamic TLS of Open MPI's plugins on glibc 2.36
    (a block "at 0x3ba1" of 16 GiB); scanning it, its tracer faults and the rank aborts, in 3 of 4 two-rank runs
    of `cinfer logits` here.  With it off a leak planted in a rank is still reported: static TLS, the stacks and
    the heap are scanned as before."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_mca_base_component_disable_dlclose="1", **extra)
    env["LSAN_OPTIONS"] = "suppressions=%s:print_suppressions=0:%s" % (LSAN_SUPP,
                                                                      os.environ.get("LSAN_OPTIONS", ""))
    env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":fast_unwind_on_malloc=0:intercept_tls_get_addr=0"
    return env


def model_path(name):
    return os.path.join(MODELS, name)


class Report:
    def __init__(self):
        self.n_pass = 0
        self.n_fail = 0

    def ok(self, name, detail=""):
        self.n_pass += 1
        print("PASS %s%s" % (name, (" (%s)" % detail) if detail else ""), flush=True)

    def fail(self, name, why):
        self.n_fail += 1
        why = " | ".join(str(why).strip().splitlines()[-6:])
        print("FAIL %s: %s" % (name, why), flush=True)

    def check(self, cond, name, why, detail=""):
        if cond:
            self.ok(name, detail)
        else:
            self.fail(name, why)
        return cond

    def note(self, msg):
        print("NOTE %s" % msg, flush=True)

    def exit(self):
        sys.exit(1 if self.n_fail else 0)


class CinferError(RuntimeError):
    pass


def cinfer(args, timeout=TIMEOUT, env=None):
    """Runs the cinfer CLI (env: variables added to the environment); returns (stdout bytes, stderr text) or
    raises CinferError with the reason."""
    if not os.path.exists(BIN):
        raise CinferError("cinfer binary %s does not exist" % BIN)
    cmd = [BIN] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        raise CinferError("timed out after %ds: %s" % (timeout, " ".join(cmd)))
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise CinferError("cinfer %s exited %d: %s" % (cmd[1] if len(cmd) > 1 else "", p.returncode, err.strip()[-400:]))
    return p.stdout, err


def cinfer_logits(model, tokens, out_path, tokenizer=None, threads=None, block_size=None, kv_type=None, env=None):
    """Runs `cinfer logits`; returns (logits float32 [n][n_vocab], raw bytes of the output file)."""
    args = ["logits", "-m", model]
    if kv_type is not None:
        args += ["--kv-type", kv_type]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    args += ["--tokens", ",".join(str(int(t)) for t in tokens)]
    if threads is not None:
        args += ["--threads", threads]
    if block_size is not None:
        args += ["--block-size", block_size]
    args += ["-o", out_path]
    if os.path.exists(out_path):
        os.unlink(out_path)
    cinfer(args, env=env)
    with open(out_path, "rb") as f:
        raw = f.read()
    n = len(tokens)
    if n == 0 or len(raw) % (4 * n):
        raise CinferError("logits file of %d bytes is not %d rows of float32" % (len(raw), n))
    return np.frombuffer(raw, dtype="<f4").reshape(n, -1), raw


def kv_round(kv_type):
    """The rounding cinfer's KV cache applies to each K/V row (last axis head_dim), as a function of an array
    of any shape, or None for f32.  f16: IEEE half, round to nearest even (numpy float16).  q8_0: ggml's Q8_0
    quantizer (per 32 values along head_dim: d = max|x| / 127 in float32, q = round(x / d) half away from zero,
    d stored as fp16), then the reference dequantizer gguf_np.dequantize.  Values are rounded to float32 first,
    as cinfer's K/V are float32 before they are stored."""
    import gguf_np  # noqa: E402 (ciref is imported by tests that may not need the GGUF reader)

    if kv_type in (None, "f32"):
        return None
    if kv_type == "f16":
        return lambda x: x.astype(np.float32).astype(np.float16).astype(np.float64)
    if kv_type != "q8_0":
        raise ValueError("unknown KV type %r" % kv_type)

    def q8_0(x):
        shape = x.shape
        b = x.astype(np.float32).reshape(-1, 32)
        d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
        inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
        y = b * inv[:, None]
        q = (np.sign(y) * np.floor(np.abs(y) + np.float32(0.5))).astype(np.int8)
        blocks = np.zeros(len(b), dtype=gguf_np._Q8_0)
        blocks["d"] = d.astype(np.float16)
        blocks["qs"] = q
        return gguf_np.dequantize(gguf_np.Q8_0, blocks.tobytes(), b.size).astype(np.float64).reshape(shape)

    return q8_0


def q_round(kv_type):
    """The rounding cinfer applies to each query row before the attention scores with a cache of kv_type, or
    None: a q8_0 cache scores with integer dots against the query quantized by the same Q8_0 quantizer as K
    (kv_round's), as ggml's flash attention does for -ctk q8_0; f32 and f16 caches use the float query."""
    return kv_round("q8_0") if kv_type == "q8_0" else None


def compare_logits(rep, name, got, ref, rel_tol):
    """PASS if max|got-ref| <= rel_tol * max(1, max|ref|) at every position; prints the observed diff."""
    if got.shape != ref.shape:
        return rep.fail(name, "logits shape %s, reference %s" % (got.shape, ref.shape))
    if not np.all(np.isfinite(got)):
        return rep.fail(name, "non-finite logits")
    diff = np.abs(got.astype(np.float64) - ref)
    scale = max(1.0, float(np.abs(ref).max()))
    tol = rel_tol * scale
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    detail = "max|diff| %.3g at pos %d id %d, tol %.3g = %g * max(1, max|ref| %.3g)" % (
        diff.max(),
        worst[0],
        worst[1],
        tol,
        rel_tol,
        scale,
    )
    argmax_same = np.array_equal(got.argmax(axis=1), ref.argmax(axis=1))
    if diff.max() <= tol:
        rep.ok(name, detail + ("" if argmax_same else "; argmax differs where the reference is near-tied"))
    else:
        rep.fail(name, detail)


def logit_tolerance(type_name):
    """Relative tolerance of cinfer's logits against the float64 reference on the same dequantized weights:
    max|cinfer - ref| <= tol * max(1, max|ref|).  F32: 1e-4.  F16/BF16: 1e-3 (float32 vs float64 arithmetic).
    Q8_0/Q4_0: 0.1, because cinfer quantizes the activations of every matmul with quantized weights to Q8 blocks,
    as llama.cpp does, and the reference does not (measured: tiny-q8_0 0.080, tiny-q4_0 0.070, tiny-qwen2-q8_0
    0.067, the converted stories260K q8_0 0.013)."""
    if type_name in ("q8_0", "q4_0"):
        return 0.1
    return 1e-4 if type_name == "f32" else 1e-3


def manifest_greedy_ids():
    """The 60 greedy ids of stories260K from MANIFEST.md (the staged, independently produced vector)."""
    with open(model_path("MANIFEST.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"Greedy decoding test vector.*?\nids: ([0-9 ]+)\n", text, re.S)
    if not m:
        raise ValueError("MANIFEST.md has no greedy ids line")
    ids = [int(x) for x in m.group(1).split()]
    if len(ids) != 60:
        raise ValueError("MANIFEST.md greedy vector has %d ids, expected 60" % len(ids))
    return ids


MANIFEST_TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
)


def decode_llama2c(pieces, ids, bos=1):
    """Text of ids with a llama2.c tokenizer: <0xXX> pieces are raw bytes, and the leading space of the piece
    right after BOS is dropped (SentencePiece's dummy prefix)."""
    out = bytearray()
    prev = bos
    for t in ids:
        p = pieces[t]
        m = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", p)
        if m:
            p = bytes([int(m.group(1), 16)])
        elif prev == bos and p.startswith(b" "):
            p = p[1:]
        out += p
        prev = t
    return out.decode("utf-8", "replace")


def seeded_tokens(n, n_vocab, bos, seed=1234):
    """BOS then n-1 seeded random ids (avoiding the usual special ids 0..2)."""
    rng = np.random.default_rng(seed)
    return [int(bos)] + [int(x) for x in rng.integers(3, n_vocab, size=n - 1)]


def conversion_error(x, g, name):
    """None if tensor `name` of GGUF g is a faithful conversion of the float32 array x, else why not:
    F32 must be bit-identical, F16 and BF16 the value rounded to nearest even, Q8_0/Q4_0 within one block scale
    |d| of it (any reasonable rounding of a block meets that; ggml's Q4_0 clamps the value opposite the block's
    extreme to 7|d|, exactly one scale, and d itself is rounded to fp16, hence the 1% slack)."""
    import gguf_np

    t = g.tensors[name]
    y = g.tensor(name)
    x = np.asarray(x, dtype=np.float32)
    if y.shape != x.shape:
        return "%s has shape %s, want %s" % (name, y.shape, x.shape)
    if t.type == gguf_np.F32:
        ok = np.array_equal(x, y)
    elif t.type == gguf_np.F16:
        with np.errstate(over="ignore"):
            ok = np.array_equal(y, x.astype(np.float16).astype(np.float32))
    elif t.type == gguf_np.BF16:
        u = x.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        ok = np.array_equal(y, gguf_np.bf16_to_f32(r))
    elif t.type in (gguf_np.Q8_0, gguf_np.Q4_0):
        raw = np.frombuffer(g.raw(name), dtype=np.uint8).reshape(-1, 34 if t.type == gguf_np.Q8_0 else 18)
        d = np.abs(gguf_np.fp16_to_f32(raw[:, :2].copy().view("<u2").ravel()))
        err = np.abs(x.ravel() - y.ravel()).reshape(-1, 32).max(axis=1)
        ok = bool(np.all(err <= d * 1.01))
        if not ok:
            return "%s (%s) is off by up to %.3g block scales" % (
                name,
                gguf_np.type_name(t.type),
                float((err / np.maximum(d, 1e-30)).max()),
            )
    else:
        return "%s has unexpected type %s" % (name, gguf_np.type_name(t.type))
    return None if ok else "%s (%s) is not the original rounded to that type" % (name, gguf_np.type_name(t.type))
