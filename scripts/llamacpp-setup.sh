#!/usr/bin/env bash
# Installs node-llama-cpp (pinned), whose npm packages carry prebuilt llama.cpp binaries, for the llama.cpp
# cross-check in tests/llamacpp/.  Nothing is compiled and no llama.cpp source is downloaded.
#   scripts/llamacpp-setup.sh [DIR]      DIR defaults to build/npm (git-ignored); prints the DIR on success.
# Exit status: 0 ready; 3 npm could not fetch the packages and nothing usable is installed or cached (offline);
# 1 any other failure.  Installs from npm's cache when it holds the tarballs (--prefer-offline), so it also
# works offline once the cache is warm.
set -u
VERSION=3.21.1
JINJA_VERSION=0.5.11 # @huggingface/jinja, the reference renderer of tests/chat (node-llama-cpp depends on it)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/build/npm}
case "$DIR" in /*) ;; *) DIR=$PWD/$DIR ;; esac

case "$(uname -s)-$(uname -m)" in
Linux-x86_64) PLAT=linux-x64 ;;
Linux-aarch64) PLAT=linux-arm64 ;;
Linux-armv7l) PLAT=linux-armv7l ;;
Darwin-arm64) PLAT=mac-arm64-metal ;;
Darwin-x86_64) PLAT=mac-x64 ;;
*)
    echo "llamacpp-setup: no prebuilt node-llama-cpp binary for $(uname -s)-$(uname -m)" >&2
    exit 1
    ;;
esac

have() { # the pinned version of both packages is installed
    local f
    for f in "$DIR/node_modules/node-llama-cpp/package.json" "$DIR/node_modules/@node-llama-cpp/$PLAT/package.json"; do
        [ -f "$f" ] || return 1
        node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' "$f" "$VERSION" ||
            return 1
    done
    f=$DIR/node_modules/@huggingface/jinja/package.json
    [ -f "$f" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' "$f" "$JINJA_VERSION"
}

# Loads the prebuilt binary (build: "never": fail rather than compile) and prints the llama.cpp build info.
# From a file, not `node -e`: node-llama-cpp tests its binding in a child process started with node's execArgv.
check_load() {
    cat >"$DIR/check-load.mjs" <<'JS' || return 1
const entry = new URL("./node_modules/node-llama-cpp/dist/index.js", import.meta.url);
const { getLlama, LlamaLogLevel } = await import(entry);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
console.error(`llamacpp-setup: prebuilt llama.cpp of node-llama-cpp (${llama.llamaCppRelease.release}) loads`);
await llama.dispose();
JS
    node "$DIR/check-load.mjs"
}

command -v node >/dev/null 2>&1 || { echo "llamacpp-setup: node is not installed" >&2; exit 3; }
command -v npm >/dev/null 2>&1 || { echo "llamacpp-setup: npm is not installed" >&2; exit 3; }

if ! have; then
    mkdir -p "$DIR" || exit 1
    [ -f "$DIR/package.json" ] || echo '{ "name": "cinfer-llamacpp-check", "private": true }' >"$DIR/package.json"
    # Only this platform's binary package: the optional dependencies would pull every platform's and the CUDA
    # builds (hundreds of MiB).  The package's postinstall (which may try to download and build llama.cpp) is
    # skipped; check_load below verifies the prebuilt binary instead.
    log=$(mktemp)
    if ! NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --prefix "$DIR" --prefer-offline --no-audit --no-fund \
        --omit=optional --save-exact "node-llama-cpp@$VERSION" "@node-llama-cpp/$PLAT@$VERSION" \
        "@huggingface/jinja@$JINJA_VERSION" >"$log" 2>&1; then
        tail -20 "$log" >&2
        offline=0
        net='ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENOTCACHED|ENETUNREACH|EHOSTUNREACH'
        if grep -qiE "$net" "$log" ||
            ! npm ping >/dev/null 2>&1; then
            offline=1
        fi
        rm -f "$log"
        if [ "$offline" -eq 1 ]; then
            echo "llamacpp-setup: npm registry unreachable and the packages are not cached" >&2
            exit 3
        fi
        echo "llamacpp-setup: npm install failed" >&2
        exit 1
    fi
    rm -f "$log"
    have || { echo "llamacpp-setup: npm install did not produce node-llama-cpp $VERSION for $PLAT" >&2; exit 1; }
fi

check_load || { echo "llamacpp-setup: the prebuilt llama.cpp binary does not load" >&2; exit 1; }
echo "$DIR"
