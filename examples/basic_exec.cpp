// The smallest colock::redis program: connect, SET, GET, and a command the server refuses.
//
// Usage: colock_example_basic_exec [--url redis://host:port]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379.
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;

namespace {

asio::awaitable<int> run(redis::config cfg) {
    redis::connection conn{co_await asio::this_coro::executor, cfg};
    co_await conn.async_connect(asio::use_awaitable);

    std::string const key = "colock:example:greeting";

    resp3::request set;
    set.push("SET", key, "hello from colock");
    co_await conn.co_exec(set);

    resp3::request get;
    get.push("GET", key);
    redis::response const reply = co_await conn.co_exec(get);
    fmt::print("GET {} -> {}\n", key, reply.at(0).as_string().value_or("(not a string)"));

    // INCR on a string that is not a number: Redis answers with an error reply, which co_exec
    // throws as redis::server_error carrying the server's own text.
    try {
        resp3::request incr;
        incr.push("INCR", key);
        co_await conn.co_exec(incr);
        fmt::print(stderr, "basic_exec: INCR on a string unexpectedly succeeded\n");
        co_return 1;
    } catch (redis::server_error const& e) {
        fmt::print("INCR {} was refused: {}\n", key, e.server_message());
    }

    resp3::request del;
    del.push("DEL", key);
    co_await conn.co_exec(del);
    // Stops the connection's background work (reader, health check), so io.run() returns.
    conn.close();
    co_return 0;
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

    redis::config cfg;
    boost::system::error_code url_error;
    std::string reason;
    cfg = redis::config::from_url(url, url_error, &reason);
    if (url_error) {
        fmt::print(stderr, "basic_exec: bad URL: {}\n", reason);
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
        fmt::print(stderr, "basic_exec: {} (server {})\n", e.what(), cfg.to_redacted_url());
        return 1;
    }
}
