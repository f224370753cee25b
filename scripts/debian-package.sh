#!/usr/bin/env bash
# Usage: scripts/debian-package.sh [WORK_DIR]     (default: build/debian-package)
#
# Builds colock's Debian package (debian/: libcolock-dev) with dpkg-buildpackage, from a copy of
# the checkout's files, then unpacks it into a scratch root and builds and runs the package
# consumer against what it holds: the CMake package (test/package/consumer, with the README's
# quick start) and the pkg-config file. It takes minutes (a Release build of the library), so
# scripts/test.sh does not run it: ctest package_debian does, in a build configured with
# -DCOLOCK_TEST_DEBIAN_PACKAGE=ON. Installs dpkg-dev and debhelper first when they are missing
# (apt-get, as root or through sudo). Exits non-zero on the first failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$root/build/debian-package}
say() { echo "debian-package: $*"; }

missing=()
for p in dpkg-dev debhelper; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
        missing+=("$p")
done
if [ "${#missing[@]}" -ne 0 ]; then
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    say "installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
        install -y -q --no-install-recommends "${missing[@]}"
fi

version=$(dpkg-parsechangelog -l "$root/debian/changelog" -S Version)
rm -rf "$work"
src="$work/colock-$version"
mkdir -p "$src"
# The files of the checkout (what git tracks or would, or everything but build/ outside one).
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src")
else
    (cd "$root" && tar --exclude=./build -cf - .) | (cd "$src" && tar -xf -)
fi

say "dpkg-buildpackage in $src"
(cd "$src" && dpkg-buildpackage -b -us -uc)
deb=$(ls "$work"/libcolock-dev_"$version"_*.deb)
say "built $(basename "$deb"):"
dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p'

prefix="$work/root"
dpkg-deb -x "$deb" "$prefix"
for f in usr/include/colock/locker.hpp usr/share/doc/colock/README.md; do
    [ -e "$prefix/$f" ] || { say "the package has no /$f"; exit 1; }
done
shopt -s nullglob
archives=("$prefix"/usr/lib/*/libcolock.a)
configs=("$prefix"/usr/lib/*/cmake/colock/colockConfig.cmake)
pcs=("$prefix"/usr/lib/*/pkgconfig/colock.pc)
shopt -u nullglob
if [ "${#archives[@]}" -ne 1 ] || [ "${#configs[@]}" -ne 1 ] || [ "${#pcs[@]}" -ne 1 ]; then
    say "the package lacks the library, its CMake package or its pkg-config file"
    exit 1
fi

# The consumer project, with the README's quick start as refund.cpp, against the package.
consumer="$work/consumer-src"
cp -r "$root/test/package/consumer" "$consumer"
cp "$root/test/readme/snippets.cpp" "$consumer/refund.cpp"
cmake -S "$consumer" -B "$work/consumer-build" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_PREFIX_PATH="$prefix/usr"
cmake --build "$work/consumer-build" --parallel 2
out=$("$work/consumer-build/colock_consumer")
echo "$out"
echo "$out" | grep -q "colock consumer: ok"

# And with nothing but what the pkg-config file says.
flags=$(PKG_CONFIG_PATH=$(dirname "${pcs[0]}") pkg-config --cflags --libs colock)
# shellcheck disable=SC2086 # the flags are words
c++ -std=c++20 -o "$work/pkg-config-consumer" "$root/test/package/subproject/main.cpp" $flags
"$work/pkg-config-consumer" | grep -E "colock [0-9.]+: ok"
say "libcolock-dev $version: built, and a consumer of it builds and runs"
