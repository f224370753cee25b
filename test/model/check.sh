#!/usr/bin/env bash
# Checks one of the Promela models here with spin: generates the verifier (spin -a), compiles it
# and runs an exhaustive search of the bounded model.
#
#   check.sh MODEL.pml pass [-DNAME ...]           every assertion holds (0 errors, search complete)
#   check.sh MODEL.pml violates PROPERTY [-D...]   the search finds a violation of PROPERTY (the
#                                                  name of the assertion's variable, e.g. fifo_ok)
#                                                  and prints the trail spin found, step by step
#
# Fails (rather than skips) when spin or a C compiler is missing: CI installs both
# (scripts/install-deps.sh).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 MODEL.pml pass|violates PROPERTY [-DNAME ...]" >&2
    exit 2
fi
model=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mode=$2
shift 2
property=
if [ "$mode" = violates ]; then
    property=${1:?violates needs a property}
    shift
elif [ "$mode" != pass ]; then
    echo "check.sh: unknown mode $mode" >&2
    exit 2
fi
defines=("$@")

spin=$(command -v spin || true)
cc=${CC:-$(command -v cc || command -v gcc || true)}
if [ -z "$spin" ]; then
    echo "check.sh: spin is not installed (Debian: apt-get install spin; scripts/install-deps.sh)" >&2
    exit 1
fi
if [ -z "$cc" ]; then
    echo "check.sh: no C compiler (cc) to build spin's verifier" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/colock-model.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
cp "$model" model.pml

"$spin" -a "${defines[@]}" model.pml >spin.out 2>&1 || { cat spin.out; exit 1; }
# SAFETY: assertions only (no never claim); -w: the generated C warns about its own code. A
# search expected to fail stops early: compiled unoptimised, it is ready sooner.
opt=-O2
[ "$mode" = pass ] || opt=-O0
"$cc" "$opt" -w -DSAFETY -DNOCLAIM -o pan pan.c
start=$(date +%s.%N)
# -m: the depth bound, far above what the time bound lets a run reach; -n: no unreached-code list.
./pan -m100000 -n >pan.out 2>&1 || true
end=$(date +%s.%N)

echo "model $(basename "$model") ${defines[*]:-(no switches)}: $(awk -v s="$start" -v e="$end" \
    'BEGIN { printf "%.2f s", e - s }')"
grep -E 'State-vector|states, stored|states, matched|errors:' pan.out | sed 's/  */ /g; s/^/  /'

if grep -q 'max search depth too small' pan.out; then
    echo "check.sh: the search was cut at its depth bound: raise -m" >&2
    exit 1
fi

case $mode in
pass)
    if grep -q 'errors: 0' pan.out && ! grep -q 'assertion violated' pan.out; then
        echo "every property holds"
        exit 0
    fi
    echo "check.sh: the model violates a property; spin's trail:" >&2
    cat pan.out >&2
    "$spin" -t "${defines[@]}" model.pml 2>&1 | grep -E 't=[0-9]|violated' | sed 's/  */ /g; s/^/  /' >&2
    exit 1
    ;;
violates)
    if grep -q "assertion violated $property" pan.out && [ -e model.pml.trail ]; then
        echo "violates $property, as expected; spin's trail:"
        "$spin" -t "${defines[@]}" model.pml 2>&1 | grep -E 't=[0-9]|violated' | sed 's/  */ /g; s/^/  /'
        exit 0
    fi
    echo "check.sh: expected a violation of $property, which the search did not find:" >&2
    cat pan.out >&2
    exit 1
    ;;
esac
