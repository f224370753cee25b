// Scenario b, hot_key_handoff: K coroutines loop co_lock + unlock on ONE name. Hand-off latency
// (from a holder's release() call to the next holder's co_lock completion) next to a plain PING's
// round trip, and the commands each acquisition costs (wake-ups, not polling).
#include "lock_contention.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {
namespace {

struct handoff_state : run_state {
    using run_state::run_state;
    std::optional<steady::time_point> unlock_started; // by the holder that is letting go
    std::vector<double> handoff_us;                   // measured hand-offs
    std::vector<double> unlock_us;                    // measured release() calls
    std::vector<std::uint64_t> per_worker;            // acquisitions in the window
    std::int64_t last_fence = 0;
};

asio::awaitable<void> hot_worker(std::shared_ptr<colock::locker> locker,
                                 std::shared_ptr<handoff_state> state, std::string name,
                                 std::size_t id, std::chrono::microseconds hold) {
    auto const opt = no_renewal();
    asio::steady_timer hold_timer(co_await asio::this_coro::executor);
    while (state->current != run_state::phase::stop) {
        auto guard = co_await locker->co_lock(name, opt);
        auto const acquired = steady::now();
        if (state->unlock_started) {
            if (state->measuring())
                state->handoff_us.push_back(micros(acquired - *state->unlock_started));
            state->unlock_started.reset();
        }
        if (guard.fence() <= state->last_fence) {
            state->fail(fmt::format("fence went from {} to {}", state->last_fence, guard.fence()));
            break;
        }
        state->last_fence = guard.fence();
        if (state->measuring())
            ++state->per_worker[id];
        if (hold.count() > 0) {
            hold_timer.expires_after(hold);
            co_await hold_timer.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        auto const unlock_started = steady::now();
        state->unlock_started = unlock_started;
        if (!co_await guard.release()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        if (state->measuring())
            state->unlock_us.push_back(micros(steady::now() - unlock_started));
        state->completed();
    }
}

struct handoff_result {
    std::size_t waiters = 0;
    std::int64_t hold_us = 0;
    std::uint64_t measured = 0;
    double seconds = 0;
    std::uint64_t total = 0;
    latency_summary handoff;
    latency_summary unlock; // the release's own round trip, for comparison
    latency_summary ping;
    command_calls calls;
    std::uint64_t min_per_worker = 0, max_per_worker = 0;
    cpu_use cpu;
    std::uint64_t reconnects = 0;

    double per_s() const { return static_cast<double>(measured) / seconds; }
    double per_acquisition(std::uint64_t n) const {
        return total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total);
    }
};

asio::awaitable<handoff_result> measure_handoff(redis::config cfg, std::chrono::nanoseconds window,
                                                std::size_t waiters, std::int64_t hold_us) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());
    std::string const name = "hot";

    // The plain round trip on this connection, idle, for comparison.
    handoff_result r;
    r.waiters = waiters;
    r.hold_us = hold_us;
    co_await ping_rtt(*conn, 200); // warm
    r.ping = co_await ping_rtt(*conn, 2000);

    auto const before = co_await read_commandstats(*conn);
    auto state = std::make_shared<handoff_state>(ex);
    state->per_worker.assign(waiters, 0);
    state->running_workers = waiters;
    for (std::size_t i = 0; i < waiters; ++i)
        asio::co_spawn(ex,
                       bench::run_worker(
                           state, fmt::format("worker {}", i),
                           hot_worker(locker, state, name, i, std::chrono::microseconds{hold_us})),
                       asio::detached);
    r.seconds = co_await run_phases(state, window, waiters, *conn, r.cpu);
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }
    auto const after = co_await read_commandstats(*conn);

    r.measured = state->measured_ops;
    r.total = state->total_ops;
    r.handoff = summarize(std::move(state->handoff_us));
    r.unlock = summarize(std::move(state->unlock_us));
    r.calls = delta(before, after);
    r.min_per_worker = *std::min_element(state->per_worker.begin(), state->per_worker.end());
    r.max_per_worker = *std::max_element(state->per_worker.begin(), state->per_worker.end());
    r.reconnects = conn->reconnect_count();

    std::vector<std::string> keys;
    add_lock_keys(keys, fmt::format("{}{{{}}}", locker->key_prefix(), name));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

