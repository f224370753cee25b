// Helpers shared by the integration tests: run a coroutine to completion on a fresh
// io_context, and build requests in one line.
#pragma once

#include <colock/redis/connection.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test {

namespace asio = boost::asio;

/// Runs `make(ctx)`'s coroutine on a fresh io_context until the context runs out of work,
/// rethrowing what the coroutine threw. Fails if it has not finished within `limit`.
template <class Make>
void run_test(Make make, std::chrono::seconds limit = std::chrono::seconds{60}) {
    asio::io_context ctx;
    std::exception_ptr failure;
    bool finished = false;
    asio::co_spawn(ctx, make(ctx), [&](std::exception_ptr e) {
        failure = e;
        finished = true;
    });
    auto const deadline = std::chrono::steady_clock::now() + limit;
    while (!finished && std::chrono::steady_clock::now() < deadline)
        ctx.run_for(std::chrono::milliseconds{100});
    if (!finished)
        throw std::runtime_error("test coroutine did not finish in time");
    if (failure)
        std::rethrow_exception(failure);
}

/// One command as a request. Variadic rather than an initializer_list: GCC 12 miscompiles
/// braced lists of strings inside coroutines.
template <class... Args>
resp3::request command(std::string_view name, Args const&... args) {
    resp3::request req;
    req.push(name, args...);
    return req;
}

/// A vector of strings, for the same reason as `command`.
template <class... Args>
std::vector<std::string> strings(Args const&... args) {
    std::vector<std::string> out;
    (out.emplace_back(args), ...);
    return out;
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::use_awaitable);
}

/// A unique key per test, so tests sharing one server never see each other's data.
inline std::string unique_key(std::string_view what) {
    static int counter = 0;
    return "test:" + std::string(what) + ":" + std::to_string(++counter);
}

} // namespace colock::test
