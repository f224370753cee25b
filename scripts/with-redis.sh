#!/usr/bin/env bash
# Usage: scripts/with-redis.sh <command> [args...]
#
# Starts a throwaway redis-server on a free port of 127.0.0.1 (no persistence, data in a
# temporary directory), runs the command with COLOCK_REDIS_URL=redis://127.0.0.1:PORT in its
# environment, stops the server and returns the command's exit status.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 <command> [args...]" >&2
    exit 2
fi

redis_server=${COLOCK_REDIS_SERVER:-redis-server}
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
for tool in "$redis_server" "$redis_cli"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "with-redis: $tool not found (run scripts/install-deps.sh)" >&2
        exit 127
    fi
done

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/colock-redis.XXXXXX")
server_pid=

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmpdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port below the kernel's ephemeral range, so no outgoing connection can be using it (or
# take it while the server is down), and not listening now. The server's own bind and the
# process_id check below settle any race with another process.
port_in_use() {
    local hex
    hex=$(printf ':%04X ' "$1")
    grep -qi -- "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
pick_port() {
    local low=32768 _high p
    if read -r low _high < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then :; fi
    [ "$low" -gt 12000 ] || low=61000 # unusual range: use the top instead
    for _ in $(seq 100); do
        if [ "$low" -eq 61000 ]; then
            p=$((61000 + RANDOM % 4000))
        else
            p=$((10000 + RANDOM % (low - 10000)))
        fi
        if ! port_in_use "$p"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# Waits until the server we started answers with its own process id. Returns 1 when it exited
# (typically: port taken), 2 on timeout.
wait_ready() {
    local pid=$1 port=$2 reply
    for _ in $(seq 200); do
        if ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        if reply=$("$redis_cli" -h 127.0.0.1 -p "$port" INFO server 2>/dev/null) &&
            printf '%s\n' "$reply" | tr -d '\r' | grep -qx "process_id:$pid"; then
            return 0
        fi
        sleep 0.05
    done
    return 2
}

port=
for attempt in 1 2 3 4 5 6 7 8; do
    candidate=$(pick_port) || { echo "with-redis: no free port found" >&2; exit 1; }
    "$redis_server" --port "$candidate" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$tmpdir" --daemonize no --logfile "$tmpdir/redis.log" --protected-mode yes \
        >"$tmpdir/redis.out" 2>&1 &
    server_pid=$!
    status=0
    wait_ready "$server_pid" "$candidate" || status=$?
    if [ "$status" -eq 0 ]; then
        port=$candidate
        break
    fi
    if [ "$status" -eq 1 ]; then
        wait "$server_pid" 2>/dev/null || true
        server_pid=
        if grep -q 'Address already in use' "$tmpdir/redis.log" 2>/dev/null; then
            continue # lost a race for the port: try another one
        fi
    fi
    echo "with-redis: redis-server did not start (attempt $attempt); its log:" >&2
    tail -n 20 "$tmpdir/redis.log" "$tmpdir/redis.out" >&2 2>/dev/null || true
    exit 1
done
if [ -z "$port" ]; then
    echo "with-redis: could not start redis-server on a free port" >&2
    exit 1
fi

export COLOCK_REDIS_URL="redis://127.0.0.1:$port"
echo "with-redis: redis-server pid $server_pid at $COLOCK_REDIS_URL" >&2

status=0
"$@" || status=$?
exit "$status"
