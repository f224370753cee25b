// The lock at its limits: every key it writes expires, durations up to milliseconds::max()
// never overflow, names outlive the caller's string, transient server states (LOADING, BUSY,
// READONLY, MASTERDOWN) are waited out, and a renewal survives a short connection loss.
#include <colock/functions_library.hpp>
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace asio::experimental::awaitable_operators;

namespace {

// Sends `req` until the server answers it with an error starting with `prefix` (the state the
// test waits for has begun), for at most `limit`.
asio::awaitable<bool> server_says(redis::connection& probe, resp3::request const& req,
                                  std::string_view prefix, std::chrono::milliseconds limit) {
    co_return co_await eventually(
        [&]() -> asio::awaitable<bool> {
            auto [ec, r] = co_await probe.async_exec(req, as_tuple);
            co_return ec == redis::error::server_error && !r.empty() &&
                r.back().text.starts_with(prefix);
        },
        limit, 10ms);
}

// The cast of the transient-state tests: a locker on its own connection, a second connection
// that puts the server into the state, and a probe that sees it, all connected first. Runs
// `scenario(ctx, conn, cause, probe, locks)` as run_test does; the connections are closed once
// it returns.
template <class Scenario>
void run_state_test(redis_server& server, Scenario scenario) {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), server.config()};
        redis::connection cause{ctx.get_executor(), server.config()};
        redis::connection probe{ctx.get_executor(), server.config()};
        co_await conn.async_connect(asio::use_awaitable);
        co_await cause.async_connect(asio::use_awaitable);
        co_await probe.async_connect(asio::use_awaitable);
        locker locks{conn};
        co_await scenario(ctx, conn, cause, probe, locks);
        conn.close();
        cause.close();
        probe.close();
    });
}

// Awaits `op`, then sets `done`: background work that a test waits for.
template <class T>
asio::awaitable<void> then_set(asio::awaitable<T> op, bool& done) {
    co_await std::move(op);
    done = true;
}

// A waiter: takes lock `name`, notes in `acquired` whether it owned it, and releases it.
asio::awaitable<void> take_and_release(locker& locks, std::string name, lock_options opt,
                                       bool& acquired) {
    auto g = co_await locks.co_lock(std::move(name), opt);
    acquired = g.owns();
    co_await g.release();
}

// co_lock, caught: the guard, or the text of what it threw. For a test that must wait for its
// background work (whose coroutine uses the test's objects) before it may fail.
asio::awaitable<std::pair<lock_guard, std::string>> lock_or_failure(locker& locks, std::string name,
                                                                    lock_options opt) {
    std::pair<lock_guard, std::string> out;
    try {
        out.first = co_await locks.co_lock(std::move(name), opt);
    } catch (std::exception const& e) {
        out.second = e.what();
    }
    co_return out;
}

// EVAL of a script that keeps the server busy (other clients get BUSY) for `d`.
resp3::request busy_script(std::chrono::milliseconds d) {
    return command("EVAL",
                   "local s = redis.call('TIME') while true do local n = redis.call('TIME') "
                   "if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then break "
                   "end end return 1",
                   0, d.count() * 1000);
}

} // namespace

// ------------------------------------------------------------------------ keys expire

