/// \file
/// Distributed locks on one Redis connection: locker takes them, lock_guard holds them.
#pragma once

#include <colock/error.hpp>
#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>
#include <colock/lock_status.hpp>
#include <colock/multi_lock_guard.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace colock {

namespace detail {
class guard_state;
class locker_impl;
struct guard_access;
struct locker_access;
} // namespace detail

/// Holds one acquired lock. Move-only. While it lives (and auto_renew is on) a renewal
/// coroutine keeps the lease alive; when it goes, renewal stops and the lock is released in
/// the background (fire-and-forget; the destructor never blocks).
///
/// @par Sharing
/// share() (and lock_scope, which uses it) makes more guards on one lease: the same name,
/// token, fence and lease deadline, one renewal. The lease is given back (released, or handed
/// to the next waiter as any release is) when the last of its guards lets go: destruction,
/// release() or a move-assignment over it. Until then a guard that lets go only gives up its
/// own hold (see release()). extend() through any of them extends the lease for all; lost(),
/// loss() and lease_expiry() are the lease's, and wait_lost() completes on each of them when
/// the lease is lost. A share is not an acquisition: no observer event, no holder-record
/// write, no Redis command.
///
/// @par Thread safety
/// name, token, fence, owns, lost, hold_count and share may be called from any thread,
/// and guards sharing a lease may live on different threads. The awaitable operations of one
/// guard (and its share()) must not run concurrently with its destruction or move.
class lock_guard {
public:
    /// A guard that holds nothing.
    lock_guard() noexcept;
    /// Takes over `other`'s lock, its renewal included; `other` then holds nothing.
    lock_guard(lock_guard&& other) noexcept;
    /// Releases the lock this guard held (in the background), then takes over `other`'s.
    lock_guard& operator=(lock_guard&& other) noexcept;
    /// Stops the renewal and releases the lock it holds, if any, in the background; never
    /// blocks.
    ~lock_guard();

    /// The lock's name; empty for a default-constructed or moved-from guard.
    std::string const& name() const noexcept;
    /// The 128-bit random token (32 hex digits) that marks this holder in Redis.
    std::string const& token() const noexcept;
    /// Fencing token: strictly increasing per name, over all holders. Pass it to the resource
    /// the lock protects so it can refuse a late write from an earlier holder.
    std::int64_t fence() const noexcept;
    /// True while this guard holds the lock: acquired, not lost, not released, and not let go
    /// through this guard (a guard that let go while others share the lease owns nothing).
    bool owns() const noexcept;
    /// The former name of owns().
    /// @deprecated Use owns(), the name every holding of the family shares; owns_lock() goes in
    /// the next release.
    [[deprecated("colock: use owns()")]] bool owns_lock() const noexcept { return owns(); }
    /// Another guard on this guard's lease (see Sharing in the class's notes): the same name,
    /// token, fence and lease deadline, and one hold more, so the lease is given back only
    /// when every guard sharing it has let go. Makes no Redis command and no observer event.
    /// A guard that holds nothing (default-constructed, moved from, or let go) returns an
    /// empty guard, as a default-constructed one. A lost lease is shared as it is: the new
    /// guard is lost() too.
    lock_guard share() const noexcept;
    /// How many guards hold this guard's lease now (1 for one never shared; each share() adds
    /// one, each guard that lets go takes one off); 0 when this guard holds nothing. From any
    /// thread; for the record, as it may change as soon as it is read.
    std::size_t hold_count() const noexcept;
    /// owns().
    explicit operator bool() const noexcept { return owns(); }
    /// True once the lease was found lost: taken from outside, expired, not renewable before
    /// its deadline, or held on a server instance that was replaced (a restart or failover
    /// noticed on reconnection).
    bool lost() const noexcept;
    /// Why the lease was lost (see loss_reason); empty while lost() is false.
    std::optional<loss_reason> loss() const noexcept;
    /// The local bound of the lease: when the last successful acquire or extend was sent plus
    /// its ttl, on the steady clock. The server's expiry is never earlier, so until then no one
    /// else can hold the lock (short of a server restart or failover that lost the key). A
    /// renewal or extend that may shorten the lease lowers it to its own send time plus its
    /// ttl before it is sent, since the server may apply it even if its reply is never seen;
    /// only a confirmed reply moves it later. owns() is false from this point on unless a
    /// renewal moves it. A default time_point for a default-constructed or moved-from guard.
    std::chrono::steady_clock::time_point lease_expiry() const noexcept;

