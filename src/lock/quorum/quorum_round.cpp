#include "lock/quorum/quorum_round.hpp"

#include <colock/error.hpp>

#include <algorithm>
#include <tuple>

namespace colock::detail::redlock {

std::size_t round_state::pending() const {
    return static_cast<std::size_t>(std::count(answered_.begin(), answered_.end(), false));
}

void round_state::mark_answered(std::size_t i) {
    answered_[i] = true;
    if (awaiting_all_ && pending() == 0)
        timer_.cancel();
}

void round_state::decide() {
    if (!decided_) {
        decided_ = true;
        timer_.cancel();
    }
}

boost::asio::awaitable<bool> round_state::wait(std::chrono::milliseconds timeout,
                                               bool cancellable) {
    timer_.expires_after(timeout);
    while (!decided_) {
        boost::system::error_code ec;
        if (cancellable)
            std::tie(ec) = co_await timer_.async_wait(nothrow_awaitable);
        else
            std::tie(ec) = co_await timer_.async_wait(uncancellable());
        if (!ec)
            break; // timed out: the rest is unknown
        if (!decided_)
            co_return false;
    }
    co_return true;
}

boost::asio::awaitable<void> round_state::wait_decided() {
    timer_.expires_at(clock_type::time_point::max());
    while (!decided_)
        co_await timer_.async_wait(uncancellable());
}

boost::asio::awaitable<void> round_state::wait_answered(std::chrono::milliseconds timeout) {
    auto const until = saturating_add(clock_type::now(), timeout);
    awaiting_all_ = true;
    while (pending() > 0 && clock_type::now() < until) {
        timer_.expires_at(until);
        co_await timer_.async_wait(uncancellable());
    }
    awaiting_all_ = false;
}

std::vector<primary_error> round_state::with_silence(std::vector<primary_error> errors) const {
    for (std::size_t i = 0; i < answered_.size(); ++i)
        if (!answered_[i] && !errors[i].first)
            errors[i] = {error::no_quorum, "no answer in time"};
    return errors;
}

} // namespace colock::detail::redlock