TEST_CASE("every key a lock writes expires: 200 names leave no key without a TTL, and none "
          "once their leases have passed") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        std::string const prefix = unique_key("expiry") + ":";
        locker locks{conn, prefix};
        auto const opt = lease(1500ms);
        int free_keys_with_ttl = 0;
        for (int i = 0; i < 200; ++i) {
            std::string const name = "invoice:" + std::to_string(i);
            auto g = co_await locks.co_lock(name, opt);
            CHECK(co_await g.release());
            // Right after the release: the lock key is free, and expires within the lease
            // (checked per name, so a slow machine cannot let one lapse unseen).
            auto const freed = co_await read_lock(conn, name, prefix);
            CHECK(freed.kind == 'F');
            auto const pttl = co_await integer(conn, command("PTTL", prefix + "{" + name + "}"));
            CHECK(pttl <= 1500);
            free_keys_with_ttl += pttl > 0 ? 1 : 0;
        }
        CHECK(free_keys_with_ttl == 200);
        // Nothing else under the prefix has been written without a ttl.
        auto const keys = shared_server().cli_lines(strings("KEYS", prefix + "*"));
        resp3::request pttls;
        pttls.push("PING");
        for (auto const& k : keys)
            pttls.push("PTTL", k);
        auto const replies = co_await conn.co_exec(std::move(pttls));
        int without_ttl = 0;
        for (std::size_t i = 1; i < replies.size(); ++i)
            without_ttl += replies[i].as_integer().value_or(-3) == -1 ? 1 : 0;
        CHECK(without_ttl == 0);
        // The locks' keys go with their leases; the locker's holder record lives on for two
        // minutes after the last lease it covered (it names the holder for status).
        co_await eventually(
            [&] { return shared_server().cli(strings("KEYS", prefix + "{*")).empty(); }, 5s, 100ms);
        CHECK(shared_server().cli(strings("KEYS", prefix + "{*")).empty());
        CHECK(shared_server().cli_lines(strings("KEYS", prefix + "*")) ==
              strings(prefix + "locker:" + locks.id()));
        auto const record_ttl =
            co_await integer(conn, command("PTTL", prefix + "locker:" + locks.id()));
        CHECK(record_ttl > 0);
        CHECK(record_ttl <= 1500 + 120'000);
        conn.close();
    });
}

TEST_CASE("wait_replicas on a server without replicas: the lock is released again and the call "
          "fails with replicas_not_acknowledged, waiting or not") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        std::string const name = unique_key("wait-replicas");
        auto opt = lease(5s);
        opt.wait_replicas = 1;
        opt.replicas_timeout = 100ms;
        for (bool const wait : {false, true}) {
            auto const start = steady::now();
            try {
                if (wait)
                    co_await locks.co_lock(name, opt);
                else
                    co_await locks.co_try_lock(name, opt);
                FAIL("the lock was taken without a replica to acknowledge it");
            } catch (system_error const& e) {
                CHECK(e.code() == error::replicas_not_acknowledged);
                CHECK(std::string(e.what()).find("0 of 1 replicas acknowledged the lock within "
                                                 "100 ms") != std::string::npos);
            }
            // It waited for WAIT's timeout once, and did not try again.
            CHECK(ms_since(start) >= 90);
            CHECK(ms_since(start) < 3000);
            // Released: free (with its fence kept), and taken at once without the option.
            auto const after = co_await read_lock(probe, name);
            CHECK(after.kind == 'F');
        }
        auto g = co_await locks.co_lock(name, lease(5s));
        CHECK(g.owns());
        co_await g.release();
    });
}

TEST_CASE("the free key keeps the last fence for the rest of the lease, and fences keep "
          "increasing after it lapsed") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        lock_options opt = lease(300ms);
        opt.renew_interval = 100ms;
        auto g = co_await locks.co_lock(name, opt);
        auto const first = g.fence();
        // Renewed for three leases; extend() moves the lease too.
        CHECK(co_await stays([&] { return g.owns(); }, 900ms));
        auto const lock_pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(lock_pttl > 0);
        CHECK(lock_pttl <= 300);
        bool const extended = co_await g.extend(5000ms);
        CHECK(extended);
        auto const extended_pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(extended_pttl > 4000);
        CHECK(co_await g.release());
        // Free with the rest of that lease: the next holder's fence is one more.
        auto const freed = co_await read_lock(probe, name);
        CHECK(freed.kind == 'F');
        CHECK(freed.fence == first);
        auto const free_pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(free_pttl > 4000);
        CHECK(free_pttl <= 5000);
        auto second = co_await locks.co_lock(name, opt);
        CHECK(second.fence() == first + 1);
        CHECK(co_await second.release());
        co_await probe.co_exec(command("PEXPIRE", lock_key(name), 200));

        // Once the key has lapsed, the next fence comes from the server's clock, which is
        // past every earlier fence.
        bool const gone = co_await exists_becomes(probe, lock_key(name), 0, 6000ms) == 0;
        CHECK(gone);
        auto next = co_await locks.co_lock(name, lease(300ms));
        CHECK(next.fence() > first + 1);
        CHECK(co_await next.release());
    };
    run_lock_test<one_locker>("fence-expiry", scenario);
}

