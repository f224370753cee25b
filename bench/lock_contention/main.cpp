// The lock layer under load, on one redis-server per run (a throwaway one unless --url), each
// scenario on ONE connection and ONE locker per process on a single-threaded io_context. With
// --cluster, S1 and S2 also run against a throwaway Redis Cluster (3 primaries, a replica each
// by default) in the same run, right after the single server, on one cluster connection (one
// socket per primary, routed by hash slot): both columns printed with the ratio cluster/single,
// server calls and CPU summed over the primaries (replicas' REPLCONF left out). With --redlock,
// S1 to S4 also run over 3 throwaway independent redis-servers (Redlock: a locker over one
// connection to each primary, in every S4 process too), each right after the same shape on the
// single server, and S3 runs once more on both with cohorts off (cohort_limit = 0); a last table
// sets each shape's cycles/s and server calls per cycle (summed over the primaries) beside the
// single server's. The other scenarios stay on the single server.
//
// Every run first prints two reference lines, so that ratios come from the same run:
//   limit  redis-benchmark of SET NX PX + a compare-and-delete EVALSHA (one lock cycle of the
//          simplest Redis lock), -c 1 -P 1 and -c 50 -P 16, as the peer harness measures it;
//   ping   PING round trips on an idle colock connection.
//
// The shapes of the peer benchmark harness (DESIGN.md, "Performance targets"), with the options
// of its colock driver (library defaults, ttl 10 s; --tuned: retry after 1 ms):
//   S1  one coroutine on its own name: cycles/s next to the single-connection limit, acquire
//       p50/p99 next to the PING round trip.
//   S1-letgo  S1 with the guard let go (its destructor) instead of awaiting release(): the
//       release rides ahead of the next acquisition, so a cycle costs one round trip.
//   S1-retain  S1 with lock_options::retain (1 s): the locker keeps the lease at release() and the
//       next co_lock takes it with no round trip; then the wait of another process's co_lock
//       for a name kept so, next to its wait for a free name.
//   S2  64 coroutines on their own names: cycles/s next to the pipelined limit.
//   S3  N coroutines (--hot-waiters, 64) on one name, critical section inside++ / overlap check /
//       yield / inside--: acquisitions/s, per-coroutine min/max, wait percentiles and histogram,
//       server calls per acquisition.
//   S4  P processes (--processes, 4) x N coroutines (--proc-waiters, 16) on one name, with a
//       non-atomic GET/SET of a Redis counter in the critical section; the counter must equal
//       the acquisitions (no lost update).
//   sweep  S3 at 1, 2, 4, ... --sweep-max (256) coroutines, and S4 with --processes processes at
//       the same totals from --processes up: one JSON line per point ("sweep":true).
// And the project's own:
//   a. uncontended_64_keys: 64 coroutines on 64 names loop co_lock + unlock without renewal,
//      next to redis-benchmark -c 1 -P 16 of the library's own two scripts.
//   b. hot_key_handoff: K coroutines on one name; hand-off latency next to a PING round trip.
//   c. waiters_memory: W coroutines wait on one held name; memory per waiter, then all are
//      cancelled and must leave nothing behind.
//
// Usage:
//   lock_contention [--scenarios S1,S2,S3,S4] [--seconds 3] [--json] [--url redis://...]
//   lock_contention --scenarios S1,S2 --cluster --seconds 2
//   lock_contention --scenarios S1,S3,S4 --redlock --seconds 3
//   lock_contention --scenarios sweep --seconds 1 --json > run.jsonl && bench/plot.sh run.jsonl
//
// The units: main.cpp (options, order), support.cpp (helpers), limits.cpp (limit and ping
// lines), lock_target.cpp (the locker under test, from one connection or from N primaries),
// own_names.cpp (S1, S2), hot_name.cpp (S3 and each S4 process's loop), processes.cpp (S4's
// processes), redlock.cpp (the side-by-side table), uncontended.cpp (a), handoff.cpp (b),
// memory.cpp (c).
#include "lock_contention.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace bench = colock::bench;
namespace contention = colock::bench::contention;
using bench::usage_error;
using contention::options;

