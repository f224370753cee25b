// What a lock guard sees of its locker (the locker's state, locker_impl, is one): the store and
// the book its lease is in, the holder record, the observer's events, the kept leases, and what
// a lease letting go becomes here. A guard holds its owner: background work may outlive the
// locker object. Private to the library's sources; on the locker's strand but for what says
// otherwise.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/lease.hpp"
#include "lock/store/lease_store.hpp"

#include <chrono>
#include <cstddef>
#include <memory>

namespace colock::detail {

class guard_state;
class lock_notes;
class retained_leases;

class guard_owner {
public:
    // From any thread.
    virtual lease_store& store() const noexcept = 0;
    virtual std::shared_ptr<lease_book> const& book() const noexcept = 0;
    // Calls waiting in the locker's local queues; from any thread.
    virtual std::size_t waiting() const noexcept = 0;
    virtual lock_notes const& notes() const noexcept = 0;
    // The leases kept after their holders let go (lock_options::retain); their let-go's
    // bookkeeping is from any thread (retention.hpp).
    virtual retained_leases& retained() noexcept = 0;
    // A lease of the locker was granted or renewed for `ttl`: its holder record lives as long.
    virtual void keep_record(std::chrono::milliseconds ttl) = 0;
    // `st` stopped and lets go: its lease goes to a waiter of this process, or is kept here
    // (lock_options::retain); false when it must go back to Redis.
    virtual bool let_go_locally(guard_state& st) = 0;
    // After a release to Redis that did not hand the lock to a queued locker: the first local
    // waiter on `keys` asks now.
    virtual void wake_local_head(lock_keys const& keys) = 0;

protected:
    ~guard_owner() = default;
};

} // namespace colock::detail
