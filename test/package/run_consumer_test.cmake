# ctest package_consumer: builds colock alone (Release, no tests/examples/bench, no sanitizers),
# installs it into a private prefix, then builds and runs a separate project that uses it through
# find_package(colock). Proves the installed headers, targets and config file are complete, and
# that the README's quick start builds as the README says (it runs in ctest readme_snippets_run).
#
# Variables: SOURCE_DIR (colock's source tree), WORK_DIR (scratch space), CXX_COMPILER.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR WORK_DIR CXX_COMPILER)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
        message(FATAL_ERROR "run_consumer_test.cmake: -D${var}=... is required")
    endif()
endforeach()

set(build_dir "${WORK_DIR}/build")
set(prefix "${WORK_DIR}/prefix")
set(consumer_build_dir "${WORK_DIR}/consumer-build")
# The library build is kept between runs (incremental); what is installed and the consumer are
# made afresh, so nothing stale can make the test pass.
file(REMOVE_RECURSE "${prefix}" "${consumer_build_dir}")

set(generator_args "")
find_program(NINJA_EXECUTABLE ninja)
if(NINJA_EXECUTABLE AND NOT EXISTS "${build_dir}/CMakeCache.txt")
    set(generator_args -G Ninja)
endif()

function(run_step name)
    message(STATUS "package_consumer: ${name}")
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "package_consumer: ${name} failed (${rc})")
    endif()
endfunction()

run_step("configure colock"
    ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build_dir}" ${generator_args}
        -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DCMAKE_INSTALL_PREFIX=${prefix}
        -DCOLOCK_BUILD_TESTS=OFF
        -DCOLOCK_BUILD_EXAMPLES=OFF
        -DCOLOCK_BUILD_BENCH=OFF
        -DCOLOCK_SANITIZE=
        -DCOLOCK_WERROR=OFF)
run_step("build colock" ${CMAKE_COMMAND} --build "${build_dir}" --parallel)
run_step("install colock" ${CMAKE_COMMAND} --install "${build_dir}" --prefix "${prefix}")

# The consumer's sources, with the README's quick start as refund.cpp (its CMakeLists.txt builds
# it exactly as the README says), copied afresh.
set(consumer_source_dir "${WORK_DIR}/consumer-src")
file(REMOVE_RECURSE "${consumer_source_dir}")
file(COPY "${CMAKE_CURRENT_LIST_DIR}/consumer/" DESTINATION "${consumer_source_dir}")
file(COPY_FILE "${SOURCE_DIR}/test/readme/snippets.cpp" "${consumer_source_dir}/refund.cpp")

set(consumer_generator_args "")
if(NINJA_EXECUTABLE)
    set(consumer_generator_args -G Ninja)
endif()
run_step("configure the consumer"
    ${CMAKE_COMMAND} -S "${consumer_source_dir}" -B "${consumer_build_dir}"
        ${consumer_generator_args}
        -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DCMAKE_PREFIX_PATH=${prefix})
run_step("build the consumer" ${CMAKE_COMMAND} --build "${consumer_build_dir}")

message(STATUS "package_consumer: run the consumer")
execute_process(COMMAND "${consumer_build_dir}/colock_consumer"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "consumer output: ${out}${err}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package_consumer: the consumer failed (${rc})")
endif()
if(NOT out MATCHES "colock consumer: ok")
    message(FATAL_ERROR "package_consumer: unexpected consumer output")
endif()
