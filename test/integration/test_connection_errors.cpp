// Connection failures say which endpoint, which step and why, in what() and last_error_text(),
// never where in Boost the error was noticed.
#include <colock/redis/connection.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using namespace colock;
using namespace colock::test;
namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;

namespace {

bool contains(std::string const& text, std::string const& part) {
    return text.find(part) != std::string::npos;
}

// What co_exec throws when `conn` cannot connect; "no exception" when it does not throw.
asio::awaitable<std::string> exec_failure(redis::connection& conn, error_code& code) {
    try {
        co_await conn.co_exec(command("PING"));
    } catch (boost::system::system_error const& e) {
        code = e.code();
        co_return e.what();
    }
    co_return "no exception";
}

} // namespace

TEST_CASE("a refused connect names the endpoint and the cause, not Boost's source location") {
    std::uint16_t const port = unused_port();
    std::string const expected =
        "connecting to 127.0.0.1:" + std::to_string(port) + ": Connection refused";
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::config cfg;
        cfg.port = port;
        redis::connection conn{ctx.get_executor(), cfg};
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == asio::error::connection_refused);
        CHECK(conn.last_error_text() == expected);
        // The code carries no source location: its what() is the message and the category.
        CHECK_FALSE(contains(ec.what(), ".hpp"));
        CHECK_FALSE(ec.has_location());

        error_code thrown;
        std::string const what = co_await exec_failure(conn, thrown);
        CHECK(what == expected);
        CHECK(thrown == asio::error::connection_refused);

        // co_connect throws it as a connect_error; the lock layer reads the same text.
        std::string connect_what = "no exception";
        try {
            co_await conn.co_connect();
        } catch (redis::connect_error const& e) {
            connect_what = e.what();
            CHECK(e.code() == asio::error::connection_refused);
            CHECK_FALSE(e.code().has_location());
        }
        CHECK(connect_what == expected);
        auto const& engine = redis::detail::engine_of(conn);
        CHECK(redis::detail::engine_connect_failure(engine, ec) == expected);
        CHECK(redis::detail::engine_connect_failure(engine, redis::error::closed).empty());
        CHECK_FALSE(redis::detail::engine_ever_connected(engine));

        redis::connection up{ctx.get_executor(), shared_server().config()};
        co_await up.co_connect();
        CHECK(redis::detail::engine_ever_connected(redis::detail::engine_of(up)));
        up.close();
    });
}

TEST_CASE("rediss:// against a plain server: the timeout names the TLS handshake") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.use_tls = true;
        cfg.tls_verify_peer = false;
        cfg.connect_timeout = 500ms;
        std::string const expected = "connecting to 127.0.0.1:" + std::to_string(cfg.port) +
                                     " (TLS handshake): timed out after 500 ms";
        redis::connection conn{ctx.get_executor(), cfg};
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == redis::error::connect_timeout);
        CHECK(conn.last_error_text() == expected);

        error_code thrown;
        std::string const what = co_await exec_failure(conn, thrown);
        CHECK(what == expected);
        CHECK(thrown == redis::error::connect_timeout);
    });
}

TEST_CASE("a refused handshake carries the server's text in the exception") {
    redis_server_options opts;
    opts.acl_user = "app";
    opts.acl_password = "app-secret";
    redis_server server(opts);
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        std::string const endpoint = "connecting to 127.0.0.1:" + std::to_string(server.port());

        auto cfg = server.config();
        cfg.username = "app";
        cfg.password = "wrong";
        redis::connection wrong_password{ctx.get_executor(), cfg};
        error_code thrown;
        std::string what = co_await exec_failure(wrong_password, thrown);
        CHECK(thrown == redis::error::handshake_failed);
        CHECK(what.starts_with(endpoint + " (HELLO): WRONGPASS"));
        CHECK_FALSE(contains(what, "wrong"));
        CHECK(wrong_password.last_error_text() == what);

        auto far = server.config();
        far.database = 16; // redis-server has 16 databases by default: 0-15
        redis::connection out_of_range{ctx.get_executor(), far};
        what = co_await exec_failure(out_of_range, thrown);
        CHECK(thrown == redis::error::handshake_failed);
        CHECK(what == endpoint + " (SELECT 16): ERR DB index is out of range");
    });
}
