// The acquire–wait–retry rules of the lock family, sans I/O: what to do after one attempt's
// outcome, how long a queue's head (or a waiting acquire of permits) sleeps before asking
// again, what a lease handed on within the process must still have. The acquisition machine
// (acquisition.hpp) applies them in order. Private to the library's sources; tested without a
// server in test/unit/test_acquire_policy.cpp.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_options.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace colock::detail {

// When a waiting co_lock stops: wait_timeout, and first_connect_timeout while the connection
// has never been established.
struct wait_deadlines {
    wait_deadlines() = default;
    wait_deadlines(clock_type::time_point wait_until, clock_type::time_point first_connect_until)
        : wait(wait_until), first_connect(first_connect_until) {}

    clock_type::time_point wait;
    clock_type::time_point first_connect;
    // The last attempt's connect failure, or none: the connection is not established, and the
    // next attempt and the sleep before it end by first_connect, where a connect failure
    // stops the wait (so that first_connect_timeout holds to the millisecond, not to the end of
    // a backoff or of another connect attempt).
    boost::system::error_code connect_failure;
    std::string connect_failure_text;

    clock_type::time_point attempt_limit() const noexcept {
        return connect_failure ? first_connect : wait;
    }
};

// After an attempt that ended with `ec` (its server text `server_text`) at `now`: an attempt that
// attempt_limit() stopped before it was sent (error::timeout before the wait deadline) is
// answered with the connect failure that still stands; otherwise the attempt's own connect
// failure is remembered, or the last one forgotten.
void note_attempt(wait_deadlines& d, boost::system::error_code& ec, std::string& server_text,
                  clock_type::time_point now);

// Whether a waiting co_lock tries again after an attempt that failed with `ec` at `now`. The
// wait deadline is the caller's to check.
bool worth_retrying(boost::system::error_code ec, std::string_view server_text,
                    wait_deadlines const& deadlines, clock_type::time_point now);

enum class next_step {
    acquired,     // done: the lease is ours
    not_acquired, // done (co_try_lock): held by someone else, an empty result
    fail,         // done: report the attempt's error
    fail_timeout, // done: error::timeout (the wait deadline stopped the attempt)
    aborted,      // done: operation_aborted (the caller cancelled)
    wait,         // sleep up to `sleep` (capped by the backoff), then ask again
};

struct acquire_decision {
    next_step step;
    std::chrono::milliseconds sleep{0}; // for next_step::wait
};

struct attempt_context {
    bool wait;   // co_lock; co_try_lock makes this one attempt only
    bool queued; // the attempt of a local queue's head: a cancellation is reported before
                 // the attempt's own error (the first attempt reports the error first)
    wait_deadlines deadlines;
    std::chrono::milliseconds retry_max; // the sleep after a passing error
};

// What to do after an attempt ended with `r`. `cancelled`: the caller's cancellation has
// arrived (a lease granted to it has already been given back: r.granted is false).
acquire_decision decide_after_attempt(grant_result const& r, attempt_context const& ctx,
                                      bool cancelled, clock_type::time_point now);

// The n-th backoff (n from 0): uniform in [1, min(max, initial * multiplier^n) + 1] ms.
std::chrono::milliseconds backoff(retry_options const& retry, int attempt, std::minstd_rand& rng);

// Whether a lease whose local deadline is `deadline` may still pass to another holder of this
// process at `now` (a hand-off, a baton passed on or taken): at least 1 ms left.
bool lease_left_to_pass(clock_type::time_point deadline, clock_type::time_point now);

// Whether a lease Redis granted at `granted_at` with `lease_fence` may give a holder of this
// process `next_fence` at `now`: at most one local fence per microsecond since the grant, so
// that fences stay strictly increasing across processes (lock_scripts.hpp).
bool fence_in_step(std::int64_t next_fence, std::int64_t lease_fence,
                   clock_type::time_point granted_at, clock_type::time_point now);

// What decides whether a holder letting go passes its lease to the next waiter of its own
// process (cohort hand-off) rather than through Redis.
struct cohort_facts {
    std::size_t cohort_limit;   // the releasing holder's lock_options::cohort_limit
    std::size_t local_handoffs; // made under this lease so far
    bool others_queued;         // a locker of another process is queued for the lease
    bool lost;                  // the lease is known lost
    clock_type::time_point lease_deadline;
    std::int64_t next_fence;           // the fence the next holder would get
    std::int64_t lease_fence;          // the fence Redis gave the lease
    clock_type::time_point granted_at; // when the grant's reply came
};

// Whether the lease may pass to the next local waiter at `now`: cohorting is on, the lease is
// still valid (at least 1 ms left), the limit of consecutive local hand-offs is not reached
// while another process waits, and the fences given locally stay at most one per
// microsecond since the grant (which keeps fences increasing after the key lapses; see
// lock_scripts.hpp).
bool may_hand_off_locally(cohort_facts const& f, clock_type::time_point now);

// When a queue's head wakes up to ask again: after `sleep` (the holder's remaining lease, or
// retry.max after an error) or the backoff, whichever is first, at least 1 ms from now, and
// never after the wait deadline.
clock_type::time_point head_wakes_at(clock_type::time_point now,
                                     clock_type::time_point wait_deadline,
                                     std::chrono::milliseconds sleep,
                                     std::chrono::milliseconds backoff);

// When a waiting acquire of permits (a semaphore's) that was not admitted asks again: told by a
// message when permits free up (`listening`), it looks by itself only when the first permit held
// should have expired or, at the latest, when its queue entry needs refreshing; without messages (a
// refused subscription), or when no permit is held (the calls ahead of it are about to take
// theirs), after its backoff. At least 1 ms from now, never after the wait deadline.
clock_type::time_point permit_wakes_at(clock_type::time_point now,
                                       clock_type::time_point wait_deadline,
                                       std::chrono::milliseconds first_expiry, bool listening,
                                       std::chrono::milliseconds backoff);

} // namespace colock::detail
