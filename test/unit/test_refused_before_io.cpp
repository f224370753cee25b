// Arguments refused at the call or at construction, before any I/O: on connections that are never
// connected (their io_context does not run, or runs only what is ready), so no server is needed.
// These cases were integration tests that never reached their server.
#include <colock/election.hpp>
#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/locker.hpp>
#include <colock/multi_lock_guard.hpp>
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>
#include <colock_test/failures.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace refused_before_io_test {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using namespace std::chrono_literals;

// The system_error a call threw, or a coroutine when awaited: its code and text.
using colock::test::call_failure;
using colock::test::failure_of;

// Runs `make(ctx)`'s coroutine on an io_context of its own until it has finished, running only
// handlers that are ready: nothing here waits on a timer or a socket.
template <class Make>
void run_ready(Make make) {
    colock::test::coroutine_end end;
    asio::io_context ctx;
    colock::test::spawn_watched(ctx, make(ctx), end);
    while (!end.finished) {
        ctx.restart();
        if (ctx.poll() == 0)
            break;
    }
    REQUIRE(end.finished);
    if (end.thrown)
        std::rethrow_exception(end.thrown);
}

// A config of a local port nothing connects to: these connections never try.
colock::redis::config never_connected(std::uint16_t port) {
    colock::redis::config cfg;
    cfg.port = port;
    return cfg;
}

bool has(std::string const& text, std::string const& part) {
    return text.find(part) != std::string::npos;
}

TEST_CASE("retention: a negative retain or one above max_lock_ttl is refused") {
    colock::lock_options opt;
    opt.retain = -1ms;
    CHECK_THROWS_AS(colock::validate("n", opt), boost::system::system_error);
    opt.retain = colock::max_lock_ttl + 1ms;
    CHECK_THROWS_AS(colock::validate("n", opt), boost::system::system_error);
    opt.retain = colock::max_lock_ttl;
    CHECK_NOTHROW(colock::validate("n", opt));
}

TEST_CASE("sentinel: a config with sentinels but no master name is refused at construction") {
    asio::io_context ctx;
    colock::redis::config cfg;
    cfg.sentinel.sentinels = {{"127.0.0.1", 26379}};
    CHECK_THROWS_WITH_AS(colock::redis::connection(ctx.get_executor(), cfg),
                         doctest::Contains("no master_name"), boost::system::system_error);
    try {
        colock::redis::connection refused(ctx.get_executor(), cfg);
        FAIL("constructed");
    } catch (boost::system::system_error const& e) {
        CHECK(e.code() == colock::redis::error::invalid_config);
    }
    cfg.sentinel.master_name = "m";
    cfg.unix_socket = "/tmp/redis.sock";
    CHECK_THROWS_WITH_AS(colock::redis::connection(ctx.get_executor(), cfg),
                         doctest::Contains("unix_socket"), boost::system::system_error);
}

TEST_CASE("election: a name the lock refuses is refused at construction") {
    asio::io_context ctx;
    colock::redis::connection conn{ctx.get_executor(), never_connected(1)};
    colock::locker locks{conn};
    CHECK_THROWS_AS(colock::election(locks, ""), system_error);
    CHECK_THROWS_AS(colock::election(locks, std::string(colock::max_lock_name_length + 1, 'e')),
                    system_error);
    CHECK_FALSE(conn.is_connected());
    conn.close();
}

TEST_CASE("redlock: a semaphore and a read-write lock are refused at construction, naming why") {
    asio::io_context ctx;
    colock::redis::connection a{ctx.get_executor(), never_connected(1)};
    colock::redis::connection b{ctx.get_executor(), never_connected(2)};
    colock::redis::connection c{ctx.get_executor(), never_connected(3)};
    std::vector<colock::redis::connection*> const primaries{&a, &b, &c};
    colock::locker locks{primaries};
    auto const refused = call_failure([&] { colock::semaphore s{locks, "exports", 2}; });
    CHECK(refused.code == colock::error::invalid_argument);
    CHECK(has(refused.what, "Redlock"));
    CHECK(has(refused.what, "exports"));
    auto const rw = call_failure([&] { colock::rw_lock l{locks, "exports"}; });
    CHECK(rw.code == colock::error::invalid_argument);
    CHECK(has(rw.what, "Redlock"));
    for (auto* conn : primaries) {
        CHECK_FALSE(conn->is_connected());
        conn->close();
    }
}

