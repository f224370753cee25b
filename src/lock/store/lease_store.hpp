// The seam between the lock algorithm and the Redis deployment it runs on: how a lease is
// granted, extended, released and waited for. The locker, its local queues, the renewal and
// the guard go through this interface only; a store does the I/O. There are two stores: one
// connection (single_connection_store: one server, Sentinel or Cluster), and a quorum of
// independent primaries (quorum_store: Redlock), made of one single_connection_store per
// primary. Private to the library's sources.
#pragma once

#include "lock/store/channel_events.hpp"
#include "lock/store/lease_types.hpp"
#include "lock/store/name_sets.hpp"
#include "lock/store/permits.hpp"

#include <colock/error.hpp>
#include <colock/log.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::detail {

// What a synchronizer holds through a store: a lock's lease (every store serves it), a
// semaphore's permits (and a read-write lock's holdings), an election's term, a lock set's
// names (several locks taken at once).
enum class holding_kind { lease, permits, election, name_set };

// The awaitables and unsubscribe() are called on strand(); strand(), release_in_background,
// listen, stop_listening and the connection facts from any thread. The awaitables take what
// they are given by reference: the caller awaits them at once and keeps the arguments alive.
class lease_store {
public:
    virtual ~lease_store() = default;

    // Where the lock layer's state lives: one strand for the locker, its queues and guards.
    virtual boost::asio::strand<boost::asio::any_io_executor> const& strand() const = 0;

    // Asks for the lease on `keys` for `token`, for `ttl`; idempotent for the same token (a
    // retry after a lost reply gets the lease it was granted). When the lock is held,
    // `queue` says whether this locker joins the queue of waiting processes. `stop` emits
    // total cancellation: honoured only while the request is unsent, so a grant is never lost
    // track of. The awaiting coroutine's own cancellation does not reach the request.
    virtual boost::asio::awaitable<grant_result>
    grant(lock_keys const& keys, std::string const& token, std::chrono::milliseconds ttl,
          queueing queue, boost::asio::cancellation_slot stop, replica_wait replicas) = 0;

    // Sets the lease of `token` to `ttl` from now, if it is still ours, and keeps `fence` (the
    // holder's) as the lock's last fence where a smaller one is stored. Cancelled by the
    // awaiting coroutine's cancellation, as the connection's requests are. `renewal`: a
    // renewal (not an extend() its caller waits for) of a lease whose value the holder knows
    // (held_value): a store may send it with others, a moment later (renewal_batch.hpp).
    virtual boost::asio::awaitable<lease_reply>
    extend(lock_keys const& keys, std::string const& token, std::chrono::milliseconds ttl,
           std::int64_t fence, std::optional<held_value> renewal) = 0;

    // How long a lease of `ttl` is known to be ours, counted from the start of the request that
    // granted or extended it: `ttl` on one server; with a quorum, less the clock drift allowed
    // between the primaries and this process.
    virtual std::chrono::milliseconds safe_ttl(std::chrono::milliseconds ttl) const noexcept {
        return ttl;
    }

    // Gives the lease of `token` back: to the first queued process (kept for it for `claim`),
    // or free; `last_fence` is the last fence this process gave under the lease (its own
    // waiters' turns); `written`, what the grant wrote when nothing this process knows of
    // changed it since (held_value; a store may ignore it). Not cancellable; sent again over
    // passing errors until release_timeout, then error::timeout. `ours` is reported only when
    // known: a repeat of a release that went through answers false.
    virtual boost::asio::awaitable<lease_reply>
    release(lock_keys const& keys, std::string const& token, std::chrono::milliseconds claim,
            std::int64_t last_fence, std::optional<held_value> written) = 0;

    // Hands a release to the deployment now, on the caller's thread, so that it goes out
    // before anything the caller does next (a close() right after still sends it). When it
    // fails for a passing reason, `retry` runs on the strand, to go on with release().
    virtual void release_in_background(lock_keys const& keys, std::string const& token,
                                       std::chrono::milliseconds claim, std::int64_t last_fence,
                                       std::optional<held_value> written,
                                       std::function<void()> retry) = 0;

