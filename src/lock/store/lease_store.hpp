// The seam between the lock algorithm and the Redis deployment it runs on: how a lease is
// granted, extended, released and waited for. The locker, its local queues, the renewal and
// the guard go through this interface only; a store does the I/O. There are two stores: one
// connection (single_connection_store: one server, Sentinel or Cluster), and a quorum of
// independent primaries (quorum_store: Redlock), made of one single_connection_store per
// primary. Private to the library's sources.
#pragma once

#include "lock/store/channel_events.hpp"

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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::detail {

class script_client;

// Where the leases of a kind live: the locks under the locker's prefix; a synchronizer's under
// a prefix of its own, each lease with a record (a hash, `<lock key>:e`) that the extend and the
// release scripts keep and end with it (an election's term and value).
struct key_space {
    std::string prefix;
    bool with_record = false;
    // What the user made, for errors: "lock", or "election" for a campaign's lease.
    std::string_view kind = "lock";
};

// The keys of lock `name` under a prefix, all in the hash slot of `{name}` (the layout is in
// lock_scripts.hpp), and this locker's wake channel for it.
struct lock_keys {
    std::string key;            // the lock: holder, fence, whether a process is queued
    std::string queue_key;      // the processes waiting, in arrival order
    std::string deadlines_key;  // each queued process's deadline
    std::string channel_prefix; // + a locker's owner id: where it is told of a hand-off
    std::string owner;          // this locker's id
    std::string channel;        // this locker's wake channel
    std::string record_key;     // the lease's record, or empty: a lock has none

    lock_keys(std::string const& prefix, std::string_view name, std::string_view owner_id)
        : lock_keys(fmt::format("{}{{{}}}", prefix, name), owner_id) {}

    lock_keys(key_space const& space, std::string_view name, std::string_view owner_id)
        : lock_keys(space.prefix, name, owner_id) {
        if (space.with_record)
            record_key = key + ":e";
    }

    // From the lock's key itself (`prefix{name}`).
    lock_keys(std::string lock_key, std::string_view owner_id)
        : key(std::move(lock_key))
        , queue_key(key + ":q")
        , deadlines_key(key + ":qd")
        , channel_prefix(key + ":w:")
        , owner(owner_id)
        , channel(channel_prefix + owner) {}

    // The lock key of a wake channel of `owner_id`, or nothing when it is not one.
    static std::optional<std::string> key_of_channel(std::string_view channel,
                                                     std::string_view owner_id) {
        auto const suffix = fmt::format(":w:{}", owner_id);
        if (channel.size() <= suffix.size() || !channel.ends_with(suffix))
            return std::nullopt;
        return std::string(channel.substr(0, channel.size() - suffix.size()));
    }
};

// How an attempt treats the queue of waiting processes when the lock is held.
enum class queueing {
    never,           // co_try_lock: one attempt, nothing left behind
    when_held,       // a waiting co_lock: queue this locker if the lock is held
    stay_after_grant // as when_held, and stay queued after a grant: more local waiters follow
};

// A queue entry lapses this long after the waiting process last refreshed it (every attempt
// does); a waiting process asks again at least every queue_refresh_interval.
inline constexpr std::chrono::milliseconds queue_entry_ttl{3000};
inline constexpr std::chrono::milliseconds queue_refresh_interval{1000};
// How long a hand-off is kept for the process it went to: a process that died right after
// queueing holds the lock up this long at most (or the lock's ttl, when shorter).
inline constexpr std::chrono::milliseconds max_handoff_claim{1000};

inline std::chrono::milliseconds handoff_claim(std::chrono::milliseconds ttl) {
    return std::min(ttl, max_handoff_claim);
}

// How many replicas must acknowledge a grant (WAIT), and for how long it waits; count 0: none.
// A grant they do not acknowledge is released again and answered with
// error::replicas_not_acknowledged.
struct replica_wait {
    std::size_t count = 0;
    std::chrono::milliseconds timeout{0};
};

// The answer to one request for a lease.
struct grant_result {
    // Empty when the deployment answered; else why not: the network's code, one of
    // redis::error (server_error with `server_text`), error::unexpected_reply (a reply of the
    // wrong shape, shown in `server_text`), or operation_aborted (stopped before it was sent).
    boost::system::error_code ec;
    std::string server_text;
    bool granted = false;
    std::int64_t fence = 0; // when granted
    // When held by another: its remaining lease (0: gone meanwhile, try at once; max: set
    // without expiry by hand, so back off only).
    std::chrono::milliseconds holder_ttl{0};
    // The request failed after it may have been applied: our token may be in the key, so it
    // must be released on the way out (the release checks the token).
    bool outcome_unknown = false;
    // The lease is (granted) or is held by (not granted) this locker, and another locker is
    // queued for it: this process's own waiters get at most cohort_limit turns more.
    bool others_queued = false;
};

// The answer to an extend or a release: `ours` is whether the lease was still ours (and is
// now extended, or released); `handed`, for a release, whether it went to a queued locker
// (else the lock is free). Meaningless when `ec` is set.
struct lease_reply {
    boost::system::error_code ec;
    bool ours = false;
    bool handed = false;
};

// A lock's keys as status reads them.
struct lock_reading {
    // As grant_result's.
    boost::system::error_code ec;
    std::string server_text;
    std::string value;       // the lock key's value; empty when there is none
    std::int64_t pttl = -2;  // the key's PTTL: -2 none, -1 no expiry
    std::int64_t queued = 0; // lockers queued, their entries live
};

// A record of fields (a hash), as read_record() finds it: empty when there is none.
struct record_reading {
    boost::system::error_code ec;
    std::string server_text;
    std::vector<std::pair<std::string, std::string>> fields;
};

// The answer to a forced unlock: whether a lease was ended, and whose.
struct forced_unlock_result {
    boost::system::error_code ec;
    std::string server_text;
    bool ended = false;
    std::string owner; // the holder's locker
    std::string token; // the holder's lease token
};

// An election's term as its read script finds it (election_scripts.hpp).
struct election_reading {
    // As lock_reading's: the network's code, server_error with its text, or unexpected_reply
    // (a reply of another shape, shown in server_text).
    boost::system::error_code ec;
    std::string server_text;
    bool leading = false; // the record's lease holds the lock now
    bool record = false;  // the term's record exists (leading, or handed on and unclaimed)
    std::int64_t term = 0;
    std::int64_t version = 0;
    std::string value;
    std::string owner;
    std::chrono::milliseconds record_ttl{-2}; // the record's PTTL: -2 none
    // The last fence in the lock's key (held, handed or free), 0 when the key is gone: a term
    // above the last one known came and went.
    std::int64_t lock_fence = 0;
};

// A new value for the term of an election's lease (the proclaim script): `value` as `version`
// of term `term`, written only while the lease of `token` holds the lock.
struct proclaim_request {
    std::string token;
    std::int64_t term = 0; // the lease's fence
    std::string value;
    std::string owner; // the leader's locker
    std::int64_t version = 0;
    // How long the lease has left: a quorum waits for its majority at most this long.
    std::chrono::milliseconds lease_left{1};
    // The campaign's claim: sent again over passing errors while the lease lasts and
    // `still_ours` says so (empty: always).
    bool retrying = false;
    std::function<bool()> still_ours;
    // Else sent once, and cancelled by the awaiting coroutine's cancellation while unsent.
    bool cancellable = true;
};

// The answer to a proclaim: whether it was written (false: the lease is not ours any more).
struct proclaim_result {
    // As grant_result's.
    boost::system::error_code ec;
    std::string server_text;
    bool written = false;
};

// How long a forced unlock leaves the lock to nobody, at most, so that the holder's locker hears
// of it (one message) before anyone else can take the lock.
inline constexpr std::chrono::milliseconds forced_unlock_quarantine{1000};

// How long a release is tried (again, over lost connections) before it fails with
// error::timeout and the lease is left to run out by its ttl.
inline constexpr std::chrono::milliseconds release_timeout{5000};

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
    // awaiting coroutine's cancellation, as the connection's requests are.
    virtual boost::asio::awaitable<lease_reply> extend(lock_keys const& keys,
                                                       std::string const& token,
                                                       std::chrono::milliseconds ttl,
                                                       std::int64_t fence) = 0;

    // How long a lease of `ttl` is known to be ours, counted from the start of the request that
    // granted or extended it: `ttl` on one server; with a quorum, less the clock drift allowed
    // between the primaries and this process.
    virtual std::chrono::milliseconds safe_ttl(std::chrono::milliseconds ttl) const noexcept {
        return ttl;
    }

    // Gives the lease of `token` back: to the first queued process (kept for it for `claim`),
    // or free; `last_fence` is the last fence this process gave under the lease (its own
    // waiters' turns). Not cancellable; sent again over passing errors until
    // release_timeout, then error::timeout. `ours` is reported only when known: a repeat of a
    // release that went through answers false.
    virtual boost::asio::awaitable<lease_reply> release(lock_keys const& keys,
                                                        std::string const& token,
                                                        std::chrono::milliseconds claim,
                                                        std::int64_t last_fence) = 0;

    // Hands a release to the deployment now, on the caller's thread, so that it goes out
    // before anything the caller does next (a close() right after still sends it). When it
    // fails for a passing reason, `retry` runs on the strand, to go on with release().
    virtual void release_in_background(lock_keys const& keys, std::string const& token,
                                       std::chrono::milliseconds claim, std::int64_t last_fence,
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

    // The script clients of the store's servers, for a synchronizer's own scripts: one for a
    // store over one connection, one per primary for a quorum (whose synchronizer then decides
    // by majority).
    virtual std::vector<std::shared_ptr<script_client>> script_clients() const = 0;

    // An election's requests (election_scripts.hpp): the proclaim of a term's value, and the
    // read of the term. A quorum asks every primary and decides by majority. A store that
    // serves no election (a test's) refuses them with error::invalid_argument.
    virtual boost::asio::awaitable<proclaim_result> proclaim(lock_keys const& keys,
                                                             proclaim_request const& /*request*/) {
        co_return proclaim_result{error::invalid_argument, no_election_text(keys), false};
    }
    virtual boost::asio::awaitable<election_reading> read_election(lock_keys const& keys) {
        election_reading r;
        r.ec = error::invalid_argument;
        r.server_text = no_election_text(keys);
        co_return r;
    }
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

private:
    static std::string no_election_text(lock_keys const& keys) {
        return fmt::format("the locker's store serves no election ({})", keys.key);
    }
};

} // namespace colock::detail
