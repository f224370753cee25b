// The lease store's vocabulary: where the leases of a kind live, the keys of a lock, and the
// answers to the store's requests (lease_store.hpp). Private to the library's sources.
#pragma once

#include "lock/base/common.hpp"

#include <boost/system/error_code.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colock::detail {
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
    std::string key;                // the lock: holder, fence, whether a process is queued
    std::string queue_key;          // the processes waiting, in arrival order
    std::string deadlines_key;      // each queued process's deadline
    std::string channel_prefix;     // + a locker's owner id: where it is told of a hand-off
    std::string owner;              // this locker's id
    std::string channel;            // this locker's wake channel
    std::string record_key;         // the lease's record, or empty: a lock has none
    std::string_view kind = "lock"; // the space's kind: what the observer's events say

    lock_keys(std::string const& prefix, std::string_view name, std::string_view owner_id)
        : lock_keys(fmt::format("{}{{{}}}", prefix, name), owner_id) {}

    lock_keys(key_space const& space, std::string_view name, std::string_view owner_id)
        : lock_keys(space.prefix, name, owner_id) {
        if (space.with_record)
            record_key = key + ":e";
        kind = space.kind;
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

// What a grant with nobody queued wrote in the lock key, beside the holder's locker and token:
// the fence stored there (the grant's, or the larger one a confirmed renewal stored) and the
// holder's clock at the request. A release that passes it frees the lock in one command while
// the key holds exactly that; when anything changed it (another locker queued, a renewal whose
// reply was lost), the release takes the general path: a stale one costs time, never a wrong
// release.
struct held_value {
    std::int64_t fence = 0;
    std::int64_t since_ms = 0;
    // The lease's local deadline, when its holder releases it: the key lives at least as long
    // (a local deadline is never later than the server's expiry), and the free value a release
    // leaves keeps that expiry, so this process knows the value until then.
    lock_clock::time_point until{};
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
    // Granted with nobody queued, not even this locker: what the key holds now.
    std::optional<held_value> written;
};

// The answer to an extend or a release: `ours` is whether the lease was still ours (and is
// now extended, or released); `handed`, for a release, whether it went to a queued locker
// (else the lock is free). Meaningless when `ec` is set.
struct lease_reply {
    boost::system::error_code ec;
    bool ours = false;
    bool handed = false;
    // A renewal of a value the holder knew (lease_store::extend): the key held another while
    // the lease was ours, so what the holder knows is stale.
    bool value_changed = false;
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

} // namespace colock::detail
