// The lock against a real redis-server: acquire/release round trips and what they leave in
// Redis, fences, the key and channel names, SCRIPT FLUSH, every completion token, server
// errors, arguments refused before any I/O, wait_timeout, mutual exclusion under contention
// (several connections and a second process), and what the server pays per lock.
#include <colock/locker.hpp>

#include "lock_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

bool contains(std::string_view text, std::string_view part) {
    return text.find(part) != std::string_view::npos;
}

lock_options short_lock() {
    lock_options opt;
    opt.ttl = 5000ms;
    return opt;
}

// `op` fails with a server error whose text names lock `name` and carries the server's WRONGTYPE.
template <class T>
asio::awaitable<void> check_wrongtype(asio::awaitable<T> op, std::string const& name) {
    auto const [code, what] = co_await failure_of(std::move(op));
    CHECK(code == redis::error::server_error);
    CHECK(contains(what, name));
    CHECK(contains(what, "WRONGTYPE"));
}

// A completion handler for (error_code, T): keeps both in `result` and `into`, then sets `done`.
template <class T>
auto store_into(error_code& result, T& into, bool& done) {
    return [&result, &into, &done](error_code ec, T value) {
        result = ec;
        into = std::move(value);
        done = true;
    };
}

} // namespace

TEST_CASE("co_lock and unlock: the key holds the token while held, and is free after") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        CHECK(locks.key_prefix() == "colock:");

        auto g = co_await locks.co_lock(name);
        CHECK(g.owns());
        CHECK(static_cast<bool>(g));
        CHECK_FALSE(g.lost());
        CHECK(g.name() == name);
        CHECK(g.token().size() == 32);
        CHECK(g.token().find_first_not_of("0123456789abcdef") == std::string::npos);
        CHECK(g.fence() >= 1);

        auto const held = co_await read_lock(probe, name);
        CHECK(held.kind == 'H');
        CHECK(held.token == g.token());
        CHECK(held.fence == g.fence());
        CHECK(held.owner.size() == 16);
        CHECK_FALSE(held.queued);
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 20'000); // default ttl 30 s
        CHECK(pttl <= 30'000);

        CHECK(co_await g.release());
        CHECK_FALSE(g.owns());
        CHECK_FALSE(g.lost());
        // Free, keeping the last fence for the rest of the lease, so the key still expires.
        auto const freed = co_await read_lock(probe, name);
        CHECK(freed.kind == 'F');
        CHECK(freed.fence == g.fence());
        auto const freed_pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(freed_pttl > 0);
        CHECK(freed_pttl <= 30'000);
        CHECK_FALSE(co_await g.release());

        // Every co_lock draws a fresh token.
        auto g2 = co_await locks.co_lock(name);
        CHECK(g2.token() != g.token());
        CHECK(g2.fence() == g.fence() + 1); // one more than the free key's
        co_await check_held_then_release(probe, g2, name);
    };
    run_lock_test<one_locker>("roundtrip", scenario);
}

TEST_CASE("co_try_lock: empty while held elsewhere, and a held lock is never stolen") {
    auto scenario = [](redis::connection&, redis::connection&, redis::connection& probe, locker& a,
                       locker& b, std::string const& name) -> asio::awaitable<void> {
        auto first = co_await a.co_try_lock(name, short_lock());
        REQUIRE(first.has_value());
        CHECK(first->owns());

        // Another connection, and the same locker (a new call has a new token): both refused.
        auto from_b = co_await b.co_try_lock(name, short_lock());
        CHECK_FALSE(from_b.has_value());
        auto from_a = co_await a.co_try_lock(name, short_lock());
        CHECK_FALSE(from_a.has_value());
        // And a waiting co_lock gives up rather than taking it.
        lock_options brief = waiting_up_to(short_lock(), 200ms);
        error_code waited = co_await error_of(b.co_lock(name, brief));
        CHECK(waited == error::timeout);

        // Still the first holder's key, with its lease.
        auto const held = co_await held_by(probe, name);
        CHECK(held == first->token());
        CHECK(first->owns());
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 0);

        bool const released = co_await first->release();
        CHECK(released);
        auto next = co_await b.co_try_lock(name, short_lock());
        REQUIRE(next.has_value());
        CHECK(next->fence() > first->fence());
        co_await check_held_then_release(probe, *next, name);
    };
    run_lock_test<two_lockers>("try", scenario);
}

