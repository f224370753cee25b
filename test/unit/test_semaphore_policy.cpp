// A semaphore's decisions without a server: its scripts' replies (every shape they answer with,
// and foreign ones, none of which may read as "granted" or be taken for certain not to have
// run), the checks of its arguments, and when a waiting acquire asks again.
#include "lock/semaphore/semaphore_policy.hpp"

#include "lock/core/acquire_policy.hpp"

#include "script_reply_builders.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using namespace colock::detail;
using colock::resp3::value;
using namespace colock::test; // the reply builders
using namespace std::chrono_literals;

namespace {

// The code of the system_error `f` throws; empty when it throws none.
template <class F>
boost::system::error_code refusal(F f) {
    try {
        f();
    } catch (boost::system::system_error const& e) {
        return e.code();
    }
    return {};
}

} // namespace

TEST_CASE("read_permit_grant: granted, not admitted, another capacity") {
    auto g = read_permit_grant(answered(array({number(1), number(1700000000000123)})));
    CHECK_FALSE(g.ec);
    CHECK(g.granted);
    CHECK(g.fence == 1700000000000123);
    CHECK_FALSE(g.outcome_unknown);

    g = read_permit_grant(answered(array({number(0), number(2500), number(1)})));
    CHECK_FALSE(g.ec);
    CHECK_FALSE(g.granted);
    CHECK(g.wait == 2500ms);
    CHECK(g.free == 1);
    CHECK_FALSE(g.stored);

    // A reader that follows no writer.
    g = read_permit_grant(answered(array({number(1), number(0)})));
    CHECK(g.granted);
    CHECK(g.fence == 0);

    // The capacity as stored, quoted as it is: "3.0" is not 3.
    g = read_permit_grant(answered(array({number(-1), blob("3.0")})));
    CHECK_FALSE(g.ec);
    CHECK_FALSE(g.granted);
    REQUIRE(g.stored.has_value());
    CHECK(*g.stored == "3.0");
    auto const text =
        capacity_mismatch_text("semaphore", "exports", "colock:semaphore:{exports}", 3, *g.stored);
    CHECK(text.find("\"3.0\"") != std::string::npos);
    CHECK(text.find("colock:semaphore:{exports}") != std::string::npos);
    CHECK(text.find("not 3") != std::string::npos);
}

TEST_CASE("read_permit_grant: a reply of another shape is unexpected_reply whose permits may be "
          "held; a refusal did not run, a lost connection may have") {
    value const foreign[] = {
        blob("OK"),
        number(1),
        array({}),
        array({number(1)}),
        array({number(1), number(5), number(0)}), // the grant has two elements
        array({number(0), number(-5), number(1)}),
        array({number(0), number(5)}),
        array({number(2), number(5)}),
        array({number(-1), number(8)}), // the capacity comes as text
        array({number(-1), blob("")}),
        array({number(1), blob("5")}),
    };
    for (auto const& v : foreign) {
        auto const g = read_permit_grant(answered(v));
        CHECK(g.ec == colock::error::unexpected_reply);
        CHECK_FALSE(g.granted);
        CHECK(g.outcome_unknown);
        CHECK_FALSE(g.server_text.empty());
    }
    auto g = read_permit_grant(
        script_reply{colock::redis::error::server_error, error_reply("NOPERM no rights")});
    CHECK(g.ec == colock::redis::error::server_error);
    CHECK(g.server_text == "NOPERM no rights");
    CHECK_FALSE(g.outcome_unknown);
    g = read_permit_grant(script_reply{boost::asio::error::operation_aborted, {}});
    CHECK_FALSE(g.outcome_unknown);
    g = read_permit_grant(script_reply{colock::redis::error::connection_lost, {}});
    CHECK(g.outcome_unknown);
}

TEST_CASE("read_permit_reply and read_semaphore") {
    CHECK(read_permit_reply(answered(number(1))).ours);
    CHECK_FALSE(read_permit_reply(answered(number(0))).ours);
    CHECK(read_permit_reply(answered(number(2))).ec == colock::error::unexpected_reply);
    CHECK(read_permit_reply(answered(blob("1"))).ec == colock::error::unexpected_reply);

    auto r = read_semaphore(answered(array(
        {blob("5"), number(2), number(3), blob("17"), number(1000),
         array({blob("a.t1"), number(1500), number(1), blob("b.t2"), number(2500), number(2)})})));
    CHECK_FALSE(r.ec);
    REQUIRE(r.capacity.has_value());
    CHECK(*r.capacity == "5");
    CHECK(r.held == 2);
    CHECK(r.queued == 3);
    CHECK(r.fence == "17");
    CHECK(r.now_ms == 1000);
    REQUIRE(r.holdings.size() == 2);
    CHECK(r.holdings[1].token == "b.t2");
    CHECK(r.holdings[1].expiry_ms == 2500);
    CHECK(r.holdings[1].permits == 2);
    r = read_semaphore(
        answered(array({blob(""), number(0), number(0), blob(""), number(1), array({})})));
    CHECK_FALSE(r.ec);
    CHECK_FALSE(r.capacity.has_value());
    CHECK(r.holdings.empty());
    auto const tail = [](value listed) {
        return array({blob("5"), number(0), number(0), blob(""), number(1), std::move(listed)});
    };
    for (auto const& v : {array({number(5), number(0), number(0), blob(""), number(1), array({})}),
                          array({blob("5"), number(-1), number(0), blob(""), number(1), array({})}),
                          array({blob("5"), number(1), number(0)}), number(5),
                          tail(array({blob("a.t1"), number(1500)})),
                          tail(array({blob("a.t1"), number(1500), number(0)})), tail(number(3))})
        CHECK(read_semaphore(answered(v)).ec == colock::error::unexpected_reply);
}

