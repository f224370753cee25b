// Waiting across processes against a real redis-server: the queue of waiting lockers in Redis,
// the release that hands the lock to the first of them and tells it alone, the bounded delay
// of a hand-off to a process that died right after it queued, and what an uncontended cycle
// costs the server.
#include <colock/locker.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

lock_options lease_of(std::chrono::milliseconds ttl) {
    lock_options opt;
    opt.ttl = ttl;
    return opt;
}

// Polls LLEN of the lock's process queue until it is `expected` or `limit` has passed.
asio::awaitable<std::int64_t> queue_length_becomes(redis::connection& c, std::string const& name,
                                                   std::int64_t expected,
                                                   std::chrono::milliseconds limit = 3000ms) {
    auto const end = steady::now() + limit;
    auto n = co_await integer(c, command("LLEN", lock_key(name) + ":q"));
    while (n != expected && steady::now() < end) {
        co_await sleep_for(5ms);
        n = co_await integer(c, command("LLEN", lock_key(name) + ":q"));
    }
    co_return n;
}

} // namespace

TEST_CASE("an uncontended lock and unlock cost the server 6 calls (2 EVALSHA, 2 GET, 2 SET) and "
          "publish nothing") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), server.config()};
        redis::connection probe{ctx.get_executor(), server.config()};
        locker locks{conn};
        std::string const name = unique_key("uncontended");
        auto first = co_await locks.co_lock(name, lease_of(10'000ms)); // loads the scripts
        co_await first.unlock();

        constexpr int cycles = 50;
        auto const before = co_await commandstats(probe);
        for (int i = 0; i < cycles; ++i) {
            auto g = co_await locks.co_lock(name, lease_of(10'000ms));
            bool const released = co_await g.unlock();
            CHECK(released);
        }
        auto const after = co_await commandstats(probe);
        // The INFO that took `before` is counted in `after`.
        auto const calls = all_calls(after) - all_calls(before) - 1;
        MESSAGE("uncontended: " << static_cast<double>(calls) / cycles
                                << " server calls per lock + unlock");
        CHECK(calls == 6 * cycles);
        CHECK(command_calls(after, "evalsha") - command_calls(before, "evalsha") == 2 * cycles);
        CHECK(command_calls(after, "publish") == command_calls(before, "publish"));
        conn.close();
        probe.close();
    });
}

TEST_CASE("hand-off across processes: each release goes to the first queued locker, first come "
          "first served, and is published to it alone") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection probe{ctx.get_executor(), server.config()};
        // Four lockers on connections of their own: four processes as the server sees them.
        std::vector<std::unique_ptr<redis::connection>> conns;
        std::vector<std::unique_ptr<locker>> lockers;
        for (int i = 0; i < 4; ++i) {
            conns.push_back(
                std::make_unique<redis::connection>(ctx.get_executor(), server.config()));
            lockers.push_back(std::make_unique<locker>(*conns.back()));
        }
        std::string const name = unique_key("handoff");
        auto holder = co_await lockers[0]->co_lock(name, lease_of(10'000ms));

        std::vector<int> order;
        std::vector<std::int64_t> fences;
        int done = 0;
        for (int i = 1; i < 4; ++i) {
            asio::co_spawn(
                ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await lockers[static_cast<std::size_t>(i)]->co_lock(
                        name, lease_of(10'000ms));
                    order.push_back(i);
                    fences.push_back(g.fence());
                    co_await sleep_for(20ms);
                    co_await g.unlock();
                },
                [&](std::exception_ptr) { ++done; });
            // Queued in this order at the server, each one subscribed.
            auto const queued = co_await queue_length_becomes(probe, name, i);
            REQUIRE(queued == i);
            auto const subscribed = co_await numsub_becomes(probe, wake_channel(name), i);
            REQUIRE(subscribed == i);
        }
        auto const marked = co_await read_lock(probe, name);
        CHECK(marked.queued);

        auto const before = co_await commandstats(probe);
        co_await holder.unlock();
        for (int i = 0; i < 500 && done < 3; ++i)
            co_await sleep_for(10ms);
        REQUIRE(done == 3);
        auto const after = co_await commandstats(probe);
        CHECK(order == std::vector<int>{1, 2, 3});
        REQUIRE(fences.size() == 3);
        CHECK(fences[0] == holder.fence() + 1);
        CHECK(fences[1] == fences[0] + 1);
        CHECK(fences[2] == fences[1] + 1);
        // One message per hand-off, each to one locker's channel; the last release, with
        // nobody queued, publishes nothing.
        CHECK(command_calls(after, "publish") - command_calls(before, "publish") == 3);
        auto const queue_left = co_await integer(
            probe, command("EXISTS", lock_key(name) + ":q", lock_key(name) + ":qd"));
        CHECK(queue_left == 0);
        auto const free = co_await free_becomes(probe, name);
        CHECK(free);
        for (auto& c : conns)
            c->close();
        probe.close();
    });
}

TEST_CASE("a process killed right after it queued holds the lock up for at most the hand-off's "
          "claim (1 s), and the next one in line gets it") {
    redis_server server;
    std::string const name = unique_key("dead-queued");
    auto const cfg = server.config();
    int go[2];
    REQUIRE(::pipe(go) == 0);
    pid_t const child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The process that queues and dies: waits for the word, then asks for the lock.
        ::alarm(60);
        char byte = 0;
        if (::read(go[0], &byte, 1) != 1)
            ::_exit(2);
        asio::io_context ctx;
        redis::connection conn{ctx.get_executor(), cfg};
        locker locks{conn};
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> { co_await locks.co_lock(name, lease_of(10'000ms)); },
            asio::detached);
        ctx.run();
        ::_exit(0);
    }
    ::close(go[0]);

    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn_a{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), cfg};
        redis::connection probe{ctx.get_executor(), cfg};
        locker a{conn_a};
        locker b{conn_b};
        auto holder = co_await a.co_lock(name, lease_of(10'000ms));
        REQUIRE(::write(go[1], "g", 1) == 1);
        auto const queued = co_await queue_length_becomes(probe, name, 1);
        REQUIRE(queued == 1);
        auto const subscribed = co_await numsub_becomes(probe, wake_channel(name), 1);
        REQUIRE(subscribed == 1);
        auto const entries = co_await probe.co_exec(command("LRANGE", lock_key(name) + ":q", 0, 0));
        std::string const dead_locker(entries.at(0).elements.at(0).as_string().value_or("?"));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        CHECK(WIFSIGNALED(status));

        // Queued behind the dead one.
        bool acquired = false;
        steady::time_point acquired_at;
        std::int64_t fence = 0;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await b.co_lock(name, lease_of(10'000ms));
                acquired_at = steady::now();
                fence = g.fence();
                acquired = true;
                co_await g.unlock();
            },
            asio::detached);
        auto const behind = co_await queue_length_becomes(probe, name, 2);
        REQUIRE(behind == 2);

        auto const released_at = steady::now();
        co_await holder.unlock();
        // Handed to the dead process, whose entry was still alive.
        auto const handed = co_await read_lock(probe, name);
        CHECK(handed.kind == 'R');
        CHECK(handed.owner == dead_locker);
        bool const finished = co_await finishes(acquired, 5000ms);
        REQUIRE(finished);
        auto const delay = ms_between(released_at, acquired_at);
        MESSAGE("a hand-off to a killed process delayed the next one in line by " << delay
                                                                                  << " ms");
        CHECK(delay >= 900);  // the claim was kept for the one it was handed to
        CHECK(delay <= 1700); // and no longer (1 s, the next waiter's retry, a shared machine)
        CHECK(fence > holder.fence());
        conn_a.close();
        conn_b.close();
        probe.close();
    });
    ::close(go[1]);
}
