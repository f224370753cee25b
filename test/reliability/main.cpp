// The reliability runner: scenarios with real redis-servers, worker processes, a fault-injecting
// proxy and SIGSTOP / kill / CLIENT PAUSE, each printing its figures and checking them. Every
// holder's tenure goes to a shared history file, which the checker searches for two holders at
// once and for fences out of order. At the end, one table; the exit code is non-zero when any
// check failed.
//
// Usage: colock_reliability [--full] [--only a,b,...,l,m1,...,m4,n1,n2,o,p] [--part K/N] [--seed N]
//   default: short versions (under two minutes, run by scripts/test.sh); --full: the long
//   runs (scripts/reliability.sh). --part K/N runs every Nth scenario from the Kth: ctest runs
//   the short versions as two tests side by side.
//
// Scenarios a-f are here; the helpers they share are in runner.cpp, g and h (worker processes
// SIGKILLed) in scenarios_kill.cpp, i (Redis Sentinel failovers) in scenarios_sentinel.cpp, j
// (Redis Cluster slot migrations and failovers) in scenarios_cluster.cpp, k (Redlock over
// three primaries, killed one at a time) in scenarios_redlock.cpp, l (the lease's edges) in
// scenarios_lease.cpp, m1-m4 (the election: leaders killed and stopped, campaigns with kills
// and proxy faults, a watch checked) in scenarios_election.cpp, and n1-n2 (a semaphore and a
// read-write lock under proxy faults with a holder SIGKILLed) in scenarios_shared.cpp, and o
// (no writer beside readers, no co_with_lock result after a lost lease, FIFO across SIGKILLs)
// in scenarios_promises.cpp, and p (lock sets under proxy faults, a worker SIGKILLed) in
// scenarios_sets.cpp.
#include "runner.hpp"
#include "worker.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/history.hpp>
#include <colock_test/redis_server.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace colock::reliability;
using colock::test::fault_proxy;
using colock::test::redis_server;
using colock::test::steady_now_ns;
using std::chrono::milliseconds;

// ------------------------------------------------------------------------------- scenarios

// a. Processes x coroutines on one name, the proxy injecting faults at random.
result contention_under_faults() {
    result r{"a. 4 procs x 32 coroutines, random proxy faults"};
    auto const run = opts.full ? 30s : 8s;
    proxied_server env;
    std::vector<std::unique_ptr<worker_process>> ws;
    auto const start = std::chrono::steady_clock::now();
    for (int p = 0; p < 4; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args({"contend", "--name", "a", "--coroutines", "32", "--ms",
                         std::to_string(milliseconds(run).count()), "--ttl-ms", "1000",
                         "--renew-ms", "250", "--hold-us", "500", "--health-ms", "300", "--counter",
                         env.dir.file("counter"), "--history", env.dir.file("history")},
                        env.proxy.url(), std::to_string(p))));
    std::mt19937 rng(opts.seed);
    r.faults = inject_faults(env.proxy, start + run - 1500ms, rng, 1500ms);
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 500u : 100u);
    auto const counter = check_counter(r, env.dir.file("counter"), total);
    check_history(r, env.dir.file("history"));
    r.leaked_keys = lock_keys_left(env.server, {"a"});
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.figures = fmt::format(
        "counter {} = increments; lost updates 0; {}; worker reconnects {:.0f}, co_lock errors "
        "{:.0f}, tenures skipped (lease over before the write) {:.0f}",
        counter, proxy_figures(env.proxy), total["reconnects"], total["errors"], total["skipped"]);
    return r;
}

