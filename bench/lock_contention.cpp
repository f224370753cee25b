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
#include "bench_common.hpp"

#include <colock/colock.hpp>
#include <colock/detail/lock_scripts.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
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
using bench::command_calls;
using bench::info_section;
using bench::read_commandstats;
using bench::run_state;
using bench::usage_error;
using steady = std::chrono::steady_clock;
using boost::system::error_code;

// After the measuring window every coroutine must finish within this; otherwise something hangs
// and the bench says so instead of hanging too.
constexpr auto drain_limit = std::chrono::seconds{20};
// Scenario c: the waiters' first attempts, and then their cancellation, must finish within this.
constexpr auto memory_phase_limit = std::chrono::seconds{120};
constexpr std::size_t uncontended_keys = 64;
constexpr std::size_t limit_pipeline = 16;

// The lock scripts exactly as src/lock/single_connection_store.cpp sends them: the server's
// limit is measured for the very same Lua. The bench checks that the server ends up with no
// other copy of them (see same_scripts below).
using colock::detail::acquire_source;
using colock::detail::release_source;

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

struct options : bench::common_options {
    bool uncontended = true;
    bool hot_key = true;
    bool memory = true;
    double seconds = 3.0;
    std::size_t waiters = 16;
    std::int64_t hold_us = 0;
    std::size_t memory_waiters = 100000;
};

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

// -------------------------------------------------------------------- redis-benchmark

// The first row with a rate: `"EVALSHA ...","123456.78","0.031",...`.
double first_rate(std::vector<bench::benchmark_row> const& rows) {
    for (auto const& row : rows)
        if (row.rps > 0)
            return row.rps;
    throw std::runtime_error("no requests-per-second row in redis-benchmark's output");
}

/// `redis-benchmark -c 1 -P 16 -r 64 -n N -q --csv <command...>`: requests per second.
double run_redis_benchmark(std::string const& program, redis::config const& cfg,
                           std::uint64_t requests, std::vector<std::string> const& command) {
    auto args = bench::redis_benchmark_args(program, cfg, limit_pipeline, requests);
    args.emplace_back("-r");
    args.push_back(std::to_string(uncontended_keys));
    args.insert(args.end(), command.begin(), command.end());
    return bench::run_redis_benchmark(std::move(args), command.front(), first_rate);
}

/// The rate of `command`, with -n chosen from a short calibration run so that the measured run
/// takes about `seconds`.
double measure_command_rate(std::string const& program, redis::config const& cfg,
                            std::vector<std::string> const& command, double seconds) {
    constexpr std::uint64_t calibration_requests = 20000;
    auto const estimate = run_redis_benchmark(program, cfg, calibration_requests, command);
    auto requests = static_cast<std::uint64_t>(estimate * seconds);
    requests = std::max(requests, calibration_requests);
    requests += limit_pipeline - requests % limit_pipeline; // whole pipelines only
    return run_redis_benchmark(program, cfg, requests, command);
}

// -------------------------------------------------------------------- INFO, RSS, statistics

/// `name:value` of an INFO section, as a number.
std::int64_t info_number(std::string_view info, std::string_view name) {
    auto const at = info.find(fmt::format("\n{}:", name));
    if (at == std::string_view::npos)
        throw std::runtime_error(fmt::format("INFO has no field {}", name));
    auto const number = info.substr(at + name.size() + 2);
    std::int64_t n = 0;
    std::from_chars(number.data(), number.data() + number.size(), n);
    return n;
}

/// The change of every counter from `before` to `after`; our own INFO calls left out.
command_calls delta(command_calls const& before, command_calls const& after) {
    command_calls d;
    for (auto const& [command, calls] : after) {
        if (command == "info")
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

/// Resident set size of this process, in bytes.
std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages))
        throw std::runtime_error("cannot read /proc/self/statm");
    return resident_pages * ::sysconf(_SC_PAGESIZE);
}

/// CPU seconds (user + system) this process used so far.
double own_cpu_seconds() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    auto const secs = [](timeval const& tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    };
    return secs(ru.ru_utime) + secs(ru.ru_stime);
}

