// Scenarios n1 and n2: the synchronizers with several holders at once, with worker processes
// contending through a fault proxy and directly, one of them SIGKILLed while it holds. n1: a
// semaphore of capacity 3, some calls taking two permits: never more than 3 permits held at
// once, every fence given once and each holder's increasing, and the killed process's permits
// back within its ttl (read at the server) and taken by the others soon after. n2: a read-write
// lock with readers and writers mixed, writers now and then downgrading: no writer beside
// anybody, writers' fences increasing, each reader's fence between its writers', readers
// together, and writers getting in while readers keep coming (the longest writer wait bounded).
// The checks are in colock_test/shared_history.hpp; a killed process's open tenures come from its
// journal (journal.hpp), lasting until it was surely dead.
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::holding;
using colock::test::redis_server;

constexpr auto shared_ttl = 1000ms;
constexpr std::size_t capacity = 3;
// The permits a semaphore holder's name says: "p<proc>/c<i>x<permits>".
std::size_t permits_of(holding const& h) {
    auto const x = h.holder.rfind('x');
    return x == std::string::npos ? 1 : std::stoul(h.holder.substr(x + 1));
}

// A victim's death: when it was surely dead and what it held then (its journal's open tenures,
// lasting until then).
struct death {
    std::int64_t kill_ns = 0;
    std::int64_t dead_ns = 0;
    std::vector<holding> open;
};

// The state letter of process `pid` in /proc (R, S, T: stopped...), or 0 when unreadable.
char process_state(int pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text;
    std::getline(stat, text);
    auto const name_end = text.rfind(')'); // the name may hold spaces and parentheses
    return name_end != std::string::npos && name_end + 2 < text.size() ? text[name_end + 2] : 0;
}

// Stops `victim` and waits until it is stopped (kill(SIGSTOP) returns before it is): its journal
// then says what it holds, and none of it can end before a kill.
bool freeze(worker_process const& victim) {
    victim.stop_process();
    return wait_until(
        2s, [&] { return process_state(victim.pid()) == 'T'; }, std::chrono::microseconds(50));
}

// Freezes `victim` once its journal's open tenures pass `accept`, trying until `until`; true
// when it is frozen so, false (running) when the time ran out.
bool freeze_holding(worker_process const& victim, std::string const& journal_file,
                    std::chrono::steady_clock::time_point until,
                    std::function<bool(std::vector<holding> const&)> const& accept) {
    // The journal's last line is a cheap first look; the frozen journal decides. Between looks
    // the victim runs for the step.
    return wait_until(
        until - std::chrono::steady_clock::now(),
        [&] {
            if (!journal_in_tenure(journal_file))
                return false;
            if (freeze(victim) && accept(read_journal(journal_file).open))
                return true;
            victim.continue_process();
            return false;
        },
        std::chrono::microseconds(500));
}

// SIGKILLs `victim` while it holds, then records the tenures it was in with `record`. Its clock
// starts at its first acquisition (a loaded machine may take seconds to start a process): after
// `settle`, the kill waits for a tenure `preferred` accepts until `prefer` has passed, then for
// any tenure until `within` has, then kills whatever it does. The victim is frozen (SIGSTOP)
// when its journal is read for the kill: a tenure seen then is one the kill ends, however late
// the kill comes after the look on a loaded machine.
death kill_holding(result& r, worker_process& victim, std::string const& journal_file,
                   milliseconds settle, milliseconds prefer, milliseconds within,
                   std::function<bool(holding const&)> const& preferred,
                   std::function<void(holding const&)> const& record) {
    bool const began = wait_until(30s, [&] { return journal_last_kind(journal_file) != 0; });
    auto const started = std::chrono::steady_clock::now();
    r.check(began, "the victim did not acquire within 30 s of its start");
    std::this_thread::sleep_for(settle);
    auto const any_preferred = [&](std::vector<holding> const& open) {
        return std::any_of(open.begin(), open.end(), preferred);
    };
    auto const any = [](std::vector<holding> const& open) { return !open.empty(); };
    if (!freeze_holding(victim, journal_file, started + prefer, any_preferred) &&
        !freeze_holding(victim, journal_file, started + within, any))
        freeze(victim);
    death d;
    d.kill_ns = steady_now_ns(); // frozen: it renews nothing from here
    victim.kill_process();
    auto const rc = victim.wait_exit(10s);
    d.dead_ns = steady_now_ns();
    ++r.faults;
    r.check(rc == sigkill_status,
            fmt::format("the victim ended with {}, not by the kill", rc.value_or(-1)));
    if (!std::filesystem::exists(journal_file))
        return d;
    for (auto h : read_journal(journal_file).open) {
        h.released_ns = d.dead_ns;
        h.lease_end_ns = d.dead_ns;
        record(h);
        d.open.push_back(std::move(h));
    }
    return d;
}

