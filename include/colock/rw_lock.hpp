/// \file
/// A read-write lock: many readers or one writer, over every process, each holder's a lease; a
/// waiting writer stops the readers that come after it.
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

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace colock {

namespace detail {
class semaphore_core;
} // namespace detail

/// A reader's hold of a read-write lock, from rw_lock::co_lock_shared (or a write_guard's
/// co_downgrade) until release(), its destruction, or the loss of its lease (see lease_guard).
/// Each reader has a lease of its own, renewed and expiring alone. Its fence() is the fence of
/// the last writer before it (0 when the lock has had no writer since its keys last lapsed),
/// so a fenced resource can tell which writer's version a reader saw.
class read_guard : public lease_guard {
public:
    /// Holds nothing.
    read_guard() noexcept = default;
    /// Takes over what `other` holds.
    read_guard(read_guard&& other) noexcept = default;
    /// Lets go of what this holds (in the background), then takes over what `other` holds.
    read_guard& operator=(read_guard&& other) noexcept = default;
    /// Lets go in the background if still held.
    ~read_guard() = default;

    /// Deleted: a read lock is not upgraded. Two readers upgrading at once would each wait for
    /// the other to leave, for ever; release(), then rw_lock::co_lock(), and check again what was
    /// read.
    boost::asio::awaitable<void> co_upgrade() = delete;

private:
    friend class rw_lock;
    friend class write_guard;
    explicit read_guard(std::shared_ptr<detail::permit_state> state) noexcept
        : lease_guard(std::move(state)) {}
};

/// The writer's hold of a read-write lock, from rw_lock::co_lock until release(), co_downgrade(),
/// its destruction, or the loss of its lease (see lease_guard). Its fence() is strictly
/// increasing per lock over all writers.
class write_guard : public lease_guard {
public:
    /// Holds nothing.
    write_guard() noexcept = default;
    /// Takes over what `other` holds.
    write_guard(write_guard&& other) noexcept = default;
    /// Lets go of what this holds (in the background), then takes over what `other` holds.
    write_guard& operator=(write_guard&& other) noexcept = default;
    /// Lets go in the background if still held.
    ~write_guard() = default;

    /// The write lock is still held: not let go, not lost, its lease not run out, and no
    /// co_downgrade() of unknown outcome has left the holding perhaps a reader's (then false
    /// until a renewal or a co_downgrade() says).
    bool owns() const noexcept;
    /// owns().
    explicit operator bool() const noexcept { return owns(); }
    /// The lease is still held, as the writer's or, after a co_downgrade() of unknown outcome,
    /// perhaps a reader's (lease_guard::owns()): true with owns() false says a second
    /// co_downgrade() is what settles it.
    bool holds_lease() const noexcept { return lease_guard::owns(); }

    /// Turns the write lock into a read lock with no gap: the same lease (renewed on, with the
    /// same fence), now shared with the readers queued behind it, who are let in. This guard
    /// then holds nothing. Throws system_error: error::not_held when this holds nothing,
    /// error::lock_lost when the lease was lost (nothing is held then), or the connection's
    /// error or error::timeout (the lease is still held, as a writer's or, if the downgrade
    /// went through unseen, a reader's: owns() is then false, as for a reader, until the
    /// next renewal finds which, and a second co_downgrade() is safe). While it runs,
    /// owns() is false too. Not cancelled by the caller.
    boost::asio::awaitable<read_guard> co_downgrade();
    /// The same as an operation of any completion token. The guard must outlive it (as a
    /// socket its reads); once it has completed without error, this guard holds nothing.
    /// @par Completion signature
    /// `void(boost::system::error_code, read_guard)`: the codes co_downgrade throws.
    /// @par Per-operation cancellation
    /// None, as co_downgrade.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_downgrade(CompletionToken&& token = {}) {
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, read_guard)>(
            [this](auto handler) { start_downgrade(std::move(handler)); }, token);
    }

private:
    friend class rw_lock;
    void start_downgrade(
        boost::asio::any_completion_handler<void(boost::system::error_code, read_guard)> handler);
    explicit write_guard(std::shared_ptr<detail::permit_state> state) noexcept
        : lease_guard(std::move(state)) {}
};

/// A read-write lock on a locker: many readers or one writer of `name`, over every process that
/// uses the name through the same Redis deployment and key prefix.
///
/// - Readers and writers queue first come, first served across processes, in batches: the
///   readers queued together enter together; a writer waits for the readers ahead of it to
///   leave, and stops the readers that come after it until it leaves (no writer starves, and no
///   reader either).
/// - Each reader and the writer hold a lease of their own, renewed while held, expiring on the
///   server's clock when the holder dies.
/// - Writers' fences are strictly increasing; a reader carries its writer's.
/// - One server, Sentinel and Cluster (the keys share the hash tag `{name}`); a locker over
///   several primaries (Redlock) is refused at construction.
/// - Not reentrant: a coroutine that holds a read lock and asks for the write lock waits for
///   itself (until lock_options::wait_timeout); read_guard::co_upgrade() is deleted.
///
/// Like an Asio I/O object: destroying it ends its waiting calls with operation_aborted; the
/// guards it gave live on. Thread-safe as the locker.
class rw_lock {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;
    /// The locker's executor (its connection's): where operations complete unless the handler
    /// has an executor of its own, as for an Asio I/O object.
    executor_type get_executor() const noexcept;

    /// Throws system_error(error::invalid_argument) for an empty or overlong name or a Redlock
    /// locker. Keeps the locker's state alive.
    rw_lock(locker& l, std::string_view name);
    /// Takes over `other`'s lock.
    rw_lock(rw_lock&& other) noexcept;
    /// Ends this one's waiting calls, then takes over `other`'s lock.
    rw_lock& operator=(rw_lock&& other) noexcept;
    rw_lock(rw_lock const&) = delete;
    rw_lock& operator=(rw_lock const&) = delete;
    /// Ends the waiting calls with operation_aborted.
    ~rw_lock();

