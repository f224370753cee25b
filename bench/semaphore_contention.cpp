// A semaphore and a read-write lock under contention, against one redis-server: the peer
// harness's S5 shape (one semaphore of capacity 8 on one hot name) as 64 coroutines of one
// locker, and as 4 lockers x 16 coroutines (each locker on its own connection, as 4 processes
// would have); and a read-write lock with 64 coroutines, one in eight a writer.
//
// The critical section is the harness's: INCR of a plain Redis key on a connection of its own,
// an over-admission counted when the count exceeds the capacity (for the read-write lock: a
// writer beside anyone, counted locally), then DECR. Reported per scenario: acquisitions per
// second in the measuring window, wait p50/p99 (from wanting to holding), fairness (the most and
// the fewest acquisitions of one coroutine, and their ratio), over-admissions (must be 0), and
// server calls per acquisition from INFO commandstats (calls inside scripts count too): all of
// them, and without the section's INCR and DECR. Holdings use a 10 s lease, renewed, so a few
// renewals fall into the counts.
//
// Two reference lines bound what any semaphore could reach here: "section alone", 8 coroutines
// (the capacity) looping the same section with no semaphore at all, in this process and on the
// same connection; and redis-benchmark -c 4 -P 2 INCR, halved (a C client's 4 connections with
// 2 requests in flight each: the peer harness's 4 processes holding 2 of the 8 permits each,
// every acquisition an INCR and a DECR). Each scenario's rate is also given over the first.
//
// Usage: semaphore_contention [--seconds S] [--url redis://...] [--json]
#include "bench_common.hpp"

#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace redis = colock::redis;
namespace resp3 = colock::resp3;
namespace bench = colock::bench;
using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view usage_text =
    R"(Usage: semaphore_contention [--seconds S] [--url redis://...] [--json]

A semaphore of capacity 8 on one hot name (64 coroutines of one locker; 4 lockers x 16, each on
its own connection) and a read-write lock (64 coroutines, one in eight a writer), against one
redis-server (a throwaway one unless --url): acquisitions/s, wait p50/p99, fairness, server
calls per acquisition; next to the section alone (8 coroutines, no semaphore) and
redis-benchmark -c 4 -P 2 INCR, halved (redis-benchmark from PATH or COLOCK_REDIS_BENCHMARK;
the line is left out without one).

  --seconds S   measuring time of each scenario, after a 0.5 s warm-up (default 3)
  --tuned       retry after 1 ms instead of the library's 50 ms (the peer harness's "tuned")
  --url URL     a server of your own (its keys go under colock:bench:<pid>:)
  --json        one JSON object per scenario
)";

constexpr std::size_t capacity = 8;

struct options : bench::common_options {
    double seconds = 3;
    bool tuned = false;
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() == "--seconds") {
        o.seconds = bench::parse_seconds(arg.value());
    } else if (arg.name() == "--tuned") {
        arg.no_value();
        o.tuned = true;
    } else {
        return false;
    }
    return true;
}

// section_only: no synchronizer, `capacity` coroutines loop the section (the ceiling).
enum class shape { semaphore, rw_lock, section_only };

struct scenario {
    std::string name;
    shape kind;
    std::size_t lockers;
    std::size_t per_locker;
};

struct result {
    std::string name;
    std::size_t workers = 0;
    double seconds = 0;
    std::uint64_t acquisitions = 0; // in the window
    double wait_p50_ms = 0, wait_p99_ms = 0;
    std::uint64_t most = 0, fewest = 0;
    std::uint64_t overadmissions = 0;
    double calls_per_acq = 0, sync_calls_per_acq = 0;
    std::uint64_t writes = 0; // rw: writer acquisitions in the window
};

double percentile(std::vector<double>& v, double q) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

asio::awaitable<std::shared_ptr<redis::connection>> open(redis::config cfg, std::string name) {
    cfg.health_check_interval = milliseconds{0};
    cfg.client_name = std::move(name);
    auto conn = std::make_shared<redis::connection>(co_await asio::this_coro::executor, cfg);
    co_await conn->co_connect();
    co_return conn;
}

