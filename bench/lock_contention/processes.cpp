// S4 of the peer harness: P processes x N coroutines on ONE name, each process with one
// connection and one locker, and a second connection for a Redis counter that the critical
// section reads and writes back non-atomically (GET, then SET v+1). Afterwards the counter must
// equal the number of acquisitions: a difference is a lost update, i.e. two holders at once.
//
// The processes are this program again (`--s4-worker`, started with posix_spawn), each writing
// its share as `key value...` lines to a file in a temporary directory. They start together:
// each one INCRs <prefix>ready and waits in BLPOP <prefix>go; once all are ready this process
// reads INFO commandstats and pushes a common start time (epoch ms, 100 ms ahead). Calls per
// acquisition leave out the barrier's BLPOP and RPUSH; "lock_calls_per_acq" also leaves out the
// counter's GET and SET, two per acquisition.
//
// On a Redlock deployment every process's locker runs over the same primaries (--primary-urls);
// the counter and the barrier live on the first primary, as they live on the one server
// otherwise, and the calls are summed over the primaries.
#include "lock_contention.hpp"

#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace colock::bench::contention {
namespace {

// The processes must all be ready within this, and finish within window + this.
constexpr auto process_grace = std::chrono::seconds{60};

std::int64_t epoch_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string own_executable() {
    std::string path(4096, '\0');
    auto const n = ::readlink("/proc/self/exe", path.data(), path.size());
    if (n <= 0 || static_cast<std::size_t>(n) >= path.size())
        throw std::system_error(errno, std::generic_category(), "readlink /proc/self/exe");
    path.resize(static_cast<std::size_t>(n));
    return path;
}

/// A temporary directory, removed with the files this run put in it.
class temp_dir {
public:
    temp_dir() {
        char const* tmp = std::getenv("TMPDIR");
        path_ = fmt::format("{}/colock-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!::mkdtemp(path_.data()))
            throw std::system_error(errno, std::generic_category(), "mkdtemp " + path_);
    }
    ~temp_dir() {
        for (auto const& f : files_)
            ::unlink(f.c_str());
        ::rmdir(path_.c_str());
    }
    temp_dir(temp_dir const&) = delete;
    temp_dir& operator=(temp_dir const&) = delete;

    std::string file(std::string const& name) {
        files_.push_back(fmt::format("{}/{}", path_, name));
        return files_.back();
    }

private:
    std::string path_;
    std::vector<std::string> files_;
};

/// The S4 processes: started with stdout to a file, reaped without blocking, and killed if
/// this process gives up on them.
class children {
public:
    children() = default;
    children(children const&) = delete;
    children& operator=(children const&) = delete;
    ~children() {
        for (auto& c : kids_)
            if (!c.exited) {
                ::kill(c.pid, SIGKILL);
                while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
                }
            }
    }

    void spawn(std::vector<std::string> args, std::string const& output) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                         0600);
        std::vector<char*> argv;
        for (auto& a : args)
            argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t pid = -1;
        int const error = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        if (error != 0)
            throw std::system_error(error, std::generic_category(),
                                    fmt::format("cannot start {}", args[0]));
        kids_.push_back({pid});
    }

    /// Reaps what has exited; true when all have.
    bool poll() {
        bool all = true;
        for (auto& c : kids_) {
            if (!c.exited && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid)
                c.exited = true;
            all = all && c.exited;
        }
        return all;
    }

    /// "process 2 exited with status 1" for the first that exited unsuccessfully, if any.
    std::string first_failure() const {
        for (std::size_t i = 0; i < kids_.size(); ++i) {
            auto const& c = kids_[i];
            if (!c.exited)
                continue;
            if (WIFSIGNALED(c.status))
                return fmt::format("process {} was killed by signal {}", i, WTERMSIG(c.status));
            if (WEXITSTATUS(c.status) != 0)
                return fmt::format("process {} exited with status {}", i, WEXITSTATUS(c.status));
        }
        return {};
    }

private:
    struct child {
        pid_t pid = -1;
        bool exited = false;
        int status = 0;
    };
    std::vector<child> kids_;
};

// -------------------------------------------------------------------- one process's share

