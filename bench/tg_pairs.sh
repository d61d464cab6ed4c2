#!/usr/bin/env bash
# bench/tg_pairs.sh — single-sequence decode (llama-bench's tg) of cinfer and native llama.cpp, alternated run by
# run on the same GGUF files.  kernels.sh runs each engine's repetitions back to back, so on a machine whose
# memory speed moves between minutes (bench/RESULTS.md: the Zen 4 VM's plain read swung between 31 and 47 GB/s)
# one engine may get the fast minutes and the other the slow ones; alternating one run of each, N times, gives
# both the same machine, and the median of the per-pair ratios says which engine is ahead.
#
#   bench/tg_pairs.sh [--models LIST] [--types LIST] [--pairs N] [-n TG] [-t T] [--bin CINFER]
#
# Defaults: models tinyllama-1.1b; types q4_k_m; 4 pairs; -n 128; -t 2.  Files are kernels.sh's
# (models/kernels/MODEL-TYPE.gguf, made by `cinfer synth --seed 1` when missing); llama-bench comes from
# scripts/llamacpp-native.sh.  Each pair is `cinfer bench kernels -m F -t T -p 0 -n TG -r 1 --batch 0` and
# `llama-bench -m F -t T -p 0 -n TG -r 1`, each after its own warm-up run.  Prints one markdown row per file: the
# tokens/s of each run, both medians, the ratio of the medians and the median and range of the per-pair ratios.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
MODELS=tinyllama-1.1b
TYPES=q4_k_m
PAIRS=4
TG=128
THREADS=2
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() {
    echo "tg_pairs.sh: $*" >&2
    exit 1
}
need() { [ "$1" -ge 2 ] || die "$2 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --models) need $# "$1" && MODELS=$2 && shift ;;
    --types) need $# "$1" && TYPES=$2 && shift ;;
    --pairs) need $# "$1" && PAIRS=$2 && shift ;;
    -n) need $# "$1" && TG=$2 && shift ;;
    -t | --threads) need $# "$1" && THREADS=$2 && shift ;;
    --bin) need $# "$1" && BIN=$2 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
    esac
    shift
done
for v in "$PAIRS" "$TG" "$THREADS"; do
    case "$v" in '' | *[!0-9]* | 0) die "not a positive count: '$v'" ;; esac
done
for l in "$MODELS" "$TYPES"; do
    case "$l" in '' | *[!A-Za-z0-9._,-]* | ,* | *, | *,,*) die "expected a list like a,b, got '$l'" ;; esac
done
[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, or --bin)"
LDIR=$("$ROOT/scripts/llamacpp-native.sh") || die "no native llama.cpp (scripts/llamacpp-native.sh failed)"
LB=$LDIR/llama-bench
[ -x "$LB" ] || die "no llama-bench in $LDIR"
mkdir -p "$ROOT/models/kernels" || die "cannot create models/kernels"

# The tokens/s of the tg line of a cinfer bench kernels / llama-bench JSONL output on stdin.
cinfer_ts() { grep '"type": "tg"' | sed -n 's/.*"avg_ts": *\([0-9.eE+-]*\).*/\1/p' | head -1; }
llama_ts() { sed -n 's/.*"avg_ts": *\([0-9.eE+-]*\).*/\1/p' | head -1; }

echo "| file | cinfer tg$TG t/s | llama.cpp tg$TG t/s | medians | ratio of medians | per-pair ratio: median (range) |"
echo "|---|---|---|---|---:|---|"
for model in $(echo "$MODELS" | tr ',' ' '); do
    for type in $(echo "$TYPES" | tr ',' ' '); do
        f=$ROOT/models/kernels/$model-$type.gguf
        if [ ! -s "$f" ]; then
            echo "tg_pairs.sh: synth $model $type -> $f" >&2
            "$BIN" synth --preset "$model" --type "$type" --seed 1 -o "$f" >&2 || die "synth $model $type failed"
        fi
        c="" l=""
        for i in $(seq 1 "$PAIRS"); do
            echo "tg_pairs.sh: [$model-$type] pair $i of $PAIRS ..." >&2
            # Fixed roofline inputs: the tokens/s is all that is read, and measuring the machine every run
            # would take longer than the run.
            x=$("$BIN" bench kernels -m "$f" -t "$THREADS" -p 0 -n "$TG" -r 1 --batch 0 --bandwidth-gbs 1 \
                --peak-gflops 1 --int8-peak-gops 1 --json 2>/dev/null | cinfer_ts)
            y=$("$LB" -m "$f" -t "$THREADS" -p 0 -n "$TG" -r 1 -o jsonl 2>/dev/null | llama_ts)
            [ -n "$x" ] || die "cinfer bench kernels failed on $f"
            [ -n "$y" ] || die "llama-bench failed on $f"
            c="$c $x" l="$l $y"
        done
        awk -v name="$model $type" -v c="$c" -v l="$l" '
            function median(a, n,    i, j, t) {
                for (i = 2; i <= n; i++)
                    for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            function list(a, n,    i, s) {
                for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") sprintf("%.1f", a[i])
                return s
            }
            BEGIN {
                n = split(c, x, " "); split(l, y, " ")
                lo = hi = x[1] / y[1]
                for (i = 1; i <= n; i++) {
                    r[i] = x[i] / y[i]
                    if (r[i] < lo) lo = r[i]
                    if (r[i] > hi) hi = r[i]
                }
                cs = list(x, n); ls = list(y, n)
                mc = median(x, n); ml = median(y, n)
                printf "| %s | %s | %s | %.2f / %.2f | %.2f | %.2f (%.2f-%.2f) |\n", name, cs, ls, mc, ml, mc / ml,
                    median(r, n), lo, hi
            }'
    done
done
