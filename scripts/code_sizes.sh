#!/usr/bin/env bash
# Lists what is over the size limits of issue 45: a file over 500 lines, a class (or struct or
# union) over 300, a function over 80.
#
#   scripts/code_sizes.sh [dir or file ...]      (default: src)
#
# Limits can be changed with COLOCK_MAX_FILE, COLOCK_MAX_CLASS, COLOCK_MAX_FUNCTION. Exits 1 when
# something is over a limit, 0 otherwise.
#
# A heuristic on clang-format'ed code (the root .clang-format), with no parser:
#   - Comments, string and character literals (raw strings included) and preprocessor lines are
#     blanked first, so the braces left are the code's own. A quote after a letter or digit is a
#     digit separator (1'000), not a character literal.
#   - A brace block is classified by its head, the code since the previous `;`, `{` or `}`: with
#     `namespace` or `extern "C"` it is a namespace; starting (after any `template <...>`) with
#     `class`, `struct` or `union` it is a class; with a `(` and directly in a namespace or a class
#     it is a function (member functions defined in a class, constructors with their initializer
#     lists, operators); anything else (an enum, an initializer, a lambda inside a function) is
#     neither, and its lines count for the function or class around it.
#   - A length is counted from the first line of the head (the template line or the signature)
#     to the line of the closing brace, both included. A nested class counts for itself and for
#     the class around it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

max_file=${COLOCK_MAX_FILE:-500}
max_class=${COLOCK_MAX_CLASS:-300}
max_function=${COLOCK_MAX_FUNCTION:-80}

[ $# -gt 0 ] || set -- src
mapfile -t files < <(find "$@" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \
    -o -name '*.ipp' \) | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || {
    echo "code_sizes.sh: no C++ file in $*" >&2
    exit 2
}

awk -v q="'" -v max_file="$max_file" -v max_class="$max_class" -v max_function="$max_function" '
function flush_file() {
    if (fname != "" && FNR_last > max_file)
        big_files[++n_files] = sprintf("%6d  %s", FNR_last, fname)
}
# The code of one line with comments, literals and preprocessor lines blanked; state (a block
# comment, a raw string, a continued directive) carries over to the next line.
function code_of(line,    out, i, c, n, d) {
    out = ""
    n = length(line)
    if (in_directive) {
        in_directive = (substr(line, n) == "\\")
        return ""
    }
    if (!in_comment && raw_end == "" && line ~ /^[ \t]*#/) {
        in_directive = (substr(line, n) == "\\")
        return ""
    }
    i = 1
    while (i <= n) {
        if (in_comment) {
            d = index(substr(line, i), "*/")
            if (d == 0)
                return out
            i += d + 1
            in_comment = 0
            continue
        }
        if (raw_end != "") {
            d = index(substr(line, i), raw_end)
            if (d == 0)
                return out
            i += d + length(raw_end) - 1
            raw_end = ""
            out = out "\"\""
            continue
        }
        c = substr(line, i, 1)
        if (c == "/" && substr(line, i + 1, 1) == "/")
            return out
        if (c == "/" && substr(line, i + 1, 1) == "*") {
            in_comment = 1
            i += 2
            continue
        }
        if (c == "R" && substr(line, i + 1, 1) == "\"" && substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/ ||
            c == "R" && substr(line, i + 1, 1) == "\"" && substr(line, i - 2, 2) ~ /(u8|[uUL])$/) {
            d = index(substr(line, i + 2), "(")
            if (d > 0) {
                raw_end = ")" substr(line, i + 2, d - 1) "\""
                i += 2 + d
                continue
            }
        }
        if (c == "\"" || (c == q && substr(line, i - 1, 1) !~ /[A-Za-z0-9_]/)) {
            i++
            while (i <= n && substr(line, i, 1) != c) {
                if (substr(line, i, 1) == "\\")
                    i++
                i++
            }
            i++
            out = out c c
            continue
        }
        out = out c
        i++
    }
    return out
}
function classify(head, outer,    h, tdepth, k, ch) {
    h = head
    gsub(/[ \t]+/, " ", h)
    sub(/^ /, "", h)
    sub(/^(public|protected|private) ?: ?/, "", h)
    if (h ~ /(^|[^A-Za-z0-9_])namespace([^A-Za-z0-9_]|$)/ || h ~ /^extern ""/)
        return "namespace"
    while (h ~ /^template ?</) {
        # drop a template head, nested angle brackets included
        tdepth = 0
        for (k = 9; k <= length(h); k++) {
            ch = substr(h, k, 1)
            if (ch == "<") tdepth++
            else if (ch == ">" && --tdepth == 0) break
        }
        h = substr(h, k + 1)
        sub(/^ /, "", h)
    }
    if (h ~ /^(class|struct|union)([^A-Za-z0-9_]|$)/)
        return "class"
    if (index(h, "(") > 0 && (outer == "namespace" || outer == "class"))
        return "function"
    return "other"
}
function name_of(head, kind,    h, m) {
    h = head
    gsub(/[ \t]+/, " ", h)
    if (kind == "class") {
        sub(/^.*(class|struct|union) /, "", h)
        sub(/[ :{].*$/, "", h)
        return h
    }
    if (match(h, /operator *([^ (]+|\(\)) *\(/)) {
        m = substr(h, 1, RSTART + RLENGTH - 2)
        sub(/^.*[ *&]([A-Za-z0-9_:~]*operator)/, "\\1", m)
        gsub(/ /, "", m)
        return m
    }
    m = substr(h, 1, index(h, "(") - 1)
    sub(/ +$/, "", m)
    sub(/^.*[^A-Za-z0-9_:~]/, "", m)
    return m
}
FNR == 1 {
    flush_file()
    fname = FILENAME
    depth = 0
    head = ""
    head_line = 0
    in_comment = 0
    in_directive = 0
    raw_end = ""
}
{
    FNR_last = FNR
    code = code_of($0)
    n = length(code)
    for (i = 1; i <= n; i++) {
        c = substr(code, i, 1)
        if (c == "{") {
            outer = depth == 0 ? "namespace" : kind[depth]
            k_ = classify(head, outer)
            depth++
            kind[depth] = k_
            start[depth] = head_line ? head_line : FNR
            label[depth] = (k_ == "class" || k_ == "function") ? name_of(head, k_) : ""
            head = ""
            head_line = 0
        } else if (c == "}") {
            if (depth > 0) {
                len = FNR - start[depth] + 1
                if (kind[depth] == "class" && len > max_class)
                    big_classes[++n_classes] = sprintf("%6d  %s:%d  %s", len, fname, start[depth], label[depth])
                if (kind[depth] == "function" && len > max_function)
                    big_functions[++n_functions] = sprintf("%6d  %s:%d  %s", len, fname, start[depth], label[depth])
                depth--
            }
            head = ""
            head_line = 0
        } else if (c == ";") {
            head = ""
            head_line = 0
        } else {
            if (c !~ /[ \t]/ && head_line == 0)
                head_line = FNR
            if (head_line)
                head = head c
        }
    }
    if (head_line)
        head = head " "
}
END {
    flush_file()
    printf "files over %d lines: %d\n", max_file, n_files
    for (j = 1; j <= n_files; j++) print big_files[j]
    printf "classes over %d lines: %d\n", max_class, n_classes
    for (j = 1; j <= n_classes; j++) print big_classes[j]
    printf "functions over %d lines: %d\n", max_function, n_functions
    for (j = 1; j <= n_functions; j++) print big_functions[j]
    exit (n_files + n_classes + n_functions > 0) ? 1 : 0
}
' "${files[@]}"
