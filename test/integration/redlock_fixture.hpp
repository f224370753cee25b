// The cast of most Redlock tests: two lockers over the same primaries, each on connections of its
// own (two processes, as the primaries see them), a probe set of connections that reads the keys
// behind the lockers' backs, and a unique lock name; all closed once the scenario returns.
#pragma once

#include "lock_fixture.hpp"
#include "test_util.hpp"

#include <colock/locker.hpp>
#include <colock/redis/config.hpp>
#include <colock_test/primary_set.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test {

/// Runs `test(n, servers)` on 3 and on 5 of the binary's shared primaries.
template <class Test>
void on_3_and_5_primaries(Test test) {
    for (std::size_t n : {std::size_t{3}, std::size_t{5}}) {
        CAPTURE(n);
        test(n, shared_primaries(n));
    }
}

/// How many primaries a test starts, and how many of them it kills.
struct primaries_killed {
    std::size_t n;
    std::size_t killed;
};

/// Runs `test(shape, set)` for each shape, on primaries of its own (a primary_set of shape.n).
template <class Test>
void on_fresh_primaries(std::initializer_list<primaries_killed> shapes, Test test) {
    for (auto const sh : shapes) {
        CAPTURE(sh.n);
        primary_set set{sh.n};
        test(sh, set);
    }
}

/// A scenario takes (conns, conns_other, probe, locks, other, name), after the io_context when it
/// wants it too. The probe is connected before the scenario starts; the lockers connect when
/// they are first used, or when the scenario connects them.
struct redlock_lockers {
    redlock_lockers(asio::io_context& ctx, std::vector<redis::config> const& configs,
                    std::string_view what)
        : conns{ctx.get_executor(), configs}
        , conns_other{ctx.get_executor(), configs}
        , probe{ctx.get_executor(), configs}
        , locks{conns.primaries()}
        , other{conns_other.primaries()}
        , name(unique_key(what)) {}

    template <class Scenario>
    asio::awaitable<void> play(Scenario& scenario, asio::io_context& ctx) {
        co_await probe.connect_all();
        co_await play_scenario(scenario, ctx, conns, conns_other, probe, locks, other, name);
        conns.close();
        conns_other.close();
        probe.close();
    }

    primary_connections conns;
    primary_connections conns_other;
    primary_connections probe;
    locker locks;
    locker other;
    std::string const name;
};

/// Runs `scenario` as run_test does, with fresh redlock_lockers over the primaries of `configs`.
template <class Scenario>
void run_redlock_test(std::vector<redis::config> const& configs, std::string_view what,
                      Scenario scenario, std::chrono::seconds limit = std::chrono::seconds{60}) {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redlock_lockers cast(ctx, configs, what);
            co_await cast.play(scenario, ctx);
        },
        limit);
}

} // namespace colock::test
