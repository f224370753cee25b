// Edge cases of the connection's life: close() racing a writer, a drop in the middle of a
// write, subscription changes while disconnected, one connect_timeout for the whole set-up,
// a push listener that throws.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/post.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

using namespace colock;
using namespace colock::test;

namespace {

// The server's run_id, as INFO server says it to redis-cli.
std::string cli_run_id(redis_server& server) {
    auto const info = server.cli(colock::test::strings("INFO", "server"));
    auto const at = info.find("run_id:");
    return at == std::string::npos ? std::string() : info.substr(at + 7, 40);
}

} // namespace

TEST_CASE("a reconnection whose INFO is refused keeps the last known run_id, so that the next "
          "one still notices a restarted server") {
    redis_server server(with_app_user());
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.username = "app";
        cfg.password = "app-secret";
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_connect();
        std::string const first = cli_run_id(server);
        REQUIRE(first.size() == 40);
        CHECK(conn.server_run_id() == first);

        // The same server, reached again by a user that may no longer run INFO: the instance is
        // not known from this handshake, and the one known before stays.
        CHECK(server.cli(colock::test::strings("ACL", "SETUSER", "app", "-info")) == "OK");
        CHECK(server.cli(colock::test::strings("CLIENT", "KILL", "USER", "app")) == "1");
        CHECK(co_await finishes_when([&] { return conn.reconnect_count() == 1; }, 5000ms));
        CHECK(conn.server_run_id() == first);
        CHECK(conn.server_change_count() == 0);

        // Restarted (its ACL as configured again, INFO allowed): another instance, compared
        // with the last one known.
        server.restart();
        CHECK(co_await finishes_when([&] { return conn.reconnect_count() == 2; }, 5000ms));
        std::string const second = cli_run_id(server);
        CHECK(second != first);
        CHECK(conn.server_run_id() == second);
        CHECK(conn.server_change_count() == 1);
        conn.close();
    });
}

TEST_CASE("a request made after close() is never taken by the closed connection's writer") {
    // The old writer may be about to resume (a write of its own just completed) when close()
    // runs; try the race at every point a few strand turns apart, and with writes of several
    // sizes.
    for (std::size_t size : {std::size_t{10}, std::size_t{256 * 1024}, std::size_t{4 << 20}}) {
        for (int turns = 0; turns < 8; ++turns) {
            CAPTURE(size);
            CAPTURE(turns);
            run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
                redis::connection conn{ctx.get_executor(), shared_server().config()};
                co_await conn.async_connect(asio::use_awaitable);
                auto before = std::make_shared<exec_outcome>();
                exec_into(conn, command("SET", unique_key("before-close"), std::string(size, 'x')),
                          before);
                for (int i = 0; i < turns; ++i)
                    co_await asio::post(ctx.get_executor(), asio::use_awaitable);
                conn.close();
                auto after = std::make_shared<exec_outcome>();
                exec_into(conn, command("ECHO", "after-close"), after);
                bool const done = co_await finishes(after->done, 5000ms);
                CHECK(done);
                if (done) {
                    CHECK_FALSE(after->ec);
                    CHECK(text_of(after->replies.at(0)) == "after-close");
                }
                CHECK(co_await finishes(before->done, 5000ms));
                conn.close();
                co_await finishes(after->done, 5000ms);
            });
        }
    }
}

