// S1 and S2 of the peer harness: coroutines that each loop co_lock + unlock on a name of their
// own, so nobody ever waits. S1 is one coroutine: its cycles/s sit next to the single-connection
// limit and its acquire latency next to a PING round trip. S2 is 64 coroutines sharing the one
// connection: its cycles/s sit next to the pipelined limit, the server's ceiling. S1-letgo is S1
// with the guard let go (its destructor) instead of an awaited release(): the release is handed
// to the connection at once, ahead of the next acquisition, so a cycle should cost one round
// trip (its cycle time sits next to the PING's). S1-retain is S1 with lock_options::retain: the
// locker keeps the lease at release(), and the next co_lock takes it with no round trip.
//
// With --cluster or --redlock each runs again in the same run, after the single server: on a
// throwaway Redis Cluster (3 primaries), where the names' hash tags ({own:i}) spread S2's 64 names
// over the primaries and the one connection routes each script by slot; and on independent
// primaries (Redlock), where every cycle goes to all of them. One column (JSON: one line,
// "deployment") per deployment, with the ratio deployment/single. Server calls and server CPU are
// summed over the primaries. The limits are the single server's.
#include "lock_contention.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::bench::contention {
namespace {

struct own_names_state : run_state {
    using run_state::run_state;
    std::vector<double> acquire_us, release_us; // cycles acquired in the window
};

asio::awaitable<void> own_name_worker(std::shared_ptr<colock::locker> locker,
                                      std::shared_ptr<own_names_state> state, std::string name,
                                      colock::lock_options opt, cycle_end end) {
    bool const let_go = end == cycle_end::let_go;
    while (state->current != run_state::phase::stop) {
        auto const start = steady::now();
        auto guard = co_await locker->co_lock(name, opt);
        auto const acquired = steady::now();
        bool const in_window = state->measuring();
        if (let_go) {
            guard = colock::lock_guard{}; // the release goes out now, unawaited
            ++state->total_ops;
            if (in_window) {
                ++state->measured_ops;
                state->acquire_us.push_back(micros(acquired - start));
            }
            continue;
        }
        if (!co_await guard.release()) {
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
    std::string deployment;
    std::size_t coroutines = 0;
    bool let_go = false; // S1-letgo: no release latency
    double seconds = 0;
    std::uint64_t measured = 0, total = 0;
    latency_summary acquire, release;
    command_calls calls;
    command_calls usec; // the server's microseconds per command (a script's include its calls)
    cpu_use cpu;
    std::uint64_t reconnects = 0;

    double per_s() const { return static_cast<double>(measured) / seconds; }
    double cycle_us() const { return measured == 0 ? 0.0 : 1e6 / per_s(); }
    /// The server's microseconds in the lock scripts per cycle: INFO commandstats' EVALSHA usec,
    /// which includes the commands the scripts run (those are counted again on their own).
    double script_us_per_cycle() const { return per_cycle(calls_of(usec, "evalsha")); }
    double per_cycle(std::uint64_t n) const {
        return total == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(total);
    }
};

asio::awaitable<own_names_result> measure_own_names(deployment d, std::chrono::nanoseconds window,
                                                    std::size_t coroutines, cycle_end end,
                                                    colock::lock_options opt) {
    bool const let_go = end == cycle_end::let_go;
    auto const ex = co_await asio::this_coro::executor;
    auto target = co_await lock_target::open(d, run_prefix());
    auto const& locker = target.locker();
    auto& stats = target.stats();

    own_names_result r;
    r.deployment = d.name;
    r.coroutines = coroutines;
    r.let_go = let_go;
    auto const before = co_await stats.commandstats();
    auto const usec_before = co_await stats.commandstats("usec");
    auto state = std::make_shared<own_names_state>(ex);
    state->running_workers = coroutines;
    for (std::size_t i = 0; i < coroutines; ++i) {
        auto name = fmt::format("own:{}", i);
        asio::co_spawn(ex,
                       run_worker(state, fmt::format("worker on {}", name),
                                  own_name_worker(locker, state, name, opt, end)),
                       asio::detached);
    }
    r.seconds = co_await run_phases(state, window, coroutines, stats, r.cpu);
    if (!state->failure.empty()) {
        target.close();
        throw std::runtime_error(state->failure);
    }
    r.calls = delta(before, co_await stats.commandstats());
    r.usec = delta(usec_before, co_await stats.commandstats("usec"));
    r.measured = state->measured_ops;
    r.total = state->total_ops;
    r.acquire = summarize(std::move(state->acquire_us));
    r.release = summarize(std::move(state->release_us));
    r.reconnects = target.reconnects();

    // One DEL per name: a name's keys share its hash tag, but on a cluster one request may not
    // span the names' slots.
    for (std::size_t i = 0; i < coroutines; ++i) {
        std::vector<std::string> keys;
        add_lock_keys(keys, fmt::format("{}{{own:{}}}", locker->key_prefix(), i));
        co_await target.delete_keys(std::move(keys));
    }
    target.close();
    co_return r;
}

void print_json(own_names_result const& r, options const& opts, limit_pair const& against,
                char const* scenario, char const* limit_name, latency_summary const& ping,
                std::optional<double> over_single) {
    auto const all = total_calls(r.calls);
    fmt::print(
        "{{\"scenario\":\"{}\",\"deployment\":\"{}\",\"mode\":\"{}\",\"coroutines\":{},"
        "\"seconds\":{:.3f},\"cycles\":{},\"cycles_per_s\":{:.1f},\"acquire_p50_us\":{:.1f},"
        "\"acquire_p99_us\":{:.1f},\"acquire_mean_us\":{:.1f},\"release_p50_us\":{:.1f},"
        "\"release_p99_us\":{:.1f},\"limit\":\"{}\",\"limit_deployment\":\"single\","
        "\"limit_cycles_per_s\":{:.1f},\"ratio\":{:.4f},{}\"ping_p50_us\":{:.1f},"
        "\"acquire_p50_per_ping_p50\":{:.3f},\"calls_per_cycle\":{:.4f},"
        "\"script_us_per_cycle\":{:.2f},\"limit_server_us_per_cycle\":{:.2f},"
        "\"script_us_over_limit\":{:.3f},\"calls\":{},"
        "\"total_cycles\":{},\"client_cpu\":{:.3f},\"server_cpu\":{:.3f},"
        "\"reconnects\":{},\"cycle_us\":{:.2f},\"cycle_per_ping_p50\":{:.3f}}}\n",
        scenario, r.deployment, opts.mode(), r.coroutines, r.seconds, r.measured, r.per_s(),
        r.acquire.p50_us, r.acquire.p99_us, r.acquire.mean_us, r.release.p50_us, r.release.p99_us,
        limit_name, against.cycles_per_s(), r.per_s() / against.cycles_per_s(),
        over_single ? fmt::format("\"{}_over_single\":{:.4f},", r.deployment, *over_single)
                    : std::string(),
        ping.p50_us, ping.p50_us > 0 ? r.acquire.p50_us / ping.p50_us : 0.0, r.per_cycle(all),
        r.script_us_per_cycle(), against.server_us_per_cycle(),
        against.server_us_per_cycle() > 0 ? r.script_us_per_cycle() / against.server_us_per_cycle()
                                          : 0.0,
        calls_json(r.calls), r.total, r.cpu.client, r.cpu.server, r.reconnects, r.cycle_us(),
        ping.p50_us > 0 ? r.cycle_us() / ping.p50_us : 0.0);
}

} // namespace

std::vector<side_figure> run_own_names(asio::io_context& io,
                                       std::vector<deployment> const& deployments,
                                       options const& opts, std::size_t coroutines, cycle_end end,
                                       limits const& limit,
                                       std::vector<latency_summary> const& pings) {
    auto opt = peer_lock_options(opts);
    if (end == cycle_end::retain)
        opt.retain = std::chrono::seconds{1};
    bool const let_go = end == cycle_end::let_go;
    std::vector<own_names_result> results;
    for (auto const& d : deployments)
        results.push_back(
            run_on(io, measure_own_names(d, window_of(opts.seconds), coroutines, end, opt)));
    bool const single = coroutines == 1;
    auto const scenario = let_go                     ? "S1-letgo"
                          : end == cycle_end::retain ? (single ? "S1-retain" : "S2-retain")
                          : single                   ? "S1"
                                                     : "S2";
    auto const& against = single ? limit.single : limit.pipelined;
    auto const limit_name = single ? "single" : "pipelined";
    // results[0] is the single server's.
    auto const over_single = [&](std::size_t i) -> std::optional<double> {
        if (i == 0 || results[0].per_s() <= 0)
            return std::nullopt;
        return results[i].per_s() / results[0].per_s();
    };
    std::vector<side_figure> figures;
    for (auto const& r : results) {
        auto const calls = r.per_cycle(total_calls(r.calls));
        figures.push_back({scenario, r.deployment, r.per_s(), calls, calls});
    }

    if (opts.json) {
        for (std::size_t i = 0; i < results.size(); ++i)
            print_json(results[i], opts, against, scenario, limit_name, pings.at(i),
                       over_single(i));
        std::fflush(stdout);
        return figures;
    }

    fmt::print("\n== {}: {} coroutine{} on own names, co_lock + {} (mode {})\n", scenario,
               coroutines, single ? "" : "s",
               let_go                     ? "let the guard go"
               : end == cycle_end::retain ? "unlock, lease kept for 1 s (lock_options::retain)"
                                          : "unlock",
               opts.mode());
    // One column per deployment, then one ratio over the single server's per other deployment.
    auto const row = [&](std::string_view label, auto value, int decimals, bool with_ratio) {
        std::string line = fmt::format("  {:<24}", label);
        for (std::size_t i = 0; i < results.size(); ++i)
            line += fmt::format(" {:>12.{}f}", static_cast<double>(value(i)), decimals);
        auto const first = static_cast<double>(value(0));
        for (std::size_t i = 1; with_ratio && i < results.size(); ++i)
            line += first > 0 ? fmt::format(" {:>14.3f}", static_cast<double>(value(i)) / first)
                              : fmt::format(" {:>14}", "-");
        fmt::print("{}\n", line);
    };
    std::string head = fmt::format("  {:<24}", "");
    for (auto const& r : results)
        head += fmt::format(" {:>12}", r.deployment);
    for (std::size_t i = 1; i < results.size(); ++i)
        head += fmt::format(" {:>14}", results[i].deployment + "/single");
    fmt::print("{}\n", head);
    row(
        "cycles/s", [&](std::size_t i) { return results[i].per_s(); }, 0, true);
    row(
        "cycles in window", [&](std::size_t i) { return results[i].measured; }, 0, false);
    row(
        fmt::format("/ {} limit", limit_name),
        [&](std::size_t i) { return results[i].per_s() / against.cycles_per_s(); }, 3, false);
    row(
        "acquire p50 us", [&](std::size_t i) { return results[i].acquire.p50_us; }, 1, true);
    row(
        "acquire p99 us", [&](std::size_t i) { return results[i].acquire.p99_us; }, 1, true);
    if (!let_go)
        row(
            "release p50 us", [&](std::size_t i) { return results[i].release.p50_us; }, 1, true);
    row(
        "PING p50 us", [&](std::size_t i) { return pings.at(i).p50_us; }, 1, true);
    // A cycle's round trips: about 2 for co_lock + unlock, 1 when the release is not awaited.
    row(
        "cycle us / PING p50",
        [&](std::size_t i) {
            return pings.at(i).p50_us > 0 ? results[i].cycle_us() / pings.at(i).p50_us : 0.0;
        },
        2, false);
    row(
        "server calls/cycle",
        [&](std::size_t i) { return results[i].per_cycle(total_calls(results[i].calls)); }, 3,
        false);
    row(
        "server us/cycle (EVALSHA)",
        [&](std::size_t i) { return results[i].script_us_per_cycle(); }, 2, true);
    row(
        fmt::format("/ {} limit's us", limit_name),
        [&](std::size_t i) {
            return results[i].script_us_per_cycle() / against.server_us_per_cycle();
        },
        3, false);
    row(
        "server CPU s/s", [&](std::size_t i) { return results[i].cpu.server; }, 2, false);
    row(
        "client CPU s/s", [&](std::size_t i) { return results[i].cpu.client; }, 2, false);
    fmt::print("  {} limit: {:.0f} cycles/s, server {:.2f} us/cycle (-c {} -P {}, single server)\n",
               limit_name, against.cycles_per_s(), against.server_us_per_cycle(), against.clients,
               against.pipeline);
    for (auto const& r : results) {
        fmt::print("  calls/cycle ({}): {}\n", r.deployment,
                   calls_text(r.calls, static_cast<double>(r.total)));
        if (r.reconnects != 0)
            fmt::print("  WARNING: {} reconnects during the {} run\n", r.reconnects, r.deployment);
    }
    std::fflush(stdout);
    return figures;
}

} // namespace colock::bench::contention
