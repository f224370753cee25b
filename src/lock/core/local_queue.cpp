// The local queues: a FIFO of waiters per name, its subscription and its entry at the server.
// How a call waits in one is in queue_wait.cpp.
#include "lock/core/local_queue.hpp"

namespace colock::detail {

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

} // namespace colock::detail
