#!/usr/bin/env bash
# The built-in web UI (src/server/webui.html): its size and self-containedness, scripts/embed.sh's C array
# (byte-exact and deterministic), the page `cinfer serve` sends for GET /, and then a headless Chromium session
# against that server (tests/webui/test_webui.mjs: streaming chat, Stop, errors, API key, live dashboard).
#   tests/webui/test_webui.sh
# env: CINFER_URL  a running server to test (for example tests/webui/mock_server.py); unset: this script starts
#                  `$CINFER_BIN serve` (default build/release/cinfer) on a free port with
#                  $CINFER_MODELS/stories260K.gguf (or a `cinfer synth --preset tiny` model) and stops it after.
#      CINFER_API_KEY  the key that server wants, if any (a server this script starts always gets one).
#      CHROMIUM  default /usr/bin/chromium.
# Installs the pinned playwright-core into build/npm-webui (git-ignored) when it is missing.  Prints SKIP and
# succeeds only when node or Chromium is not installed, or npm cannot fetch playwright-core on an offline
# machine; any other problem is a FAIL.  The screenshot goes to build/webui/screenshot.png.
set -u
PW_VERSION=1.65.1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PAGE=src/server/webui.html
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
NPM_DIR=$ROOT/build/npm-webui
T=$(mktemp -d)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT

pass() { echo "PASS $1${2:+ ($2)}"; }
fail() { echo "FAIL $1: $2"; }
failed=0
check() { # NAME WHY-IF-FAILED CMD...
    local name=$1 why=$2
    shift 2
    if "$@"; then pass "$name"; else fail "$name" "$why"; failed=1; fi
}

# --- the page itself -------------------------------------------------------------------------------------
size=$(wc -c <"$PAGE")
check webui_size "$PAGE is $size bytes, over the 25 KB budget" test "$size" -lt 25600
# No external resources: no absolute or protocol-relative URL anywhere in the page.
check webui_self_contained "$PAGE refers to $(grep -Eo '(https?:)?//[a-zA-Z0-9.-]+\.[a-z]{2,}[^ "]*' "$PAGE" | head -1)" \
    bash -c "! grep -Eq '(https?:)?//[a-zA-Z0-9.-]+\\.[a-z]{2,}' '$PAGE'"

# --- scripts/embed.sh: the array holds exactly the page's bytes, a NUL after them, and is reproducible ------
cat >"$T/dump.c" <<'EOF'
#include <stdio.h>
#include "server/webui.h"
int main(void) {
    if (cinfer_webui_html[cinfer_webui_html_len] != 0) return 3;
    return fwrite(cinfer_webui_html, 1, cinfer_webui_html_len, stdout) == cinfer_webui_html_len ? 0 : 4;
}
EOF
embed_ok() {
    sh scripts/embed.sh "$PAGE" "$T/a.c" && sh scripts/embed.sh "$PAGE" "$T/b.c" || return 1
    cmp -s "$T/a.c" "$T/b.c" || { echo "two runs differ" >&2; return 1; }
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wundef -Wvla \
        -Wformat=2 -Wpointer-arith -Wcast-qual -Wwrite-strings -fno-common -Isrc -o "$T/dump" "$T/dump.c" \
        "$T/a.c" || return 1
    "$T/dump" >"$T/dumped" && cmp -s "$T/dumped" "$PAGE"
}
check embed_roundtrip "the C array from scripts/embed.sh is not the page's bytes (see above)" embed_ok

# --- prerequisites of the browser test -------------------------------------------------------------------
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP webui_browser: node is not installed"
    exit "$failed"
fi
if [ ! -x "$CHROMIUM" ]; then
    echo "SKIP webui_browser: $CHROMIUM is not installed (apt-get install chromium)"
    exit "$failed"
