#!/usr/bin/env bash
# Usage: check_snippets.sh README.md SOURCE...
#
# Keeps the code blocks of README.md and the sources they come from in step (ctest
# readme_snippets). A block preceded by the line
#
#     <!-- snippet: NAME -->
#
# must be the region NAME of one of the SOURCEs: the lines between `//[NAME` and `//]` (`#[NAME`
# and `#]` in CMake files), without the lines from `//<-` to `//->` (`#<-`, `#->`), each side with
# its common indentation stripped, byte for byte. Every ```cpp block needs such a marker (a C++
# block that is not compiled is how the README drifted before), and every region of the SOURCEs
# must be shown in the README. Prints every mismatch with the snippet's name and a diff; exits 1
# when there is one, 2 on bad usage.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 README.md SOURCE..." >&2
    exit 2
fi
readme=$1
shift
for f in "$readme" "$@"; do
    if [ ! -r "$f" ]; then
        echo "check_snippets: cannot read $f" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/colock-snippets.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/readme" "$work/source"
: >"$work/problems"

# The README's marked blocks, one file each, and an index "NAME LINE"; problems as text.
awk -v out="$work/readme" -v index_file="$work/readme.index" -v problems="$work/problems" \
    -v file="$readme" '
function problem(text) { print file ":" FNR ": " text >> problems }
function valid(name) { return name ~ /^[A-Za-z0-9_]+$/ }
{
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
        problem("snippet \"" name "\" is shown twice (also at line " seen[name] ")")
        name = ""
    } else if (name != "") {
        seen[name] = FNR
        printf "" > (out "/" name)
        print name, FNR >> index_file
    }
    next
}
{
    if (pending != "" && line !~ /^[ \t]*$/) {
        problem("snippet marker \"" pending "\" is not followed by a code block")
        pending = ""
    }
}
END {
    if (in_block) problem("the code block that starts before the end of the file is not closed")
    if (pending != "") problem("snippet marker \"" pending "\" is not followed by a code block")
}
' "$readme"

# The sources' regions, one file each, and an index "NAME FILE:LINE".
for src in "$@"; do
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
name != "" && name != "#duplicate" && !hidden { print line > (out "/" name) }
END { if (name != "") problem("region \"" name "\" (line " start ") is not closed") }
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
    while read -r name readme_line; do
        origin=$(awk -v n="$name" '$1 == n { print $2; exit }' "$work/source.index" 2>/dev/null ||
            true)
        if [ -z "$origin" ]; then
            echo "$readme:$readme_line: snippet \"$name\" has no region //[$name ... //] in" \
                "the sources ($*)" >>"$work/problems"
            continue
        fi
        dedent "$work/readme/$name" >"$work/readme/$name.dedented"
        dedent "$work/source/$name" >"$work/source/$name.dedented"
        if ! diff -u --label "$origin (region $name)" --label "$readme:$readme_line (snippet $name)" \
            "$work/source/$name.dedented" "$work/readme/$name.dedented" >"$work/$name.diff"; then
            {
                echo "$readme:$readme_line: snippet \"$name\" differs from its region at $origin;" \
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
            echo "$origin: region \"$name\" is not shown in $readme (no <!-- snippet: $name -->)" \
                >>"$work/problems"
        fi
    done <"$work/source.index"
fi

if [ -s "$work/problems" ]; then
    echo "check_snippets: README.md and its snippet sources disagree:" >&2
    cat "$work/problems" >&2
    exit 1
fi
echo "check_snippets: $checked snippets of $readme match their sources"
