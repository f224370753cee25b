/// \file
/// What the server knows of one lock, as locker::co_status reports it: whether it is held, by
/// whom and since when, how long the lease has left, its last fence and who is queued.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace colock {

/// The state of a lock's key.
enum class lock_state {
    /// Nobody holds it. Its key may still keep the last fence for a while (lock_status::ttl).
    free,
    /// A holder's lease is in force.
    held,
    /// A release handed it to a waiting locker, which has not claimed it yet (a claim lasts
    /// at most a second); a forced unlock leaves it in this state, claimed by nobody, for up
    /// to a second too (see locker::co_force_unlock).
    handed,
};

/// "free", "held" or "handed".
std::string_view to_string(lock_state state) noexcept;

/// Who a holder is: the record its locker keeps in Redis (`<prefix>locker:<id>`, a hash) for
/// as long as it holds leases. Written when the locker first holds a lease and again about
/// once a minute while it keeps holding, never once per acquisition.
struct holder_info {
    /// The holder's host name (gethostname).
    std::string host;
    /// The holder's process id on that host.
    std::int64_t pid = 0;
    /// The holder's program (its executable's short name).
    std::string program;
    /// The client_name of the holder's connection (redis::config::client_name).
    std::string client_name;
    /// When the holder's locker was made, on the holder's clock.
    std::chrono::system_clock::time_point started{};
};

/// A lock as its key reads at one moment.
struct lock_status {
    /// The lock's name, as asked for.
    std::string name;
    /// Whether the lock is free, held or handed over.
    lock_state state = lock_state::free;
    /// The last fence the server gave for the lock (a holder's own waiters, which it hands
    /// the lease to without a round trip, get the ones after it). 0 when the key is gone:
    /// never used, or lapsed; the next fence then comes from the server's clock.
    std::int64_t fence = 0;
    /// Time left on the key: the lease (held), the claim (handed), or how long the last fence
    /// is kept (free). 0 when there is no key; milliseconds::max() when it has no expiry (set
    /// by hand).
    std::chrono::milliseconds ttl{0};
    /// The id of the locker that holds the lock, or that it is handed to; empty when free or
    /// when nobody is to claim it (after a forced unlock). For a lock set (locker::co_lock_all)
    /// its call's entry, `<locker id>/<n>`: holder is that locker's record.
    std::string holder_id;
    /// The holder's lease token; held only.
    std::string token;
    /// When the holder's lease began, on the holder's clock; held only. The lease goes on
    /// across the holder's hand-offs to its own waiters.
    std::optional<std::chrono::system_clock::time_point> since;
    /// The holder's record, when holder_id names a locker whose record is still there.
    std::optional<holder_info> holder;
    /// Processes (one entry per locker) waiting for the lock, their entries still live.
    std::size_t queued = 0;

    /// True when state is lock_state::held.
    bool held() const noexcept { return state == lock_state::held; }
};

} // namespace colock
