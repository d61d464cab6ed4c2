#!/usr/bin/env bash
# bench/serve.sh — `cinfer bench serve` against `cinfer serve` and, in the same run, against llama.cpp's
# llama-server on the same GGUF file, thread count and workload, at several request rates.  For each server:
# per rate, start it fresh on a loopback port, wait for /health, run `cinfer bench serve` (Poisson arrivals, the
# same seeded prompts at every rate), stop it (reading its peak resident memory, VmHWM, just before).  Then prints
# one table (TTFT/TPOT/ITL/E2EL p50 and p99, request and output-token throughput and peak RSS per engine and
# rate, and the ratios), appends it with the exact command and date
# to bench/RESULTS.md under "## Serving", and keeps every run's results.json and plots under OUT/serve-runs.
# llama-server is built once by scripts/llamacpp-native.sh --server, outside the repository.
#
#   bench/serve.sh [--preset NAME] [--type T] [--rates LIST] [-n N] [--input-len L] [--output-len L]
#                  [--range-ratio R] [--slots S] [-t T] [--no-llamacpp] [--no-results] [--bin CINFER]
#                  [--out DIR] [--note TEXT]
# Defaults: --preset smollm2-135m --type q8_0 (cinfer synth, seed 1, under models/kernels/), --rates 1,4,16,inf,
# -n 48, --input-len 128 --output-len 64 --range-ratio 0.5 (vLLM's random dataset), --slots 16 (sequences each
# server runs at once: cinfer --max-seqs, llama-server -np; both get KV room for every slot's longest request),
# -t 2, --out bench/out.  About 5 minutes per server on 2 idle cores.
set -u
# The whole script is one compound command, read before it runs: editing the file during a run is safe.
{
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/results_append.sh"
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
OUT=$ROOT/bench/out
RESULTS=$ROOT/bench/RESULTS.md
PRESET=smollm2-135m
TYPE=q8_0
RATES="1,4,16,inf"
N=48
IN=128
OUTLEN=64
RANGE=0.5
SLOTS=16
THREADS=2
LLAMA=1
WRITE_RESULTS=1
NOTE_USER=""
CMDLINE="bench/serve.sh $*"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() {
    echo "serve.sh: $*" >&2
    exit 1
}
need() { [ "$1" -ge 2 ] || die "$2 needs a value"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --preset) need $# "$1" && PRESET=$2 && shift ;;
    --type) need $# "$1" && TYPE=$2 && shift ;;
    --rates) need $# "$1" && RATES=$2 && shift ;;
    -n | --num-prompts) need $# "$1" && N=$2 && shift ;;
    --input-len) need $# "$1" && IN=$2 && shift ;;
    --output-len) need $# "$1" && OUTLEN=$2 && shift ;;
    --range-ratio) need $# "$1" && RANGE=$2 && shift ;;
    --slots) need $# "$1" && SLOTS=$2 && shift ;;
    -t | --threads) need $# "$1" && THREADS=$2 && shift ;;
    --no-llamacpp) LLAMA=0 ;;
    --no-results) WRITE_RESULTS=0 ;;
    --bin) need $# "$1" && BIN=$2 && shift ;;
    --out) need $# "$1" && OUT=$2 && shift ;;
    --note) need $# "$1" && NOTE_USER=$2 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
    esac
    shift
done
for v in "$N" "$IN" "$OUTLEN" "$SLOTS" "$THREADS"; do
    case "$v" in '' | *[!0-9]* | 0) die "not a positive count: '$v'" ;; esac
done
case "$RANGE" in '' | *[!0-9.]*) die "not a ratio: '$RANGE'" ;; esac
for r in $(echo "$RATES" | tr ',' ' '); do
    case "$r" in inf | [0-9]* ) ;; *) die "not a request rate: '$r'" ;; esac
done
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac

[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, or --bin)"
RUNS=$OUT/serve-runs
mkdir -p "$RUNS" "$ROOT/models/kernels" || die "cannot create $RUNS"
MODEL=$ROOT/models/kernels/$PRESET-$TYPE.gguf
if [ ! -s "$MODEL" ]; then
    echo "serve.sh: synth $PRESET $TYPE -> $MODEL" >&2
    "$BIN" synth --preset "$PRESET" --type "$TYPE" --seed 1 -o "$MODEL" >&2 || die "synth failed"
fi

