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

// `source` with its SHA-1; `sharded`: the variant for a Cluster, whose wake-ups go by SPUBLISH on
// the lock's own slot (the channels share the keys' hash tag) instead of a PUBLISH that every
// node repeats. Each script is made once, in its accessor beside its text (lock_scripts.hpp).
script make_script(std::string_view source, bool sharded = false);

} // namespace colock::detail
