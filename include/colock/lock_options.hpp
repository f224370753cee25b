/// \file
/// How a lock is taken, held and waited for.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>

namespace colock {

/// Exponential backoff with full jitter between attempts of a waiting co_lock: the n-th sleep
/// is uniform in [0, min(max, initial * multiplier^n)]. A wake-up message from the holder's
/// release ends any sleep early, so backoff only bounds how long a missed message can cost.
/// Durations up to milliseconds::max() are accepted; a sleep never outlasts wait_timeout.
struct retry_options {
    /// The ceiling of the first sleep; positive.
    std::chrono::milliseconds initial{50};
    /// The ceiling no sleep goes above, however many attempts; at least `initial`.
    std::chrono::milliseconds max{1000};
    /// How much the ceiling grows per attempt; finite and at least 1.
    double multiplier = 2.0;
};

/// The longest lease a lock may have. A lease is how long a crashed holder keeps the lock, so a
/// longer one is a mistake rather than a wish; it also keeps every deadline representable.
inline constexpr std::chrono::milliseconds max_lock_ttl = std::chrono::hours{24 * 366};

/// How one call takes, holds and waits for a lock (co_lock, co_try_lock and their async_
/// forms). Every field has a default; validate() says which values are refused, and
/// docs/options.md when to change each.
struct lock_options {
    /// Length of the lease, at most max_lock_ttl. The lock frees itself this long after the last
    /// renewal.
    std::chrono::milliseconds ttl{30'000};
    /// Renew the lease in the background while the guard lives.
    bool auto_renew = true;
    /// Time between renewals; default ttl / 3. Must be below ttl. Each renewal is due at a
    /// multiple of a sixteenth of it (at most that much sooner), so that a locker's leases of the
    /// same terms fall due together.
    std::optional<std::chrono::milliseconds> renew_interval;
    /// Renewals in batches: a renewal due with others of the same locker and ttl (on one server
    /// or one Cluster slot) goes out with them in one script call of up to 256 leases, each
    /// checked by the value its grant wrote, at most 2 ms after it was due. A process holding
    /// thousands of locks then costs the server about half as much per renewal. Off, each renewal
    /// is a call of its own, sent when due. Redlock renews each lease alone either way.
    bool renew_in_batches = true;
    /// Renewal stops this long after the lock was taken, so a stuck holder cannot keep the
    /// lock forever; the lease then runs out and the guard reports it lost. Default: no limit.
    /// Any length up to milliseconds::max() is accepted and means what it says (no overflow).
    std::optional<std::chrono::milliseconds> max_hold;
    /// co_lock gives up with error::timeout after this long. Default: wait until cancelled.
    /// Any length up to milliseconds::max() is accepted and means what it says (no overflow).
    std::optional<std::chrono::milliseconds> wait_timeout;
    /// How long a waiting co_lock keeps trying to reach a server over a connection that has
    /// never been established (nothing listens yet, or the handshake times out), within
    /// wait_timeout: long enough for a service that starts beside its Redis. It then fails
    /// with the connection's error. A refusal that cannot pass (wrong password, unknown
    /// database, a certificate that does not verify) fails at once; a connection that has
    /// worked before and was lost is waited for within wait_timeout alone, since it
    /// reconnects by itself. co_try_lock makes one attempt and reports the error.
    std::chrono::milliseconds first_connect_timeout{10'000};
    /// Backoff between the attempts of a waiting co_lock (see retry_options).
    retry_options retry;
    /// Cohort hand-off: when a holder lets go and a waiter of this process (this locker) is
    /// next for the name, the lease passes to it without a round trip to Redis, with its own
    /// guard, token and fence. While a waiter of another process is queued, at most this many
    /// such hand-offs follow one another before the lock goes to it; with nobody else queued
    /// there is no limit. 0 turns cohort hand-off off. Read from the releasing holder's options.
    std::size_t cohort_limit = 16;
    /// Replication: after each attempt to take the lock, WAIT until this many replicas have
    /// acknowledged it, for at most replicas_timeout. When fewer do, a lock that was granted is
    /// released again and co_lock / co_try_lock fail with error::replicas_not_acknowledged
    /// (not retried): a failover to a replica that never got the lock cannot hand it to someone
    /// else (Redisson's answer to that hazard). 0, the default, waits for none. The WAIT goes in
    /// the same pipeline as the attempt and holds the connection's other requests behind it
    /// until the replicas answer: milliseconds while they are up, replicas_timeout while one
    /// is down.
    std::size_t wait_replicas = 0;
    /// How long an attempt waits for wait_replicas acknowledgements; positive, at most
    /// max_lock_ttl.
    std::chrono::milliseconds replicas_timeout{1000};

    /// Lease retention (opt-in; locks only). When a holder lets go with no waiter of this
    /// process to hand the lease to and no other process queued for it, the locker keeps the
    /// lease in Redis for up to this long instead of releasing it: a co_lock or co_try_lock of
    /// the name through the same locker then takes it with no round trip (a new guard, token
    /// and fence, as cohort hand-off gives). Another process's attempt queues and tells this
    /// locker, which gives the lease back at once; the lease is also given back when `retain`
    /// ends, before it is due for renewal (it is not renewed while kept), when the connection
    /// is lost or closed, and when the locker goes. Another process's co_try_lock does not
    /// queue, so it fails while the lease is kept. Needs auto_renew. 0, the default, releases
    /// at once. At most max_lock_ttl. Read from the releasing holder's options. See
    /// docs/options.md.
    std::chrono::milliseconds retain{0};

    /// The renew interval in effect: renew_interval, or ttl / 3 when it is not set.
    std::chrono::milliseconds effective_renew_interval() const noexcept {
        return renew_interval.value_or(ttl / 3);
    }
};

/// Lock names longer than this are refused: the name is part of three Redis keys.
inline constexpr std::size_t max_lock_name_length = 1024;

/// Throws boost::system::system_error with error::invalid_argument, naming the field, when
/// `name` or `opt` cannot be used (empty or oversized name, a name starting with '}' (its keys'
/// hash tag would be empty, splitting them over Cluster slots), ttl <= 0 or above max_lock_ttl,
/// renew_interval <= 0 or >= ttl, a ttl below 3 ms with no renew_interval, negative
/// wait_timeout, max_hold or first_connect_timeout, retry.initial <= 0, retry.max below
/// retry.initial, a retry.multiplier below 1 or not finite, replicas_timeout <= 0 or above
/// max_lock_ttl while wait_replicas is set, wait_replicas above a million, retain below 0 or
/// above max_lock_ttl or set with auto_renew off).
void validate(std::string_view name, lock_options const& opt);

/// What an async_* call takes where its options may stand, so that `async_lock(name, token)`
/// uses the default options: anything but lock_options.
template <class T>
concept not_lock_options = !std::is_convertible_v<T, lock_options>;

} // namespace colock
