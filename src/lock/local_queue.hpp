// This process's waiters on each name: a FIFO per name sharing one subscription to this
// locker's wake channel for the name, and one entry in the server's queue of waiting
// processes. Only the head asks the server; a hand-off wakes the head alone, and a head that
// leaves hands the turn to the next. Private to the library's sources; on the locker's strand.
#pragma once

#include "lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

namespace colock::detail {

enum class wake_reason {
    none,                   // the timer ran out
    woken,                  // handed the lock, or the head before it gave up
    promoted_after_acquire, // the head before it took the lock: no point in asking at once
};

// One local waiter of a contended co_lock; lives in its coroutine's frame.
struct waiter {
    explicit waiter(boost::asio::any_io_executor const& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    wake_reason wake = wake_reason::none;
    std::list<waiter*>::iterator position; // in its name_queue
};

// The local FIFO of waiters on one name, sharing one subscription to its wake channel.
struct name_queue {
    explicit name_queue(lock_keys k) : keys(std::move(k)) {}

    lock_keys const keys;
    std::list<waiter*> waiters; // a list: leaving from the middle is O(1)
    // This locker may have an entry in the server's queue for the name: the last one out
    // takes it out (and passes on a hand-off that came meanwhile).
    bool queued_at_server = false;
    bool subscribed = false;
    // The server refused the subscription (an ACL user without the channel, or BUSY): the
    // waiters poll, by their backoff, for as long as this queue lives.
    bool subscription_refused = false;
    bool wake_pending = false; // a hand-off arrived while the head was not sleeping
};

class local_queues {
public:
    // `store` outlives this (both belong to the locker); `owner` is the locker's id.
    local_queues(lease_store& store, std::string owner) : store_(store), owner_(std::move(owner)) {}

    // Queues `w` last on the queue of `keys`, made on first use.
    std::shared_ptr<name_queue> join(lock_keys const& keys, waiter& w);
    // Takes `w` out; the last one out drops the subscription and the server-side entry
    // (`claim`: how long a hand-off it passes on is kept), a head going out wakes the next
    // (`acquired`: it took the lock, so the next waits for its hand-off when queued).
    void leave(std::shared_ptr<name_queue> const& q, waiter& w, bool acquired,
               std::chrono::milliseconds claim);
    // Whether someone in this process already waits on the lock of `keys`.
    bool has_waiters(lock_keys const& keys) const;

    // The lock was handed to this locker on `channel`: the head takes it, the rest stay
    // asleep; with nobody left to take it, it is passed on.
    void on_wake(std::string const& channel);
    // Messages published while the connection was down were missed: every head looks.
    void wake_heads();

    static void wake(waiter& w, wake_reason why = wake_reason::woken);

private:
    lease_store& store_;
    std::string const owner_;
    std::unordered_map<std::string, std::shared_ptr<name_queue>> queues_; // by channel
};

} // namespace colock::detail
