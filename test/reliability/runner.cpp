#include "runner.hpp"

#include <colock_test/history.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>
#include <thread>

namespace colock::reliability {

using namespace std::chrono_literals;
using colock::test::fault_proxy;
using colock::test::redis_server;
using std::chrono::milliseconds;

settings opts;

scratch_dir::scratch_dir() {
    std::string templ = (std::filesystem::temp_directory_path() / "colock-rel-XXXXXX").string();
    if (!mkdtemp(templ.data()))
        throw std::runtime_error("mkdtemp failed");
    path_ = templ;
}

scratch_dir::~scratch_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

void make_counter(std::string const& path) {
    int const fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    std::int64_t const zero = 0;
    if (fd < 0 || write(fd, &zero, sizeof zero) != static_cast<ssize_t>(sizeof zero))
        throw std::runtime_error("cannot create the counter file " + path);
    close(fd);
}

std::int64_t read_counter(std::string const& path) {
    int const fd = open(path.c_str(), O_RDONLY);
    std::int64_t v = -1;
    if (fd < 0 || pread(fd, &v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
        throw std::runtime_error("cannot read the counter file " + path);
    close(fd);
    return v;
}

std::map<std::string, double> fields(std::string const& line) {
    std::map<std::string, double> out;
    std::istringstream in(line);
    std::string word;
    while (in >> word)
        if (auto eq = word.find('='); eq != std::string::npos)
            out[word.substr(0, eq)] = std::stod(word.substr(eq + 1));
    return out;
}

std::vector<std::int64_t> numbers(std::string const& line) {
    std::vector<std::int64_t> out;
    std::istringstream in(line);
    std::string word;
    in >> word;
    std::int64_t n = 0;
    while (in >> n)
        out.push_back(n);
    return out;
}

std::size_t lock_keys_left(redis_server const& server, std::vector<std::string> const& names) {
    std::set<std::string> lock_keys;
    for (auto const& n : names)
        lock_keys.insert("colock:{" + n + "}");
    std::size_t left = 0;
    std::istringstream keys(server.cli({"KEYS", "colock:*"}));
    for (std::string key; std::getline(keys, key);) {
        if (key.empty())
            continue;
        if (server.cli({"PTTL", key}) == "-1") {
            ++left;
        } else if (lock_keys.contains(key)) {
            auto const value = server.cli({"GET", key});
            left += value.starts_with("H ") || value.starts_with("R ") ? 1 : 0;
        }
    }
    return left;
}

void check_left_keys(result& r, redis_server const& server, milliseconds patience,
                     std::string const& what) {
    auto const left =
        settle_keys({{&server, "the server"}}, std::chrono::steady_clock::now() + patience).left;
    r.leaked_keys = left.size();
    for (auto const& k : left)
        r.failures.push_back("  left: " + k);
    r.check(left.empty(), "a key of the " + what + " is left");
}

std::string proxy_figures(fault_proxy const& proxy) {
    auto const s = proxy.stats();
    return fmt::format("proxy: {} drops, {} cuts, {} stalls, {} black-holed", s.dropped, s.cuts,
                       s.stalls, s.black_holed);
}

std::uint64_t inject_faults(fault_proxy& proxy, std::chrono::steady_clock::time_point until,
                            std::mt19937& rng, milliseconds longest_stall) {
    std::uint64_t faults = 0;
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    bool latency_on = false;
    while (std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(pick(100, 500)));
        if (latency_on) {
            proxy.set_latency(0ms);
            latency_on = false;
        }
        switch (pick(0, 4)) {
        case 0:
            proxy.set_latency(milliseconds(pick(1, 20)));
            latency_on = true;
            break;
        case 1:
            proxy.stall_for(milliseconds(pick(50, static_cast<int>(longest_stall.count()))));
            break;
        case 2:
            proxy.drop_connections();
            break;
        case 3:
            proxy.cut_next_reply(static_cast<std::size_t>(pick(1, 30)));
            break;
        default:
            proxy.set_black_hole(true);
            std::this_thread::sleep_for(milliseconds(pick(100, 800)));
            proxy.set_black_hole(false);
            break;
        }
        ++faults;
    }
    proxy.set_latency(0ms);
    proxy.set_black_hole(false);
    return faults;
}

std::vector<std::string> hold_args(std::string const& name, std::string const& ttl_ms,
                                   std::string const& renew_ms, scratch_dir const& dir) {
    return {"hold",           "--name", name,        "--ttl-ms",          ttl_ms,
            "--renew-ms",     renew_ms, "--history", dir.file("history"), "--store",
            dir.file("store")};
}

keys_after_run
settle_keys(std::vector<std::pair<colock::test::redis_server const*, std::string>> const& nodes,
            std::chrono::steady_clock::time_point until) {
    keys_after_run keys;
    wait_until(
        until - std::chrono::steady_clock::now(),
        [&] {
            keys = {};
            for (auto const& [server, where] : nodes)
                for (auto const& key : server->cli_lines({"KEYS", "*"})) {
                    if (key.starts_with("colock:locker:"))
                        ++keys.records;
                    else
                        keys.left.push_back(fmt::format("{} on {}", key, where));
                }
            return keys.left.empty();
        },
        100ms);
    return keys;
}

void tally(result& r, std::map<std::string, double>& total,
           std::chrono::steady_clock::time_point start, std::uint64_t least) {
    r.timed_from(start);
    r.acquisitions = static_cast<std::uint64_t>(total["acquisitions"]);
    r.losses = static_cast<std::uint64_t>(total["losses"]);
    r.check(r.acquisitions >= least, fmt::format("only {} acquisitions", r.acquisitions));
}

std::int64_t check_counter(result& r, std::string const& counter_file,
                           std::map<std::string, double>& total) {
    auto const counter = read_counter(counter_file);
    auto const increments = static_cast<std::int64_t>(total["increments"]);
    r.check(counter == increments, fmt::format("counter {} but {} increments: {} updates lost",
                                               counter, increments, increments - counter));
    return counter;
}

std::int64_t continue_after(worker_process const& w, std::int64_t stopped_ns,
                            milliseconds stopped_for) {
    auto const until = std::chrono::nanoseconds(stopped_ns) + stopped_for;
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(until)));
    auto const resumed_ns = steady_now_ns();
    w.continue_process();
    return resumed_ns;
}

