// The lease store over N independent primaries (Redlock): one single_connection_store per
// primary, asked in parallel, and a lease only when a majority grants it within its validity
// (quorum.hpp decides). Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <colock/redis/connection.hpp>

#include <memory>
#include <span>

namespace colock::detail {

// Refuses (boost::system::system_error with error::invalid_argument, naming what is wrong)
// primaries Redlock cannot work with: a null pointer, fewer than 3, an even number, or one
// connection or endpoint given twice. The same server behind two endpoints is found by its
// run_id once connected, and refused then by every attempt.
void check_redlock_primaries(std::span<redis::connection* const> primaries);

// A store over `primaries` (checked with check_redlock_primaries), sharing their engines: the
// connection objects may go before the releases and renewals in flight.
std::shared_ptr<lease_store> make_quorum_store(std::span<redis::connection* const> primaries);

} // namespace colock::detail
