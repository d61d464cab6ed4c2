# shellcheck shell=bash
# Sourced by the tests that read llama.cpp's own source from the pinned node-llama-cpp bundle
# (test_vocab_bundle.sh, test_grammar_bundle.sh): llamacpp_bundle NAME DIR installs the package if needed
# (scripts/llamacpp-setup.sh) and clones the bundle bare into DIR/llama.git.  It ends the calling script
# with "SKIP NAME: ..." (success) when node or git is missing or npm cannot fetch the package and nothing is
# installed or cached, and with "FAIL NAME_setup: ..." on any other setup problem.
llamacpp_bundle() {
    local name=$1 dir=$2 npm rc
    command -v git >/dev/null 2>&1 || { echo "SKIP $name: git is not installed"; exit 0; }
    command -v node >/dev/null 2>&1 || { echo "SKIP $name: node is not installed"; exit 0; }
    npm=$(bash scripts/llamacpp-setup.sh 2>"$dir/setup.log")
    rc=$?
    if [ "$rc" -eq 3 ]; then
        echo "SKIP $name: $(tail -1 "$dir/setup.log")"
        exit 0
    fi
    if [ "$rc" -ne 0 ] || [ -z "$npm" ]; then
        echo "FAIL ${name}_setup: scripts/llamacpp-setup.sh exited $rc: $(tail -3 "$dir/setup.log" | tr '\n' ' ')"
        exit 1
    fi
    if ! git clone -q --bare "$npm/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/llama.git"; then
        echo "FAIL ${name}_setup: cannot clone the bundle of $npm"
        exit 1
    fi
}