std::string share_text(hot_share const& s) {
    std::string out = fmt::format("seconds {}\nacquisitions {}\ntotal {}\noverlaps {}\n"
                                  "fence_regressions {}\nreconnects {}\nclient_cpu {}\n"
                                  "server_cpu {}\nper_worker",
                                  s.seconds, s.acquisitions, s.total, s.overlaps,
                                  s.fence_regressions, s.reconnects, s.cpu.client, s.cpu.server);
    for (auto const n : s.per_worker)
        out += fmt::format(" {}", n);
    out += "\nwait_us";
    for (auto const us : s.wait_us)
        out += fmt::format(" {:.1f}", us);
    return out + "\n";
}

hot_share parse_share(std::string const& path) {
    std::ifstream in(path);
    hot_share s;
    std::string line;
    std::size_t fields = 0;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string key;
        words >> key;
        ++fields;
        if (key == "seconds")
            words >> s.seconds;
        else if (key == "acquisitions")
            words >> s.acquisitions;
        else if (key == "total")
            words >> s.total;
        else if (key == "overlaps")
            words >> s.overlaps;
        else if (key == "fence_regressions")
            words >> s.fence_regressions;
        else if (key == "reconnects")
            words >> s.reconnects;
        else if (key == "client_cpu")
            words >> s.cpu.client;
        else if (key == "server_cpu")
            words >> s.cpu.server;
        else if (key == "per_worker")
            for (std::uint64_t n = 0; words >> n;)
                s.per_worker.push_back(n);
        else if (key == "wait_us")
            for (double us = 0; words >> us;)
                s.wait_us.push_back(us);
        else
            --fields;
    }
    if (fields != 10 || s.per_worker.empty())
        throw std::runtime_error(fmt::format("{}: not the output of an S4 process", path));
    return s;
}

// -------------------------------------------------------------------- the processes' side

asio::awaitable<std::string> wait_for_start(redis::connection& aux, std::string const& prefix) {
    resp3::request incr;
    incr.push("INCR", prefix + "ready");
    co_await aux.co_exec(std::move(incr));
    while (true) {
        // One second at a time: the connection's health check wants its PING answered.
        resp3::request pop;
        pop.push("BLPOP", prefix + "go", 1);
        auto const resp = co_await aux.co_exec(std::move(pop));
        auto const& reply = resp.at(0);
        if (reply.elements.size() == 2)
            co_return std::string(reply.elements[1].as_string().value_or(""));
    }
}

asio::awaitable<hot_share> s4_process(deployment d, options opts) {
    auto target = co_await lock_target::open(d, opts.prefix);
    auto aux = co_await open(d.cfg); // the counter and the barrier, as the peer's second socket

    auto const start_text = co_await wait_for_start(*aux, opts.prefix);
    std::int64_t start_ms = 0;
    std::istringstream(start_text) >> start_ms;
    if (auto const ahead = start_ms - epoch_ms(); ahead > 0)
        co_await sleep_for(std::chrono::milliseconds{ahead});

    auto share =
        co_await run_hot_share(target, aux.get(), opts.prefix + "counter", "hot", opts.proc_waiters,
                               window_of(opts.seconds), peer_lock_options(opts));
    target.close();
    aux->close();
    co_return share;
}

// -------------------------------------------------------------------- the coordinator's side

asio::awaitable<std::int64_t> get_number(redis::connection& conn, std::string key) {
    resp3::request get;
    get.push("GET", key);
    auto const resp = co_await conn.co_exec(std::move(get));
    co_return resp.at(0).is_null() ? 0 : resp.at(0).as_integer().value_or(-1);
}

