// The local queues, and how a contended co_lock waits in one: parked, with no coroutine,
// until it is the head or handed the lease; the head subscribes to this locker's wake channel
// for the name (once per name) and asks the server in turns, parked between them.
#include "local_queue.hpp"

#include "lock_operation.hpp"
#include "locker_impl.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <vector>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

std::shared_ptr<name_queue> local_queues::join(lock_keys const& keys, waiter& w,
                                               bool ahead_of_unasked) {
    auto& q = queues_[keys.channel];
    if (!q)
        q = std::make_shared<name_queue>(keys);
    auto const at = ahead_of_unasked && !q->waiters.empty() && !q->waiters.front().asked
                        ? q->waiters.begin()
                        : q->waiters.end();
    q->waiters.insert(at, w);
    waiting_.fetch_add(1, std::memory_order_relaxed);
    return q;
}

void local_queues::drop(std::shared_ptr<name_queue> const& q, waiter& w) noexcept {
    q->waiters.erase(q->waiters.iterator_to(w));
    waiting_.fetch_sub(1, std::memory_order_relaxed);
}

void local_queues::leave(std::shared_ptr<name_queue> const& q, waiter& w, bool acquired,
                         milliseconds claim) {
    bool const was_head = &q->waiters.front() == &w;
    q->waiters.erase(q->waiters.iterator_to(w));
    waiting_.fetch_sub(1, std::memory_order_relaxed);
    if (q->waiters.empty()) {
        if (q->subscribed)
            store_.unsubscribe(q->keys.channel); // nobody waits here any more
        if (q->queued_at_server)
            store_.leave_queue(q->keys, claim);
        auto it = queues_.find(q->keys.channel);
        if (it != queues_.end() && it->second == q)
            queues_.erase(it);
    } else if (was_head) {
        // A head that took the lock with the next in line kept this locker queued: the next
        // waits for the hand-off. Otherwise it asks at once (and queues).
        wake(q->waiters.front(), acquired && q->queued_at_server
                                     ? wake_reason::promoted_after_acquire
                                     : wake_reason::woken);
    }
}

name_queue* local_queues::find(lock_keys const& keys) {
    auto const it = queues_.find(keys.channel);
    return it == queues_.end() || it->second->waiters.empty() ? nullptr : it->second.get();
}

bool local_queues::busy(lock_keys const& keys) const {
    auto const it = queues_.find(keys.channel);
    return (it != queues_.end() && !it->second->waiters.empty()) ||
           first_attempts_.contains(keys.channel);
}

void local_queues::begin_first_attempt(lock_keys const& keys) {
    ++first_attempts_[keys.channel];
}

void local_queues::end_first_attempt(lock_keys const& keys) {
    auto const it = first_attempts_.find(keys.channel);
    if (it != first_attempts_.end() && --it->second == 0)
        first_attempts_.erase(it);
}

void local_queues::on_message(std::string const& channel, std::string const& payload) {
    auto it = queues_.find(channel);
    if (payload == "q") {
        if (it != queues_.end())
            it->second->others_queued = true;
        return;
    }
    if (it == queues_.end() || it->second->waiters.empty()) {
        // Handed to us after our last waiter left (its leave_queue crossed the hand-off):
        // pass it on now rather than after the claim.
        if (auto key = lock_keys::key_of_channel(channel, owner_))
            store_.leave_queue(lock_keys(std::move(*key), owner_), max_handoff_claim);
        return;
    }
    auto& q = *it->second;
    // One local waiter, not a herd: the head takes it, the rest stay asleep.
    q.wake_pending = true;
    wake(q.waiters.front());
}

void local_queues::wake_heads() {
    for (auto& [channel, q] : queues_)
        if (!q->waiters.empty()) {
            q->wake_pending = true;
            wake(q->waiters.front());
        }
}

void local_queues::wake(waiter& w, wake_reason why) {
    w.wake = why;
    if (auto end_sleep = std::exchange(w.on_wake, nullptr))
        end_sleep(w);
}

bool locker_impl::take_baton(lock_operation& op) {
    if (!op.baton)
        return false;
    auto baton = std::exchange(op.baton, nullptr);
    // One granted to a lease whose server has been replaced since is not taken: it is lost.
    // Its token may still be in the key (a failover to a replica that had it), so it goes back.
    if (baton->server_changes != store_->server_changes(op.keys())) {
        give_back(op.keys(), std::move(*baton), handoff_claim(op.opt.ttl));
        return false;
    }
    op.out.state =
        make_handed_guard(op.name, op.keys(), op.holder_token(), std::move(*baton), op.opt);
    return true;
}

// A head asks again at least every queue_refresh_interval, keeping its entry alive.
clock_type::time_point locker_impl::head_sleep_end(lock_operation& op, clock_type::time_point now) {
    return head_wakes_at(now, op.deadlines.wait, std::min(op.sleep, queue_refresh_interval),
                         backoff(op.opt.retry, std::max(op.attempts - 1, 0), rng_));
}

