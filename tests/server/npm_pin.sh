# Sourced by the SDK tests (test_openai_sdk.sh, test_anthropic_sdk.sh): installs one pinned npm package into
# its own git-ignored directory unless that exact version is already there.
#   npm_pin LABEL PACKAGE VERSION DIR TMP
# Prints "PASS LABEL_setup (PACKAGE@VERSION)" and returns 0 when installed; prints "SKIP LABEL: ..." and
# returns 2 when npm cannot fetch it and nothing is installed or cached (offline); prints "FAIL LABEL_setup:
# ..." and returns 1 otherwise.  TMP: a scratch directory for npm's log.
npm_pin_have() { # PACKAGE VERSION DIR
    [ -f "$3/node_modules/$1/package.json" ] &&
        node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
            "$3/node_modules/$1/package.json" "$2"
}

npm_pin() {
    local label=$1 pkg=$2 version=$3 dir=$4 tmp=$5
    if ! npm_pin_have "$pkg" "$version" "$dir"; then
        mkdir -p "$dir" || return 1
        [ -f "$dir/package.json" ] || echo "{ \"name\": \"cinfer-${label//_/-}-test\", \"private\": true }" >"$dir/package.json"
        if ! npm install --prefix "$dir" --prefer-offline --no-audit --no-fund --save-exact "$pkg@$version" \
            >"$tmp/npm.log" 2>&1; then
            if grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH|network' "$tmp/npm.log"; then
                echo "SKIP $label: npm cannot fetch $pkg@$version (offline?): $(tail -1 "$tmp/npm.log")"
                return 2
            fi
            echo "FAIL ${label}_setup: npm install failed: $(tail -3 "$tmp/npm.log" | tr '\n' ' ')"
            return 1
        fi
        npm_pin_have "$pkg" "$version" "$dir" ||
            { echo "FAIL ${label}_setup: $pkg@$version is not in $dir after npm install"; return 1; }
    fi
    echo "PASS ${label}_setup ($pkg@$version)"
}
