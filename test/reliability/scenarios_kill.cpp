// Scenarios g and h: a worker process SIGKILLed while the lock's state is its alone, the lease
// its coroutines pass among themselves (a cohort), or the hand-off the release script gives the
// head of the queue in Redis. A killed process cleans nothing up: what it held must run out by
// itself within the bounds the library documents, and nobody may hold the lock beside it.
#include "journal.hpp"
#include "runner.hpp"

#include <colock_test/history.hpp>
#include <colock_test/redis_server.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::redis_server;

// The server's clock in milliseconds, as the scripts read it (TIME).
std::int64_t server_ms(redis_server const& server) {
    auto const t = server.cli_lines({"TIME"});
    if (t.size() != 2)
        throw std::runtime_error("TIME answered '" + server.cli({"TIME"}) + "'");
    return std::stoll(t[0]) * 1000 + std::stoll(t[1]) / 1000;
}

// Script calls (FCALL or EVALSHA) the server counted so far: one per acquire, extend or release
// that went to Redis.
std::int64_t script_calls(redis_server const& server) {
    auto const info = server.cli({"INFO", "commandstats"});
    std::int64_t calls = 0;
    for (std::string_view field : {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="})
        if (auto const pos = info.find(field); pos != std::string::npos)
            calls += std::atoll(info.c_str() + pos + field.size());
    return calls;
}

std::size_t settled_keys_left(redis_server const& server, std::vector<std::string> const& names,
                              milliseconds patience) {
    std::size_t left = 0;
    wait_until(
        patience, [&] { return (left = lock_keys_left(server, names)) == 0; }, 100ms);
    return left;
}

} // namespace

// g. Processes contend on one name; one of them, the victim, runs many coroutines, so the lease
// passes among them locally (cohort hand-off). The victim is SIGKILLed while one of its
// coroutines holds the lock, and a fresh one started, several times over the run. Its lease
// must run out by its ttl and the others go on; its last tenure and its last counter write,
// which it never got to report, are taken from its journal (journal.hpp).
result killed_in_cohort() {
    int const kills = opts.full ? 10 : 3;
    result r{fmt::format("g. 3 procs x 4 + a victim x 32 coroutines (cohort), the victim "
                         "SIGKILLed holding the lock, {} times",
                         kills)};
    auto const ttl = 1000ms;
    auto const margin = 1000ms;
    // A round: a victim starts, joins in and is killed within kill_by; the rest of the round
    // is the aftermath: its lease running out (ttl), then perhaps a release handing the lock to
    // its queue entry, which waits out the claim.
    auto const period = 3500ms;
    auto const kill_by = 2000ms;
    auto const run = period * kills + 2000ms;
    redis_server server;
    scratch_dir dir;
    make_counter(dir.file("counter"));
    auto const start = std::chrono::steady_clock::now();
    auto const start_ns = steady_now_ns();
    auto contend = [&](std::string const& proc, int coroutines, milliseconds length) {
        return std::make_unique<worker_process>(worker_args(
            {"contend", "--name", "g", "--coroutines", std::to_string(coroutines), "--ms",
             std::to_string(length.count()), "--ttl-ms", std::to_string(ttl.count()), "--renew-ms",
             "250", "--hold-us", "500", "--counter", dir.file("counter"), "--history",
             dir.file("history"), "--journal", dir.file("journal-" + proc)},
            server.url(), proc));
    };
    std::vector<std::unique_ptr<worker_process>> steady;
    for (int p = 0; p < 3; ++p)
        steady.push_back(contend(std::to_string(p), 4, run));
    auto const steady_end_ns = start_ns + ns(run);

    std::mt19937 rng(opts.seed + 7);
    std::vector<std::int64_t> kill_ns;
    std::vector<std::string> victims;
    int killed_holding = 0;
    std::size_t unrecorded_allowed = 0;
    for (int k = 0; k < kills; ++k) {
        auto const round_start = start + period * k;
        std::this_thread::sleep_until(round_start);
        auto const proc = fmt::format("v{}", k);
        auto const journal_file = dir.file("journal-" + proc);
        auto victim = contend(proc, 32, 120s);
        // Once it takes part, a while of cohort hand-offs, then the kill at a moment one of its
        // coroutines holds the lock (its journal says so; the journal read after the kill is
        // what counts).
        wait_until(
            round_start + kill_by - std::chrono::steady_clock::now(),
            [&] {
                return std::filesystem::exists(journal_file) &&
                       std::filesystem::file_size(journal_file) != 0;
            },
            5ms);
        std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution(100, 400)(rng)));
        wait_until(
            round_start + kill_by - std::chrono::steady_clock::now(),
            [&] { return journal_in_tenure(journal_file); }, std::chrono::microseconds(200));
        kill_ns.push_back(steady_now_ns());
        victim->kill_process();
        auto const rc = victim->wait_exit(10s);
        auto const dead_ns = steady_now_ns();
        ++r.faults;
        r.check(rc == sigkill_status,
                fmt::format("victim {} ended with {}, not by the kill", proc, rc.value_or(-1)));
        // The tenure the kill cut short goes into the history, lasting until the process was
        // surely gone, so that a holder who got in beside it shows as an overlap.
        auto const j = read_journal(journal_file);
        r.check(j.open.size() <= 1,
                fmt::format("victim {} had {} tenures open at once", proc, j.open.size()));
        colock::test::history_writer history(dir.file("history"));
        for (auto h : j.open) {
            h.released_ns = dead_ns;
            h.lease_end_ns = dead_ns;
            history.record(h);
        }
        killed_holding += j.open.empty() ? 0 : 1;
        unrecorded_allowed += j.open_without_write;
        victims.push_back(proc);
    }

    auto total = collect(r, steady, run + 60s);
    r.timed_from(start);
    r.losses = static_cast<std::uint64_t>(total["losses"]);

    // Lost updates, exactly: every value from 1 to the counter's end written once; a value no
    // journal has is a write whose line a kill cut off, at most one per tenure the kill left
    // open without a "w" line.
    std::vector<std::int64_t> written;
    std::uint64_t steady_written = 0;
    std::uint64_t victim_acquisitions = 0;
    for (int p = 0; p < 3; ++p) {
        auto const j = read_journal(dir.file(fmt::format("journal-{}", p)));
        steady_written += j.written.size();
        written.insert(written.end(), j.written.begin(), j.written.end());
    }
    for (auto const& proc : victims) {
        auto const j = read_journal(dir.file("journal-" + proc));
        victim_acquisitions += j.acquisitions;
        written.insert(written.end(), j.written.begin(), j.written.end());
    }
    r.check(steady_written == static_cast<std::uint64_t>(total["increments"]),
            fmt::format("the journals of the steady workers have {} writes, their summaries "
                        "{:.0f}",
                        steady_written, total["increments"]));
    auto const counter = read_counter(dir.file("counter"));
    std::sort(written.begin(), written.end());
    auto const duplicates = static_cast<std::int64_t>(
        written.size() - static_cast<std::size_t>(std::distance(
                             written.begin(), std::unique(written.begin(), written.end()))));
    written.erase(std::unique(written.begin(), written.end()), written.end());
    bool const in_range = written.empty() || (written.front() >= 1 && written.back() <= counter);
    auto const unrecorded = counter - static_cast<std::int64_t>(written.size());
    r.check(duplicates == 0,
            fmt::format("{} counter values written twice: updates lost", duplicates));
    r.check(in_range, fmt::format("a value outside 1..{} was written", counter));
    r.check(unrecorded >= 0 && unrecorded <= static_cast<std::int64_t>(unrecorded_allowed),
            fmt::format("counter {} but {} values recorded; at most {} writes cut off by a kill",
                        counter, written.size(), unrecorded_allowed));

    check_history(r, dir.file("history"));
    auto const history = colock::test::read_history(dir.file("history"));
    r.acquisitions = history.size();

    // The others go on: the first acquisition after each kill by another process, and the
    // longest pause between acquisitions over the run (the hand-off a release may give to the
    // dead victim's queue entry costs its claim, a pause of its own).
    std::vector<std::int64_t> acquired;
    for (auto const& h : history)
        acquired.push_back(h.acquired_ns);
    std::sort(acquired.begin(), acquired.end());
    std::int64_t worst_gap_ns = 0;
    std::vector<std::string> gaps;
    for (std::size_t k = 0; k < kill_ns.size(); ++k) {
        auto const victim_prefix = fmt::format("p{}/", victims[k]);
        std::optional<std::int64_t> next;
        for (auto const& h : history)
            if (h.acquired_ns > kill_ns[k] && !h.holder.starts_with(victim_prefix) &&
                (!next || h.acquired_ns < *next))
                next = h.acquired_ns;
        r.check(next.has_value() && *next < steady_end_ns,
                fmt::format("nobody acquired after kill {}", k + 1));
        if (!next)
            continue;
        worst_gap_ns = std::max(worst_gap_ns, *next - kill_ns[k]);
        gaps.push_back(fmt::format("{:.0f}", ms(*next - kill_ns[k])));
    }
    // Pauses of more than half a lease: each kill's lease running out, and each hand-off to a
    // dead victim's queue entry (its claim).
    std::int64_t longest_pause_ns = 0;
    std::vector<std::string> long_pauses;
    for (std::size_t i = 1; i < acquired.size(); ++i) {
        if (acquired[i] >= steady_end_ns - ns(500ms))
            break; // the contenders stop at their deadline
        auto const pause = acquired[i] - acquired[i - 1];
        longest_pause_ns = std::max(longest_pause_ns, pause);
        if (pause > ns(ttl / 2))
            long_pauses.push_back(fmt::format("{:.0f}", ms(pause)));
    }
    r.check(worst_gap_ns <= ns(ttl + margin),
            fmt::format("{:.0f} ms from a kill to the next acquisition (bound: ttl {} ms + {} ms)",
                        ms(worst_gap_ns), ttl.count(), margin.count()));
    r.check(longest_pause_ns <= ns(ttl + margin),
            fmt::format("acquisitions paused for {:.0f} ms (bound: ttl {} ms + {} ms)",
                        ms(longest_pause_ns), ttl.count(), margin.count()));
    r.check(killed_holding > 0, "no kill hit a victim while it held the lock");

    auto const calls = script_calls(server);
    r.leaked_keys = settled_keys_left(server, {"g"}, queue_entry_ttl + 1000ms);
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.figures = fmt::format(
        "{}/{} kills while a victim's coroutine held the lock; next acquisition by another "
        "process {} ms after each kill (bound {} ms); pauses in acquisitions over {} ms: {} "
        "ms; victims acquired {} times; {:.2f} script calls per acquisition (cohort "
        "hand-offs); counter {} = {} recorded writes + {} cut off by a kill (at most {}), {} "
        "written twice",
        killed_holding, kills, fmt::join(gaps, "/"), (ttl + margin).count(), (ttl / 2).count(),
        fmt::join(long_pauses, "/"), victim_acquisitions,
        static_cast<double>(calls) / static_cast<double>(std::max<std::size_t>(1, history.size())),
        counter, written.size(), unrecorded, unrecorded_allowed, duplicates);
    return r;
}

