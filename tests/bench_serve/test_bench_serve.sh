#!/usr/bin/env bash
# `cinfer bench serve` against a mock OpenAI streaming server with known timings (mock_server.py): the
# measured TTFT/ITL/TPOT/E2EL match the mock's, counts and token totals are right, results.json is valid and
# its statistics are numpy's, Poisson arrivals keep their rate, --max-concurrency holds, HTTP errors are
# counted, streams without usage / with several tokens per chunk / with awkward SSE framing are read, a
# refused ignore_eos is dropped, goodput follows vLLM's definition, the datasets have their shapes, and bad
# flags are usage errors.  checks.py prints the PASS/FAIL lines of each run.
#
# The binary: $CINFER_BENCH_SERVE_BIN if set, else $CINFER_BIN when it has `bench serve`, else a stand-in
# built here from src/cli/bench_serve.c (until main.c routes `cinfer bench serve`); $CINFER_SHIM_CFLAGS adds
# flags to that build (e.g. sanitizers).
set -u
ROOT=${CINFER_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${CINFER_PY:-/usr/bin/python3}
HERE=$ROOT/tests/bench_serve
T=$(mktemp -d)
MOCK_PID=""
SERVE_PID=""
# shellcheck disable=SC2317  # runs from the trap
cleanup() {
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
    [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }

BIN=${CINFER_BENCH_SERVE_BIN:-}
if [ -z "$BIN" ] && [ -x "${CINFER_BIN:-}" ] && "$CINFER_BIN" bench serve --help 2>/dev/null | grep -q -- --goodput; then
    BIN=$CINFER_BIN
fi
if [ -z "$BIN" ]; then
    printf '#include "bench/serve.h"\nint main(int argc, char **argv) { return cmd_bench_serve(argc, argv); }\n' \
        >"$T/shim.c"
    # shellcheck disable=SC2086
    if ! (cd "$ROOT" && cc -std=c11 -D_GNU_SOURCE -O1 -g ${CINFER_SHIM_CFLAGS:-} -Iinclude -Isrc -o "$T/cinfer" \
        "$T/shim.c" src/cli/bench_serve.c src/cli/args.c src/engine/metrics.c src/core/*.c \
        -lcurl -lcjson -lpthread -lm) >"$T/build.log" 2>&1; then
        fail build "could not build the bench serve stand-in: $(head -5 "$T/build.log" | tr '\n' ' ')"
        exit 1
    fi
    BIN=$T/cinfer
fi

# start_mock ARGS...: runs the mock on a free port, sets PORT.
# Each start gets its own output file: the shell truncates a reused one only once the background child runs,
# so a reused file could still show the previous mock's port.
N_MOCK=0
start_mock() {
    N_MOCK=$((N_MOCK + 1))
    local out=$T/mock$N_MOCK.out
    "$PY" "$HERE/mock_server.py" "$@" >"$out" 2>"$T/mock.err" &
    MOCK_PID=$!
    PORT=""
    for _ in $(seq 100); do
        PORT=$(awk '/^PORT/ {print $2}' "$out" 2>/dev/null)
        [ -n "$PORT" ] && return 0
        sleep 0.05
    done
    fail mock_start "the mock server did not start: $(head -3 "$T/mock.err")"
    return 1
}

# get_stats FILE: the mock's GET /stats into FILE.
get_stats() {
    "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
        "http://127.0.0.1:$PORT/stats" >"$1"
}

stop_mock() {
    kill "$MOCK_PID" 2>/dev/null
    wait "$MOCK_PID" 2>/dev/null
    MOCK_PID=""
}

# run CASE "MOCK ARGS" CHECK_KV BENCH ARGS...: one mock, one benchmark run, then checks.py.
run() {
    local case=$1 mock_args=$2 kv=$3
    shift 3
    local d=$T/$case
    mkdir -p "$d"
    # shellcheck disable=SC2086
    start_mock $mock_args || return
    timeout 120 "$BIN" bench serve --url "http://127.0.0.1:$PORT" -q --out "$d/out" "$@" >"$d/stdout" 2>"$d/stderr"
    echo $? >"$d/rc"
    get_stats "$d/stats.json"
    stop_mock
    # shellcheck disable=SC2086
    "$PY" "$HERE/checks.py" "$case" "$d" $kv >"$d/checks" 2>&1
    local rc=$?
    cat "$d/checks"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$d/checks"; then
        fail "$case" "checks.py exited with status $rc"
    fi
}

run basic "--ttft-ms 50 --itl-ms 10" "n=8 input_len=32 conc=4 plots=1" \
    -n 8 --input-len 32 --output-len 16 --range-ratio 0 --max-concurrency 4
run concurrency "--ttft-ms 5 --itl-ms 2" "n=10 conc=2" \
    -n 10 --input-len 16 --output-len 8 --max-concurrency 2 --no-plots
run poisson "--ttft-ms 5 --itl-ms 2" "n=40 rate=50" \
    -n 40 --request-rate 50 --input-len 16 --output-len 4 --range-ratio 0 --seed 3 --no-plots
run errors "--ttft-ms 5 --itl-ms 2 --fail-every 3 --fail-after 2" "n=9 n_failed=3 out=6" \
    -n 9 --input-len 16 --output-len 6 --range-ratio 0 --max-concurrency 1
run error_event "--ttft-ms 5 --itl-ms 2 --error-event-every 2 --fail-after 2" "n=6 n_failed=3" \
    -n 6 --input-len 16 --output-len 6 --range-ratio 0 --max-concurrency 1 --no-plots
run no_stream "--no-stream" "n=3 probes=1" -n 3 --input-len 16 --output-len 4 --no-plots
run no_usage "--ttft-ms 20 --itl-ms 10 --no-usage --tokens-per-chunk 2" "n=4 out=16 chunk=2 itl=10 probes=1" \
    -n 4 --input-len 16 --output-len 16 --range-ratio 0 --no-plots
run multi_token "--ttft-ms 30 --itl-ms 10 --tokens-per-chunk 3" "n=4 out=16 chunk=3 itl=10 ttft=30" \
    -n 4 --input-len 16 --output-len 16 --range-ratio 0 --no-plots
run awkward_sse "--ttft-ms 5 --itl-ms 3 --crlf --comments --split 7 --close" "n=4 out=8" \
    -n 4 --input-len 16 --output-len 8 --range-ratio 0 --no-plots
run reject_field "--ttft-ms 5 --itl-ms 2 --reject-field ignore_eos" "n=4 probes=3" \
    -n 4 --input-len 16 --output-len 4 --no-plots
run goodput_all "--ttft-ms 5 --itl-ms 2" "n=4" \
    -n 4 --input-len 16 --output-len 4 --no-plots --goodput ttft:1000 tpot:1000
run goodput_none "--ttft-ms 30 --itl-ms 2" "n=4" \
    -n 4 --input-len 16 --output-len 4 --no-plots --goodput=ttft:5,tpot:1000
run goodput_some "--ttft-ms 5 --itl-ms 5" "n=12 e2el=80" \
    -n 12 --input-len 16 --output-len 16 --range-ratio 0.6 --no-plots --goodput e2el:80
run shared_prefix "--ttft-ms 5 --itl-ms 2" "n=6 groups=2 prefix_words=19" \
    --dataset shared-prefix -n 6 --groups 2 --prefix-len 40 --suffix-len 6 --output-len 4 --no-plots
run sharegpt "--ttft-ms 2 --itl-ms 1" "n=30" \
    --dataset sharegpt-like -n 30 --input-len 20 --output-len 8 --output-sigma 0.8 --no-plots
run chat "--ttft-ms 5 --itl-ms 2" "n=3 out=6" \
    --endpoint /v1/chat/completions -n 3 --input-len 16 --output-len 6 --range-ratio 0 --no-plots

# Same seed, same workload; another seed, another one (prompts as the mock received them).
prompts_of() { "$PY" -c 'import json,sys; print("\n".join(sorted(r["prompt"] for r in json.load(open(sys.argv[1]))["requests"][2:])))' "$1"; }
for s in 7 7 8; do
    start_mock --ttft-ms 1 --itl-ms 1 || break
    timeout 60 "$BIN" bench serve --url "http://127.0.0.1:$PORT" -q --no-plots --out "$T/seed$s" -n 5 --input-len 16 \
        --output-len 2 --seed $s >/dev/null 2>&1
    get_stats "$T/seed.json"
    stop_mock
    prompts_of "$T/seed.json" >>"$T/prompts_$s"
done
if [ -s "$T/prompts_7" ] && [ "$(sort -u "$T/prompts_7" | wc -l)" -eq 5 ] && [ "$(wc -l <"$T/prompts_7")" -eq 10 ] &&
    ! grep -qxFf "$T/prompts_7" "$T/prompts_8"; then
    pass seed_reproducible
else
    fail seed_reproducible "seed 7 twice must give the same 5 prompts and seed 8 others"
fi

# Against the real `cinfer serve` (when the binary has it and the shared model is there): every request
# succeeds, ignore_eos gives exactly max_tokens tokens, and the token totals are the server's usage.
MODEL=${CINFER_MODELS:-$ROOT/../shared/models}/stories260K.gguf
if [ -x "${CINFER_BIN:-}" ] && [ -f "$MODEL" ] && "$CINFER_BIN" serve --help 2>/dev/null | grep -q -- --port; then
    "$CINFER_BIN" serve -m "$MODEL" --port 0 >"$T/serve.out" 2>"$T/serve.err" &
    SERVE_PID=$!
    URL=""
    for _ in $(seq 100); do
        URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/serve.err" | head -1)
        [ -n "$URL" ] && grep -q ready "$T/serve.err" && break
        sleep 0.05
    done
    mkdir -p "$T/real"
    timeout 120 "$BIN" bench serve --url "$URL" -q --no-plots --out "$T/real/out" -n 6 --input-len 24 \
        --output-len 12 --max-concurrency 3 >"$T/real/stdout" 2>"$T/real/stderr"
    echo $? >"$T/real/rc"
    kill "$SERVE_PID" 2>/dev/null
    wait "$SERVE_PID" 2>/dev/null
    SERVE_PID=""
    "$PY" - "$T/real" <<'PYEOF'
import json, sys
d = sys.argv[1]
rc = int(open(d + "/rc").read())
try:
    R = json.load(open(d + "/out/results.json"))
except (OSError, ValueError) as e:
    print("FAIL real_server: exit %d, no results.json (%s): %s" % (rc, e, open(d + "/stderr").read()[-300:]))
    sys.exit(0)
ok = (rc == 0 and R["completed"] == 6 and R["failed"] == 0 and R["output_lens"] == R["max_tokens"]
      and R["total_output_tokens"] == sum(R["max_tokens"]) and R["calibrated"]
      and None not in R["input_lens"] and R["total_input_tokens"] == sum(R["input_lens"]))
print("PASS real_server" if ok else "FAIL real_server: exit %d, completed %s, errors %s, output_lens %s vs %s"
      % (rc, R["completed"], [e for e in R["errors"] if e][:2], R["output_lens"], R["max_tokens"]))
PYEOF
fi

# Failures before any request: exit 1 with a message; bad flags: exit 2.
# expect NAME STATUS NEEDLE ARGS...
expect() {
    local name=$1 want=$2 needle=$3
    shift 3
    timeout 60 "$BIN" bench serve "$@" >"$T/x.out" 2>"$T/x.err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit $rc, want $want; stderr: $(head -3 "$T/x.err" | tr '\n' ' ')"
    elif grep -qE 'Sanitizer|runtime error|Segmentation|Aborted' "$T/x.err"; then
        fail "$name" "crash: $(head -5 "$T/x.err" | tr '\n' ' ')"
    elif ! grep -qF -- "$needle" "$T/x.err"; then
        fail "$name" "stderr lacks '$needle': $(head -3 "$T/x.err" | tr '\n' ' ')"
    else
        pass "$name"
    fi
}
expect unreachable 1 "initial test request" --url http://127.0.0.1:1 -q -n 2 --out "$T/unreach"
expect usage_no_url 2 "--url is required" -n 2
expect usage_bad_goodput 2 "unknown SLO 'ttfx'" --url http://x --goodput ttfx:5
expect usage_bad_goodput_value 2 "positive number" --url http://x --goodput ttft:-5
expect usage_bad_rate 2 "--request-rate" --url http://x --request-rate 0
expect usage_bad_dataset 2 "--dataset" --url http://x --dataset nope
expect usage_bad_flag 2 "unknown option" --url http://x --bogus
if "$BIN" bench serve --help | grep -q -- "--max-concurrency"; then pass help; else fail help "--help lacks the flags"; fi
exit 0
