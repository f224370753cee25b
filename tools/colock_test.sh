#!/usr/bin/env bash
# Usage: colock_test.sh COLOCK_BINARY   (under scripts/with-redis.sh)
#
# Checks the colock tool against the server in COLOCK_REDIS_URL: mutual exclusion of two
# `exec`s, exit statuses passed through, a lock not acquired within --wait, a lease lost to a
# deleted key and to a forced unlock (the command gets SIGTERM), status, list, usage errors, an
# unreachable server, and SIGTERM passed on to the command; `elect` and `leader`: a hand-over
# between two candidates, `leader` (text, JSON, nobody leading), `leader --watch --json`, a lost
# leadership; `exec --permits`: two commands at once under a semaphore of 2 while a third waits,
# --wait 0 with no permit free, another capacity (exit 123), a lost permit, usage errors;
# `exec --shared` / `--exclusive`: two readers at once, a reader after a waiting writer refused,
# the writer after both; the command's environment (COLOCK_NAME, COLOCK_FENCE, COLOCK_TOKEN,
# checked against what the server holds) under a lock, a permit, a write lock and a
# leadership. Every
# wait polls for its condition with a bound; nothing relies on a fixed sleep
# being long enough.

# shellcheck disable=SC2016 # single-quoted strings are scripts for sh -c, expanded there
set -euo pipefail

