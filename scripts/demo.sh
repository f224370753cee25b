#!/usr/bin/env bash
# Builds the demo in Release (build/release) and runs it against Redis: the server named by
# COLOCK_REDIS_URL when set, otherwise a throwaway redis-server on a free loopback port that is
# stopped afterwards. Extra arguments go to the demo. Exits with the demo's status.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${COLOCK_JOBS:-$(nproc 2>/dev/null || echo 2)}

./scripts/install-deps.sh

generator=()
if [ ! -f build/release/CMakeCache.txt ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
fi
cmake -S . -B build/release "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCOLOCK_BUILD_TESTS=OFF -DCOLOCK_BUILD_EXAMPLES=ON -DCOLOCK_BUILD_BENCH=ON
cmake --build build/release --parallel "$jobs" --target colock_demo

demo=build/release/examples/colock_demo
if [ -n "${COLOCK_REDIS_URL:-}" ]; then
    exec "$demo" --url "$COLOCK_REDIS_URL" "$@"
fi
# with-redis.sh starts the server, stops it on exit (its EXIT trap) and passes the status on.
# shellcheck disable=SC2016 # expanded by the inner shell, after with-redis.sh set it
exec ./scripts/with-redis.sh bash -c 'exec "$1" --url "$COLOCK_REDIS_URL" "${@:2}"' demo "$demo" "$@"
