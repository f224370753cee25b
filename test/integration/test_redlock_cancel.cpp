// Redlock against 3 and 5 real independent redis-servers: a waiting co_lock cancelled, one
// cancelled with its attempts in flight (what they won is released first), and a lease renewed
// on a majority.
#include <colock/locker.hpp>

#include "redlock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/primary_set.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using values = std::vector<std::optional<std::string>>;

// ------------------------------------------------------------------------ cancellation

TEST_CASE("redlock: a waiting co_lock cancelled (terminal signal, || with a timer) returns "
          "promptly with operation_aborted and leaves nothing behind on any primary") {
    auto const servers = shared_primaries(3);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        primary_connections conns_h{ctx.get_executor(), configs_of(servers)};
        primary_connections conns_w{ctx.get_executor(), configs_of(servers)};
        primary_connections conns_t{ctx.get_executor(), configs_of(servers)};
        primary_connections probe{ctx.get_executor(), configs_of(servers)};
        locker holder_locks{conns_h.primaries()};
        locker locks{conns_w.primaries()};
        locker third{conns_t.primaries()};
        std::string const name = unique_key("redlock-cancel-waiting");
        std::string const key = lock_key(name);
        auto holder = co_await holder_locks.co_lock(name, patient_waiter());

        asio::cancellation_signal signal;
        bool done = false;
        error_code ec;
        bool got_guard = true;
        steady::time_point done_at;
        locks.async_lock(
            name, patient_waiter(),
            asio::bind_cancellation_slot(signal.slot(), [&](error_code e, lock_guard g) {
                ec = e;
                got_guard = g.owns();
                done_at = steady::now();
                done = true;
            }));
        co_await until_one_waiting(locks);
        CHECK_FALSE(done);
        auto const emitted = steady::now();
        signal.emit(asio::cancellation_type::terminal);
        bool const finished = co_await finishes(done, 3000ms);
        REQUIRE(finished);
        CHECK(ec == asio::error::operation_aborted);
        CHECK_FALSE(got_guard);
        CHECK(ms_between(emitted, done_at) < 1000);

        // Raced with a timer: the timer wins when it should.
        auto const timed_out = co_await lock_or_timer(locks, name, patient_waiter(), 300ms);
        CHECK(timed_out.winner == 1);
        CHECK(timed_out.took_ms >= 290);
        CHECK(timed_out.took_ms < 1500);

        // The holder was not disturbed on any primary, and no waiter is left subscribed.
        auto const held = co_await values_on(probe, key);
        CHECK(count_held(held, holder.token()) == 3);
        CHECK(holder.owns());
        for (std::size_t i = 0; i < probe.size(); ++i) {
            auto const subscribers = co_await numsub_becomes(probe[i], wake_channel(name), 0);
            CHECK(subscribers == 0);
        }
        // Nobody is queued for it any more: once released, a third locker's single attempt
        // wins (a queue entry left behind would have the lock handed to the waiters' locker).
        CHECK(co_await holder.release());
        co_await check_taken_again(third, name, patient_waiter(), holder.fence());
        conns_h.close();
        conns_w.close();
        conns_t.close();
        probe.close();
    });
}

TEST_CASE("redlock: co_lock cancelled with its attempts in flight (writes paused on every "
          "primary): the locks they won are released before it completes with operation_aborted") {
    auto const servers = shared_primaries(3);
    for (bool by_timer : {false, true}) {
        CAPTURE(by_timer);
        run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
            primary_connections conns{ctx.get_executor(), configs_of(servers)};
            primary_connections probe{ctx.get_executor(), configs_of(servers)};
            locker locks{conns.primaries()};
            co_await probe.connect_all();
            // Warm up: connected, and the scripts are loaded on every primary, so that the
            // attempt below is one EVALSHA per primary that runs once the pause ends.
            auto warm = co_await locks.co_lock(unique_key("redlock-warm"), patient_waiter());
            co_await warm.release();
            std::string const name = unique_key("redlock-cancel-in-flight");
            std::string const key = lock_key(name);

            for (auto* s : servers)
                s->cli(strings("CLIENT", "PAUSE", "600", "WRITE"));
            asio::cancellation_signal signal;
            bool done = false;
            error_code ec;
            bool got_guard = true;
            std::optional<values> at_completion;
            if (by_timer) {
                asio::co_spawn(
                    ctx,
                    [&]() -> asio::awaitable<void> {
                        auto race = co_await lock_or_timer(locks, name, patient_waiter(), 100ms);
                        at_completion = co_await values_on(probe, key);
                        ec = race.as_call();
                        got_guard = race.winner == 0;
                        done = true;
                    },
                    asio::detached);
            } else {
                locks.async_lock(name, patient_waiter(),
                                 asio::bind_cancellation_slot(
                                     signal.slot(), record_lock_call(ec, got_guard, done)));
                co_await sleep_for(100ms);
                CHECK_FALSE(done);
                signal.emit(asio::cancellation_type::terminal);
            }
            bool const finished = co_await finishes(done, 8000ms);
            REQUIRE(finished);
            if (!at_completion)
                at_completion = co_await values_on(probe, key);
            CHECK(ec == asio::error::operation_aborted);
            CHECK_FALSE(got_guard);
            // Not held by a majority when it completed: nobody could rely on that lease.
            CHECK(count_held(*at_completion) < majority(3));
            // The primaries did grant it once the pause ended (each gave a fence), and every
            // grant was given back: no key of its token is left anywhere.
            auto const after = co_await values_become(
                probe, key, [](values const& v) { return count_held(v) == 0; });
            CHECK(count_held(after) == 0);
            CHECK(count_free_with_fence(after) >= majority(3));
            conns.close();
            probe.close();
        });
    }
}

// ----------------------------------------------------------------------------- renewal

TEST_CASE("redlock: renewal: a 600 ms lease held for 2 s stays ours, on a majority, on 3 and on "
          "5") {
    on_3_and_5_primaries([&](std::size_t n, std::vector<redis_server*> const& servers) {
        auto scenario = [&](primary_connections&, primary_connections&, primary_connections& probe,
                            locker& locks, locker& other,
                            std::string const& name) -> asio::awaitable<void> {
            std::string const key = lock_key(name);

            auto g = co_await locks.co_lock(name, lease(600ms));
            auto const first_expiry = g.lease_expiry();
            lost_watch w;
            watch(g, w);
            // More than three leases' worth.
            CHECK(co_await stays([&] { return g.owns() && !g.lost() && !w.done; }, 2000ms));
            CHECK(g.owns());
            CHECK_FALSE(g.lost());
            CHECK_FALSE(w.done);
            CHECK(g.lease_expiry() > first_expiry + 1000ms);
            auto const held = co_await values_on(probe, key);
            CHECK(count_held(held, g.token()) >= majority(n));
            for (std::size_t i = 0; i < n; ++i) {
                if (parse_lock_record(held[i]).token != g.token())
                    continue;
                auto const pttl = co_await integer(probe[i], command("PTTL", key));
                CHECK(pttl > 0);
                CHECK(pttl <= 600);
            }
            auto refused = co_await other.co_try_lock(name, lease(600ms));
            CHECK_FALSE(refused.has_value());

            CHECK(co_await g.release());
            // The pending wait_lost ends, saying it was not a loss.
            bool const ended = co_await finishes(w.done, 2000ms);
            CHECK(ended);
            CHECK(w.ec == colock::error::not_held);
        };
        run_redlock_test(configs_of(servers), "redlock-renewal", scenario);
    });
}