colock=$1
: "${COLOCK_REDIS_URL:?run under scripts/with-redis.sh}"
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
work=$(mktemp -d "${TMPDIR:-/tmp}/colock-tool.XXXXXX")
bg_pids=() # the colock processes started in the background

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local p f
    for p in "${bg_pids[@]}"; do
        { kill -KILL "$p" && wait "$p"; } 2>/dev/null || true
    done
    # The commands write their own pid to $work/*.pid: end those that outlived their colock.
    for f in "$work"/*.pid; do
        [ -f "$f" ] || continue
        p=$(cat "$f" 2>/dev/null) || continue
        if [ -n "$p" ]; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "colock_test: FAIL: $*" >&2
    for f in "$work"/*.out "$work"/*.err; do
        [ -s "$f" ] || continue
        echo "--- $(basename "$f"):" >&2
        cat "$f" >&2
    done
    exit 1
}
pass() { echo "colock_test: ok: $*"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 50 ms until it succeeds.
wait_until() {
    local limit=$1 what=$2
    shift 2
    local deadline=$(($(now_ms) + limit * 1000))
    until "$@"; do
        [ "$(now_ms)" -lt "$deadline" ] || fail "no $what within ${limit}s"
        sleep 0.05
    done
}

# wait_exit PID SECONDS: waits for a background process to end, within a bound; sets $s to its
# exit status. (Not in a $(...) subshell, which could not wait for this shell's children.)
wait_exit() {
    local pid=$1 limit=$2
    wait_until "$limit" "exit of process $pid" eval "! kill -0 $pid 2>/dev/null"
    s=0
    wait "$pid" || s=$?
}

# run_colock NAME ARGS...: runs colock in the foreground, output in $work/NAME.out and .err;
# sets $status and $took (ms).
run_colock() {
    local name=$1
    shift
    local start
    start=$(now_ms)
    status=0
    "$colock" "$@" >"$work/$name.out" 2>"$work/$name.err" || status=$?
    took=$(($(now_ms) - start))
}

# start_holder NAME ARGS... -- COMMAND: colock in the background; its pid in $holder.
start_holder() {
    local name=$1
    shift
    "$colock" "$@" >"$work/$name.out" 2>"$work/$name.err" &
    holder=$!
    bg_pids+=("$holder")
}

# A command that records its pid in $1, writes "term" to $2 on SIGTERM and exits with 3, and
# otherwise runs for at most 60 s.
trapping_command=(sh -c 'trap "echo term > \"$2\"; exit 3" TERM; echo $$ > "$1"
    i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done' sh)
# A command that records its pid in $1 (exec: the pid is the sleep's) and sleeps 60 s.
sleeping_command=(sh -c 'echo $$ > "$1"; exec sleep 60' sh)

expect_status() { # EXPECTED WHAT
    [ "$status" = "$1" ] || fail "$2: exit status $status, expected $1"
}

# --- 8. usage errors: exit 2 and a usage line on stderr -----------------------------------------
check_usage() { # WHAT ARGS...
    local what=$1
    shift
    run_colock usage "$@"
    expect_status 2 "$what"
    grep -q '^usage: colock' "$work/usage.err" || fail "$what: no usage line on stderr"
    grep -q "^try 'colock --help'" "$work/usage.err" || fail "$what: no 'try colock --help'"
    grep -q '^colock: ' "$work/usage.err" || fail "$what: no 'colock: ' message"
}
check_usage "no arguments"
check_usage "an unknown subcommand" frobnicate x
check_usage "exec without --" exec name true
check_usage "a bad duration" exec --ttl 5x name -- true
grep -q -- "--ttl.*'5x'" "$work/usage.err" || fail "the bad duration's message names neither option nor value"
check_usage "a bad duration after =" exec --wait=soon name -- true
check_usage "unlock without --force" unlock name
grep -q -- '--force' "$work/usage.err" || fail "unlock without --force: the message does not say why"
check_usage "an unknown option" status --bogus name
check_usage "a missing name" status
check_usage "exec without a command" exec name --
check_usage "elect without --" elect name true
grep -q "missing '--' between the election name and the command" "$work/usage.err" ||
    fail "elect without --: the message does not say what is missing"
check_usage "elect without a name" elect -- true
grep -q "elect: missing the election name" "$work/usage.err" || fail "elect without a name: wrong message"
check_usage "a too short elect --ttl" elect --ttl 1ms name -- true
grep -q -- "--ttl 1ms: too short" "$work/usage.err" || fail "elect --ttl 1ms: wrong message"
check_usage "elect --watch" elect --watch name -- true
grep -q "elect: unknown option '--watch'" "$work/usage.err" || fail "elect --watch: wrong message"
check_usage "leader without a name" leader --json
grep -q "leader: missing the election name" "$work/usage.err" || fail "leader without a name: wrong message"
check_usage "leader --value" leader --value v name
grep -q "leader: unknown option '--value'" "$work/usage.err" || fail "leader --value: wrong message"
check_usage "exec --permits 0" exec --permits 0 name -- true
grep -q -- "exec: --permits: bad capacity '0' (a whole number from 1 to 1000000)" "$work/usage.err" ||
    fail "exec --permits 0: wrong message"
check_usage "exec --permits of a non-number" exec --permits two name -- true
grep -q -- "--permits: bad capacity 'two'" "$work/usage.err" || fail "exec --permits two: wrong message"
check_usage "exec --permits of a negative number" exec --permits=-1 name -- true
check_usage "exec --permits above 1000000" exec --permits 1000001 name -- true
grep -q -- "--permits: bad capacity '1000001'" "$work/usage.err" || fail "exec --permits 1000001: wrong message"
check_usage "exec --permits without a value" exec name --permits
check_usage "status --permits" status --permits 2 name
grep -q "status: --permits is an option of exec only" "$work/usage.err" || fail "status --permits: wrong message"
check_usage "elect --permits" elect --permits 2 name -- true
grep -q "elect: --permits is an option of exec only" "$work/usage.err" || fail "elect --permits: wrong message"
run_colock help --help
expect_status 0 "--help"
grep -q '^exit status:' "$work/help.out" || fail "--help lists no exit codes"
grep -q '121' "$work/help.out" || fail "--help does not name the lost code"
grep -q '^  colock \[OPTIONS\] elect \[--value V\]' "$work/help.out" || fail "--help shows no elect"
grep -q '^  colock \[OPTIONS\] leader \[--json\] \[--watch\] NAME' "$work/help.out" || fail "--help shows no leader"
grep -q '^  colock \[OPTIONS\] exec \[--permits N | --shared | --exclusive\]' "$work/help.out" || fail "--help shows no exec --permits"
grep -q '^  123 ' "$work/help.out" || fail "--help does not name the capacity mismatch code"
run_colock help exec --help
expect_status 0 "exec --help"
run_colock version --version
expect_status 0 "--version"
grep -qE '^colock [0-9]+\.[0-9]+' "$work/version.out" || fail "--version printed $(cat "$work/version.out")"
pass "usage errors exit 2 with a usage line; --help and --version exit 0"

# --- 9. an unreachable server: exit 122 naming the endpoint, fast ------------------------------
for sub in "status x" "exec x -- true"; do
    # shellcheck disable=SC2086 # the subcommand's words
    run_colock unreachable --url redis://127.0.0.1:1 $sub
    expect_status 122 "unreachable server ($sub)"
    grep -q '127.0.0.1:1' "$work/unreachable.err" || fail "unreachable server: the message does not name the endpoint"
    [ "$took" -lt 5000 ] || fail "unreachable server: took $took ms"
done
pass "an unreachable server gives 122, naming 127.0.0.1:1, in $took ms"

# --- 1. two execs racing for one name: their commands never overlap ----------------------------
stamps=$work/stamps
critical='echo "start $(date +%s%N)" >> "$1"; sleep 0.5; echo "end $(date +%s%N)" >> "$1"'
"$colock" exec --wait 30s race -- sh -c "$critical" sh "$stamps" >"$work/race1.out" 2>"$work/race1.err" &
p1=$!
bg_pids+=("$p1")
"$colock" exec --wait 30s race -- sh -c "$critical" sh "$stamps" >"$work/race2.out" 2>"$work/race2.err" &
p2=$!
bg_pids+=("$p2")
wait_exit "$p1" 60
s1=$s
wait_exit "$p2" 60
s2=$s
if [ "$s1" != 0 ] || [ "$s2" != 0 ]; then
    fail "racing execs exited $s1 and $s2, expected 0 and 0"
fi
[ "$(awk '{ printf "%s ", $1 }' "$stamps")" = "start end start end " ] ||
    fail "the two commands overlapped: $(tr '\n' ' ' <"$stamps")"
awk 'NR > 1 && $2 < prev { exit 1 } { prev = $2 }' "$stamps" ||
    fail "time stamps out of order: $(tr '\n' ' ' <"$stamps")"
pass "two racing execs ran one after the other, both exit 0"

# --- 2. exit statuses pass through, and the lock is released after the command -----------------
run_colock st exec st -- sh -c 'exit 7'
expect_status 7 "exec of 'exit 7'"
run_colock st exec st -- sh -c 'kill -KILL $$'
expect_status 137 "exec of a command killed by SIGKILL"
run_colock st exec st -- sh -c 'kill -USR1 $$'
expect_status $((128 + $(kill -l USR1))) "exec of a command killed by SIGUSR1"
run_colock st status st
expect_status 1 "status after the command ended (released)"
run_colock st exec st -- /nonexistent/command
expect_status 127 "exec of a missing path"
run_colock st exec st -- colock-no-such-command
expect_status 127 "exec of a command not in PATH"
grep -q 'command not found' "$work/st.err" || fail "exec of a missing command: no 'command not found'"
printf '#!/bin/sh\n' >"$work/not-executable"
chmod 644 "$work/not-executable"
run_colock st exec st -- "$work/not-executable"
expect_status 126 "exec of a file that is not executable"
run_colock st status st
expect_status 1 "status after a failed exec (released)"
pass "exit statuses 7, 137, 128+SIGUSR1, 127, 126 passed through; the lock released each time"

# --- 3. not acquired within --wait: 120, quickly ------------------------------------------------
start_holder held exec busy -- "${sleeping_command[@]}" "$work/held.pid"
wait_until 10 "holder command" test -s "$work/held.pid"
run_colock busy exec --wait 200ms busy -- true
expect_status 120 "exec --wait 200ms of a held lock"
[ "$took" -ge 150 ] || fail "exec --wait 200ms gave up after $took ms"
[ "$took" -lt 3000 ] || fail "exec --wait 200ms took $took ms"
grep -q 'not acquired within 200ms' "$work/busy.err" || fail "exec --wait 200ms: no 'not acquired' message"
run_colock busy exec --wait 0 busy -- true
expect_status 120 "exec --wait 0 of a held lock"
[ "$took" -lt 3000 ] || fail "exec --wait 0 took $took ms"
kill -TERM "$holder"
wait_exit "$holder" 10
[ "$s" = 143 ] || fail "the holder (sleep) exited $s after SIGTERM, expected 143"
pass "a held lock: --wait 200ms and --wait 0 exit 120 (in $took ms for --wait 0)"

# --- 3b. a waiter ended by SIGTERM exits 143 and takes its entry out of the queue in Redis ------
# (Left behind, it would be handed the next release and hold the lock up for a 1 s claim.) The
# removal is a script the waiter runs after its wait was cancelled; SCRIPT FLUSH makes the server
# ask for the script first (NOSCRIPT), the slow path that an exit right after the cancellation
# cuts off. The removal still races the tool's exit, so the check runs several times.
start_holder qholder exec qn -- "${sleeping_command[@]}" "$work/qholder.pid"
qholder=$holder
wait_until 10 "holder command" test -s "$work/qholder.pid"
qlen() { "$redis_cli" -u "$COLOCK_REDIS_URL" LLEN 'colock:{qn}:q'; }
for round in 1 2 3 4; do
    "$redis_cli" -u "$COLOCK_REDIS_URL" SCRIPT FLUSH >/dev/null
    start_holder qwaiter exec --wait 30s qn -- true
    wait_until 10 "the waiter's entry in the queue" eval '[ "$(qlen)" -ge 1 ]'
    # Let its attempt's reply arrive, so that SIGTERM finds it asleep in the queue (the case to
    # check). A machine too slow for this pause makes the check weaker, never wrongly failed.
    sleep 0.2
    kill -TERM "$holder"
    wait_exit "$holder" 10
    [ "$s" = 143 ] || fail "a waiter ended by SIGTERM exited $s, expected 143"
    [ "$(qlen)" = 0 ] || fail "round $round: the departed waiter left its entry in colock:{qn}:q"
done
kill -TERM "$qholder"
wait_exit "$qholder" 10
pass "a waiter ended by SIGTERM exits 143 and leaves the queue in Redis (4 rounds)"

# --- 4. lease lost (key deleted): the command gets SIGTERM, colock exits 121 --------------------
start_holder lost exec --ttl=2s --grace 10s lost -- "${trapping_command[@]}" "$work/lost.pid" "$work/lost.term"
wait_until 10 "holder command" test -s "$work/lost.pid"
"$redis_cli" -u "$COLOCK_REDIS_URL" DEL 'colock:{lost}' >/dev/null
deleted=$(now_ms)
wait_exit "$holder" 10
took=$(($(now_ms) - deleted))
[ "$s" = 121 ] || fail "exec whose key was deleted exited $s, expected 121"
[ -s "$work/lost.term" ] || fail "the command did not get SIGTERM when the lease was lost"
[ "$took" -lt 5000 ] || fail "the loss took $took ms to act on (renewal every 667 ms)"
grep -q "lost the lock 'lost'" "$work/lost.err" || fail "no message on the lost lease"
pass "a deleted key: SIGTERM to the command, exit 121, $took ms after the DEL"

# --- 4b. a command that ignores SIGTERM gets SIGKILL after --grace ------------------------------
start_holder stubborn exec --ttl 2s --grace 300ms stubborn -- sh -c 'trap "" TERM; echo $$ > "$1"
    i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done' sh "$work/stubborn.pid"
wait_until 10 "holder command" test -s "$work/stubborn.pid"
"$redis_cli" -u "$COLOCK_REDIS_URL" DEL 'colock:{stubborn}' >/dev/null
wait_exit "$holder" 10
[ "$s" = 121 ] || fail "exec of a command that ignores SIGTERM exited $s after the loss, expected 121"
grep -q 'SIGKILL' "$work/stubborn.err" || fail "no SIGKILL reported after --grace"
kill -0 "$(cat "$work/stubborn.pid")" 2>/dev/null && fail "the command that ignored SIGTERM still runs"
pass "a command that ignores SIGTERM is killed after --grace"

# --- 5. forced unlock: the holder is told at once -----------------------------------------------
start_holder forced exec --ttl 30s forced -- "${trapping_command[@]}" "$work/forced.pid" "$work/forced.term"
wait_until 10 "holder command" test -s "$work/forced.pid"
run_colock unlock unlock --force forced
expect_status 0 "unlock --force of a held lock"
grep -q 'ended the lease' "$work/unlock.out" || fail "unlock --force did not say it ended the lease"
# Far below the 10 s renewal interval: only the message to the holder's locker explains it.
wait_until 2 "SIGTERM to the command of the forced-out holder" test -s "$work/forced.term"
wait_exit "$holder" 10
[ "$s" = 121 ] || fail "the forced-out holder exited $s, expected 121"
run_colock unlock unlock --force forced
expect_status 1 "a second unlock --force"
pass "unlock --force: exit 0, the holder's command got SIGTERM within 2 s, holder exit 121; again: 1"

# --- 6. status ----------------------------------------------------------------------------------
start_holder stat exec stat -- "${trapping_command[@]}" "$work/stat.pid" "$work/stat.term"
stat_holder=$holder
wait_until 10 "holder command" test -s "$work/stat.pid"
run_colock status status stat
expect_status 0 "status of a held lock"
grep -qx "pid: *$stat_holder" "$work/status.out" || fail "status does not show the holder's pid $stat_holder"
grep -qx "host: *$(uname -n)" "$work/status.out" || fail "status does not show the host $(uname -n)"
grep -qx "state: *held" "$work/status.out" || fail "status does not say held"
run_colock status status --json stat
expect_status 0 "status --json of a held lock"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["state"] == "held", d
assert d["name"] == "stat", d
assert d["holder"]["pid"] == int(sys.argv[2]), d
assert d["holder"]["client_name"] == "colock-cli", d
assert d["fence"] > 0 and d["ttl_ms"] > 0, d
' "$work/status.out" "$stat_holder" || fail "status --json: $(cat "$work/status.out")"

# --- 7. list (while "stat" is held, with a second holder and a free key) ------------------------
start_holder list2 exec list:b -- "${sleeping_command[@]}" "$work/list2.pid"
list2_holder=$holder
wait_until 10 "second holder command" test -s "$work/list2.pid"
run_colock list exec --ttl 60s list:free -- true
expect_status 0 "exec of true"
"$redis_cli" -u "$COLOCK_REDIS_URL" SET 'colock:{list:gone}:qd' decoy >/dev/null
run_colock list list
expect_status 0 "list"
awk '$1 == "stat" && $2 == "held" { f = 1 } END { exit !f }' "$work/list.out" || fail "list does not show 'stat' held"
awk '$1 == "list:b" && $2 == "held" { f = 1 } END { exit !f }' "$work/list.out" || fail "list does not show 'list:b' held"
awk '$1 == "list:free" && $2 == "free" { f = 1 } END { exit !f }' "$work/list.out" || fail "list does not show 'list:free' free"
grep -q ':qd' "$work/list.out" && fail "list shows a queue key as a lock"
head -n 1 "$work/list.out" | grep -q '^NAME  *STATE  *HOLDER  *PID  *HOST  *TTL  *FENCE  *QUEUED$' ||
    fail "list has no header line"
run_colock list list --json
expect_status 0 "list --json"
python3 -c '
import json, sys
d = {x["name"]: x for x in json.load(open(sys.argv[1]))}
assert d["stat"]["state"] == "held" and d["list:b"]["state"] == "held", d
assert d["list:free"]["state"] == "free", d
' "$work/list.out" || fail "list --json: $(cat "$work/list.out")"
run_colock list list 'list:*'
expect_status 0 "list PATTERN"
awk 'NR > 1 { print $1 }' "$work/list.out" | sort | tr '\n' ' ' | grep -qx 'list:b list:free ' ||
    fail "list 'list:*' shows $(awk 'NR > 1 { print $1 }' "$work/list.out" | tr '\n' ' ')"
# A prefix with glob characters matches itself only.
run_colock list --prefix 'p[1]:' exec --ttl 60s odd -- true
"$redis_cli" -u "$COLOCK_REDIS_URL" SET 'p1:{decoy}' x >/dev/null
run_colock list list --prefix 'p[1]:' --json
python3 -c '
import json, sys
assert [x["name"] for x in json.load(open(sys.argv[1]))] == ["odd"]
' "$work/list.out" || fail "list --prefix 'p[1]:': $(cat "$work/list.out")"
kill -TERM "$list2_holder"
wait_exit "$list2_holder" 10
pass "list shows held and free locks, as a table and as JSON, and filters by pattern"

# --- 10. SIGTERM to colock: passed on to the command, then the lock is released ------------------
kill -TERM "$stat_holder"
wait_until 5 "SIGTERM passed on to the command" test -s "$work/stat.term"
wait_exit "$stat_holder" 10
[ "$s" = 3 ] || fail "after SIGTERM the holder exited $s, expected the command's 3"
run_colock status status stat
expect_status 1 "status after the holder ended"
grep -qx "state: *free" "$work/status.out" || fail "status after the end does not say free"
run_colock status status --json stat
expect_status 1 "status --json of a free lock"
python3 -c '
import json, sys
assert json.load(open(sys.argv[1]))["state"] == "free"
' "$work/status.out" || fail "status --json of a free lock: $(cat "$work/status.out")"
pass "status: held (pid, host, JSON) while running, free (exit 1) afterwards"
pass "SIGTERM to colock reached the command, colock exited with its status 3, the lock is free"

# --- 11. elect and leader ----------------------------------------------------------------------
# An election's lock key is colock:election:{NAME}, its queue colock:election:{NAME}:q.
host=$(uname -n)

run_colock leader leader nobody
expect_status 1 "leader of an election nobody leads"
grep -qx "leader: *none" "$work/leader.out" || fail "leader with nobody leading printed $(cat "$work/leader.out")"
run_colock leader leader --json nobody
expect_status 1 "leader --json of an election nobody leads"
grep -qxF '{"name":"nobody","leading":false,"value":null,"term":null,"ttl_ms":null,"holder_id":null,"holder":null}' \
    "$work/leader.out" || fail "leader --json with nobody leading: $(cat "$work/leader.out")"

# A command that records its pid in $1, appends "start $3" to $2, waits until the file $1.go
# exists, then appends "end $3"; on SIGTERM it appends "term $3" and exits with 3.
gated_command=(sh -c 'echo $$ > "$1"; echo "start $3" >> "$2"
    trap "echo \"term $3\" >> \"$2\"; exit 3" TERM
    i=0; while [ ! -e "$1.go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    echo "end $3" >> "$2"' sh)
turns=$work/turns

# The first candidate leads at once, with the default value HOST:PID.
start_holder ea elect --ttl 10s handover -- "${gated_command[@]}" "$work/ea.pid" "$turns" a
ea=$holder
wait_until 10 "the first leader's command" test -s "$work/ea.pid"
run_colock leader leader --json handover
expect_status 0 "leader --json while a leader runs"
term_a=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["name"] == "handover" and d["leading"] is True, d
assert d["value"] == sys.argv[2] + ":" + sys.argv[3], d
assert d["holder"]["pid"] == int(sys.argv[3]) and d["holder"]["host"] == sys.argv[2], d
assert d["term"] > 0 and 0 < d["ttl_ms"] <= 10000 and d["holder_id"], d
print(d["term"])
' "$work/leader.out" "$host" "$ea") || fail "leader --json of the first leader: $(cat "$work/leader.out")"
run_colock leader leader handover
expect_status 0 "leader while a leader runs"
grep -qx "leader: *$host:$ea" "$work/leader.out" || fail "leader does not show the value $host:$ea"
grep -qx "term: *$term_a" "$work/leader.out" || fail "leader does not show the term $term_a"
grep -qx "pid: *$ea" "$work/leader.out" || fail "leader does not show the leader's pid $ea"

# The watch, from now on: the leader now, then each change.
"$colock" leader --watch --json handover >"$work/watch.out" 2>"$work/watch.err" &
watcher=$!
bg_pids+=("$watcher")
wait_until 10 "the watch's first line" test -s "$work/watch.out"

# The second candidate waits in the queue; its command does not run while the first leads.
start_holder eb elect --value "node b" --ttl 10s handover -- "${gated_command[@]}" "$work/eb.pid" "$turns" b
eb=$holder
queued() { [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN 'colock:election:{handover}:q')" -ge 1 ]; }
wait_until 10 "the second candidate in the election's queue" queued
[ -e "$work/eb.pid" ] && fail "the second candidate's command runs while the first leads"
run_colock busy elect --wait 300ms handover -- true
expect_status 120 "elect --wait 300ms while another leads"
grep -q "not leading election 'handover' within 300ms (led by $host:$ea, term $term_a" "$work/busy.err" ||
    fail "elect --wait 300ms: the message does not name the leader"

# The first command ends by itself: its colock resigns at once (a lapse would take 10 s) and
# the second candidate's command runs.
touch "$work/ea.pid.go"
went=$(now_ms)
wait_until 4 "the second candidate's command after the first resigned" test -s "$work/eb.pid"
took=$(($(now_ms) - went))
wait_exit "$ea" 10
[ "$s" = 0 ] || fail "the first leader's colock exited $s, expected its command's 0"
eb_cmd=$(cat "$work/eb.pid")
run_colock leader leader --json handover
expect_status 0 "leader --json after the hand-over"
term_b=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["leading"] is True and d["value"] == "node b", d
assert d["term"] > int(sys.argv[2]), d
assert d["holder"]["pid"] == int(sys.argv[3]), d
print(d["term"])
' "$work/leader.out" "$term_a" "$eb") || fail "leader --json after the hand-over (term $term_a before): $(cat "$work/leader.out")"

# SIGTERM to the second colock: passed on to its command, then it resigns (nobody leads at once).
kill -TERM "$eb"
wait_exit "$eb" 10
[ "$s" = 3 ] || fail "the second leader's colock exited $s after SIGTERM, expected its command's 3"
kill -0 "$eb_cmd" 2>/dev/null && fail "the second leader's command still runs"
run_colock leader leader handover
expect_status 1 "leader after the last leader resigned"
[ "$(tr '\n' ' ' <"$turns")" = "start a end a start b term b " ] ||
    fail "the candidates' commands overlapped or ran out of order: $(tr '\n' ' ' <"$turns")"

# The watch saw the first leader, the second, and nobody; then SIGTERM ends it with 0.
wait_until 5 "the watch's no-leader line" grep -q '"leading":false' "$work/watch.out"
kill -TERM "$watcher"
wait_exit "$watcher" 10
[ "$s" = 0 ] || fail "leader --watch exited $s after SIGTERM, expected 0"
python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
got = [(l["leading"], l["value"], l["term"], l["resynced"]) for l in lines]
a, b = int(sys.argv[3]), int(sys.argv[4])
assert got == [(True, sys.argv[2], a, False), (True, "node b", b, False), (False, None, b, False)], got
assert all(l["name"] == "handover" and l["time"].endswith("Z") for l in lines), lines
' "$work/watch.out" "$host:$ea" "$term_a" "$term_b" || fail "leader --watch --json printed: $(cat "$work/watch.out")"
pass "elect: hand-over in $took ms to the queued candidate (term $term_a, then $term_b); leader and leader --watch --json show each change"

# The command is not found: 127, and the candidate resigned.
run_colock nf elect nf -- colock-no-such-command
expect_status 127 "elect of a command not in PATH"
run_colock nf leader nf
expect_status 1 "leader after elect of a missing command"

# --- 12. leadership lost (its lock key deleted): SIGTERM to the command, exit 121 ----------------
start_holder elost elect --ttl 2s --grace 10s lostel -- "${trapping_command[@]}" "$work/elost.pid" "$work/elost.term"
wait_until 10 "the leader's command" test -s "$work/elost.pid"
"$redis_cli" -u "$COLOCK_REDIS_URL" DEL 'colock:election:{lostel}' >/dev/null
wait_exit "$holder" 10
[ "$s" = 121 ] || fail "elect whose lock key was deleted exited $s, expected 121"
[ -s "$work/elost.term" ] || fail "the leader's command did not get SIGTERM when the leadership was lost"
grep -q "lost the leadership of election 'lostel' (term [0-9]*)" "$work/elost.err" ||
    fail "no message on the lost leadership"
pass "elect: a lost leadership sends SIGTERM to the command, exit 121; a missing command 127"

# --- 12b. resign --force: the leader is told at once, the next candidate leads -----------------
run_colock rsusage resign fres
expect_status 2 "resign without --force"
grep -q "refusing without --force" "$work/rsusage.err" || fail "resign without --force: no refusal"
start_holder fra elect --ttl 30s --grace 10s fres -- "${trapping_command[@]}" "$work/fra.pid" "$work/fra.term"
fra=$holder
wait_until 10 "the leader's command" test -s "$work/fra.pid"
start_holder frb elect --ttl 30s fres -- "${sleeping_command[@]}" "$work/frb.pid"
frb=$holder
fres_queued() { [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN 'colock:election:{fres}:q')" -ge 1 ]; }
wait_until 10 "the second candidate queued" fres_queued
run_colock resign resign --force fres
expect_status 0 "resign --force while someone leads"
grep -q "ended the leadership of election 'fres' (term [0-9]*" "$work/resign.out" ||
    fail "resign --force did not say whose term it ended: $(cat "$work/resign.out")"
# Far below the 10 s renewal interval: only the message to the leader's locker explains it.
wait_until 2 "SIGTERM to the forced-out leader's command" test -s "$work/fra.term"
wait_exit "$fra" 10
[ "$s" = 121 ] || fail "the forced-out leader exited $s, expected 121"
wait_until 5 "the queued candidate leading" test -s "$work/frb.pid"
kill -TERM "$frb"
wait_exit "$frb" 10
run_colock resign resign --force fres
expect_status 1 "resign --force with nobody leading"
grep -q "nobody led election 'fres'" "$work/resign.out" || fail "resign --force with nobody leading: $(cat "$work/resign.out")"
pass "resign --force: exit 0, the leader's command got SIGTERM within 2 s, the queued candidate led; nobody leading: 1; no --force: 2"

# --- 13. exec --permits: a semaphore of 2 runs two commands at once, the third waits -----------
# A semaphore's keys are colock:semaphore:{NAME} (capacity, fence), :h (the permits held) and :q
# (the waiting calls). gated_command (section 11) appends "start X", waits for $1.go, appends
# "end X".
slots=$work/slots
sem_key='colock:semaphore:{exports}'
start_holder sa exec --permits 2 --wait 30s exports -- "${gated_command[@]}" "$work/sa.pid" "$slots" a
sa=$holder
start_holder sb exec --permits 2 --wait 30s exports -- "${gated_command[@]}" "$work/sb.pid" "$slots" b
sb=$holder
wait_until 10 "both commands under the semaphore of 2 running" eval 'test -s "$work/sa.pid" && test -s "$work/sb.pid"'
start_holder sc exec --permits 2 --wait 30s exports -- "${gated_command[@]}" "$work/sc.pid" "$slots" c
sc=$holder
sem_queued() { [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN "$sem_key:q")" -ge 1 ]; }
wait_until 10 "the third command's call in the semaphore's queue" sem_queued
[ -e "$work/sc.pid" ] && fail "a third command runs while both permits of 2 are held"
[ "$("$redis_cli" -u "$COLOCK_REDIS_URL" ZCARD "$sem_key:h")" = 2 ] ||
    fail "the server does not hold 2 permits: $("$redis_cli" -u "$COLOCK_REDIS_URL" ZRANGE "$sem_key:h" 0 -1)"

# Both permits taken: --wait 0 exits 120 at once, saying so.
run_colock sbusy exec --permits 2 --wait 0 exports -- true
expect_status 120 "exec --permits 2 --wait 0 with both permits held"
[ "$took" -lt 3000 ] || fail "exec --permits 2 --wait 0 took $took ms"
grep -q "semaphore 'exports' has no permit free (2 of 2 held)" "$work/sbusy.err" ||
    fail "exec --permits --wait 0: the message does not say the permits are held"
run_colock sbusy exec --permits 2 --wait 200ms exports -- true
expect_status 120 "exec --permits 2 --wait 200ms with both permits held"
[ "$took" -ge 150 ] || fail "exec --permits 2 --wait 200ms gave up after $took ms"
grep -q "no permit of semaphore 'exports' acquired within 200ms (2 of 2 held)" "$work/sbusy.err" ||
    fail "exec --permits --wait 200ms: no 'not acquired' message"
# Another capacity: exit 123, the library's message naming both, nothing changed.
run_colock scap exec --permits 3 --wait 0 exports -- true
expect_status 123 "exec --permits 3 of a semaphore of capacity 2"
grep -q "semaphore 'exports' has capacity 2 at the server, not 3" "$work/scap.err" ||
    fail "exec --permits 3: the message does not name both capacities"
[ "$("$redis_cli" -u "$COLOCK_REDIS_URL" HGET "$sem_key" capacity)" = 2 ] ||
    fail "exec --permits 3 changed the capacity at the server"

# The first command ends: its permit goes to the third, which starts at once.
touch "$work/sa.pid.go"
went=$(now_ms)
wait_until 5 "the third command after a permit was released" test -s "$work/sc.pid"
took=$(($(now_ms) - went))
wait_exit "$sa" 10
[ "$s" = 0 ] || fail "the first colock exec --permits exited $s, expected 0"
touch "$work/sb.pid.go" "$work/sc.pid.go"
wait_exit "$sb" 10
[ "$s" = 0 ] || fail "the second colock exec --permits exited $s, expected 0"
wait_exit "$sc" 10
[ "$s" = 0 ] || fail "the third colock exec --permits exited $s, expected 0"
order=$(tr '\n' ' ' <"$slots")
case "$order" in
"start a start b end a start c "* | "start b start a end a start c "*) ;;
*) fail "the commands under the semaphore ran in the order: $order" ;;
esac
[ "$("$redis_cli" -u "$COLOCK_REDIS_URL" ZCARD "$sem_key:h")" = 0 ] || fail "permits left held after every exec ended"
pass "exec --permits 2: two commands at once, the third queued and started $took ms after a release; --wait 0 and 200ms exit 120; another capacity 123"

# A lost permit (the held permits deleted at the server): SIGTERM to the command, exit 121.
start_holder slost exec --permits 1 --ttl 2s --grace 10s semlost -- "${trapping_command[@]}" "$work/slost.pid" "$work/slost.term"
wait_until 10 "the command under the permit" test -s "$work/slost.pid"
"$redis_cli" -u "$COLOCK_REDIS_URL" DEL 'colock:semaphore:{semlost}:h' >/dev/null
wait_exit "$holder" 10
[ "$s" = 121 ] || fail "exec --permits whose permit was deleted exited $s, expected 121"
[ -s "$work/slost.term" ] || fail "the command did not get SIGTERM when the permit was lost"
grep -q "lost the permit of semaphore 'semlost' (fence [0-9]*)" "$work/slost.err" ||
    fail "no message on the lost permit"
pass "exec --permits: a lost permit sends SIGTERM to the command, exit 121"

# --- 14. exec --shared / --exclusive: readers together, the writer alone, after them ----------
# A read-write lock's keys are colock:rw:{NAME} (the last fence), :h (the holdings) and :q (the
# waiting calls).
rw_key='colock:rw:{catalog}'
rwslots=$work/rwslots
start_holder ra exec --shared --wait 30s catalog -- "${gated_command[@]}" "$work/ra.pid" "$rwslots" ra
ra=$holder
start_holder rb exec --shared --wait 30s catalog -- "${gated_command[@]}" "$work/rb.pid" "$rwslots" rb
rb=$holder
wait_until 10 "both readers running at once" eval 'test -s "$work/ra.pid" && test -s "$work/rb.pid"'
start_holder rw exec --exclusive --wait 30s catalog -- "${gated_command[@]}" "$work/rw.pid" "$rwslots" w
rw=$holder
rw_queued() { [ "$("$redis_cli" -u "$COLOCK_REDIS_URL" LLEN "$rw_key:q")" -ge 1 ]; }
wait_until 10 "the writer's call in the lock's queue" rw_queued
# The waiting writer holds back a reader that comes after it.
run_colock rbusy exec --shared --wait 0 catalog -- true
expect_status 120 "exec --shared --wait 0 behind a waiting writer"
grep -q "the read lock of 'catalog' is not free now" "$work/rbusy.err" ||
    fail "exec --shared --wait 0: no 'not free' message"
[ -e "$work/rw.pid" ] && fail "the writer runs beside readers"
touch "$work/ra.pid.go"
wait_exit "$ra" 10
[ "$s" = 0 ] || fail "the first reader exited $s, expected 0"
sleep 0.2
[ -e "$work/rw.pid" ] && fail "the writer runs beside the second reader"
touch "$work/rb.pid.go"
wait_until 5 "the writer after both readers left" test -s "$work/rw.pid"
wait_exit "$rb" 10
[ "$s" = 0 ] || fail "the second reader exited $s, expected 0"
touch "$work/rw.pid.go"
wait_exit "$rw" 10
[ "$s" = 0 ] || fail "the writer exited $s, expected 0"
order=$(tr '\n' ' ' <"$rwslots")
case "$order" in
"start ra start rb end ra end rb start w end w " | "start rb start ra end ra end rb start w end w ") ;;
*) fail "the readers and the writer ran in the order: $order" ;;
esac
[ "$("$redis_cli" -u "$COLOCK_REDIS_URL" EXISTS "$rw_key:h")" = 0 ] || fail "a read or write lock left held"
check_usage "exec --shared --exclusive" exec --shared --exclusive name -- true
check_usage "exec --permits --shared" exec --permits 2 --shared name -- true
check_usage "status --shared" status --shared name
grep -q "status: --shared is an option of exec only" "$work/usage.err" || fail "status --shared: wrong message"
pass "exec --shared and --exclusive: two readers at once, a reader after the waiting writer refused (120), the writer after both"

# --- 15. the command is told its lease: COLOCK_NAME, COLOCK_FENCE, COLOCK_TOKEN ----------------
# The command writes what its environment says and, beside it, what the server holds, as the
# environment's variables replaced (not added to) by colock's.
envcheck=(sh -c 'printf "%s|%s|%s|%s\n" "$COLOCK_NAME" "$COLOCK_FENCE" "$COLOCK_TOKEN" \
    "$(env | grep -c "^COLOCK_FENCE=")" > "$1"; shift; "$@" > "$work_env_key"' sh)
env_field() { cut -d'|' -f"$2" "$work/$1.env"; }
for round in 1 2; do
    work_env_key=$work/envlock$round.key COLOCK_FENCE=stale COLOCK_NAME=other run_colock envlock$round \
        exec envlock -- "${envcheck[@]}" "$work/envlock$round.env" "$redis_cli" -u "$COLOCK_REDIS_URL" GET 'colock:{envlock}'
    expect_status 0 "exec that prints its environment (round $round)"
    [ "$(env_field envlock$round 1)" = envlock ] || fail "COLOCK_NAME is '$(env_field envlock$round 1)', expected 'envlock'"
    [ "$(env_field envlock$round 4)" = 1 ] || fail "COLOCK_FENCE is set $(env_field envlock$round 4) times"
    # The lock key held "H <fence> <owner> <token> ...".
    read -r _ key_fence _ key_token _ <"$work/envlock$round.key"
    [ "$(env_field envlock$round 2)" = "$key_fence" ] ||
        fail "COLOCK_FENCE is '$(env_field envlock$round 2)', the lock's fence is '$key_fence'"
    [ "$(env_field envlock$round 3)" = "$key_token" ] ||
        fail "COLOCK_TOKEN is '$(env_field envlock$round 3)', the lock's token is '$key_token'"
done
[ "$(env_field envlock2 2)" -gt "$(env_field envlock1 2)" ] ||
    fail "the second exec's fence $(env_field envlock2 2) is not above the first's $(env_field envlock1 2)"
work_env_key=$work/envsem.key run_colock envsem exec --permits 2 envsem -- "${envcheck[@]}" "$work/envsem.env" \
    "$redis_cli" -u "$COLOCK_REDIS_URL" HGET 'colock:semaphore:{envsem}' fence
expect_status 0 "exec --permits that prints its environment"
[ "$(env_field envsem 2)" = "$(cat "$work/envsem.key")" ] ||
    fail "exec --permits: COLOCK_FENCE is '$(env_field envsem 2)', the semaphore's fence '$(cat "$work/envsem.key")'"
if [ "$(env_field envsem 1)" != envsem ] || [ -z "$(env_field envsem 3)" ]; then
    fail "exec --permits: COLOCK_NAME or COLOCK_TOKEN wrong: $(cat "$work/envsem.env")"
fi
work_env_key=$work/envrw.key run_colock envrw exec --exclusive envrw -- "${envcheck[@]}" "$work/envrw.env" \
    "$redis_cli" -u "$COLOCK_REDIS_URL" HGET 'colock:rw:{envrw}' fence
expect_status 0 "exec --exclusive that prints its environment"
[ "$(env_field envrw 2)" = "$(cat "$work/envrw.key")" ] ||
    fail "exec --exclusive: COLOCK_FENCE is '$(env_field envrw 2)', the lock's fence '$(cat "$work/envrw.key")'"
work_env_key=$work/envel.key run_colock envel elect envel -- "${envcheck[@]}" "$work/envel.env" "$colock" leader --json envel
expect_status 0 "elect that prints its environment"
grep -q "\"term\":$(env_field envel 2)," "$work/envel.key" ||
    fail "elect: COLOCK_FENCE is '$(env_field envel 2)', the leader: $(cat "$work/envel.key")"
pass "exec (lock, permit, write lock) and elect tell the command its name, fence (term) and token"

# --- 16. exec --all: several locks at once, all or none -------------------------------------------
# The command is told every name and its fence, in the order given; the lock keys hold them.
run_colock envall exec --all setb seta -- sh -c 'printf "%s|%s|%s\n" "$COLOCK_NAME" "$COLOCK_FENCE" \
    "$COLOCK_TOKEN" > "$1"; "$2" -u "$COLOCK_REDIS_URL" GET "colock:{setb}" > "$1.b"
    "$2" -u "$COLOCK_REDIS_URL" GET "colock:{seta}" > "$1.a"' sh "$work/envall.env" "$redis_cli"
expect_status 0 "exec --all that prints its environment"
[ "$(cut -d'|' -f1 "$work/envall.env")" = "setb seta" ] ||
    fail "exec --all: COLOCK_NAME is '$(cut -d'|' -f1 "$work/envall.env")', expected 'setb seta'"
read -r _ fence_b _ token_b _ <"$work/envall.env.b"
read -r _ fence_a _ token_a _ <"$work/envall.env.a"
[ "$(cut -d'|' -f2 "$work/envall.env")" = "$fence_b $fence_a" ] ||
    fail "exec --all: COLOCK_FENCE is '$(cut -d'|' -f2 "$work/envall.env")', the keys hold '$fence_b $fence_a'"
if [ "$(cut -d'|' -f3 "$work/envall.env")" != "$token_a" ] || [ "$token_a" != "$token_b" ]; then
    fail "exec --all: COLOCK_TOKEN is '$(cut -d'|' -f3 "$work/envall.env")', the keys hold '$token_b' and '$token_a'"
fi
# While one command holds setb and seta, a lock of either and a set with one of them are refused
# at once with --wait 0, and nothing is left behind by them; once it ends, the set is taken.
start_holder allheld exec --all seta setb -- "${sleeping_command[@]}" "$work/allheld.pid"
wait_until 10 "holder command" test -s "$work/allheld.pid"
run_colock allbusy exec --wait 0 seta -- true
expect_status 120 "exec --wait 0 of a name a set holds"
run_colock allbusy2 exec --all --wait 0 setc setb -- true
expect_status 120 "exec --all --wait 0 of a set with a held name"
grep -q "not all free" "$work/allbusy2.err" || fail "exec --all --wait 0: no 'not all free' message"
[ "$("$redis_cli" -u "$COLOCK_REDIS_URL" EXISTS 'colock:{setc}')" = 0 ] ||
    fail "exec --all --wait 0 left setc's key behind"
run_colock allwait exec --all --wait 200ms setb -- true
expect_status 120 "exec --all --wait 200ms of a held set"
grep -q "not acquired within 200ms" "$work/allwait.err" || fail "exec --all --wait 200ms: no message"
kill -TERM "$holder"
wait_exit "$holder" 10
run_colock allafter exec --all --wait 5s setc setb seta -- true
expect_status 0 "exec --all once the set was released"
check_usage "--all with --permits" exec --all --permits 2 a b -- true
check_usage "--all without a name" exec --all -- true
check_usage "two names without --all" exec a b -- true
pass "exec --all: every name and fence in the environment, all or none, usage errors"

echo "colock_test: all checks passed"
