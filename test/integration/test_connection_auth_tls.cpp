// The handshake and the transports: ACL users, passwords, database selection, client name, TLS,
// unix domain sockets.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <tuple>

using namespace colock;
using namespace colock::test;

TEST_CASE("AUTH with an ACL user: the right password connects, a wrong one is refused") {
    redis_server_options opts;
    opts.requirepass = "default-secret";
    redis_server server(with_app_user(opts));

    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = server.config();
        cfg.username = "app";
        cfg.password = "app-secret";
        redis::connection conn{ctx.get_executor(), cfg};
        auto [cec] = co_await conn.async_connect(as_tuple);
        INFO("connect failure: ", conn.last_error_text());
        REQUIRE_FALSE(cec);
        auto who = co_await conn.co_exec(command("ACL", "WHOAMI"));
        CHECK(who.at(0).as_string() == "app");
        conn.close();

        cfg.password = "wrong";
        redis::connection refused{ctx.get_executor(), cfg};
        auto [ec] = co_await refused.async_connect(as_tuple);
        CHECK(ec == redis::error::handshake_failed);
        CHECK(refused.last_error_text().find("WRONGPASS") != std::string::npos);
        CHECK(refused.last_error_text().find("app-secret") == std::string::npos);
        CHECK_FALSE(refused.is_connected());

        // The default user with requirepass, through a URL.
        auto url_cfg = redis::config::from_url(server.url());
        redis::connection by_url{ctx.get_executor(), url_cfg};
        auto who_default = co_await by_url.co_exec(command("ACL", "WHOAMI"));
        CHECK(who_default.at(0).as_string() == "default");
        by_url.close();

        redis::config no_password = server.config();
        no_password.password.clear();
        redis::connection anonymous{ctx.get_executor(), no_password};
        auto [aec] = co_await anonymous.async_connect(as_tuple);
        CHECK(aec == redis::error::handshake_failed);
        CHECK(anonymous.last_error_text().find("NOAUTH") != std::string::npos);
        CHECK(anonymous.last_error_text().find("no password was given: put it in the URL") !=
              std::string::npos);
    });
}

TEST_CASE("async_subscribe whose connection is refused in the handshake: the error, nothing "
          "counted") {
    redis_server server(with_app_user());

    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = server.config();
        cfg.username = "app";
        cfg.password = "not-yet";
        redis::connection conn{ctx.get_executor(), cfg};
        std::string const channel = unique_key("refused-at-connect");
        // The subscription starts the connection, whose handshake is refused (WRONGPASS).
        auto [ec] = co_await conn.async_subscribe(strings(channel), as_tuple);
        CHECK(ec == redis::error::handshake_failed);
        CHECK(conn.last_error_text().find("WRONGPASS") != std::string::npos);
        CHECK_FALSE(conn.is_connected());

        // The password becomes right: the same connection connects now, and its handshake must
        // not subscribe to the channel of the failed subscription.
        CHECK(server.cli(strings("ACL", "SETUSER", "app", ">not-yet")) == "OK");
        auto [cec] = co_await conn.async_connect(as_tuple);
        INFO("connect failure: ", conn.last_error_text());
        REQUIRE_FALSE(cec);
        auto const subscribers = co_await numsub(conn, channel);
        CHECK(subscribers == 0);
        conn.close();
    });
}

TEST_CASE("SELECT and CLIENT SETNAME are part of the handshake") {
    redis_server server;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = redis::config::from_url(server.url() + "/3");
        cfg.client_name = "colock-test-client";
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_exec(command("SET", "in-db-3", "yes"));
        auto name = co_await conn.co_exec(command("CLIENT", "GETNAME"));
        CHECK(name.at(0).as_string() == "colock-test-client");
        conn.close();
    });
    CHECK(server.cli(colock::test::strings("-n", "3", "GET", "in-db-3")) == "yes");
    CHECK(server.cli(colock::test::strings("-n", "0", "EXISTS", "in-db-3")) == "0");
}

