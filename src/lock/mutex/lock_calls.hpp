// A locker's co_lock and co_try_lock calls under way: each one's start on the strand (queued
// behind this process's waiters on its name, or its first attempt: the uncontended path), its
// cancellation and its end. The contended wait is queue_wait's. Private to the library's
// sources; on the locker's strand but for start().
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/lock_operation.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>

namespace colock::detail {

class acquirer;
class cohort;
class lock_notes;
class queue_wait;
class retained_leases;

class lock_calls {
public:
    // The locker's units it drives the calls with; they and `context` outlive this.
    lock_calls(locker_context& context, local_queues& queues, lock_notes const& notes,
               acquirer& asks, queue_wait& waits, retained_leases& retained, cohort& handoffs)
        : context_(context)
        , queues_(queues)
        , notes_(notes)
        , asks_(asks)
        , waits_(waits)
        , retained_(retained)
        , handoffs_(handoffs) {}

    // The locker's strand, where the calls run.
    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return context_.strand();
    }

    // Runs a co_lock or co_try_lock call; its handler is completed once, posted out of the
    // strand. From any thread.
    void start(std::shared_ptr<lock_operation> op);
    // The caller's cancellation of `op`, on the strand: terminal and partial end it (a lock
    // granted meanwhile is given back first); total is ignored, as the call may have asked.
    void cancel(lock_operation& op, boost::asio::cancellation_type type);
    // Every call under way ends as a terminal cancellation ends it (operation_aborted, a lock
    // granted meanwhile given back, nothing left in the queues).
    void abort_pending();

    // Runs a coroutine for `op`: its first attempt, or a turn of its queue's head.
    void spawn(std::shared_ptr<lock_operation> const& op);
    // Records how `done`, a finish of op's acquisition, ends the call: its error and text.
    void settle(lock_operation& op, acquisition_action const& done);
    // settle(), then finish().
    void end(lock_operation& op, acquisition_action const& done);
    // Ends the call: out of the queue (passing on a baton it did not take), a lock of unknown
    // outcome released in the background, the handler completed.
    void finish(lock_operation& op);
    // A parked call's sleep ended (its timer, or a wake): its turn in the queue goes on.
    void resume(lock_operation& op);
    // A call destroyed with the io_context leaves its queue (without a word to the server) and
    // the list of calls under way.
    void destroyed(lock_operation& op) noexcept;

private:
    // On the strand: queues `op` behind this process's waiters on its name (or a first attempt
    // in flight), or spawns its first attempt.
    void begin(std::shared_ptr<lock_operation> const& op);
    boost::asio::awaitable<void> run(std::shared_ptr<lock_operation> op);
    // The first attempt; true when the call goes on waiting (it has joined the queue).
    boost::asio::awaitable<bool> first_attempt(lock_operation& op,
                                               boost::asio::cancellation_state cs);

    // Out of the list of calls under way.
    void forget(lock_operation& op) noexcept;

    locker_context& context_;
    local_queues& queues_;
    lock_notes const& notes_;
    acquirer& asks_;
    queue_wait& waits_;
    retained_leases& retained_;
    cohort& handoffs_;
    pending_operations pending_;
};

} // namespace colock::detail
