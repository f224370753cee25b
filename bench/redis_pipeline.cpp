// Throughput of ONE shared, automatically pipelined colock::redis::connection, side by side with
// what redis-benchmark gets from the same server in the same run.
//
// Scenario N: N coroutines each loop `SET key:i v` / `GET key:i` on one connection for a fixed
// time. The limit is `redis-benchmark -c 1 -P N`: one client keeping N commands in flight, the
// best any single connection with N outstanding requests can do on this machine. INFO
// commandstats deltas show that the connection sends exactly one Redis command per operation.
//
// Usage: redis_pipeline [--clients 1,16,64,256] [--seconds 3] [--url redis://...] [--json]
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

extern char** environ;

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
using steady = std::chrono::steady_clock;

// Long enough for the connection's buffers and Redis's allocator to settle; not counted.
constexpr auto warm_up_time = std::chrono::milliseconds{500};
// After the measuring window, every outstanding request must complete within this; otherwise a
// request was lost and the bench says so instead of hanging.
constexpr auto drain_limit = std::chrono::seconds{10};
constexpr std::size_t max_clients = 10000;

constexpr std::string_view usage_text =
    R"(usage: redis_pipeline [--clients N[,N...]] [--seconds S] [--url redis://...] [--json]

  --clients LIST   coroutines sharing the one connection, one scenario per entry
                   (default 1,16,64,256)
  --seconds S      measuring time per scenario, after a 0.5 s warm-up (default 3)
  --url URL        use this Redis server; default: start a throwaway redis-server
  --json           print one JSON object per scenario and line instead of a table

The limit column is `redis-benchmark -c 1 -P N -t set,get` against the same server (found on
PATH, or COLOCK_REDIS_BENCHMARK). Keys written: colock:bench:<pid>:key:<i> (deleted afterwards)
and redis-benchmark's own key:__rand_int__.
)";

/// A mistake on the command line: reported with the usage hint, exit status 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct options {
    std::vector<std::size_t> clients{1, 16, 64, 256};
    double seconds = 3.0;
    std::optional<redis::config> server; // from --url
    bool json = false;
    bool help = false;
};

std::size_t parse_client_count(std::string_view text) {
    std::size_t n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n == 0 || n > max_clients)
        throw usage_error(fmt::format("--clients: \"{}\" is not a whole number between 1 and {}",
                                      text, max_clients));
    return n;
}

std::vector<std::size_t> parse_client_list(std::string_view text) {
    std::vector<std::size_t> counts;
    while (true) {
        auto const comma = text.find(',');
        counts.push_back(parse_client_count(text.substr(0, comma)));
        if (comma == std::string_view::npos)
            return counts;
        text.remove_prefix(comma + 1);
    }
}

double parse_seconds(std::string_view text) {
    double s = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
    if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(s) || s <= 0 ||
        s > 3600)
        throw usage_error(
            fmt::format("--seconds: \"{}\" is not a number of seconds in (0, 3600]", text));
    return s;
}

options parse_options(int argc, char** argv) {
    options opts;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        // Both "--name value" and "--name=value".
        std::optional<std::string_view> inline_value;
        if (auto const eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
            inline_value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        }
        auto const value = [&]() -> std::string_view {
            if (inline_value)
                return *inline_value;
            if (i + 1 >= argc)
                throw usage_error(fmt::format("{} needs a value", arg));
            return argv[++i];
        };
        auto const no_value = [&] {
            if (inline_value)
                throw usage_error(fmt::format("{} takes no value", arg));
        };

        if (arg == "--clients") {
            opts.clients = parse_client_list(value());
        } else if (arg == "--seconds") {
            opts.seconds = parse_seconds(value());
        } else if (arg == "--url") {
            auto const url = value();
            try {
                opts.server = redis::config::from_url(url);
            } catch (std::invalid_argument const& e) {
                throw usage_error(fmt::format("--url: {}", e.what()));
            }
            if (opts.server->use_tls)
                throw usage_error("--url: rediss:// is not supported (redis-benchmark runs "
                                  "without TLS here, so the comparison would be unfair)");
        } else if (arg == "--json") {
            no_value();
            opts.json = true;
        } else if (arg == "--help" || arg == "-h") {
            no_value();
            opts.help = true;
        } else {
            throw usage_error(fmt::format("unknown argument \"{}\"", arg));
        }
    }
    return opts;
}