/// CPU seconds (user + system) the server's main process used so far: INFO cpu.
asio::awaitable<double> server_cpu_seconds(redis::connection& conn) {
    auto const info = co_await info_section(conn, "cpu");
    auto const field = [&](std::string_view name) {
        auto const at = info.find(fmt::format("\n{}:", name));
        if (at == std::string::npos)
            throw std::runtime_error(fmt::format("INFO cpu has no field {}", name));
        auto const number = std::string_view(info).substr(at + name.size() + 2);
        double v = 0;
        std::from_chars(number.data(), number.data() + number.size(), v);
        return v;
    };
    co_return field("used_cpu_sys") + field("used_cpu_user");
}

/// How busy client and server were during a window: CPU seconds per wall second.
struct cpu_use {
    double client = 0, server = 0;
};

struct latency_summary {
    std::size_t samples = 0;
    double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0;
};

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

/// The keys of the lock whose key is `key`: the lock and its queue of waiting processes.
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

/// A prefix no other run shares.
std::string run_prefix() {
    return fmt::format("colock:bench:{}:", ::getpid());
}

// -------------------------------------------------------------------- the timed phases

/// Warm-up, measuring window, stop, drain. Returns the window's length in seconds.
/// `cpu` gets the client's and the server's CPU use in the window (the INFO that reads the
/// server's is one more command on the busy connection, once at each end).
asio::awaitable<double> run_phases(std::shared_ptr<run_state> state,
                                   std::chrono::nanoseconds window, std::size_t workers,
                                   redis::connection& conn, cpu_use& cpu) {
    co_await state->sleep_phase(bench::warm_up_time);
    auto server_cpu = co_await server_cpu_seconds(conn);
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
    cpu.server = (co_await server_cpu_seconds(conn) - server_cpu) / wall;
    co_await state->drain(drain_limit, workers, "had not finished");
    co_return std::chrono::duration<double>(window_end - window_start).count();
}

colock::lock_options no_renewal() {
    colock::lock_options opt;
    opt.auto_renew = false; // a cycle is exactly acquire + release
    return opt;
}

// -------------------------------------------------------------------- a. uncontended_64_keys

asio::awaitable<void> cycle_worker(std::shared_ptr<colock::locker> locker,
                                   std::shared_ptr<run_state> state, std::string name) {
    auto const opt = no_renewal();
    while (state->current != run_state::phase::stop) {
        auto guard = co_await locker->co_lock(name, opt);
        if (!co_await guard.unlock()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        state->completed();
    }
}

struct uncontended_result {
    std::uint64_t measured_cycles = 0;
    double seconds = 0;
    std::uint64_t total_cycles = 0;
    command_calls calls; // server-side delta over all cycles
    std::uint64_t reconnects = 0;
    std::string acquire_sha, release_sha;
    bool same_scripts = true; // the library ran the scripts we measure the limit of
    double acquire_rps = 0, release_rps = 0;
    cpu_use cpu;

    double cycles_per_s() const { return static_cast<double>(measured_cycles) / seconds; }
    double limit() const { return 1.0 / (1.0 / acquire_rps + 1.0 / release_rps); }
    double ratio() const { return cycles_per_s() / limit(); }
    double per_cycle(std::uint64_t n) const {
        return total_cycles == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total_cycles);
    }
};

asio::awaitable<std::string> script_load(redis::connection& conn, std::string_view source) {
    resp3::request req;
    req.push("SCRIPT", "LOAD", source);
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const sha = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!sha)
        throw std::runtime_error("SCRIPT LOAD did not answer with a string");
    co_return std::string(*sha);
}

