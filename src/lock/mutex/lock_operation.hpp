// One co_lock or co_try_lock call, from the call until its handler is completed. Waiting in
// this process's queue for a name, a call is a node there (its `waiter` base) with a timer and
// no coroutine: a coroutine runs only while the call asks the server (its first attempt, or a
// turn of the queue's head), so 100,000 waiters cost 100,000 of these and no coroutine frames.
// On the locker's strand, but for the start and the caller's cancellation, which go there.
// Private to the library's sources.
#pragma once

#include "detail/completion.hpp"
#include "lock/base/common.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_options.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/intrusive/list.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace colock::detail {

class locker_impl;
class guard_state;
class lock_calls;
class queue_wait;

// How a call ended.
struct lock_outcome {
    bool outcome_unknown = false; // an attempt failed after it may have been applied
    boost::system::error_code ec;
    std::string message; // names the lock; the server's text for server errors
    std::shared_ptr<guard_state> state;
};

// Its place among the locker's calls under way, from begin to finish: a locker that is
// destroyed ends them.
using pending_hook =
    boost::intrusive::list_base_hook<boost::intrusive::tag<struct pending_tag>,
                                     boost::intrusive::link_mode<boost::intrusive::safe_link>>;

// The call's state is written by the two units that drive it: lock_calls (its start, first
// attempt, cancellation and end) and queue_wait (its turns in the local queue).
class lock_operation : public waiter,
                       public pending_hook,
                       public std::enable_shared_from_this<lock_operation> {
public:
    // A lock of `space` (the locker's locks, or a synchronizer's leases).
    lock_operation(std::shared_ptr<locker_impl> owner, key_space space, std::string lock_name,
                   lock_options options, bool waits);
    // Destroyed while still queued only when the io_context goes with it parked: it leaves the
    // queue without a word to the server.
    virtual ~lock_operation();
    lock_operation(lock_operation const&) = delete;
    lock_operation& operator=(lock_operation const&) = delete;

    // Completes the caller's handler with `out_` (or `exception_`), posted out of the strand.
    // Once, by lock_calls::finish.
    virtual void deliver() = 0;

    // Where handlers without an executor of their own complete: the locker's.
    boost::asio::any_io_executor io_executor() const;

    locker_impl& locker() const noexcept { return *locker_; }
    std::string const& name() const noexcept { return name_; }
    lock_options const& options() const noexcept { return opt_; }
    // The lock's keys: its own until it queues, then its queue's.
    lock_keys const& keys() const { return queue_ ? queue_->keys : *own_keys_; }
    // Parked with no timer, the call holds itself: given up when the io_context shuts down.
    std::shared_ptr<lock_operation> release_parked_self() noexcept {
        return std::move(parked_self_);
    }

protected:
    lock_outcome out_;
    std::exception_ptr exception_; // a coroutine of it threw

private:
    friend class lock_calls;
    friend class queue_wait;

    // The token it holds the lock with, made when first needed (the first attempt, or a
    // hand-off from a holder of this process).
    std::string const& holder_token();

    std::shared_ptr<locker_impl> const locker_;
    key_space const space_;
    std::string const name_;
    lock_options const opt_;
    bool const wait_; // co_lock; co_try_lock asks once
    // When the call was made: its deadlines count from here, and so does the wait an observer
    // is told of.
    clock_type::time_point const started_ = clock_type::now();
    std::string token_;
    std::unique_ptr<lock_keys> own_keys_;
    std::shared_ptr<name_queue> queue_; // while in the local queue
    // Its decisions: the deadlines, the attempts, what each answer makes next.
    acquisition acq_;
    // Whether the head's last answer no longer stands: it asks on its next turn.
    bool need_attempt_ = true;

    // A coroutine runs for it: the caller's cancellation goes to that coroutine (through
    // `signal_`, which each one is spawned with); otherwise it is parked in the queue and a
    // cancellation ends it there.
    bool driving_ = false;
    bool finished_ = false;
    boost::asio::cancellation_signal signal_;
    // Parked: the timer of a sleep with an end (made on first use), or, for one that only a
    // wake ends, itself (see queue_wait::park).
    std::unique_ptr<lock_timer> timer_;
    std::shared_ptr<lock_operation> parked_self_;
};

using pending_operations =
    boost::intrusive::list<lock_operation, boost::intrusive::base_hook<pending_hook>>;

// The call's handler and what turns the outcome into its arguments.
template <class Handler, class Finish>
struct lock_operation_for final : lock_operation {
    lock_operation_for(std::shared_ptr<locker_impl> owner, key_space space, std::string lock_name,
                       lock_options options, bool waits, Handler h, Finish f)
        : lock_operation(std::move(owner), std::move(space), std::move(lock_name),
                         std::move(options), waits)
        , slot(boost::asio::get_associated_cancellation_slot(h))
        , handler(std::move(h))
        , finish(std::move(f)) {}

    void deliver() override {
        post_invocation(io_executor(), std::move(handler), slot,
                        [f = std::move(finish), e = exception_, o = std::move(out_)](
                            Handler h) mutable { f(std::move(h), e, std::move(o)); });
    }

    boost::asio::cancellation_slot slot; // the caller's, where it emits
    Handler handler;
    Finish finish;
};

} // namespace colock::detail
