// Scenarios m1-m4: the election with real processes. m1 SIGKILLs the leader with a candidate
// queued and times the hand-over; m2 SIGSTOPs the leader beyond its lease and shows it step
// down on resuming, its late write refused by the fenced store; m3 runs campaigns in three
// processes with random holds, proclaims, resigns and SIGKILLs, and m4 the same through a fault
// proxy. In m3 and m4 every leader's tenure goes to the history (no two leaders with
// overlapping valid leases, terms increasing in grant order) and a watch in a process of its
// own is checked against the campaigners' journals (colock_test/election_history.hpp).
#include "election_journal.hpp"
#include "runner.hpp"

#include <colock_test/election_history.hpp>
#include <colock_test/history.hpp>
#include <colock_test/redis_server.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::redis_server;

constexpr auto election_ttl = 1000ms;
// m4's: the proxy's black holes (up to 800 ms) and stalls (up to 1500 ms) outlast it.
constexpr auto faulted_ttl = 600ms;

std::string queue_key(std::string const& name) {
    return "colock:election:{" + name + "}:q";
}

// A lead worker: one campaign, then steps every 50 ms; its tenure to `dir`'s history.
std::vector<std::string> lead_args(std::string const& name, scratch_dir const& dir) {
    return {"lead",
            "--name",
            name,
            "--ttl-ms",
            std::to_string(election_ttl.count()),
            "--renew-ms",
            "300",
            "--step-ms",
            "50",
            "--history",
            dir.file("history"),
            "--store",
            dir.file("store")};
}

// A watch's reports, from the lines an observe worker said.
std::vector<colock::test::watch_event> watch_events(std::vector<std::string> const& lines) {
    std::vector<colock::test::watch_event> events;
    for (auto const& line : lines) {
        if (!line.starts_with("change "))
            continue;
        std::istringstream in(line.substr(7));
        colock::test::watch_event e;
        int leading = 0;
        int resynced = 0;
        in >> e.ns >> leading >> e.term >> resynced >> e.value;
        e.leading = leading != 0;
        e.resynced = resynced != 0;
        if (e.value == "-")
            e.value.clear();
        events.push_back(std::move(e));
    }
    return events;
}

// Waits until the watch's last report says that nobody leads; whether it did within `limit`.
bool watch_settles(worker_process& observer, milliseconds limit) {
    return wait_until(
        limit,
        [&] {
            auto const events = watch_events(observer.lines());
            return !events.empty() && !events.back().leading;
        },
        50ms);
}

// The campaigns of several processes: their slots (a process and its restarts after kills),
// journals and history, run against one election.
class campaigners {
public:
    campaigners(std::string name, std::string url, scratch_dir const& dir,
                std::vector<std::string> extra)
        : name_(std::move(name)), url_(std::move(url)), dir_(dir), extra_(std::move(extra)) {}

    // Starts slot `slot`'s next process, at its campaign `first`.
    void start(std::size_t slot, std::int64_t first) {
        if (slot >= slots_.size())
            slots_.resize(slot + 1);
        auto& s = slots_[slot];
        auto const proc = fmt::format("s{}i{}", slot, s.journals.size());
        s.journals.push_back(dir_.file("journal-" + proc));
        auto args = extra_;
        args.insert(args.begin(), {"campaign", "--name", name_, "--first", std::to_string(first),
                                   "--history", dir_.file("history"), "--store", dir_.file("store"),
                                   "--journal", s.journals.back()});
        s.process = std::make_unique<worker_process>(worker_args(args, url_, proc));
    }

    std::size_t size() const { return slots_.size(); }
    worker_process& process(std::size_t slot) { return *slots_[slot].process; }
    std::string const& journal(std::size_t slot) const { return slots_[slot].journals.back(); }

    // The campaigns slot `slot` has started, in all its processes.
    std::int64_t started(std::size_t slot) const {
        std::int64_t n = 0;
        for (auto const& j : slots_[slot].journals)
            if (std::filesystem::exists(j))
                n += static_cast<std::int64_t>(read_election_journal(j).campaigns.size());
        return n;
    }

