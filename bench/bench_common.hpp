// What the benchmarks share: command-line parsing, running redis-benchmark, INFO parsing, the
// state of a timed run, running a scenario on the io_context, and picking the server (one, or a
// throwaway Redis Cluster next to it, with INFO summed over its primaries).
#pragma once

#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/resp3/value.hpp>
#include <colock_test/cluster_set.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
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

namespace colock::bench {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
using steady = std::chrono::steady_clock;

// Long enough for the connection's buffers and Redis's allocator to settle; not counted.
inline constexpr auto warm_up_time = std::chrono::milliseconds{500};

// -------------------------------------------------------------------- command line

/// A mistake on the command line: reported with the usage hint, exit status 2.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The options every benchmark takes: --url, --cluster, --cluster-replicas, --json, --help.
struct common_options {
    std::optional<redis::config> server; // from --url
    std::string url;                     // --url as given, for child processes
    bool cluster = false;                // also against a throwaway Redis Cluster
    int cluster_replicas = 1;            // replicas per primary of that cluster
    bool json = false;
    bool help = false;
};

template <class Int>
Int parse_whole(std::string_view flag, std::string_view text, Int low, Int high) {
    Int n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc{} || end != text.data() + text.size() || n < low || n > high)
        throw usage_error(fmt::format("{}: \"{}\" is not a whole number between {} and {}", flag,
                                      text, low, high));
    return n;
}

inline double parse_seconds(std::string_view text) {
    double s = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
    if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(s) || s <= 0 ||
        s > 3600)
        throw usage_error(
            fmt::format("--seconds: \"{}\" is not a number of seconds in (0, 3600]", text));
    return s;
}

inline redis::config parse_url(std::string_view url) {
    boost::system::error_code url_error;
    std::string reason;
    auto cfg = redis::config::from_url(url, url_error, &reason);
    if (url_error)
        throw usage_error(fmt::format("--url: {}", reason));
    if (cfg.use_tls)
        throw usage_error("--url: rediss:// is not supported (redis-benchmark runs "
                          "without TLS here, so the comparison would be unfair)");
    if (cfg.uses_cluster() || cfg.uses_sentinel())
        throw usage_error("--url: give one server (redis:// or unix://); --cluster starts a "
                          "throwaway Redis Cluster");
    return cfg;
}

/// One argument as the option handler sees it: its name and, on demand, its value.
class option_arg {
public:
    option_arg(int argc, char** argv, int& i) : argc_(argc), argv_(argv), i_(i) {
        name_ = argv[i];
        // Both "--name value" and "--name=value".
        if (auto const eq = name_.find('=');
            name_.starts_with("--") && eq != std::string_view::npos) {
            inline_value_ = name_.substr(eq + 1);
            name_ = name_.substr(0, eq);
        }
    }
    std::string_view name() const { return name_; }
    std::string_view value() {
        if (inline_value_)
            return *inline_value_;
        if (i_ + 1 >= argc_)
            throw usage_error(fmt::format("{} needs a value", name_));
        return argv_[++i_];
    }
    void no_value() const {
        if (inline_value_)
            throw usage_error(fmt::format("{} takes no value", name_));
    }

private:
    int argc_;
    char** argv_;
    int& i_;
    std::string_view name_;
    std::optional<std::string_view> inline_value_;
};

/// Parses argv into `opts`: --url, --cluster, --cluster-replicas, --json and --help here, every
/// other option by
/// `handle(opts, arg)`, which returns false for an option it does not know.
template <class Options, class Handler>
void parse_args(int argc, char** argv, Options& opts, Handler handle) {
    common_options& common = opts;
    for (int i = 1; i < argc; ++i) {
        option_arg arg(argc, argv, i);
        if (arg.name() == "--url") {
            common.url = arg.value();
            common.server = parse_url(common.url);
        } else if (arg.name() == "--cluster") {
            arg.no_value();
            common.cluster = true;
        } else if (arg.name() == "--cluster-replicas") {
            common.cluster_replicas = parse_whole(arg.name(), arg.value(), 0, 2);
        } else if (arg.name() == "--json") {
            arg.no_value();
            common.json = true;
        } else if (arg.name() == "--help" || arg.name() == "-h") {
            arg.no_value();
            common.help = true;
        } else if (!handle(opts, arg)) {
            throw usage_error(fmt::format("unknown argument \"{}\"", arg.name()));
        }
    }
}

