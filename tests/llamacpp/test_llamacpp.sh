#!/usr/bin/env bash
# llama.cpp cross-check: installs the pinned node-llama-cpp (prebuilt llama.cpp) if needed, then runs
# tests/llamacpp/llamacpp_check.py (the numpy reference and cinfer against llama.cpp; see that file).
# Prints "SKIP llamacpp: ..." and succeeds only when npm cannot fetch the packages and nothing is installed or
# cached (an offline machine with a cold cache); any other setup problem is a FAIL.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PY=${CINFER_PY:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

if ! command -v node >/dev/null 2>&1; then
    echo "SKIP llamacpp: node is not installed"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
dir=$(bash scripts/llamacpp-setup.sh 2>"$log")
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "SKIP llamacpp: $(tail -1 "$log")"
    exit 0
fi
if [ "$rc" -ne 0 ] || [ -z "$dir" ]; then
    echo "FAIL llamacpp_setup: scripts/llamacpp-setup.sh exited $rc: $(tail -3 "$log" | tr '\n' ' ')"
    exit 1
fi
cat "$log"
echo "PASS llamacpp_setup ($dir)"
NLC_DIR=$dir exec "$PY" tests/llamacpp/llamacpp_check.py
