// What the election tests share: waiting for a watch's next change, with a bound.
#pragma once

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <colock/election.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

namespace colock::test {

/// The next change of `w`; fails the test after `limit`.
inline asio::awaitable<leader_change>
next_change(leader_watch& w, std::chrono::milliseconds limit = std::chrono::milliseconds{3000}) {
    using namespace boost::asio::experimental::awaitable_operators;
    asio::steady_timer timer(co_await asio::this_coro::executor, limit);
    auto r = co_await (w.co_next() || timer.async_wait(asio::use_awaitable));
    REQUIRE(r.index() == 0);
    auto change = std::get<0>(std::move(r));
    REQUIRE(change.has_value());
    co_return *change;
}

/// A watch of `e` that has reported how it started: with nobody leading (CHECKed).
inline asio::awaitable<leader_watch> watch_from_nobody(election& e) {
    auto w = e.observe();
    CHECK_FALSE((co_await next_change(w)).leading);
    co_return w;
}

/// Whether `w` reports nothing for `d`.
inline asio::awaitable<bool> quiet_for(leader_watch& w, std::chrono::milliseconds d) {
    using namespace boost::asio::experimental::awaitable_operators;
    asio::steady_timer timer(co_await asio::this_coro::executor, d);
    auto r = co_await (w.co_next() || timer.async_wait(asio::use_awaitable));
    co_return r.index() == 1;
}

/// A campaign run beside the test: its leadership once it leads.
struct campaign_run {
    std::optional<leadership> lead;
    steady::time_point at;
    bool done = false;
};

/// Spawns `e.co_campaign(value, opt)` on `ex`, recording it in `run`, which outlives it.
inline void start_campaign(asio::any_io_executor ex, election& e, std::string value,
                           lock_options opt, campaign_run& run) {
    asio::co_spawn(
        ex,
        [&e, value, opt, &run]() -> asio::awaitable<void> {
            run.lead = co_await e.co_campaign(value, opt);
            run.at = steady::now();
        },
        check_nothrow_then_mark(run.done));
}

/// The key of election `name`'s lock under the default prefix.
inline std::string election_key(std::string const& name) {
    return "colock:election:{" + name + "}";
}

/// Whether `server` holds `key` (of any type).
inline bool holds_key(redis_server const& server, std::string const& key) {
    return server.cli({"EXISTS", key}) == "1";
}

} // namespace colock::test
