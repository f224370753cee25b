# Sourced by check_snippets.sh and its self-test: reads `PAGE... -- SOURCE...` (or the older
# `README.md SOURCE...`) into the arrays snippet_pages and snippet_sources; either is empty when
# the arguments name none.
# shellcheck shell=bash
parse_snippet_args() {
    snippet_pages=()
    snippet_sources=()
    if printf '%s\n' "$@" | grep -qx -- '--'; then
        local seen_separator=0 arg
        for arg in "$@"; do
            if [ "$seen_separator" -eq 0 ] && [ "$arg" = "--" ]; then
                seen_separator=1
            elif [ "$seen_separator" -eq 0 ]; then
                snippet_pages+=("$arg")
            else
                snippet_sources+=("$arg")
            fi
        done
    elif [ "$#" -ge 2 ]; then
        snippet_pages=("$1")
        shift
        snippet_sources=("$@")
    fi
}
