// The lease store over one redis::connection (a single server today; Sentinel and Cluster are
// to be found behind the same connection). Private to the library's sources.
#pragma once

#include "lease_store.hpp"

#include <colock/redis/connection.hpp>

#include <memory>

namespace colock::detail {

// A store that runs the lock scripts on `conn`'s engine, which it shares: releases and
// renewals in flight may outlive the connection object safely.
std::shared_ptr<lease_store> make_single_connection_store(redis::connection& conn);

} // namespace colock::detail
