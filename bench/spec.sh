#!/usr/bin/env bash
# bench/spec.sh — speculative decoding (issue 15 part 3): decode tokens/s with and without speculation, cinfer
# side by side with llama.cpp's llama-speculative-simple on the same files, greedy, the same n_predict, threads
# and longest draft.  Two cases:
#   (a) stories260K (a trained model) with n-gram / prompt lookup on a repeat workload (the MANIFEST's greedy
#       story paragraph, then its first sentence again): cinfer --spec ngram vs llama.cpp --spec-type ngram-simple
#   (b) an F16 smollm2-135m-shape target (cinfer synth --seed 1) with its own Q4_0 quantization as the draft
#       (cinfer quantize --pure): cinfer --spec draft vs llama.cpp --spec-type draft-simple -md.  Random weights
#       give flat logits that their own Q4_0 rarely agrees with; --residual-scale S (synth's, e.g. 0.02) writes
#       the target with attn_output and ffn_down scaled by S, so the embedding dominates the residual stream
#       and the Q4_0 draft is accepted as a trained model's would be (the files are named by S).
# Batch 1 (`cinfer run`, llama-speculative-simple; plain llama.cpp decode from llama-bench tg), repetitions
# interleaved (plain, speculative, plain, ...) and reported as medians, with acceptance and tokens per step.
# Then the crossover for (b): `cinfer bench --sweep batch` with speculation off and on at each batch size (R
# interleaved runs, medians); the crossover is the smallest batch size where speculation stops paying (on/off < 1).
# --spec-max-batch N adds a third run of each, speculation on with cinfer's --spec-max-batch N (no drafts in a
# step where more than N sequences decode), and its columns.
#
#   bench/spec.sh [-r R] [-n N] [-t T] [-k K] [--batches LIST] [--sweep-prompts N] [--sweep-output N]
#                 [--cases a,b] [--no-llamacpp] [--no-sweep] [--bin CINFER] [--files DIR] [--out DIR]
#                 [--stories FILE] [--llama-bin DIR] [--residual-scale S] [--spec-max-batch N]
# Defaults: -r 3, -n 64 (stories260K: 4 x N), -t 2 (stories260K: 1), -k 8, --batches 1,2,4,8,16,
# --sweep-prompts 16, --sweep-output 24, --files bench/out/spec-models (the generated GGUF files; outside git),
# --stories ../shared/models/stories260K.gguf (beside the repository), --out bench/out/spec.
# llama.cpp: the benchmark build of scripts/llamacpp-native.sh leaves LLAMA_BUILD_EXAMPLES off, so this script
# compiles examples/speculative-simple against that build's static libraries into OUT/llama/BUILD (one binary per
# build directory: with AMX or without, CINFER_LLAMACPP_NO_AMX=1; the build directory is only read).
# --llama-bin DIR uses a llama-speculative-simple and llama-bench already built there.
# Nothing is written to bench/RESULTS.md: paste the printed tables there with the machine and the load.
set -u
{
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
OUT=$ROOT/bench/out/spec
FILES=$ROOT/bench/out/spec-models
STORIES=$ROOT/../shared/models/stories260K.gguf
REPS=3
N=64
THREADS=2
K=8
BATCHES=1,2,4,8,16
SW_PROMPTS=16
SW_OUT=24
CASES=a,b
LLAMA=1
SWEEP=1
LBIN=""
RSCALE=1
MAXB=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() {
    echo "spec.sh: $*" >&2
    exit 1
}
need() { [ "$1" -ge 2 ] || die "$2 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
    -r | --reps) need $# "$1" && REPS=$2 && shift ;;
    -n) need $# "$1" && N=$2 && shift ;;
    -t | --threads) need $# "$1" && THREADS=$2 && shift ;;
    -k) need $# "$1" && K=$2 && shift ;;
    --batches) need $# "$1" && BATCHES=$2 && shift ;;
    --sweep-prompts) need $# "$1" && SW_PROMPTS=$2 && shift ;;
    --sweep-output) need $# "$1" && SW_OUT=$2 && shift ;;
    --cases) need $# "$1" && CASES=$2 && shift ;;
    --no-llamacpp) LLAMA=0 ;;
    --no-sweep) SWEEP=0 ;;
    --bin) need $# "$1" && BIN=$2 && shift ;;
    --files) need $# "$1" && FILES=$2 && shift ;;
    --out) need $# "$1" && OUT=$2 && shift ;;
    --stories) need $# "$1" && STORIES=$2 && shift ;;
    --llama-bin) need $# "$1" && LBIN=$2 && shift ;;
    --residual-scale) need $# "$1" && RSCALE=$2 && shift ;;
    --spec-max-batch) need $# "$1" && MAXB=$2 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) usage >&2 && exit 2 ;;
    esac
    shift
