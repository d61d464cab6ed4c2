#!/usr/bin/env bash
# bench/kernels.sh — cinfer's forward pass side by side with native llama.cpp, on the same GGUF files and
# the same thread count, in one run.  For each synthetic model (cinfer synth, seed 1, under models/kernels/)
# and each thread count T:
#   cinfer bench kernels   pp, tg (llama-bench's definitions) and batched decode (llama-batched-bench's S_TG),
#                          with the machine's bandwidth, f32 FMA peak and int8 dot-product peak measured in the
#                          same process on T threads
#   llama-bench            -m M -p PP -n TG -t T -r R -o jsonl
#   llama-batched-bench    -m M -c B_max*(BPP+BTG) -b 2048 -ub 512 -npp BPP -ntg BTG -npl B,... -t T
# then prints one table with both engines and the ratio cinfer/llama.cpp per metric, appends it (with the exact
# command and date) to bench/RESULTS.md under "## Kernels", and plots decode tokens/s against the number of
# parallel sequences (OUT/kernels.png, gnuplot).  llama.cpp is built once by scripts/llamacpp-native.sh, outside
# the repository.  Notes and caveats: bench/KERNELS.md.
#
#   bench/kernels.sh [--quick] [--models LIST] [--types LIST] [-t LIST] [-r R] [--batch LIST] [-p N] [-n N]
#                    [--batch-pp N] [--batch-tg N] [-d D] [--no-llamacpp] [--no-results] [--bin CINFER] [--out DIR]
#                    [--note TEXT]   (TEXT goes into the RESULTS.md entry, e.g. which cinfer build ran)
# Defaults: models smollm2-135m,tinyllama-1.1b; types f32,f16,q8_0,q4_0; -t 2; -r 5; --batch 1,4,16; -p 512
# -n 128; --batch-pp 128 --batch-tg 128; --out bench/out.  --quick: smollm2-135m q8_0 only, 3 repetitions
# (a few minutes on 2 idle cores).  -t 1,2 runs every model at both thread counts.  -d D: pp and tg after D
# tokens of context (llama-bench -d; cinfer bench kernels --depth); batched decode then runs only when --batch is
# given (llama-batched-bench has no depth: its S_TG stays at depth BPP).
# A CPU without AVX-512, approximated on one that has it: CINFER_NO_AVX512=1 CINFER_LLAMACPP_AVX2=1
# bench/kernels.sh ... runs cinfer's AVX2 kernels against llama.cpp built for AVX2 (scripts/llamacpp-native.sh).
set -u
# The whole script is one compound command, read before it runs: editing the file during a run is safe.
{
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/results_append.sh"
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
OUT=$ROOT/bench/out
RESULTS=$ROOT/bench/RESULTS.md
MODELS="smollm2-135m,tinyllama-1.1b"
TYPES="f32,f16,q8_0,q4_0"
THREADS=2
REPS=5
BATCH="1,4,16"
PP=512
TG=128
BPP=128
BTG=128
DEPTH=0
BATCH_SET=0
LLAMA=1
WRITE_RESULTS=1
REPS_SET=0
NOTE_USER=""
CMDLINE="bench/kernels.sh $*"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() {
    echo "kernels.sh: $*" >&2
    exit 1
}
need() { [ "$1" -ge 2 ] || die "$2 needs a value"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) MODELS=smollm2-135m TYPES=q8_0 && [ "$REPS_SET" -eq 1 ] || REPS=3 ;;
    --models) need $# "$1" && MODELS=$2 && shift ;;
    --types) need $# "$1" && TYPES=$2 && shift ;;
    -t | --threads) need $# "$1" && THREADS=$2 && shift ;;
    -r | --reps) need $# "$1" && REPS=$2 REPS_SET=1 && shift ;;
    --batch) need $# "$1" && BATCH=$2 BATCH_SET=1 && shift ;;
    -d | --depth) need $# "$1" && DEPTH=$2 && shift ;;
    -p) need $# "$1" && PP=$2 && shift ;;
    -n) need $# "$1" && TG=$2 && shift ;;
    --batch-pp) need $# "$1" && BPP=$2 && shift ;;
    --batch-tg) need $# "$1" && BTG=$2 && shift ;;
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
for v in "$REPS" "$PP" "$TG" "$BPP" "$BTG" "$DEPTH"; do
    case "$v" in '' | *[!0-9]*) die "not a count: '$v'" ;; esac
