#!/usr/bin/env bash
# Usage: check_snippets_selftest.sh MARKDOWN... -- SOURCE...
#        check_snippets_selftest.sh README.md SOURCE...
#
# ctest readme_snippets_selftest: shows that check_snippets.sh catches drift. On copies of the
# pages (README.md, docs/*.md) and the snippet sources it makes one change at a time and expects
# the check to fail, naming the snippet (and showing the diff), or to pass where the change is
# allowed (hidden lines, indentation). Takes the same arguments as check_snippets.sh; the pages
# must include the ones that show readme_quick_start and safety_fencing. Exits 1 when any
# expectation is not met.
set -euo pipefail

usage() {
    echo "usage: $0 MARKDOWN... -- SOURCE...   (or: $0 README.md SOURCE...)" >&2
    exit 2
}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check="$here/check_snippets.sh"
# shellcheck source=snippet_args.sh
source "$here/snippet_args.sh"
parse_snippet_args "$@"
pages_in=("${snippet_pages[@]}")
sources_in=("${snippet_sources[@]}")
if [ "${#pages_in[@]}" -eq 0 ] || [ "${#sources_in[@]}" -eq 0 ]; then
    usage
fi
snippets_cpp=
for src in "${sources_in[@]}"; do
    case "$src" in
    *.cpp) snippets_cpp=$src ;;
    esac
done
if [ -z "$snippets_cpp" ]; then
    echo "selftest: no .cpp among the sources" >&2
    exit 2
fi

# The page that shows snippet NAME, among the given ones.
page_of() {
    local page
    for page in "${pages_in[@]}"; do
        if grep -q "<!-- snippet: $1 -->" "$page"; then
            echo "$page"
            return
        fi
    done
    echo "selftest: no page shows the snippet $1" >&2
    exit 2
}
quick_page_in=$(page_of readme_quick_start)
fencing_page_in=$(page_of safety_fencing)

work=$(mktemp -d "${TMPDIR:-/tmp}/colock-snippets-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

# Fresh copies: $work/pages/<n>-<basename> and $work/src/<n>-<basename>. $quick_page is the copy
# of the page with the quick start, $fencing_page the one with the fencing snippet, $other_page
# a page other than the fencing one, $cpp the copy of the .cpp source.
fresh() {
    rm -rf "$work/pages" "$work/src"
    mkdir -p "$work/pages" "$work/src"
    pages=()
    sources=()
    other_page=
    local n=0 page copy src
    for page in "${pages_in[@]}"; do
        n=$((n + 1))
        copy="$work/pages/$n-$(basename "$page")"
        cp "$page" "$copy"
        pages+=("$copy")
        [ "$page" = "$quick_page_in" ] && quick_page=$copy
        [ "$page" = "$fencing_page_in" ] && fencing_page=$copy
        [ "$page" != "$fencing_page_in" ] && [ -z "$other_page" ] && other_page=$copy
    done
    for src in "${sources_in[@]}"; do
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
    "$check" "${pages[@]}" -- "${sources[@]}" >"$work/out" 2>&1 || rc=$?
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

fresh
expect pass "the pages and sources as they are"

fresh
sed -i '0,/"refund:acct-42"/s//"refund:acct-43"/' "$quick_page"
if changed "$quick_page_in" "$quick_page"; then
    expect fail "a page's block edited without its source" \
        'snippet "readme_quick_start" differs' '+    auto guard = co_await locker.co_lock("refund:acct-43");'
fi

fresh
sed -i '0,/store\.write(guard\.fence(), data)/s//store.write(guard.fence(), std::move(data))/' "$cpp"
if changed "$snippets_cpp" "$cpp"; then
    expect fail "a source region edited without its page" \
        'snippet "safety_fencing" differs' '-co_await store.write(guard.fence(), std::move(data));'
fi

fresh
# shellcheck disable=SC2016 # backquotes of a Markdown fence, not a command
printf '\n```cpp\nint not_compiled = 0;\n```\n' >>"$fencing_page"
expect fail "a C++ block without a marker" 'a ```cpp block without a snippet marker'

fresh
# shellcheck disable=SC2016 # backquotes of a Markdown fence, not a command
printf '\n```cpp\nint not_compiled = 0;\n```\n' >>"${pages[-1]}"
expect fail "a C++ block without a marker on the last page" \
    "$(basename "${pages[-1]}"):" 'a ```cpp block without a snippet marker'

fresh
sed -i '/<!-- snippet: safety_fencing -->/d' "$fencing_page"
if changed "$fencing_page_in" "$fencing_page"; then
    expect fail "a marker removed" 'a ```cpp block without a snippet marker' \
        'region "safety_fencing" is not shown'
fi

fresh
sed -i 's/<!-- snippet: safety_fencing -->/<!-- snippet: safety_fencing_renamed -->/' \
    "$fencing_page"
if changed "$fencing_page_in" "$fencing_page"; then
    expect fail "a marker naming no region" 'snippet "safety_fencing_renamed" has no region'
fi

fresh
awk '/<!-- snippet: safety_fencing -->/, /^```$/' "$fencing_page" >>"$other_page"
expect fail "a snippet shown on two pages" 'snippet "safety_fencing" is shown twice'

fresh
printf '\n<!-- snippet: safety_fencing -->\n' >>"$other_page"
expect fail "a marker left open at the end of a page" \
    'snippet marker "safety_fencing" is not followed by a code block'

fresh
printf '//[safety_fencing\nint twice = 0;\n//]\n' >>"$cpp"
expect fail "a region defined twice" 'region "safety_fencing" is defined twice'

fresh
sed -i '0,/^ *\/\/->$/s//    int hidden_change = 0;\n&/' "$cpp"
if changed "$snippets_cpp" "$cpp"; then
    expect pass "a change between //<- and //-> (not shown on a page)"
fi

# The fencing snippet shows a header the file does not include, on its page and in its region.
fresh
sed -i '0,/\/\/+ #include <colock\/locker\.hpp>/s//\/\/+ #include <colock\/lockr.hpp>/' "$cpp"
sed -i '0,/^#include <colock\/locker\.hpp>$/s//#include <colock\/lockr.hpp>/' "$fencing_page"
if changed "$snippets_cpp" "$cpp" && changed "$fencing_page_in" "$fencing_page"; then
    expect fail "a snippet showing an include the source does not have" \
        '"#include <colock/lockr.hpp>", which the file does not include'
fi

fresh
awk '/<!-- snippet: safety_fencing -->/ { indent = 1 }
     indent && /^```$/ && seen { print "    " $0; indent = 0; next }
     indent && /^```/ { seen = 1 }
     { print (indent && seen ? "    " $0 : $0) }' "$fencing_page_in" >"$fencing_page"
if changed "$fencing_page_in" "$fencing_page"; then
    expect pass "a block indented (in a list item)"
fi

if [ "$failures" -ne 0 ]; then
    echo "selftest: $failures expectation(s) not met" >&2
    exit 1
fi
echo "selftest: check_snippets.sh catches every change it should"
