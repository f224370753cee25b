// The lease's safety edges: a local deadline never later than the server's expiry (an extend or
// renewal whose reply is never applied), renewal on a full server after a local hand-off, and
// every key of a lock with an expiry after every script.
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

using namespace colock;
using namespace colock::test;

namespace {

// Asks `other` for lock `name` until it gets it or `limit` has passed; the guard, or none.
asio::awaitable<std::optional<lock_guard>> taken_by(locker& other, std::string const& name,
                                                    std::chrono::milliseconds limit) {
    std::optional<lock_guard> g;
    co_await eventually(
        [&]() -> asio::awaitable<bool> {
            g = co_await other.co_try_lock(name, lease(10'000ms));
            co_return g.has_value();
        },
        limit, 10ms);
    co_return g;
}

lock_options without_renewal(std::chrono::milliseconds ttl) {
    auto opt = lease(ttl);
    opt.auto_renew = false;
    return opt;
}

} // namespace

TEST_CASE("an extend that shortens the lease and whose reply is never applied leaves no longer "
          "local deadline than the server's expiry") {
    using namespace asio::experimental::awaitable_operators;
    lost_watch lost; // outlives the io_context, whatever the test's outcome
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, without_renewal(30'000ms));
        bool const extended = co_await g.extend(30s);
        CHECK(extended);
        watch(g, lost);

        // The server holds writes for 500 ms: the extend is sent, and applied after the caller
        // stopped waiting for it.
        co_await probe.co_exec(command("CLIENT", "PAUSE", "500", "WRITE"));
        asio::steady_timer give_up(ctx);
        give_up.expires_after(20ms);
        co_await (g.extend(200ms) || give_up.async_wait(asio::use_awaitable));
        CHECK(g.lease_expiry() <= steady::now() + 200ms);

        auto taken = co_await taken_by(other, name, 3000ms);
        REQUIRE(taken);
        // The server gave the lock away: this guard no longer believes it holds it.
        CHECK_FALSE(g.owns());
        CHECK(g.lost());
        CHECK(lost.done);
        co_await taken->release();
    };
    run_lock_test<two_lockers>("paused-extend", scenario);
}

TEST_CASE("a grant read after its lease's end is given back: co_try_lock returns nothing and "
          "co_lock asks again, so neither returns a guard that never owned the lock") {
    auto scenario = [&](asio::io_context&, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        // Writes held 400 ms: the grant is applied when the pause ends, and its reply read
        // 400 ms after the request, past the 200 ms the caller can count on from its start.
        auto const opt = without_renewal(200ms);
        co_await probe.co_exec(command("CLIENT", "PAUSE", "400", "WRITE"));
        auto const tried = co_await locks.co_try_lock(name, opt);
        CHECK_FALSE(tried);
        // Given back, not left to lapse: another locker takes it at once.
        auto taken = co_await other.co_try_lock(name, lease(10'000ms));
        REQUIRE(taken);
        CHECK(taken->owns());
        auto const taken_fence = taken->fence();
        co_await taken->release();

        co_await probe.co_exec(command("CLIENT", "PAUSE", "400", "WRITE"));
        auto const start = steady::now();
        auto g = co_await locks.co_lock(name, opt);
        CHECK(steady::now() - start >= 350ms);
        CHECK(g.owns());
        CHECK(g.lease_expiry() > steady::now());
        CHECK(g.fence() > taken_fence);
        co_await g.release();
    };
    run_lock_test<two_lockers>("late-grant", scenario);
}

TEST_CASE("cohort: a renewal with the receiver's shorter ttl, whose reply the released guard "
          "never sees, leaves the next local holder no longer deadline than the server's") {
    fault_proxy proxy(shared_server().port());
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.port = proxy.port();
        cfg.health_check_interval = 0ms; // the latency below would fail the health check
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        locker other{conn_b};
        std::string const name = unique_key("cohort-deadline");
        auto first = co_await locks.co_lock(name, lease(10'000ms));

        // Two waiters of the same process: the second renews every 200 ms with 600 ms; the
        // third does not renew, so its deadline is only what it was handed.
        std::optional<lock_guard> second, third;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> { second = co_await locks.co_lock(name, lease(600ms)); },
            asio::detached);
        REQUIRE(co_await eventually([&] { return locks.waiting() == 1; }));
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                third = co_await locks.co_lock(name, without_renewal(10'000ms));
            },
            asio::detached);
        REQUIRE(co_await eventually([&] { return locks.waiting() == 2; }));
        co_await first.release(); // to the second, in this process
        REQUIRE(co_await finishes_when([&] { return second.has_value(); }, 2000ms));
        auto const handed_deadline = second->lease_expiry();

        // Its first renewal (due 200 ms after the hand-off) goes out, and is let go before its
        // reply can come back: 800 ms each way.
        proxy.set_latency(800ms);
        co_await finishes_when([&] { return second->lease_expiry() < handed_deadline; }, 1000ms);
        // The deadline drops before the request is handed to the connection, whose write is not
        // seen from here: let it be written (a let-go guard's renewal not yet written is never
        // sent). Its reply is 1.6 s away, so the guard still goes before it comes back.
        co_await sleep_for(150ms);
        auto const handed_fence = second->fence();
        co_await second->release(); // to the third, in this process, without a server call

        // The third, the head of the local queue, may be asking the server through the slow
        // proxy when the lease is handed to it. It takes the lease only while its bounded
        // deadline is ahead; else the lease goes back, and the third asks on and gets the lock
        // from the server once the renewal's 600 ms are over there.
        REQUIRE(co_await finishes_when([&] { return third.has_value(); }, 6000ms));
        proxy.set_latency(0ms);
        std::string const took =
            third->fence() == handed_fence + 1 ? "the handed lease" : "a lease of its own";
        MESSAGE("the third took " << took);
        CHECK(third->fence() > handed_fence);
        if (third->owns()) {
            // Never a longer deadline than the server's expiry of the key.
            auto const pttl = co_await integer(conn_b, command("PTTL", lock_key(name)));
            CHECK(third->lease_expiry() <= steady::now() + std::chrono::milliseconds(pttl));
        } else {
            // The handed lease, over since: someone else may take the lock.
            auto taken = co_await taken_by(other, name, 4000ms);
            REQUIRE(taken);
            co_await taken->release();
        }
        third.reset();
        conn.close();
        conn_b.close();
    });
}

TEST_CASE("a lease handed inside the process renews on a full server (maxmemory, noeviction)") {
    redis_server server;
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection& probe,
                        locker& locks, std::string const& name) -> asio::awaitable<void> {
        auto first = co_await locks.co_lock(name, lease(600ms));
        std::optional<lock_guard> second;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> { second = co_await locks.co_lock(name, lease(600ms)); },
            asio::detached);
        REQUIRE(co_await eventually([&] { return locks.waiting() == 1; }));
        co_await first.release(); // a local hand-off: the second's fence is above the stored one
        REQUIRE(co_await finishes_when([&] { return second.has_value(); }, 2000ms));
        CHECK(second->fence() > (co_await read_lock(probe, name)).fence);

        server.cli(strings("CONFIG", "SET", "maxmemory", "1")); // over the limit from now on
        // More than two ttls.
        CHECK(co_await stays([&] { return second->owns(); }, 1500ms));
        bool const held = second->owns();
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        server.cli(strings("CONFIG", "SET", "maxmemory", "0"));
        CHECK(held);
        CHECK_FALSE(second->lost());
        CHECK(pttl > 0);
        bool const released = co_await second->release();
        CHECK(released);
    };
    run_lock_test<one_locker>(server.config(), "oom-handed", scenario);
}

TEST_CASE("force unlock: the holder is told by the script itself, even when the forcer's "
          "connection is gone before its reply") {
    fault_proxy proxy(shared_server().port());
    lost_watch lost; // outlives the io_context, whatever the test's outcome
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(shared_server());
        cfg.port = proxy.port();
        cfg.health_check_interval = 0ms;
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        redis::connection forcer_conn{ctx.get_executor(), cfg};
        locker locks{conn};
        locker forcer{forcer_conn};
        std::string const name = unique_key("force-cut");
        // A 30 s lease renews every 10 s: only the message can tell the holder within a second.
        auto g = co_await locks.co_lock(name, lease(30'000ms));
        // Loads the script, so that the cut below takes its reply, not a NOSCRIPT.
        CHECK_FALSE(co_await forcer.co_force_unlock(unique_key("force-cut-warm")));
        // The holder's subscription for forced unlocks is confirmed.
        REQUIRE(co_await numsub_becomes(conn, "colock:locker:" + locks.id(), 1) == 1);
        watch(g, lost);

        proxy.cut_next_reply(1); // the script runs; its reply never reaches the forcer
        auto const forced_at = steady::now();
        auto [ec, ended] = co_await forcer.async_force_unlock(name, as_tuple);
        MESSAGE("the forcer's answer: " << ec.message() << ", ended " << ended);
        REQUIRE(co_await finishes(lost.done, 1000ms));
        CHECK(ms_since(forced_at) < 1000);
        CHECK(g.loss() == loss_reason::forced);
        conn.close();
        forcer_conn.close();
    });
}

TEST_CASE("values colock never writes under a lock key are refused at once, naming the key: a "
          "fence at 2^53 - 1 or past int64, a negative time, a hand-set string") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const&) -> asio::awaitable<void> {
        for (std::string const value :
             {"F 9007199254740991", "F 99999999999999999999", "R 18446744073709551617 x",
              "H 5 someone token -5 0", "H 9007199254740991 someone token 5 0", "hello"}) {
            CAPTURE(value);
            std::string const name = unique_key("hostile");
            co_await probe.co_exec(command("SET", lock_key(name), value, "PX", "60000"));
            boost::system::error_code code;
            std::string what;
            try {
                auto g = co_await locks.co_try_lock(name, lease(10'000ms));
                CHECK_FALSE(g.has_value());
            } catch (boost::system::system_error const& e) {
                code = e.code();
                what = e.what();
            }
            CHECK(code == redis::error::server_error);
            CHECK(what.find(lock_key(name)) != std::string::npos);

            // A waiting co_lock fails at once too, rather than wait out the key's minute.
            lock_options opt = waiting_up_to(lease(10'000ms), 5000ms);
            auto const started = steady::now();
            code = {};
            try {
                co_await locks.co_lock(name, opt);
            } catch (boost::system::system_error const& e) {
                code = e.code();
            }
            CHECK(code == redis::error::server_error);
            CHECK(ms_since(started) < 1000);
            // The value is left as it was: nothing was counted from it.
            CHECK(co_await get(probe, lock_key(name)) == value);
            co_await probe.co_exec(command("DEL", lock_key(name)));
        }
    };
    run_lock_test<one_locker>("lock", scenario);
}

TEST_CASE("destroying a locker ends its waiting co_lock calls with operation_aborted, and leaves "
          "nothing of them in Redis") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        redis::connection conn_b{ctx.get_executor(), shared_server().config()};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        locker other{conn_b};
        std::string const name = unique_key("locker-gone");
        auto holder = co_await other.co_lock(name, lease(10'000ms));

        auto locks = std::make_unique<locker>(conn);
        constexpr int waiters = 3;
        int done = 0;
        std::vector<boost::system::error_code> codes;
        for (int i = 0; i < waiters; ++i)
            locks->async_lock(name, lease(10'000ms),
                              [&](boost::system::error_code ec, lock_guard g) {
                                  codes.push_back(ec);
                                  CHECK_FALSE(g.owns());
                                  ++done;
                              });
        // Queued in Redis (one entry for the locker) and subscribed to its wake channel.
        REQUIRE(co_await numsub_becomes(probe, wake_channel(name), 1) == 1);
        locks.reset();
        REQUIRE(co_await finishes_when([&] { return done == waiters; }, 1000ms));
        for (auto const& ec : codes)
            CHECK(ec == asio::error::operation_aborted);

        // Nothing of theirs is left: the locker's queue entry and subscription go, and the
        // holder's release leaves the lock free, not handed to the gone locker.
        CHECK(co_await exists_becomes(probe, lock_key(name) + ":q", 0) == 0);
        CHECK(co_await numsub_becomes(probe, wake_channel(name), 0) == 0);
        CHECK(co_await holder.release());
        CHECK(co_await lock_free(probe, name));
        conn.close();
        conn_b.close();
        probe.close();
    });
}

namespace {

// Whether nobody holds lock `name` now, asked on a connection of its own.
bool free_now(std::string const& name) {
    bool free = false;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        free = co_await lock_free(probe, name);
        probe.close();
    });
    return free;
}

// Spawns `body` on `io` (what it throws is rethrown from the run) and runs `io` until it runs
// out of work or `limit` passes; returns how long the run took, in milliseconds.
template <class Body>
long long spawn_and_run(asio::io_context& io, Body body, std::chrono::seconds limit) {
    asio::co_spawn(io, std::move(body), [](std::exception_ptr e) {
        if (e)
            std::rethrow_exception(e);
    });
    auto const started = steady::now();
    io.run_for(limit);
    return ms_since(started);
}

} // namespace

TEST_CASE("close() gives back the leases held through the connection: a guard let go afterwards "
          "sends nothing and holds nothing, and io.run() returns") {
    SUBCASE("the connection outlives the coroutine (owned by main)") {
        std::string const name = unique_key("close-main");
        asio::io_context io;
        redis::connection conn{io.get_executor(), shared_server().config()};
        locker locks{conn};
        bool done = false;
        auto const took_ms = spawn_and_run(
            io,
            [&]() -> asio::awaitable<void> {
                auto g = co_await locks.co_lock(name, lease(30'000ms));
                conn.close();
                CHECK_FALSE(g.owns());
                CHECK_FALSE(co_await g.release()); // given back by close() already
                // The library does not open the connection again behind its user's back: a
                // lock asked for through it now fails until the user connects again.
                boost::system::error_code after_close;
                try {
                    co_await locks.co_try_lock(unique_key("close-after"), lease(1000ms));
                } catch (boost::system::system_error const& e) {
                    after_close = e.code();
                }
                CHECK(after_close == redis::error::closed);
                done = true;
            },
            10s);
        CHECK(done);
        CHECK(io.stopped()); // ran out of work: nothing reopened the connection
        CHECK(took_ms < 3000);
        CHECK(free_now(name));
    }
    SUBCASE("the connection and the guard in the coroutine, the guard let go last (the quick "
            "start's shape)") {
        std::string const name = unique_key("close-coroutine");
        asio::io_context io;
        bool done = false;
        auto const took_ms = spawn_and_run(
            io,
            [&]() -> asio::awaitable<void> {
                redis::connection conn{co_await asio::this_coro::executor,
                                       shared_server().config()};
                locker locks{conn};
                auto guard = co_await locks.co_lock(name, lease(30'000ms));
                conn.close(); // the guard goes after this, with the coroutine
                done = true;
            },
            10s);
        CHECK(done);
        CHECK(io.stopped());
        CHECK(took_ms < 3000);
        // Given back by close(), not left to its 30 s ttl.
        CHECK(free_now(name));
    }
}

TEST_CASE("a baton from a lease on a replaced server is not taken, and its lease goes back: the "
          "waiter gets the lock through Redis at once, not after the old lease's ttl") {
    redis_server_options aof; // the key outlives the restart, with the old lease's token
    aof.extra_args = strings("--appendonly", "yes", "--appendfsync", "always");
    redis_server server(aof);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(server)};
        locker locks{conn};
        std::string const name = unique_key("baton-replaced");
        auto first = co_await locks.co_lock(name, lease(10'000ms));
        std::optional<lock_guard> second;
        steady::time_point second_at;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                lock_options opt = lease(10'000ms);
                opt.retry.max = 200ms;
                second = co_await locks.co_lock(name, opt);
                second_at = steady::now();
            },
            asio::detached);
        // Queued, in Redis and here.
        REQUIRE(co_await eventually([&] { return locks.waiting() == 1; }));
        REQUIRE(co_await queue_length_becomes(conn, name, 1) == 1);

        server.kill();
        // Within a second the waiter asks again; its attempt waits for the connection.
        co_await sleep_for(1500ms);
        co_await first.release(); // handed to the waiter, in this process, while it asks
        auto const restarted_at = steady::now();
        server.restart(); // another instance: the baton's lease is one of the old server's
        REQUIRE(co_await finishes_when([&] { return second.has_value(); }, 5000ms));
        CHECK(second_at > restarted_at);
        CHECK(ms_between(restarted_at, second_at) < 3000);
        CHECK_FALSE(second->lost());
        CHECK(second->token() != first.token());
        CHECK(co_await second->release());
        conn.close();
    });
}