asio::awaitable<hot_result> measure_hot_processes(deployment d, std::string url, options opts,
                                                  std::size_t processes, std::size_t per_process,
                                                  bool sweep) {
    // This process takes no lock: the target gives it the processes' servers, their INFO and
    // the cleanup; its first connection carries the barrier and reads the counter.
    auto target = co_await lock_target::open(d, run_prefix());
    auto* const conn = &target.first();
    auto const prefix = run_prefix() + fmt::format("s4:{}x{}:", processes, per_process);
    std::vector<std::string> keys = {prefix + "ready", prefix + "go", prefix + "counter"};
    add_lock_keys(keys, prefix + "{hot}");
    co_await target.delete_keys(keys);

    temp_dir dir;
    children kids;
    std::vector<std::string> outputs;
    auto const program = own_executable();
    // Redlock: the processes' --url is the first primary's, where the counter lives.
    std::string primary_urls;
    for (auto const& u : d.primary_urls)
        primary_urls += (primary_urls.empty() ? "" : ",") + u;
    if (d.redlock())
        url = d.primary_urls.front();
    for (std::size_t i = 0; i < processes; ++i) {
        outputs.push_back(dir.file(fmt::format("process-{}.txt", i)));
        std::vector<std::string> args = {program,          "--s4-worker",
                                         "--url",          url,
                                         "--prefix",       prefix,
                                         "--proc-id",      std::to_string(i),
                                         "--proc-waiters", std::to_string(per_process),
                                         "--seconds",      fmt::format("{}", opts.seconds)};
        if (opts.tuned)
            args.emplace_back("--tuned");
        if (d.redlock()) {
            args.emplace_back("--primary-urls");
            args.push_back(primary_urls);
        }
        kids.spawn(std::move(args), outputs.back());
    }

    auto const ready_by = steady::now() + process_grace;
    while (co_await get_number(*conn, prefix + "ready") < static_cast<std::int64_t>(processes)) {
        kids.poll();
        if (auto const failure = kids.first_failure(); !failure.empty())
            throw std::runtime_error(fmt::format("S4: {} before the start", failure));
        if (steady::now() > ready_by)
            throw std::runtime_error(
                fmt::format("S4: the processes were not ready within {} s", process_grace.count()));
        co_await sleep_for(std::chrono::milliseconds{10});
    }

    auto const before = co_await target.stats().commandstats();
    std::vector<std::string> go = {prefix + "go"};
    go.resize(1 + processes, fmt::format("{}", epoch_ms() + 100));
    resp3::request push;
    push.push_range("RPUSH", go);
    co_await conn->co_exec(std::move(push));

    auto const done_by =
        steady::now() + warm_up_time + window_of(opts.seconds) + drain_limit + process_grace;
    while (!kids.poll()) {
        if (steady::now() > done_by)
            throw std::runtime_error("S4: the processes did not finish in time");
        co_await sleep_for(std::chrono::milliseconds{20});
    }
    if (auto const failure = kids.first_failure(); !failure.empty())
        throw std::runtime_error(fmt::format("S4: {}", failure));
    auto calls = delta(before, co_await target.stats().commandstats());

    hot_result r;
    r.scenario = "S4";
    r.mode = opts.mode();
    r.deployment = d.name;
    r.cohort_limit = peer_lock_options(opts).cohort_limit;
    r.sweep = sweep;
    r.processes = processes;
    r.workers_per_process = per_process;
    r.counter = co_await get_number(*conn, prefix + "counter");
    for (auto const& output : outputs) {
        auto const share = parse_share(output);
        if (r.shares == 0)
            r.cpu.server = share.cpu.server; // every process saw the same server
        r.add(share);
    }
    calls.erase("blpop");
    if (auto const it = calls.find("rpush"); it != calls.end() && --it->second == 0)
        calls.erase(it);
    r.calls = std::move(calls);
    r.section_calls = 2 * r.total;

    co_await target.delete_keys(keys);
    target.close();
    co_return r;
}

} // namespace

hot_result run_hot_processes(asio::io_context& io, deployment const& d, std::string const& url,
                             options const& opts, std::size_t processes, std::size_t per_process,
                             bool sweep) {
    auto r = run_on(io, measure_hot_processes(d, url, opts, processes, per_process, sweep));
    report_hot(r, opts);
    return r;
}

int run_s4_worker(options const& opts) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // never outlive the run that started us
    try {
        if (!opts.server || opts.prefix.empty())
            throw std::runtime_error("--s4-worker needs --url and --prefix");
        auto const d = opts.primary_urls.empty() ? single_deployment(*opts.server)
                                                 : redlock_deployment(opts.primary_urls);
        asio::io_context io{1};
        auto const share = run_on(io, s4_process(d, opts));
        fmt::print("{}", share_text(share));
        std::fflush(stdout);
        return 0;
    } catch (std::exception const& e) {
        fmt::print(stderr, "lock_contention (S4 process {}): {}\n", opts.proc_id, e.what());
        return 1;
    }
}

} // namespace colock::bench::contention