TEST_CASE("bad arguments are refused at the call, before any I/O, naming the field") {
    using colock::lock_options;
    struct bad_case {
        std::string name;
        lock_options opt;
        std::string field;
    };
    std::vector<bad_case> cases;
    auto add = [&](std::string name, auto change, std::string field) {
        bad_case c{std::move(name), lock_options{}, std::move(field)};
        change(c.opt);
        cases.push_back(std::move(c));
    };
    auto keep = [](lock_options&) {};
    add("", keep, "name");
    add(std::string(colock::max_lock_name_length + 1, 'x'), keep, "name");
    add(
        "n", [](lock_options& o) { o.ttl = 0ms; }, "ttl");
    add(
        "n", [](lock_options& o) { o.ttl = -5ms; }, "ttl");
    add(
        "n", [](lock_options& o) { o.renew_interval = o.ttl; }, "renew_interval");
    add(
        "n", [](lock_options& o) { o.renew_interval = o.ttl + 1ms; }, "renew_interval");
    add(
        "n", [](lock_options& o) { o.renew_interval = 0ms; }, "renew_interval");
    add(
        "n", [](lock_options& o) { o.wait_timeout = -1ms; }, "wait_timeout");
    add(
        "n", [](lock_options& o) { o.max_hold = -1ms; }, "max_hold");
    add(
        "n", [](lock_options& o) { o.retry.multiplier = 0.5; }, "multiplier");
    add(
        "n", [](lock_options& o) { o.retry.multiplier = std::nan(""); }, "multiplier");
    add(
        "n", [](lock_options& o) { o.retry.initial = 0ms; }, "initial");

    // A connection to a port nobody listens on, never connected: any I/O would end in
    // connection_refused, not invalid_argument. The io_context is not even running.
    asio::io_context ctx;
    colock::redis::connection conn{ctx.get_executor(), never_connected(1)};
    colock::locker locks{conn};

    for (auto const& c : cases) {
        CAPTURE(c.field);
        CAPTURE(c.name.size());
        bool called = false;
        auto const by_lock = call_failure([&] {
            locks.async_lock(c.name, c.opt, [&](error_code, colock::lock_guard) { called = true; });
        });
        CHECK(by_lock.code == colock::error::invalid_argument);
        CHECK(has(by_lock.what, c.field));

        auto const by_try_lock = call_failure([&] {
            locks.async_try_lock(c.name, c.opt, [&](error_code, std::optional<colock::lock_guard>) {
                called = true;
            });
        });
        CHECK(by_try_lock.code == colock::error::invalid_argument);
        CHECK(has(by_try_lock.what, c.field));
        ctx.poll();
        CHECK_FALSE(called);
    }
    CHECK_FALSE(conn.is_connected());

    // The awaitable forms throw at the co_await, before touching the connection.
    run_ready([&](asio::io_context&) -> asio::awaitable<void> {
        for (auto const& c : cases) {
            CAPTURE(c.field);
            // Making the awaitable checks nothing yet; awaiting it does.
            auto pending = locks.co_lock(c.name, c.opt);
            auto const by_co_lock = co_await failure_of(std::move(pending));
            CHECK(by_co_lock.code == colock::error::invalid_argument);
            CHECK(has(by_co_lock.what, c.field));
            auto const by_co_try_lock = co_await failure_of(locks.co_try_lock(c.name, c.opt));
            CHECK(by_co_try_lock.code == colock::error::invalid_argument);
        }
    });
    ctx.restart();
    ctx.poll();
    CHECK_FALSE(conn.is_connected());
    CHECK(conn.last_error_text().empty());

    // The limits themselves are accepted.
    lock_options edge;
    edge.ttl = 2ms;
    edge.renew_interval = 1ms;
    edge.wait_timeout = 0ms;
    edge.retry.multiplier = 1.0;
    CHECK_NOTHROW(colock::validate(std::string(colock::max_lock_name_length, 'x'), edge));
    conn.close();
}

TEST_CASE("async_wait_lost on a guard that holds nothing completes with not_held, never inside "
          "the call: a lock's, a lock set's, a permit's and a read-write lock's guards") {
    auto const refused = [](auto guard) {
        auto const caller = std::this_thread::get_id();
        std::atomic<bool> returned{false};
        bool inside_the_call = false;
        std::promise<error_code> told;
        auto future = told.get_future();
        guard.async_wait_lost([&](error_code ec) {
            inside_the_call = std::this_thread::get_id() == caller && !returned;
            told.set_value(ec);
        });
        returned = true;
        REQUIRE(future.wait_for(10s) == std::future_status::ready);
        CHECK_FALSE(inside_the_call);
        return future.get();
    };
    // Each handler is bound to no executor of its own: a dispatch would run it inline, in the call.
    CHECK(refused(colock::lock_guard{}) == colock::error::not_held);
    CHECK(refused(colock::multi_lock_guard{}) == colock::error::not_held);
    CHECK(refused(colock::permit{}) == colock::error::not_held);
    CHECK(refused(colock::read_guard{}) == colock::error::not_held);
    CHECK(refused(colock::write_guard{}) == colock::error::not_held);
}

} // namespace refused_before_io_test
