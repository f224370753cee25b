// The worker modes of the synchronizers with several holders at once: permits (coroutines loop
// acquire / hold / release on one semaphore) and rw (reader and writer coroutines on one
// read-write lock, writers now and then downgrading). Every tenure goes to a history, and with
// --journal to a journal that survives a SIGKILL (journal.hpp). See worker.cpp.
#include "journal.hpp"
#include "worker_support.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>

namespace colock::reliability {

namespace {

using namespace asio::experimental::awaitable_operators;

// A holding's tenure for the history, ending now, or when its holder learned of the loss
// (`lost_ns` not 0), or at its lease's local deadline.
colock::test::holding shared_tenure(lease_guard const& g, std::string holder,
                                    std::int64_t acquired_ns, std::int64_t lost_ns) {
    colock::test::holding h;
    h.holder = std::move(holder);
    h.fence = g.fence();
    h.token = g.token();
    h.acquired_ns = acquired_ns;
    h.released_ns = steady_now_ns();
    if (lost_ns != 0)
        h.released_ns = std::min(h.released_ns, lost_ns);
    h.lease_end_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(g.lease_expiry().time_since_epoch())
            .count();
    return h;
}

// Holds `g` for `hold`, or until its loss is reported; returns when the loss was learned (0
// when it was not).
asio::awaitable<std::int64_t> hold_for(lease_guard& g, milliseconds hold) {
    std::int64_t lost_ns = 0;
    asio::steady_timer timer(co_await asio::this_coro::executor, hold);
    auto lost = [&]() -> asio::awaitable<void> {
        co_await g.wait_lost();
        if (g.lost())
            lost_ns = steady_now_ns();
    };
    try {
        co_await (timer.async_wait(use_tuple) || lost());
    } catch (boost::system::system_error const&) {
        // wait_lost cancelled: the hold ran out first
    }
    co_return lost_ns;
}

// The deadline-bounded wait of every attempt: until the run's end, at least 1 ms.
lock_options until_end(lock_options o, steady_clock_deadline until) {
    o.wait_timeout = std::chrono::duration_cast<milliseconds>(std::max(
        until - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms)));
    return o;
}

struct shared_tally {
    std::uint64_t acquisitions = 0, reads = 0, writes = 0, downgrades = 0, losses = 0, errors = 0,
                  timeouts = 0, release_errors = 0, not_ours = 0, write_waits = 0;
    // Downgrades whose outcome was not known (a timeout, the connection's error); of them, how
    // many were found the writer's again (owns() true after) and how many turned into a
    // reader's guard by a second co_downgrade().
    std::uint64_t unknown_downgrades = 0, writer_again = 0, second_downgrades = 0;
    std::int64_t longest_write_wait_ns = 0;
};

// Counts a failed attempt; after a network error waits a little for the reconnection.
asio::awaitable<void> failed(boost::system::error_code failure, shared_tally& t) {
    if (failure == colock::error::timeout) {
        ++t.timeouts;
        co_return;
    }
    ++t.errors;
    co_await sleep_for(5ms);
}

// Awaits `acquire()` into `out`; the code of the system_error it throws, or none.
template <class T, class Acquire>
asio::awaitable<boost::system::error_code> acquire_into(T& out, Acquire acquire) {
    try {
        out = co_await acquire();
    } catch (boost::system::system_error const& e) {
        co_return e.code();
    }
    co_return boost::system::error_code{};
}

// Gives `g` back through `let_go` (release or unlock), counting what it said.
template <class LetGo>
asio::awaitable<void> give_back(LetGo let_go, shared_tally& t) {
    try {
        if (!co_await let_go())
            ++t.not_ours;
    } catch (boost::system::system_error const&) {
        ++t.release_errors; // the lease runs out by its ttl
    }
}

auto rethrow = [](std::exception_ptr e) {
    if (e)
        std::rethrow_exception(e);
};

// ------------------------------------------------------------------------------- permits

struct permits_plan {
    std::size_t permits = 1;
    milliseconds hold_min, hold_max;
    steady_clock_deadline until;
};

asio::awaitable<void> permit_holder(semaphore& sem, lock_options opt, std::string holder,
                                    permits_plan plan, colock::test::history_writer& history,
                                    journal_writer& journal, shared_tally& t) {
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(holder)));
    while (std::chrono::steady_clock::now() < plan.until) {
        permit p;
        auto const failure = co_await acquire_into(
            p, [&] { return sem.co_acquire(plan.permits, until_end(opt, plan.until)); });
        if (failure) {
            co_await failed(failure, t);
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.acquisitions;
        journal.acquired(holder, p.fence(), p.token(), acquired_ns);
        auto const span = (plan.hold_max - plan.hold_min).count() + 1;
        auto const lost_ns = co_await hold_for(p, plan.hold_min + milliseconds(rng() % span));
        t.losses += p.lost() ? 1 : 0;
        history.record(shared_tenure(p, holder, acquired_ns, lost_ns));
        journal.released(holder, p.fence());
        co_await give_back([&p] { return p.release(); }, t);
    }
}

