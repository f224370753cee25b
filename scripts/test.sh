#!/usr/bin/env bash
# The full test run, as CI does it (.ci/run):
#   0. build/docs: the API reference (Doxygen, docs/Doxyfile) from the public headers' comments,
#      every warning an error: a public name without a doc comment fails the run. Seconds.
#   1. build/asan: GCC, AddressSanitizer + UndefinedBehaviorSanitizer, warnings as errors;
#      builds everything but the benchmarks and runs every ctest (unit, integration against
#      throwaway redis-servers, examples, the README's snippets, the parser fuzzer, the
#      installed-package consumer, which finds the API reference installed with the package).
#   2. build/tsan: GCC, ThreadSanitizer; builds (beside step 1's tests, niced) and runs only the
#      multi-threaded test.
#   3. build/clang: Clang 14, warnings as errors, BOOST_ASIO_NO_DEPRECATED (colock uses no
#      deprecated Asio); builds what a user builds (the library, each public header on its own,
#      the examples, the README's snippets, the benchmarks, the tool) and the unit tests, which
#      it runs.
# Installs the Debian packages it needs first. Exits non-zero on the first failure.
#
# --quick, for the inner loop: steps 0 and 1 only, without the tests labelled slow (the reliability
# scenarios, the fuzzer, the package consumer). CI and a change's confirming runs use the full
# run.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
case "${1:-}" in
"") ;;
--quick) quick=1 ;;
*)
    echo "usage: $0 [--quick]" >&2
    exit 2
    ;;
esac

jobs=${COLOCK_JOBS:-$(nproc 2>/dev/null || echo 2)}
# Tests run side by side: they spend their time waiting on servers and timers, each with its own
# servers on free ports, its own temporary directory and its own keys. Twice as many as there
# are cores; the two that compute (the fuzzer, the package consumer's compile) run niced.
ctest_jobs=${COLOCK_CTEST_JOBS:-$((jobs * 2))}
start=$SECONDS
step_start=$SECONDS

step() {
    echo
    echo "==== $* ($(elapsed $((SECONDS - start))) since start)"
    step_start=$SECONDS
}
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
done_step() { echo "---- $1 took $(elapsed $((SECONDS - step_start)))"; }
tsan_build_pid=
on_exit() {
    local rc=$?
    # A build still running beside the tests (step 2's) ends with the run.
    if [ -n "$tsan_build_pid" ]; then
        kill -- "-$tsan_build_pid" 2>/dev/null || true
    fi
    echo
    if [ "$rc" -eq 0 ]; then
        echo "==== test.sh: all passed in $(elapsed $((SECONDS - start)))"
    else
        echo "==== test.sh: FAILED (exit $rc) after $(elapsed $((SECONDS - start)))" >&2
    fi
}
trap on_exit EXIT

# Sanitizer runtimes of GCC 12 / clang 14 predate kernels with 32 bits of mmap randomisation
# and can fail at start ("unexpected memory mapping"); run the tests with ASLR off when the
# kernel lets us.
norandom=()
if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    norandom=(setarch "$(uname -m)" -R)
fi

step "install dependencies"
./scripts/install-deps.sh
done_step "install"

# Doxygen 1.9.4 warns about undocumented classes, functions, fields, enums and macros, but not
# about an enumerator without a comment, nor about a namespace without one (whose members it
# then does not check at all): the awk finds both in the XML output.
step "API reference build/docs (doxygen $(doxygen --version), warnings as errors)"
rm -rf build/docs
mkdir -p build
if ! doxygen docs/Doxyfile; then
    echo "test.sh: the API reference has warnings (above): every public name in include/colock" \
        "needs a doc comment (///), and the comments must be valid Doxygen" >&2
    exit 1
