// How a guard's awaited release completes, for the lock's guards and the holdings of the
// synchronizers built beside it (permits, a read-write lock's guards). Private to the library's
// sources.
#pragma once

#include "detail/completion.hpp"
#include "detail/failure_report.hpp"

#include <colock/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/system/error_code.hpp>

#include <exception>
#include <memory>
#include <tuple>
#include <utility>

namespace colock::detail {

// Completes an operation decided at its initiation: never inside the initiating call, on the
// handler's executor (or `fallback`'s, for a guard that has no locker).
template <class Handler, class Executor, class... Args>
void complete_soon(Handler handler, Executor const& fallback, Args... args) {
    post_completion(fallback, std::move(handler), boost::asio::cancellation_slot(),
                    std::move(args)...);
}

// Gives back the holding of `st`, which the caller was the first to let go of (release_once()),
// and completes `handler(error_code, bool ours)`: at once with false for a holding known lost
// (its release still goes out in the background, in case the server has it yet), otherwise with
// the server's answer. `release_held(st)` (the awaited release, on the strand) and
// `release_in_background(st)` are the holding kind's own, found by argument-dependent lookup.
// `failure_text(ec)` is the text the awaitable release throws for a failure, reported to
// with_diagnostics.
template <class State, class Handler, class FailureText>
void release_and_complete(std::shared_ptr<State> st, Handler handler, FailureText failure_text) {
    using boost::system::error_code;
    auto const io_executor = st->strand().get_inner_executor();
    if (st->lost()) {
        release_in_background(std::move(st));
        complete_soon(std::move(handler), io_executor, error_code{}, false);
        return;
    }
    auto strand = st->strand();
    boost::asio::co_spawn(
        strand, release_held(std::move(st)),
        boost::asio::bind_cancellation_slot(
            boost::asio::cancellation_slot(),
            [handler = std::move(handler), io_executor, failure_text = std::move(failure_text)](
                std::exception_ptr e, std::tuple<error_code, bool> r) mutable {
                auto ec = std::get<0>(r);
                if (e)
                    ec = error::unexpected_reply;
                // Without the source location Asio attaches.
                ec = error_code(ec.value(), ec.category());
                if (!ec) {
                    complete_soon(std::move(handler), io_executor, ec, std::get<1>(r));
                    return;
                }
                post_reporting(io_executor, std::move(handler), failure_text(ec), ec,
                               std::get<1>(r));
            }));
}

} // namespace colock::detail
