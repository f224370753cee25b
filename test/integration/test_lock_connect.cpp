// co_lock and a connection that has never been established: a service that starts before its
// Redis gets the lock once the server is up (within first_connect_timeout), a server that
// accepts and never answers fails co_lock with the connection's account of why, and a refused
// handshake fails at once. A connection that has worked before is waited for within
// wait_timeout alone.
#include <colock/election.hpp>
#include <colock/locker.hpp>
#include <colock/semaphore.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

using namespace colock;
using namespace colock::test;

namespace {

// Runs co_lock and returns its error (empty when acquired, then unlocked) and message.
asio::awaitable<std::pair<error_code, std::string>> lock_outcome(locker& locks, std::string name,
                                                                 lock_options opt) {
    try {
        auto g = co_await locks.co_lock(std::move(name), opt);
        co_await g.release();
        co_return std::pair<error_code, std::string>{};
    } catch (system_error const& e) {
        co_return std::pair<error_code, std::string>{e.code(), e.what()};
    }
}

// A server behind a proxy that accepts and never answers (as TLS against a plain server does),
// and the config that reaches it through the proxy, with a connect_timeout of 400 ms.
struct silent_server {
    silent_server() { proxy.set_black_hole(true); }

    redis::config config() const {
        auto cfg = server.config();
        cfg.port = proxy.port();
        cfg.connect_timeout = 400ms;
        return cfg;
    }

