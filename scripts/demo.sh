#!/usr/bin/env bash
# The README's first quick-start command (make demo): make a small model with `cinfer synth`, print what it is,
# and run generation on it, then on the real tiny stories260K model if ../shared/models is beside the checkout.
set -euo pipefail
B=${1:-build/release}
BIN=$B/cinfer
mkdir -p models
MODEL=models/stories15m-q8_0.gguf
if [ ! -f "$MODEL" ]; then
    echo "== cinfer synth --preset stories15m --type q8_0 --seed 42 -o $MODEL"
    "$BIN" synth --preset stories15m --type q8_0 --seed 42 -o "$MODEL"
fi
echo "== cinfer info -m $MODEL"
"$BIN" info -m "$MODEL"
echo "== cinfer run -m $MODEL -p 'Once upon a time' -n 64 --temp 0.8 --seed 1"
"$BIN" run -m "$MODEL" -p "Once upon a time" -n 64 --temp 0.8 --seed 1
echo
SHARED=$(dirname "$0")/../../shared/models
if [ -f "$SHARED/stories260K.gguf" ]; then
    echo "== cinfer run -m $SHARED/stories260K.gguf -n 120 --temp 0   (a real trained tiny model)"
    "$BIN" run -m "$SHARED/stories260K.gguf" -n 120 --temp 0
    echo
fi
BENCH_OUT=bench/out/demo
echo "== cinfer bench -m $MODEL --compare naive,static,continuous,chunked,paged,prefix -w shared-prefix ..."
echo "   (the seeds' claims as numbers: the same workload under each serving policy)"
"$BIN" bench -m "$MODEL" --compare naive,static,continuous,chunked,paged,prefix -w shared-prefix -n 8 \
    --groups 2 --prefix-len 64 --suffix-len 8 --output-len 16 --ctx 256 --max-seqs 8 --quiet --out "$BENCH_OUT"
echo "(CSV, JSON and PNG plots in $BENCH_OUT)"
