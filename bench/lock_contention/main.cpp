// The lock layer under load, each scenario on ONE connection and ONE locker on a
// single-threaded io_context, against the same redis-server in the same run.
//
// a. uncontended_64_keys: 64 coroutines on 64 names loop co_lock + unlock. Compared with the
//    server's own limit for the same two scripts (redis-benchmark -c 1 -P 16 EVALSHA ...), and
//    INFO commandstats shows how many commands one cycle costs.
// b. hot_key_handoff: K coroutines loop co_lock + unlock on ONE name. Hand-off latency (from a
//    holder's unlock() call to the next holder's co_lock completion) next to a plain PING's
//    round trip, and the commands each acquisition costs (wake-ups, not polling).
// c. waiters_memory: W coroutines wait in co_lock on one held name; resident memory per waiter,
//    then all are cancelled and must return, leaving no lock and no subscription behind.
//
// Usage: lock_contention [--scenarios a,b,c] [--seconds 3] [--waiters 16]
//                        [--memory-waiters 100000] [--hold-us 0] [--url redis://...] [--json]
//
// The units: main.cpp (options, order of the scenarios), support.cpp (helpers), and one file
// per scenario: uncontended.cpp (a), handoff.cpp (b), memory.cpp (c).
#include "lock_contention.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace {

namespace bench = colock::bench;
namespace contention = colock::bench::contention;
using bench::usage_error;
using contention::options;

constexpr std::string_view usage_text =
    R"(usage: lock_contention [options]

  --scenarios LIST      comma-separated, by letter or name (default a,b,c):
                          a = uncontended_64_keys, b = hot_key_handoff, c = waiters_memory
  --seconds S           measuring time of a and b, after a 0.5 s warm-up (default 3)
  --waiters K           coroutines competing for the hot key in b (default 16)
  --hold-us U           microseconds each holder in b keeps the lock (default 0)
  --memory-waiters W    coroutines waiting in c (default 100000)
  --url URL             use this Redis server; default: start a throwaway redis-server
  --json                one JSON object per scenario and line instead of text

Scenario a's limit is redis-benchmark -c 1 -P 16 running the acquire and release scripts by
EVALSHA (found on PATH, or COLOCK_REDIS_BENCHMARK). Keys used: colock:bench:<pid>:... (deleted
afterwards) and colock:bench:limit:{<n>}... for redis-benchmark (deleted afterwards).
)";

void parse_scenarios(std::string_view text, options& opts) {
    opts.uncontended = opts.hot_key = opts.memory = false;
    while (true) {
        auto const comma = text.find(',');
        auto const item = text.substr(0, comma);
        if (item == "a" || item == "uncontended_64_keys")
            opts.uncontended = true;
        else if (item == "b" || item == "hot_key_handoff")
            opts.hot_key = true;
        else if (item == "c" || item == "waiters_memory")
            opts.memory = true;
        else
            throw usage_error(fmt::format("--scenarios: unknown scenario \"{}\" (use a, b, c or "
                                          "uncontended_64_keys, hot_key_handoff, waiters_memory)",
                                          item));
        if (comma == std::string_view::npos)
            return;
        text.remove_prefix(comma + 1);
    }
}

bool parse_option(options& opts, bench::option_arg& arg) {
    auto const name = arg.name();
    if (name == "--scenarios")
        parse_scenarios(arg.value(), opts);
    else if (name == "--seconds")
        opts.seconds = bench::parse_seconds(arg.value());
    else if (name == "--waiters")
        opts.waiters = bench::parse_whole<std::size_t>(name, arg.value(), 1, 10000);
    else if (name == "--hold-us")
        opts.hold_us = bench::parse_whole<std::int64_t>(name, arg.value(), 0, 1000000);
    else if (name == "--memory-waiters")
        opts.memory_waiters = bench::parse_whole<std::size_t>(name, arg.value(), 1, 1000000);
    else
        return false;
    return true;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status = bench::parse_command_line("lock_contention", usage_text, argc, argv,
                                                      opts, parse_option))
        return *status;

    std::optional<std::string> benchmark_program;
    if (opts.uncontended) {
        benchmark_program = bench::require_redis_benchmark("lock_contention");
        if (!benchmark_program)
            return 2;
    }

    try {
        std::optional<colock::test::redis_server> own_server;
        auto const cfg = bench::pick_server(opts, own_server);
        if (!opts.json)
            fmt::print("server {}, {} s per timed scenario, one connection and one locker on a "
                       "single-threaded io_context\n",
                       cfg.to_redacted_url(), opts.seconds);

        boost::asio::io_context io{1};
        int status = 0;
        if (opts.uncontended)
            contention::run_uncontended(io, cfg, *benchmark_program, opts);
        if (opts.hot_key)
            contention::run_handoff(io, cfg, opts);
        if (opts.memory && !contention::run_memory(io, cfg, opts))
            status = 1;
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "lock_contention: {}\n", e.what());
        return 1;
    }
}
