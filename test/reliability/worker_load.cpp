// The load worker modes: storm (coroutines race co_lock against random timers on a few names,
// so that most are cancelled) and waiters (one holder and many coroutines waiting on its name:
// memory per waiter, then some served and the rest cancelled). See worker.cpp.
#include "worker_support.hpp"

#include <colock/colock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace colock::reliability {

namespace {

using namespace asio::experimental::awaitable_operators;

asio::awaitable<void> stormer(locker& locks, std::vector<std::string> const& names,
                              lock_options opt, int seed, steady_clock_deadline until,
                              worker_tally& t) {
    std::minstd_rand rng(static_cast<unsigned>(seed));
    auto ex = co_await asio::this_coro::executor;
    bool failed = false;
    while (std::chrono::steady_clock::now() < until) {
        auto const& name = names[rng() % names.size()];
        asio::steady_timer patience(ex, std::chrono::milliseconds(1 + rng() % 100));
        try {
            auto r = co_await (locks.co_lock(name, opt) || patience.async_wait(use_tuple));
            if (r.index() == 1) {
                ++t.cancelled;
                continue;
            }
            auto g = std::move(std::get<0>(r));
            ++t.acquisitions;
            co_await sleep_for(std::chrono::microseconds(rng() % 3000));
            if (g.lost())
                ++t.losses;
            if (rng() % 4 == 0)
                continue; // let the destructor release in the background
            try {
                co_await g.release();
            } catch (boost::system::system_error const&) {
                ++t.unlock_errors;
            }
        } catch (boost::system::system_error const&) {
            ++t.errors;
            failed = true;
        }
        if (failed) {
            failed = false;
            co_await sleep_for(5ms); // not in the handler: no co_await there
        }
    }
}

std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages))
        throw std::runtime_error("cannot read /proc/self/statm");
    return resident_pages * sysconf(_SC_PAGESIZE);
}

} // namespace

// ------------------------------------------------------------------------------- storm

int run_storm(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto opt = worker_lock_options(args);
    std::vector<std::string> names;
    for (std::int64_t i = 0; i < args.number("names"); ++i)
        names.push_back(fmt::format("{}-{}", args.text("name"), i));
    auto const until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    worker_tally t;
    int running = static_cast<int>(args.number("coroutines"));
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));
    for (int i = 0, n = running; i < n; ++i)
        asio::co_spawn(ctx, stormer(locks, names, opt, i + 1, until, t), [&](std::exception_ptr e) {
            if (e)
                std::rethrow_exception(e);
            if (--running == 0) {
                say(fmt::format("summary acquisitions={} cancelled={} losses={} "
                                "errors={} unlock_errors={} reconnects={}",
                                t.acquisitions, t.cancelled, t.losses, t.errors, t.unlock_errors,
                                client.reconnect_count()));
                // Stay until told: background releases may still be running.
                asio::co_spawn(ctx, read_commands(in, [](auto const&) { return false; }),
                               [&](std::exception_ptr) { client.close(); });
            }
        });
    ctx.run();
    return 0;
}

// ------------------------------------------------------------------------------- waiters
int run_waiters(arguments const& args) {
    asio::io_context ctx(1);
    redis::connection conn{ctx.get_executor(), worker_config(args, args.text("url"))};
    locker locks{conn};
    auto opt = worker_lock_options(args);
    auto const name = args.text("name");
    auto const count = static_cast<std::size_t>(args.number("count"));
    auto const serve = static_cast<std::size_t>(args.number("serve"));
    int rc = 0;

    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            auto holder = co_await locks.co_lock(name, opt);
            std::vector<asio::cancellation_signal> stop(count);
            std::size_t finished = 0, served = 0, cancelled = 0, failed = 0;
            asio::steady_timer poll(ctx);
            auto const rss_before = resident_bytes();
            auto const queue_start = std::chrono::steady_clock::now();
            for (std::size_t i = 0; i < count; ++i)
                locks.async_lock(
                    name, opt,
                    asio::bind_cancellation_slot(stop[i].slot(), [&](error_code ec, lock_guard) {
                        ++finished;
                        if (!ec) {
                            ++served; // handed on at once (destructor) to the next in line
                            if (served == serve)
                                for (auto& s : stop)
                                    s.emit(asio::cancellation_type::terminal);
                        } else if (ec == asio::error::operation_aborted) {
                            ++cancelled;
                        } else {
                            ++failed;
                        }
                    }));
            // Queued: each waits in the locker's queue (behind the first, which asked).
            redis::connection probe{ctx.get_executor(), worker_config(args, args.text("url"))};
            while (locks.waiting() < count) {
                poll.expires_after(20ms);
                co_await poll.async_wait(use_tuple);
            }
            poll.expires_after(200ms); // the head's subscription and attempts settle
            co_await poll.async_wait(use_tuple);
            auto const queued_s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - queue_start)
                    .count();
            auto const rss_after = resident_bytes();
            auto const serve_start = std::chrono::steady_clock::now();
            co_await holder.release();
            if (serve == 0)
                for (auto& s : stop)
                    s.emit(asio::cancellation_type::terminal);
            while (finished < count) {
                poll.expires_after(10ms);
                co_await poll.async_wait(use_tuple);
            }
            auto const drain_s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - serve_start)
                    .count();
            poll.expires_after(300ms); // background releases of the last guards
            co_await poll.async_wait(use_tuple);
            auto const key = locks.key_prefix() + "{" + name + "}";
            resp3::request check;
            check.push("GET", key);
            check.push("KEYS", key + "*");
            check.push("PUBSUB", "CHANNELS", key + ":w:*");
            auto const found = co_await probe.co_exec(check);
            // Left: the lock still held or handed off ("H ..." or "R ..."), or a key of the
            // lock without an expiry. The free lock ("F <fence>") and the queue keys lapse.
            auto const value = found.at(0).as_string().value_or("");
            std::int64_t keys = value.starts_with("H ") || value.starts_with("R ") ? 1 : 0;
            std::int64_t subscribers = 0;
            // PTTL of each key, then the subscribers of each wake channel (one per locker);
            // a PING first, so the request is never empty.
            resp3::request counts;
            counts.push("PING");
            for (auto const& k : found.at(1).elements)
                counts.push("PTTL", k.as_string().value_or(""));
            for (auto const& c : found.at(2).elements)
                counts.push("PUBSUB", "NUMSUB", c.as_string().value_or(""));
            auto const answers = co_await probe.co_exec(counts);
            std::size_t i = 1;
            for (std::size_t n = 0; n < found.at(1).elements.size(); ++n)
                keys += answers.at(i++).as_integer().value_or(0) == -1 ? 1 : 0;
            for (std::size_t n = 0; n < found.at(2).elements.size(); ++n, ++i)
                subscribers += answers.at(i).elements.size() == 2
                                   ? answers.at(i).elements[1].as_integer().value_or(-1)
                                   : -1;
            say(fmt::format("summary waiters={} served={} cancelled={} failed={} "
                            "bytes_per_waiter={:.0f} queued_s={:.2f} drain_s={:.2f} keys={} "
                            "subscribers={}",
                            count, served, cancelled, failed,
                            static_cast<double>(rss_after - rss_before) /
                                static_cast<double>(count),
                            queued_s, drain_s, keys, subscribers));
            probe.close();
            conn.close();
        },
        report_failure(rc, [&] { conn.close(); }));
    ctx.run();
    return rc;
}

} // namespace colock::reliability
