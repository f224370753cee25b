/// \file
/// What a holding of a semaphore (colock::permit) and of a read-write lock (colock::read_guard,
/// colock::write_guard) have in common: a lease like a lock guard's.
#pragma once

#include <colock/lock_observer.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace colock {

namespace detail {
class permit_state;
} // namespace detail

/// A holding of a semaphore or a read-write lock: a lease, renewed in the background while it is
/// held (lock_options::auto_renew), expiring on the server's clock when its holder dies, given
/// back when it is let go. The base of permit, read_guard and write_guard, which say how it is
/// let go; not made on its own. Move-only; its destructor only signals (renewal stops and the
/// release runs in the background), as lock_guard's. Its observers may be called from any
/// thread.
class lease_guard {
public:
    /// The name of the semaphore or read-write lock; empty for a guard that holds nothing.
    std::string const& name() const noexcept;
    /// The holding's token at the server (random); empty for a guard that holds nothing.
    std::string const& token() const noexcept;
    /// The holding's fence (see permit::fence, read_guard, write_guard); 0 when it holds nothing.
    std::int64_t fence() const noexcept;
    /// Still held: not let go, not lost, its lease not run out.
    bool owns() const noexcept;
    /// owns().
    explicit operator bool() const noexcept { return owns(); }
    /// The lease was lost (expired unrenewed, gone from the server, or its server replaced); see
    /// loss().
    bool lost() const noexcept;
    /// Why it was lost, once it was.
    std::optional<loss_reason> loss() const noexcept;
    /// The local bound of the lease, as lock_guard::lease_expiry(): never later than the
    /// server's expiry. A default time_point for a guard that holds nothing.
    std::chrono::steady_clock::time_point lease_expiry() const noexcept;

    /// Completes when the lease is lost (or at once if it is), or with error::not_held once it
    /// is let go, as lock_guard::async_wait_lost.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code)`.
    /// @par Per-operation cancellation
    /// terminal, partial, total: the wait ends with operation_aborted; nothing else changes.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_wait_lost(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [st = state_](auto handler) { start_wait_lost(st, std::move(handler)); }, token);
    }
    /// Awaitable async_wait_lost for `co_await (work() || guard.wait_lost())`: returns when lost
    /// or let go; throws system_error(operation_aborted) when cancelled.
    boost::asio::awaitable<void> wait_lost();

    /// Stops renewal, then gives the holding back: the calls it makes room for are woken.
    /// Completes with true when it was still ours (now free for others), false when the lease
    /// had expired or was gone (an expired holding is never reported released), or this holds
    /// nothing. Not cancelled by the caller; a release whose reply was lost is sent again until
    /// a deadline (5 s). The guard lets go when this is called, and may go away at once.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, bool released)`: error::timeout when the release was
    /// not confirmed by its deadline, or the connection's error (the lease then runs out).
    /// @par Per-operation cancellation
    /// None: a cancelled caller still gives the holding back.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_release(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [st = state_](auto handler) mutable {
                start_release(std::move(st), std::move(handler));
            },
            token);
    }
    /// Awaitable async_release; throws system_error naming the semaphore or read-write lock on
    /// a failure.
    boost::asio::awaitable<bool> release();

    /// Sets the lease to `ttl` from now, if the holding is still ours; later renewals use `ttl`
    /// too, as lock_guard::extend. Returns false (and marks the guard lost) when it was no
    /// longer ours. Throws system_error: error::not_held when this holds nothing or was let go,
    /// error::invalid_argument for ttl <= 0 or above max_lock_ttl, a network error otherwise,
    /// each naming the semaphore or read-write lock.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec; a cancelled extend may still have run.
    boost::asio::awaitable<bool> extend(std::chrono::milliseconds ttl);
    /// extend() for any completion token. Refuses a ttl <= 0 or above max_lock_ttl by throwing
    /// system_error(error::invalid_argument) before anything starts.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, bool extended)`: `extended` as extend() returns it;
    /// error::not_held when this holds nothing; a network error otherwise.
    /// @par Per-operation cancellation
    /// terminal, partial: as extend().
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_extend(std::chrono::milliseconds ttl, CompletionToken&& token = {}) {
        validate_extend(ttl);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [st = state_, ttl](auto handler) { start_extend(st, ttl, std::move(handler)); }, token);
    }

protected:
    /// The handler of a release: `void(error_code, bool was_ours)`.
    using release_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;

    /// Holds nothing.
    lease_guard() noexcept;
    /// Holds `state`.
    explicit lease_guard(std::shared_ptr<detail::permit_state> state) noexcept;
    /// Takes over what `other` holds.
    lease_guard(lease_guard&& other) noexcept;
    /// Lets go of what this holds (in the background), then takes over what `other` holds.
    lease_guard& operator=(lease_guard&& other) noexcept;
    lease_guard(lease_guard const&) = delete;
    lease_guard& operator=(lease_guard const&) = delete;
    /// Gives the holding back in the background if still held.
    ~lease_guard();

    /// Stops renewal, then gives the holding of `st` back: completes with whether it was still
    /// ours. Not cancellable; a release whose reply was lost is sent again until a deadline.
    static void start_release(std::shared_ptr<detail::permit_state> st, release_handler handler);
    /// The holding; null when this holds nothing.
    std::shared_ptr<detail::permit_state> state_;

private:
    static void start_extend(std::shared_ptr<detail::permit_state> st,
                             std::chrono::milliseconds ttl, release_handler handler);
    void validate_extend(std::chrono::milliseconds ttl) const;
    static void
    start_wait_lost(std::shared_ptr<detail::permit_state> st,
                    boost::asio::any_completion_handler<void(boost::system::error_code)> handler);
};

} // namespace colock
