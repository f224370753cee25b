// How colock completes a type-erased handler that a strand-owned operation decided the outcome
// of. Private to the library's sources.
#pragma once

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/system_executor.hpp>

#include <utility>

namespace colock::detail {

/// Outstanding work on the handler's associated executor (or `io_executor`, the I/O object's,
/// when it has none) for as long as it lives. An operation holds it from its initiation until
/// its handler has been handed to that executor, as Asio's own do: the io_context or thread
/// pool of a handler bound to an executor of its own does not run out of work while the
/// operation is under way.
template <class Handler, class IoExecutor>
auto work_for(Handler const& handler, IoExecutor const& io_executor) {
    return boost::asio::prefer(boost::asio::get_associated_executor(handler, io_executor),
                               boost::asio::execution::outstanding_work.tracked);
}

/// work_for, type-erased, and nothing for a handler that completes on `io_executor` itself (it
/// has no executor of its own, or that one): the I/O object's own pending operations keep that
/// one running, and the connection's every request would pay for the count. Empty when there is
/// nothing to hold.
template <class Handler, class IoExecutor>
boost::asio::any_completion_executor work_if_foreign(Handler const& handler,
                                                     IoExecutor const& io_executor) {
    boost::asio::any_completion_executor const io(std::nothrow, io_executor);
    boost::asio::any_completion_executor const ex(
        std::nothrow, boost::asio::get_associated_executor(handler, io_executor));
    if (ex == io)
        return {};
    return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
}

/// Calls `invoke(std::move(handler))` on the handler's associated executor, or on
/// `io_executor` (the I/O object's) when it has none, clearing its cancellation slot there,
/// where the user emits. Posted to `io_executor` first, then dispatched (inline when the
/// handler's executor runs on that thread): user code never runs inside a turn of the library's
/// strands, where it would hold up the connection's reads and the renewals, nor inside the loop
/// that decided the outcome. (A type-erased handler's executor cannot be posted to directly: it
/// does not offer blocking.never.)
///
/// `work` (the operation's work_for) is let go only after the last copy of the handler's
/// executor on this side is gone: once the handler has run, its thread pool may be joined and
/// destroyed at once, and a strand's executor outliving its pool touches freed memory.
template <class IoExecutor, class Handler, class Invoke, class Work>
void post_invocation(IoExecutor const& io_executor, Handler handler,
                     boost::asio::cancellation_slot slot, Invoke invoke, Work work) {
    boost::asio::post(io_executor, [io_executor, handler = std::move(handler), slot,
                                    invoke = std::move(invoke), work = std::move(work)]() mutable {
        {
            auto ex = boost::asio::get_associated_executor(handler, io_executor);
            boost::asio::dispatch(
                ex, [handler = std::move(handler), slot, invoke = std::move(invoke)]() mutable {
                    slot.clear();
                    std::move(invoke)(std::move(handler));
                });
        } // `ex` is gone here; `work` goes with this function object, after it.
    });
}

/// post_invocation for an operation that holds no work of its own: it is counted from here.
template <class IoExecutor, class Handler, class Invoke>
void post_invocation(IoExecutor const& io_executor, Handler handler,
                     boost::asio::cancellation_slot slot, Invoke invoke) {
    auto work = work_for(handler, io_executor);
    post_invocation(io_executor, std::move(handler), slot, std::move(invoke), std::move(work));
}

/// Completes `handler(args...)` as post_invocation does.
template <class IoExecutor, class Handler, class... Args>
void post_completion(IoExecutor const& io_executor, Handler handler,
                     boost::asio::cancellation_slot slot, Args... args) {
    post_invocation(
        io_executor, std::move(handler), slot,
        [... args = std::move(args)](Handler h) mutable { std::move(h)(std::move(args)...); });
}

/// post_completion for an object with no I/O executor (a guard that holds nothing, a watch of
/// nothing): posted, never run inside the call, to the handler's own executor, or the system
/// executor when it has none.
template <class Handler, class... Args>
void complete_without_io(Handler handler, Args... args) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    post_completion(boost::asio::system_executor(), std::move(handler), slot, std::move(args)...);
}

/// post_completion on the executor `strand` runs on.
template <class Strand, class Handler, class... Args>
void complete_now(Strand const& strand, Handler handler, boost::asio::cancellation_slot slot,
                  Args... args) {
    post_completion(strand.get_inner_executor(), std::move(handler), slot, std::move(args)...);
}

} // namespace colock::detail