    /// Completes when the lease is lost, or at once if it already is. Completes too when the
    /// lease is let go (release, destruction, move of its last guard), so no one waits forever;
    /// lost() tells which. A guard that shares its lease and lets go while others still hold
    /// it leaves its pending waits as they are: they complete with the lease. Meant for
    /// `co_await (work() || guard.wait_lost())`.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code)`: success when lost; error::not_held when the guard
    /// no longer holds the lock for another reason.
    /// @par Per-operation cancellation
    /// terminal, partial, total: the wait ends with operation_aborted; nothing else changes.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_wait_lost(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [this](auto handler) { start_wait_lost(std::move(handler)); }, token);
    }

    /// Awaitable form of async_wait_lost: returns when the lease is lost or the guard stops
    /// holding; throws boost::system::system_error(operation_aborted) when cancelled.
    boost::asio::awaitable<void> wait_lost();

    /// Sets the lease to `ttl` from now, if the lock is still ours; later renewals use `ttl`
    /// too. Returns false (and marks the guard lost) when the lock was no longer ours.
    /// Throws boost::system::system_error on network failure, and with error::not_held when
    /// the guard was released or moved from, error::invalid_argument for ttl <= 0 or above
    /// max_lock_ttl.
    /// Cancellation: as the connection's async_exec; a cancelled extend may still have run.
    boost::asio::awaitable<bool> extend(std::chrono::milliseconds ttl);

    /// Stops renewal, then releases the lock. Returns true when the lock was still ours and
    /// is now free; false when it was lost, already released, or this guard never held one.
    /// A guard that shares its lease with others that still hold it (share(), lock_scope)
    /// lets go of its own hold only: no Redis command, the lease stays with the others, and it
    /// returns true when the lease was still ours (not lost, not run out), false otherwise.
    /// A guard whose loss has been reported (wait_lost completed: the server said so, the
    /// renewal's deadline passed, or the server was replaced) returns false at once, without
    /// waiting for the server; its release is still sent in the background.
    /// A release whose reply a lost connection swallowed is sent again (the script checks the
    /// token, so this is safe); if the first one had gone through, the repeat reports false.
    /// Not cancelled by the caller's cancellation: a cancelled caller still gives the lock
    /// back (bounded by a short deadline, 5 s). Throws boost::system::system_error only when
    /// the release could not be done by then: error::timeout (the same code as co_lock's
    /// wait_timeout), or the connection's error; the lease then runs out by its TTL.
    /// Unlike std::unique_lock::release(), which forgets a mutex without unlocking it, this
    /// gives the lock back: no colock guard forgets a lease it holds.
    boost::asio::awaitable<bool> release();
    /// The former name of release().
    /// @deprecated Use release(), the name every holding of the family shares; unlock() goes in
    /// the next release.
    [[deprecated("colock: use release()")]] boost::asio::awaitable<bool> unlock() {
        return release();
    }

    /// release() for any completion token (callbacks, futures, deferred operations): the same
    /// release, not cancelled by the caller, bounded by the same deadline. The guard lets go
    /// of its hold when this is called, and may go away at once: the operation carries the
    /// hold (a deferred operation that is never launched gives it back as the destructor
    /// would).
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, bool released)`: `released` as release() returns it;
    /// error::timeout when the release was not confirmed by its deadline, or the connection's
    /// error (the lease then runs out by its TTL).
    /// @par Per-operation cancellation
    /// None: a cancelled caller still gives the lock back.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_release(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [](auto handler, lock_guard hold) {
                start_release(std::move(hold), std::move(handler));
            },
            token, take_hold());
    }
    /// The former name of async_release().
    /// @deprecated Use async_release(); async_unlock() goes in the next release.
    template <class CompletionToken = boost::asio::deferred_t>
    [[deprecated("colock: use async_release()")]] auto async_unlock(CompletionToken&& token = {}) {
        return async_release(std::forward<CompletionToken>(token));
    }

    /// extend() for any completion token. Refuses a ttl <= 0 or above max_lock_ttl by throwing
    /// boost::system::system_error(error::invalid_argument) before anything starts.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, bool extended)`: `extended` as extend() returns it;
    /// error::not_held when the guard holds nothing; a network error otherwise.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec; a cancelled extend may still have run.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_extend(std::chrono::milliseconds ttl, CompletionToken&& token = {}) {
        validate_extend(ttl);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [st = held_state(), ttl, n = name()](auto handler) {
                start_extend(st, ttl, n, std::move(handler));
            },
            token);
    }

