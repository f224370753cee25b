#!/usr/bin/env bash
# Usage: fenced_sql_test.sh EXAMPLE_PROGRAM   (under scripts/with-redis.sh and
#                                              scripts/with-postgres.sh)
#
# The paused holder of Kleppmann's critique, at two resources: holder A takes the lock, checks
# that it holds it, and is stopped (SIGSTOP) before its writes; its 1 s lease runs out; holder B
# takes the lock and writes the job's row in PostgreSQL and its status in Redis; A resumes and
# writes with its old fence. Both resources must refuse A (exit 3) and keep B's value, with B's
# fence in the row. First, one plain run writes both (exit 0).
set -euo pipefail

program=$1
: "${COLOCK_REDIS_URL:?run under scripts/with-redis.sh}"
: "${COLOCK_PG_URL:?run under scripts/with-postgres.sh}"
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
job="j$$"
work=$(mktemp -d "${TMPDIR:-/tmp}/colock-fenced-sql.XXXXXX")
pid_a=
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ -n "$pid_a" ] && kill -0 "$pid_a" 2>/dev/null; then
        kill -CONT "$pid_a" 2>/dev/null || true
        kill -KILL "$pid_a" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "fenced_sql_test: $*" >&2
    local who
    for who in first a b; do
        echo "--- $who:" >&2
        cat "$work/$who.out" "$work/$who.err" >&2 2>/dev/null || true
    done
    exit 1
}

row() { psql "$COLOCK_PG_URL" -XAtc "SELECT state || ' ' || fence FROM jobs WHERE id = '$job'"; }
status_field() { "$redis_cli" -u "$COLOCK_REDIS_URL" HGET "job:{$job}" state; }
# Waits up to $2 seconds for a line starting with $3 in file $1.
wait_line() {
    local _
    for _ in $(seq $(($2 * 20))); do
        grep -q "^$3" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# 1. One holder: both writes applied.
status=0
"$program" "$job" first >"$work/first.out" 2>"$work/first.err" || status=$?
[ "$status" = 0 ] || fail "a plain run exited $status, expected 0"
[ "$(status_field)" = first ] || fail "the status in Redis is '$(status_field)', expected 'first'"
read -r state fence1 <<<"$(row)"
[ "$state" = first ] || fail "the row holds '$state', expected 'first'"

# 2. A paused between its check and its writes; B takes over; A's late writes are refused.
mkfifo "$work/a.in"
"$program" --pause "$job" from-A <"$work/a.in" >"$work/a.out" 2>"$work/a.err" &
pid_a=$!
exec 3>"$work/a.in"
wait_line "$work/a.out" 10 paused || fail "A did not reach its pause"
fence_a=$(sed -n 's/^acquired fence //p' "$work/a.out")
[ "$fence_a" -gt "$fence1" ] || fail "A's fence $fence_a is not above the first run's $fence1"
kill -STOP "$pid_a"
stopped_ms=$(($(date +%s%N) / 1000000))
status=0
"$program" "$job" from-B >"$work/b.out" 2>"$work/b.err" || status=$?
[ "$status" = 0 ] || fail "B exited $status, expected 0 (both writes applied)"
took=$(($(date +%s%N) / 1000000 - stopped_ms))
fence_b=$(sed -n 's/^acquired fence //p' "$work/b.out")
[ "$fence_b" -gt "$fence_a" ] || fail "B's fence $fence_b is not above A's $fence_a"
kill -CONT "$pid_a"
echo go >&3
exec 3>&-
status=0
wait "$pid_a" || status=$?
pid_a=
[ "$status" = 3 ] || fail "A exited $status after resuming, expected 3 (both writes refused)"
grep -q '^row: refused' "$work/a.out" || fail "A's row write was not refused"
grep -q '^status: refused.*fence' "$work/a.out" || fail "A's status write was not refused"
[ "$(row)" = "from-B $fence_b" ] || fail "the row holds '$(row)', expected 'from-B $fence_b'"
[ "$(status_field)" = from-B ] || fail "the status in Redis is '$(status_field)', expected 'from-B'"
"$redis_cli" -u "$COLOCK_REDIS_URL" DEL "job:{$job}" "job:{$job}:fence" >/dev/null
echo "fenced_sql_test: ok: B took over $took ms after A stopped; A's late writes (fence $fence_a)" \
    "refused in PostgreSQL and in Redis, B's (fence $fence_b) kept"
