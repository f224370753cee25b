// Waiting against a real redis-server: across processes, the queue of waiting lockers in
// Redis, the release that hands the lock to the first of them and tells it alone, the bounded
// delay of a hand-off to a process that died right after it queued; inside a process, the
// cohort hand-off and its limit as the real scripts see them; and what an uncontended cycle
// costs the server. The cohort's own rules (order, tokens, fences, cohort_limit 0, a lost
// lease, a lost "q") are unit-tested in test_orchestration.cpp.
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

TEST_CASE("an uncontended lock and unlock cost the server 5 calls (2 FCALL, a GET, 2 SET: the "
          "release is one command) and publish nothing") {
    redis_server server;
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto first = co_await locks.co_lock(name, lease(10'000ms)); // loads the scripts
        co_await first.release();

        constexpr int cycles = 50;
        auto const before = co_await commandstats(probe);
        for (int i = 0; i < cycles; ++i) {
            auto g = co_await locks.co_lock(name, lease(10'000ms));
            CHECK(co_await g.release());
        }
        auto const after = co_await commandstats(probe);
        auto const calls = commands_between(before, after);
        MESSAGE("uncontended: " << static_cast<double>(calls) / cycles
                                << " server calls per lock + unlock");
        CHECK(calls == 5 * cycles);
        CHECK(command_calls(after, "fcall") - command_calls(before, "fcall") == 2 * cycles);
        CHECK(command_calls(after, "get") - command_calls(before, "get") == cycles);
        CHECK(command_calls(after, "set") - command_calls(before, "set") == 2 * cycles);
        CHECK(command_calls(after, "publish") == command_calls(before, "publish"));
    };
    run_lock_test<one_locker>(server.config(), "uncontended", scenario);
}

namespace {

// Every message published on the wake channels of lock `name` (PSUBSCRIBE on a connection of
// its own), as (channel, payload) in the order the server sent them.
struct wake_watcher final : redis::push_listener {
    std::vector<std::pair<std::string, std::string>> messages;
    void on_push(resp3::value const& push) override {
        if (push.elements.size() == 4 && text_of(push.elements[0]) == "pmessage")
            messages.emplace_back(text_of(push.elements[2]), text_of(push.elements[3]));
    }
    std::vector<std::string> channels_of(std::string const& payload) const {
        std::vector<std::string> out;
        for (auto const& [channel, p] : messages)
            if (p == payload)
                out.push_back(channel);
        return out;
    }
};

// A 10 s lease that a process's cohort passes on locally at most `limit` times in a row.
lock_options cohort_lease(std::size_t limit) {
    lock_options opt = lease(10'000ms);
    opt.cohort_limit = limit;
    return opt;
}

} // namespace

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
        redis::connection watching{ctx.get_executor(), server.config()};
        auto watcher = std::make_shared<wake_watcher>();
        watching.add_push_listener(watcher);
        co_await watching.co_exec(command("PSUBSCRIBE", wake_channel(name)));
        auto holder = co_await lockers[0]->co_lock(name, lease(10'000ms));

        std::vector<int> order;
        std::vector<std::int64_t> fences;
        int done = 0;
        for (int i = 1; i < 4; ++i) {
            asio::co_spawn(
                ctx,
                [&, i]() -> asio::awaitable<void> {
                    auto g = co_await lockers[static_cast<std::size_t>(i)]->co_lock(
                        name, lease(10'000ms));
                    order.push_back(i);
                    fences.push_back(g.fence());
                    co_await sleep_for(20ms);
                    co_await g.release();
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

        co_await watching.co_exec(command("PING")); // every message sent before is in
        auto const messages_before = watcher->messages.size();
        auto const before = co_await commandstats(probe);
        co_await holder.release();
        co_await poll_until([&] { return done >= 3; }, 500, 10ms);
        REQUIRE(done == 3);
        auto const after = co_await commandstats(probe);
        CHECK(order == std::vector<int>{1, 2, 3});
        REQUIRE(fences.size() == 3);
        CHECK(fences[0] == holder.fence() + 1);
        CHECK(fences[1] == fences[0] + 1);
        CHECK(fences[2] == fences[1] + 1);
        // Every message sent went to one locker's channel, none to all: one "g" per hand-off,
        // to lockers 1, 2, 3 in turn, and the last release, with nobody queued, sent none.
        // ("q" tells a holder's locker that another is queued; every attempt of a waiting
        // locker sends one, so how many depends on timing.)
        co_await watching.co_exec(command("PING")); // every message sent before is in
        auto const published = command_calls(after, "publish") - command_calls(before, "publish");
        std::vector<std::string> grants;
        for (std::size_t i = messages_before; i < watcher->messages.size(); ++i) {
            auto const& [channel, payload] = watcher->messages[i];
            CHECK((payload == "g" || payload == "q"));
            CHECK(channel.starts_with(lock_key(name) + ":w:"));
            if (payload == "g")
                grants.push_back(channel);
        }
        // Nothing else was published meanwhile. (At least: a "q" sent between the watcher's
        // first PING and the first INFO is seen here without being counted there.)
        CHECK(static_cast<std::int64_t>(watcher->messages.size() - messages_before) >= published);
        CHECK(grants.size() == 3);
        if (grants.size() == 3) {
            CHECK(grants[0] != grants[1]);
            CHECK(grants[1] != grants[2]);
            CHECK(grants[0] != grants[2]);
        }
        watching.close();
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
            ctx, [&]() -> asio::awaitable<void> { co_await locks.co_lock(name, lease(10'000ms)); },
            asio::detached);
        ctx.run();
        ::_exit(0);
    }
    ::close(go[0]);

    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& a, locker& b,
                        std::string const&) -> asio::awaitable<void> {
        auto holder = co_await a.co_lock(name, lease(10'000ms));
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
                auto g = co_await b.co_lock(name, lease(10'000ms));
                acquired_at = steady::now();
                fence = g.fence();
                acquired = true;
                co_await g.release();
            },
            asio::detached);
        auto const behind = co_await queue_length_becomes(probe, name, 2);
        REQUIRE(behind == 2);

        auto const released_at = steady::now();
        co_await holder.release();
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
    };
    run_lock_test<two_lockers>(cfg, "lock", scenario);
    ::close(go[1]);
}

TEST_CASE("a lease that lapses without a release (its holder dead) goes to the first queued "
          "locker, not to a later one that asks first") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection& conn_b,
                       redis::connection&, redis::connection& probe, locker& a, locker& b,
                       locker& c, std::string const& name) -> asio::awaitable<void> {
        // A holds and never renews, as a process that died: its lease lapses, nobody releases.
        auto dying = lease(800ms);
        dying.auto_renew = false;
        auto holder = co_await a.co_lock(name, dying);
        auto const granted = steady::now();

        std::vector<char> order;
        std::vector<std::int64_t> fences;
        int done = 0;
        auto const take = [&](locker& l, char who, lock_options opt) {
            asio::co_spawn(
                ctx,
                [&l, &order, &fences, &name, who, opt]() -> asio::awaitable<void> {
                    auto g = co_await l.co_lock(name, opt);
                    order.push_back(who);
                    fences.push_back(g.fence());
                    co_await g.release();
                },
                check_nothrow_then_mark(done));
        };
        take(b, 'b', lease(10'000ms));
        auto const b_queued = co_await queue_length_becomes(probe, name, 1);
        REQUIRE(b_queued == 1);
        // C queues behind B and asks every 2 ms or less: it is the first to ask after the lapse.
        auto eager = lease(10'000ms);
        eager.retry.initial = 2ms;
        eager.retry.max = 2ms;
        take(c, 'c', eager);
        auto const c_queued = co_await queue_length_becomes(probe, name, 2);
        REQUIRE(c_queued == 2);
        // B asks only 400 ms after the lapse: its requests wait at the server until then.
        auto const lapse_in = 800ms - std::chrono::milliseconds(ms_since(granted));
        auto const stalled =
            co_await stall_at_server(conn_b, probe, std::max(lapse_in, 0ms) + 400ms);
        auto const still_held = co_await read_lock(probe, name);
        REQUIRE(still_held.kind == 'H'); // B was held up before the lease lapsed

        auto const both = co_await poll_until([&] { return done == 2; }, 600, 5ms);
        REQUIRE(both);
        CHECK(order == std::vector<char>{'b', 'c'});
        REQUIRE(fences.size() == 2);
        CHECK(fences[0] > holder.fence());
        CHECK(fences[1] > fences[0]);
        CHECK(co_await finishes(stalled->done, 2000ms));
    };
    run_lock_test<three_lockers>("lapse-fifo", scenario);
}

// ------------------------------------------------------------------------ cohort hand-off

// How the lease passes down the local queue (order, fences, tokens, no server call per turn) is
// unit-tested in test_orchestration.cpp; here the real key keeps the lease's token meanwhile,
// and the release script stores the last fence given.
TEST_CASE("cohort hand-off: waiters of the same process get the lease while the key keeps its "
          "token, and the release stores the last fence given") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection& probe,
                       locker& locks, std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await locks.co_lock(name, lease(10'000ms));
        constexpr std::size_t waiters = 2;
        std::vector<std::int64_t> fences;
        std::vector<std::optional<std::string>> key_tokens; // what the lock key said meanwhile
        int done = 0;
        for (std::size_t i = 0; i < waiters; ++i)
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await locks.co_lock(name, lease(10'000ms));
                    fences.push_back(g.fence());
                    key_tokens.push_back(co_await held_by(probe, name));
                    CHECK(co_await g.release());
                },
                check_nothrow_then_mark(done));
        co_await poll_until([&] { return locks.waiting() == waiters; }, 300, 5ms);
        REQUIRE(locks.waiting() == waiters);

        CHECK(co_await holder.release());
        co_await poll_until([&] { return done >= static_cast<int>(waiters); }, 300, 10ms);
        REQUIRE(done == static_cast<int>(waiters));
        REQUIRE(fences.size() == waiters);
        for (std::size_t i = 0; i < fences.size(); ++i) {
            CHECK(fences[i] == holder.fence() + 1 + static_cast<std::int64_t>(i));
            CHECK(key_tokens[i] == holder.token());
        }
        auto const freed = co_await read_lock(probe, name);
        CHECK(freed.kind == 'F');
        CHECK(freed.fence == fences.back());
        auto next = co_await locks.co_lock(name, lease(10'000ms));
        CHECK(next.fence() == fences.back() + 1);
        co_await next.release();
    };
    run_lock_test<one_locker>("cohort", scenario);
}

TEST_CASE("cohort_limit: with another process queued, at most cohort_limit local hand-offs "
          "in a row, then the other process's turn") {
    redis_server server;
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& a, locker& b,
                        std::string const& name) -> asio::awaitable<void> {
        lock_options const opt = cohort_lease(2);
        auto holder = co_await a.co_lock(name, opt);

        std::vector<char> order;
        int done = 0;
        auto contender = [&](locker& l, char who) -> asio::awaitable<void> {
            auto g = co_await l.co_lock(name, opt);
            order.push_back(who);
            co_await sleep_for(5ms);
            co_await g.release();
        };
        for (int i = 0; i < 4; ++i)
            asio::co_spawn(ctx, contender(a, 'a'), [&](std::exception_ptr) { ++done; });
        auto const a_queued = co_await queue_length_becomes(probe, name, 1);
        REQUIRE(a_queued == 1);
        asio::co_spawn(ctx, contender(b, 'b'), [&](std::exception_ptr) { ++done; });
        auto const b_queued = co_await queue_length_becomes(probe, name, 2);
        REQUIRE(b_queued == 2);
        auto const marked = co_await read_lock(probe, name);
        CHECK(marked.kind == 'H');
        co_await sleep_for(100ms); // the holder's process is told ("q")

        co_await holder.release();
        co_await poll_until([&] { return done >= 5; }, 500, 10ms);
        REQUIRE(done == 5);
        // The holder, then two local hand-offs (the limit), then the other process.
        REQUIRE(order.size() == 5);
        CHECK(order[0] == 'a');
        CHECK(order[1] == 'a');
        CHECK(order[2] == 'b');
    };
    run_lock_test<two_lockers>(server.config(), "cohort-limit", scenario);
}

// That a cohort yields once it hears "q", even after a lost one, is unit-tested in
// test_orchestration.cpp; here the acquire script repeats the message at every attempt.
TEST_CASE("the acquire script tells the holder's locker \"q\" at every attempt of a queued "
          "locker, not only its first") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection&,
                       redis::connection&, locker& a, locker& b,
                       std::string const& name) -> asio::awaitable<void> {
        redis::connection watching{ctx.get_executor(), shared_server().config()};
        auto watcher = std::make_shared<wake_watcher>();
        watching.add_push_listener(watcher);
        co_await watching.co_exec(command("PSUBSCRIBE", wake_channel(name)));
        auto holder = co_await a.co_lock(name, lease(10'000ms));
        std::string const a_channel = lock_key(name) + ":w:" + a.id();

        // B's head asks again after a short backoff, again and again.
        lock_options often = waiting_up_to(lease(10'000ms), 5000ms);
        often.retry.initial = 5ms;
        often.retry.max = 20ms;
        bool done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await b.co_lock(name, often);
                co_await g.release();
            },
            check_nothrow_then_mark(done));
        auto q_to_a = [&] {
            auto const channels = watcher->channels_of("q");
            return std::count(channels.begin(), channels.end(), a_channel);
        };
        co_await poll_until([&] { return q_to_a() >= 3; }, 300, 10ms);
        CHECK(q_to_a() >= 3);
        CHECK(watcher->channels_of("q").size() == static_cast<std::size_t>(q_to_a()));

        CHECK(co_await holder.release());
        bool const finished = co_await finishes(done, 3000ms);
        CHECK(finished);
        watching.close();
    };
    run_lock_test<two_lockers>("repeated-q", scenario);
}
