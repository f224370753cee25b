// The fault proxy proven against a real redis-server, through the library's own connection:
// each fault does what it promises (delay, stall, drop, black hole, cut), the connection
// reports it the way its documentation says, and recovers once the fault is gone.
#include <colock/redis/connection.hpp>

#include "proxy_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

asio::awaitable<long long> ping_ms(redis::connection& conn) {
    auto const started = steady::now();
    auto pong = co_await conn.co_exec(command("PING"));
    CHECK(pong.at(0).as_string() == "PONG");
    co_return ms_since(started);
}

/// Polls `probe` until it returns true or `limit` has passed; returns the last answer.
template <class Probe>
asio::awaitable<bool> becomes_true(Probe probe, std::chrono::milliseconds limit = 3000ms) {
    co_return co_await eventually(std::move(probe), limit, 10ms);
}

/// The outcome of a request sent with a callback, for requests that stay in flight while the
/// test does something else.
struct pending {
    bool done = false;
    error_code ec;
    redis::response replies;
};

void send(redis::connection& conn, resp3::request req, std::shared_ptr<pending> const& into) {
    conn.async_exec(std::move(req), [into](error_code ec, redis::response r) {
        into->ec = ec;
        into->replies = std::move(r);
        into->done = true;
    });
}

} // namespace

TEST_CASE("fault proxy: forwards both ways, counts bytes, and follows the client's close") {
    fault_proxy proxy{shared_server().port()};
    CHECK(proxy.url() == "redis://127.0.0.1:" + std::to_string(proxy.port()));
    CHECK(proxy.config().host == "127.0.0.1");
    CHECK(proxy.config().port == proxy.port());
    CHECK(proxy.port() != shared_server().port());
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), through(proxy)};
        co_await conn.async_connect(asio::use_awaitable);
        std::string const key = unique_key("proxy-forward");
        std::string const value(10'000, 'v'); // more than one read of the proxy's buffer
        co_await conn.co_exec(command("SET", key, value));
        auto const got = co_await get(conn, key);
        CHECK(got == value);
        CHECK(shared_server().cli(colock::test::strings("STRLEN", key)) == "10000");

        auto const s = proxy.stats();
        CHECK(s.accepted == 1);
        CHECK(s.bytes_to_server > value.size());
        CHECK(s.bytes_to_client > value.size());
        CHECK(s.dropped == 0);
        CHECK(s.cuts == 0);
        CHECK(s.rewrites == 0);
        CHECK(s.stalls == 0);
        CHECK(s.black_holed == 0);
        CHECK(proxy.open_connections() == 1);

        conn.close();
        bool const closed = co_await becomes_true([&] { return proxy.open_connections() == 0; });
        CHECK(closed);
    });
}

TEST_CASE("fault proxy: latency delays every chunk both ways and keeps their order") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        proxy.set_latency(250ms);
        auto const delayed = co_await ping_ms(conn);
        CHECK(delayed >= 500); // 250 ms on the way there, 250 ms on the way back
        CHECK(delayed < 5000);

        // Pipelined requests in several writes: each reply meets its request, in order.
        std::string const key = unique_key("proxy-latency");
        std::vector<std::shared_ptr<pending>> incrs;
        auto const started = steady::now();
        for (int i = 0; i < 20; ++i) {
            incrs.push_back(std::make_shared<pending>());
            send(conn, command("INCR", key), incrs.back());
            if (i % 5 == 4)
                co_await sleep_for(20ms); // a new chunk on the wire
        }
        co_await finishes(incrs.back()->done, 5000ms);
        CHECK(ms_since(started) >= 500);
        for (std::size_t i = 0; i < incrs.size(); ++i) {
            REQUIRE(incrs[i]->done); // replies come in order: the last one came last
            CHECK_FALSE(incrs[i]->ec);
            CHECK(incrs[i]->replies.at(0).as_integer() == static_cast<std::int64_t>(i + 1));
        }

        proxy.set_latency(0ms);
        auto const direct = co_await ping_ms(conn);
        CHECK(direct < 250);
    });
}

TEST_CASE("fault proxy: stall_for holds traffic both ways and then delivers all of it in order") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("proxy-stall");

        auto const started = steady::now();
        proxy.stall_for(1000ms);
        std::vector<std::shared_ptr<pending>> incrs;
        for (int i = 0; i < 10; ++i) {
            incrs.push_back(std::make_shared<pending>());
            send(conn, command("INCR", key), incrs.back());
        }
        auto last = std::make_shared<pending>();
        send(conn, command("GET", key), last);

        CHECK(co_await stays([&] { return !last->done; }, 150ms));
        // Held on the way to the server too: nothing has run yet.
        CHECK(shared_server().cli(colock::test::strings("EXISTS", key)) == "0");

        co_await finishes(last->done, 5000ms);
        REQUIRE(last->done);
        CHECK(ms_since(started) >= 1000);
        for (std::size_t i = 0; i < incrs.size(); ++i) {
            REQUIRE(incrs[i]->done);
            CHECK_FALSE(incrs[i]->ec);
            CHECK(incrs[i]->replies.at(0).as_integer() == static_cast<std::int64_t>(i + 1));
        }
        CHECK_FALSE(last->ec);
        CHECK(last->replies.at(0).as_string() == "10");
        CHECK(conn.reconnect_count() == 0); // delayed, not lost

        proxy.stall_for(0ms); // no effect, not counted
        CHECK(proxy.stats().stalls == 1);
        auto const after = co_await ping_ms(conn);
        CHECK(after < 500);
    });
}

