// doctest's implementation and main, one object shared by the test binaries; the tests live in
// the other files.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
