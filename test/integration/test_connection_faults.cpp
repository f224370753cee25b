// Faults: the server killed, paused, restarted; connections cut; nothing to connect to.
// Each test owns its server so it can hurt it.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

TEST_CASE("server killed mid-request: a clear error, and the next request after restart works") {
    redis_server server;
    run_connected(fast_config(server), [&](redis::connection& conn) -> asio::awaitable<void> {
        co_await conn.co_exec(command("SET", "k", "v"));

        error_code result;
        bool done = false;
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        conn.async_exec(command("BLPOP", "never", "5"), record_code(result, done));
        REQUIRE(co_await server_runs(server, id, "blpop"));
        server.kill();
        REQUIRE(co_await finishes(done, 5s));
        // Written before the loss: it fails and is never re-sent behind the caller's back.
        CHECK(result == redis::error::connection_lost);
        CHECK(std::string(result.message()).find("lost") != std::string::npos);

        server.restart();
        auto [ec, replies] = co_await conn.async_exec(command("GET", "k"), as_tuple);
        CHECK_FALSE(ec);
        CHECK(replies.at(0).is_null()); // a fresh server: the data went with the old one
        CHECK(conn.reconnect_count() >= 1);
    });
}

TEST_CASE("requests made while the server is down wait for the reconnection") {
    redis_server server;
    run_connected(fast_config(server), [&](redis::connection& conn) -> asio::awaitable<void> {
        server.kill();
        CHECK(co_await eventually([&] { return !conn.is_connected(); }));

        bool done = false;
        error_code result = redis::error::closed;
        std::string echoed;
        conn.async_exec(command("ECHO", "queued"), [&](error_code ec, redis::response r) {
            result = ec;
            if (!ec)
                echoed = std::string(*r.at(0).as_string());
            done = true;
        });
        CHECK(co_await stays([&] { return !done; }, 200ms));
        server.restart();
        REQUIRE(co_await finishes(done, 5s));
        CHECK_FALSE(result);
        CHECK(echoed == "queued");
    });
}

TEST_CASE("CLIENT KILL: the connection comes back and renews its subscriptions") {
    redis_server server;
    struct counter final : redis::push_listener {
        int messages = 0;
        int reconnects = 0;
        void on_push(resp3::value const& v) override {
            if (!v.elements.empty() && v.elements[0].as_string() == "message")
                ++messages;
        }
        void on_reconnect() override { ++reconnects; }
    };
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(server)};
        auto listener = std::make_shared<counter>();
        conn.add_push_listener(listener);
        co_await conn.async_subscribe(colock::test::strings("wake"), asio::use_awaitable);
        co_await conn.co_exec(command("PING"));

        CHECK(server.cli(colock::test::strings("CLIENT", "KILL", "TYPE", "pubsub")) == "1");
        co_await poll_until([&] { return listener->reconnects != 0; }, 200, 10ms);
        CHECK(listener->reconnects == 1);
        CHECK(conn.reconnect_count() == 1);

        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
        CHECK(server.cli(colock::test::strings("PUBLISH", "wake", "x")) == "1");
        co_await poll_until([&] { return listener->messages != 0; }, 200, 10ms);
        CHECK(listener->messages == 1);
        conn.close();
    });
}

TEST_CASE("a reconnection is told before any push of the new connection: its confirmations and "
          "the messages published since it subscribed again come after on_reconnect") {
    redis_server server;
    // What the listener was told, in order: "reconnect", "subscribe", or a message's payload.
    struct sequence final : redis::push_listener {
        std::vector<std::string> events;
        void on_push(resp3::value const& v) override {
            if (v.elements.size() == 3 && v.elements[0].as_string() == "message")
                events.emplace_back(*v.elements[2].as_string());
            else if (!v.elements.empty() && v.elements[0].as_string() == "subscribe")
                events.emplace_back("subscribe");
        }
        void on_reconnect() override { events.emplace_back("reconnect"); }
    };
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(server)};
        redis::connection publisher{ctx.get_executor(), fast_config(server)};
        auto listener = std::make_shared<sequence>();
        conn.add_push_listener(listener);
        co_await conn.async_subscribe(colock::test::strings("gap"), asio::use_awaitable);
        co_await conn.co_exec(command("PING"));
        // Messages all along, so that some come right behind the new subscription's
        // confirmation, in the same read as it.
        bool publishing = true;
        bool stopped = false;
        int published = 0;
        asio::co_spawn(
            ctx,
            [&]() -> asio::awaitable<void> {
                while (publishing)
                    co_await publisher.co_exec(
                        command("PUBLISH", "gap", std::to_string(++published)));
                stopped = true;
            },
            asio::detached);
        co_await poll_until([&] { return listener->events.size() >= 3; }, 200, 5ms);
        auto const before = listener->events.size();
        CHECK(server.cli(colock::test::strings("CLIENT", "KILL", "TYPE", "pubsub")) == "1");
        co_await poll_until([&] { return conn.reconnect_count() == 1; }, 200, 10ms);
        int const at_reconnect = published;
        co_await poll_until([&] { return published > at_reconnect + 50; }, 200, 5ms);
        publishing = false;
        REQUIRE(co_await eventually([&] { return stopped; }));
        co_await conn.co_exec(command("PING"));

        auto const& events = listener->events;
        REQUIRE(events.size() > before + 2);
        // Up to the kill: the subscription's confirmation, then messages only.
        CHECK(events.at(0) == "subscribe");
        for (std::size_t i = 1; i < before; ++i)
            CHECK(events[i] != "reconnect");
        // After it: the reconnection first, then the renewed subscription, then messages.
        auto const reconnect = std::find(events.begin() + 1, events.end(), "reconnect");
        REQUIRE(reconnect != events.end());
        for (auto it = events.begin() + static_cast<std::ptrdiff_t>(before); it != reconnect; ++it)
            CHECK_MESSAGE(*it != "subscribe",
                          "the new connection's confirmation came before on_reconnect");
        auto const confirmed = std::find(reconnect, events.end(), "subscribe");
        REQUIRE(confirmed != events.end());
        CHECK_MESSAGE(confirmed == reconnect + 1,
                      "a message of the new connection came before its confirmation");
        CHECK(std::count(events.begin(), events.end(), "reconnect") == 1);
        // The messages in the order they were published, across the gap (some lost in it).
        int last = 0;
        for (auto const& e : events) {
            if (e == "reconnect" || e == "subscribe")
                continue;
            CHECK(std::stoi(e) > last);
            last = std::stoi(e);
        }
        CHECK(last > at_reconnect);
        conn.close();
        publisher.close();
    });
}