void locker_impl::park(lock_operation& op, clock_type::time_point until) {
    op.driving = false;
    op.wake = wake_reason::none;
    if (until == clock_type::time_point::max()) {
        // Nothing to wait for but a wake: no timer. It holds itself meanwhile (a cycle that
        // resume() or finish() ends, or drop_handlers_at_shutdown()).
        op.parked_self = op.shared_from_this();
        op.on_wake = [](waiter& w) {
            auto self = std::move(static_cast<lock_operation&>(w).parked_self);
            auto const& strand = self->locker->strand_;
            asio::post(strand, [self = std::move(self)] { self->locker->resume(*self); });
        };
        return;
    }
    if (!op.timer)
        op.timer = std::make_unique<lock_timer>(strand_);
    op.timer->expires_at(until);
    op.on_wake = [](waiter& w) { static_cast<lock_operation&>(w).timer->cancel(); };
    op.timer->async_wait(
        [op = op.shared_from_this()](boost::system::error_code) { op->locker->resume(*op); });
}

void locker_impl::resume(lock_operation& op) {
    if (op.finished || op.driving)
        return;
    op.on_wake = nullptr; // its timer ran out: nothing to end any more
    if (take_baton(op)) {
        finish(op);
        return;
    }
    bool const head = &op.queue->waiters.front() == &op;
    if (op.wake == wake_reason::promoted_after_acquire) {
        // The previous head took the lock: wait for its release rather than ask now.
        op.need_attempt = false;
        op.sleep = op.opt.ttl;
    } else if (!head && op.wake == wake_reason::none) {
        op.need_attempt = false; // woken by the wait deadline only; checked below
    }
    if (clock_type::now() >= op.deadlines.wait) {
        fail(op, error::timeout, timeout_text(op.opt));
        finish(op);
        return;
    }
    if (!head) {
        park(op, op.deadlines.wait);
        return;
    }
    auto const& queue = *op.queue;
    if (!op.need_attempt && !queue.wake_pending &&
        (queue.subscribed || queue.subscription_refused)) {
        // A head with nothing to ask (the one before it took the lock): sleeps on, as
        // queue_turns would, without a coroutine.
        op.need_attempt = true;
        park(op, head_sleep_end(op, clock_type::now()));
        return;
    }
    spawn(op.shared_from_this());
}

// The head's turns: it subscribes to this locker's wake channel for the name (once per name)
// and asks the server when handed the lock, when the holder's lease should have run out, after
// its backoff, or to refresh its entry in the server's queue; between turns it parks.
asio::awaitable<void> locker_impl::queue_turns(lock_operation& op, asio::cancellation_state cs) {
    auto& queue = *op.queue;
    attempt_context const context{true, true, op.deadlines, op.opt.retry.max};
    for (;;) {
        if (&queue.waiters.front() != &op) {
            park(op, op.deadlines.wait);
            co_return;
        }
        if (!queue.subscribed && !queue.subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue.subscribed = true;
            auto [sec, refusal] = co_await store_->subscribe(queue.keys.channel);
            if (sec) {
                // Not subscribed (nothing to undo on leaving): poll by the backoff instead. A
                // refusal (an ACL user without the channel: NOPERM) stands for this queue; the
                // connection's last_error_text() keeps the server's words.
                queue.subscribed = false;
                queue.subscription_refused = sec == redis::error::server_error;
            }
            op.need_attempt = true;
            if (cancelled(cs)) {
                fail(op, asio::error::operation_aborted, {});
                finish(op);
                co_return;
            }
            if (take_baton(op)) {
                finish(op);
                co_return;
            }
        }
        if (op.need_attempt) {
            queue.wake_pending = false;
            // With more waiters here behind this one, this locker stays queued at the server
            // after a grant, so the lock comes back to them in turn.
            auto const mode =
                queue.waiters.size() > 1 ? queueing::stay_after_grant : queueing::when_held;
            op.asked = true;
            auto r = co_await try_once(op.keys(), op.holder_token(), op.name, op.opt, mode, cs,
                                       op.deadlines.wait, op.out);
            ++op.attempts;
            if (r->granted)
                queue.queued_at_server = mode == queueing::stay_after_grant;
            else if (!r->ec || r->outcome_unknown)
                queue.queued_at_server = true;
            if (!r->ec)
                queue.others_queued = r->others_queued;
            auto const next = decide_after_attempt(*r, context, cancelled(cs), clock_type::now());
            switch (next.step) {
            case next_step::acquired:
                // Redis granted it: a baton given meanwhile was of a lease that is gone from the
                // key (with Redlock, perhaps not from a minority of primaries): given back.
                if (auto baton = std::exchange(op.baton, nullptr))
                    give_back(op.keys(), std::move(*baton), handoff_claim(op.opt.ttl));
                finish(op);
                co_return;
            case next_step::aborted:
                fail(op, asio::error::operation_aborted, {});
                finish(op);
                co_return;
            case next_step::fail_timeout:
                fail(op, error::timeout, timeout_text(op.opt));
                finish(op);
                co_return;
            case next_step::fail:
                fail(op, r->ec, failure_text(r->ec, r->server_text, op.opt, true));
                finish(op);
                co_return;
            case next_step::not_acquired: // co_try_lock does not queue
            case next_step::wait:
                op.sleep = next.sleep;
                break;
            }
            if (take_baton(op)) {
                finish(op);
                co_return;
            }
        }
        op.need_attempt = true;

        auto const now = clock_type::now();
        if (now >= op.deadlines.wait) {
            fail(op, error::timeout, timeout_text(op.opt));
            finish(op);
            co_return;
        }
        if (queue.wake_pending)
            continue; // released while we were busy: try again at once
        if (cancelled(cs)) {
            fail(op, asio::error::operation_aborted, {});
            finish(op);
            co_return;
        }
        park(op, head_sleep_end(op, now));
        co_return;
    }
}

} // namespace colock::detail
