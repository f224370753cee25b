// Scenario p: lock sets (locker::co_lock_all) under proxy faults, with a worker SIGKILLed. Three
// processes x 6 coroutines take random sets of 1 to 4 names out of 8, each through the fault
// proxy; a fourth process is SIGKILLed mid-run, holding or waiting, and another takes its place.
// Each name's history must show no two holders at once and fences in order; no wait may run
// out its 12 s (a deadlock would), those still waiting when the run ends included: a worker ends
// once all of its calls have; nothing may be left held or without an expiry.
#include "runner.hpp"
#include "worker.hpp"

#include <colock_test/fault_proxy.hpp>
#include <colock_test/redis_server.hpp>

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

result lock_sets_with_kills() {
    result r{"p. lock sets: 3 procs x 6 coroutines, random sets of 1-4 of 8 names, proxy "
             "faults, a worker SIGKILLed"};
    auto const run = opts.full ? 30s : 9s;
    proxied_server env;
    std::vector<std::string> names;
    for (int i = 0; i < 8; ++i)
        names.push_back(fmt::format("set{}", i));
    auto const start = std::chrono::steady_clock::now();
    auto args = [&](milliseconds ms) {
        return std::vector<std::string>{"sets",
                                        "--prefix",
                                        "set",
                                        "--names",
                                        "8",
                                        "--max-set",
                                        "4",
                                        "--coroutines",
                                        "6",
                                        "--ms",
                                        std::to_string(ms.count()),
                                        "--ttl-ms",
                                        "1000",
                                        "--renew-ms",
                                        "250",
                                        "--hold-us",
                                        "500",
                                        "--health-ms",
                                        "300",
                                        "--history",
                                        env.dir.file("history")};
    };
    std::vector<std::unique_ptr<worker_process>> ws;
    for (int p = 0; p < 3; ++p)
        ws.push_back(std::make_unique<worker_process>(
            worker_args(args(run), env.proxy.url(), std::to_string(p))));
    auto victim = std::make_unique<worker_process>(worker_args(args(run), env.server.url(), "v"));
    std::mt19937 rng(opts.seed);
    r.faults = inject_faults(env.proxy, start + run * 2 / 5, rng, 1500ms);
    victim->kill_process();
    ++r.faults;
    r.check(victim->wait_exit(10s) == sigkill_status, "the victim was not SIGKILLed");
    auto const left =
        std::chrono::duration_cast<milliseconds>(start + run - std::chrono::steady_clock::now());
    ws.push_back(std::make_unique<worker_process>(worker_args(args(left), env.server.url(), "w")));
    r.faults += inject_faults(env.proxy, start + run - 1500ms, rng, 1500ms);
    auto total = collect(r, ws, run + 60s);
    tally(r, total, start, opts.full ? 300u : 60u);
    r.check(total["stuck"] == 0, "a wait ran out its 12 s: a deadlock?");
    for (auto const& n : names)
        check_history(r, env.dir.file("history-" + n));
    r.leaked_keys = lock_keys_left(env.server, names);
    r.check(r.leaked_keys == 0, "a name is left held, or a key without an expiry");
    r.figures = fmt::format(
        "{}; waits cut by 12 s {:.0f}; the 4 workers' longest waits summed {:.0f} ms; worker "
        "reconnects {:.0f}, co_lock_all errors {:.0f}",
        proxy_figures(env.proxy), total["stuck"], total["longest_wait_ms"], total["reconnects"],
        total["errors"]);
    return r;
}

} // namespace colock::reliability
