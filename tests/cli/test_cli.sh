#!/usr/bin/env bash
# The cinfer binary from outside: usage errors exit 2, bad model files exit 1 with one clear error line on
# stderr and never a crash or a sanitizer report (this script also runs under `make asan`), and the
# subcommands print what they promise.
set -u
BIN=${CINFER_BIN:?}
M=${CINFER_MODELS:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

# expect NAME STATUS NEEDLE CMD...: exit status STATUS, and stderr holds NEEDLE on its first line
# and has no sanitizer report or crash trace.
expect() {
    local name=$1 want=$2 needle=$3
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit $rc, want $want; stderr: $(head -3 "$T/err" | tr '\n' ' ')"
    elif grep -qE 'Sanitizer|runtime error|Segmentation|Aborted|assertion' "$T/err"; then
        fail "$name" "crash or sanitizer report: $(head -5 "$T/err" | tr '\n' ' ')"
    elif [ -n "$needle" ] && ! head -1 "$T/err" | grep -qF -- "$needle"; then
        fail "$name" "first stderr line '$(head -1 "$T/err")' lacks '$needle'"
    else
        pass "$name"
    fi
}

# Usage errors.
expect usage_no_command 2 "usage" "$BIN"
expect usage_unknown_command 2 "unknown command" "$BIN" frobnicate
expect usage_missing_model 2 "-m MODEL" "$BIN" run
expect usage_unknown_flag 2 "unknown option '--bogus'" "$BIN" run -m x --bogus
expect usage_bad_number 2 "--temp" "$BIN" run -m x --temp abc
expect usage_negative_count 2 "--n-predict" "$BIN" run -m x -n -5
expect usage_out_of_range 2 "--top-p" "$BIN" run -m x --top-p 1.5
expect usage_missing_value 2 "needs a value" "$BIN" run -m
expect usage_bad_type 2 "--type" "$BIN" synth --preset tiny --type q7_k -o "$T/x.gguf"

# Bad model files: one clear line, exit 1.
expect missing_file 1 "/nonexistent.gguf" "$BIN" run -m /nonexistent.gguf
head -c 100000 "$M/stories260K.gguf" >"$T/trunc.gguf"
expect truncated_gguf 1 "past end of file" "$BIN" run -m "$T/trunc.gguf"
head -c 5000 "$M/stories260K.gguf" >"$T/trunc-meta.gguf"
expect truncated_gguf_metadata 1 "gguf" "$BIN" info -m "$T/trunc-meta.gguf"
head -c 500000 "$M/stories260K.bin" >"$T/trunc.bin"
expect truncated_llama2c 1 "" "$BIN" run -m "$T/trunc.bin" --tokenizer "$M/tok512.bin"
head -c 3000 "$M/tok512.bin" >"$T/trunc-tok.bin"
expect truncated_tokenizer 1 "tokenizer" "$BIN" run -m "$M/stories260K.bin" --tokenizer "$T/trunc-tok.bin"
head -c 4096 /dev/urandom >"$T/garbage.gguf"
printf 'GGUF' | dd of="$T/garbage.gguf" conv=notrunc 2>/dev/null
expect garbage_gguf 1 "" "$BIN" info -m "$T/garbage.gguf"
: >"$T/empty.bin"
expect empty_file 1 "" "$BIN" run -m "$T/empty.bin" --tokenizer "$M/tok512.bin"
expect vocab_only_as_model 1 "vocab-only" "$BIN" run -m "$M/ggml-vocab/ggml-vocab-gpt-2.gguf"
# Paths that are not regular files are refused before anything blocks on them (a FIFO used to hang start-up
# forever, deaf to SIGTERM): each must answer within the timeout (124 would mean it hung).
mkfifo "$T/fifo.gguf"
expect fifo_model 1 "not a regular file" timeout -k 5 20 "$BIN" run -m "$T/fifo.gguf"
expect fifo_model_info 1 "not a regular file" timeout -k 5 20 "$BIN" info -m "$T/fifo.gguf"
expect fifo_tokenizer 1 "not a regular file" timeout -k 5 20 "$BIN" run -m "$M/stories260K.bin" --tokenizer "$T/fifo.gguf"
timeout -k 5 20 "$BIN" serve -m "$T/fifo.gguf" --port 0 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "not a regular file" "$T/err"; then pass fifo_model_serve; else
    fail fifo_model_serve "exit $rc: $(tr '\n' ' ' <"$T/err")"; fi
expect directory_model 1 "not a regular file" timeout -k 5 20 "$BIN" run -m "$T"
expect device_model 1 "not a regular file" timeout -k 5 20 "$BIN" run -m /dev/zero
expect wrong_tokenizer_size 1 "tokenizer" "$BIN" run -m "$M/stories260K.bin" --tokenizer "$M/tokenizer.bin"
expect checkpoint_without_tokenizer 1 "tokenizer" "$BIN" run -m "$M/stories260K.bin"
expect context_exceeded 1 "context" "$BIN" run -m "$M/stories260K.gguf" -n 100 --ctx 50

# What the subcommands print.
out=$("$BIN" tokenize -m "$M/ggml-vocab/ggml-vocab-llama-spm.gguf" "Hello world" 2>&1)
[ "$out" = "1 15043 3186" ] && pass tokenize_vocab_only || fail tokenize_vocab_only "got '$out'"
out=$("$BIN" tokenize -m "$M/stories260K.bin" --tokenizer "$M/tok512.bin" "Once upon a time" 2>&1)
[ "$out" = "1 403 407 261 378" ] && pass tokenize_llama2c || fail tokenize_llama2c "got '$out'"
out=$("$BIN" info -m "$M/stories260K.gguf" 2>&1)
if grep -q "KV cache per token *1280 bytes f32" <<<"$out" && grep -q "GQA" <<<"$out" &&
    grep -q "parameters" <<<"$out"; then
    pass info_kv_bytes
else
    fail info_kv_bytes "$(tr '\n' '|' <<<"$out")"
fi
out=$("$BIN" run -m "$M/stories260K.gguf" -n 30 --temp 0 2>"$T/err")
if [[ "$out" == "Once upon a time, there was a little girl named Lily."* ]] &&
    grep -q "TTFT" "$T/err" && grep -q "TBT" "$T/err" && grep -q "TPS" "$T/err" && grep -q "latency" "$T/err"; then
    pass run_stream_and_metrics
else
    fail run_stream_and_metrics "stdout '$out' stderr $(tr '\n' '|' <"$T/err")"
fi
a=$("$BIN" run -m "$M/stories260K.gguf" -n 40 --temp 1 --seed 7 --ids 2>/dev/null)
b=$("$BIN" run -m "$M/stories260K.gguf" -n 40 --temp 1 --seed 7 --ids 2>/dev/null)
c=$("$BIN" run -m "$M/stories260K.gguf" -n 40 --temp 1 --seed 8 --ids 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && pass run_seeded || fail run_seeded "'$a' / '$b' / '$c'"

# The KV cache element type (--kv-type f32|f16|q8_0): bad names are usage errors in every command that takes
# it, q8_0 on a head_dim that is not a multiple of 32 is a clear error, and the chosen type is reported.
expect kv_type_bad_run 2 "--kv-type: 'q4_0' is not one of f32, f16, q8_0" "$BIN" run -m "$M/stories260K.gguf" --kv-type q4_0
expect kv_type_bad_serve 2 "--kv-type" "$BIN" serve -m "$M/stories260K.gguf" --kv-type F16
expect kv_type_bad_bench 2 "--kv-type" "$BIN" bench -m "$M/stories260K.gguf" --kv-type fp8
expect kv_type_bad_bench_kernels 2 "--kv-type" "$BIN" bench kernels -m "$M/stories260K.gguf" --kv-type q8
expect kv_type_bad_logits 2 "--kv-type" "$BIN" logits -m "$M/stories260K.gguf" --tokens 1,2 -o "$T/l.f32" --kv-type x
expect kv_type_bad_info 2 "--kv-type" "$BIN" info -m "$M/stories260K.gguf" --kv-type ""
expect kv_type_bad_calc 2 "--kv-type" "$BIN" calc --preset tiny --kv-type f64
# When the weights are packed for the kernels (--pack lazy|eager|off): bad names are usage errors; on an F16
# model every mode generates the same greedy tokens (packed kernels keep the file layout's bits), a lazy run of
# one token packs nothing (no copy before its first token) and an eager one packs before it.
expect pack_bad_run 2 "--pack: 'later' is not one of lazy, eager, off" "$BIN" run -m "$M/stories260K.gguf" --pack later
expect pack_bad_serve 2 "--pack" "$BIN" serve -m "$M/stories260K.gguf" --pack ""
"$BIN" synth --preset tiny --type f16 --seed 2 -o "$T/tiny-f16.gguf" >/dev/null 2>&1
pk_lazy=$("$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 24 --temp 0 --ids 2>/dev/null)
pk_eager=$("$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 24 --temp 0 --ids --pack eager 2>/dev/null)
pk_off=$("$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 24 --temp 0 --ids --pack off 2>/dev/null)
[ -n "$pk_lazy" ] && [ "$pk_lazy" = "$pk_eager" ] && [ "$pk_lazy" = "$pk_off" ] && pass pack_modes_same_tokens ||
    fail pack_modes_same_tokens "lazy '$pk_lazy' / eager '$pk_eager' / off '$pk_off'"
pk_one=$(CINFER_LOG=info "$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 1 2>&1 >/dev/null)
pk_one_eager=$(CINFER_LOG=info "$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 1 --pack eager 2>&1 >/dev/null)
pk_two=$(CINFER_LOG=info "$BIN" run -m "$T/tiny-f16.gguf" -p "hello world" -n 2 2>&1 >/dev/null)
if ! grep -q "packed [0-9]* weight matrices" <<<"$pk_one_eager"; then
    pass pack_lazy_one_token # the scalar kernels (CINFER_NO_SIMD) have no F16 layout: nothing to check
elif ! grep -q "packed [0-9]* weight matrices" <<<"$pk_one" && grep -q "packed [0-9]* weight matrices" <<<"$pk_two"; then
    pass pack_lazy_one_token
else
    fail pack_lazy_one_token "one token: '$(grep packed <<<"$pk_one")', two: '$(grep packed <<<"$pk_two")'"
fi
expect kv_type_q8_0_head_dim 1 "q8_0 needs head_dim a multiple of 32 (head_dim is 8)" \
    "$BIN" run -m "$M/stories260K.gguf" -n 4 --kv-type q8_0
out=$("$BIN" run -m "$M/stories260K.gguf" -n 30 --temp 0 --kv-type f16 2>"$T/err")
if [[ "$out" == "Once upon a time, there was a little girl named Lily."* ]] &&
    grep -q "(f16, 640 bytes per token)" "$T/err"; then
    pass run_kv_type_f16
else
    fail run_kv_type_f16 "stdout '$out' stderr $(tr '\n' '|' <"$T/err")"
fi
# The default KV type of run, serve, bench and bench kernels is f16 (llama.cpp's); f32 on request (the
# reference tests pass it); info's "chosen" lines follow run's default.  serve: tests/server/test_server.py.
"$BIN" run -m "$M/stories260K.gguf" -n 2 --temp 0 >/dev/null 2>"$T/err"
grep -q "(f16, 640 bytes per token)" "$T/err" && pass run_kv_type_default_f16 ||
    fail run_kv_type_default_f16 "$(tr '\n' '|' <"$T/err")"
"$BIN" run -m "$M/stories260K.gguf" -n 2 --temp 0 --kv-type f32 >/dev/null 2>"$T/err"
grep -q "(f32, 1280 bytes per token)" "$T/err" && pass run_kv_type_f32 ||
    fail run_kv_type_f32 "$(tr '\n' '|' <"$T/err")"
out=$("$BIN" info -m "$M/stories260K.gguf" 2>&1)
grep -q "KV cache per token, chosen *640 bytes (--kv-type f16)" <<<"$out" && pass info_kv_type_default_f16 ||
    fail info_kv_type_default_f16 "$(tr '\n' '|' <<<"$out")"
out=$("$BIN" bench kernels -m "$M/stories260K.gguf" -t 1 -p 8 -n 0 --batch 0 -r 1 --no-warmup --bandwidth-gbs 10 \
    --peak-gflops 10 --int8-peak-gops 10 --json 2>&1)
grep -q '"kv_type": "f16"' <<<"$out" && pass bench_kernels_kv_type_default_f16 ||
    fail bench_kernels_kv_type_default_f16 "$(tr '\n' '|' <<<"$out" | cut -c1-300)"
for h in run serve bench "bench kernels"; do
    # shellcheck disable=SC2086
    "$BIN" $h --help 2>&1 | grep -q -- "--kv-type .*default f16" && pass "help_kv_default_f16_${h// /_}" ||
        fail "help_kv_default_f16_${h// /_}" "no '--kv-type ... default f16' in cinfer $h --help"
done
out=$("$BIN" info -m "$M/stories260K.gguf" --kv-type f16 2>&1)
grep -q "KV cache per token, chosen *640 bytes (--kv-type f16)" <<<"$out" && pass info_kv_type ||
    fail info_kv_type "$(tr '\n' '|' <<<"$out")"
out=$("$BIN" calc --preset tiny --kv-type q8_0 2>&1)
# tiny: 4 layers, 2 KV heads, head_dim 32: 2·4·2·32 = 512 elements, 34/32 bytes each = 544 bytes per token
grep -q "544 B" <<<"$out" && grep -q "q8_0" <<<"$out" && pass calc_kv_type ||
    fail calc_kv_type "$(tr '\n' '|' <<<"$out")"
# calc past one machine: a tensor-parallel degree that does not divide the KV heads is a usage error; the JSON
# carries the decode step over the ranks (tiny: 2 KV heads).
expect calc_tp_not_dividing 2 "must divide the 2 KV heads" "$BIN" calc --preset tiny --tp 3
out=$("$BIN" calc --preset llama3-8b --tp 4 --pp 2 --link-gbs 25 --json 2>&1)
if "${CINFER_PY:-python3}" -c 'import json,sys; d=json.loads(sys.argv[1])["dist"]; assert d["tp"]==4 and d["pp"]==2 and d["step_s"]>d["compute_s"]>0 and d["link_bytes_s"]==25e9/8' "$out"; then
    pass calc_dist_json
else
    fail calc_dist_json "$(tr '\n' '|' <<<"$out")"
fi

# The roofline of bench hw / bench kernels (no timing is checked, only what the figures are made of).
# bench hw: every peak positive and finite, the int8 peak the best of its loops, the ridges their ratios.
PY=${CINFER_PY:-python3}
"$BIN" bench hw -t 2 --mib 16 --passes 1 --peak-ms 20 --json >"$T/hw.json" 2>"$T/err"
if "$PY" - "$T/hw.json" <<'PYEOF'; then
import json, math, sys
h = json.loads(open(sys.argv[1]).read())
ok = lambda x: math.isfinite(x) and x > 0
assert h["type"] == "hw" and all(ok(h[k]) for k in ("bw_gbs", "peak_gflops", "dot_gops", "int8_peak_gops")), h
assert h["int8_peak_gops"] == max(h["dot_gops"], h["dot512_gops"], h["vnni_gops"], h["vnni512_gops"]), h
assert abs(h["int8_ridge"] - h["int8_peak_gops"] / h["bw_gbs"]) <= 1e-3 * h["int8_ridge"] + 1e-3, h
PYEOF
    pass bench_hw_json_peaks
else
    fail bench_hw_json_peaks "$(cat "$T/hw.json" "$T/err")"
fi
out=$("$BIN" bench hw -t 1 --mib 16 --passes 1 --peak-ms 10 2>&1)
grep -q "int8 dot peak" <<<"$out" && grep -q "int8 peak" <<<"$out" && pass bench_hw_table_int8 ||
    fail bench_hw_table_int8 "$(tr '\n' '|' <<<"$out")"
# The per-CPU kernel tuning: the CPU's row (its identity and widening threshold), and the override.
grep -Eq "kernel tuning +(AMD|Intel|unknown|[A-Za-z]+).*\(table row: .*\): F16/BF16 weights widened to F32 blocks (never|above [0-9]+ tokens)" \
    <<<"$out" && "$PY" -c 'import json,sys; h=json.loads(open(sys.argv[1]).read()); assert h["cpu"] and h["f16_widen_min_tokens"] >= 0' \
    "$T/hw.json" && pass bench_hw_kernel_tuning || fail bench_hw_kernel_tuning "$(tr '\n' '|' <<<"$out")"
out=$(CINFER_F16_WIDEN_MIN=5 "$BIN" bench hw -t 1 --mib 16 --passes 1 --peak-ms 10 2>&1)
grep -q "(CINFER_F16_WIDEN_MIN): F16/BF16 weights widened to F32 blocks above 5 tokens" <<<"$out" &&
    pass bench_hw_widen_override || fail bench_hw_widen_override "$(tr '\n' '|' <<<"$out")"
# bench kernels with the roofs given (nothing measured): a Q8_0 model's matmuls are charged to the int8 peak
# (its pp roofline time is int8 ops / int8 peak + the rest / f32 peak; doubling the int8 peak changes it
# accordingly), an F32 model's to the f32 peak only (no int8 ops).
"$BIN" synth --preset tiny --type q8_0 --seed 1 -o "$T/tiny-q8_0.gguf" >/dev/null 2>&1
# info: each tensor type with its bits per weight (Q8_0: 34 bytes per 32 weights = 8.5; F32: 32), and the
# model's average (weight bytes · 8 / parameters, from the same listing).
out=$("$BIN" info -m "$T/tiny-q8_0.gguf" 2>&1)
params=$(sed -n 's/^parameters *\([0-9]*\) .*/\1/p' <<<"$out")
wbytes=$(sed -n 's/^weights (mapped).*(\([0-9]*\) bytes)/\1/p' <<<"$out")
avg=$("$PY" -c "print('%.2f' % (8 * $wbytes / $params))" 2>/dev/null)
if grep -Eq "^tensor types +F32×[0-9]+ \(32 bpw\) Q8_0×[0-9]+ \(8\.5 bpw\)$" <<<"$out" &&
    grep -Eq "^bits per weight +$avg$" <<<"$out" && [ -n "$avg" ]; then
    pass info_bits_per_weight
else
    fail info_bits_per_weight "avg '$avg': $(grep -E 'tensor types|bits per' <<<"$out" | tr '\n' '|')"
fi
# info: the head size and Q width from attention.key_length (tiny-qwen3: 8 heads of 64 in a 256-wide model), the
# Q/K norms, and llama3 RoPE scaling from rope_freqs.weight (tiny-llama3).
"$BIN" synth --preset tiny-qwen3 --type f32 --seed 1 -o "$T/tiny-qwen3.gguf" >/dev/null 2>&1
"$BIN" synth --preset tiny-llama3 --type f32 --seed 1 -o "$T/tiny-llama3.gguf" >/dev/null 2>&1
out=$("$BIN" info -m "$T/tiny-qwen3.gguf" 2>&1)
grep -Eq "^attention heads +8 \(head dim 64, q dim 512\)$" <<<"$out" && grep -Eq "^q/k norm +per-head" <<<"$out" &&
    grep -Eq "^architecture +qwen3$" <<<"$out" && pass info_qwen3_head_dim ||
    fail info_qwen3_head_dim "$(tr '\n' '|' <<<"$out")"
out=$("$BIN" info -m "$T/tiny-llama3.gguf" 2>&1)
grep -Eq "^rope scaling +type llama3, per-pair frequency divisors from rope_freqs.weight$" <<<"$out" &&
    pass info_llama3_rope_scaling || fail info_llama3_rope_scaling "$(tr '\n' '|' <<<"$out")"
# info: YaRN (factor, original context, betas, the magnitude 1 + 0.1 ln 4) and Phi-3's LongRoPE with its
# attention factor sqrt(1 + ln 8 / ln 64) and fused projections; its parameters counted from the shapes:
# embeddings and output 2·1024·256, per layer qkv 256·384 + o 256·256 + up 256·1536 + down 768·256 + norms
# 2·256, output norm 256, two LongRoPE factor vectors of 12 = 3541272.
"$BIN" synth --preset tiny-yarn --type f32 --seed 1 -o "$T/tiny-yarn.gguf" >/dev/null 2>&1
"$BIN" synth --preset tiny-phi3 --type f32 --seed 1 -o "$T/tiny-phi3.gguf" >/dev/null 2>&1
out=$("$BIN" info -m "$T/tiny-yarn.gguf" 2>&1)
grep -Eq "^rope scaling +type yarn, factor 4, original context 128, beta fast 32 slow 1, cos/sin scaled by 1.1386" \
    <<<"$out" && pass info_yarn_rope_scaling || fail info_yarn_rope_scaling "$(tr '\n' '|' <<<"$out")"
out=$("$BIN" info -m "$T/tiny-phi3.gguf" 2>&1)
grep -Eq "^rope scaling +type longrope, rope_factors_long.weight above a context of 64.*scaled by 1.2247" <<<"$out" &&
    grep -Eq "^fused projections +attn_qkv .* ffn_up " <<<"$out" && grep -Eq "^architecture +phi3$" <<<"$out" &&
    grep -Eq "^rope +base 10000, 24 dims, NeoX pairing$" <<<"$out" &&
    grep -Eq "^parameters +3541272 " <<<"$out" && pass info_phi3 ||
    fail info_phi3 "$(tr '\n' '|' <<<"$out")"
roofs() { # MODEL INT8_PEAK_GOPS -> JSON lines
    "$BIN" bench kernels -m "$1" -t 1 -p 64 -n 0 --batch 0 -r 1 --no-warmup --bandwidth-gbs 1000000 \
        --peak-gflops 10 --int8-peak-gops "$2" --json 2>"$T/err"
}
roofs "$T/tiny-q8_0.gguf" 40 >"$T/k40.json"
roofs "$T/tiny-q8_0.gguf" 80 >"$T/k80.json"
roofs "$M/stories260K.gguf" 40 >"$T/kf32.json"
if "$PY" - "$T/k40.json" "$T/k80.json" "$T/kf32.json" <<'PYEOF'; then
import json, sys
def lines(path):
    return {d["type"]: d for d in map(json.loads, open(path))}
for path, int8_peak in ((sys.argv[1], 40e9), (sys.argv[2], 80e9)):
    d = lines(path)
    m, pp = d["model"], d["pp"]
    assert d["hw"]["isa"] == "given" and m["weight_type"] == "Q8_0" and m["int8_params"] > 0, d
    assert pp["int8_ops"] > 0.9 * pp["flops"] and pp["bound"] == "int8", pp
    t = pp["int8_ops"] / int8_peak + (pp["flops"] - pp["int8_ops"]) / 10e9
    assert abs(pp["roofline_ts"] - 64 / t) <= 1e-3 * pp["roofline_ts"], (pp, 64 / t)
d = lines(sys.argv[3])
pp = d["pp"]
assert d["model"]["int8_params"] == 0 and pp["int8_ops"] == 0 and pp["bound"] == "f32", d
assert abs(pp["roofline_ts"] - 64 / (pp["flops"] / 10e9)) <= 1e-3 * pp["roofline_ts"], pp
PYEOF
    pass bench_kernels_roof_per_weight_type
else
    fail bench_kernels_roof_per_weight_type "$(cat "$T/k40.json" "$T/k80.json" "$T/kf32.json" "$T/err")"
fi

# bench kernels -d D (llama-bench -d): pp and tg run after D tokens of context, so each of tg's N steps reads
# D more KV positions: N * D * 640 more bytes on stories260K in f16 (2 * 5 layers * 4 KV heads * 8 dims * 2 B)
# than at depth 0, and pp's tokens attend to D more positions each; the labels say the depth.
depth() { # D -> JSON lines
    "$BIN" bench kernels -m "$M/stories260K.gguf" -t 2 -p 8 -n 4 -d "$1" --batch 0 -r 1 --bandwidth-gbs 10 \
        --peak-gflops 10 --int8-peak-gops 10 --kv-type f16 --json 2>"$T/err"
}
depth 0 >"$T/d0.json"
depth 300 >"$T/d300.json"
if "$PY" - "$T/d0.json" "$T/d300.json" <<'PYEOF'; then
import json, sys
a, b = ({d["type"]: d for d in map(json.loads, open(p))} for p in sys.argv[1:3])
assert a["tg"]["test"] == "tg4" and b["tg"]["test"] == "tg4 @ d300" and b["pp"]["test"] == "pp8 @ d300", b
assert a["tg"]["n_depth"] == 0 and b["tg"]["n_depth"] == 300 and b["pp"]["n_depth"] == 300, b
extra = b["tg"]["bytes"] - a["tg"]["bytes"]
assert abs(extra - 4 * 300 * 640) <= 1e-3 * 4 * 300 * 640, (extra, a["tg"], b["tg"])
# attention FLOPs: 4 * layers * heads * head_dim = 1280 per query per attended position
assert abs((b["pp"]["flops"] - a["pp"]["flops"]) - 8 * 300 * 1280) <= 1e-3 * 8 * 300 * 1280, (a["pp"], b["pp"])
PYEOF
    pass bench_kernels_depth
else
    fail bench_kernels_depth "$(cat "$T/d0.json" "$T/d300.json" "$T/err")"
fi

# cinfer quantize: the error paths (usage errors exit 2, bad files 1, never a partial output), then one
# conversion and its summary.
"$BIN" synth --preset tiny --type f32 --seed 3 -o "$T/q-src.gguf" >/dev/null 2>&1
expect quantize_usage 2 "usage: cinfer quantize" "$BIN" quantize "$T/q-src.gguf" "$T/q.gguf"
expect quantize_unknown_type 2 "unknown type 'Q7_K' (accepted: F32, F16, BF16, Q8_0, Q4_0, Q4_1" \
    "$BIN" quantize "$T/q-src.gguf" "$T/q.gguf" Q7_K
expect quantize_bad_threads 2 "--threads" "$BIN" quantize "$T/q-src.gguf" "$T/q.gguf" Q4_K_M --threads 0
expect quantize_missing_input 1 "/nonexistent.gguf" "$BIN" quantize /nonexistent.gguf "$T/q.gguf" Q4_K_M
head -c 4096 /dev/urandom >"$T/q-garbage.gguf"
expect quantize_not_gguf 1 "cinfer quantize:" "$BIN" quantize "$T/q-garbage.gguf" "$T/q.gguf" Q4_K_M
expect quantize_truncated 1 "past end of file" "$BIN" quantize "$T/trunc.gguf" "$T/q.gguf" Q4_K_M
expect quantize_llama2c_input 1 "cinfer quantize:" "$BIN" quantize "$M/stories260K.bin" "$T/q.gguf" Q4_K_M
expect quantize_unwritable_output 1 "cannot create" "$BIN" quantize "$T/q-src.gguf" /nonexistent-dir/q.gguf Q4_K_M
expect quantize_output_is_directory 1 "cannot create" "$BIN" quantize "$T/q-src.gguf" "$T" Q4_K_M
cp "$T/q-src.gguf" "$T/q-same.gguf"
expect quantize_output_is_input 1 "would overwrite the input" "$BIN" quantize "$T/q-same.gguf" "$T/q-same.gguf" Q6_K
if [ -e "$T/q.gguf" ] || ! cmp -s "$T/q-src.gguf" "$T/q-same.gguf"; then
    fail quantize_no_partial_output "a failed quantize left $T/q.gguf or changed its input"
else
    pass quantize_no_partial_output
fi
if out=$("$BIN" quantize "$T/q-src.gguf" "$T/q.gguf" q4_k_m --threads 2 2>"$T/err") &&
    grep -qE '^Q4_K +25 tensors .* 4\.500 bits per weight' <<<"$out" &&
    grep -qE '^Q6_K +5 tensors .* 6\.562 bits per weight' <<<"$out" &&
    grep -qE '^F32 +9 tensors' <<<"$out" && grep -q "wrote $T/q.gguf: q4_k_m (file_type 15), 39 tensors" <<<"$out"; then
    pass quantize_summary
else
    fail quantize_summary "$out $(cat "$T/err")"
fi
# Re-quantizing: K-quant and IQ4 sources dequantize (Q4_K_M -> Q8_0, IQ4_XS -> Q8_0).
if "$BIN" quantize "$T/q.gguf" "$T/q8.gguf" Q8_0 >"$T/out" 2>"$T/err" && grep -qE '^Q8_0 +30 tensors' "$T/out"; then
    pass quantize_from_k_quants
else
    fail quantize_from_k_quants "$(cat "$T/out" "$T/err")"
fi
"$BIN" quantize "$T/q-src.gguf" "$T/q-iq4.gguf" IQ4_XS >/dev/null 2>&1
rm -f "$T/q8.gguf"
if "$BIN" quantize "$T/q-iq4.gguf" "$T/q8.gguf" Q8_0 >"$T/out" 2>"$T/err" && grep -qE '^Q8_0 +30 tensors' "$T/out"; then
    pass quantize_from_iq4
else
    fail quantize_from_iq4 "$(cat "$T/out" "$T/err")"
fi
# --pure: every quantized tensor in the base type (no Q6_K head, no more-bits layers).
if out=$("$BIN" quantize "$T/q-src.gguf" "$T/q-pure.gguf" Q4_K_M --pure 2>"$T/err") &&
    grep -qE '^Q4_K +30 tensors' <<<"$out" && ! grep -q '^Q6_K' <<<"$out"; then
    pass quantize_pure
else
    fail quantize_pure "$out $(cat "$T/err")"
fi
# --grammar: the output follows a GBNF file; a bad file is refused with the problem named.
printf 'root ::= "<" [0-9]{2,3} ">" " ok"\n' >"$T/g.gbnf"
if out=$("$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 20 --temp 1 --seed 4 --grammar "$T/g.gbnf" 2>"$T/err") &&
    grep -qE '^Once<[0-9]{2,3}> ok$' <<<"$out" && grep -q 'finish: stop' "$T/err"; then
    pass run_grammar
else
    fail run_grammar "$out $(cat "$T/err")"
fi
printf 'root ::= num\n' >"$T/bad.gbnf"
expect run_grammar_undefined 1 "undefined rule 'num'" "$BIN" run -m "$M/stories260K.gguf" --grammar "$T/bad.gbnf"
expect run_grammar_missing 1 "--grammar $T/none.gbnf" "$BIN" run -m "$M/stories260K.gguf" --grammar "$T/none.gbnf"
# --json-schema / --regex: the output is a JSON value of the schema / matches the regex (checked here with
# python3's json and re); an unsupported keyword is refused naming it.
printf '{"type":"object","properties":{"n":{"type":"integer","minimum":3,"maximum":7}},"required":["n"],"additionalProperties":false}' >"$T/s.json"
if out=$("$BIN" run -m "$M/stories260K.gguf" -p "" -n 40 --temp 1 --seed 4 --json-schema "$T/s.json" 2>"$T/err") &&
    python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert set(v)=={"n"} and 3<=v["n"]<=7' "$out" &&
    grep -q 'finish: stop' "$T/err"; then
    pass run_json_schema
else
    fail run_json_schema "$out $(cat "$T/err")"
fi
if out=$("$BIN" run -m "$M/stories260K.gguf" -p "" -n 40 --temp 1 --seed 5 --regex '[a-c]{2}-\d{3}' 2>"$T/err") &&
    python3 -c 'import re,sys; assert re.fullmatch(r"[a-c]{2}-\d{3}", sys.argv[1])' "$out"; then
    pass run_regex
else
    fail run_regex "$out $(cat "$T/err")"
fi
printf '{"type":"number","multipleOf":0.5}' >"$T/s2.json" # decimal divisors stay unsupported
expect run_json_schema_unsupported 1 "multipleOf" "$BIN" run -m "$M/stories260K.gguf" --json-schema "$T/s2.json"
expect run_regex_unsupported 1 "lookahead" "$BIN" run -m "$M/stories260K.gguf" --regex '(?=a)a'
# The default KV pool is sized from the available memory (CINFER_MEM_AVAILABLE pretends a machine): for
# stories260K in f16 a 16-token block is 2 x 5 layers x 4 KV heads x 8 dims x 2 bytes x 16 = 10240 bytes and its
# F32 weights are 292800 x 4 = 1171200 bytes.  A quarter of 1 GiB minus the weights = 267264256 bytes = 26100
# whole blocks (the cap, 4096 sequences x 128 blocks, does not bind).
pool_line() { grep -m1 '^cinfer run: KV pool' "$T/err"; }
if CINFER_MEM_AVAILABLE=1G "$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 --max-seqs 4096 \
    --kv-mem-fraction 0.25 >/dev/null 2>"$T/err" &&
    pool_line | grep -qF 'KV pool 254.9 MiB = 26100 blocks of 16 tokens = 417600 tokens (f16, 640 bytes per token), sized by memory: 25% of 1024 MiB available minus 1 MiB of weights;'; then
    pass kv_pool_from_memory
else
    fail kv_pool_from_memory "$(pool_line)"
fi
# The cap: 3 sequences of a 100-token context never need more than 3 x ceil(100 / 16) = 21 blocks.
if "$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 --max-seqs 3 -c 100 >/dev/null 2>"$T/err" &&
    pool_line | grep -qF '= 21 blocks of 16 tokens = 336 tokens (f16, 640 bytes per token), sized by cap:'; then
    pass kv_pool_capped
else
    fail kv_pool_capped "$(pool_line)"
fi
# Memory short (half of 40 MiB is 20 MiB, under the 64 MiB floor): 64 MiB / 10240 = 6553 blocks.
if CINFER_MEM_AVAILABLE=40M "$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 >/dev/null 2>"$T/err" &&
    pool_line | grep -qF '= 6553 blocks of 16 tokens' && pool_line | grep -qF 'sized by floor:'; then
    pass kv_pool_floor
else
    fail kv_pool_floor "$(pool_line)"
fi
# The flags still override: --kv-mem 1M = 102 blocks of 10240 bytes, --kv-blocks as given.
if CINFER_MEM_AVAILABLE=1G "$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 --kv-mem 1M >/dev/null 2>"$T/err" &&
    pool_line | grep -qF '= 102 blocks of 16 tokens = 1632 tokens (f16, 640 bytes per token), sized by --kv-mem;'; then
    pass kv_pool_kv_mem_overrides
else
    fail kv_pool_kv_mem_overrides "$(pool_line)"
fi
if "$BIN" run -m "$M/stories260K.gguf" -p "Once" -n 2 --kv-blocks 7 --kv-type f32 >/dev/null 2>"$T/err" &&
    pool_line | grep -qF '= 7 blocks of 16 tokens = 112 tokens (f32, 1280 bytes per token), sized by --kv-blocks;'; then
    pass kv_pool_kv_blocks_overrides
else
    fail kv_pool_kv_blocks_overrides "$(pool_line)"
fi
expect kv_mem_fraction_range 2 "--kv-mem-fraction" "$BIN" run -m "$M/stories260K.gguf" --kv-mem-fraction 1.5
# The pool's pages are touched only as blocks are used: a 2 GiB pool leaves the peak RSS of a short run far
# below it (measured from outside with getrusage of the child; about 18 MiB in a release build, 310 MiB under
# ASan, whose shadow of the pool is an eighth of it; a pool cleared up front would be over 2 GiB).
if rss=$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$BIN" run -m "$M/stories260K.gguf" -p Once -n 4 \
    --kv-mem 2G --max-seqs 4096) && [ "$rss" -lt 1048576 ]; then
    pass kv_pool_lazy_pages
else
    fail kv_pool_lazy_pages "peak RSS ${rss:-?} KiB with a 2 GiB pool"
fi
