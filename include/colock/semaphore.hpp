/// \file
/// A semaphore: at most `capacity` permits held at once, over every process, each permit a lease
/// like a lock's (renewed while it lives, expiring on the server's clock when its holder dies).
#pragma once

#include <colock/lease_guard.hpp>
#include <colock/lock_options.hpp>
#include <colock/locker.hpp>
#include <colock/semaphore_status.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace colock {

namespace detail {
class semaphore_core;
} // namespace detail

/// Permits of a semaphore, held from semaphore::co_acquire until release(), the permit's
/// destruction, or the loss of its lease (see lease_guard, whose names every holding shares).
class permit : public lease_guard {
public:
    /// Holds nothing.
    permit() noexcept = default;
    /// Takes over what `other` holds.
    permit(permit&& other) noexcept = default;
    /// Gives back what this holds (in the background), then takes over what `other` holds.
    permit& operator=(permit&& other) noexcept = default;
    /// Gives the permits back in the background if still held.
    ~permit() = default;

    /// How many permits this holds, or held once let go (semaphore::co_acquire's `permits`); 0
    /// for a permit that never held any. Its fence() is strictly increasing per semaphore over all
    /// holders: a later acquisition has a larger one.
    std::size_t count() const noexcept;

private:
    friend class semaphore;
    explicit permit(std::shared_ptr<detail::permit_state> state) noexcept
        : lease_guard(std::move(state)) {}
};

/// A semaphore on a locker: at most `capacity` permits of `name` held at once, over every
/// process that uses the name through the same Redis deployment and key prefix.
///
/// - Every user of a name must give the same capacity: a call that finds another one at the
///   server fails with error::invalid_argument, naming both, and changes nothing.
/// - Waiting calls are served first come, first served across processes; a call for several
///   permits takes them all at once, and is not overtaken by later calls for fewer.
/// - The free permits are the capacity less the live leases, counted at the server at each
///   call: a holder that dies frees its permits when its lease runs out (lock_options::ttl).
/// - A release wakes only the waiting calls its permits make room for.
/// - One server, Sentinel and Cluster (the keys share the hash tag `{name}`). A locker over
///   several primaries (Redlock) is refused at construction.
///
/// Like an Asio I/O object: destroying it ends its waiting calls with operation_aborted; the
/// permits it gave live on. Thread-safe as the locker.
class semaphore {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;
    /// The locker's executor (its connection's): where operations complete unless the handler
    /// has an executor of its own, as for an Asio I/O object.
    executor_type get_executor() const noexcept;

    /// Throws system_error(error::invalid_argument) for an empty or overlong name, a capacity of
    /// 0 or above 1,000,000, or a Redlock locker. Keeps the locker's state alive.
    semaphore(locker& l, std::string_view name, std::size_t capacity);
    /// Takes over `other`'s semaphore.
    semaphore(semaphore&& other) noexcept;
    /// Ends this one's waiting calls, then takes over `other`'s semaphore.
    semaphore& operator=(semaphore&& other) noexcept;
    semaphore(semaphore const&) = delete;
    semaphore& operator=(semaphore const&) = delete;
    /// Ends the waiting calls with operation_aborted.
    ~semaphore();

    /// The semaphore's name.
    std::string const& name() const noexcept;
    /// The capacity this object was made with.
    std::size_t capacity() const noexcept;

