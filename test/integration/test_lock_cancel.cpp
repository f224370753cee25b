// Cancelling co_lock / async_lock: while it sleeps (terminal, partial, a timer raced with ||),
// with an acquire in flight (the server held in CLIENT PAUSE WRITE so the attempt surely is),
// and a storm of waiters with random deadlines. Afterwards no lock key and no subscription may
// be left behind.
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace asio::experimental::awaitable_operators;

namespace {

// The outcome of one async_lock started with a callback.
struct lock_result {
    bool done = false;
    error_code ec;
    lock_guard guard;
    steady::time_point at;
};

auto record(lock_result& r) {
    return [&r](error_code ec, lock_guard g) {
        r.ec = ec;
        r.guard = std::move(g);
        r.at = steady::now();
        r.done = true;
    };
}

} // namespace

TEST_CASE("a sleeping waiter cancelled (terminal, partial) returns at once with operation_aborted "
          "and leaves no waiter behind") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
        CAPTURE(static_cast<int>(type));
        auto scenario = [type](redis::connection&, redis::connection&, redis::connection& probe,
                               locker& holder_locks, locker& locks,
                               std::string const& name) -> asio::awaitable<void> {
            auto holder = co_await holder_locks.co_lock(name, patient_waiter());

            // Two waiters: the head (subscribed, retrying) and one queued behind it.
            asio::cancellation_signal head_signal, second_signal;
            lock_result head, second;
            locks.async_lock(name, patient_waiter(),
                             asio::bind_cancellation_slot(head_signal.slot(), record(head)));
            auto const subscribed = co_await numsub_becomes(probe, wake_channel(name), 1);
            CHECK(subscribed == 1);
            locks.async_lock(name, patient_waiter(),
                             asio::bind_cancellation_slot(second_signal.slot(), record(second)));
            co_await sleep_for(200ms);
            CHECK_FALSE(head.done);
            CHECK_FALSE(second.done);

            // The one behind first: the head keeps waiting, and the subscription stays.
            auto emitted = steady::now();
            second_signal.emit(type);
            bool const second_finished = co_await finishes(second.done, 2000ms);
            REQUIRE(second_finished);
            CHECK(second.ec == asio::error::operation_aborted);
            CHECK_FALSE(second.guard.owns_lock());
            CHECK(
                std::chrono::duration_cast<std::chrono::milliseconds>(second.at - emitted).count() <
                300);
            co_await sleep_for(50ms);
            CHECK_FALSE(head.done);
            auto const still = co_await numsub(probe, wake_channel(name));
            CHECK(still == 1);

            // Then the head.
            emitted = steady::now();
            head_signal.emit(type);
            bool const head_finished = co_await finishes(head.done, 2000ms);
            REQUIRE(head_finished);
            CHECK(head.ec == asio::error::operation_aborted);
            CHECK_FALSE(head.guard.owns_lock());
            CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(head.at - emitted).count() <
                  300);
            auto const none = co_await numsub_becomes(probe, wake_channel(name), 0);
            CHECK(none == 0);

            // The holder was not disturbed; and a new waiter on the same locker queues,
            // subscribes and is woken as if nothing had happened.
            auto const held = co_await held_by(probe, name);
            CHECK(held == holder.token());
            lock_result next;
            locks.async_lock(name, patient_waiter(), record(next));
            auto const again = co_await numsub_becomes(probe, wake_channel(name), 1);
            CHECK(again == 1);
            auto const released_at = steady::now();
            co_await holder.unlock();
            bool const next_finished = co_await finishes(next.done, 3000ms);
            REQUIRE(next_finished);
            CHECK_FALSE(next.ec);
            CHECK(next.guard.owns_lock());
            CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(next.at - released_at)
                      .count() < 1000); // woken by the release, not by its 5 s backoff
            co_await next.guard.unlock();
            auto const finally = co_await numsub_becomes(probe, wake_channel(name), 0);
            CHECK(finally == 0);
        };
        run_lock_test<two_lockers>("cancel-sleeping", scenario);
    }
}

