// The cast of most lock tests: connections to one server, each with a locker, a probe connection
// that reads the keys behind the lockers' backs, and a unique lock name; all closed once the test's
// scenario returns.
#pragma once

#include "test_util.hpp"

#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace colock::test {

// Awaits `scenario(ctx, cast...)` when the scenario takes the io_context first, else
// `scenario(cast...)`.
template <class Scenario, class... Cast>
asio::awaitable<void> play_scenario(Scenario& scenario, asio::io_context& ctx, Cast&... cast) {
    if constexpr (std::is_invocable_v<Scenario&, asio::io_context&, Cast&...>)
        co_await scenario(ctx, cast...);
    else
        co_await scenario(cast...);
}

/// Checks that `guard` still holds lock `name` (the key has its token), then releases it.
inline asio::awaitable<void> check_held_then_release(redis::connection& probe, lock_guard& guard,
                                                     std::string const& name) {
    auto const holder = co_await held_by(probe, name);
    CHECK(holder == guard.token());
    bool const released = co_await guard.release();
    CHECK(released);
}

/// One attempt of `locks` takes lock `name` again, with a fence above `old_fence`, and
/// releases it.
inline asio::awaitable<void> check_taken_again(locker& locks, std::string const& name,
                                               lock_options const& opt, std::int64_t old_fence) {
    auto next = co_await locks.co_try_lock(name, opt);
    REQUIRE(next.has_value());
    CHECK(next->fence() > old_fence);
    CHECK(co_await next->release());
}

/// Waits up to `limit` for `w` to be told (REQUIREd); returns how long after `since` it was.
inline asio::awaitable<long long> told_after(lost_watch const& w, steady::time_point since,
                                             std::chrono::milliseconds limit) {
    bool const told = co_await finishes(w.done, limit);
    REQUIRE(told);
    co_return ms_between(since, w.at);
}

/// told_after for a watch on `g` told of a loss: no error, and `g` is lost and owns nothing.
inline asio::awaitable<long long> told_lost_after(lost_watch const& w, lock_guard const& g,
                                                  steady::time_point since,
                                                  std::chrono::milliseconds limit) {
    auto const told = co_await told_after(w, since, limit);
    CHECK_FALSE(w.ec);
    CHECK(g.lost());
    CHECK_FALSE(g.owns());
    co_return told;
}

/// Takes lock `name` with `opt` through `locks`, has `w` watch the guard, and holds it for `d`,
/// CHECKing that it stays held and untold meanwhile; returns the guard.
inline asio::awaitable<lock_guard> watched_hold(locker& locks, std::string const& name,
                                                lock_options const& opt, lost_watch& w,
                                                std::chrono::milliseconds d) {
    auto g = co_await locks.co_lock(name, opt);
    watch(g, w);
    CHECK(co_await stays([&] { return g.owns() && !w.done; }, d));
    co_return g;
}

/// A co_spawn completion that checks the coroutine threw nothing, then marks it done: sets a
/// flag, or counts one more in a counter.
template <class Done>
auto check_nothrow_then_mark(Done& done) {
    return [&done](std::exception_ptr e) {
        CHECK_FALSE(e);
        if constexpr (std::is_same_v<Done, bool>)
            done = true;
        else
            ++done;
    };
}