    redis_server server;
    fault_proxy proxy{server.port()};
};

// Restarts `server` after `delay` on a thread of its own, so that the test's io_context runs
// meanwhile; the caller joins it once the test is over.
std::thread restart_after(redis_server& server, std::chrono::milliseconds delay) {
    return std::thread([&server, delay] {
        std::this_thread::sleep_for(delay);
        server.restart();
    });
}

// A lease of 5 s whose co_lock gives up on a connection never made after `first_connect`.
lock_options connect_bounded(std::chrono::milliseconds first_connect) {
    lock_options opt = lease(5000ms);
    opt.first_connect_timeout = first_connect;
    return opt;
}

// A call that took `took` ms took at least `least` and less than `most`.
void check_took(long long took, long long least, long long most) {
    CHECK(took >= least);
    CHECK(took < most);
}

bool contains(std::string const& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a cold start: co_lock keeps trying while nothing listens yet, and gets the lock once "
          "the server comes up within first_connect_timeout") {
    redis_server server;
    server.stop(); // its port is known and free: the server "has not started yet"
    std::thread starter;
    run_with_locker(fast_config(server), [&](locker& locks) -> asio::awaitable<void> {
        lock_options opt = lease(5000ms);
        opt.wait_timeout = 20s;
        opt.first_connect_timeout = 15s;
        opt.retry.max = 200ms;
        auto const start = steady::now();
        starter = restart_after(server, 1500ms);
        // Not a structured binding: Clang 14 cannot capture one in CHECK_MESSAGE's lambda.
        auto const outcome = co_await lock_outcome(locks, unique_key("cold-start"), opt);
        MESSAGE("cold start: acquired " << ms_since(start) << " ms after the first attempt");
        CHECK_MESSAGE(!outcome.first, outcome.second);
        CHECK(ms_since(start) >= 1400);
    });
    starter.join();
}

TEST_CASE("a cold start that lasts too long: co_lock fails after first_connect_timeout, naming "
          "the connection's error") {
    auto const port = unused_port();
    redis::config cfg;
    cfg.port = port;
    cfg.connect_timeout = 500ms;
    run_with_locker(cfg, [&](locker& locks) -> asio::awaitable<void> {
        auto opt = connect_bounded(800ms); // no wait_timeout: only this bounds the wait
        opt.retry.max = 100ms;
        auto const start = steady::now();
        auto [ec, what] = co_await lock_outcome(locks, unique_key("never-up"), opt);
        auto const took = ms_since(start);
        MESSAGE(what);
        CHECK(ec == boost::system::errc::connection_refused);
        CHECK(contains(what, "no connection to the Redis server within 800 ms"));
        // The cause once, as the connection tells it: no "Connection refused: Connection
        // refused [system:111]".
        auto const first = what.find("Connection refused");
        CHECK(first != std::string::npos);
        CHECK(what.find("Connection refused", first + 1) == std::string::npos);
        CHECK_FALSE(contains(what, "[system:"));
        check_took(took, 700, 5000);
    });
}

TEST_CASE_FIXTURE(silent_server, "a server that accepts and never answers: co_lock without "
                                 "wait_timeout fails after first_connect_timeout instead of "
                                 "hanging") {
    run_with_locker(config(), [&](locker& locks) -> asio::awaitable<void> {
        auto opt = connect_bounded(1000ms);
        auto const start = steady::now();
        auto [ec, what] = co_await lock_outcome(locks, unique_key("silent"), opt);
        auto const took = ms_since(start);
        MESSAGE(what);
        CHECK(ec == redis::error::connect_timeout);
        CHECK(contains(what, "no connection to the Redis server within 1000 ms"));
        check_took(took, 900, 4000);
    });
}

TEST_CASE_FIXTURE(silent_server, "wait_timeout shorter than the connection's budget: "
                                 "error::timeout says the connection is not established") {
    run_with_locker(config(), [&](locker& locks) -> asio::awaitable<void> {
        lock_options opt = waiting_up_to(lease(5000ms), 1000ms);
        auto [ec, what] = co_await lock_outcome(locks, unique_key("silent-wait"), opt);
        MESSAGE(what);
        CHECK(ec == error::timeout);
        CHECK(contains(what, "not acquired within 1000 ms"));
        CHECK(contains(what, "the connection to the Redis server is not established"));
    });
}

TEST_CASE("a refused handshake (wrong password) fails co_lock at once: no retry can mend it") {
    redis_server_options with_password;
    with_password.requirepass = "right";
    redis_server server(with_password);
    auto cfg = server.config();
    cfg.password = "wrong";
    run_with_locker(cfg, [&](locker& locks) -> asio::awaitable<void> {
        lock_options opt = lease(5000ms);
        opt.first_connect_timeout = 10s;
        auto const start = steady::now();
        auto [ec, what] = co_await lock_outcome(locks, unique_key("wrongpass"), opt);
        MESSAGE(what);
        CHECK(ec == redis::error::handshake_failed);
        CHECK(contains(what, "WRONGPASS"));
        CHECK(ms_since(start) < 2000);
    });
}

TEST_CASE("co_try_lock on a connection that cannot be established reports the error at once") {
    auto const port = unused_port();
    redis::config cfg;
    cfg.port = port;
    run_with_locker(cfg, [&](locker& locks) -> asio::awaitable<void> {
        auto const start = steady::now();
        std::string what;
        error_code ec;
        try {
            auto g = co_await locks.co_try_lock(unique_key("try-down"), lease(5000ms));
        } catch (system_error const& e) {
            ec = e.code();
            what = e.what();
        }
        MESSAGE(what);
        CHECK(ec == boost::system::errc::connection_refused);
        CHECK(contains(what, "no connection to the Redis server"));
        CHECK(ms_since(start) < 1000);
    });
}

TEST_CASE("a connection that has worked and is lost: a waiting co_lock waits for it within "
          "wait_timeout, beyond first_connect_timeout") {
    redis_server server;
    std::thread restarter;
    run_with_locker(fast_config(server), [&](locker& locks) -> asio::awaitable<void> {
        std::string const name = unique_key("lost-then-back");
        {
            auto g = co_await locks.co_lock(name, lease(5000ms));
            co_await g.release();
        }
        server.kill();
        restarter = restart_after(server, 1500ms);
        lock_options opt = lease(5000ms);
        opt.wait_timeout = 15s;
        opt.first_connect_timeout = 300ms; // for a connection that never worked only
        auto const start = steady::now();
        auto const outcome = co_await lock_outcome(locks, name, opt);
        CHECK_MESSAGE(!outcome.first, outcome.second);
        CHECK(ms_since(start) >= 1000);
    });
    restarter.join();
}

TEST_CASE("an io_context destroyed with locks, waits and requests pending leaks nothing (the "
          "sanitizer's leak check at exit is the assertion)") {
    redis_server server;
    fault_proxy silent(server.port());
    bool holding = false;
    {
        asio::io_context ctx;
        redis::connection conn{ctx.get_executor(), server.config()};
        auto cfg = server.config();
        cfg.port = silent.port();
        redis::connection stalled{ctx.get_executor(), cfg};
        locker locks{conn};
        locker stalled_locks{stalled};
        std::string const name = unique_key("shutdown");
        // A guard whose wait_lost is pending, two waiters queued behind it (the head sleeping
        // on its timer, the next parked with none), and a co_lock and a request that the
        // black-holed connection never answers.
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await locks.co_lock(name, lease(5000ms));
                holding = true;
                co_await g.wait_lost();
            },
            asio::detached);
        for (int i = 0; i < 2; ++i)
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await locks.co_lock(name, lease(5000ms));
                    co_await g.wait_lost();
                },
                asio::detached);
        silent.set_black_hole(true);
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g =
                    co_await stalled_locks.co_lock(unique_key("shutdown-stalled"), lease(5000ms));
            },
            asio::detached);
        asio::co_spawn(ctx, stalled.co_exec(command("PING")), asio::detached);
        ctx.run_for(500ms);
    } // the context goes with all of that pending
    CHECK(holding);
}