asio::awaitable<std::int64_t> count_step(redis::connection& raw, std::string_view command,
                                         std::string const& key) {
    resp3::request req;
    req.push(command, key);
    auto const reply = co_await raw.co_exec(std::move(req));
    co_return reply.at(0).as_integer().value_or(0);
}

// One locker as one process would have it: its connection and the synchronizer on it.
struct party {
    std::shared_ptr<redis::connection> conn;
    std::unique_ptr<colock::locker> locker;
    std::unique_ptr<colock::semaphore> sem;
    std::unique_ptr<colock::rw_lock> rw;
};

struct shared_counts {
    std::vector<std::uint64_t> per_worker;
    std::vector<double> waits_ms;
    std::uint64_t overadmissions = 0;
    std::uint64_t writes = 0;
    int writers = 0, readers = 0;
};

asio::awaitable<void> worker(std::shared_ptr<bench::run_state> state, party& p,
                             redis::connection& raw, std::string const& inside_key, bool writer,
                             std::size_t index, colock::lock_options opt, shared_counts& counts) {
    while (state->current != bench::run_state::phase::stop) {
        auto const wanted = steady::now();
        std::optional<colock::permit> permit;
        std::optional<colock::read_guard> reader;
        std::optional<colock::write_guard> writing;
        if (p.sem)
            permit.emplace(co_await p.sem->co_acquire(opt));
        else if (!p.rw)
            ; // the section alone
        else if (writer)
            writing.emplace(co_await p.rw->co_lock(opt));
        else
            reader.emplace(co_await p.rw->co_lock_shared(opt));
        bool const measuring = state->measuring();
        if (measuring)
            counts.waits_ms.push_back(
                std::chrono::duration<double, std::milli>(steady::now() - wanted).count());
        if (p.sem || !p.rw) {
            if (co_await count_step(raw, "INCR", inside_key) > static_cast<std::int64_t>(capacity))
                ++counts.overadmissions;
            co_await count_step(raw, "DECR", inside_key);
        } else {
            int& mine = writer ? counts.writers : counts.readers;
            ++mine;
            if (counts.writers > 1 || (counts.writers > 0 && counts.readers > 0))
                ++counts.overadmissions;
            co_await count_step(raw, "INCR", inside_key);
            co_await count_step(raw, "DECR", inside_key);
            --mine;
            if (writer && measuring)
                ++counts.writes;
        }
        if (measuring)
            ++counts.per_worker[index];
        state->completed();
        bool ours = false;
        if (permit)
            ours = co_await permit->release();
        else if (writing)
            ours = co_await writing->release();
        else if (reader)
            ours = co_await reader->release();
        else
            ours = true;
        if (!ours)
            throw std::runtime_error("a holding was lost before its release");
    }
}