// ------------------------------------------------------------------------ huge durations

TEST_CASE("wait_timeout = milliseconds::max() waits (it does not give up at once)") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        std::string const name = unique_key("wait-max");
        auto holder = co_await locks.co_lock(name, lease(5000ms));

        lock_options forever = waiting_up_to(lease(5000ms), std::chrono::milliseconds::max());
        asio::steady_timer timer(ctx);
        timer.expires_after(300ms);
        auto const start = steady::now();
        auto raced = co_await (locks.co_lock(name, forever) || timer.async_wait(as_tuple));
        CHECK(raced.index() == 1); // still waiting when the timer fired
        CHECK(ms_since(start) >= 250);

        // And it takes the lock once it is free.
        bool acquired = false;
        asio::co_spawn(ctx, take_and_release(locks, name, forever, acquired), asio::detached);
        REQUIRE(co_await eventually([&] { return locks.waiting() == 1; }));
        co_await holder.release();
        bool const done = co_await finishes(acquired, 3000ms);
        CHECK(done);
        conn.close();
    });
}

TEST_CASE("max_hold = milliseconds::max() keeps renewing beyond the ttl") {
    run_with_locker(shared_server().config(), [](locker& locks) -> asio::awaitable<void> {
        lock_options opt = lease(300ms);
        opt.renew_interval = 100ms;
        opt.max_hold = std::chrono::milliseconds::max();
        auto g = co_await locks.co_lock(unique_key("hold-max"), opt);
        CHECK(co_await stays([&] { return g.owns() && !g.lost(); }, 1000ms));
        CHECK_FALSE(g.lost());
        CHECK(co_await g.release());
    });
}

TEST_CASE("a backoff of milliseconds::max() neither overflows nor delays a woken waiter") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn_a{ctx.get_executor(), shared_server().config()};
        redis::connection conn_b{ctx.get_executor(), shared_server().config()};
        locker a{conn_a};
        locker b{conn_b};
        std::string const name = unique_key("backoff-max");
        auto holder = co_await a.co_lock(name, lease(5000ms));

        lock_options patient = lease(5000ms);
        patient.retry.initial = std::chrono::hours{1};
        patient.retry.max = std::chrono::milliseconds::max();
        patient.retry.multiplier = 1e300; // pow() overflows to infinity after one step
        patient.wait_timeout = std::chrono::milliseconds::max();
        bool acquired = false;
        asio::co_spawn(ctx, take_and_release(b, name, patient, acquired), asio::detached);
        co_await numsub_becomes(conn_a, wake_channel(name), 1);
        co_await holder.release(); // the release's message wakes the waiter
        bool const done = co_await finishes(acquired, 3000ms);
        CHECK(done);
        conn_a.close();
        conn_b.close();
    });
}

// ------------------------------------------------------------------------ names by value

TEST_CASE("the name is copied at the call: awaitables and deferred operations outlive the "
          "caller's string") {
    run_with_locker(shared_server().config(), [](locker& locks) -> asio::awaitable<void> {
        // Long enough to live on the heap, where ASan sees a read after it is freed.
        std::string const expected = unique_key("by-value") + std::string(100, 'x');

        std::optional<asio::awaitable<lock_guard>> pending_lock;
        std::optional<asio::awaitable<std::optional<lock_guard>>> pending_try;
        {
            std::string name = expected;
            pending_lock.emplace(locks.co_lock(name, lease(5000ms)));
            name += "-try";
            pending_try.emplace(locks.co_try_lock(name, lease(5000ms)));
            name.assign(300, 'z'); // reallocates: the old buffer is freed
        }
        auto g = co_await std::move(*pending_lock);
        CHECK(g.name() == expected);
        auto t = co_await std::move(*pending_try);
        REQUIRE(t.has_value());
        CHECK(t->name() == expected + "-try");

        auto deferred_op = [&] {
            std::string name = expected + "-deferred";
            return locks.async_lock(name, lease(5000ms), asio::deferred);
        }();
        auto [ec, d] = co_await std::move(deferred_op)(as_tuple);
        CHECK_FALSE(ec);
        CHECK(d.name() == expected + "-deferred");

        CHECK(co_await g.release());
        bool const released_try = co_await t->release();
        CHECK(released_try);
        CHECK(co_await d.release());
    });
}