TEST_CASE("fences strictly increase across successive holders of one name") {
    auto scenario = [](redis::connection&, redis::connection&, redis::connection& probe, locker& a,
                       locker& b, std::string const& name) -> asio::awaitable<void> {
        std::int64_t last = 0;
        for (int i = 0; i < 6; ++i) {
            locker& who = i % 2 ? a : b;
            auto g = co_await who.co_lock(name, short_lock());
            CHECK(g.fence() > last);
            last = g.fence();
            auto const stored = co_await read_lock(probe, name);
            CHECK(stored.fence == g.fence());
            CHECK(co_await g.release());
        }

        // A holder that lets its lease run out (no renewal, no unlock) is followed by a
        // larger fence too.
        lock_options lapse;
        lapse.ttl = 150ms;
        lapse.auto_renew = false;
        auto lapsed = co_await a.co_lock(name, lapse);
        CHECK(lapsed.fence() > last);
        last = lapsed.fence();
        auto after = co_await b.co_lock(name, short_lock()); // waits for the expiry
        CHECK(after.fence() > last);
        CHECK(after.fence() > lapsed.fence());
        CHECK(co_await after.release());
        CHECK_FALSE(
            co_await lapsed.release()); // not ours any more; and it must not delete the other's
    };
    run_lock_test<two_lockers>("fence", scenario);
}

TEST_CASE("keys and wake channels use the hash-tag scheme: p{name}, p{name}:q, p{name}:qd, "
          "p{name}:w:<locker>; a release with nobody queued publishes nothing") {
    struct wake_counter final : redis::push_listener {
        std::string channel;
        int messages = 0;
        void on_push(resp3::value const& v) override {
            if (v.elements.size() == 3 && v.elements[0].as_string() == "message" &&
                v.elements[1].as_string() == channel)
                ++messages;
        }
    };
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn_a{ctx.get_executor(), shared_server().config()};
        redis::connection conn_b{ctx.get_executor(), shared_server().config()};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        redis::connection listener_conn{ctx.get_executor(), shared_server().config()};
        locker a{conn_a};
        locker b{conn_b};
        std::string const name = unique_key("acct") + ":42";
        std::string const key = "colock:{" + name + "}";

        auto g = co_await a.co_lock(name, short_lock());
        auto r = co_await probe.co_exec(command("TYPE", key));
        CHECK(r.at(0).as_string() == "string");
        // Uncontended, nothing else carries the tag.
        r = co_await probe.co_exec(command("KEYS", "*{" + name + "}*"));
        CHECK(r.at(0).elements.size() == 1);

        // A waiter on another connection queues its locker (p{name}:q, p{name}:qd, both
        // expiring) and subscribes to its own channel p{name}:w:<its locker>.
        bool waiter_done = false;
        std::int64_t waiter_fence = 0;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto w = co_await b.co_lock(name, short_lock());
                waiter_fence = w.fence();
                co_await w.release();
                waiter_done = true;
            },
            asio::detached);
        auto const subscribers = co_await numsub_becomes(probe, key + ":w:*", 1);
        CHECK(subscribers == 1);
        r = co_await probe.co_exec(command("PUBSUB", "CHANNELS", key + ":w:*"));
        REQUIRE(r.at(0).elements.size() == 1);
        std::string const channel(r.at(0).elements[0].as_string().value_or(""));
        auto const queued = co_await probe.co_exec(command("LRANGE", key + ":q", 0, -1));
        REQUIRE(queued.at(0).elements.size() == 1);
        std::string const waiting_locker(queued.at(0).elements[0].as_string().value_or("?"));
        CHECK(channel == key + ":w:" + waiting_locker);
        auto const queue_pttl = co_await integer(probe, command("PTTL", key + ":q"));
        CHECK(queue_pttl > 0);
        CHECK(queue_pttl <= 3000);
        auto const deadlines_pttl = co_await integer(probe, command("PTTL", key + ":qd"));
        CHECK(deadlines_pttl > 0);
        CHECK(deadlines_pttl <= 3000);
        auto const marked = co_await read_lock(probe, name);
        CHECK(marked.queued);

        // The release hands the lock to that locker and publishes on its channel; the
        // waiter's own release, with nobody queued, publishes nothing.
        auto counter = std::make_shared<wake_counter>();
        counter->channel = channel;
        listener_conn.add_push_listener(counter);
        co_await listener_conn.async_subscribe(strings(channel), asio::use_awaitable);
        co_await listener_conn.co_exec(command("PING"));
        CHECK(co_await g.release());
        co_await poll_until([&] { return waiter_done; }, 200, 10ms);
        co_await listener_conn.co_exec(command("PING"));
        CHECK(waiter_done);
        CHECK(waiter_fence == g.fence() + 1);
        CHECK(counter->messages == 1);
        r = co_await probe.co_exec(command("KEYS", "*{" + name + "}*"));
        CHECK(r.at(0).elements.size() == 1); // the free lock key only: the queue is gone
        conn_a.close();
        conn_b.close();
        probe.close();
        listener_conn.close();
    });
}

