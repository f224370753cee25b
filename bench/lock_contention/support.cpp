// The helpers the lock_contention scenarios share.
#include "lock_contention.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {

std::int64_t info_number(std::string_view info, std::string_view name) {
    auto const at = info.find(fmt::format("\n{}:", name));
    if (at == std::string_view::npos)
        throw std::runtime_error(fmt::format("INFO has no field {}", name));
    auto const number = info.substr(at + name.size() + 2);
    std::int64_t n = 0;
    std::from_chars(number.data(), number.data() + number.size(), n);
    return n;
}

command_calls delta(command_calls const& before, command_calls const& after) {
    command_calls d;
    for (auto const& [command, calls] : after) {
        if (is_not_from_client(command))
            continue;
        auto const it = before.find(command);
        auto const prior = it == before.end() ? 0 : it->second;
        if (calls > prior)
            d.emplace(command, calls - prior);
    }
    return d;
}

std::uint64_t total_calls(command_calls const& stats) {
    std::uint64_t sum = 0;
    for (auto const& [command, calls] : stats)
        sum += calls;
    return sum;
}

std::string calls_json(command_calls const& stats) {
    std::string out = "{";
    for (auto const& [command, calls] : stats)
        out += fmt::format("{}\"{}\":{}", out.size() > 1 ? "," : "", command, calls);
    return out + "}";
}

std::string calls_text(command_calls const& stats, double per) {
    std::string out;
    for (auto const& [command, calls] : stats)
        out += fmt::format("{}{} {:.3f}", out.empty() ? "" : ", ", command,
                           static_cast<double>(calls) / per);
    return out;
}

std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages))
        throw std::runtime_error("cannot read /proc/self/statm");
    return resident_pages * ::sysconf(_SC_PAGESIZE);
}

double own_cpu_seconds() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    auto const secs = [](timeval const& tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    };
    return secs(ru.ru_utime) + secs(ru.ru_stime);
}

asio::awaitable<double> server_cpu_seconds(redis::connection& conn) {
    co_return parse_cpu_seconds(co_await info_section(conn, "cpu"));
}

latency_summary summarize(std::vector<double> us) {
    latency_summary s;
    s.samples = us.size();
    if (us.empty())
        return s;
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (auto const v : us)
        sum += v;
    auto const at = [&](double q) {
        auto const i = static_cast<std::size_t>(q * static_cast<double>(us.size() - 1));
        return us[i];
    };
    s.mean_us = sum / static_cast<double>(us.size());
    s.p50_us = at(0.50);
    s.p99_us = at(0.99);
    s.p999_us = at(0.999);
    s.max_us = us.back();
    return s;
}

double micros(steady::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

asio::awaitable<void> sleep_for(steady::duration d) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
}

asio::awaitable<std::shared_ptr<redis::connection>> open(redis::config cfg) {
    auto conn = std::make_shared<redis::connection>(co_await asio::this_coro::executor, cfg);
    auto [ec] = co_await conn->async_connect(asio::as_tuple(asio::use_awaitable));
    if (ec) {
        auto const reason = conn->last_error_text();
        throw std::runtime_error(reason.empty() ? fmt::format("cannot connect to {}: {}",
                                                              cfg.to_redacted_url(), ec.message())
                                                : reason);
    }
    co_return conn;
}

void add_lock_keys(std::vector<std::string>& keys, std::string const& key) {
    keys.push_back(key);
    keys.push_back(key + ":q");
    keys.push_back(key + ":qd");
}

asio::awaitable<void> delete_keys(redis::connection& conn, std::vector<std::string> keys) {
    resp3::request req;
    req.push_range("DEL", keys);
    co_await conn.co_exec(std::move(req));
}

std::string run_prefix() {
    return fmt::format("colock:bench:{}:", ::getpid());
}

asio::awaitable<latency_summary> ping_rtt(redis::connection& conn, std::size_t count) {
    std::vector<double> us;
    us.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        resp3::request req;
        req.push("PING");
        auto const start = steady::now();
        co_await conn.co_exec(std::move(req));
        us.push_back(micros(steady::now() - start));
    }
    co_return summarize(std::move(us));
}

