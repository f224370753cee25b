// What lease retention costs another process: the wait of its co_lock for a name that a locker
// elsewhere keeps (lock_options::retain), next to its wait for a free name, in the same run. The
// kept lease goes back when the other process's attempt tells its locker ("q"), so the wait
// should be that message and a hand-off longer: a few round trips, not the retention.
#include "lock_contention.hpp"

#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace colock::bench::contention {
namespace {

struct retained_wait_result {
    latency_summary kept, free;
};

asio::awaitable<retained_wait_result> measure_retained_wait(deployment d, int samples,
                                                            colock::lock_options plain) {
    auto keeper = co_await lock_target::open(d, run_prefix());
    auto other = co_await lock_target::open(d, run_prefix());
    auto keep = plain;
    keep.retain = std::chrono::seconds{10};
    std::string const kept_name = "retained:kept", free_name = "retained:free";
    std::vector<double> kept_us, free_us;
    for (int i = 0; i < samples; ++i) {
        {
            auto g = co_await keeper.locker()->co_lock(kept_name, keep);
            co_await g.release(); // kept
        }
        co_await sleep_for(std::chrono::milliseconds{2}); // its wake channel is listened to
        auto const asked = steady::now();
        auto g = co_await other.locker()->co_lock(kept_name, plain);
        kept_us.push_back(micros(steady::now() - asked));
        co_await g.release();

        auto const asked_free = steady::now();
        auto f = co_await other.locker()->co_lock(free_name, plain);
        free_us.push_back(micros(steady::now() - asked_free));
        co_await f.release();
    }
    std::vector<std::string> keys;
    for (auto const& name : {kept_name, free_name})
        add_lock_keys(keys, fmt::format("{}{{{}}}", keeper.locker()->key_prefix(), name));
    co_await keeper.delete_keys(std::move(keys));
    keeper.close();
    other.close();
    co_return retained_wait_result{summarize(std::move(kept_us)), summarize(std::move(free_us))};
}

} // namespace

void run_retained_wait(asio::io_context& io, deployment const& d, options const& opts,
                       latency_summary const& ping) {
    constexpr int samples = 300;
    auto const r = run_on(io, measure_retained_wait(d, samples, peer_lock_options(opts)));
    auto const per_ping = [&](double us) { return ping.p50_us > 0 ? us / ping.p50_us : 0.0; };
    if (opts.json) {
        fmt::print("{{\"scenario\":\"retained_wait\",\"deployment\":\"{}\",\"samples\":{},"
                   "\"kept_p50_us\":{:.1f},\"kept_p99_us\":{:.1f},\"free_p50_us\":{:.1f},"
                   "\"free_p99_us\":{:.1f},\"added_p50_us\":{:.1f},\"ping_p50_us\":{:.1f},"
                   "\"added_p50_per_ping_p50\":{:.3f}}}\n",
                   d.name, samples, r.kept.p50_us, r.kept.p99_us, r.free.p50_us, r.free.p99_us,
                   r.kept.p50_us - r.free.p50_us, ping.p50_us,
                   per_ping(r.kept.p50_us - r.free.p50_us));
    } else {
        fmt::print("\n== retained wait: another process's co_lock of a name kept elsewhere "
                   "(retain 10 s), against a free name ({} each)\n",
                   samples);
        fmt::print("  kept name   p50 {:>8.1f} us   p99 {:>8.1f} us   ({:.2f} PING p50)\n",
                   r.kept.p50_us, r.kept.p99_us, per_ping(r.kept.p50_us));
        fmt::print("  free name   p50 {:>8.1f} us   p99 {:>8.1f} us   ({:.2f} PING p50)\n",
                   r.free.p50_us, r.free.p99_us, per_ping(r.free.p50_us));
        fmt::print("  added by the retention: {:.1f} us at p50 ({:.2f} PING p50)\n",
                   r.kept.p50_us - r.free.p50_us, per_ping(r.kept.p50_us - r.free.p50_us));
    }
    std::fflush(stdout);
}

} // namespace colock::bench::contention
