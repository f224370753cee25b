// The scripts as sent: each text (from lock_scripts.hpp, semaphore_scripts.hpp and
// election_scripts.hpp, which the benchmark and tests share) with its SHA-1, for EVALSHA; and
// the set of them one connection sends, in the variant its server takes. Private to the
// library's sources.
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

// How a connection's server takes the scripts, chosen once per connection (the script client's)
// from what the server offers: `plain`, one server or Sentinel's primary, where a script
// publishes with PUBLISH; `sharded`, a Cluster, where it publishes with SPUBLISH on the keys'
// slot. The next variants (Redis Functions, newer commands) go here, not into the callers.
enum class script_variant { plain, sharded };

// Every script of the family, in one variant; made once per variant.
struct script_set {
    script_variant variant;
    // The lock's and the election's lease (lock_scripts.hpp).
    script acquire, release, extend, status, force_unlock;
    // The semaphore's and the read-write lock's (semaphore_scripts.hpp).
    script semaphore_acquire, semaphore_release, semaphore_downgrade, semaphore_extend,
        semaphore_read;
    // The election's term (election_scripts.hpp).
    script proclaim, election_read;

    // A script may publish on a channel outside its keys' slot (a locker's holder record):
    // not on a Cluster, where what it would tell is published after it, from the client.
    bool publishes_beyond_slot() const noexcept { return variant == script_variant::plain; }
};

script_set const& scripts_for(script_variant variant);

} // namespace colock::detail
