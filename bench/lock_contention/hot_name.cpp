// S3 of the peer harness, and the part of S4 that runs in each process: coroutines loop
// co_lock, critical section, unlock on ONE name. The critical section is the harness's:
// `inside++`, an overlap if another holder is inside, then a yield to the scheduler (S3) or a
// non-atomic GET + SET of a Redis counter (S4), then `inside--`. The wait runs from wanting the
// lock to holding it.
//
// Reported: acquisitions/s in the window, acquisitions per coroutine (min and max: fairness),
// the wait's percentiles and its distribution (a histogram with 20 bins per decade, or every
// sample with --samples), and the server calls per acquisition from INFO commandstats, which
// counts the calls made inside scripts too, summed over the deployment's servers (Redlock: every
// primary).
#include "lock_contention.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {
namespace {

struct hot_state : run_state {
    using run_state::run_state;
    hot_share share;
    std::int64_t inside = 0;
    std::int64_t last_fence = 0;
    redis::connection* counter = nullptr; // S4
    std::string counter_key;
};

/// S4's critical section: read the counter, write it back plus one, in two round trips.
asio::awaitable<void> bump_counter(redis::connection& conn, std::string const& key) {
    resp3::request get;
    get.push("GET", key);
    auto const value = co_await conn.co_exec(std::move(get));
    auto const n =
        value.at(0).is_null() ? std::optional<std::int64_t>(0) : value.at(0).as_integer();
    if (!n)
        throw std::runtime_error(fmt::format("the counter {} holds no number", key));
    resp3::request set;
    set.push("SET", key, *n + 1);
    co_await conn.co_exec(std::move(set));
}

asio::awaitable<void> hot_worker(std::shared_ptr<colock::locker> locker,
                                 std::shared_ptr<hot_state> state, std::string name, std::size_t id,
                                 colock::lock_options opt) {
    auto& share = state->share;
    while (state->current != run_state::phase::stop) {
        auto const wanted = steady::now();
        auto guard = co_await locker->co_lock(name, opt);
        auto const acquired = steady::now();
        bool const in_window = state->measuring();

        if (guard.fence() <= state->last_fence)
            ++share.fence_regressions;
        state->last_fence = std::max(state->last_fence, guard.fence());
        if (++state->inside > 1)
            ++share.overlaps;
        if (state->counter)
            co_await bump_counter(*state->counter, state->counter_key);
        else
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
        --state->inside;

        if (!co_await guard.release()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        ++share.total;
        if (in_window) {
            ++share.acquisitions;
            ++share.per_worker[id];
            share.wait_us.push_back(micros(acquired - wanted));
        }
    }
}

/// The waits as `[[upper edge in us, count], ...]` over the non-empty bins, 20 bins per decade
/// from 1 us (a wait under 1 us counts in the first bin).
std::string wait_histogram_json(std::vector<double> const& wait_us) {
    constexpr double bins_per_decade = 20;
    std::map<int, std::uint64_t> bins;
    for (auto const us : wait_us)
        ++bins[us <= 1 ? 0 : static_cast<int>(std::ceil(bins_per_decade * std::log10(us)))];
    std::string out = "[";
    for (auto const& [bin, count] : bins)
        out += fmt::format("{}[{:.4g},{}]", out.size() > 1 ? "," : "",
                           std::pow(10.0, bin / bins_per_decade), count);
    return out + "]";
}

std::string samples_json(std::vector<double> const& wait_us) {
    std::string out = "[";
    for (auto const us : wait_us)
        out += fmt::format("{}{:.1f}", out.size() > 1 ? "," : "", us);
    return out + "]";
}

asio::awaitable<hot_result> measure_hot_in_process(deployment d, options opts, std::size_t waiters,
                                                   bool sweep, std::size_t cohort_limit) {
    auto target = co_await lock_target::open(d, run_prefix());
    auto const name = fmt::format("s3:{}", waiters);
    auto lock_opt = peer_lock_options(opts);
    lock_opt.cohort_limit = cohort_limit;

    hot_result r;
    r.scenario = "S3";
    r.mode = opts.mode();
    r.deployment = d.name;
    r.cohort_limit = cohort_limit;
    r.sweep = sweep;
    r.workers_per_process = waiters;
    auto const before = co_await target.stats().commandstats();
    auto const share = co_await run_hot_share(target, nullptr, {}, name, waiters,
                                              window_of(opts.seconds), lock_opt);
    r.calls = delta(before, co_await target.stats().commandstats());
    r.add(share);
    r.cpu.server = share.cpu.server;

    std::vector<std::string> keys;
    add_lock_keys(keys, fmt::format("{}{{{}}}", target.locker()->key_prefix(), name));
    co_await target.delete_keys(keys);
    target.close();
    co_return r;
}

} // namespace

asio::awaitable<hot_share> run_hot_share(lock_target& target, redis::connection* counter,
                                         std::string counter_key, std::string name,
                                         std::size_t workers, std::chrono::nanoseconds window,
                                         colock::lock_options opt) {
    auto const ex = co_await asio::this_coro::executor;
    auto state = std::make_shared<hot_state>(ex);
    state->counter = counter;
    state->counter_key = std::move(counter_key);
    state->share.per_worker.assign(workers, 0);
    state->running_workers = workers;
    for (std::size_t i = 0; i < workers; ++i)
        asio::co_spawn(ex,
                       run_worker(state, fmt::format("worker {}", i),
                                  hot_worker(target.locker(), state, name, i, opt)),
                       asio::detached);
    state->share.seconds =
        co_await run_phases(state, window, workers, target.stats(), state->share.cpu);
    if (!state->failure.empty())
        throw std::runtime_error(state->failure);
    state->share.reconnects = target.reconnects();
    co_return std::move(state->share);
}

void hot_result::add(hot_share const& share) {
    auto const [low, high] = std::minmax_element(share.per_worker.begin(), share.per_worker.end());
    bool const first = shares == 0;
    per_worker_min = first ? *low : std::min(per_worker_min, *low);
    per_worker_max = first ? *high : std::max(per_worker_max, *high);
    ++shares;
    seconds_sum += share.seconds;
    acquisitions += share.acquisitions;
    total += share.total;
    overlaps += share.overlaps;
    fence_regressions += share.fence_regressions;
    reconnects += share.reconnects;
    wait_us.insert(wait_us.end(), share.wait_us.begin(), share.wait_us.end());
    cpu.client += share.cpu.client;
}

side_figure hot_result::figure(std::string shape) const {
    auto const per_acq = [&](std::uint64_t n) {
        return total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total);
    };
    auto const all = total_calls(calls);
    return {std::move(shape), deployment,
            seconds() > 0 ? static_cast<double>(acquisitions) / seconds() : 0.0, per_acq(all),
            per_acq(all - section_calls)};
}

