// Cohort hand-off: a holder letting go passes the lease to the next waiter of this process on
// its name, without a round trip to Redis (lock cohorting, Dice, Marathe and Shavit, PPoPP
// 2012); and the leases nobody here takes, given back to Redis in the background. Private to
// the library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/locker_life.hpp"
#include "lock/store/lease_store.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace colock::detail {

class guard_state;

class cohort {
public:
    // The locker's `context`, `queues` and `life` outlive this.
    cohort(locker_context& context, local_queues& queues, locker_life const& life)
        : context_(context), queues_(queues), life_(life) {}

    // Passes the lease of `st`, which is letting go, to the next waiter of this process on its
    // name, if allowed; true when it did.
    bool hand_off_locally(guard_state& st);
    // After a release to Redis that did not hand the lock to a queued locker: the first local
    // waiter on `keys` asks now rather than after its sleep.
    void wake_local_head(lock_keys const& keys);
    // A waiter given a baton leaves without taking it: the lease goes to the next local
    // waiter, or back to Redis.
    void pass_on(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);
    // A baton nobody here may take (its server was replaced, its lease was ended or Redis
    // granted the lock anew meanwhile): its lease goes back to Redis, in the background.
    void give_back(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);
    // An attempt whose outcome is unknown may have left `token` in the key: it is released in
    // the background (the script checks the token, so this is always safe). The connection may
    // be down, and the caller does not wait for it.
    void release_unseen(lock_keys const& keys, std::string token, std::chrono::milliseconds claim);
    // A forced unlock ended the lease of `token` on `key`: a waiter here that a holder of this
    // process handed it to must not take it.
    void on_forced(std::string_view key, std::string_view token);

private:
    // `token`'s lease back to Redis with `last_fence` (and what the key holds, when known);
    // with `wake_head`, a waiter here asks at once if the lock ends up free.
    void release_in_background(lock_keys const& keys, std::string token,
                               std::chrono::milliseconds claim, std::int64_t last_fence,
                               std::optional<held_value> written, bool wake_head);
    static boost::asio::awaitable<void> release(std::shared_ptr<cohort> self, lock_keys keys,
                                                std::string token, std::chrono::milliseconds claim,
                                                std::int64_t last_fence,
                                                std::optional<held_value> written, bool wake_head);

    locker_context& context_;
    local_queues& queues_;
    locker_life const& life_;
};

} // namespace colock::detail