namespace {

template <class ServerCpu>
asio::awaitable<double> run_phases_with(std::shared_ptr<run_state> state,
                                        std::chrono::nanoseconds window, std::size_t workers,
                                        ServerCpu server_cpu_seconds, cpu_use& cpu) {
    co_await state->sleep_phase(warm_up_time);
    auto server_cpu = co_await server_cpu_seconds();
    auto client_cpu = own_cpu_seconds();
    auto const window_start = steady::now();
    if (state->failure.empty()) {
        state->current = run_state::phase::measure;
        co_await state->sleep_phase(window);
    }
    state->current = run_state::phase::stop;
    auto const window_end = steady::now();
    auto const wall = std::chrono::duration<double>(window_end - window_start).count();
    cpu.client = (own_cpu_seconds() - client_cpu) / wall;
    cpu.server = (co_await server_cpu_seconds() - server_cpu) / wall;
    co_await state->drain(drain_limit, workers, "had not finished");
    co_return std::chrono::duration<double>(window_end - window_start).count();
}

} // namespace

asio::awaitable<double> run_phases(std::shared_ptr<run_state> state,
                                   std::chrono::nanoseconds window, std::size_t workers,
                                   redis::connection& conn, cpu_use& cpu) {
    return run_phases_with(
        std::move(state), window, workers, [&conn] { return server_cpu_seconds(conn); }, cpu);
}

asio::awaitable<double> run_phases(std::shared_ptr<run_state> state,
                                   std::chrono::nanoseconds window, std::size_t workers,
                                   node_stats& stats, cpu_use& cpu) {
    return run_phases_with(
        std::move(state), window, workers, [&stats] { return stats.cpu_seconds(); }, cpu);
}

colock::lock_options no_renewal() {
    colock::lock_options opt;
    opt.auto_renew = false; // a cycle is exactly acquire + release
    return opt;
}

colock::lock_options peer_lock_options(options const& opts) {
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{10}; // the peer harness's TTL_MS
    if (opts.tuned)
        opt.retry.initial = std::chrono::milliseconds{1};
    return opt;
}

asio::awaitable<std::string> script_load(redis::connection& conn, std::string_view source) {
    resp3::request req;
    req.push("SCRIPT", "LOAD", source);
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const sha = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!sha)
        throw std::runtime_error("SCRIPT LOAD did not answer with a string");
    co_return std::string(*sha);
}

asio::awaitable<void> delete_matching(redis::connection& conn, std::string pattern) {
    std::string cursor = "0";
    do {
        resp3::request scan;
        scan.push("SCAN", cursor, "MATCH", pattern, "COUNT", 10000);
        auto const resp = co_await conn.co_exec(std::move(scan));
        auto const& reply = resp.at(0).elements;
        if (reply.size() != 2)
            throw std::runtime_error("SCAN did not answer with a cursor and keys");
        cursor = std::string(reply[0].as_string().value_or("0"));
        std::vector<std::string> keys;
        for (auto const& key : reply[1].elements)
            keys.emplace_back(key.as_string().value_or(""));
        if (!keys.empty()) {
            resp3::request unlink;
            unlink.push_range("UNLINK", keys);
            co_await conn.co_exec(std::move(unlink));
        }
    } while (cursor != "0");
}

namespace {

// The first row with a rate: `"EVALSHA ...","123456.78","0.031",...`.
double first_rate(std::vector<benchmark_row> const& rows) {
    for (auto const& row : rows)
        if (row.rps > 0)
            return row.rps;
    throw std::runtime_error("no requests-per-second row in redis-benchmark's output");
}

double benchmark_once(std::string const& program, redis::config const& cfg,
                      benchmark_load const& load, std::uint64_t requests,
                      std::vector<std::string> const& command) {
    auto args = redis_benchmark_args(program, cfg, load.pipeline, requests, load.clients);
    args.emplace_back("-r");
    args.push_back(std::to_string(load.random_keys));
    args.insert(args.end(), command.begin(), command.end());
    return run_redis_benchmark(std::move(args), command.front(), first_rate);
}

} // namespace

double benchmark_rate(std::string const& program, redis::config const& cfg,
                      benchmark_load const& load, std::vector<std::string> const& command,
                      double seconds) {
    auto const estimate = benchmark_once(program, cfg, load, load.calibration_requests, command);
    auto requests = static_cast<std::uint64_t>(estimate * seconds);
    requests = std::max(requests, load.calibration_requests);
    auto const batch = static_cast<std::uint64_t>(load.clients * load.pipeline);
    requests += batch - requests % batch; // whole pipelines only
    return benchmark_once(program, cfg, load, requests, command);
}

} // namespace colock::bench::contention
