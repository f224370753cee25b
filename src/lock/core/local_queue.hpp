// This process's waiters on each name: a FIFO per name sharing one subscription to this
// locker's wake channel for the name, and one entry in the server's queue of waiting
// processes. Only the head asks the server; a hand-off wakes the head alone, and a head that
// leaves hands the turn to the next. Private to the library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/intrusive/list.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace colock::detail {

enum class wake_reason {
    none,                   // the timer ran out
    woken,                  // handed the lock through Redis, or the head before it gave up
    promoted_after_acquire, // the head before it took the lock: no point in asking at once
    handed,                 // given the lease by a holder of this process (its baton)
};

// A lease passed from a holder of this process to the next local waiter (cohort hand-off).
struct lease_baton {
    std::string lease_token;           // the token the lock key holds
    std::int64_t lease_fence;          // the fence Redis gave the lease
    std::int64_t fence;                // the receiver's
    clock_type::time_point granted_at; // when Redis's grant came
    clock_type::time_point deadline;   // the lease's local bound
    std::size_t local_handoffs;        // this one included
    std::uint64_t server_changes;      // the store's count when the lease was granted
    bool others_queued = false;        // a locker of another process was queued for it
    std::optional<held_value> written; // what the lock key holds, when known (held_value)
};

// One local waiter of a contended co_lock: the queue node of its lock_operation, linked into
// its name_queue's list in place (no node of its own to allocate).
struct waiter
    : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::normal_link>> {
    wake_reason wake = wake_reason::none;
    std::unique_ptr<lease_baton> baton; // given by a local holder; taken or passed on
    // While it sleeps: what ends the sleep (wake() calls it once); empty while it is busy
    // asking, when a wake only leaves its reason.
    void (*on_wake)(waiter&) = nullptr;
    // Has asked the server since it queued; a waiter that has not, queued behind another
    // call's first attempt, gives its place to that call when it goes on waiting.
    bool asked = false;
};

// The local FIFO of waiters on one name, sharing one subscription to its wake channel.
struct name_queue {
    explicit name_queue(lock_keys k) : keys(std::move(k)) {}

    lock_keys const keys;
    boost::intrusive::list<waiter> waiters; // leaving from the middle is O(1)
    // This locker may have an entry in the server's queue for the name: the last one out
    // takes it out (and passes on a hand-off that came meanwhile).
    bool queued_at_server = false;
    bool subscribed = false;
    // The server refused the subscription (an ACL user without the channel, or BUSY): the
    // waiters poll, by their backoff, for as long as this queue lives.
    bool subscription_refused = false;
    bool wake_pending = false; // a hand-off arrived while the head was not sleeping
    // A locker of another process is queued for the lease this process holds: local
    // hand-offs are limited to cohort_limit in a row.
    bool others_queued = false;
};

class local_queues {
public:
    // `store` outlives this (both belong to the locker); `owner` is the locker's id.
    local_queues(lease_store& store, std::string owner) : store_(store), owner_(std::move(owner)) {}

    // Queues `w` last on the queue of `keys`, made on first use; first instead, when
    // `ahead_of_unasked` and the head has not asked the server yet (`w` has: its first
    // attempt, which the others queued behind).
    std::shared_ptr<name_queue> join(lock_keys const& keys, waiter& w,
                                     bool ahead_of_unasked = false);
    // Takes `w` out; the last one out drops the subscription and the server-side entry
    // (`claim`: how long a hand-off it passes on is kept), a head going out wakes the next
    // (`acquired`: it took the lock, so the next waits for its hand-off when queued).
    void leave(std::shared_ptr<name_queue> const& q, waiter& w, bool acquired,
               std::chrono::milliseconds claim);
    // Takes `w` out and nothing else: its operation is destroyed with the io_context.
    void drop(std::shared_ptr<name_queue> const& q, waiter& w) noexcept;
    // Whether someone in this process already waits on the lock of `keys`, or is making a
    // first attempt at it: a co_lock then queues behind them rather than ask too.
    bool busy(lock_keys const& keys) const;
    // A co_lock's first attempt at the lock of `keys` begins, and ends.
    void begin_first_attempt(lock_keys const& keys);
    void end_first_attempt(lock_keys const& keys);
    // The queue of `keys` when it has waiters, else null.
    name_queue* find(lock_keys const& keys);
    // Waiters in all queues; from any thread.
    std::size_t waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }

    // A message to this locker on `channel`. "g": the lock was handed to it: the head takes
    // it, the rest stay asleep; with nobody left to take it, it is passed on. "q": another
    // process queued behind the lease it holds.
    void on_message(std::string const& channel, std::string const& payload);
    // Messages published while the connection was down were missed: every head looks.
    void wake_heads();

    static void wake(waiter& w, wake_reason why = wake_reason::woken);

    // Calls f(waiter&) for every waiter; f must not change the queues.
    template <class F>
    void for_each_waiter(F f) {
        for (auto& entry : queues_)
            for (waiter& w : entry.second->waiters)
                f(w);
    }

private:
    lease_store& store_;
    std::string const owner_;
    std::unordered_map<std::string, std::shared_ptr<name_queue>> queues_; // by channel
    std::unordered_map<std::string, std::size_t> first_attempts_;         // by channel
    std::atomic<std::size_t> waiting_{0};
};

} // namespace colock::detail