// b. The holder's process is stopped for longer than the lease.
result stopped_holder() {
    result r{"b. holder SIGSTOPped for 2.5 x TTL"};
    plain_server env;
    auto const hold = hold_args("b", "1000", "300", env.dir);
    worker_process a(worker_args(hold, env.server.url(), "A"));
    auto a_acquired = a.wait_line("acquired", 10s);
    r.check(a_acquired.has_value(), "A did not acquire");
    if (!a_acquired)
        return r;
    worker_process b(worker_args(hold, env.server.url(), "B"));
    r.check(wait_queue(env.server, "colock:{b}:q", 1, 10s).size() == 1, "B did not queue");
    a.stop_process();
    auto const stopped_ns = steady_now_ns();
    ++r.faults;
    auto b_acquired = b.wait_line("acquired", 5s);
    r.check(b_acquired.has_value(), "B did not take over");
    if (b_acquired) {
        b.send("write from-B");
        r.check(b.wait_line("write", 5s) == "write accepted", "B's write was refused");
        b.send("rwrite from-B");
        r.check(b.wait_line("rwrite", 5s) == "rwrite accepted",
                "B's write to the fenced resource in Redis was refused");
    }
    auto const resumed_ns = continue_after(a, stopped_ns, 2500ms);
    auto a_lost = a.wait_line("lost", 5s);
    r.check(a_lost.has_value(), "A did not report lost after SIGCONT");
    a.send("write from-A");
    auto const a_write = a.wait_line("write", 5s);
    r.check(a_write == "write refused", "A's stale write was not refused by the fenced store");
    // The same at a resource in Redis (colock::fenced_resource), which keeps B's value.
    a.send("rwrite from-A");
    auto const a_rwrite = a.wait_line("rwrite", 5s);
    r.check(a_rwrite == "rwrite refused",
            fmt::format("A's stale write to the fenced resource in Redis: {}",
                        a_rwrite.value_or("no answer")));
    auto const kept = env.server.cli({"GET", "res:{b}"});
    r.check(kept == "from-B", fmt::format("the fenced resource in Redis holds '{}'", kept));
    let_go_in_turn(r, a, b, "unlock", "released", "lock", env.dir, a_lost.has_value());
    colock::test::fenced_store store(env.dir.file("store")); // for the figures
    r.leaked_keys = lock_keys_left(env.server, {"b"});
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.timed_from(env.start);
    if (b_acquired && a_lost)
        r.figures = fmt::format(
            "B acquired {:.0f} ms after A stopped; A told lost {:.1f} ms after SIGCONT; A's "
            "write (fence {}) refused, B's (fence {}) kept, in Redis too; store: {} accepted, {} "
            "refused",
            ms(numbers(*b_acquired).at(0) - stopped_ns), ms(numbers(*a_lost).at(0) - resumed_ns),
            numbers(*a_acquired).at(1), numbers(*b_acquired).at(1), store.accepted(),
            store.refused());
    return r;
}

// c1. The server dies and comes back empty after longer than the lease.
result restart_after_ttl() {
    result r{"c1. server killed, restarted after TTL + 0.5 s"};
    auto const run = opts.full ? 20s : 6s;
    redis_server server;
    scratch_dir dir;
    make_counter(dir.file("counter"));
    auto const start = std::chrono::steady_clock::now();
    auto const hold = hold_args("c1", "1000", "300", dir);
    worker_process a(worker_args(hold, server.url(), "A"));
    r.check(a.wait_line("acquired", 10s).has_value(), "A did not acquire");
    worker_process b(worker_args(hold, server.url(), "B"));
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 2; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args({"contend", "--name", "c1", "--coroutines", "8", "--ms",
                         std::to_string(milliseconds(run).count()), "--ttl-ms", "1000",
                         "--renew-ms", "250", "--hold-us", "500", "--counter", dir.file("counter"),
                         "--history", dir.file("history")},
                        server.url(), std::to_string(p))));
    std::this_thread::sleep_for(500ms);
    server.kill();
    auto const killed_ns = steady_now_ns();
    ++r.faults;
    std::this_thread::sleep_for(1500ms);
    auto const restarted_ns = steady_now_ns(); // clients may get in before restart() returns
    server.restart();
    auto a_lost = a.wait_line("lost", 5s);
    r.check(a_lost.has_value(), "A did not report lost");
    if (a_lost)
        r.check(numbers(*a_lost).at(0) < restarted_ns,
                "A noticed the loss only after the restart, not by its lease deadline");
    auto b_acquired = b.wait_line("acquired", run + 10s);
    r.check(b_acquired.has_value(), "B (waiting) never recovered");
    a.send("unlock");
    b.send("unlock");
    r.check(a.wait_exit(10s) == 0 && b.wait_exit(10s) == 0, "a hold worker failed");
    auto total = collect(r, ws, run + 60s);
    r.timed_from(start);
    auto const counter = read_counter(dir.file("counter"));
    r.check(counter == static_cast<std::int64_t>(total["increments"]),
            fmt::format("counter {} but {:.0f} increments", counter, total["increments"]));
    auto const history = colock::test::read_history(dir.file("history"));
    auto const after = std::count_if(history.begin(), history.end(),
                                     [&](auto const& h) { return h.acquired_ns > restarted_ns; });
    r.check(after > 0, "nobody acquired after the restart");
    check_history(r, dir.file("history"));
    r.acquisitions = history.size();
    r.losses = static_cast<std::uint64_t>(total["losses"]) + (a_lost ? 1 : 0);
    r.leaked_keys = lock_keys_left(server, {"c1"});
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    if (a_lost && b_acquired)
        r.figures = fmt::format("A lost {:.0f} ms after the kill (its lease deadline); {} "
                                "acquisitions after the restart, the first {:.0f} ms after it; "
                                "counter {} = increments",
                                ms(numbers(*a_lost).at(0) - killed_ns), after,
                                ms(numbers(*b_acquired).at(0) - restarted_ns), counter);
    return r;
}

