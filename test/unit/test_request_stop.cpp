// What stops an attempt's request (base/request_stop): the caller's cancellation of any type,
// or the wait's deadline on the lock clock, each as a total cancellation on the request's slot,
// and neither once the stop is gone. On virtual time: the test moves the clock.
#include "lock/base/request_stop.hpp"

#include "virtual_clock.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using colock::detail::clock_type;
using colock::detail::request_stop;

namespace {

struct stop_fixture : colock::test::virtual_clock_context {
    asio::cancellation_signal caller;          // the awaiting coroutine's
    std::vector<asio::cancellation_type> seen; // what reached the request

    asio::cancellation_state caller_state() {
        return asio::cancellation_state(caller.slot(), asio::enable_total_cancellation());
    }
    // The request: it records the cancellations its slot receives.
    void listen(request_stop const& stop) {
        stop.slot().assign([this](asio::cancellation_type t) { seen.push_back(t); });
    }
};

} // namespace

TEST_CASE_FIXTURE(stop_fixture, "request stop: the caller's cancellation reaches the request as a "
                                "total one, whatever its type") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}) {
        seen.clear();
        request_stop const stop(caller_state(), strand, clock_type::time_point::max());
        listen(stop);
        caller.emit(type);
        CHECK(seen == std::vector<asio::cancellation_type>{asio::cancellation_type::total});
    }
}

TEST_CASE_FIXTURE(stop_fixture, "request stop: the deadline stops the request when it passes, "
                                "not before") {
    request_stop const stop(caller_state(), strand, clock_type::now() + 3s);
    listen(stop);
    advance(2900ms);
    CHECK(seen.empty());
    advance(200ms);
    CHECK(seen == std::vector<asio::cancellation_type>{asio::cancellation_type::total});
}

TEST_CASE_FIXTURE(stop_fixture, "request stop: without a deadline only the caller stops it") {
    {
        request_stop const stop(caller_state(), strand, clock_type::time_point::max());
        listen(stop);
        advance(24h);
        CHECK(seen.empty());
    }
    settle();
    CHECK(seen.empty());
}

TEST_CASE_FIXTURE(stop_fixture, "request stop: once gone, neither the caller nor the deadline "
                                "reaches the request") {
    std::optional<request_stop> stop;
    stop.emplace(caller_state(), strand, clock_type::now() + 1s);
    listen(*stop);
    stop.reset();
    caller.emit(asio::cancellation_type::terminal);
    advance(2s);
    CHECK(seen.empty());
}

TEST_CASE_FIXTURE(stop_fixture, "request stop: a caller that cannot cancel leaves the deadline") {
    asio::cancellation_state const none; // not connected to any slot
    request_stop const stop(none, strand, clock_type::now() + 500ms);
    listen(stop);
    advance(600ms);
    CHECK(seen == std::vector<asio::cancellation_type>{asio::cancellation_type::total});
}

TEST_CASE_FIXTURE(stop_fixture, "request stop: a deadline already passed stops the request at "
                                "the strand's next turn") {
    request_stop const stop(caller_state(), strand, clock_type::now() - 1s);
    listen(stop);
    CHECK(seen.empty()); // not inside the constructor
    settle();
    CHECK(seen == std::vector<asio::cancellation_type>{asio::cancellation_type::total});
}
