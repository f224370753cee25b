#!/usr/bin/env bash
# Installs what building and testing colock needs on Debian 12. Idempotent: does nothing (and
# needs no network or root) when every package is already installed.
set -euo pipefail

packages=(
    libboost1.81-dev libfmt-dev doctest-dev libssl-dev
    redis-server redis-tools redis-sentinel openssl curl
    postgresql-15 libpq-dev
    ninja-build cmake g++ pkg-config
    clang-14 libclang-rt-14-dev
    doxygen
    python3
    spin
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi
echo "install-deps: installing ${missing[*]}"

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
        exit 1
    fi
fi

# Keep the packages' services from starting: redis-server's would take port 6379, which our
# tests never use anyway. Only when no policy is in place already, and removed afterwards.
policy=/usr/sbin/policy-rc.d
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup_policy() { :; }
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    # shellcheck disable=SC2317
    cleanup_policy() { "${sudo[@]}" rm -f "$policy"; }
fi
trap cleanup_policy EXIT

export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=300)
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -q \
    --no-install-recommends "${missing[@]}"
