#!/usr/bin/env bash
# Usage: check_snippets.sh MARKDOWN... -- SOURCE...
#        check_snippets.sh README.md SOURCE...      (one Markdown file: no `--` needed)
#
# Keeps the code blocks of the Markdown pages (README.md, docs/*.md) and the sources they come
# from in step (ctest readme_snippets). A block preceded by the line
#
#     <!-- snippet: NAME -->
#
# must be the region NAME of one of the SOURCEs: the lines between `//[NAME` and `//]` (`#[NAME`
# and `#]` in CMake files), without the lines from `//<-` to `//->` (`#<-`, `#->`), each side with
# its common indentation stripped, byte for byte. A line `//+ TEXT` of a region is shown as TEXT
# and not compiled there: the includes of a snippet that sits inside a function, each of which
# the source must really include. Every ```cpp block of every page needs such a
# marker (a C++ block that is not compiled is how the README drifted before); a snippet is shown
# once, on one page; and every region of the SOURCEs must be shown on one of the pages. Prints
# every mismatch with the page, line and snippet's name and a diff; exits 1 when there is one,
# 2 on bad usage.
set -euo pipefail

usage() {
    echo "usage: $0 MARKDOWN... -- SOURCE...   (or: $0 README.md SOURCE...)" >&2
    exit 2
}
# shellcheck source=snippet_args.sh
source "$(dirname "${BASH_SOURCE[0]}")/snippet_args.sh"
parse_snippet_args "$@"
pages=("${snippet_pages[@]}")
sources=("${snippet_sources[@]}")
if [ "${#pages[@]}" -eq 0 ] || [ "${#sources[@]}" -eq 0 ]; then
    usage
fi
for f in "${pages[@]}" "${sources[@]}"; do
    if [ ! -r "$f" ]; then
        echo "check_snippets: cannot read $f" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/colock-snippets.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/readme" "$work/source"
: >"$work/problems"

