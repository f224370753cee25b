// The lock set's worker mode: sets (coroutines loop co_lock_all of 1 to --max-set random names of
// --names, hold them a moment, write a tenure per name to that name's history, unlock). See
// worker.cpp.
#include "worker_support.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace colock::reliability {

namespace {

struct set_tally {
    std::uint64_t acquisitions = 0, losses = 0, errors = 0, unlock_errors = 0, stuck = 0;
    double longest_wait_ms = 0;
};

asio::awaitable<void> set_taker(locker& locks, std::vector<std::string> const& names,
                                std::int64_t max_set, lock_options opt, std::string holder,
                                steady_clock_deadline until, std::chrono::microseconds hold,
                                std::vector<std::unique_ptr<colock::test::history_writer>>& files,
                                set_tally& t, std::function<void()> done) {
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(holder)));
    auto const stuck_after = milliseconds(12'000);
    while (std::chrono::steady_clock::now() < until) {
        // 1 to max_set names, in a random order: a set sorts them itself.
        std::vector<std::size_t> picked;
        auto const count = 1 + rng() % static_cast<unsigned>(max_set);
        while (picked.size() < count) {
            auto const i = rng() % names.size();
            if (std::find(picked.begin(), picked.end(), i) == picked.end())
                picked.push_back(i);
        }
        std::vector<std::string> wanted;
        for (auto i : picked)
            wanted.push_back(names[i]);
        // Every wait has its whole limit, the last ones too: the process ends only once each
        // call has, so a deadlock at the end of the run shows as well.
        lock_options o = opt;
        o.wait_timeout = stuck_after;
        auto const asked = std::chrono::steady_clock::now();
        multi_lock_guard g;
        error_code failure;
        try {
            g = co_await locks.co_lock_all(wanted, o);
        } catch (boost::system::system_error const& e) {
            failure = e.code();
        }
        auto const waited = std::chrono::steady_clock::now() - asked;
        t.longest_wait_ms =
            std::max(t.longest_wait_ms, std::chrono::duration<double, std::milli>(waited).count());
        if (failure) {
            // A wait cut by its own limit: no progress for that long.
            if (failure == colock::error::timeout)
                ++t.stuck;
            else if (failure != colock::error::timeout)
                ++t.errors;
            if (failure != colock::error::timeout)
                co_await sleep_for(5ms); // the connection is being re-established
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.acquisitions;
        co_await sleep_for(std::chrono::microseconds(rng() % (hold.count() + 1)));
        auto const released_ns = steady_now_ns();
        auto const lease_end = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   g.lease_expiry().time_since_epoch())
                                   .count();
        if (g.lost())
            ++t.losses;
        for (auto i : picked) {
            colock::test::holding h;
            h.holder = holder;
            h.fence = g.fence(names[i]);
            h.token = g.token();
            h.acquired_ns = acquired_ns;
            h.released_ns = released_ns;
            h.lease_end_ns = lease_end;
            files[i]->record(h);
        }
        try {
            co_await g.release();
        } catch (boost::system::system_error const&) {
            ++t.unlock_errors; // the leases run out by their TTL
        }
    }
    done();
}

} // namespace

int run_sets(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto const opt = worker_lock_options(args);
    auto const prefix = args.text("prefix");
    auto const count = args.number("names");
    auto const max_set = args.number_or("max-set", 4);
    auto const proc = args.text("proc");
    auto const coroutines = args.number("coroutines");
    auto const until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    auto const hold = std::chrono::microseconds(args.number_or("hold-us", 500));
    std::vector<std::string> names;
    std::vector<std::unique_ptr<colock::test::history_writer>> files;
    for (std::int64_t i = 0; i < count; ++i) {
        names.push_back(fmt::format("{}{}", prefix, i));
        files.push_back(std::make_unique<colock::test::history_writer>(
            fmt::format("{}-{}", args.text("history"), names.back())));
    }
    set_tally t;
    // The connection closes when the last call has ended, or, should one never end, once the
    // longest wait could have.
    auto running = coroutines;
    asio::steady_timer fallback(ctx, until + milliseconds(14'500));
    fallback.async_wait([&](error_code ec) {
        if (!ec)
            client.close();
    });
    auto const done = [&] {
        if (--running == 0) {
            fallback.cancel();
            client.close();
        }
    };
    for (std::int64_t i = 0; i < coroutines; ++i)
        asio::co_spawn(ctx,
                       set_taker(locks, names, max_set, opt, fmt::format("p{}/c{}", proc, i), until,
                                 hold, files, t, done),
                       [](std::exception_ptr e) {
                           if (e)
                               std::rethrow_exception(e);
                       });
    ctx.run();
    say(fmt::format("summary acquisitions={} losses={} errors={} unlock_errors={} stuck={} "
                    "longest_wait_ms={:.0f} reconnects={}",
                    t.acquisitions, t.losses, t.errors, t.unlock_errors, t.stuck, t.longest_wait_ms,
                    client.reconnect_count()));
    return 0;
}

} // namespace colock::reliability
