#!/usr/bin/env bash
# `cinfer serve` through the official Anthropic SDK for Node: installs the pinned npm package @anthropic-ai/sdk into
# build/npm-anthropic (git-ignored) if needed, starts a real server on a free loopback port and runs
# tests/server/anthropic_sdk.mjs against it.  Prints "SKIP anthropic_sdk: ..." and succeeds only when node is
# missing, or npm cannot fetch the package and nothing is installed or cached (an offline machine).
set -u
VERSION=1.16.0 # @anthropic-ai/sdk, pinned
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
MODELS=${CINFER_MODELS:-$ROOT/../shared/models}
DIR=$ROOT/build/npm-anthropic
KEY=sdk-test-key
NAME=tiny-stories

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP anthropic_sdk: node/npm are not installed"
    exit 0
fi
T=$(mktemp -d)
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

. tests/server/npm_pin.sh
npm_pin anthropic_sdk "@anthropic-ai/sdk" "$VERSION" "$DIR" "$T"
case $? in
0) ;;
2) exit 0 ;;
*) exit 1 ;;
esac

# A real chat template with tool support, Qwen3's from llama.cpp's models/templates (read from the git bundle
# that the pinned node-llama-cpp package carries, never copied into this repository), and @huggingface/jinja
# to render the reference prompt of the tool round trip: from scripts/llamacpp-setup.sh.
TEMPLATE_ARGS=()
NPM_DIR=$(bash scripts/llamacpp-setup.sh 2>"$T/setup.log")
src=$?
if [ "$src" -eq 3 ]; then
    echo "SKIP anthropic_sdk_real_template: $(tail -1 "$T/setup.log")"
    NPM_DIR=
elif [ "$src" -ne 0 ] || [ -z "$NPM_DIR" ]; then
    echo "FAIL anthropic_sdk_template_setup: scripts/llamacpp-setup.sh exited $src: $(tail -3 "$T/setup.log" | tr '\n' ' ')"
    exit 1
else
    git clone -q --bare "$NPM_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$T/llama.git" &&
        git --git-dir "$T/llama.git" show HEAD:models/templates/Qwen-Qwen3-0.6B.jinja >"$T/qwen3.jinja" ||
        { echo "FAIL anthropic_sdk_template_setup: no Qwen-Qwen3-0.6B.jinja in the bundle"; exit 1; }
    TEMPLATE_ARGS=(--chat-template-file "$T/qwen3.jinja")
    echo "PASS anthropic_sdk_template_setup"
fi

"$BIN" serve -m "$MODELS/stories260K.gguf" --port 0 --threads 1 --api-key "$KEY" --served-model-name "$NAME" \
    "${TEMPLATE_ARGS[@]}" 2>"$T/serve.log" &
PID=$!
PORT=
for _ in $(seq 200); do
    grep -q ' ready ' "$T/serve.log" && PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/serve.log")
    [ -n "$PORT" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$PORT" ]; then
    echo "FAIL anthropic_sdk_server: cinfer serve did not start: $(tail -3 "$T/serve.log" | tr '\n' ' ')"
    exit 1
fi

node tests/server/anthropic_sdk.mjs "$DIR" "http://127.0.0.1:$PORT" "$KEY" "$NAME" "$NPM_DIR" \
    "${TEMPLATE_ARGS[1]:-}"
rc=$?

kill -TERM "$PID"
for _ in $(seq 100); do
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
done
if kill -0 "$PID" 2>/dev/null; then
    echo "FAIL anthropic_sdk_server_exit: still running 5 s after SIGTERM"
    rc=1
else
    wait "$PID"
    src=$?
    PID=
    if [ "$src" -ne 0 ]; then
        echo "FAIL anthropic_sdk_server_exit: exit status $src after SIGTERM: $(tail -3 "$T/serve.log" | tr '\n' ' ')"
        rc=1
    elif grep -qE 'Sanitizer|runtime error' "$T/serve.log"; then
        echo "FAIL anthropic_sdk_server_exit: sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$T/serve.log")"
        rc=1
    else
        echo "PASS anthropic_sdk_server_exit"
    fi
fi
exit "$rc"
