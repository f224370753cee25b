/// \file
/// colock's version. The one place it is set: CMake reads it from here for the package version
/// (find_package(colock 0.1)), the pkg-config file and the colock tool.
#pragma once

/// colock's major version; a change of it may break the API.
#define COLOCK_VERSION_MAJOR 0
/// colock's minor version.
#define COLOCK_VERSION_MINOR 1
/// colock's patch version.
#define COLOCK_VERSION_PATCH 0
/// The three as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `#if` comparisons.
#define COLOCK_VERSION                                                                             \
    (COLOCK_VERSION_MAJOR * 10000 + COLOCK_VERSION_MINOR * 100 + COLOCK_VERSION_PATCH)
/// "MAJOR.MINOR.PATCH".
#define COLOCK_VERSION_STRING "0.1.0"