private:
    friend class detail::locker_impl;
    friend struct detail::locker_access;
    friend class locker;
    friend struct detail::guard_access;
    using result_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;
    static void start_release(lock_guard hold, result_handler handler);
    static void start_extend(std::shared_ptr<detail::guard_state> st, std::chrono::milliseconds ttl,
                             std::string const& name, result_handler handler);
    void validate_extend(std::chrono::milliseconds ttl) const;
    // A guard holding one hold on `state` (a hold taken already, or the first).
    explicit lock_guard(std::shared_ptr<detail::guard_state> state) noexcept;
    void
    start_wait_lost(boost::asio::any_completion_handler<void(boost::system::error_code)> handler);
    void abandon() noexcept;
    // This guard's hold, moved into a guard of its own (empty when it holds none).
    lock_guard take_hold() noexcept;
    // The state while this guard holds, else null.
    std::shared_ptr<detail::guard_state> held_state() const;
    // Lets go of this guard's hold: true when it had one; `last` tells whether it was the
    // lease's last.
    bool drop_hold(bool& last) noexcept;

    std::shared_ptr<detail::guard_state> state_;
    // Whether this guard holds one of its lease's holds; cleared once, by whoever lets go.
    std::atomic<bool> holding_{false};
};

namespace detail {

// The R of a boost::asio::awaitable<R>.
template <class Awaitable>
struct awaited_value;
template <class T, class Executor>
struct awaited_value<boost::asio::awaitable<T, Executor>> {
    using type = T;
};

// What locker::co_with_lock(name, f) returns: the value of the awaitable f(guard) returns.
template <class F>
using with_lock_result_t = typename awaited_value<std::invoke_result_t<F&, lock_guard&>>::type;

// co_with_lock's end: gives the lock back, then throws lock_lost (or not_held) when wait_lost()
// won the race (`lease_went_first`; the work's exception is then its cancellation's), rethrows
// the work's `failure`, or throws lock_lost when the work returned but the guard was lost or
// past its lease's local end by then.
boost::asio::awaitable<void> end_with_lock(lock_guard& guard, std::exception_ptr failure,
                                           bool lease_went_first);

} // namespace detail

