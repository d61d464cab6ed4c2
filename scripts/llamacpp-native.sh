#!/usr/bin/env bash
# Builds native llama.cpp tools (llama-bench, llama-batched-bench, llama-quantize) from the llama.cpp source
# that the pinned npm package node-llama-cpp carries as llama/gitRelease.bundle, so bench/kernels.sh can run
# cinfer and llama.cpp side by side on the same files and threads, and tests/llamacpp can compare cinfer
# quantize with llama-quantize.  CPU only, Release, -march=native (GGML_NATIVE).
#   scripts/llamacpp-native.sh [--server] [DIR]
# --server builds llama-server instead (for bench/serve.sh), in its own build directory (the server target needs
# LLAMA_BUILD_SERVER, which the benchmark build leaves off).
# DIR defaults to ${CINFER_LLAMACPP_DIR:-$HOME/.cache/cinfer/llama.cpp}: outside the repository, never committed.
# Idempotent: an existing build of the bundle's commit is reused.  Prints the directory holding the binaries.
# Environment: CINFER_LLAMACPP_JOBS (default 2) parallel compile jobs.
set -u
ARGS=("$@")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SERVER=0
if [ "${1:-}" = --server ]; then
    SERVER=1
    shift
fi
DIR=${1:-${CINFER_LLAMACPP_DIR:-$HOME/.cache/cinfer/llama.cpp}}
case "$DIR" in /*) ;; *) DIR=$PWD/$DIR ;; esac
JOBS=${CINFER_LLAMACPP_JOBS:-2}
NPM=$ROOT/build/npm
BUNDLE=$NPM/node_modules/node-llama-cpp/llama/gitRelease.bundle
BUILD=$DIR/build-cinfer
TARGETS=(llama-bench llama-batched-bench llama-quantize)
SERVER_FLAG=OFF
if [ "$SERVER" -eq 1 ]; then
    BUILD=$DIR/build-cinfer-server
    TARGETS=(llama-server)
    SERVER_FLAG=ON
fi
# CINFER_LLAMACPP_NO_AMX=1 builds without ggml's AMX kernels, in a build directory of its own: on a 2-vCPU
# Xeon VM that reports AMX, the native build's llama-bench died with a general protection fault at its first
# ldtilecfg (ggml_backend_amx_mul_mat), though a lone ldtilecfg with the same configuration runs there.  So on
# a CPU that reports AMX the native benchmark build is checked once (llama-bench over a tiny Q8_0 model made by
# build/release/cinfer, when that exists); if it dies from a signal, the verdict is kept in AMX_CHECK and this
# and every later call (--server too) build and use the AMX-free directory instead.
AMX_CHECK=$DIR/.cinfer-amx-check # "<commit> faults" or "<commit> ok"
amx_cpu() { grep -qw amx_tile /proc/cpuinfo 2>/dev/null; }
if [ "${CINFER_LLAMACPP_NO_AMX:-0}" != 1 ] && [ "${CINFER_LLAMACPP_AVX2:-0}" != 1 ] && amx_cpu &&
    grep -q ' faults$' "$AMX_CHECK" 2>/dev/null; then
    echo "llamacpp-native: this CPU's AMX faults in llama.cpp ($AMX_CHECK): the build without AMX" >&2
    CINFER_LLAMACPP_NO_AMX=1
fi
AMX_FLAGS=()
if [ "${CINFER_LLAMACPP_NO_AMX:-0}" = 1 ]; then
    AMX_FLAGS=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
    BUILD=$BUILD-noamx
fi
# CINFER_LLAMACPP_AVX2=1 builds for AVX2/FMA/F16C without AVX-512 (GGML_NATIVE off), in a build directory of its
# own: llama.cpp as it runs on a CPU without AVX-512 (AMD Zen 3, older Xeons), to compare against cinfer with
# CINFER_NO_AVX512=1 on a machine that has AVX-512.
ISA_FLAGS=(-DGGML_NATIVE=ON)
if [ "${CINFER_LLAMACPP_AVX2:-0}" = 1 ]; then
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
        -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF)
    BUILD=$BUILD-avx2
fi
BIN=$BUILD/bin

die() {
    echo "llamacpp-native: $*" >&2
    exit 1
}

case "$DIR/" in "$ROOT"/*) die "refusing to put llama.cpp inside the repository ($DIR)" ;; esac

if [ ! -f "$BUNDLE" ]; then
    "$ROOT/scripts/llamacpp-setup.sh" "$NPM" >&2 || die "node-llama-cpp is not installed (scripts/llamacpp-setup.sh)"
    [ -f "$BUNDLE" ] || die "no $BUNDLE in the installed node-llama-cpp"
fi
command -v git >/dev/null 2>&1 || die "git is not installed"
command -v cmake >/dev/null 2>&1 || die "cmake is not installed (apt-get install cmake)"

COMMIT=$(git bundle list-heads "$BUNDLE" | awk '$2 == "HEAD" { print $1; exit } { c = $1 } END { if (c) print c }' |
    head -1)
[ -n "$COMMIT" ] || die "cannot read the commit of $BUNDLE"

have_all() {
    local t
    for t in "${TARGETS[@]}"; do
        [ -x "$BIN/$t" ] || return 1
    done
}
# The AMX check of the native benchmark build (above); a fault re-runs this script, which then takes the
# AMX-free directory.
amx_check() {
    [ "$SERVER" -eq 0 ] && [ "${CINFER_LLAMACPP_NO_AMX:-0}" != 1 ] && [ "${CINFER_LLAMACPP_AVX2:-0}" != 1 ] &&
        amx_cpu || return 0
    grep -q "^$COMMIT " "$AMX_CHECK" 2>/dev/null && return 0
    local cinfer=$ROOT/build/release/cinfer model=$BUILD/amx-check.gguf rc
    [ -x "$cinfer" ] || return 0
    "$cinfer" synth --preset tiny --type q8_0 --seed 1 -o "$model" >/dev/null 2>&1 || return 0
    # in a shell of its own, whose "Segmentation fault" report goes to the log too
    bash -c '"$@"; exit $?' check "$BIN/llama-bench" -m "$model" -p 16 -n 0 -r 1 -t 1 >"$BUILD.amx-check.log" 2>&1
    rc=$?
    if [ "$rc" -gt 128 ]; then
        echo "$COMMIT faults" >"$AMX_CHECK"
        echo "llamacpp-native: llama-bench died from signal $((rc - 128)) in its AMX kernels" \
            "($BUILD.amx-check.log): building without AMX" >&2
        CINFER_LLAMACPP_NO_AMX=1 exec "$0" "${ARGS[@]}"
    fi
    echo "$COMMIT ok" >"$AMX_CHECK"
}
if have_all && [ -f "$BUILD/.cinfer-commit" ] && [ "$(cat "$BUILD/.cinfer-commit")" = "$COMMIT" ]; then
    amx_check
    echo "$BIN"
    exit 0
fi

if [ ! -d "$DIR/.git" ]; then
    mkdir -p "$(dirname "$DIR")" || die "cannot create $(dirname "$DIR")"
    git clone -q --no-checkout "$BUNDLE" "$DIR" >&2 || die "git clone of $BUNDLE failed"
fi
if [ "$(git -C "$DIR" rev-parse HEAD 2>/dev/null)" != "$COMMIT" ] || [ ! -f "$DIR/CMakeLists.txt" ]; then
    git -C "$DIR" -c advice.detachedHead=false checkout -q --force "$COMMIT" >&2 || die "checkout of $COMMIT failed"
fi

GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$DIR" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$SERVER_FLAG -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON "${AMX_FLAGS[@]}" \
        >"$BUILD.configure.log" 2>&1 ||
        { tail -30 "$BUILD.configure.log" >&2; die "cmake configure failed (log: $BUILD.configure.log)"; }
fi
cmake --build "$BUILD" --config Release --target "${TARGETS[@]}" -j"$JOBS" >"$BUILD.build.log" 2>&1 ||
    { tail -30 "$BUILD.build.log" >&2; die "build failed (log: $BUILD.build.log)"; }
have_all || die "build finished without ${TARGETS[*]} in $BIN"
echo "$COMMIT" >"$BUILD/.cinfer-commit"
amx_check
echo "$BIN"