void report_handoff(handoff_result const& r, bool json) {
    auto const per = [&](std::string_view c) { return r.per_acquisition(calls_of(r.calls, c)); };
    if (json) {
        fmt::print("{{\"scenario\":\"hot_key_handoff\",\"waiters\":{},\"hold_us\":{},"
                   "\"seconds\":{:.3f},\"acquisitions\":{},\"acquisitions_per_s\":{:.1f},"
                   "\"handoff_mean_us\":{:.1f},\"handoff_p50_us\":{:.1f},"
                   "\"handoff_p99_us\":{:.1f},\"handoff_max_us\":{:.1f},\"handoff_samples\":{},"
                   "\"unlock_p50_us\":{:.1f},\"ping_mean_us\":{:.1f},\"ping_p50_us\":{:.1f},\"ping_"
                   "p99_us\":{:.1f},"
                   "\"evalsha_per_acquisition\":{:.4f},\"failed_attempts_per_acquisition\":{:.4f},"
                   "\"subscribe_per_acquisition\":{:.4f},"
                   "\"unsubscribe_per_acquisition\":{:.4f},\"calls\":{},\"total_acquisitions\":{},"
                   "\"min_per_waiter\":{},\"max_per_waiter\":{},\"client_cpu\":{:.3f},"
                   "\"server_cpu\":{:.3f},\"reconnects\":{}}}\n",
                   r.waiters, r.hold_us, r.seconds, r.measured, r.per_s(), r.handoff.mean_us,
                   r.handoff.p50_us, r.handoff.p99_us, r.handoff.max_us, r.handoff.samples,
                   r.unlock.p50_us, r.ping.mean_us, r.ping.p50_us, r.ping.p99_us, per("evalsha"),
                   per("pttl"), per("subscribe"), per("unsubscribe"), calls_json(r.calls), r.total,
                   r.min_per_worker, r.max_per_worker, r.cpu.client, r.cpu.server, r.reconnects);
    } else {
        fmt::print("\n== b. hot_key_handoff: {} coroutines on one name, hold {} us\n", r.waiters,
                   r.hold_us);
        fmt::print("  acquisitions/s      {:>12.0f}   ({} in {:.2f} s; per waiter {} .. {})\n",
                   r.per_s(), r.measured, r.seconds, r.min_per_worker, r.max_per_worker);
        fmt::print("  hand-off            mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us, max {:.1f} "
                   "us   (release() call -> next co_lock done)\n",
                   r.handoff.mean_us, r.handoff.p50_us, r.handoff.p99_us, r.handoff.max_us);
        fmt::print("  release() itself     mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us\n",
                   r.unlock.mean_us, r.unlock.p50_us, r.unlock.p99_us);
        fmt::print("  PING round trip     mean {:.1f} us, p50 {:.1f} us, p99 {:.1f} us   (same "
                   "connection, idle)\n",
                   r.ping.mean_us, r.ping.p50_us, r.ping.p99_us);
        fmt::print("  hand-off / PING     {:>12.2f}   (p50 / p50)\n",
                   r.ping.p50_us > 0 ? r.handoff.p50_us / r.ping.p50_us : 0.0);
        fmt::print("  per acquisition     EVALSHA {:.3f}, failed attempts (PTTL) {:.3f}, "
                   "SUBSCRIBE {:.4f}, UNSUBSCRIBE {:.4f}\n",
                   per("evalsha"), per("pttl"), per("subscribe"), per("unsubscribe"));
        fmt::print("  per acquisition: {}\n", calls_text(r.calls, static_cast<double>(r.total)));
        fmt::print("  CPU busy            client {:.0f} %, server {:.0f} % of one core\n",
                   100 * r.cpu.client, 100 * r.cpu.server);
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

} // namespace

void run_handoff(asio::io_context& io, redis::config const& cfg, options const& opts) {
    auto const r =
        run_on(io, measure_handoff(cfg, window_of(opts.seconds), opts.waiters, opts.hold_us));
    report_handoff(r, opts.json);
}

} // namespace colock::bench::contention