// c2. The server dies and comes back empty at once: the one case where two holders can believe
// they hold the lock. Measures that window and shows the fence stopping the old holder.
result instant_restart() {
    result r{"c2. server killed, restarted at once (overlaps expected: the measured window)"};
    int const rounds = opts.full ? 10 : 3;
    auto const start = std::chrono::steady_clock::now();
    std::int64_t worst_window_ns = 0;
    std::int64_t worst_told_ns = 0;
    int refused = 0;
    for (int round = 0; round < rounds; ++round) {
        redis_server server;
        scratch_dir dir;
        // A long lease and a slow renewal: only noticing the new server instance tells A soon.
        auto const hold = hold_args("c2", "10000", "3000", dir);
        worker_process a(worker_args(hold, server.url(), "A"));
        auto a_acquired = a.wait_line("acquired", 10s);
        r.check(a_acquired.has_value(), "A did not acquire");
        worker_process b(worker_args(hold, server.url(), "B"));
        r.check(wait_queue(server, "colock:{c2}:q", 1, 10s).size() == 1, "B did not queue");
        server.kill();
        auto const restarted_ns = steady_now_ns();
        server.restart();
        ++r.faults;
        auto b_acquired = b.wait_line("acquired", 10s);
        auto a_lost = a.wait_line("lost", 10s);
        r.check(b_acquired.has_value(), "B did not acquire on the restarted server");
        r.check(a_lost.has_value(), "A was not told that its lease is gone");
        if (!b_acquired || !a_lost || !a_acquired)
            return r;
        auto const window =
            std::max<std::int64_t>(0, numbers(*a_lost).at(0) - numbers(*b_acquired).at(0));
        worst_window_ns = std::max(worst_window_ns, window);
        worst_told_ns = std::max(worst_told_ns, numbers(*a_lost).at(0) - restarted_ns);
        r.check(numbers(*b_acquired).at(1) > numbers(*a_acquired).at(1),
                "the new holder's fence is not larger after the restart");
        b.send("write from-B");
        r.check(b.wait_line("write", 5s) == "write accepted", "B's write was refused");
        a.send("write from-A");
        bool const a_refused = a.wait_line("write", 5s) == "write refused";
        r.check(a_refused, "A's stale write was accepted");
        refused += a_refused ? 1 : 0;
        a.send("unlock");
        b.send("unlock");
        r.check(a.wait_line("released", 5s) == "released 0", "A's unlock claimed the lock");
        r.check(b.wait_line("released", 5s) == "released 1", "B could not release");
        r.check(a.wait_exit(10s) == 0 && b.wait_exit(10s) == 0, "a hold worker failed");
        // Two holders at once is expected here, for at most the window measured above.
        check_history(r, dir.file("history"), 1);
        r.acquisitions += 2;
        r.losses += 1;
        r.leaked_keys += lock_keys_left(server, {"c2"});
    }
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.check(worst_told_ns < 2'000'000'000, "a holder took more than 2 s to learn of the restart");
    r.timed_from(start);
    r.figures = fmt::format("{} restarts: old holder told within {:.1f} ms of the restart (run_id "
                            "changed); window with two believing holders at most {:.1f} ms; "
                            "stale writes refused by fence {}/{}",
                            rounds, ms(worst_told_ns), ms(worst_window_ns), refused, rounds);
    return r;
}

// d. CLIENT PAUSE longer than the renew interval (the lease survives), then longer than the
// lease (the holder gives up by its deadline).
result client_pause() {
    result r;
    int const short_pauses = opts.full ? 8 : 3;
    r.scenario = fmt::format("d. CLIENT PAUSE {} x 700 ms, then 2500 ms (renew 300, TTL 1500)",
                             short_pauses);
    auto const run = opts.full ? 20s : 9s;
    redis_server server;
    scratch_dir dir;
    make_counter(dir.file("counter"));
    auto const start = std::chrono::steady_clock::now();
    worker_process a(worker_args({"hold", "--name", "d-holder", "--ttl-ms", "1500", "--renew-ms",
                                  "300", "--health-ms", "1000", "--history", dir.file("history-a"),
                                  "--store", dir.file("store")},
                                 server.url(), "A"));
    r.check(a.wait_line("acquired", 10s).has_value(), "A did not acquire");
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 2; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args({"contend", "--name", "d", "--coroutines", "8", "--ms",
                         std::to_string(milliseconds(run).count()), "--ttl-ms", "1500",
                         "--renew-ms", "300", "--hold-us", "500", "--health-ms", "1000",
                         "--counter", dir.file("counter"), "--history", dir.file("history")},
                        server.url(), std::to_string(p))));
    std::this_thread::sleep_for(500ms);
    for (int i = 0; i < short_pauses; ++i) {
        server.cli({"CLIENT", "PAUSE", "700", "ALL"});
        ++r.faults;
        std::this_thread::sleep_for(1200ms);
    }
    a.send("state");
    auto const state = a.wait_line("state", 5s);
    r.check(state == "state owns=1 lost=0",
            "A lost its lease to pauses shorter than TTL - renew interval: " +
                state.value_or("no answer"));
    server.cli({"CLIENT", "PAUSE", "2500", "ALL"});
    ++r.faults;
    auto const paused_ns = steady_now_ns();
    auto a_lost = a.wait_line("lost", 5s);
    r.check(a_lost.has_value(), "A did not report lost during a pause longer than its lease");
    a.send("unlock");
    r.check(a.wait_exit(10s) == 0, "the hold worker failed");
    auto total = collect(r, ws, run + 60s);
    r.timed_from(start);
    auto const counter = read_counter(dir.file("counter"));
    r.check(counter == static_cast<std::int64_t>(total["increments"]),
            fmt::format("counter {} but {:.0f} increments", counter, total["increments"]));
    check_history(r, dir.file("history"));
    r.acquisitions = static_cast<std::uint64_t>(total["acquisitions"]) + 1;
    r.losses = static_cast<std::uint64_t>(total["losses"]) + (a_lost ? 1 : 0);
    r.leaked_keys = lock_keys_left(server, {"d", "d-holder"});
    r.check(r.leaked_keys == 0, "a lock is left held, or a key without an expiry");
    if (a_lost)
        r.figures = fmt::format("A kept its lease through {} pauses of 700 ms; lost {:.0f} ms into "
                                "the 2500 ms pause; counter {} = increments",
                                short_pauses, ms(numbers(*a_lost).at(0) - paused_ns), counter);
    return r;
}

