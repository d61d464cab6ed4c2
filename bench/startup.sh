#!/usr/bin/env bash
# bench/startup.sh — peak resident memory and time from process start to the first generated token, cinfer
# vs llama.cpp, on the same synthetic GGUF (cinfer synth, fixed seed) with the same prompt and threads.
#   cinfer run     -m M -p PROMPT -n 1 -t T -c CTX [--max-seqs S]
#   llama-simple   -m M -n 1 PROMPT           (llama.cpp's minimal example: context = prompt + n, f16 KV)
#   or, without llama-simple, the proxy  llama-bench -m M -p N_PROMPT -n 0 -r 1 -t T --no-warmup  (load and one
#   prefill of the same length, no token sampled)
# Each run is a fresh process, measured from outside (Python: wall clock from spawn to exit, and the child's
# own peak RSS from wait4): "to first token" is the whole run with -n 1 (load, prefill, one token, exit).
# "cold": the model file is first dropped from the page cache (posix_fadvise DONTNEED: no root needed, it only
# works for pages nobody else maps), so the weights come from disk; "warm": the file stays cached.  The median
# of REPS runs is printed per engine and mode, with the fastest and slowest run and the median system CPU time
# (wait4's ru_stime: page faults, zeroing new memory; on a VM that hands freed memory back to its host, the
# first touch of fresh memory can cost seconds of it).
#
#   bench/startup.sh [--preset NAME] [--type T] [--seed S] [-t N] [-c CTX] [--max-seqs S] [--prompt-words W]
#                    [-r REPS] [--bin CINFER] [--llama-bin DIR] [--out DIR]
# Defaults: smollm2-135m, q8_0, seed 1, -t 2, -c 2048, --max-seqs 64 (cinfer's default), 100 prompt words,
# 5 repetitions; llama.cpp binaries from $LLAMA_BIN or ~/.cache/cinfer/llama.cpp/build-cinfer/bin (built by
# scripts/llamacpp-native.sh; this script builds nothing).  Without llama-simple or llama-bench only cinfer
# is measured.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
LDIR=${LLAMA_BIN:-$HOME/.cache/cinfer/llama.cpp/build-cinfer/bin}
OUT=$ROOT/bench/out
PRESET=smollm2-135m
TYPE=q8_0
SEED=1
THREADS=2
CTX=2048
SEQS=64
WORDS=100
REPS=5
die() {
    echo "startup.sh: $*" >&2
    exit 1
}
while [ $# -gt 0 ]; do
    case $1 in
    --preset) PRESET=$2 && shift ;;
    --type) TYPE=$2 && shift ;;
    --seed) SEED=$2 && shift ;;
    -t) THREADS=$2 && shift ;;
    -c) CTX=$2 && shift ;;
    --max-seqs) SEQS=$2 && shift ;;
    --prompt-words) WORDS=$2 && shift ;;
    -r) REPS=$2 && shift ;;
    --bin) BIN=$2 && shift ;;
    --llama-bin) LDIR=$2 && shift ;;
    --out) OUT=$2 && shift ;;
    -h | --help)
        sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, or --bin)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
mkdir -p "$OUT" || die "cannot create $OUT"
MODEL=$OUT/startup-$PRESET-$TYPE-s$SEED.gguf
if [ ! -s "$MODEL" ]; then
    "$BIN" synth --preset "$PRESET" --type "$TYPE" --seed "$SEED" -o "$MODEL" >/dev/null ||
        die "cinfer synth --preset $PRESET --type $TYPE failed"
