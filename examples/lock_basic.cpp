// The smallest colock lock program: connect, take a lock, work under it, give it back; then a
// co_try_lock that finds the lock busy, and one that finds it free (with a higher fence).
//
// Usage: colock_example_lock_basic [--url redis://host:port]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;

namespace {

asio::awaitable<void> do_work() {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds{50});
    co_await t.async_wait(asio::use_awaitable);
}

asio::awaitable<int> run(colock::redis::config cfg) {
    colock::redis::connection conn{co_await asio::this_coro::executor, cfg};
    co_await conn.async_connect(asio::use_awaitable);
    colock::locker locker{conn}; // key "colock:{<name>}" (docs/operations.md, "Keys and channels")

    auto guard = co_await locker.co_lock("example:nightly-report"); // waits while others hold it
    fmt::print("locked '{}', fence {}\n", guard.name(), guard.fence());
    co_await do_work(); // the lease is renewed in the background meanwhile

    // A second attempt while we hold it: one round trip, no waiting, an empty optional.
    std::optional<colock::lock_guard> busy = co_await locker.co_try_lock("example:nightly-report");
    fmt::print("co_try_lock while held: {}\n", busy ? "acquired?!" : "busy, as expected");

    bool const was_ours = co_await guard.release();
    fmt::print("unlocked: {}\n", was_ours ? "released" : "was not ours any more");

    auto next = co_await locker.co_try_lock("example:nightly-report");
    if (!next) {
        fmt::print(stderr, "lock_basic: co_try_lock failed after the unlock\n");
        co_return 1;
    }
    fmt::print("co_try_lock after unlock: acquired, fence {} (fences only go up)\n", next->fence());
    int const status = (busy || !was_ours || next->fence() <= guard.fence()) ? 1 : 0;
    co_await next->release();

    conn.close(); // stops the connection's background work, so io.run() returns
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    std::string url = "redis://127.0.0.1:6379";
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    if (argc == 3 && std::string_view(argv[1]) == "--url") {
        url = argv[2];
    } else if (argc != 1) {
        fmt::print(stderr, "usage: {} [--url redis://host:port]\n", argv[0]);
        return 2;
    }

    colock::redis::config cfg;
    boost::system::error_code url_error;
    std::string reason;
    cfg = colock::redis::config::from_url(url, url_error, &reason);
    if (url_error) {
        fmt::print(stderr, "lock_basic: bad URL: {}\n", reason);
        return 2;
    }

    try {
        asio::io_context io;
        int status = 1;
        asio::co_spawn(io, run(cfg), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure); // out of io.run(), into the catch below
            status = result;
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "lock_basic: {} (server {})\n", e.what(), cfg.to_redacted_url());
        return 1;
    }
}