// The proxy's faults in a thread of their own while the scenario kills.
class fault_thread {
public:
    fault_thread(colock::test::fault_proxy& proxy, std::chrono::steady_clock::time_point until,
                 unsigned seed)
        : thread_([this, &proxy, until, seed] {
            std::mt19937 rng(seed);
            faults_ = inject_faults(proxy, until, rng, 1500ms);
        }) {}
    ~fault_thread() {
        if (thread_.joinable())
            thread_.join();
    }
    fault_thread(fault_thread const&) = delete;
    fault_thread& operator=(fault_thread const&) = delete;
    std::uint64_t join() {
        thread_.join();
        return faults_;
    }

private:
    std::uint64_t faults_ = 0;
    std::thread thread_;
};

// The largest value of `key` in the summaries of ws[from, to) (collect adds them up).
double largest(std::vector<std::unique_ptr<worker_process>> const& ws, std::size_t from,
               std::size_t to, std::string const& key) {
    double most = 0;
    for (std::size_t i = from; i < to && i < ws.size(); ++i)
        for (auto const& line : ws[i]->lines())
            if (line.starts_with("summary "))
                most = std::max(most, fields(line)[key]);
    return most;
}

} // namespace

// n1. A semaphore of capacity 3 (ttl 1 s): two processes through the fault proxy and two
// directly, 4 coroutines each holding 10-60 ms, one in four taking two permits; a victim (6
// coroutines, one in three taking two) SIGKILLed while it holds, once (the full run: 4 times, a
// new victim each time).
result semaphore_with_kills() {
    int const kills = opts.full ? 4 : 1;
    // The short run leaves the victim time to hold when faults have stalled the queue for
    // everyone (a woken head behind the proxy keeps its claim, wave after wave), and the others
    // time after the kill to take its permits back.
    auto const run = opts.full ? 30s : 9s;
    result r{fmt::format("n1. semaphore of 3: 4 procs x 4 coroutines (2 through proxy faults), a "
                         "victim x 6 SIGKILLed holding, {} times",
                         kills)};
    proxied_server env;
    auto const start = std::chrono::steady_clock::now();
    auto const history_file = env.dir.file("history");
    auto args = [&](std::string const& coroutines, std::string const& double_every,
                    milliseconds length) {
        return std::vector<std::string>{"permits",
                                        "--name",
                                        "n1",
                                        "--capacity",
                                        "3",
                                        "--coroutines",
                                        coroutines,
                                        "--double-every",
                                        double_every,
                                        "--ms",
                                        std::to_string(length.count()),
                                        "--ttl-ms",
                                        std::to_string(shared_ttl.count()),
                                        "--renew-ms",
                                        "250",
                                        "--hold-min-ms",
                                        "10",
                                        "--hold-max-ms",
                                        "60",
                                        "--health-ms",
                                        "300",
                                        "--history",
                                        history_file};
    };
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 4; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args(args("4", "4", run), p < 2 ? env.proxy.url() : env.server.url(),
                        fmt::format("{}{}", p < 2 ? "f" : "d", p))));
    fault_thread faults(env.proxy, start + run - 1500ms, opts.seed + 19);

    // Each round: a victim joins, is killed while it holds within kill_within of its first
    // acquisition, and the rest of the round is the aftermath (its leases, then its dead queue
    // entries, running out).
    auto const period = (run - 1s) / kills;
    auto const kill_within = std::chrono::duration_cast<milliseconds>(period * 2 / 3);
    std::vector<death> deaths;
    std::vector<std::string> victims;
    // The victim's permits: when each lease ran out at the server, from the kill (ZSCORE of its
    // token against TIME); the earliest, converted to the steady clock, is when another
    // holder may first take one of them.
    std::vector<std::int64_t> lease_left_ms;
    std::vector<std::int64_t> first_free_ns;
    std::mt19937 rng(opts.seed + 23);
    colock::test::history_writer history(history_file);
    for (int k = 0; k < kills; ++k) {
        auto const round_start = start + period * k;
        std::this_thread::sleep_until(round_start);
        auto const proc = fmt::format("v{}", k);
        victims.push_back(proc);
        auto const journal_file = env.dir.file("journal-" + proc);
        auto victim_args = args("6", "3", 120s);
        victim_args.insert(victim_args.end(), {"--journal", journal_file});
        worker_process victim(worker_args(victim_args, env.server.url(), proc));
        auto d = kill_holding(
            r, victim, journal_file, milliseconds(std::uniform_int_distribution(200, 600)(rng)),
            0ms, kill_within, [](holding const&) { return true; },
            [&](holding const& h) { history.record(h); });
        // Its leases at the server, read right after its death.
        auto const before_ns = steady_now_ns();
        auto const time = env.server.cli_lines({"TIME"});
        std::int64_t const server_ms =
            std::stoll(time.at(0)) * 1000 + std::stoll(time.at(1)) / 1000;
        // A token no longer there ran out (and was removed) before the reading.
        std::int64_t latest = server_ms;
        std::optional<std::int64_t> earliest;
        for (auto const& h : d.open) {
            auto const score = env.server.cli({"ZSCORE", "colock:semaphore:{n1}:h", h.token});
            if (score.empty())
                continue;
            std::int64_t const until_ms = std::stoll(score);
            latest = std::max(latest, until_ms);
            earliest = std::min(earliest.value_or(until_ms), until_ms);
        }
        // From the kill: the time left at the reading, plus what passed since the kill (an
        // underestimate by the TIME call's start-up, an overestimate by under 1 ms). The earliest
        // lease's end on the steady clock is no earlier than `before_ns` + its time left - 1 ms.
        lease_left_ms.push_back(latest - server_ms + (before_ns - d.kill_ns) / 1'000'000);
        first_free_ns.push_back(earliest ? before_ns + (*earliest - server_ms) * 1'000'000
                                         : d.kill_ns);
        deaths.push_back(std::move(d));
    }
    r.faults += faults.join();
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 300u : 60u);

    auto const all = colock::test::read_history(history_file);
    std::vector<std::size_t> permits;
    for (auto const& h : all)
        permits.push_back(permits_of(h));
    auto const report = colock::test::check_capacity(all, capacity, permits);
    r.acquisitions = all.size();
    r.overlaps = report.crowded;
    r.check(report.crowded == 0,
            fmt::format("{} acquisitions made more than {} permits held at once (most {})",
                        report.crowded, capacity, report.most_at_once));
    r.check(report.fence_repeats == 0, fmt::format("{} fences given twice", report.fence_repeats));
    r.check(report.fence_inversions == 0,
            fmt::format("{} fences not increasing within a holder", report.fence_inversions));
    r.check(report.most_at_once == capacity,
            fmt::format("at most {} permits held at once: the semaphore was never full",
                        report.most_at_once));
    if (!report.ok())
        for (auto const& p : report.problems)
            r.failures.push_back("  " + p);

    // After each kill: the others' first acquisition, and the first moment they held more than
    // the permits the victim did not hold: one of its permits came back to them. The victim's
    // waiting calls stay in the queue, ahead of the others' (first come, first served), until
    // they lapse: a woken one after the claim, the others queue_entry_ttl after their last
    // refresh. Until then nobody gets a permit (about 3 s when several are queued, woken wave
    // after wave); the bound is that, then the next attempt of the call at the head
    // (queue_refresh_interval); that call may be behind the proxy and miss its wake-up in a
    // fault (a stall of up to 1.5 s, then the claim it was woken with), and 500 ms for a loaded
    // machine.
    auto const reuse_bound =
        queue_entry_ttl + queue_refresh_interval + 1500ms + max_handoff_claim + 500ms;
    std::vector<std::string> firsts, reuses, lefts;
    for (std::size_t k = 0; k < deaths.size(); ++k) {
        auto const& d = deaths[k];
        std::size_t victim_permits = 0;
        for (auto const& h : d.open)
            victim_permits += permits_of(h);
        r.check(victim_permits > 0, fmt::format("kill {} found the victim holding nothing", k + 1));
        // A renewal written just before the kill may run at the server just after it: 20 ms.
        r.check(lease_left_ms[k] <= shared_ttl.count() + 20,
                fmt::format("the killed victim's permits were leased on for {} ms after the kill "
                            "(ttl {} ms)",
                            lease_left_ms[k], shared_ttl.count()));
        lefts.push_back(fmt::format("{}", lease_left_ms[k]));
        std::vector<holding> others;
        for (auto const& h : all)
            if (!h.holder.starts_with("pv"))
                others.push_back(h);
        std::sort(others.begin(), others.end(),
                  [](auto const& a, auto const& b) { return a.acquired_ns < b.acquired_ns; });
        std::optional<std::int64_t> first, reuse;
        for (auto const& h : others) {
            if (h.acquired_ns <= d.kill_ns || !h.could_act())
                continue;
            if (!first)
                first = h.acquired_ns;
            std::size_t held = 0;
            for (auto const& o : others)
                if (o.acquired_ns <= h.acquired_ns && h.acquired_ns < o.end_ns())
                    held += permits_of(o);
            if (held > capacity - std::min(capacity, victim_permits)) {
                reuse = h.acquired_ns;
                break;
            }
        }
        r.check(first.has_value(), fmt::format("nobody acquired after kill {}", k + 1));
        r.check(reuse.has_value(),
                fmt::format("the killed victim's permits never came back (kill {})", k + 1));
        if (first)
            firsts.push_back(fmt::format("{:.0f}", ms(*first - d.kill_ns)));
        if (!reuse)
            continue;
        reuses.push_back(fmt::format("{:.0f}", ms(*reuse - d.kill_ns)));
        r.check(*reuse - d.kill_ns <= ns(reuse_bound),
                fmt::format("{:.0f} ms from kill {} until the others held the victim's permits "
                            "(bound {} ms)",
                            ms(*reuse - d.kill_ns), k + 1, reuse_bound.count()));
        // The conversion of the server's clock is good to the TIME call's round trip.
        r.check(*reuse >= first_free_ns[k] - ns(1ms),
                fmt::format("a permit of the killed victim was taken {:.1f} ms before its lease "
                            "ran out at the server",
                            ms(first_free_ns[k] - *reuse)));
    }
    r.check(!victims.empty() &&
                std::all_of(victims.begin(), victims.end(),
                            [&](auto const& v) {
                                return std::any_of(all.begin(), all.end(), [&](auto const& h) {
                                    return h.holder.starts_with("p" + v);
                                });
                            }),
            "a victim never held");
    check_left_keys(r, env.server, queue_entry_ttl + 2s, "semaphore");
    r.timed_from(start);
    std::size_t victim_permits_total = 0;
    for (auto const& d : deaths)
        for (auto const& h : d.open)
            victim_permits_total += permits_of(h);
    r.figures =
        fmt::format("{} tenures, at most {} permits at once (capacity {}); fences all distinct, "
                    "increasing per holder; kills hit {} permit(s) held; their leases ran out {} "
                    "ms after the kill (ttl {} ms); the others' next acquisition {} ms, and they "
                    "held the victim's permits {} ms after it (bound {} ms); {:.0f} losses, {:.0f} "
                    "errors, {:.0f} timeouts, {:.0f} releases not ours; {}",
                    all.size(), report.most_at_once, capacity, victim_permits_total,
                    fmt::join(lefts, "/"), shared_ttl.count(), fmt::join(firsts, "/"),
                    fmt::join(reuses, "/"), reuse_bound.count(), total["losses"], total["errors"],
                    total["timeouts"], total["not_ours"], proxy_figures(env.proxy));
    return r;
}

