// What every round over a quorum's primaries shares: which primaries answered, whether the
// answers decided the round, and the wait of the coroutine that started it until they do or the
// round's timeout. The rounds (quorum_grant.hpp, quorum_rounds.hpp) add their own answers and
// the decision on them. On the quorum's strand. Private to the library's sources.
#pragma once

#include "lock/base/common.hpp"
#include "lock/quorum/quorum_errors.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace colock::detail::redlock {

class round_state {
public:
    round_state(boost::asio::strand<boost::asio::any_io_executor> const& strand, std::size_t n)
        : timer_(strand), answered_(n, false) {}
    round_state(round_state const&) = delete;
    round_state& operator=(round_state const&) = delete;

    // The primaries asked.
    std::size_t size() const noexcept { return answered_.size(); }
    bool answered(std::size_t i) const { return answered_[i]; }
    // The primaries that have not answered yet.
    std::size_t pending() const;

    bool decided() const noexcept { return decided_; }
    // The answers decided the round: the awaiting coroutine wakes (once).
    void decide();

    // Waits until the round is decided or `timeout` passed; false when the awaiting coroutine was
    // cancelled first (only with `cancellable`).
    boost::asio::awaitable<bool> wait(std::chrono::milliseconds timeout, bool cancellable);
    // Waits until the round is decided, however long; not cancellable.
    boost::asio::awaitable<void> wait_decided();
    // Waits until every primary asked answered (pending() == 0) or `timeout` passed, decided or
    // not; not cancellable.
    boost::asio::awaitable<void> wait_answered(std::chrono::milliseconds timeout);

protected:
    ~round_state() = default;

    // Primary i answered; the last answer wakes a wait_answered.
    void mark_answered(std::size_t i);

    // `errors` (one per primary), with "no answer in time" where a primary did not answer and
    // has no error of its own.
    std::vector<primary_error> with_silence(std::vector<primary_error> errors) const;

private:
    lock_timer timer_;
    std::vector<bool> answered_;
    bool decided_ = false;
    bool awaiting_all_ = false; // in wait_answered
};

} // namespace colock::detail::redlock
