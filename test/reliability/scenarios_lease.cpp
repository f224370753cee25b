// Scenario l: the lease's edges under contention. Two processes of six coroutines contend for one
// name with cohort limit 1 (so the lock moves between the processes, through the queue and the
// release script's hand-off, as often as it can); every other coroutine takes a lease a third
// as long, so local hand-offs pass a long lease to a holder that renews it shorter; holders now
// and then extend to half their ttl and give up waiting after 2 ms. Meanwhile the proxy injects
// faults at random, the server is full (maxmemory 1, noeviction) for spells of 300 ms, and a
// sampler reads every key under the prefix for one without an expiry, all along the run.
//
// Checked: no overlap and no fence out of order; no lost update; no key without an expiry at
// any sample, nor at the end; no lock left held.
#include "runner.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

namespace {

using colock::test::fault_proxy;
using colock::test::redis_server;

// Every key under the prefix that has no expiry, read in one step.
constexpr char const* keys_without_expiry = R"lua(
local out = {}
for _, k in ipairs(redis.call('KEYS', 'colock:*')) do
  if redis.call('PTTL', k) == -1 then out[#out + 1] = k end
end
return out
)lua";

struct expiry_sampler {
    std::uint64_t samples = 0;
    std::uint64_t failures = 0;
    std::set<std::string> offenders; // keys seen without an expiry
};

} // namespace

result lease_edges() {
    result r{"l. 2 procs x 6 coroutines, cohort limit 1, leases 1500/450 ms, shortening extends, "
             "proxy faults, full-server spells; every key sampled for an expiry"};
    auto const run = opts.full ? 30s : 8s;
    proxied_server env;
    std::vector<std::unique_ptr<worker_process>> ws;
    auto const start = std::chrono::steady_clock::now();
    for (int p = 0; p < 2; ++p)
        ws.push_back(
            std::make_unique<worker_process>(worker_args({"contend",
                                                          "--name",
                                                          "l",
                                                          "--coroutines",
                                                          "6",
                                                          "--ms",
                                                          std::to_string(milliseconds(run).count()),
                                                          "--ttl-ms",
                                                          "1500",
                                                          "--renew-ms",
                                                          "500",
                                                          "--short-ttl-ms",
                                                          "450",
                                                          "--extend-shorter",
                                                          "1",
                                                          "--cohort-limit",
                                                          "1",
                                                          "--hold-us",
                                                          "500",
                                                          "--health-ms",
                                                          "300",
                                                          "--counter",
                                                          env.dir.file("counter"),
                                                          "--history",
                                                          env.dir.file("history")},
                                                         env.proxy.url(), std::to_string(p))));

    std::atomic<bool> stop{false};
    expiry_sampler sampled;
    std::uint64_t full_spells = 0;
    std::thread sampler([&] {
        while (!stop) {
            try {
                std::istringstream keys(env.server.cli({"EVAL", keys_without_expiry, "0"}));
                for (std::string key; std::getline(keys, key);)
                    if (!key.empty())
                        sampled.offenders.insert(key);
                ++sampled.samples;
            } catch (std::exception const&) {
                ++sampled.failures; // counted: too many leave too few samples
            }
            std::this_thread::sleep_for(20ms);
        }
    });
    std::thread full_server([&] {
        auto const until = start + run - 1000ms;
        while (std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(1200ms);
            env.server.cli({"CONFIG", "SET", "maxmemory", "1"});
            std::this_thread::sleep_for(300ms);
            env.server.cli({"CONFIG", "SET", "maxmemory", "0"});
            ++full_spells;
        }
    });
    std::mt19937 rng(opts.seed);
    r.faults = inject_faults(env.proxy, start + run - 1500ms, rng, 600ms);
    full_server.join();
    auto total = collect(r, ws, run + 60s);
    stop = true;
    sampler.join();
    r.faults += full_spells;
    tally(r, total, start, opts.full ? 300u : 60u);
    auto const counter = check_counter(r, env.dir.file("counter"), total);
    r.check(total["extends"] > 0, "no shortening extend was sent");
    check_history(r, env.dir.file("history"));
    std::string offenders;
    for (auto const& k : sampled.offenders)
        offenders += (offenders.empty() ? "" : ", ") + k;
    r.check(sampled.offenders.empty(),
            fmt::format("keys without an expiry during the run: {}", offenders));
    r.check(sampled.samples >= 20, fmt::format("only {} samples of the keys", sampled.samples));
    r.leaked_keys = lock_keys_left(env.server, {"l"}) + sampled.offenders.size();
    r.check(r.leaked_keys == 0, "the lock is left held, or a key without an expiry");
    r.figures =
        fmt::format("counter {} = increments; {} samples of every key, none without an expiry; {} "
                    "full-server spells; {:.0f} shortening extends; {}; losses {:.0f}, co_lock "
                    "errors {:.0f}, tenures skipped {:.0f}",
                    counter, sampled.samples, full_spells, total["extends"],
                    proxy_figures(env.proxy), total["losses"], total["errors"], total["skipped"]);
    return r;
}

} // namespace colock::reliability
