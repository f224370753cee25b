// What the units of lock_contention share: the options, the helpers every scenario uses (INFO
// deltas, latency summaries, opening a connection, the timed phases) and each scenario's entry
// point. The scenarios themselves are described in main.cpp.
#pragma once

#include "../bench_common.hpp"

#include <colock/colock.hpp>
#include <colock_test/primary_set.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::bench::contention {

// After the measuring window every coroutine must finish within this; otherwise something hangs
// and the bench says so instead of hanging too.
inline constexpr auto drain_limit = std::chrono::seconds{20};

struct options : common_options {
    // Which scenarios run (--scenarios).
    bool uncontended = false, hot_key = false, memory = false; // a, b, c
    bool s1 = true, s1_letgo = true, s1_retain = true, s2 = true, s3 = true, s4 = true,
         sweep = false;

    double seconds = 3.0;       // the measuring window of every timed scenario
    double limit_seconds = 0.5; // each redis-benchmark run of the limit line
    // Scenarios b and c.
    std::size_t waiters = 16;
    std::int64_t hold_us = 0;
    std::size_t memory_waiters = 100000;
    // S1 to S4 and the sweep.
    bool tuned = false;            // retry.initial = 1 ms, as the peer harness's "tuned" mode
    std::size_t hot_waiters = 64;  // S3
    std::size_t processes = 4;     // S4, and the sweep's S4 points
    std::size_t proc_waiters = 16; // S4, per process
    std::size_t sweep_max = 256;   // the sweep's largest total of coroutines
    bool samples = false;          // every wait in the JSON, not only the histogram
    // S1 to S4 also over independent primaries (Redlock), next to the single server.
    bool redlock = false;
    std::size_t redlock_primaries = 3;

    // One S4 process, started by the run's own S4 (--s4-worker, not for people).
    bool s4_worker = false;
    std::string prefix;
    std::size_t proc_id = 0;
    std::vector<std::string> primary_urls; // a Redlock run's primaries (--primary-urls)

    std::string mode() const { return tuned ? "tuned" : "default"; }
};

// -------------------------------------------------------------------- helpers (support.cpp)

/// `name:value` of an INFO section, as a number.
std::int64_t info_number(std::string_view info, std::string_view name);
/// The change of every counter from `before` to `after`; our own INFO calls, and replicas'
/// REPLCONF, left out.
command_calls delta(command_calls const& before, command_calls const& after);
std::uint64_t total_calls(command_calls const& stats);
/// `{"evalsha":12,...}`
std::string calls_json(command_calls const& stats);
/// `evalsha 2.000, pttl 0.010` with every count divided by `per`.
std::string calls_text(command_calls const& stats, double per);

/// Resident set size of this process, in bytes.
std::int64_t resident_bytes();
/// CPU seconds (user + system) this process used so far.
double own_cpu_seconds();
/// CPU seconds (user + system) the server's main process used so far: INFO cpu.
asio::awaitable<double> server_cpu_seconds(redis::connection& conn);

/// How busy client and server were during a window: CPU seconds per wall second.
struct cpu_use {
    double client = 0, server = 0;
};

struct latency_summary {
    std::size_t samples = 0;
    double mean_us = 0, p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};
latency_summary summarize(std::vector<double> us);

double micros(steady::duration d);
asio::awaitable<void> sleep_for(steady::duration d);
/// A connection to `cfg`, connected; throws with the connection's own reason when it cannot.
asio::awaitable<std::shared_ptr<redis::connection>> open(redis::config cfg);
/// The keys of the lock whose key is `key`: the lock and its queue of waiting processes.
void add_lock_keys(std::vector<std::string>& keys, std::string const& key);
asio::awaitable<void> delete_keys(redis::connection& conn, std::vector<std::string> keys);
/// A prefix no other run shares.
std::string run_prefix();
/// PING round trips on `conn`, one at a time.
asio::awaitable<latency_summary> ping_rtt(redis::connection& conn, std::size_t count);

/// Warm-up, measuring window, stop, drain. Returns the window's length in seconds.
/// `cpu` gets the client's and the server's CPU use in the window (the INFO that reads the
/// server's is one more command on the busy connection, once at each end).
asio::awaitable<double> run_phases(std::shared_ptr<run_state> state,
                                   std::chrono::nanoseconds window, std::size_t workers,
                                   redis::connection& conn, cpu_use& cpu);
/// The same, with the server's CPU read through `stats` (summed over a cluster's primaries),
/// so that the connection under test carries no INFO.
asio::awaitable<double> run_phases(std::shared_ptr<run_state> state,
                                   std::chrono::nanoseconds window, std::size_t workers,
                                   node_stats& stats, cpu_use& cpu);

// -------------------------------------------------------------------- the locker under test