TEST_CASE("a custom key prefix names the keys, and separates lockers") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        redis::connection probe{ctx.get_executor(), shared_server().config()};
        locker mine{conn, "myapp:locks:"};
        locker plain{conn};
        CHECK(mine.key_prefix() == "myapp:locks:");
        std::string const name = unique_key("prefix");

        auto g = co_await mine.co_lock(name, short_lock());
        auto const held = co_await read_lock(probe, name, "myapp:locks:");
        CHECK(held.token == g.token());
        CHECK(held.fence == g.fence());
        auto const plain_key = co_await integer(probe, command("EXISTS", lock_key(name)));
        CHECK(plain_key == 0);

        // Same name, other prefix: another lock.
        auto other = co_await plain.co_try_lock(name, short_lock());
        REQUIRE(other.has_value());
        auto const held_plain = co_await held_by(probe, name);
        CHECK(held_plain == other->token());
        bool const r1 = co_await other->release();
        bool const r2 = co_await g.release();
        CHECK(r1);
        CHECK(r2);
        auto const free = co_await lock_free(probe, name, "myapp:locks:");
        CHECK(free);
        conn.close();
        probe.close();
    });
}

TEST_CASE("FUNCTION FLUSH and SCRIPT FLUSH while locks are in use, called by FCALL and by "
          "EVALSHA: lock, renew, extend and unlock reload their scripts") {
    redis_server server;
    auto scenario = [&](redis::connection&, redis::connection&, redis::connection& probe,
                        locker& locks, locker& other,
                        std::string const& name) -> asio::awaitable<void> {
        auto flush = [&] {
            server.cli(strings("FUNCTION", "FLUSH"));
            server.cli(strings("SCRIPT", "FLUSH"));
        };

        lock_options opt;
        opt.ttl = 600ms;
        opt.renew_interval = 150ms;
        auto g = co_await locks.co_lock(name, opt);

        // The renewal meets a missing function (or NOSCRIPT) and must reload, or the 600 ms
        // lease runs out: the key's
        // PTTL rises above its lowest reading since the flush only by a renewal run after it.
        flush();
        auto lowest = co_await integer(probe, command("PTTL", lock_key(name)));
        auto const renewed = co_await eventually(
            [&]() -> asio::awaitable<bool> {
                auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
                bool const up = pttl > lowest + 50;
                lowest = std::min(lowest, pttl);
                co_return up;
            },
            2000ms, 10ms);
        CHECK(renewed);
        CHECK(g.owns());
        CHECK_FALSE(g.lost());
        auto held = co_await held_by(probe, name);
        CHECK(held == g.token());

        flush();
        bool const extended = co_await g.extend(5000ms);
        CHECK(extended);
        auto const pttl = co_await integer(probe, command("PTTL", lock_key(name)));
        CHECK(pttl > 3000);

        flush();
        auto refused = co_await other.co_try_lock(name, opt);
        CHECK_FALSE(refused.has_value());

        flush();
        CHECK(co_await g.release());
        auto const free = co_await lock_free(probe, name);
        CHECK(free);

        flush();
        auto g2 = co_await other.co_lock(name, opt);
        CHECK(g2.owns());
        CHECK(g2.fence() > g.fence());
        CHECK(co_await g2.release());

        // Many first calls at once after a flush: each loads what it calls in its own request,
        // and a library loaded by another meanwhile ("already exists") fails none of them.
        flush();
        int won = 0, done = 0;
        auto const ex = co_await asio::this_coro::executor;
        for (int i = 0; i < 8; ++i)
            asio::co_spawn(
                ex,
                [&, i]() -> asio::awaitable<void> {
                    auto t = co_await locks.co_try_lock(name + ":many:" + std::to_string(i), opt);
                    if (t && co_await t->release())
                        ++won;
                    ++done;
                },
                asio::detached);
        co_await poll_until([&] { return done == 8; }, 300, 10ms);
        CHECK(won == 8);
    };
    run_lock_test<two_lockers>(server.config(), "noscript", scenario);
    auto by_sha = server.config();
    by_sha.use_functions = false;
    run_lock_test<two_lockers>(by_sha, "noscript-sha", scenario);
    // Each way reloaded what it calls, and nothing was sent with its source.
    auto const stats = server.cli(strings("INFO", "commandstats"));
    CHECK(contains(stats, "cmdstat_fcall:"));
    CHECK(contains(stats, "cmdstat_function|load:"));
    CHECK(contains(stats, "cmdstat_evalsha:"));
    CHECK(contains(stats, "cmdstat_script|load:"));
    CHECK_FALSE(contains(stats, "cmdstat_eval:"));
}