# The pages' marked blocks, one file each, and an index "NAME FILE:LINE"; problems as text. All
# the pages go through one awk, so that a snippet shown on two pages is caught.
awk -v out="$work/readme" -v index_file="$work/readme.index" -v problems="$work/problems" '
function problem(text) { print FILENAME ":" FNR ": " text >> problems }
function valid(name) { return name ~ /^[A-Za-z0-9_]+$/ }
function end_of_page() {
    if (in_block) print previous ": the code block that starts before the end of the file is " \
        "not closed" >> problems
    if (pending != "") print previous ":" pending_line ": snippet marker \"" pending "\" is " \
        "not followed by a code block" >> problems
    in_block = 0
    name = ""
    pending = ""
}
FNR == 1 && NR != 1 { end_of_page() }
{
    previous = FILENAME
    line = $0
    sub(/\r$/, "", line)
}
in_block {
    if (line ~ /^[ \t]*```[ \t]*$/) {
        in_block = 0
        if (name != "") close(out "/" name)
        name = ""
    } else if (name != "") {
        print line > (out "/" name)
    }
    next
}
line ~ /^[ \t]*<!--[ \t]*snippet:/ {
    if (pending != "") problem("snippet marker \"" pending "\" is not followed by a code block")
    pending = line
    sub(/^[ \t]*<!--[ \t]*snippet:[ \t]*/, "", pending)
    sub(/[ \t]*-->[ \t]*$/, "", pending)
    if (!valid(pending)) {
        problem("bad snippet marker: " line)
        pending = ""
    }
    pending_line = FNR
    next
}
line ~ /^[ \t]*```/ {
    lang = line
    sub(/^[ \t]*```[ \t]*/, "", lang)
    sub(/[ \t].*$/, "", lang)
    in_block = 1
    name = pending
    pending = ""
    if (name == "" && (lang == "cpp" || lang == "c++" || lang == "cxx")) {
        problem("a ```" lang " block without a snippet marker: put <!-- snippet: NAME --> " \
                "on the line before it and the code in a compiled source between //[NAME and //]")
    } else if (name != "" && (name in seen)) {
        problem("snippet \"" name "\" is shown twice (also at " seen[name] ")")
        name = ""
    } else if (name != "") {
        seen[name] = FILENAME ":" FNR
        printf "" > (out "/" name)
        print name, FILENAME ":" FNR >> index_file
    }
    next
}
{
    if (pending != "" && line !~ /^[ \t]*$/) {
        problem("snippet marker \"" pending "\" is not followed by a code block")
        pending = ""
    }
}
END { end_of_page() }
' "${pages[@]}"

# The sources' regions, one file each, and an index "NAME FILE:LINE".
for src in "${sources[@]}"; do
    awk -v out="$work/source" -v index_file="$work/source.index" -v problems="$work/problems" \
        -v file="$src" '
function problem(text) { print file ":" FNR ": " text >> problems }
{
    line = $0
    sub(/\r$/, "", line)
    trimmed = line
    gsub(/^[ \t]+|[ \t]+$/, "", trimmed)
}
trimmed ~ /^(\/\/|#)\[[A-Za-z0-9_]+$/ {
    if (name != "") {
        problem("region \"" substr(trimmed, index(trimmed, "[") + 1) "\" starts inside region \"" \
                name "\"")
        next
    }
    name = substr(trimmed, index(trimmed, "[") + 1)
    start = FNR
    hidden = 0
    if (system("test -e \"" out "/" name "\"") == 0) {
        problem("region \"" name "\" is defined twice")
        name = "#duplicate"
    } else {
        printf "" > (out "/" name)
        print name, file ":" FNR >> index_file
    }
    next
}
trimmed ~ /^(\/\/|#)\]$/ {
    if (name == "") problem("region end without a start")
    else if (hidden) problem("region \"" name "\" ends inside a hidden part (//<- without //->)")
    if (name != "" && name != "#duplicate") close(out "/" name)
    name = ""
    next
}
trimmed ~ /^(\/\/|#)<-$/ {
    if (name == "") problem("//<- outside a region")
    hidden = 1
    next
}
trimmed ~ /^(\/\/|#)->$/ {
    if (!hidden) problem("//-> without //<-")
    hidden = 0
    next
}
trimmed ~ /^#include[ \t]*[<"]/ { included[trimmed] = 1 }
trimmed ~ /^\/\/\+( |$)/ {
    if (name == "" || hidden) {
        problem("//+ outside a region, or in a hidden part")
        next
    }
    sub(/\/\/\+ ?/, "", line)
    shown = line
    gsub(/^[ \t]+|[ \t]+$/, "", shown)
    if (shown ~ /^#include/) shown_include[shown] = FNR
}
name != "" && name != "#duplicate" && !hidden { print line > (out "/" name) }
END {
    if (name != "") problem("region \"" name "\" (line " start ") is not closed")
    for (inc in shown_include)
        if (!(inc in included))
            print file ":" shown_include[inc] ": the snippet shows \"" inc "\", which " \
                  "the file does not include" >> problems
}
' "$src"
done

# Strips the common indentation of the non-blank lines; blank lines become empty.
dedent() {
    awk '
    { lines[NR] = $0 }
    /[^ \t]/ {
        match($0, /^[ \t]*/)
        if (min == "" || RLENGTH < min) min = RLENGTH
    }
    END {
        for (i = 1; i <= NR; ++i) {
            if (lines[i] ~ /^[ \t]*$/) print ""
            else print substr(lines[i], min + 1)
        }
    }' "$1"
}

checked=0
if [ -f "$work/readme.index" ]; then
    while read -r name page_line; do
        origin=$(awk -v n="$name" '$1 == n { print $2; exit }' "$work/source.index" 2>/dev/null ||
            true)
        if [ -z "$origin" ]; then
            echo "$page_line: snippet \"$name\" has no region //[$name ... //] in" \
                "the sources (${sources[*]})" >>"$work/problems"
            continue
        fi
        dedent "$work/readme/$name" >"$work/readme/$name.dedented"
        dedent "$work/source/$name" >"$work/source/$name.dedented"
        if ! diff -u --label "$origin (region $name)" --label "$page_line (snippet $name)" \
            "$work/source/$name.dedented" "$work/readme/$name.dedented" >"$work/$name.diff"; then
            {
                echo "$page_line: snippet \"$name\" differs from its region at $origin;" \
                    "change both together:"
                cat "$work/$name.diff"
            } >>"$work/problems"
        fi
        checked=$((checked + 1))
    done <"$work/readme.index"
fi
if [ -f "$work/source.index" ]; then
    while read -r name origin; do
        if ! awk -v n="$name" '$1 == n { found = 1 } END { exit !found }' \
            "$work/readme.index" 2>/dev/null; then
            echo "$origin: region \"$name\" is not shown on any of the ${#pages[@]} pages" \
                "(no <!-- snippet: $name -->)" >>"$work/problems"
        fi
    done <"$work/source.index"
fi

if [ -s "$work/problems" ]; then
    echo "check_snippets: the pages and their snippet sources disagree:" >&2
    cat "$work/problems" >&2
    exit 1
fi
echo "check_snippets: $checked snippets of ${#pages[@]} pages match their sources"
