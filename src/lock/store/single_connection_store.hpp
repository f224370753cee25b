// The lease store over one redis::connection: one server, a Sentinel-resolved primary or a
// Cluster. Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <colock/redis/connection.hpp>

#include <memory>

namespace colock::detail {

// A store that runs the lock scripts on `conn`'s engine, which it shares: releases and
// renewals in flight may outlive the connection object safely.
std::shared_ptr<lease_store> make_single_connection_store(redis::connection& conn);

// The same on `engine`, with its lock-layer state on `strand` (a quorum store's members share
// the quorum's, so that their events and awaitables need no hop).
std::shared_ptr<lease_store>
make_single_connection_store(redis::detail::shared_engine engine,
                             boost::asio::strand<boost::asio::any_io_executor> strand);

} // namespace colock::detail