bool is_executable_file(std::string const& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
}

/// redis-benchmark from COLOCK_REDIS_BENCHMARK, or the first one on PATH.
std::optional<std::string> find_redis_benchmark() {
    if (char const* override_path = std::getenv("COLOCK_REDIS_BENCHMARK");
        override_path && *override_path)
        return is_executable_file(override_path) ? std::optional<std::string>(override_path)
                                                 : std::nullopt;
    char const* path_env = std::getenv("PATH");
    std::string_view dirs = path_env ? path_env : "";
    while (!dirs.empty()) {
        auto const colon = dirs.find(':');
        auto dir = dirs.substr(0, colon);
        dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
        auto candidate = fmt::format("{}/redis-benchmark", dir.empty() ? "." : dir);
        if (is_executable_file(candidate))
            return candidate;
    }
    return std::nullopt;
}

struct process_result {
    int exit_status = -1; // -1 when killed by a signal
    std::string output;   // stdout and stderr, interleaved
};

/// Runs a program (no shell) with stdin from /dev/null and returns its combined output.
process_result run_process(std::vector<std::string> args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);

    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);

    pid_t pid = -1;
    int const spawn_error = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (spawn_error != 0) {
        ::close(fds[0]);
        throw std::system_error(spawn_error, std::generic_category(),
                                fmt::format("cannot start {}", args[0]));
    }

    process_result result;
    char buf[4096];
    while (true) {
        auto const n = ::read(fds[0], buf, sizeof buf);
        if (n > 0)
            result.output.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || errno != EINTR)
            break;
    }
    ::close(fds[0]);

    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

/// requests per second of SET and GET as redis-benchmark measured them.
struct server_limit {
    double set_rps = 0;
    double get_rps = 0;
    double mean() const { return (set_rps + get_rps) / 2; }
};

// The --csv output: a header line, then `"SET","423728.81","0.031",...` per test.
server_limit parse_benchmark_csv(std::string_view output) {
    std::optional<double> set_rps, get_rps;
    while (!output.empty()) {
        auto const eol = output.find('\n');
        auto line = output.substr(0, eol);
        output = eol == std::string_view::npos ? std::string_view{} : output.substr(eol + 1);

        auto const fields_start = line.find("\",\"");
        if (!line.starts_with('"') || fields_start == std::string_view::npos)
            continue;
        auto const test = line.substr(1, fields_start - 1);
        auto const rps_text = line.substr(fields_start + 3);
        double rps = 0;
        auto const [end, ec] =
            std::from_chars(rps_text.data(), rps_text.data() + rps_text.size(), rps);
        if (ec != std::errc{} || end == rps_text.data() + rps_text.size() || *end != '"')
            continue; // the header line
        if (test == "SET")
            set_rps = rps;
        else if (test == "GET")
            get_rps = rps;
    }
    if (!set_rps || !get_rps)
        throw std::runtime_error("no SET and GET rows in redis-benchmark's output");
    return {*set_rps, *get_rps};
}

server_limit run_redis_benchmark(std::string const& program, redis::config const& cfg,
                                 std::size_t pipeline, std::uint64_t requests) {
    std::vector<std::string> args{program,
                                  "-h",
                                  cfg.host,
                                  "-p",
                                  std::to_string(cfg.port),
                                  "-c",
                                  "1",
                                  "-P",
                                  std::to_string(pipeline),
                                  "-n",
                                  std::to_string(requests),
                                  "-t",
                                  "set,get",
                                  "-q",
                                  "--csv"};
    if (!cfg.password.empty()) {
        if (!cfg.username.empty())
            args.insert(args.end(), {"--user", cfg.username});
        args.insert(args.end(), {"-a", cfg.password});
    }
    if (cfg.database != 0)
        args.insert(args.end(), {"--dbnum", std::to_string(cfg.database)});

    auto const result = run_process(std::move(args));
    if (result.exit_status != 0)
        throw std::runtime_error(fmt::format("redis-benchmark -P {} failed (exit status {}):\n{}",
                                             pipeline, result.exit_status, result.output));
    try {
        return parse_benchmark_csv(result.output);
    } catch (std::exception const& e) {
        throw std::runtime_error(fmt::format("{}:\n{}", e.what(), result.output));
    }
}