    /// The lock's name.
    std::string const& name() const noexcept;

    /// Waits for a read lock. `opt` as for locker::async_lock (cohort_limit and wait_replicas do
    /// not apply). Refuses bad arguments by throwing system_error(error::invalid_argument) before
    /// any I/O.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, read_guard)`: error::timeout when wait_timeout passed;
    /// a network error or redis::error::server_error otherwise.
    /// @par Per-operation cancellation
    /// terminal, partial: as semaphore::async_acquire.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_lock_shared(lock_options opt = {}, CompletionToken&& token = {}) {
        check(opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, read_guard)>(
            [core = core_](auto handler, lock_options o) {
                start_lock_shared(core, std::move(o), std::move(handler));
            },
            token, std::move(opt));
    }
    /// async_lock_shared with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_lock_shared(CompletionToken&& token) {
        return async_lock_shared(lock_options{}, std::forward<CompletionToken>(token));
    }

    /// Waits for the write lock, as async_lock_shared.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, write_guard)`.
    /// @par Per-operation cancellation
    /// terminal, partial: as semaphore::async_acquire.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_lock(lock_options opt = {}, CompletionToken&& token = {}) {
        check(opt);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, write_guard)>(
            [core = core_](auto handler, lock_options o) {
                start_lock(core, std::move(o), std::move(handler));
            },
            token, std::move(opt));
    }
    /// async_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_lock(CompletionToken&& token) {
        return async_lock(lock_options{}, std::forward<CompletionToken>(token));
    }

    /// Awaitable async_lock_shared; throws system_error whose message names the lock.
    boost::asio::awaitable<read_guard> co_lock_shared(lock_options opt = {});
    /// Awaitable async_lock; throws system_error whose message names the lock.
    boost::asio::awaitable<write_guard> co_lock(lock_options opt = {});
    /// One attempt at a read lock: an empty optional when a writer holds it or is queued.
    boost::asio::awaitable<std::optional<read_guard>> co_try_lock_shared(lock_options opt = {});
    /// One attempt at the write lock: an empty optional when anybody holds it or is queued.
    boost::asio::awaitable<std::optional<write_guard>> co_try_lock(lock_options opt = {});

    /// One attempt at a read lock, as co_try_lock_shared.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<read_guard>)`: empty when a writer holds
    /// the lock or is queued; the codes of async_lock_shared.
    /// @par Per-operation cancellation
    /// terminal, partial: as semaphore::async_try_acquire.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_lock_shared(lock_options opt = {}, CompletionToken&& token = {}) {
        check(opt);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<read_guard>)>(
            [core = core_](auto handler, lock_options o) {
                start_try_lock_shared(core, std::move(o), std::move(handler));
            },
            token, std::move(opt));
    }
    /// async_try_lock_shared with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_lock_shared(CompletionToken&& token) {
        return async_try_lock_shared(lock_options{}, std::forward<CompletionToken>(token));
    }
    /// One attempt at the write lock, as co_try_lock.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, std::optional<write_guard>)`: empty when anybody holds
    /// the lock or is queued; the codes of async_lock.
    /// @par Per-operation cancellation
    /// terminal, partial: as semaphore::async_try_acquire.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_try_lock(lock_options opt = {}, CompletionToken&& token = {}) {
        check(opt);
        return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code,
                                                                 std::optional<write_guard>)>(
            [core = core_](auto handler, lock_options o) {
                start_try_lock(core, std::move(o), std::move(handler));
            },
            token, std::move(opt));
    }
    /// async_try_lock with the default options: the token where they would stand.
    template <not_lock_options CompletionToken>
    auto async_try_lock(CompletionToken&& token) {
        return async_try_lock(lock_options{}, std::forward<CompletionToken>(token));
    }

    /// What the server holds for the lock now: free, shared (and by how many readers) or
    /// exclusive, the last fence, the waiting calls, and the holdings (the writer's, or the
    /// first readers' to expire) with the process of each, as semaphore::co_status. Throws
    /// boost::system::system_error naming the lock, as semaphore::co_status.
    boost::asio::awaitable<rw_lock_status> co_status();
    /// The same as an operation of any completion token.
    /// @par Completion signature
    /// `void(boost::system::error_code, rw_lock_status)`: the codes co_status throws.
    /// @par Per-operation cancellation
    /// terminal, partial: as the connection's async_exec.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_status(CompletionToken&& token = {}) {
        check(lock_options{});
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, rw_lock_status)>(
            [core = core_](auto handler) { start_status(core, std::move(handler)); }, token);
    }

private:
    using read_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, read_guard)>;
    using write_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, write_guard)>;
    using try_read_handler = boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                      std::optional<read_guard>)>;
    using try_write_handler = boost::asio::any_completion_handler<void(boost::system::error_code,
                                                                       std::optional<write_guard>)>;
    static void start_try_lock_shared(std::shared_ptr<detail::semaphore_core> core,
                                      lock_options opt, try_read_handler handler);
    static void start_try_lock(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                               try_write_handler handler);
    void check(lock_options const& opt) const;
    static void start_status(
        std::shared_ptr<detail::semaphore_core> core,
        boost::asio::any_completion_handler<void(boost::system::error_code, rw_lock_status)>
            handler);
    static void start_lock_shared(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                                  read_handler handler);
    static void start_lock(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                           write_handler handler);

    std::shared_ptr<detail::semaphore_core> core_;
};

} // namespace colock
