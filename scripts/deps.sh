#!/usr/bin/env bash
# Installs the Debian packages cinfer's build and tests need, only if some are missing (one apt-get run).
# Run as root on Debian 12; elsewhere it prints what to install and continues.
set -eu
PKGS="build-essential libpcre2-dev python3 python3-numpy nodejs npm clang-format"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "deps.sh: please install:$missing" >&2
    exit 0
fi
echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