// e. Cancellation storm while the proxy injects faults: nothing may be left behind.
result cancellation_storm() {
    result r{"e. cancellation storm under proxy faults"};
    auto const run = opts.full ? 20s : 6s;
    int const coroutines = opts.full ? 500 : 64;
    redis_server server;
    fault_proxy proxy(server.port());
    auto const start = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 2; ++p)
        ws.push_back(std::make_unique<worker_process>(worker_args(
            {"storm", "--name", "e", "--names", "8", "--coroutines", std::to_string(coroutines),
             "--ms", std::to_string(milliseconds(run).count()), "--ttl-ms", "30000", "--renew-ms",
             "10000", "--health-ms", "300"},
            proxy.url(), std::to_string(p))));
    std::mt19937 rng(opts.seed + 5);
    r.faults = inject_faults(proxy, start + run, rng, 500ms);
    std::map<std::string, double> total;
    for (auto& w : ws) {
        auto line = w->wait_line("summary", 60s);
        r.check(line.has_value(), "a storm worker gave no summary");
        if (line)
            for (auto const& [k, v] : fields(*line))
                total[k] += v;
    }
    // The TTL is 30 s: a lock still held or handed off after the releases' own 5 s deadline
    // is a leak.
    std::vector<std::string> names;
    for (int i = 0; i < 8; ++i)
        names.push_back(fmt::format("e-{}", i));
    wait_until(
        7s, [&] { return (r.leaked_keys = lock_keys_left(server, names)) == 0; }, 100ms);
    for (auto& w : ws)
        w->send("exit");
    for (auto& w : ws)
        r.check(w->wait_exit(15s) == 0, "a storm worker failed");
    r.check(r.leaked_keys == 0,
            fmt::format("{} lock keys left held, or without an expiry", r.leaked_keys));
    r.check(total["cancelled"] > 0 && total["acquisitions"] > 0, "the storm did nothing");
    r.acquisitions = static_cast<std::uint64_t>(total["acquisitions"]);
    r.losses = static_cast<std::uint64_t>(total["losses"]);
    r.timed_from(start);
    r.figures = fmt::format("{} coroutines x 2 procs on 8 names: {:.0f} co_lock cancelled, {:.0f} "
                            "errors, {:.0f} reconnects",
                            coroutines, total["cancelled"], total["errors"], total["reconnects"]);
    return r;
}

