// The scripts as sent: each text (from lock_scripts.hpp, semaphore_scripts.hpp,
// election_scripts.hpp, fence_scripts.hpp and multi_scripts.hpp, which the benchmark and tests
// share) with its SHA-1, for EVALSHA, and its name as a Redis Function, for FCALL; and the set of
// them one connection sends, in the variant its server takes, with the Functions library that holds
// them all. Private to the library's sources.
#pragma once

#include <string>
#include <string_view>

namespace colock::detail {

struct script {
    std::string source;
    std::string sha;      // lower-case hex
    std::string function; // its name in its set's library (script_set::library)
};

// `source` with its SHA-1; `sharded`: the variant for a Cluster, whose wake-ups go by SPUBLISH on
// the lock's own slot (the channels share the keys' hash tag) instead of a PUBLISH that every
// node repeats. Each script is made once, in its set (scripts_for).
script make_script(std::string_view source, bool sharded = false);

// How a connection's server takes the scripts' wake-ups, chosen once per connection (the script
// client's) from what the server offers: `plain`, one server or Sentinel's primary, where a
// script publishes with PUBLISH; `sharded`, a Cluster, where it publishes with SPUBLISH on the
// keys' slot. How a script is called (FCALL or EVALSHA) is the script client's choice, per
// connection too (script_client.hpp), over the same set.
enum class script_variant { plain, sharded };

// Every script of the family, in one variant; made once per variant.
struct script_set {
    script_variant variant;
    // The lock's and the election's lease (lock_scripts.hpp).
    script acquire, release, extend, status, force_unlock;
    // The uncontended cycle's calls of one key, for a value the process knows (lock_scripts.hpp).
    script acquire_known, release_known;
    // The renewals of leases with values the process knows, in batches (lock_scripts.hpp).
    script extend_known;
    // The semaphore's and the read-write lock's (semaphore_scripts.hpp).
    script semaphore_acquire, semaphore_release, semaphore_downgrade, semaphore_extend,
        semaphore_read;
    // The election's term (election_scripts.hpp).
    script proclaim, election_read;
    // A fenced resource's writes (fence_scripts.hpp).
    script fenced_write;
    // A lock set's: several names at once, on the lock's keys (multi_scripts.hpp).
    script acquire_all, release_all, extend_all;

    // Every script above as a Redis Functions library, for FUNCTION LOAD: "colock_" and a hash of
    // the scripts, and its functions "<library>_<script>". Named after what it holds, so that
    // the libraries of two releases (or of the two variants) live side by side on one server,
    // each release calling its own: a fleet upgrades one process at a time. The scripts that
    // free or renew what is held run on a full server (flag allow-oom: a release must free the
    // lock even then), the ones that only read are flagged no-writes; those that grant are
    // refused there with the server's OOM error, as EVALSHA refuses them at their first write.
    std::string library_name;
    std::string library;

    // A script may publish on a channel outside its keys' slot (a locker's holder record):
    // not on a Cluster, where what it would tell is published after it, from the client.
    bool publishes_beyond_slot() const noexcept { return variant == script_variant::plain; }
};

script_set const& scripts_for(script_variant variant);

} // namespace colock::detail
