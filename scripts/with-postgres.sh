#!/usr/bin/env bash
# Usage: scripts/with-postgres.sh <command> [args...]
#
# Starts a throwaway PostgreSQL cluster (initdb in a temporary directory, no fsync) listening on
# a free port of 127.0.0.1 only, runs the command with
# COLOCK_PG_URL=postgresql://colock@127.0.0.1:PORT/postgres in its environment (user colock,
# trusted from loopback), stops the cluster, removes its directory and returns the command's exit
# status. As root, the cluster runs as the system user postgres (initdb refuses root). The
# programs are taken from COLOCK_PG_BIN, else Debian's /usr/lib/postgresql/15/bin.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 <command> [args...]" >&2
    exit 2
fi

pg_bin=${COLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}
for tool in initdb pg_ctl; do
    if [ ! -x "$pg_bin/$tool" ]; then
        echo "with-postgres: $pg_bin/$tool not found (run scripts/install-deps.sh)" >&2
        exit 127
    fi
done

tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/colock-pg.XXXXXX")
as_owner=()
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$tmpdir"
    as_owner=(runuser -u postgres --)
fi
started=0

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    if [ "$started" -eq 1 ]; then
        "${as_owner[@]}" "$pg_bin/pg_ctl" -D "$tmpdir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$tmpdir"
}
trap cleanup EXIT

# A port below the kernel's ephemeral range, so no outgoing connection can be using it, and not
# listened on now.
port_in_use() {
    ss -Htln "sport = :$1" 2>/dev/null | grep -q . ||
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
pick_port() {
    local low=32768 p
    if read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then :; fi
    for _ in $(seq 200); do
        p=$((10000 + RANDOM % (low - 10000)))
        if ! port_in_use "$p"; then
            echo "$p"
            return 0
        fi
    done
    echo "with-postgres: no free port found" >&2
    return 1
}

if ! "${as_owner[@]}" "$pg_bin/initdb" -D "$tmpdir/data" -U colock -A trust -E UTF8 \
    --locale=C --no-sync >"$tmpdir/initdb.log" 2>&1; then
    echo "with-postgres: initdb failed:" >&2
    cat "$tmpdir/initdb.log" >&2
    exit 1
fi
for attempt in 1 2 3; do
    port=$(pick_port)
    # -F: no fsync; the socket directory is the cluster's own, so nothing else is touched.
    if "${as_owner[@]}" "$pg_bin/pg_ctl" -D "$tmpdir/data" -l "$tmpdir/server.log" -w -t 30 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $tmpdir -F" start >/dev/null 2>&1; then
        started=1
        break
    fi
    # Typically: the port was taken between the check and the start.
    echo "with-postgres: start on port $port failed (attempt $attempt)" >&2
done
if [ "$started" -ne 1 ]; then
    cat "$tmpdir/server.log" >&2 || true
    exit 1
fi
echo "with-postgres: PostgreSQL at 127.0.0.1:$port" >&2

status=0
COLOCK_PG_URL="postgresql://colock@127.0.0.1:$port/postgres" "$@" || status=$?
exit "$status"
