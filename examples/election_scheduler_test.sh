#!/usr/bin/env bash
# Usage: election_scheduler_test.sh EXAMPLE_PROGRAM   (under scripts/with-redis.sh)
#
# Two instances of the election example against the server in COLOCK_REDIS_URL: A leads and
# runs its job; B (with --watch) waits in the election's queue; SIGTERM to A makes it resign and
# exit 0, and B must lead at once with a higher term, run its job under that term, and have its
# watch report the hand-over; then SIGTERM to B. Fails when B never takes over (within a bound),
# when either instance exits other than 0, or when a line it must print is missing.
set -euo pipefail

program=$1
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
name="example:scheduler:$$"
queue_key="colock:election:{$name}:q"
work=$(mktemp -d "${TMPDIR:-/tmp}/colock-election.XXXXXX")
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
    echo "election_scheduler_test: $*" >&2
    local who
    for who in a b; do
        echo "--- instance ${who^^} output:" >&2
        cat "$work/$who.out" "$work/$who.err" >&2 2>/dev/null || true
    done
    exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_for SECONDS FILE PATTERN PID WHAT: until FILE has a line matching PATTERN (grep -E).
wait_for() {
    local limit=$(($(now_ms) + $1 * 1000))
    while ! grep -qE -- "$3" "$2"; do
        kill -0 "$4" 2>/dev/null || fail "$5: the instance exited first"
        [ "$(now_ms)" -lt "$limit" ] || fail "$5: not within $1 s"
        sleep 0.02
    done
}

# wait_exit SECONDS PID WHAT: the instance's exit status, which must be 0.
wait_exit() {
    local limit=$(($(now_ms) + $1 * 1000)) status=0
    while kill -0 "$2" 2>/dev/null; do
        [ "$(now_ms)" -lt "$limit" ] || fail "$3 still running $1 s after SIGTERM"
        sleep 0.02
    done
    wait "$2" || status=$?
    [ "$status" = 0 ] || fail "$3 exited with status $status after SIGTERM"
}

start=$(now_ms)
"$program" --name "$name" --value A --tick 100 >"$work/a.out" 2>"$work/a.err" &
pid_a=$!
wait_for 5 "$work/a.out" '^leading: term [0-9]+ as A$' "$pid_a" "A leading"
grep -qx 'leader at start: none' "$work/a.out" || fail "A did not report that nobody led at start"
term_a=$(sed -n 's/^leading: term \([0-9]*\) as A$/\1/p' "$work/a.out")
wait_for 3 "$work/a.out" "^tick 2: term $term_a, written$" "$pid_a" "A's job writing twice"

"$program" --name "$name" --value B --tick 100 --watch >"$work/b.out" 2>"$work/b.err" &
pid_b=$!
wait_for 5 "$work/b.out" "^watch: A leads, term $term_a$" "$pid_b" "B's watch seeing A lead"
grep -qE "^leader at start: A \(term $term_a, pid [0-9]+ on .+\)$" "$work/b.out" ||
    fail "B did not report A (term $term_a, its process) as the leader at start"
# B is queued for the election when its locker's entry is in the election's queue.
limit=$(($(now_ms) + 3000))
until [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN "$queue_key" 2>/dev/null || echo 0)" -ge 1 ]; do
    [ "$(now_ms)" -lt "$limit" ] || fail "B not queued for the election within 3 s"
    sleep 0.02
done
grep -q '^leading:' "$work/b.out" && fail "B leads while A still does"

resign_at=$(now_ms)
kill -TERM "$pid_a"
# B leads within 2 s of the SIGTERM: a resign hands over at once; the lease (5 s) never lapses.
wait_for 2 "$work/b.out" '^leading: term [0-9]+ as B$' "$pid_b" "B taking over after A's SIGTERM"
took_over_ms=$(($(now_ms) - resign_at))
wait_exit 3 "$pid_a" "A"
pid_a=
grep -qx "resigned: term $term_a" "$work/a.out" || fail "A did not report its resign"
term_b=$(sed -n 's/^leading: term \([0-9]*\) as B$/\1/p' "$work/b.out")
[ "$term_b" -gt "$term_a" ] || fail "B's term $term_b is not above A's $term_a"
wait_for 2 "$work/b.out" "^tick 1: term $term_b, written$" "$pid_b" "B's job writing"
wait_for 2 "$work/b.out" "^watch: B leads, term $term_b$" "$pid_b" "B's watch seeing B lead"
grep -q 'refused' "$work/a.out" "$work/b.out" && fail "a write was refused"

kill -TERM "$pid_b"
wait_exit 3 "$pid_b" "B"
pid_b=
grep -qx "resigned: term $term_b" "$work/b.out" || fail "B did not report its resign"
# Nothing left in the election's queue (B's entry goes when it is granted the lease).
limit=$(($(now_ms) + 1000))
until [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN "$queue_key")" = 0 ]; do
    [ "$(now_ms)" -lt "$limit" ] || fail "an entry is left in the election's queue"
    sleep 0.02
done
echo "election_scheduler_test: A led term $term_a; B took over with term $term_b" \
    "${took_over_ms} ms after A's SIGTERM; $(($(now_ms) - start)) ms in all; ok"
