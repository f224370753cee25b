// What the scenarios of the reliability runner share: the run's settings, a scenario's result,
// scratch files, the counter file, parsing of the workers' lines, and the checks every scenario
// makes at its end (the history, the keys left in Redis).
#pragma once

#include "process.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/history.hpp>
#include <colock_test/redis_server.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace colock::reliability {

// The names every scenario says.
using namespace std::chrono_literals;
using colock::test::holding;
using colock::test::steady_now_ns;
using std::chrono::milliseconds;

struct settings {
    bool full = false;
    std::set<std::string> only;
    // --part K/N: every Nth scenario from the Kth (1-based), so that N processes run them all.
    std::size_t part = 1;
    std::size_t parts = 1;
    unsigned seed = 0;
};

extern settings opts;

// One scenario's line in the table, and whether its checks held.
struct result {
    std::string scenario;
    std::uint64_t acquisitions = 0;
    std::uint64_t faults = 0;
    std::size_t overlaps = 0;
    std::size_t leaked_keys = 0;
    std::uint64_t losses = 0;
    double seconds = 0;
    std::string figures; // what else was measured
    std::vector<std::string> failures;

    result() = default;
    explicit result(std::string name) : scenario(std::move(name)) {}

    void check(bool ok, std::string const& what) {
        if (!ok)
            failures.push_back(what);
    }
    // The scenario took from `start` to now.
    void timed_from(std::chrono::steady_clock::time_point start) {
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
};

// A temporary directory for a scenario's shared files, removed with everything in it.
class scratch_dir {
public:
    scratch_dir();
    ~scratch_dir();
    scratch_dir(scratch_dir const&) = delete;
    scratch_dir& operator=(scratch_dir const&) = delete;
    std::string file(std::string const& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

// The shared counter the contenders increment (worker.cpp, unguarded_counter): 8 bytes.
void make_counter(std::string const& path);
std::int64_t read_counter(std::string const& path);

// A server of its own, a scratch directory, and when they were ready: where a scenario that
// injects its own faults (a stop, a kill) runs its workers.
struct plain_server {
    colock::test::redis_server server;
    scratch_dir dir;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

// A server behind a fault proxy, and a scratch directory with the shared counter: where the
// contention scenarios under proxy faults run their workers.
struct proxied_server {
    proxied_server() { make_counter(dir.file("counter")); }

    colock::test::redis_server server;
    colock::test::fault_proxy proxy{server.port()};
    scratch_dir dir;
};

// "summary a=1 b=2" -> {a: 1, b: 2}
std::map<std::string, double> fields(std::string const& line);

// "acquired NS FENCE" -> the numbers after the first word.
std::vector<std::int64_t> numbers(std::string const& line);

// Keys under the lock prefix that would stay: a lock key of `names` still held or handed off
// ("H ..." or "R ..."), or any key without an expiry. A free lock key ("F <fence>") and the
// queue keys lapse by themselves (within a lease, and the queue's entry lifetime).
std::size_t lock_keys_left(colock::test::redis_server const& server,
                           std::vector<std::string> const& names);

// The library's bounds for a dead process (src/lock/store/lease_store.hpp): a hand-off is kept for
// the locker it went to for at most max_handoff_claim; a waiting locker asks again at least
// every queue_refresh_interval; a queue entry lapses queue_entry_ttl after its last refresh (the
// last key of a name to go once nobody waits). A dead process's waiting calls hold the others
// up until then at most.
inline constexpr std::chrono::milliseconds max_handoff_claim{1000};
inline constexpr std::chrono::milliseconds queue_refresh_interval{1000};
inline constexpr std::chrono::milliseconds queue_entry_ttl{3000};

// worker_process::wait_exit's status for a worker ended by SIGKILL.
inline constexpr int sigkill_status = 128 + 9;

inline std::int64_t ns(std::chrono::nanoseconds d) {
    return d.count();
}

// A stretch of a run (steady clock, ns) in which a failover excuses what replication cannot
// prevent: two holders, a fence given twice, a lost update.
struct window {
    std::int64_t begin_ns = 0;
    std::int64_t end_ns = 0;
    bool covers(std::int64_t from, std::int64_t to) const { return from < end_ns && to > begin_ns; }
};

inline bool in_some(std::vector<window> const& ws, std::int64_t from, std::int64_t to) {
    return std::any_of(ws.begin(), ws.end(), [&](window const& w) { return w.covers(from, to); });
}

// The tenures that could act (holding::could_act), by acquisition: the order fences must
// follow.
inline std::vector<holding> acting_in_acquisition_order(std::vector<holding> history) {
    std::erase_if(history, [](holding const& h) { return !h.could_act(); });
    std::sort(history.begin(), history.end(),
              [](holding const& a, holding const& b) { return a.acquired_ns < b.acquired_ns; });
    return history;
}

inline double ms(std::int64_t ns) {
    return static_cast<double>(ns) / 1e6;
}

// Injects a random fault through the proxy every 100-500 ms until `until`; returns how many.
// Each fault is short enough that the run makes progress, and some stalls outlast the lease.
std::uint64_t inject_faults(colock::test::fault_proxy& proxy,
                            std::chrono::steady_clock::time_point until, std::mt19937& rng,
                            std::chrono::milliseconds longest_stall);

// What the proxy did, for a scenario's figures: "proxy: N drops, N cuts, N stalls, N black-holed".
std::string proxy_figures(colock::test::fault_proxy const& proxy);

// The end of a run that began at `start`, from the workers' summed `total`: how long it took,
// the acquisitions and losses, and a failure when there were fewer than `least` acquisitions.
void tally(result& r, std::map<std::string, double>& total,
           std::chrono::steady_clock::time_point start, std::uint64_t least);

// The counter file's value, checked against the increments the workers made: no update lost.
std::int64_t check_counter(result& r, std::string const& counter_file,
                           std::map<std::string, double>& total);

// The keys on some servers once a run is over, polled every 100 ms until nothing but the locker
// records (`colock:locker:<id>`, which outlive their last lease by design) is left, or `until`
// passes. A node is a server and the name that the keys left on it are reported with.
struct keys_after_run {
    std::vector<std::string> left; // "<key> on <node's name>"
    std::size_t records = 0;
};

keys_after_run
settle_keys(std::vector<std::pair<colock::test::redis_server const*, std::string>> const& nodes,
            std::chrono::steady_clock::time_point until);

// The keys left on `server` once `patience` has passed, each listed in `r`'s failures and
// counted in its leaked keys; `what` ("semaphore") names the primitive whose keys they are.
void check_left_keys(result& r, colock::test::redis_server const& server,
                     std::chrono::milliseconds patience, std::string const& what);

// Follows a plan of faults until 2 s before the run's end: after each pause of `pause_ms()` ms,
// the next planned step when its time has come (step `i` at the share `at(i)` of `run` from
// `start`: `step(i)`), else a lighter fault (`between()`). Returns how many planned steps ran.
template <class Run, class At, class PauseMs, class Step, class Between>
std::size_t follow_plan(std::chrono::steady_clock::time_point start, Run run, std::size_t steps,
                        At at, PauseMs pause_ms, Step step, Between between) {
    std::size_t next = 0;
    auto const until = start + run - 2s;
    while (std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(pause_ms()));
        auto const elapsed = std::chrono::steady_clock::now() - start;
        if (next < steps && elapsed >= at(next) * run)
            step(next++);
        else
            between();
    }
    return next;
}

// Reads the history file and fails `r` on overlapping tenures (more than `allowed_overlaps`)
// and fences out of acquisition order.
void check_history(result& r, std::string const& history_file, std::size_t allowed_overlaps = 0);

// Leaves `w`, stopped (SIGSTOP) at `stopped_ns` (steady_now_ns), stopped until `stopped_for`
// after that, then continues it (SIGCONT). Returns when it was continued, as steady_now_ns.
std::int64_t continue_after(worker_process const& w, std::int64_t stopped_ns,
                            milliseconds stopped_for);

// The end of a scenario where A lost what it held and B holds it now: both let go (`command`;
// the reply starts with `reply` and says 0 for A, 1 for B) and exit; the fenced store keeps B's
// write and check_history() passes. Counts the two acquisitions, and A's loss when `a_lost`.
void let_go_in_turn(result& r, worker_process& a, worker_process& b, std::string const& command,
                    std::string const& reply, std::string const& held, scratch_dir const& dir,
                    bool a_lost);

// The arguments of a "hold" worker on lock `name` with a lease of `ttl_ms`, renewed every
// `renew_ms`, writing its history and its fenced store in `dir`.
std::vector<std::string> hold_args(std::string const& name, std::string const& ttl_ms,
                                   std::string const& renew_ms, scratch_dir const& dir);

// A worker's arguments with the server's url and the process's name added.
std::vector<std::string> worker_args(std::vector<std::string> args, std::string const& url,
                                     std::string const& proc);

// A worker's arguments with several servers' urls (comma-separated: a Redlock locker over
// them) and the process's name added.
std::vector<std::string> worker_args(std::vector<std::string> args,
                                     std::vector<std::string> const& urls, std::string const& proc);

// Waits for every contender and adds up their summaries.
std::map<std::string, double> collect(result& r, std::vector<std::unique_ptr<worker_process>>& ws,
                                      std::chrono::milliseconds limit);

// Waits until the Redis queue of waiting lockers `queue_key` has `n` entries; returns them.
std::vector<std::string> wait_queue(colock::test::redis_server const& server,
                                    std::string const& queue_key, std::size_t n,
                                    std::chrono::milliseconds limit);

// The scenarios in scenarios_kill.cpp: worker processes SIGKILLed at the worst moments.
result killed_in_cohort();
result killed_at_queue_head();
// scenarios_sets.cpp: lock sets under proxy faults, a worker SIGKILLed.
result lock_sets_with_kills();
// scenarios_sentinel.cpp: contention through Redis Sentinel across failovers.
result sentinel_failovers();
// scenarios_cluster.cpp: contention through Redis Cluster across slot migrations and failovers.
result cluster_migrations();
// scenarios_redlock.cpp: contention through Redlock over three primaries behind fault proxies,
// the primaries killed one at a time.
result redlock_primaries();
// scenarios_lease.cpp: the lease's edges (shortening renewals and extends, local hand-offs,
// a full server) under contention and faults, every key sampled for an expiry.
result lease_edges();
// scenarios_election.cpp: the election's leaders SIGKILLed, SIGSTOPped, and campaigning with
// kills or proxy faults, a watch checked against them.
result election_killed_leader();
result election_stopped_leader();
result election_campaigns_with_kills();
result election_proxy_faults();
// scenarios_shared.cpp: a semaphore and a read-write lock contended through proxy faults, a
// worker SIGKILLed while it holds.
result semaphore_with_kills();
result rw_lock_with_kills();
// scenarios_promises.cpp: no writer beside readers after a downgrade of unknown outcome, no
// co_with_lock result after a lost lease, FIFO across SIGKILLs of holders.
result promises_kept();

} // namespace colock::reliability
