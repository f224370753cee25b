// Throughput of ONE shared, automatically pipelined colock::redis::connection, side by side with
// what redis-benchmark gets from the same server in the same run; with --cluster, also against a
// throwaway Redis Cluster (3 primaries, a replica each by default) in the same run, where the one
// connection routes by hash slot over one socket per primary.
//
// Scenario N: N coroutines each loop `SET key:i v` / `GET key:i` on one connection for a fixed
// time; the keys have no hash tag, so on the cluster they spread over the slots, hence over the
// primaries. The limit is `redis-benchmark -c 1 -P N`: one client keeping N commands in flight,
// the best any single connection with N outstanding requests can do on this machine. On the
// cluster it is `redis-benchmark --cluster -c C -P ceil(N/C)` with C = min(N, primaries): one
// client per primary, about N commands in flight in all. (`--cluster -c 1` would put every
// command on one primary.) INFO commandstats deltas, summed over the primaries on the cluster,
// show that the connection sends exactly one Redis command per operation.
//
// With --requests N, each scenario makes N requests instead (and those in flight), with no warm-up
// and no redis-benchmark: bench/syscalls.sh runs it so under strace to count system calls per
// request.
//
// Usage: redis_pipeline [--clients 1,16,64,256] [--seconds 3] [--url redis://...] [--cluster]
//                       [--cluster-replicas 1] [--json] [--requests N]
#include "bench_common.hpp"

#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>
#include <colock_test/cluster_set.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;
using bench::calls_of;
using bench::deployment;
using bench::run_state;
using steady = std::chrono::steady_clock;

// After the measuring window, every outstanding request must complete within this; otherwise a
// request was lost and the bench says so instead of hanging.
constexpr auto drain_limit = std::chrono::seconds{10};
constexpr std::size_t max_clients = 10000;

constexpr std::string_view usage_text =
    R"(usage: redis_pipeline [--clients N[,N...]] [--seconds S] [--url redis://...] [--cluster]
                      [--cluster-replicas R] [--json] [--requests N]

  --clients LIST   coroutines sharing the one connection, one scenario per entry
                   (default 1,16,64,256)
  --seconds S      measuring time per scenario and deployment, after a 0.5 s warm-up
                   (default 3)
  --url URL        use this Redis server (redis:// or unix://); default: start a throwaway
                   redis-server
  --cluster        also start a throwaway Redis Cluster (3 primaries, a replica each unless
                   --cluster-replicas, on loopback) and run every scenario against it too,
                   right after the single server's: one row per deployment, with the ratio
                   cluster/single
  --cluster-replicas R
                   replicas per primary of that cluster, 0 to 2 (default 1)
  --json           print one JSON object per scenario, deployment and line instead of a table
                   ("deployment": "single" or "cluster")
  --requests N     make N requests per scenario (SET and GET in turn; the ones in flight then
                   complete too, and are counted) with no warm-up
                   and no limit (redis-benchmark is not run): for counting system calls per
                   request (bench/syscalls.sh)

The limit column is `redis-benchmark -c 1 -P N -t set,get` against the same server (found on
PATH, or COLOCK_REDIS_BENCHMARK); on the cluster `redis-benchmark --cluster -c C -P ceil(N/C)`
with C = min(N, primaries), one client per primary and about N commands in flight in all.
Commands per operation are INFO commandstats deltas, summed over the primaries on the cluster.
Keys written: colock:bench:<pid>:key:<i> (deleted afterwards) and redis-benchmark's own
key:__rand_int__ (key{<tag>}:__rand_int__ on the cluster).
)";

struct options : bench::common_options {
    std::vector<std::size_t> clients{1, 16, 64, 256};
    double seconds = 3.0;
    std::uint64_t requests = 0; // --requests: a fixed count instead of a timed window
};

std::vector<std::size_t> parse_client_list(std::string_view text) {
    std::vector<std::size_t> counts;
    while (true) {
        auto const comma = text.find(',');
        counts.push_back(
            bench::parse_whole<std::size_t>("--clients", text.substr(0, comma), 1, max_clients));
        if (comma == std::string_view::npos)
            return counts;
        text.remove_prefix(comma + 1);
    }
}

