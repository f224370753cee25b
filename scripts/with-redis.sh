#!/usr/bin/env bash
# Usage: scripts/with-redis.sh [--sentinel | --cluster | --redlock] <command> [args...]
#
# Starts a throwaway redis-server on a free port of 127.0.0.1 (no persistence, data in a
# temporary directory), runs the command with COLOCK_REDIS_URL=redis://127.0.0.1:PORT in its
# environment, stops the server and returns the command's exit status.
#
# --sentinel: a Redis Sentinel deployment instead: a primary, a replica and three sentinels
# (quorum 2, down-after 1 s) monitoring them as "mymaster", ready for a failover when the command
# starts; COLOCK_REDIS_URL=redis-sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster.
#
# --cluster: a Redis Cluster instead: three primaries and a replica of each (node timeout 1 s),
# every slot assigned, every replica in sync, ready for a failover when the command starts;
# COLOCK_REDIS_URL=redis-cluster://127.0.0.1:P1,...,127.0.0.1:P6 (every node as a seed).
#
# --redlock: three independent redis-servers instead, for a Redlock locker (no replication
# between them); COLOCK_REDLOCK_URLS=redis://127.0.0.1:P1,redis://127.0.0.1:P2,redis://127.0.0.1:P3
# and COLOCK_REDIS_URL unset, so that nothing meant for the three reaches another server.
set -euo pipefail

sentinel=0
cluster=0
redlock=0
case "${1:-}" in
--sentinel) sentinel=1 && shift ;;
--cluster) cluster=1 && shift ;;
--redlock) redlock=1 && shift ;;
esac
if [ "$#" -eq 0 ]; then
    echo "usage: $0 [--sentinel | --cluster | --redlock] <command> [args...]" >&2
    exit 2
fi

redis_server=${COLOCK_REDIS_SERVER:-redis-server}
redis_cli=${COLOCK_REDIS_CLI:-redis-cli}
redis_sentinel=${COLOCK_REDIS_SENTINEL:-redis-sentinel}
tools=("$redis_server" "$redis_cli")
[ "$sentinel" -eq 0 ] || tools+=("$redis_sentinel")
for tool in "${tools[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "with-redis: $tool not found (run scripts/install-deps.sh)" >&2
        exit 127
    fi
done

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/colock-redis.XXXXXX")
server_pids=()