bool hot_result::ok() const {
    return overlaps == 0 && fence_regressions == 0 &&
           (!counter || *counter == static_cast<std::int64_t>(total));
}

void report_hot(hot_result const& r, options const& opts) {
    auto const waits = summarize(r.wait_us);
    auto const per_s = static_cast<double>(r.acquisitions) / r.seconds();
    auto const all = total_calls(r.calls);
    auto const per_acq = [&](std::uint64_t n) {
        return r.total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(r.total);
    };
    auto const lost = r.counter ? fmt::format("{}", static_cast<std::int64_t>(r.total) - *r.counter)
                                : std::string("null");
    if (opts.json) {
        fmt::print(
            "{{\"scenario\":\"{}\",\"deployment\":\"{}\",\"mode\":\"{}\",\"cohort_limit\":{},"
            "\"sweep\":{},\"processes\":{},"
            "\"workers_per_process\":{},\"waiters\":{},\"seconds\":{:.3f},\"acquisitions\":{},"
            "\"acquisitions_per_s\":{:.1f},\"acq_total\":{},\"per_worker_min\":{},"
            "\"per_worker_max\":{},\"wait_mean_us\":{:.1f},\"wait_p50_us\":{:.1f},"
            "\"wait_p99_us\":{:.1f},\"wait_p999_us\":{:.1f},\"wait_max_us\":{:.1f},"
            "\"wait_samples\":{},\"wait_hist_us\":{},{}\"overlaps\":{},\"fence_regressions\":{},"
            "\"counter\":{},\"lost_updates\":{},\"server_calls\":{},\"calls_per_acq\":{:.4f},"
            "\"lock_calls_per_acq\":{:.4f},\"calls\":{},\"client_cpu\":{:.3f},"
            "\"server_cpu\":{:.3f},\"reconnects\":{},\"ok\":{}}}\n",
            r.scenario, r.deployment, r.mode, r.cohort_limit, r.sweep, r.processes,
            r.workers_per_process, r.processes * r.workers_per_process, r.seconds(), r.acquisitions,
            per_s, r.total, r.per_worker_min, r.per_worker_max, waits.mean_us, waits.p50_us,
            waits.p99_us, waits.p999_us, waits.max_us, waits.samples,
            wait_histogram_json(r.wait_us),
            opts.samples ? fmt::format("\"wait_us_samples\":{},", samples_json(r.wait_us)) : "",
            r.overlaps, r.fence_regressions,
            r.counter ? fmt::format("{}", *r.counter) : std::string("null"), lost, all,
            per_acq(all), per_acq(all - r.section_calls), calls_json(r.calls), r.cpu.client,
            r.cpu.server, r.reconnects, r.ok());
    } else {
        fmt::print("\n== {} ({}): {} process{} x {} coroutines on one name (mode {}, "
                   "cohort_limit {})\n",
                   r.scenario, r.deployment, r.processes, r.processes == 1 ? "" : "es",
                   r.workers_per_process, r.mode, r.cohort_limit);
        fmt::print("  acquisitions/s      {:>12.0f}   ({} in {:.2f} s; per coroutine {} .. {})\n",
                   per_s, r.acquisitions, r.seconds(), r.per_worker_min, r.per_worker_max);
        fmt::print(
            "  wait                p50 {:.1f} us, p99 {:.1f} us, p99.9 {:.1f} us, max {:.1f} "
            "us\n",
            waits.p50_us, waits.p99_us, waits.p999_us, waits.max_us);
        fmt::print("  server calls/acq    {:>12.3f}   ({}){}\n", per_acq(all),
                   calls_text(r.calls, static_cast<double>(r.total)),
                   r.section_calls == 0 ? ""
                                        : fmt::format("; {:.3f} without the counter's GET and SET",
                                                      per_acq(all - r.section_calls)));
        fmt::print("  checks              overlaps {}, fence regressions {}{}  => {}\n", r.overlaps,
                   r.fence_regressions,
                   r.counter ? fmt::format(", counter {} for {} acquisitions", *r.counter, r.total)
                             : "",
                   r.ok() ? "OK" : "FAILED");
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

hot_result run_hot_in_process(asio::io_context& io, deployment const& d, options const& opts,
                              std::size_t waiters, bool sweep, std::size_t cohort_limit) {
    auto r = run_on(io, measure_hot_in_process(d, opts, waiters, sweep, cohort_limit));
    report_hot(r, opts);
    return r;
}

} // namespace colock::bench::contention