TEST_CASE("async_lock and async_try_lock with a plain callback, deferred and as_tuple") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        bool done = false;
        error_code result = asio::error::would_block;
        lock_guard guard;
        locks.async_lock(name, short_lock(), store_into(result, guard, done));
        co_await poll_until([&] { return done; }, 500, 10ms);
        REQUIRE(done);
        CHECK_FALSE(result);
        CHECK(guard.owns());
        auto const held = co_await held_by(probe, name);
        CHECK(held == guard.token());

        // One attempt on a held lock: success, with nothing in it.
        done = false;
        std::optional<lock_guard> attempt;
        locks.async_try_lock(name, short_lock(), store_into(result, attempt, done));
        co_await poll_until([&] { return done; }, 500, 10ms);
        REQUIRE(done);
        CHECK_FALSE(result);
        CHECK_FALSE(attempt.has_value());
        CHECK(co_await guard.release());

        // The default token (deferred), launched later with a callback.
        done = false;
        auto op = locks.async_try_lock(name, short_lock());
        std::move(op)(store_into(result, attempt, done));
        co_await poll_until([&] { return done; }, 500, 10ms);
        REQUIRE(done);
        CHECK_FALSE(result);
        REQUIRE(attempt.has_value());
        CHECK(attempt->owns());
        bool const released_attempt = co_await attempt->release();
        CHECK(released_attempt);

        // use_awaitable through as_tuple: the error comes as a code, not an exception.
        auto [ec, g] = co_await locks.async_lock(name, short_lock(), as_tuple);
        CHECK_FALSE(ec);
        CHECK(g.owns());
        lock_options brief = waiting_up_to(short_lock(), 100ms);
        auto [ec2, g2] = co_await locks.async_lock(name, brief, as_tuple);
        CHECK(ec2 == error::timeout);
        CHECK_FALSE(g2.owns());
        CHECK(co_await g.release());
    };
    run_lock_test<one_locker>("callback", scenario);
}

TEST_CASE("async_lock and async_try_lock with use_future, the io_context on another thread") {
    asio::io_context ctx;
    context_threads runner{ctx};
    {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        locker locks{conn};
        std::string const name = unique_key("future");

        auto g = locks.async_lock(name, short_lock(), asio::use_future).get();
        CHECK(g.owns());
        auto other = locks.async_try_lock(name, short_lock(), asio::use_future).get();
        CHECK_FALSE(other.has_value());

        // An error reaches the future as an exception.
        lock_options brief = waiting_up_to(short_lock(), 100ms);
        auto waiting = locks.async_lock(name, brief, asio::use_future);
        error_code waited;
        try {
            waiting.get();
        } catch (system_error const& e) {
            waited = e.code();
        }
        CHECK(waited == error::timeout);

        bool const released = asio::co_spawn(ctx, g.release(), asio::use_future).get();
        CHECK(released);
        auto again = locks.async_try_lock(name, short_lock(), asio::use_future).get();
        REQUIRE(again.has_value());
        CHECK(again->fence() > g.fence());
        bool const released_again = asio::co_spawn(ctx, again->release(), asio::use_future).get();
        CHECK(released_again);
        conn.close();
    }
    ctx.stop();
    runner.join();
}

