// The connection against a real redis-server: round trips, pipelining, server errors,
// cancellation before and after a request is written, push messages.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include "watched_executor.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

std::int64_t info_field(std::string const& info, std::string const& field) {
    auto const at = info.find(field + ":");
    REQUIRE(at != std::string::npos);
    return std::stoll(info.substr(at + field.size() + 1));
}

} // namespace

TEST_CASE("round trip: PING, SET, GET, binary-safe values") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        CHECK(conn.is_connected());

        auto pong = co_await conn.co_exec(command("PING"));
        REQUIRE(pong.size() == 1);
        CHECK(pong[0].as_string() == "PONG");

        std::string const key = unique_key("roundtrip");
        std::string const binary("a\r\nb\0c", 6);
        resp3::request req;
        req.push("SET", key, binary);
        req.push("GET", key);
        req.push("STRLEN", key);
        auto replies = co_await conn.co_exec(std::move(req));
        REQUIRE(replies.size() == 3);
        CHECK(replies[0].as_string() == "OK");
        CHECK(replies[1].as_string() == binary);
        CHECK(replies[2].as_integer() == 6);

        auto missing = co_await conn.co_exec(command("GET", "test:no-such-key"));
        CHECK(missing.at(0).is_null());
    });
}

TEST_CASE("the connection connects lazily on the first request") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        CHECK_FALSE(conn.is_connected());
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
        CHECK(conn.is_connected());
        conn.close();
    });
}

TEST_CASE("10,000 coroutines pipeline on one connection and every reply meets its request") {
    constexpr int coroutines = 10'000;
    std::string const prefix = unique_key("pipeline");
    auto const reads_before = info_field(
        shared_server().cli(colock::test::strings("INFO", "stats")), "total_reads_processed");
    int matched = 0;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto conn =
            std::make_shared<redis::connection>(ctx.get_executor(), shared_server().config());
        co_await conn->async_connect(asio::use_awaitable);
        for (int i = 0; i < coroutines; ++i) {
            asio::co_spawn(
                ctx,
                [conn, i, &prefix, &matched]() -> asio::awaitable<void> {
                    std::string const key = prefix + ":" + std::to_string(i);
                    std::string const value = "value-" + std::to_string(i);
                    resp3::request set;
                    set.push("SET", key, value);
                    co_await conn->co_exec(std::move(set));
                    resp3::request get;
                    get.push("GET", key);
                    get.push("ECHO", std::to_string(i));
                    auto replies = co_await conn->co_exec(std::move(get));
                    if (replies.size() == 2 && replies[0].as_string() == value &&
                        replies[1].as_string() == std::to_string(i))
                        ++matched;
                },
                asio::detached);
        }
        // The spawned coroutines keep the context busy; wait for them here.
        co_await eventually([&] { return matched == coroutines; }, 30s);
        conn->close();
    });
    CHECK(matched == coroutines);
    // 20,000 requests arrived in far fewer socket reads: they were pipelined.
    auto const reads = info_field(shared_server().cli(colock::test::strings("INFO", "stats")),
                                  "total_reads_processed") -
                       reads_before;
    MESSAGE("server socket reads for 20,000 requests: " << reads);
    CHECK(reads < 2'000);
}

TEST_CASE("a server error reply carries the server's text") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};

        // co_exec throws server_error whose message is the server's own.
        bool thrown = false;
        try {
            co_await conn.co_exec(command("NO-SUCH-COMMAND", "x"));
        } catch (redis::server_error const& e) {
            thrown = true;
            CHECK(e.code() == redis::error::server_error);
            CHECK(e.server_message().find("unknown command") != std::string::npos);
            CHECK(std::string(e.what()).find("unknown command") != std::string::npos);
        }
        CHECK(thrown);

        // async_exec reports error::server_error and still hands over every reply.
        std::string const key = unique_key("wrongtype");
        resp3::request req;
        req.push("SET", key, "not-a-number");
        req.push("INCR", key);
        req.push("GET", key);
        auto [ec, replies] = co_await conn.async_exec(std::move(req), as_tuple);
        CHECK(ec == redis::error::server_error);
        REQUIRE(replies.size() == 3);
        CHECK(replies[0].as_string() == "OK");
        CHECK(replies[1].is_error());
        CHECK(replies[1].text.find("not an integer") != std::string::npos);
        CHECK(redis::first_error_text(replies) == replies[1].text);
        CHECK(replies[2].as_string() == "not-a-number");

        // The connection is still in step afterwards.
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
        conn.close();
    });
}