    /// Waits for `permits` (1 to the capacity, at most 1000) and holds them as one lease:
    /// `opt.ttl`, renewal, `wait_timeout`, `retry` and `first_connect_timeout` as for
    /// locker::async_lock (cohort_limit and wait_replicas do not apply). Refuses bad arguments by
    /// throwing system_error(error::invalid_argument) before any I/O.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, permit)`: error::timeout when wait_timeout passed;
    /// error::invalid_argument when the server holds another capacity for the name; a network
    /// error or redis::error::server_error otherwise.
    /// @par Per-operation cancellation
    /// terminal, partial: a waiting call returns at once and leaves the queue; with a request in
    /// flight, its reply is read and permits it was granted are given back before the operation
    /// completes with operation_aborted.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_acquire(std::size_t permits, lock_options opt = {}, CompletionToken&& token = {}) {
        check(permits, opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, permit)>(
            [core = core_](auto handler, std::size_t n, lock_options o) {
                start_acquire(core, n, std::move(o), std::move(handler));
            },
            token, permits, std::move(opt));
    }
    /// async_acquire with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_acquire(std::size_t permits, CompletionToken&& token) {
        return async_acquire(permits, lock_options{}, std::forward<CompletionToken>(token));
    }

    /// One attempt: an empty optional when the permits are not free now (or calls queued before
    /// want them). As async_acquire otherwise.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<permit>)`.
    /// @par Per-operation cancellation
    /// As async_acquire.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_acquire(std::size_t permits, lock_options opt = {},
                           CompletionToken&& token = {}) {
        check(permits, opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, std::optional<permit>)>(
            [core = core_](auto handler, std::size_t n, lock_options o) {
                start_try_acquire(core, n, std::move(o), std::move(handler));
            },
            token, permits, std::move(opt));
    }
    /// async_try_acquire with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_acquire(std::size_t permits, CompletionToken&& token) {
        return async_try_acquire(permits, lock_options{}, std::forward<CompletionToken>(token));
    }

    /// Awaitable async_acquire of one permit; throws system_error whose message names the
    /// semaphore (and the server's text for server errors).
    boost::asio::awaitable<permit> co_acquire(lock_options opt = {});
    /// Awaitable async_acquire of `permits` at once.
    boost::asio::awaitable<permit> co_acquire(std::size_t permits, lock_options opt = {});
    /// Awaitable async_try_acquire of one permit.
    boost::asio::awaitable<std::optional<permit>> co_try_acquire(lock_options opt = {});
    /// Awaitable async_try_acquire of `permits` at once.
    boost::asio::awaitable<std::optional<permit>> co_try_acquire(std::size_t permits,
                                                                 lock_options opt = {});

    /// The permits free now: the capacity less the live leases (a snapshot, for monitoring and
    /// tests: it may change as soon as it is read). Throws system_error naming the semaphore:
    /// error::invalid_argument when the server holds another capacity for the name.
    /// Cancellation: as the connection's async_exec.
    boost::asio::awaitable<std::size_t> co_available();
    /// The same as an operation of any completion token. Throws system_error
    /// (error::invalid_argument) for a moved-from semaphore, at the call.
    /// @par Completion signature
    /// `void(boost::system::error_code, std::size_t free)`: error::invalid_argument when the
    /// server holds another capacity for the name, a network error or
    /// redis::error::server_error.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_available(CompletionToken&& token = {}) {
        check(1, lock_options{});
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, std::size_t)>(
            [core = core_](auto handler) { start_available(core, std::move(handler)); }, token);
    }

    /// What the server holds for the semaphore now: the capacity it keeps, the permits held,
    /// the last fence, the waiting calls, and the first holdings to expire with the process of
    /// each (its locker's holder record, as locker::co_status names a lock's holder). One
    /// script, and one `HGETALL` per locker listed; it writes nothing but the sweep of
    /// lapsed holdings that any call of the semaphore makes. Unlike co_available it reports
    /// another capacity at the server rather than refuse it: for an operator or a rolling
    /// change. Throws boost::system::system_error naming the semaphore: a network error,
    /// redis::error::server_error, or error::unexpected_reply for keys not colock's.
    boost::asio::awaitable<semaphore_status> co_status();
    /// The same as an operation of any completion token.
    /// @par Completion signature
    /// `void(boost::system::error_code, semaphore_status)`: the codes co_status throws.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_status(CompletionToken&& token = {}) {
        check(1, lock_options{});
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, semaphore_status)>(
            [core = core_](auto handler) { start_status(core, std::move(handler)); }, token);
    }

private:
    using acquire_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, permit)>;
    using try_acquire_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, std::optional<permit>)>;
    void check(std::size_t permits, lock_options const& opt) const;
    static void start_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                              lock_options opt, acquire_handler handler);
    static void start_try_acquire(std::shared_ptr<detail::semaphore_core> core, std::size_t permits,
                                  lock_options opt, try_acquire_handler handler);
    static void start_available(
        std::shared_ptr<detail::semaphore_core> core,
        boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)> handler);
    static void start_status(
        std::shared_ptr<detail::semaphore_core> core,
        boost::asio::any_completion_handler<void(boost::system::error_code, semaphore_status)>
            handler);

    std::shared_ptr<detail::semaphore_core> core_;
};

} // namespace colock
