// S1 and S2 of the peer harness: coroutines that each loop co_lock + unlock on a name of their
// own, so nobody ever waits. S1 is one coroutine: its cycles/s sit next to the single-connection
// limit and its acquire latency next to a PING round trip. S2 is 64 coroutines sharing the one
// connection: its cycles/s sit next to the pipelined limit, the server's ceiling.
#include "lock_contention.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace colock::bench::contention {
namespace {

struct own_names_state : run_state {
    using run_state::run_state;
    std::vector<double> acquire_us, release_us; // cycles acquired in the window
};

asio::awaitable<void> own_name_worker(std::shared_ptr<colock::locker> locker,
                                      std::shared_ptr<own_names_state> state, std::string name,
                                      colock::lock_options opt) {
    while (state->current != run_state::phase::stop) {
        auto const start = steady::now();
        auto guard = co_await locker->co_lock(name, opt);
        auto const acquired = steady::now();
        bool const in_window = state->measuring();
        if (!co_await guard.unlock()) {
            state->fail(fmt::format("unlock of {} found the lock no longer ours", name));
            break;
        }
        ++state->total_ops;
        if (in_window) {
            ++state->measured_ops;
            state->acquire_us.push_back(micros(acquired - start));
            state->release_us.push_back(micros(steady::now() - acquired));
        }
    }
}

struct own_names_result {
    std::size_t coroutines = 0;
    double seconds = 0;
    std::uint64_t measured = 0, total = 0;
    latency_summary acquire, release;
    command_calls calls;
    cpu_use cpu;
    std::uint64_t reconnects = 0;

    double per_s() const { return static_cast<double>(measured) / seconds; }
    double per_cycle(std::uint64_t n) const {
        return total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total);
    }
};

asio::awaitable<own_names_result> measure_own_names(redis::config cfg,
                                                    std::chrono::nanoseconds window,
                                                    std::size_t coroutines,
                                                    colock::lock_options opt) {
    auto const ex = co_await asio::this_coro::executor;
    auto conn = co_await open(cfg);
    auto locker = std::make_shared<colock::locker>(*conn, run_prefix());

    own_names_result r;
    r.coroutines = coroutines;
    auto const before = co_await read_commandstats(*conn);
    auto state = std::make_shared<own_names_state>(ex);
    state->running_workers = coroutines;
    for (std::size_t i = 0; i < coroutines; ++i) {
        auto name = fmt::format("own:{}", i);
        asio::co_spawn(ex,
                       run_worker(state, fmt::format("worker on {}", name),
                                  own_name_worker(locker, state, name, opt)),
                       asio::detached);
    }
    r.seconds = co_await run_phases(state, window, coroutines, *conn, r.cpu);
    if (!state->failure.empty()) {
        conn->close();
        throw std::runtime_error(state->failure);
    }
    r.calls = delta(before, co_await read_commandstats(*conn));
    r.measured = state->measured_ops;
    r.total = state->total_ops;
    r.acquire = summarize(std::move(state->acquire_us));
    r.release = summarize(std::move(state->release_us));
    r.reconnects = conn->reconnect_count();

    std::vector<std::string> keys;
    for (std::size_t i = 0; i < coroutines; ++i)
        add_lock_keys(keys, fmt::format("{}{{own:{}}}", locker->key_prefix(), i));
    co_await delete_keys(*conn, keys);
    conn->close();
    co_return r;
}

} // namespace

void run_own_names(asio::io_context& io, redis::config const& cfg, options const& opts,
                   std::size_t coroutines, limits const& limit, latency_summary const& ping) {
    auto const r = run_on(
        io, measure_own_names(cfg, window_of(opts.seconds), coroutines, peer_lock_options(opts)));
    bool const single = coroutines == 1;
    auto const scenario = single ? "S1" : "S2";
    auto const& against = single ? limit.single : limit.pipelined;
    auto const limit_name = single ? "single" : "pipelined";
    auto const ratio = r.per_s() / against.cycles_per_s();
    auto const all = total_calls(r.calls);
    if (opts.json) {
        fmt::print("{{\"scenario\":\"{}\",\"mode\":\"{}\",\"coroutines\":{},\"seconds\":{:.3f},"
                   "\"cycles\":{},\"cycles_per_s\":{:.1f},\"acquire_p50_us\":{:.1f},"
                   "\"acquire_p99_us\":{:.1f},\"acquire_mean_us\":{:.1f},"
                   "\"release_p50_us\":{:.1f},\"release_p99_us\":{:.1f},\"limit\":\"{}\","
                   "\"limit_cycles_per_s\":{:.1f},\"ratio\":{:.4f},\"ping_p50_us\":{:.1f},"
                   "\"acquire_p50_per_ping_p50\":{:.3f},\"calls_per_cycle\":{:.4f},"
                   "\"calls\":{},\"total_cycles\":{},\"client_cpu\":{:.3f},\"server_cpu\":{:.3f},"
                   "\"reconnects\":{}}}\n",
                   scenario, opts.mode(), r.coroutines, r.seconds, r.measured, r.per_s(),
                   r.acquire.p50_us, r.acquire.p99_us, r.acquire.mean_us, r.release.p50_us,
                   r.release.p99_us, limit_name, against.cycles_per_s(), ratio, ping.p50_us,
                   ping.p50_us > 0 ? r.acquire.p50_us / ping.p50_us : 0.0, r.per_cycle(all),
                   calls_json(r.calls), r.total, r.cpu.client, r.cpu.server, r.reconnects);
    } else {
        fmt::print("\n== {}: {} coroutine{} on own names, co_lock + unlock (mode {})\n", scenario,
                   r.coroutines, single ? "" : "s", opts.mode());
        fmt::print("  cycles/s            {:>12.0f}   ({} cycles in {:.2f} s)\n", r.per_s(),
                   r.measured, r.seconds);
        fmt::print("  {:<9} limit     {:>12.0f}   cycles/s (-c {} -P {}); ratio {:.3f}\n",
                   limit_name, against.cycles_per_s(), against.clients, against.pipeline, ratio);
        fmt::print("  acquire             p50 {:.1f} us, p99 {:.1f} us; release p50 {:.1f} us; "
                   "PING p50 {:.1f} us\n",
                   r.acquire.p50_us, r.acquire.p99_us, r.release.p50_us, ping.p50_us);
        fmt::print("  server calls/cycle  {:>12.3f}   ({})\n", r.per_cycle(all),
                   calls_text(r.calls, static_cast<double>(r.total)));
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the run\n", r.reconnects);
    }
    std::fflush(stdout);
}

} // namespace colock::bench::contention
