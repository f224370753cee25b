// How colock completes a type-erased handler that a strand-owned operation decided the outcome
// of. Private to the library's sources.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <utility>

namespace colock::detail {

/// Completes `handler(args...)` on its own executor (inline when that executor runs on this
/// thread), clearing its cancellation slot there, where the user emits. For a caller already
/// in a fresh turn of `strand`, outside its own loops.
template <class Strand, class Handler, class... Args>
void complete_now(Strand const& strand, Handler handler, boost::asio::cancellation_slot slot,
                  Args... args) {
    auto ex = boost::asio::get_associated_executor(handler, strand);
    boost::asio::dispatch(
        ex, [handler = std::move(handler), slot, ... args = std::move(args)]() mutable {
            slot.clear();
            std::move(handler)(std::move(args)...);
        });
}

/// Runs `handler(args...)` outside whatever loop decided the outcome: first a fresh turn of
/// `strand`, then the handler's own executor (inline when that executor runs on this thread).
/// The handler's cancellation slot is cleared there, on the executor where the user emits.
template <class Strand, class Handler, class... Args>
void complete_later(Strand const& strand, Handler handler, boost::asio::cancellation_slot slot,
                    Args... args) {
    boost::asio::post(
        strand, [strand, handler = std::move(handler), slot, ... args = std::move(args)]() mutable {
            complete_now(strand, std::move(handler), slot, std::move(args)...);
        });
}

} // namespace colock::detail
