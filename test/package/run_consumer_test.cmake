# ctest package_consumer: installs the colock built here into a private prefix, then builds and
# runs a separate project that uses it through find_package(colock). Proves the installed
# headers, targets and config file are complete, and that the README's quick start builds as the
# README says (it runs in ctest readme_snippets_run), and that a program builds with nothing but
# what pkg-config says.
#
# The library is not compiled again: the build that runs this test has just compiled it from the
# same sources, and a second build cost more than the rest of the test together.
#
# Variables: SOURCE_DIR (colock's source tree), BUILD_DIR (the build running this test, already
# built), WORK_DIR (scratch space), CXX_COMPILER, SANITIZE (the build's COLOCK_SANITIZE; the
# consumer must link the same runtimes), API_REFERENCE (the build's COLOCK_BUILD_API_REFERENCE:
# the package must hold it).
cmake_minimum_required(VERSION 3.25)
set(PACKAGE_TEST package_consumer)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
package_test_require(SOURCE_DIR BUILD_DIR WORK_DIR CXX_COMPILER)

set(prefix "${WORK_DIR}/prefix")
set(consumer_build_dir "${WORK_DIR}/consumer-build")
# What is installed and the consumer are made afresh, so nothing stale can make the test pass.
file(REMOVE_RECURSE "${prefix}" "${consumer_build_dir}")

package_run_step("install colock" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
set(docs LICENSE README.md CHANGELOG.md docs/guide.md)
if(API_REFERENCE)
    # The API reference, when the build made it (COLOCK_BUILD_API_REFERENCE): its main page and
    # the locker's.
    list(APPEND docs html/index.html html/classcolock_1_1locker.html)
endif()
foreach(doc IN LISTS docs)
    if(NOT EXISTS "${prefix}/share/doc/colock/${doc}")
        message(FATAL_ERROR "package_consumer: the package has no share/doc/colock/${doc}")
    endif()
endforeach()

set(sanitize_flags "")
if(SANITIZE)
    set(sanitize_flags "-fsanitize=${SANITIZE}")
endif()

# pkg-config: a program compiled and linked with nothing but what colock.pc says (and the
# build's sanitizer runtimes).
find_program(PKG_CONFIG_EXECUTABLE pkg-config REQUIRED)
file(GLOB pc_file "${prefix}/lib*/pkgconfig/colock.pc" "${prefix}/lib/*/pkgconfig/colock.pc")
if(NOT pc_file)
    message(FATAL_ERROR "package_consumer: the package has no lib/pkgconfig/colock.pc")
endif()
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --cflags --libs colock
    RESULT_VARIABLE rc OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package_consumer: pkg-config --cflags --libs colock failed (${rc})")
endif()
message(STATUS "package_consumer: pkg-config says: ${pc_flags}")
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(sanitize_args UNIX_COMMAND "${sanitize_flags}")
set(pc_program "${WORK_DIR}/pkg-config-consumer")
package_run_step("build with pkg-config"
    ${CXX_COMPILER} ${sanitize_args} -o "${pc_program}"
        "${CMAKE_CURRENT_LIST_DIR}/subproject/main.cpp" ${pc_flags})
package_run_program("${pc_program}" "colock [0-9.]+: ok")

# The consumer's sources, with the README's quick start as refund.cpp (its CMakeLists.txt builds
# it exactly as the README says), copied afresh.
set(consumer_source_dir "${WORK_DIR}/consumer-src")
file(REMOVE_RECURSE "${consumer_source_dir}")
file(COPY "${CMAKE_CURRENT_LIST_DIR}/consumer/" DESTINATION "${consumer_source_dir}")
file(COPY_FILE "${SOURCE_DIR}/test/readme/snippets.cpp" "${consumer_source_dir}/refund.cpp")

package_run_step("configure the consumer"
    ${CMAKE_COMMAND} -S "${consumer_source_dir}" -B "${consumer_build_dir}"
        ${package_generator_args}
        -DCMAKE_BUILD_TYPE=Debug
        -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
        "-DCMAKE_CXX_FLAGS=${sanitize_flags}"
        "-DCMAKE_EXE_LINKER_FLAGS=${sanitize_flags}"
        -DCMAKE_PREFIX_PATH=${prefix})
package_run_step("build the consumer" ${CMAKE_COMMAND} --build "${consumer_build_dir}")

package_run_program("${consumer_build_dir}/colock_consumer" "colock consumer: ok")
