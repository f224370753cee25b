// The lock's worker modes: contend (coroutines loop co_lock / read-modify-write of a shared
// counter / unlock) and hold (one lock driven by commands on stdin). See worker.cpp.
#include "journal.hpp"
#include "worker_support.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

namespace colock::reliability {

namespace {

using namespace asio::experimental::awaitable_operators;

// A counter in a file that holders read, pause over, and write back, with no locking of its
// own: if two holders ever overlapped, an update would be lost.
class unguarded_counter {
public:
    explicit unguarded_counter(std::string const& path) : fd_(open(path.c_str(), O_RDWR)) {
        if (fd_ < 0)
            throw std::system_error(errno, std::generic_category(), "open " + path);
    }
    ~unguarded_counter() { close(fd_); }
    unguarded_counter(unguarded_counter const&) = delete;
    unguarded_counter& operator=(unguarded_counter const&) = delete;

    std::int64_t read() const {
        std::int64_t v = 0;
        if (pread(fd_, &v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
            throw std::runtime_error("counter: short read");
        return v;
    }
    void write(std::int64_t v) const {
        if (pwrite(fd_, &v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
            throw std::runtime_error("counter: short write");
    }

private:
    int fd_;
};

// ------------------------------------------------------------------------------- contend

// A holder's extend() to half its ttl (shorter than the lease it may have been handed), given
// up after a few ms: its reply may come after the holder stopped waiting, or never.
asio::awaitable<void> shortening_extend(lock_guard& g, milliseconds ttl, worker_tally& t) {
    asio::steady_timer give_up(co_await asio::this_coro::executor, 2ms);
    try {
        co_await (g.extend(ttl) || give_up.async_wait(use_tuple));
        ++t.extends;
    } catch (boost::system::system_error const&) {
        ++t.errors; // a lost connection: the lease is ours until its local deadline at most
    }
}

asio::awaitable<void> contender(locker& locks, std::string name, lock_options opt,
                                std::string holder, steady_clock_deadline until,
                                std::chrono::microseconds hold, bool extend_shorter,
                                unguarded_counter& counter, colock::test::history_writer& history,
                                journal_writer& journal, worker_tally& t) {
    std::minstd_rand rng(std::hash<std::string>{}(holder));
    while (std::chrono::steady_clock::now() < until) {
        lock_options o = opt;
        o.wait_timeout = std::chrono::duration_cast<milliseconds>(std::max(
            until - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms)));
        lock_guard g;
        error_code failure;
        try {
            g = co_await locks.co_lock(name, o);
        } catch (boost::system::system_error const& e) {
            failure = e.code();
        }
        if (failure) {
            if (failure != colock::error::timeout) {
                ++t.errors;
                co_await sleep_for(5ms); // the connection is being re-established
            }
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.acquisitions;
        journal.acquired(holder, g.fence(), g.token(), acquired_ns);
        if (extend_shorter && rng() % 4 == 0)
            co_await shortening_extend(g, opt.ttl / 2, t);
        // Read, pause (other holders would get in here if exclusion failed), write back. Only
        // while the lease is known to be ours: owns() checks the local lease deadline.
        if (g.owns()) {
            auto const v = counter.read();
            co_await sleep_for(std::chrono::microseconds(rng() % (hold.count() + 1)));
            if (g.owns()) {
                counter.write(v + 1);
                ++t.increments;
                journal.wrote(holder, v + 1);
            } else {
                ++t.skipped;
            }
        } else {
            ++t.skipped;
        }
        auto h = tenure(g, holder, acquired_ns);
        if (g.lost())
            ++t.losses;
        history.record(h);
        journal.released(holder, h.fence);
        try {
            co_await g.release();
        } catch (boost::system::system_error const&) {
            ++t.unlock_errors; // the lease runs out by its TTL
        }
    }
}

} // namespace

int run_contend(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto const opt = worker_lock_options(args);
    auto const name = args.text("name");
    auto const proc = args.text("proc");
    auto const coroutines = args.number("coroutines");
    auto const until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    auto const hold = std::chrono::microseconds(args.number_or("hold-us", 500));
    // --short-ttl-ms: every other coroutine takes a shorter lease, so local hand-offs pass a
    // long lease to a holder that renews it shorter; --extend-shorter 1: holders now and then
    // extend to half their ttl without waiting for the reply.
    auto const short_ttl = milliseconds(args.number_or("short-ttl-ms", 0));
    bool const extend_shorter = args.number_or("extend-shorter", 0) != 0;
    unguarded_counter counter(args.text("counter"));
    colock::test::history_writer history(args.text("history"));
    journal_writer journal(args.text_or("journal", ""));
    worker_tally t;
    for (std::int64_t i = 0; i < coroutines; ++i) {
        auto o = opt;
        if (short_ttl.count() > 0 && i % 2 == 1) {
            o.ttl = short_ttl;
            o.renew_interval = short_ttl / 3;
        }
        asio::co_spawn(ctx,
                       contender(locks, name, o, fmt::format("p{}/c{}", proc, i), until, hold,
                                 extend_shorter, counter, history, journal, t),
                       [](std::exception_ptr e) {
                           if (e)
                               std::rethrow_exception(e);
                       });
    }
    // Closing the connection once every contender is done lets run() return.
    close_after(ctx, client, until);
    ctx.run();
    say(fmt::format("summary acquisitions={} increments={} losses={} skipped={} errors={} "
                    "unlock_errors={} reconnects={} extends={}",
                    t.acquisitions, t.increments, t.losses, t.skipped, t.errors, t.unlock_errors,
                    client.reconnect_count(), t.extends));
    return 0;
}

// ------------------------------------------------------------------------------- hold

int run_hold(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto opt = worker_lock_options(args);
    opt.auto_renew = args.number_or("auto-renew", 1) != 0;
    auto const name = args.text("name");
    auto const holder = fmt::format("p{}", args.text("proc"));
    colock::test::history_writer history(args.text("history"));
    colock::test::fenced_store store(args.text("store"));
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));

    return run_commanded(ctx, client, in, [&]() -> asio::awaitable<void> {
        auto g = co_await locks.co_lock(name, opt);
        auto const acquired_ns = steady_now_ns();
        say(fmt::format("acquired {} {}", acquired_ns, g.fence()));
        std::int64_t lost_ns = 0;
        g.async_wait_lost([&](error_code ec) {
            if (!ec && g.lost()) {
                lost_ns = steady_now_ns();
                say(fmt::format("lost {}", lost_ns));
            }
        });
        bool unlock_requested = false;
        auto const state = [&] {
            return fmt::format("state owns={} lost={}", g.owns() ? 1 : 0, g.lost() ? 1 : 0);
        };
        // "rwrite V": V to res:{NAME} under the fence checked at the resource, as "write" to the
        // file store: with the guard's fence, not its state (a write already on its way).
        colock::fenced_resource resource{
            client.connection(), "res:{" + name + "}:fence", {std::chrono::minutes{1}}};
        auto const redis_write = [&](std::string value) {
            asio::co_spawn(
                ctx,
                [&resource, &name, fence = g.fence(),
                 value = std::move(value)]() -> asio::awaitable<void> {
                    auto [ec, written] = co_await resource.async_write(
                        name, fence,
                        colock::fenced_writes{}.set("res:{" + name + "}", value,
                                                    std::chrono::minutes{1}),
                        asio::as_tuple(asio::use_awaitable));
                    if (!ec)
                        say("rwrite accepted");
                    else if (ec == colock::error::stale_fence)
                        say("rwrite refused");
                    else
                        say(fmt::format("rwrite failed {}", ec.message()));
                },
                asio::detached);
        };
        co_await read_commands(in, holder_commands(
                                       store, [&] { return g.fence(); }, state, "unlock",
                                       unlock_requested, redis_write));
        history.record(tenure(g, holder, acquired_ns, lost_ns));
        co_await end_as_asked(
            unlock_requested, [&] { return g.release(); }, "unlock", "released");
        client.close();
    });
}

} // namespace colock::reliability
