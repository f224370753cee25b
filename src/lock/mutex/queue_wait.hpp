// How a contended co_lock waits in its name's local queue: parked, with no coroutine, until it
// is the head or handed the lease; the head subscribes to this locker's wake channel for the
// name (once per name) and asks the server in turns, parked between them. Private to the
// library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/lock_operation.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>

#include <random>

namespace colock::detail {

class acquirer;
class cohort;
class lock_calls;

class queue_wait {
public:
    // The locker's units a turn goes through; they and `context` outlive this.
    queue_wait(locker_context& context, lock_calls& calls, acquirer& asks, cohort& handoffs);

    // The head's turns, each ending in the call's end or a park (lock_operation::park), from
    // which resume() goes on.
    boost::asio::awaitable<void> turns(lock_operation& op, boost::asio::cancellation_state cs);
    // `op`'s sleep ended: it takes a baton, ends, sleeps on, or its turn runs.
    void resume(lock_operation& op);

private:
    // When the head `op` next asks, sleeping from `now`.
    clock_type::time_point head_sleep_end(lock_operation& op, clock_type::time_point now);
    // Takes a baton given meanwhile: the lease of a holder of this process, now op's.
    bool take_baton(lock_operation& op);

    locker_context& context_;
    lock_calls& calls_;
    acquirer& asks_;
    cohort& handoffs_;
    std::minstd_rand rng_;
};

} // namespace colock::detail
