// Scenario o: three promises the library makes where a fault leaves a holder unsure, each
// checked against a history.
//  1. A read-write lock's writer is never beside a reader: writers downgrade into a CLIENT
//     PAUSE WRITE longer than the downgrade's 5 s deadline (and into killed connections), so
//     that the outcome is unknown while the server may apply it and let readers in; a writer
//     that works on as the writer whenever owns() says so must overlap no reader.
//  2. co_with_lock returns a value only if its lease held through the work: works stall their
//     thread for longer than the lease while other processes take the lock; no work that
//     returned may overlap another holder's tenure.
//  3. A lapsed lock or election goes to the first live entry of the process queue: A holds, B
//     queues, C queues behind B, A is SIGKILLed; B must get it before C, every round, within
//     the lease and the next attempt.
#include "journal.hpp"
#include "runner.hpp"

#include <colock_test/history.hpp>
#include <colock_test/redis_server.hpp>
#include <colock_test/shared_history.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::holding;
using colock::test::redis_server;

bool overlap(holding const& a, holding const& b) {
    return a.could_act() && b.could_act() && a.acquired_ns < b.end_ns() &&
           b.acquired_ns < a.end_ns();
}

// Waits until the journal shows a writer's tenure ("/w") begun less than `fresh` ago, or
// `limit` passes.
bool wait_writer_holds(std::string const& journal_file, milliseconds fresh, milliseconds limit) {
    return wait_until(limit, [&] {
        if (!std::filesystem::exists(journal_file) || !journal_in_tenure(journal_file))
            return false;
        auto const open = read_journal(journal_file).open;
        return std::any_of(open.begin(), open.end(), [&](holding const& h) {
            return h.holder.find("/w") != std::string::npos &&
                   steady_now_ns() - h.acquired_ns < ns(fresh);
        });
    });
}

