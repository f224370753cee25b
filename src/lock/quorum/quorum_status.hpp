// What status reads on a quorum's primaries: each primary's reading of a lock, a record and a
// forced unlock, and what they amount to over the quorum. quorum_status does the I/O, one
// primary after the other; the summaries (the state a majority shares, a forced unlock's
// result) are sans I/O, tested without a server in test/unit/test_quorum_status.cpp. Private
// to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace colock::detail::redlock {

class quorum_members;

// How long status waits for each primary's reading.
inline constexpr std::chrono::milliseconds status_read_timeout{1000};

// A reading's state: its kind ('H', 'R', 'F'), fence, and holder (the token for 'H', the
// locker for 'R', "-" after a forced unlock).
struct lock_state_words {
    char kind = 0;
    std::int64_t fence = 0;
    std::string holder;
};

// The state of a reading's value; none for a value that is no lock's.
std::optional<lock_state_words> state_of(lock_reading const& r);

// The lock's state over the primaries' readings (one each, an error where it had none).
lock_reading shared_reading(std::span<lock_reading const> readings);

// A forced unlock over the primaries' results (one each, named by `endpoints`): ended when any
// ended a lease; failed only when too many failed for a majority to have answered.
forced_unlock_result shared_forced_unlock(std::span<forced_unlock_result const> results,
                                          std::span<std::string const> endpoints);

// Reads and ends leases on every primary, for status and forced unlocks.
class quorum_status {
public:
    explicit quorum_status(std::shared_ptr<quorum_members const> members)
        : members_(std::move(members)) {}

    // As lease_store::read, over the primaries (shared_reading).
    boost::asio::awaitable<lock_reading> read(lock_keys const& keys) const;
    // The first primary's record that has fields; else the first primary's reading.
    boost::asio::awaitable<record_reading> read_record(std::string const& key) const;
    // As lease_store::force_unlock, on every primary (shared_forced_unlock).
    boost::asio::awaitable<forced_unlock_result>
    force_unlock(lock_keys const& keys, std::string const& notify_prefix) const;

private:
    std::shared_ptr<quorum_members const> members_;
};

} // namespace colock::detail::redlock
