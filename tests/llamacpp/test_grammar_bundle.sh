#!/usr/bin/env bash
# llama.cpp's grammar-integration cases (tests/test-grammar-integration.cpp of the pinned node-llama-cpp
# bundle: GBNF grammars and JSON schemas with the strings each must accept and refuse) and the schemas of
# tests/test-json-schema-to-grammar.cpp (which llama.cpp compiles and which it refuses) through cinfer's
# grammar engine: tests/llamacpp/grammar_cases.py extracts them, tests/unit/test_grammar_cases.c judges them.
# Prints "SKIP grammar_bundle: ..." and succeeds only when npm cannot fetch the packages and nothing is
# installed or cached, or git or node is missing; any other setup problem is a FAIL.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
B=${CINFER_BUILD:-$ROOT/build/release}
PY=${CINFER_PY:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/llamacpp/bundle.sh
llamacpp_bundle grammar_bundle "$tmp"
if ! git --git-dir "$tmp/llama.git" show HEAD:tests/test-grammar-integration.cpp >"$tmp/cases.cpp" ||
    ! git --git-dir "$tmp/llama.git" show HEAD:tests/test-json-schema-to-grammar.cpp >"$tmp/schemas.cpp" ||
    ! "$PY" tests/llamacpp/grammar_cases.py "$tmp/cases.cpp" "$tmp/schemas.cpp" "$tmp/cases.json"; then
    echo "FAIL grammar_bundle_setup: cannot read llama.cpp's grammar tests from the bundle"
    exit 1
fi
echo "PASS grammar_bundle_setup"
CINFER_GRAMMAR_CASES=$tmp/cases.json "$B/tests/test_grammar_cases"