TEST_CASE("a server error names the lock and carries the server's text") {
    auto scenario = [](redis::connection&, redis::connection& probe, locker& locks,
                       std::string const& name) -> asio::awaitable<void> {
        co_await probe.co_exec(command("HSET", lock_key(name), "a", "b"));

        co_await check_wrongtype(locks.co_lock(name, short_lock()), name);
        co_await check_wrongtype(locks.co_try_lock(name, short_lock()), name);
        auto [ec, g] = co_await locks.async_lock(name, short_lock(), as_tuple);
        CHECK(ec == redis::error::server_error);
        CHECK_FALSE(g.owns());

        // The hash is untouched and the connection still works for locks.
        auto r = co_await probe.co_exec(command("HGET", lock_key(name), "a"));
        CHECK(r.at(0).as_string() == "b");
        auto fine = co_await locks.co_lock(unique_key("after-error"), short_lock());
        CHECK(fine.owns());
        CHECK(co_await fine.release());
    };
    run_lock_test<one_locker>("wrongtype", scenario);
}

TEST_CASE("wait_timeout: co_lock gives up with error::timeout and a message naming the lock") {
    auto scenario = [](redis::connection&, redis::connection&, redis::connection& probe, locker& a,
                       locker& b, std::string const& name) -> asio::awaitable<void> {
        auto holder = co_await a.co_lock(name, short_lock());

        lock_options opt = waiting_up_to(short_lock(), 300ms);
        auto const started = steady::now();
        auto const [code, what] = co_await failure_of(b.co_lock(name, opt));
        auto const waited = ms_since(started);
        CHECK(code == error::timeout);
        CHECK(contains(what, name));
        CHECK(waited >= 290);
        CHECK(waited < 2300);

        // Zero: one look, then give up.
        opt.wait_timeout = 0ms;
        auto const at_once = co_await error_of(b.co_lock(name, opt));
        CHECK(at_once == error::timeout);

        CHECK(holder.owns());
        auto const held = co_await held_by(probe, name);
        CHECK(held == holder.token());
        auto const subscribers = co_await numsub_becomes(probe, wake_channel(name), 0);
        CHECK(subscribers == 0);
        CHECK(co_await holder.release());
    };
    run_lock_test<two_lockers>("timeout", scenario);
}

namespace {

// Shared between processes (MAP_SHARED before fork): who holds the lock right now.
struct exclusion_record {
    std::atomic<int> holders{0};
    std::atomic<int> max_holders{0};
    std::atomic<int> failures{0};
    std::atomic<int> increments{0};
};

// `lockers` connection+locker pairs ("processes"), each with `coroutines` coroutines that
// increment the counter `rounds` times with GET, a pause, then SET, under the lock.
void run_contenders(redis::config const& cfg, std::string const& name,
                    std::string const& counter_key, std::string const& fence_key, int lockers,
                    int coroutines, int rounds, exclusion_record* rec) {
    run_test(
        [&](asio::io_context& ctx) -> asio::awaitable<void> {
            std::vector<std::unique_ptr<redis::connection>> conns;
            std::vector<std::unique_ptr<locker>> locks;
            for (int i = 0; i < lockers; ++i) {
                conns.push_back(std::make_unique<redis::connection>(ctx.get_executor(), cfg));
                locks.push_back(std::make_unique<locker>(*conns.back()));
            }
            int finished = 0;
            for (int l = 0; l < lockers; ++l)
                for (int c = 0; c < coroutines; ++c)
                    asio::co_spawn(
                        ctx,
                        [&, l, c]() -> asio::awaitable<void> {
                            lock_options opt;
                            opt.ttl = 10'000ms;
                            opt.retry.initial = 5ms;
                            opt.retry.max = 100ms;
                            redis::connection& conn = *conns[l];
                            for (int r = 0; r < rounds; ++r) {
                                auto g = co_await locks[l]->co_lock(name, opt);
                                int const now_holding = ++rec->holders;
                                int seen = rec->max_holders.load();
                                while (now_holding > seen &&
                                       !rec->max_holders.compare_exchange_weak(seen, now_holding))
                                    ;
                                resp3::request read;
                                read.push("GET", counter_key);
                                read.push("GET", fence_key);
                                auto values = co_await conn.co_exec(std::move(read));
                                long long const value =
                                    values.at(0).is_null()
                                        ? 0
                                        : std::stoll(std::string(*values.at(0).as_string()));
                                long long const last_fence =
                                    values.at(1).is_null()
                                        ? 0
                                        : std::stoll(std::string(*values.at(1).as_string()));
                                if (g.fence() <= last_fence)
                                    ++rec->failures; // a fence went backwards
                                // Widen the window between read and write.
                                if ((r + c) % 3 == 0)
                                    co_await sleep_for(1ms);
                                else
                                    co_await asio::post(ctx, asio::use_awaitable);
                                resp3::request write;
                                write.push("SET", counter_key, std::to_string(value + 1));
                                write.push("SET", fence_key, std::to_string(g.fence()));
                                co_await conn.co_exec(std::move(write));
                                ++rec->increments;
                                --rec->holders;
                                bool const released = co_await g.release();
                                if (!released)
                                    ++rec->failures;
                            }
                            ++finished;
                        },
                        count_failure(rec->failures, finished));
            REQUIRE(
                co_await eventually([&] { return finished == lockers * coroutines; }, 110s, 10ms));
            for (auto& c : conns)
                c->close();
        },
        std::chrono::seconds{120});
}

} // namespace

