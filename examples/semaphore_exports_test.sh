#!/usr/bin/env bash
# Usage: semaphore_exports_test.sh EXAMPLE_PROGRAM   (under scripts/with-redis.sh)
#
# Two instances of the semaphore example at once against the server in COLOCK_REDIS_URL, each
# with two lockers (four "processes" in all) and 12 exports, through one semaphore of 3 permits.
# Each instance checks itself (at most 3 exports running at once, counted at the server over
# both instances; every export done) and must exit 0. Then: the count at the server peaked at
# exactly 3 (the permits were used, not only respected), nothing runs any more, every permit was
# given back, and every key the semaphore left has a TTL.
set -euo pipefail

program=$1
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
name="example:exports:$$"
work=$(mktemp -d "${TMPDIR:-/tmp}/colock-semaphore.XXXXXX")
pid_a=
pid_b=
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local pid
    for pid in $pid_a $pid_b; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "semaphore_exports_test: $*" >&2
    local who
    for who in a b; do
        echo "--- instance ${who^^} output:" >&2
        cat "$work/$who.out" "$work/$who.err" >&2 2>/dev/null || true
    done
    exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
rcli() { "$redis_cli" -u "$COLOCK_REDIS_URL" "$@"; }

# wait_exit SECONDS PID WHAT: the instance's exit status, which must be 0.
wait_exit() {
    local limit=$(($(now_ms) + $1 * 1000)) status=0
    while kill -0 "$2" 2>/dev/null; do
        [ "$(now_ms)" -lt "$limit" ] || fail "$3 still running after $1 s"
        sleep 0.02
    done
    wait "$2" || status=$?
    [ "$status" = 0 ] || fail "$3 exited with status $status"
}

start=$(now_ms)
"$program" --name "$name" --process a --exports 12 --limit 3 --work 150 >"$work/a.out" 2>"$work/a.err" &
pid_a=$!
"$program" --name "$name" --process b --exports 12 --limit 3 --work 150 >"$work/b.out" 2>"$work/b.err" &
pid_b=$!
wait_exit 30 "$pid_a" "instance a"
pid_a=
wait_exit 30 "$pid_b" "instance b"
pid_b=
took=$(($(now_ms) - start))

for who in a b; do
    grep -qE "^exports of $who: 12 of 12 done, at most [123] running at once \(limit 3\)" "$work/$who.out" ||
        fail "instance $who did not report its 12 exports done within the limit"
    [ "$(grep -cE "^export [0-9]+ \($who-[AB]\): started, fence [0-9]+, [123] running$" "$work/$who.out")" = 12 ] ||
        fail "instance $who did not start 12 exports with at most 3 running"
    [ "$(grep -cE "^export [0-9]+ \($who-[AB]\): done$" "$work/$who.out")" = 12 ] ||
        fail "instance $who did not finish 12 exports"
done
# 24 fences, all different, over both instances.
[ "$(sed -n 's/^export .*: started, fence \([0-9]*\),.*/\1/p' "$work/a.out" "$work/b.out" | sort -u | wc -l)" = 24 ] ||
    fail "the 24 permits did not have 24 different fences"

peak=$(rcli GET "{$name}:running:peak")
[ "$peak" = 3 ] || fail "the exports running at once peaked at '$peak' at the server, expected 3"
[ "$(rcli GET "{$name}:running")" = 0 ] || fail "exports still counted as running"
[ "$(rcli ZCARD "colock:semaphore:{$name}:h")" = 0 ] || fail "permits still held"
[ "$(rcli HGET "colock:semaphore:{$name}" capacity)" = 3 ] || fail "the capacity at the server is not 3"
keys=0
while IFS= read -r key; do
    [ -n "$key" ] || continue
    keys=$((keys + 1))
    ttl=$(rcli PTTL "$key")
    [ "$ttl" -gt 0 ] || fail "key $key has no TTL (PTTL $ttl)"
done < <(rcli --scan --pattern "colock:semaphore:{$name}*")
[ "$keys" -ge 1 ] || fail "no key of the semaphore found (the key layout changed?)"

echo "semaphore_exports_test: 24 exports over 4 lockers in 2 processes, at most 3 at once" \
    "(peak 3 at the server); the semaphore's $keys remaining key(s) each have a TTL; ${took} ms; ok"