done
for v in "$REPS" "$N" "$THREADS" "$K" "$SW_PROMPTS" "$SW_OUT" ${MAXB:+"$MAXB"}; do
    case "$v" in '' | *[!0-9]* | 0) die "not a positive count: '$v'" ;; esac
done
case "$BATCHES" in '' | *[!0-9,]* | ,* | *, | *,,*) die "expected a list like 1,4,16, got '$BATCHES'" ;; esac
case "$CASES" in a | b | a,b | b,a) ;; *) die "--cases: a, b or a,b" ;; esac
[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, or --bin)"
mkdir -p "$OUT" "$FILES" || die "cannot create $OUT / $FILES"
RAW=$OUT/raw
mkdir -p "$RAW"

# median of the numbers on stdin ("-" when none)
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.4g\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }

# ---- files ----
case "$RSCALE" in '' | *[!0-9.]* | *.*.*) die "--residual-scale: a positive number, got '$RSCALE'" ;; esac
T=$FILES/smollm2-135m-f16-s1.gguf
[ "$RSCALE" = 1 ] || T=$FILES/smollm2-135m-f16-s1-rs$RSCALE.gguf
D=${T%.gguf}-q4_0.gguf
if echo "$CASES" | grep -q b; then
    [ -s "$T" ] || "$BIN" synth --preset smollm2-135m --type f16 --seed 1 --residual-scale "$RSCALE" -o "$T" >&2 ||
        die "synth failed"
    [ -s "$D" ] || "$BIN" quantize "$T" "$D" Q4_0 --pure -t "$THREADS" >&2 || die "quantize failed"
fi
if echo "$CASES" | grep -q a; then
    [ -s "$STORIES" ] || die "no stories260K at $STORIES (--stories FILE)"
fi

# ---- llama.cpp ----
LSPEC="" LBENCH=""
if [ "$LLAMA" -eq 1 ]; then
    if [ -n "$LBIN" ]; then
        LSPEC=$LBIN/llama-speculative-simple LBENCH=$LBIN/llama-bench
    else
        LDIR=$("$ROOT/scripts/llamacpp-native.sh") || die "no native llama.cpp (--no-llamacpp to run cinfer alone)"
        SRC=$(cd "$LDIR/../.." && pwd) BD=$(cd "$LDIR/.." && pwd)
        # one binary per llama.cpp build directory (with AMX or without: CINFER_LLAMACPP_NO_AMX=1)
        LOUT=$OUT/llama/$(basename "$BD")
        LBENCH=$LDIR/llama-bench LSPEC=$LOUT/llama-speculative-simple
        if [ ! -x "$LSPEC" ] || [ "$LSPEC" -ot "$BD/src/libllama.a" ]; then
            echo "spec.sh: compiling llama.cpp examples/speculative-simple against $BD ..." >&2
            mkdir -p "$LOUT"
            c++ -O3 -DNDEBUG -DGGML_USE_CPU -I"$SRC/common" -I"$SRC/vendor" -I"$SRC/include" -I"$SRC/ggml/include" \
                -o "$LSPEC" "$SRC/examples/speculative-simple/speculative-simple.cpp" "$BD/common/libllama-common.a" \
                "$BD/common/libllama-common-base.a" "$BD/vendor/cpp-httplib/libcpp-httplib.a" "$BD/src/libllama.a" \
                "$BD/ggml/src/libggml.a" "$BD/ggml/src/libggml-cpu.a" "$BD/ggml/src/libggml-base.a" -fopenmp -ldl \
                -lm -lpthread 2>"$LOUT/build.log" || die "compiling llama-speculative-simple failed (see $LOUT/build.log)"
        fi
    fi
    if [ ! -x "$LSPEC" ] || [ ! -x "$LBENCH" ]; then
        die "no llama-speculative-simple / llama-bench ($LSPEC, $LBENCH)"
    fi
fi