done
for l in "$BATCH" "$THREADS"; do
    case "$l" in '' | *[!0-9,]* | ,* | *, | *,,*) die "expected a list like 1,4,16, got '$l'" ;; esac
done
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
[ "$DEPTH" -gt 0 ] && [ "$BATCH_SET" -eq 0 ] && BATCH=0

[ -x "$BIN" ] || die "no cinfer binary at $BIN (make, or --bin)"
"$BIN" bench kernels --help >/dev/null 2>&1 || die "$BIN has no 'bench kernels' command"
RAW=$OUT/kernels-raw
mkdir -p "$RAW" "$ROOT/models/kernels" || die "cannot create $RAW"

LCOMMIT=""
if [ "$LLAMA" -eq 1 ]; then
    echo "kernels.sh: llama.cpp (scripts/llamacpp-native.sh; the first build takes a while) ..." >&2
    LDIR=$("$ROOT/scripts/llamacpp-native.sh") || die "no native llama.cpp (use --no-llamacpp to run cinfer alone)"
    LB=$LDIR/llama-bench
    LBB=$LDIR/llama-batched-bench
    LCOMMIT=$(cut -c1-12 "$LDIR/../.cinfer-commit" 2>/dev/null)
fi

# jget KEY: the scalar value of "KEY" in the one-line JSON object on stdin (strings without their quotes).
jget() { sed -n 's/.*"'"$1"'": *\("[^"]*"\|[-+0-9.eE]*\).*/\1/p' | head -1 | tr -d '"'; }
# jtype FILE TYPE: the lines of a cinfer JSONL file whose "type" is TYPE.
jtype() { grep "\"type\": \"$2\"" "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.1f%%", 100 * a / b }'; }
num() { awk -v a="$1" 'BEGIN { if (a == "") print "-"; else printf "%.2f", a }'; }

max_b=$(echo "$BATCH" | tr ',' '\n' | sort -n | tail -1)
CTX=$((max_b * (BPP + BTG)))
ROWS=$RAW/rows.txt # ';'-separated: model, type, threads, test, cinfer t/s, sd, llama.cpp t/s, sd, roofline t/s
PLOT=$OUT/kernels.dat
HWS=$RAW/hw.txt # one line per thread count: T, bandwidth, f32 peak, 256-bit f32 peak, int8 peak
: >"$ROWS"
: >"$PLOT"
: >"$HWS"
start=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
ISA=""
TUNE=""

