// Dining philosophers against one redis-server: 5 lockers (each on its own connection, as 5
// processes would have) x 8 coroutines, seated round a table of 5 forks (lock names); the
// coroutines of seat s want forks s and s + 1 (mod 5), both at once. Two ways to take them, in
// one run: what a user writes today, two co_lock calls in name order (deadlock-free by the
// order, holding the first fork while waiting for the second), and one co_lock_all of the two.
//
// Reported per way: meals (acquisitions of both forks) per second in the measuring window, wait
// p50/p99 (from wanting to holding both), fairness (the most and the fewest meals of one
// coroutine, and their ratio), overlaps (a fork held by two at once, counted in the process:
// must be 0), deadlocks (a wait that ran out its 30 s timeout: must be 0), the forks' keys left
// without a TTL after the run (must be 0), and server calls per meal (INFO commandstats, calls
// inside scripts included). The meal is an INCR and a DECR of a key on a connection of its own.
//
// Usage: dining_philosophers [--seconds S] [--url redis://...] [--json]
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
    R"(Usage: dining_philosophers [--seconds S] [--url redis://...] [--json]

5 lockers x 8 coroutines round 5 forks (lock names), each coroutine wanting two adjacent forks:
two co_lock calls in name order, then one co_lock_all, against one redis-server (a throwaway one
unless --url): meals/s, wait p50/p99, fairness, overlaps, deadlocks, keys left without a TTL,
server calls per meal.

  --seconds S   measuring time of each way, after a 0.5 s warm-up (default 3)
  --url URL     a server of your own (its keys go under colock:bench:<pid>:)
  --json        one JSON object per way
)";

constexpr std::size_t seats = 5;
constexpr std::size_t lockers = 5;
constexpr std::size_t per_locker = 8;

struct options : bench::common_options {
    double seconds = 3;
};

bool parse_option(options& o, bench::option_arg& arg) {
    if (arg.name() != "--seconds")
        return false;
    o.seconds = bench::parse_seconds(arg.value());
    return true;
}

enum class way { ordered, all_at_once };

