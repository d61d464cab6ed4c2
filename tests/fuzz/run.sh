#!/usr/bin/env bash
# Runs the libFuzzer harnesses that `make fuzz` built (build/fuzz/fuzz_<target>), one after the other.
#   tests/fuzz/run.sh -t SECONDS [-r RESULTS] [TARGET ...]   each for SECONDS (make fuzz-smoke: 15 s each)
#   tests/fuzz/run.sh -n RUNS [-r RESULTS] [TARGET ...]      each for RUNS executions (the long run: -n 1000000)
# Without targets: every harness.  Seeds are read from tests/fuzz/corpus/<target>/ (never written); what a
# run finds goes to the work corpus build/fuzz/corpus/<target>/ (kept, so runs build on each other), a
# crash to build/fuzz/artifacts/<target>/, the log to build/fuzz/logs/<target>.log.  FUZZ_FLAGS adds
# libFuzzer flags.  Ends with a Markdown table (executions, exec/s, cov, ft, corpus, and how many past
# crashers tests/fuzz/crashes/<target>/ keeps as regression inputs); -r appends it, dated,
# with the command and the CPU, to RESULTS under "## Fuzzing" (bench/results_append.sh).  Exits non-zero if
# any harness found a crash, a leak, a timeout or a failed property.
set -u
# The whole script is one compound command, read before it runs: editing the file during a run is safe.
{
cd "$(dirname "$0")/../.."
B=build/fuzz
limit=""
results=""
cmdline="tests/fuzz/run.sh $*"
while getopts "t:n:r:" o; do
    case $o in
    t) limit="-max_total_time=$OPTARG" ;;
    n) limit="-runs=$OPTARG" ;;
    r) results=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$limit" ] || { echo "usage: $0 -t SECONDS | -n RUNS [-r RESULTS] [TARGET ...]" >&2; exit 2; }
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        t=${f#tests/fuzz/fuzz_}
        targets+=("${t%.c}")
    done
fi
export CINFER_MODELS=${CINFER_MODELS:-$PWD/../shared/models}
start=$(date -u '+%Y-%m-%d %H:%M UTC')

rows=()
failed=0
for t in "${targets[@]}"; do
    bin=$B/fuzz_$t
    [ -x "$bin" ] || { echo "$bin missing: run make fuzz" >&2; exit 2; }
    mkdir -p "$B/corpus/$t" "$B/artifacts/$t" "$B/logs"
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=tests/fuzz/$t.dict")
    log=$B/logs/$t.log
    echo "== fuzz_$t ($limit)"
    # -timeout: one input running 10 s is a hang; seeds go after the work corpus so new units land there.
    # shellcheck disable=SC2086
    nice -n 10 "$bin" $limit -timeout=10 -print_final_stats=1 -artifact_prefix="$B/artifacts/$t/" \
        "${dict[@]}" ${FUZZ_FLAGS:-} "$B/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    last=$(grep -aE '^#[0-9]+.*cov: ' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    if [ "$rc" -eq 0 ]; then
        result=ok
    else
        result="FAILED (rc $rc, see $log and $B/artifacts/$t/)"
        failed=1
        grep -aE 'ERROR|fuzz property failed|SUMMARY|assertion failed|runtime error' "$log" | head -5
    fi
    kept=$(find "tests/fuzz/crashes/$t" -type f 2>/dev/null | wc -l)
    echo "   $execs runs, $speed exec/s, cov $cov, ft $ft, corpus $corp: $result"
    rows+=("| $t | ${execs:-?} | ${speed:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $kept | $result |")
done
table=$(mktemp)
trap 'rm -f "$table" "$table.block"' EXIT
{
    echo "| harness | executions | exec/s | cov | ft | corpus (units/bytes) | past crashers kept | result |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    printf '%s\n' "${rows[@]}"
} >"$table"
echo
cat "$table"
if [ -n "$results" ]; then
    . bench/results_append.sh
    cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
    note="CPU: $cpu ($(nproc) cores visible); cinfer $(git rev-parse --short HEAD 2>/dev/null || echo '?'); clang $(clang -dumpversion 2>/dev/null); libFuzzer with ASan+UBSan, -timeout=10, seeds tests/fuzz/corpus plus the work corpus build/fuzz/corpus of earlier runs. cov/ft: libFuzzer's last status line (coverage edges / features)."
    results_append "$results" Fuzzing "Long runs of the libFuzzer harnesses (tests/fuzz/README.md) by tests/fuzz/run.sh; newest last." \
        "$start" "$cmdline" "$note" "$table" "$table.block" || echo "could not update $results" >&2
fi
exit $failed
}
