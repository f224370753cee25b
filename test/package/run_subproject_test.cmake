# ctest package_add_subdirectory and package_fetchcontent: configures test/package/subproject,
# which takes colock from its sources as a part of itself. Proves colock's CMake works below
# another project (the targets, the options that default off there) and that the README's
# add_subdirectory and FetchContent lines work as the README says. With BUILD=ON it also builds
# and runs the program. ctest builds one of the two only: both compile the same sources with
# the same flags (FetchContent ends in add_subdirectory), and each build of the library costs
# a minute and a half of CPU.
#
# Variables: SOURCE_DIR (colock's source tree), WORK_DIR (scratch space), CXX_COMPILER, MODE
# (add_subdirectory or fetchcontent), BUILD (ON or OFF).
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR WORK_DIR CXX_COMPILER MODE)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
        message(FATAL_ERROR "run_subproject_test.cmake: -D${var}=... is required")
    endif()
endforeach()

set(build_dir "${WORK_DIR}/build")
file(REMOVE_RECURSE "${build_dir}")

set(generator_args "")
find_program(NINJA_EXECUTABLE ninja)
if(NINJA_EXECUTABLE)
    set(generator_args -G Ninja)
endif()

function(run_step name)
    message(STATUS "package_${MODE}: ${name}")
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "package_${MODE}: ${name} failed (${rc})")
    endif()
endfunction()

# Unoptimised and without debug information: the point is that it builds and links.
run_step("configure"
    ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/subproject" -B "${build_dir}"
        ${generator_args}
        -DCMAKE_BUILD_TYPE=Debug
        -DCMAKE_CXX_FLAGS_DEBUG=-O0
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        -DCOLOCK_CONSUMER_MODE=${MODE}
        -DCOLOCK_SOURCE_DIR=${SOURCE_DIR}
        -DCOLOCK_GIT_REPOSITORY=https://example.invalid/colock.git
        -DCOLOCK_GIT_TAG=v0.0.0
        -DFETCHCONTENT_SOURCE_DIR_COLOCK=${SOURCE_DIR}
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
if(NOT BUILD)
    return()
endif()
run_step("build" ${CMAKE_COMMAND} --build "${build_dir}")

execute_process(COMMAND "${build_dir}/my_server"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "package_${MODE}: my_server said: ${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "colock [0-9.]+: ok")
    message(FATAL_ERROR "package_${MODE}: my_server failed (${rc})")
endif()
