// Virtual time for the unit tests: the lock layer's clock (lock_clock) is moved on by the test
// and nothing sleeps. An io_context with a strand, run by the test a step at a time.
#pragma once

#include "lock/base/common.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>

namespace colock::test {

// Asio sleeps until its earliest timer by the clock as it was: a timer due at once makes it
// look at all of them again by the moved clock. Call after lock_clock::advance().
inline void nudge_timers(boost::asio::io_context& ctx) {
    detail::lock_timer nudge(ctx, detail::lock_clock::time_point::min());
    nudge.async_wait([](boost::system::error_code) {});
}

// One io_context and a strand on it; the test runs what is ready and moves the clock.
struct virtual_clock_context {
    boost::asio::io_context ctx;
    boost::asio::strand<boost::asio::any_io_executor> strand{
        boost::asio::make_strand(ctx.get_executor())};

    // Runs what is ready, without moving the clock.
    void settle() {
        ctx.restart();
        ctx.poll();
    }

    // Moves the lock clock on by `d` and runs what became due.
    void advance(std::chrono::milliseconds d) {
        detail::lock_clock::advance(d);
        nudge_timers(ctx);
        settle();
    }
};

} // namespace colock::test
