// How a contended co_lock waits in its name's local queue: parked, with no coroutine, until it
// is the head or handed the lease; the head subscribes to this locker's wake channel for the
// name (once per name) and asks the server in turns, parked between them. Private to the
// library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/mutex/lock_operation.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>

#include <random>

namespace colock::detail {

class locker_impl;

class queue_wait {
public:
    // `locker` owns this.
    explicit queue_wait(locker_impl& locker);

    // The head's turns, each ending in the call's end or park(); park() sleeps with no
    // coroutine until `until` or a wake, then resume().
    boost::asio::awaitable<void> turns(lock_operation& op, boost::asio::cancellation_state cs);
    void park(lock_operation& op, clock_type::time_point until);

private:
    void resume(lock_operation& op);
    // When the head `op` next asks, sleeping from `now`.
    clock_type::time_point head_sleep_end(lock_operation& op, clock_type::time_point now);
    // Takes a baton given meanwhile: the lease of a holder of this process, now op's.
    bool take_baton(lock_operation& op);

    locker_impl& locker_;
    std::minstd_rand rng_;
};

} // namespace colock::detail
