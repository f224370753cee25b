// colock exec: take the lock (or, with --permits, a permit of a semaphore; with --shared or
// --exclusive, a read-write lock), run the command while the lease is renewed, and stop the
// command when the lease is lost.
#include "cli.hpp"
#include "supervise.hpp"
#include "text.hpp"

#include <colock/error.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <exception>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace colock::cli {

namespace {

namespace asio = boost::asio;

// A best-effort account of who holds the lock, for the message of a lock not acquired:
// " (held by PROGRAM pid N on HOST)", or nothing.
asio::awaitable<std::string> holder_text(locker& lk, std::string name) {
    try {
        auto const st = co_await lk.co_status(std::move(name));
        if (st.state == lock_state::held && st.holder)
            co_return fmt::format(" (held by {} pid {} on {})", printable(st.holder->program),
                                  st.holder->pid, printable(st.holder->host));
        if (st.state == lock_state::held)
            co_return fmt::format(" (held by locker {})", printable(st.holder_id));
    } catch (std::exception const&) {
    }
    co_return std::string{};
}

struct acquisition {
    std::optional<lock_guard> guard;
    /// The signal that ended the wait, or 0.
    int signal = 0;
};

// Waits up to --wait (one attempt for --wait 0); throws error::timeout when that passed.
//
// The one attempt of --wait 0 gets no wait_timeout: it does not wait for the lock anyway, and a
// wait_timeout of 0 would cut it short when its request must first connect (to the node of the
// name's slot, on a Cluster), reporting a free lock as not acquired.
asio::awaitable<acquisition> acquire(options const& o, locker& lk, asio::signal_set& stop) {
    lock_options lo;
    lo.ttl = o.ttl;
    acquisition out;
    if (o.wait && o.wait->count() == 0) {
        auto got = co_await or_signal(lk.co_try_lock(o.name, lo), stop);
        out.signal = got.signal;
        if (got.value)
            out.guard = std::move(*got.value);
        co_return out;
    }
    lo.wait_timeout = o.wait;
    auto got = co_await or_signal(lk.co_lock(o.name, lo), stop);
    out.signal = got.signal;
    out.guard = std::move(got.value);
    co_return out;
}

// A best-effort account of the semaphore's permits, for the message of a permit not acquired:
// " (N of M held)", or nothing.
asio::awaitable<std::string> permits_text(semaphore& sem) {
    try {
        auto const free_now = co_await sem.co_available();
        co_return fmt::format(" ({} of {} held)", sem.capacity() - free_now, sem.capacity());
    } catch (std::exception const&) {
    }
    co_return std::string{};
}

struct permit_acquisition {
    std::optional<permit> held;
    /// The signal that ended the wait, or 0.
    int signal = 0;
};

// As acquire, for one permit of `sem` (and --wait 0's attempt without a wait_timeout alike).
asio::awaitable<permit_acquisition> acquire_permit(options const& o, semaphore& sem,
                                                   asio::signal_set& stop) {
    lock_options lo;
    lo.ttl = o.ttl;
    permit_acquisition out;
    if (o.wait && o.wait->count() == 0) {
        auto got = co_await or_signal(sem.co_try_acquire(lo), stop);
        out.signal = got.signal;
        if (got.value)
            out.held = std::move(*got.value);
        co_return out;
    }
    lo.wait_timeout = o.wait;
    auto got = co_await or_signal(sem.co_acquire(lo), stop);
    out.signal = got.signal;
    out.held = std::move(got.value);
    co_return out;
}

// exec --permits N: the command runs under one permit of semaphore NAME of capacity N.
asio::awaitable<int> run_exec_permit(options const& o, redis::connection& conn, locker& lk,
                                     tool_signals& sigs) {
    semaphore sem{lk, o.name, *o.permits};
    auto const name = printable(o.name);
    permit_acquisition got;
    bool timed_out = false;
    try {
        got = co_await acquire_permit(o, sem, sigs.stop);
    } catch (boost::system::system_error const& e) {
        // The arguments were checked before: the server holds another capacity for the name
        // (the library's message names both).
        if (e.code() == colock::error::invalid_argument) {
            std::string text = e.what();
            if (text.starts_with("colock: "))
                text.erase(0, 8);
            complain(printable(text));
            co_return exit_capacity_mismatch;
        }
        if (e.code() != colock::error::timeout)
            throw;
        timed_out = true;
    }
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (timed_out || !got.held) {
        auto const held = co_await permits_text(sem);
        if (timed_out)
            complain(fmt::format("no permit of semaphore '{}' acquired within {}{}", name,
                                 format_duration(*o.wait), held));
        else
            complain(fmt::format("semaphore '{}' has no permit free{}", name, held));
        co_return exit_not_acquired;
    }
    lease_words const words{
        fmt::format("the permit of semaphore '{}' (fence {})", name, got.held->fence()),
        fmt::format("release the permit of semaphore '{}'", name)};
    holding_lease lease{*got.held, [&got] { return got.held->release(); }};
    co_return co_await run_under_lease(o, lease, words, sigs);
}

// A read or write lock taken, or the signal that ended the wait.
template <class Guard>
struct rw_acquisition {
    std::optional<Guard> held;
    int signal = 0;
};

// As acquire, for read-write lock NAME, as a reader (`Guard` read_guard) or as its writer.
template <class Guard>
asio::awaitable<rw_acquisition<Guard>> acquire_rw(options const& o, rw_lock& rw,
                                                  asio::signal_set& stop) {
    constexpr bool reader = std::is_same_v<Guard, read_guard>;
    lock_options lo;
    lo.ttl = o.ttl;
    rw_acquisition<Guard> out;
    if (o.wait && o.wait->count() == 0) {
        // One attempt, not cut short by a wait_timeout of 0 (see acquire_permit).
        std::optional<Guard> one;
        if constexpr (reader) {
            auto got = co_await or_signal(rw.co_try_lock_shared(lo), stop);
            out.signal = got.signal;
            if (got.value)
                one = std::move(*got.value);
        } else {
            auto got = co_await or_signal(rw.co_try_lock(lo), stop);
            out.signal = got.signal;
            if (got.value)
                one = std::move(*got.value);
        }
        out.held = std::move(one);
        co_return out;
    }
    lo.wait_timeout = o.wait;
    if constexpr (reader) {
        auto got = co_await or_signal(rw.co_lock_shared(lo), stop);
        out.signal = got.signal;
        out.held = std::move(got.value);
    } else {
        auto got = co_await or_signal(rw.co_lock(lo), stop);
        out.signal = got.signal;
        out.held = std::move(got.value);
    }
    co_return out;
}

// exec --shared / --exclusive: the command runs under read-write lock NAME, as a reader or as
// its writer.
template <class Guard>
asio::awaitable<int> run_exec_rw(options const& o, redis::connection& conn, locker& lk,
                                 tool_signals& sigs) {
    constexpr bool reader = std::is_same_v<Guard, read_guard>;
    std::string_view const what = reader ? "read lock" : "write lock";
    rw_lock rw{lk, o.name};
    auto const name = printable(o.name);
    rw_acquisition<Guard> got;
    bool timed_out = false;
    try {
        got = co_await acquire_rw<Guard>(o, rw, sigs.stop);
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::timeout)
            throw;
        timed_out = true;
    }
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (timed_out || !got.held) {
        if (timed_out)
            complain(fmt::format("the {} of '{}' was not acquired within {}", what, name,
                                 format_duration(*o.wait)));
        else
            complain(fmt::format("the {} of '{}' is not free now ({})", what, name,
                                 reader ? "a writer holds it or waits for it"
                                        : "readers or a writer hold it, or wait for it"));
        co_return exit_not_acquired;
    }
    lease_words const words{fmt::format("the {} of '{}' (fence {})", what, name, got.held->fence()),
                            fmt::format("release the {} of '{}'", what, name)};
    holding_lease lease{*got.held, [&got] { return got.held->unlock(); }};
    co_return co_await run_under_lease(o, lease, words, sigs);
}

} // namespace