TEST_CASE(
    "a drop in the middle of a write: the requests not written wait for the next connection") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        // Long enough for the big write to cross once the server is back, even on a loaded
        // machine: the health check's PING waits behind it.
        cfg.health_check_interval = 1000ms;
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.async_connect(asio::use_awaitable);
        std::string const key = unique_key("big");
        // More than a stopped reader's socket buffers take (its receive window stays small).
        std::size_t const big = 16u << 20;

        // A stopped server reads nothing: the write stalls part way through the big value,
        // with the small request behind it in the same write, and the health check drops it.
        server.pause();
        auto large = std::make_shared<exec_outcome>();
        auto small = std::make_shared<exec_outcome>();
        exec_into(conn, command("SET", key, std::string(big, 'b')), large);
        exec_into(conn, command("ECHO", "behind"), small);
        bool const dropped = co_await finishes_when([&] { return !conn.is_connected(); }, 5000ms);
        CHECK(dropped);
        CHECK(co_await stays([&] { return !large->done && !small->done; }, 300ms));
        CHECK_FALSE(large->done);
        CHECK_FALSE(small->done);
        server.resume();

        CHECK(co_await finishes(small->done, 10000ms));
        CHECK(co_await finishes(large->done, 10000ms));
        INFO("last error: ", conn.last_error_text());
        CHECK_FALSE(small->ec);
        CHECK_FALSE(large->ec);
        if (!small->ec)
            CHECK(text_of(small->replies.at(0)) == "behind");
        auto len = co_await conn.co_exec(command("STRLEN", key));
        CHECK(len.at(0).as_integer() == static_cast<std::int64_t>(big));
        conn.close();
    });
}

namespace {

struct slow_write_outcomes {
    std::shared_ptr<exec_outcome> earlier = std::make_shared<exec_outcome>();
    std::shared_ptr<exec_outcome> first = std::make_shared<exec_outcome>();
    std::shared_ptr<exec_outcome> second = std::make_shared<exec_outcome>();
};

// `first` and `second` go out in one write, made slow by the proxy's latency (its queue takes
// 4 MiB per latency period, and a big value takes many). With `earlier`, a BLPOP is in flight
// before that write and its reply arrives while the write is pending. Then the proxy drops
// the connection, part way through the write.
asio::awaitable<slow_write_outcomes>
drop_during_slow_write(redis::connection& conn, redis::connection& direct, fault_proxy& proxy,
                       bool earlier, resp3::request first, resp3::request second) {
    slow_write_outcomes out;
    std::string const list = unique_key("unblocks");
    if (earlier) {
        auto const id = co_await integer(conn, command("CLIENT", "ID"));
        exec_into(conn, command("BLPOP", list, "10"), out.earlier);
        // Written: the server blocks on it.
        REQUIRE(co_await server_runs(direct, id, "blpop"));
    }
    proxy.set_latency(300ms);
    exec_into(conn, std::move(first), out.first);
    exec_into(conn, std::move(second), out.second);
    co_await sleep_for(50ms);
    if (earlier) {
        co_await direct.co_exec(command("LPUSH", list, "x"));
        bool const answered = co_await finishes(out.earlier->done, 5000ms);
        CHECK(answered);
        CHECK_FALSE(out.earlier->ec);
    } else {
        CHECK(co_await stays([&] { return !out.first->done && !out.second->done; }, 400ms));
    }
    CHECK_FALSE(out.first->done);
    CHECK_FALSE(out.second->done);
    proxy.drop_connections();
    proxy.set_latency(0ms);
    co_return out;
}

redis::config through_proxy(redis_server const& server, fault_proxy const& proxy) {
    auto cfg = fast_config(server);
    cfg.port = proxy.port();
    // A PING would wait behind the slow write and drop the connection by itself.
    cfg.health_check_interval = 0ms;
    cfg.connect_timeout = 5000ms;
    return cfg;
}

// Runs `scenario(conn, direct, proxy, key)` as run_test does, on a server of its own: `conn`
// reaches it through `proxy` (connected first), `direct` without one, and `key` is for the slow
// value; both connections are closed once it returns.
template <class Scenario>
void run_drop_test(Scenario scenario) {
    redis_server server;
    fault_proxy proxy{server.port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), through_proxy(server, proxy)};
        redis::connection direct{ctx.get_executor(), fast_config(server)};
        co_await conn.async_connect(asio::use_awaitable);
        co_await scenario(conn, direct, proxy, unique_key("big"));
        conn.close();
        direct.close();
    });
}