TEST_CASE("a semaphore's arguments: name, capacity and permits per call") {
    CHECK_FALSE(refusal([] { validate_semaphore("exports", 8); }));
    CHECK(refusal([] { validate_semaphore("", 8); }) == colock::error::invalid_argument);
    CHECK(refusal([] { validate_semaphore("exports", 0); }) == colock::error::invalid_argument);
    CHECK(refusal([] { validate_semaphore("exports", max_semaphore_capacity + 1); }) ==
          colock::error::invalid_argument);
    CHECK_FALSE(refusal([] { validate_permits("exports", 8, 8); }));
    CHECK(refusal([] { validate_permits("exports", 8, 0); }) == colock::error::invalid_argument);
    CHECK(refusal([] { validate_permits("exports", 8, 9); }) == colock::error::invalid_argument);
    CHECK(refusal([] { validate_permits("big", 5000, max_permits_per_call + 1); }) ==
          colock::error::invalid_argument);
    auto const text = capacity_mismatch_text("semaphore", "exports", "k", 4, "8");
    CHECK(text.find("semaphore 'exports'") != std::string::npos);
    CHECK(text.find("capacity 8 at the server") != std::string::npos);
    CHECK(text.find("in key k") != std::string::npos);
    CHECK(text.find("not 4") != std::string::npos);
}

TEST_CASE("permit_wakes_at: told by messages, a waiting call looks by itself only at the first "
          "expiry or its entry's refresh; without them, or with nothing held, by its backoff") {
    auto const now = clock_type::now();
    auto const never = clock_type::time_point::max();
    // Listening: the first expiry, at most the refresh interval; the backoff does not apply.
    CHECK(permit_wakes_at(now, never, 200ms, true, 30ms) == now + 200ms);
    CHECK(permit_wakes_at(now, never, 10'000ms, true, 30ms) == now + queue_refresh_interval);
    // Nothing held (the calls ahead are about to take theirs): the backoff.
    CHECK(permit_wakes_at(now, never, 0ms, true, 30ms) == now + 30ms);
    // No messages: the backoff when it is sooner.
    CHECK(permit_wakes_at(now, never, 200ms, false, 30ms) == now + 30ms);
    CHECK(permit_wakes_at(now, never, 20ms, false, 30ms) == now + 20ms);
    // At least 1 ms; never after the wait deadline.
    CHECK(permit_wakes_at(now, never, 0ms, true, 0ms) == now + 1ms);
    CHECK(permit_wakes_at(now, now + 5ms, 200ms, true, 30ms) == now + 5ms);
}

TEST_CASE("a permit's attempt as the lock's decision reads it: not admitted waits up to the "
          "first expiry; another capacity or a refusal fails; a lost reply tries again") {
    wait_deadlines const deadlines{clock_type::time_point::max(), clock_type::time_point::max()};
    attempt_context const waiting{true, true, deadlines, 1000ms};
    attempt_context const trying{false, false, deadlines, 1000ms};
    auto const now = clock_type::now();

    permit_grant g;
    g.wait = 700ms;
    auto d = decide_after_attempt(as_grant_result(g), waiting, false, now);
    CHECK(d.step == next_step::wait);
    CHECK(d.sleep == 700ms);
    CHECK(decide_after_attempt(as_grant_result(g), trying, false, now).step ==
          next_step::not_acquired);
    CHECK(decide_after_attempt(as_grant_result(g), waiting, true, now).step == next_step::aborted);

    g = {};
    g.granted = true;
    g.fence = 7;
    CHECK(decide_after_attempt(as_grant_result(g), waiting, false, now).step ==
          next_step::acquired);

    g = {};
    g.ec = colock::redis::error::server_error;
    g.server_text = "NOPERM this user has no permissions to run the 'evalsha' command";
    CHECK(decide_after_attempt(as_grant_result(g), waiting, false, now).step == next_step::fail);

    g = {};
    g.ec = colock::redis::error::connection_lost;
    g.outcome_unknown = true;
    CHECK(decide_after_attempt(as_grant_result(g), waiting, false, now).step == next_step::wait);
}