/// What a scenario locks with, in one process, on one deployment: the connections the locker
/// runs over (one, or one per Redlock primary), the locker over them, and INFO read from the
/// deployment's nodes on connections of their own (node_stats). The one place that knows how a
/// locker is made from a deployment (lock_target.cpp); the scenarios never ask which it is.
class lock_target {
public:
    /// Connects and makes the locker, keys under `prefix`: over one connection to d.cfg, or
    /// Redlock over one connection to each of d.nodes when d.redlock().
    static asio::awaitable<lock_target> open(deployment const& d, std::string prefix);

    std::shared_ptr<colock::locker> const& locker() const noexcept { return locker_; }
    /// The first connection: to d.cfg (Redlock: the first primary).
    redis::connection& first() const { return *conns_.front(); }
    node_stats& stats() noexcept { return stats_; }
    /// The locker's connections' reconnections so far, summed.
    std::uint64_t reconnects() const;
    /// DEL `keys` through every connection the locker writes to.
    asio::awaitable<void> delete_keys(std::vector<std::string> keys);
    void close();

private:
    lock_target() = default;

    std::vector<std::shared_ptr<redis::connection>> conns_;
    std::shared_ptr<colock::locker> locker_; // after conns_: goes first
    node_stats stats_;
};

/// The Redlock deployment over the servers at `urls` (independent primaries).
deployment redlock_deployment(std::vector<std::string> urls);
/// The same over the throwaway primaries of --redlock.
deployment redlock_deployment(colock::test::primary_set const& primaries);

/// Options for a cycle that is exactly acquire + release: no renewal.
colock::lock_options no_renewal();
/// The options S1 to S4 lock with, those of the peer harness's colock driver: the library's
/// defaults (renewal on) with a 10 s ttl; "tuned" retries after 1 ms instead of 50 ms.
colock::lock_options peer_lock_options(options const& opts);

asio::awaitable<std::string> script_load(redis::connection& conn, std::string_view source);
/// Deletes every key matching `pattern` (SCAN and UNLINK).
asio::awaitable<void> delete_matching(redis::connection& conn, std::string pattern);

/// How redis-benchmark loads the server: `-c clients -P pipeline -r random_keys`.
struct benchmark_load {
    std::size_t clients = 1;
    std::size_t pipeline = 1;
    std::size_t random_keys = 1000000;
    std::uint64_t calibration_requests = 2000;
};
/// The rate of `command` under `load`, in requests per second, with -n chosen from a short
/// calibration run so that the measured run takes about `seconds`.
double benchmark_rate(std::string const& program, redis::config const& cfg,
                      benchmark_load const& load, std::vector<std::string> const& command,
                      double seconds);

// -------------------------------------------------------------------- limit and ping lines

/// One lock cycle's worth of server work, SET NX PX then a compare-and-delete EVALSHA, as the
/// peer harness measures it. The cycle limit is 1 / (1/set + 1/evalsha).
struct limit_pair {
    std::size_t clients = 0, pipeline = 0;
    double set_per_s = 0, evalsha_per_s = 0;
    // The server's microseconds per SET and per compare-and-delete EVALSHA (INFO commandstats).
    double set_us = 0, evalsha_us = 0;
    double cycles_per_s() const { return 1.0 / (1.0 / set_per_s + 1.0 / evalsha_per_s); }
    /// The server's microseconds per cycle of the simplest lock.
    double server_us_per_cycle() const { return set_us + evalsha_us; }
};
struct limits {
    limit_pair single;    // -c 1 -P 1: one synchronous client's round trips
    limit_pair pipelined; // -c 50 -P 16: the server's ceiling
};
/// Measures and prints the "limit" line (limits.cpp).
limits run_limits(asio::io_context& io, redis::config const& cfg, std::string const& program,
                  options const& opts);
/// Measures and prints the "ping" line: PING round trips on an idle colock connection to the
/// deployment (on a cluster each PING goes to one primary).
latency_summary run_ping(asio::io_context& io, deployment const& d, options const& opts);

// -------------------------------------------------------------------- the scenarios

/// a. uncontended_64_keys, with its limit (uncontended.cpp). Needs redis-benchmark.
void run_uncontended(asio::io_context& io, redis::config const& cfg, std::string const& program,
                     options const& opts);
/// b. hot_key_handoff (handoff.cpp).
void run_handoff(asio::io_context& io, redis::config const& cfg, options const& opts);
/// c. waiters_memory (memory.cpp). Returns false when the waiters did not all leave cleanly.
bool run_memory(asio::io_context& io, redis::config const& cfg, options const& opts);

/// Another process's wait for a name a locker keeps (lock_options::retain), next to its wait
/// for a free name (retained_wait.cpp); `ping` measured on `d`.
void run_retained_wait(asio::io_context& io, deployment const& d, options const& opts,
                       latency_summary const& ping);