LCOMMIT=""
if [ "$LLAMA" -eq 1 ]; then
    echo "serve.sh: llama-server (scripts/llamacpp-native.sh --server; the first build takes a while) ..." >&2
    LDIR=$("$ROOT/scripts/llamacpp-native.sh" --server) || die "no llama-server (use --no-llamacpp for cinfer alone)"
    LSERVER=$LDIR/llama-server
    LCOMMIT=$(cut -c1-12 "$LDIR/../.cinfer-commit" 2>/dev/null)
fi

# The longest request of the workload: every slot gets room for it (llama-server splits -c evenly over -np).
MAXREQ=$(awk -v i="$IN" -v o="$OUTLEN" -v r="$RANGE" 'BEGIN { printf "%d", i * (1 + r) + o * (1 + r) + 16 }')
SLOT_CTX=$(((MAXREQ + 255) / 256 * 256))
CTX=$((SLOTS * SLOT_CTX))

# free_port: a loopback port nobody listens on (bash's /dev/tcp connect fails on a closed port).
free_port() {
    local p
    for p in $(seq 18180 18299); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
    done
    return 1
}
# wait_health URL PID: until GET URL/health answers 200 (the model is loaded), or the server died.
wait_health() {
    local i
    for i in $(seq 1 600); do
        kill -0 "$2" 2>/dev/null || return 1
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 200 ] && return 0
        sleep 0.2
    done
    return 1
}
SERVER_PID=""
# stop_server [RSS_FILE]: stops the server, first writing its peak resident memory (VmHWM, KiB) to RSS_FILE.
stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    [ -n "${1:-}" ] && sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$SERVER_PID/status" >"$1" 2>/dev/null
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 50); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# jnum FILE KEY: the number stored under top-level "KEY" in a results.json of cinfer bench serve.
jnum() { sed -n 's/^[[:space:]]*"'"$2"'":[[:space:]]*\([-+0-9.eE]*\),\{0,1\}$/\1/p' "$1" | head -1; }
num() { awk -v a="$1" -v d="$2" 'BEGIN { if (a == "") print "-"; else printf "%.*f", d, a }'; }
# mib FILE: the KiB count in FILE as MiB with one decimal ("" when the file is missing or empty).
mib() { [ -s "$1" ] && awk '{ printf "%.1f", $1 / 1024 }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

start=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
ENGINES="cinfer"
[ "$LLAMA" -eq 1 ] && ENGINES="cinfer llama.cpp"

# start_server ENGINE LOG: starts it on a free port (SERVER_PID, URL) and waits until it has loaded the model.
start_server() {
    local port
    port=$(free_port) || die "no free loopback port in 18180-18299"
    URL=http://127.0.0.1:$port
    if [ "$1" = cinfer ]; then
        # KV pool: SLOTS sequences of SLOT_CTX tokens, and the same context limit per sequence as llama.cpp's.
        "$BIN" serve -m "$MODEL" --port "$port" -t "$THREADS" --max-seqs "$SLOTS" -c "$SLOT_CTX" \
            --kv-blocks $((SLOTS * SLOT_CTX / 16)) --block-size 16 >"$2" 2>&1 &
    else
        "$LSERVER" -m "$MODEL" --port "$port" -t "$THREADS" -tb "$THREADS" -np "$SLOTS" -c "$CTX" \
            --no-webui >"$2" 2>&1 &
    fi
    SERVER_PID=$!
    wait_health "$URL" "$SERVER_PID" || die "$1 server did not come up (see $2)"
}

# Every rate gets freshly started servers: the workload's prompts are the same at every rate (same seed), and
# neither engine may answer them from the previous rate's prompt cache.  Engines alternate within a rate so
# that a drift of the machine touches both alike.
for rate in $(echo "$RATES" | tr ',' ' '); do
    for engine in $ENGINES; do
        dir=$RUNS/$engine-rate-$rate
        start_server "$engine" "$dir.server.log"
        echo "serve.sh: [$engine] request rate $rate ..." >&2
        "$BIN" bench serve --url "$URL" --dataset random -n "$N" --request-rate "$rate" --input-len "$IN" \
            --output-len "$OUTLEN" --range-ratio "$RANGE" --seed 1 -q -o "$dir" >"$dir.txt" 2>&1 ||
            echo "serve.sh: [$engine] rate $rate failed (see $dir.txt)" >&2
        stop_server "$dir.rss"
    done
done

# ---- the table ----
load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
tree=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)
[ -n "$tree" ] && ! git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null && tree="$tree + uncommitted src/ changes"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
TABLE=$RUNS/table.md
{
    echo "| rate (req/s) | engine | ok | req/s | out tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p50 | ITL p99 | E2EL p50 | E2EL p99 | peak RSS (MiB) |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for rate in $(echo "$RATES" | tr ',' ' '); do
        for engine in $ENGINES; do
            f=$RUNS/$engine-rate-$rate/results.json
            if [ ! -s "$f" ]; then
                echo "| $rate | $engine | failed | | | | | | | | | | | |"
                continue
            fi
            printf '| %s | %s | %s/%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$rate" "$engine" \
                "$(jnum "$f" completed)" "$N" "$(num "$(jnum "$f" request_throughput)" 2)" \
                "$(num "$(jnum "$f" output_throughput)" 1)" \
                "$(num "$(jnum "$f" median_ttft_ms)" 0)" "$(num "$(jnum "$f" p99_ttft_ms)" 0)" \
                "$(num "$(jnum "$f" median_tpot_ms)" 1)" "$(num "$(jnum "$f" p99_tpot_ms)" 1)" \
                "$(num "$(jnum "$f" median_itl_ms)" 1)" "$(num "$(jnum "$f" p99_itl_ms)" 1)" \
                "$(num "$(jnum "$f" median_e2el_ms)" 0)" "$(num "$(jnum "$f" p99_e2el_ms)" 0)" \
                "$(mib "$RUNS/$engine-rate-$rate.rss")"
        done
        if [ "$LLAMA" -eq 1 ]; then
            c=$RUNS/cinfer-rate-$rate/results.json l=$RUNS/llama.cpp-rate-$rate/results.json
            if [ -s "$c" ] && [ -s "$l" ]; then
                # throughput: cinfer / llama.cpp (higher is better); latencies: llama.cpp / cinfer (likewise)
                row="| $rate | ratio | | $(ratio "$(jnum "$c" request_throughput)" "$(jnum "$l" request_throughput)")×"
                row="$row | $(ratio "$(jnum "$c" output_throughput)" "$(jnum "$l" output_throughput)")×"
                for k in median_ttft_ms p99_ttft_ms median_tpot_ms p99_tpot_ms median_itl_ms p99_itl_ms \
                    median_e2el_ms p99_e2el_ms; do
                    row="$row | $(ratio "$(jnum "$l" $k)" "$(jnum "$c" $k)")×"
                done
                row="$row | $(ratio "$(mib "$RUNS/llama.cpp-rate-$rate.rss")" "$(mib "$RUNS/cinfer-rate-$rate.rss")")×"
                echo "$row |"
            fi
        fi
    done
} >"$TABLE"
NOTE="${NOTE_USER:+$NOTE_USER. }Model: \`cinfer synth --preset $PRESET --type $TYPE --seed 1\`. \
Workload: \`cinfer bench serve --dataset random -n $N --input-len $IN --output-len $OUTLEN --range-ratio $RANGE --seed 1\` \
(streaming /v1/completions, temperature 0, ignore_eos), Poisson arrivals at each rate, no client-side cap. \
Servers: $SLOTS sequences at once, $SLOT_CTX tokens of context each, $THREADS threads: \
\`cinfer serve -t $THREADS --max-seqs $SLOTS -c $SLOT_CTX --kv-blocks $((SLOTS * SLOT_CTX / 16))\` \
(continuous batching, chunked prefill, prefix cache, KV f16 (the default); binary $BIN, repository at run time ${tree:-?}) and \
\`llama-server -t $THREADS -tb $THREADS -np $SLOTS -c $CTX\` (llama.cpp ${LCOMMIT:-not run}, native CPU build; \
continuous batching, KV f16). Times in ms; peak RSS: the server process's VmHWM at the end of the rate's run. \
Ratio rows: throughput cinfer / llama.cpp, latencies and peak RSS llama.cpp / cinfer (above 1: cinfer better). Machine: ${cpu:-unknown CPU}. Load average (1/5/15 min) ${load0:-?} at the start, \
${load1:-?} at the end."
echo
echo "$NOTE"
echo
cat "$TABLE"

# ---- RESULTS.md: a dated block at the end of the "## Serving" section ----
if [ "$WRITE_RESULTS" -eq 1 ]; then
    results_append "$RESULTS" Serving "Measured by bench/serve.sh (see bench/serve.md); newest last." "$start" "$CMDLINE" "$NOTE" "$TABLE" "$RUNS/block.md" ||
        die "cannot update $RESULTS"
    echo "serve.sh: appended to $RESULTS" >&2
fi
exit 0
}
