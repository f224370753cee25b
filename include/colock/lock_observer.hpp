/// \file
/// What a locker tells an observer: acquisitions, releases, losses, renewals, queue depth and
/// reconnections, for metrics and logs. See locker::set_observer.
#pragma once

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace colock {

/// How an acquisition got the lock.
enum class acquired_by {
    /// The call's first attempt: the lock was free.
    first_attempt,
    /// The server, after the call waited: typically a release in another locker handed the
    /// lock to this one, or the holder's lease ran out.
    server_after_wait,
    /// A holder of this locker passed its lease on, without a round trip to the server
    /// (lock_options::cohort_limit).
    local_handoff,
    /// The locker had kept the lease after a holder let go (lock_options::retain): no round
    /// trip to the server.
    retained,
};

/// Why a lease was lost.
enum class loss_reason {
    /// The server no longer holds it for this holder: it expired there, was deleted from
    /// outside, or was taken over.
    not_ours,
    /// Its local deadline passed with no renewal confirmed (a slow or lost connection), or
    /// with no renewal at all (auto_renew off, or max_hold reached).
    expired,
    /// It was held on a server instance that has been replaced (a restart or failover noticed
    /// on reconnection).
    server_replaced,
    /// It was ended by locker::co_force_unlock (from any process), and this locker was told.
    forced,
};

/// The enumerator's name ("first_attempt", "server_after_wait", "local_handoff"), for logs and
/// metrics labels; "unknown" for a value outside the enumeration.
std::string_view to_string(acquired_by how) noexcept;

/// The enumerator's name ("not_ours", "expired", "server_replaced", "forced"), for logs and
/// metrics labels; "unknown" for a value outside the enumeration.
std::string_view to_string(loss_reason why) noexcept;

/// A call of co_lock / co_try_lock / async_lock / async_try_lock got the lock. A guard that
/// shares a lease held already (lock_guard::share(), a lock_scope's re-entry) is not an
/// acquisition: no event.
struct acquired_event {
    /// The lock's name; valid during the call only.
    std::string_view name;
    /// The holder's fence (lock_guard::fence()).
    std::int64_t fence = 0;
    /// From the call to the grant.
    std::chrono::steady_clock::duration waited{};
    /// Server attempts the call made (0 for a local hand-off that came before its first).
    int attempts = 0;
    /// How the lock was obtained.
    acquired_by how = acquired_by::first_attempt;
    /// What holds it: "lock" (a lock, or one name of a lock set), "semaphore", "read-write
    /// lock", or "election" (a leadership, by the election's name); valid during the call only.
    std::string_view kind = "lock";
};

/// A holder let the lock go (release(), or its guard went away) while it still held it. For guards
/// sharing one lease, once: when the last of them lets go.
struct released_event {
    /// The lock's name; valid during the call only.
    std::string_view name;
    /// The holder's fence (lock_guard::fence()).
    std::int64_t fence = 0;
    /// From the call that acquired the lock to its release.
    std::chrono::steady_clock::duration held{};
    /// The lease went to a waiter of this locker, with no round trip.
    bool handed_locally = false;
    /// The locker keeps the lease for its next co_lock of the name (lock_options::retain).
    /// With neither this nor handed_locally, the lease was sent back to the server.
    bool retained = false;
    /// What holds it: "lock" (a lock, or one name of a lock set), "semaphore", "read-write
    /// lock", or "election" (a leadership, by the election's name); valid during the call only.
    std::string_view kind = "lock";
};

/// A holder's lease was lost. wait_lost() completes for it.
struct lost_event {
    /// The lock's name; valid during the call only.
    std::string_view name;
    /// The holder's fence (lock_guard::fence()).
    std::int64_t fence = 0;
    /// Why the lease was lost.
    loss_reason reason = loss_reason::not_ours;
    /// From the call that acquired the lock to the loss being noticed.
    std::chrono::steady_clock::duration held{};
    /// What holds it: "lock" (a lock, or one name of a lock set), "semaphore", "read-write
    /// lock", or "election" (a leadership, by the election's name); valid during the call only.
    std::string_view kind = "lock";
};

/// A renewal of a lease (the background renewal, not lock_guard::extend) got its answer, or
/// none by the lease's deadline.
struct renewal_event {
    /// The lock's name; valid during the call only.
    std::string_view name;
    /// The holder's fence (lock_guard::fence()).
    std::int64_t fence = 0;
    /// From sending the renewal to its answer.
    std::chrono::steady_clock::duration latency{};
    /// The lease was extended. False with no error: it was no longer ours (lost_event
    /// follows).
    bool extended = false;
    /// The request failed (it is retried until the lease's deadline); error::timeout when no
    /// answer came by the deadline.
    boost::system::error_code error;
    /// What holds it: "lock" (a lock, or one name of a lock set), "semaphore", "read-write
    /// lock", or "election" (a leadership, by the election's name); valid during the call only.
    std::string_view kind = "lock";
};

/// The number of this locker's calls waiting on one name changed.
struct queue_event {
    /// The lock's name; valid during the call only.
    std::string_view name;
    /// Calls waiting on the name now, in this locker.
    std::size_t depth = 0;
    /// What waits: "lock" (co_lock's calls), or "election" (campaigns, by the election's name);
    /// valid during the call only.
    std::string_view kind = "lock";
};

/// The locker's connection was re-established after it had been lost.
struct reconnect_event {
    /// Reconnections of the connection so far.
    std::uint64_t reconnects = 0;
};

/// Receives a locker's events. Every function is called on the locker's strand, inline, as
/// the event happens: keep it short (count, record, hand off), never block, and never wait on
/// the locker from inside it. The string views are valid during the call only. The default
/// implementations do nothing, so an observer overrides what it needs. A locker without an
/// observer builds no event at all. A lock on several names (locker::co_lock_all) is told as a
/// lock per name: an acquired, released, lost and renewal event for each of its names, with
/// that name's fence; its waits are not counted in queue_event. A semaphore's permits and a
/// read-write lock's guards and an election's leaderships are told as holdings of their name,
/// with their `kind`: acquired, released, lost and renewal events (a semaphore's and a read-write
/// lock's waits are not counted in queue_event; a campaign's are, by the election's name and with
/// kind "election").
class lock_observer {
public:
    virtual ~lock_observer() = default;
    /// A call got the lock.
    virtual void on_acquired(acquired_event const&) {}
    /// A holder let the lock go while it still held it.
    virtual void on_released(released_event const&) {}
    /// A holder's lease was lost.
    virtual void on_lost(lost_event const&) {}
    /// A background renewal got its answer, or none by the lease's deadline.
    virtual void on_renewal(renewal_event const&) {}
    /// The number of calls waiting on a name in this locker changed.
    virtual void on_queue(queue_event const&) {}
    /// The locker's connection was re-established after a loss.
    virtual void on_reconnect(reconnect_event const&) {}
};

} // namespace colock
