#!/usr/bin/env bash
# bench/soak.sh — soak test of `cinfer serve` (bench/soak.py; not in the timed CI path, whose short version is
# tests/server/test_soak.py).  M minutes of N concurrent clients with random requests (completions and chat,
# streaming or not, random sampling parameters, mid-stream disconnects, invalid requests, deterministic
# requests compared with their answers on the idle server) against a server whose KV pool is small enough to
# force preemption.  Prints a summary table and exits non-zero when any check failed.  Unless --no-results
# (or --ci), appends the command, date, CPU model, load average and the table to bench/RESULTS.md under
# "## Soak", failed or not.
#
#   bench/soak.sh [--minutes M] [--clients N] [--binary PATH] [--model FILE] [--seed S] [--out DIR]
#                 [--ci] [--no-results] [--note TEXT] [-- SOAK.PY OPTIONS]
# Defaults: --minutes 10 --clients 48, the ASan build (build/asan/cinfer, `make VARIANT=asan`) when present,
# else build/release/cinfer, stories260K.gguf from $CINFER_MODELS or ../shared/models, --seed 1,
# --out bench/out/soak-<time>.  --ci: 45 seconds, 16 clients, no results.  Options after -- go to soak.py
# (python3 bench/soak.py --help: --kv-blocks, --max-seqs, --max-requests, --rss-growth-mb, the mix, ...).
set -u
{
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/results_append.sh"
RESULTS=$ROOT/bench/RESULTS.md
MINUTES=10
CLIENTS=48
BIN=""
MODEL=""
SEED=1
OUT=""
WRITE_RESULTS=1
NOTE_USER=""
EXTRA=()
CMDLINE="bench/soak.sh $*"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() {
    echo "soak.sh: $*" >&2
    exit 2
}
need() { [ "$1" -ge 2 ] || die "$2 needs a value"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) need $# "$1" && MINUTES=$2 && shift ;;
    --clients) need $# "$1" && CLIENTS=$2 && shift ;;
    --binary) need $# "$1" && BIN=$2 && shift ;;
    --model) need $# "$1" && MODEL=$2 && shift ;;
    --seed) need $# "$1" && SEED=$2 && shift ;;
    --out) need $# "$1" && OUT=$2 && shift ;;
    --ci) MINUTES=0.75 && CLIENTS=16 && WRITE_RESULTS=0 ;;
    --no-results) WRITE_RESULTS=0 ;;
    --note) need $# "$1" && NOTE_USER=$2 && shift ;;
    --) shift && EXTRA=("$@") && break ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
    esac
    shift
done
case "$MINUTES" in '' | *[!0-9.]* | .) die "not a number of minutes: '$MINUTES'" ;; esac
case "$CLIENTS" in '' | *[!0-9]* | 0) die "not a positive count: '$CLIENTS'" ;; esac
case "$SEED" in '' | *[!0-9]*) die "not a seed: '$SEED'" ;; esac
if [ -z "$BIN" ]; then
    BIN=$ROOT/build/release/cinfer
    [ -x "$ROOT/build/asan/cinfer" ] && BIN=$ROOT/build/asan/cinfer
fi
[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, make VARIANT=asan, or --binary)"
MODELS=${CINFER_MODELS:-$ROOT/../shared/models}
[ -n "$MODEL" ] || MODEL=$MODELS/stories260K.gguf
[ -f "$MODEL" ] || die "no model at $MODEL"
[ -n "$OUT" ] || OUT=$ROOT/bench/out/soak-$(date -u +%Y%m%d-%H%M%S)
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
mkdir -p "$OUT" || die "cannot create $OUT"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

start=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
"$PY" "$ROOT/bench/soak.py" --minutes "$MINUTES" --clients "$CLIENTS" --binary "$BIN" --model "$MODEL" \
    --seed "$SEED" --out "$OUT" "${EXTRA[@]}"
rc=$?
load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)

if [ "$WRITE_RESULTS" -eq 1 ] && [ -s "$OUT/summary.md" ]; then
    tree=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)
    [ -n "$tree" ] && ! git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null && tree="$tree + uncommitted src/ changes"
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
    ncpu=$(nproc 2>/dev/null)
    kind=release
    asan_note=""
    case "$BIN" in */asan/*)
        kind="ASan+UBSan, make VARIANT=asan"
        asan_note=" ASAN_OPTIONS ${ASAN_OPTIONS:-"detect_leaks=1:quarantine_size_mb=16 (the default of soak.py)"}."
        ;;
    esac
    NOTE="${NOTE_USER:+$NOTE_USER. }Binary: ${BIN#"$ROOT"/} ($kind), repository at run time ${tree:-unknown}; \
model $(basename "$MODEL"). Machine: $cpu, $ncpu CPUs (lscpu). Load average (1/5/15 min) $load0 at the start, \
$load1 at the end.$asan_note Exit status $rc. Files: ${OUT#"$ROOT"/}."
    results_append "$RESULTS" Soak "Measured by bench/soak.sh (see bench/README.md); newest last." "$start" \
        "$CMDLINE" "$NOTE" "$OUT/summary.md" "$OUT/block.md" || die "cannot update $RESULTS"
    echo "soak.sh: appended to $RESULTS" >&2
fi
exit $rc
}
