// redis::config::log against a real redis-server: the lines a connection and a locker log, their
// levels, the threshold, and a hook that throws.
#include <colock/locker.hpp>
#include <colock/log.hpp>

#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace colock;
using namespace colock::test;

namespace {

asio::awaitable<void> reconnect_after_kill(redis_server& server, redis::connection& conn) {
    auto const id = co_await integer(conn, command("CLIENT", "ID"));
    CHECK(server.cli(strings("CLIENT", "KILL", "ID", std::to_string(id))) == "1");
    auto const before = conn.reconnect_count();
    co_await poll_until([&] { return conn.reconnect_count() != before; }, 300, 10ms);
    REQUIRE(conn.reconnect_count() == before + 1);
}

} // namespace

TEST_CASE("log hook: connected, lost and reconnected, at their levels; nothing below the "
          "threshold") {
    auto& server = shared_server();
    log_lines all, warnings;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        // A quick reconnect, and the default health check: a slow machine must not add lines.
        auto cfg = server.config();
        cfg.reconnect_initial_delay = 20ms;
        cfg.log = all.hook();
        auto quiet_cfg = cfg;
        quiet_cfg.log = warnings.hook();
        quiet_cfg.min_log_level = log_level::warning;
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection quiet{ctx.get_executor(), quiet_cfg};

        co_await conn.co_connect();
        co_await quiet.co_connect();
        co_await reconnect_after_kill(server, conn);
        co_await reconnect_after_kill(server, quiet);
        conn.close();
        quiet.close();
    });
    CAPTURE(all.dump());
    auto const endpoint = server.config().endpoint_text();
    CHECK(all.count(log_level::info, strings("connected to " + endpoint + " (run_id ")) == 1);
    CHECK(all.count(log_level::warning, strings("connection to " + endpoint + " lost (",
                                                "); reconnecting in 20 ms")) == 1);
    CHECK(all.count(log_level::info, strings("reconnected to " + endpoint + " (reconnection 1)")) ==
          1);
    // Connected, lost, reconnected: in that order.
    REQUIRE(all.lines.size() == 3);
    CHECK(all.lines[0].second.starts_with("connected to"));
    CHECK(all.lines[1].second.starts_with("connection to"));
    CHECK(all.lines[2].second.starts_with("reconnected to"));

    CAPTURE(warnings.dump());
    REQUIRE(warnings.lines.size() == 1);
    CHECK(warnings.lines[0].first == log_level::warning);
    CHECK(warnings.lines[0].second.starts_with("connection to " + endpoint + " lost ("));
}

TEST_CASE("log hook: a refused connection is a warning naming the endpoint and the cause") {
    log_lines seen;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::config cfg;
        cfg.port = unused_port();
        cfg.connect_timeout = 1000ms;
        cfg.log = seen.hook();
        redis::connection conn{ctx.get_executor(), cfg};
        auto [ec] = co_await conn.async_connect(as_tuple);
        CHECK(ec);
        conn.close();
        CAPTURE(seen.dump());
        CHECK(seen.count(log_level::warning,
                         strings("connecting to " + cfg.endpoint_text(), "refused")) >= 1);
        CHECK(seen.count(log_level::info, strings("connected")) == 0);
    });
}

TEST_CASE("log hook: a lost lease is a warning naming the lock, its fence and why; a hook that "
          "throws changes nothing") {
    auto& server = shared_server();
    log_lines seen;
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto cfg = server.config();
        cfg.log = seen.hook();
        redis::connection conn{ctx.get_executor(), cfg};
        redis::connection probe{ctx.get_executor(), server.config()};
        locker locks{conn};
        std::string const name = unique_key("logged-loss");
        auto opt = lease(3000ms);
        opt.renew_interval = 100ms;
        auto g = co_await locks.co_lock(name, opt);
        co_await probe.co_exec(command("DEL", lock_key(name)));
        co_await g.wait_lost();
        CHECK_FALSE(co_await g.release());
        CAPTURE(seen.dump());
        CHECK(
            seen.count(log_level::warning, strings("lock '" + name + "' (fence " +
                                                       std::to_string(g.fence()) + ") lost after ",
                                                   "the server no longer holds it")) == 1);

        auto throwing_cfg = server.config();
        throwing_cfg.log = [](log_level, std::string_view) {
            throw std::runtime_error("the log hook failed");
        };
        redis::connection throwing{ctx.get_executor(), throwing_cfg};
        locker other{throwing};
        auto h = co_await other.co_lock(name, lease(3000ms));
        CHECK(h.owns());
        CHECK(co_await h.release());
        conn.close();
        probe.close();
        throwing.close();
    });
}