TEST_CASE("CLIENT PAUSE is caught by the health check") {
    redis_server server;
    run_connected(fast_config(server), [&](redis::connection& conn) -> asio::awaitable<void> {
        server.cli(colock::test::strings("CLIENT", "PAUSE", "1500", "ALL"));
        // Two health intervals without a PONG: the connection must have given up on the socket.
        co_await poll_until([&] { return !conn.is_connected(); }, 100, 10ms);
        CHECK_FALSE(conn.is_connected());
        CHECK(conn.last_error_text().find("PING") != std::string::npos);

        // Once the pause ends, the connection is back.
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
        CHECK(conn.reconnect_count() >= 1);
    });
}

TEST_CASE("a stopped (SIGSTOP) server is detected and the connection recovers after SIGCONT") {
    redis_server server;
    run_connected(fast_config(server), [&](redis::connection& conn) -> asio::awaitable<void> {
        server.pause();
        co_await poll_until([&] { return !conn.is_connected(); }, 100, 10ms);
        CHECK_FALSE(conn.is_connected());
        server.resume();
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(pong.at(0).as_string() == "PONG");
    });
}

TEST_CASE("nothing listening: async_connect fails with connection_refused and stops") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::config cfg;
        cfg.port = unused_port();
        redis::connection conn{ctx.get_executor(), cfg};
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == asio::error::connection_refused);
        CHECK(conn.last_error_text() ==
              "connecting to 127.0.0.1:" + std::to_string(cfg.port) + ": Connection refused");
        // A request finds no connection either, and fails instead of hanging.
        auto [eec, r] = co_await conn.async_exec(command("PING"), as_tuple);
        CHECK(eec == asio::error::connection_refused);
    });
}

TEST_CASE("a server that accepts but never answers: connect_timeout") {
    redis_server server;
    server.pause();
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.connect_timeout = 300ms;
        redis::connection conn{ctx.get_executor(), cfg};
        auto const started = std::chrono::steady_clock::now();
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == redis::error::connect_timeout);
        CHECK(std::chrono::steady_clock::now() - started < 2s);
    });
    server.resume();
}

TEST_CASE("cancelling async_connect abandons the attempt") {
    redis_server server;
    server.pause();
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        redis::connection conn{ctx.get_executor(), server.config()};
        asio::steady_timer timer(ctx);
        timer.expires_after(100ms);
        auto winner = co_await (conn.async_connect(asio::use_awaitable) ||
                                timer.async_wait(asio::use_awaitable));
        CHECK(winner.index() == 1);
        CHECK_FALSE(conn.is_connected());
    });
    server.resume();
}

TEST_CASE("cancelling one async_connect leaves the other waiters alone") {
    redis_server server;
    server.pause(); // the handshake waits until the server is resumed
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        using namespace asio::experimental::awaitable_operators;
        auto cfg = fast_config(server);
        cfg.connect_timeout = 5000ms;
        redis::connection conn{ctx.get_executor(), cfg};
        error_code other_result = redis::error::closed;
        bool other_done = false;
        conn.async_connect([&](error_code ec) {
            other_result = ec;
            other_done = true;
        });
        asio::steady_timer timer(ctx);
        timer.expires_after(100ms);
        auto winner = co_await (conn.async_connect(asio::use_awaitable) ||
                                timer.async_wait(asio::use_awaitable));
        CHECK(winner.index() == 1);
        CHECK_FALSE(other_done); // still waiting: only the cancelled wait was abandoned
        server.resume();
        co_await poll_until([&] { return other_done; }, 300, 10ms);
        CHECK(other_done);
        CHECK_FALSE(other_result);
        CHECK(conn.is_connected());
        conn.close();
    });
}
