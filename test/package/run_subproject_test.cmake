# ctest package_add_subdirectory and package_fetchcontent: configures test/package/subproject,
# which takes colock from its sources as a part of itself. Proves colock's CMake works below
# another project (the targets, the options that default off there) and that the README's
# add_subdirectory and FetchContent lines work as the README says. With BUILD=ON it also builds
# and runs the program. ctest builds one of the two only: both compile the same sources with
# the same flags (FetchContent ends in add_subdirectory), and each build of the library costs
# a minute of CPU.
#
# Variables: SOURCE_DIR (colock's source tree), WORK_DIR (scratch space), CXX_COMPILER, MODE
# (add_subdirectory or fetchcontent), BUILD (ON or OFF).
cmake_minimum_required(VERSION 3.25)
set(PACKAGE_TEST package_${MODE})
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
package_test_require(SOURCE_DIR WORK_DIR CXX_COMPILER MODE)

set(build_dir "${WORK_DIR}/build")
file(REMOVE_RECURSE "${build_dir}")

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
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
if(NOT BUILD)
    return()
endif()
package_run_step("build" ${CMAKE_COMMAND} --build "${build_dir}")
package_run_program("${build_dir}/my_server" "colock [0-9.]+: ok")