TEST_CASE("first_connect_timeout holds to the millisecond, not to the end of a backoff; the "
          "failure names what the user made: a lock, an election, a semaphore") {
    auto const port = unused_port();
    redis::config cfg;
    cfg.port = port;
    run_with_locker(cfg, [&](locker& locks) -> asio::awaitable<void> {
        lock_options opt = lease(5000ms);
        opt.first_connect_timeout = 300ms;
        // Sleeps of up to two seconds between refused attempts: one that ends past 300 ms must
        // not be slept to its end.
        opt.retry.initial = 2000ms;
        opt.retry.max = 2000ms;
        opt.retry.multiplier = 1.0;
        auto const slack = 150; // ms: a loaded machine's scheduling, not a backoff
        {
            auto const start = steady::now();
            auto [ec, what] = co_await lock_outcome(locks, "sched", opt);
            auto const took = ms_since(start);
            MESSAGE(what);
            CHECK(ec == boost::system::errc::connection_refused);
            CHECK(contains(what, "lock 'sched'"));
            CHECK(took >= 290);
            CHECK(took < 300 + slack);
        }
        {
            election el{locks, "sched"};
            auto const start = steady::now();
            auto const failed = co_await failure_of(el.co_campaign("node-a", opt));
            auto const took = ms_since(start);
            MESSAGE(failed.what);
            CHECK(failed.code == boost::system::errc::connection_refused);
            CHECK(contains(failed.what, "election 'sched'"));
            CHECK_FALSE(contains(failed.what, "lock 'sched'"));
            CHECK(took < 300 + slack);
        }
        {
            semaphore sem{locks, "exports", 2};
            auto const start = steady::now();
            auto const failed = co_await failure_of(sem.co_acquire(opt));
            auto const took = ms_since(start);
            MESSAGE(failed.what);
            CHECK(failed.code == boost::system::errc::connection_refused);
            CHECK(contains(failed.what, "semaphore 'exports'"));
            CHECK_FALSE(contains(failed.what, "[system:")); // the cause once, as for a lock
            CHECK(took < 300 + slack);
        }
    });
}