asio::awaitable<uncontended_result> measure_uncontended(redis::config cfg,
                                                        std::chrono::nanoseconds window) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());

    uncontended_result r;
    // Loaded before the run: if the library's text differed from ours, the server would end up
    // with more cached scripts than these two.
    auto const scripts_before =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");
    r.acquire_sha = co_await script_load(*conn, acquire_source);
    r.release_sha = co_await script_load(*conn, release_source);
    auto const scripts_loaded =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");

    auto const before = co_await read_commandstats(*conn);
    auto state = std::make_shared<run_state>(ex);
    state->running_workers = uncontended_keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i) {
        auto name = fmt::format("key:{}", i);
        asio::co_spawn(ex,
                       bench::run_worker(state, fmt::format("worker on {}", name),
                                         cycle_worker(locker, state, name)),
                       asio::detached);
    }
    r.seconds = co_await run_phases(state, window, uncontended_keys, *conn, r.cpu);
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }
    auto const after = co_await read_commandstats(*conn);
    auto const scripts_after =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");
    r.same_scripts = scripts_after == scripts_loaded &&
                     scripts_loaded - scripts_before <= 2; // <2: already cached before

    r.measured_cycles = state->measured_ops;
    r.total_cycles = state->total_ops;
    r.calls = delta(before, after);
    r.reconnects = conn->reconnect_count();

    std::vector<std::string> keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i)
        add_lock_keys(keys, fmt::format("{}{{key:{}}}", locker->key_prefix(), i));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

// redis-benchmark writes __rand_int__ as 12 zero-padded digits.
asio::awaitable<int> delete_limit_keys(redis::config cfg) {
    auto conn = co_await open(cfg);
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i)
        add_lock_keys(keys, fmt::format("colock:bench:limit:{{{:012}}}", i));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return 0;
}

void measure_script_limit(std::string const& program, redis::config const& cfg,
                          uncontended_result& r, double seconds) {
    // The same arguments the locker sends: the lock and its queue keys, then for acquire token,
    // ttl, owner, queueing ("0": never, as co_try_lock) and the queue entry's lifetime; for
    // release token, wake channel prefix, claim and "" (the leaving locker, unused here).
    std::string const key = "colock:bench:limit:{__rand_int__}";
    std::string const token = "0123456789abcdef0123456789abcdef";
    std::vector<std::string> const acquire = {"EVALSHA",  r.acquire_sha, "3",   key,
                                              key + ":q", key + ":qd",   token, "30000",
                                              "bench",    "0",           "3000"};
    std::vector<std::string> const release = {
        "EVALSHA",   r.release_sha, "3",         key,    key + ":q",
        key + ":qd", token,         key + ":w:", "1000", ""};
    r.acquire_rps = measure_command_rate(program, cfg, acquire, seconds / 2);
    r.release_rps = measure_command_rate(program, cfg, release, seconds / 2);
}

