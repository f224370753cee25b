# ctest package_add_subdirectory and package_fetchcontent: configures test/package/subproject,
# which takes colock from its sources as a part of itself. Proves colock's CMake works below
# another project (the targets, the options that default off there) and that the README's
# add_subdirectory and FetchContent lines work as the README says. With BUILD=ON it also builds
# and runs the program. ctest builds one of the two only: both compile the same sources with
# the same flags (FetchContent ends in add_subdirectory), and each build of the library costs
# a minute of CPU.
#
# With SHARED=ON colock is built as a shared library (BUILD_SHARED_LIBS), which the program must
# load by its soname, libcolock.so.MAJOR.MINOR; the docs' snippets (test/readme/snippets.cpp,
# most of the public surface) are linked against it too, so that a symbol the library does not
# export fails the test.
#
# Variables: SOURCE_DIR (colock's source tree), WORK_DIR (scratch space), CXX_COMPILER, MODE
# (add_subdirectory or fetchcontent), BUILD (ON or OFF), SHARED (ON or OFF).
cmake_minimum_required(VERSION 3.25)
set(PACKAGE_TEST package_${MODE})
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
package_test_require(SOURCE_DIR WORK_DIR CXX_COMPILER MODE SHARED)

set(build_dir "${WORK_DIR}/build")
file(REMOVE_RECURSE "${build_dir}")

set(snippets "")
if(SHARED)
    set(snippets "${SOURCE_DIR}/test/readme/snippets.cpp")
endif()

# Unoptimised, without debug information, and in batches (COLOCK_UNITY_BUILD, half the CPU):
# the point is that it builds and links.
package_run_step("configure"
    ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/subproject" -B "${build_dir}"
        ${package_generator_args}
        -DCMAKE_BUILD_TYPE=Debug
        -DCMAKE_CXX_FLAGS_DEBUG=-O0
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DCOLOCK_UNITY_BUILD=ON
        -DCOLOCK_CONSUMER_MODE=${MODE}
        -DCOLOCK_SOURCE_DIR=${SOURCE_DIR}
        -DCOLOCK_GIT_REPOSITORY=https://example.invalid/colock.git
        -DCOLOCK_GIT_TAG=v0.0.0
        -DFETCHCONTENT_SOURCE_DIR_COLOCK=${SOURCE_DIR}
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON
        -DBUILD_SHARED_LIBS=${SHARED}
        -DCOLOCK_SNIPPETS=${snippets})
if(NOT BUILD)
    return()
endif()
package_run_step("build" ${CMAKE_COMMAND} --build "${build_dir}")
package_run_program("${build_dir}/my_server" "colock [0-9.]+: ok")
if(NOT SHARED)
    return()
endif()

# The program needs the shared library by its soname, which the library has.
file(STRINGS "${SOURCE_DIR}/include/colock/version.hpp" version_lines
    REGEX "^#define COLOCK_VERSION_(MAJOR|MINOR) [0-9]+$")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*" "\\1.\\2" abi "${version_lines}")
set(soname "libcolock.so.${abi}")
find_program(READELF readelf REQUIRED)
execute_process(COMMAND ${READELF} -d "${build_dir}/my_server" OUTPUT_VARIABLE dynamic)
if(NOT dynamic MATCHES "NEEDED[^\n]*\\[${soname}\\]")
    message(FATAL_ERROR "${PACKAGE_TEST}: my_server does not load ${soname}:\n${dynamic}")
endif()
file(GLOB_RECURSE library "${build_dir}/${soname}")
if(NOT library)
    message(FATAL_ERROR "${PACKAGE_TEST}: no ${soname} in the build")
endif()
list(GET library 0 library)
execute_process(COMMAND ${READELF} -d "${library}" OUTPUT_VARIABLE dynamic)
if(NOT dynamic MATCHES "SONAME[^\n]*\\[${soname}\\]")
    message(FATAL_ERROR "${PACKAGE_TEST}: ${library} has no SONAME ${soname}:\n${dynamic}")
endif()
message(STATUS "${PACKAGE_TEST}: my_server loads ${soname}")
