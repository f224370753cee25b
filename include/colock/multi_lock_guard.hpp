/// \file
/// The guard of a lock on several names at once (locker::co_lock_all).
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
#include <string_view>
#include <utility>
#include <vector>

namespace colock {

namespace detail {
class lock_set_state;
} // namespace detail

/// Holds every name of a lock set (locker::co_lock_all): one lease over all of them, renewed
/// together, lost when any name's is, given back in one call. Each name has its own fence, on
/// the name's own sequence (the one co_lock of that name gives). Move-only; its destructor lets
/// go in the background, as lock_guard's does.
class multi_lock_guard {
public:
    /// A guard that holds nothing.
    multi_lock_guard() noexcept;
    /// Takes over what `other` holds; `other` holds nothing after.
    multi_lock_guard(multi_lock_guard&& other) noexcept;
    /// Lets go of what this guard holds (in the background), then takes over `other`'s.
    multi_lock_guard& operator=(multi_lock_guard&& other) noexcept;
    multi_lock_guard(multi_lock_guard const&) = delete;
    multi_lock_guard& operator=(multi_lock_guard const&) = delete;
    /// Stops the renewal and gives every name back in the background.
    ~multi_lock_guard();

    /// The names, sorted and each once (as the set was asked for, without repeats).
    std::vector<std::string> const& names() const noexcept;
    /// The fence of each name, in the order of names().
    std::vector<std::int64_t> const& fences() const noexcept;
    /// The fence of `name`; throws system_error(error::invalid_argument) when the set does not
    /// hold it.
    std::int64_t fence(std::string_view name) const;
    /// The lease's token, the same in every name's key.
    std::string const& token() const noexcept;

    /// Holds every name: not let go, not lost, and before the lease's local end.
    bool owns() const noexcept;
    /// owns().
    explicit operator bool() const noexcept { return owns(); }
    /// The lease was lost (one name's is enough), or ran out unrenewed.
    bool lost() const noexcept;
    /// Why it was lost, once it was.
    std::optional<loss_reason> loss() const noexcept;
    /// The lease's local end: before it, every name is known to be held.
    std::chrono::steady_clock::time_point lease_expiry() const noexcept;

    /// Completes when the lease is lost (an empty code), with error::not_held once let go, or
    /// operation_aborted when cancelled.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_wait_lost(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
            [st = state_](auto handler) { start_wait_lost(st, std::move(handler)); }, token);
    }
    /// async_wait_lost as an awaitable: returns when the lease is lost, throws when cancelled.
    boost::asio::awaitable<void> wait_lost();

    /// Gives every name back: each goes to the first waiter of its queue, or is left free.
    /// Completes with true when every name was still this lease's. Not cancelled by the caller;
    /// sent again over passing errors until the release timeout. names() and fences() still
    /// answer after.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_release(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code, bool)>(
            [st = state_](auto handler) mutable {
                start_release(std::move(st), std::move(handler));
            },
            token);
    }
    /// async_release as an awaitable: true when every name was still held; throws system_error
    /// when the release was not confirmed.
    boost::asio::awaitable<bool> release();

private:
    friend class locker;
    using release_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, bool)>;
    explicit multi_lock_guard(std::shared_ptr<detail::lock_set_state> state) noexcept;
    static void start_release(std::shared_ptr<detail::lock_set_state> st, release_handler handler);
    static void
    start_wait_lost(std::shared_ptr<detail::lock_set_state> st,
                    boost::asio::any_completion_handler<void(boost::system::error_code)> handler);

    std::shared_ptr<detail::lock_set_state> state_;
};

} // namespace colock
