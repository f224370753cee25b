// How colock runs an operation's coroutine on one of its strands for a caller that may cancel
// it from another thread. Private to the library's sources.
#pragma once

#include "completion.hpp"

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>

#include <exception>
#include <memory>
#include <utility>

namespace colock::detail {

/// Runs `op` on `strand`; when it finishes, calls `finish(std::move(handler), exception, value)`
/// on the handler's associated executor (the I/O object's, `strand`'s inner one, by default),
/// after clearing the handler's cancellation slot there; posted out of the strand's turn first,
/// as post_invocation does.
///
/// The caller's cancellation reaches the coroutine through a signal of our own that is emitted
/// on the strand only, and never once the coroutine has finished. (Boost 1.81's co_spawn,
/// given a handler with an associated executor, such as use_awaitable's, puts a handler in the
/// caller's slot that dispatches a raw pointer to a signal living in that slot; when the
/// operation completes and the slot is reused or freed before the dispatch runs, the pointer
/// dangles: the known issue of awaitable operators on strands.)
template <class T, class Strand, class Handler, class Finish>
void spawn_cancellable(Strand const& strand, boost::asio::awaitable<T> op, Handler handler,
                       Finish finish) {
    namespace asio = boost::asio;
    struct cancel_state {
        asio::cancellation_signal signal;
        bool done = false; // on the strand: the coroutine has finished
    };
    auto state = std::make_shared<cancel_state>();
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto work = work_for(handler, strand.get_inner_executor());
    if (slot.is_connected()) {
        // Installed here, on the caller's thread, where the caller emits; the emission itself
        // happens on the strand, where the coroutine runs.
        slot.assign([state, strand](asio::cancellation_type type) {
            asio::dispatch(strand, [state, type] {
                if (!state->done)
                    state->signal.emit(type);
            });
        });
    }
    asio::co_spawn(
        strand, std::move(op),
        asio::bind_cancellation_slot(
            state->signal.slot(),
            [state, strand, slot, handler = std::move(handler), finish = std::move(finish),
             work = std::move(work)](std::exception_ptr e, T value) mutable {
                state->done = true;
                post_invocation(
                    strand.get_inner_executor(), std::move(handler), slot,
                    [finish = std::move(finish), e, value = std::move(value)](Handler h) mutable {
                        finish(std::move(h), e, std::move(value));
                    },
                    std::move(work));
            }));
}

} // namespace colock::detail
