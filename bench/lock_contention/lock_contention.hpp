// What the units of lock_contention share: the options, the helpers every scenario uses (INFO
// deltas, latency summaries, opening a connection, the timed phases) and each scenario's entry
// point. The scenarios themselves are described in main.cpp.
#pragma once

#include "../bench_common.hpp"

#include <colock/colock.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace colock::bench::contention {

// After the measuring window every coroutine must finish within this; otherwise something hangs
// and the bench says so instead of hanging too.
inline constexpr auto drain_limit = std::chrono::seconds{20};

struct options : common_options {
    // Scenarios a, b and c.
    bool uncontended = true;
    bool hot_key = true;
    bool memory = true;
    double seconds = 3.0;
    std::size_t waiters = 16;
    std::int64_t hold_us = 0;
    std::size_t memory_waiters = 100000;
};

// -------------------------------------------------------------------- helpers (support.cpp)

/// `name:value` of an INFO section, as a number.
std::int64_t info_number(std::string_view info, std::string_view name);
/// The change of every counter from `before` to `after`; our own INFO calls left out.
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
    double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0;
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

/// Options for a cycle that is exactly acquire + release: no renewal.
colock::lock_options no_renewal();

// -------------------------------------------------------------------- the scenarios

/// a. uncontended_64_keys, with its limit (uncontended.cpp). Needs redis-benchmark.
void run_uncontended(asio::io_context& io, redis::config const& cfg, std::string const& program,
                     options const& opts);
/// b. hot_key_handoff (handoff.cpp).
void run_handoff(asio::io_context& io, redis::config const& cfg, options const& opts);
/// c. waiters_memory (memory.cpp). Returns false when the waiters did not all leave cleanly.
bool run_memory(asio::io_context& io, redis::config const& cfg, options const& opts);

} // namespace colock::bench::contention