std::size_t const slow_value_size = 48u << 20;

// Both requests of a drop_during_slow_write have completed, each within its limit.
asio::awaitable<void> check_both_finish(slow_write_outcomes const& out,
                                        std::chrono::milliseconds first_limit,
                                        std::chrono::milliseconds second_limit) {
    bool const first_finished = co_await finishes(out.first->done, first_limit);
    CHECK(first_finished);
    bool const second_finished = co_await finishes(out.second->done, second_limit);
    CHECK(second_finished);
}

// A request of a drop_during_slow_write succeeded, with `reply` as its first value.
void check_replied(exec_outcome const& outcome, std::string_view reply) {
    CHECK_FALSE(outcome.ec);
    if (!outcome.ec)
        CHECK(text_of(outcome.replies.at(0)) == reply);
}

// `counter` was incremented once: the request with the INCR never ran again.
asio::awaitable<void> check_incremented_once(redis::connection& direct,
                                             std::string const& counter) {
    auto const n = co_await get(direct, counter);
    CHECK(n == std::optional<std::string>("1"));
}

// The slow value reached the server whole under `key`.
asio::awaitable<void> check_stored_whole(redis::connection& direct, std::string const& key) {
    auto const length = co_await integer(direct, command("STRLEN", key));
    CHECK(length == static_cast<std::int64_t>(slow_value_size));
}

// The stream is in step: the next request gets its own reply.
asio::awaitable<void> check_in_step(redis::connection& conn) {
    auto [ec, echoed] = co_await conn.async_exec(command("ECHO", "in step"), as_tuple);
    CHECK_FALSE(ec);
    if (!ec)
        CHECK(text_of(echoed.at(0)) == "in step");
}

} // namespace

TEST_CASE("a drop mid-write after an earlier reply: the written request fails, the partial one "
          "is sent again alone") {
    run_drop_test([](redis::connection& conn, redis::connection& direct, fault_proxy& proxy,
                     std::string const& key) -> asio::awaitable<void> {
        std::string const counter = unique_key("counter");
        // The INCR is written whole, the SET only in part when the connection drops.
        auto out =
            co_await drop_during_slow_write(conn, direct, proxy, true, command("INCR", counter),
                                            command("SET", key, std::string(slow_value_size, 'v')));

        co_await check_both_finish(out, 10000ms, 20000ms);
        INFO("last error: ", conn.last_error_text());
        CHECK(out.first->ec == redis::error::connection_lost);
        check_replied(*out.second, "OK");
        // The INCR ran once: it is never sent again, alone or inside another request.
        co_await check_incremented_once(direct, counter);
        co_await check_stored_whole(direct, key);
        co_await check_in_step(conn);
    });
}

TEST_CASE("a drop mid-write after an earlier reply: requests none of whose bytes were whole "
          "wait for the next connection, each with its own bytes") {
    run_drop_test([](redis::connection& conn, redis::connection& direct, fault_proxy& proxy,
                     std::string const& key) -> asio::awaitable<void> {
        std::string const small = unique_key("small");
        // The connection drops inside the big value: neither SET has reached the server whole.
        auto out = co_await drop_during_slow_write(
            conn, direct, proxy, true, command("SET", key, std::string(slow_value_size, 'v')),
            command("SET", small, "behind"));

        co_await check_both_finish(out, 20000ms, 20000ms);
        INFO("last error: ", conn.last_error_text());
        CHECK_FALSE(out.first->ec);
        CHECK_FALSE(out.second->ec);
        CHECK(out.first->replies.size() == 1);
        CHECK(out.second->replies.size() == 1);
        co_await check_stored_whole(direct, key);
        auto const behind = co_await get(direct, small);
        CHECK(behind == std::optional<std::string>("behind"));
        co_await check_in_step(conn);
    });
}