TEST_CASE("co_lock raced with a timer (||): the timer wins promptly and the waiter is gone") {
    auto scenario = [](redis::connection&, redis::connection&, redis::connection& probe,
                       locker& holder_locks, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await holder_locks.co_lock(name, patient_waiter());

        auto const timed_out = co_await lock_or_timer(locks, name, patient_waiter(), 300ms);
        CHECK(timed_out.winner == 1);
        CHECK(timed_out.took_ms >= 290);
        CHECK(timed_out.took_ms < 800);
        auto const none = co_await numsub_becomes(probe, wake_channel(name), 0);
        CHECK(none == 0);
        auto const held = co_await held_by(probe, name);
        CHECK(held == holder.token());

        // The other way round: a free lock wins against a long timer, and the guard is ours.
        CHECK(co_await holder.unlock());
        auto won = co_await lock_or_timer(locks, name, patient_waiter(), 10s);
        REQUIRE(won.winner == 0);
        auto& g = *won.guard;
        CHECK(g.owns_lock());
        co_await check_held_then_release(probe, g, name);
    };
    run_lock_test<two_lockers>("cancel-or", scenario);
}

TEST_CASE("cancelled with an acquire in flight on a free lock: the granted lock is released "
          "before the operation completes with operation_aborted") {
    redis_server server;
    enum class how { terminal_slot, partial_slot, try_lock_terminal, timer_or };
    for (auto way :
         {how::terminal_slot, how::partial_slot, how::try_lock_terminal, how::timer_or}) {
        CAPTURE(static_cast<int>(way));
        run_test([&server, way](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), server.config()};
            redis::connection probe{ctx.get_executor(), server.config()};
            locker locks{conn};
            co_await conn.async_connect(asio::use_awaitable);
            co_await probe.async_connect(asio::use_awaitable);
            std::string const name = unique_key("cancel-in-flight");

            // Writes (and scripts) wait in the server for 500 ms: the attempt is surely in
            // flight when the cancellation comes, and the server grants it afterwards.
            server.cli(strings("CLIENT", "PAUSE", "500", "WRITE"));
            auto const paused_at = steady::now();
            asio::cancellation_signal signal;
            bool done = false;
            error_code ec;
            bool got_guard = false;
            std::optional<std::string> key_at_completion;
            auto on_done = [&](error_code e, bool guard) {
                ec = e;
                got_guard = guard;
                done = true;
            };
            if (way == how::timer_or) {
                asio::co_spawn(
                    ctx,
                    [&]() -> asio::awaitable<void> {
                        auto race = co_await lock_or_timer(locks, name, patient_waiter(), 100ms);
                        key_at_completion = co_await held_by(probe, name);
                        on_done(race.as_call(), race.winner == 0);
                    },
                    asio::detached);
            } else if (way == how::try_lock_terminal) {
                locks.async_try_lock(
                    name, patient_waiter(),
                    asio::bind_cancellation_slot(signal.slot(),
                                                 [&](error_code e, std::optional<lock_guard> g) {
                                                     on_done(e, g.has_value() && g->owns_lock());
                                                 }));
            } else {
                locks.async_lock(
                    name, patient_waiter(),
                    asio::bind_cancellation_slot(signal.slot(), [&](error_code e, lock_guard g) {
                        on_done(e, g.owns_lock());
                    }));
            }
            co_await sleep_for(100ms);
            CHECK_FALSE(done);
            if (way != how::timer_or)
                signal.emit(way == how::partial_slot ? asio::cancellation_type::partial
                                                     : asio::cancellation_type::terminal);
            bool const finished = co_await finishes(done, 5000ms);
            REQUIRE(finished);
            CHECK(ec == asio::error::operation_aborted);
            CHECK_FALSE(got_guard);
            // The reply was awaited: completion came after the pause ended.
            CHECK(ms_since(paused_at) >= 450);
            // The server did grant it (a fence was issued), and it was given back before the
            // operation completed.
            auto const after = co_await read_lock(probe, name);
            CHECK(after.kind == 'F');
            CHECK(after.fence > 0);
            if (way == how::timer_or)
                CHECK_FALSE(key_at_completion.has_value());
            auto const none = co_await numsub(probe, wake_channel(name));
            CHECK(none == 0);
            conn.close();
            probe.close();
        });
    }
}

