/// \file
/// Fences checked where the writes land: a resource in Redis that applies writes only under a
/// fence at least the highest it has seen, atomically with the check, so that a holder paused
/// past its lease cannot write after the next holder did (docs/safety.md, "Checking the fence at
/// the resource").
#pragma once

#include <colock/election.hpp>
#include <colock/lease_guard.hpp>
#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/value.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock {

namespace detail {
class fenced_resource_impl;
} // namespace detail

/// The writes of one fenced_resource::co_write, applied in order, all or none: every write is
/// checked at the server before the first is made (a key of another type, a value that is not an
/// integer, a sum that overflows 64 bits refuse the whole batch, naming the key). Each method
/// adds one write and refuses bad arguments by throwing boost::system::system_error
/// (error::invalid_argument) naming them: an empty key, a ttl below 1 ms or above 2^40 ms, a key
/// written both as a string and as a hash, an increment that is not the first write of its key (of
/// its field, for a hash). Every key must be in the hash slot of the resource's fence key
/// (fenced_resource checks it when writing).
class fenced_writes {
public:
    /// SET key value. The key loses any expiry it had, as with SET.
    fenced_writes& set(std::string_view key, std::string_view value);
    /// SET key value PX ttl.
    fenced_writes& set(std::string_view key, std::string_view value, std::chrono::milliseconds ttl);
    /// HSET key field value.
    fenced_writes& hset(std::string_view key, std::string_view field, std::string_view value);
    /// HDEL key field.
    fenced_writes& hdel(std::string_view key, std::string_view field);
    /// INCRBY key by: the key absent or holding an integer. Its reply is the new value (rounded
    /// above 2^53, as Lua's numbers are: read the key for an exact one).
    fenced_writes& incr_by(std::string_view key, std::int64_t by);
    /// HINCRBY key field by: the field absent or holding an integer. Its reply is the new value.
    fenced_writes& hincr_by(std::string_view key, std::string_view field, std::int64_t by);
    /// DEL key.
    fenced_writes& del(std::string_view key);
    /// PEXPIRE key ttl.
    fenced_writes& expire(std::string_view key, std::chrono::milliseconds ttl);

    /// The number of writes.
    std::size_t size() const noexcept { return count_; }
    /// True when the batch has no write: applied, it only raises the resource's fence.
    bool empty() const noexcept { return count_ == 0; }
    /// The distinct keys written, in the order of their first write.
    std::vector<std::string> const& keys() const noexcept { return keys_; }

private:
    friend class detail::fenced_resource_impl;
    /// How the batch writes a key so far.
    enum class shape : unsigned char {
        any,    ///< only as a whole (DEL, EXPIRE), or not yet
        string, ///< as a string (SET, INCRBY)
        hash,   ///< as a hash (HSET, HDEL, HINCRBY)
    };
    struct key_use {
        shape as = shape::any;
        std::vector<std::string> fields; // the hash fields written so far
        bool written = false;            // any write of the key as a whole so far
    };
    // The index in keys_ (1-based, as the script's KEYS after the fence key) of `key`, checked
    // to be usable as `as`; throws otherwise.
    std::size_t use(std::string_view key, shape as, std::string_view what);
    void add_increment(std::string_view key, std::string_view field, std::int64_t by, bool hash);

    std::vector<std::string> keys_;
    std::vector<key_use> uses_;
    std::vector<std::string> words_;
    std::size_t count_ = 0;
};

/// What a fenced write did.
struct fenced_result {
    /// The fence the resource holds now: the write's.
    std::int64_t fence = 0;
    /// The fence it held before; 0 for the first write.
    std::int64_t previous_fence = 0;
    /// Each write's reply, in order: "OK" for a SET, the count for HSET, HDEL, DEL and EXPIRE,
    /// the new value for an increment.
    std::vector<resp3::value> replies;
};

/// The fence a resource holds: the highest it accepted, and the name it came from.
struct fence_record {
    /// The highest fence accepted.
    std::int64_t fence = 0;
    /// The name of the lock (semaphore, read-write lock, election) it came from.
    std::string name;
};

/// Options of a fenced_resource.
struct fenced_resource_options {
    /// The fence record's expiry, renewed by every write: after that long without a write the
    /// resource forgets the fences it saw and takes any. Empty (the default): the record keeps
    /// no expiry, for as long as the resource itself (it must outlive every holder that could
    /// still write: a holder paused for longer than this is refused only while the record
    /// lives). Give one to a resource that expires itself, at least as long as its data.
    std::optional<std::chrono::milliseconds> record_ttl;
};

