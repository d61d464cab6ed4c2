#!/usr/bin/env bash
# The GGUF files people download (K-quants, IQ4, MXFP4), made by llama.cpp's llama-quantize, against the numpy
# reference and llama.cpp: tests/llamacpp/kquant_check.py (see that file).
# llama-quantize comes from scripts/llamacpp-native.sh (built once, outside the repository; this test never builds
# it): LLAMA_QUANTIZE, else ${CINFER_LLAMACPP_DIR:-$HOME/.cache/cinfer/llama.cpp}/build-cinfer/bin/llama-quantize.
# Without it the check prints "SKIP kquant_llama_quantize: ..." and succeeds.  llama.cpp's own decoding runs
# through the pinned node-llama-cpp as in test_llamacpp.sh; without node, or when npm cannot fetch the packages
# and nothing is installed or cached, that part prints a SKIP line and the rest still runs.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PY=${CINFER_PY:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
LDIR=${CINFER_LLAMACPP_DIR:-$HOME/.cache/cinfer/llama.cpp}
export LLAMA_QUANTIZE=${LLAMA_QUANTIZE:-$LDIR/build-cinfer/bin/llama-quantize}

unset NLC_DIR
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP kquant_llamacpp: node is not installed"
else
    log=$(mktemp)
    dir=$(bash scripts/llamacpp-setup.sh 2>"$log")
    rc=$?
    msg=$(tail -3 "$log" | tr '\n' ' ')
    rm -f "$log"
    if [ "$rc" -eq 3 ]; then
        echo "SKIP kquant_llamacpp: $msg"
    elif [ "$rc" -ne 0 ] || [ -z "$dir" ]; then
        echo "FAIL kquant_llamacpp_setup: scripts/llamacpp-setup.sh exited $rc: $msg"
        exit 1
    else
        export NLC_DIR=$dir
    fi
fi
exec "$PY" tests/llamacpp/kquant_check.py
