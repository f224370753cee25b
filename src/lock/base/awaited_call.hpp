// How the locker's co_* calls complete the awaitable they return: a refusal of the arguments
// posted to the awaiting coroutine's executor, and an outcome with an error thrown with its
// message. Shared by co_lock / co_try_lock (locker.cpp) and co_status / co_force_unlock
// (status.cpp). Private to the library's sources.
#pragma once

#include "lock/base/errors.hpp"

#include <colock/redis/connection.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <utility>

namespace colock::detail {

// Completes `handler` (of `void(std::exception_ptr, Result)`) with the exception being handled,
// posted to the handler's executor, else `fallback`: a refusal before any I/O, on the awaiting
// coroutine's executor, which need not be the locker's (nor running).
template <class Result, class Handler, class Executor>
void refuse_awaited(Handler handler, Executor const& fallback) {
    auto const ex = boost::asio::get_associated_executor(handler, fallback);
    boost::asio::post(ex, [h = std::move(handler), e = std::current_exception()]() mutable {
        std::move(h)(e, Result{});
    });
}

// Completes `handler` with `out` (whose `ec` and `message` tell a failure): its error as a
// system_error carrying the message, else `take(std::move(out))` as the result. A connection
// that could not be established throws redis::connect_error, whose what() is the message
// alone: the message ends with the connection's account, which names the cause already.
template <class Result, class Handler, class Outcome, class Take>
void complete_awaited(Handler handler, std::exception_ptr e, Outcome out, Take const& take) {
    if (!e && out.ec)
        e = is_connect_failure(out.ec)
                ? std::make_exception_ptr(redis::connect_error(out.ec, out.message))
                : std::make_exception_ptr(boost::system::system_error(out.ec, out.message));
    if (e)
        std::move(handler)(e, Result{});
    else
        std::move(handler)(e, take(std::move(out)));
}

} // namespace colock::detail
