// The local queue against a real redis-server: co_lock calls of one process on a held name
// wait in it without asking the server (the first asks; the rest queue behind it), come out in
// the order they were made, and leave it alone when cancelled or out of time.
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

// Waits until `locks` has `expected` calls in its local queues, or `limit` has passed.
asio::awaitable<std::size_t> waiting_becomes(locker const& locks, std::size_t expected,
                                             std::chrono::milliseconds limit = 3000ms) {
    auto const end = steady::now() + limit;
    while (locks.waiting() != expected && steady::now() < end)
        co_await sleep_for(5ms);
    co_return locks.waiting();
}

} // namespace

TEST_CASE("co_lock calls made together on a name held by another process: one asks the "
          "server, the others queue behind it, and all get the lock in the order they were made") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection other_conn{ctx.get_executor(), server.config()};
        redis::connection conn{ctx.get_executor(), server.config()};
        redis::connection probe{ctx.get_executor(), server.config()};
        locker other{other_conn}; // another process, as far as the lock can tell
        locker locks{conn};
        std::string const name = unique_key("queue-order");
        auto holder = co_await other.co_lock(name, lease(10'000ms));

        constexpr std::size_t calls = 40;
        auto const before = co_await commandstats(probe);
        std::vector<std::size_t> order;
        std::vector<std::int64_t> fences;
        std::size_t done = 0;
        int inside = 0;
        bool overlapped = false;
        for (std::size_t i = 0; i < calls; ++i)
            asio::co_spawn(
                ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await locks.co_lock(name, lease(10'000ms));
                    overlapped = overlapped || ++inside != 1;
                    order.push_back(i);
                    fences.push_back(g.fence());
                    co_await sleep_for(1ms);
                    --inside;
                    co_await g.unlock();
                },
                check_nothrow_then_mark(done));
        REQUIRE(co_await waiting_becomes(locks, calls) == calls);
        auto const queued = co_await commandstats(probe);
        // The first call's attempt, the head's after subscribing, and its polls by a jittered
        // backoff (from 1 ms) for as long as this took: a few, however many calls wait; one
        // attempt per call would be 40.
        auto const attempts = command_calls(queued, "evalsha") - command_calls(before, "evalsha");
        MESSAGE(calls << " calls queued with " << attempts << " EVALSHA");
        CHECK(attempts < static_cast<std::int64_t>(calls / 4));
        CHECK(order.empty());

        CHECK(co_await holder.unlock());
        co_await poll_until([&] { return done >= calls; }, 500, 10ms);
        REQUIRE(done == calls);
        CHECK_FALSE(overlapped);
        std::vector<std::size_t> made(calls);
        for (std::size_t i = 0; i < calls; ++i)
            made[i] = i;
        CHECK(order == made);
        for (std::size_t i = 1; i < fences.size(); ++i)
            CHECK(fences[i] > fences[i - 1]);
        CHECK(locks.waiting() == 0);
        CHECK(co_await numsub_becomes(probe, wake_channel(name), 0) == 0);
        other_conn.close();
        conn.close();
        probe.close();
    });
}

TEST_CASE("queued co_lock calls: one cancelled and one out of time leave at once, and the "
          "others still get the lock in turn") {
    redis_server server;
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& other, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await other.co_lock(name, lease(10'000ms));

        constexpr std::size_t calls = 5;
        constexpr std::size_t cancelled_call = 2;
        constexpr std::size_t timed_call = 3;
        asio::cancellation_signal cancel;
        std::vector<boost::system::error_code> results(calls);
        std::vector<steady::time_point> ended(calls);
        std::vector<std::size_t> order;
        std::size_t done = 0;
        auto const started = steady::now();
        for (std::size_t i = 0; i < calls; ++i) {
            auto opt = lease(10'000ms);
            if (i == timed_call)
                opt.wait_timeout = 300ms;
            auto call = [&, i, opt]() -> asio::awaitable<void> {
                // The outcome as a value, also for the cancelled call.
                co_await asio::this_coro::throw_if_cancelled(false);
                auto [ec, g] = co_await locks.async_lock(name, opt, as_tuple);
                results[i] = ec;
                ended[i] = steady::now();
                if (!ec) {
                    order.push_back(i);
                    co_await g.unlock();
                }
            };
            if (i == cancelled_call)
                asio::co_spawn(ctx, call,
                               asio::bind_cancellation_slot(cancel.slot(),
                                                            [&](std::exception_ptr) { ++done; }));
            else
                asio::co_spawn(ctx, call, [&](std::exception_ptr) { ++done; });
        }
        REQUIRE(co_await waiting_becomes(locks, calls) == calls);

        auto const cancelled_at = steady::now();
        cancel.emit(asio::cancellation_type::terminal);
        co_await poll_until([&] { return done >= 1; }, 100, 2ms);
        REQUIRE(done == 1);
        CHECK(results[cancelled_call] == asio::error::operation_aborted);
        CHECK(ms_between(cancelled_at, ended[cancelled_call]) < 100);
        CHECK(locks.waiting() == calls - 1);

        co_await poll_until([&] { return done >= 2; }, 200, 5ms);
        REQUIRE(done == 2);
        CHECK(results[timed_call] == error::timeout);
        auto const timed_after = ms_between(started, ended[timed_call]);
        CHECK(timed_after >= 300);
        CHECK(timed_after < 2000); // not held up until the holder lets go (10 s)
        CHECK(locks.waiting() == calls - 2);

        CHECK(co_await holder.unlock());
        co_await poll_until([&] { return done >= calls; }, 300, 10ms);
        REQUIRE(done == calls);
        CHECK(order == std::vector<std::size_t>{0, 1, 4});
        CHECK(locks.waiting() == 0);
        CHECK(co_await numsub_becomes(probe, wake_channel(name), 0) == 0);
        CHECK(co_await free_becomes(probe, name));
    };
    run_lock_test<two_lockers>(server.config(), "queue-leave", scenario);
}
