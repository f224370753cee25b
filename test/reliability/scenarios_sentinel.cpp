// Scenario i: contention through Redis Sentinel across failovers. The workers connect with the
// sentinels' URL and follow the primary; the runner fails the primary over (and, in the full
// run, kills it and brings it back), and kills the workers' connections at random meanwhile.
//
// Replication is asynchronous, so a failover has a window that no client can close: the old
// primary grants locks until its clients hear of the switch, and the promoted replica may not
// have them. Two holders, or a fence given twice, are excused only inside that window (from
// the failover's start to a lease after the sentinels agreed); anywhere else they fail the run.
#include "runner.hpp"

#include <colock_test/history.hpp>
#include <colock_test/sentinel_set.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::sentinel_set;

} // namespace

result sentinel_failovers() {
    result r{"i. Sentinel: 4 procs x 32 coroutines, failovers, connections killed"};
    auto const run = opts.full ? 40s : 10s;
    constexpr auto ttl = 1000ms;
    // The sentinels' own ACL user keeps their links out of the connection kills below.
    colock::test::sentinel_set_options set_opts;
    set_opts.sentinels_own_user = true;
    sentinel_set set(set_opts);
    auto primary = set.wait_for_primary(10s);
    scratch_dir dir;
    make_counter(dir.file("counter"));
    std::vector<std::unique_ptr<worker_process>> ws;
    auto const start = std::chrono::steady_clock::now();
    for (int p = 0; p < 4; ++p)
        ws.push_back(std::make_unique<worker_process>(worker_args(
            {"contend", "--name", "i", "--coroutines", "32", "--ms",
             std::to_string(milliseconds(run).count()), "--ttl-ms", std::to_string(ttl.count()),
             "--renew-ms", "250", "--hold-us", "500", "--health-ms", "300", "--counter",
             dir.file("counter"), "--history", dir.file("history")},
            set.url(), std::to_string(p))));

    std::mt19937 rng(opts.seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<window> windows;
    std::uint64_t failovers = 0;
    std::uint64_t kills = 0;
    std::uint64_t connection_kills = 0;
    std::vector<std::int64_t> kill_times_ns; // each connection kill, for a failure's account
    // Failovers at 25% of the run and, in the full run, at 60%, then a killed primary at 80%.
    std::vector<std::pair<double, char>> plan = {{0.25, 'f'}};
    if (opts.full)
        plan.insert(plan.end(), {{0.6, 'f'}, {0.8, 'k'}});
    follow_plan(
        start, run, plan.size(), [&](std::size_t i) { return plan[i].first; },
        [&] { return pick(200, 700); },
        [&](std::size_t i) {
            window w{steady_now_ns(), 0};
            if (plan[i].second == 'f') {
                primary = set.failover(20s);
                ++failovers;
            } else {
                auto& old = set.node_on(primary);
                old.kill();
                primary = set.wait_for_new_primary(primary, 30s);
                ++kills;
                old.restart(); // empty, as a primary; the sentinels make it a replica
            }
            w.end_ns = steady_now_ns() + std::chrono::nanoseconds(2 * ttl).count();
            windows.push_back(w);
        },
        [&] {
            // Drop the workers' connections to the primary (their subscriptions too), and only
            // theirs: a sentinel whose link is killed may reconnect only a second later, judge
            // the primary down meanwhile (down-after 1 s) and fail over outside every window.
            try {
                kill_times_ns.push_back(steady_now_ns());
                set.node_on(primary).cli({"CLIENT", "KILL", "TYPE",
                                          pick(0, 1) ? "normal" : "pubsub", "USER", "default"});
                ++connection_kills;
            } catch (std::runtime_error const&) {
                // the primary is restarting
            }
        });
    r.faults = failovers + kills + connection_kills;
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 500u : 100u);

    auto const history = colock::test::read_history(dir.file("history"));
    auto const report = colock::test::check_history(history);
    std::size_t excused_overlaps = 0;
    for (auto const& o : report.overlaps) {
        auto const end = std::min(o.first.end_ns(), o.second.end_ns());
        if (in_some(windows, o.second.acquired_ns, end)) {
            ++excused_overlaps;
        } else {
            ++r.overlaps;
            r.failures.push_back(fmt::format("  overlap outside a failover: {} (fence {}) and {} "
                                             "(fence {}) for {:.3f} ms",
                                             o.first.holder, o.first.fence, o.second.holder,
                                             o.second.fence, ms(o.overlap_ns)));
        }
    }
    r.check(report.overlapping_pairs == report.overlaps.size(), "too many overlaps to list");
    auto const sorted = acting_in_acquisition_order(history);
    auto const empty_tenures = history.size() - sorted.size();
    std::size_t excused_inversions = 0;
    std::size_t inversions = 0;
    for (std::size_t k = 1; k < sorted.size(); ++k) {
        if (sorted[k].fence > sorted[k - 1].fence)
            continue;
        if (in_some(windows, sorted[k - 1].acquired_ns, sorted[k].acquired_ns + 1)) {
            ++excused_inversions;
            continue;
        }
        ++inversions;
        // Each side's tenure, in ms since the run began, and the connection kill just before.
        auto at = [&](std::int64_t ns) { return ms(ns - start.time_since_epoch().count()); };
        auto tenure = [&](holding const& h) {
            return fmt::format("{} (fence {}, token {}) {:.3f}-{:.3f} ms, lease to {:.3f} ms",
                               h.holder, h.fence, h.token, at(h.acquired_ns), at(h.released_ns),
                               at(h.lease_end_ns));
        };
        std::string kill = "none";
        for (auto const t : kill_times_ns)
            if (t < sorted[k].acquired_ns)
                kill = fmt::format("{:.3f} ms", at(t));
        std::string failover = "none";
        if (!windows.empty())
            failover = fmt::format("{:.3f}-{:.3f} ms", at(windows.front().begin_ns),
                                   at(windows.front().end_ns));
        r.failures.push_back(fmt::format("  fence out of order: {} then {}; last connection kill "
                                         "before: {}; first failover window: {}",
                                         tenure(sorted[k - 1]), tenure(sorted[k]), kill, failover));
    }
    if (inversions + r.overlaps > 0) {
        // A failover the runner did not ask for has no window: say so when there was one.
        auto const lines = set.sentinel(0).cli_lines({"SENTINEL", "MASTER", set.master_name()});
        auto const it = std::find(lines.begin(), lines.end(), "config-epoch");
        if (it != lines.end() && it + 1 != lines.end() &&
            std::stoull(*(it + 1)) > failovers + kills)
            r.failures.push_back(
                fmt::format("  the sentinels' config epoch is {} after {} failovers "
                            "the runner made: they failed over on their own too",
                            *(it + 1), failovers + kills));
    }
    r.check(inversions == 0,
            fmt::format("{} fences out of acquisition order outside a failover", inversions));
    r.check(r.overlaps == 0, fmt::format("{} overlaps outside a failover", r.overlaps));

    auto const counter = read_counter(dir.file("counter"));
    auto const increments = static_cast<std::int64_t>(total["increments"]);
    auto const lost_updates = increments - counter;
    r.check(lost_updates >= 0 && lost_updates <= static_cast<std::int64_t>(excused_overlaps),
            fmt::format("counter {} but {} increments: {} updates lost, {} overlaps in failovers",
                        counter, increments, lost_updates, excused_overlaps));
    r.leaked_keys = lock_keys_left(set.node_on(primary), {"i"});
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.figures = fmt::format(
        "{} failovers, {} primary kills, {} connection kills; in failover windows: {} overlaps, "
        "{} fences out of order, {} updates lost; outside: none; worker reconnects {:.0f}, "
        "co_lock errors {:.0f}; {} tenures over before co_lock returned (left out of the fence "
        "order)",
        failovers, kills, connection_kills, excused_overlaps, excused_inversions, lost_updates,
        total["reconnects"], total["errors"], empty_tenures);
    return r;
}

} // namespace colock::reliability