/// Takes distributed locks on one Redis connection. Lock `name` lives in the key
/// `<prefix>{name}` (its holder and fence); processes waiting for it queue in
/// `<prefix>{name}:q` and `<prefix>{name}:qd`, and each is told of its turn on the channel
/// `<prefix>{name}:w:<locker id>`. The braces keep them all in one Redis Cluster slot.
///
/// Waiting co_lock calls for one name in one process share one subscription and queue in FIFO
/// order, with no coroutine of their own while they wait; only the first of them asks Redis,
/// and a release hands the lock to it alone (or, from a holder of this process, without a
/// round trip: see lock_options::cohort_limit).
///
/// @par Thread safety
/// Any member function may be called from any thread; the locker's state lives on a strand.
/// The connection must outlive the locker; guards keep what they need alive themselves.
///
/// @par Completion
/// Handlers run on their associated executor, or on get_executor() (the connection's) when
/// they have none; never inside a turn of the library's strands, so a handler that computes
/// for a while delays neither the connection's reads nor the renewals.
class locker {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;

    /// Takes locks on `conn`, in keys and channels whose names start with `key_prefix`:
    /// processes that are to exclude one another use the same prefix on the same server. A
    /// prefix whose first '{' is closed at once ("app{}:") is refused with
    /// error::invalid_argument: it would split a lock's keys over Cluster slots.
    explicit locker(redis::connection& conn, std::string key_prefix = "colock:");
    /// Redlock: the same locks over `primaries`, independent Redis servers (an odd number, at
    /// least 3; each a single server or a Sentinel-resolved primary, not a Cluster). A lock is
    /// granted when a majority grants it within its validity (ttl, less the time the attempt
    /// took, less ttl × 1 % + 2 ms of clock drift), which lock_guard::lease_expiry() reports;
    /// renewal and release go to every primary, and a lease is lost when fewer than a majority
    /// confirm it in time. Guards, options, hand-offs, cohorts and fences are as on one server;
    /// see docs/deployments.md (Redlock) for what the quorum guarantees and what it does not.
    /// A connection may serve other lockers too; none of them may be the same server twice.
    /// Throws boost::system::system_error(error::invalid_argument) for a null pointer, fewer
    /// than 3 or an even number of primaries, or one connection or endpoint given twice; the
    /// same server behind two endpoints is found by its run_id once connected, and every
    /// attempt then fails with error::invalid_argument. The connections must outlive the locker.
    explicit locker(std::span<redis::connection* const> primaries,
                    std::string key_prefix = "colock:");
    /// As an Asio I/O object's: every co_lock / co_try_lock under way ends with
    /// operation_aborted, as a terminal cancellation ends it (an attempt already sent is read
    /// to its end, and a lock it won is given back; the call leaves the queues). Guards taken
    /// through the locker live on: they keep renewing, and release(), extend() and their
    /// destructors give their leases back, for as long as their connection is open.
    ~locker();
    locker(locker const&) = delete;
    locker& operator=(locker const&) = delete;

    /// The prefix given at construction, which starts every key and channel of this locker.
    std::string const& key_prefix() const noexcept;
    /// How many co_lock calls of this locker are waiting in its local queues now; from any
    /// thread. For monitoring: the figure may change as soon as it is read.
    std::size_t waiting() const noexcept;
    /// The connection's executor: where handlers without an executor of their own complete.
    executor_type get_executor() const noexcept;
    /// Installs `observer` (or, with nullptr, removes the one installed): it is told of every
    /// acquisition, release, loss, renewal, change of a name's local queue and reconnection
    /// from then on (see lock_observer). From any thread; it takes effect on the locker's
    /// strand, so events that are already under way may still go to the one before. The
    /// locker keeps it alive while installed.
    void set_observer(std::shared_ptr<lock_observer> observer);

