// The guard's operations for any completion token: async_release and async_extend with plain
// callbacks, futures and deferred operations, and a guard that goes away once they started.
#include <colock/election.hpp>
#include <colock/locker.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

using namespace colock;
using namespace colock::test;

TEST_CASE("async_release and async_extend with callbacks: results, errors, and a guard destroyed "
          "right after the call") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    redis::connection probe{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    std::string const name = unique_key("async-unlock");
    lock_options opt = lease(2000ms);

    std::optional<lock_guard> g;
    locks.async_lock(name, opt, [&](error_code ec, lock_guard got) {
        REQUIRE_FALSE(ec);
        g.emplace(std::move(got));
    });
    REQUIRE(run_until(ctx, 3s, [&] { return g.has_value(); }));

    try { // a bad ttl is refused before any I/O, naming the lock
        g->async_extend(0ms, [](error_code, bool) {});
        FAIL("async_extend took a zero ttl");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == error::invalid_argument);
        CHECK(std::string(e.what()).find("extend of lock '" + name + "'") != std::string::npos);
    }
    std::optional<std::pair<error_code, bool>> extended;
    g->async_extend(20'000ms, [&](error_code ec, bool ok) { extended.emplace(ec, ok); });
    CHECK_FALSE(extended.has_value()); // never inside the initiating call
    REQUIRE(run_until(ctx, 2s, [&] { return extended.has_value(); }));
    CHECK_FALSE(extended->first);
    CHECK(extended->second);
    std::optional<std::int64_t> pttl;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            pttl = co_await integer(probe, command("PTTL", "colock:{" + name + "}"));
        },
        asio::detached);
    REQUIRE(run_until(ctx, 2s, [&] { return pttl.has_value(); }));
    CHECK(*pttl > 10'000);

    std::optional<std::pair<error_code, bool>> unlocked;
    g->async_release([&](error_code ec, bool ok) { unlocked.emplace(ec, ok); });
    CHECK_FALSE(unlocked.has_value());
    g.reset(); // the release goes on without the guard
    REQUIRE(run_until(ctx, 2s, [&] { return unlocked.has_value(); }));
    CHECK_FALSE(unlocked->first);
    CHECK(unlocked->second);

    // A guard that holds nothing: false at once for unlock, not_held for extend.
    lock_guard empty;
    std::optional<std::pair<error_code, bool>> empty_unlock, empty_extend;
    empty.async_release([&](error_code ec, bool ok) { empty_unlock.emplace(ec, ok); });
    empty.async_extend(1000ms, [&](error_code ec, bool ok) { empty_extend.emplace(ec, ok); });
    auto const end = steady::now() + 2s;
    while ((!empty_unlock || !empty_extend) && steady::now() < end)
        std::this_thread::sleep_for(5ms); // completed on the system executor: no context
    REQUIRE(empty_unlock.has_value());
    CHECK_FALSE(empty_unlock->first);
    CHECK_FALSE(empty_unlock->second);
    REQUIRE(empty_extend.has_value());
    CHECK(empty_extend->first == error::not_held);
    CHECK_THROWS_AS(empty.async_extend(0ms, [](error_code, bool) {}), boost::system::system_error);

    conn.close();
    probe.close();
    ctx.run_for(1s);
}

TEST_CASE("async_release with use_future from another thread, and a deferred async_extend") {
    asio::io_context ctx;
    context_threads runner{ctx};
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    std::string const name = unique_key("async-future");
    lock_options opt = lease(2000ms);

    auto g = locks.async_lock(name, opt, asio::use_future).get();
    REQUIRE(g.owns());
    auto extend_op = g.async_extend(5000ms, asio::deferred);
    auto extended = std::move(extend_op)(asio::use_future).get();
    CHECK(extended);
    bool const released = g.async_release(asio::use_future).get();
    CHECK(released);
    bool const again = g.async_release(asio::use_future).get();
    CHECK_FALSE(again);

    conn.close();
    runner.join();
}

TEST_CASE("a guard let go right before its connection is destroyed gives the lock back (the "
          "README's \"or let the guard go\")") {
    std::string const name = unique_key("let-go");
    {
        asio::io_context ctx;
        auto conn =
            std::make_unique<redis::connection>(ctx.get_executor(), shared_server().config());
        locker locks{*conn};
        lock_options opt;
        opt.ttl = 30'000ms; // held for 30 s unless the release really goes out
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                {
                    auto g = co_await locks.co_lock(name, opt);
                }             // let go: released in the background
                conn.reset(); // and the connection destroyed at once
            },
            asio::detached);
        auto const start = steady::now();
        ctx.run_for(10s);
        CHECK(ms_since(start) < 3000); // run() returned: nothing kept the context alive
    }
    CHECK(lock_key_free(shared_server(), "colock:{" + name + "}"));
}

namespace {

// How long a busy handler computes at the most: until the request made beside it has its answer,
// which comes at once unless the handler holds it up.
constexpr auto busy_handler_time = 5000ms;

} // namespace