/// redis-benchmark's rate for `-c 1 -P pipeline`, with -n chosen from a short calibration run
/// so the measured run (SET, then GET) takes about `seconds`.
server_limit measure_server_limit(std::string const& program, redis::config const& cfg,
                                  std::size_t pipeline, double seconds) {
    std::uint64_t const calibration_requests = std::max<std::uint64_t>(20000, 1000 * pipeline);
    auto const estimate = run_redis_benchmark(program, cfg, pipeline, calibration_requests);
    auto requests = static_cast<std::uint64_t>(estimate.mean() * seconds / 2);
    requests = std::max(requests, calibration_requests);
    requests += pipeline - requests % pipeline; // whole pipelines only
    return run_redis_benchmark(program, cfg, pipeline, requests);
}

using command_calls = std::map<std::string, std::uint64_t, std::less<>>;

// INFO commandstats: `cmdstat_set:calls=123,usec=...` per command that ran at least once.
command_calls parse_commandstats(std::string_view info) {
    command_calls calls;
    constexpr std::string_view prefix = "cmdstat_";
    constexpr std::string_view calls_key = ":calls=";
    while (!info.empty()) {
        auto const eol = info.find('\n');
        auto line = info.substr(0, eol);
        info = eol == std::string_view::npos ? std::string_view{} : info.substr(eol + 1);
        auto const colon = line.find(calls_key);
        if (!line.starts_with(prefix) || colon == std::string_view::npos)
            continue;
        auto const number = line.substr(colon + calls_key.size());
        std::uint64_t n = 0;
        std::from_chars(number.data(), number.data() + number.size(), n);
        calls.emplace(line.substr(prefix.size(), colon - prefix.size()), n);
    }
    return calls;
}

asio::awaitable<command_calls> read_commandstats(redis::connection& conn) {
    resp3::request req;
    req.push("INFO", "commandstats");
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const text = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!text)
        throw std::runtime_error("INFO commandstats did not answer with a string");
    co_return parse_commandstats(*text);
}

std::uint64_t calls_of(command_calls const& stats, std::string_view command) {
    auto const it = stats.find(command);
    return it == stats.end() ? 0 : it->second;
}

/// What the N coroutines share while they run.
struct run_state {
    explicit run_state(asio::any_io_executor const& ex) : phase_timer(ex), all_done(ex) {}

    enum class phase { warm_up, measure, stop };
    phase current = phase::warm_up;
    std::uint64_t measured_ops = 0; // completed inside the measuring window
    std::uint64_t total_ops = 0;    // completed at all, warm-up and drain included
    std::size_t running_workers = 0;
    std::string failure;            // the first thing that went wrong, if anything
    asio::steady_timer phase_timer; // the orchestrator sleeps on it; a failure cuts it short
    asio::steady_timer all_done;    // cancelled by the last worker to finish

    void completed() {
        ++total_ops;
        if (current == phase::measure)
            ++measured_ops;
    }
    void fail(std::string what) {
        if (failure.empty())
            failure = std::move(what);
        current = phase::stop;
        phase_timer.cancel();
    }
    void worker_finished() {
        if (--running_workers == 0)
            all_done.cancel();
    }
};

