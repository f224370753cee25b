// colock exec: take the lock, run the command while the lease is renewed, and stop the
// command when the lease is lost.
#include "child_process.hpp"
#include "cli.hpp"
#include "text.hpp"

#include <colock/error.hpp>
#include <colock/lock_observer.hpp>
#include <colock/resp3/request.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

namespace colock::cli {

namespace {

namespace asio = boost::asio;
using asio::experimental::make_parallel_group;
using asio::experimental::wait_for_one;

// Why the lease was lost, for the message.
std::string loss_text(std::optional<loss_reason> why) {
    if (!why)
        return "the lease ended";
    switch (*why) {
    case loss_reason::not_ours:
        return "its key expired, was deleted or was taken over on the server";
    case loss_reason::expired:
        return "no renewal was confirmed before the lease ran out";
    case loss_reason::server_replaced:
        return "the Redis server was replaced (a restart or failover)";
    case loss_reason::forced:
        return "ended by a forced unlock";
    }
    return "the lease ended";
}

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

// The outcome of `op` (a lock_guard, or an optional one), or the signal (SIGINT, SIGTERM,
// SIGHUP) that came first. A lock the call got while the signal arrived is let go (its guard's
// destructor releases it). Throws what `op` throws.
template <class Result>
asio::awaitable<acquisition> or_signal(asio::awaitable<Result> op, asio::signal_set& stop) {
    auto [order, failure, result, sig_ec, sig] =
        co_await make_parallel_group(
            asio::co_spawn(co_await asio::this_coro::executor, std::move(op), asio::deferred),
            stop.async_wait(asio::deferred))
            .async_wait(wait_for_one(), asio::use_awaitable);
    acquisition out;
    if (order[0] == 1) {
        out.signal = sig;
        co_return out;
    }
    if (failure)
        std::rethrow_exception(failure);
    out.guard = std::move(result);
    co_return out;
}

// Waits up to --wait (one attempt for --wait 0); throws error::timeout when that passed.
asio::awaitable<acquisition> acquire(options const& o, locker& lk, asio::signal_set& stop) {
    lock_options lo;
    lo.ttl = o.ttl;
    lo.wait_timeout = o.wait;
    if (o.wait && o.wait->count() == 0)
        co_return co_await or_signal(lk.co_try_lock(o.name, lo), stop);
    co_return co_await or_signal(lk.co_lock(o.name, lo), stop);
}

enum class event { child_signal, stop_signal, lost, grace_over };

struct next {
    event what;
    int signal = 0;
};

// The next thing to act on: a SIGCHLD, a stop signal to the tool, and either the loss of the
// lease (while it holds) or the end of the grace period (once lost).
asio::awaitable<next> wait_next(asio::signal_set& chld, asio::signal_set& stop, lock_guard& guard,
                                asio::steady_timer& grace, bool holding) {
    if (holding) {
        auto [order, chld_ec, chld_sig, stop_ec, stop_sig, lost_ec] =
            co_await make_parallel_group(chld.async_wait(asio::deferred),
                                         stop.async_wait(asio::deferred),
                                         guard.async_wait_lost(asio::deferred))
                .async_wait(wait_for_one(), asio::use_awaitable);
        if (order[0] == 0)
            co_return next{event::child_signal, chld_sig};
        if (order[0] == 1)
            co_return next{event::stop_signal, stop_sig};
        // Lost, or (error::not_held) no longer held for another reason: either way the
        // command no longer runs under the lock.
        co_return next{event::lost};
    }
    auto [order, chld_ec, chld_sig, stop_ec, stop_sig, timer_ec] =
        co_await make_parallel_group(chld.async_wait(asio::deferred),
                                     stop.async_wait(asio::deferred),
                                     grace.async_wait(asio::deferred))
            .async_wait(wait_for_one(), asio::use_awaitable);
    if (order[0] == 0)
        co_return next{event::child_signal, chld_sig};
    if (order[0] == 1)
        co_return next{event::stop_signal, stop_sig};
    co_return next{event::grace_over};
}

void send(pid_t pid, int signal) {
    if (kill(pid, signal) != 0 && errno != ESRCH)
        complain(fmt::format("could not send {} to the command (pid {}): {}", signal_name(signal),
                             pid, std::strerror(errno)));
}

struct outcome {
    int wait_status = 0;
    bool lost = false;
};

// Until the command exits: passes stop signals on, and on loss of the lease sends SIGTERM, then
// SIGKILL after the grace period.
asio::awaitable<outcome> supervise(options const& o, lock_guard& guard, pid_t child,
                                   asio::signal_set& chld, asio::signal_set& stop) {
    asio::steady_timer grace{co_await asio::this_coro::executor};
    outcome out;
    for (;;) {
        // Reaped before each wait: a SIGCHLD that came before the wait started is not missed,
        // since the signal_set keeps it until it is waited for.
        if (auto status = try_reap(child)) {
            out.wait_status = *status;
            co_return out;
        }
        auto const ev = co_await wait_next(chld, stop, guard, grace, !out.lost);
        switch (ev.what) {
        case event::child_signal:
            break;
        case event::stop_signal:
            // From a terminal, SIGINT went to the whole foreground process group, the command
            // included: sending it again would count twice.
            if (ev.signal != SIGINT || !in_terminal_foreground())
                send(child, ev.signal);
            break;
        case event::lost:
            out.lost = true;
            complain(fmt::format("lost the lock '{}': {}; sending SIGTERM to the command (pid {})",
                                 printable(o.name), loss_text(guard.loss()), child));
            send(child, SIGTERM);
            grace.expires_after(o.grace);
            break;
        case event::grace_over:
            complain(fmt::format("the command (pid {}) did not exit within {} of SIGTERM; "
                                 "sending SIGKILL",
                                 child, format_duration(o.grace)));
            send(child, SIGKILL);
            grace.expires_at(asio::steady_timer::time_point::max());
            break;
        }
    }
}

// Releases the lock; true when it was still ours. A release that failed is reported, and the
// lock frees itself when its lease ends.
asio::awaitable<bool> release(lock_guard& guard, std::string const& name) {
    std::string failure;
    try {
        co_return co_await guard.unlock();
    } catch (std::exception const& e) {
        failure = e.what();
    }
    complain(fmt::format("could not release the lock '{}' ({}); it frees itself when its lease "
                         "ends",
                         printable(name), failure));
    co_return true;
}

} // namespace

asio::awaitable<int> run_exec(options const& o, redis::connection& conn, locker& lk) {
    auto const ex = co_await asio::this_coro::executor;

    // A signal ignored at start (nohup; SIGINT in a background job) stays ignored, for the
    // command too. The others are caught from here on: while waiting for the lock, they end
    // the wait; while the command runs, they are passed on to it.
    std::vector<int> caught;
    asio::signal_set stop{ex};
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        if (!ignored_at_start(sig)) {
            stop.add(sig);
            caught.push_back(sig);
        }
    asio::signal_set chld{ex, SIGCHLD};
    caught.push_back(SIGCHLD);

    acquisition got;
    bool timed_out = false;
    try {
        got = co_await acquire(o, lk, stop);
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::timeout)
            throw;
        timed_out = true;
    }
    if (got.signal != 0) {
        // The cancelled wait takes this locker out of the name's queue in Redis with a request
        // the locker makes after the wait has completed. One round trip lets it be made before
        // the connection closes; otherwise the entry stays until it lapses (3 s), and a release
        // meanwhile hands the lock to this departed process, costing the next holder a claim.
        try {
            resp3::request ping;
            ping.push("PING");
            co_await conn.co_exec(std::move(ping));
        } catch (std::exception const&) {
        }
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
    lock_guard& guard = *got.guard;

    spawned child;
    std::exception_ptr spawn_failure;
    try {
        child = spawn_command(o.command, caught);
    } catch (std::exception const&) {
        spawn_failure = std::current_exception();
    }
    if (spawn_failure || child.exec_error != 0) {
        co_await release(guard, o.name);
        if (spawn_failure)
            std::rethrow_exception(spawn_failure);
        auto const& program = o.command.front();
        if (child.exec_error == ENOENT && program.find('/') == std::string::npos) {
            complain(fmt::format("{}: command not found", printable(program)));
            co_return exit_not_found;
        }
        complain(fmt::format("cannot run '{}': {}", printable(program),
                             std::strerror(child.exec_error)));
        co_return child.exec_error == ENOENT ? exit_not_found : exit_not_executable;
    }

    auto const out = co_await supervise(o, guard, child.pid, chld, stop);
    if (out.lost) {
        co_await release(guard, o.name); // returns at once: the loss is known
        co_return exit_lost;
    }
    if (!co_await release(guard, o.name)) {
        // The server no longer had the lease when the command ended: it was lost at some point
        // while the command ran, unnoticed until now.
        complain(fmt::format("the lock '{}' was lost before the command ended ({}): the command "
                             "may not have run alone",
                             printable(o.name), loss_text(guard.loss())));
        co_return exit_lost;
    }
    co_return exit_code_of(out.wait_status);
}

} // namespace colock::cli