/// A call of `locks` that takes `name` with a lease of 10 s and gives it back at once: a waiter
/// from another process, for co_spawn.
inline asio::awaitable<void> take_and_give_back(locker& locks, std::string name) {
    auto g = co_await locks.co_lock(name, lease(std::chrono::milliseconds{10'000}));
    co_await g.release();
}

/// Waits until a call of `locks` waits (polling every 5 ms, 300 times at the most), REQUIREs
/// that exactly one does, and gives it 100 ms more to settle in its queue.
inline asio::awaitable<void> until_one_waiting(locker& locks) {
    co_await poll_until([&] { return locks.waiting() != 0; }, 300, std::chrono::milliseconds{5});
    REQUIRE(locks.waiting() == 1);
    co_await sleep_for(std::chrono::milliseconds{100});
}

/// Holds up the requests of `conn` at the server for `d` from now, as a process that is slow to
/// ask: a WAIT for a replica the server does not have, answered after `d`, before which the
/// server runs none of the connection's later requests (it still sends it messages). Returns
/// once the server has the connection blocked, with the WAIT's outcome to come.
inline asio::awaitable<std::shared_ptr<exec_outcome>>
stall_at_server(redis::connection& conn, redis::connection& probe, std::chrono::milliseconds d) {
    auto const id = co_await integer(conn, command("CLIENT", "ID"));
    auto stalled = std::make_shared<exec_outcome>();
    exec_into(conn, command("WAIT", 1, d.count()), stalled);
    REQUIRE(co_await server_runs(probe, id, "wait", std::chrono::milliseconds{1000}));
    co_return stalled;
}

/// One locker on its own connection, a probe connection, and a lock name from unique_key(what).
/// A scenario takes them in this order: (conn, probe, locks, name).
struct one_locker {
    one_locker(asio::io_context& ctx, redis::config const& cfg, std::string_view what)
        : conn{ctx.get_executor(), cfg}
        , probe{ctx.get_executor(), cfg}
        , locks{conn}
        , name(unique_key(what)) {}

    template <class Scenario>
    asio::awaitable<void> play(Scenario& scenario, asio::io_context& ctx) {
        co_await play_scenario(scenario, ctx, conn, probe, locks, name);
        conn.close();
        probe.close();
    }

    redis::connection conn;
    redis::connection probe;
    locker locks;
    std::string const name;
};

/// Two lockers, each on its own connection (two processes, as the server sees them), a probe
/// connection, and a lock name from unique_key(what). A scenario takes them in this order:
/// (conn_a, conn_b, probe, a, b, name).
struct two_lockers {
    two_lockers(asio::io_context& ctx, redis::config const& cfg, std::string_view what)
        : conn_a{ctx.get_executor(), cfg}
        , conn_b{ctx.get_executor(), cfg}
        , probe{ctx.get_executor(), cfg}
        , a{conn_a}
        , b{conn_b}
        , name(unique_key(what)) {}

    template <class Scenario>
    asio::awaitable<void> play(Scenario& scenario, asio::io_context& ctx) {
        co_await play_scenario(scenario, ctx, conn_a, conn_b, probe, a, b, name);
        close();
    }

    void close() {
        conn_a.close();
        conn_b.close();
        probe.close();
    }

    redis::connection conn_a;
    redis::connection conn_b;
    redis::connection probe;
    locker a;
    locker b;
    std::string const name;
};

/// Three lockers, each on its own connection, a probe connection, and a lock name from
/// unique_key(what): for a holder and two processes queued behind it. A scenario takes them in this
/// order: (conn_a, conn_b, conn_c, probe, a, b, c, name).
struct three_lockers : two_lockers {
    three_lockers(asio::io_context& ctx, redis::config const& cfg, std::string_view what)
        : two_lockers(ctx, cfg, what), conn_c{ctx.get_executor(), cfg}, c{conn_c} {}

    template <class Scenario>
    asio::awaitable<void> play(Scenario& scenario, asio::io_context& ctx) {
        co_await play_scenario(scenario, ctx, conn_a, conn_b, conn_c, probe, a, b, c, name);
        close();
        conn_c.close();
    }

    redis::connection conn_c;
    locker c;
};

/// Runs `scenario` as run_test does, with a fresh `Cast` (one_locker, two_lockers or three_lockers)
/// on the server of `cfg`: the scenario takes the cast's members as references, in their order,
/// after the test's io_context when it wants it too. The connections are closed once it returns;
/// when it throws, they are left to the io_context's end, as a failed test leaves them.
template <class Cast, class Scenario>
void run_lock_test(redis::config const& cfg, std::string_view what, Scenario scenario,
                   std::chrono::seconds limit = std::chrono::seconds{60}) {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            Cast cast(ctx, cfg, what);
            co_await cast.play(scenario, ctx);
        },
        limit);
}

/// Runs `scenario(locks)` as run_test does, with a locker on a fresh connection with `cfg`,
/// closed once the scenario returns.
template <class Scenario>
void run_with_locker(redis::config const& cfg, Scenario scenario,
                     std::chrono::seconds limit = std::chrono::seconds{60}) {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), cfg};
            locker locks{conn};
            co_await scenario(locks);
            conn.close();
        },
        limit);
}

/// run_lock_test on the binary's shared server.
template <class Cast, class Scenario>
void run_lock_test(std::string_view what, Scenario scenario) {
    run_lock_test<Cast>(shared_server().config(), what, std::move(scenario));
}

/// `count` lockers, each on a connection of its own (as many processes, as the server sees
/// them), each with the synchronizer `make(locker&)` returns (a semaphore, a read-write lock),
/// for the load tests; close() closes the connections.
template <class Sync>
struct lockers_with {
    template <class Make>
    lockers_with(asio::io_context& ctx, redis::config const& cfg, int count, Make make) {
        for (int i = 0; i < count; ++i) {
            conns.push_back(std::make_unique<redis::connection>(ctx.get_executor(), cfg));
            lockers.push_back(std::make_unique<locker>(*conns.back()));
            syncs.push_back(make(*lockers.back()));
        }
    }
    Sync& operator[](std::size_t i) { return *syncs[i % syncs.size()]; }
    void close() {
        for (auto& c : conns)
            c->close();
    }

    std::vector<std::unique_ptr<redis::connection>> conns;
    std::vector<std::unique_ptr<locker>> lockers;
    std::vector<std::unique_ptr<Sync>> syncs;
};

/// Runs `body(w)` (an awaitable) for each w in [0, count) as coroutines of `ctx`, side by side;
/// returns once all have ended, with how many threw.
template <class Body>
asio::awaitable<int> run_side_by_side(asio::io_context& ctx, int count, Body body) {
    int finished = 0, failed = 0;
    for (int w = 0; w < count; ++w)
        asio::co_spawn(
            ctx,
            [&body, &finished, w]() -> asio::awaitable<void> {
                co_await body(w);
                ++finished;
            },
            count_failure(failed, finished));
    REQUIRE(co_await eventually([&] { return finished == count; }, std::chrono::minutes{2},
                                std::chrono::milliseconds{20}));
    co_return failed;
}

} // namespace colock::test
