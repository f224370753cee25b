// The local queues, and how a contended co_lock waits in one: the head subscribes to this
// locker's wake channel for the name (once per name) and asks the server again when handed
// the lock, when the holder's lease should have run out, after its backoff, or to refresh its
// entry in the server's queue; the others sleep until they are the head.
#include "local_queue.hpp"

#include "locker_impl.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/this_coro.hpp>

#include <vector>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

std::shared_ptr<name_queue> local_queues::join(lock_keys const& keys, waiter& w) {
    auto& q = queues_[keys.channel];
    if (!q)
        q = std::make_shared<name_queue>(keys);
    w.position = q->waiters.insert(q->waiters.end(), &w);
    waiting_.fetch_add(1, std::memory_order_relaxed);
    return q;
}

void local_queues::leave(std::shared_ptr<name_queue> const& q, waiter& w, bool acquired,
                         milliseconds claim) {
    bool const was_head = q->waiters.front() == &w;
    q->waiters.erase(w.position);
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
        wake(*q->waiters.front(), acquired && q->queued_at_server
                                      ? wake_reason::promoted_after_acquire
                                      : wake_reason::woken);
    }
}

name_queue* local_queues::find(lock_keys const& keys) {
    auto const it = queues_.find(keys.channel);
    return it == queues_.end() || it->second->waiters.empty() ? nullptr : it->second.get();
}

bool local_queues::has_waiters(lock_keys const& keys) const {
    auto const it = queues_.find(keys.channel);
    return it != queues_.end() && !it->second->waiters.empty();
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
    wake(*q.waiters.front());
}

void local_queues::wake_heads() {
    for (auto& [channel, q] : queues_)
        if (!q->waiters.empty()) {
            q->wake_pending = true;
            wake(*q->waiters.front());
        }
}

void local_queues::wake(waiter& w, wake_reason why) {
    w.wake = why;
    w.timer.cancel();
}

asio::awaitable<void> locker_impl::wait_contended(lock_keys const& keys, std::string const& token,
                                                  std::string const& name, lock_options const& opt,
                                                  asio::cancellation_state cs,
                                                  wait_deadlines const& deadlines,
                                                  first_attempt first, lock_outcome& out) {
    milliseconds sleep = first.sleep;
    auto const wait_deadline = deadlines.wait;
    auto fail = [&](boost::system::error_code ec, std::string const& detail_text) {
        set_failure(out, name, ec, detail_text);
    };
    attempt_context const context{true, true, deadlines, opt.retry.max};
    // Contended: queue locally. The head subscribes (once per name) and retries; the others
    // sleep until they become the head.
    waiter self_waiter(strand_);
    auto queue = queues_.join(keys, self_waiter);
    queue->queued_at_server = queue->queued_at_server || first.queued_at_server;
    queue->others_queued = queue->others_queued || first.others_queued;
    // Leaving, a waiter that was given a baton and did not take it passes it on.
    struct leave_on_exit {
        locker_impl& locker;
        std::shared_ptr<name_queue> const& q;
        waiter& w;
        milliseconds claim;
        bool acquired = false;
        ~leave_on_exit() {
            auto baton = std::exchange(w.baton, std::nullopt);
            locker.queues_.leave(q, w, acquired, claim);
            if (baton)
                locker.pass_on(q->keys, std::move(*baton), claim);
        }
    } leave_guard{*this, queue, self_waiter, handoff_claim(opt.ttl)};
    // Takes a baton given meanwhile: the lease of a holder of this process, now ours. One
    // granted to a lease whose server has been replaced since is dropped (it is lost).
    auto take_baton = [&]() {
        if (!self_waiter.baton)
            return false;
        auto baton = std::exchange(self_waiter.baton, std::nullopt);
        if (baton->server_changes != store_->server_changes())
            return false;
        out.state = make_handed_guard(name, keys, token, std::move(*baton), opt);
        leave_guard.acquired = true;
        return true;
    };

    int attempts = 1;
    bool need_attempt = false; // the first attempt's answer still stands
    for (;;) {
        bool const head = queue->waiters.front() == &self_waiter;
        if (head && !queue->subscribed && !queue->subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue->subscribed = true;
            auto [sec, refusal] = co_await store_->subscribe(queue->keys.channel);
            if (sec) {
                // Not subscribed (nothing to undo on leaving): poll by the backoff instead. A
                // refusal (an ACL user without the channel: NOPERM) stands for this queue; the
                // connection's last_error_text() keeps the server's words.
                queue->subscribed = false;
                queue->subscription_refused = sec == redis::error::server_error;
            }
            need_attempt = true;
            if (cancelled(cs)) {
                fail(asio::error::operation_aborted, {});
                co_return;
            }
            if (take_baton())
                co_return;
        }
        if (head && need_attempt) {
            queue->wake_pending = false;
            // With more waiters here behind this one, this locker stays queued at the server
            // after a grant, so the lock comes back to them in turn.
            auto const mode =
                queue->waiters.size() > 1 ? queueing::stay_after_grant : queueing::when_held;
            auto r = co_await try_once(keys, token, name, opt, mode, cs, wait_deadline, out);
            ++attempts;
            if (r->granted)
                queue->queued_at_server = mode == queueing::stay_after_grant;
            else if (!r->ec || r->outcome_unknown)
                queue->queued_at_server = true;
            if (!r->ec)
                queue->others_queued = r->others_queued;
            auto const next = decide_after_attempt(*r, context, cancelled(cs), clock_type::now());
            switch (next.step) {
            case next_step::acquired:
                // Redis granted it: a baton given meanwhile was of a lease that is gone.
                self_waiter.baton.reset();
                leave_guard.acquired = true;
                co_return;
            case next_step::aborted:
                fail(asio::error::operation_aborted, {});
                co_return;
            case next_step::fail_timeout:
                fail(r->ec, timeout_text(opt));
                co_return;
            case next_step::fail:
                fail(r->ec, failure_text(r->ec, r->server_text, opt, true));
                co_return;
            case next_step::not_acquired: // co_try_lock does not queue
            case next_step::wait:
                sleep = next.sleep;
                break;
            }
            if (take_baton())
                co_return;
        }
        need_attempt = true;

        auto const now = clock_type::now();
        if (now >= wait_deadline) {
            fail(error::timeout, timeout_text(opt));
            co_return;
        }
        if (head && queue->wake_pending)
            continue; // released while we were busy: try again at once
        auto until = wait_deadline;
        if (head) // asks again at least every queue_refresh_interval, keeping its entry alive
            until = head_wakes_at(now, wait_deadline, std::min(sleep, queue_refresh_interval),
                                  backoff(opt.retry, attempts - 1, rng_));
        self_waiter.wake = wake_reason::none;
        self_waiter.timer.expires_at(until);
        co_await self_waiter.timer.async_wait(nothrow_awaitable);
        if (cancelled(cs)) {
            fail(asio::error::operation_aborted, {});
            co_return;
        }
        if (take_baton())
            co_return;
        if (self_waiter.wake == wake_reason::promoted_after_acquire) {
            // The previous head took the lock: wait for its release rather than ask now.
            need_attempt = false;
            sleep = opt.ttl;
        } else if (!head && self_waiter.wake == wake_reason::none) {
            need_attempt = false; // woken by the wait deadline only; checked above
        }
    }
}

} // namespace colock::detail