void report_uncontended(uncontended_result const& r, bool json) {
    auto const evalsha = calls_of(r.calls, "evalsha");
    auto const all = total_calls(r.calls);
    if (json) {
        fmt::print("{{\"scenario\":\"uncontended_64_keys\",\"coroutines\":{},\"seconds\":{:.3f},"
                   "\"cycles\":{},\"cycles_per_s\":{:.1f},\"limit_cycles_per_s\":{:.1f},"
                   "\"limit_acquire_per_s\":{:.1f},\"limit_release_per_s\":{:.1f},"
                   "\"ratio\":{:.4f},\"evalsha_per_cycle\":{:.4f},\"all_calls_per_cycle\":{:.4f},"
                   "\"calls\":{},\"total_cycles\":{},\"client_cpu\":{:.3f},\"server_cpu\":{:.3f},"
                   "\"same_scripts\":{},\"reconnects\":{}}}\n",
                   uncontended_keys, r.seconds, r.measured_cycles, r.cycles_per_s(), r.limit(),
                   r.acquire_rps, r.release_rps, r.ratio(), r.per_cycle(evalsha), r.per_cycle(all),
                   calls_json(r.calls), r.total_cycles, r.cpu.client, r.cpu.server, r.same_scripts,
                   r.reconnects);
    } else {
        fmt::print("\n== a. uncontended_64_keys: {} coroutines, {} names, co_lock + unlock "
                   "(auto_renew off)\n",
                   uncontended_keys, uncontended_keys);
        fmt::print("  cycles/s            {:>12.0f}   ({} cycles in {:.2f} s)\n", r.cycles_per_s(),
                   r.measured_cycles, r.seconds);
        fmt::print("  server limit        {:>12.0f}   cycles/s = 1 / (1/{:.0f} + 1/{:.0f}), "
                   "redis-benchmark -c 1 -P {} EVALSHA acquire | release\n",
                   r.limit(), r.acquire_rps, r.release_rps, limit_pipeline);
        fmt::print("  ratio               {:>12.3f}   (target >= 0.8)\n", r.ratio());
        fmt::print("  EVALSHA per cycle   {:>12.3f}   (target <= 2)\n", r.per_cycle(evalsha));
        fmt::print("  all calls per cycle {:>12.3f}   (Redis also counts the commands a script "
                   "runs)\n",
                   r.per_cycle(all));
        fmt::print("  per cycle: {}\n", calls_text(r.calls, static_cast<double>(r.total_cycles)));
        fmt::print("  CPU busy            client {:.0f} %, server {:.0f} % of one core\n",
                   100 * r.cpu.client, 100 * r.cpu.server);
        if (!r.same_scripts)
            fmt::print("  WARNING: the server cached other scripts than the two measured: the "
                       "bench's copy of the Lua differs from the library's\n");
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

// -------------------------------------------------------------------- b. hot_key_handoff

struct handoff_state : run_state {
    using run_state::run_state;
    std::optional<steady::time_point> unlock_started; // by the holder that is letting go
    std::vector<double> handoff_us;                   // measured hand-offs
    std::vector<double> unlock_us;                    // measured unlock() calls
    std::vector<std::uint64_t> per_worker;            // acquisitions in the window
    std::int64_t last_fence = 0;
};

asio::awaitable<void> hot_worker(std::shared_ptr<colock::locker> locker,
                                 std::shared_ptr<handoff_state> state, std::string name,
                                 std::size_t id, std::chrono::microseconds hold) {
    auto const opt = no_renewal();
    asio::steady_timer hold_timer(co_await asio::this_coro::executor);
    while (state->current != run_state::phase::stop) {
        auto guard = co_await locker->co_lock(name, opt);
        auto const acquired = steady::now();
        if (state->unlock_started) {
            if (state->measuring())
                state->handoff_us.push_back(micros(acquired - *state->unlock_started));
            state->unlock_started.reset();
        }
        if (guard.fence() <= state->last_fence) {
            state->fail(fmt::format("fence went from {} to {}", state->last_fence, guard.fence()));
            break;
        }
        state->last_fence = guard.fence();
        if (state->measuring())
            ++state->per_worker[id];
        if (hold.count() > 0) {
            hold_timer.expires_after(hold);
            co_await hold_timer.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        auto const unlock_started = steady::now();
        state->unlock_started = unlock_started;
        if (!co_await guard.unlock()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        if (state->measuring())
            state->unlock_us.push_back(micros(steady::now() - unlock_started));
        state->completed();
    }
}

struct handoff_result {
    std::size_t waiters = 0;
    std::int64_t hold_us = 0;
    std::uint64_t measured = 0;
    double seconds = 0;
    std::uint64_t total = 0;
    latency_summary handoff;
    latency_summary unlock; // the release's own round trip, for comparison
    latency_summary ping;
    command_calls calls;
    std::uint64_t min_per_worker = 0, max_per_worker = 0;
    cpu_use cpu;
    std::uint64_t reconnects = 0;

    double per_s() const { return static_cast<double>(measured) / seconds; }
    double per_acquisition(std::uint64_t n) const {
        return total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total);
    }
};

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

asio::awaitable<handoff_result> measure_handoff(redis::config cfg, std::chrono::nanoseconds window,
                                                std::size_t waiters, std::int64_t hold_us) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());
    std::string const name = "hot";

    // The plain round trip on this connection, idle, for comparison.
    handoff_result r;
    r.waiters = waiters;
    r.hold_us = hold_us;
    co_await ping_rtt(*conn, 200); // warm
    r.ping = co_await ping_rtt(*conn, 2000);

    auto const before = co_await read_commandstats(*conn);
    auto state = std::make_shared<handoff_state>(ex);
    state->per_worker.assign(waiters, 0);
    state->running_workers = waiters;
    for (std::size_t i = 0; i < waiters; ++i)
        asio::co_spawn(ex,
                       bench::run_worker(
                           state, fmt::format("worker {}", i),
                           hot_worker(locker, state, name, i, std::chrono::microseconds{hold_us})),
                       asio::detached);
    r.seconds = co_await run_phases(state, window, waiters, *conn, r.cpu);
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }
    auto const after = co_await read_commandstats(*conn);

    r.measured = state->measured_ops;
    r.total = state->total_ops;
    r.handoff = summarize(std::move(state->handoff_us));
    r.unlock = summarize(std::move(state->unlock_us));
    r.calls = delta(before, after);
    r.min_per_worker = *std::min_element(state->per_worker.begin(), state->per_worker.end());
    r.max_per_worker = *std::max_element(state->per_worker.begin(), state->per_worker.end());
    r.reconnects = conn->reconnect_count();

    std::vector<std::string> keys;
    add_lock_keys(keys, fmt::format("{}{{{}}}", locker->key_prefix(), name));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

void report_handoff(handoff_result const& r, bool json) {
    auto const per = [&](std::string_view c) { return r.per_acquisition(calls_of(r.calls, c)); };
    if (json) {
        fmt::print("{{\"scenario\":\"hot_key_handoff\",\"waiters\":{},\"hold_us\":{},"
                   "\"seconds\":{:.3f},\"acquisitions\":{},\"acquisitions_per_s\":{:.1f},"
                   "\"handoff_mean_us\":{:.1f},\"handoff_p50_us\":{:.1f},"
                   "\"handoff_p99_us\":{:.1f},\"handoff_max_us\":{:.1f},\"handoff_samples\":{},"
                   "\"unlock_p50_us\":{:.1f},\"ping_mean_us\":{:.1f},\"ping_p50_us\":{:.1f},\"ping_"
                   "p99_us\":{:.1f},"
                   "\"evalsha_per_acquisition\":{:.4f},\"failed_attempts_per_acquisition\":{:.4f},"
                   "\"subscribe_per_acquisition\":{:.4f},"
                   "\"unsubscribe_per_acquisition\":{:.4f},\"calls\":{},\"total_acquisitions\":{},"
                   "\"min_per_waiter\":{},\"max_per_waiter\":{},\"client_cpu\":{:.3f},"
                   "\"server_cpu\":{:.3f},\"reconnects\":{}}}\n",
                   r.waiters, r.hold_us, r.seconds, r.measured, r.per_s(), r.handoff.mean_us,
                   r.handoff.p50_us, r.handoff.p99_us, r.handoff.max_us, r.handoff.samples,
                   r.unlock.p50_us, r.ping.mean_us, r.ping.p50_us, r.ping.p99_us, per("evalsha"),
                   per("pttl"), per("subscribe"), per("unsubscribe"), calls_json(r.calls), r.total,
                   r.min_per_worker, r.max_per_worker, r.cpu.client, r.cpu.server, r.reconnects);
    } else {
        fmt::print("\n== b. hot_key_handoff: {} coroutines on one name, hold {} us\n", r.waiters,
                   r.hold_us);
        fmt::print("  acquisitions/s      {:>12.0f}   ({} in {:.2f} s; per waiter {} .. {})\n",
                   r.per_s(), r.measured, r.seconds, r.min_per_worker, r.max_per_worker);
        fmt::print("  hand-off            mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us, max {:.1f} "
                   "us   (unlock() call -> next co_lock done)\n",
                   r.handoff.mean_us, r.handoff.p50_us, r.handoff.p99_us, r.handoff.max_us);
        fmt::print("  unlock() itself     mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us\n",
                   r.unlock.mean_us, r.unlock.p50_us, r.unlock.p99_us);
        fmt::print("  PING round trip     mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us   (same "
                   "connection, idle)\n",
                   r.ping.mean_us, r.ping.p50_us, r.ping.p99_us);
        fmt::print("  hand-off / PING     {:>12.2f}   (p50 / p50)\n",
                   r.ping.p50_us > 0 ? r.handoff.p50_us / r.ping.p50_us : 0.0);
        fmt::print("  per acquisition     EVALSHA {:.3f}, failed attempts (PTTL) {:.3f}, "
                   "SUBSCRIBE {:.4f}, UNSUBSCRIBE {:.4f}\n",
                   per("evalsha"), per("pttl"), per("subscribe"), per("unsubscribe"));
        fmt::print("  per acquisition: {}\n", calls_text(r.calls, static_cast<double>(r.total)));
        fmt::print("  CPU busy            client {:.0f} %, server {:.0f} % of one core\n",
                   100 * r.cpu.client, 100 * r.cpu.server);
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

// -------------------------------------------------------------------- c. waiters_memory

struct memory_state {
    explicit memory_state(asio::any_io_executor const& ex) : all_done(ex) {}
    std::size_t running = 0;
    std::size_t aborted = 0;  // operation_aborted, as expected
    std::size_t acquired = 0; // got the lock before the cancellation reached them
    std::size_t failed = 0;   // anything else
    std::string first_failure;
    asio::steady_timer all_done;
};

asio::awaitable<void> memory_waiter(std::shared_ptr<colock::locker> locker,
                                    std::shared_ptr<memory_state> state, std::string name) {
    auto const opt = no_renewal();
    auto [ec, guard] = co_await locker->async_lock(name, opt, asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) {
        ++state->aborted;
    } else if (!ec) {
        ++state->acquired;
        co_await guard.unlock();
    } else {
        ++state->failed;
        if (state->first_failure.empty())
            state->first_failure = ec.message();
    }
    if (--state->running == 0)
        state->all_done.cancel();
}

struct memory_result {
    std::size_t waiters = 0;
    std::int64_t rss_before = 0, rss_after = 0;
    double queue_seconds = 0;  // until every waiter had made its first attempt
    double cancel_seconds = 0; // from the cancellation until every waiter returned
    std::size_t aborted = 0, acquired = 0, failed = 0;
    std::int64_t keys_left = 0, subscribers_left = 0;
    command_calls calls; // while queueing
    std::string holder_unlock_error;
    double baseline_bytes = 0; // a bare co_spawned coroutine waiting on a steady_timer

    double bytes_per_waiter() const {
        return static_cast<double>(rss_after - rss_before) / static_cast<double>(waiters);
    }
};

/// Keys of the lock `key` that would stay: the lock still held or handed off ("H ..." or
/// "R ..."), or a key without an expiry. The free lock ("F <fence>") and the queue lapse.
asio::awaitable<std::int64_t> lock_keys_left(redis::connection& conn, std::string const& key) {
    std::vector<std::string> keys;
    add_lock_keys(keys, key);
    resp3::request req;
    req.push("GET", key);
    for (auto const& k : keys)
        req.push("PTTL", k);
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const value = resp.at(0).as_string().value_or("");
    std::int64_t left = value.starts_with("H ") || value.starts_with("R ") ? 1 : 0;
    for (std::size_t i = 1; i < resp.size(); ++i)
        left += resp[i].as_integer() == -1 ? 1 : 0;
    co_return left;
}

/// Subscribers of the wake channels of the lock `key`, one channel per waiting locker.
asio::awaitable<std::int64_t> wake_subscribers(redis::connection& conn, std::string const& key) {
    resp3::request list;
    list.push("PUBSUB", "CHANNELS", key + ":w:*");
    auto const channels = co_await conn.co_exec(std::move(list));
    std::int64_t total = 0;
    for (auto const& channel : channels.at(0).elements) {
        resp3::request numsub;
        numsub.push("PUBSUB", "NUMSUB", channel.as_string().value_or(""));
        auto const reply = co_await conn.co_exec(std::move(numsub));
        total += reply.at(0).elements.size() == 2
                     ? reply.at(0).elements[1].as_integer().value_or(-1)
                     : -1;
    }
    co_return total;
}

asio::awaitable<void> bare_waiter(std::shared_ptr<memory_state> state) {
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
    if (--state->running == 0)
        state->all_done.cancel();
}

/// What the same number of co_spawned coroutines cost that only wait on a timer: the floor any
/// Asio coroutine that waits pays, to read the lock's figure against.
asio::awaitable<double> baseline_bytes_per_coroutine(std::size_t count) {
    auto const ex = co_await asio::this_coro::executor;
    std::vector<asio::cancellation_signal> signals(count);
    auto state = std::make_shared<memory_state>(ex);
    state->running = count;
    ::malloc_trim(0);
    auto const before = resident_bytes();
    for (auto& s : signals)
        asio::co_spawn(ex, bare_waiter(state),
                       asio::bind_cancellation_slot(s.slot(), asio::detached));
    co_await sleep_for(std::chrono::milliseconds{100});
    ::malloc_trim(0);
    auto const after = resident_bytes();
    for (auto& s : signals)
        s.emit(asio::cancellation_type::terminal);
    state->all_done.expires_after(memory_phase_limit);
    co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    if (state->running > 0)
        throw std::runtime_error("bare timer coroutines did not return after cancellation");
    co_return static_cast<double>(after - before) / static_cast<double>(count);
}

asio::awaitable<memory_result> measure_memory(redis::config cfg, std::size_t waiters) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());
    std::string const name = "memory";
    auto const key = fmt::format("{}{{{}}}", locker->key_prefix(), name);

    colock::lock_options hold_opt;
    hold_opt.ttl = std::chrono::minutes{5}; // outlasts the scenario; renewal not needed
    hold_opt.auto_renew = false;
    auto holder = co_await locker->co_lock(name, hold_opt);

    memory_result r;
    r.waiters = waiters;
    r.baseline_bytes = co_await baseline_bytes_per_coroutine(waiters);
    // The bench's own per-waiter bookkeeping (one signal each) is allocated before the baseline.
    std::vector<asio::cancellation_signal> signals(waiters);
    auto state = std::make_shared<memory_state>(ex);
    state->running = waiters;
    auto const before = co_await read_commandstats(*conn);
    ::malloc_trim(0);
    r.rss_before = resident_bytes();

    auto const started = steady::now();
    for (std::size_t i = 0; i < waiters; ++i)
        asio::co_spawn(ex, memory_waiter(locker, state, name),
                       asio::bind_cancellation_slot(signals[i].slot(), asio::detached));
    // Every waiter makes one attempt (answered with the holder's PTTL), then queues locally.
    command_calls now;
    while (true) {
        now = co_await read_commandstats(*conn);
        if (calls_of(now, "pttl") - calls_of(before, "pttl") >= waiters)
            break;
        if (steady::now() - started > memory_phase_limit || state->running < waiters)
            throw std::runtime_error(fmt::format(
                "waiters did not queue: {} attempts answered in {:.0f} s, {} returned early ({})",
                calls_of(now, "pttl") - calls_of(before, "pttl"),
                std::chrono::duration<double>(steady::now() - started).count(),
                waiters - state->running, state->first_failure));
        co_await sleep_for(std::chrono::milliseconds{20});
    }
    // Replies come in order, so after this PING every attempt's reply has been delivered; the
    // short sleep lets the waiters' coroutines run on to their queue.
    resp3::request ping;
    ping.push("PING");
    co_await conn->co_exec(std::move(ping));
    co_await sleep_for(std::chrono::milliseconds{200});
    r.queue_seconds = std::chrono::duration<double>(steady::now() - started).count();
    r.calls = delta(before, co_await read_commandstats(*conn));
    ::malloc_trim(0);
    r.rss_after = resident_bytes();

    // Cancel every waiter, then let the holder go: nobody may take the lock after that.
    auto const cancel_started = steady::now();
    for (auto& s : signals)
        s.emit(asio::cancellation_type::terminal);
    try {
        if (!co_await holder.unlock())
            r.holder_unlock_error = "the lock was no longer ours";
    } catch (std::exception const& e) {
        r.holder_unlock_error = e.what();
    }
    if (state->running > 0) {
        state->all_done.expires_after(memory_phase_limit);
        co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    r.cancel_seconds = std::chrono::duration<double>(steady::now() - cancel_started).count();
    if (state->running > 0)
        throw std::runtime_error(fmt::format("{} of {} waiters did not return within {} s of "
                                             "their cancellation",
                                             state->running, waiters, memory_phase_limit.count()));
    r.aborted = state->aborted;
    r.acquired = state->acquired;
    r.failed = state->failed;

    co_await sleep_for(std::chrono::milliseconds{200}); // the unsubscribe is fire-and-forget
    r.keys_left = co_await lock_keys_left(*conn, key);
    r.subscribers_left = co_await wake_subscribers(*conn, key);

    std::vector<std::string> keys;
    add_lock_keys(keys, key);
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

bool memory_ok(memory_result const& r) {
    return r.failed == 0 && r.aborted + r.acquired == r.waiters && r.keys_left == 0 &&
           r.subscribers_left == 0 && r.holder_unlock_error.empty();
}

void report_memory(memory_result const& r, bool json) {
    auto const per = [&](std::string_view c) {
        return static_cast<double>(calls_of(r.calls, c)) / static_cast<double>(r.waiters);
    };
    if (json) {
        fmt::print("{{\"scenario\":\"waiters_memory\",\"waiters\":{},\"rss_before\":{},"
                   "\"rss_after\":{},\"bytes_per_waiter\":{:.1f},\"queue_seconds\":{:.3f},"
                   "\"cancel_seconds\":{:.3f},\"aborted\":{},\"acquired\":{},\"failed\":{},"
                   "\"keys_left\":{},\"subscribers_left\":{},\"calls\":{},"
                   "\"baseline_bytes_per_timer_coroutine\":{:.1f},\"holder_unlock_error\":\"{}\","
                   "\"ok\":{}}}\n",
                   r.waiters, r.rss_before, r.rss_after, r.bytes_per_waiter(), r.queue_seconds,
                   r.cancel_seconds, r.aborted, r.acquired, r.failed, r.keys_left,
                   r.subscribers_left, calls_json(r.calls), r.baseline_bytes, r.holder_unlock_error,
                   memory_ok(r));
    } else {
        fmt::print("\n== c. waiters_memory: {} co_lock waiters on one held name\n", r.waiters);
        fmt::print("  bytes per waiter    {:>12.0f}   (RSS {:.1f} MiB -> {:.1f} MiB)\n",
                   r.bytes_per_waiter(), static_cast<double>(r.rss_before) / (1 << 20),
                   static_cast<double>(r.rss_after) / (1 << 20));
        fmt::print("  for comparison      {:>12.0f}   bytes per bare co_spawned coroutine waiting "
                   "on a steady_timer\n",
                   r.baseline_bytes);
        fmt::print("  queued in           {:>12.3f} s (per waiter: EVALSHA {:.3f}, SUBSCRIBE "
                   "{:.5f})\n",
                   r.queue_seconds, per("evalsha"), per("subscribe"));
        fmt::print("  cancel all + unlock {:>12.3f} s: {} aborted, {} acquired first, {} failed; "
                   "lock keys left {}, subscribers left {}  => {}\n",
                   r.cancel_seconds, r.aborted, r.acquired, r.failed, r.keys_left,
                   r.subscribers_left, memory_ok(r) ? "OK" : "FAILED");
        if (!r.holder_unlock_error.empty())
            fmt::print("  the holder's unlock() failed: {}\n", r.holder_unlock_error);
    }
    std::fflush(stdout);
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

        asio::io_context io{1};
        auto const window = bench::window_of(opts.seconds);
        int status = 0;
        if (opts.uncontended) {
            auto r = bench::run_on(io, measure_uncontended(cfg, window));
            measure_script_limit(*benchmark_program, cfg, r, opts.seconds);
            bench::run_on(io, delete_limit_keys(cfg));
            report_uncontended(r, opts.json);
        }
        if (opts.hot_key) {
            auto const r =
                bench::run_on(io, measure_handoff(cfg, window, opts.waiters, opts.hold_us));
            report_handoff(r, opts.json);
        }
        if (opts.memory) {
            auto const r = bench::run_on(io, measure_memory(cfg, opts.memory_waiters));
            report_memory(r, opts.json);
            if (!memory_ok(r))
                status = 1;
        }
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "lock_contention: {}\n", e.what());
        return 1;
    }
}
