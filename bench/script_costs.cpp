// Where the Redis server's microseconds of an uncontended lock + unlock go: the library's two
// scripts next to the simplest Redis lock and to stripped-down scripts that isolate each part of
// their cost, all run the same way in one process against one server (a throwaway one unless
// --url).
//
// Each variant runs --cycles acquire + release cycles, pipelined 200 cycles to a request (the
// client's speed does not matter: only the server's time is counted), and reports the server's
// microseconds per cycle from INFO commandstats deltas (a script's usec includes the commands it
// calls). The variants, each adding one part of what the library's scripts do:
//   simplest   SET NX PX, then an EVALSHA compare-and-delete (GET, DEL): the yardstick
//   bare       two EVALSHAs of `return 1` with one key and one argument: a script call itself
//   args       the same with the library's keys and arguments (3 keys; 7, then 6 arguments)
//   calls      a GET and a SET in each script, with those arguments
//   colock     the library's acquire and release (src/lock/store/lock_scripts.hpp), on their
//              uncontended path: the rest is the Lua that reads and writes the lock's state
// The differences between neighbours say what each part costs.
//
// Usage: script_costs [--cycles N] [--url redis://...] [--json]
#include "bench_common.hpp"

#include "lock/store/lock_scripts.hpp"

#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;

constexpr std::string_view usage_text =
    R"(Usage: script_costs [--cycles N] [--url redis://...] [--json]

The Redis server's microseconds per uncontended lock + unlock cycle (INFO commandstats), for
the library's scripts and for variants that add one part of their cost at a time: the simplest
lock (SET NX PX + compare-and-delete), bare script calls, the library's keys and arguments, a
GET and a SET per script, and the library's scripts themselves.

  --cycles N    cycles per variant (default 100000)
  --url URL     a server of your own (its keys go under colock:bench:<pid>:)
  --json        one JSON object per variant
)";

constexpr std::size_t batch = 200; // cycles per request

struct options : bench::common_options {
    std::uint64_t cycles = 100'000;
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() != "--cycles")
        return false;
    o.cycles = bench::parse_whole<std::uint64_t>("--cycles", arg.value(), batch, 100'000'000);
    return true;
}

// One variant: the acquire (a script, or none for SET NX PX) and the release, with their keys
// and arguments; "$T" in an argument is the cycle's token.
struct variant {
    std::string name;
    std::string what;
    std::optional<std::string_view> acquire; // none: SET key token NX PX ttl
    std::string_view release;
    std::vector<std::string> acquire_keys, acquire_args;
    std::vector<std::string> release_keys, release_args;
    // The library's scripts: each acquire answers its fence, each release 1 (their uncontended
    // paths); otherwise each release answers 1.
    bool library_scripts = false;
};

struct variant_result {
    double server_us_per_cycle = 0;
};

asio::awaitable<std::string> load(redis::connection& conn, std::string_view source) {
    resp3::request req;
    req.push("SCRIPT", "LOAD", source);
    auto const reply = co_await conn.co_exec(std::move(req));
    auto const sha = reply.at(0).as_string();
    if (!sha)
        throw std::runtime_error("SCRIPT LOAD answered " + resp3::to_debug_string(reply.at(0)));
    co_return std::string(*sha);
}

std::string with_token(std::string const& arg, std::string const& token) {
    return arg == "$T" ? token : arg;
}

asio::awaitable<void> del(redis::connection& conn, std::vector<std::string> const& keys) {
    resp3::request req;
    req.push_range("DEL", keys);
    co_await conn.co_exec(std::move(req));
}

asio::awaitable<variant_result> run_variant(redis::connection& conn, bench::node_stats& stats,
                                            variant const& v, std::uint64_t cycles) {
    std::optional<std::string> acquire_sha;
    if (v.acquire)
        acquire_sha = co_await load(conn, *v.acquire);
    auto const release_sha = co_await load(conn, v.release);
    co_await del(conn, v.release_keys);
    if (v.library_scripts) {
        // The uncontended path starts from a free lock that has been used: "F <fence>".
        resp3::request prime;
        prime.push("SET", v.release_keys.front(), "F 100", "PX", "600000");
        co_await conn.co_exec(std::move(prime));
    }
    auto const before = co_await stats.commandstats("usec");
    std::uint64_t done = 0;
    while (done < cycles) {
        resp3::request req;
        for (std::size_t i = 0; i < batch; ++i) {
            auto const token = fmt::format("bench-token-{:016}", done + i);
            std::vector<std::string> words;
            if (acquire_sha) {
                words.push_back(*acquire_sha);
                words.push_back(std::to_string(v.acquire_keys.size()));
                words.insert(words.end(), v.acquire_keys.begin(), v.acquire_keys.end());
                for (auto const& a : v.acquire_args)
                    words.push_back(with_token(a, token));
                req.push_range("EVALSHA", words);
            } else {
                req.push("SET", v.release_keys.front(), token, "NX", "PX", "600000");
            }
            words.clear();
            words.push_back(release_sha);
            words.push_back(std::to_string(v.release_keys.size()));
            words.insert(words.end(), v.release_keys.begin(), v.release_keys.end());
            for (auto const& a : v.release_args)
                words.push_back(with_token(a, token));
            req.push_range("EVALSHA", words);
        }
        auto const replies = co_await conn.co_exec(std::move(req));
        for (std::size_t i = 0; i < replies.size(); ++i) {
            auto const& reply = replies[i];
            if (reply.is_error())
                throw std::runtime_error(fmt::format("{}: {}", v.name, reply.text));
            // A release that freed nothing (or an acquire off its path) would measure another
            // path than the one this is about.
            bool const is_release = i % 2 == 1;
            if ((is_release || v.library_scripts) && reply.as_integer().value_or(0) < 1)
                throw std::runtime_error(
                    fmt::format("{}: the {} did not take its uncontended path: {}", v.name,
                                is_release ? "release" : "acquire", resp3::to_debug_string(reply)));
        }
        done += batch;
    }
    auto const after = co_await stats.commandstats("usec");
    // Top-level commands only: a script's usec includes what it calls, and those calls are
    // counted again under their own names; the simplest lock's SET is top-level.
    std::uint64_t usec = bench::calls_of(after, "evalsha") - bench::calls_of(before, "evalsha");
    if (!v.acquire)
        usec += bench::calls_of(after, "set") - bench::calls_of(before, "set");
    co_await del(conn, v.release_keys);
    variant_result r;
    r.server_us_per_cycle = static_cast<double>(usec) / static_cast<double>(done);
    co_return r;
}

