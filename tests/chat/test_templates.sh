#!/usr/bin/env bash
# Jinja chat templates against @huggingface/jinja, and against llama-server when it is built: installs the
# pinned npm packages if needed (scripts/llamacpp-setup.sh: node-llama-cpp, whose bundle holds llama.cpp's
# models/templates, and @huggingface/jinja), then runs tests/chat/templates_check.py and
# tests/chat/llamacpp_templates_check.py.  Prints "SKIP chat_templates: ..." and succeeds
# only when node or npm is missing, or npm cannot fetch the packages and nothing is installed or cached.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PY=${CINFER_PY:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

if ! command -v node >/dev/null 2>&1; then
    echo "SKIP chat_templates: node is not installed"
    exit 0
fi
if ! command -v git >/dev/null 2>&1; then
    echo "SKIP chat_templates: git is not installed"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
dir=$(bash scripts/llamacpp-setup.sh 2>"$log")
rc=$?
if [ "$rc" -eq 3 ]; then
    echo "SKIP chat_templates: $(tail -1 "$log")"
    exit 0
fi
if [ "$rc" -ne 0 ] || [ -z "$dir" ]; then
    echo "FAIL chat_templates_setup: scripts/llamacpp-setup.sh exited $rc: $(tail -3 "$log" | tr '\n' ' ')"
    exit 1
fi
echo "PASS chat_templates_setup ($dir)"
NPM_DIR=$dir "$PY" tests/chat/templates_check.py
rc=$?
# The same templates and conversations against llama.cpp's own server (llama-server's /apply-template vs
# cinfer's), when scripts/llamacpp-native.sh --server has built it (outside the repository; this test never
# builds it, and CI does not): LLAMA_SERVER, else ${CINFER_LLAMACPP_DIR:-~/.cache/cinfer/llama.cpp}/
# build-cinfer-server/bin/llama-server.  Without it: "SKIP chat_templates_llamacpp: ...".
LDIR=${CINFER_LLAMACPP_DIR:-$HOME/.cache/cinfer/llama.cpp}
LLAMA_SERVER=${LLAMA_SERVER:-$LDIR/build-cinfer-server/bin/llama-server} NPM_DIR=$dir \
    "$PY" tests/chat/llamacpp_templates_check.py || rc=1
exit $rc