// ------------------------------------------------------------------------------- rw

struct rw_plan {
    milliseconds read_min, read_max, write_min, write_max, write_pause;
    int downgrade_percent = 0;
    // After a downgrade of unknown outcome: how long the writer goes on working as the writer
    // whenever owns() says it is one (0: it gives the holding back at once).
    milliseconds unknown_act{0};
    steady_clock_deadline until;
};

struct rw_histories {
    colock::test::history_writer reads;
    colock::test::history_writer writes;
    // The stretches in which a writer worked as the writer after a downgrade of unknown outcome
    // (owns() true at each end), when asked for (--history-believed).
    std::optional<colock::test::history_writer> believed;
};

// After a downgrade of unknown outcome: for `plan.unknown_act`, samples g.owns() every
// 5 ms and records each stretch of samples that said "the writer" (from its first to its last)
// as a writer's work in `believed`. Returns whether there was one.
asio::awaitable<bool> act_while_writer(write_guard& g, std::string const& holder,
                                       rw_plan const& plan,
                                       colock::test::history_writer& believed) {
    auto const until = std::chrono::steady_clock::now() + plan.unknown_act;
    bool acted = false;
    std::int64_t first = 0, last = 0;
    auto close = [&] {
        if (first == 0)
            return;
        colock::test::holding h;
        h.holder = holder;
        h.fence = g.fence();
        h.token = g.token();
        h.acquired_ns = first;
        h.released_ns = std::max(last, first + 1); // one sample: the instant it acted
        h.lease_end_ns = h.released_ns;
        believed.record(h);
        acted = true;
        first = 0;
    };
    while (std::chrono::steady_clock::now() < until && g.holds_lease()) {
        if (g.owns()) {
            last = steady_now_ns();
            first = first == 0 ? last : first;
        } else {
            close();
        }
        co_await sleep_for(5ms);
    }
    close();
    co_return acted;
}

asio::awaitable<void> reader(rw_lock& rw, lock_options opt, std::string holder, rw_plan plan,
                             rw_histories& history, journal_writer& journal, shared_tally& t) {
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(holder)));
    while (std::chrono::steady_clock::now() < plan.until) {
        read_guard g;
        auto const failure =
            co_await acquire_into(g, [&] { return rw.co_lock_shared(until_end(opt, plan.until)); });
        if (failure) {
            co_await failed(failure, t);
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.acquisitions;
        ++t.reads;
        journal.acquired(holder, g.fence(), g.token(), acquired_ns);
        auto const span = (plan.read_max - plan.read_min).count() + 1;
        auto const lost_ns = co_await hold_for(g, plan.read_min + milliseconds(rng() % span));
        t.losses += g.lost() ? 1 : 0;
        history.reads.record(shared_tenure(g, holder, acquired_ns, lost_ns));
        journal.released(holder, g.fence());
        co_await give_back([&g] { return g.release(); }, t);
        co_await sleep_for(std::chrono::microseconds(rng() % 3000));
    }
}