TEST_CASE("cancelling a request before it is written drops it") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}) {
        CAPTURE(static_cast<int>(type));
        run_connected(shared_server().config(),
                      [type](redis::connection& conn) -> asio::awaitable<void> {
                          std::string const key = unique_key("never-written");

                          // Initiate and cancel in the same turn: the request cannot have reached
                          // the socket.
                          asio::cancellation_signal signal;
                          error_code result = redis::error::closed;
                          bool done = false;
                          conn.async_exec(command("SET", key, "1"),
                                          asio::bind_cancellation_slot(signal.slot(),
                                                                       record_code(result, done)));
                          signal.emit(type);
                          REQUIRE(co_await finishes(done, 2s));
                          CHECK(result == asio::error::operation_aborted);

                          auto exists = co_await conn.co_exec(command("EXISTS", key));
                          CHECK(exists.at(0).as_integer() == 0);
                      });
    }
}

TEST_CASE("cancelling a written request discards its reply and keeps the stream in step") {
    for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial}) {
        CAPTURE(static_cast<int>(type));
        run_connected(shared_server().config(),
                      [type](redis::connection& conn) -> asio::awaitable<void> {
                          std::string const list = unique_key("blocked-list");

                          // BLPOP blocks in the server for 1 s: it is surely written when
                          // cancelled.
                          asio::cancellation_signal signal;
                          error_code result;
                          bool done = false;
                          auto const id = co_await integer(conn, command("CLIENT", "ID"));
                          auto const started = std::chrono::steady_clock::now();
                          conn.async_exec(command("BLPOP", list, "1"),
                                          asio::bind_cancellation_slot(signal.slot(),
                                                                       record_code(result, done)));
                          REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
                          signal.emit(type);
                          REQUIRE(co_await finishes(done, 2s));
                          CHECK(result == asio::error::operation_aborted);
                          CHECK(std::chrono::steady_clock::now() - started < 800ms);

                          // The next reply on the connection is PING's, not BLPOP's late null.
                          auto pong = co_await conn.co_exec(command("PING", "after-cancel"));
                          CHECK(pong.at(0).as_string() == "after-cancel");
                      });
    }
}

TEST_CASE("total cancellation of a written request is not honoured: the reply still comes") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        asio::cancellation_signal signal;
        error_code result = redis::error::closed;
        bool done = false;
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        conn.async_exec(
            command("BLPOP", unique_key("total"), "0.3"),
            asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, redis::response r) {
                result = ec;
                CHECK(r.at(0).is_null());
                done = true;
            }));
        REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        signal.emit(asio::cancellation_type::total);
        REQUIRE(co_await finishes(done, 2s));
        CHECK_FALSE(result);
    });
}

TEST_CASE("a request raced against a timer with || is cancelled by the timer") {
    using namespace asio::experimental::awaitable_operators;
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), shared_server().config()};
        co_await conn.async_connect(asio::use_awaitable);
        asio::steady_timer timer(ctx);
        timer.expires_after(100ms);
        auto winner = co_await (
            conn.async_exec(command("BLPOP", unique_key("race"), "2"), asio::use_awaitable) ||
            timer.async_wait(asio::use_awaitable));
        CHECK(winner.index() == 1);
        auto pong = co_await conn.co_exec(command("PING", "still-in-step"));
        CHECK(pong.at(0).as_string() == "still-in-step");
        conn.close();
    });
}

TEST_CASE("a cancelled request amid a pipeline leaves its neighbours' replies intact") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        constexpr int count = 200;
        std::vector<asio::cancellation_signal> signals(count);
        std::vector<std::string> results(count);
        int done = 0;
        for (int i = 0; i < count; ++i) {
            conn.async_exec(command("ECHO", std::to_string(i)),
                            asio::bind_cancellation_slot(
                                signals[i].slot(), [&, i](error_code ec, redis::response r) {
                                    results[i] = ec ? "aborted" : std::string(*r.at(0).as_string());
                                    ++done;
                                }));
        }
        for (int i = 0; i < count; i += 3)
            signals[i].emit(asio::cancellation_type::terminal);
        REQUIRE(co_await eventually([&] { return done == count; }, 5s));
        for (int i = 0; i < count; ++i)
            CHECK(results[i] == (i % 3 == 0 ? "aborted" : std::to_string(i)));
    });
}

namespace {
struct recorder final : redis::push_listener {
    std::vector<std::string> messages;
    int reconnects = 0;
    void on_push(resp3::value const& push) override {
        // ["message", channel, payload]
        if (push.elements.size() == 3 && push.elements[0].as_string() == "message")
            messages.emplace_back(*push.elements[2].as_string());
    }
    void on_reconnect() override { ++reconnects; }
};
} // namespace

TEST_CASE("push messages reach the listeners; requests still work on a subscribed connection") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection subscriber{ctx.get_executor(), shared_server().config()};
        redis::connection publisher{ctx.get_executor(), shared_server().config()};
        auto listener = std::make_shared<recorder>();
        subscriber.add_push_listener(listener);
        std::string const channel = unique_key("channel");

        co_await subscriber.async_subscribe(colock::test::strings(channel), asio::use_awaitable);
        // Commands on one connection run in order: once PING answers, SUBSCRIBE has run.
        auto pong = co_await subscriber.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");

        auto receivers = co_await publisher.co_exec(command("PUBLISH", channel, "hello"));
        CHECK(receivers.at(0).as_integer() == 1);
        co_await poll_until([&] { return !listener->messages.empty(); }, 200, 5ms);
        REQUIRE(listener->messages.size() == 1);
        CHECK(listener->messages[0] == "hello");

        co_await subscriber.async_unsubscribe(colock::test::strings(channel), asio::use_awaitable);
        co_await subscriber.co_exec(command("PING"));
        receivers = co_await publisher.co_exec(command("PUBLISH", channel, "unheard"));
        CHECK(receivers.at(0).as_integer() == 0);

        subscriber.remove_push_listener(listener.get());
        subscriber.close();
        publisher.close();
    });
}