    // SIGKILLs slot `slot`'s process; the tenure it was in (if any) goes to the history up to
    // its death. Returns when it was surely dead.
    std::int64_t kill(std::size_t slot, result& r) {
        auto& s = slots_[slot];
        s.process->kill_process();
        auto const rc = s.process->wait_exit(10s);
        auto const dead_ns = steady_now_ns();
        r.check(rc == sigkill_status,
                fmt::format("slot {} ended with {}, not by the kill", slot, rc.value_or(-1)));
        auto const j = read_election_journal(s.journals.back());
        std::set<std::string> recorded;
        for (auto const& h : colock::test::read_history(dir_.file("history")))
            recorded.insert(h.token);
        colock::test::history_writer history(dir_.file("history"));
        for (auto h : j.open) {
            if (recorded.contains(h.token))
                continue; // killed between its record and its journal's "e"
            h.released_ns = dead_ns;
            h.lease_end_ns = dead_ns;
            history.record(h);
        }
        return dead_ns;
    }

    // Every campaign of every process, from the journals.
    std::vector<colock::test::campaign_record> campaigns() const {
        std::vector<colock::test::campaign_record> all;
        for (auto const& s : slots_)
            for (auto const& j : s.journals) {
                auto const read = read_election_journal(j);
                all.insert(all.end(), read.campaigns.begin(), read.campaigns.end());
            }
        return all;
    }

    // How the terms not cut by a kill ended, over every process.
    std::map<std::string, std::size_t> endings() const {
        std::map<std::string, std::size_t> all;
        for (auto const& s : slots_)
            for (auto const& j : s.journals)
                for (auto const& [how, n] : read_election_journal(j).endings)
                    all[how] += n;
        return all;
    }

    // When each grant came (acquired_ns of every "g"), in order.
    std::vector<std::int64_t> grants() const {
        std::vector<std::int64_t> out;
        for (auto const& s : slots_)
            for (auto const& j : s.journals) {
                std::istringstream in(read_file(j));
                for (std::string line; std::getline(in, line);) {
                    if (!line.starts_with("g "))
                        continue;
                    std::istringstream words(line);
                    std::string kind, id, token;
                    std::int64_t term = 0, ns = 0;
                    words >> kind >> id >> term >> token >> ns;
                    out.push_back(ns);
                }
            }
        std::sort(out.begin(), out.end());
        return out;
    }

    // Waits for the last process of every slot; adds up their summaries.
    std::map<std::string, double> collect_all(result& r, milliseconds limit) {
        std::vector<std::unique_ptr<worker_process>> last;
        for (auto& s : slots_)
            last.push_back(std::move(s.process));
        auto total = collect(r, last, limit);
        for (std::size_t i = 0; i < slots_.size(); ++i)
            slots_[i].process = std::move(last[i]);
        return total;
    }

private:
    static std::string read_file(std::string const& path) {
        std::ifstream in(path);
        std::stringstream s;
        s << in.rdbuf();
        return s.str();
    }

    struct slot_state {
        std::vector<std::string> journals;
        std::unique_ptr<worker_process> process;
    };
    std::string name_;
    std::string url_;
    scratch_dir const& dir_;
    std::vector<std::string> extra_;
    std::vector<slot_state> slots_;
};

// The checks m3 and m4 share, once every campaigner is done: the watch said that nobody leads
// at the end, then is told to exit; the history (tenures of every leader, those cut by a kill
// included) has no overlap and no term out of grant order; the watch's reports hold against
// the journals. Returns the figures of the watch.
std::string check_election(result& r, campaigners& c, worker_process& observer,
                           scratch_dir const& dir) {
    r.check(watch_settles(observer, election_ttl + 3s),
            "the watch did not report that nobody leads once every campaigner was done");
    observer.send("exit");
    r.check(observer.wait_exit(10s) == 0, "the observer failed");
    check_history(r, dir.file("history"));
    auto const report = colock::test::check_watch(c.campaigns(), watch_events(observer.lines()));
    r.check(report.ok(), fmt::format("the watch broke {} rules", report.violations));
    for (auto const& p : report.problems)
        r.failures.push_back("  " + p);
    r.check(report.leaders > 0, "the watch reported no leader");
    return fmt::format("watch: {} reports ({} of a leader, {} resynced); {} published changes, {} "
                       "not reported, each with a resync; {} terms of campaigns that never "
                       "learned they led",
                       report.events, report.leaders, report.resyncs, report.published,
                       report.missed_with_resync, report.unlearned_terms);
}

} // namespace