asio::awaitable<void> writer(rw_lock& rw, lock_options opt, std::string proc, std::int64_t index,
                             rw_plan plan, rw_histories& history, journal_writer& journal,
                             shared_tally& t) {
    auto const holder = fmt::format("p{}/w{}", proc, index);
    auto const reader_holder = fmt::format("p{}/d{}", proc, index); // after a downgrade
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(holder)));
    auto pick = [&rng](milliseconds lo, milliseconds hi) {
        return lo + milliseconds(rng() % ((hi - lo).count() + 1));
    };
    while (std::chrono::steady_clock::now() < plan.until) {
        co_await sleep_for(pick(0ms, plan.write_pause));
        if (std::chrono::steady_clock::now() >= plan.until)
            break;
        write_guard g;
        auto const called_ns = steady_now_ns();
        auto const failure =
            co_await acquire_into(g, [&] { return rw.co_lock(until_end(opt, plan.until)); });
        if (failure) {
            // A wait that timed out at the run's end counts as long as it was: a starved
            // writer would show here.
            if (failure == colock::error::timeout)
                t.longest_write_wait_ns =
                    std::max(t.longest_write_wait_ns, steady_now_ns() - called_ns);
            co_await failed(failure, t);
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.write_waits;
        t.longest_write_wait_ns = std::max(t.longest_write_wait_ns, acquired_ns - called_ns);
        ++t.acquisitions;
        ++t.writes;
        journal.acquired(holder, g.fence(), g.token(), acquired_ns);
        auto lost_ns = co_await hold_for(g, pick(plan.write_min, plan.write_max));
        t.losses += g.lost() ? 1 : 0;
        history.writes.record(shared_tenure(g, holder, acquired_ns, lost_ns));
        journal.released(holder, g.fence());
        if (lost_ns != 0 || static_cast<int>(rng() % 100) >= plan.downgrade_percent) {
            co_await give_back([&g] { return g.release(); }, t);
            continue;
        }
        // Downgrade: the writer's tenure ended at the call; the reader's begins at the return.
        read_guard r;
        bool downgraded = false;
        bool unknown = false;
        try {
            r = co_await g.co_downgrade();
            downgraded = true;
        } catch (boost::system::system_error const& e) {
            ++t.errors; // lost, or unknown: let go of whichever is held
            unknown = e.code() != colock::error::lock_lost && e.code() != colock::error::not_held;
            if (unknown && plan.unknown_act > 0ms)
                say(fmt::format("unknown {} {}", steady_now_ns(), e.what()));
        }
        if (unknown && plan.unknown_act > 0ms && history.believed) {
            // Works on as the writer while the guard says it is one; a holding it no longer
            // claims as the writer's (the downgrade went through) becomes a reader's guard by a
            // second downgrade.
            ++t.unknown_downgrades;
            if (co_await act_while_writer(g, holder, plan, *history.believed))
                ++t.writer_again;
            if (g.holds_lease() && !g.owns()) {
                try {
                    r = co_await g.co_downgrade();
                    downgraded = true;
                    ++t.second_downgrades;
                } catch (boost::system::system_error const&) {
                    ++t.errors;
                }
            }
        }
        if (!downgraded) {
            co_await give_back([&g] { return g.release(); }, t);
            continue;
        }
        auto const read_ns = steady_now_ns();
        ++t.downgrades;
        ++t.reads;
        journal.acquired(reader_holder, r.fence(), r.token(), read_ns);
        lost_ns = co_await hold_for(r, pick(plan.read_min, plan.read_max));
        t.losses += r.lost() ? 1 : 0;
        history.reads.record(shared_tenure(r, reader_holder, read_ns, lost_ns));
        journal.released(reader_holder, r.fence());
        co_await give_back([&r] { return r.release(); }, t);
    }
}

} // namespace

