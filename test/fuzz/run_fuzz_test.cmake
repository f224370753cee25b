# Called by ctest: cmake -DSOURCE_DIR=<repo> -DWORK_DIR=<dir> -DCLANGXX=<clang++>
#   -DFUZZ_SECONDS=<n> -P run_fuzz_test.cmake
# Configures and builds test/fuzz with clang, then runs the fuzzer for FUZZ_SECONDS from the
# committed seed corpus. Any failure, or a crash the fuzzer finds, fails the test.
foreach(var SOURCE_DIR WORK_DIR CLANGXX FUZZ_SECONDS)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
        message(FATAL_ERROR "run_fuzz_test.cmake: -D${var}=... is required")
    endif()
endforeach()

set(fuzz_dir ${SOURCE_DIR}/test/fuzz)
set(build_dir ${WORK_DIR}/build)

execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${fuzz_dir} -B ${build_dir}
        -DCMAKE_CXX_COMPILER=${CLANGXX} -DCMAKE_BUILD_TYPE=RelWithDebInfo
    RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the fuzzer failed (${rc})")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${build_dir} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the fuzzer failed (${rc})")
endif()

# New inputs go to a scratch corpus in WORK_DIR (listed first, so libFuzzer writes there);
# the committed seeds are only read.
set(scratch ${WORK_DIR}/corpus)
set(artifacts ${WORK_DIR}/artifacts/)
file(MAKE_DIRECTORY ${scratch} ${artifacts})

execute_process(
    COMMAND ${build_dir}/fuzz_resp3_parser
        ${scratch} ${fuzz_dir}/corpus
        -dict=${fuzz_dir}/resp3.dict
        -max_total_time=${FUZZ_SECONDS}
        -rss_limit_mb=2048
        -timeout=25
        -max_len=4096
        -artifact_prefix=${artifacts}
        -print_final_stats=1
    RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the fuzzer failed (${rc}); the reproducer is in ${artifacts}")
endif()