// f. Many coroutines waiting on one name in one process.
result many_waiters() {
    std::size_t const count = opts.full ? 100'000 : 10'000;
    std::size_t const serve = opts.full ? 2'000 : 500;
    result r{fmt::format("f. {} waiters on one name", count)};
    redis_server server;
    auto const start = std::chrono::steady_clock::now();
    worker_process w(worker_args({"waiters", "--name", "f", "--count", std::to_string(count),
                                  "--serve", std::to_string(serve), "--ttl-ms", "30000",
                                  "--renew-ms", "10000", "--health-ms", "5000"},
                                 server.url(), "W"));
    auto line = w.wait_line("summary", 300s);
    r.check(line.has_value(), "the waiters worker gave no summary");
    r.check(w.wait_exit(30s) == 0, "the waiters worker failed");
    r.timed_from(start);
    if (!line)
        return r;
    auto f = fields(*line);
    r.check(f["served"] == static_cast<double>(serve), "not every served waiter was served");
    r.check(f["served"] + f["cancelled"] == static_cast<double>(count),
            "some waiters neither served nor cancelled");
    r.check(f["failed"] == 0, "some waiters failed");
    r.check(f["keys"] == 0 && f["subscribers"] == 0, "a key or a subscription is left");
    r.acquisitions = static_cast<std::uint64_t>(f["served"]) + 1;
    r.leaked_keys = static_cast<std::size_t>(f["keys"]);
    r.figures =
        fmt::format("{:.0f} bytes per waiter; queued in {:.2f} s; {} served then {:.0f} "
                    "cancelled in {:.2f} s; 0 keys and 0 subscribers left",
                    f["bytes_per_waiter"], f["queued_s"], serve, f["cancelled"], f["drain_s"]);
    return r;
}

// ------------------------------------------------------------------------------- main

