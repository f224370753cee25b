// Keeping a lease alive: the renewal coroutine of a guard, extend(), and the turns they take
// at the server. Private to the library's sources; on the locker's strand.
#pragma once

#include "common.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <tuple>
#include <vector>

namespace colock::detail {

struct guard_state;

// Renewal and extend() take turns at the server: a renewal with the old ttl that reached it
// after extend() (one sent while extend() was on its way, or retried after NOSCRIPT) would
// shorten the lease extend() has just reported.
class extend_turns {
public:
    explicit extend_turns(boost::asio::strand<boost::asio::any_io_executor> strand)
        : strand_(std::move(strand)) {}

    // Waits for the turn; false when cancelled first, holding nothing. The owner of this
    // object outlives the wait.
    boost::asio::awaitable<bool> take();
    // Passes the turn to the next in line, or frees it.
    void give();

private:
    struct waiter {
        explicit waiter(extend_turns& t) : owner(t), timer(t.strand_) {}
        waiter(waiter const&) = delete;
        ~waiter(); // a frame destroyed unresumed leaves the queue
        extend_turns& owner;
        boost::asio::steady_timer timer;
        bool granted = false;
    };

    boost::asio::strand<boost::asio::any_io_executor> strand_;
    bool taken_ = false;
    std::vector<waiter*> queue_; // rarely more than one: no deque, which allocates when empty
};

// Gives the turn back when the sending coroutine is done with it, however it ends.
struct turn_holder {
    extend_turns* turns = nullptr;
    turn_holder() = default;
    turn_holder(turn_holder const&) = delete;
    ~turn_holder() {
        if (turns)
            turns->give();
    }
};

// Extends the lease every renew interval until stopped, lost or past max_hold; without
// auto_renew, only watches for the lease's end (for wait_lost).
boost::asio::awaitable<void> renew_loop(std::shared_ptr<guard_state> st);

// guard.extend(ttl): in turn with the renewal. `ours` false marks the guard lost.
boost::asio::awaitable<std::tuple<boost::system::error_code, bool>>
extend_held(std::shared_ptr<guard_state> st, std::chrono::milliseconds ttl);

} // namespace colock::detail
