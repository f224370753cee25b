// The contended wait of a co_lock call in its name's local queue.
#include "lock/mutex/queue_wait.hpp"

#include "lock/mutex/acquirer.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/locker_impl.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

queue_wait::queue_wait(locker_impl& locker) : locker_(locker), rng_(std::random_device{}()) {}

bool queue_wait::take_baton(lock_operation& op) {
    if (!op.baton)
        return false;
    auto baton = std::exchange(op.baton, nullptr);
    // One granted to a lease whose server has been replaced since is not taken: it is lost.
    // Its token may still be in the key (a failover to a replica that had it), so it goes back.
    // Nor one whose deadline passed while the waiter was busy asking (nobody renews a lease
    // on its way between holders): its guard would be over at once, with the old lease's
    // fence, below one Redis may have granted since. It goes back, and the waiter asks on.
    if (baton->server_changes != locker_.store().server_changes(op.keys()) ||
        !lease_left_to_pass(baton->deadline, clock_type::now())) {
        locker_.give_back(op.keys(), std::move(*baton), handoff_claim(op.opt_.ttl));
        return false;
    }
    op.out_.state = locker_.asks().make_handed_guard(op.name_, op.keys(), op.holder_token(),
                                                     std::move(*baton), op.opt_);
    return true;
}

clock_type::time_point queue_wait::head_sleep_end(lock_operation& op, clock_type::time_point now) {
    return op.acq_.wakes_at(now, true, rng_);
}

void queue_wait::park(lock_operation& op, clock_type::time_point until) {
    op.driving_ = false;
    op.wake = wake_reason::none;
    if (until == clock_type::time_point::max()) {
        // Nothing to wait for but a wake: no timer. It holds itself meanwhile (a cycle that
        // resume() or finish() ends, or drop_handlers()).
        op.parked_self_ = op.shared_from_this();
        op.on_wake = [](waiter& w) {
            auto self = std::move(static_cast<lock_operation&>(w).parked_self_);
            auto const& strand = self->locker_->strand();
            asio::post(strand, [self = std::move(self)] { self->locker_->waits().resume(*self); });
        };
        return;
    }
    if (!op.timer_)
        op.timer_ = std::make_unique<lock_timer>(locker_.strand());
    op.timer_->expires_at(until);
    op.on_wake = [](waiter& w) { static_cast<lock_operation&>(w).timer_->cancel(); };
    op.timer_->async_wait([op = op.shared_from_this()](boost::system::error_code) {
        op->locker_->waits().resume(*op);
    });
}

void queue_wait::resume(lock_operation& op) {
    if (op.finished_ || op.driving_)
        return;
    op.on_wake = nullptr; // its timer ran out: nothing to end any more
    if (take_baton(op)) {
        locker_.calls().finish(op);
        return;
    }
    bool const head = &op.queue_->waiters.front() == &op;
    if (op.wake == wake_reason::promoted_after_acquire) {
        // The previous head took the lock: wait for its release rather than ask now.
        op.need_attempt_ = false;
        op.acq_.wait_for_holder(op.opt_.ttl);
    } else if (!head && op.wake == wake_reason::none) {
        op.need_attempt_ = false; // woken by the wait deadline only; checked below
    }
    if (auto const on = op.acq_.keep_waiting(clock_type::now());
        on.step == acquisition_step::finish) {
        locker_.calls().end(op, on);
        return;
    }
    if (!head) {
        park(op, op.acq_.deadlines().wait);
        return;
    }
    auto const& queue = *op.queue_;
    if (!op.need_attempt_ && !queue.wake_pending &&
        (queue.subscribed || queue.subscription_refused)) {
        // A head with nothing to ask (the one before it took the lock): sleeps on, as
        // queue_turns would, without a coroutine.
        op.need_attempt_ = true;
        park(op, head_sleep_end(op, clock_type::now()));
        return;
    }
    locker_.calls().spawn(op.shared_from_this());
}

// The head's turns: it subscribes to this locker's wake channel for the name (once per name)
// and asks the server when handed the lock, when the holder's lease should have run out, after
// its backoff, or to refresh its entry in the server's queue; between turns it parks.
asio::awaitable<void> queue_wait::turns(lock_operation& op, asio::cancellation_state cs) {
    auto& queue = *op.queue_;
    for (;;) {
        if (&queue.waiters.front() != &op) {
            park(op, op.acq_.deadlines().wait);
            co_return;
        }
        if (!queue.subscribed && !queue.subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue.subscribed = true;
            auto [sec, refusal] = co_await locker_.store().subscribe(queue.keys.channel);
            if (sec) {
                // Not subscribed (nothing to undo on leaving): poll by the backoff instead. A
                // refusal (an ACL user without the channel: NOPERM) stands for this queue; the
                // connection's last_error_text() keeps the server's words.
                queue.subscribed = false;
                queue.subscription_refused = sec == redis::error::server_error;
            }
            op.need_attempt_ = true;
            if (cancelled(cs)) {
                locker_.calls().end(op, acquisition::aborted());
                co_return;
            }
            if (take_baton(op)) {
                locker_.calls().finish(op);
                co_return;
            }
        }
        if (op.need_attempt_) {
            queue.wake_pending = false;
            // With more waiters here behind this one, this locker stays queued at the server
            // after a grant, so the lock comes back to them in turn.
            auto const mode =
                queue.waiters.size() > 1 ? queueing::stay_after_grant : queueing::when_held;
            op.asked = true;
            auto const next = co_await locker_.asks().try_once(
                op.keys(), op.holder_token(), op.name_, op.opt_, mode, cs, op.acq_, op.out_);
            bool const acquired =
                next.step == acquisition_step::finish && next.end == acquisition_end::acquired;
            if (acquired)
                queue.queued_at_server = mode == queueing::stay_after_grant;
            else if (op.acq_.queued_by_answer())
                queue.queued_at_server = true;
            if (!op.acq_.answer().ec)
                queue.others_queued = op.acq_.answer().others_queued;
            if (acquired) {
                // Redis granted it: a baton given meanwhile was of a lease that is gone from the
                // key (with Redlock, perhaps not from a minority of primaries): given back.
                if (auto baton = std::exchange(op.baton, nullptr))
                    locker_.give_back(op.keys(), std::move(*baton), handoff_claim(op.opt_.ttl));
            }
            if (next.step == acquisition_step::finish) {
                locker_.calls().end(op, next);
                co_return;
            }
            if (take_baton(op)) {
                locker_.calls().finish(op);
                co_return;
            }
        }
        op.need_attempt_ = true;

        auto const now = clock_type::now();
        if (auto const on = op.acq_.keep_waiting(now); on.step == acquisition_step::finish) {
            locker_.calls().end(op, on);
            co_return;
        }
        if (queue.wake_pending)
            continue; // released while we were busy: try again at once
        if (cancelled(cs)) {
            locker_.calls().end(op, acquisition::aborted());
            co_return;
        }
        park(op, head_sleep_end(op, now));
        co_return;
    }
}

} // namespace colock::detail