/// A resource in Redis guarded by a lock (a semaphore, a read-write lock, an election): it keeps,
/// in `fence_key`, the highest fence it accepted with the name it came from, and applies a batch
/// of writes only under a fence at least that high and of that name, in one script with the
/// check. A holder that lost its lease while paused (a GC pause, SIGSTOP, a swapped-out VM) and
/// writes when it resumes is refused once the next holder has written: error::stale_fence, whose
/// message names both fences. Every key written must be in the hash slot of `fence_key` (give
/// them its hash tag: `jobs:{42}:fence`, `jobs:{42}`), on every deployment, so that the batch
/// stays one script on a Cluster.
///
/// Like an Asio I/O object: operations complete on the connection's executor unless the handler
/// has its own; destroying the resource completes the pending ones with operation_aborted (a
/// write already sent may have been applied). Not thread-safe: one thread (or strand) at a time
/// per object.
class fenced_resource {
public:
    /// The type of get_executor().
    using executor_type = boost::asio::any_io_executor;

    /// Refuses an empty `fence_key` or a record_ttl below 1 ms or above 2^40 ms, throwing
    /// boost::system::system_error (error::invalid_argument), before any I/O.
    fenced_resource(redis::connection& conn, std::string fence_key,
                    fenced_resource_options opt = {});
    /// Takes over `other`'s resource and pending writes; `other` then refers to none.
    fenced_resource(fenced_resource&& other) noexcept;
    /// Completes this one's pending writes with operation_aborted, then takes over `other`'s.
    fenced_resource& operator=(fenced_resource&& other) noexcept;
    /// Completes the pending operations with operation_aborted.
    ~fenced_resource();

    /// The connection's executor: where operations complete unless the handler has its own.
    executor_type get_executor() const noexcept;
    /// The key that keeps the resource's fence record; empty for a moved-from resource.
    std::string const& fence_key() const noexcept;

    /// Applies `writes` under `fence` of `name` (a fence from elsewhere: another process, or
    /// `colock exec`'s COLOCK_FENCE and COLOCK_NAME). Refuses a fence below 1, an empty name or
    /// a key outside the fence key's slot with error::invalid_argument before any I/O.
    ///
    /// @par Completion signature
    /// `void(boost::system::error_code, fenced_result)`: error::stale_fence when the resource
    /// holds a higher fence, error::invalid_argument when it holds one of another name (nothing
    /// was written either way); redis::error::server_error when the server refused a write (a
    /// key of another type, a value that is not an integer, a sum that overflows: nothing was
    /// written) or the fence key holds something else than a fence record; else a network
    /// error. Not retried: a write whose reply was not seen may have been applied.
    /// @par Per-operation cancellation
    /// terminal: honoured while the request is unsent.
    template <class CompletionToken = boost::asio::deferred_t>
    auto async_write(std::string name, std::int64_t fence, fenced_writes writes,
                     CompletionToken&& token = {}) {
        check(name, fence, writes);
        return boost::asio::async_initiate<CompletionToken,
                                           void(boost::system::error_code, fenced_result)>(
            [this](auto handler, std::string n, std::int64_t f, fenced_writes w) {
                start_write(std::move(n), f, std::move(w), std::move(handler));
            },
            token, std::move(name), fence, std::move(writes));
    }

    /// Awaitable async_write that throws boost::system::system_error whose message names the
    /// fence key and, for a stale fence, both fences.
    boost::asio::awaitable<fenced_result> co_write(std::string name, std::int64_t fence,
                                                   fenced_writes writes);
    /// Under a lock's guard: its name and fence. A guard that holds nothing is refused with
    /// error::not_held, one known lost with error::lock_lost, before any I/O.
    boost::asio::awaitable<fenced_result> co_write(lock_guard const& guard, fenced_writes writes);
    /// Under a permit, a read guard or a write guard: its name and fence, refused as a guard's.
    boost::asio::awaitable<fenced_result> co_write(lease_guard const& holding,
                                                   fenced_writes writes);
    /// Under a leadership: the election's name and the term, refused as a guard's.
    boost::asio::awaitable<fenced_result> co_write(leadership const& lead, fenced_writes writes);

    /// The fence the resource holds; empty before the first write (or after its record lapsed).
    /// Throws boost::system::system_error naming the key for a record colock does not write.
    boost::asio::awaitable<std::optional<fence_record>> co_read();

private:
    using write_handler =
        boost::asio::any_completion_handler<void(boost::system::error_code, fenced_result)>;
    void check(std::string const& name, std::int64_t fence, fenced_writes const& writes) const;
    void start_write(std::string name, std::int64_t fence, fenced_writes writes,
                     write_handler handler);
    // co_write under a holding, whose state was read at the call: `refusal` when it cannot
    // write.
    boost::asio::awaitable<fenced_result>
    write_held(std::optional<boost::system::system_error> refusal, std::string name,
               std::int64_t fence, fenced_writes writes);

    std::shared_ptr<detail::fenced_resource_impl> impl_;
};

} // namespace colock
