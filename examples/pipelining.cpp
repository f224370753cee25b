// Pipelining: many coroutines share ONE Redis connection, and nobody waits for anybody.
//
// Every coroutine sends its own commands with co_await, as if it had the connection to itself.
// The connection collects whatever is queued while a write is in flight and sends it in one
// write (automatic pipelining), then hands each reply to the coroutine that asked. At the end
// the shared counter proves that no INCR was lost or doubled, and each GET proves that every
// coroutine got its own reply back.
//
// Usage: colock_example_pipelining [--url redis://host:port] [--coroutines N] [--rounds R]
// Without --url it uses COLOCK_REDIS_URL.
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;

namespace {

using steady = std::chrono::steady_clock;

// Far more than the work needs even on a slow machine; beyond it a reply went missing.
constexpr auto reply_deadline = std::chrono::seconds{60};

constexpr std::string_view usage_text =
    R"(usage: colock_example_pipelining [--url redis://host:port] [--coroutines N] [--rounds R]

  --url URL         Redis server (default: $COLOCK_REDIS_URL)
  --coroutines N    coroutines sharing the one connection (default 200)
  --rounds R        rounds per coroutine: INCR the shared counter, then SET and GET
                    its own key in one request (default 25)
)";

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct options {
    std::string url;
    std::int64_t coroutines = 200;
    std::int64_t rounds = 25;
    bool help = false;
};

std::int64_t parse_count(std::string_view flag, std::string_view text, std::int64_t max) {
    std::int64_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n < 1 || n > max)
        throw usage_error(
            fmt::format("{}: \"{}\" is not a whole number between 1 and {}", flag, text, max));
    return n;
}

options parse_options(int argc, char** argv) {
    options opts;
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"))
        opts.url = from_env;
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            opts.help = true;
            continue;
        }
        if (arg != "--url" && arg != "--coroutines" && arg != "--rounds")
            throw usage_error(fmt::format("unknown argument \"{}\"", arg));
        if (i + 1 >= argc)
            throw usage_error(fmt::format("{} needs a value", arg));
        std::string_view const value = argv[++i];
        if (arg == "--url")
            opts.url = value;
        else if (arg == "--coroutines")
            opts.coroutines = parse_count(arg, value, 100000);
        else
            opts.rounds = parse_count(arg, value, 100000);
    }
    if (opts.url.empty() && !opts.help)
        throw usage_error("no server: pass --url redis://host:port or set COLOCK_REDIS_URL");
    return opts;
}

/// What the coroutines share: progress, the first failure, and a way to say "all done".
struct shared_state {
    explicit shared_state(asio::any_io_executor const& ex) : all_done(ex) {}

    std::int64_t running = 0;
    std::int64_t commands = 0; // replies received
    std::string first_failure;
    asio::steady_timer all_done; // cancelled by the last coroutine to finish
};

asio::awaitable<void> worker(std::shared_ptr<redis::connection> conn,
                             std::shared_ptr<shared_state> state, std::string counter_key,
                             std::string own_key, std::int64_t id, std::int64_t rounds) {
    try {
        for (std::int64_t round = 0; round < rounds; ++round) {
            resp3::request incr;
            incr.push("INCR", counter_key);
            auto const incremented = co_await conn->co_exec(incr);
            state->commands += 1;
            if (!incremented.at(0).as_integer())
                throw std::runtime_error("INCR did not answer with a number");

            // Two commands in one request: they go out together and come back together.
            auto const value = fmt::format("coroutine {} round {}", id, round);
            resp3::request set_then_get;
            set_then_get.push("SET", own_key, value);
            set_then_get.push("GET", own_key);
            auto const replies = co_await conn->co_exec(set_then_get);
            state->commands += 2;
            if (replies.size() != 2 || replies[1].as_string() != value)
                throw std::runtime_error(
                    fmt::format("GET {} answered {}, expected \"{}\"", own_key,
                                replies.size() == 2 ? resp3::to_debug_string(replies[1])
                                                    : fmt::format("{} replies", replies.size()),
                                value));
        }
    } catch (std::exception const& e) {
        if (state->first_failure.empty())
            state->first_failure = fmt::format("coroutine {}: {}", id, e.what());
    }
    if (--state->running == 0)
        state->all_done.cancel();
}

/// A prefix no other run shares, so concurrent demos on one server do not count each other.
std::string unique_key_prefix() {
    std::random_device random;
    return fmt::format("colock:demo:{}-{:08x}:", ::getpid(), random());
}

