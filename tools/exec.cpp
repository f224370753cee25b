// colock exec: take the lock, run the command while the lease is renewed, and stop the
// command when the lease is lost.
#include "cli.hpp"
#include "supervise.hpp"
#include "text.hpp"

#include <colock/error.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <exception>
#include <optional>
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
asio::awaitable<acquisition> acquire(options const& o, locker& lk, asio::signal_set& stop) {
    lock_options lo;
    lo.ttl = o.ttl;
    lo.wait_timeout = o.wait;
    acquisition out;
    if (o.wait && o.wait->count() == 0) {
        auto got = co_await or_signal(lk.co_try_lock(o.name, lo), stop);
        out.signal = got.signal;
        if (got.value)
            out.guard = std::move(*got.value);
        co_return out;
    }
    auto got = co_await or_signal(lk.co_lock(o.name, lo), stop);
    out.signal = got.signal;
    out.guard = std::move(got.value);
    co_return out;
}

} // namespace

asio::awaitable<int> run_exec(options const& o, redis::connection& conn, locker& lk) {
    // Caught from here on: while waiting for the lock, they end the wait; while the command
    // runs, they are passed on to it.
    tool_signals sigs{co_await asio::this_coro::executor, true};

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
    co_return co_await run_under_lease(o, *got.guard, words, sigs);
}

} // namespace colock::cli