fi
if ! awk '
    /<compounddef /   { kind = $0; sub(/.*kind="/, "", kind); sub(/".*/, "", kind); documented = 0 }
    /<compoundname>/  { compound = $0; gsub(/.*<compoundname>|<\/compoundname>.*/, "", compound) }
    /<memberdef /     { in_member = 1 }
    /<\/memberdef>/   { in_member = 0 }
    /<qualifiedname>/ { enum = $0; gsub(/.*<qualifiedname>|<\/qualifiedname>.*/, "", enum) }
    /<enumvalue /     { in_value = 1; value_documented = 0 }
    in_value && /<name>/ { value = $0; gsub(/.*<name>|<\/name>.*/, "", value) }
    /<para>/ {
        if (in_value) value_documented = 1
        else if (!in_member) documented = 1
    }
    /<\/enumvalue>/ {
        in_value = 0
        if (!value_documented) { print "enumerator " enum "::" value " is not documented"; bad = 1 }
    }
    /<\/compounddef>/ {
        if (kind == "namespace" && compound ~ /^colock/ && !documented) {
            print "namespace " compound " is not documented (\\namespace in colock/colock.hpp)"
            bad = 1
        }
    }
    END { exit bad }' build/docs/xml/namespace*.xml build/docs/xml/class*.xml \
    build/docs/xml/struct*.xml >&2; then
    echo "test.sh: the API reference is incomplete (above): document each name it lists" >&2
    exit 1
fi
echo "API reference: build/docs/html/index.html"
done_step "API reference"

# -g1: line tables, all a sanitizer's report needs; full debug information doubled the objects
# and cost a quarter of the compile time. The ASan build is not optimised (-O0): optimising its
# Asio coroutines cost 2.8 times the compile time, and the tests wait on servers and timers, not
# on the CPU. The TSan build keeps -O1, so GCC's warnings that need optimisation
# (-Wmaybe-uninitialized and the like) still check the library, with warnings as errors.
common=(-G Ninja -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Debug)

# The benchmarks are left out of it: ctest runs none of them, and the Clang build (step 3)
# compiles them with warnings as errors. That saves about a minute and a half of the run.
# The library is compiled with every check of both sanitizers; what is built on it leaves out
# the four UBSan checks of pointer and array accesses (COLOCK_SANITIZE_OUTSIDE_LIBRARY_EXCLUDE in
# CMakeLists.txt says why), which halves the build.
# A unity build (COLOCK_UNITY_BUILD: sources compiled in batches) in every step: the test
# files each instantiate the same Asio coroutine machinery, and compiled in batches they build in
# about half the time. Step 3 builds the library file by file (COLOCK_UNITY_BUILD_LIBRARY off),
# which keeps a missing include in src/ from hiding behind the file before it in a batch.
step "configure build/asan (address,undefined)"
cmake -S . -B build/asan "${common[@]}" -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" \
    -DCOLOCK_SANITIZE=address,undefined -DCOLOCK_WERROR=ON -DCOLOCK_BUILD_BENCH=OFF \
    -DCOLOCK_SANITIZE_OUTSIDE_LIBRARY_EXCLUDE=null,alignment,pointer-overflow,bounds \
    -DCOLOCK_UNITY_BUILD=ON -DCOLOCK_BUILD_API_REFERENCE=ON
done_step "configure asan"

step "build build/asan (-j$jobs)"
cmake --build build/asan --parallel "$jobs"
done_step "build asan"