TEST_CASE("mutual exclusion: a read-modify-write counter under contention from several "
          "connections and a second process") {
    constexpr int parent_lockers = 3, child_lockers = 2, coroutines = 30, child_coroutines = 15,
                  rounds = 10;
    std::string const name = unique_key("exclusion");
    std::string const counter_key = unique_key("exclusion-counter");
    std::string const fence_key = unique_key("exclusion-fence");
    auto const cfg = shared_server().config();

    void* mem = ::mmap(nullptr, sizeof(exclusion_record), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(mem != MAP_FAILED);
    auto* rec = new (mem) exclusion_record;

    pid_t const child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The second process: no doctest, no destructors of the parent's objects.
        ::alarm(120);
        int status = 0;
        try {
            run_contenders(cfg, name, counter_key, fence_key, child_lockers, child_coroutines,
                           rounds, rec);
        } catch (...) {
            status = 1;
        }
        ::_exit(status);
    }
    auto const started = steady::now();
    std::string parent_error;
    try {
        run_contenders(cfg, name, counter_key, fence_key, parent_lockers, coroutines, rounds, rec);
    } catch (std::exception const& e) {
        parent_error = e.what();
    }
    int status = -1;
    ::waitpid(child, &status, 0);
    MESSAGE("mutual exclusion: " << rec->increments.load() << " increments in " << ms_since(started)
                                 << " ms");
    CHECK(parent_error.empty());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);

    int const expected = (parent_lockers * coroutines + child_lockers * child_coroutines) * rounds;
    CHECK(rec->failures.load() == 0);
    CHECK(rec->max_holders.load() == 1);
    CHECK(rec->increments.load() == expected);
    auto const counter = shared_server().cli(strings("GET", counter_key));
    CHECK(counter == std::to_string(expected));
    CHECK(lock_key_free(shared_server(), lock_key(name)));
    rec->~exclusion_record();
    ::munmap(mem, sizeof(exclusion_record));
}

TEST_CASE("server cost: an uncontended lock+unlock is exactly 2 FCALL, with no subscription") {
    redis_server server;
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        // Warm up: the first call on a fresh server loads the library (FUNCTION LOAD).
        auto warm = co_await locks.co_lock(name);
        co_await warm.release();

        auto const before = co_await commandstats(probe);
        constexpr int cycles = 10;
        for (int i = 0; i < cycles; ++i) {
            auto g = co_await locks.co_lock(name);
            CHECK(co_await g.release());
        }
        auto const after = co_await commandstats(probe);
        // commandstats also counts the commands run inside the scripts (GET, SET, INCR, ...):
        // count only what the client sent.
        CHECK(command_calls(after, "fcall") - command_calls(before, "fcall") == 2 * cycles);
        CHECK(command_calls(after, "subscribe") == command_calls(before, "subscribe"));
        CHECK(command_calls(after, "function|load") == command_calls(before, "function|load"));
        CHECK(command_calls(after, "evalsha") == 0);
        CHECK(command_calls(after, "eval") == 0);

        // co_try_lock alike: one FCALL when it wins, one when it loses.
        auto const before_try = co_await commandstats(probe);
        auto g = co_await locks.co_try_lock(name);
        REQUIRE(g.has_value());
        auto lost = co_await locks.co_try_lock(name);
        CHECK_FALSE(lost.has_value());
        co_await g->release();
        auto const after_try = co_await commandstats(probe);
        CHECK(command_calls(after_try, "fcall") - command_calls(before_try, "fcall") == 3);
        CHECK(command_calls(after_try, "subscribe") == command_calls(before_try, "subscribe"));
    };
    run_lock_test<one_locker>(server.config(), "cost", scenario);
}