TEST_CASE("a drop mid-write: a request whose first command was written whole fails, and is "
          "never run again") {
    run_drop_test([](redis::connection& conn, redis::connection& direct, fault_proxy& proxy,
                     std::string const& key) -> asio::awaitable<void> {
        std::string const counter = unique_key("counter");
        // One request: INCR written whole, the SET behind it only in part. The INCR may have
        // run (it did), so the request cannot be sent again.
        resp3::request both;
        both.push("INCR", counter);
        both.push("SET", key, std::string(slow_value_size, 'v'));
        auto out = co_await drop_during_slow_write(conn, direct, proxy, false, std::move(both),
                                                   command("ECHO", "behind"));

        co_await check_both_finish(out, 10000ms, 10000ms);
        INFO("last error: ", conn.last_error_text());
        CHECK(out.first->ec == redis::error::connection_lost);
        // Nothing of it had reached the server whole: it waits for the next connection.
        check_replied(*out.second, "behind");
        co_await check_incremented_once(direct, counter);
        auto const exists = co_await integer(direct, command("EXISTS", key));
        CHECK(exists == 0);
    });
}

TEST_CASE("async_subscribe while the first attempt is still connecting waits for its outcome") {
    redis_server server;
    fault_proxy proxy{server.port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.port = proxy.port();
        cfg.connect_timeout = 500ms;
        redis::connection conn{ctx.get_executor(), cfg};
        std::string const channel = unique_key("subscribed-while-connecting");
        // The proxy accepts and answers nothing: the first attempt times out in its handshake.
        proxy.set_black_hole(true);
        bool connect_done = false;
        bool subscribe_done = false;
        error_code connect_ec = redis::error::closed;
        error_code subscribe_ec = redis::error::closed;
        conn.async_connect([&](error_code ec) {
            connect_ec = ec;
            connect_done = true;
        });
        conn.async_subscribe(strings(channel), [&](error_code ec) {
            subscribe_ec = ec;
            subscribe_done = true;
        });
        bool const finished7 = co_await finishes(connect_done, 5000ms);
        CHECK(finished7);
        bool const finished8 = co_await finishes(subscribe_done, 5000ms);
        CHECK(finished8);
        CHECK(connect_ec == redis::error::connect_timeout);
        CHECK(subscribe_ec == redis::error::connect_timeout);
        CHECK_FALSE(conn.is_connected());

        // Nothing was counted: the next connection subscribes to nothing.
        proxy.set_black_hole(false);
        auto [cec] = co_await conn.async_connect(as_tuple);
        REQUIRE_FALSE(cec);
        auto const subscribers = co_await numsub_becomes(conn, channel, 0);
        CHECK(subscribers == 0);
        conn.close();
    });
}

TEST_CASE("an UNSUBSCRIBE from before a reconnection never undoes the reconnection's SUBSCRIBE") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = fast_config(server);
        cfg.connect_timeout = 5000ms; // a handshake with the stopped server hangs this long
        redis::connection conn{ctx.get_executor(), cfg};
        std::string const channel = unique_key("resubscribed");
        co_await conn.async_subscribe(colock::test::strings(channel), asio::use_awaitable);
        CHECK(cli_numsub(server, channel) == 1);

        // Lost, and a new attempt stuck in its handshake: the unsubscription meets a
        // connection being set up ...
        server.pause();
        bool const dropped = co_await finishes_when([&] { return !conn.is_connected(); }, 5000ms);
        CHECK(dropped);
        co_await sleep_for(300ms);
        bool unsubscribed = false;
        conn.async_unsubscribe(colock::test::strings(channel),
                               [&](error_code) { unsubscribed = true; });
        co_await sleep_for(100ms);
        // ... which dies; the subscription comes back while nothing is connected.
        server.kill();
        co_await sleep_for(300ms);
        bool subscribed = false;
        conn.async_subscribe(colock::test::strings(channel),
                             [&](error_code) { subscribed = true; });
        co_await sleep_for(100ms);
        server.restart();

        CHECK(co_await finishes_when([&] { return conn.is_connected(); }, 10000ms));
        CHECK(co_await finishes(unsubscribed, 5000ms));
        CHECK(co_await finishes(subscribed, 5000ms));
        co_await conn.co_exec(command("PING"));
        // The count says 1: so must the server, and stay so.
        CHECK(cli_numsub(server, channel) == 1);
        CHECK(co_await stays([&] { return cli_numsub(server, channel) == 1; }, 300ms));
        co_await conn.co_exec(command("PING"));
        CHECK(cli_numsub(server, channel) == 1);
        conn.close();
    });
}