TEST_CASE("close() fails pending requests with error::closed and the connection can start again") {
    run_connected(shared_server().config(), [](redis::connection& conn) -> asio::awaitable<void> {
        error_code result;
        bool done = false;
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        conn.async_exec(command("BLPOP", unique_key("closed"), "2"), record_code(result, done));
        REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        conn.close();
        REQUIRE(co_await finishes(done, 2s));
        CHECK(result == redis::error::closed);
        CHECK_FALSE(conn.is_connected());

        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
    });
}

TEST_CASE("destroying the connection completes its pending requests") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        error_code result;
        bool done = false;
        {
            redis::connection conn{ctx.get_executor(), shared_server().config()};
            co_await conn.async_connect(asio::use_awaitable);
            auto const id = co_await integer(conn, command("CLIENT", "ID"));
            conn.async_exec(command("BLPOP", unique_key("destroyed"), "2"),
                            record_code(result, done));
            REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        }
        REQUIRE(co_await finishes(done, 2s));
        CHECK(result == redis::error::closed);
    });
}

TEST_CASE("a plain callback works as the completion token") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    std::string echoed;
    conn.async_exec(command("ECHO", "callback"), [&](error_code ec, redis::response r) {
        REQUIRE_FALSE(ec);
        echoed = std::string(*r.at(0).as_string());
        conn.close();
    });
    ctx.run();
    CHECK(echoed == "callback");
}

TEST_CASE("handlers run in the order their requests were made, across reads and chunks of "
          "delivery; a request made from one of them is answered too") {
    asio::io_context ctx;
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    // Enough replies (with 2 KB values) to take several reads, whose deliveries overlap.
    constexpr int requests = 2000;
    std::string const value(2048, 'v');
    std::vector<int> order;
    int follow_ups = 0;
    for (int i = 0; i < requests; ++i)
        conn.async_exec(command("ECHO", value), [&, i](error_code ec, redis::response) {
            CHECK_FALSE(ec);
            order.push_back(i);
            if (i == 0) // made while the rest of the batch is being delivered
                conn.async_exec(command("PING"), [&](error_code pec, redis::response) {
                    CHECK_FALSE(pec);
                    ++follow_ups;
                });
            if (order.size() == static_cast<std::size_t>(requests))
                conn.close();
        });
    ctx.run();
    REQUIRE(order.size() == static_cast<std::size_t>(requests));
    bool in_order = true;
    for (int i = 0; i < requests; ++i)
        in_order = in_order && order[static_cast<std::size_t>(i)] == i;
    CHECK(in_order);
    CHECK(follow_ups == 1);
}

TEST_CASE("a request, a connect and a subscribe count as work on their handler's executor, and "
          "let go of it after their copy of that executor: a thread pool whose only work is a "
          "callback bound to its strand is joined after the callback ran, and not touched once "
          "destroyed") {
    asio::io_context ctx;
    context_threads runners{ctx, 2};
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    {
        asio::thread_pool pool{4};
        auto strand = asio::make_strand(pool);
        std::atomic<int> ran{0};
        // Nothing else is queued on the pool: a BLPOP answered in 300 ms, and on a connection
        // not yet made, a connect and a subscribe that wait for its handshake.
        redis::connection fresh{ctx.get_executor(), shared_server().config()};
        conn.async_exec(command("BLPOP", unique_key("foreign-work"), "0.3"),
                        asio::bind_executor(strand, [&](error_code ec, redis::response r) {
                            CHECK_FALSE(ec);
                            CHECK(r.at(0).is_null());
                            ++ran;
                        }));
        fresh.async_connect(asio::bind_executor(strand, [&](error_code ec) {
            CHECK_FALSE(ec);
            ++ran;
        }));
        fresh.async_subscribe(colock::test::strings(unique_key("foreign-channel")),
                              asio::bind_executor(strand, [&](error_code ec) {
                                  CHECK_FALSE(ec);
                                  ++ran;
                              }));
        pool.join();
        CHECK(ran == 3);
        fresh.close();
    }
    auto const ping = [&](auto h) { conn.async_exec(command("PING"), std::move(h)); };
    auto const outcome = watch_late_copies(ctx, ping);
    CHECK(outcome.ran_before_join_returned);
    CHECK(outcome.copies_outliving_pool == 0);
    conn.close();
}