for model in $(echo "$MODELS" | tr ',' ' '); do
    for type in $(echo "$TYPES" | tr ',' ' '); do
        f=$ROOT/models/kernels/$model-$type.gguf
        if [ ! -s "$f" ]; then
            echo "kernels.sh: synth $model $type -> $f" >&2
            "$BIN" synth --preset "$model" --type "$type" --seed 1 -o "$f" >&2 || die "synth $model $type failed"
        fi
        for thr in $(echo "$THREADS" | tr ',' ' '); do
            tag=$model-$type-t$thr
            echo "kernels.sh: [$tag] cinfer bench kernels ..." >&2
            "$BIN" bench kernels -m "$f" -t "$thr" -p "$PP" -n "$TG" -d "$DEPTH" -r "$REPS" --batch "$BATCH" \
                --batch-pp "$BPP" --batch-tg "$BTG" --json >"$RAW/cinfer-$tag.jsonl" 2>"$RAW/cinfer-$tag.log" ||
                die "cinfer bench kernels failed on $f (see $RAW/cinfer-$tag.log)"
            hw=$(jtype "$RAW/cinfer-$tag.jsonl" hw)
            ISA=$(echo "$hw" | jget kernels_isa)
            widen=$(echo "$hw" | jget f16_widen_min_tokens)
            [ "$widen" = 2147483647 ] && widen=never || widen="above $widen tokens"
            TUNE="kernel tuning for $(echo "$hw" | jget cpu): F16/BF16 widened to F32 $widen, decode prefetches"
            TUNE="$TUNE into $(echo "$hw" | jget decode_prefetch | tr l L)"
            echo "$thr;$(echo "$hw" | jget bw_gbs);$(echo "$hw" | jget peak_gflops);$(echo "$hw" | jget fma_gflops);$(echo "$hw" | jget int8_peak_gops)" \
                >>"$HWS"
            : >"$RAW/llama-bench-$tag.jsonl"
            : >"$RAW/llama-batched-$tag.jsonl"
            if [ "$LLAMA" -eq 1 ]; then
                echo "kernels.sh: [$tag] llama-bench ..." >&2
                "$LB" -m "$f" -p "$PP" -n "$TG" -d "$DEPTH" -t "$thr" -r "$REPS" -o jsonl >"$RAW/llama-bench-$tag.jsonl" \
                    2>"$RAW/llama-bench-$tag.log" || echo "kernels.sh: llama-bench failed on $f (see its log)" >&2
                if [ "$BATCH" != 0 ]; then
                    echo "kernels.sh: [$tag] llama-batched-bench ..." >&2
                    "$LBB" -m "$f" -c "$CTX" -b 2048 -ub 512 -npp "$BPP" -ntg "$BTG" -npl "$BATCH" -t "$thr" \
                        --output-format jsonl >"$RAW/llama-batched-$tag.out" 2>&1 ||
                        echo "kernels.sh: llama-batched-bench failed on $f (see $RAW/llama-batched-$tag.out)" >&2
                    grep '^{"n_kv_max"' "$RAW/llama-batched-$tag.out" >"$RAW/llama-batched-$tag.jsonl"
                fi
            fi

            for kind in pp tg; do
                line=$(jtype "$RAW/cinfer-$tag.jsonl" $kind)
                [ -n "$line" ] || continue
                if [ $kind = pp ]; then key="\"n_prompt\": $PP, \"n_gen\": 0,"; else key="\"n_prompt\": 0, \"n_gen\": $TG,"; fi
                lline=$(grep -F "$key" "$RAW/llama-bench-$tag.jsonl" | head -1)
                printf '%s;%s;%s;%s;%s;%s;%s;%s;%s\n' "$model" "$type" "$thr" "$(echo "$line" | jget test)" \
                    "$(echo "$line" | jget avg_ts)" "$(echo "$line" | jget stddev_ts)" \
                    "$(echo "$lline" | jget avg_ts)" "$(echo "$lline" | jget stddev_ts)" \
                    "$(echo "$line" | jget roofline_ts)" >>"$ROWS"
            done
            # batched: S_PP and S_TG per B; the plot gets S_TG of both engines and cinfer's roofline
            cser="" lser="" rser=""
            for b in $(echo "$BATCH" | tr ',' ' '); do
                [ "$b" -gt 0 ] || continue
                line=$(jtype "$RAW/cinfer-$tag.jsonl" batched | grep "\"pl\": $b,")
                lline=$(grep "\"pl\": $b," "$RAW/llama-batched-$tag.jsonl" | head -1)
                cs=$(echo "$line" | jget speed_tg) ls=$(echo "$lline" | jget speed_tg)
                rs=$(echo "$line" | jget roofline_speed_tg)
                printf '%s;%s;%s;%s;%s;;%s;;%s\n' "$model" "$type" "$thr" "S_PP B=$b" \
                    "$(echo "$line" | jget speed_pp)" "$(echo "$lline" | jget speed_pp)" \
                    "$(echo "$line" | jget roofline_speed_pp)" >>"$ROWS"
                printf '%s;%s;%s;%s;%s;;%s;;%s\n' "$model" "$type" "$thr" "S_TG B=$b" "$cs" "$ls" "$rs" >>"$ROWS"
                [ -n "$cs" ] && cser="$cser$b $cs"$'\n'
                [ -n "$ls" ] && lser="$lser$b $ls"$'\n'
                [ -n "$rs" ] && rser="$rser$b $rs"$'\n'
            done
            # fixed order per group (cinfer, [llama.cpp,] roofline): the plot styles series by position
            series=("cinfer:$cser" "roofline:$rser")
            [ "$LLAMA" -eq 1 ] && series=("cinfer:$cser" "llama.cpp:$lser" "roofline:$rser")
            for s in "${series[@]}"; do
                name=${s%%:*} data=${s#*:}
                [ -n "$data" ] || data=$'1 NaN\n'
                printf '"%s, %s %s, %s thr" S_TG\n%s\n\n' "$name" "$model" "$type" "$thr" "$data" >>"$PLOT"
            done
        done
    done
done

# ---- the table ----
load1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
tree=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)
[ -n "$tree" ] && ! git -C "$ROOT" diff --quiet HEAD -- src 2>/dev/null && tree="$tree + uncommitted src/ changes"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
hwnote=$(awk -F';' '{ printf "%s%s thr: %.2f GB/s, %.1f GFLOP/s (%.1f with 256-bit FMAs), int8 %.1f GOP/s", (NR > 1 ? "; " : ""), $1, $2, $3, $4, $5 }' <(awk -F';' '!seen[$1]++' "$HWS"))
TABLE=$RAW/table.md
{
    echo "| model | type | thr | test | cinfer t/s | llama.cpp t/s | cinfer / llama.cpp | cinfer % roof | llama.cpp % roof |"
    echo "|---|---|---:|---|---:|---:|---:|---:|---:|"
    while IFS=';' read -r model type thr test c csd l lsd roof; do
        cv=$(num "$c") lv=$(num "$l")
        [ -n "$csd" ] && cv="$cv ± $(num "$csd")"
        [ -n "$lsd" ] && lv="$lv ± $(num "$lsd")"
        echo "| $model | $type | $thr | $test | $cv | $lv | $(ratio "$c" "$l") | $(pct "$c" "$roof") | $(pct "$l" "$roof") |"
    done <"$ROWS"
} >"$TABLE"
LBUILD="native CPU build (GGML_NATIVE)"
[ "${CINFER_LLAMACPP_AVX2:-0}" = 1 ] && LBUILD="AVX2/FMA/F16C build without AVX-512 (CINFER_LLAMACPP_AVX2=1)"
NOTE="${NOTE_USER:+$NOTE_USER. }cinfer binary: $BIN (repository at run time: ${tree:-?}). Machine: ${cpu:-unknown CPU}. Measured by cinfer in the same run (read bandwidth, f32 FMA peak, int8 dot-product peak): $hwnote. \
cinfer kernels: ${ISA:-?}${TUNE:+ ($TUNE)}, KV f16 (the default since issue 15). llama.cpp ${LCOMMIT:-not run}: $LBUILD, KV f16, flash-attn auto. \
pp/tg: mean ± sd over $REPS reps after a warm-up; S_PP/S_TG: one run, $BPP-token prompts then $BTG decode steps. \
% roof: tokens/s over the roofline bound of cinfer's work on this machine (Q8_0/Q4_0 matmuls at the int8 peak, float matmuls and attention at the f32 peak). \
Load average (1/5/15 min) ${load0:-?} at the start, ${load1:-?} at the end."
echo
echo "$NOTE"
echo
cat "$TABLE"

# ---- RESULTS.md: a dated block at the end of the "## Kernels" section ----
if [ "$WRITE_RESULTS" -eq 1 ]; then
    results_append "$RESULTS" Kernels "Measured by bench/kernels.sh (see bench/KERNELS.md); newest last." "$start" "$CMDLINE" "$NOTE" "$TABLE" "$RAW/block.md" ||
        die "cannot update $RESULTS"
    echo "kernels.sh: appended to $RESULTS" >&2
fi

# ---- the plot ----
if [ "$BATCH" != 0 ] && [ -s "$PLOT" ] && command -v gnuplot >/dev/null 2>&1; then
    n=$(grep -c '^"' "$PLOT")
    per=$((LLAMA == 1 ? 3 : 2))
    if gnuplot -e "datafile='$PLOT'; outfile='$OUT/kernels.png'; nseries=$n; per=$per" \
        "$ROOT/bench/plot_kernels.gp" 2>"$RAW/gnuplot.log"; then
        echo "kernels.sh: plot $OUT/kernels.png" >&2
    else
        echo "kernels.sh: gnuplot failed (see $RAW/gnuplot.log)" >&2
    fi
fi
exit 0
}