constexpr std::string_view usage_text =
    R"(usage: lock_contention [options]

  --scenarios LIST      comma-separated (default S1,S1-letgo,S1-retain,S2,S3,S4):
                          S1, S2, S3, S4 = the peer harness's shapes (see the source's header)
                          S1-letgo = S1 letting the guard go instead of awaiting release()
                          S1-retain = S1 with the lease kept at unlock (lock_options::retain),
                            and another process's wait for a kept name
                          sweep = S3 and S4 at 1, 2, 4, ... --sweep-max coroutines in all
                          a = uncontended_64_keys, b = hot_key_handoff, c = waiters_memory
  --seconds S           measuring time of each timed scenario or sweep point, after a 0.5 s
                        warm-up (default 3)
  --tuned               S1-S4: retry after 1 ms instead of the library's 50 ms
  --hot-waiters N       coroutines on the hot name in S3 (default 64)
  --processes P         processes in S4 and in the sweep's S4 points (default 4)
  --proc-waiters N      coroutines per process in S4 (default 16)
  --sweep-max N         the sweep's largest total of coroutines (default 256)
  --samples             S3/S4: every wait in the JSON ("wait_us_samples"), besides the histogram
  --limit-seconds S     each redis-benchmark run of the limit line (default 0.5)
  --waiters K           coroutines competing for the hot key in b (default 16)
  --hold-us U           microseconds each holder in b keeps the lock (default 0)
  --memory-waiters W    coroutines waiting in c (default 100000)
  --url URL             use this Redis server (redis:// or unix://); default: start a
                        throwaway redis-server
  --cluster             S1, S2: also start a throwaway Redis Cluster (3 primaries, a replica
                        each unless --cluster-replicas, on loopback) and run them against it
                        too, right after the single server: one column (JSON: one line,
                        "deployment": "single" or "cluster") each, with the ratio
                        cluster/single; server calls per cycle and server CPU summed over the
                        primaries. Adds a ping line for the cluster. The limit line stays the
                        single server's (none is measured for the cluster); the other
                        scenarios run on the single server only
  --cluster-replicas R  replicas per primary of that cluster, 0 to 2 (default 1)
  --redlock             S1-S4: also start independent throwaway redis-servers and run each
                        shape over them with Redlock (colock::locker over one connection per
                        primary), right after the same shape on the single server; S3 also
                        with cohorts off (cohort_limit 0) on both. JSON "deployment":
                        "redlock"; server calls summed over the primaries; S4's counter on the
                        first primary. Ends with a side-by-side table ("side_by_side" lines):
                        cycles/s, ratio redlock/single, server calls per cycle
  --redlock-primaries N how many primaries --redlock starts: 3, 5 or 7 (default 3)
  --json                one JSON object per line ("scenario": "limit", "ping", "S1", ...)

Every run starts with the limit and ping lines. redis-benchmark is found on PATH, or
COLOCK_REDIS_BENCHMARK. Keys used: colock:bench:<pid>:... and, for scenario a's limit,
colock:bench:limit:{<n>}... (all deleted afterwards).
bench/plot.sh turns a --json run into PNG plots.
)";

void parse_scenarios(std::string_view text, options& opts) {
    opts.uncontended = opts.hot_key = opts.memory = false;
    opts.s1 = opts.s1_letgo = opts.s1_retain = opts.s2 = opts.s3 = opts.s4 = opts.sweep = false;
    while (true) {
        auto const comma = text.find(',');
        auto const item = text.substr(0, comma);
        if (item == "a" || item == "uncontended_64_keys")
            opts.uncontended = true;
        else if (item == "b" || item == "hot_key_handoff")
            opts.hot_key = true;
        else if (item == "c" || item == "waiters_memory")
            opts.memory = true;
        else if (item == "S1" || item == "s1")
            opts.s1 = true;
        else if (item == "S1-letgo" || item == "s1-letgo")
            opts.s1_letgo = true;
        else if (item == "S1-retain" || item == "s1-retain")
            opts.s1_retain = true;
        else if (item == "S2" || item == "s2")
            opts.s2 = true;
        else if (item == "S3" || item == "s3")
            opts.s3 = true;
        else if (item == "S4" || item == "s4")
            opts.s4 = true;
        else if (item == "sweep")
            opts.sweep = true;
        else
            throw usage_error(fmt::format("--scenarios: unknown scenario \"{}\" (use S1, S1-letgo, "
                                          "S1-retain, S2, S3, S4, sweep, a, b, c)",
                                          item));
        if (comma == std::string_view::npos)
            return;
        text.remove_prefix(comma + 1);
    }
}