asio::awaitable<void> pipeline_worker(std::shared_ptr<redis::connection> conn,
                                      std::shared_ptr<run_state> state, std::string key,
                                      std::string value) {
    try {
        resp3::request set_request;
        set_request.push("SET", key, value);
        resp3::request get_request;
        get_request.push("GET", key);

        while (state->current != run_state::phase::stop) {
            {
                auto [ec, resp] =
                    co_await conn->async_exec(set_request, asio::as_tuple(asio::use_awaitable));
                if (ec) {
                    state->fail(fmt::format("SET {}: {} {}", key, ec.message(),
                                            redis::first_error_text(resp)));
                    break;
                }
                state->completed();
            }
            if (state->current == run_state::phase::stop)
                break;
            {
                auto [ec, resp] =
                    co_await conn->async_exec(get_request, asio::as_tuple(asio::use_awaitable));
                if (ec) {
                    state->fail(fmt::format("GET {}: {} {}", key, ec.message(),
                                            redis::first_error_text(resp)));
                    break;
                }
                // Every coroutine has its own value: a reply matched to the wrong request shows.
                if (resp.size() != 1 || resp.front().as_string() != value) {
                    state->fail(fmt::format(
                        "GET {} answered {}, expected \"{}\"", key,
                        resp.empty() ? "nothing" : resp3::to_debug_string(resp.front()), value));
                    break;
                }
                state->completed();
            }
        }
    } catch (std::exception const& e) {
        state->fail(fmt::format("worker for {}: {}", key, e.what()));
    }
    state->worker_finished();
}

struct pipeline_measurement {
    std::uint64_t measured_ops = 0;
    double measured_seconds = 0;
    std::uint64_t total_ops = 0;
    std::uint64_t set_get_calls = 0; // SET and GET calls the server counted meanwhile
    std::uint64_t other_calls = 0;   // any other command, except our own INFO
    std::uint64_t reconnects = 0;
};

asio::awaitable<pipeline_measurement> measure_pipeline(redis::config cfg, std::size_t clients,
                                                       std::chrono::nanoseconds window) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = std::make_shared<redis::connection>(ex, cfg);
    co_await conn->async_connect(asio::use_awaitable);
    // The handshake (HELLO, CLIENT SETNAME) is done: from here on the server should see only
    // SET and GET, plus this INFO and health-check PINGs.
    auto const before = co_await read_commandstats(*conn);

    auto state = std::make_shared<run_state>(ex);
    auto const key_prefix = fmt::format("colock:bench:{}:key:", ::getpid());
    state->running_workers = clients;
    for (std::size_t i = 0; i < clients; ++i)
        asio::co_spawn(
            ex,
            pipeline_worker(conn, state, fmt::format("{}{}", key_prefix, i), fmt::format("v{}", i)),
            asio::detached);

    state->phase_timer.expires_after(warm_up_time);
    co_await state->phase_timer.async_wait(asio::as_tuple(asio::use_awaitable));
    auto const window_start = steady::now();
    if (state->failure.empty()) {
        state->current = run_state::phase::measure;
        state->phase_timer.expires_after(window);
        co_await state->phase_timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    state->current = run_state::phase::stop;
    auto const window_end = steady::now();

    if (state->running_workers > 0) {
        state->all_done.expires_after(drain_limit);
        co_await state->all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    if (state->running_workers > 0)
        state->fail(fmt::format("{} of {} coroutines still had no reply {} s after the end",
                                state->running_workers, clients, drain_limit.count()));
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }

    auto const after = co_await read_commandstats(*conn);

    pipeline_measurement m;
    m.measured_ops = state->measured_ops;
    m.measured_seconds = std::chrono::duration<double>(window_end - window_start).count();
    m.total_ops = state->total_ops;
    m.set_get_calls = calls_of(after, "set") - calls_of(before, "set") + calls_of(after, "get") -
                      calls_of(before, "get");
    std::uint64_t all_calls = 0;
    for (auto const& [command, calls] : after)
        if (command != "info")
            all_calls += calls - calls_of(before, command);
    m.other_calls = all_calls - m.set_get_calls;
    m.reconnects = conn->reconnect_count();

    resp3::request cleanup;
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < clients; ++i)
        keys.push_back(fmt::format("{}{}", key_prefix, i));
    cleanup.push_range("DEL", keys);
    co_await conn->co_exec(std::move(cleanup));
    conn->close();
    co_return m;
}

/// Runs one coroutine to completion on the single-threaded io_context.
template <class T>
T run_on(asio::io_context& io, asio::awaitable<T> task) {
    std::optional<T> result;
    std::exception_ptr failure;
    bool done = false;
    io.restart();
    asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
        done = true;
        failure = e;
        if (!e)
            result = std::move(value);
    });
    while (!done && io.run_one() > 0) {
    }
    // Let the closed connection wind down before the next scenario or redis-benchmark.
    io.run_for(std::chrono::seconds{1});
    if (failure)
        std::rethrow_exception(failure);
    if (!result)
        throw std::logic_error("the io_context ran out of work before the measurement finished");
    return std::move(*result);
}