// m1. The leader SIGKILLed with the next candidate (another process) queued behind it: the
// candidate leads within the ttl + 100 ms of the kill (the dead leader's lease runs out by its
// ttl from its last renewal, before the kill; the queued candidate asks again when the lease
// it was told of ends), with a higher term. Several times, each new leader the next victim.
result election_killed_leader() {
    int const kills = opts.full ? 10 : 2;
    auto const bound = election_ttl + 100ms;
    result r{
        fmt::format("m1. election: the leader SIGKILLed with a candidate queued, {} times", kills)};
    redis_server server;
    scratch_dir dir;
    auto const start = std::chrono::steady_clock::now();
    std::mt19937 rng(opts.seed + 11);
    auto leader =
        std::make_unique<worker_process>(worker_args(lead_args("m1", dir), server.url(), "L0"));
    auto led = leader->wait_line("leading", 10s);
    r.check(led.has_value(), "L0 did not lead");
    if (!led)
        return r;
    ++r.acquisitions;
    std::vector<std::string> delays;
    std::int64_t worst_ns = 0;
    colock::test::history_writer history(dir.file("history"));
    for (int k = 0; k < kills; ++k) {
        auto const proc = fmt::format("L{}", k + 1);
        auto next =
            std::make_unique<worker_process>(worker_args(lead_args("m1", dir), server.url(), proc));
        auto const queued = wait_queue(server, queue_key("m1"), 1, 10s);
        r.check(queued.size() == 1, proc + " did not queue behind the leader");
        if (queued.size() != 1)
            return r;
        // Anywhere in the leader's renewal cycle.
        std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution(0, 300)(rng)));
        auto const kill_ns = steady_now_ns();
        leader->kill_process();
        ++r.faults;
        r.check(leader->wait_exit(10s) == sigkill_status, "the leader did not die by the kill");
        auto const dead_ns = steady_now_ns();
        // The dead leader's tenure, up to its death.
        colock::test::holding h;
        h.holder = fmt::format("pL{}", k);
        h.fence = numbers(*led).at(1);
        h.token = fmt::format("killed-L{}", k);
        h.acquired_ns = numbers(*led).at(0);
        h.released_ns = h.lease_end_ns = dead_ns;
        history.record(h);
        auto const next_led = next->wait_line("leading", bound + 5s);
        r.check(next_led.has_value(), proc + " never led");
        if (!next_led)
            return r;
        ++r.acquisitions;
        auto const delay = numbers(*next_led).at(0) - kill_ns;
        worst_ns = std::max(worst_ns, delay);
        delays.push_back(fmt::format("{:.0f}", ms(delay)));
        r.check(numbers(*next_led).at(1) > numbers(*led).at(1),
                fmt::format("{}'s term {} is not above the killed leader's {}", proc,
                            numbers(*next_led).at(1), numbers(*led).at(1)));
        leader = std::move(next);
        led = next_led;
    }
    r.check(worst_ns <= std::chrono::nanoseconds(bound).count(),
            fmt::format("{:.0f} ms from a kill to the next leader (bound: ttl + 100 ms = {} ms)",
                        ms(worst_ns), bound.count()));
    leader->send("resign");
    r.check(leader->wait_line("resigned", 5s) == "resigned 1", "the last leader could not resign");
    r.check(leader->wait_exit(10s) == 0, "the last leader failed");
    check_history(r, dir.file("history"));
    check_left_keys(r, server, 3s, "election");
    r.timed_from(start);
    r.figures = fmt::format("kill -> next candidate's co_campaign returned: {} ms (bound ttl {} "
                            "ms + 100 ms); terms increasing",
                            fmt::join(delays, "/"), election_ttl.count());
    return r;
}