TEST_CASE("a connection's handler without an executor of its own runs on the connection's "
          "executor, outside its strand: one that computes holds up no other request") {
    asio::io_context ctx;
    context_threads runners{ctx, 2}; // joined last, once the connection is gone
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    std::promise<void> busy_started;
    std::promise<void> answered_beside;
    std::promise<bool> busy_done; // whether the other request was answered while it computed
    conn.async_exec(command("PING"), [&](error_code ec, redis::response) {
        CHECK_FALSE(ec);
        busy_started.set_value();
        // User code that computes, here until the request beside it has its answer.
        auto const answered = answered_beside.get_future().wait_for(busy_handler_time);
        busy_done.set_value(answered == std::future_status::ready);
    });
    busy_started.get_future().wait();
    auto const start = steady::now();
    auto replies = conn.async_exec(command("ECHO", "meanwhile"), asio::use_future).get();
    auto const took = ms_since(start);
    answered_beside.set_value();
    MESSAGE("a request beside a busy handler took " << took << " ms");
    // Inside the strand's turn it would have waited out the whole busy handler.
    CHECK(busy_done.get_future().get());
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].as_string() == "meanwhile");
    conn.close();
}

TEST_CASE("a locker's handler without an executor of its own runs on get_executor(), outside "
          "the locker's strand; one with an executor runs there") {
    asio::io_context ctx;
    context_threads runners{ctx, 2}; // joined last, once the connection is gone
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    CHECK(locks.get_executor() == conn.get_executor());
    lock_options opt = lease(5000ms);

    std::promise<void> busy_started;
    std::promise<void> answered_beside;
    std::promise<bool> busy_done; // whether the other call completed while it computed
    std::optional<lock_guard> first;
    locks.async_try_lock(
        unique_key("busy-handler"), opt, [&](error_code ec, std::optional<lock_guard> g) {
            CHECK_FALSE(ec);
            first = std::move(g);
            busy_started.set_value();
            auto const answered = answered_beside.get_future().wait_for(busy_handler_time);
            busy_done.set_value(answered == std::future_status::ready);
        });
    busy_started.get_future().wait();
    auto const start = steady::now();
    auto second = locks.async_try_lock(unique_key("beside-busy"), opt, asio::use_future).get();
    auto const took = ms_since(start);
    answered_beside.set_value();
    MESSAGE("a try_lock beside a busy handler took " << took << " ms");
    CHECK(busy_done.get_future().get());
    REQUIRE(second.has_value());
    CHECK(second->async_release(asio::use_future).get());
    REQUIRE(first.has_value());
    CHECK(first->async_release(asio::use_future).get());

    // A handler bound to the user's strand runs on it.
    auto user_strand = asio::make_strand(ctx);
    std::promise<bool> on_user_strand;
    std::optional<lock_guard> third;
    locks.async_try_lock(
        unique_key("user-strand"), opt,
        asio::bind_executor(user_strand, [&](error_code ec, std::optional<lock_guard> g) {
            CHECK_FALSE(ec);
            // Kept, not let go here: a release sent after close() would open the connection
            // again.
            third = std::move(g);
            on_user_strand.set_value(user_strand.running_in_this_thread());
        }));
    CHECK(on_user_strand.get_future().get());
    REQUIRE(third.has_value());
    CHECK(third->async_release(asio::use_future).get());
    conn.close();
}

TEST_CASE("a future whose exception names the lock: co_spawn of co_lock with use_future") {
    asio::io_context ctx;
    context_threads runners{ctx, 2}; // joined last, once the connection is gone
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    std::string const name = unique_key("named-future");
    lock_options opt = lease(5000ms);
    auto held = locks.async_lock(name, opt, asio::use_future).get();
    opt.wait_timeout = 200ms;
    auto waiting = asio::co_spawn(ctx, locks.co_lock(name, opt), asio::use_future);
    try {
        waiting.get();
        FAIL("acquired a lock that is held");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == error::timeout);
        CHECK(std::string(e.what()).find(name) != std::string::npos);
    }
    CHECK(held.async_release(asio::use_future).get());
    conn.close();
}

TEST_CASE("a semaphore, a read-write lock and an election give their locker's executor, as Asio "
          "I/O objects do, where a callback without an executor of its own completes; a "
          "moved-from semaphore or read-write lock gives none") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    auto const name = unique_key("executors");
    semaphore sem{locks, name, 2};
    rw_lock rw{locks, name};
    election vote{locks, name};
    CHECK(sem.get_executor() == locks.get_executor());
    CHECK(rw.get_executor() == locks.get_executor());
    CHECK(vote.get_executor() == conn.get_executor());
    bool completed_there = false;
    sem.async_acquire(1, lease(5000ms), [&](error_code ec, permit p) {
        CHECK_FALSE(ec);
        completed_there = ctx.get_executor().running_in_this_thread();
        p.async_release([&](error_code, bool) { conn.close(); });
    });
    ctx.run_for(10s);
    CHECK(completed_there);
    semaphore moved{std::move(sem)};
    rw_lock moved_rw{std::move(rw)};
    CHECK(moved.get_executor() == locks.get_executor());
    CHECK_FALSE(sem.get_executor()); // NOLINT(bugprone-use-after-move): moved-from on purpose
    CHECK_FALSE(rw.get_executor());  // NOLINT(bugprone-use-after-move)
}
