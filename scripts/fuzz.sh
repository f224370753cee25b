#!/usr/bin/env bash
# Runs the RESP3 parser fuzzer for longer than the 60 s ctest does, then merges what it found
# into the committed corpus test/fuzz/corpus.
#
#   scripts/fuzz.sh [SECONDS]     default 600; FUZZ_JOBS=N runs N fuzzing processes (default 1)
#
# 1. Builds test/fuzz with clang in build/fuzz (the same project the ctest fuzz_resp3_parser
#    builds).
# 2. Fuzzes for SECONDS from a fresh scratch corpus (build/fuzz/run/corpus, where new inputs go)
#    plus the committed seeds, which are only read.
# 3. Merges the scratch corpus into test/fuzz/corpus with -merge=1: only inputs that reach an
#    edge the committed corpus does not are copied, named by the SHA-1 of their content. The
#    merge counts edges only (-use_counters=0): an input that merely runs a known edge more
#    often stays in the scratch corpus, so the committed corpus stays small. Existing files are
#    kept. Commit the new files to keep the coverage.
#
# Exits non-zero when the fuzzer finds a crash, leak, timeout or out-of-memory input, and
# prints where the reproducer is. Installs the Debian packages it needs first.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-600}
jobs=${FUZZ_JOBS:-1}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/fuzz.sh [SECONDS]   (a positive number of seconds, not '$seconds')" >&2
    exit 2
fi
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: FUZZ_JOBS must be a positive number, not '$jobs'" >&2
    exit 2
fi

./scripts/install-deps.sh

# Debian's clang-14 package installs clang++-14; the clang package adds the clang++ name.
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clangxx" ]; then
    echo "fuzz.sh: no clang++ or clang++-14 on PATH" >&2
    exit 1
fi

# The sanitizer runtimes of clang 14 can fail at start on kernels with 32 bits of mmap
# randomisation ("unexpected memory mapping"); run with ASLR off when the kernel lets us.
norandom=()
if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    norandom=(setarch "$(uname -m)" -R)
fi

fuzz_dir=test/fuzz
seeds=$fuzz_dir/corpus
build=build/fuzz
work=$build/run
scratch=$work/corpus
artifacts=$work/artifacts
log=$work/fuzz.log

generator=()
if command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$fuzz_dir" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$clangxx" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build"
fuzzer=$build/fuzz_resp3_parser

rm -rf "$work"
mkdir -p "$scratch" "$artifacts"

count_files() { find "$1" -maxdepth 1 -type f | wc -l; }
count_bytes() { find "$1" -maxdepth 1 -type f -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }'; }
seeds_before=$(count_files "$seeds")

# One process, or -fork=N: N child processes whose finds the parent gathers into $scratch.
parallel=()
if [ "$jobs" -gt 1 ]; then
    parallel=(-fork="$jobs")
fi

echo "fuzz.sh: fuzzing for ${seconds}s with $jobs job(s); log in $log"
start=$SECONDS
set +e
"${norandom[@]}" "$fuzzer" "$scratch" "$seeds" \
    "${parallel[@]}" \
    -dict="$fuzz_dir/resp3.dict" \
    -max_total_time="$seconds" \
    -rss_limit_mb=2048 \
    -timeout=25 \
    -max_len=4096 \
    -artifact_prefix="$artifacts/" \
    -print_final_stats=1 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
fuzz_time=$((SECONDS - start))

# 72 is libFuzzer's exit code for an interrupted run (Ctrl-C): still merge what was found.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 72 ]; then
    echo >&2
    echo "fuzz.sh: the fuzzer failed (exit $rc) after ${fuzz_time}s. Reproducer(s):" >&2
    find "$PWD/$artifacts" -maxdepth 1 -type f -printf '  %p (%s bytes)\n' >&2
    echo "Replay one with: $PWD/$fuzzer <file>" >&2
    exit 1
fi

echo "fuzz.sh: merging new inputs that add coverage into $seeds"
"${norandom[@]}" "$fuzzer" -merge=1 -use_counters=0 -max_len=4096 -rss_limit_mb=2048 -timeout=25 \
    -artifact_prefix="$artifacts/" "$seeds" "$scratch" >"$work/merge.log" 2>&1 || {
    echo "fuzz.sh: the merge failed; see $work/merge.log" >&2
    tail -n 20 "$work/merge.log" >&2
    exit 1
}

seeds_after=$(count_files "$seeds")
last_status=$(grep -E '(^#[0-9]+).*cov: [0-9]+' "$log" | tail -n 1 || true)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
if [ -z "$execs" ]; then
    execs=$(sed -En 's/^#([0-9]+).*/\1/p' <<<"$last_status")
fi
cov=$(sed -En 's/.*cov: ([0-9]+).*/\1/p' <<<"$last_status")
ft=$(sed -En 's/.*ft: ([0-9]+).*/\1/p' <<<"$last_status")

echo
echo "==== fuzz.sh summary"
echo "  time:        ${fuzz_time}s fuzzing, $jobs job(s)"
echo "  executions:  ${execs:-?}"
echo "  coverage:    ${cov:-?} edges, ${ft:-?} features"
echo "  scratch:     $(count_files "$scratch") inputs found in this run"
echo "  corpus:      $seeds: $seeds_before -> $seeds_after files (+$((seeds_after - seeds_before)))," \
    "$(count_bytes "$seeds") bytes"
merged=$(sed -n 's/^MERGE-OUTER: \(.* new coverage edges\)$/\1/p' "$work/merge.log" | tail -n 1)
echo "  merge:       ${merged:-?}"
if [ "$seeds_after" -gt "$seeds_before" ]; then
    echo "  new files:   git status $seeds (commit them to keep the coverage)"
fi