// m2. The leader SIGSTOPped for 2.5 x its ttl while a candidate waits, then SIGCONTed: the
// candidate leads and writes the fenced store with its higher term; the resumed leader's first
// step finds owns() false (its lease ran out on its own clock while it slept) and its guard
// lost, and a write it sends anyway, with its older term, is refused by the store.
result election_stopped_leader() {
    result r{"m2. election: the leader SIGSTOPped for 2.5 x TTL, then SIGCONT"};
    plain_server env;
    worker_process a(worker_args(lead_args("m2", env.dir), env.server.url(), "A"));
    auto const a_led = a.wait_line("leading", 10s);
    r.check(a_led.has_value(), "A did not lead");
    if (!a_led)
        return r;
    worker_process b(worker_args(lead_args("m2", env.dir), env.server.url(), "B"));
    r.check(wait_queue(env.server, queue_key("m2"), 1, 10s).size() == 1, "B did not queue");
    std::this_thread::sleep_for(120ms); // a step or two of A's
    a.stop_process();
    auto const stopped_ns = steady_now_ns();
    ++r.faults;
    auto const b_led = b.wait_line("leading", 5s);
    r.check(b_led.has_value(), "B did not lead while A was stopped");
    if (!b_led)
        return r;
    b.send("write from-B");
    r.check(b.wait_line("write", 5s) == "write accepted", "B's write was refused");
    auto const resumed_ns = continue_after(a, stopped_ns, 2500ms);
    auto const a_lost = a.wait_line("lost", 5s);
    r.check(a_lost.has_value(), "A did not report its leadership lost after SIGCONT");
    // A's first step after the resume: it may come before or after the loss is reported.
    std::optional<std::vector<std::int64_t>> first_step;
    wait_until(
        2s,
        [&] {
            for (auto const& line : a.lines())
                if (line.starts_with("step ") && numbers(line).at(0) >= resumed_ns) {
                    first_step = numbers(line);
                    break;
                }
            return first_step.has_value();
        },
        20ms);
    r.check(first_step.has_value(), "A took no step after SIGCONT");
    if (first_step)
        // owns() reads the lease's deadline on the local clock: false whatever ran first
        // after the resume. lost() turns true when the loss is marked, which may come after.
        r.check(first_step->at(1) == 0,
                fmt::format("A's first step after SIGCONT found owns() {}", first_step->at(1)));
    // Counted from the resume: kill(SIGSTOP) may return before the process has stopped, so a
    // step may still run just after stopped_ns.
    std::size_t leading_steps_after = 0;
    for (auto const& line : a.lines())
        if (line.starts_with("step ") && numbers(line).at(0) >= resumed_ns &&
            numbers(line).at(1) == 1)
            ++leading_steps_after;
    r.check(leading_steps_after == 0,
            fmt::format("A stepped as leader {} times after it was resumed", leading_steps_after));
    r.check(numbers(*a_led).at(1) < numbers(*b_led).at(1),
            fmt::format("A's term {} is not below B's {}", numbers(*a_led).at(1),
                        numbers(*b_led).at(1)));
    a.send("write from-A");
    r.check(a.wait_line("write", 5s) == "write refused",
            "A's late write was not refused by the fenced store");
    let_go_in_turn(r, a, b, "resign", "resigned", "term", env.dir, a_lost.has_value());
    colock::test::fenced_store store(env.dir.file("store")); // for the figures
    check_left_keys(r, env.server, 3s, "election");
    r.timed_from(env.start);
    if (a_lost && first_step)
        r.figures = fmt::format(
            "B led {:.0f} ms after A stopped; after SIGCONT A's first step ({:.1f} ms) found "
            "owns() false (lost() {}), wait_lost at {:.1f} ms; A's term {} < B's {}; A's late "
            "write refused; store: {} accepted, {} refused",
            ms(numbers(*b_led).at(0) - stopped_ns), ms(first_step->at(0) - resumed_ns),
            first_step->at(2) == 1 ? "true" : "false", ms(numbers(*a_lost).at(0) - resumed_ns),
            numbers(*a_led).at(1), numbers(*b_led).at(1), store.accepted(), store.refused());
    return r;
}

