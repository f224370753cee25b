// The lock scripts as sent: each text (from lock_scripts.hpp, which the benchmark shares)
// with its SHA-1, for EVALSHA. Private to the library's sources.
#pragma once

#include <string>
#include <string_view>

namespace colock::detail {

struct script {
    std::string source;
    std::string sha; // lower-case hex
};

// `sharded`: the variant for a Cluster, whose wake-ups go by SPUBLISH on the lock's own slot
// (the channels share the keys' hash tag) instead of a PUBLISH that every node repeats.
script const& acquire_script(bool sharded = false);
script const& release_script(bool sharded = false);
script const& extend_script();
script const& status_script();
script const& force_unlock_script();

} // namespace colock::detail
