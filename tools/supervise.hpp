// What `colock exec` (of a lock or of a semaphore's permit) and `colock elect` share: the
// signals they catch, a wait that a signal ends, and the command run while a lease holds
// (SIGTERM on loss, SIGKILL after --grace, stop signals passed on), with the lease given up when
// the command ends.
#pragma once

#include "cli.hpp"

#include <colock/lease_guard.hpp>
#include <colock/lock_observer.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colock::cli {

/// The signals a subcommand catches from its start. A signal ignored at start (nohup; SIGINT
/// in a background job) stays ignored, for the command too.
struct tool_signals {
    /// Catches SIGINT, SIGTERM and SIGHUP in `stop`, and with `children` SIGCHLD in `chld`.
    tool_signals(boost::asio::any_io_executor const& ex, bool children);

    /// SIGINT, SIGTERM, SIGHUP: end a wait; passed on to a running command.
    boost::asio::signal_set stop;
    /// SIGCHLD, when asked for.
    boost::asio::signal_set chld;
    /// Every signal caught: a command resets them to their defaults before its exec.
    std::vector<int> caught;
};

/// The outcome of an operation raced against a stop signal.
template <class Result>
struct raced {
    /// The operation's result; empty when a signal came first.
    std::optional<Result> value;
    /// The signal that came first, or 0.
    int signal = 0;
};

/// Runs `op` until it completes or a signal of `stop` comes, whichever is first; the other is
/// cancelled (a lock or a leadership the operation got meanwhile is let go by its destructor).
/// Throws what `op` throws.
template <class Result>
boost::asio::awaitable<raced<Result>> or_signal(boost::asio::awaitable<Result> op,
                                                boost::asio::signal_set& stop) {
    namespace asio = boost::asio;
    auto [order, failure, result, sig_ec, sig] =
        co_await asio::experimental::make_parallel_group(
            asio::co_spawn(co_await asio::this_coro::executor, std::move(op), asio::deferred),
            stop.async_wait(asio::deferred))
            .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    raced<Result> out;
    if (order[0] == 1) {
        out.signal = sig;
        co_return out;
    }
    if (failure)
        std::rethrow_exception(failure);
    out.value.emplace(std::move(result));
    co_return out;
}

/// After a wait in a lock's queue ended by a signal: the cancelled wait takes this locker out
/// of the queue in Redis with a request made after the wait completed. One round trip lets it
/// go out before the connection closes; otherwise the entry stays until it lapses (3 s), and a
/// release meanwhile hands the lock to this departed process, costing the next holder a claim.
boost::asio::awaitable<void> let_queue_exit_go_out(redis::connection& conn);

/// A lease a command runs under, in the words of the messages.
struct lease_words {
    /// "the lock 'x'", "the leadership of election 'x' (term 7)".
    std::string held;
    /// "release the lock 'x'", "resign the leadership of election 'x'".
    std::string give_up;
};

/// What the command is told of its lease, in its environment: COLOCK_NAME (the name given),
/// COLOCK_FENCE (the fence, for an election the term) and COLOCK_TOKEN (the holding's token at
/// the server), so that what it writes to can refuse a late write (docs/safety.md).
struct lease_identity {
    std::string name;
    std::string fence; // decimal; for several locks (exec --all), each name's, space-separated
    std::string token;

    /// The three variables, "NAME=VALUE".
    std::vector<std::string> environment() const;
};

/// The lease a command runs under, whatever holds it: what the supervision needs of a
/// lock_guard (a lock's, a leadership's) or of a semaphore's permit. Refers to the holder, which
/// outlives it.
class held_lease {
public:
    using lost_handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
    virtual ~held_lease() = default;
    /// Completes when the lease is lost or no longer held (the holder's async_wait_lost).
    virtual void async_wait_lost(lost_handler handler) = 0;
    /// Why the lease was lost, once it was.
    virtual std::optional<loss_reason> loss() const = 0;
    /// Gives the lease up (unlock, resign, release): true when it was still ours. Throws
    /// system_error when that was not confirmed.
    virtual boost::asio::awaitable<bool> give_up() = 0;
};

/// A lock_guard's lease; giving it up unlocks (for a leadership's guard: resigns).
class guard_lease final : public held_lease {
public:
    explicit guard_lease(lock_guard& guard) noexcept : guard_(guard) {}
    void async_wait_lost(lost_handler handler) override;
    std::optional<loss_reason> loss() const override;
    boost::asio::awaitable<bool> give_up() override;

private:
    lock_guard& guard_;
};

/// A holding of a semaphore or a read-write lock (a permit, a read or write guard); giving it
/// up releases it (`give_up`: its release() or release()).
class holding_lease final : public held_lease {
public:
    holding_lease(lease_guard& holding, std::function<boost::asio::awaitable<bool>()> give_up)
        : holding_(holding), give_up_(std::move(give_up)) {}
    void async_wait_lost(lost_handler handler) override;
    std::optional<loss_reason> loss() const override;
    boost::asio::awaitable<bool> give_up() override;

private:
    lease_guard& holding_;
    std::function<boost::asio::awaitable<bool>()> give_up_;
    /// Once given up: the loss known before, or not_ours when the server no longer had it.
    std::optional<loss_reason> loss_after_release_;
};

/// Runs `opt.command` while `lease` holds, with `identity` in its environment, then gives the lease
/// up: at once when the command exits, fails to start, or after a stop signal passed on to it has
/// ended it. If the lease is lost meanwhile, the command gets SIGTERM, then SIGKILL after
/// `opt.grace`. Returns the exit code: the command's own status, exit_lost, exit_not_executable or
/// exit_not_found. Throws when the command could not be started (fork, pipe) after giving the lease
/// up.
boost::asio::awaitable<int> run_under_lease(options const& opt, held_lease& lease,
                                            lease_words const& words,
                                            lease_identity const& identity, tool_signals& signals);

} // namespace colock::cli
