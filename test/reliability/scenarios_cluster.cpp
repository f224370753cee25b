// Scenario j: contention through Redis Cluster while slots move and primaries fail over. The
// workers connect with every node as a seed; two names, on different primaries at the start,
// are contended by two processes each. The runner migrates the names' slots between primaries,
// fails a primary over (and, in the full run, back, and kills one), and kills the workers'
// connections at random meanwhile.
//
// A slot migration loses nothing: the keys move with MIGRATE and the client follows MOVED and
// ASK, so two holders, a fence given twice or a lost update around a migration fail the run.
// A failover has the window replication leaves open (as in scenario i): it is excused, for the
// names the failing primary served, from the failover's start to a lease after the cluster
// agreed on the new owner. Names on other primaries get no window at all.
#include "runner.hpp"

#include <colock_test/cluster_set.hpp>
#include <colock_test/history.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::cluster_set;

// One contended name: its slot, its two processes' shared files, and the failover windows
// excused for it.
struct contended {
    std::string name;
    std::uint16_t slot = 0;
    std::string counter;
    std::string history;
    std::vector<window> windows;
    std::vector<window> migrations; // never excused: only for the figures
};

// A step of the plan: at `at` of the run, do `kind` to the name `name`.
//   'm' migrate the name's slot to another primary, 'f' fail the name's primary over to its
//   replica, 'b' fail the last promoted primary back to its replica (the old primary), 'k' kill
//   the name's primary, wait for its replica to take over, restart it (it rejoins as a replica).
struct step {
    double at;
    char kind;
    std::size_t name;
};

// The index of a node that runs, to ask about the cluster.
std::size_t running_node(cluster_set& cluster) {
    for (std::size_t i = 0; i < cluster.node_count(); ++i)
        if (cluster.node(i).running())
            return i;
    throw std::runtime_error("no cluster node runs");
}

// Waits until `node` says ROLE `role` ("master", "slave"); false when it did not within `limit`.
bool wait_role(colock::test::redis_server const& node, std::string const& role,
               milliseconds limit) {
    return wait_until(
        limit, [&] { return node.cli({"ROLE"}).starts_with(role); }, 50ms);
}

// The fields of a worker's "summary" line (collect() has waited for it).
std::map<std::string, double> summary_of(worker_process const& w) {
    for (auto const& line : w.lines())
        if (line.starts_with("summary"))
            return fields(line);
    return {};
}

} // namespace