// m3. Three processes campaign ten times each (the full run: thirty) on one election: hold
// 20-150 ms while writing the fenced store with their term, proclaim a new value in a third of
// their terms, then resign (release) or drop the leadership (resigned in the background).
// Meanwhile processes are SIGKILLed, two in three while leading and the rest while waiting
// (queued), and restarted at their next campaign. A watch in its own process reports every
// change. Checked: no two leaders with overlapping valid leases and terms increasing in grant
// order (the history, the killed leaders' tenures up to their death), the watch against the
// journals (check_watch), every campaign run, no key left.
result election_campaigns_with_kills() {
    std::int64_t const campaigns = opts.full ? 30 : 10;
    int const kills = opts.full ? 9 : 3;
    result r{fmt::format("m3. election: 3 procs x {} campaigns, random holds, proclaims and "
                         "resigns, {} SIGKILLs; a watch",
                         campaigns, kills)};
    redis_server server;
    scratch_dir dir;
    auto const start = std::chrono::steady_clock::now();
    worker_process observer(worker_args({"observe", "--name", "m3"}, server.url(), "obs"));
    r.check(observer.wait_line("change", 10s).has_value(), "the watch reported no first state");
    campaigners c("m3", server.url(), dir,
                  {"--campaigns", std::to_string(campaigns), "--ttl-ms",
                   std::to_string(election_ttl.count()), "--renew-ms", "300", "--hold-min-ms", "20",
                   "--hold-max-ms", "150", "--step-ms", "10", "--pause-max-ms", "30"});
    for (std::size_t s = 0; s < 3; ++s)
        c.start(s, 0);
    std::mt19937 rng(opts.seed + 13);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution(lo, hi)(rng); };
    std::vector<std::int64_t> leader_kills; // when
    int waiting_kills = 0;
    for (int k = 0; k < kills; ++k) {
        std::this_thread::sleep_for(milliseconds(pick(200, 700)));
        bool const leader = k % 3 != 2;
        // The first slot, from a random one, in the state wanted (leading, or campaigning
        // without a grant), within 3 s.
        std::optional<std::size_t> victim;
        auto const first = static_cast<std::size_t>(pick(0, 2));
        wait_until(
            3s,
            [&] {
                for (std::size_t i = 0; i < 3 && !victim; ++i) {
                    auto const s = (first + i) % 3;
                    if (c.process(s).wait_exit(0ms))
                        continue; // done with its campaigns
                    auto const kind = journal_last_kind(c.journal(s));
                    if (leader ? election_journal_leading(c.journal(s)) : kind == 'c')
                        victim = s;
                }
                return victim.has_value();
            },
            std::chrono::microseconds(500));
        if (!victim)
            continue; // the campaigns are over
        auto const kill_ns = steady_now_ns();
        c.kill(*victim, r);
        ++r.faults;
        if (leader)
            leader_kills.push_back(kill_ns);
        else
            ++waiting_kills;
        if (auto const next = c.started(*victim); next < campaigns)
            c.start(*victim, next);
    }
    auto total = c.collect_all(r, 120s);
    auto const watch = check_election(r, c, observer, dir);
    // Every campaign was run: each slot's journals start them all.
    for (std::size_t s = 0; s < 3; ++s)
        r.check(c.started(s) == campaigns,
                fmt::format("slot {} started {} campaigns of {}", s, c.started(s), campaigns));
    auto const grants = c.grants();
    r.acquisitions = grants.size();
    r.check(grants.size() >= static_cast<std::size_t>(campaigns),
            fmt::format("only {} terms granted", grants.size()));
    std::vector<std::string> handovers;
    for (auto const kill_ns : leader_kills) {
        auto const next = std::upper_bound(grants.begin(), grants.end(), kill_ns);
        if (next != grants.end())
            handovers.push_back(fmt::format("{:.0f}", ms(*next - kill_ns)));
    }
    r.check(!leader_kills.empty(), "no kill hit a leader");
    auto endings = c.endings();
    r.losses = endings["lost"];
    check_left_keys(r, server, 5s, "election");
    r.timed_from(start);
    // The killed processes' counts are not in the summaries: the terms' endings come from the
    // journals. A term lost or a write refused here is a process starved for longer than the
    // lease's slack (ttl - renew interval), not a fault the scenario injected.
    r.figures = fmt::format(
        "{} terms: {} resigned, {} dropped, {} lost, {} killed leading; {} leaders and {} "
        "waiting candidates killed, next leader {} ms after each leader's kill; store writes "
        "(processes not killed) {:.0f} accepted, {:.0f} refused; {}",
        grants.size(), endings["resign"], endings["drop"], endings["lost"], leader_kills.size(),
        leader_kills.size(), waiting_kills, fmt::join(handovers, "/"), total["writes"],
        total["refused"], watch);
    return r;
}

