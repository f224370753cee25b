/// \file
/// Explicit re-entry: a lock_scope is one logical owner (a request, a job) that may take a lock
/// it already holds again.
#pragma once

#include <colock/lock_options.hpp>
#include <colock/locker.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace colock {

namespace detail {
class scope_state;
} // namespace detail

/// One logical owner of locks, never a thread or a coroutine: a request, a job. Taking through
/// the scope a lock it already holds returns at once another guard on the same lease
/// (lock_guard::share()): the same token and fence, no Redis command, no observer event. The
/// lease is given back when its last guard goes, whichever guard that is. A plain
/// locker::co_lock stays non-reentrant.
///
/// @code
/// colock::lock_scope scope{locker};
/// auto a = co_await scope.co_lock("acct:1");   // takes the lock
/// auto b = co_await scope.co_lock("acct:1");   // at once: the same lease and fence
/// a.hold_count();                              // 2
/// @endcode
///
/// The scope keeps no guard itself, only a record of the lease it took last on each name: it
/// holds nothing once the guards it returned are gone, and a lease that is lost, or given
/// back, is not shared again: the next co_lock takes the lock anew.
///
/// Two calls of one scope on one name at the same time (two coroutines of one request) do not
/// wait for each other's lease: the second waits for the first call's outcome and shares its
/// guard, or takes its own turn if the first failed.
///
/// @par Thread safety
/// As an Asio I/O object's: a scope is used from one coroutine context (one thread, or one
/// strand), its calls, its destruction and its coroutines' executors included; it is not
/// safe to use concurrently from several threads. The guards it returns are lock_guards like
/// any other, and may go anywhere.
///
/// @par Lifetime
/// The locker must outlive the scope. Destroying the scope ends its pending calls with
/// operation_aborted (a call that was asking the locker is cancelled as a terminal
/// cancellation cancels it: a lock it won is given back); guards it returned stay valid and
/// hold their lease themselves.
class lock_scope {
public:
    /// A scope that takes its locks through `l`.
    explicit lock_scope(locker& l);
    /// Ends the pending calls with operation_aborted; the guards returned live on.
    ~lock_scope();
    lock_scope(lock_scope const&) = delete;
    lock_scope& operator=(lock_scope const&) = delete;

    /// The locker the scope takes its locks through.
    locker& get_locker() const noexcept;

    /// Takes lock `name` for the scope. When the scope holds it already (a guard it returned
    /// on `name` still holds a lease that is neither lost nor run out), returns at once
    /// another guard on that lease (lock_guard::share()), without a Redis command: the same
    /// token and fence, and `opt` is not used. When another call of the scope is taking
    /// `name`, waits for its outcome, within opt.wait_timeout, and shares the guard it got, or
    /// takes its own turn if it failed. Otherwise takes the lock as locker::co_lock(name, opt)
    /// does, and waits as it does.
    ///
    /// Throws as locker::co_lock: boost::system::system_error(error::invalid_argument) for a
    /// bad name or option (before anything else, when awaited), error::timeout when
    /// opt.wait_timeout passed (waiting behind another call of the scope included), a network
    /// or server error; operation_aborted when cancelled or when the scope was destroyed.
    ///
    /// @par Per-operation cancellation
    /// terminal, partial: as locker::co_lock's while it asks the locker (a lock won is given
    /// back first); a call waiting behind another call of the scope leaves at once.
    boost::asio::awaitable<lock_guard> co_lock(std::string_view name, lock_options opt = {});

    /// One attempt, as locker::co_try_lock, for the scope: another guard on the scope's lease
    /// when it holds `name` (as co_lock), else one attempt at the lock. Returns an empty
    /// optional when someone else holds the lock, and, without asking Redis, when another
    /// call of the scope is taking `name` right now (the lock is not the scope's yet, and one
    /// attempt does not wait). Throws as co_lock.
    ///
    /// @par Per-operation cancellation
    /// As co_lock's.
    boost::asio::awaitable<std::optional<lock_guard>> co_try_lock(std::string_view name,
                                                                  lock_options opt = {});

    /// co_lock for any completion token (callbacks, futures, deferred operations). Refuses a
    /// bad name or option by throwing boost::system::system_error(error::invalid_argument)
    /// before anything starts. The call runs on the handler's associated executor, or on the
    /// locker's get_executor() for a handler without one: that is the scope's coroutine
    /// context, as for co_lock (see Thread safety).
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, lock_guard)`: the code co_lock would throw with
    /// (operation_aborted when cancelled or when the scope was destroyed first); the message
    /// naming the lock is co_lock's alone.
    /// @par Per-operation cancellation
    /// terminal, partial: as co_lock's.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_lock(std::string_view name, lock_options opt = {}, CompletionToken&& token = {}) {
        validate(name, opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, lock_guard)>(
            [st = state_, fallback = get_locker().get_executor()](auto handler, std::string n,
                                                                  lock_options o) {
                auto ex = boost::asio::get_associated_executor(handler, fallback);
                start_lock(std::move(st), std::move(ex), std::move(n), std::move(o),
                           std::move(handler));
            },
            token, std::string(name), std::move(opt));
    }
    /// async_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_lock(std::string_view name, CompletionToken&& token) {
        return async_lock(std::move(name), lock_options{}, std::forward<CompletionToken>(token));
    }

    /// co_try_lock for any completion token, as async_lock.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<lock_guard>)`: an empty optional as
    /// co_try_lock returns one.
    /// @par Per-operation cancellation
    /// terminal, partial: as co_lock's.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_lock(std::string_view name, lock_options opt = {},
                        CompletionToken&& token = {}) {
        validate(name, opt);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<lock_guard>)>(
            [st = state_, fallback = get_locker().get_executor()](auto handler, std::string n,
                                                                  lock_options o) {
                auto ex = boost::asio::get_associated_executor(handler, fallback);
                start_try_lock(std::move(st), std::move(ex), std::move(n), std::move(o),
                               std::move(handler));
            },
            token, std::string(name), std::move(opt));
    }
    /// async_try_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_lock(std::string_view name, CompletionToken&& token) {
        return async_try_lock(std::move(name), lock_options{},
                              std::forward<CompletionToken>(token));
    }

    /// How many guards hold the lease the scope has on `name` now (see
    /// lock_guard::hold_count(); shares made outside the scope count too); 0 when it has
    /// none, or one that is lost, run out or given back.
    std::size_t hold_count(std::string_view name) const;

private:
    using lock_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, lock_guard)>;
    using try_lock_handler = boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                      std::optional<lock_guard>)>;
    static void start_lock(std::shared_ptr<detail::scope_state> st, boost::asio::any_io_executor ex,
                           std::string name, lock_options opt, lock_handler handler);
    static void start_try_lock(std::shared_ptr<detail::scope_state> st,
                               boost::asio::any_io_executor ex, std::string name, lock_options opt,
                               try_lock_handler handler);

    std::shared_ptr<detail::scope_state> state_;
};

} // namespace colock