bool parse_option(options& opts, bench::option_arg& arg) {
    if (arg.name() == "--clients")
        opts.clients = parse_client_list(arg.value());
    else if (arg.name() == "--seconds")
        opts.seconds = bench::parse_seconds(arg.value());
    else if (arg.name() == "--requests")
        opts.requests =
            bench::parse_whole<std::uint64_t>("--requests", arg.value(), 1, 1'000'000'000);
    else
        return false;
    return true;
}

/// requests per second of SET and GET as redis-benchmark measured them, with its -c and -P.
struct server_limit {
    double set_rps = 0;
    double get_rps = 0;
    std::size_t clients = 1;
    std::size_t pipeline = 1;
    double mean() const { return (set_rps + get_rps) / 2; }
};

// The rows of SET and GET.
server_limit parse_benchmark_rows(std::vector<bench::benchmark_row> const& rows) {
    std::optional<double> set_rps, get_rps;
    for (auto const& row : rows) {
        if (row.test == "SET")
            set_rps = row.rps;
        else if (row.test == "GET")
            get_rps = row.rps;
    }
    if (!set_rps || !get_rps)
        throw std::runtime_error("no SET and GET rows in redis-benchmark's output");
    return {*set_rps, *get_rps};
}

bool is_cluster(deployment const& d) {
    return d.cfg.uses_cluster();
}

// The single server, or with --cluster a seed primary of the cluster.
server_limit run_redis_benchmark(std::string const& program, deployment const& d,
                                 std::size_t clients, std::size_t pipeline,
                                 std::uint64_t requests) {
    auto args = bench::redis_benchmark_args(program, d.nodes.front(), pipeline, requests, clients);
    if (is_cluster(d))
        args.emplace_back("--cluster");
    args.emplace_back("-t");
    args.emplace_back("set,get");
    auto r = bench::run_redis_benchmark(
        std::move(args),
        fmt::format("{}-c {} -P {}", is_cluster(d) ? "--cluster " : "", clients, pipeline),
        parse_benchmark_rows);
    r.clients = clients;
    r.pipeline = pipeline;
    return r;
}

/// redis-benchmark's rate with `in_flight` commands in flight: `-c 1 -P in_flight` on one
/// server; on a cluster one client per primary (at most `in_flight` clients) that share them.
/// -n is chosen from a short calibration run so the measured run (SET, then GET) takes about
/// `seconds`.
server_limit measure_server_limit(std::string const& program, deployment const& d,
                                  std::size_t in_flight, double seconds) {
    std::size_t const clients = is_cluster(d) ? std::min(in_flight, d.nodes.size()) : 1;
    std::size_t const pipeline = (in_flight + clients - 1) / clients;
    std::uint64_t const batch = clients * pipeline;
    std::uint64_t const calibration_requests = std::max<std::uint64_t>(20000, 1000 * batch);
    auto const estimate = run_redis_benchmark(program, d, clients, pipeline, calibration_requests);
    auto requests = static_cast<std::uint64_t>(estimate.mean() * seconds / 2);
    requests = std::max(requests, calibration_requests);
    requests += batch - requests % batch; // whole pipelines only
    return run_redis_benchmark(program, d, clients, pipeline, requests);
}

// `quota`: stop the run once that many requests completed in all (0: none).
asio::awaitable<void> pipeline_worker(std::shared_ptr<redis::connection> conn,
                                      std::shared_ptr<run_state> state, std::string key,
                                      std::string value, std::uint64_t quota) {
    auto const count = [&] {
        state->completed();
        if (quota != 0 && state->total_ops >= quota && state->current != run_state::phase::stop) {
            state->current = run_state::phase::stop;
            state->phase_timer.cancel();
        }
    };
    resp3::request set_request;
    set_request.push("SET", key, value);
    resp3::request get_request;
    get_request.push("GET", key);

    while (state->current != run_state::phase::stop) {
        {
            auto [ec, resp] =
                co_await conn->async_exec(set_request, asio::as_tuple(asio::use_awaitable));
            if (ec) {
                state->fail(
                    fmt::format("SET {}: {} {}", key, ec.message(), redis::first_error_text(resp)));
                break;
            }
            count();
        }
        if (state->current == run_state::phase::stop)
            break;
        {
            auto [ec, resp] =
                co_await conn->async_exec(get_request, asio::as_tuple(asio::use_awaitable));
            if (ec) {
                state->fail(
                    fmt::format("GET {}: {} {}", key, ec.message(), redis::first_error_text(resp)));
                break;
            }
            // Every coroutine has its own value: a reply matched to the wrong request shows.
            if (resp.size() != 1 || resp.front().as_string() != value) {
                state->fail(fmt::format(
                    "GET {} answered {}, expected \"{}\"", key,
                    resp.empty() ? "nothing" : resp3::to_debug_string(resp.front()), value));
                break;
            }
            count();
        }
    }
}

struct pipeline_measurement {
    std::uint64_t measured_ops = 0;
    double measured_seconds = 0;
    std::uint64_t total_ops = 0;
    std::uint64_t set_get_calls = 0; // SET and GET calls the server(s) counted meanwhile
    std::uint64_t other_calls = 0;   // any other command, except our INFO and replicas' REPLCONF
    std::uint64_t reconnects = 0;
};

// A timed `window` after a warm-up, or with `quota` exactly that many requests.
asio::awaitable<pipeline_measurement> measure_pipeline(deployment d, std::size_t clients,
                                                       std::chrono::nanoseconds window,
                                                       std::uint64_t quota) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = std::make_shared<redis::connection>(ex, d.cfg);
    co_await conn->co_connect();
    // The handshake (HELLO, CLIENT SETNAME; on a cluster CLUSTER SLOTS too) is done: from here on
    // the server(s) should see only SET and GET, plus health-check PINGs (and on a cluster the
    // periodic CLUSTER SLOTS). INFO goes over connections of its own.
    auto stats = co_await bench::node_stats::open(d.nodes);
    auto const before = co_await stats.commandstats();

    auto state = std::make_shared<run_state>(ex);
    auto const key_prefix = fmt::format("colock:bench:{}:key:", ::getpid());
    state->running_workers = clients;
    for (std::size_t i = 0; i < clients; ++i) {
        auto key = fmt::format("{}{}", key_prefix, i);
        asio::co_spawn(
            ex,
            bench::run_worker(state, fmt::format("worker for {}", key),
                              pipeline_worker(conn, state, key, fmt::format("v{}", i), quota)),
            asio::detached);
    }

    if (quota == 0)
        co_await state->sleep_phase(bench::warm_up_time);
    auto const window_start = steady::now();
    if (state->failure.empty()) {
        state->current = run_state::phase::measure;
        // With a quota, the last request ends the phase.
        co_await state->sleep_phase(quota == 0 ? window : std::chrono::hours{24});
    }
    state->current = run_state::phase::stop;
    auto const window_end = steady::now();

    co_await state->drain(drain_limit, clients, "had no reply");
    if (!state->failure.empty()) {
        conn->close();
        stats.close();
        throw std::runtime_error(state->failure);
    }

    auto const after = co_await stats.commandstats();
    stats.close();

    pipeline_measurement m;
    m.measured_ops = state->measured_ops;
    m.measured_seconds = std::chrono::duration<double>(window_end - window_start).count();
    m.total_ops = state->total_ops;
    m.set_get_calls = calls_of(after, "set") - calls_of(before, "set") + calls_of(after, "get") -
                      calls_of(before, "get");
    std::uint64_t all_calls = 0;
    for (auto const& [command, calls] : after)
        if (!bench::is_not_from_client(command))
            all_calls += calls - calls_of(before, command);
    m.other_calls = all_calls - m.set_get_calls;
    m.reconnects = conn->reconnect_count();

    // One DEL per key: on a cluster the keys are in different slots, and one request may not
    // span slots.
    for (std::size_t i = 0; i < clients; ++i) {
        resp3::request cleanup;
        cleanup.push("DEL", fmt::format("{}{}", key_prefix, i));
        co_await conn->co_exec(std::move(cleanup));
    }
    conn->close();
    co_return m;
}

