// Cancelling co_lock / async_lock against a real redis-server: a timer raced with || while it
// waits, an acquire in flight (the server held in CLIENT PAUSE WRITE so the attempt surely is),
// a storm of waiters with random deadlines, and a server that is down. Afterwards no lock key,
// queue entry or subscription may be left behind. Cancellation at each step of the
// orchestration (terminal, partial, in flight, asleep, the head or one behind it) is unit-tested
// on a fake store in test_orchestration.cpp.
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

TEST_CASE("co_lock raced with a timer (||): the timer wins promptly, the waiter leaves no "
          "subscription or queue entry, and the next waiter is woken by the release") {
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
        auto const queue_left =
            co_await exists_becomes(probe, lock_key(name) + ":q", 0); // the leave script ran
        CHECK(queue_left == 0);
        auto const held = co_await held_by(probe, name);
        CHECK(held == holder.token());

        // A new waiter of the same locker subscribes again and is woken by the release, not
        // by its 5 s backoff.
        lock_result next;
        locks.async_lock(name, patient_waiter(), record(next));
        auto const again = co_await numsub_becomes(probe, wake_channel(name), 1);
        CHECK(again == 1);
        auto const released_at = steady::now();
        CHECK(co_await holder.release());
        bool const woken = co_await finishes(next.done, 3000ms);
        REQUIRE(woken);
        CHECK_FALSE(next.ec);
        CHECK(ms_between(released_at, next.at) < 1000);
        CHECK(co_await next.guard.release());

        // The other way round: a free lock wins against a long timer, and the guard is ours.
        auto won = co_await lock_or_timer(locks, name, patient_waiter(), 10s);
        REQUIRE(won.winner == 0);
        auto& g = *won.guard;
        CHECK(g.owns());
        co_await check_held_then_release(probe, g, name);
    };
    run_lock_test<two_lockers>("cancel-or", scenario);
}

TEST_CASE("a cancelled co_lock and close() right after: the locker's queue entry still leaves "
          "the server at once, not when it lapses") {
    auto scenario = [](redis::connection&, redis::connection& conn, redis::connection& probe,
                       locker& holder_locks, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await holder_locks.co_lock(name, patient_waiter());
        auto const timed_out = co_await lock_or_timer(locks, name, patient_waiter(), 300ms);
        CHECK(timed_out.winner == 1);
        conn.close(); // at once: what the cancellation asked for must still go out
        // The entry would lapse by itself after 3 s (queue_entry_ttl); well before that here.
        auto const queue_left = co_await exists_becomes(probe, lock_key(name) + ":q", 0, 1000ms);
        CHECK(queue_left == 0);
        auto const deadlines_left =
            co_await exists_becomes(probe, lock_key(name) + ":qd", 0, 100ms);
        CHECK(deadlines_left == 0);
        CHECK(co_await holder.release());
    };
    run_lock_test<two_lockers>("cancel-close", scenario);
}

// The other ways of cancelling (partial, co_try_lock, a timer raced with ||) and the instant of
// the give-back are orchestration tests (test_orchestration.cpp); here the real server grants the
// attempt after the cancellation came, and its release script frees it.
TEST_CASE("cancelled with an acquire in flight on a free lock: the lock the server granted is "
          "released, and the operation completes with operation_aborted") {
    redis_server server;
    run_test([&server](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), server.config()};
        redis::connection probe{ctx.get_executor(), server.config()};
        locker locks{conn};
        co_await conn.async_connect(asio::use_awaitable);
        co_await probe.async_connect(asio::use_awaitable);
        std::string const name = unique_key("cancel-in-flight");

        // Writes (and scripts) wait in the server for 500 ms: the attempt is surely in flight
        // when the cancellation comes, and the server grants it afterwards.
        server.cli(strings("CLIENT", "PAUSE", "500", "WRITE"));
        auto const paused_at = steady::now();
        asio::cancellation_signal signal;
        bool done = false;
        error_code ec;
        bool got_guard = false;
        locks.async_lock(
            name, patient_waiter(),
            asio::bind_cancellation_slot(signal.slot(), record_lock_call(ec, got_guard, done)));
        CHECK(co_await stays([&] { return !done; }, 100ms));
        signal.emit(asio::cancellation_type::terminal);
        bool const finished = co_await finishes(done, 5000ms);
        REQUIRE(finished);
        CHECK(ec == asio::error::operation_aborted);
        CHECK_FALSE(got_guard);
        // The reply was awaited: completion came after the pause ended.
        CHECK(ms_since(paused_at) >= 450);
        // The server did grant it (a fence was issued), and it was given back.
        auto const after = co_await read_lock(probe, name);
        CHECK(after.kind == 'F');
        CHECK(after.fence > 0);
        auto const none = co_await numsub(probe, wake_channel(name));
        CHECK(none == 0);
        conn.close();
        probe.close();
    });
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
            bool const released = co_await g.release();
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
        CHECK(co_await stays([&] { return holders == 0; }, 700ms));
        CHECK(co_await holder.release());
        auto const started = steady::now();
        co_await eventually([&] { return finished >= waiters; }, 30s, 10ms);
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
        CHECK(g.owns());
        co_await g.release();
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
        CHECK_FALSE(guard.owns());
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