# -Wno-tsan: GCC warns that TSan does not model the std::atomic_thread_fence in Asio's
# reference counts; with warnings as errors that would stop the build.
# -Wno-maybe-uninitialized: GCC 12 at -O1 reports the move of an empty std::optional (of
# leader_change, in leader_watch.cpp's co_next) as a read of its uninitialised payload, in some
# groupings of the unity build and not in others: a false report, which -O0 (ASan) and Clang
# do not make.
# Step 2's build starts now, beside step 1's tests, at the lowest priority: the tests wait on
# servers and timers and leave about a tenth of the CPU idle, which it takes, while the tests
# (and the package tests and the fuzzer, niced 10) come first. A session of its own, so that
# a failure of the tests stops the whole build (on_exit).
tsan_build_pid=
if [ "$quick" -eq 0 ]; then
    mkdir -p build
    setsid -w bash -c '
        nice -n 19 cmake -S . -B build/tsan "$@" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
            -DCOLOCK_SANITIZE=thread -DCOLOCK_WERROR=ON -DCMAKE_CXX_FLAGS="-Wno-tsan -Wno-maybe-uninitialized" \
            -DCOLOCK_BUILD_EXAMPLES=OFF -DCOLOCK_BUILD_BENCH=OFF -DCOLOCK_UNITY_BUILD=ON &&
            nice -n 19 cmake --build build/tsan --parallel "'"$jobs"'" \
                --target colock_threads_test' tsan-build "${common[@]}" \
        >build/tsan-build.log 2>&1 &
    tsan_build_pid=$!
fi

ctest_filter=()
[ "$quick" -eq 0 ] || ctest_filter=(--label-exclude slow)
step "ctest build/asan (-j$ctest_jobs${ctest_filter[*]:+ ${ctest_filter[*]}})"
(
    cd build/asan
    ASAN_OPTIONS=detect_leaks=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "${norandom[@]}" ctest --output-on-failure --no-tests=error --parallel "$ctest_jobs" \
        "${ctest_filter[@]}"
)
done_step "ctest asan"
[ "$quick" -eq 0 ] || exit 0

step "build build/tsan target colock_threads_test (-j$jobs; started beside ctest asan)"
tsan_build_rc=0
wait "$tsan_build_pid" || tsan_build_rc=$?
tsan_build_pid=
tail -n 40 build/tsan-build.log
if [ "$tsan_build_rc" -ne 0 ]; then
    echo "test.sh: the TSan build failed (exit $tsan_build_rc); its whole log:" >&2
    cat build/tsan-build.log >&2
    exit 1
fi
done_step "build tsan"

# test/tsan.supp: the reports proven false (Asio's fenced reference counts; see the file).
# Passed by absolute path, quoted for TSan's option parser, as ctest runs from build/tsan.
# history_size=7 (the most): a suppression matches a report by its stacks, and with the default
# history TSan sometimes cannot restore the earlier access's stack ("failed to restore the
# stack"), so the known false report escaped its suppression (2 runs in 105).
tsan_supp="$PWD/test/tsan.supp"
step "ctest build/tsan -R ^threads\$"
(
    cd build/tsan
    TSAN_OPTIONS="halt_on_error=1:history_size=7:second_deadlock_stack=1:suppressions='$tsan_supp'" \
        "${norandom[@]}" ctest --output-on-failure -R '^threads$' --no-tests=error
)
done_step "ctest tsan"

# Clang 14 must build what users build with warnings as errors too, the library file by file;
# its unit tests run as a check, without debug information (nothing here reads a stack). The tests that need a server (integration, reliability, threads: GCC builds and runs
# them twice above) are left out, about two minutes of the run. Ninja's <dir>/all targets.
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -n "$clangxx" ]; then
    step "configure build/clang ($clangxx, warnings as errors)"
    cmake -S . -B build/clang -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_CXX_FLAGS_DEBUG="-O0" -DCOLOCK_WERROR=ON -DCOLOCK_ASIO_NO_DEPRECATED=ON \
        -DCOLOCK_UNITY_BUILD=ON -DCOLOCK_UNITY_BUILD_LIBRARY=OFF
    done_step "configure clang"

    step "build build/clang (-j$jobs)"
    cmake --build build/clang --parallel "$jobs" --target colock colock_unit_tests \
        colock_header_check colock_readme_snippets examples/all bench/all tools/all
    done_step "build clang"

    step "ctest build/clang -R ^unit\$"
    (cd build/clang && ctest --output-on-failure -R '^unit$' --no-tests=error)
    done_step "ctest clang"
fi