std::vector<variant> make_variants() {
    auto const tag = fmt::format("colock:bench:{}:{{own}}", ::getpid());
    std::vector<std::string> const lock_keys{tag, tag + ":q", tag + ":qd"};
    std::string const owner = "0123456789abcdef";
    // As src/lock/store/single_connection_store.cpp sends them: acquire (token, ttl, owner,
    // queueing "1", queue entry ttl, channel prefix, the client's clock, claim), release (token,
    // channel prefix, claim, "", the last fence, "0").
    std::vector<std::string> const acquire_args{"$T",   "10000",     owner,           "1",
                                                "3000", tag + ":w:", "1764240000000", "1000"};
    std::vector<std::string> const release_args{"$T", tag + ":w:", "1000", "", "100", "0"};
    std::vector<std::string> const one_key{tag};
    std::vector<std::string> const one_arg{"$T"};
    constexpr std::string_view bare = "return 1";
    constexpr std::string_view get_set_acquire =
        "redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1";
    constexpr std::string_view get_set_release =
        "redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'F 1', 'KEEPTTL') return 1";
    constexpr std::string_view compare_and_delete =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
        "else return 0 end";
    std::vector<variant> v;
    v.push_back({"simplest",
                 "SET NX PX, then EVALSHA compare-and-delete",
                 std::nullopt,
                 compare_and_delete,
                 {},
                 {},
                 one_key,
                 one_arg,
                 false});
    v.push_back({"bare", "2 EVALSHA of `return 1`, 1 key, 1 argument", bare, bare, one_key, one_arg,
                 one_key, one_arg, false});
    v.push_back({"args", "the same with colock's keys and arguments", bare, bare, lock_keys,
                 acquire_args, lock_keys, release_args, false});
    v.push_back({"calls", "+ a GET and a SET in each script", get_set_acquire, get_set_release,
                 lock_keys, acquire_args, lock_keys, release_args, false});
    v.push_back({"colock", "colock's acquire and release (uncontended path)",
                 colock::detail::acquire_source, colock::detail::release_source, lock_keys,
                 acquire_args, lock_keys, release_args, true});
    return v;
}

asio::awaitable<void> run_all(redis::config cfg, options opts) {
    cfg.health_check_interval = std::chrono::milliseconds{0};
    auto conn = std::make_shared<redis::connection>(co_await asio::this_coro::executor, cfg);
    co_await conn->co_connect();
    std::vector<redis::config> nodes;
    nodes.push_back(cfg);
    auto stats = co_await bench::node_stats::open(std::move(nodes));
    auto const variants = make_variants();
    if (!opts.json)
        fmt::print("{:<9} {:>10} {:>10}  {}\n", "variant", "us/cycle", "+ us", "what");
    std::optional<double> previous, simplest;
    for (auto const& v : variants) {
        auto const r = co_await run_variant(*conn, stats, v, opts.cycles);
        // Each part's cost: the difference to the variant before, from "bare" on.
        double const added = previous && v.name != "bare" ? r.server_us_per_cycle - *previous : 0.0;
        if (v.name == "simplest")
            simplest = r.server_us_per_cycle;
        if (opts.json)
            fmt::print("{{\"variant\":\"{}\",\"server_us_per_cycle\":{:.3f},\"added_us\":{:.3f},"
                       "\"over_simplest\":{:.3f},\"cycles\":{}}}\n",
                       v.name, r.server_us_per_cycle, added, r.server_us_per_cycle / *simplest,
                       opts.cycles);
        else
            fmt::print("{:<9} {:>10.2f} {:>10}  {}\n", v.name, r.server_us_per_cycle,
                       v.name == "simplest" || v.name == "bare" ? std::string("")
                                                                : fmt::format("{:+.2f}", added),
                       v.what);
        if (v.name != "simplest")
            previous = r.server_us_per_cycle;
    }
    if (!opts.json)
        fmt::print("us/cycle: the server's microseconds per acquire + release (INFO commandstats); "
                   "+ us: over the line above\n");
    stats.close();
    conn->close();
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status =
            bench::parse_command_line("script_costs", usage_text, argc, argv, opts, parse_option))
        return *status;
    try {
        std::optional<colock::test::redis_server> own;
        auto const cfg = bench::pick_server(opts, own);
        asio::io_context io;
        bench::run_on(io, [](redis::config c, options o) -> asio::awaitable<bool> {
            co_await run_all(std::move(c), std::move(o));
            co_return true;
        }(cfg, opts));
    } catch (std::exception const& e) {
        fmt::print(stderr, "script_costs: {}\n", e.what());
        return 1;
    }
    return 0;
}
