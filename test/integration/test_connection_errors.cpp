// Connection failures say which endpoint, which step and why, in what() and last_error_text(),
// never where in Boost the error was noticed.
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>

#include "test_util.hpp"

#include "redis/engine.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;

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

// A TCP listener on a free loopback port that is no Redis server: it writes `greeting` to each
// connection and closes it, as a web server on a port mistaken for Redis's would; with no
// greeting it keeps the connection and stays silent. Counts the connections.
class not_redis {
public:
    not_redis(asio::any_io_executor ex, std::string greeting)
        : st_(std::make_shared<state>(std::move(ex), std::move(greeting))) {
        asio::co_spawn(st_->acceptor.get_executor(), serve(st_), asio::detached);
    }
    not_redis(not_redis const&) = delete;
    not_redis& operator=(not_redis const&) = delete;
    ~not_redis() {
        error_code ignored;
        st_->acceptor.close(ignored);
        st_->silent.clear();
    }

    std::uint16_t port() const { return st_->acceptor.local_endpoint().port(); }
    int connections() const { return st_->connections; }

private:
    struct state {
        state(asio::any_io_executor ex, std::string g)
            : acceptor(ex, {asio::ip::make_address("127.0.0.1"), 0}), greeting(std::move(g)) {}
        asio::ip::tcp::acceptor acceptor;
        std::string greeting;
        int connections = 0;
        std::vector<std::shared_ptr<asio::ip::tcp::socket>> silent;
    };

    static asio::awaitable<void> serve(std::shared_ptr<state> st) {
        for (;;) {
            auto [ec, socket] = co_await st->acceptor.async_accept(as_tuple);
            if (ec)
                co_return;
            ++st->connections;
            if (st->greeting.empty()) {
                st->silent.push_back(std::make_shared<asio::ip::tcp::socket>(std::move(socket)));
                continue;
            }
            co_await asio::async_write(socket, asio::buffer(st->greeting), as_tuple);
        }
    }

    std::shared_ptr<state> st_;
};

std::string const http_response =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

// co_lock's error and its message, and how long it took; the error is empty when it locked.
struct lock_failure {
    error_code ec;
    std::string what;
    long long ms = 0;
};

asio::awaitable<lock_failure> lock_fails(redis::connection& conn, lock_options opt = {}) {
    locker locks{conn};
    lock_failure out;
    auto const started = steady::now();
    try {
        auto guard = co_await locks.co_lock(unique_key("connect-error"), opt);
        co_await guard.release();
    } catch (boost::system::system_error const& e) {
        out.ec = e.code();
        out.what = e.what();
    }
    out.ms = ms_since(started);
    co_return out;
}

// `conn`'s connect fails with handshake_failed within `limit`, and its last error says
// `expected`.
asio::awaitable<void> check_handshake_refused(redis::connection& conn,
                                              std::chrono::milliseconds limit,
                                              std::string const& expected) {
    auto const started = steady::now();
    auto [ec] = co_await conn.async_connect(as_tuple);
    CHECK(ec == redis::error::handshake_failed);
    CHECK(ms_since(started) < limit.count());
    CHECK(conn.last_error_text() == expected);
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

TEST_CASE("rediss:// against a plain Redis server fails at once: it does not speak TLS") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = shared_server().config();
        cfg.use_tls = true;
        cfg.tls_verify_peer = false;
        std::string const expected = "connecting to 127.0.0.1:" + std::to_string(cfg.port) +
                                     " (TLS handshake): the server does not speak TLS: it answers "
                                     "plain-text Redis on this port (PING on a plain connection: "
                                     "\"+PONG\\r\\n\")";
        redis::connection conn{ctx.get_executor(), cfg};
        co_await check_handshake_refused(conn, 2000ms, expected); // not connect_timeout (5 s)

        error_code thrown;
        std::string const what = co_await exec_failure(conn, thrown);
        CHECK(what == expected);
        CHECK(thrown == redis::error::handshake_failed);

        // A waiting co_lock does not try again for first_connect_timeout.
        redis::connection for_lock{ctx.get_executor(), cfg};
        auto const failed = co_await lock_fails(for_lock);
        CHECK(failed.ec == redis::error::handshake_failed);
        CHECK(contains(failed.what, "does not speak TLS"));
        CHECK(failed.ms < 2000);
    });
}