// 1. Two writer processes (a writer each, always downgrading: x's holding 1000-1500 ms, y's
// 150-300 ms) and two reader processes (3 readers each), ttl 10 s so that the leases outlive
// the pause. While x's writer holds (begun less than 300 ms before: its downgrade comes well
// after the pause began): one CLIENT PAUSE 6500 WRITE; later, while it holds again, two kills
// of every client's connection.
std::string writers_beside_readers(result& r) {
    auto const run = 11s;
    redis_server server;
    scratch_dir dir;
    auto const reads_file = dir.file("reads");
    auto const writes_file = dir.file("writes");
    auto const believed_file = dir.file("believed");
    auto args = [&](std::string const& readers, std::string const& writers,
                    std::string const& write_min, std::string const& write_max) {
        return std::vector<std::string>{"rw",
                                        "--name",
                                        "o-rw",
                                        "--readers",
                                        readers,
                                        "--writers",
                                        writers,
                                        "--ms",
                                        std::to_string(milliseconds(run).count()),
                                        "--ttl-ms",
                                        "10000",
                                        "--renew-ms",
                                        "1000",
                                        "--read-min-ms",
                                        "20",
                                        "--read-max-ms",
                                        "80",
                                        "--write-min-ms",
                                        write_min,
                                        "--write-max-ms",
                                        write_max,
                                        "--write-pause-ms",
                                        "600",
                                        "--downgrade-percent",
                                        "100",
                                        "--unknown-act-ms",
                                        "2500",
                                        "--health-ms",
                                        "0",
                                        "--history-read",
                                        reads_file,
                                        "--history-write",
                                        writes_file,
                                        "--history-believed",
                                        believed_file};
    };
    std::vector<std::unique_ptr<worker_process>> ws;
    auto const journal_x = dir.file("journal-x");
    auto x = args("0", "1", "1000", "1500");
    x.insert(x.end(), {"--journal", journal_x});
    ws.push_back(std::make_unique<worker_process>(worker_args(x, server.url(), "x")));
    ws.push_back(std::make_unique<worker_process>(
        worker_args(args("0", "1", "150", "300"), server.url(), "y")));
    for (auto const* proc : {"r1", "r2"})
        ws.push_back(std::make_unique<worker_process>(
            worker_args(args("3", "0", "150", "300"), server.url(), proc)));
    std::this_thread::sleep_for(500ms);
    bool const paused = wait_writer_holds(journal_x, 300ms, 5s);
    r.check(paused, "1: x's writer did not hold within 5.5 s of the start: no pause");
    auto const paused_at = std::chrono::steady_clock::now();
    server.cli({"CLIENT", "PAUSE", "6500", "WRITE"});
    ++r.faults;
    std::this_thread::sleep_until(paused_at + 6700ms);
    int kills = 0;
    for (int k = 0; k < 2; ++k) {
        if (!wait_writer_holds(journal_x, 300ms, 2s))
            continue;
        server.cli({"CLIENT", "KILL", "TYPE", "normal"});
        server.cli({"CLIENT", "KILL", "TYPE", "pubsub"});
        ++kills;
        ++r.faults;
    }
    auto total = collect(r, ws, run + 60s);

    auto const reads = colock::test::read_history(reads_file);
    auto const writes = colock::test::read_history(writes_file);
    auto const believed = colock::test::read_history(believed_file);
    auto const report = colock::test::check_rw_history(reads, writes);
    r.acquisitions += report.readers + report.writers;
    r.overlaps += report.overlapping_pairs;
    r.check(report.overlapping_pairs == 0,
            fmt::format("1: {} pairs of a writer's tenure with another", report.overlapping_pairs));
    r.check(report.writer_fence_inversions == 0,
            fmt::format("1: {} writers' fences out of order", report.writer_fence_inversions));
    if (!report.ok())
        for (auto const& p : report.problems)
            r.failures.push_back("  " + p);
    // The writers' work after an unknown downgrade, beside nobody else's tenure.
    std::size_t beside = 0;
    for (auto const& b : believed) {
        for (auto const& o : reads)
            if (!o.holder.starts_with(b.holder.substr(0, b.holder.find('/') + 1)) &&
                overlap(b, o)) {
                if (++beside <= 5)
                    r.failures.push_back(fmt::format(
                        "  {} worked as the writer (owns) over [{}, {}] beside reader {} "
                        "[{}, {}]",
                        b.holder, b.acquired_ns, b.end_ns(), o.holder, o.acquired_ns, o.end_ns()));
            }
        for (auto const& o : writes)
            if (o.holder != b.holder && overlap(b, o))
                ++beside;
    }
    r.overlaps += beside;
    r.check(beside == 0, fmt::format("1: {} tenures beside a writer that believed it was one "
                                     "after a downgrade of unknown outcome",
                                     beside));
    r.check(total["unknown_downgrades"] >= 1, "1: no downgrade was left of unknown outcome");
    r.check(total["second_downgrades"] + total["writer_again"] >= 1,
            "1: no downgrade of unknown outcome was settled (a reader's or the writer's again)");
    r.check(report.most_readers_at_once >= 2, "1: the readers never held the lock together");
    r.leaked_keys += lock_keys_left(server, {});
    return fmt::format("1. rw lock: {} reader / {} writer tenures, {:.0f} downgrades, {:.0f} of "
                       "unknown outcome (pause 6.5 s, {} connection kills): {:.0f} found the "
                       "writer's again, {:.0f} a reader's by a second downgrade; {} stretches "
                       "worked as the writer after, 0 beside a reader",
                       report.readers, report.writers, total["downgrades"],
                       total["unknown_downgrades"], kills, total["writer_again"],
                       total["second_downgrades"], believed.size());
}

