// Connecting and closing: connect waiters, the hard close, and the graceful close that first sends
// what was asked before it.
#include "connection_impl.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>

#include <algorithm>

namespace colock::redis::detail {

// ---------------------------------------------------------------- connect

void connection_impl::start_connect(connect_handler handler) {
    auto w = std::make_shared<connect_waiter>(std::move(handler), strand_.get_inner_executor());
    // Only this wait is abandoned; the connection is closed too when nobody else is using it.
    on_terminal_cancellation(w, weak_from_this(), [](auto s, auto cw) {
        asio::dispatch(s->strand_, [s, cw] { s->cancel_connect_waiter(cw); });
    });
    asio::dispatch(strand_, [self = shared_from_this(), w]() mutable {
        if (w->done)
            return;
        if (self->session_ && self->session_->ready && !self->closing_) {
            self->finish_connect_waiter(w, {});
            return;
        }
        self->connect_waiters_.push_back(w);
        if (!self->running_)
            self->start_run_loop();
    });
}

void connection_impl::cancel_connect_waiter(std::shared_ptr<connect_waiter> const& w) {
    std::erase(connect_waiters_, w);
    finish_connect_waiter(w, asio::error::operation_aborted);
    bool const in_use = !connect_waiters_.empty() || !user_queue_.empty() ||
                        !subscription_ops_.empty() || (session_ && !session_->in_flight.empty());
    if (!ever_connected_ && running_ && !in_use)
        close(error::closed);
}

void connection_impl::finish_connect_waiter(std::shared_ptr<connect_waiter> const& w,
                                            error_code ec) {
    if (w->done)
        return;
    w->done = true;
    deliver(std::move(w->handler), w->slot, ec);
}

void connection_impl::finish_connect_waiters(error_code ec) {
    auto waiters = std::move(connect_waiters_);
    connect_waiters_.clear();
    for (auto& w : waiters)
        finish_connect_waiter(w, ec);
}

// ---------------------------------------------------------------- close

// At once: stops the run loop, drops the socket and completes everything pending with `ec`.
void connection_impl::close(error_code ec) {
    closing_ = false;
    close_timer_.cancel();
    ++generation_;
    ever_connected_ = false;
    first_failure_ = {}; // a closed connection starts afresh
    if (run_cancel_)
        run_cancel_->emit(asio::cancellation_type::terminal);
    run_cancel_.reset();
    running_ = false;
    connected_ = false;
    backoff_timer_.cancel();
    if (auto s = std::move(session_)) {
        // Its writer may still resume (a write that completed just now): it must find that
        // it has nothing left to do, and take nothing from the queue of the next connection.
        s->detached = true;
        error_code ignored;
        s->socket.close(ignored);
        fail_session(*s, ec, ec);
    }
    for (auto& b : books_) {
        b.close_session(ec);
        b.abandon_waiting(ec);
    }
    deliver_subscriptions();
    fail_queued(user_queue_, ec);
    finish_connect_waiters(ec);
}

// close() and ~connection. Requests made before it (and the replies of those in flight) are sent
// and read within config::close_timeout when the connection is up; then it closes. A connection
// that is not up is not started just to flush: what waits fails with error::closed, as before. The
// order is the strand's: close() posts, so a request whose engine_exec happened before close()
// reached the strand first and is flushed.
void connection_impl::graceful_close(bool final) {
    if (final)
        final_ = true;
    if (closing_)
        return; // a flush is under way; its deadline stands
    auto const s = session_;
    bool const pending = s && (!user_queue_.empty() || !s->in_flight.empty());
    if (cfg_.close_timeout.count() <= 0 || !s || !s->ready || !pending) {
        close(error::closed);
        return;
    }
    closing_ = true;
    connected_ = false;
    s->flushing = true;
    s->flush_queue = std::move(user_queue_);
    user_queue_.clear();
    close_timer_.expires_after(cfg_.close_timeout);
    // The handler holds the engine until the flush ends (close() cancels the timer), so nothing
    // keeps the io_context busy after it.
    close_timer_.async_wait([guard = close_guard(shared_from_this()), s](error_code ec) mutable {
        auto self = guard.take();
        if (!ec && self->closing_ && self->session_ == s)
            self->finish_close();
    });
    wake_writer();
    maybe_finish_flush(); // everything may have been cancelled already
}

// Finishes the flush once nothing it waits for is left: every request taken from the user queue at
// close() written and answered (or cancelled), and nothing in flight.
void connection_impl::maybe_finish_flush() {
    if (!closing_ || !session_)
        return;
    auto const& s = *session_;
    bool const queued = std::any_of(s.flush_queue.begin(), s.flush_queue.end(), [](auto const& e) {
        return e->state != exec_entry::stage::done;
    });
    if (!queued && s.in_flight.empty())
        finish_close();
}

void connection_impl::finish_close() {
    // Requests and connect waits that came after close() are not this close's business: they start
    // a new connection, unless the connection object is gone.
    auto later = std::move(user_queue_);
    user_queue_.clear();
    auto waiters = std::move(connect_waiters_);
    connect_waiters_.clear();
    close(error::closed);
    user_queue_ = std::move(later);
    connect_waiters_ = std::move(waiters);
    if (final_) {
        fail_queued(user_queue_, error::closed);
        finish_connect_waiters(error::closed);
        return;
    }
    if (!user_queue_.empty() || !connect_waiters_.empty())
        start_run_loop();
}

void connection_impl::abandon() noexcept {
    // Moved out first: destroying a handler destroys a coroutine frame, which may reach the
    // engine again (a connection object in it is destroyed); it finds nothing left.
    auto users = std::move(user_queue_);
    auto waiters = std::move(connect_waiters_);
    auto subscriptions = std::move(subscription_ops_);
    auto ready = std::move(ready_);
    std::deque<ready_exec> delivering;
    {
        std::lock_guard lock(deliveries_->mutex);
        delivering.swap(deliveries_->items);
    }
    auto listeners = std::move(listeners_);
    auto s = std::move(session_);
    user_queue_.clear();
    connect_waiters_.clear();
    subscription_ops_.clear();
    ready_.clear();
    listeners_.clear();
    closing_ = false;
    if (s) {
        s->detached = true;
        s->matcher.clear();
        auto in_flight = std::move(s->in_flight);
        auto flush = std::move(s->flush_queue);
        auto handshake = std::move(s->handshake_queue);
        auto own = std::move(s->session_queue);
    }
}

void connection_impl::start_run_loop() {
    running_ = true;
    run_cancel_ = std::make_shared<asio::cancellation_signal>();
    asio::co_spawn(strand_, run_loop(shared_from_this(), generation_),
                   asio::bind_cancellation_slot(
                       run_cancel_->slot(), [keep = run_cancel_](std::exception_ptr e) {
                           if (e)
                               std::rethrow_exception(e); // a bug: let it be seen
                       }));
}

} // namespace colock::redis::detail