TEST_CASE("rediss:// to a server whose answer is no TLS record: it does not speak TLS") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        not_redis web{ctx.get_executor(), http_response};
        redis::config cfg;
        cfg.port = web.port();
        cfg.use_tls = true;
        cfg.tls_verify_peer = false;
        redis::connection conn{ctx.get_executor(), cfg};
        auto const started = steady::now();
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec == redis::error::handshake_failed);
        CHECK(ms_since(started) < 1000);
        std::string const prefix = "connecting to 127.0.0.1:" + std::to_string(cfg.port) +
                                   " (TLS handshake): the server does not speak TLS: its answer "
                                   "to the TLS client hello is no TLS record (OpenSSL: ";
        CHECK_MESSAGE(conn.last_error_text().starts_with(prefix), conn.last_error_text());
    });
}

TEST_CASE("a server that accepts and never answers: co_lock gives up within first_connect_timeout "
          "and one more connect_timeout, not two") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        not_redis silent{ctx.get_executor(), ""};
        redis::config cfg;
        cfg.port = silent.port();
        cfg.connect_timeout = 1000ms;
        redis::connection conn{ctx.get_executor(), cfg};
        lock_options opt;
        opt.first_connect_timeout = 1100ms;
        // The first attempt times out at 1000 ms, the next (after a backoff of some tens of ms)
        // at about 2050 ms, past first_connect_timeout: that failure ends co_lock. A third
        // attempt would end at 3000 ms at the earliest; the bound sits in the middle of the gap,
        // so that a slow machine does not read as a third attempt.
        auto const failed = co_await lock_fails(conn, opt);
        CHECK(failed.ec == redis::error::connect_timeout);
        CHECK(failed.ms >= 1100);
        CHECK(failed.ms < 2700);
        CHECK(silent.connections() <= 3);
    });
}

TEST_CASE("a port answered by something that is not Redis fails at once, showing its first "
          "bytes") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        not_redis web{ctx.get_executor(), http_response};
        redis::config cfg;
        cfg.port = web.port();
        // Shared: a release the lock layer sends in the background may log after this frame.
        auto warnings = std::make_shared<int>(0);
        cfg.log = [warnings](log_level level, std::string_view) {
            *warnings += level == log_level::warning ? 1 : 0;
        };
        std::string const expected =
            "connecting to 127.0.0.1:" + std::to_string(cfg.port) +
            " (Redis handshake): not a Redis server (first bytes: \"HTTP/1.1 400 Bad "
            "Request\\r\\nConten\"...)";
        {
            redis::connection conn{ctx.get_executor(), cfg};
            co_await check_handshake_refused(conn, 1000ms, expected);
            CHECK(*warnings == 1); // the failure once, not a protocol error beside it
        }

        // A waiting co_lock fails at once too, rather than trying for first_connect_timeout.
        redis::connection for_lock{ctx.get_executor(), cfg};
        auto const failed = co_await lock_fails(for_lock);
        CHECK(failed.ec == redis::error::handshake_failed);
        CHECK_MESSAGE(contains(failed.what, "not a Redis server (first bytes: \"HTTP/1.1"),
                      failed.what);
        CHECK_FALSE(contains(failed.what, "timed out"));
        CHECK(failed.ms < 1000);
        CHECK(web.connections() <= 3); // the lock's, and maybe its background release's
    });
}

TEST_CASE("against a dead port, a waiting co_lock connects once per retry, and each failure is "
          "told once") {
    std::uint16_t const port = unused_port();
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::config cfg;
        cfg.port = port;
        cfg.reconnect_initial_delay = 100ms;
        struct logged {
            std::vector<steady::time_point> at;
            std::vector<std::string> lines;
        };
        // Shared: a release the lock layer sends in the background may log after this frame.
        auto log = std::make_shared<logged>();
        cfg.log = [log](log_level level, std::string_view line) {
            if (level != log_level::warning)
                return;
            log->at.push_back(steady::now());
            log->lines.emplace_back(line);
        };
        redis::connection conn{ctx.get_executor(), cfg};
        lock_options opt;
        opt.first_connect_timeout = 1000ms;
        auto const failed = co_await lock_fails(conn, opt);
        CHECK(failed.ec == asio::error::connection_refused);
        auto const& failures = log->at;
        REQUIRE_FALSE(failures.empty());
        // The lock's queue subscribes to its wake channel, then tries: one attempt, not two.
        for (std::size_t i = 1; i < failures.size(); ++i)
            CHECK_MESSAGE(ms_between(failures[i - 1], failures[i]) >= 90, "failure ", i);
        CHECK(failures.size() <= 11);
        for (auto const& line : log->lines)
            CHECK(line ==
                  "connecting to 127.0.0.1:" + std::to_string(port) + ": Connection refused");
    });
}

TEST_CASE("a refused handshake carries the server's text in the exception") {
    redis_server server(with_app_user());
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