/// One scenario's rate and cost on one deployment: a row of the side-by-side table of --redlock.
struct side_figure {
    std::string shape;      // "S1", "S3", "S3 cohorts off", "S4"
    std::string deployment; // "single", "redlock", ...
    double cycles_per_s = 0;
    double calls_per_cycle = 0;      // every server call, summed over the deployment's nodes
    double lock_calls_per_cycle = 0; // the same without S4's counter GET and SET
};
/// The side-by-side table: each shape on each deployment next to the single server, with the
/// ratio deployment/single and the calls per cycle (redlock.cpp).
void report_side_by_side(std::vector<side_figure> const& figures, options const& opts);

/// S1 (1 coroutine) or S2 (64), each on its own name, next to the single server's
/// single-connection or pipelined limit (own_names.cpp); S1-letgo (one coroutine that lets its
/// guard go instead of awaiting release()) and S1-retain (a lease kept at unlock) by `end`: once
/// per deployment (the single
/// server, then with --cluster the cluster, with --redlock the primaries), with `pings[i]`
/// measured on `deployments[i]`. Returns one figure per deployment.
enum class cycle_end {
    unlock, // co_await release()
    let_go, // the guard's destructor
    retain, // co_await release() with lock_options::retain: the locker keeps the lease
};
std::vector<side_figure> run_own_names(asio::io_context& io,
                                       std::vector<deployment> const& deployments,
                                       options const& opts, std::size_t coroutines, cycle_end end,
                                       limits const& limit,
                                       std::vector<latency_summary> const& pings);

/// One process's share of a hot-name scenario (hot_name.cpp).
struct hot_share {
    std::vector<std::uint64_t> per_worker; // acquisitions in the window, per coroutine
    std::vector<double> wait_us;           // from wanting the lock to holding it, in the window
    std::uint64_t acquisitions = 0;        // in the window
    std::uint64_t total = 0;               // warm-up and drain included
    std::uint64_t overlaps = 0;            // a holder found another one inside
    std::uint64_t fence_regressions = 0;   // a fence not above this process's previous one
    std::uint64_t reconnects = 0;
    double seconds = 0;
    cpu_use cpu;
};

/// `workers` coroutines loop co_lock, critical section, unlock on the one name `name` with
/// `target`'s locker: warm-up, window, drain. The critical section counts overlaps and then
/// yields once (S3) or, with `counter`, reads and writes the Redis key `counter_key`
/// non-atomically (S4).
asio::awaitable<hot_share> run_hot_share(lock_target& target, redis::connection* counter,
                                         std::string counter_key, std::string name,
                                         std::size_t workers, std::chrono::nanoseconds window,
                                         colock::lock_options opt);

/// S3 or S4 over all processes.
struct hot_result {
    std::string scenario;
    std::string mode;
    std::string deployment;
    std::size_t cohort_limit = 0; // lock_options::cohort_limit of the run
    bool sweep = false;
    std::size_t processes = 1, workers_per_process = 0;
    std::size_t shares = 0; // processes added so far
    double seconds_sum = 0; // their windows
    std::uint64_t acquisitions = 0, total = 0, overlaps = 0, fence_regressions = 0;
    std::uint64_t reconnects = 0;
    std::uint64_t per_worker_min = 0, per_worker_max = 0;
    std::vector<double> wait_us;
    std::optional<std::int64_t> counter; // S4: the Redis counter afterwards
    command_calls calls;
    std::uint64_t section_calls = 0; // S4: the counter's GET and SET
    cpu_use cpu;                     // client: summed over the processes

    void add(hot_share const& share);
    /// The mean window over the processes.
    double seconds() const { return shares == 0 ? 0.0 : seconds_sum / static_cast<double>(shares); }
    bool ok() const;
    /// The row of the side-by-side table, as `shape`.
    side_figure figure(std::string shape) const;
};
void report_hot(hot_result const& r, options const& opts);

/// S3: `waiters` coroutines in this process on one name of `d`, with cohort_limit
/// `cohort_limit` (the library's default unless the run compares cohorts off).
hot_result run_hot_in_process(asio::io_context& io, deployment const& d, options const& opts,
                              std::size_t waiters, bool sweep, std::size_t cohort_limit);
/// S4: `processes` copies of this program with `per_process` coroutines each, on one name of
/// `d`, with the counter in the critical section (processes.cpp). `url` is the single
/// server's, for the processes (Redlock: they get the primaries' URLs, and the counter lives on
/// the first primary).
hot_result run_hot_processes(asio::io_context& io, deployment const& d, std::string const& url,
                             options const& opts, std::size_t processes, std::size_t per_process,
                             bool sweep);
/// The body of one S4 process (--s4-worker): prints its hot_share on stdout. Returns the exit
/// status.
int run_s4_worker(options const& opts);

} // namespace colock::bench::contention