struct scenario_result {
    std::string deployment;
    std::size_t clients = 0;
    pipeline_measurement colock;
    server_limit limit;
    std::optional<double> single_ops_per_s; // a cluster row's single-server counterpart

    double ops_per_s() const {
        return static_cast<double>(colock.measured_ops) / colock.measured_seconds;
    }
    double ratio() const { return ops_per_s() / limit.mean(); }
    std::optional<double> over_single() const {
        if (!single_ops_per_s || *single_ops_per_s <= 0)
            return std::nullopt;
        return ops_per_s() / *single_ops_per_s;
    }
    double commands_per_op() const {
        return colock.total_ops == 0 ? 0.0
                                     : static_cast<double>(colock.set_get_calls) /
                                           static_cast<double>(colock.total_ops);
    }
};

void print_table_header() {
    fmt::print("{:<20} {:<7} {:>7} {:>10} {:>11} {:>10} {:>6} {:>6} {:>8} {:>5} {:>5}\n",
               "scenario", "deploy", "clients", "ops/s", "limit ops/s", "limit -c/P", "ratio",
               "cl/sgl", "cmds/op", "other", "recon");
}

void print_row(scenario_result const& r) {
    auto const over = r.over_single();
    fmt::print("{:<20} {:<7} {:>7} {:>10.0f} {:>11.0f} {:>10} {:>6.3f} {:>6} {:>8.4f} {:>5} "
               "{:>5}\n",
               fmt::format("pipeline_clients_{}", r.clients), r.deployment, r.clients,
               r.ops_per_s(), r.limit.mean(),
               fmt::format("{}/{}", r.limit.clients, r.limit.pipeline), r.ratio(),
               over ? fmt::format("{:.3f}", *over) : std::string("-"), r.commands_per_op(),
               r.colock.other_calls, r.colock.reconnects);
    std::fflush(stdout);
}