asio::awaitable<result> run_scenario(redis::config cfg, scenario const& sc, double seconds,
                                     bool tuned, std::string const& prefix) {
    colock::lock_options opt;
    opt.ttl = milliseconds{10'000};
    if (tuned)
        opt.retry.initial = milliseconds{1};
    // Not a braced list: GCC 12 miscompiles one inside a coroutine.
    std::vector<redis::config> nodes;
    nodes.push_back(cfg);
    auto stats = co_await bench::node_stats::open(std::move(nodes));
    auto raw = co_await open(cfg, "colock-bench-section");
    std::string const name = fmt::format("{}{}", prefix, sc.name);
    std::string const inside_key = name + ":inside";
    std::vector<party> parties(sc.lockers);
    for (std::size_t i = 0; i < sc.lockers; ++i) {
        auto& p = parties[i];
        p.conn = co_await open(cfg, fmt::format("colock-bench-{}", i));
        p.locker = std::make_unique<colock::locker>(*p.conn);
        if (sc.kind == shape::semaphore)
            p.sem = std::make_unique<colock::semaphore>(*p.locker, name, capacity);
        else if (sc.kind == shape::rw_lock)
            p.rw = std::make_unique<colock::rw_lock>(*p.locker, name);
    }
    auto ex = co_await asio::this_coro::executor;
    auto state = std::make_shared<bench::run_state>(ex);
    shared_counts counts;
    std::size_t const workers = sc.lockers * sc.per_locker;
    counts.per_worker.assign(workers, 0);
    state->running_workers = workers;
    for (std::size_t w = 0; w < workers; ++w) {
        bool const writer = sc.kind == shape::rw_lock && w % 8 == 0;
        asio::co_spawn(ex,
                       bench::run_worker(state, fmt::format("coroutine {}", w),
                                         worker(state, parties[w % sc.lockers], *raw, inside_key,
                                                writer, w, opt, counts)),
                       asio::detached);
    }
    co_await state->sleep_phase(milliseconds{500});
    auto const before = co_await stats.commandstats();
    auto const started = steady::now();
    if (state->failure.empty()) {
        state->current = bench::run_state::phase::measure;
        co_await state->sleep_phase(bench::window_of(seconds));
    }
    auto const elapsed = steady::now() - started;
    if (state->current == bench::run_state::phase::measure)
        state->current = bench::run_state::phase::stop;
    auto const after = co_await stats.commandstats();
    co_await state->drain(std::chrono::seconds{20}, workers, "acquiring");
    if (!state->failure.empty())
        throw std::runtime_error(fmt::format("{}: {}", sc.name, state->failure));

    result r;
    r.name = sc.name;
    r.workers = workers;
    r.seconds = std::chrono::duration<double>(elapsed).count();
    r.acquisitions = state->measured_ops;
    r.wait_p50_ms = percentile(counts.waits_ms, 0.50);
    r.wait_p99_ms = percentile(counts.waits_ms, 0.99);
    // Not a structured binding: GCC 12 cannot keep one in a coroutine's frame.
    auto const extremes = std::minmax_element(counts.per_worker.begin(), counts.per_worker.end());
    r.fewest = *extremes.first;
    r.most = *extremes.second;
    r.overadmissions = counts.overadmissions;
    r.writes = counts.writes;
    std::uint64_t all = 0, section = 0;
    for (auto const& entry : after) {
        if (bench::is_not_from_client(entry.first))
            continue;
        auto const delta = entry.second - bench::calls_of(before, entry.first);
        all += delta;
        if (entry.first == "incr" || entry.first == "decr")
            section += delta;
    }
    if (r.acquisitions > 0) {
        r.calls_per_acq = static_cast<double>(all) / static_cast<double>(r.acquisitions);
        r.sync_calls_per_acq =
            static_cast<double>(all - section) / static_cast<double>(r.acquisitions);
    }
    for (auto& p : parties) {
        p.sem.reset();
        p.rw.reset();
        p.conn->close();
    }
    resp3::request del;
    del.push("DEL", inside_key);
    co_await raw->co_exec(std::move(del));
    raw->close();
    stats.close();
    co_return r;
}

double rate_of(result const& r) {
    return r.seconds > 0 ? static_cast<double>(r.acquisitions) / r.seconds : 0;
}

// `alone`: the section alone's rate, which the rate is also given over.
void print(result const& r, double alone, bool json) {
    double const rate = rate_of(r);
    double const over_alone = alone > 0 ? rate / alone : 0;
    double const fairness =
        r.fewest > 0 ? static_cast<double>(r.most) / static_cast<double>(r.fewest) : 0;
    if (json) {
        fmt::print("{{\"scenario\":\"{}\",\"workers\":{},\"seconds\":{:.3f},\"acquisitions\":{},"
                   "\"acq_per_s\":{:.1f},\"wait_p50_ms\":{:.3f},\"wait_p99_ms\":{:.3f},"
                   "\"per_worker_min\":{},\"per_worker_max\":{},\"fairness\":{:.3f},"
                   "\"overadmissions\":{},\"server_calls_per_acq\":{:.2f},"
                   "\"sync_calls_per_acq\":{:.2f},\"writes\":{},\"over_section_alone\":{:.4f}}}\n",
                   r.name, r.workers, r.seconds, r.acquisitions, rate, r.wait_p50_ms, r.wait_p99_ms,
                   r.fewest, r.most, fairness, r.overadmissions, r.calls_per_acq,
                   r.sync_calls_per_acq, r.writes, over_alone);
        return;
    }
    fmt::print("{:<22} {:>4} {:>10.0f} {:>6.3f} {:>9.2f} {:>9.2f} {:>6}/{:<6} {:>5.2f} {:>5} "
               "{:>7.1f} {:>7.1f}{}\n",
               r.name, r.workers, rate, over_alone, r.wait_p50_ms, r.wait_p99_ms, r.fewest, r.most,
               fairness, r.overadmissions, r.calls_per_acq, r.sync_calls_per_acq,
               r.writes > 0 ? fmt::format("  ({} writes)", r.writes) : std::string{});
}

// The section's bound with a C client: redis-benchmark -c 4 -P 2 INCR (4 connections with 2
// requests in flight each), halved since an acquisition's section is an INCR and a DECR.
// False when there is no redis-benchmark.
asio::awaitable<bool> print_benchmark_bound(redis::config cfg, bool json) {
    auto const program = bench::find_redis_benchmark();
    if (!program) {
        if (!json)
            fmt::print("(no redis-benchmark on PATH or in COLOCK_REDIS_BENCHMARK: its bound is "
                       "left out)\n");
        co_return false;
    }
    auto const key = fmt::format("colock:bench:{}:section", ::getpid());
    auto args = bench::redis_benchmark_args(*program, cfg, 2, 200'000, 4);
    args.emplace_back("INCR");
    args.push_back(key);
    double const rps = bench::run_redis_benchmark(
        std::move(args), "INCR -c 4 -P 2", [](std::vector<bench::benchmark_row> const& rows) {
            if (rows.empty())
                throw std::runtime_error("redis-benchmark printed no result");
            return rows.front().rps;
        });
    auto conn = co_await open(cfg, "colock-bench-cleanup");
    resp3::request del;
    del.push("DEL", key);
    co_await conn->co_exec(std::move(del));
    conn->close();
    if (json)
        fmt::print("{{\"scenario\":\"redis-benchmark INCR -c 4 -P 2\",\"requests_per_s\":{:.1f},"
                   "\"acq_per_s\":{:.1f}}}\n",
                   rps, rps / 2);
    else
        fmt::print("{:<22} {:>4} {:>10.0f}   (redis-benchmark -c 4 -P 2 INCR: {:.0f} requests/s, "
                   "halved)\n",
                   "section, C client 4x2", 8, rps / 2, rps);
    co_return true;
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status = bench::parse_command_line("semaphore_contention", usage_text, argc,
                                                      argv, opts, parse_option))
        return *status;
    try {
        std::optional<colock::test::redis_server> own;
        auto const cfg = bench::pick_server(opts, own);
        std::string const prefix = fmt::format("bench:{}:", ::getpid());
        std::vector<scenario> const scenarios{
            {"section alone 8", shape::section_only, 1, capacity},
            {"S5 semaphore 64", shape::semaphore, 1, 64},
            {"S5 semaphore 4x16", shape::semaphore, 4, 16},
            {"rw_lock 64 (1/8 w)", shape::rw_lock, 1, 64},
        };
        if (!opts.json)
            fmt::print("{:<22} {:>4} {:>10} {:>6} {:>9} {:>9} {:>13} {:>5} {:>5} {:>7} {:>7}\n",
                       "scenario", "n", "acq/s", "/alone", "p50 ms", "p99 ms", "min/max", "ratio",
                       "over", "calls", "sync");
        asio::io_context io;
        double alone = 0;
        for (auto const& sc : scenarios) {
            auto const r =
                bench::run_on(io, run_scenario(cfg, sc, opts.seconds, opts.tuned, prefix));
            if (sc.kind == shape::section_only)
                alone = rate_of(r);
            print(r, alone, opts.json);
        }
        bench::run_on(io, print_benchmark_bound(cfg, opts.json));
        if (!opts.json)
            fmt::print("/alone: over the section alone's rate; calls: server calls per acquisition "
                       "(INFO commandstats); sync: without the section's INCR and DECR\n");
    } catch (std::exception const& e) {
        fmt::print(stderr, "semaphore_contention: {}\n", e.what());
        return 1;
    }
    return 0;
}
