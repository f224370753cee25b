// The completion tokens the library's coroutines await with. Private to the library's sources.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <type_traits>

namespace colock::detail {

// Awaits completing with a tuple of their results, never throwing.
inline constexpr auto nothrow_awaitable = boost::asio::as_tuple(boost::asio::use_awaitable);
using nothrow_awaitable_t = std::decay_t<decltype(nothrow_awaitable)>;

// As nothrow_awaitable, for an operation the awaiting coroutine's cancellation does not reach:
// its outcome must be known (a request that may have been applied, a subscription).
inline auto uncancellable() {
    return boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), nothrow_awaitable);
}

} // namespace colock::detail
