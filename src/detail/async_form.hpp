// How an async_* form runs an operation written as a coroutine that throws. Private to the
// library's sources.
#pragma once

#include "failure_report.hpp"
#include "spawn.hpp"

#include <colock/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <utility>

namespace colock::detail {

/// The code an async_* form completes with for what its coroutine threw: a system_error's own,
/// else error::unexpected_reply (no other exception is thrown by design).
inline boost::system::error_code code_of(std::exception_ptr const& e) {
    if (!e)
        return {};
    try {
        std::rethrow_exception(e);
    } catch (boost::system::system_error const& failure) {
        return failure.code();
    } catch (...) {
        return error::unexpected_reply;
    }
}

/// Runs `op` on `strand` as spawn_cancellable does, and completes `handler` with the code of
/// what it threw and `finish(value)` (its default when it threw): for a handler of
/// `void(error_code, R)` where `finish` maps T to R.
template <class T, class Strand, class Handler, class Finish>
void spawn_to_code(Strand const& strand, boost::asio::awaitable<T> op, Handler handler,
                   Finish finish) {
    spawn_cancellable(
        strand, std::move(op), std::move(handler),
        [finish = std::move(finish)](Handler h, std::exception_ptr e, T value) mutable {
            auto const ec = code_of(e);
            if (ec) // with_diagnostics is given what the awaitable form throws
                complete_reporting(std::move(h), {}, e, ec, decltype(finish(std::move(value))){});
            else
                std::move(h)(ec, finish(std::move(value)));
        });
}

/// Runs `op` on `strand` for an awaiting caller, whose cancellation reaches it there; what it
/// throws is thrown to the caller.
template <class T>
boost::asio::awaitable<T> on_strand(boost::asio::strand<boost::asio::any_io_executor> strand,
                                    boost::asio::awaitable<T> op) {
    auto initiation = [strand, op = std::move(op)](auto handler) mutable {
        spawn_cancellable(
            strand, std::move(op), std::move(handler),
            [](auto h, std::exception_ptr e, T value) { std::move(h)(e, std::move(value)); });
    };
    return boost::asio::async_initiate<boost::asio::use_awaitable_t<> const,
                                       void(std::exception_ptr, T)>(std::move(initiation),
                                                                    boost::asio::use_awaitable);
}

} // namespace colock::detail
