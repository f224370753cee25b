// The set-up of the tests that put a fault_proxy between one connection and its server: the
// connection's configuration and a run on a connection through the proxy.
#pragma once

#include "test_util.hpp"

#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock_test/fault_proxy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>

namespace colock::test {

/// The proxy's address with quick reconnection and, unless `health_check` says otherwise, no
/// health check, so that the next reply read is always the one to the request the test sends.
inline redis::config through(fault_proxy const& proxy,
                             std::chrono::milliseconds health_check = std::chrono::milliseconds{
                                 0}) {
    auto cfg = with_fast_timeouts(proxy.config());
    cfg.health_check_interval = health_check;
    return cfg;
}

/// Runs `scenario(conn)` as run_test does, on a connection through `proxy` (see through()):
/// connected before the scenario, closed once it returns.
template <class Scenario>
void run_through_proxy(fault_proxy& proxy, Scenario scenario) {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn{ctx.get_executor(), through(proxy)};
        co_await conn.async_connect(asio::use_awaitable);
        co_await scenario(conn);
        conn.close();
    });
}

/// run_through_proxy with a proxy of its own to the binary's shared server: the scenario takes
/// (conn, proxy).
template <class Scenario>
void run_through_proxy(Scenario scenario) {
    fault_proxy proxy{shared_server().port()};
    run_through_proxy(proxy, [&](redis::connection& conn) { return scenario(conn, proxy); });
}

} // namespace colock::test
