#!/usr/bin/env bash
# Usage: colock_cluster_test.sh COLOCK_BINARY   (under scripts/with-redis.sh --cluster)
#
# Checks the colock tool against the Redis Cluster in COLOCK_REDIS_URL: `exec` on names whose
# slots are on every primary, then `list` finds all of them (SCAN runs on each primary), `status`
# and `unlock --force` reach the right node, and `list` with a pattern narrows the result; `elect`
# runs its command while `leader` shows it leading, and nobody leads once it has resigned;
# `exec --wait 0` takes free locks on every primary; `exec --permits` holds its permit on the
# name's node while its command runs, and another capacity for the name is refused (exit 123).

set -euo pipefail

colock=$1
: "${COLOCK_REDIS_URL:?run under scripts/with-redis.sh --cluster}"
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}

holder="" # the background exec, ended on the way out

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ -n "$holder" ]; then { kill -TERM "$holder" && wait "$holder"; } 2>/dev/null || true; fi
}
trap cleanup EXIT

fail() {
    echo "colock_cluster_test: FAIL: $*" >&2
    exit 1
}

# The primaries' ports: the seeds whose ROLE is master.
seeds=${COLOCK_REDIS_URL#redis-cluster://}
primaries=()
for seed in ${seeds//,/ }; do
    port=${seed##*:}
    if [ "$("$redis_cli" -p "$port" ROLE | head -1)" = master ]; then
        primaries+=("$port")
    fi
done
[ "${#primaries[@]}" -ge 3 ] || fail "expected 3 primaries, found ${#primaries[@]}"

# Twelve names: each lock is taken and released; its key keeps the fence, so list shows it.
names=()
for i in $(seq 1 12); do
    names+=("job:$i")
    "$colock" exec --wait 5s "job:$i" -- true || fail "exec job:$i"
done
"$colock" exec --wait 5s "other" -- true || fail "exec other"

# The keys are on more than one primary: otherwise this test would not show much.
holding=0
for port in "${primaries[@]}"; do
    count=$("$redis_cli" -p "$port" --scan --pattern 'colock:{*}' | grep -c '}$' || true)
    [ "$count" -gt 0 ] && holding=$((holding + 1))
done
[ "$holding" -ge 2 ] || fail "the lock keys are on $holding primaries; expected several"

listed=$("$colock" list 'job:*' | tail -n +2 | awk '{print $1}' | sort)
expected=$(printf '%s\n' "${names[@]}" | sort)
[ "$listed" = "$expected" ] || fail "list 'job:*' gave:
$listed
expected:
$expected"
all=$("$colock" list --json | grep -c '"name"')
[ "$all" -eq 13 ] || fail "list --json gave $all locks, expected 13"

# A held lock, on whatever primary its slot is: status finds it and a forced unlock ends it.
"$colock" exec --wait 5s job:7 -- sleep 30 &
holder=$!
for _ in $(seq 1 100); do
    "$colock" status job:7 >/dev/null 2>&1 && break
    sleep 0.1
done
"$colock" status job:7 >/dev/null || fail "status job:7: not held while exec runs"
"$colock" list 'job:7' | grep -q 'held' || fail "list 'job:7' does not show it held"
"$colock" unlock --force job:7 >/dev/null || fail "unlock --force job:7"
set +e
wait "$holder"
code=$?
set -e
holder=""
[ "$code" -eq 121 ] || fail "exec of job:7 exited $code after the forced unlock, expected 121"
# An election: its command asks who leads (the tool's own environment names the cluster).
for name in el:1 el:2 el:3; do
    out=$("$colock" elect --wait 5s --value "v-$name" "$name" -- "$colock" leader --json "$name") ||
        fail "elect $name"
    case $out in
    *'"leading":true,"value":"v-'"$name"'"'*) ;;
    *) fail "leader --json $name while it leads printed: $out" ;;
    esac
    set +e
    "$colock" leader "$name" >/dev/null
    code=$?
    set -e
    [ "$code" -eq 1 ] || fail "leader $name after the leader resigned exited $code, expected 1"
done
# --wait 0 (one attempt) takes a free lock on whatever primary its slot is, though the tool has
# no connection to that node yet when it makes the attempt.
for name in once:1 once:2 once:3 once:4 once:5 once:6; do
    "$colock" exec --wait 0 "$name" -- true || fail "exec --wait 0 $name of a free lock"
done
# A semaphore's permit, on names over the primaries, in one attempt (--wait 0): held at the server
# (redis-cli -c follows the slot to its node) while the command runs; another capacity refused
# while the semaphore's keys live.
for name in sem:1 sem:2 sem:3; do
    held=$("$colock" exec --permits 2 --wait 0 "$name" -- \
        "$redis_cli" -c -p "${primaries[0]}" ZCARD "colock:semaphore:{$name}:h") ||
        fail "exec --permits 2 $name"
    [ "$held" = 1 ] || fail "exec --permits 2 $name: $held permits held while its command ran, expected 1"
    set +e
    "$colock" exec --permits 3 --wait 0 "$name" -- true 2>/dev/null
    code=$?
    set -e
    [ "$code" -eq 123 ] || fail "exec --permits 3 $name of a semaphore of 2 exited $code, expected 123"
done
echo "colock_cluster_test: ok"
