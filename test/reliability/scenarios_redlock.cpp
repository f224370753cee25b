// Scenario k: Redlock over three independent primaries, each reached through its own fault
// proxy. Four processes of 32 coroutines contend for one name with a Redlock locker over the
// three proxies; meanwhile every proxy injects faults at random (latency, stalls, black holes,
// dropped connections, cut replies), and the primaries are killed one at a time, each restarted
// (empty) only after the longest ttl in use has passed since its kill: the restart rule of the
// README's Redlock section. The other two carry the lock while one is down.
//
// Nothing is excused: no failover window, no overlap, no fence out of order, no lost update
// (the counter against the increments, and every value in the journals written once), and no
// lock left on any primary once the longest ttl has passed after the run.
#include "journal.hpp"
#include "runner.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/history.hpp>
#include <colock_test/primary_set.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::fault_proxy;
using colock::test::primary_set;

} // namespace

result redlock_primaries() {
    result r{"k. Redlock: 4 procs x 32 coroutines over 3 primaries, random proxy faults, "
             "one primary at a time killed and restarted after the ttl"};
    auto const run = opts.full ? 40s : 11s;
    constexpr auto ttl = 1000ms; // the longest (and only) ttl in use
    // The restart rule: a killed primary stays down for longer than the longest ttl.
    constexpr auto least_down = ttl + 200ms;
    primary_set primaries{3};
    std::vector<std::unique_ptr<fault_proxy>> proxies;
    std::vector<std::string> urls;
    for (std::size_t i = 0; i < primaries.size(); ++i) {
        proxies.push_back(std::make_unique<fault_proxy>(primaries[i].port()));
        urls.push_back(proxies.back()->url());
    }
    scratch_dir dir;
    make_counter(dir.file("counter"));
    std::vector<std::unique_ptr<worker_process>> ws;
    auto const start = std::chrono::steady_clock::now();
    for (int p = 0; p < 4; ++p) {
        auto args = worker_args({"contend", "--name", "k", "--coroutines", "32", "--ms",
                                 std::to_string(milliseconds(run).count()), "--ttl-ms",
                                 std::to_string(ttl.count()), "--renew-ms", "250", "--hold-us",
                                 "500", "--health-ms", "300", "--counter", dir.file("counter"),
                                 "--history", dir.file("history")},
                                urls, std::to_string(p));
        args.insert(args.end(), {"--journal", dir.file(fmt::format("journal-{}", p))});
        ws.push_back(std::make_unique<worker_process>(args));
    }

    // Faults on every proxy, each from its own thread and generator, until 1.5 s before the
    // workers stop (so that the releases at the end meet none).
    auto const faults_until = start + run - 1500ms;
    std::vector<std::uint64_t> faults(proxies.size(), 0);
    std::vector<std::jthread> injectors; // joined before the proxies go, even on a throw
    for (std::size_t i = 0; i < proxies.size(); ++i)
        injectors.emplace_back([&, i] {
            std::mt19937 rng(opts.seed + 11 + static_cast<unsigned>(i));
            faults[i] = inject_faults(*proxies[i], faults_until, rng, 1500ms);
        });

    // Kills, one primary at a time and in turn: down for least_down plus up to 500 ms, then up
    // for 0.5 to 1 s before the next one: each primary is killed at least once in the short run,
    // several times in the full one. The last restart comes before the faults end.
    std::mt19937 rng(opts.seed + 3);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    std::vector<window> downs;
    std::int64_t shortest_down_ns = 0;
    std::this_thread::sleep_for(500ms);
    for (std::size_t victim = 0;; victim = (victim + 1) % primaries.size()) {
        auto const down = least_down + milliseconds(pick(0, 500));
        if (std::chrono::steady_clock::now() + down + 500ms > faults_until)
            break;
        auto& server = primaries[victim];
        window w{steady_now_ns(), 0};
        server.kill();
        std::this_thread::sleep_for(down);
        w.end_ns = steady_now_ns();
        server.restart(); // empty: it has forgotten every lock it granted
        downs.push_back(w);
        auto const d = w.end_ns - w.begin_ns;
        shortest_down_ns = downs.size() == 1 ? d : std::min(shortest_down_ns, d);
        std::this_thread::sleep_for(milliseconds(pick(500, 1000)));
    }
    for (auto& t : injectors)
        t.join();
    r.faults = downs.size();
    for (auto const f : faults)
        r.faults += f;

    auto total = collect(r, ws, run + 60s);
    auto const workers_gone = std::chrono::steady_clock::now();
    tally(r, total, start, opts.full ? 500u : 100u);
    r.check(downs.size() >= (opts.full ? 9u : 3u),
            fmt::format("only {} primaries killed", downs.size()));
    r.check(shortest_down_ns > std::chrono::nanoseconds(ttl).count(),
            "a primary was restarted before the ttl had passed");

    // One holder at a time, fences rising in acquisition order: nothing excused.
    check_history(r, dir.file("history"));
    auto const history = colock::test::read_history(dir.file("history"));
    std::size_t while_down = 0; // acquisitions while a primary was down: the others carried on
    for (auto const& h : history)
        while_down += in_some(downs, h.acquired_ns, h.acquired_ns + 1) ? 1 : 0;
    r.check(while_down > 0, "nothing was acquired while a primary was down");

    // No lost update: the counter is the number of increments, and the journals hold every
    // value from 1 to it exactly once (two holders reading the same value would write it
    // twice, naming both).
    auto const counter = check_counter(r, dir.file("counter"), total);
    std::vector<std::int64_t> written;
    std::uint64_t journal_acquisitions = 0;
    for (int p = 0; p < 4; ++p) {
        auto const j = read_journal(dir.file(fmt::format("journal-{}", p)));
        journal_acquisitions += j.acquisitions;
        written.insert(written.end(), j.written.begin(), j.written.end());
        r.check(j.open.empty(),
                fmt::format("process {} left {} tenures without a release", p, j.open.size()));
    }
    r.check(journal_acquisitions == r.acquisitions,
            fmt::format("the journals have {} acquisitions, the summaries {}", journal_acquisitions,
                        r.acquisitions));
    std::sort(written.begin(), written.end());
    std::vector<std::int64_t> twice;
    for (std::size_t i = 1; i < written.size(); ++i)
        if (written[i] == written[i - 1] && (twice.empty() || twice.back() != written[i]))
            twice.push_back(written[i]);
    r.check(twice.empty(), fmt::format("{} counter values written twice: updates lost (the "
                                       "first: {})",
                                       twice.size(), twice.empty() ? 0 : twice.front()));
    written.erase(std::unique(written.begin(), written.end()), written.end());
    r.check(static_cast<std::int64_t>(written.size()) == counter &&
                (written.empty() || (written.front() == 1 && written.back() == counter)),
            fmt::format("the journals wrote {} distinct values, the counter is {}", written.size(),
                        counter));

    // Once the longest ttl has passed after the run, no primary holds the lock or hands it on,
    // and no key lacks an expiry; once the queue entries have lapsed too, no key of the lock
    // is left at all, only each locker's holder record (`colock:locker:<id>`, which outlives
    // its last lease by two minutes by design).
    std::this_thread::sleep_until(workers_gone + ttl);
    for (std::size_t i = 0; i < primaries.size(); ++i)
        r.leaked_keys += lock_keys_left(primaries[i], {"k"});
    r.check(r.leaked_keys == 0,
            fmt::format("{} lock keys held, handed on or without an expiry on the primaries a "
                        "ttl after the run",
                        r.leaked_keys));
    auto const settle_until = workers_gone + queue_entry_ttl + 2s;
    std::vector<std::pair<colock::test::redis_server const*, std::string>> nodes;
    for (std::size_t i = 0; i < primaries.size(); ++i)
        nodes.emplace_back(&primaries[i], fmt::format("primary {}", i));
    auto const [keys_left, records] = settle_keys(nodes, settle_until);
    auto const settle_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - workers_gone).count();
    r.check(keys_left.empty(),
            fmt::format("{} keys left on the primaries {:.1f} s after the workers ended",
                        keys_left.size(), settle_s));
    for (auto const& key : keys_left)
        r.failures.push_back("  left: " + key);

    colock::test::fault_proxy_stats s;
    for (auto const& p : proxies) {
        auto const one = p->stats();
        s.dropped += one.dropped;
        s.cuts += one.cuts;
        s.stalls += one.stalls;
        s.black_holed += one.black_holed;
    }
    r.figures = fmt::format(
        "{} primary kills, each down {:.1f} s or more (ttl {} ms), {} acquisitions while one was "
        "down; proxies: {} drops, {} cuts, {} stalls, {} black-holed; counter {} = increments = "
        "distinct values journalled, lost updates 0; {} keys on the primaries after {:.1f} s (and "
        "{} holder records); worker reconnects {:.0f}, co_lock errors {:.0f}, tenures skipped "
        "(lease over before the write) {:.0f}",
        downs.size(), ms(shortest_down_ns) / 1000, ttl.count(), while_down, s.dropped, s.cuts,
        s.stalls, s.black_holed, counter, keys_left.size(), settle_s, records, total["reconnects"],
        total["errors"], total["skipped"]);
    return r;
}

} // namespace colock::reliability
