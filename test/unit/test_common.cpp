// The lock layer's clock and its small helpers (base/common.hpp): the clock moved on by tests
// alone, a deadline that saturates at the clock's end instead of wrapping into the past, and
// whether a cancellation state holds a cancellation.
#include "lock/base/common.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>

#include <doctest/doctest.h>

#include <chrono>

namespace asio = boost::asio;
using namespace std::chrono_literals;
// What is under test, from base/common.hpp.
using colock::detail::cancelled, colock::detail::clock_type, colock::detail::lock_clock,
    colock::detail::saturating_add;

TEST_CASE("lock clock: steady, with steady_clock's time points, moved on by advance()") {
    static_assert(lock_clock::is_steady);
    static_assert(std::is_same_v<lock_clock::time_point, std::chrono::steady_clock::time_point>);
    auto const before = lock_clock::now();
    lock_clock::advance(1h);
    auto const after = lock_clock::now();
    CHECK(after - before >= 1h);
    CHECK(after - before < 1h + 10s);
    CHECK(after > std::chrono::steady_clock::now() + 59min); // ahead of the steady clock
}

TEST_CASE("saturating_add: an ordinary duration is added as it is") {
    auto const t = clock_type::now();
    CHECK(saturating_add(t, 1500ms) == t + 1500ms);
    CHECK(saturating_add(t, 1ms) == t + 1ms);
}

TEST_CASE("saturating_add: zero and negative durations leave the time point as it is") {
    auto const t = clock_type::now();
    CHECK(saturating_add(t, 0ms) == t);
    CHECK(saturating_add(t, -5s) == t);
    CHECK(saturating_add(t, std::chrono::milliseconds::min()) == t);
}

TEST_CASE("saturating_add: milliseconds::max() and anything past the clock's end give its end, "
          "never a time in the past") {
    auto const t = clock_type::now();
    CHECK(saturating_add(t, std::chrono::milliseconds::max()) == clock_type::time_point::max());
    auto const room =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::time_point::max() - t);
    CHECK(saturating_add(t, room) == clock_type::time_point::max());
    CHECK(saturating_add(t, room - 1ms) == t + (room - 1ms));
    CHECK(saturating_add(t, room - 1ms) < clock_type::time_point::max());
    // At the clock's end already: stays there.
    CHECK(saturating_add(clock_type::time_point::max(), 1ms) == clock_type::time_point::max());
}

TEST_CASE("cancelled: false until a cancellation of any type reaches the state") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}) {
        asio::cancellation_signal signal;
        asio::cancellation_state cs(signal.slot(), asio::enable_total_cancellation());
        CHECK_FALSE(cancelled(cs));
        signal.emit(type);
        CHECK(cancelled(cs));
    }
}

TEST_CASE("cancelled: a type the state's filter lets through only counts") {
    asio::cancellation_signal signal;
    asio::cancellation_state cs(signal.slot()); // terminal only, by default
    signal.emit(asio::cancellation_type::partial);
    CHECK_FALSE(cancelled(cs));
    signal.emit(asio::cancellation_type::terminal);
    CHECK(cancelled(cs));
}
