// The random token that marks one holder of a lock in Redis. Private to the library's sources.
#pragma once

#include <string>

namespace colock::detail {

// 128 bits from the OS random source as 32 lower-case hex digits; never the same twice, in
// this process or a child forked from it.
std::string random_token();

} // namespace colock::detail