int run_all() {
    std::vector<std::pair<std::string, std::function<result()>>> const scenarios = {
        {"a", contention_under_faults},
        {"b", stopped_holder},
        {"c1", restart_after_ttl},
        {"c2", instant_restart},
        {"d", client_pause},
        {"e", cancellation_storm},
        {"f", many_waiters},
        {"g", killed_in_cohort},
        {"h", killed_at_queue_head},
        {"i", sentinel_failovers},
        {"j", cluster_migrations},
        {"k", redlock_primaries},
        {"l", lease_edges},
        {"m1", election_killed_leader},
        {"m2", election_stopped_leader},
        {"m3", election_campaigns_with_kills},
        {"m4", election_proxy_faults},
        {"n1", semaphore_with_kills},
        {"n2", rw_lock_with_kills},
        {"o", promises_kept},
        {"p", lock_sets_with_kills}};
    for (auto const& key : opts.only) {
        if (std::none_of(scenarios.begin(), scenarios.end(),
                         [&](auto const& s) { return s.first == key; }))
            throw std::invalid_argument("--only: no scenario '" + key + "'");
    }
    std::vector<result> results;
    for (std::size_t i = 0; i < scenarios.size(); ++i) {
        auto const& [key, run] = scenarios[i];
        if (!opts.only.empty() && !opts.only.contains(key))
            continue;
        if (i % opts.parts != opts.part - 1)
            continue;
        std::printf("---- %s\n", key.c_str());
        std::fflush(stdout);
        result r;
        try {
            r = run();
        } catch (std::exception const& e) {
            r.scenario = key;
            r.failures.push_back(std::string("exception: ") + e.what());
        }
        std::printf("%s\n  %s\n", r.scenario.c_str(), r.figures.c_str());
        for (auto const& f : r.failures)
            std::printf("  FAILED: %s\n", f.c_str());
        std::fflush(stdout);
        results.push_back(std::move(r));
    }

    std::printf("\n| scenario | acquisitions | faults injected | overlaps | leaked keys | losses "
                "detected | duration | result |\n|---|---|---|---|---|---|---|---|\n");
    bool ok = true;
    for (auto const& r : results) {
        std::printf("| %s | %llu | %llu | %zu | %zu | %llu | %.1f s | %s |\n", r.scenario.c_str(),
                    static_cast<unsigned long long>(r.acquisitions),
                    static_cast<unsigned long long>(r.faults), r.overlaps, r.leaked_keys,
                    static_cast<unsigned long long>(r.losses), r.seconds,
                    r.failures.empty() ? "ok" : "FAILED");
        ok = ok && r.failures.empty();
    }
    std::printf("\n%s (seed %u, %s run)\n", ok ? "all scenarios passed" : "SOME SCENARIOS FAILED",
                opts.seed, opts.full ? "full" : "short");
    return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    if (argc >= 2 && std::string_view(argv[1]) == "worker")
        return colock::reliability::worker_main(argc, argv);
    auto& run_opts = colock::reliability::opts;
    run_opts.seed = static_cast<unsigned>(std::random_device{}());
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (arg == "--full") {
            run_opts.full = true;
        } else if (arg == "--only" && i + 1 < argc) {
            std::stringstream list(argv[++i]);
            for (std::string key; std::getline(list, key, ',');)
                run_opts.only.insert(key);
        } else if (arg == "--part" && i + 1 < argc) {
            // K/N with 1 <= K <= N
            std::string_view const part = argv[++i];
            auto const slash = part.find('/');
            std::size_t k = 0;
            std::size_t n = 0;
            bool const parsed =
                slash != std::string_view::npos &&
                std::from_chars(part.data(), part.data() + slash, k).ptr == part.data() + slash &&
                std::from_chars(part.data() + slash + 1, part.data() + part.size(), n).ptr ==
                    part.data() + part.size();
            if (!parsed || k < 1 || k > n) {
                std::fprintf(stderr, "%s: --part wants K/N with 1 <= K <= N, not '%s'\n", argv[0],
                             argv[i]);
                return 2;
            }
            run_opts.part = k;
            run_opts.parts = n;
        } else if (arg == "--seed" && i + 1 < argc) {
            run_opts.seed = static_cast<unsigned>(std::stoul(argv[++i]));
        } else {
            std::fprintf(
                stderr,
                "usage: %s [--full] [--only a,b,c1,c2,d,e,f,g,h,i,j,k,l,m1,m2,m3,m4,n1,n2,o]\n"
                "       [--part K/N] [--seed N]\n",
                argv[0]);
            return 2;
        }
    }
    try {
        return run_all();
    } catch (std::exception const& e) {
        std::fprintf(stderr, "colock_reliability: %s\n", e.what());
        return 1;
    }
}
