#include "supervise.hpp"

#include "child_process.hpp"
#include "text.hpp"

#include <colock/lock_observer.hpp>
#include <colock/resp3/request.hpp>

#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <signal.h>

#include <cerrno>
#include <cstring>

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

// The lease's async_wait_lost as a deferred operation, for a parallel group.
auto async_wait_lost(held_lease& lease) {
    return asio::async_initiate<asio::deferred_t const&, void(boost::system::error_code)>(
        [&lease](auto handler) { lease.async_wait_lost(std::move(handler)); }, asio::deferred);
}

enum class event { child_signal, stop_signal, lost, grace_over };

struct next {
    event what;
    int signal = 0;
};

// The next thing to act on: a SIGCHLD, a stop signal to the tool, and either the loss of the
// lease (while it holds) or the end of the grace period (once lost).
asio::awaitable<next> wait_next(tool_signals& sigs, held_lease& lease, asio::steady_timer& grace,
                                bool holding) {
    if (holding) {
        auto [order, chld_ec, chld_sig, stop_ec, stop_sig, lost_ec] =
            co_await make_parallel_group(sigs.chld.async_wait(asio::deferred),
                                         sigs.stop.async_wait(asio::deferred),
                                         async_wait_lost(lease))
                .async_wait(wait_for_one(), asio::use_awaitable);
        if (order[0] == 0)
            co_return next{event::child_signal, chld_sig};
        if (order[0] == 1)
            co_return next{event::stop_signal, stop_sig};
        // Lost, or (error::not_held) no longer held for another reason: either way the
        // command no longer runs under the lease.
        co_return next{event::lost};
    }
    auto [order, chld_ec, chld_sig, stop_ec, stop_sig, timer_ec] =
        co_await make_parallel_group(sigs.chld.async_wait(asio::deferred),
                                     sigs.stop.async_wait(asio::deferred),
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
asio::awaitable<outcome> supervise(options const& o, held_lease& lease, lease_words const& words,
                                   pid_t child, tool_signals& sigs) {
    asio::steady_timer grace{co_await asio::this_coro::executor};
    outcome out;
    for (;;) {
        // Reaped before each wait: a SIGCHLD that came before the wait started is not missed,
        // since the signal_set keeps it until it is waited for.
        if (auto status = try_reap(child)) {
            out.wait_status = *status;
            co_return out;
        }
        auto const ev = co_await wait_next(sigs, lease, grace, !out.lost);
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
            complain(fmt::format("lost {}: {}; sending SIGTERM to the command (pid {})", words.held,
                                 loss_text(lease.loss()), child));
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

// Gives the lease up; true when it was still ours. A failure is reported, and the lease ends
// by itself when its ttl runs out.
asio::awaitable<bool> give_up(held_lease& lease, lease_words const& words) {
    std::string failure;
    try {
        co_return co_await lease.give_up();
    } catch (std::exception const& e) {
        failure = e.what();
    }
    complain(fmt::format("could not {} ({}); it ends by itself when its lease runs out",
                         words.give_up, failure));
    co_return true;
}

} // namespace

void guard_lease::async_wait_lost(lost_handler handler) {
    guard_.async_wait_lost(std::move(handler));
}

std::optional<loss_reason> guard_lease::loss() const {
    return guard_.loss();
}

asio::awaitable<bool> guard_lease::give_up() {
    return guard_.release();
}

void holding_lease::async_wait_lost(lost_handler handler) {
    holding_.async_wait_lost(std::move(handler));
}

std::optional<loss_reason> holding_lease::loss() const {
    if (loss_after_release_)
        return loss_after_release_;
    return holding_.loss();
}

asio::awaitable<bool> holding_lease::give_up() {
    auto const before = holding_.loss();
    bool const ours = co_await give_up_();
    if (before)
        loss_after_release_ = before;
    else if (!ours)
        loss_after_release_ = loss_reason::not_ours; // expired or gone at the server
    co_return ours;
}

tool_signals::tool_signals(asio::any_io_executor const& ex, bool children) : stop(ex), chld(ex) {
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
        if (!ignored_at_start(sig)) {
            stop.add(sig);
            caught.push_back(sig);
        }
    if (children) {
        chld.add(SIGCHLD);
        caught.push_back(SIGCHLD);
    }
}

asio::awaitable<void> let_queue_exit_go_out(redis::connection& conn) {
    try {
        resp3::request ping;
        ping.push("PING");
        co_await conn.co_exec(std::move(ping));
    } catch (std::exception const&) {
    }
}

std::vector<std::string> lease_identity::environment() const {
    return {"COLOCK_NAME=" + name, "COLOCK_FENCE=" + fence, "COLOCK_TOKEN=" + token};
}

asio::awaitable<int> run_under_lease(options const& o, held_lease& lease, lease_words const& words,
                                     lease_identity const& identity, tool_signals& sigs) {
    spawned child;
    std::exception_ptr spawn_failure;
    try {
        child = spawn_command(o.command, sigs.caught, identity.environment());
    } catch (std::exception const&) {
        spawn_failure = std::current_exception();
    }
    if (spawn_failure || child.exec_error != 0) {
        co_await give_up(lease, words);
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

    auto const out = co_await supervise(o, lease, words, child.pid, sigs);
    if (out.lost) {
        co_await give_up(lease, words); // returns at once: the loss is known
        co_return exit_lost;
    }
    if (auto const why = lease.loss()) {
        // Lost, or past its local end, by the time the command's exit was seen, with nothing
        // noticed meanwhile (the tool was stopped or starved): the command may have outlived
        // the lease, even if the server happens to hold it still.
        co_await give_up(lease, words);
        complain(fmt::format("{} was lost before the command ended ({}): the command may not "
                             "have run alone",
                             words.held, loss_text(why)));
        co_return exit_lost;
    }
    if (!co_await give_up(lease, words)) {
        // The server no longer had the lease when the command ended: it was lost at some point
        // while the command ran, unnoticed until now.
        complain(fmt::format("{} was lost before the command ended ({}): the command may not "
                             "have run alone",
                             words.held, loss_text(lease.loss())));
        co_return exit_lost;
    }
    co_return exit_code_of(out.wait_status);
}

} // namespace colock::cli
