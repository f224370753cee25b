#!/usr/bin/env bash
# The full reliability run: every fault scenario at full length, the fault-proxy and
# hostile-server tests, then the RESP3 parser fuzzer for longer than the ctest runs it.
#
#   scripts/reliability.sh [--fuzz-seconds N] [--seed N] [--only a,b,c1,...,l,m1,...,m4,n1,n2]
#
# Builds RelWithDebInfo in build/reliability (optimised, so timings and memory per waiter are
# what users get), runs `colock_reliability --full` (it starts its own redis-servers, worker
# processes and proxy) and prints its table: scenario, acquisitions, faults injected,
# overlaps, leaked keys, losses detected, duration. --fuzz-seconds 0 skips the fuzzer
# (default 300). The short versions of the same scenarios run inside scripts/test.sh.
# Installs the Debian packages it needs first; exits non-zero when any part fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${COLOCK_JOBS:-$(nproc 2>/dev/null || echo 2)}
fuzz_seconds=300
runner_args=(--full)
while [ "$#" -gt 0 ]; do
    case "$1" in
    --fuzz-seconds)
        fuzz_seconds=${2:?--fuzz-seconds needs a number}
        shift 2
        ;;
    --seed | --only)
        runner_args+=("$1" "${2:?$1 needs a value}")
        shift 2
        ;;
    *)
        echo "usage: scripts/reliability.sh [--fuzz-seconds N] [--seed N] [--only a,b,...]" >&2
        exit 2
        ;;
    esac
done
if ! [[ "$fuzz_seconds" =~ ^[0-9]+$ ]]; then
    echo "reliability.sh: --fuzz-seconds needs a number of seconds, not '$fuzz_seconds'" >&2
    exit 2
fi

./scripts/install-deps.sh

generator=()
if [ ! -f build/reliability/CMakeCache.txt ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
fi
cmake -S . -B build/reliability "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLOCK_BUILD_TESTS=ON -DCOLOCK_BUILD_EXAMPLES=OFF -DCOLOCK_BUILD_BENCH=OFF
cmake --build build/reliability --parallel "$jobs" \
    --target colock_reliability colock_integration_tests

status=0
echo
echo "==== fault scenarios (full length)"
build/reliability/test/colock_reliability "${runner_args[@]}" || status=1

echo
echo "==== fault proxy and hostile server tests"
build/reliability/test/colock_integration_tests --no-version -tc='*proxy*,*hostile*' || status=1

if [ "$fuzz_seconds" -gt 0 ]; then
    echo
    echo "==== RESP3 parser fuzzer, $fuzz_seconds s"
    ./scripts/fuzz.sh "$fuzz_seconds" || status=1
fi

echo
if [ "$status" -eq 0 ]; then
    echo "==== reliability.sh: all passed"
else
    echo "==== reliability.sh: FAILED" >&2
fi
exit "$status"