TEST_CASE("connect_timeout bounds the transport and the handshake together") {
    redis_server_options opts;
    opts.tls = true;
    redis_server server(opts);
    fault_proxy proxy{server.tls_port()};
    // 200 ms each way: the TLS handshake takes one round trip, HELLO another, so about
    // 400 ms each and 800 ms together.
    proxy.set_latency(200ms);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = server.tls_config();
        cfg.port = proxy.port();
        cfg.health_check_interval = 0ms;
        cfg.connect_timeout = 600ms;
        redis::connection slow{ctx.get_executor(), cfg};
        auto const started = steady::now();
        auto [ec] = co_await slow.async_connect(as_tuple);
        CHECK(ec == redis::error::connect_timeout);
        CHECK(ms_since(started) < 1500);
        CHECK_FALSE(slow.is_connected());

        cfg.connect_timeout = 5000ms;
        redis::connection patient{ctx.get_executor(), cfg};
        auto [pec] = co_await patient.async_connect(as_tuple);
        CHECK_FALSE(pec);
        patient.close();
    });
}

namespace {
struct throwing_listener final : redis::push_listener {
    int calls = 0;
    void on_push(resp3::value const&) override {
        ++calls;
        throw std::runtime_error("listener failure on purpose");
    }
    void on_reconnect() override { throw std::runtime_error("reconnect failure on purpose"); }
};

struct message_counter final : redis::push_listener {
    int messages = 0;
    void on_push(resp3::value const& v) override {
        if (!v.elements.empty() && v.elements[0].as_string() == "message")
            ++messages;
    }
};
} // namespace

TEST_CASE("a push listener that throws does not break the connection") {
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), fast_config(shared_server())};
        auto thrower = std::make_shared<throwing_listener>();
        auto counter = std::make_shared<message_counter>();
        conn.add_push_listener(thrower);
        conn.add_push_listener(counter);
        std::string const channel = unique_key("throwing");
        co_await conn.async_subscribe(colock::test::strings(channel), asio::use_awaitable);
        co_await conn.co_exec(command("PING"));
        shared_server().cli(colock::test::strings("PUBLISH", channel, "one"));
        shared_server().cli(colock::test::strings("PUBLISH", channel, "two"));
        CHECK(co_await finishes_when([&] { return counter->messages == 2; }, 3000ms));
        CHECK(thrower->calls >= 2);
        CHECK(conn.last_error_text().find("listener failure on purpose") != std::string::npos);
        auto pong = co_await conn.co_exec(command("PING"));
        CHECK(text_of(pong.at(0)) == "PONG");
        CHECK(conn.is_connected());
        CHECK(conn.reconnect_count() == 0);

        // A listener throwing from on_reconnect does not stop the reconnection either.
        shared_server().cli(colock::test::strings("CLIENT", "KILL", "TYPE", "pubsub"));
        CHECK(co_await finishes_when([&] { return conn.reconnect_count() == 1; }, 5000ms));
        pong = co_await conn.co_exec(command("PING"));
        CHECK(text_of(pong.at(0)) == "PONG");
        shared_server().cli(colock::test::strings("PUBLISH", channel, "three"));
        CHECK(co_await finishes_when([&] { return counter->messages == 3; }, 3000ms));
        conn.remove_push_listener(thrower.get());
        conn.remove_push_listener(counter.get());
        conn.close();
    });
}
