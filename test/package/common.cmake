# What the package tests (run_consumer_test.cmake, run_subproject_test.cmake) share: the
# required -D variables, the generator, running a step, running a program and checking what it
# says. PACKAGE_TEST names the test in every message.

# Fails unless each variable named is defined and not empty.
function(package_test_require)
    foreach(var IN LISTS ARGN)
        if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
            message(FATAL_ERROR "${PACKAGE_TEST}: -D${var}=... is required")
        endif()
    endforeach()
endfunction()

# Ninja when it is installed, as the builds that run these tests use.
set(package_generator_args "")
find_program(NINJA_EXECUTABLE ninja)
if(NINJA_EXECUTABLE)
    set(package_generator_args -G Ninja)
endif()

# package_run_step(NAME COMMAND...): runs the command; fails the test when it fails.
function(package_run_step name)
    message(STATUS "${PACKAGE_TEST}: ${name}")
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${PACKAGE_TEST}: ${name} failed (${rc})")
    endif()
endfunction()

# package_run_program(PROGRAM REGEX): runs PROGRAM; it must exit 0 with output matching REGEX.
function(package_run_program program regex)
    execute_process(COMMAND "${program}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
        ERROR_VARIABLE err)
    message(STATUS "${PACKAGE_TEST}: ${program} said: ${out}${err}")
    if(NOT rc EQUAL 0 OR NOT out MATCHES "${regex}")
        message(FATAL_ERROR "${PACKAGE_TEST}: ${program} failed (${rc}) or did not say '${regex}'")
    endif()
endfunction()