    // Gives the lease of `token` back, free, not handed to a queued locker; in the background,
    // a few tries over passing errors while `current()` says so (Redlock: the grants of an
    // acquisition without a majority). Only a store under a quorum needs it.
    virtual void give_back_in_background(lock_keys const& keys, std::string const& token,
                                         std::function<bool()> current) = 0;

    // Takes this locker (keys.owner) out of the queue of waiting processes, and passes on a
    // hand-off it was given meanwhile; in the background. Should it fail, the entry lapses
    // after queue_entry_ttl and the hand-off after its claim.
    virtual void leave_queue(lock_keys const& keys, std::chrono::milliseconds claim) = 0;

    // Starts listening for wake-ups on `channel`. Completes when the deployment confirmed, or
    // refused (redis::error::server_error and its text: nothing to undo), or could not be
    // reached. Not cancellable.
    virtual boost::asio::awaitable<std::pair<boost::system::error_code, std::string>>
    subscribe(std::string const& channel) = 0;
    // Stops listening on `channel`; fire and forget.
    virtual void unsubscribe(std::string const& channel) = 0;

    // Sends wake-ups on channels starting with `channel_prefix`, reconnections and server
    // changes to `events` (on the strand), until stop_listening(); and the connection's close
    // for as long as the store lives (guards outlive their locker, and close() gives their
    // leases back). The messages are "g" the lock was handed to this locker, "q" another
    // locker queued behind a lease it holds; a server change means the leases granted before
    // are gone; after the close the store sends nothing until the user uses the connection
    // again, and the releases handed to the store during it are flushed with the close.
    virtual void listen(std::weak_ptr<channel_events> events, std::string channel_prefix) = 0;
    virtual void stop_listening() = 0;

    // Status: the lock's value, its time left and its live queue entries, read at once.
    virtual boost::asio::awaitable<lock_reading> read(lock_keys const& keys) = 0;
    // The fields of the record (a hash) at `key`.
    virtual boost::asio::awaitable<record_reading> read_record(std::string const& key) = 0;
    // Writes the record at `key` (replacing its fields) to live for `ttl`; in the background.
    // A failure is logged (a warning), nothing else: the record is for status only.
    virtual void write_record(std::string const& key,
                              std::vector<std::pair<std::string, std::string>> const& fields,
                              std::chrono::milliseconds ttl) = 0;
    // Ends the lease that holds `keys` now, whoever it is (see force_unlock_source), then
    // tells the holder's locker on `notify_prefix` + its id: "f <token> <lock key>". The
    // caller's cancellation does not reach it.
    virtual boost::asio::awaitable<forced_unlock_result>
    force_unlock(lock_keys const& keys, std::string const& notify_prefix) = 0;

    // Why this store cannot serve holdings of `kind` (a sentence for the synchronizer's error),
    // or empty when it serves them; asked once, when the synchronizer is made. The requests of
    // a kind it does not serve answer error::invalid_argument with that sentence. A store
    // serves leases; the default serves nothing else (a test's).
    virtual std::string refusal_of(holding_kind kind) const;
    // Throws system_error(error::invalid_argument) naming `what` ("semaphore") `name` and the
    // refusal when this store does not serve holdings of `kind`.
    void require(holding_kind kind, std::string_view what, std::string_view name) const;

    // An election's requests (election_scripts.hpp): the proclaim of a term's value, and the
    // read of the term. A quorum asks every primary and decides by majority.
    virtual boost::asio::awaitable<proclaim_result> proclaim(lock_keys const& keys,
                                                             proclaim_request const& request);
    virtual boost::asio::awaitable<election_reading> read_election(lock_keys const& keys);

