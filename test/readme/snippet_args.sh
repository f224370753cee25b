# Sourced by check_snippets.sh and its self-test: reads `PAGE... -- SOURCE...` (or the older
# `README.md SOURCE...`) into the arrays snippet_pages and snippet_sources; either is empty when
# the arguments name none.
# shellcheck shell=bash
parse_snippet_args() {
    snippet_pages=()
    snippet_sources=()
    # No `printf | grep -q` here: under pipefail, grep leaving early can fail printf (SIGPIPE).
    local has_separator=0 arg
    for arg in "$@"; do
        [ "$arg" = "--" ] && has_separator=1
    done
    if [ "$has_separator" -eq 1 ]; then
        local seen_separator=0
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
