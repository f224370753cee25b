// What an election, its leaderships and its watches share: the locker, the election's keys,
// and the election's own requests (proclaim, read) through the locker's store, each run on the
// locker's strand. Private to the library's sources.
#pragma once

#include "lock/election/leader_tracker.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/election.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace colock::detail {

class locker_context;

class election_core {
public:
    election_core(std::shared_ptr<locker_context> locker, std::string name);

    locker_context& locker() const noexcept { return *locker_; }
    // A quorum's primaries (Redlock): the store asks each and decides by majority.
    bool quorum() const noexcept { return majority() > 1; }
    std::size_t majority() const noexcept;
    std::string const& name() const noexcept { return name_; }
    key_space const& space() const noexcept { return space_; }
    lock_keys const& keys() const noexcept { return keys_; }
    // The election's channel: its record's name.
    std::string const& channel() const noexcept { return keys_.record_key; }

    // Writes `value` as `version` of the term of `guard`'s lease and tells the channel; false
    // when the lease is not the guard's any more. `retrying`: sent again over passing errors
    // while the lease lasts (the campaign's claim, not cancellable); else once, cancelled as
    // the connection's requests are. On the strand.
    boost::asio::awaitable<bool> proclaim(lock_guard const& guard, std::string const& value,
                                          std::int64_t version, bool retrying);
    // Reads the election. On the strand.
    boost::asio::awaitable<election_reading> read();
    // Who leads, with the leader's process record. On the strand.
    boost::asio::awaitable<std::optional<leader_info>> leader();
    // Ends the term of whoever leads (the lease and the record), telling the leader's locker
    // and the watches; false when nobody led. On the strand.
    boost::asio::awaitable<bool> force_resign();

    // A failure's message, naming the election and what was done.
    std::string failure_text(std::string_view what, boost::system::error_code ec,
                             std::string_view server_text) const;

private:
    std::shared_ptr<locker_context> const locker_;
    std::string const name_;
    key_space const space_;
    lock_keys const keys_;
};

} // namespace colock::detail