TEST_CASE("server cost: contended acquisitions are woken, not polled; one SUBSCRIBE per name "
          "per connection, dropped afterwards") {
    redis_server server;
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection&,
                        redis::connection& probe, locker& holder_locks, locker& waiter_locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto warm = co_await waiter_locks.co_lock(name);
        co_await warm.release();
        auto warm2 = co_await holder_locks.co_lock(name);
        co_await warm2.release();

        auto const before = co_await commandstats(probe);
        auto holder = co_await holder_locks.co_lock(name);
        constexpr int waiters = 20;
        int done = 0, failed = 0;
        for (int i = 0; i < waiters; ++i)
            asio::co_spawn(
                ctx,
                [&]() -> asio::awaitable<void> {
                    auto g = co_await waiter_locks.co_lock(name);
                    co_await sleep_for(5ms);
                    co_await g.release();
                    ++done;
                },
                count_failure(failed, done));
        REQUIRE(co_await eventually([&] { return waiter_locks.waiting() == waiters; }));
        auto const subscribed = co_await numsub_becomes(probe, wake_channel(name), 1);
        CHECK(subscribed == 1);
        co_await holder.release();
        co_await poll_until([&] { return done >= waiters; }, 1000, 10ms);
        CHECK(done == waiters);
        CHECK(failed == 0);
        auto const subscribers = co_await numsub_becomes(probe, wake_channel(name), 0);
        CHECK(subscribers == 0);
        auto const after = co_await commandstats(probe);

        auto const scripts = script_calls(after) - script_calls(before);
        // The waiters are one locker's: after the first, the lease passes from one to the next
        // in the process (cohort hand-off) without a server call. What remains: the holder's
        // lock and release, the first attempts of the waiters' head, a backoff retry now and
        // then, and the release that ends the cohort. Measured: 9 (0.45 per acquisition);
        // polling would cost dozens per acquisition, and a release per waiter 1 or more.
        double const per_acquisition = static_cast<double>(scripts) / waiters;
        MESSAGE("contended: " << scripts << " script calls in all, " << per_acquisition
                              << " per contended acquisition");
        CHECK(per_acquisition <= 0.8);
        CHECK(command_calls(after, "subscribe") - command_calls(before, "subscribe") == 1);
        CHECK(command_calls(after, "unsubscribe") - command_calls(before, "unsubscribe") == 1);
    };
    run_lock_test<two_lockers>(server.config(), "contended", scenario);
}

TEST_CASE("server cost: a foreign value without expiry under the lock key fails co_lock at once, "
          "naming the key, without polling") {
    redis_server server;
    auto scenario = [&](redis::connection&, redis::connection& probe, locker& locks,
                        std::string const& name) -> asio::awaitable<void> {
        auto warm = co_await locks.co_lock(name);
        co_await warm.release();
        // Someone set the lock key by hand, without a TTL: PTTL is -1.
        co_await probe.co_exec(command("SET", lock_key(name), "foreign"));

        auto const before = co_await commandstats(probe);
        lock_options opt;
        opt.wait_timeout = 1000ms;
        error_code code;
        std::string what;
        auto const started = steady::now();
        try {
            co_await locks.co_lock(name, opt);
        } catch (system_error const& e) {
            code = e.code();
            what = e.what();
        }
        INFO(what);
        CHECK(code == redis::error::server_error);
        CHECK(contains(what, lock_key(name)));
        CHECK(contains(what, "foreign"));
        CHECK(ms_since(started) < 500);
        auto const after = co_await commandstats(probe);
        // The one-key acquire of the free value the warm-up left finds something else; the
        // general acquire refuses it, once.
        auto const calls = script_calls(after) - script_calls(before);
        CHECK(calls == 2);
        CHECK(command_calls(after, "get") - command_calls(before, "get") == 2);
        co_await probe.co_exec(command("DEL", lock_key(name)));
    };
    run_lock_test<one_locker>(server.config(), "no-expiry", scenario);
}