bool parse_option(options& opts, bench::option_arg& arg) {
    auto const name = arg.name();
    auto const whole = [&](std::size_t low, std::size_t high) {
        return bench::parse_whole<std::size_t>(name, arg.value(), low, high);
    };
    auto const no_value = [&] {
        arg.no_value();
        return true;
    };
    if (name == "--scenarios")
        parse_scenarios(arg.value(), opts);
    else if (name == "--seconds")
        opts.seconds = bench::parse_seconds(arg.value());
    else if (name == "--limit-seconds")
        opts.limit_seconds = bench::parse_seconds(arg.value());
    else if (name == "--tuned")
        opts.tuned = no_value();
    else if (name == "--samples")
        opts.samples = no_value();
    else if (name == "--hot-waiters")
        opts.hot_waiters = whole(1, 10000);
    else if (name == "--processes")
        opts.processes = whole(1, 64);
    else if (name == "--proc-waiters")
        opts.proc_waiters = whole(1, 10000);
    else if (name == "--sweep-max")
        opts.sweep_max = whole(1, 10000);
    else if (name == "--waiters")
        opts.waiters = whole(1, 10000);
    else if (name == "--hold-us")
        opts.hold_us = bench::parse_whole<std::int64_t>(name, arg.value(), 0, 1000000);
    else if (name == "--memory-waiters")
        opts.memory_waiters = whole(1, 1000000);
    else if (name == "--s4-worker")
        opts.s4_worker = no_value();
    else if (name == "--prefix")
        opts.prefix = arg.value();
    else if (name == "--proc-id")
        opts.proc_id = whole(0, 1000);
    else if (name == "--redlock")
        opts.redlock = no_value();
    else if (name == "--redlock-primaries") {
        opts.redlock_primaries = whole(3, 7);
        if (opts.redlock_primaries % 2 == 0)
            throw usage_error("--redlock-primaries: Redlock needs an odd number (3, 5 or 7)");
    } else if (name == "--primary-urls") {
        opts.primary_urls.clear();
        for (auto urls = arg.value(); !urls.empty();) {
            auto const comma = urls.find(',');
            opts.primary_urls.emplace_back(urls.substr(0, comma));
            urls = comma == std::string_view::npos ? std::string_view{} : urls.substr(comma + 1);
        }
    } else
        return false;
    return true;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status = bench::parse_command_line("lock_contention", usage_text, argc, argv,
                                                      opts, parse_option))
        return *status;
    if (opts.s4_worker)
        return contention::run_s4_worker(opts);

    auto const benchmark_program = bench::require_redis_benchmark("lock_contention");
    if (!benchmark_program)
        return 2;

    try {
        std::optional<colock::test::redis_server> own_server;
        auto const cfg = bench::pick_server(opts, own_server);
        auto const url = bench::server_url(opts, own_server);
        if (!opts.json)
            fmt::print("server {}, {} s per timed scenario, one connection and one locker per "
                       "process on a single-threaded io_context\n",
                       cfg.to_redacted_url(), opts.seconds);

        // S1 and S2 run once per deployment: the single server first, then the cluster.
        std::vector<bench::deployment> deployments{bench::single_deployment(cfg)};
        std::optional<colock::test::cluster_set> cluster;
        if (opts.cluster && (opts.s1 || opts.s2)) {
            cluster.emplace(bench::bench_cluster_options(opts));
            deployments.push_back(bench::cluster_deployment(*cluster));
            if (!opts.json)
                fmt::print("S1, S2 also on the {} ({})\n", deployments.back().cfg.endpoint_text(),
                           bench::cluster_shape(deployments.back(), opts));
        }
        // S3 and S4 run on the single server, and with --redlock on the primaries too.
        std::vector<bench::deployment> hot_deployments{deployments.front()};
        std::optional<colock::test::primary_set> primaries;
        if (opts.redlock && (opts.s1 || opts.s2 || opts.s3 || opts.s4)) {
            primaries.emplace(opts.redlock_primaries);
            deployments.push_back(contention::redlock_deployment(*primaries));
            hot_deployments.push_back(deployments.back());
            if (!opts.json) {
                std::string ports;
                for (auto const& node : deployments.back().nodes)
                    ports += fmt::format("{}{}", ports.empty() ? "" : ", ", node.port);
                fmt::print("S1-S4 also on {} independent primaries (Redlock), ports {}\n",
                           deployments.back().nodes.size(), ports);
            }
        }

        boost::asio::io_context io{1};
        auto const limit = contention::run_limits(io, cfg, *benchmark_program, opts);
        std::vector<contention::latency_summary> pings;
        for (auto const& d : deployments)
            pings.push_back(contention::run_ping(io, d, opts));
        bool ok = true;
        std::vector<contention::side_figure> figures;
        auto const add_figures = [&](std::vector<contention::side_figure> const& more) {
            figures.insert(figures.end(), more.begin(), more.end());
        };
        // Each result's checks count; its row goes into the side-by-side table.
        auto const add_hot = [&](contention::hot_result const& r, std::string shape) {
            ok = r.ok() && ok;
            figures.push_back(r.figure(std::move(shape)));
        };
        auto const cohort_limit = contention::peer_lock_options(opts).cohort_limit;
        if (opts.uncontended)
            contention::run_uncontended(io, cfg, *benchmark_program, opts);
        if (opts.hot_key)
            contention::run_handoff(io, cfg, opts);
        if (opts.memory)
            ok = contention::run_memory(io, cfg, opts) && ok;
        if (opts.s1)
            add_figures(contention::run_own_names(io, deployments, opts, 1,
                                                  contention::cycle_end::unlock, limit, pings));
        if (opts.s1_letgo)
            add_figures(contention::run_own_names(io, deployments, opts, 1,
                                                  contention::cycle_end::let_go, limit, pings));
        if (opts.s1_retain) {
            add_figures(contention::run_own_names(io, deployments, opts, 1,
                                                  contention::cycle_end::retain, limit, pings));
            contention::run_retained_wait(io, deployments.front(), opts, pings.front());
        }
        if (opts.s2)
            add_figures(contention::run_own_names(io, deployments, opts, 64,
                                                  contention::cycle_end::unlock, limit, pings));
        if (opts.s3) {
            for (auto const& d : hot_deployments)
                add_hot(contention::run_hot_in_process(io, d, opts, opts.hot_waiters, false,
                                                       cohort_limit),
                        "S3");
            // What the cohort hand-off pays back: the same without it, on both.
            for (std::size_t i = 0; opts.redlock && i < hot_deployments.size(); ++i)
                add_hot(contention::run_hot_in_process(io, hot_deployments[i], opts,
                                                       opts.hot_waiters, false, 0),
                        "S3 cohorts off");
        }
        if (opts.s4)
            for (auto const& d : hot_deployments)
                add_hot(contention::run_hot_processes(io, d, url, opts, opts.processes,
                                                      opts.proc_waiters, false),
                        "S4");
        if (opts.sweep) {
            auto const& single = hot_deployments.front();
            for (std::size_t waiters = 1; waiters <= opts.sweep_max; waiters *= 2) {
                ok = contention::run_hot_in_process(io, single, opts, waiters, true, cohort_limit)
                         .ok() &&
                     ok;
                if (waiters >= opts.processes && waiters % opts.processes == 0)
                    ok = contention::run_hot_processes(io, single, url, opts, opts.processes,
                                                       waiters / opts.processes, true)
                             .ok() &&
                         ok;
            }
        }
        if (primaries)
            contention::report_side_by_side(figures, opts);
        return ok ? 0 : 1;
    } catch (std::exception const& e) {
        fmt::print(stderr, "lock_contention: {}\n", e.what());
        return 1;
    }
}