// ------------------------------------------------------------------------ transient states

TEST_CASE("BUSY: a waiting co_lock waits out a long script instead of failing") {
    redis_server server;
    server.cli(strings("CONFIG", "SET", "busy-reply-threshold", "50"));
    run_state_test(
        server,
        [&](asio::io_context& ctx, redis::connection& conn, redis::connection& blocker,
            redis::connection& probe, locker& locks) -> asio::awaitable<void> {
            // A script that keeps the server busy for 1.5 s.
            bool script_done = false;
            asio::co_spawn(ctx,
                           then_set(blocker.async_exec(busy_script(1500ms), as_tuple), script_done),
                           asio::detached);
            bool const busy = co_await server_says(probe, command("PING"), "BUSY", 2000ms);
            REQUIRE(busy);

            lock_options opt = waiting_up_to(lease(5000ms), 10'000ms);
            // Caught, so that a failure still waits for the script (its coroutine uses our locals).
            auto [g, failure] = co_await lock_or_failure(locks, unique_key("busy"), opt);
            co_await finishes(script_done, 5000ms);
            REQUIRE(failure.empty());
            CHECK(g.owns());
            // Nothing else on the connection was disturbed by the refusals meanwhile.
            auto pong = co_await conn.co_exec(command("ECHO", "still in step"));
            CHECK(pong.at(0).as_string() == "still in step");
            CHECK(co_await g.release());

            // co_try_lock makes one attempt: a BUSY server is an error for it, naming the state.
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    co_await blocker.async_exec(busy_script(500ms), as_tuple);
                },
                asio::detached);
            bool const busy_again = co_await server_says(probe, command("PING"), "BUSY", 2000ms);
            REQUIRE(busy_again);
            std::string message;
            try {
                co_await locks.co_try_lock(unique_key("busy-try"), opt);
            } catch (system_error const& e) {
                message = e.what();
            }
            CHECK(message.find("BUSY") != std::string::npos);
            // The script ends: the server answers again.
            CHECK(co_await eventually(
                [&]() -> asio::awaitable<bool> {
                    auto [ec, r] = co_await probe.async_exec(command("PING"), as_tuple);
                    co_return !ec;
                },
                2000ms, 10ms));
        });
}

TEST_CASE("LOADING: a waiting co_lock waits while the server loads its data") {
    redis_server_options o;
    o.extra_args = strings("--enable-debug-command", "yes");
    redis_server server(o);
    // About 1 s of loading, with clients answered (LOADING) meanwhile.
    server.cli(strings("DEBUG", "POPULATE", "10000"));
    server.cli(strings("CONFIG", "SET", "key-load-delay", "100"));
    server.cli(strings("CONFIG", "SET", "loading-process-events-interval-bytes", "1024"));
    run_state_test(
        server,
        [&](asio::io_context& ctx, redis::connection&, redis::connection& reloader,
            redis::connection& probe, locker& locks) -> asio::awaitable<void> {
            bool reloaded = false;
            asio::co_spawn(
                ctx, then_set(reloader.async_exec(command("DEBUG", "RELOAD"), as_tuple), reloaded),
                asio::detached);
            bool const loading =
                co_await server_says(probe, command("GET", "x"), "LOADING", 3000ms);
            REQUIRE(loading);

            lock_options opt = waiting_up_to(lease(5000ms), 20'000ms);
            // Caught, so that a failure still waits for the reload (its coroutine uses our locals).
            auto [g, failure] = co_await lock_or_failure(locks, unique_key("loading"), opt);
            co_await finishes(reloaded, 20'000ms);
            REQUIRE(failure.empty());
            CHECK(g.owns());
            CHECK(co_await g.release());
        });
}

TEST_CASE("READONLY and MASTERDOWN (a failover in progress): a waiting co_lock waits for a "
          "writable primary") {
    redis_server server;
    auto const nowhere = std::to_string(unused_port());
    for (bool serve_stale : {true, false}) {
        CAPTURE(serve_stale);
        server.cli(
            strings("CONFIG", "SET", "replica-serve-stale-data", serve_stale ? "yes" : "no"));
        server.cli(strings("REPLICAOF", "127.0.0.1", nowhere));
        run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), server.config()};
            co_await conn.async_connect(asio::use_awaitable);
            locker locks{conn};
            bool promoted = false;
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    co_await sleep_for(500ms);
                    server.cli(strings("REPLICAOF", "NO", "ONE"));
                    promoted = true;
                },
                asio::detached);
            lock_options opt = waiting_up_to(lease(5000ms), 10'000ms);
            auto g = co_await locks.co_lock(unique_key("replica"), opt);
            CHECK(g.owns());
            CHECK(promoted);
            CHECK(co_await g.release());
            conn.close();
        });
    }
}