    /// Waits until the lock is acquired, then starts the renewal. Refuses bad arguments by
    /// throwing boost::system::system_error(error::invalid_argument) before any I/O. The name
    /// is taken by value: a deferred or stored operation never reads a caller's string late.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, lock_guard)`: error::timeout when wait_timeout
    /// passed; a network error or redis::error::server_error otherwise. The code cannot name
    /// the lock: with_diagnostics(token) completes with the exception co_lock throws, which
    /// does (colock/diagnostics.hpp). Transient server
    /// states (see is_transient_server_error) are waited out within wait_timeout.
    /// @par Per-operation cancellation
    /// terminal, partial: a sleeping waiter returns at once; with an attempt in flight, its
    /// reply is still read and a lock it granted is released before the operation completes
    /// with operation_aborted. A cancelled waiter never leaves a lock behind.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_lock(std::string_view name, lock_options opt = {}, CompletionToken&& token = {}) {
        validate(name, opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, lock_guard)>(
            [this](auto handler, std::string n, lock_options o) {
                start_lock(std::move(n), std::move(o), std::move(handler));
            },
            token, std::string(name), std::move(opt));
    }
    /// async_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_lock(std::string_view name, CompletionToken&& token) {
        return async_lock(std::move(name), lock_options{}, std::forward<CompletionToken>(token));
    }

    /// One attempt. Completes with an empty optional when someone else holds the lock.
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<lock_guard>)`.
    /// @par Per-operation cancellation
    /// As async_lock: a lock granted to a cancelled attempt is released first.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_lock(std::string_view name, lock_options opt = {},
                        CompletionToken&& token = {}) {
        validate(name, opt);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<lock_guard>)>(
            [this](auto handler, std::string n, lock_options o) {
                start_try_lock(std::move(n), std::move(o), std::move(handler));
            },
            token, std::string(name), std::move(opt));
    }
    /// async_try_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_lock(std::string_view name, CompletionToken&& token) {
        return async_try_lock(std::move(name), lock_options{},
                              std::forward<CompletionToken>(token));
    }

    /// Awaitable async_lock that throws boost::system::system_error whose message names the
    /// lock (and the server's text for server errors). The name is taken by value, so
    /// `co_spawn(ex, locker.co_lock("job:" + id), ...)` is safe.
    ///
    /// Not reentrant: a lock belongs to its guard, not to a coroutine, thread or process. A
    /// co_lock of a name this program already holds (through this locker or another) waits for
    /// that guard like any other waiter; from the coroutine that holds it, it waits for itself
    /// until wait_timeout (error::timeout), or for as long as the guard lives without one. Take
    /// the lock once and pass the guard to the code that needs it held, or share() it; for
    /// re-entry by a logical owner (a request, a job), see lock_scope. co_try_lock of a held
    /// name returns an empty optional.
    boost::asio::awaitable<lock_guard> co_lock(std::string_view name, lock_options opt = {});
    /// Awaitable async_try_lock: an empty optional when the lock is held by someone else;
    /// throws like co_lock on real errors.
    boost::asio::awaitable<std::optional<lock_guard>> co_try_lock(std::string_view name,
                                                                  lock_options opt = {});

    /// Locks every name of `names` at once, all or none: one lease over them (multi_lock_guard),
    /// a fence per name. Waits as co_lock does, in each name's queue, which co_lock of that name
    /// shares: no deadlock between calls naming overlapping sets in any order, FIFO per name,
    /// and a call for many names is not overtaken forever by calls for few (the names it may
    /// take are kept for it while it waits for the rest). A name repeated counts once; an empty
    /// set or a bad name is refused at the call (error::invalid_argument). On a Cluster, names
    /// that share a hash slot are taken in one call, and a set over several slots a slot at a
    /// time, in slot order; over independent primaries (Redlock), on a majority. Cancellation
    /// (terminal, partial) leaves nothing held or queued. Completes with the guard, or the error.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_lock_all(std::vector<std::string> names, lock_options opt = {},
                        CompletionToken&& token = {}) {
        validate_all(names, opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, multi_lock_guard)>(
            [this](auto handler, std::vector<std::string> n, lock_options o) {
                start_lock_all(std::move(n), std::move(o), std::move(handler));
            },
            token, std::move(names), std::move(opt));
    }
    /// async_lock_all with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_lock_all(std::vector<std::string> names, CompletionToken&& token) {
        return async_lock_all(std::move(names), lock_options{},
                              std::forward<CompletionToken>(token));
    }
    /// One attempt at every name of `names`: an empty optional when any is held (nothing is left
    /// held or queued then); else as async_lock_all.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_lock_all(std::vector<std::string> names, lock_options opt = {},
                            CompletionToken&& token = {}) {
        validate_all(names, opt);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<multi_lock_guard>)>(
            [this](auto handler, std::vector<std::string> n, lock_options o) {
                start_try_lock_all(std::move(n), std::move(o), std::move(handler));
            },
            token, std::move(names), std::move(opt));
    }
    /// async_try_lock_all with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_lock_all(std::vector<std::string> names, CompletionToken&& token) {
        return async_try_lock_all(std::move(names), lock_options{},
                                  std::forward<CompletionToken>(token));
    }
    /// Awaitable async_lock_all; throws system_error (or redis::connect_error) as co_lock does.
    boost::asio::awaitable<multi_lock_guard> co_lock_all(std::vector<std::string> names,
                                                         lock_options opt = {});
    /// Awaitable async_try_lock_all: an empty optional when any name is held.
    boost::asio::awaitable<std::optional<multi_lock_guard>>
    co_try_lock_all(std::vector<std::string> names, lock_options opt = {});

    /// Runs `f` under lock `name`, the `co_await (work() || guard.wait_lost())` users write by
    /// hand: takes the lock as co_lock(name, opt) does, runs the awaitable that `f(guard)`
    /// returns raced against the guard's wait_lost(), gives the lock back when it ends, and
    /// returns its result.
    ///
    /// `f` is called once, as `f(guard)` with a `lock_guard&` (for fence(), extend(), ...), and
    /// returns a `boost::asio::awaitable<R>` (R may be void). It must not let go of the guard
    /// (release, move): the lock is co_with_lock's to give back. A share() of the guard that
    /// outlives the call keeps the lease until it goes too.
    ///
    /// Throws as co_lock while waiting for the lock. If the lease is lost while `f` runs, `f` is
    /// cancelled (terminal cancellation, at its next co_await), the lock is given back and
    /// boost::system::system_error(error::lock_lost) is thrown, naming the lock and why it was
    /// lost (error::not_held if `f` let go of the guard instead). The same error when `f`
    /// returns but the guard is lost or its lease's local end has passed by then (`f` kept the
    /// thread busy past its ttl, so that nothing noticed the loss meanwhile): a result is
    /// returned only if the lease held until `f` returned. If `f` throws, the lock is
    /// given back and its exception rethrown. A release that cannot be confirmed after `f`
    /// returned does not hide `f`'s result: the lease then runs out by its ttl.
    /// Cancelling the caller cancels `f` (or the co_lock still waiting), then gives the lock
    /// back.
    template <class F>
    auto co_with_lock(std::string name, F f, lock_options opt = {})
        -> boost::asio::awaitable<detail::with_lock_result_t<F>>;

    /// What the server holds for lock `name` now: free, held or handed over; the holder's
    /// locker id, token, lease start and record (host, pid, program, client_name); the time
    /// left; the last fence; how many processes are queued. One script that reads the lock's
    /// keys and, when someone holds it, one read of the holder's record: no write. Refuses a
    /// bad name like async_lock. For monitoring: the lock may change as soon as it is read.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, lock_status)`: a network error,
    /// redis::error::server_error, or error::unexpected_reply for keys that do not read as a
    /// lock's.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_status(std::string_view name, CompletionToken&& token = {}) {
        validate(name, lock_options{});
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, lock_status)>(
            [this](auto handler, std::string n) { start_status(std::move(n), std::move(handler)); },
            token, std::string(name));
    }

    /// Awaitable async_status; throws boost::system::system_error naming the lock.
    boost::asio::awaitable<lock_status> co_status(std::string_view name);

    /// The last resort for a lock whose holder is stuck: ends the lease of whoever holds
    /// `name` now, from any process. The holder's locker is told at once (a message on its
    /// channel `<prefix>locker:<id>`): its guard is marked lost (loss_reason::forced,
    /// wait_lost completes), it stops renewing and passes the lease on to no one. So that
    /// it has that moment, the lock stays handed to nobody for up to a second (no longer
    /// than the lease had left), then anyone may take it, with a fence from the server's
    /// clock, above any the holder gave. Only a holder that cannot be told (a connection
    /// that is down) may still think it holds the lock; it finds out at its next renewal,
    /// and fences are what protect the resource from it. Returns true when a lease was
    /// ended, false when nobody held the lock.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, bool ended)`.
    /// @par Per-operation cancellation
    /// None: once sent, the lease is ended and the holder told.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_force_unlock(std::string_view name, CompletionToken&& token = {}) {
        validate(name, lock_options{});
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [this](auto handler, std::string n) {
                start_force_unlock(std::move(n), std::move(handler));
            },
            token, std::string(name));
    }

    /// Awaitable async_force_unlock; throws boost::system::system_error naming the lock.
    boost::asio::awaitable<bool> co_force_unlock(std::string_view name);

    /// This locker's id: in its queue entries, its wake channels, lock_status::holder_id and
    /// its holder record.
    std::string const& id() const noexcept;

