#!/usr/bin/env bash
# llama.cpp's tokenizer vectors for the vocabularies that its source carries beyond ../shared/models: every
# models/ggml-vocab-*.gguf of the pinned node-llama-cpp bundle that has .inp/.out vectors (llama.cpp's
# test-tokenizer-0 texts and the ids its own tokenizer gives), tokenized and decoded back by cinfer
# (test_tokenizer's vocab_vectors and vectors_decode_roundtrip, pointed at a directory of these files): among
# them Qwen3.5's (pre-tokenizer qwen35) and Gemma 4's (SentencePiece-style BPE), which ../shared/models lacks.
# Vocabularies that ../shared/models also holds run again; files without vectors (aquila, baichuan, gpt-neox,
# nomic-bert-moe) are listed, not run.  Prints "SKIP vocab_bundle: ..." and succeeds only when npm cannot
# fetch the packages and nothing is installed or cached, or git or node is missing; any other setup problem
# is a FAIL.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
B=${CINFER_BUILD:-$ROOT/build/release}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/llamacpp/bundle.sh
llamacpp_bundle vocab_bundle "$tmp"
mkdir -p "$tmp/m/ggml-vocab"
n=0
for f in $(git --git-dir "$tmp/llama.git" ls-tree --name-only HEAD models/ | grep -E '/ggml-vocab-[^/]*\.gguf$'); do
    name=${f##*/}
    if git --git-dir "$tmp/llama.git" cat-file -e "HEAD:$f.inp" 2>/dev/null &&
        git --git-dir "$tmp/llama.git" cat-file -e "HEAD:$f.out" 2>/dev/null; then
        for ext in "" .inp .out; do
            git --git-dir "$tmp/llama.git" show "HEAD:$f$ext" >"$tmp/m/ggml-vocab/$name$ext"
        done
        n=$((n + 1))
    else
        echo "NOTE vocab_bundle: $name has no .inp/.out vectors in the bundle: not run"
    fi
done
if [ "$n" -lt 12 ]; then
    echo "FAIL vocab_bundle_setup: only $n vocabularies with vectors in the bundle"
    exit 1
fi
echo "PASS vocab_bundle_setup ($n vocabularies with vectors)"
CINFER_MODELS=$tmp/m "$B/tests/test_tokenizer" vocab_vectors,vectors_decode_roundtrip
