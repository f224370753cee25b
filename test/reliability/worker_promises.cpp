// The with_lock worker mode: coroutines loop co_with_lock on one name until a deadline, the work
// now and then stalling the thread (a blocking sleep) for longer than the lease, so that
// neither the renewal nor wait_lost() can run meanwhile. Every call's tenure goes to the
// history: a call that returned a value as its whole work, which its lease must have covered;
// a call that ended with lock_lost as far as its lease's local end. See worker.cpp.
#include "worker_support.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>

namespace colock::reliability {

namespace {

struct with_lock_plan {
    std::string name;
    milliseconds work_min, work_max, stall;
    std::int64_t stall_every = 0; // every Nth call of a coroutine stalls; 0: none
    steady_clock_deadline until;
};

struct with_lock_tally {
    std::uint64_t calls = 0, returned = 0, lost = 0, errors = 0, stalls = 0, stalls_returned = 0;
};

asio::awaitable<void> with_lock_loop(locker& locks, lock_options opt, std::string holder,
                                     with_lock_plan plan, colock::test::history_writer& history,
                                     with_lock_tally& t) {
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(holder)));
    for (std::int64_t n = 1; std::chrono::steady_clock::now() < plan.until; ++n) {
        bool const stall = plan.stall_every > 0 && n % plan.stall_every == 0;
        auto const work =
            plan.work_min + milliseconds(rng() % static_cast<unsigned>(
                                                     (plan.work_max - plan.work_min).count() + 1));
        colock::test::holding h;
        h.holder = holder;
        std::int64_t lease_end = 0;
        opt.wait_timeout = std::chrono::duration_cast<milliseconds>(
            std::max(plan.until - std::chrono::steady_clock::now(),
                     std::chrono::steady_clock::duration(1ms)));
        ++t.calls;
        try {
            auto const one = co_await locks.co_with_lock(
                plan.name,
                [&](lock_guard& g) -> asio::awaitable<int> {
                    h.fence = g.fence();
                    h.token = g.token();
                    h.acquired_ns = steady_now_ns();
                    if (stall)
                        std::this_thread::sleep_for(plan.stall); // the thread stalls
                    else
                        co_await sleep_for(work);
                    h.released_ns = steady_now_ns();
                    lease_end = lease_end_ns(g);
                    co_return 1;
                },
                opt);
            // Returned: the lease held through the whole work, the interval claimed.
            t.returned += static_cast<std::uint64_t>(one);
            t.stalls_returned += stall ? 1 : 0;
            t.stalls += stall ? 1 : 0;
            h.lease_end_ns = h.released_ns;
            history.record(h);
        } catch (boost::system::system_error const& e) {
            t.stalls += stall && h.acquired_ns != 0 ? 1 : 0;
            if (e.code() == colock::error::lock_lost && h.acquired_ns != 0) {
                ++t.lost;
                // Held until its lease's local end at most: the others may have it after.
                if (h.released_ns == 0)
                    h.released_ns = steady_now_ns();
                h.lease_end_ns = lease_end != 0 ? lease_end : h.released_ns;
                history.record(h);
            } else {
                ++t.errors;
                if (h.acquired_ns != 0 && h.released_ns != 0) {
                    h.lease_end_ns = lease_end;
                    history.record(h);
                }
            }
        }
    }
}

} // namespace

int run_with_lock(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto const opt = worker_lock_options(args);
    with_lock_plan plan;
    plan.name = args.text("name");
    plan.work_min = milliseconds(args.number("work-min-ms"));
    plan.work_max = milliseconds(args.number("work-max-ms"));
    plan.stall = milliseconds(args.number_or("stall-ms", 0));
    plan.stall_every = args.number_or("stall-every", 0);
    plan.until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    colock::test::history_writer history(args.text("history"));
    auto const proc = args.text("proc");
    with_lock_tally t;
    int rc = 0;
    int running = static_cast<int>(args.number("coroutines"));
    for (int i = 0; i < running; ++i)
        asio::co_spawn(
            ctx,
            with_lock_loop(client.locks(), opt, fmt::format("p{}/c{}", proc, i), plan, history, t),
            [&](std::exception_ptr e) {
                if (e) {
                    report_exception(e);
                    rc = 1;
                }
                if (--running == 0)
                    client.close();
            });
    ctx.run();
    say(fmt::format("summary calls={} returned={} lost={} errors={} stalls={} stalls_returned={} "
                    "reconnects={}",
                    t.calls, t.returned, t.lost, t.errors, t.stalls, t.stalls_returned,
                    client.reconnect_count()));
    return rc;
}

} // namespace colock::reliability
