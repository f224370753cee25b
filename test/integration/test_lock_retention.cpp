// Lease retention (lock_options::retain) against a real redis-server: a name re-locked through
// the locker that keeps its lease costs the server nothing, with fences still going up; the
// lease goes back when the retention ends, when another process asks (at once, not after
// retain), at the let-go of a guard that took it while another process queued, and when the
// connection closes; two processes retaining one name never hold it together.
#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

// A 10 s lease kept for `retain` after its holder lets go.
lock_options retained(std::chrono::milliseconds retain) {
    lock_options opt = lease(10'000ms);
    opt.retain = retain;
    return opt;
}

long long ms_of(steady::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::string wake_channels(std::string const& name) {
    return lock_key(name) + ":w:*";
}

// How each acquisition came, and whether each let-go kept the lease.
struct retention_watch final : lock_observer {
    std::vector<acquired_by> acquired;
    std::vector<bool> kept;
    void on_acquired(acquired_event const& e) override { acquired.push_back(e.how); }
    void on_released(released_event const& e) override { kept.push_back(e.retained); }
};

// A retention_watch observing `locks`.
std::shared_ptr<retention_watch> watch_retention(locker& locks) {
    auto watch = std::make_shared<retention_watch>();
    locks.set_observer(watch);
    return watch;
}

} // namespace

TEST_CASE("retention: re-locking a kept lease costs the server nothing, each holder gets a "
          "higher fence, and the lease goes back when retain ends") {
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto const opt = retained(400ms);
        auto const watch = watch_retention(locks);
        std::int64_t last_fence = 0;
        {
            auto first = co_await locks.co_lock(name, opt);
            last_fence = first.fence();
            CHECK(co_await first.release());
        }
        // Kept: still held in Redis, and the locker listens on its wake channel for the name.
        CHECK((co_await held_by(probe, name)).has_value());
        CHECK(co_await numsub_becomes(probe, wake_channels(name), 1) == 1);

        constexpr int cycles = 40;
        std::set<std::string> tokens;
        auto const before = co_await commandstats(probe);
        for (int i = 0; i < cycles; ++i) {
            auto g = co_await locks.co_lock(name, opt);
            CHECK(g.fence() > last_fence);
            last_fence = g.fence();
            tokens.insert(g.token());
            CHECK(g.owns());
            if (i % 2 == 0)
                CHECK(co_await g.release());
            // else let go by its destructor
        }
        auto const after = co_await commandstats(probe);
        CHECK(commands_between(before, after) == 0);
        CHECK(tokens.size() == cycles);
        REQUIRE(watch->acquired.size() == cycles + 1);
        CHECK(watch->acquired.front() == acquired_by::first_attempt);
        CHECK(std::count(watch->acquired.begin(), watch->acquired.end(), acquired_by::retained) ==
              cycles);
        CHECK(std::count(watch->kept.begin(), watch->kept.end(), true) == cycles + 1);

        // A try takes it too.
        {
            auto g = co_await locks.co_try_lock(name, opt);
            REQUIRE(g.has_value());
            CHECK(g->fence() > last_fence);
            last_fence = g->fence();
        }
        // Nobody takes it: it goes back after retain, and the fence stored is past every one given.
        CHECK(co_await free_becomes(probe, name, 3000ms));
        CHECK(co_await numsub_becomes(probe, wake_channels(name), 0) == 0);
        auto const record = co_await read_lock(probe, name);
        CHECK(record.kind == 'F');
        CHECK(record.fence > last_fence);
        auto next = co_await locks.co_lock(name, lease(10'000ms));
        CHECK(next.fence() > record.fence);
        CHECK(co_await next.release());
    };
    run_lock_test<one_locker>("retain", scenario);
}

TEST_CASE("retention: another process's co_lock gets a kept lease at once, not after retain") {
    auto scenario = [&](redis::connection&, redis::connection&, redis::connection& probe, locker& a,
                        locker& b, std::string const& name) -> asio::awaitable<void> {
        auto const keep_long = retained(20'000ms);
        std::int64_t a_fence = 0;
        {
            auto g = co_await a.co_lock(name, keep_long);
            a_fence = g.fence();
        }
        REQUIRE(co_await numsub_becomes(probe, wake_channels(name), 1) == 1);
        CHECK((co_await held_by(probe, name)).has_value());

        lock_options waits = lease(10'000ms);
        waits.wait_timeout = 5000ms;
        auto const asked = steady::now();
        auto g = co_await b.co_lock(name, waits);
        auto const waited = steady::now() - asked;
        MESSAGE("another process waited " << ms_of(waited) << " ms for a kept lease");
        CHECK(waited < 2000ms);
        CHECK(g.fence() > a_fence);
        CHECK(co_await numsub_becomes(probe, wake_channels(name), 0) == 0);
        auto const b_fence = g.fence();
        CHECK(co_await g.release());
        // a asks Redis again.
        auto again = co_await a.co_lock(name, keep_long);
        CHECK(again.fence() > b_fence);
    };
    run_lock_test<two_lockers>("retain-steal", scenario);
}

TEST_CASE("retention: a guard that took a kept lease while another process queued gives it back "
          "at its let-go") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& a, locker& b,
                        std::string const& name) -> asio::awaitable<void> {
        auto const keep_long = retained(20'000ms);
        auto const watch = watch_retention(a);
        { auto g = co_await a.co_lock(name, keep_long); }
        REQUIRE(co_await numsub_becomes(probe, wake_channels(name), 1) == 1);
        auto held = co_await a.co_lock(name, keep_long); // the kept lease
        std::optional<std::int64_t> b_fence;
        bool b_done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                lock_options waits = lease(10'000ms);
                waits.wait_timeout = 5000ms;
                auto g = co_await b.co_lock(name, waits);
                b_fence = g.fence();
                co_await g.release();
            },
            check_nothrow_then_mark(b_done));
        // b queues at the server, and tells a, whose guard holds the kept lease.
        CHECK(co_await queue_length_becomes(probe, name, 1) == 1);
        CHECK(co_await stays([&] { return !b_fence.has_value(); }, 100ms)); // a still holds it
        auto const a_fence = held.fence();
        auto const let_go = steady::now();
        CHECK(co_await held.release());
        co_await eventually([&] { return b_done; }, 3000ms, 5ms);
        REQUIRE(b_fence.has_value());
        MESSAGE("the queued process got the lease " << ms_of(steady::now() - let_go)
                                                    << " ms after the let-go");
        CHECK(steady::now() - let_go < 2000ms);
        CHECK(*b_fence > a_fence);
        // Given back at the let-go, not kept until b asks again.
        CHECK(watch->kept == std::vector<bool>{true, false});
        CHECK(watch->acquired ==
              std::vector<acquired_by>{acquired_by::first_attempt, acquired_by::retained});
    };
    run_lock_test<two_lockers>("retain-queued", scenario);
}

TEST_CASE("retention: closing the connection gives a kept lease back") {
    auto scenario = [&](redis::connection& conn_a, redis::connection&, redis::connection& probe,
                        locker& a, locker& b, std::string const& name) -> asio::awaitable<void> {
        { auto g = co_await a.co_lock(name, retained(20'000ms)); }
        CHECK((co_await held_by(probe, name)).has_value());
        conn_a.close();
        CHECK(co_await free_becomes(probe, name, 1000ms));
        auto g = co_await b.co_try_lock(name, lease(10'000ms));
        CHECK(g.has_value());
    };
    run_lock_test<two_lockers>("retain-close", scenario);
}

TEST_CASE("retention: two processes keeping one name never hold it together, and its fences go "
          "up in the order it was held") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection&, locker& a, locker& b,
                        std::string const& name) -> asio::awaitable<void> {
        int inside = 0, overlaps = 0;
        std::vector<std::int64_t> fences;
        auto worker = [&](locker& locks) -> asio::awaitable<void> {
            for (int i = 0; i < 25; ++i) {
                auto g = co_await locks.co_lock(name, retained(50ms));
                if (++inside > 1)
                    ++overlaps;
                fences.push_back(g.fence());
                co_await sleep_for(1ms);
                --inside;
                if (i % 3 == 0)
                    co_await sleep_for(2ms); // let go, then come back a little later
            }
        };
        bool a_done = false, b_done = false;
        asio::co_spawn(ctx, worker(a), check_nothrow_then_mark(a_done));
        asio::co_spawn(ctx, worker(b), check_nothrow_then_mark(b_done));
        co_await eventually([&] { return a_done && b_done; }, 30s, 10ms);
        CHECK(a_done);
        CHECK(b_done);
        CHECK(overlaps == 0);
        CHECK(fences.size() == 50);
        for (std::size_t i = 1; i < fences.size(); ++i)
            CHECK(fences[i] > fences[i - 1]);
    };
    run_lock_test<two_lockers>("retain-both", scenario);
}

TEST_CASE("retention: coroutines of one locker taking turns on a name never wait for a kept "
          "lease") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        locker& locks, std::string const& name) -> asio::awaitable<void> {
        // Two coroutines, each holding a little and asking again at once: a let-go often comes
        // while the other's first attempt is on its way, and must not be kept from it.
        int done = 0;
        std::vector<std::int64_t> fences;
        auto const start = steady::now();
        auto worker = [&]() -> asio::awaitable<void> {
            for (int i = 0; i < 30; ++i) {
                auto g = co_await locks.co_lock(name, retained(10'000ms));
                fences.push_back(g.fence());
                co_await sleep_for(1ms);
            }
        };
        asio::co_spawn(ctx, worker(), check_nothrow_then_mark(done));
        asio::co_spawn(ctx, worker(), check_nothrow_then_mark(done));
        co_await eventually([&] { return done >= 2; }, 20s, 5ms);
        auto const took = steady::now() - start;
        MESSAGE("60 turns of two coroutines took " << ms_of(took) << " ms");
        CHECK(done == 2);
        // A turn stuck behind a kept lease would wait for its retention to end (a renewal
        // interval, 3.3 s here).
        CHECK(took < 3000ms);
        REQUIRE(fences.size() == 60);
        for (std::size_t i = 1; i < fences.size(); ++i)
            CHECK(fences[i] > fences[i - 1]);
    };
    run_lock_test<one_locker>("retain-turns", scenario);
}

TEST_CASE("retention: a guard let go after its locker is gone gives the lease back") {
    auto scenario = [&](redis::connection& conn, redis::connection& probe, locker&,
                        std::string const& name) -> asio::awaitable<void> {
        std::optional<lock_guard> g;
        {
            locker short_lived{conn};
            g.emplace(co_await short_lived.co_lock(name, retained(20'000ms)));
        }
        g.reset();
        CHECK(co_await free_becomes(probe, name, 1000ms));
        CHECK(co_await numsub_becomes(probe, wake_channels(name), 0) == 0);
    };
    run_lock_test<one_locker>("retain-locker-gone", scenario);
}

TEST_CASE("retention: a lease is not kept when another process queued during its hold, nor after "
          "cohort hand-offs with one queued") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& a, locker& b,
                        std::string const& name) -> asio::awaitable<void> {
        auto const watch = watch_retention(a);
        auto const keep_long = retained(20'000ms);
        // 1. b queues while a's first guard holds: a hears it, and gives the lease back.
        bool b_done = false;
        {
            auto held = co_await a.co_lock(name, keep_long);
            asio::co_spawn(ctx, take_and_give_back(b, name), check_nothrow_then_mark(b_done));
            CHECK(co_await queue_length_becomes(probe, name, 1) == 1);
            co_await sleep_for(100ms); // its "q" reaches a
        }
        co_await eventually([&] { return b_done; }, 3000ms, 5ms);
        CHECK(b_done);
        CHECK(watch->kept == std::vector<bool>{false});

        // 2. a's coroutines pass the lease on locally while b is queued; the last one lets go
        // with b still queued: not kept.
        watch->kept.clear();
        b_done = false;
        {
            auto first = co_await a.co_lock(name, keep_long);
            int a_done = 0;
            auto a_turn = [&]() -> asio::awaitable<void> {
                auto g = co_await a.co_lock(name, keep_long);
                co_await sleep_for(1ms);
            };
            asio::co_spawn(ctx, a_turn(), check_nothrow_then_mark(a_done));
            asio::co_spawn(ctx, take_and_give_back(b, name), check_nothrow_then_mark(b_done));
            CHECK(co_await queue_length_becomes(probe, name, 2) == 2); // a's waiter and b
            co_await sleep_for(100ms);                                 // its "q" reaches a
            first = lock_guard{};                                      // to a's waiter, locally
            co_await eventually([&] { return a_done >= 1 && b_done; }, 3000ms, 5ms);
            CHECK(a_done == 1);
            CHECK(b_done);
        }
        REQUIRE(watch->kept.size() == 2);
        CHECK(watch->kept[1] == false);
    };
    run_lock_test<two_lockers>("retain-not-kept", scenario);
}

TEST_CASE("retention: a let-go while another call of the locker asks Redis for the name is not "
          "kept from that call") {
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection& probe,
                        locker& locks, std::string const& name) -> asio::awaitable<void> {
        auto const watch = watch_retention(locks);
        auto held = co_await locks.co_lock(name, retained(10'000ms));
        // The server holds scripts back for a while: the other call's first attempt waits there.
        co_await probe.co_exec(command("CLIENT", "PAUSE", "300", "WRITE"));
        bool done = false;
        std::optional<steady::time_point> got;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await locks.co_lock(name, retained(10'000ms));
                got = steady::now();
            },
            check_nothrow_then_mark(done));
        // Its first attempt is on its way (written, not answered) when the holder lets go.
        co_await sleep_for(50ms);
        auto const let_go = steady::now();
        held = lock_guard{};
        co_await eventually([&] { return done; }, 5000ms, 5ms);
        REQUIRE(got.has_value());
        MESSAGE("the other call got the lock " << ms_of(*got - let_go) << " ms after the let-go");
        // Kept, it would wait for the retention to end (a renewal interval, 3.3 s here).
        CHECK(*got - let_go < 1500ms);
        REQUIRE(!watch->kept.empty());
        CHECK(watch->kept.front() == false);
    };
    run_lock_test<one_locker>("retain-in-flight", scenario);
}

TEST_CASE("retention: a kept lease taken by a call without retain goes back at its let-go, and "
          "the locker stops listening") {
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        { auto g = co_await locks.co_lock(name, retained(20'000ms)); }
        REQUIRE(co_await numsub_becomes(probe, wake_channels(name), 1) == 1);
        {
            auto g = co_await locks.co_try_lock(name, lease(10'000ms)); // takes the kept lease
            CHECK(g.has_value());
        }
        CHECK(co_await free_becomes(probe, name, 1000ms));
        CHECK(co_await numsub_becomes(probe, wake_channels(name), 0) == 0);
    };
    run_lock_test<one_locker>("retain-taken-plain", scenario);
}

TEST_CASE("retention: io_context::run() returns soon after close() with a lease kept") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    std::string const name = unique_key("retain-run-returns");
    bool kept = false;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            lock_options opt; // ttl 30 s: a renewal timer for 10 s, were it left armed
            opt.retain = 20'000ms;
            auto g = co_await locks.co_lock(name, opt);
            kept = co_await g.release();
            conn.close();
        },
        [](std::exception_ptr e) { CHECK_FALSE(e); });
    auto const start = steady::now();
    ctx.run_for(15s);
    auto const ran = steady::now() - start;
    CHECK(kept);
    MESSAGE("run() returned " << ms_of(ran) << " ms after it started");
    CHECK(ran < 3000ms);
    CHECK(lock_key_free(shared_server(), lock_key(name)));
}

TEST_CASE("retention: nothing kept is handed out while the connection is down, before it has "
          "read whether the server was replaced") {
    redis_server server;
    fault_proxy proxy{server.port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = with_fast_timeouts(proxy.config());
        cfg.connect_timeout = 300ms;
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), fast_config(server)};
        locker keeper{conn};
        locker other{conn_b};
        auto const watch = watch_retention(keeper);
        std::string const name = unique_key("kept-outage");
        { auto g = co_await keeper.co_lock(name, retained(5000ms)); }
        REQUIRE(co_await poll_until([&] { return watch->kept.size() == 1; }, 200, 10ms));
        REQUIRE(watch->kept[0]);
        // The keeper's connection goes down and cannot come back yet (its reconnections are
        // accepted and never answered); the server restarts empty and another process takes
        // the name there.
        proxy.set_black_hole(true);
        proxy.drop_connections();
        REQUIRE(co_await poll_until([&] { return !conn.is_connected(); }, 200, 10ms));
        server.kill();
        server.restart();
        auto theirs = co_await other.co_lock(name, lease(10'000ms));
        REQUIRE(theirs.owns());
        // The kept lease is of the old instance: not handed to the keeper's own co_try_lock,
        // which asks the server once the connection is back (a moment later) and finds the
        // name the other's.
        auto back_later = [&]() -> asio::awaitable<void> {
            co_await sleep_for(300ms);
            CHECK_FALSE(conn.is_connected());
            proxy.set_black_hole(false);
        };
        using namespace asio::experimental::awaitable_operators;
        auto const mine = co_await (keeper.co_try_lock(name, retained(5000ms)) && back_later());
        CHECK_FALSE(mine.has_value());
        CHECK(conn.is_connected());
        CHECK_FALSE((co_await keeper.co_try_lock(name)).has_value());
        CHECK(theirs.owns());
        CHECK(co_await theirs.release());
        conn.close();
        conn_b.close();
    });
}
