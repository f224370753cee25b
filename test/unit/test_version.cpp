// colock/version.hpp: the string, the number and the parts say the same version.
#include <colock/version.hpp>

#include <doctest/doctest.h>

#include <string>

TEST_CASE("version: the string and the number are made of the three parts") {
    std::string const parts = std::to_string(COLOCK_VERSION_MAJOR) + "." +
                              std::to_string(COLOCK_VERSION_MINOR) + "." +
                              std::to_string(COLOCK_VERSION_PATCH);
    CHECK(std::string(COLOCK_VERSION_STRING) == parts);
    CHECK(COLOCK_VERSION ==
          COLOCK_VERSION_MAJOR * 10000 + COLOCK_VERSION_MINOR * 100 + COLOCK_VERSION_PATCH);
    static_assert(COLOCK_VERSION_MINOR < 100 && COLOCK_VERSION_PATCH < 100,
                  "COLOCK_VERSION packs minor and patch into two digits each");
}