struct result {
    std::string name;
    double seconds = 0;
    std::uint64_t meals = 0;
    double wait_p50_ms = 0, wait_p99_ms = 0;
    std::uint64_t most = 0, fewest = 0;
    std::uint64_t overlaps = 0, deadlocks = 0, without_ttl = 0;
    double calls_per_meal = 0;
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

asio::awaitable<resp3::value> exec(redis::connection& c, std::string_view command,
                                   std::string const& key) {
    resp3::request req;
    req.push(command, key);
    auto reply = co_await c.co_exec(std::move(req));
    co_return reply.at(0);
}

struct table {
    std::vector<std::string> forks;
    std::vector<int> holding; // per fork, counted in this process (one thread)
    std::vector<std::uint64_t> per_worker;
    std::vector<double> waits_ms;
    std::uint64_t overlaps = 0, deadlocks = 0;
};

asio::awaitable<void> philosopher(std::shared_ptr<bench::run_state> state, colock::locker& locks,
                                  redis::connection& raw, std::string const& meal_key,
                                  std::size_t index, way how, table& t) {
    auto const seat = index % seats;
    // In name order: the forks' names sort as their numbers do.
    auto const first = std::min(seat, (seat + 1) % seats);
    auto const second = std::max(seat, (seat + 1) % seats);
    colock::lock_options opt;
    opt.ttl = milliseconds{10'000};
    opt.wait_timeout = milliseconds{30'000};
    std::vector<std::string> both;
    both.push_back(t.forks[first]);
    both.push_back(t.forks[second]);
    while (state->current != bench::run_state::phase::stop) {
        auto const wanted = steady::now();
        std::optional<colock::lock_guard> left, right;
        std::optional<colock::multi_lock_guard> pair;
        try {
            if (how == way::ordered) {
                left.emplace(co_await locks.co_lock(t.forks[first], opt));
                right.emplace(co_await locks.co_lock(t.forks[second], opt));
            } else {
                pair.emplace(co_await locks.co_lock_all(both, opt));
            }
        } catch (boost::system::system_error const& e) {
            if (e.code() != colock::error::timeout)
                throw;
            ++t.deadlocks;
            continue;
        }
        bool const measuring = state->measuring();
        if (measuring)
            t.waits_ms.push_back(
                std::chrono::duration<double, std::milli>(steady::now() - wanted).count());
        for (auto f : {first, second})
            if (t.holding[f]++ != 0)
                ++t.overlaps;
        co_await exec(raw, "INCR", meal_key);
        co_await exec(raw, "DECR", meal_key);
        for (auto f : {first, second})
            --t.holding[f];
        if (measuring)
            ++t.per_worker[index];
        state->completed();
        bool ours = true;
        if (pair) {
            ours = co_await pair->release();
        } else {
            ours = co_await right->release();
            ours = co_await left->release() && ours;
        }
        if (!ours)
            throw std::runtime_error("a fork was lost before its release");
    }
}

asio::awaitable<result> run_way(redis::config cfg, way how, double seconds,
                                std::string const& prefix) {
    std::vector<redis::config> nodes;
    nodes.push_back(cfg);
    auto stats = co_await bench::node_stats::open(std::move(nodes));
    auto raw = co_await open(cfg, "colock-bench-meal");
    std::string const name = how == way::ordered ? "two co_lock, in order" : "co_lock_all";
    std::string const base = fmt::format("{}{}:", prefix, how == way::ordered ? "ordered" : "all");
    table t;
    for (std::size_t f = 0; f < seats; ++f)
        t.forks.push_back(fmt::format("{}fork-{}", base, f));
    t.holding.assign(seats, 0);
    std::size_t const workers = lockers * per_locker;
    t.per_worker.assign(workers, 0);
    std::vector<std::shared_ptr<redis::connection>> conns;
    std::vector<std::unique_ptr<colock::locker>> parties;
    for (std::size_t i = 0; i < lockers; ++i) {
        conns.push_back(co_await open(cfg, fmt::format("colock-bench-{}", i)));
        parties.push_back(std::make_unique<colock::locker>(*conns.back()));
    }
    auto ex = co_await asio::this_coro::executor;
    auto state = std::make_shared<bench::run_state>(ex);
    state->running_workers = workers;
    std::string const meal_key = base + "meal";
    for (std::size_t w = 0; w < workers; ++w)
        asio::co_spawn(
            ex,
            bench::run_worker(state, fmt::format("philosopher {}", w),
                              philosopher(state, *parties[w % lockers], *raw, meal_key, w, how, t)),
            asio::detached);
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
    co_await state->drain(std::chrono::seconds{40}, workers, "eating or waiting");
    if (!state->failure.empty())
        throw std::runtime_error(fmt::format("{}: {}", name, state->failure));

    result r;
    r.name = name;
    r.seconds = std::chrono::duration<double>(elapsed).count();
    r.meals = state->measured_ops;
    r.wait_p50_ms = percentile(t.waits_ms, 0.50);
    r.wait_p99_ms = percentile(t.waits_ms, 0.99);
    // Not a structured binding: GCC 12 cannot keep one in a coroutine's frame.
    auto const extremes = std::minmax_element(t.per_worker.begin(), t.per_worker.end());
    r.fewest = *extremes.first;
    r.most = *extremes.second;
    r.overlaps = t.overlaps;
    r.deadlocks = t.deadlocks;
    std::uint64_t all = 0;
    for (auto const& entry : after)
        if (!bench::is_not_from_client(entry.first) && entry.first != "incr" &&
            entry.first != "decr")
            all += entry.second - bench::calls_of(before, entry.first);
    if (r.meals > 0)
        r.calls_per_meal = static_cast<double>(all) / static_cast<double>(r.meals);
    // Every key of the forks (the lock, its queue, its deadlines) keeps an expiry.
    for (auto const& fork : t.forks) {
        auto const key = "colock:{" + fork + "}";
        for (auto const& k : {key, key + ":q", key + ":qd"})
            if ((co_await exec(*raw, "PTTL", k)).as_integer().value_or(0) == -1)
                ++r.without_ttl;
    }
    parties.clear();
    for (auto& c : conns)
        c->close();
    co_await exec(*raw, "DEL", meal_key);
    raw->close();
    stats.close();
    co_return r;
}

double rate_of(result const& r) {
    return r.seconds > 0 ? static_cast<double>(r.meals) / r.seconds : 0;
}

void print(result const& r, double first_rate, bool json) {
    double const rate = rate_of(r);
    double const fairness =
        r.fewest > 0 ? static_cast<double>(r.most) / static_cast<double>(r.fewest) : 0;
    double const over_first = first_rate > 0 ? rate / first_rate : 0;
    if (json) {
        fmt::print("{{\"scenario\":\"philosophers {}\",\"workers\":{},\"seconds\":{:.3f},"
                   "\"acquisitions\":{},\"acq_per_s\":{:.1f},\"wait_p50_ms\":{:.3f},"
                   "\"wait_p99_ms\":{:.3f},\"per_worker_min\":{},\"per_worker_max\":{},"
                   "\"fairness\":{:.3f},\"overlaps\":{},\"deadlocks\":{},\"without_ttl\":{},"
                   "\"server_calls_per_acq\":{:.2f},\"over_ordered\":{:.3f}}}\n",
                   r.name, lockers * per_locker, r.seconds, r.meals, rate, r.wait_p50_ms,
                   r.wait_p99_ms, r.fewest, r.most, fairness, r.overlaps, r.deadlocks,
                   r.without_ttl, r.calls_per_meal, over_first);
        return;
    }
    fmt::print("{:<22} {:>9.0f} {:>6.2f} {:>8.2f} {:>8.2f} {:>6}/{:<6} {:>5.2f} {:>4} {:>4} {:>4} "
               "{:>6.1f}\n",
               r.name, rate, over_first, r.wait_p50_ms, r.wait_p99_ms, r.fewest, r.most, fairness,
               r.overlaps, r.deadlocks, r.without_ttl, r.calls_per_meal);
}

} // namespace

int main(int argc, char** argv) {
    options opts;
    if (auto const status = bench::parse_command_line("dining_philosophers", usage_text, argc, argv,
                                                      opts, parse_option))
        return *status;
    try {
        std::optional<colock::test::redis_server> own;
        auto const cfg = bench::pick_server(opts, own);
        std::string const prefix = fmt::format("bench:{}:", ::getpid());
        if (!opts.json)
            fmt::print("{:<22} {:>9} {:>6} {:>8} {:>8} {:>13} {:>5} {:>4} {:>4} {:>4} {:>6}\n",
                       "5 x 8 philosophers", "meals/s", "/order", "p50 ms", "p99 ms", "min/max",
                       "ratio", "over", "dead", "nttl", "calls");
        asio::io_context io;
        double first_rate = 0;
        for (auto how : {way::ordered, way::all_at_once}) {
            auto const r = bench::run_on(io, run_way(cfg, how, opts.seconds, prefix));
            if (how == way::ordered)
                first_rate = rate_of(r);
            print(r, first_rate, opts.json);
        }
        if (!opts.json)
            fmt::print("/order: over the ordered co_lock calls' rate; over: a fork held twice; "
                       "dead: waits that ran out 30 s; nttl: keys without a TTL; calls: server "
                       "calls per meal (INFO commandstats, without the meal's INCR and DECR)\n");
    } catch (std::exception const& e) {
        fmt::print(stderr, "dining_philosophers: {}\n", e.what());
        return 1;
    }
    return 0;
}
