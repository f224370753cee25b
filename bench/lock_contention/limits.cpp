// The two reference lines every run prints before its scenarios, so that ratios come from one
// run on one server:
//
// limit: redis-benchmark running what one lock cycle of the simplest Redis lock costs, as the
//        peer harness measures it: `SET <key> tok NX PX 30000`, then `EVALSHA <sha> 1 <key>
//        tok` of a compare-and-delete script, each on its own, on random keys. Once on one
//        unpipelined connection (-c 1 -P 1: the round-trip ceiling of one synchronous client,
//        S1's yardstick) and once pipelined (-c 50 -P 16: the server's ceiling, S2's).
// ping:  PING round trips, one at a time, on an idle colock connection: the floor of any
//        command through the library. With --cluster a second ping line for the cluster
//        connection (each PING goes to one primary). The limit line is the single server's
//        only: a cluster one (redis-benchmark --cluster, the script loaded on every primary,
//        keys with its {tag}) is not measured.
#include "lock_contention.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <utility>

namespace colock::bench::contention {
namespace {

constexpr std::string_view compare_and_delete =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) "
    "else return 0 end";

asio::awaitable<std::string> load_compare_and_delete(redis::config cfg) {
    auto conn = co_await open(cfg);
    auto sha = co_await script_load(*conn, compare_and_delete);
    conn->close();
    co_return sha;
}

// Calls and microseconds of `command` so far (INFO commandstats).
asio::awaitable<std::pair<double, double>> command_cost(redis::config cfg, std::string command) {
    auto conn = co_await open(cfg);
    auto const info = co_await info_section(*conn, "commandstats");
    conn->close();
    co_return std::pair{static_cast<double>(calls_of(parse_commandstats(info), command)),
                        static_cast<double>(calls_of(parse_commandstats(info, "usec"), command))};
}

// The server's microseconds per call of `command` while `run` runs it.
template <class Run>
double server_us_per_call(asio::io_context& io, redis::config const& cfg,
                          std::string const& command, Run run) {
    auto const before = run_on(io, command_cost(cfg, command));
    run();
    auto const after = run_on(io, command_cost(cfg, command));
    auto const calls = after.first - before.first;
    return calls > 0 ? (after.second - before.second) / calls : 0.0;
}

asio::awaitable<int> delete_limit_keys(redis::config cfg, std::string pattern) {
    auto conn = co_await open(cfg);
    co_await delete_matching(*conn, std::move(pattern));
    conn->close();
    co_return 0;
}

limit_pair measure_pair(asio::io_context& io, redis::config const& cfg, std::string const& program,
                        std::string const& sha, benchmark_load const& load, double seconds) {
    auto const prefix = run_prefix() + "limit:";
    auto const key = prefix + "__rand_int__";
    limit_pair r;
    r.clients = load.clients;
    r.pipeline = load.pipeline;
    r.set_us = server_us_per_call(io, cfg, "set", [&] {
        r.set_per_s =
            benchmark_rate(program, cfg, load, {"SET", key, "tok", "NX", "PX", "30000"}, seconds);
    });
    r.evalsha_us = server_us_per_call(io, cfg, "evalsha", [&] {
        r.evalsha_per_s =
            benchmark_rate(program, cfg, load, {"EVALSHA", sha, "1", key, "tok"}, seconds);
    });
    run_on(io, delete_limit_keys(cfg, prefix + "*"));
    return r;
}

std::string pair_json(limit_pair const& p) {
    return fmt::format("{{\"clients\":{},\"pipeline\":{},\"set_per_s\":{:.1f},"
                       "\"evalsha_per_s\":{:.1f},\"cycles_per_s\":{:.1f},\"set_us\":{:.2f},"
                       "\"evalsha_us\":{:.2f},\"server_us_per_cycle\":{:.2f}}}",
                       p.clients, p.pipeline, p.set_per_s, p.evalsha_per_s, p.cycles_per_s(),
                       p.set_us, p.evalsha_us, p.server_us_per_cycle());
}

asio::awaitable<latency_summary> measure_ping(redis::config cfg) {
    auto conn = co_await open(cfg);
    co_await ping_rtt(*conn, 200); // warm
    auto const r = co_await ping_rtt(*conn, 2000);
    conn->close();
    co_return r;
}

} // namespace

limits run_limits(asio::io_context& io, redis::config const& cfg, std::string const& program,
                  options const& opts) {
    auto const sha = run_on(io, load_compare_and_delete(cfg));
    limits r;
    r.single = measure_pair(io, cfg, program, sha,
                            {.clients = 1, .pipeline = 1, .calibration_requests = 2000},
                            opts.limit_seconds);
    r.pipelined = measure_pair(io, cfg, program, sha,
                               {.clients = 50, .pipeline = 16, .calibration_requests = 100000},
                               opts.limit_seconds);
    if (opts.json) {
        fmt::print("{{\"scenario\":\"limit\",\"command\":\"SET NX PX + EVALSHA "
                   "compare-and-delete\",\"single\":{},\"pipelined\":{}}}\n",
                   pair_json(r.single), pair_json(r.pipelined));
    } else {
        fmt::print("\n== limit: redis-benchmark, SET NX PX then EVALSHA compare-and-delete, "
                   "cycles/s = 1 / (1/SET + 1/EVALSHA)\n");
        for (auto const* p : {&r.single, &r.pipelined})
            fmt::print("  -c {:<2} -P {:<2}         {:>12.0f}   cycles/s (SET {:.0f}/s, EVALSHA "
                       "{:.0f}/s); server {:.2f} us/cycle (SET {:.2f} + EVALSHA {:.2f})\n",
                       p->clients, p->pipeline, p->cycles_per_s(), p->set_per_s, p->evalsha_per_s,
                       p->server_us_per_cycle(), p->set_us, p->evalsha_us);
    }
    std::fflush(stdout);
    return r;
}

latency_summary run_ping(asio::io_context& io, deployment const& d, options const& opts) {
    auto const r = run_on(io, measure_ping(d.cfg));
    if (opts.json)
        fmt::print("{{\"scenario\":\"ping\",\"deployment\":\"{}\",\"samples\":{},"
                   "\"mean_us\":{:.1f},\"p50_us\":{:.1f},\"p99_us\":{:.1f},\"max_us\":{:.1f}}}\n",
                   d.name, r.samples, r.mean_us, r.p50_us, r.p99_us, r.max_us);
    else
        fmt::print("\n== ping ({}): PING round trip on an idle colock connection\n"
                   "  mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us ({} round trips)\n",
                   d.name, r.mean_us, r.p50_us, r.p99_us, r.samples);
    std::fflush(stdout);
    return r;
}

} // namespace colock::bench::contention
