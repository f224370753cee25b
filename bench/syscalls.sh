#!/usr/bin/env bash
# System calls per request: colock's connection (bench/redis_pipeline --requests) next to
# redis-benchmark doing the same number of requests with the same number in flight, each counted
# by `perf stat` on the syscall tracepoints (or, without perf, by `strace -c -f`, which slows
# the process and so changes how replies batch at many in flight), against one throwaway
# redis-server on a free loopback port.
#
# Usage: bench/syscalls.sh [BUILD_DIR] [--requests N] [--clients 1,16,64,256] [--strace]
#   BUILD_DIR  where bench/redis_pipeline was built (default build/release)
# Needs redis-server and redis-benchmark on PATH, and perf (linux-perf) or strace. perf reads
# the tracepoints as root, or with kernel.perf_event_paranoid at -1.
set -euo pipefail

build=build/release
requests=100000
clients=1,16,64,256
tool=perf
while [[ $# -gt 0 ]]; do
    case "$1" in
    --requests) requests=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --strace) tool=strace; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "syscalls.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
    esac
done
pipeline=$build/bench/redis_pipeline
[[ -x $pipeline ]] || { echo "syscalls.sh: no $pipeline (build the benchmarks first)" >&2; exit 2; }
for program in redis-server redis-benchmark $tool; do
    command -v "$program" > /dev/null || { echo "syscalls.sh: $program is not on PATH" >&2; exit 2; }
done

work=$(mktemp -d)
server_pid=
cleanup() {
    [[ -n $server_pid ]] && kill "$server_pid" 2> /dev/null && wait "$server_pid" 2> /dev/null
    rm -rf "$work"
}
trap cleanup EXIT

port=
for candidate in $(shuf -i 20000-60000 -n 50); do
    if ! (exec 3<> "/dev/tcp/127.0.0.1/$candidate") 2> /dev/null; then
        port=$candidate
        break
    fi
done
[[ -n $port ]] || { echo "syscalls.sh: no free port found" >&2; exit 1; }
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" > "$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 50); do
    redis-cli -p "$port" ping > /dev/null 2>&1 && break
    sleep 0.1
done

# count OUTPUT_FILE COMMAND...: the command's system calls, as "name calls" lines.
count() {
    local out=$1
    shift
    if [[ $tool == perf ]]; then
        perf stat -x, -o "$work/perf.txt" -e 'raw_syscalls:sys_enter' \
            -e 'syscalls:sys_enter_sendto' -e 'syscalls:sys_enter_write' \
            -e 'syscalls:sys_enter_recvfrom' -e 'syscalls:sys_enter_read' \
            -e 'syscalls:sys_enter_epoll_wait' -e 'syscalls:sys_enter_epoll_ctl' \
            -- "$@" > "$work/run.txt" 2>&1
        awk -F, '$3 ~ /sys_enter/ { n = $3; sub(/.*sys_enter_?/, "", n); if (n == "") n = "all";
                                    print n, $1 }' "$work/perf.txt" > "$out"
    else
        strace -f -c -o "$work/strace.txt" -- "$@" > "$work/run.txt" 2>&1
        awk '$NF != "total" && $NF != "syscall" && $4 ~ /^[0-9]+$/ { all += $4;
                 if ($NF ~ /^(sendto|write|recvfrom|read|epoll_wait|epoll_ctl)$/) print $NF, $4 }
             END { print "all", all }' "$work/strace.txt" > "$out"
    fi
}

# per REQUESTS FILE NAME: calls of NAME per request.
per() {
    awk -v n="$3" -v r="$1" '$1 == n { c = $2 } END { printf "%.2f", c / r }' "$2"
}

printf '%-9s %-16s %9s %6s %6s %6s %10s %9s\n' in-flight client requests all send recv \
    epoll_wait epoll_ctl
for c in ${clients//,/ }; do
    count "$work/colock.txt" "$pipeline" --requests "$requests" --clients "$c" \
        --url "redis://127.0.0.1:$port"
    done_requests=$(sed -n 's/.*: \([0-9]*\) requests in.*/\1/p' "$work/run.txt")
    [[ -n $done_requests ]] || { cat "$work/run.txt" >&2; exit 1; }
    count "$work/benchmark.txt" redis-benchmark -p "$port" -c 1 -P "$c" -n "$requests" -t set -q
    for who in colock benchmark; do
        f=$work/$who.txt
        r=$requests
        [[ $who == colock ]] && r=$done_requests
        send=$(awk -v r="$r" '$1 == "sendto" || $1 == "write" { c += $2 } END { printf "%.2f", c / r }' "$f")
        recv=$(awk -v r="$r" '$1 == "recvfrom" || $1 == "read" { c += $2 } END { printf "%.2f", c / r }' "$f")
        printf '%-9s %-16s %9s %6s %6s %6s %10s %9s\n' "$c" \
            "$([[ $who == colock ]] && echo colock || echo redis-benchmark)" "$r" \
            "$(per "$r" "$f" all)" "$send" "$recv" "$(per "$r" "$f" epoll_wait)" \
            "$(per "$r" "$f" epoll_ctl)"
    done
done
echo "calls per request; all = every system call of the process (start and end included)"