private:
    using status_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, lock_status)>;
    using force_unlock_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;
    void start_status(std::string name, status_handler handler);
    void start_force_unlock(std::string name, force_unlock_handler handler);

    using lock_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, lock_guard)>;
    using try_lock_handler = boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                      std::optional<lock_guard>)>;

    void start_lock(std::string name, lock_options opt, lock_handler handler);
    void start_try_lock(std::string name, lock_options opt, try_lock_handler handler);
    using lock_all_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, multi_lock_guard)>;
    using try_lock_all_handler = boost::asio::any_completion_handler<void(
        boost::system::error_code, std::optional<multi_lock_guard>)>;
    static void validate_all(std::vector<std::string> const& names, lock_options const& opt);
    void start_lock_all(std::vector<std::string> names, lock_options opt, lock_all_handler handler);
    void start_try_lock_all(std::vector<std::string> names, lock_options opt,
                            try_lock_all_handler handler);

    friend struct detail::locker_access;
    explicit locker(std::shared_ptr<detail::locker_impl> impl);

    std::shared_ptr<detail::locker_impl> impl_;
};

template <class F>
auto locker::co_with_lock(std::string name, F f, lock_options opt)
    -> boost::asio::awaitable<detail::with_lock_result_t<F>> {
    using namespace boost::asio::experimental::awaitable_operators;
    using result_type = detail::with_lock_result_t<F>;
    using kept_type = std::conditional_t<std::is_void_v<result_type>, std::monostate, result_type>;
    // The lock goes back even after the caller's cancellation: the awaits after the race must
    // not throw for it (release() itself is not cancelled by the caller).
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    auto guard = co_await co_lock(std::move(name), std::move(opt));
    // The work's exception is kept rather than thrown into the race: operator|| waits for a
    // branch that succeeds, and wait_lost() may never complete.
    std::exception_ptr failure;
    auto work = [&]() -> boost::asio::awaitable<std::optional<kept_type>> {
        try {
            if constexpr (std::is_void_v<result_type>) {
                co_await f(guard);
                co_return kept_type{};
            } else {
                co_return co_await f(guard);
            }
        } catch (...) {
            failure = std::current_exception();
        }
        co_return std::nullopt;
    };
    auto outcome = co_await (work() || guard.wait_lost());
    bool const lease_went_first = outcome.index() == 1;
    co_await detail::end_with_lock(guard, failure, lease_went_first);
    if constexpr (!std::is_void_v<result_type>)
        co_return std::move(*std::get<0>(std::move(outcome)));
}

} // namespace colock