struct scenario_result {
    std::size_t clients = 0;
    pipeline_measurement colock;
    server_limit limit;

    double ops_per_s() const {
        return static_cast<double>(colock.measured_ops) / colock.measured_seconds;
    }
    double ratio() const { return ops_per_s() / limit.mean(); }
    double commands_per_op() const {
        return colock.total_ops == 0 ? 0.0
                                     : static_cast<double>(colock.set_get_calls) /
                                           static_cast<double>(colock.total_ops);
    }
};

void print_table_header() {
    fmt::print("{:<22} {:>7} {:>12} {:>12} {:>6} {:>8} {:>6} {:>6}\n", "scenario", "clients",
               "ops/s", "limit ops/s", "ratio", "cmds/op", "other", "recon");
}

void print_row(scenario_result const& r) {
    fmt::print("{:<22} {:>7} {:>12.0f} {:>12.0f} {:>6.3f} {:>8.4f} {:>6} {:>6}\n",
               fmt::format("pipeline_clients_{}", r.clients), r.clients, r.ops_per_s(),
               r.limit.mean(), r.ratio(), r.commands_per_op(), r.colock.other_calls,
               r.colock.reconnects);
    std::fflush(stdout);
}

void print_json(scenario_result const& r) {
    fmt::print("{{\"scenario\":\"pipeline_clients_{}\",\"clients\":{},\"seconds\":{:.3f},"
               "\"ops\":{},\"ops_per_s\":{:.1f},\"limit_ops_per_s\":{:.1f},"
               "\"limit_set_ops_per_s\":{:.1f},\"limit_get_ops_per_s\":{:.1f},\"ratio\":{:.4f},"
               "\"commands_per_op\":{:.4f},\"other_commands\":{},\"reconnects\":{}}}\n",
               r.clients, r.clients, r.colock.measured_seconds, r.colock.measured_ops,
               r.ops_per_s(), r.limit.mean(), r.limit.set_rps, r.limit.get_rps, r.ratio(),
               r.commands_per_op(), r.colock.other_calls, r.colock.reconnects);
    std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    try {
        opts = parse_options(argc, argv);
    } catch (usage_error const& e) {
        fmt::print(stderr, "redis_pipeline: {}\n(try --help)\n", e.what());
        return 2;
    }
    if (opts.help) {
        fmt::print("{}", usage_text);
        return 0;
    }

    auto const benchmark_program = find_redis_benchmark();
    if (!benchmark_program) {
        fmt::print(stderr, "redis_pipeline: redis-benchmark not found on PATH (install the "
                           "redis-tools package, or set COLOCK_REDIS_BENCHMARK to its path)\n");
        return 2;
    }

    try {
        std::optional<colock::test::redis_server> own_server;
        redis::config cfg;
        if (opts.server) {
            cfg = *opts.server;
        } else {
            own_server.emplace();
            cfg = own_server->config();
        }
        if (!opts.json)
            fmt::print("server {}, {} s per scenario, limit: redis-benchmark -c 1 -P <clients>\n",
                       cfg.to_redacted_url(), opts.seconds);

        asio::io_context io{1};
        auto const window = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(opts.seconds));
        if (!opts.json)
            print_table_header();
        for (auto const clients : opts.clients) {
            scenario_result r;
            r.clients = clients;
            r.colock = run_on(io, measure_pipeline(cfg, clients, window));
            r.limit = measure_server_limit(*benchmark_program, cfg, clients, opts.seconds);
            if (opts.json)
                print_json(r);
            else
                print_row(r);
        }
        if (!opts.json)
            fmt::print("ops = SET or GET completed; limit = mean of redis-benchmark's SET and GET "
                       "rates; cmds/op = server's SET+GET calls / ops; other = other commands "
                       "(health-check PINGs); recon = reconnects\n");
        return 0;
    } catch (std::exception const& e) {
        fmt::print(stderr, "redis_pipeline: {}\n", e.what());
        return 1;
    }
}