asio::awaitable<int> run_exec(options const& o, redis::connection& conn, locker& lk) {
    // Caught from here on: while waiting for the lock, they end the wait; while the command
    // runs, they are passed on to it.
    tool_signals sigs{co_await asio::this_coro::executor, true};
    if (o.permits)
        co_return co_await run_exec_permit(o, conn, lk, sigs);
    if (o.rw == options::rw_mode::shared)
        co_return co_await run_exec_rw<read_guard>(o, conn, lk, sigs);
    if (o.rw == options::rw_mode::exclusive)
        co_return co_await run_exec_rw<write_guard>(o, conn, lk, sigs);

    acquisition got;
    bool timed_out = false;
    try {
        got = co_await acquire(o, lk, sigs.stop);
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::timeout)
            throw;
        timed_out = true;
    }
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (timed_out || !got.guard) {
        auto const holder = co_await holder_text(lk, o.name);
        if (timed_out)
            complain(fmt::format("lock '{}' not acquired within {}{}", printable(o.name),
                                 format_duration(*o.wait), holder));
        else
            complain(fmt::format("lock '{}' is held by someone else{}", printable(o.name), holder));
        co_return exit_not_acquired;
    }
    auto const name = printable(o.name);
    lease_words const words{fmt::format("the lock '{}'", name),
                            fmt::format("release the lock '{}'", name)};
    guard_lease lease{*got.guard};
    co_return co_await run_under_lease(o, lease, words, sigs);
}

} // namespace colock::cli