/// Parses the command line; on a mistake or --help prints what fits and returns the exit
/// status main should return.
template <class Options, class Handler>
std::optional<int> parse_command_line(std::string_view tool, std::string_view usage, int argc,
                                      char** argv, Options& opts, Handler handle) {
    try {
        parse_args(argc, argv, opts, std::move(handle));
    } catch (usage_error const& e) {
        fmt::print(stderr, "{}: {}\n(try --help)\n", tool, e.what());
        return 2;
    }
    if (opts.help) {
        fmt::print("{}", usage);
        return 0;
    }
    return std::nullopt;
}

/// The measuring window of --seconds.
inline std::chrono::nanoseconds window_of(double seconds) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(seconds));
}

// -------------------------------------------------------------------- redis-benchmark

inline bool is_executable_file(std::string const& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
}

/// redis-benchmark from COLOCK_REDIS_BENCHMARK, or the first one on PATH.
inline std::optional<std::string> find_redis_benchmark() {
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

/// find_redis_benchmark(), saying on stderr what to do when there is none.
inline std::optional<std::string> require_redis_benchmark(std::string_view tool) {
    auto program = find_redis_benchmark();
    if (!program)
        fmt::print(stderr,
                   "{}: redis-benchmark not found on PATH (install the redis-tools "
                   "package, or set COLOCK_REDIS_BENCHMARK to its path)\n",
                   tool);
    return program;
}

struct process_result {
    int exit_status = -1; // -1 when killed by a signal
    std::string output;   // stdout and stderr, interleaved
};

/// Runs a program (no shell) with stdin from /dev/null and returns its combined output.
inline process_result run_process(std::vector<std::string> args) {
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

/// `program -h host -p port -c clients -P pipeline -n requests -q --csv` plus the server's
/// credentials and database: the caller appends what to run.
inline std::vector<std::string> redis_benchmark_args(std::string const& program,
                                                     redis::config const& cfg, std::size_t pipeline,
                                                     std::uint64_t requests,
                                                     std::size_t clients = 1) {
    std::vector<std::string> args;
    args.push_back(program);
    args.emplace_back("-h");
    args.push_back(cfg.host);
    args.emplace_back("-p");
    args.push_back(std::to_string(cfg.port));
    args.emplace_back("-c");
    args.push_back(std::to_string(clients));
    args.emplace_back("-P");
    args.push_back(std::to_string(pipeline));
    args.emplace_back("-n");
    args.push_back(std::to_string(requests));
    args.emplace_back("-q");
    args.emplace_back("--csv");
    if (!cfg.password.empty()) {
        if (!cfg.username.empty()) {
            args.emplace_back("--user");
            args.push_back(cfg.username);
        }
        args.emplace_back("-a");
        args.push_back(cfg.password);
    }
    if (cfg.database != 0) {
        args.emplace_back("--dbnum");
        args.push_back(std::to_string(cfg.database));
    }
    return args;
}

/// One row of redis-benchmark's --csv output: the test's name and its requests per second.
struct benchmark_row {
    std::string test;
    double rps = 0;
};

// The --csv output: a header line, then `"SET","423728.81","0.031",...` per test.
inline std::vector<benchmark_row> parse_benchmark_csv(std::string_view output) {
    std::vector<benchmark_row> rows;
    while (!output.empty()) {
        auto const eol = output.find('\n');
        auto line = output.substr(0, eol);
        output = eol == std::string_view::npos ? std::string_view{} : output.substr(eol + 1);

        auto const fields_start = line.find("\",\"");
        if (!line.starts_with('"') || fields_start == std::string_view::npos)
            continue;
        auto const rps_text = line.substr(fields_start + 3);
        double rps = 0;
        auto const [end, ec] =
            std::from_chars(rps_text.data(), rps_text.data() + rps_text.size(), rps);
        if (ec != std::errc{} || end == rps_text.data() + rps_text.size() || *end != '"')
            continue; // the header line
        rows.push_back({std::string(line.substr(1, fields_start - 1)), rps});
    }
    return rows;
}

/// Runs redis-benchmark with `args` and hands its output to `parse`; `what` names the run in
/// errors.
template <class Parse>
auto run_redis_benchmark(std::vector<std::string> args, std::string_view what, Parse parse) {
    auto const result = run_process(std::move(args));
    if (result.exit_status != 0)
        throw std::runtime_error(fmt::format("redis-benchmark {} failed (exit status {}):\n{}",
                                             what, result.exit_status, result.output));
    try {
        return parse(parse_benchmark_csv(result.output));
    } catch (std::exception const& e) {
        throw std::runtime_error(fmt::format("{}:\n{}", e.what(), result.output));
    }
}

// -------------------------------------------------------------------- INFO

using command_calls = std::map<std::string, std::uint64_t, std::less<>>;

// INFO commandstats: `cmdstat_set:calls=123,usec=456,...` per command that ran at least once;
// `field` "calls" or "usec" (the server's time in the command, for a script the commands it ran
// included).
inline command_calls parse_commandstats(std::string_view info, std::string_view field = "calls") {
    command_calls calls;
    constexpr std::string_view prefix = "cmdstat_";
    constexpr std::string_view calls_key = ":calls=";
    auto const field_key = fmt::format("{}{}=", field == "calls" ? ':' : ',', field);
    while (!info.empty()) {
        auto const eol = info.find('\n');
        auto line = info.substr(0, eol);
        info = eol == std::string_view::npos ? std::string_view{} : info.substr(eol + 1);
        auto const colon = line.find(calls_key);
        auto const at = line.find(field_key);
        if (!line.starts_with(prefix) || colon == std::string_view::npos ||
            at == std::string_view::npos)
            continue;
        auto const number = line.substr(at + field_key.size());
        std::uint64_t n = 0;
        std::from_chars(number.data(), number.data() + number.size(), n);
        calls.emplace(line.substr(prefix.size(), colon - prefix.size()), n);
    }
    return calls;
}

inline asio::awaitable<std::string> info_section(redis::connection& conn, std::string section) {
    resp3::request req;
    req.push("INFO", section);
    auto const resp = co_await conn.co_exec(std::move(req));
    auto const text = resp.empty() ? std::nullopt : resp.front().as_string();
    if (!text)
        throw std::runtime_error(fmt::format("INFO {} did not answer with a string", section));
    co_return std::string(*text);
}

inline asio::awaitable<command_calls> read_commandstats(redis::connection& conn) {
    co_return parse_commandstats(co_await info_section(conn, "commandstats"));
}

inline std::uint64_t calls_of(command_calls const& stats, std::string_view command) {
    auto const it = stats.find(command);
    return it == stats.end() ? 0 : it->second;
}

/// Commands that INFO commandstats counts but the connection under test did not send: our own
/// INFO, and a cluster's replicas acknowledging replication to their primary (REPLCONF ACK).
inline bool is_not_from_client(std::string_view command) {
    return command == "info" || command == "replconf";
}

/// used_cpu_sys + used_cpu_user of INFO cpu: the server's CPU seconds so far.
inline double parse_cpu_seconds(std::string_view info) {
    auto const field = [&](std::string_view name) {
        auto const at = info.find(fmt::format("\n{}:", name));
        if (at == std::string_view::npos)
            throw std::runtime_error(fmt::format("INFO cpu has no field {}", name));
        auto const number = info.substr(at + name.size() + 2);
        double v = 0;
        std::from_chars(number.data(), number.data() + number.size(), v);
        return v;
    };
    return field("used_cpu_sys") + field("used_cpu_user");
}

/// Plain connections to the nodes whose INFO a scenario reads (one server, or every primary of
/// a cluster), summing what they report. They stay open for the whole scenario, so that their
/// own handshakes fall outside the deltas, and send no health-check PINGs: the only commands
/// they add are INFO, which every count leaves out. The connection under test sends none.
class node_stats {
public:
    static asio::awaitable<node_stats> open(std::vector<redis::config> nodes) {
        node_stats s;
        for (auto& cfg : nodes) {
            cfg.health_check_interval = std::chrono::milliseconds{0};
            cfg.client_name = "colock-bench-stats";
            auto conn = std::make_shared<redis::connection>(co_await asio::this_coro::executor,
                                                            std::move(cfg));
            co_await conn->co_connect();
            s.conns_.push_back(std::move(conn));
        }
        co_return s;
    }

    std::size_t size() const noexcept { return conns_.size(); }

    /// INFO commandstats, each command's calls (or `field`: "usec", its microseconds) summed
    /// over the nodes.
    asio::awaitable<command_calls> commandstats(std::string field = "calls") {
        command_calls sum;
        for (auto const& conn : conns_)
            for (auto const& [command, calls] :
                 parse_commandstats(co_await info_section(*conn, "commandstats"), field))
                sum[command] += calls;
        co_return sum;
    }

    /// The CPU seconds the nodes' main processes used so far, summed.
    asio::awaitable<double> cpu_seconds() {
        double sum = 0;
        for (auto const& conn : conns_)
            sum += parse_cpu_seconds(co_await info_section(*conn, "cpu"));
        co_return sum;
    }

    void close() {
        for (auto const& conn : conns_)
            conn->close();
    }

private:
    std::vector<std::shared_ptr<redis::connection>> conns_;
};

// -------------------------------------------------------------------- running a scenario

/// What the coroutines of a timed scenario share.
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

    bool measuring() const { return current == phase::measure; }
    void completed() {
        ++total_ops;
        if (measuring())
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

    /// Sleeps on phase_timer for `d`; a failure cuts it short.
    asio::awaitable<void> sleep_phase(steady::duration d) {
        phase_timer.expires_after(d);
        co_await phase_timer.async_wait(asio::as_tuple(asio::use_awaitable));
    }

    /// After the measuring window: waits up to `limit` for the workers to finish, and fails the
    /// run ("N of `workers` coroutines still `unfinished` ...") if some have not.
    asio::awaitable<void> drain(std::chrono::seconds limit, std::size_t workers,
                                std::string_view unfinished) {
        if (running_workers > 0) {
            all_done.expires_after(limit);
            co_await all_done.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (running_workers > 0)
            fail(fmt::format("{} of {} coroutines still {} {} s after the end", running_workers,
                             workers, unfinished, limit.count()));
    }
};

/// Runs `body` as one of `state`'s workers: what it throws fails the run ("`who`: what"), and
/// the worker counts as finished however it ends.
inline asio::awaitable<void> run_worker(std::shared_ptr<run_state> state, std::string who,
                                        asio::awaitable<void> body) {
    try {
        co_await std::move(body);
    } catch (std::exception const& e) {
        state->fail(fmt::format("{}: {}", who, e.what()));
    }
    state->worker_finished();
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
    // Let the closed connection and background work wind down before the next scenario or
    // redis-benchmark.
    io.run_for(std::chrono::seconds{1});
    if (failure)
        std::rethrow_exception(failure);
    if (!result)
        throw std::logic_error("the io_context ran out of work before the scenario finished");
    return std::move(*result);
}

/// The server of --url, or else a throwaway redis-server started in `own`.
inline redis::config pick_server(common_options const& opts,
                                 std::optional<colock::test::redis_server>& own) {
    if (opts.server)
        return *opts.server;
    own.emplace();
    return own->config();
}

/// A benchmark's main on one server: parses the command line into Options (`parse` for the
/// benchmark's own options), picks the server, runs `run(config, options)` (an awaitable of
/// void) to completion, and reports a failure as "<tool>: <what>" with exit status 1.
template <class Options, class Parse, class Run>
int run_main(std::string_view tool, std::string_view usage, int argc, char** argv, Parse parse,
             Run run) {
    Options opts;
    if (auto const status = parse_command_line(tool, usage, argc, argv, opts, parse))
        return *status;
    try {
        std::optional<colock::test::redis_server> own;
        auto const cfg = pick_server(opts, own);
        asio::io_context io;
        run_on(io, [](Run r, redis::config c, Options o) -> asio::awaitable<bool> {
            co_await r(std::move(c), std::move(o));
            co_return true;
        }(run, cfg, opts));
    } catch (std::exception const& e) {
        fmt::print(stderr, "{}: {}\n", tool, e.what());
        return 1;
    }
    std::fflush(stdout);
    return 0;
}

/// The URL of the server pick_server chose, as from_url reads it (password included).
inline std::string server_url(common_options const& opts,
                              std::optional<colock::test::redis_server> const& own) {
    return own ? own->url() : opts.url;
}

/// Where a scenario runs: the one server, a Redis Cluster, or independent primaries (Redlock);
/// and the nodes whose INFO counts.
struct deployment {
    std::string name;  // "single", "cluster" or "redlock", as the JSON's "deployment"
    redis::config cfg; // the connection under test (Redlock: the first primary)
    std::vector<redis::config> nodes; // the server itself, or every primary
    std::uint16_t seed_port = 0;      // cluster: a primary, for redis-benchmark --cluster
    /// Redlock: the URLs of `nodes`, over which the locker runs with one connection each (and
    /// which another process needs to do the same). Empty: the locker runs over `cfg` alone.
    std::vector<std::string> primary_urls;

    bool redlock() const noexcept { return !primary_urls.empty(); }
};

inline deployment single_deployment(redis::config const& cfg) {
    return {"single", cfg, {cfg}, 0, {}};
}

/// The cluster as a colock connection sees it (its URL, every node a seed), with its primaries
/// as they stand now: INFO is read from them, and the cluster must not fail over meanwhile.
inline deployment cluster_deployment(colock::test::cluster_set& cluster) {
    deployment d{"cluster", redis::config::from_url(cluster.url()), {}, 0, {}};
    for (auto const port : cluster.primary_ports())
        d.nodes.push_back(cluster.node_on(port).config());
    if (d.nodes.empty())
        throw std::runtime_error("the cluster has no primary serving slots");
    d.seed_port = d.nodes.front().port;
    return d;
}

/// The throwaway cluster of --cluster: 3 primaries with --cluster-replicas replicas each. The
/// node timeout is Redis's default rather than the tests' 1 s: a primary that a loaded 2-core
/// machine starves for a second must not be failed over in the middle of a measurement.
inline colock::test::cluster_set_options bench_cluster_options(common_options const& opts) {
    colock::test::cluster_set_options o;
    o.primaries = 3;
    o.replicas_per_primary = opts.cluster_replicas;
    o.node_timeout_ms = 15000;
    return o;
}

/// "3 primaries, 1 replica each", for the header line.
inline std::string cluster_shape(deployment const& d, common_options const& opts) {
    return fmt::format("{} primaries, {} replica{} each", d.nodes.size(), opts.cluster_replicas,
                       opts.cluster_replicas == 1 ? "" : "s");
}

} // namespace colock::bench
