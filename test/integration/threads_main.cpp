// The connection used from coroutines on a multi-threaded io_context. Built under
// ThreadSanitizer by scripts/test.sh.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <colock/lock_scope.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace colock;
using colock::test::command;
using colock::test::shared_server;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {
// Runs `ctx` on four threads until `finished` reaches `expected` or `limit` passes, then calls
// `shutdown` while the threads still run (so what it starts can complete), stops and joins.
template <class Shutdown>
void run_on_four_threads(asio::io_context& ctx, std::atomic<int> const& finished, int expected,
                         std::chrono::seconds limit, Shutdown shutdown) {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&ctx, limit] { ctx.run_for(limit); });
    auto const deadline = std::chrono::steady_clock::now() + limit;
    while (finished < expected && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    shutdown();
    ctx.stop();
    for (auto& t : threads)
        t.join();
}

// An io_context for four threads and a connection to the shared server: what every test here
// runs its coroutines on.
struct four_thread_pool {
    asio::io_context ctx{4};
    redis::connection conn{ctx.get_executor(), shared_server().config()};

    // Spawns `make(c)` for each c in [0, count), each on a strand of its own (its || branches
    // must not run on two threads at once: Asio's rule for coroutines on a multi-threaded
    // io_context), then runs them as run_on_four_threads does, closing the connection at the
    // end; all must have finished.
    template <class Make>
    void run(int count, std::chrono::seconds limit, Make make) {
        std::atomic<int> finished{0};
        for (int c = 0; c < count; ++c)
            asio::co_spawn(
                asio::make_strand(ctx),
                [&finished, &make, c]() -> asio::awaitable<void> {
                    co_await make(c);
                    ++finished;
                },
                asio::detached);
        run_on_four_threads(ctx, finished, count, limit, [&] { conn.close(); });
        REQUIRE(finished == count);
    }
};
} // namespace

TEST_CASE("many coroutines on four threads share one connection") {
    constexpr int coroutines = 64;
    constexpr int increments = 300;
    four_thread_pool pool;
    std::atomic<int> aborted{0};
    std::atomic<int> failures{0};

    pool.run(coroutines, 60s, [&](int c) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        for (int i = 0; i < increments; ++i) {
            auto reply = co_await pool.conn.co_exec(command("INCR", "threads:counter"));
            if (!reply.at(0).as_integer())
                ++failures;
            if (i % 50 == c % 50) {
                // Cancellation from the pool's threads too: race a request against
                // a timer that is already due; the timer usually wins. (Not a
                // blocking command: it would hold the shared connection for all.)
                asio::steady_timer timer(co_await asio::this_coro::executor);
                timer.expires_after(0ms);
                auto r =
                    co_await (pool.conn.async_exec(command("ECHO", "raced"), asio::use_awaitable) ||
                              timer.async_wait(asio::use_awaitable));
                if (r.index() == 1)
                    ++aborted;
            }
        }
    });

    CHECK(failures == 0);
    CHECK(aborted > 0);
    CHECK(shared_server().cli(colock::test::strings("GET", "threads:counter")) ==
          std::to_string(coroutines * increments));
}

TEST_CASE("locks taken and released from four threads keep mutual exclusion") {
    constexpr int coroutines = 32;
    constexpr int rounds = 20;
    four_thread_pool pool;
    locker lk{pool.conn, "threads-lock:"};
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> errors{0};
    int unguarded_counter = 0; // protected by the distributed lock alone

    pool.run(coroutines, 120s, [&](int c) -> asio::awaitable<void> {
        std::string const name = "name-" + std::to_string(c % 4);
        for (int i = 0; i < rounds; ++i) {
            try {
                lock_options opt;
                opt.ttl = 5s;
                auto guard = co_await lk.co_lock(name, opt);
                if (name == "name-0") {
                    if (++inside > 1)
                        ++overlaps;
                    ++unguarded_counter;
                    asio::steady_timer t(co_await asio::this_coro::executor);
                    t.expires_after(100us);
                    co_await t.async_wait(asio::use_awaitable);
                    --inside;
                }
                if (!co_await guard.release())
                    ++errors;
            } catch (std::exception const&) {
                ++errors;
            }
        }
    });

    CHECK(errors == 0);
    CHECK(overlaps == 0);
    CHECK(unguarded_counter == (coroutines / 4) * rounds);
    CHECK(colock::test::lock_key_free(shared_server(), "threads-lock:{name-0}"));
}