void print_json(scenario_result const& r) {
    auto const over = r.over_single();
    fmt::print("{{\"scenario\":\"pipeline_clients_{}\",\"deployment\":\"{}\",\"clients\":{},"
               "\"seconds\":{:.3f},\"ops\":{},\"ops_per_s\":{:.1f},\"limit_ops_per_s\":{:.1f},"
               "\"limit_set_ops_per_s\":{:.1f},\"limit_get_ops_per_s\":{:.1f},"
               "\"limit_clients\":{},\"limit_pipeline\":{},\"ratio\":{:.4f},{}"
               "\"commands_per_op\":{:.4f},\"other_commands\":{},\"reconnects\":{}}}\n",
               r.clients, r.deployment, r.clients, r.colock.measured_seconds, r.colock.measured_ops,
               r.ops_per_s(), r.limit.mean(), r.limit.set_rps, r.limit.get_rps, r.limit.clients,
               r.limit.pipeline, r.ratio(),
               over ? fmt::format("\"cluster_over_single\":{:.4f},", *over) : std::string(),
               r.commands_per_op(), r.colock.other_calls, r.colock.reconnects);
    std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status =
            bench::parse_command_line("redis_pipeline", usage_text, argc, argv, opts, parse_option))
        return *status;

    std::optional<std::string> benchmark_program;
    if (opts.requests == 0) {
        benchmark_program = bench::require_redis_benchmark("redis_pipeline");
        if (!benchmark_program)
            return 2;
    }

    try {
        std::optional<colock::test::redis_server> own_server;
        auto const cfg = bench::pick_server(opts, own_server);
        std::vector<deployment> deployments{bench::single_deployment(cfg)};
        std::optional<colock::test::cluster_set> cluster;
        if (opts.cluster) {
            cluster.emplace(bench::bench_cluster_options(opts));
            deployments.push_back(bench::cluster_deployment(*cluster));
        }
        asio::io_context io{1};
        if (opts.requests != 0) {
            for (auto const clients : opts.clients)
                for (auto const& d : deployments) {
                    auto const m =
                        bench::run_on(io, measure_pipeline(d, clients, {}, opts.requests));
                    fmt::print("pipeline_clients_{} {}: {} requests in {:.3f} s, {:.0f}/s\n",
                               clients, d.name, m.total_ops, m.measured_seconds,
                               static_cast<double>(m.total_ops) / m.measured_seconds);
                }
            return 0;
        }
        if (!opts.json) {
            fmt::print("server {}, {} s per scenario, limit: redis-benchmark -c 1 -P <clients>\n",
                       cfg.to_redacted_url(), opts.seconds);
            if (cluster)
                fmt::print("{} ({}), limit: redis-benchmark --cluster -c C -P ceil(<clients>/C), "
                           "C = min(<clients>, primaries)\n",
                           deployments.back().cfg.endpoint_text(),
                           bench::cluster_shape(deployments.back(), opts));
        }

        auto const window = bench::window_of(opts.seconds);
        if (!opts.json)
            print_table_header();
        for (auto const clients : opts.clients) {
            std::optional<double> single_ops_per_s;
            for (auto const& d : deployments) {
                scenario_result r;
                r.deployment = d.name;
                r.clients = clients;
                r.colock = bench::run_on(io, measure_pipeline(d, clients, window, 0));
                r.limit = measure_server_limit(*benchmark_program, d, clients, opts.seconds);
                if (is_cluster(d))
                    r.single_ops_per_s = single_ops_per_s;
                else
                    single_ops_per_s = r.ops_per_s();
                if (opts.json)
                    print_json(r);
                else
                    print_row(r);
            }
        }
        if (!opts.json)
            fmt::print("ops = SET or GET completed; limit = mean of redis-benchmark's SET and GET "
                       "rates with -c/-P as shown; ratio = ops/s / limit; cl/sgl = cluster ops/s / "
                       "single ops/s; cmds/op = SET+GET calls / ops (summed over the primaries); "
                       "other = other commands (health-check PINGs, CLUSTER SLOTS); recon = "
                       "reconnects\n");
        return 0;
    } catch (std::exception const& e) {
        fmt::print(stderr, "redis_pipeline: {}\n", e.what());
        return 1;
    }
}
