#!/usr/bin/env bash
# Installs the Debian packages cinfer's build and tests need, only if some are missing (one apt-get run).
# Run as root on Debian 12; elsewhere it prints what to install and continues.
#   build-essential  gcc, make          libpcre2-dev   Unicode-aware pre-tokenizer regexes
#   python3-numpy    the tests' independent reference forward pass
#   nodejs, npm      the llama.cpp cross-check (node-llama-cpp, pinned, installed by scripts/llamacpp-setup.sh)
#   clang-format     make format-check
#   clang, libclang-rt-14-dev   make fuzz: libFuzzer and the ASan/UBSan runtimes ship with Debian's clang 14
#                    (the runtime libraries are in libclang-rt-14-dev; gcc has no libFuzzer)
#   libmicrohttpd-dev, libcjson-dev   the HTTP server and its JSON     libcurl4-openssl-dev   cinfer bench serve
#   gnuplot-nox      benchmark plots    chromium   the web UI's browser test
#   python3-jsonschema   the structured-output tests' independent validator (JSON Schema)
#   openmpi-bin, libopenmpi-dev   tensor parallelism over MPI (--tp; mpirun and mpi.h; tests/tp/test_tp.py)
set -eu
missing=""
for p in build-essential libpcre2-dev libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev python3 python3-numpy \
    python3-jsonschema clang-format clang libclang-rt-14-dev gnuplot-nox chromium openmpi-bin libopenmpi-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# node and npm may come from elsewhere (e.g. a newer nodejs that bundles npm): only the commands matter.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "deps.sh: please install:$missing" >&2
    exit 0
fi
echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