void let_go_in_turn(result& r, worker_process& a, worker_process& b, std::string const& command,
                    std::string const& reply, std::string const& held, scratch_dir const& dir,
                    bool a_lost) {
    a.send(command);
    r.check(a.wait_line(reply, 5s) == reply + " 0",
            "A's " + command + " claimed a " + held + " it lost");
    b.send(command);
    r.check(b.wait_line(reply, 5s) == reply + " 1", "B could not " + command);
    r.check(a.wait_exit(10s) == 0 && b.wait_exit(10s) == 0, "a worker failed");
    colock::test::fenced_store store(dir.file("store"));
    r.check(store.value() == "from-B", "the store holds '" + store.value() + "'");
    check_history(r, dir.file("history"));
    r.acquisitions = 2;
    r.losses = a_lost ? 1 : 0;
}

void check_history(result& r, std::string const& history_file, std::size_t allowed_overlaps) {
    auto report = colock::test::check_history(colock::test::read_history(history_file));
    r.overlaps += report.overlaps.size();
    r.check(report.overlaps.size() <= allowed_overlaps,
            fmt::format("{} overlapping tenures (allowed {})", report.overlaps.size(),
                        allowed_overlaps));
    r.check(report.fence_inversions == 0,
            fmt::format("{} fences out of acquisition order", report.fence_inversions));
    if (report.overlaps.size() > allowed_overlaps || report.fence_inversions != 0)
        for (auto const& p : report.problems)
            r.failures.push_back("  " + p);
}

std::vector<std::string> worker_args(std::vector<std::string> args, std::string const& url,
                                     std::string const& proc) {
    args.insert(args.end(), {"--url", url, "--proc", proc});
    return args;
}

std::vector<std::string> worker_args(std::vector<std::string> args,
                                     std::vector<std::string> const& urls,
                                     std::string const& proc) {
    std::string list;
    for (auto const& url : urls)
        list += (list.empty() ? "" : ",") + url;
    args.insert(args.end(), {"--urls", list, "--proc", proc});
    return args;
}

std::map<std::string, double> collect(result& r, std::vector<std::unique_ptr<worker_process>>& ws,
                                      milliseconds limit) {
    std::map<std::string, double> total;
    for (auto& w : ws) {
        auto line = w->wait_line("summary", limit);
        auto rc = w->wait_exit(10s);
        r.check(line.has_value(), fmt::format("worker {} gave no summary", w->pid()));
        r.check(rc == 0, fmt::format("worker {} exited with {}", w->pid(), rc.value_or(-1)));
        if (line)
            for (auto const& [k, v] : fields(*line))
                total[k] += v;
    }
    return total;
}

std::vector<std::string> wait_queue(redis_server const& server, std::string const& queue_key,
                                    std::size_t n, milliseconds limit) {
    std::vector<std::string> entries;
    wait_until(
        limit,
        [&] {
            entries = server.cli_lines({"LRANGE", queue_key, "0", "-1"});
            return entries.size() >= n;
        },
        10ms);
    return entries;
}

} // namespace colock::reliability