TEST_CASE("co_lock raced with a timer that fires as the grant arrives, on four threads") {
    // Boost 1.81's co_spawn posts a raw pointer to its cancellation signal; when the lock
    // completes in the same instant as the timer, the pointer outlived its signal. The race is
    // tuned so the timer fires around the grant: some locks win, some timers do.
    constexpr int coroutines = 32;
    constexpr int rounds = 60;
    four_thread_pool pool;
    locker lk{pool.conn, "threads-race:"};
    std::atomic<int> acquired{0};
    std::atomic<int> timed_out{0};
    std::atomic<int> errors{0};

    pool.run(coroutines, 120s, [&](int c) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        std::string const name = "race-" + std::to_string(c % 8);
        auto ex = co_await asio::this_coro::executor;
        lock_options opt;
        opt.ttl = 5s;
        // One uncontended round trip, as this build runs (sanitizers are slow): the
        // timers below fire between 0 and twice that after the call.
        long long round_trip_us = 600;
        try {
            auto const start = std::chrono::steady_clock::now();
            auto g = co_await lk.co_lock("race-alone-" + std::to_string(c), opt);
            round_trip_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - start)
                                .count();
            co_await g.release();
        } catch (std::exception const&) {
            ++errors;
        }
        for (int i = 0; i < rounds; ++i) {
            try {
                asio::steady_timer timer(ex);
                timer.expires_after(
                    std::chrono::microseconds((c * 37 + i * 101) % (2 * round_trip_us + 1)));
                auto r = co_await (lk.co_lock(name, opt) || timer.async_wait(asio::use_awaitable));
                if (r.index() == 0) {
                    ++acquired;
                    auto guard = std::move(std::get<0>(r));
                    if (!co_await guard.release())
                        ++errors;
                } else {
                    ++timed_out;
                }
            } catch (std::exception const&) {
                ++errors;
            }
        }
    });

    CHECK(errors == 0);
    CHECK(acquired > 0);
    CHECK(timed_out > 0);
    CHECK(acquired + timed_out == coroutines * rounds);
    // Every lock a cancelled waiter won was given back (in the background: allow it time).
    for (int n = 0; n < 8; ++n) {
        std::string const key = "threads-race:{race-" + std::to_string(n) + "}";
        bool free = false;
        for (int i = 0; i < 100 && !free; ++i) {
            free = colock::test::lock_key_free(shared_server(), key);
            if (!free)
                std::this_thread::sleep_for(50ms);
        }
        CHECK(free);
    }
}

namespace {
// Lets go of `g`, a guard sharing a lease, by release() or by its destructor; counts itself in
// `gone`. Everything by value or by a reference that outlives it: a coroutine's parameters.
asio::awaitable<void> let_go(lock_guard g, bool by_unlock, std::atomic<int>& errors,
                             std::atomic<int>& gone) {
    if (!g.owns() || g.hold_count() == 0)
        ++errors;
    if (by_unlock) { // co_await not inside && or ?:, which GCC 12 miscompiles
        bool const ours = co_await g.release();
        if (!ours)
            ++errors;
    }
    g = lock_guard{};
    ++gone;
}
} // namespace