TEST_CASE("TLS: a verified connection to a server with a self-signed CA") {
    redis_server_options opts;
    opts.tls = true;
    redis_server server(opts);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), server.tls_config()};
        co_await conn.async_connect(asio::use_awaitable);
        std::string const big(200'000, 'x'); // several TLS records each way
        resp3::request req;
        req.push("SET", "tls-key", big);
        req.push("GET", "tls-key");
        auto replies = co_await conn.co_exec(std::move(req));
        CHECK(replies.at(1).as_string() == big);
        auto info = co_await conn.co_exec(command("CLIENT", "INFO"));
        CHECK(info.at(0).as_string()->find("laddr=127.0.0.1:" +
                                           std::to_string(server.tls_port())) != std::string::npos);
        conn.close();

        // Without the CA the certificate cannot be verified.
        auto untrusted = server.tls_config();
        untrusted.tls_ca_file.clear();
        redis::connection refused{ctx.get_executor(), untrusted};
        auto [ec] = co_await refused.async_connect(as_tuple);
        CHECK(ec);
        CHECK_FALSE(refused.is_connected());

        // Plain text to the TLS port is not a Redis conversation.
        auto plain = server.tls_config();
        plain.use_tls = false;
        plain.connect_timeout = std::chrono::milliseconds{500};
        redis::connection confused{ctx.get_executor(), plain};
        auto [pec] = co_await confused.async_connect(as_tuple);
        CHECK(pec);
    });
}

TEST_CASE("a unix domain socket: commands, and a reconnect after the server restarts") {
    redis_server_options opts;
    opts.unix_socket = true;
    redis_server server(opts);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const url = "unix://" + server.unix_socket_path() + "?db=2";
        auto cfg = redis::config::from_url(url);
        CHECK(cfg.unix_socket == server.unix_socket_path());
        CHECK(cfg.to_redacted_url() == url);
        // Host and port are ignored: nothing listens on this port.
        cfg.port = unused_port();
        cfg.connect_timeout = 1000ms;
        cfg.health_check_interval = 200ms;
        cfg.reconnect_initial_delay = 20ms;
        cfg.reconnect_max_delay = 200ms;
        redis::connection conn{ctx.get_executor(), cfg};
        co_await conn.co_connect();
        co_await conn.co_exec(command("SET", "over-unix", "yes"));
        auto info = co_await conn.co_exec(command("CLIENT", "INFO"));
        // Redis shows a unix client's address as the socket's path.
        CHECK(text_of(info.at(0)).find("laddr=" + server.unix_socket_path()) != std::string::npos);
        CHECK(text_of(info.at(0)).find(" db=2 ") != std::string::npos);

        server.restart();
        auto [ec, replies] = co_await conn.async_exec(command("GET", "over-unix"), as_tuple);
        if (ec == redis::error::connection_lost) // the first request may meet the dead socket
            std::tie(ec, replies) = co_await conn.async_exec(command("GET", "over-unix"), as_tuple);
        INFO("last error: ", conn.last_error_text());
        CHECK_FALSE(ec);
        if (!ec)
            CHECK(replies.at(0).is_null()); // a fresh server
        CHECK(conn.reconnect_count() >= 1);
        co_await conn.co_exec(command("SET", "after-restart", "yes"));
        conn.close();
    });
    CHECK(server.cli(strings("-n", "2", "GET", "after-restart")) == "yes");
}

TEST_CASE("a unix socket that is not there, and TLS over a unix socket") {
    redis_server_options opts;
    opts.unix_socket = true;
    redis_server server(opts);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::config cfg;
        cfg.unix_socket = server.unix_socket_path() + ".missing";
        redis::connection conn{ctx.get_executor(), cfg};
        std::string what = "no exception";
        try {
            co_await conn.co_connect();
        } catch (redis::connect_error const& e) {
            what = e.what();
        }
        CHECK(what == "connecting to " + cfg.unix_socket + ": No such file or directory");
    });
    auto cfg = server.unix_config();
    cfg.use_tls = true;
    asio::io_context ctx;
    CHECK_THROWS_AS(redis::connection(ctx.get_executor(), cfg), boost::system::system_error);
}