int run_permits(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto const opt = worker_lock_options(args);
    semaphore sem{client.locks(), args.text("name"),
                  static_cast<std::size_t>(args.number("capacity"))};
    auto const proc = args.text("proc");
    auto const coroutines = args.number("coroutines");
    // --double-every N: every Nth coroutine takes two permits at once.
    auto const double_every = args.number_or("double-every", 0);
    permits_plan plan;
    plan.hold_min = milliseconds(args.number("hold-min-ms"));
    plan.hold_max = milliseconds(args.number("hold-max-ms"));
    plan.until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    colock::test::history_writer history(args.text("history"));
    journal_writer journal(args.text_or("journal", ""));
    shared_tally t;
    for (std::int64_t i = 0; i < coroutines; ++i) {
        auto p = plan;
        p.permits = double_every > 0 && i % double_every == double_every - 1 ? 2 : 1;
        // The holder names its permits: "p<proc>/c<i>x<permits>".
        asio::co_spawn(ctx,
                       permit_holder(sem, opt, fmt::format("p{}/c{}x{}", proc, i, p.permits), p,
                                     history, journal, t),
                       rethrow);
    }
    close_after(ctx, client, plan.until);
    ctx.run();
    say(fmt::format("summary acquisitions={} losses={} errors={} timeouts={} release_errors={} "
                    "not_ours={} reconnects={}",
                    t.acquisitions, t.losses, t.errors, t.timeouts, t.release_errors, t.not_ours,
                    client.reconnect_count()));
    return 0;
}

int run_rw(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto const opt = worker_lock_options(args);
    rw_lock rw{client.locks(), args.text("name")};
    auto const proc = args.text("proc");
    rw_plan plan;
    plan.read_min = milliseconds(args.number("read-min-ms"));
    plan.read_max = milliseconds(args.number("read-max-ms"));
    plan.write_min = milliseconds(args.number("write-min-ms"));
    plan.write_max = milliseconds(args.number("write-max-ms"));
    plan.write_pause = milliseconds(args.number("write-pause-ms"));
    plan.downgrade_percent = static_cast<int>(args.number_or("downgrade-percent", 0));
    plan.unknown_act = milliseconds(args.number_or("unknown-act-ms", 0));
    plan.until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    rw_histories history{colock::test::history_writer(args.text("history-read")),
                         colock::test::history_writer(args.text("history-write")), std::nullopt};
    if (auto const believed = args.text_or("history-believed", ""); !believed.empty())
        history.believed.emplace(believed);
    journal_writer journal(args.text_or("journal", ""));
    shared_tally t;
    for (std::int64_t i = 0; i < args.number("readers"); ++i)
        asio::co_spawn(ctx,
                       reader(rw, opt, fmt::format("p{}/r{}", proc, i), plan, history, journal, t),
                       rethrow);
    for (std::int64_t i = 0; i < args.number("writers"); ++i)
        asio::co_spawn(ctx, writer(rw, opt, proc, i, plan, history, journal, t), rethrow);
    close_after(ctx, client, plan.until);
    ctx.run();
    say(fmt::format("summary acquisitions={} reads={} writes={} downgrades={} losses={} "
                    "errors={} timeouts={} release_errors={} not_ours={} reconnects={} "
                    "write_waits={} longest_write_wait_ms={:.1f} unknown_downgrades={} "
                    "writer_again={} second_downgrades={}",
                    t.acquisitions, t.reads, t.writes, t.downgrades, t.losses, t.errors, t.timeouts,
                    t.release_errors, t.not_ours, client.reconnect_count(), t.write_waits,
                    static_cast<double>(t.longest_write_wait_ns) / 1e6, t.unknown_downgrades,
                    t.writer_again, t.second_downgrades));
    return 0;
}

} // namespace colock::reliability