// 2. Three processes x 2 coroutines on one name (ttl 400 ms); one of them stalls its thread for
// 1000 ms every 4th work of a coroutine.
std::string returns_after_lost_lease(result& r) {
    auto const run = 6s;
    redis_server server;
    scratch_dir dir;
    auto const history_file = dir.file("history");
    std::vector<std::unique_ptr<worker_process>> ws;
    for (auto const* proc : {"s", "n1", "n2"}) {
        bool const stalls = std::string_view(proc) == "s";
        ws.push_back(
            std::make_unique<worker_process>(worker_args({"with_lock",
                                                          "--name",
                                                          "o-with",
                                                          "--coroutines",
                                                          "2",
                                                          "--ms",
                                                          std::to_string(milliseconds(run).count()),
                                                          "--ttl-ms",
                                                          "400",
                                                          "--renew-ms",
                                                          "100",
                                                          "--work-min-ms",
                                                          "2",
                                                          "--work-max-ms",
                                                          "20",
                                                          "--stall-ms",
                                                          "1000",
                                                          "--stall-every",
                                                          stalls ? "4" : "0",
                                                          "--health-ms",
                                                          "1000",
                                                          "--history",
                                                          history_file},
                                                         server.url(), proc)));
    }
    auto total = collect(r, ws, run + 60s);
    auto const history = colock::test::read_history(history_file);
    check_history(r, history_file);
    r.acquisitions += history.size();
    r.losses += static_cast<std::uint64_t>(total["lost"]);
    // The stalled works (a second or more in the history) and the others' tenures begun inside
    // them: the lock did change hands while they stalled.
    std::size_t taken_meanwhile = 0;
    for (auto const& s : history) {
        if (!s.holder.starts_with("ps/") || s.released_ns - s.acquired_ns < ns(900ms))
            continue;
        for (auto const& o : history)
            if (!o.holder.starts_with("ps/") && o.acquired_ns > s.acquired_ns &&
                o.acquired_ns < s.released_ns)
                ++taken_meanwhile;
    }
    r.check(total["stalls"] >= 2, fmt::format("2: only {:.0f} stalls", total["stalls"]));
    r.check(total["stalls_returned"] == 0,
            fmt::format("2: {:.0f} works that stalled past the lease returned their value",
                        total["stalls_returned"]));
    r.check(taken_meanwhile > 0, "2: nobody took the lock while a work stalled");
    r.check(total["returned"] >= 50,
            fmt::format("2: only {:.0f} calls returned", total["returned"]));
    r.leaked_keys += lock_keys_left(server, {"o-with"});
    return fmt::format("2. co_with_lock: {:.0f} calls returned, 0 beside another tenure; {:.0f} "
                       "works stalled 1000 ms (ttl 400), all ended lock_lost ({:.0f} lock_lost in "
                       "all), {} acquisitions by the others during them",
                       total["returned"], total["stalls"], total["lost"], taken_meanwhile);
}

// The first line of `w` that starts with `prefix`, if any (lines() keeps them all).
std::optional<std::string> first_line(worker_process const& w, std::string const& prefix) {
    for (auto const& line : w.lines())
        if (line.starts_with(prefix))
            return line;
    return std::nullopt;
}

// 3. A chain of holders of one lock (or election): P0 holds, P1 and P2 queue in that order;
// P0 is SIGKILLed and P1 must be next, not P2; then P3 queues behind P2, P1 is killed, and so
// on. `mode` is "hold" (acquired NS FENCE) or "lead" (leading NS TERM); returns the waits from
// each death to the next holder's acquisition, in ms.
std::vector<double> fifo_after_kills(result& r, redis_server const& server, scratch_dir& dir,
                                     std::string const& mode, std::string const& name,
                                     std::string const& queue_key, int rounds, milliseconds ttl) {
    auto const got = mode == "hold" ? std::string("acquired") : std::string("leading");
    auto const what = mode == "hold" ? std::string("lock") : std::string("election");
    std::vector<std::string> args{mode,
                                  "--name",
                                  name,
                                  "--ttl-ms",
                                  std::to_string(ttl.count()),
                                  "--renew-ms",
                                  std::to_string(ttl.count() / 4),
                                  "--step-ms",
                                  "60000",
                                  "--history",
                                  dir.file("history-" + name),
                                  "--store",
                                  dir.file("store-" + name)};
    std::deque<std::unique_ptr<worker_process>> procs;
    std::deque<std::string> entries; // the queue entries of procs[1], procs[2]
    int started = 0;
    auto start_one = [&] {
        procs.push_back(std::make_unique<worker_process>(
            worker_args(args, server.url(), fmt::format("{}{}", name, started++))));
    };
    std::vector<double> waits;
    start_one();
    if (!procs[0]->wait_line(got, 10s)) {
        r.check(false, fmt::format("3: the first {} holder did not get it", what));
        return waits;
    }
    // Queues one more process behind those queued: its entry is at the server before the next.
    auto queue_one = [&]() -> bool {
        start_one();
        auto const q = wait_queue(server, queue_key, entries.size() + 1, 10s);
        if (q.size() != entries.size() + 1 ||
            !std::equal(entries.begin(), entries.end(), q.begin())) {
            r.check(false, fmt::format("3: the {} queue is [{}], not the processes in order", what,
                                       fmt::join(q, ", ")));
            return false;
        }
        entries.push_back(q.back());
        return true;
    };
    if (!queue_one() || !queue_one())
        return waits;
    for (int round = 0; round < rounds; ++round) {
        procs[0]->kill_process();
        auto const rc = procs[0]->wait_exit(10s);
        auto const dead_ns = steady_now_ns();
        ++r.faults;
        r.check(rc == sigkill_status, fmt::format("3: a {} holder did not die by the kill", what));
        // Whoever gets it first of B (procs[1]) and C (procs[2]).
        std::optional<std::string> b, c;
        wait_until(10s, [&] {
            b = first_line(*procs[1], got);
            c = first_line(*procs[2], got);
            return b || c;
        });
        if (c && !b) {
            r.check(false, fmt::format("3: {} round {}: C, queued after B, got it first", what,
                                       round + 1));
            return waits;
        }
        if (!b) {
            r.check(false, fmt::format("3: {} round {}: nobody got it within 10 s of the kill",
                                       what, round + 1));
            return waits;
        }
        waits.push_back(ms(numbers(*b).at(0) - dead_ns));
        ++r.acquisitions;
        procs.pop_front();
        entries.pop_front();
        // The queue now: C alone; B's entry left it with its grant.
        if (round + 1 < rounds && !queue_one())
            return waits;
    }
    // The end: the holder lets go, the one queued gets it and lets go; nothing left held.
    auto const let_go = mode == "hold" ? std::string("unlock") : std::string("resign");
    auto const said = mode == "hold" ? std::string("released") : std::string("resigned");
    procs[0]->send(let_go);
    r.check(procs[0]->wait_line(said, 5s) == said + " 1",
            fmt::format("3: the last {} holder could not let go", what));
    r.check(procs[1]->wait_line(got, 5s).has_value(),
            fmt::format("3: the last queued process did not get the {}", what));
    procs[1]->send(let_go);
    r.check(procs[1]->wait_line(said, 5s) == said + " 1",
            fmt::format("3: the last queued process could not let go of the {}", what));
    for (auto& p : procs)
        r.check(p->wait_exit(10s) == 0, fmt::format("3: a {} worker failed", what));
    return waits;
}

} // namespace