// m4. Three processes campaign through a fault proxy (latency, stalls, dropped connections,
// replies cut, black holes) for the run's length, the watch's process through it too. The
// lease (600 ms) is shorter than the longest faults and the holds (20-900 ms) are often longer
// than it: leases are lost, campaigns fail, resigns fail, the watch reconnects and resyncs.
// Checked: no two leaders with overlapping valid leases, terms increasing in grant order, the watch
// against the journals (a change missed only where it said resynced), no key left.
result election_proxy_faults() {
    auto const run = opts.full ? 30s : 8s;
    result r{"m4. election: 3 procs campaigning through random proxy faults; a watch through "
             "them too"};
    proxied_server env;
    auto const start = std::chrono::steady_clock::now();
    worker_process observer(
        worker_args({"observe", "--name", "m4", "--health-ms", "300"}, env.proxy.url(), "obs"));
    r.check(observer.wait_line("change", 10s).has_value(), "the watch reported no first state");
    campaigners c("m4", env.proxy.url(), env.dir,
                  {"--campaigns", "100000", "--ms", std::to_string(milliseconds(run).count()),
                   "--ttl-ms", std::to_string(faulted_ttl.count()), "--renew-ms", "150",
                   "--health-ms", "300", "--hold-min-ms", "20", "--hold-max-ms", "900", "--step-ms",
                   "10", "--pause-max-ms", "30"});
    for (std::size_t s = 0; s < 3; ++s)
        c.start(s, 0);
    std::mt19937 rng(opts.seed + 17);
    r.faults = inject_faults(env.proxy, start + run - 1500ms, rng, 1500ms);
    auto total = c.collect_all(r, run + 60s);
    auto const watch = check_election(r, c, observer, env.dir);
    auto const grants = c.grants();
    r.acquisitions = grants.size();
    r.check(grants.size() >= 5, fmt::format("only {} terms granted", grants.size()));
    auto endings = c.endings();
    r.losses = endings["lost"];
    check_left_keys(r, env.server, 5s, "election");
    r.timed_from(start);
    r.figures = fmt::format(
        "{} terms: {} resigned, {} dropped, {} lost ({:.0f} over when co_campaign returned); "
        "{:.0f} campaigns failed, {:.0f} resigns failed, {:.0f} proclaims ({:.0f} failed); store "
        "writes {:.0f} accepted, {:.0f} refused; {}; reconnects {:.0f}; {}",
        grants.size(), endings["resign"], endings["drop"], endings["lost"], total["over_at_return"],
        total["errors"], total["resign_errors"], total["proclaims"], total["proclaim_errors"],
        total["writes"], total["refused"], proxy_figures(env.proxy), total["reconnects"], watch);
    return r;
}

} // namespace colock::reliability