// ------------------------------------------------------------------------ renewal

TEST_CASE("a connection lost for less than the ttl while held: the renewal retries on the new "
          "connection and the guard survives") {
    fault_proxy proxy(shared_server().port());
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(shared_server());
        cfg.port = proxy.port();
        cfg.health_check_interval = 0ms; // only the proxy decides when the connection ends
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        std::string const name = unique_key("renew-reconnect");

        lock_options opt = lease(2000ms);
        opt.renew_interval = 1500ms;
        auto g = co_await locks.co_lock(name, opt);
        auto const deadline = g.lease_expiry();
        // The renewal at +1.5 s disappears into the black hole; 200 ms before the lease ends
        // the connection is closed (its extend fails), and a new one works at once.
        proxy.set_black_hole(true);
        asio::steady_timer at(ctx);
        at.expires_at(deadline - 200ms);
        co_await at.async_wait(asio::use_awaitable);
        proxy.set_black_hole(false);
        at.expires_at(deadline + 500ms);
        co_await at.async_wait(asio::use_awaitable);

        CHECK_FALSE(g.lost());
        CHECK(g.owns());
        CHECK(g.lease_expiry() > deadline);
        auto const held = co_await held_by(probe, name);
        CHECK(held == g.token());
        CHECK(conn.reconnect_count() >= 1);
        CHECK(co_await g.release());
        conn.close();
        probe.close();
    });
}

// ------------------------------------------------------------------------ ACL

TEST_CASE("an ACL user without channel permissions: locks work by polling, and no reply "
          "goes to the wrong caller") {
    // Redis 7 gives a new user no channels (acl-pubsub-default resetchannels): the waiter's
    // SUBSCRIBE and the release's PUBLISH are refused.
    shared_server().cli(
        strings("ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels"));
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.username = "nochannels";
        cfg.password = "pw";
        redis::connection conn{ctx.get_executor(), cfg};
        locker locks{conn};
        std::string const name = unique_key("acl-a");
        lock_options opt = lease(5000ms);
        opt.retry.max = 100ms; // polling is all the waiter has

        auto holder = co_await locks.co_lock(name, opt);
        bool waiter_done = false;
        std::int64_t waiter_fence = 0;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto w = co_await locks.co_lock(name, opt);
                waiter_fence = w.fence();
                co_await w.release();
                waiter_done = true;
            },
            asio::detached);
        REQUIRE(co_await eventually([&] { return locks.waiting() == 1; })); // the waiter waits

        int unlocked = 0;
        for (int i = 0; i < 100; ++i) {
            auto b = co_await locks.co_try_lock(name + ":b" + std::to_string(i), opt);
            REQUIRE(b.has_value());
            bool const released = co_await b->release();
            unlocked += released ? 1 : 0;
        }
        CHECK(unlocked == 100);
        CHECK(co_await holder.release());
        bool const done = co_await finishes(waiter_done, 3000ms);
        CHECK(done);
        CHECK(waiter_fence > holder.fence());
        conn.close();
    });
    shared_server().cli(strings("ACL", "DELUSER", "nochannels"));
}