TEST_CASE("cancelled in the same turn as async_lock on a free lock: operation_aborted, no key") {
    for (bool try_lock : {false, true}) {
        CAPTURE(try_lock);
        run_test([try_lock](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), shared_server().config()};
            redis::connection probe{ctx.get_executor(), shared_server().config()};
            locker locks{conn};
            co_await conn.async_connect(asio::use_awaitable);
            std::string const name = unique_key("cancel-same-turn");
            asio::cancellation_signal signal;
            bool done = false;
            error_code ec;
            bool got_guard = true;
            auto on_done = [&] {
                return asio::bind_cancellation_slot(signal.slot(),
                                                    record_lock_call(ec, got_guard, done));
            };
            if (try_lock)
                locks.async_try_lock(name, patient_waiter(), on_done());
            else
                locks.async_lock(name, patient_waiter(), on_done());
            signal.emit(asio::cancellation_type::terminal);
            bool const finished = co_await finishes(done, 5000ms);
            REQUIRE(finished);
            CHECK(ec == asio::error::operation_aborted);
            CHECK_FALSE(got_guard);
            auto const free = co_await lock_free(probe, name);
            CHECK(free);
            conn.close();
            probe.close();
        });
    }
}

TEST_CASE("co_try_lock cancelled with its attempt in flight on a held lock reports "
          "operation_aborted") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn_h{ctx.get_executor(), server.config()};
        redis::connection conn{ctx.get_executor(), server.config()};
        locker holder_locks{conn_h};
        locker locks{conn};
        co_await conn.async_connect(asio::use_awaitable);
        std::string const name = unique_key("cancel-try-held");
        auto holder = co_await holder_locks.co_lock(name, patient_waiter());

        server.cli(strings("CLIENT", "PAUSE", "400", "WRITE"));
        asio::cancellation_signal signal;
        bool done = false;
        error_code ec;
        bool got = true;
        locks.async_try_lock(name, patient_waiter(),
                             asio::bind_cancellation_slot(
                                 signal.slot(), [&](error_code e, std::optional<lock_guard> g) {
                                     ec = e;
                                     got = g.has_value();
                                     done = true;
                                 }));
        co_await sleep_for(100ms);
        signal.emit(asio::cancellation_type::terminal);
        bool const finished = co_await finishes(done, 5000ms);
        REQUIRE(finished);
        CHECK_FALSE(got);
        // A cancellation that was requested before the operation completed is reported, as
        // for every Asio operation; "held elsewhere" would hide that it was cancelled.
        CHECK(ec == asio::error::operation_aborted);
        co_await holder.unlock();
        conn_h.close();
        conn.close();
    });
}

TEST_CASE("the head waiter cancelled while its retry is in flight returns promptly") {
    redis_server server;
    // Twice: the waiter's sleep after an attempt is random (jitter), so one round could hide
    // a waiter that sleeps before it looks at its cancellation.
    for (int round = 0; round < 2; ++round) {
        CAPTURE(round);
        auto scenario = [&](redis::connection&, redis::connection&, redis::connection& probe,
                            locker& holder_locks, locker& locks,
                            std::string const& name) -> asio::awaitable<void> {
            auto holder = co_await holder_locks.co_lock(name, patient_waiter());

            asio::cancellation_signal signal;
            lock_result w;
            locks.async_lock(name, patient_waiter(),
                             asio::bind_cancellation_slot(signal.slot(), record(w)));
            auto const subscribed = co_await numsub_becomes(probe, wake_channel(name), 1);
            REQUIRE(subscribed == 1);
            co_await sleep_for(100ms);

            // A wake-up message reaches the waiter's socket while this thread is blocked in
            // redis-cli; by the time the waiter reads it and retries, writes are paused: the
            // retry is in flight for ~600 ms.
            server.cli(strings("PUBLISH", wake_channel(name), "1"));
            server.cli(strings("CLIENT", "PAUSE", "600", "WRITE"));
            auto const paused_at = steady::now();
            co_await sleep_for(150ms);
            CHECK_FALSE(w.done);
            signal.emit(asio::cancellation_type::terminal);
            bool const finished = co_await finishes(w.done, 8000ms);
            REQUIRE(finished);
            auto const took =
                std::chrono::duration_cast<std::chrono::milliseconds>(w.at - paused_at).count();
            MESSAGE("cancelled head with a retry in flight completed " << took
                                                                       << " ms after the pause");
            CHECK(w.ec == asio::error::operation_aborted);
            // The retry's reply comes at ~600 ms; then it must stop, not sleep its backoff
            // (up to 5 s here) before noticing the cancellation.
            CHECK(took < 1200);
            auto const none = co_await numsub_becomes(probe, wake_channel(name), 0);
            CHECK(none == 0);
            auto const held = co_await held_by(probe, name);
            CHECK(held == holder.token());
            co_await holder.unlock();
        };
        run_lock_test<two_lockers>(server.config(), "cancel-retry", scenario);
    }
}

