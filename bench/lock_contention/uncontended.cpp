// Scenario a, uncontended_64_keys: 64 coroutines on 64 names loop co_lock + unlock (no
// renewal), next to the server's limit for the same two scripts (redis-benchmark -c 1 -P 16
// EVALSHA acquire | release), with the commands one cycle costs from INFO commandstats.
#include "lock_contention.hpp"

#include "lock/store/lock_arguments.hpp"
#include "lock/store/lock_scripts.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {
namespace {

constexpr std::size_t uncontended_keys = 64;
constexpr std::size_t limit_pipeline = 16;

// The lock scripts exactly as src/lock/store/single_connection_store.cpp sends them: the server's
// limit is measured for the very same Lua. The bench checks that the server ends up with no
// other copy of them (see same_scripts below).
using colock::detail::acquire_source;
using colock::detail::release_source;

// -------------------------------------------------------------------- a. uncontended_64_keys

asio::awaitable<void> cycle_worker(std::shared_ptr<colock::locker> locker,
                                   std::shared_ptr<run_state> state, std::string name) {
    auto const opt = no_renewal();
    while (state->current != run_state::phase::stop) {
        auto guard = co_await locker->co_lock(name, opt);
        if (!co_await guard.release()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        state->completed();
    }
}

struct uncontended_result {
    std::uint64_t measured_cycles = 0;
    double seconds = 0;
    std::uint64_t total_cycles = 0;
    command_calls calls; // server-side delta over all cycles
    std::uint64_t reconnects = 0;
    std::string acquire_sha, release_sha;
    bool same_scripts = true; // the library ran the scripts we measure the limit of
    double acquire_rps = 0, release_rps = 0;
    cpu_use cpu;

    double cycles_per_s() const { return static_cast<double>(measured_cycles) / seconds; }
    double limit() const { return 1.0 / (1.0 / acquire_rps + 1.0 / release_rps); }
    double ratio() const { return cycles_per_s() / limit(); }
    double per_cycle(std::uint64_t n) const {
        return total_cycles == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total_cycles);
    }
};

asio::awaitable<uncontended_result> measure_uncontended(redis::config cfg,
                                                        std::chrono::nanoseconds window) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());

    uncontended_result r;
    // Loaded before the run: if the library's text differed from ours, the server would end up
    // with more cached scripts than these two.
    auto const scripts_before =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");
    r.acquire_sha = co_await script_load(*conn, acquire_source);
    r.release_sha = co_await script_load(*conn, release_source);
    auto const scripts_loaded =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");

    auto const before = co_await read_commandstats(*conn);
    auto state = std::make_shared<run_state>(ex);
    state->running_workers = uncontended_keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i) {
        auto name = fmt::format("key:{}", i);
        asio::co_spawn(ex,
                       bench::run_worker(state, fmt::format("worker on {}", name),
                                         cycle_worker(locker, state, name)),
                       asio::detached);
    }
    r.seconds = co_await run_phases(state, window, uncontended_keys, *conn, r.cpu);
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }
    auto const after = co_await read_commandstats(*conn);
    auto const scripts_after =
        info_number(co_await info_section(*conn, "memory"), "number_of_cached_scripts");
    r.same_scripts = scripts_after == scripts_loaded &&
                     scripts_loaded - scripts_before <= 2; // <2: already cached before

    r.measured_cycles = state->measured_ops;
    r.total_cycles = state->total_ops;
    r.calls = delta(before, after);
    r.reconnects = conn->reconnect_count();

    std::vector<std::string> keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i)
        add_lock_keys(keys, fmt::format("{}{{key:{}}}", locker->key_prefix(), i));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

// redis-benchmark writes __rand_int__ as 12 zero-padded digits.
asio::awaitable<int> delete_limit_keys(redis::config cfg) {
    auto conn = co_await open(cfg);
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < uncontended_keys; ++i)
        add_lock_keys(keys, fmt::format("colock:bench:limit:{{{:012}}}", i));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return 0;
}