namespace {

// What the documented ACL list allows, played by `user`: lock, wake-up, renew, extend, unlock, a
// lapsed lease handed to the queue's head, status and a forced unlock. The scripts are flushed
// first, so that a user who may load them does; `preload`: an administrator loads the library
// instead.
void play_acl_scenario(std::string const& user, bool preload, log_lines& logged) {
    shared_server().cli(strings("FUNCTION", "FLUSH"));
    shared_server().cli(strings("SCRIPT", "FLUSH"));
    if (preload)
        shared_server().cli(
            strings("FUNCTION", "LOAD", functions_library_for(shared_server().config()).code));
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = as_user(shared_server(), user);
        cfg.log = logged.hook();
        cfg.min_log_level = log_level::warning;
        redis::connection conn_a{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), cfg};
        co_await conn_a.async_connect(asio::use_awaitable);
        CHECK_FALSE(conn_a.server_run_id().empty()); // INFO is allowed
        locker a{conn_a};
        locker b{conn_b};
        std::string const name = unique_key("acl-listed");
        lock_options opt = lease(600ms);
        opt.renew_interval = 200ms;

        auto holder = co_await a.co_lock(name, opt);
        bool waiter_done = false;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto w = co_await b.co_lock(name, opt);
                bool const released = co_await w.release();
                waiter_done = released;
            },
            asio::detached);
        // Renewed a few times meanwhile.
        CHECK(co_await stays([&] { return holder.owns(); }, 900ms));
        bool const extended = co_await holder.extend(2000ms);
        CHECK(extended);
        CHECK(co_await holder.release());
        bool const done = co_await finishes(waiter_done, 3000ms);
        CHECK(done);

        // A lease that lapses (a dead holder) with a process queued: the lapsed lock goes to the
        // queue's head.
        {
            lock_options dying = lease(600ms);
            dying.auto_renew = false;
            auto dead = co_await a.co_lock(name, dying);
            auto after_lapse = co_await b.co_lock(name, opt);
            CHECK(after_lapse.owns());
            CHECK(after_lapse.fence() > dead.fence());
            CHECK(co_await after_lapse.release());
        }

        // Status names the holder (its record was written), and a forced unlock reaches it on
        // its channel: a 30 s lease is not renewed before the message tells it.
        auto again = co_await a.co_lock(name, lease(30'000ms));
        auto const st = co_await b.co_status(name);
        CHECK(st.held());
        CHECK(st.holder_id == a.id());
        REQUIRE(st.holder.has_value());
        CHECK(st.holder->client_name == cfg.client_name);
        auto const forced_at = steady::now();
        bool const ended = co_await b.co_force_unlock(name);
        CHECK(ended);
        co_await again.wait_lost();
        CHECK(ms_since(forced_at) < 2000);
        conn_a.close();
        conn_b.close();
    });
}

} // namespace

TEST_CASE("an ACL user with exactly the permissions the README lists: lock, wake-up, renew, "
          "extend, unlock; by FCALL, the library loaded by the user's first call") {
    set_lock_user(shared_server(), "lockuser"); // exactly the documented permissions
    auto const before = shared_server().cli(strings("INFO", "commandstats"));
    log_lines logged;
    play_acl_scenario("lockuser", false, logged);
    auto const after = shared_server().cli(strings("INFO", "commandstats"));
    CHECK(command_calls(after, "function|load") > command_calls(before, "function|load"));
    CHECK(command_calls(after, "evalsha") == command_calls(before, "evalsha"));
    CHECK(command_calls(after, "eval") == command_calls(before, "eval"));
    CHECK_MESSAGE(logged.count(log_level::warning, {"Redis Functions"}) == 0, logged.dump());
    shared_server().cli(strings("ACL", "DELUSER", "lockuser"));
}