# shellcheck disable=SC2317 # called from cleanup, from the EXIT trap
stop_pid() {
    local pid=$1
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    # The last started first: sentinels go before the servers they watch.
    local i
    for ((i = ${#server_pids[@]} - 1; i >= 0; i--)); do
        stop_pid "${server_pids[$i]}"
    done
    rm -rf "$tmpdir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port below the kernel's ephemeral range, so no outgoing connection can be using it (or
# take it while the server is down), and not listening now. The server's own bind and the
# process_id check below settle any race with another process. A cluster node listens on
# port + 10000 too (its cluster bus): with bus_offset=10000 that one is checked as well.
bus_offset=0
port_in_use() {
    local hex
    hex=$(printf ':%04X ' "$1")
    grep -qi -- "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
pick_port() {
    local low=32768 _high p
    if read -r low _high < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then :; fi
    [ "$low" -gt $((12000 + bus_offset)) ] || low=61000 # unusual range: use the top instead
    for _ in $(seq 100); do
        if [ "$low" -eq 61000 ]; then
            p=$((61000 - bus_offset + RANDOM % 4000))
        else
            p=$((10000 + RANDOM % (low - bus_offset - 10000)))
        fi
        if ! port_in_use "$p" && ! port_in_use $((p + bus_offset)); then
            echo "$p"
            return 0
        fi
    done
    return 1
}

# wait_ready PID PORT LOG READY-TEXT: waits until the server we started logs READY-TEXT and
# answers with its own process id. Returns 1 when it exited (typically: port taken), 2 on timeout.
wait_ready() {
    local pid=$1 port=$2 log=$3 ready_text=$4 reply
    for _ in $(seq 200); do
        if ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        if grep -qF -- "$ready_text" "$log" 2>/dev/null &&
            reply=$("$redis_cli" -h 127.0.0.1 -p "$port" INFO server 2>/dev/null) &&
            printf '%s\n' "$reply" | tr -d '\r' | grep -qx "process_id:$pid"; then
            return 0
        fi
        sleep 0.05
    done
    return 2
}

# start NAME READY-TEXT PROGRAM ARGS...: starts a server on a free port (PROGRAM ARGS... --port P
# ...) whose log is $tmpdir/NAME.log, and waits until its log shows READY-TEXT and it answers
# with its own process id. Sets started_port and started_pid. Its working directory is $tmpdir,
# or $server_dir when set (`server_dir=... start ...`).
start() {
    local name=$1 ready_text=$2 candidate status attempt
    shift 2
    for attempt in 1 2 3 4 5 6 7 8; do
        candidate=$(pick_port) || { echo "with-redis: no free port found" >&2; exit 1; }
        "$@" --port "$candidate" --bind 127.0.0.1 --dir "${server_dir:-$tmpdir}" --daemonize no \
            --logfile "$tmpdir/$name.log" --protected-mode yes >"$tmpdir/$name.out" 2>&1 &
        started_pid=$!
        server_pids+=("$started_pid")
        status=0
        wait_ready "$started_pid" "$candidate" "$tmpdir/$name.log" "$ready_text" || status=$?
        if [ "$status" -eq 0 ]; then
            started_port=$candidate
            return 0
        fi
        if [ "$status" -eq 1 ]; then
            wait "$started_pid" 2>/dev/null || true
            if grep -q 'Address already in use' "$tmpdir/$name.log" 2>/dev/null; then
                continue # lost a race for the port: try another one
            fi
        fi
        echo "with-redis: $name did not start (attempt $attempt); its log:" >&2
        tail -n 20 "$tmpdir/$name.log" "$tmpdir/$name.out" >&2 2>/dev/null || true
        exit 1
    done
    echo "with-redis: could not start $name on a free port" >&2
    exit 1
}

# until SECONDS WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds.
until_true() {
    local seconds=$1 what=$2
    shift 2
    for _ in $(seq $((seconds * 10))); do
        if "$@"; then
            return 0
        fi
        sleep 0.1
    done
    echo "with-redis: $what within $seconds s; logs:" >&2
    tail -n 15 "$tmpdir"/*.log >&2 2>/dev/null || true
    exit 1
}

server_args=(--save "" --appendonly no)
if [ "$cluster" -eq 1 ]; then
    # A replica syncs at once rather than after the default 5 s diskless delay. Each node has a
    # directory of its own: its nodes.conf, and the RDB file a replica loads on a full sync.
    server_args+=(--repl-diskless-sync-delay 0 --cluster-enabled yes
        --cluster-config-file nodes.conf --cluster-node-timeout 1000)
    bus_offset=10000
    node_ports=()
    for i in 1 2 3 4 5 6; do
        mkdir "$tmpdir/node$i"
        server_dir="$tmpdir/node$i" start "node$i" "Ready to accept connections" \
            "$redis_server" "${server_args[@]}"
        node_ports+=("$started_port")
    done
    # The first three become the primaries, the others a replica each.
    nodes=()
    for p in "${node_ports[@]}"; do
        nodes+=("127.0.0.1:$p")
    done
    if ! "$redis_cli" --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
        >"$tmpdir/create.out" 2>&1; then
        echo "with-redis: redis-cli --cluster create failed:" >&2
        cat "$tmpdir/create.out" >&2
        exit 1
    fi
    # Every node knows all six, sees every slot served, and every replica is in sync (a
    # CLUSTER FAILOVER needs its link to the primary).
    # shellcheck disable=SC2317 # called through until_true
    cluster_ready() {
        local p info
        for p in "${node_ports[@]}"; do
            info=$("$redis_cli" -h 127.0.0.1 -p "$p" CLUSTER INFO 2>/dev/null | tr -d '\r') ||
                return 1
            printf '%s\n' "$info" | grep -qx 'cluster_state:ok' || return 1
            printf '%s\n' "$info" | grep -qx 'cluster_slots_assigned:16384' || return 1
            printf '%s\n' "$info" | grep -qx 'cluster_slots_ok:16384' || return 1
            printf '%s\n' "$info" | grep -qx 'cluster_known_nodes:6' || return 1
            info=$("$redis_cli" -h 127.0.0.1 -p "$p" INFO replication 2>/dev/null | tr -d '\r') ||
                return 1
            if printf '%s\n' "$info" | grep -qx 'role:slave'; then
                printf '%s\n' "$info" | grep -qx 'master_link_status:up' || return 1
            fi
        done
    }
    until_true 30 "the cluster did not form" cluster_ready
    COLOCK_REDIS_URL="redis-cluster://$(IFS=,; echo "${nodes[*]}")"
    export COLOCK_REDIS_URL
    echo "with-redis: cluster at $COLOCK_REDIS_URL" >&2
elif [ "$redlock" -eq 1 ]; then
    # Each server in a directory of its own, as independent as three machines would be.
    redlock_urls=()
    redlock_pids=()
    for i in 1 2 3; do
        mkdir "$tmpdir/primary$i"
        server_dir="$tmpdir/primary$i" start "primary$i" "Ready to accept connections" \
            "$redis_server" "${server_args[@]}"
        redlock_urls+=("redis://127.0.0.1:$started_port")
        redlock_pids+=("$started_pid")
    done
    COLOCK_REDLOCK_URLS="$(IFS=,; echo "${redlock_urls[*]}")"
    export COLOCK_REDLOCK_URLS
    unset COLOCK_REDIS_URL
    echo "with-redis: redis-servers pids ${redlock_pids[*]} at $COLOCK_REDLOCK_URLS" >&2
elif [ "$sentinel" -eq 0 ]; then
    start redis "Ready to accept connections" "$redis_server" "${server_args[@]}"
    port=$started_port
    export COLOCK_REDIS_URL="redis://127.0.0.1:$port"
    echo "with-redis: redis-server pid $started_pid at $COLOCK_REDIS_URL" >&2
else
    # A replica syncs at once rather than after the default 5 s diskless delay.
    server_args+=(--repl-diskless-sync-delay 0)
    start primary "Ready to accept connections" "$redis_server" "${server_args[@]}"
    primary_port=$started_port
    start replica "Ready to accept connections" "$redis_server" "${server_args[@]}" \
        --replicaof 127.0.0.1 "$primary_port"
    replica_port=$started_port
    # shellcheck disable=SC2317 # called through until_true
    replica_synced() {
        "$redis_cli" -h 127.0.0.1 -p "$replica_port" INFO replication 2>/dev/null |
            tr -d '\r' | grep -qx 'master_link_status:up'
    }
    until_true 10 "the replica did not sync" replica_synced
    sentinel_ports=()
    for i in 1 2 3; do
        : >"$tmpdir/sentinel$i.conf"
        start "sentinel$i" "+monitor master mymaster" "$redis_sentinel" "$tmpdir/sentinel$i.conf" \
            --sentinel monitor mymaster 127.0.0.1 "$primary_port" 2 \
            --sentinel down-after-milliseconds mymaster 1000 \
            --sentinel failover-timeout mymaster 3000
        sentinel_ports+=("$started_port")
    done
    # Sentinels find each other through hello messages every 2 s.
    # shellcheck disable=SC2317 # called through until_true
    sentinels_ready() {
        local p
        for p in "${sentinel_ports[@]}"; do
            "$redis_cli" -h 127.0.0.1 -p "$p" SENTINEL MASTER mymaster 2>/dev/null |
                tr -d '\r' | paste - - | grep -qx $'num-other-sentinels\t2' || return 1
            "$redis_cli" -h 127.0.0.1 -p "$p" SENTINEL MASTER mymaster 2>/dev/null |
                tr -d '\r' | paste - - | grep -qx $'num-slaves\t1' || return 1
        done
    }
    until_true 15 "the sentinels did not find each other and the replica" sentinels_ready
    COLOCK_REDIS_URL="redis-sentinel://127.0.0.1:${sentinel_ports[0]},127.0.0.1:${sentinel_ports[1]}"
    COLOCK_REDIS_URL+=",127.0.0.1:${sentinel_ports[2]}/mymaster"
    export COLOCK_REDIS_URL
    echo "with-redis: primary :$primary_port, replica :$replica_port, sentinels at" \
        "$COLOCK_REDIS_URL" >&2
fi


status=0
"$@" || status=$?
exit "$status"