    // A semaphore's requests (semaphore_scripts.hpp), taken as the lease's are.
    // grant_permits: one attempt, queued at the server when `request.queue`; `stop` as grant's.
    virtual boost::asio::awaitable<permit_grant> grant_permits(semaphore_keys const& keys,
                                                               permit_request const& request,
                                                               boost::asio::cancellation_slot stop);
    // Once, cancelled by the awaiting coroutine's cancellation; with `weigh`, also says whether
    // the holding weighs more than one permit.
    virtual boost::asio::awaitable<permit_extension> extend_permits(semaphore_keys const& keys,
                                                                    std::string const& token,
                                                                    std::chrono::milliseconds ttl,
                                                                    bool weigh);
    // Makes the holding of `token` weigh one permit, waking the calls that fit then; sent again
    // over passing errors until release_timeout.
    virtual boost::asio::awaitable<lease_reply> downgrade_permits(semaphore_keys const& keys,
                                                                  std::string const& token);
    // Gives the `permits` of `token` back (or takes its entry out of the queue: `leave`); sent
    // again over passing errors until release_timeout (a leave: a few times).
    virtual boost::asio::awaitable<lease_reply> release_permits(semaphore_keys const& keys,
                                                                std::string const& token,
                                                                std::size_t permits, bool leave);
    // The same, handed to the deployment now on the caller's thread, as release_in_background.
    virtual void release_permits_in_background(semaphore_keys const& keys, std::string const& token,
                                               std::size_t permits, bool leave,
                                               std::function<void()> retry);
    // The capacity stored, the live permits, the waiting calls and the last fence, read at
    // once, with the first `listed` holdings to expire.
    virtual boost::asio::awaitable<semaphore_reading> read_permits(semaphore_keys const& keys,
                                                                   std::size_t listed);
    // As server_changes, for the server that holds a semaphore's keys.
    virtual std::uint64_t permit_server_changes(semaphore_keys const& /*keys*/) const noexcept {
        return 0;
    }

    // A lock set's requests (multi_scripts.hpp): every name of `keys` in one call, taken as the
    // lease's are. grant_names: one attempt, queued at the server when `request.queue`; `stop`
    // as grant's. extend_names: once, cancelled by the awaiting coroutine's cancellation; ours
    // only when every name's lease was. release_names: gives the names of `token` back (and,
    // with `leave`, takes `entry` out of their queues, passing on a name handed or reserved to
    // it), sent again over passing errors until release_timeout (a leave: a few times). Each
    // name's stored fence becomes at least its `last_fences` entry (in keys' order; empty: the
    // stored ones stay): the last fence given under the lease, past the grant's after hand-offs
    // inside the process, and with Redlock past what one primary gave.
    virtual boost::asio::awaitable<names_grant> grant_names(std::span<lock_keys const> keys,
                                                            names_request const& request,
                                                            boost::asio::cancellation_slot stop);
    virtual boost::asio::awaitable<lease_reply> extend_names(std::span<lock_keys const> keys,
                                                             std::string const& token,
                                                             std::chrono::milliseconds ttl);
    virtual boost::asio::awaitable<lease_reply>
    release_names(std::span<lock_keys const> keys, std::string const& entry,
                  std::string const& token, bool leave, std::span<std::int64_t const> last_fences);
    // The same, handed to the deployment now on the caller's thread, as release_in_background.
    virtual void release_names_in_background(std::span<lock_keys const> keys,
                                             std::string const& entry, std::string const& token,
                                             bool leave, std::span<std::int64_t const> last_fences,
                                             std::function<void()> retry);
    // Why the names of `keys` cannot be taken here (a sentence), or empty.
    virtual std::string names_refusal(std::span<lock_keys const> /*keys*/) const { return {}; }
    // Names of one shard (a Cluster slot) are taken in one call; a set over several is taken a
    // shard at a time, in the order of this number.
    virtual std::uint32_t names_shard(lock_keys const& /*keys*/) const { return 0; }

    // How many of the store's servers make a majority: 1 for one connection. A watch over a
    // quorum passes a message on once that many primaries told it.
    virtual std::size_t majority() const noexcept { return 1; }

    // Connection facts the algorithm's decisions and messages consult.
    virtual bool is_connected() const noexcept = 0;
    // The last failure's account (endpoint and cause), or an empty string.
    virtual std::string last_error_text() const = 0;
    // Counts replacements of the server instances that hold `keys` (with Cluster, of their
    // slot's primary): a grant that saw it change was made on a server that is gone, and the
    // leases granted before a change are lost.
    virtual std::uint64_t server_changes(lock_keys const& keys) const noexcept = 0;
    // Re-established connections so far, for the observer.
    virtual std::uint64_t reconnects() const noexcept = 0;
    // The deployment's log hook: whether a line of `level` goes out (format it only then), and
    // sending one.
    virtual bool logs(log_level level) const noexcept = 0;
    virtual void log(log_level level, std::string_view line) const noexcept = 0;
};

} // namespace colock::detail