asio::awaitable<int> run_demo(redis::config cfg, options opts) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = std::make_shared<redis::connection>(ex, cfg);

    fmt::print("Connecting to {} ...\n", cfg.to_redacted_url());
    if (auto [ec] = co_await conn->async_connect(asio::as_tuple(asio::use_awaitable)); ec) {
        // last_error_text() names the server and the reason (network error or the server's
        // refusal) when the connection knows it.
        auto const reason = conn->last_error_text();
        fmt::print(stderr, "colock_example_pipelining: {}\n",
                   reason.empty() ? fmt::format("cannot connect to {}: {}", cfg.to_redacted_url(),
                                                ec.message())
                                  : reason);
        co_return 1;
    }

    auto const prefix = unique_key_prefix();
    auto const counter_key = prefix + "counter";
    std::vector<std::string> keys{counter_key};
    for (std::int64_t id = 0; id < opts.coroutines; ++id)
        keys.push_back(fmt::format("{}coroutine:{}", prefix, id));

    fmt::print("{} coroutines share this one connection; each does {} rounds of\n"
               "  INCR {}\n  SET + GET of its own key (one request, two commands)\n",
               opts.coroutines, opts.rounds, counter_key);

    auto state = std::make_shared<shared_state>(ex);
    state->running = opts.coroutines;
    state->all_done.expires_after(reply_deadline);
    auto const started = steady::now();
    for (std::int64_t id = 0; id < opts.coroutines; ++id)
        asio::co_spawn(ex,
                       worker(conn, state, counter_key, keys[static_cast<std::size_t>(id) + 1], id,
                              opts.rounds),
                       asio::detached);
    co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    double const elapsed = std::chrono::duration<double>(steady::now() - started).count();

    int status = 0;
    if (state->running > 0) {
        fmt::print(stderr,
                   "colock_example_pipelining: {} coroutines still waited for a reply after {} s\n",
                   state->running, reply_deadline.count());
        status = 1;
    } else if (!state->first_failure.empty()) {
        fmt::print(stderr, "colock_example_pipelining: a command failed: {}\n",
                   state->first_failure);
        status = 1;
    }

    std::int64_t const expected_commands = opts.coroutines * opts.rounds * 3;
    fmt::print("\n{} commands ({} expected) in {:.3f} s = {:.0f} commands/s\n", state->commands,
               expected_commands, elapsed, static_cast<double>(state->commands) / elapsed);

    if (status == 0) {
        resp3::request get_counter;
        get_counter.push("GET", counter_key);
        auto const counter = (co_await conn->co_exec(get_counter)).at(0).as_integer();
        std::int64_t const expected_counter = opts.coroutines * opts.rounds;
        if (counter == expected_counter) {
            fmt::print("counter = {} = {} coroutines x {} rounds: no increment lost or doubled\n",
                       *counter, opts.coroutines, opts.rounds);
        } else {
            fmt::print(stderr, "colock_example_pipelining: counter is {}, expected {}\n",
                       counter ? fmt::format("{}", *counter) : std::string("not a number"),
                       expected_counter);
            status = 1;
        }
    }
    fmt::print("reconnects: {}\n", conn->reconnect_count());

    // Leave the server as we found it, even after a failure.
    resp3::request cleanup;
    cleanup.push_range("DEL", keys);
    auto [cleanup_ec, deleted] =
        co_await conn->async_exec(cleanup, asio::as_tuple(asio::use_awaitable));
    if (cleanup_ec) {
        fmt::print(stderr, "colock_example_pipelining: could not delete the demo's keys: {} {}\n",
                   cleanup_ec.message(), redis::first_error_text(deleted));
        status = 1;
    } else {
        fmt::print("cleaned up {} keys\n", deleted.at(0).as_integer().value_or(0));
    }

    // Stops the connection's background work (reader, health check), so io.run() returns.
    conn->close();
    fmt::print("{}\n", status == 0 ? "OK" : "FAILED");
    co_return status;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    redis::config cfg;
    try {
        opts = parse_options(argc, argv);
        if (opts.help) {
            fmt::print("{}", usage_text);
            return 0;
        }
        cfg = redis::config::from_url(opts.url);
    } catch (std::exception const& e) { // usage_error, or from_url's system_error
        fmt::print(stderr, "colock_example_pipelining: {}\n(try --help)\n", e.what());
        return 2;
    }

    try {
        asio::io_context io{1}; // one thread: the coroutines interleave, they never race
        int status = 1;
        asio::co_spawn(io, run_demo(cfg, opts), [&](std::exception_ptr failure, int result) {
            if (failure)
                std::rethrow_exception(failure);
            status = result;
        });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "colock_example_pipelining: {} (server {})\n", e.what(),
                   cfg.to_redacted_url());
        return 1;
    }
}
