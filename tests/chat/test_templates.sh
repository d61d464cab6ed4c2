#!/usr/bin/env bash
# Jinja chat templates against @huggingface/jinja: installs the pinned npm packages if needed
# (scripts/llamacpp-setup.sh: node-llama-cpp, whose bundle holds llama.cpp's models/templates, and
# @huggingface/jinja), then runs tests/chat/templates_check.py.  Prints "SKIP chat_templates: ..." and succeeds
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
NPM_DIR=$dir exec "$PY" tests/chat/templates_check.py
