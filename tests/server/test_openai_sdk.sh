#!/usr/bin/env bash
# `cinfer serve` through the official OpenAI SDK for Node: installs the pinned npm package `openai` into
# build/npm-openai (git-ignored) if needed, starts a real server on a free loopback port and runs
# tests/server/openai_sdk.mjs against it.  Prints "SKIP openai_sdk: ..." and succeeds only when node is
# missing, or npm cannot fetch the package and nothing is installed or cached (an offline machine).
set -u
VERSION=6.49.0 # the last major that runs on Debian 12's node 20 (openai 7 needs node >= 22)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
MODELS=${CINFER_MODELS:-$ROOT/../shared/models}
DIR=$ROOT/build/npm-openai
KEY=sdk-test-key
NAME=tiny-stories

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP openai_sdk: node/npm are not installed"
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
npm_pin openai_sdk "openai" "$VERSION" "$DIR" "$T"
case $? in
0) ;;
2) exit 0 ;;
*) exit 1 ;;
esac

# start_server ARGS...: a server on a free port (PID and PORT set), or a FAIL line and exit.
start_server() {
    "$BIN" serve -m "$MODELS/stories260K.gguf" --port 0 --threads 1 --api-key "$KEY" --served-model-name "$NAME" \
        "$@" 2>"$T/serve.log" &
    PID=$!
    PORT=
    for _ in $(seq 200); do
        grep -q ' ready ' "$T/serve.log" && PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/serve.log")
        [ -n "$PORT" ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.05
    done
    if [ -z "$PORT" ]; then
        echo "FAIL openai_sdk_server: cinfer serve did not start: $(tail -3 "$T/serve.log" | tr '\n' ' ')"
        exit 1
    fi
}

# stop_server NAME: SIGTERM, then the exit status and the log checked (sets rc=1 on a problem).
stop_server() {
    kill -TERM "$PID"
    for _ in $(seq 100); do
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$PID" 2>/dev/null; then
        echo "FAIL $1: still running 5 s after SIGTERM"
        rc=1
    else
        wait "$PID"
        src=$?
        PID=
        if [ "$src" -ne 0 ]; then
            echo "FAIL $1: exit status $src after SIGTERM: $(tail -3 "$T/serve.log" | tr '\n' ' ')"
            rc=1
        elif grep -qE 'Sanitizer|runtime error' "$T/serve.log"; then
            echo "FAIL $1: sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$T/serve.log")"
            rc=1
        else
            echo "PASS $1"
        fi
    fi
}

rc=0
start_server
node tests/server/openai_sdk.mjs "$DIR" "http://127.0.0.1:$PORT" "$KEY" "$NAME" || rc=1
stop_server openai_sdk_server_exit

# Tool calling and reasoning: a Hermes/Qwen-style template (tools in the system prompt, <tool_call> blocks,
# <tool_response> for tool messages).
cat >"$T/hermes.jinja" <<'JINJA'
{%- if tools %}<|im_start|>system
<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>
Call a function with <tool_call>{"name": ..., "arguments": ...}</tool_call>; think in <think></think> first.<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == "tool" %}<|im_start|>user
<tool_response>{{ m.content }}</tool_response><|im_end|>
{% elif m.tool_calls %}<|im_start|>assistant
{% for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}</tool_call>{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}
JINJA
start_server --chat-template-file "$T/hermes.jinja"
node tests/server/openai_sdk_tools.mjs "$DIR" "http://127.0.0.1:$PORT" "$KEY" "$NAME" || rc=1
stop_server openai_sdk_tools_server_exit

# A BERT embedding model: embeddings.create works, completions.create is a 400.
if ! "$BIN" synth --preset tiny-bert -o "$T/bert.gguf" >"$T/synth.log" 2>&1; then
    echo "FAIL openai_sdk_bert_synth: $(tail -2 "$T/synth.log" | tr '\n' ' ')"
    exit 1
fi
"$BIN" serve -m "$T/bert.gguf" --port 0 --threads 1 2>"$T/serve-bert.log" &
PID=$!
PORT=
for _ in $(seq 200); do
    grep -q ' ready ' "$T/serve-bert.log" &&
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/serve-bert.log")
    [ -n "$PORT" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$PORT" ]; then
    echo "FAIL openai_sdk_bert_server: cinfer serve did not start: $(tail -3 "$T/serve-bert.log" | tr '\n' ' ')"
    exit 1
fi
node tests/server/openai_sdk_bert.mjs "$DIR" "http://127.0.0.1:$PORT" || rc=1
if grep -qE 'Sanitizer|runtime error' "$T/serve-bert.log"; then
    echo "FAIL openai_sdk_bert_server: sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$T/serve-bert.log")"
    rc=1
fi
exit "$rc"