# cinfer_run TAG MODEL THREADS N PROMPT [spec options...]: one `cinfer run`, greedy; prints "tok/s accepted drafted
# tokens_per_step" (the last three "-" without speculation).  --pack eager: the F16 target is packed before the
# first token, as llama-speculative-simple's decode figure leaves its load out (run's default, lazy, packs it
# between the first and the second token, inside the decode time).
# shellcheck disable=SC2317 # called through row
cinfer_run() {
    local tag=$1 m=$2 thr=$3 n=$4 p=$5
    shift 5
    "$BIN" run -m "$m" -p "$p" -n "$n" --temp 0 --ignore-eos -t "$thr" --ids --pack eager "$@" \
        >"$RAW/$tag.out" 2>"$RAW/$tag.err" ||
        die "cinfer run failed (see $RAW/$tag.err)"
    local tps acc
    tps=$(sed -n 's/^ *TPS *\([0-9.]*\) tokens\/s.*/\1/p' "$RAW/$tag.err")
    acc=$(sed -n 's/^ *spec  *[a-z]*: \([0-9]*\) of \([0-9]*\) drafts accepted ([^)]*), \([0-9.]*\) tokens per step.*/\1 \2 \3/p' \
        "$RAW/$tag.err")
    echo "${tps:--} ${acc:-- - -}"
}
# llama_spec TAG MODEL THREADS N PROMPT [options...]: one llama-speculative-simple; prints "tok/s accepted drafted"
# shellcheck disable=SC2317 # called through row
llama_spec() {
    local tag=$1 m=$2 thr=$3 n=$4 p=$5
    shift 5
    "$LSPEC" -m "$m" -p "$p" -n "$n" --temp 0 --ignore-eos -t "$thr" -c 2048 "$@" >"$RAW/$tag.out" 2>"$RAW/$tag.err" ||
        die "llama-speculative-simple failed (see $RAW/$tag.err)"
    local tps dr ac
    tps=$(sed -n 's/.*decoded *[0-9]* tokens in *[0-9.]* seconds, speed: *\([0-9.]*\) t\/s.*/\1/p' "$RAW/$tag.err" | tail -1)
    dr=$(sed -n 's/.*n_drafted *= *\([0-9]*\).*/\1/p' "$RAW/$tag.err" | tail -1)
    ac=$(sed -n 's/.*n_accept *= *\([0-9]*\).*/\1/p' "$RAW/$tag.err" | tail -1)
    echo "${tps:--} ${ac:--} ${dr:--}"
}
# llama_plain TAG MODEL THREADS N: llama-bench tg N (one repetition); prints tok/s
# shellcheck disable=SC2317 # called through row
llama_plain() {
    "$LBENCH" -m "$2" -p 0 -n "$4" -t "$3" -r 1 -o csv >"$RAW/$1.out" 2>"$RAW/$1.err" ||
        die "llama-bench failed (see $RAW/$1.err)"
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
             { gsub(/"/, ""); if ($c["n_gen"] > 0) print $c["avg_ts"] }' "$RAW/$1.out" | tail -1
}

# row ROWS LABEL FUNCTION ARGS...: appends "LABEL output" of one measurement to ROWS.  A die inside the command
# substitution only ends that subshell: stop the script here instead of recording an empty figure.
row() {
    local rows=$1 label=$2 got
    shift 2
    got=$("$@") || exit 1
    echo "$label $got" >>"$rows"
}

# batch1 CASE MODEL THREADS N PROMPT "CINFER SPEC OPTIONS" "LLAMA SPEC OPTIONS": the interleaved repetitions
batch1() {
    local c=$1 m=$2 thr=$3 n=$4 p=$5 copt=$6 lopt=$7 r rows="$RAW/$1.rows"
    : >"$rows"
    for r in $(seq 1 "$REPS"); do
        echo "spec.sh: ($c) repetition $r of $REPS ..." >&2
        # shellcheck disable=SC2086 # the option strings are word lists
        row "$rows" cinfer_plain cinfer_run "$c-cp-$r" "$m" "$thr" "$n" "$p"
        # shellcheck disable=SC2086
        row "$rows" cinfer_spec cinfer_run "$c-cs-$r" "$m" "$thr" "$n" "$p" $copt
        if [ "$LLAMA" -eq 1 ]; then
            row "$rows" llama_plain llama_plain "$c-lp-$r" "$m" "$thr" "$n"
            # shellcheck disable=SC2086
            row "$rows" llama_spec llama_spec "$c-ls-$r" "$m" "$thr" "$n" "$p" $lopt
        fi
    done
    local cp cs lp ls
    cp=$(awk '$1 == "cinfer_plain" { print $2 }' "$RAW/$c.rows" | median)
    cs=$(awk '$1 == "cinfer_spec" { print $2 }' "$RAW/$c.rows" | median)
    lp=$(awk '$1 == "llama_plain" { print $2 }' "$RAW/$c.rows" | median)
    ls=$(awk '$1 == "llama_spec" { print $2 }' "$RAW/$c.rows" | median)
    # acceptance and tokens per step are the same in every greedy repetition: the first one's
    local cacc lacc
    cacc=$(awk '$1 == "cinfer_spec" { if ($4 > 0) printf "%d of %d (%.1f%%), %.2f tokens/step", $3, $4, 100 * $3 / $4, $5; else print "no drafts"; exit }' "$RAW/$c.rows")
    lacc=$(awk '$1 == "llama_spec" { if ($4 > 0) printf "%d of %d (%.1f%%)", $3, $4, 100 * $3 / $4; else print "no drafts"; exit }' "$RAW/$c.rows")
    echo
    echo "| ($c) batch 1, greedy, $n tokens, -t $thr, $REPS interleaved runs (median) | plain tok/s | speculative tok/s | speed-up | drafts accepted |"
    echo "|---|---:|---:|---:|---|"
    echo "| cinfer | $cp | $cs | $(ratio "$cs" "$cp") | $cacc |"
    [ "$LLAMA" -eq 1 ] && echo "| llama.cpp (llama-bench tg / llama-speculative-simple) | $lp | $ls | $(ratio "$ls" "$lp") | $lacc |"
    [ "$LLAMA" -eq 1 ] && echo "| cinfer / llama.cpp | $(ratio "$cp" "$lp") | $(ratio "$cs" "$ls") | | |"
}

echo "spec.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cinfer $BIN ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)); llama.cpp: ${LSPEC:-not run}"
echo "case (b) files: target $(basename "$T"), draft $(basename "$D") (synth --residual-scale $RSCALE)"

if echo "$CASES" | grep -q a; then
    PA="Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. Once upon a time, there was a little girl named Lily."
    batch1 a "$STORIES" 1 $((4 * N)) "$PA" "--spec ngram --spec-k $K" "--spec-type ngram-simple --spec-draft-n-max $K"
fi
if echo "$CASES" | grep -q b; then
    batch1 b "$T" "$THREADS" "$N" "Hello world" "--spec draft --draft-model $D --spec-k $K" \
        "--spec-type draft-simple -md $D --spec-draft-n-max $K --spec-draft-n-min 0 -td $THREADS"
    if [ "$SWEEP" -eq 1 ]; then
        echo "spec.sh: (b) crossover: cinfer bench --sweep batch --batch-sizes $BATCHES, speculation off and on ..." >&2
        rm -rf "$RAW"/sweep-*
        modes="off on"
        [ -n "$MAXB" ] && modes="off on cap" # cap: speculation on with --spec-max-batch
        for r in $(seq 1 "$REPS"); do # interleaved: off, on, off, on, ...
            for mode in $modes; do
                echo "spec.sh: (b) sweep, speculation $mode, repetition $r of $REPS ..." >&2
                opt=""
                [ "$mode" != off ] && opt="--spec draft --draft-model $D --spec-k $K"
                [ "$mode" = cap ] && opt="$opt --spec-max-batch $MAXB"
                # shellcheck disable=SC2086
                "$BIN" bench -m "$T" --sweep batch --batch-sizes "$BATCHES" -n "$SW_PROMPTS" --input-len 16 \
                    --output-len "$SW_OUT" --range-ratio 0 -t "$THREADS" -q --no-plots -o "$RAW/sweep-$mode-$r" $opt \
                    >"$RAW/sweep-$mode-$r.txt" 2>&1 || die "cinfer bench failed (see $RAW/sweep-$mode-$r.txt)"
            done
        done
        echo
        head="| (b) cinfer bench --sweep batch, $SW_PROMPTS prompts of 16 tokens, $SW_OUT output tokens, $REPS interleaved runs (median) | output tok/s, spec off | spec on | on/off |"
        if [ -n "$MAXB" ]; then
            echo "$head spec on, --spec-max-batch $MAXB | that/off |"
            echo "|---:|---:|---:|---:|---:|---:|"
        else
            echo "$head"
            echo "|---:|---:|---:|---:|"
        fi
        cross=""
        first=${BATCHES%%,*}
        for b in $(echo "$BATCHES" | tr ',' ' '); do
            get() { # the median over the repetitions of output_tok_s at batch size b
                for f in "$RAW"/sweep-"$1"-*/summary.csv; do
                    awk -F, -v l="bs$b" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $1 == l { print $c["output_tok_s"] }' "$f"
                done | median
            }
            off=$(get off) on=$(get on)
            r=$(ratio "$on" "$off")
            if [ -n "$MAXB" ]; then
                cap=$(get cap)
                echo "| batch $b | $off | $on | $r | $cap | $(ratio "$cap" "$off") |"
            else
                echo "| batch $b | $off | $on | $r |"
            fi
            [ -z "$cross" ] && [ "$r" != "-" ] && awk -v r="$r" 'BEGIN { exit !(r < 1) }' && cross=$b
        done
        grep "speculative draft" "$RAW/sweep-on-1.txt" | head -1 | sed 's/^/  (acceptance, first batch size) /'
        if [ -z "$cross" ]; then
            echo "crossover: speculation pays at every batch size tried (up to ${BATCHES##*,})"
        elif [ "$cross" = "$first" ]; then
            echo "crossover: speculation does not pay even at batch $first"
        else
            echo "crossover (smallest batch size where speculation stops paying): $cross"
        fi
    fi
fi
exit 0
}