void measure_script_limit(std::string const& program, redis::config const& cfg,
                          uncontended_result& r, double seconds) {
    // The arguments the locker sends (lock_arguments.hpp): the lock and its queue keys, then for
    // acquire the holder, ttl and queueing ("0": never, as co_try_lock) with the queue entry's
    // lifetime and the claim of a hand-off it may make; for release (with no value the grant
    // wrote: redis-benchmark cannot carry the acquire's fence over) the free value, the claim and
    // the token.
    std::string const key = "colock:bench:limit:{__rand_int__}";
    std::string const token = "0123456789abcdef0123456789abcdef";
    auto const acquire_args = colock::detail::acquire_arguments(
        "bench", token, 1700000000000, std::chrono::milliseconds(30000),
        colock::detail::queueing::never, std::chrono::milliseconds(3000),
        std::chrono::milliseconds(1000));
    auto const release_args = colock::detail::release_arguments(
        colock::detail::release_kind::hand_on, token, std::chrono::milliseconds(1000), 0);
    std::vector<std::string> acquire = {"EVALSHA", r.acquire_sha, "3",
                                        key,       key + ":q",    key + ":qd"};
    acquire.insert(acquire.end(), acquire_args.begin(), acquire_args.end());
    std::vector<std::string> release = {"EVALSHA", r.release_sha, "3",
                                        key,       key + ":q",    key + ":qd"};
    release.insert(release.end(), release_args.begin(), release_args.end());
    benchmark_load const load{.clients = 1,
                              .pipeline = limit_pipeline,
                              .random_keys = uncontended_keys,
                              .calibration_requests = 20000};
    r.acquire_rps = benchmark_rate(program, cfg, load, acquire, seconds / 2);
    r.release_rps = benchmark_rate(program, cfg, load, release, seconds / 2);
}

void report_uncontended(uncontended_result const& r, bool json) {
    auto const evalsha = calls_of(r.calls, "evalsha");
    auto const all = total_calls(r.calls);
    if (json) {
        fmt::print("{{\"scenario\":\"uncontended_64_keys\",\"coroutines\":{},\"seconds\":{:.3f},"
                   "\"cycles\":{},\"cycles_per_s\":{:.1f},\"limit_cycles_per_s\":{:.1f},"
                   "\"limit_acquire_per_s\":{:.1f},\"limit_release_per_s\":{:.1f},"
                   "\"ratio\":{:.4f},\"evalsha_per_cycle\":{:.4f},\"all_calls_per_cycle\":{:.4f},"
                   "\"calls\":{},\"total_cycles\":{},\"client_cpu\":{:.3f},\"server_cpu\":{:.3f},"
                   "\"same_scripts\":{},\"reconnects\":{}}}\n",
                   uncontended_keys, r.seconds, r.measured_cycles, r.cycles_per_s(), r.limit(),
                   r.acquire_rps, r.release_rps, r.ratio(), r.per_cycle(evalsha), r.per_cycle(all),
                   calls_json(r.calls), r.total_cycles, r.cpu.client, r.cpu.server, r.same_scripts,
                   r.reconnects);
    } else {
        fmt::print("\n== a. uncontended_64_keys: {} coroutines, {} names, co_lock + unlock "
                   "(auto_renew off)\n",
                   uncontended_keys, uncontended_keys);
        fmt::print("  cycles/s            {:>12.0f}   ({} cycles in {:.2f} s)\n", r.cycles_per_s(),
                   r.measured_cycles, r.seconds);
        fmt::print("  server limit        {:>12.0f}   cycles/s = 1 / (1/{:.0f} + 1/{:.0f}), "
                   "redis-benchmark -c 1 -P {} EVALSHA acquire | release\n",
                   r.limit(), r.acquire_rps, r.release_rps, limit_pipeline);
        fmt::print("  ratio               {:>12.3f}   (target >= 0.8)\n", r.ratio());
        fmt::print("  EVALSHA per cycle   {:>12.3f}   (target <= 2)\n", r.per_cycle(evalsha));
        fmt::print("  all calls per cycle {:>12.3f}   (Redis also counts the commands a script "
                   "runs)\n",
                   r.per_cycle(all));
        fmt::print("  per cycle: {}\n", calls_text(r.calls, static_cast<double>(r.total_cycles)));
        fmt::print("  CPU busy            client {:.0f} %, server {:.0f} % of one core\n",
                   100 * r.cpu.client, 100 * r.cpu.server);
        if (!r.same_scripts)
            fmt::print("  WARNING: the server cached other scripts than the two measured: the "
                       "bench's copy of the Lua differs from the library's\n");
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

} // namespace

void run_uncontended(asio::io_context& io, redis::config const& cfg, std::string const& program,
                     options const& opts) {
    auto r = run_on(io, measure_uncontended(cfg, window_of(opts.seconds)));
    measure_script_limit(program, cfg, r, opts.seconds);
    run_on(io, delete_limit_keys(cfg));
    report_uncontended(r, opts.json);
}

} // namespace colock::bench::contention
