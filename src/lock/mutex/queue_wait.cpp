// The contended wait of a co_lock call in its name's local queue.
#include "lock/mutex/queue_wait.hpp"

#include "lock/mutex/acquirer.hpp"
#include "lock/mutex/cohort.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/lock_calls.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;

queue_wait::queue_wait(locker_context& context, lock_calls& calls, acquirer& asks, cohort& handoffs)
    : context_(context)
    , calls_(calls)
    , asks_(asks)
    , handoffs_(handoffs)
    , rng_(std::random_device{}()) {}

bool queue_wait::take_baton(lock_operation& op) {
    auto baton = op.take_baton();
    if (!baton)
        return false;
    // One granted to a lease whose server has been replaced since is not taken: it is lost.
    // Its token may still be in the key (a failover to a replica that had it), so it goes back.
    // Nor one whose deadline passed while the waiter was busy asking (nobody renews a lease
    // on its way between holders): its guard would be over at once, with the old lease's
    // fence, below one Redis may have granted since. It goes back, and the waiter asks on.
    if (baton->server_changes != context_.store().server_changes(op.keys()) ||
        !lease_left_to_pass(baton->deadline, clock_type::now())) {
        handoffs_.give_back(op.keys(), std::move(*baton), handoff_claim(op.options().ttl));
        return false;
    }
    op.outcome().state = asks_.make_handed_guard(op.name(), op.keys(), op.holder_token(),
                                                 std::move(*baton), op.options());
    return true;
}

clock_type::time_point queue_wait::head_sleep_end(lock_operation& op, clock_type::time_point now) {
    return op.acq().wakes_at(now, true, rng_);
}

void lock_operation::park(clock_type::time_point until) {
    driving_ = false;
    wake = wake_reason::none;
    if (until == clock_type::time_point::max()) {
        // Nothing to wait for but a wake: no timer. It holds itself meanwhile (a cycle that
        // resume() or finish() ends, or drop_handlers()).
        parked_self_ = shared_from_this();
        on_wake = [](waiter& w) {
            auto self = std::move(of(w).parked_self_);
            auto const& strand = self->calls().strand();
            asio::post(strand, [self = std::move(self)] { self->calls().resume(*self); });
        };
        return;
    }
    if (!timer_)
        timer_ = std::make_unique<lock_timer>(calls_->strand());
    timer_->expires_at(until);
    on_wake = [](waiter& w) { of(w).timer_->cancel(); };
    timer_->async_wait(
        [op = shared_from_this()](boost::system::error_code) { op->calls().resume(*op); });
}

void queue_wait::resume(lock_operation& op) {
    if (op.finished() || op.driving())
        return;
    op.awake(); // its timer ran out: nothing to end any more
    if (take_baton(op)) {
        calls_.finish(op);
        return;
    }
    bool const head = &op.queue()->waiters.front() == &op.node();
    if (op.woken_by() == wake_reason::promoted_after_acquire) {
        // The previous head took the lock: wait for its release rather than ask now.
        op.need_attempt(false);
        op.acq().wait_for_holder(op.options().ttl);
    } else if (!head && op.woken_by() == wake_reason::none) {
        op.need_attempt(false); // woken by the wait deadline only; checked below
    }
    if (auto const on = op.acq().keep_waiting(clock_type::now());
        on.step == acquisition_step::finish) {
        calls_.end(op, on);
        return;
    }
    if (!head) {
        op.park(op.acq().deadlines().wait);
        return;
    }
    auto const& queue = *op.queue();
    if (!op.needs_attempt() && !queue.wake_pending &&
        (queue.subscribed || queue.subscription_refused)) {
        // A head with nothing to ask (the one before it took the lock): sleeps on, as
        // queue_turns would, without a coroutine.
        op.need_attempt(true);
        op.park(head_sleep_end(op, clock_type::now()));
        return;
    }
    calls_.spawn(op.shared_from_this());
}

// The head's turns: it subscribes to this locker's wake channel for the name (once per name)
// and asks the server when handed the lock, when the holder's lease should have run out, after
// its backoff, or to refresh its entry in the server's queue; between turns it parks.
asio::awaitable<void> queue_wait::turns(lock_operation& op, asio::cancellation_state cs) {
    auto& queue = *op.queue();
    auto& acq = op.acq();
    for (;;) {
        if (&queue.waiters.front() != &op.node()) {
            op.park(acq.deadlines().wait);
            co_return;
        }
        if (!queue.subscribed && !queue.subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue.subscribed = true;
            auto [sec, refusal] = co_await context_.store().subscribe(queue.keys.channel);
            if (sec) {
                // Not subscribed (nothing to undo on leaving): poll by the backoff instead. A
                // refusal (an ACL user without the channel: NOPERM) stands for this queue; the
                // connection's last_error_text() keeps the server's words.
                queue.subscribed = false;
                queue.subscription_refused = sec == redis::error::server_error;
            }
            op.need_attempt(true);
            if (cancelled(cs)) {
                calls_.end(op, acquisition::aborted());
                co_return;
            }
            if (take_baton(op)) {
                calls_.finish(op);
                co_return;
            }
        }
        if (op.needs_attempt()) {
            queue.wake_pending = false;
            // With more waiters here behind this one, this locker stays queued at the server
            // after a grant, so the lock comes back to them in turn.
            auto const mode =
                queue.waiters.size() > 1 ? queueing::stay_after_grant : queueing::when_held;
            op.mark_asked();
            auto const next = co_await asks_.try_once(op.keys(), op.holder_token(), op.name(),
                                                      op.options(), mode, cs, acq, op.outcome());
            bool const acquired =
                next.step == acquisition_step::finish && next.end == acquisition_end::acquired;
            if (acquired)
                queue.queued_at_server = mode == queueing::stay_after_grant;
            else if (acq.queued_by_answer())
                queue.queued_at_server = true;
            if (!acq.answer().ec)
                queue.others_queued = acq.answer().others_queued;
            if (acquired) {
                // Redis granted it: a baton given meanwhile was of a lease that is gone from the
                // key (with Redlock, perhaps not from a minority of primaries): given back.
                if (auto baton = op.take_baton())
                    handoffs_.give_back(op.keys(), std::move(*baton),
                                        handoff_claim(op.options().ttl));
            }
            if (next.step == acquisition_step::finish) {
                calls_.end(op, next);
                co_return;
            }
            if (take_baton(op)) {
                calls_.finish(op);
                co_return;
            }
        }
        op.need_attempt(true);

        auto const now = clock_type::now();
        if (auto const on = acq.keep_waiting(now); on.step == acquisition_step::finish) {
            calls_.end(op, on);
            co_return;
        }
        if (queue.wake_pending)
            continue; // released while we were busy: try again at once
        if (cancelled(cs)) {
            calls_.end(op, acquisition::aborted());
            co_return;
        }
        op.park(head_sleep_end(op, now));
        co_return;
    }
}

} // namespace colock::detail
