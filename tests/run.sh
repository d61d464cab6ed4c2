#!/usr/bin/env bash
# Runs every test program and prints the closing "N passed, N failed" line.
#   tests/run.sh BUILD_DIR [fast|full]
# Test programs print "PASS name" / "FAIL name: why" lines; a program that exits non-zero without printing a
# FAIL line (a crash, a sanitizer report) counts as one failure.  "fast" runs the C unit tests and the CLI
# tests in tests/cli (the asan subset); "full" also runs the other script tests in tests/*/test_*.{py,sh}
# (the numpy reference and the llama.cpp cross-check).
set -u
B=${1:?build dir}
MODE=${2:-full}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CINFER_MODELS=${CINFER_MODELS:-$ROOT/../shared/models}
export CINFER_BIN=$ROOT/$B/cinfer
export CINFER_BUILD=$ROOT/$B
export CINFER_ROOT=$ROOT
# Debian's python3 carries python3-numpy; a pyenv python on PATH may not.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
export CINFER_PY=$PY

passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_one() { # name, command...
    local name=$1
    shift
    echo "== $name"
    "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    local p f
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited with status $rc"
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
}

cd "$ROOT"
for t in "$B"/tests/test_*; do
    case "$t" in *.d) continue ;; esac
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done

for t in tests/cli/test_*.sh; do
    [ -e "$t" ] || continue
    run_one "$t" bash "$t"
done

if [ "$MODE" = full ]; then
    for t in tests/*/test_*.py; do
        [ -e "$t" ] || continue
        run_one "$t" "$PY" "$t"
    done
    for t in tests/*/test_*.sh; do
        [ -e "$t" ] || continue
        case "$t" in tests/cli/*) continue ;; esac
        run_one "$t" bash "$t"
    done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
