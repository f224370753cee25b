// An election's requests over a quorum's primaries: the proclaim, written on a majority or
// refused by so many that no majority can write it, and the read, decided by majority. The
// decisions are sans I/O (decide_reading, proclaim_decision), tested without a server in
// test/unit/test_leader_tracker.cpp and test_quorum.cpp. On the quorum's strand. Private to the
// library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace colock::detail::redlock {

class quorum_members;

// The election as a quorum's primaries read it (a failed reading says nothing): a leader when
// a majority of them has the same term leading (its version the newest that a majority has,
// each primary holding every version before its own), nobody when a majority has nobody
// leading, else error::no_quorum.
election_reading decide_reading(std::vector<election_reading> const& readings,
                                std::size_t majority);

// A proclaim over the primaries' answers so far (none: no answer yet): written when a majority
// wrote it, not ours when so many refused that no majority can write it, else nothing (yet).
std::optional<bool> proclaim_decision(std::vector<std::optional<proclaim_result>> const& answers,
                                      std::size_t majority);

// As lease_store::proclaim and read_election, over every primary.
boost::asio::awaitable<proclaim_result> run_proclaim(std::shared_ptr<quorum_members const> members,
                                                     lock_keys const& keys,
                                                     proclaim_request const& request);
boost::asio::awaitable<election_reading>
run_read_election(std::shared_ptr<quorum_members const> members, lock_keys const& keys);

} // namespace colock::detail::redlock