TEST_CASE("an ACL user allowed FCALL but no code of its own (no EVAL, EVALSHA, SCRIPT LOAD or "
          "FUNCTION LOAD): the same, once an administrator loaded colock's library; before, "
          "its call fails naming both refusals") {
    set_lock_user(shared_server(), "lockfcall",
                  strings("-evalsha", "-eval", "-script", "-function"));
    shared_server().cli(strings("FUNCTION", "FLUSH"));
    log_lines refused_log;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = as_user(shared_server(), "lockfcall");
        cfg.log = refused_log.hook();
        cfg.min_log_level = log_level::warning;
        redis::connection conn{ctx.get_executor(), cfg};
        locker locks{conn};
        auto const name = unique_key("acl-fcall-unloaded");
        auto const failed = co_await failure_of(locks.co_try_lock(name, lease(5000ms)));
        CHECK(failed.code == redis::error::server_error);
        INFO(failed.what);
        CHECK(failed.what.find(name) != std::string::npos);
        CHECK(failed.what.find("'evalsha'") != std::string::npos);
        CHECK(failed.what.find("Redis Functions were refused") != std::string::npos);
        // Nothing was written, and nothing is left.
        CHECK(shared_server().cli(strings("EXISTS", lock_key(name))) == "0");
        conn.close();
    });
    // The fall-back was logged once, with the server's words for FUNCTION LOAD.
    CHECK_MESSAGE(
        refused_log.count(log_level::warning, {"refused Redis Functions", "'function|load'"}) == 1,
        refused_log.dump());

    auto const before = shared_server().cli(strings("INFO", "commandstats"));
    log_lines logged;
    play_acl_scenario("lockfcall", true, logged);
    auto const after = shared_server().cli(strings("INFO", "commandstats"));
    CHECK(command_calls(after, "fcall") > command_calls(before, "fcall"));
    CHECK(command_calls(after, "evalsha") == command_calls(before, "evalsha"));
    CHECK_MESSAGE(logged.count(log_level::warning, {"Redis Functions"}) == 0, logged.dump());
    shared_server().cli(strings("ACL", "DELUSER", "lockfcall"));
}

TEST_CASE("an ACL user refused Functions (no FCALL, no FUNCTION LOAD): the connection falls back "
          "to EVALSHA once, logs why, and does all the same") {
    set_lock_user(shared_server(), "locksha", strings("-fcall", "-function"));
    auto const before = shared_server().cli(strings("INFO", "commandstats"));
    log_lines logged;
    play_acl_scenario("locksha", false, logged);
    auto const after = shared_server().cli(strings("INFO", "commandstats"));
    CHECK(command_calls(after, "evalsha") > command_calls(before, "evalsha"));
    CHECK(command_calls(after, "script|load") > command_calls(before, "script|load"));
    CHECK(command_calls(after, "fcall") == command_calls(before, "fcall"));
    CHECK(command_calls(after, "eval") == command_calls(before, "eval"));
    // Once per connection (the scenario has two), with the server's words.
    CHECK_MESSAGE(logged.count(log_level::warning, {"refused Redis Functions", "'fcall'"}) == 2,
                  logged.dump());
    shared_server().cli(strings("ACL", "DELUSER", "locksha"));
}

// ------------------------------------------------------------------------ lifetime

TEST_CASE("io_context::run() returns once the work is done: no release deadline keeps it "
          "running") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
    bool finished = false;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            auto g = co_await locks.co_lock(unique_key("run-returns"), lease(5000ms));
            bool const released = co_await g.release();
            CHECK(released);
            auto const dropped_name = unique_key("run-returns");
            {
                auto dropped = co_await locks.co_lock(dropped_name, lease(5000ms));
            } // released in the background
            CHECK(co_await free_becomes(conn, dropped_name));
            conn.close();
            finished = true;
        },
        asio::detached);
    auto const start = steady::now();
    ctx.run_for(20s);
    CHECK(finished);
    CHECK(ms_since(start) < 2500); // the release deadline is 5 s
}

TEST_CASE("release() of a guard already known lost returns false at once, server down or not") {
    redis_server server;
    run_with_locker(fast_config(server), [&](locker& locks) -> asio::awaitable<void> {
        lock_options opt = lease(600ms);
        opt.renew_interval = 200ms;
        auto g = co_await locks.co_lock(unique_key("unlock-lost"), opt);
        server.kill();
        // Until the renewal has marked it (wait_lost completes), lost() may already say so
        // from the clock while release() still waits for the server.
        co_await (g.wait_lost() || sleep_for(3s));
        REQUIRE(g.lost());
        auto const start = steady::now();
        CHECK_FALSE(co_await g.release());
        CHECK(ms_since(start) < 500);
    });
}