TEST_CASE("fault proxy: a stall holds megabytes back without losing a byte") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("proxy-stall-big");
        // More than the proxy queues per direction: its reader pauses, TCP holds the rest.
        std::string value(12 * 1024 * 1024, '\0');
        for (std::size_t i = 0; i < value.size(); ++i)
            value[i] = static_cast<char>('a' + i % 26);

        proxy.stall_for(300ms);
        resp3::request req;
        req.push("SET", key, value);
        req.push("GET", key);
        auto [ec, r] = co_await conn.async_exec(std::move(req), as_tuple);
        CHECK_FALSE(ec);
        REQUIRE(r.size() == 2);
        CHECK(r[0].as_string() == "OK");
        CHECK(r[1].as_string() == value);
        auto const s = proxy.stats();
        CHECK(s.bytes_to_server > value.size());
        CHECK(s.bytes_to_client > value.size());
        CHECK(conn.reconnect_count() == 0);
    });
}

TEST_CASE("fault proxy: drop_connections fails a request in flight, and the next one reconnects") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("proxy-drop");
        co_await conn.co_exec(command("SET", key, "kept"));

        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        auto blocked = std::make_shared<pending>();
        send(conn, command("BLPOP", unique_key("proxy-never"), "5"), blocked);
        REQUIRE(co_await server_runs(shared_server(), id, "blpop"));
        CHECK_FALSE(blocked->done);
        proxy.drop_connections();
        co_await finishes(blocked->done, 2000ms);
        REQUIRE(blocked->done);
        // Written before the loss: it may have run, so it fails rather than being sent again.
        CHECK(blocked->ec == redis::error::connection_lost);

        auto const got = co_await get(conn, key);
        CHECK(got == "kept");
        CHECK(conn.reconnect_count() == 1);
        auto const s = proxy.stats();
        CHECK(s.dropped == 1);
        CHECK(s.accepted == 2);
        CHECK(proxy.open_connections() == 1);
    });
}

TEST_CASE("fault proxy: connecting through a black hole ends in connect_timeout") {
    fault_proxy proxy{shared_server().port()};
    proxy.set_black_hole(true);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = through(proxy);
        cfg.connect_timeout = 300ms;
        redis::connection conn{ctx.get_executor(), cfg};
        auto const started = steady::now();
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == redis::error::connect_timeout);
        CHECK(ms_since(started) >= 300);
        CHECK(ms_since(started) < 3000);
        CHECK_FALSE(conn.is_connected());

        auto s = proxy.stats();
        CHECK(s.accepted == 1);
        CHECK(s.black_holed == 1);
        CHECK(s.bytes_to_server == 0); // the handshake was swallowed
        // The client gave up and closed; the proxy noticed.
        bool const closed = co_await becomes_true([&] { return proxy.open_connections() == 0; });
        CHECK(closed);

        proxy.set_black_hole(false);
        auto [again] = co_await conn.async_connect(as_tuple);
        CHECK_FALSE(again);
        auto const rtt = co_await ping_ms(conn);
        CHECK(rtt < 1000);
        s = proxy.stats();
        CHECK(s.accepted == 2);
        CHECK(s.black_holed == 1);
        conn.close();
    });
}

TEST_CASE("fault proxy: a black hole is caught by the health check, and the connection recovers") {
    fault_proxy proxy{shared_server().port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = through(proxy, 200ms);
        cfg.connect_timeout = 500ms;
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.async_connect(asio::use_awaitable);
        std::string const key = unique_key("proxy-hole");
        co_await conn.co_exec(command("SET", key, "still here"));

        proxy.set_black_hole(true);
        CHECK(proxy.stats().black_holed == 1);
        auto const started = steady::now();
        auto [ec, r] = co_await conn.async_exec(command("GET", key), as_tuple);
        // Swallowed after it was written: the health check gives up on the socket.
        CHECK(ec == redis::error::connection_lost);
        CHECK(r.empty());
        CHECK(conn.last_error_text().find("PING") != std::string::npos);
        CHECK(ms_since(started) < 2000);

        // Reconnection attempts vanish into the hole too, and time out.
        bool const holed_again =
            co_await becomes_true([&] { return proxy.stats().black_holed >= 2; });
        CHECK(holed_again);
        CHECK_FALSE(conn.is_connected());

        proxy.set_black_hole(false);
        auto const got = co_await get(conn, key);
        CHECK(got == "still here");
        CHECK(conn.is_connected());
        CHECK(conn.reconnect_count() == 1);
        CHECK(proxy.open_connections() == 1);
        conn.close();
    });
}