TEST_CASE("guards sharing one lease let go on four threads: one release, when the last goes") {
    constexpr int rounds = 10;
    constexpr int shares = 16;
    four_thread_pool pool;
    locker lk{pool.conn, "threads-share:"};
    struct counting : lock_observer {
        std::atomic<int> acquired{0};
        std::atomic<int> released{0};
        void on_acquired(acquired_event const&) override { ++acquired; }
        void on_released(released_event const&) override { ++released; }
    };
    auto seen = std::make_shared<counting>();
    lk.set_observer(seen);
    std::atomic<int> errors{0};

    pool.run(1, 60s, [&](int) -> asio::awaitable<void> {
        for (int r = 0; r < rounds; ++r) {
            lock_scope scope{lk};
            auto first = co_await scope.co_lock("name");
            std::atomic<int> gone{0};
            for (int i = 0; i < shares; ++i) {
                // Each share goes to a coroutine on a strand of its own, which lets go of it
                // there: unlock, or its destructor.
                lock_guard share = first.share();
                if (i % 2 == 0)
                    share = co_await scope.co_lock("name");
                asio::co_spawn(asio::make_strand(pool.ctx),
                               let_go(std::move(share), i % 3 == 0, errors, gone), asio::detached);
            }
            if (!co_await first.release())
                ++errors;
            asio::steady_timer t(co_await asio::this_coro::executor);
            while (gone < shares) {
                t.expires_after(1ms);
                co_await t.async_wait(asio::use_awaitable);
            }
            // The last guard's release, wherever it went from, frees the lock.
            bool freed = false;
            for (int k = 0; k < 1000 && !freed; ++k) {
                if (auto again = co_await lk.co_try_lock("name")) {
                    freed = co_await again->release();
                } else {
                    t.expires_after(1ms);
                    co_await t.async_wait(asio::use_awaitable);
                }
            }
            if (!freed)
                ++errors;
        }
    });

    CHECK(errors == 0);
    // Per round: the scope's acquisition and the check's, and a release of each.
    CHECK(seen->acquired == 2 * rounds);
    CHECK(seen->released == 2 * rounds);
    CHECK(colock::test::lock_key_free(shared_server(), "threads-share:{name}"));
}

TEST_CASE("a semaphore and a read-write lock from four threads: never more holders than "
          "allowed, waits cancelled from the pool's threads, one semaphore destroyed meanwhile") {
    constexpr int coroutines = 24;
    constexpr int rounds = 15;
    four_thread_pool pool;
    locker lk{pool.conn, "threads-sem:"};
    semaphore sem{lk, "exports", 3};
    rw_lock rw{lk, "catalog"};
    std::atomic<int> permits_in{0}, most{0}, writers{0}, readers{0}, overlaps{0}, errors{0};
    std::atomic<int> aborted{0};
    auto doomed = std::make_unique<semaphore>(lk, "doomed", 1);
    auto doomed_permit = std::make_shared<std::optional<permit>>();
    // The waiter on `doomed` asks only once coroutine 0 holds its permit (an order by events: a
    // timer of a few milliseconds was not enough on a loaded machine, and the waiter was then
    // granted the permit first); coroutine 0 destroys it only once the waiter is queued.
    std::atomic<bool> doomed_held{false}, waiter_queued{false};
    std::string waiter_outcome = "did not finish"; // written by coroutine 1, read after the run

    pool.run(coroutines, 120s, [&](int c) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        lock_options opt;
        opt.ttl = 5s;
        if (c == 0) {
            // Holds the only permit of `doomed`, then destroys it from this thread while
            // another coroutine waits on it.
            doomed_permit->emplace(co_await doomed->co_acquire(opt));
            doomed_held = true;
            // Until the other one waits in the queue (its call went through the connection's
            // strand before this reply did: no race on `doomed`).
            auto const give_up = std::chrono::steady_clock::now() + 60s;
            while (std::chrono::steady_clock::now() < give_up) {
                auto r =
                    co_await pool.conn.co_exec(command("LLEN", "threads-sem:semaphore:{doomed}:q"));
                if (r.at(0).as_integer().value_or(0) > 0) {
                    waiter_queued = true;
                    break;
                }
                asio::steady_timer t(co_await asio::this_coro::executor, 2ms);
                co_await t.async_wait(asio::use_awaitable);
            }
            doomed.reset();
            co_return;
        }
        if (c == 1) {
            while (!doomed_held) {
                asio::steady_timer t(co_await asio::this_coro::executor, 1ms);
                co_await t.async_wait(asio::use_awaitable);
            }
            try {
                co_await doomed->co_acquire(opt);
                waiter_outcome = "granted"; // the permit is held: it must not be granted
                ++errors;
            } catch (boost::system::system_error const& e) {
                waiter_outcome = e.what();
                if (e.code() == asio::error::operation_aborted)
                    ++aborted;
                else
                    ++errors;
            }
            co_return;
        }
        for (int i = 0; i < rounds; ++i) {
            try {
                if (c % 3 == 0) {
                    // Raced with a timer already due: a cancellation from this thread.
                    asio::steady_timer timer(co_await asio::this_coro::executor, 0ms);
                    auto r =
                        co_await (sem.co_acquire(opt) || timer.async_wait(asio::use_awaitable));
                    if (r.index() == 0) {
                        auto p = std::move(std::get<0>(r));
                        int const now = ++permits_in;
                        if (now > most)
                            most = now;
                        --permits_in;
                        co_await p.release();
                    }
                } else if (c % 3 == 1) {
                    auto p = co_await sem.co_acquire(opt);
                    int const now = ++permits_in;
                    if (now > most)
                        most = now;
                    asio::steady_timer t(co_await asio::this_coro::executor, 200us);
                    co_await t.async_wait(asio::use_awaitable);
                    --permits_in;
                    if (!co_await p.release())
                        ++errors;
                } else if (i % 4 == 0) {
                    auto w = co_await rw.co_lock(opt);
                    if (++writers > 1 || readers > 0)
                        ++overlaps;
                    --writers;
                    auto r = co_await w.co_downgrade();
                    if (!co_await r.release())
                        ++errors;
                } else {
                    auto r = co_await rw.co_lock_shared(opt);
                    ++readers;
                    if (writers > 0)
                        ++overlaps;
                    --readers;
                    if (!co_await r.release())
                        ++errors;
                }
            } catch (std::exception const&) {
                ++errors;
            }
        }
    });

    INFO("the waiter on the destroyed semaphore: ", waiter_outcome);
    CHECK(errors == 0);
    CHECK(overlaps == 0);
    CHECK(most <= 3);
    CHECK(waiter_queued);
    CHECK(aborted == 1);
}

