/// \file
/// What the server knows of a semaphore or a read-write lock, as semaphore::co_status and
/// rw_lock::co_status report it: the permits held, by whom and for how long, the last fence
/// and how many calls wait.
#pragma once

#include <colock/lock_status.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock {

/// The most holdings a status lists (the first to expire); its counts cover every holding.
inline constexpr std::size_t max_listed_holdings = 100;

/// One holding of a semaphore's permits, or of a read-write lock (a reader's or the writer's).
struct holding_status {
    /// The holding's token at the server (a permit's, a guard's token()).
    std::string token;
    /// The permits it holds: a read-write lock's writer holds them all.
    std::size_t permits = 1;
    /// Time left on its lease, on the server's clock.
    std::chrono::milliseconds ttl{0};
    /// The id of the locker that holds it (the start of its token).
    std::string holder_id;
    /// The holder's record (as lock_status::holder), when it is still there.
    std::optional<holder_info> holder;
};

/// A semaphore as its keys read at one moment.
struct semaphore_status {
    /// The semaphore's name, as asked for.
    std::string name;
    /// The capacity the server keeps for the name; 0 when it keeps none (never used, or every
    /// holding and waiting call lapsed a ttl ago): the next user sets it.
    std::size_t capacity = 0;
    /// The permits its live holdings hold.
    std::size_t used = 0;
    /// The last fence the server gave; 0 when none is kept.
    std::int64_t fence = 0;
    /// Calls waiting for permits, their entries still live or not yet swept.
    std::size_t queued = 0;
    /// The live holdings, the first to expire first; at most max_listed_holdings of them.
    std::vector<holding_status> holdings;

    /// The permits free now: capacity less used.
    std::size_t available() const noexcept { return capacity > used ? capacity - used : 0; }
};

/// How a read-write lock is held.
enum class rw_state {
    /// Nobody holds it.
    free,
    /// Readers hold it (rw_lock_status::readers of them).
    shared,
    /// Its writer holds it.
    exclusive,
};

/// "free", "shared" or "exclusive".
std::string_view to_string(rw_state state) noexcept;

/// A read-write lock as its keys read at one moment.
struct rw_lock_status {
    /// The lock's name, as asked for.
    std::string name;
    /// Free, held by readers, or by its writer.
    rw_state state = rw_state::free;
    /// How many readers hold it (0 unless shared).
    std::size_t readers = 0;
    /// The last fence the server gave: a writer's (its readers hold that one too); 0 when none
    /// is kept.
    std::int64_t fence = 0;
    /// Calls waiting for it (readers and writers), their entries still live or not yet swept.
    std::size_t queued = 0;
    /// The live holdings: the writer's, or the readers' (the first to expire first, at most
    /// max_listed_holdings of them).
    std::vector<holding_status> holdings;
};

} // namespace colock
