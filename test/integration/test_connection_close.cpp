// close() and the destructor send what was asked of the connection before them (within
// config::close_timeout), then close: a release the lock layer queued just before is not lost.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"

#include "redis/engine.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

using namespace colock;
using namespace colock::test;

TEST_CASE("close(): a request queued just before gets its reply, and one in flight too") {
    std::string const key = unique_key("before-close");
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        co_await conn.async_connect(asio::use_awaitable);
        // In flight when close() comes: a BLPOP that answers nil after 200 ms.
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        auto blocked = std::make_shared<exec_outcome>();
        exec_into(conn, command("BLPOP", unique_key("empty-list"), "0.2"), blocked);
        REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        auto queued = std::make_shared<exec_outcome>();
        exec_into(conn, command("SET", key, "flushed"), queued);
        conn.close();
        CHECK(co_await finishes(queued->done, 5000ms));
        CHECK(co_await finishes(blocked->done, 5000ms));
        CHECK_FALSE(queued->ec);
        CHECK_FALSE(blocked->ec);
        if (!blocked->ec)
            CHECK(blocked->replies.at(0).is_null());
    });
    CHECK(shared_server().cli(strings("GET", key)) == "flushed");
}

TEST_CASE("destroying the connection with a queued SET leaves the key set on the server") {
    std::string const key = unique_key("destroyed-with-set");
    auto outcome = std::make_shared<exec_outcome>();
    asio::io_context ctx;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), shared_server().config()};
            co_await conn.async_connect(asio::use_awaitable);
            exec_into(conn, command("SET", key, "released"), outcome);
        },
        asio::detached);
    auto const start = steady::now();
    ctx.run_for(10s); // returns as soon as the flush is done: nothing keeps the context alive
    CHECK(ms_since(start) < 5000);
    CHECK(ctx.stopped());
    CHECK(outcome->done);
    CHECK_FALSE(outcome->ec);
    CHECK(shared_server().cli(strings("GET", key)) == "released");
}

TEST_CASE("a request given to engine_exec on another thread just before close() is flushed") {
    // The lock layer's guard destructor: engine_exec from the thread that drops the guard, and
    // close() a moment later, here from the same non-I/O thread.
    std::string const key = unique_key("engine-exec-then-close");
    asio::io_context ctx;
    auto work = asio::make_work_guard(ctx);
    std::thread io([&] { ctx.run(); });
    std::promise<error_code> result;
    {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        std::promise<error_code> connected;
        conn.async_connect([&connected](error_code ec) { connected.set_value(ec); });
        REQUIRE_FALSE(connected.get_future().get());
        redis::detail::engine_exec(
            redis::detail::engine_of(conn), command("SET", key, "sent"),
            [&result](error_code ec, redis::response) { result.set_value(ec); });
        conn.close();
    }
    auto done = result.get_future();
    bool const finished = done.wait_for(5s) == std::future_status::ready;
    CHECK(finished);
    if (finished)
        CHECK_FALSE(done.get());
    work.reset();
    io.join();
    CHECK(shared_server().cli(strings("GET", key)) == "sent");
}

TEST_CASE("close() with the server black-holed: done within close_timeout, and run() returns") {
    redis_server server;
    fault_proxy proxy(server.port());
    auto cfg = proxy.config();
    cfg.close_timeout = 300ms;
    cfg.health_check_interval = 0ms; // the deadline alone ends the flush
    asio::io_context ctx;
    auto outcome = std::make_shared<exec_outcome>();
    steady::time_point closed_at;
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            redis::connection conn{ctx.get_executor(), cfg};
            co_await conn.co_connect();
            proxy.set_black_hole(true);
            exec_into(conn, command("SET", unique_key("black-holed"), "lost"), outcome);
            co_await sleep_for(50ms); // written, never answered
            closed_at = steady::now();
            conn.close();
        },
        asio::detached);
    ctx.run_for(10s);
    auto const took = ms_since(closed_at);
    CHECK(ctx.stopped()); // nothing kept the context alive
    CHECK(took >= 250);   // the flush waited for the reply
    CHECK(took < 2000);
    CHECK(outcome->done);
    CHECK(outcome->ec == redis::error::closed);
    proxy.set_black_hole(false);
}

TEST_CASE("close_timeout 0 closes at once, as before") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.close_timeout = 0ms;
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_connect();
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        auto blocked = std::make_shared<exec_outcome>();
        exec_into(conn, command("BLPOP", unique_key("never"), "2"), blocked);
        REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        auto const start = steady::now();
        conn.close();
        CHECK(co_await finishes(blocked->done, 1000ms));
        CHECK(ms_since(start) < 500);
        CHECK(blocked->ec == redis::error::closed);
    });
}
