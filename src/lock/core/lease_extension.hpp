// An explicit extension of any holding's lease (a lock guard's, a permit's, a read-write lock's
// guard's, a lock set's, a leadership's): the family's one extend(), in its awaitable and
// completion-handler forms. Private to the library's sources.
#pragma once

#include "lock/core/lease.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace colock::detail {

// Throws system_error(error::invalid_argument) for a ttl <= 0 or above max_lock_ttl, naming
// `what` (as "lock 'a'"). Any thread.
void check_extend_ttl(std::chrono::milliseconds ttl, std::string_view what);

// Extends `st` (null, or let go: error::not_held; known lost: false at once) to `ttl` from now,
// in turn with its renewal, and completes `handler(error_code, bool extended)` on its executor,
// telling with_diagnostics the text the awaitable form throws, which names `what`.
// Cancellation (terminal, partial) as the connection's requests: a cancelled extend may still
// have run. Any thread.
void start_lease_extend(
    std::shared_ptr<lease> st, std::chrono::milliseconds ttl,
    boost::asio::any_completion_handler<void(boost::system::error_code, bool)> handler,
    std::string what);

// The awaitable form: true when extended, false when the lease was lost; throws system_error
// naming `what` on an error (error::not_held for a holding let go or never held).
boost::asio::awaitable<bool> await_lease_extend(std::shared_ptr<lease> st,
                                                std::chrono::milliseconds ttl, std::string what);

} // namespace colock::detail