TEST_CASE("two lockers sharing one connection: one's waiter leaving does not drop the other's "
          "subscription") {
    redis_server server;
    auto scenario = [&](asio::io_context& ctx, redis::connection&, redis::connection& shared,
                        redis::connection& probe, locker& holder_locks, locker& first,
                        std::string const& name) -> asio::awaitable<void> {
        locker second{shared};
        std::string const channel = wake_channel(name);

        lock_options hold;
        hold.ttl = 10'000ms;
        auto holder = co_await holder_locks.co_lock(name, hold);

        // Long backoff: without a wake-up message the second waiter sleeps for seconds.
        lock_options patient;
        patient.ttl = 5000ms;
        patient.retry.initial = 5000ms;
        patient.retry.max = 5000ms;
        patient.retry.multiplier = 1.0;
        bool second_done = false;
        steady::time_point second_acquired;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                auto g = co_await second.co_lock(name, patient);
                second_acquired = steady::now();
                co_await g.release();
                second_done = true;
            },
            asio::detached);
        lock_options brief = waiting_up_to(patient, 300ms);
        auto [ec, g] = co_await first.async_lock(name, brief, as_tuple);
        CHECK(ec == error::timeout);

        // The first locker has no waiter left; the second still waits and needs the channel.
        CHECK(co_await stays(
            [&]() -> asio::awaitable<bool> { co_return co_await numsub(probe, channel) == 1; },
            200ms));
        auto const subscribers = co_await numsub(probe, channel);
        CHECK(subscribers == 1);

        auto const released_at = steady::now();
        co_await holder.release();
        co_await poll_until([&] { return second_done; }, 700, 10ms);
        REQUIRE(second_done);
        auto const handoff =
            std::chrono::duration_cast<std::chrono::milliseconds>(second_acquired - released_at)
                .count();
        MESSAGE("hand-off to the second locker's waiter: " << handoff << " ms");
        CHECK(handoff < 1000);
    };
    run_lock_test<two_lockers>(server.config(), "two-lockers", scenario);
}

TEST_CASE("a full server under maxmemory-policy noeviction refuses a new lock with its OOM error, "
          "while a held lock still extends and releases; by FCALL and by EVALSHA") {
    redis_server server;
    auto by_sha = server.config();
    by_sha.use_functions = false;
    for (auto const& cfg : {server.config(), by_sha}) {
        run_with_locker(cfg, [&](locker& locks) -> asio::awaitable<void> {
            std::string const held_name = unique_key("oom-held");
            std::string const new_name = unique_key("oom-new");
            auto held = co_await locks.co_lock(held_name, short_lock());

            CHECK(server.cli(strings("CONFIG", "GET", "maxmemory-policy")) ==
                  "maxmemory-policy\nnoeviction");
            server.cli(strings("CONFIG", "SET", "maxmemory", "1")); // over the limit from now on
            error_code code;
            std::string what;
            try {
                co_await locks.co_lock(new_name, short_lock());
            } catch (system_error const& e) {
                code = e.code();
                what = e.what();
            }
            INFO(what);
            CHECK(code == redis::error::server_error);
            CHECK(contains(what, new_name));
            CHECK(contains(what, "OOM"));

            // A full server still renews and frees what is held.
            bool const extended = co_await held.extend(6000ms);
            CHECK(extended);
            CHECK(co_await held.release());
            // As a function flagged allow-oom the release writes the free state (its fence kept for
            // the next holder); by EVALSHA, whose SET a full server refuses, it deletes the key.
            auto const left = server.cli(strings("GET", lock_key(held_name)));
            if (cfg.use_functions)
                CHECK(left.starts_with("F "));
            else
                CHECK(left.empty());
            server.cli(strings("CONFIG", "SET", "maxmemory", "0"));
        });
    }
}
