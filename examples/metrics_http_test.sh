#!/usr/bin/env bash
# Usage: metrics_http_test.sh EXAMPLE_PROGRAM   (under scripts/with-redis.sh)
#
# Runs the metrics example against the server in COLOCK_REDIS_URL, scrapes /metrics twice with
# curl and checks that the counters move, that locks were handed over locally and none was
# lost, that other paths are 404, and that SIGTERM ends the program cleanly.
set -euo pipefail

program=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/colock-metrics.XXXXXX")
pid=
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "metrics_http_test: $*" >&2
    echo "--- program output:" >&2
    cat "$work/out" "$work/err" >&2 || true
    exit 1
}

"$program" --workers 8 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 100); do
    grep -q '^listening on ' "$work/out" && break
    kill -0 "$pid" 2>/dev/null || fail "the program exited before listening"
    sleep 0.1
done
url=$(sed -n 's/^listening on //p' "$work/out")
[ -n "$url" ] || fail "no 'listening on' line within 10 s"

# The sum of a metric's samples (all its label sets).
metric() { awk -v name="$2" '$1 == name || index($1, name "{") == 1 { s += $2 } END { print s + 0 }' <<<"$1"; }

sleep 0.3
first=$(curl -sSf "$url") || fail "GET $url failed"
sleep 0.5
second=$(curl -sSf "$url") || fail "GET $url failed"

grep -q '^# TYPE colock_acquired_total counter$' <<<"$second" || fail "no TYPE line for colock_acquired_total"
grep -q '^# HELP colock_lost_total ' <<<"$second" || fail "no HELP line for colock_lost_total"
grep -q '^colock_acquired_total{kind="lock",how="retained"} ' <<<"$second" ||
    fail "no retained sample of colock_acquired_total"
a1=$(metric "$first" colock_acquired_total)
a2=$(metric "$second" colock_acquired_total)
r1=$(metric "$first" colock_released_total)
r2=$(metric "$second" colock_released_total)
local2=$(awk '$1 == "colock_acquired_total{kind=\"lock\",how=\"local_handoff\"}" { print $2 }' <<<"$second")
# The family's holdings, each under its kind.
family=""
for kind in semaphore rw_lock election; do
    n=$(awk -v k="$kind" 'index($1, "colock_acquired_total{kind=\"" k "\"") == 1 { s += $2 } END { print s + 0 }' <<<"$second")
    family+=" $kind $n"
    awk -v n="$n" 'BEGIN { exit !(n > 0) }' || fail "no $kind acquisition counted under its kind"
done
lost=$(metric "$second" colock_lost_total)
echo "metrics_http_test: acquired $a1 -> $a2, released $r1 -> $r2, handed locally $local2, lost $lost;$family"
awk -v a="$a1" -v b="$a2" 'BEGIN { exit !(b > a && a > 0) }' || fail "colock_acquired_total did not grow ($a1 -> $a2)"
awk -v a="$r1" -v b="$r2" 'BEGIN { exit !(b > a) }' || fail "colock_released_total did not grow ($r1 -> $r2)"
awk -v n="${local2:-0}" 'BEGIN { exit !(n > 0) }' || fail "no local hand-off counted with 8 workers on 2 names"
[ "$lost" = 0 ] || fail "$lost leases lost"

code=$(curl -s -o /dev/null -w '%{http_code}' "${url%/metrics}/other")
[ "$code" = 404 ] || fail "GET /other answered $code, not 404"

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" = 0 ] || fail "exit status $status after SIGTERM"
grep -q '^stopped: ' "$work/out" || fail "no 'stopped:' line"
echo "metrics_http_test: ok"
