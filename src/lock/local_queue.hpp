// This process's waiters on each name: a FIFO per name sharing one subscription to its wake
// channel. Only the head asks the server; a release wakes the head alone, and a head that
// leaves hands the turn to the next. Private to the library's sources; on the locker's strand.
#pragma once

#include "lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <list>
#include <memory>
#include <string>
#include <unordered_map>

namespace colock::detail {

enum class wake_reason {
    none,                   // the timer ran out
    woken,                  // a release was published, or the head before it gave up
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
    std::list<waiter*> waiters; // a list: leaving from the middle is O(1)
    bool subscribed = false;
    // The server refused the subscription (an ACL user without the channel, or BUSY): the
    // waiters poll, by their backoff, for as long as this queue lives.
    bool subscription_refused = false;
    bool wake_pending = false; // a wake arrived while the head was not sleeping
};

class local_queues {
public:
    // `store` outlives this (both belong to the locker).
    explicit local_queues(lease_store& store) : store_(store) {}

    // Queues `w` last on `channel`'s queue, made on first use.
    std::shared_ptr<name_queue> join(std::string const& channel, waiter& w);
    // Takes `w` out; the last one out drops the subscription, a head going out wakes the next
    // (`acquired`: it took the lock, so the next waits for its release).
    void leave(std::string const& channel, std::shared_ptr<name_queue> const& q, waiter& w,
               bool acquired);
    // Whether someone in this process already waits on `channel`.
    bool has_waiters(std::string const& channel) const;

    // A release was published on `channel`: the head tries, the rest stay asleep.
    void on_wake(std::string const& channel);
    // Messages published while the connection was down were missed: every head looks.
    void wake_heads();

    static void wake(waiter& w, wake_reason why = wake_reason::woken);

private:
    lease_store& store_;
    std::unordered_map<std::string, std::shared_ptr<name_queue>> queues_; // by channel
};

} // namespace colock::detail
