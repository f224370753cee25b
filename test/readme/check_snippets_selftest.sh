#!/usr/bin/env bash
# Usage: check_snippets_selftest.sh README.md SOURCE...
#
# ctest readme_snippets_selftest: shows that check_snippets.sh catches drift. On copies of the
# README and the snippet sources it makes one change at a time and expects the check to fail,
# naming the snippet (and showing the diff), or to pass where the change is allowed (hidden lines,
# indentation). Exits 1 when any expectation is not met.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 README.md SOURCE..." >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check="$here/check_snippets.sh"
readme=$1
shift
snippets_cpp=
for src in "$@"; do
    case "$src" in
    *.cpp) snippets_cpp=$src ;;
    esac
done
if [ -z "$snippets_cpp" ]; then
    echo "selftest: no .cpp among the sources" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/colock-snippets-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

# Fresh copies: $work/README.md and $work/src/<n>-<basename>; the .cpp one is $work/cpp.
fresh() {
    rm -rf "$work/src"
    mkdir -p "$work/src"
    cp "$readme" "$work/README.md"
    sources=()
    local n=0 src copy
    for src in "$@"; do
        n=$((n + 1))
        copy="$work/src/$n-$(basename "$src")"
        cp "$src" "$copy"
        sources+=("$copy")
        if [ "$src" = "$snippets_cpp" ]; then
            cpp=$copy
        fi
    done
}

# expect pass|fail TITLE [TEXT...]: runs the check on the copies; for fail, the output must
# contain every TEXT.
expect() {
    local want=$1 title=$2 rc=0 text missing=
    shift 2
    "$check" "$work/README.md" "${sources[@]}" >"$work/out" 2>&1 || rc=$?
    if [ "$want" = pass ] && [ "$rc" -eq 0 ]; then
        echo "ok:   $title (passes)"
        return
    fi
    if [ "$want" = fail ] && [ "$rc" -eq 1 ]; then
        for text in "$@"; do
            grep -qF -- "$text" "$work/out" || missing+=" [$text]"
        done
        if [ -z "$missing" ]; then
            echo "ok:   $title (fails, saying:)"
            sed 's/^/          /' "$work/out"
            return
        fi
    fi
    echo "FAIL: $title: expected the check to $want (exit $rc${missing:+, output lacks$missing}):"
    sed 's/^/          /' "$work/out"
    failures=$((failures + 1))
}

# changed FILE: the previous edit must have changed FILE (else the test itself is stale).
changed() {
    if cmp -s "$1" "$2"; then
        echo "FAIL: the edit did not change $(basename "$2"): this self-test is out of date"
        failures=$((failures + 1))
        return 1
    fi
}

fresh "$@"
expect pass "the README and sources as they are"

fresh "$@"
sed -i '0,/"refund:acct-42"/s//"refund:acct-43"/' "$work/README.md"
if changed "$readme" "$work/README.md"; then
    expect fail "a README block edited without its source" \
        'snippet "readme_quick_start" differs' '+    auto guard = co_await locker.co_lock("refund:acct-43");'
fi

fresh "$@"
sed -i '0,/store\.write(guard\.fence(), data)/s//store.write(guard.fence(), std::move(data))/' "$cpp"
if changed "$snippets_cpp" "$cpp"; then
    expect fail "a source region edited without the README" \
        'snippet "readme_fencing" differs' '-co_await store.write(guard.fence(), std::move(data));'
fi

fresh "$@"
# shellcheck disable=SC2016 # backquotes of a Markdown fence, not a command
printf '\n```cpp\nint not_compiled = 0;\n```\n' >>"$work/README.md"
expect fail "a C++ block without a marker" 'a ```cpp block without a snippet marker'

fresh "$@"
sed -i '/<!-- snippet: readme_fencing -->/d' "$work/README.md"
if changed "$readme" "$work/README.md"; then
    expect fail "a marker removed" 'a ```cpp block without a snippet marker' \
        'region "readme_fencing" is not shown'
fi

fresh "$@"
sed -i 's/<!-- snippet: readme_fencing -->/<!-- snippet: readme_fencing_renamed -->/' \
    "$work/README.md"
if changed "$readme" "$work/README.md"; then
    expect fail "a marker naming no region" 'snippet "readme_fencing_renamed" has no region'
fi

fresh "$@"
printf '//[readme_fencing\nint twice = 0;\n//]\n' >>"$cpp"
expect fail "a region defined twice" 'region "readme_fencing" is defined twice'

fresh "$@"
sed -i '0,/^ *\/\/->$/s//    int hidden_change = 0;\n&/' "$cpp"
if changed "$snippets_cpp" "$cpp"; then
    expect pass "a change between //<- and //-> (not shown in the README)"
fi

fresh "$@"
awk '/<!-- snippet: readme_fencing -->/ { indent = 1 }
     indent && /^```$/ && seen { print "    " $0; indent = 0; next }
     indent && /^```/ { seen = 1 }
     { print (indent && seen ? "    " $0 : $0) }' "$readme" >"$work/README.md"
if changed "$readme" "$work/README.md"; then
    expect pass "a README block indented (in a list item)"
fi

if [ "$failures" -ne 0 ]; then
    echo "selftest: $failures expectation(s) not met" >&2
    exit 1
fi
echo "selftest: check_snippets.sh catches every change it should"