// h. Process A holds the lock, V queues behind it (the head of the queue in Redis), C after
// V. V is SIGKILLed, then A releases. While V's entry is live the release hands the lock to V,
// which never claims it: C gets it once the claim ran out (max_handoff_claim), by its next
// attempt. Once V's entry has lapsed (queue_entry_ttl after its last refresh) the release skips
// it and C gets the lock at once. Both are measured, from A's release to C's acquisition.
result killed_at_queue_head() {
    int const rounds = opts.full ? 3 : 1;
    result r{"h. the head of the Redis queue SIGKILLed, then the holder releases"};
    // The documented bound: the claim, then the waiter's next attempt; its own retry backoff
    // (--retry-max-ms, 200 ms) asks sooner than queue_refresh_interval.
    auto const claimed_bound = max_handoff_claim + queue_refresh_interval;
    auto const margin = 500ms;
    redis_server server;
    scratch_dir dir;
    auto const start = std::chrono::steady_clock::now();
    std::int64_t worst_claimed_ns = 0;
    std::int64_t worst_lapsed_ns = 0;
    std::vector<std::string> names;
    for (int round = 0; round < 2 * rounds; ++round) {
        bool const lapsed = round % 2 == 1;
        auto const name = fmt::format("h-{}", round);
        names.push_back(name);
        auto const key = "colock:{" + name + "}";
        auto const hold = hold_args(name, "2000", "500", dir);
        worker_process a(worker_args(hold, server.url(), "A"));
        auto const a_acquired = a.wait_line("acquired", 10s);
        r.check(a_acquired.has_value(), "A did not acquire");
        if (!a_acquired)
            return r;
        worker_process v(worker_args(hold, server.url(), "V"));
        auto const queue_v = wait_queue(server, key + ":q", 1, 10s);
        r.check(queue_v.size() == 1, "V did not queue in Redis behind A");
        if (queue_v.size() != 1)
            return r;
        worker_process c(worker_args(hold, server.url(), "C"));
        auto const queue = wait_queue(server, key + ":q", 2, 10s);
        r.check(queue.size() == 2 && queue[0] == queue_v[0],
                fmt::format("the queue is [{}], not V then C", fmt::join(queue, ", ")));
        v.kill_process();
        ++r.faults;
        r.check(v.wait_exit(10s) == sigkill_status, "V did not die by the kill");
        if (lapsed) // V's entry is refreshed at least every retry-max; it lapses after this
            std::this_thread::sleep_for(queue_entry_ttl + 500ms);
        auto const v_deadline = server.cli({"HGET", key + ":qd", queue_v[0]});
        auto const v_left_ms = v_deadline.empty() ? -1 : std::stoll(v_deadline) - server_ms(server);
        r.check(lapsed ? v_left_ms < 0 : v_left_ms > 0,
                fmt::format("V's queue entry has {} ms left at the release", v_left_ms));
        auto const release_ns = steady_now_ns();
        a.send("unlock");
        r.check(a.wait_line("released", 5s) == "released 1", "A could not release");
        // The release script's choice, read before the claim can run out.
        auto const value = server.cli({"GET", key});
        bool const to_dead = value.starts_with("R ") && value.ends_with(" " + queue_v[0]);
        r.check(to_dead == !lapsed,
                fmt::format("after the release the lock is '{}' ({})", value,
                            lapsed ? "V's lapsed entry was not skipped"
                                   : "not handed to V, the live head of the queue"));
        auto const c_acquired = c.wait_line("acquired", 10s);
        r.check(c_acquired.has_value(), "C never got the lock");
        if (!c_acquired)
            return r;
        auto const delay_ns = numbers(*c_acquired).at(0) - release_ns;
        auto& worst = lapsed ? worst_lapsed_ns : worst_claimed_ns;
        worst = std::max(worst, delay_ns);
        r.check(numbers(*c_acquired).at(1) > numbers(*a_acquired).at(1),
                "C's fence is not above A's");
        c.send("unlock");
        r.check(c.wait_line("released", 5s) == "released 1", "C could not release");
        r.check(a.wait_exit(10s) == 0 && c.wait_exit(10s) == 0, "a hold worker failed");
        r.acquisitions += 2;
    }
    r.check(worst_claimed_ns <= ns(claimed_bound + margin),
            fmt::format("C waited {:.0f} ms after a hand-off to the dead V (bound {} ms + {} ms)",
                        ms(worst_claimed_ns), claimed_bound.count(), margin.count()));
    // Skipped at once: well under the claim a hand-off to V would have cost.
    r.check(worst_lapsed_ns < ns(max_handoff_claim),
            fmt::format("C waited {:.0f} ms although V's entry had lapsed", ms(worst_lapsed_ns)));
    check_history(r, dir.file("history"));
    r.leaked_keys = settled_keys_left(server, names, max_handoff_claim + 1000ms);
    r.check(r.leaked_keys == 0, "a lock is left held, or a key without an expiry");
    r.timed_from(start);
    r.figures = fmt::format(
        "V (head of the queue) killed, A releases: handed to the dead V, C acquired {:.0f} ms "
        "after the release (bound: claim {} ms + next attempt within {} ms, + {} ms); V's entry "
        "lapsed first: skipped, C acquired {:.1f} ms after the release",
        ms(worst_claimed_ns), max_handoff_claim.count(), queue_refresh_interval.count(),
        margin.count(), ms(worst_lapsed_ns));
    return r;
}

} // namespace colock::reliability