result cluster_migrations() {
    result r{"j. Cluster: 4 procs x 32 coroutines, slot migrations, a failover, connections "
             "killed"};
    auto const run = opts.full ? 60s : 10s;
    constexpr auto ttl = 1000ms;
    cluster_set cluster;
    scratch_dir dir;
    std::mt19937 rng(opts.seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

    // Two names whose slots start on different primaries. The lock's keys are
    // `colock:{name}...`: they hash by the tag, the name.
    std::vector<contended> names;
    for (int i = 0; names.size() < 2; ++i) {
        contended c;
        c.name = fmt::format("j-{}", i);
        c.slot = static_cast<std::uint16_t>(
            std::stoi(cluster.node(0).cli({"CLUSTER", "KEYSLOT", "{" + c.name + "}"})));
        if (names.empty() || cluster.owner_of(c.slot) != cluster.owner_of(names[0].slot)) {
            c.counter = dir.file(c.name + ".counter");
            c.history = dir.file(c.name + ".history");
            make_counter(c.counter);
            names.push_back(std::move(c));
        }
    }

    std::vector<std::unique_ptr<worker_process>> ws;
    auto const start = std::chrono::steady_clock::now();
    for (int p = 0; p < 4; ++p) {
        auto const& c = names[static_cast<std::size_t>(p) % names.size()];
        ws.push_back(std::make_unique<worker_process>(
            worker_args({"contend", "--name", c.name, "--coroutines", "32", "--ms",
                         std::to_string(milliseconds(run).count()), "--ttl-ms",
                         std::to_string(ttl.count()), "--renew-ms", "250", "--hold-us", "500",
                         "--health-ms", "300", "--counter", c.counter, "--history", c.history},
                        cluster.url(), std::to_string(p))));
    }

    // Migrations at 15% and 30% of the run, then a failover of the first name's primary (the
    // one it was migrated to). The full run migrates more, fails over and back, and kills a
    // primary.
    std::vector<step> plan = {{0.15, 'm', 0}, {0.3, 'm', 1}, {0.5, 'f', 0}};
    if (opts.full)
        plan = {{0.08, 'm', 0}, {0.16, 'm', 1}, {0.25, 'f', 1}, {0.35, 'm', 0}, {0.45, 'b', 0},
                {0.55, 'm', 1}, {0.62, 'm', 0}, {0.72, 'k', 0}, {0.85, 'm', 1}};
    std::uint64_t migrations = 0;
    std::uint64_t failovers = 0;
    std::uint64_t kills = 0;
    std::uint64_t connection_kills = 0;
    std::uint16_t last_promoted = 0;
    // Excuses the names marked in `served` from `begin_ns` until 2 x TTL from now (as i does).
    auto excuse = [&](std::int64_t begin_ns, std::vector<bool> const& served) {
        window const w{begin_ns, steady_now_ns() + std::chrono::nanoseconds(2 * ttl).count()};
        for (std::size_t n = 0; n < names.size(); ++n)
            if (served[n])
                names[n].windows.push_back(w);
    };
    auto served_by = [&](std::uint16_t primary) {
        auto const asked = running_node(cluster);
        std::vector<bool> served;
        for (auto const& c : names)
            served.push_back(cluster.owner_of(c.slot, asked) == primary);
        return served;
    };
    auto const next = follow_plan(
        start, run, plan.size(), [&](std::size_t i) { return plan[i].at; },
        [&] { return pick(500, 1000); },
        [&](std::size_t i) {
            auto const s = plan[i];
            auto& c = names[s.name];
            auto const begin_ns = steady_now_ns();
            auto const owner = cluster.owner_of(c.slot, running_node(cluster));
            if (s.kind == 'm') {
                std::vector<std::uint16_t> others;
                for (auto const port : cluster.primary_ports(running_node(cluster)))
                    if (port != owner)
                        others.push_back(port);
                auto const to = others.at(
                    static_cast<std::size_t>(pick(0, static_cast<int>(others.size()) - 1)));
                cluster.migrate_slot(c.slot, to);
                c.migrations.push_back({begin_ns, steady_now_ns()});
                ++migrations;
            } else if (s.kind == 'f' || s.kind == 'b') {
                auto const primary = s.kind == 'f' ? owner : last_promoted;
                if (primary == 0)
                    throw std::logic_error("the plan fails back before any failover");
                auto const served = served_by(primary);
                auto const replica = cluster.replica_of(primary);
                cluster.failover(replica, 20s);
                last_promoted = replica;
                excuse(begin_ns, served);
                ++failovers;
            } else {
                auto const served = served_by(owner);
                auto const replica = cluster.replica_of(owner);
                auto& old = cluster.node_on(owner);
                old.kill();
                // wait_ok alone would return at once: until the others mark the dead primary
                // failed (cluster-node-timeout), they agree that it still serves its slots.
                r.check(wait_role(cluster.node_on(replica), "master", 30s),
                        fmt::format("the replica on {} did not take over from {}", replica, owner));
                cluster.wait_ok(30s);
                old.restart(); // empty; it rejoins as a replica
                excuse(begin_ns, served);
                cluster.wait_ok(30s);
                r.check(wait_role(old, "slave", 10s),
                        fmt::format("the restarted primary on {} did not rejoin as a replica: {}",
                                    owner, old.cli({"ROLE"})));
                ++kills;
            }
        },
        [&] {
            // Drop the workers' connections to a primary (their subscriptions too).
            try {
                auto const primaries = cluster.primary_ports(running_node(cluster));
                auto const port = primaries.at(
                    static_cast<std::size_t>(pick(0, static_cast<int>(primaries.size()) - 1)));
                cluster.node_on(port).cli(
                    {"CLIENT", "KILL", "TYPE", pick(0, 1) ? "normal" : "pubsub"});
                ++connection_kills;
            } catch (std::runtime_error const&) {
                // a node is restarting
            }
        });
    r.check(next == plan.size(),
            fmt::format("only {} of the {} planned cluster changes ran", next, plan.size()));
    r.faults = migrations + failovers + kills + connection_kills;
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 500u : 100u);

    // Per name: overlaps and fence inversions outside its failover windows fail the run; the
    // counter may lose at most one update per excused overlap.
    std::size_t excused_overlaps = 0;
    std::size_t excused_inversions = 0;
    std::int64_t lost_updates = 0;
    std::size_t during_migrations = 0; // acquisitions of a name while its slot moved
    std::int64_t longest_pause_ns = 0; // the longest gap between them across a migration
    std::int64_t longest_migration_ns = 0;
    for (std::size_t n = 0; n < names.size(); ++n) {
        auto const& c = names[n];
        auto const history = colock::test::read_history(c.history);
        auto const report = colock::test::check_history(history);
        std::size_t name_overlaps = 0;
        for (auto const& o : report.overlaps) {
            auto const end = std::min(o.first.end_ns(), o.second.end_ns());
            if (in_some(c.windows, o.second.acquired_ns, end)) {
                ++name_overlaps;
                continue;
            }
            ++r.overlaps;
            r.failures.push_back(fmt::format(
                "  {}: overlap outside a failover: {} (fence {}) and {} (fence {}) for {:.3f} "
                "ms{}",
                c.name, o.first.holder, o.first.fence, o.second.holder, o.second.fence,
                ms(o.overlap_ns),
                in_some(c.migrations, o.second.acquired_ns, end) ? ", during a migration" : ""));
        }
        excused_overlaps += name_overlaps;
        r.check(report.overlapping_pairs == report.overlaps.size(),
                c.name + ": too many overlaps to list");
        auto sorted = history;
        std::sort(sorted.begin(), sorted.end(),
                  [](holding const& a, holding const& b) { return a.acquired_ns < b.acquired_ns; });
        std::size_t inversions = 0;
        auto const acting = acting_in_acquisition_order(history);
        for (std::size_t k = 1; k < acting.size(); ++k) {
            if (acting[k].fence > acting[k - 1].fence)
                continue;
            if (in_some(c.windows, acting[k - 1].acquired_ns, acting[k].acquired_ns + 1)) {
                ++excused_inversions;
            } else {
                ++inversions;
                r.failures.push_back(fmt::format(
                    "  {}: fence {} ({}) after fence {} ({}), {:.3f} ms later{}", c.name,
                    acting[k].fence, acting[k].holder, acting[k - 1].fence, acting[k - 1].holder,
                    ms(acting[k].acquired_ns - acting[k - 1].acquired_ns),
                    in_some(c.migrations, acting[k - 1].acquired_ns, acting[k].acquired_ns + 1)
                        ? ", during a migration"
                        : ""));
            }
        }
        r.check(inversions == 0,
                fmt::format("{}: {} fences out of acquisition order outside a failover", c.name,
                            inversions));
        for (auto const& m : c.migrations) {
            longest_migration_ns = std::max(longest_migration_ns, m.end_ns - m.begin_ns);
            for (std::size_t k = 1; k < sorted.size(); ++k) {
                if (sorted[k].acquired_ns <= m.begin_ns || sorted[k - 1].acquired_ns >= m.end_ns)
                    continue;
                longest_pause_ns =
                    std::max(longest_pause_ns, sorted[k].acquired_ns - sorted[k - 1].acquired_ns);
                during_migrations += sorted[k].acquired_ns < m.end_ns ? 1 : 0;
            }
        }

        // The name's two processes are ws[n] and ws[n + 2]: their increments against its
        // counter.
        std::int64_t increments = 0;
        for (std::size_t p = n; p < ws.size(); p += names.size())
            increments += static_cast<std::int64_t>(summary_of(*ws[p])["increments"]);
        auto const counter = read_counter(c.counter);
        auto const lost = increments - counter;
        lost_updates += lost;
        r.check(lost >= 0 && lost <= static_cast<std::int64_t>(name_overlaps),
                fmt::format("{}: counter {} but {} increments: {} updates lost, {} overlaps in "
                            "failovers",
                            c.name, counter, increments, lost, name_overlaps));
    }
    r.check(r.overlaps == 0, fmt::format("{} overlaps outside a failover", r.overlaps));
    r.check(during_migrations > 0, "no name was acquired while its slot moved");

    // What stays on the primaries: at once, a lock left held or a key without an expiry; after
    // the leases and the queue entries lapse, nothing but each locker's holder record
    // (`colock:locker:<id>`, which outlives its last lease by two minutes by design).
    std::vector<std::string> all;
    for (auto const& c : names)
        all.push_back(c.name);
    auto const primaries = cluster.primary_ports(running_node(cluster));
    for (auto const port : primaries)
        r.leaked_keys += lock_keys_left(cluster.node_on(port), all);
    r.check(r.leaked_keys == 0, "a lock is left held, or a key without an expiry");
    auto const settle_start = std::chrono::steady_clock::now();
    std::vector<std::pair<colock::test::redis_server const*, std::string>> nodes;
    for (auto const port : primaries)
        nodes.emplace_back(&cluster.node_on(port), std::to_string(port));
    auto const [keys_left, records] = settle_keys(nodes, settle_start + 8s);
    auto const settle_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - settle_start).count();
    r.check(keys_left.empty(), fmt::format("{} keys left on the primaries 8 s after the workers "
                                           "ended",
                                           keys_left.size()));
    for (auto const& key : keys_left)
        r.failures.push_back("  left: " + key);

    std::size_t windows = 0;
    std::int64_t longest_window_ns = 0;
    for (auto const& c : names)
        for (auto const& w : c.windows) {
            ++windows;
            longest_window_ns = std::max(longest_window_ns, w.end_ns - w.begin_ns);
        }
    r.figures = fmt::format(
        "{} slot migrations (the longest {:.0f} ms; {} acquisitions of the moving name during "
        "them, longest pause {:.0f} ms; never excused), {} failovers, {} primary kills, {} "
        "connection kills; {} excused windows (name x failover, the longest {:.1f} s); in them: "
        "{} overlaps, {} fences out of order, {} updates lost; outside: none; {} lock keys on "
        "the primaries after {:.1f} s (and {} holder records); worker reconnects {:.0f}, co_lock "
        "errors {:.0f}",
        migrations, ms(longest_migration_ns), during_migrations, ms(longest_pause_ns), failovers,
        kills, connection_kills, windows, ms(longest_window_ns) / 1000, excused_overlaps,
        excused_inversions, lost_updates, keys_left.size(), settle_s, records, total["reconnects"],
        total["errors"]);
    return r;
}

} // namespace colock::reliability