// n2. A read-write lock (ttl 1 s): two processes through the fault proxy and two directly, each
// with 4 readers (holding 20-80 ms, back at once: together they keep the lock read almost all
// the time) and a writer (holding 5-20 ms, then downgrading one time in three, pausing up to
// 150 ms between attempts); a victim of the same shape SIGKILLed while it holds, once (the full
// run: 4 times). Checked: check_rw_history, readers together at times, writes done, and the
// longest writer wait bounded well below the run: a writer waits for the readers ahead of it
// and stops those after it.
result rw_lock_with_kills() {
    int const kills = opts.full ? 4 : 1;
    auto const run = opts.full ? 30s : 7s;
    result r{fmt::format("n2. read-write lock: 4 procs x (4 readers + a writer) (2 through proxy "
                         "faults), a victim SIGKILLed holding, {} times",
                         kills)};
    proxied_server env;
    auto const start = std::chrono::steady_clock::now();
    auto const reads_file = env.dir.file("reads");
    auto const writes_file = env.dir.file("writes");
    auto args = [&](milliseconds length) {
        return std::vector<std::string>{"rw",
                                        "--name",
                                        "n2",
                                        "--readers",
                                        "4",
                                        "--writers",
                                        "1",
                                        "--ms",
                                        std::to_string(length.count()),
                                        "--ttl-ms",
                                        std::to_string(shared_ttl.count()),
                                        "--renew-ms",
                                        "250",
                                        "--read-min-ms",
                                        "20",
                                        "--read-max-ms",
                                        "80",
                                        "--write-min-ms",
                                        "5",
                                        "--write-max-ms",
                                        "20",
                                        "--write-pause-ms",
                                        "150",
                                        "--downgrade-percent",
                                        "33",
                                        "--health-ms",
                                        "300",
                                        "--history-read",
                                        reads_file,
                                        "--history-write",
                                        writes_file};
    };
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 4; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args(args(run), p < 2 ? env.proxy.url() : env.server.url(),
                        fmt::format("{}{}", p < 2 ? "f" : "d", p))));
    fault_thread faults(env.proxy, start + run - 1500ms, opts.seed + 29);

    auto const period = (run - 1s) / kills;
    auto const kill_within = std::chrono::duration_cast<milliseconds>(period / 2);
    std::vector<death> deaths;
    std::mt19937 rng(opts.seed + 31);
    colock::test::history_writer reads(reads_file);
    colock::test::history_writer writes(writes_file);
    std::size_t writers_killed = 0;
    for (int k = 0; k < kills; ++k) {
        auto const round_start = start + period * k;
        std::this_thread::sleep_until(round_start);
        auto const proc = fmt::format("v{}", k);
        auto const journal_file = env.dir.file("journal-" + proc);
        auto victim_args = args(120s);
        victim_args.insert(victim_args.end(), {"--journal", journal_file});
        worker_process victim(worker_args(victim_args, env.server.url(), proc));
        // Its writer's tenures are short: a kill in one of them is waited for a while.
        auto is_writer = [](holding const& h) { return h.holder.find("/w") != std::string::npos; };
        deaths.push_back(kill_holding(
            r, victim, journal_file, milliseconds(std::uniform_int_distribution(200, 600)(rng)),
            kill_within * 5 / 6, kill_within, is_writer, [&](holding const& h) {
                writers_killed += is_writer(h) ? 1 : 0;
                (is_writer(h) ? writes : reads).record(h);
            }));
    }
    r.faults += faults.join();
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 300u : 60u);
    // ws[0] and ws[1] go through the proxy, ws[2] and ws[3] straight to the server.
    auto const proxied_wait_ms = largest(ws, 0, 2, "longest_write_wait_ms");
    auto const longest_wait_ms = largest(ws, 2, 4, "longest_write_wait_ms");

    auto const read_tenures = colock::test::read_history(reads_file);
    auto const report =
        colock::test::check_rw_history(read_tenures, colock::test::read_history(writes_file));
    // The longest stretch in which readers held the lock without a break: readers keep coming,
    // so without a writer getting in between it would last the whole run.
    std::int64_t longest_reading_ns = 0;
    {
        std::vector<std::pair<std::int64_t, std::int64_t>> spans;
        for (auto const& h : read_tenures)
            if (h.could_act())
                spans.emplace_back(h.acquired_ns, h.end_ns());
        std::sort(spans.begin(), spans.end());
        std::int64_t from = 0, to = 0;
        for (auto const& [a, e] : spans) {
            if (a > to)
                from = a;
            to = std::max(to, e);
            longest_reading_ns = std::max(longest_reading_ns, to - from);
        }
    }
    r.acquisitions = report.readers + report.writers;
    r.overlaps = report.overlapping_pairs;
    r.check(report.overlapping_pairs == 0,
            fmt::format("{} pairs of a writer's tenure with another", report.overlapping_pairs));
    r.check(report.writer_fence_inversions == 0,
            fmt::format("{} writers' fences out of order", report.writer_fence_inversions));
    r.check(report.reader_fences_low == 0,
            fmt::format("{} readers with a fence below a writer that ended before them",
                        report.reader_fences_low));
    r.check(report.reader_fences_high == 0,
            fmt::format("{} readers with a fence not below a writer that had not ended when "
                        "they began",
                        report.reader_fences_high));
    if (!report.ok())
        for (auto const& p : report.problems)
            r.failures.push_back("  " + p);
    r.check(report.most_readers_at_once >= 2, "the readers never held the lock together");
    r.check(report.readers_checked > 0, "no reader's fence was checked");
    auto const least_writes = opts.full ? 100.0 : 10.0;
    r.check(total["writes"] >= least_writes,
            fmt::format("only {:.0f} writes (at least {:.0f})", total["writes"], least_writes));
    // A writer waits for the readers ahead of it (80 ms), the writers ahead of it, after a kill
    // for the victim's dead queue entries (queue_entry_ttl at most, its leases' ttl within it)
    // and the next attempt of the call at the head (queue_refresh_interval), and for a holder
    // behind the proxy whose release a fault held up (its lease, ttl): 5.5 s with 500 ms spare,
    // below the run's length, which a starved writer would wait. Checked for the writers that
    // reach the server directly: those behind the proxy add its faults (a grant missed in a
    // black hole costs a claim, and a new place in the queue). The readers' longest unbroken
    // stretch is bounded by the ttl: writers get in while readers keep coming (two writers
    // reach the server directly, each trying every 150 ms at most).
    auto const wait_bound = queue_entry_ttl + queue_refresh_interval + shared_ttl + 500ms;
    r.check(longest_wait_ms <= static_cast<double>(wait_bound.count()),
            fmt::format("a writer (direct) waited {:.0f} ms (bound {} ms)", longest_wait_ms,
                        wait_bound.count()));
    r.check(longest_reading_ns <= ns(shared_ttl),
            fmt::format("readers held the lock for {:.0f} ms without a break (bound {} ms)",
                        ms(longest_reading_ns), shared_ttl.count()));
    std::size_t held_at_kills = 0;
    for (auto const& d : deaths)
        held_at_kills += d.open.empty() ? 0 : 1;
    r.check(held_at_kills == deaths.size(), "a kill found the victim holding nothing");
    check_left_keys(r, env.server, queue_entry_ttl + 2s, "read-write lock");
    r.timed_from(start);
    r.figures = fmt::format(
        "{} reader and {} writer tenures ({:.0f} downgrades), up to {} readers at once; writers' "
        "fences increasing; {} readers' fences checked, {} exactly the last writer's before them, "
        "{} after a lapse; longest writer wait {:.0f} ms direct (bound {} ms), {:.0f} ms through "
        "the proxy; longest unbroken reading {:.0f} ms (bound {} ms); kills hit {} tenures ({} a "
        "writer's); {:.0f} losses, {:.0f} errors, {:.0f} timeouts; {}",
        report.readers, report.writers, total["downgrades"], report.most_readers_at_once,
        report.readers_checked, report.readers_exact, report.readers_after_lapse, longest_wait_ms,
        wait_bound.count(), proxied_wait_ms, ms(longest_reading_ns), shared_ttl.count(),
        [&] {
            std::size_t n = 0;
            for (auto const& d : deaths)
                n += d.open.size();
            return n;
        }(),
        writers_killed, total["losses"], total["errors"], total["timeouts"],
        proxy_figures(env.proxy));
    return r;
}

} // namespace colock::reliability