fi
have_pw() {
    node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
        "$NPM_DIR/node_modules/playwright-core/package.json" "$PW_VERSION" 2>/dev/null
}
if ! have_pw; then
    mkdir -p "$NPM_DIR" || exit 1
    [ -f "$NPM_DIR/package.json" ] || echo '{ "name": "cinfer-webui-test", "private": true }' >"$NPM_DIR/package.json"
    if ! npm install --prefix "$NPM_DIR" --prefer-offline --no-audit --no-fund --save-exact \
        "playwright-core@$PW_VERSION" >"$T/npm.log" 2>&1; then
        if grep -qiE 'ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENOTCACHED|ENETUNREACH' "$T/npm.log"; then
            echo "SKIP webui_browser: npm cannot fetch playwright-core@$PW_VERSION (offline, not cached)"
            exit "$failed"
        fi
        fail webui_playwright "npm install playwright-core@$PW_VERSION: $(tail -3 "$T/npm.log" | tr '\n' ' ')"
        exit 1
    fi
    have_pw || { fail webui_playwright "npm did not install playwright-core $PW_VERSION"; exit 1; }
fi

# --- the server ------------------------------------------------------------------------------------------
URL=${CINFER_URL:-}
if [ -z "$URL" ]; then
    BIN=${CINFER_BIN:-$ROOT/build/release/cinfer}
    if ! "$BIN" serve --help >/dev/null 2>&1; then
        fail webui_server "$BIN has no working 'serve' command (build it, or set CINFER_URL)"
        exit 1
    fi
    # With a key, so the page's Authorization header meets the real check.
    export CINFER_API_KEY=${CINFER_API_KEY:-webui-test-key-$$}
    MODEL=${CINFER_MODELS:-$ROOT/../shared/models}/stories260K.gguf
    if [ ! -f "$MODEL" ]; then
        MODEL=$T/tiny.gguf
        "$BIN" synth --preset tiny -o "$MODEL" >"$T/synth.log" 2>&1 ||
            { fail webui_server "cinfer synth: $(tail -2 "$T/synth.log" | tr '\n' ' ')"; exit 1; }
    fi
    for _ in 1 2 3; do # the free port may be taken between the probe and the bind
        port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        "$BIN" serve -m "$MODEL" --port "$port" --api-key "$CINFER_API_KEY" >"$T/server.log" 2>&1 &
        server_pid=$!
        URL=http://127.0.0.1:$port
        up=0
        for _ in $(seq 1 150); do
            if curl -sf -o /dev/null --max-time 2 "$URL/health"; then up=1; break; fi
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.2
        done
        [ "$up" -eq 1 ] && break
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
        server_pid=""
    done
    if [ -z "$server_pid" ]; then
        fail webui_server "cinfer serve did not answer GET /health: $(tail -3 "$T/server.log" | tr '\n' ' ')"
        exit 1
    fi
    pass webui_server "$BIN serve -m $MODEL --port $port --api-key ..."
fi
URL=${URL%/}

# GET / is the page, byte for byte, as HTML.
code=$(curl -s -o "$T/index" -D "$T/headers" -w '%{http_code}' --max-time 10 "$URL/")
check webui_served "GET / answered $code, $(wc -c <"$T/index") bytes that differ from $PAGE" \
    bash -c "[ '$code' = 200 ] && cmp -s '$T/index' '$PAGE'"
check webui_served_as_html "GET / Content-Type: $(grep -i '^content-type' "$T/headers" | tr -d '\r')" \
    grep -qiE '^content-type: *text/html' "$T/headers"

# --- the browser session ---------------------------------------------------------------------------------
mkdir -p "$ROOT/build/webui" "$T/profile"
CINFER_URL=$URL WEBUI_NPM=$NPM_DIR WEBUI_SHOT=$ROOT/build/webui/screenshot.png WEBUI_PROFILE=$T/profile \
    CHROMIUM=$CHROMIUM timeout 300 node tests/webui/test_webui.mjs
rc=$?
if [ "$rc" -ne 0 ]; then
    failed=1
    [ "$rc" -eq 124 ] && fail webui_browser "test_webui.mjs ran past 300 s"
fi

if [ -n "$server_pid" ]; then
    check webui_server_survives "cinfer serve exited during the browser session: $(tail -3 "$T/server.log" | tr '\n' ' ')" \
        kill -0 "$server_pid"
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
    check webui_server_log_clean "the server log has a crash or sanitizer report: $(grep -m1 -E 'Sanitizer|runtime error|Segmentation|Aborted|assert' "$T/server.log")" \
        bash -c "! grep -qE 'Sanitizer|runtime error|Segmentation|Aborted|assert' '$T/server.log'"
fi
exit "$failed"