fi
# A fixed prompt: one sentence over and over, about WORDS words (both engines tokenize it with the file's
# vocabulary).
PROMPT=$(yes 'the quick brown fox jumps over the lazy dog.' | head -n $((WORDS / 9 + 1)) | tr '\n' ' ')
LS=$LDIR/llama-simple
LB=$LDIR/llama-bench
HAVE_LLAMA=1
LNAME=llama.cpp
if [ ! -x "$LS" ]; then
    if [ -x "$LB" ]; then
        echo "startup.sh: no $LS: llama-bench as the proxy (load + prefill, no token)" >&2
        LNAME="llama.cpp (llama-bench proxy)"
    else
        echo "startup.sh: no $LS nor $LB: measuring cinfer only" >&2
        HAVE_LLAMA=0
    fi
fi

# measure MODE CMD...: prints "wall_s peak_rss_kib" of one fresh run (MODE cold: evict MODEL first).
measure() {
    "$PY" - "$MODEL" "$@" <<'EOF'
import os, subprocess, sys, time
model, mode, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
if mode == "cold":
    fd = os.open(model, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, ru = os.wait4(p.pid, 0)
wall = time.monotonic() - t0
if status != 0:
    sys.exit("exit status %d: %s" % (status, " ".join(cmd)))
print("%.4f %d %.4f" % (wall, ru.ru_maxrss, ru.ru_stime))
EOF
}

# median of the first column / of the second column over REPS runs of MODE CMD...
run_reps() {
    local mode=$1
    shift
    local f
    f=$(mktemp)
    for _ in $(seq 1 "$REPS"); do
        measure "$mode" "$@" >>"$f" || {
            rm -f "$f"
            return 1
        }
    done
    sort -n -k1 "$f" | awk '{ w[NR] = $1 } END { printf "%.3f %.3f-%.3f ", w[int((NR + 1) / 2)], w[1], w[NR] }'
    sort -n -k3 "$f" | awk '{ k[NR] = $3 } END { printf "%.3f ", k[int((NR + 1) / 2)] }'
    sort -n -k2 "$f" | awk '{ r[NR] = $2 } END { printf "%.1f\n", r[int((NR + 1) / 2)] / 1024 }'
    rm -f "$f"
}

CIN=("$BIN" run -m "$MODEL" -p "$PROMPT" -n 1 -t "$THREADS" -c "$CTX" --max-seqs "$SEQS" --temp 0)
n_prompt=$("$BIN" tokenize -m "$MODEL" "$PROMPT" 2>/dev/null | wc -w)
if [ -x "$LS" ]; then
    LLA=("$LS" -m "$MODEL" -n 1 "$PROMPT")
else
    LLA=("$LB" -m "$MODEL" -p "$n_prompt" -n 0 -r 1 -t "$THREADS" --no-warmup)
fi
pool=$("${CIN[@]}" 2>&1 >/dev/null | grep -m1 'KV pool' | sed 's/^cinfer run: //')
echo "model $PRESET $TYPE (cinfer synth seed $SEED), prompt ${n_prompt:-?} tokens, $THREADS threads, $REPS runs each (median)"
echo "cinfer: -c $CTX --max-seqs $SEQS; $pool"
[ "$HAVE_LLAMA" -eq 1 ] && echo "llama.cpp $(cut -c1-12 "$LDIR/../.cinfer-commit" 2>/dev/null): $(basename "${LLA[0]}") ${LLA[*]:3} (f16 KV)"
printf '| engine | cache | to first token (s) | min-max (s) | system CPU (s) | peak RSS (MiB) |\n'
printf '|---|---|---:|---:|---:|---:|\n'
for mode in cold warm; do
    r=$(run_reps "$mode" "${CIN[@]}") || die "cinfer run failed"
    set -- $r
    printf '| cinfer | %s | %s | %s | %s | %s |\n' "$mode" "$1" "$2" "$3" "$4"
    if [ "$HAVE_LLAMA" -eq 1 ]; then
        r=$(run_reps "$mode" "${LLA[@]}") || die "llama-simple failed"
        set -- $r
        printf '| %s | %s | %s | %s | %s | %s |\n' "$LNAME" "$mode" "$1" "$2" "$3" "$4"
    fi
done
