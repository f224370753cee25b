// The leases a quorum store granted and still renews, per lock key: which primaries count for
// each (their count of server changes when they granted or last confirmed it), and how often a
// lease on the key lost its majority to replaced primaries (lease_store::server_changes). Sans
// I/O; on the quorum store's strand. Tested in test/unit/test_quorum_leases.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace colock::detail::redlock {

class quorum_leases {
public:
    explicit quorum_leases(std::size_t primaries) : primaries_(primaries) {}

    // A lease made: `counted[i]` is primary i's count of server changes when it granted the
    // lease, nothing when it did not.
    void record(std::string const& key, std::string const& token,
                std::vector<std::optional<std::uint64_t>> counted);
    // A late grant by primary `i` (count `changes`) joins a lease that was made.
    void count(std::string const& key, std::string const& token, std::size_t i,
               std::uint64_t changes);
    // Whether primary `i`'s confirmation (count `changes`) counts: it granted or confirmed the
    // lease on the same instance, or never counted for it before (a late grant). A lease not
    // tracked (released meanwhile) counts as is.
    bool confirm(std::string const& key, std::string const& token, std::size_t i,
                 std::uint64_t changes);
    void forget(std::string const& key, std::string const& token);

    // A primary was replaced: `changes_now(i, key)` is primary i's count of server changes for
    // `key` now. A lease left with fewer than a majority counting is lost, once: its key's
    // count moves. True when one was.
    bool
    mark_replaced(std::function<std::uint64_t(std::size_t, std::string const&)> const& changes_now);

    // How often a lease on `key` lost its majority.
    std::uint64_t changes(std::string const& key) const noexcept;
    // The leases tracked on `key`.
    std::size_t tracked(std::string const& key) const noexcept;

private:
    struct lease_track {
        std::vector<std::optional<std::uint64_t>> counted;
        bool lost = false; // fell below a majority (counted once)
    };
    struct key_track {
        std::uint64_t changes = 0;
        std::unordered_map<std::string, lease_track> leases;
    };
    lease_track* find(std::string const& key, std::string const& token);

    std::size_t const primaries_;
    std::unordered_map<std::string, key_track> keys_;
};

} // namespace colock::detail::redlock
