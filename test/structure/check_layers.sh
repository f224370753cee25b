#!/usr/bin/env bash
# Checks that the library's private includes run one way, down the layers of docs/design.md:
#
#   src/lock/{mutex,semaphore,election,fence,multi}/  synchronizers: none includes another's files
#   src/lock/core/                         the lease, the acquisition machine, the local queue
#   src/lock/quorum/                       the lease store over N primaries
#   src/lock/store/                        the lease store's seam, the scripts and their replies
#   src/lock/base/                         the vocabulary every layer uses
#   src/redis/, src/resp3/, src/detail/    below the lock layer: none includes lock/
#
# and that no source file sits in src/lock/ outside a folder. An include is a line
# `#include "lock/<folder>/<file>"`; the private headers are named by their path from src/.
# Usage: check_layers.sh <src dir>, or check_layers.sh --self-test (a tree with one include of
# each forbidden kind must give one complaint each, and a clean tree none).
set -euo pipefail

rank() {
    case "$1" in
    base) echo 0 ;;
    store) echo 1 ;;
    quorum) echo 2 ;;
    core) echo 3 ;;
    mutex | semaphore | election | fence | multi) echo 4 ;;
    *) echo -1 ;;
    esac
}

# Includes allowed against the rule, each with the reason it is still there. A new exception
# needs a reason here and a line in docs/design.md. None today.
allowed() {
    return 1
}

check_tree() {
    local src=$1 bad=0 file folder target tfolder
    while IFS= read -r file; do
        echo "check_layers: $file: a source file outside the layer folders of src/lock"
        bad=$((bad + 1))
    done < <(find "$src/lock" -maxdepth 1 -type f -name '*.[ch]pp' -printf 'lock/%f\n' | sort)
    while IFS= read -r file; do
        folder=${file#lock/}
        folder=${folder%%/*}
        if [[ $(rank "$folder") -lt 0 ]]; then
            echo "check_layers: $file: folder lock/$folder is not a layer of docs/design.md"
            bad=$((bad + 1))
            continue
        fi
        while IFS= read -r target; do
            tfolder=${target#lock/}
            tfolder=${tfolder%%/*}
            [[ $tfolder == "$folder" ]] && continue
            allowed "${file#lock/}" "$target" && continue
            if [[ $(rank "$tfolder") -lt 0 || $(rank "$tfolder") -ge $(rank "$folder") ]]; then
                echo "check_layers: $file includes $target: lock/$folder may include only the layers below it"
                bad=$((bad + 1))
            fi
        done < <(sed -n 's/^#include "\(lock\/[^"]*\)".*/\1/p' "$src/$file")
    done < <(cd "$src" && find lock -mindepth 2 -type f -name '*.[ch]pp' | sort)
    while IFS= read -r file; do
        echo "check_layers: $file reaches up into the lock layer"
        bad=$((bad + 1))
    done < <(cd "$src" && grep -lE '^#include "(\.\./)?lock/' -r redis resp3 detail 2>/dev/null | sort)
    return $((bad > 0))
}

if [[ ${1:-} == --self-test ]]; then
    tree=$(mktemp -d)
    trap 'rm -rf "$tree"' EXIT
    mkdir -p "$tree"/lock/{base,store,core,mutex,semaphore} "$tree"/redis
    printf '#include "lock/base/a.hpp"\n' >"$tree/lock/core/ok.hpp"
    : >"$tree/lock/base/a.hpp"
    check_tree "$tree" >/dev/null || { echo "check_layers: self-test: a clean tree was refused"; exit 1; }
    printf '#include "lock/core/ok.hpp"\n' >"$tree/lock/store/up.cpp"
    printf '#include "lock/mutex/guard.hpp"\n' >"$tree/lock/semaphore/sideways.cpp"
    printf '#include "lock/core/ok.hpp"\n' >"$tree/redis/below.cpp"
    : >"$tree/lock/loose.cpp"
    mkdir -p "$tree/lock/misc" && : >"$tree/lock/misc/x.cpp"
    out=$(check_tree "$tree" || true)
    for want in "store/up.cpp includes" "semaphore/sideways.cpp includes" "redis/below.cpp reaches" \
        "lock/loose.cpp: a source file outside" "lock/misc is not a layer"; do
        grep -qF "$want" <<<"$out" || { echo "check_layers: self-test: not reported: $want"; echo "$out"; exit 1; }
    done
    [[ $(wc -l <<<"$out") -eq 5 ]] || { echo "check_layers: self-test: expected 5 complaints:"; echo "$out"; exit 1; }
    echo "check_layers: self-test passed"
    exit 0
fi

check_tree "${1:?usage: check_layers.sh <src dir> | --self-test}"
echo "check_layers: every include runs down the layers"