TEST_CASE("fault proxy: a reply cut short is an error, never a wrong value, and the next works") {
    run_through_proxy([](redis::connection& conn, fault_proxy& proxy) -> asio::awaitable<void> {
        std::string const key = unique_key("proxy-cut");
        std::string const value = std::string(300, 'x') + "end";
        co_await conn.co_exec(command("SET", key, value));

        // In the middle of the blob.
        auto const to_client = proxy.stats().bytes_to_client;
        proxy.cut_next_reply(40);
        auto [ec, r] = co_await conn.async_exec(command("GET", key), as_tuple);
        CHECK(ec == redis::error::connection_lost);
        CHECK(r.empty());
        auto s = proxy.stats();
        CHECK(s.cuts == 1);
        CHECK(s.bytes_to_client - to_client <= 40);
        auto const got = co_await get(conn, key);
        CHECK(got == value);
        CHECK(conn.reconnect_count() == 1);

        // A reply no longer than keep_bytes: half of it gets through.
        proxy.cut_next_reply(1000);
        auto [pec, pong] = co_await conn.async_exec(command("PING"), as_tuple);
        CHECK(pec == redis::error::connection_lost);
        CHECK(pong.empty());
        auto const again = co_await get(conn, key);
        CHECK(again == value);
        s = proxy.stats();
        CHECK(s.cuts == 2);
        CHECK(s.accepted == 3);
        CHECK(conn.reconnect_count() == 2);
    });
}

TEST_CASE("fault proxy: a restarted server is reached by the next connection") {
    redis_server server;
    fault_proxy proxy{server.port()};
    run_through_proxy(proxy, [&](redis::connection& conn) -> asio::awaitable<void> {
        co_await conn.co_exec(command("SET", "k", "before"));

        server.kill();
        // The proxy closes the client's side when the server's side ends.
        bool const noticed = co_await becomes_true([&] { return !conn.is_connected(); });
        CHECK(noticed);
        server.restart();
        auto const got = co_await get(conn, "k");
        CHECK_FALSE(got.has_value()); // a fresh server: its data went with the old one
        CHECK(conn.reconnect_count() >= 1);
        CHECK(proxy.stats().accepted >= 2);
    });
}

TEST_CASE("fault proxy: destroyed promptly with traffic stalled, delayed and black-holed") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto stalled = std::make_unique<fault_proxy>(shared_server().port());
        redis::connection a{ctx.get_executor(), through(*stalled)};
        co_await a.async_connect(asio::use_awaitable);
        stalled->set_latency(10s);
        stalled->stall_for(30s);
        stalled->cut_next_reply(1);
        auto a_ping = std::make_shared<pending>();
        send(a, command("PING"), a_ping);

        auto holed = std::make_unique<fault_proxy>(shared_server().port());
        redis::connection b{ctx.get_executor(), through(*holed)};
        co_await b.async_connect(asio::use_awaitable);
        holed->set_black_hole(true);
        auto b_ping = std::make_shared<pending>();
        send(b, command("PING"), b_ping);
        auto cfg = through(*holed);
        cfg.connect_timeout = 10s;
        redis::connection c{ctx.get_executor(), cfg}; // accepted while black-holed
        auto c_connect = std::make_shared<pending>();
        c.async_connect([c_connect](error_code ec) {
            c_connect->ec = ec;
            c_connect->done = true;
        });
        bool const accepted = co_await becomes_true([&] { return holed->stats().accepted == 2; });
        CHECK(accepted);
        CHECK(co_await stays([&] { return !a_ping->done && !b_ping->done && !c_connect->done; },
                             50ms));
        CHECK_FALSE(a_ping->done);
        CHECK_FALSE(b_ping->done);
        CHECK_FALSE(c_connect->done);

        auto const started = steady::now();
        stalled.reset();
        holed.reset();
        CHECK(ms_since(started) < 1000);

        // Every client hears that its connection ended.
        co_await finishes(a_ping->done, 2000ms);
        REQUIRE(a_ping->done);
        CHECK(a_ping->ec == redis::error::connection_lost);
        co_await finishes(b_ping->done, 2000ms);
        REQUIRE(b_ping->done);
        CHECK(b_ping->ec == redis::error::connection_lost);
        co_await finishes(c_connect->done, 2000ms);
        REQUIRE(c_connect->done);
        CHECK(c_connect->ec);
        a.close();
        b.close();
        c.close();
    });
}
