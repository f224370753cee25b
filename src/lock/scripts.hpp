// The lock scripts as sent: each text (from colock/detail/lock_scripts.hpp, which tools share)
// with its SHA-1, for EVALSHA. Private to the library's sources.
#pragma once

#include <string>
#include <string_view>

namespace colock::detail {

struct script {
    std::string_view source;
    std::string sha; // lower-case hex
};

script const& acquire_script();
script const& release_script();
script const& extend_script();
script const& status_script();
script const& force_unlock_script();

} // namespace colock::detail
