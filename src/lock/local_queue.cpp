// The local queues, and how a contended co_lock waits in one: the head subscribes to the
// name's wake channel (once per name) and asks the server again when woken, when the holder's
// lease should have run out, or after its backoff; the others sleep until they are the head.
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

std::shared_ptr<name_queue> local_queues::join(std::string const& channel, waiter& w) {
    auto& q = queues_[channel];
    if (!q)
        q = std::make_shared<name_queue>();
    w.position = q->waiters.insert(q->waiters.end(), &w);
    return q;
}

void local_queues::leave(std::string const& channel, std::shared_ptr<name_queue> const& q,
                         waiter& w, bool acquired) {
    bool const was_head = q->waiters.front() == &w;
    q->waiters.erase(w.position);
    if (q->waiters.empty()) {
        if (q->subscribed)
            store_.unsubscribe(channel); // nobody waits here any more
        auto it = queues_.find(channel);
        if (it != queues_.end() && it->second == q)
            queues_.erase(it);
    } else if (was_head) {
        wake(*q->waiters.front(),
             acquired ? wake_reason::promoted_after_acquire : wake_reason::woken);
    }
}

bool local_queues::has_waiters(std::string const& channel) const {
    auto const it = queues_.find(channel);
    return it != queues_.end() && !it->second->waiters.empty();
}

void local_queues::on_wake(std::string const& channel) {
    auto it = queues_.find(channel);
    if (it == queues_.end())
        return;
    auto& q = *it->second;
    if (q.waiters.empty())
        return;
    // One local waiter, not a herd: the head tries, the rest stay asleep.
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
                                                  milliseconds sleep, lock_outcome& out) {
    auto const wait_deadline = deadlines.wait;
    auto fail = [&](boost::system::error_code ec, std::string const& detail_text) {
        set_failure(out, name, ec, detail_text);
    };
    attempt_context const context{true, true, deadlines, opt.retry.max};
    // Contended: queue locally. The head subscribes (once per name) and retries; the others
    // sleep until they become the head.
    waiter self_waiter(strand_);
    auto queue = queues_.join(keys.channel, self_waiter);
    struct leave_on_exit {
        local_queues& queues;
        std::string const& channel;
        std::shared_ptr<name_queue> const& q;
        waiter& w;
        bool acquired = false;
        ~leave_on_exit() { queues.leave(channel, q, w, acquired); }
    } leave_guard{queues_, keys.channel, queue, self_waiter};

    int attempts = 1;
    bool need_attempt = false; // the first attempt's answer still stands
    for (;;) {
        bool const head = queue->waiters.front() == &self_waiter;
        if (head && !queue->subscribed && !queue->subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue->subscribed = true;
            auto [sec, refusal] = co_await store_->subscribe(keys.channel);
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
        }
        if (head && need_attempt) {
            queue->wake_pending = false;
            auto r = co_await try_once(keys, token, name, opt, cs, wait_deadline, out);
            ++attempts;
            auto const next = decide_after_attempt(*r, context, cancelled(cs), clock_type::now());
            switch (next.step) {
            case next_step::acquired:
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
        if (head)
            until =
                head_wakes_at(now, wait_deadline, sleep, backoff(opt.retry, attempts - 1, rng_));
        self_waiter.wake = wake_reason::none;
        self_waiter.timer.expires_at(until);
        co_await self_waiter.timer.async_wait(nothrow_awaitable);
        if (cancelled(cs)) {
            fail(asio::error::operation_aborted, {});
            co_return;
        }
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