// o. The promises of issue 44's items, in a bounded time.
result promises_kept() {
    int const lock_rounds = opts.full ? 30 : 10;
    int const election_rounds = opts.full ? 15 : 5;
    result r{fmt::format("o. promises: no writer beside readers, no co_with_lock result after a "
                         "lost lease, FIFO across kill -9 ({} lock + {} election rounds)",
                         lock_rounds, election_rounds)};
    auto const start = std::chrono::steady_clock::now();
    auto const one = writers_beside_readers(r);
    auto const two = returns_after_lost_lease(r);

    redis_server server;
    scratch_dir dir;
    auto const ttl = 500ms;
    auto const lock_waits =
        fifo_after_kills(r, server, dir, "hold", "o-fifo", "colock:{o-fifo}:q", lock_rounds, ttl);
    auto const election_waits = fifo_after_kills(
        r, server, dir, "lead", "o-elect", "colock:election:{o-elect}:q", election_rounds, ttl);
    r.check(lock_waits.size() == static_cast<std::size_t>(lock_rounds) &&
                election_waits.size() == static_cast<std::size_t>(election_rounds),
            "3: not every round ran");
    // The wait from a death to the next holder: the dead one's lease (its last renewal may have
    // been just before the kill), then the next attempt of B or C (retry backoff at most 200
    // ms), then a grant: 500 ms spare for a loaded machine.
    auto const bound = ttl + 200ms + 500ms;
    auto const worst = [](std::vector<double> const& v) {
        return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
    };
    r.check(std::max(worst(lock_waits), worst(election_waits)) <=
                static_cast<double>(bound.count()),
            fmt::format("3: the next in the queue waited {:.0f} ms after a death (bound {} ms)",
                        std::max(worst(lock_waits), worst(election_waits)), bound.count()));
    std::size_t left = 0;
    wait_until(
        3s, [&] { return (left = lock_keys_left(server, {"o-fifo"})) == 0; }, 100ms);
    r.leaked_keys += left;
    r.check(r.leaked_keys == 0, "a lock is left held, or a key without an expiry");
    r.timed_from(start);
    auto const list = [](std::vector<double> const& v) {
        std::vector<std::string> out;
        for (auto x : v)
            out.push_back(fmt::format("{:.0f}", x));
        return fmt::format("{}", fmt::join(out, "/"));
    };
    r.figures =
        fmt::format("{}\n  {}\n  3. FIFO across kill -9 (ttl {} ms): B before C in {}/{} "
                    "lock and {}/{} election rounds; B got it {} ms (lock) and {} ms "
                    "(election) after A's death (bound {} ms)",
                    one, two, ttl.count(), lock_waits.size(), lock_rounds, election_waits.size(),
                    election_rounds, list(lock_waits), list(election_waits), bound.count());
    return r;
}

} // namespace colock::reliability