TEST_CASE("leases kept (lock_options::retain) by two lockers on four threads: mutual exclusion, "
          "and nothing kept at the end") {
    constexpr int coroutines = 16;
    constexpr int rounds = 15;
    four_thread_pool pool;
    redis::connection second{pool.ctx.get_executor(), shared_server().config()};
    locker first_locker{pool.conn, "threads-retain:"};
    locker second_locker{second, "threads-retain:"};
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<int> errors{0};
    std::atomic<int> finished{0};
    for (int c = 0; c < coroutines; ++c)
        asio::co_spawn(
            asio::make_strand(pool.ctx),
            [&, c]() -> asio::awaitable<void> {
                auto& lk = c % 2 == 0 ? first_locker : second_locker;
                lock_options opt;
                opt.ttl = 5s;
                opt.retain = 50ms;
                for (int i = 0; i < rounds; ++i) {
                    try {
                        auto guard = co_await lk.co_lock("shared", opt);
                        if (++inside > 1)
                            ++overlaps;
                        asio::steady_timer t(co_await asio::this_coro::executor);
                        t.expires_after(100us);
                        co_await t.async_wait(asio::use_awaitable);
                        --inside;
                        if (i % 2 == 0 && !co_await guard.release())
                            ++errors;
                        // else let go by its destructor, from this thread
                    } catch (std::exception const&) {
                        ++errors;
                    }
                }
                // The last kept lease goes back when its retention ends.
                asio::steady_timer t(co_await asio::this_coro::executor);
                t.expires_after(300ms);
                co_await t.async_wait(asio::use_awaitable);
                ++finished;
            },
            asio::detached);
    run_on_four_threads(pool.ctx, finished, coroutines, 120s, [&] {
        pool.conn.close();
        second.close();
    });
    CHECK(finished == coroutines);
    CHECK(errors == 0);
    CHECK(overlaps == 0);
    CHECK(colock::test::lock_key_free(shared_server(), "threads-retain:{shared}"));
}
