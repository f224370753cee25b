// Small helpers shared by the units of the lock layer. Private to the library's sources.
#pragma once

#include "detail/awaitable_tokens.hpp"

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/cancellation_state.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace colock::detail {

// The lock layer's clock: steady_clock, moved on by an offset that only tests set (virtual time
// in test/unit/virtual_time.hpp, so that renewals and waits of seconds run in milliseconds).
// Its time points are steady_clock's, so they cross the public API as they are; the offset is
// zero outside those tests.
struct lock_clock {
    using duration = std::chrono::steady_clock::duration;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::steady_clock::time_point;
    static constexpr bool is_steady = true;

    static time_point now() noexcept {
        return std::chrono::steady_clock::now() + duration(offset_.load(std::memory_order_relaxed));
    }
    // For tests: moves the clock on by `d`.
    static void advance(duration d) noexcept {
        offset_.fetch_add(d.count(), std::memory_order_relaxed);
    }

private:
    inline static std::atomic<rep> offset_{0};
};

using clock_type = lock_clock;
// The lock layer's timers, on lock_clock.
using lock_timer = boost::asio::basic_waitable_timer<lock_clock>;

// t + d, saturated at the clock's end: a very long wait or hold must never wrap round into the
// past. (Adding milliseconds::max() to a time point overflows even before the addition: the
// conversion to the clock's nanoseconds does.)
inline clock_type::time_point saturating_add(clock_type::time_point t,
                                             std::chrono::milliseconds d) {
    if (d.count() <= 0)
        return t;
    auto const room =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::time_point::max() - t);
    return d >= room ? clock_type::time_point::max() : t + d;
}

// A wait_timeout spent over several calls (a campaign's rounds, a scope's turn behind another
// of its calls, then its own): the deadline from the start, and what is left for the next call.
class wait_budget {
public:
    wait_budget(std::optional<std::chrono::milliseconds> timeout, clock_type::time_point started)
        : deadline_(timeout ? std::optional(saturating_add(started, *timeout)) : std::nullopt) {}

    // The end of the wait; nothing: it has none.
    std::optional<clock_type::time_point> deadline() const noexcept { return deadline_; }
    // What is left at `now`, rounded up to the millisecond, 0 once spent; nothing: no end.
    std::optional<std::chrono::milliseconds> left(clock_type::time_point now) const {
        if (!deadline_)
            return std::nullopt;
        return std::max(std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - now),
                        std::chrono::milliseconds{0});
    }

private:
    std::optional<clock_type::time_point> deadline_;
};

// The wall-clock time `ms` milliseconds from 1970 (as the scripts and records write it; before
// it when negative), clamped to what the clock holds: a foreign value never wraps round.
inline std::chrono::system_clock::time_point wall_time_of_ms(std::int64_t ms) noexcept {
    using wall = std::chrono::system_clock;
    auto const most =
        std::chrono::duration_cast<std::chrono::milliseconds>(wall::duration::max()).count();
    return wall::time_point(std::chrono::duration_cast<wall::duration>(
        std::chrono::milliseconds(std::clamp<std::int64_t>(ms, -most, most))));
}

inline bool cancelled(boost::asio::cancellation_state const& cs) {
    return cs.cancelled() != boost::asio::cancellation_type::none;
}

} // namespace colock::detail
