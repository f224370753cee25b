// A lock through Redis Sentinel across a failover: take a lock on the primary the sentinels
// name, have the sentinels fail over (this program asks them to, to show it), see the work's
// wait_lost() fire, and lock again on the promoted replica with a higher fence.
//
// Usage: colock_example_sentinel_failover [--url redis-sentinel://host:port,.../mymaster]
// Without --url it uses COLOCK_REDIS_URL. scripts/with-redis.sh --sentinel starts a throwaway
// deployment (a primary, a replica, three sentinels) and passes its URL.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

// What the program is doing now: said if it takes much longer than it should (a run under a
// test's timeout then shows where it stood).
char const* step = "starting";

// The work done under the lock: here, a long wait.
asio::awaitable<void> work(std::chrono::milliseconds how_long) {
    asio::steady_timer t(co_await asio::this_coro::executor, how_long);
    co_await t.async_wait(asio::use_awaitable);
}

// Asks the first sentinel for a failover, as an operator would with redis-cli.
asio::awaitable<void> ask_for_failover(colock::redis::config const& cfg) {
    colock::redis::config to_sentinel;
    to_sentinel.host = cfg.sentinel.sentinels.at(0).host;
    to_sentinel.port = cfg.sentinel.sentinels.at(0).port;
    to_sentinel.username = cfg.sentinel.username;
    to_sentinel.password = cfg.sentinel.password;
    colock::redis::connection sentinel{co_await asio::this_coro::executor, to_sentinel};
    colock::resp3::request req;
    req.push("SENTINEL", "FAILOVER", cfg.sentinel.master_name);
    co_await sentinel.co_exec(req);
    sentinel.close();
}

asio::awaitable<int> run(colock::redis::config cfg) {
    colock::redis::connection conn{co_await asio::this_coro::executor, cfg};
    step = "connecting through the sentinels";
    co_await conn.co_connect(); // asks the sentinels, then connects to the primary
    colock::locker locker{conn};

    colock::lock_options opt;
    opt.ttl = 10s;
    opt.wait_timeout = 30s;
    step = "locking";
    auto guard = co_await locker.co_lock("example:failover", opt);
    fmt::print("locked '{}' on {}, fence {}\n", guard.name(), cfg.sentinel.master_name,
               guard.fence());

    step = "asking for a failover";
    co_await ask_for_failover(cfg);
    fmt::print("asked the sentinels for a failover\n");

    // The work stops when the lease does: the connection follows the sentinels to the new
    // primary, a server instance that never granted this lease, and says so at once.
    step = "waiting for the lease to be reported lost";
    auto const started = std::chrono::steady_clock::now();
    auto const ended = co_await (work(60s) || guard.wait_lost());
    if (ended.index() == 0 || guard.loss() != colock::loss_reason::server_replaced) {
        fmt::print(stderr, "sentinel_failover: the lease was not reported lost\n");
        co_return 1;
    }
    fmt::print("lease lost after {} ms: the primary was replaced\n",
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - started)
                   .count());
    // Its release still goes out: the replica had the lease, and gives it up now.
    step = "unlocking the lost lease";
    co_await guard.release();

    step = "locking again on the new primary";
    auto again = co_await locker.co_lock("example:failover", opt);
    fmt::print("locked again on the new primary, fence {} (fences only go up)\n", again.fence());
    int const status = again.fence() > guard.fence() ? 0 : 1;
    step = "unlocking";
    co_await again.release();
    step = "closing";
    conn.close();
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    // Line by line even into a pipe: a run stopped by a timeout still shows its last step.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::string url;
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    if (argc == 3 && std::string_view(argv[1]) == "--url") {
        url = argv[2];
    } else if (argc != 1) {
        fmt::print(stderr, "usage: {} [--url redis-sentinel://host:port,.../master]\n", argv[0]);
        return 2;
    }

    if (url.empty()) {
        fmt::print(stderr, "sentinel_failover: no URL: pass --url or set COLOCK_REDIS_URL\n");
        return 2;
    }
    colock::redis::config cfg;
    boost::system::error_code url_error;
    std::string reason;
    cfg = colock::redis::config::from_url(url, url_error, &reason);
    if (url_error) {
        fmt::print(stderr, "sentinel_failover: bad URL: {}\n", reason);
        return 2;
    }
    if (!cfg.uses_sentinel()) {
        fmt::print(stderr, "sentinel_failover: needs a redis-sentinel:// URL, got {}\n",
                   cfg.to_redacted_url());
        return 2;
    }

    try {
        asio::io_context io;
        int status = 1;
        // A run takes seconds; this says where one stands that takes far longer.
        asio::steady_timer slow{io, 60s};
        slow.async_wait([](boost::system::error_code ec) {
            if (!ec)
                fmt::print(stderr, "sentinel_failover: still {} after 60 s\n", step);
        });
        asio::co_spawn(io, run(cfg), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure);
            status = result;
            slow.cancel();
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "sentinel_failover: {} ({})\n", e.what(), cfg.to_redacted_url());
        return 1;
    }
}