TEST_CASE("a storm of 2000 waiters with random deadlines: every one returns, nothing is left") {
    static constexpr int waiters = 2000;
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection&,
                       redis::connection& probe, locker& holder_locks, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        lock_options opt;
        opt.ttl = 5000ms;
        auto holder = co_await holder_locks.co_lock(name, opt);

        int finished = 0, acquired = 0, timed_out = 0, raced_out = 0, failures = 0;
        int holders = 0, max_holders = 0;
        std::minstd_rand rng(20240611);
        std::uniform_int_distribution<int> deadline_ms(20, 1500);

        // Holds for a moment, then gives it back; counts overlapping holders.
        auto hold = [&](lock_guard& g) -> asio::awaitable<void> {
            ++acquired;
            max_holders = std::max(max_holders, ++holders);
            co_await asio::post(ctx, asio::use_awaitable);
            --holders;
            bool const released = co_await g.unlock();
            if (!released)
                ++failures;
        };
        for (int i = 0; i < waiters; ++i) {
            auto const deadline = std::chrono::milliseconds(deadline_ms(rng));
            asio::co_spawn(
                ctx,
                [&, i, deadline]() -> asio::awaitable<void> {
                    if (i % 2 == 0) {
                        lock_options o = waiting_up_to(opt, deadline);
                        std::optional<lock_guard> g;
                        try {
                            g.emplace(co_await locks.co_lock(name, o));
                        } catch (system_error const& e) {
                            if (e.code() == error::timeout)
                                ++timed_out;
                            else
                                ++failures;
                        }
                        if (g)
                            co_await hold(*g);
                    } else {
                        asio::steady_timer timer(ctx);
                        timer.expires_after(deadline);
                        auto r = co_await (locks.co_lock(name, opt) ||
                                           timer.async_wait(asio::use_awaitable));
                        if (r.index() == 0)
                            co_await hold(std::get<0>(r));
                        else
                            ++raced_out;
                    }
                    ++finished;
                },
                count_failure(failures, finished));
        }
        co_await sleep_for(700ms);
        CHECK(holders == 0);
        CHECK(co_await holder.unlock());
        auto const started = steady::now();
        while (finished < waiters && ms_since(started) < 30'000)
            co_await sleep_for(10ms);
        MESSAGE("storm: " << acquired << " acquired, " << timed_out << " timed out, " << raced_out
                          << " lost the race to their timer, in " << ms_since(started)
                          << " ms after the release");
        CHECK(finished == waiters);
        CHECK(failures == 0);
        CHECK(max_holders == 1);
        CHECK(acquired + timed_out + raced_out == waiters);
        CHECK(acquired > 0);
        CHECK(timed_out > 0);
        CHECK(raced_out > 0);

        auto const key_free = co_await free_becomes(probe, name);
        CHECK(key_free);
        auto const subscribers = co_await numsub_becomes(probe, wake_channel(name), 0);
        CHECK(subscribers == 0);
        // And the locker still works for this name.
        auto g = co_await locks.co_lock(name, opt);
        CHECK(g.owns_lock());
        co_await g.unlock();
    };
    run_lock_test<two_lockers>(shared_server().config(), "storm", scenario,
                               std::chrono::seconds{90});
}

TEST_CASE("server down: a waiting co_lock still honours wait_timeout and cancellation") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(server)};
        locker locks{conn};
        co_await conn.async_connect(asio::use_awaitable);
        server.kill(); // the acquire below can only queue for a reconnection that never comes

        lock_options opt;
        opt.wait_timeout = 300ms;
        auto const started = steady::now();
        auto [ec, guard] = co_await locks.async_lock("down", opt, as_tuple);
        CHECK(ec == colock::error::timeout);
        CHECK_FALSE(guard.owns_lock());
        CHECK(steady::now() - started < 2s);

        asio::steady_timer timer(ctx);
        timer.expires_after(200ms);
        auto const raced = steady::now();
        auto winner = co_await (locks.co_lock("down") || timer.async_wait(asio::use_awaitable));
        CHECK(winner.index() == 1);
        CHECK(steady::now() - raced < 2s);
        conn.close();
    });
}
