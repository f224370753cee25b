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

class guard_state;
class lock_calls;

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

// The call's state, changed through its methods by the two units that drive it: lock_calls (its
// start, first attempt, cancellation and end) and queue_wait (its turns in the local queue).
// Its node in the local queue (`waiter`) is its own: the queue sees the node, the units the call.
class lock_operation : private waiter,
                       public pending_hook,
                       public std::enable_shared_from_this<lock_operation> {
public:
    // A lock of `space` (the locker's locks, or a synchronizer's leases), run by `calls` (held:
    // the locker lives while its calls do).
    lock_operation(std::shared_ptr<lock_calls> calls, key_space space, std::string lock_name,
                   lock_options options, bool waits);
    // Destroyed while still queued only when the io_context goes with it parked: it leaves the
    // queue without a word to the server.
    virtual ~lock_operation();
    lock_operation(lock_operation const&) = delete;
    lock_operation& operator=(lock_operation const&) = delete;

    // The call whose queue node `w` is.
    static lock_operation& of(waiter& w) noexcept { return static_cast<lock_operation&>(w); }
    waiter& node() noexcept { return *this; }

    // Completes the caller's handler with the outcome (or the exception), posted out of the
    // strand. Once, by lock_calls::finish.
    virtual void deliver() = 0;

    // Where handlers without an executor of their own complete: the locker's.
    boost::asio::any_io_executor io_executor() const;

    lock_calls& calls() const noexcept { return *calls_; }
    std::string const& name() const noexcept { return name_; }
    lock_options const& options() const noexcept { return opt_; }
    bool waits() const noexcept { return wait_; } // co_lock; co_try_lock asks once
    clock_type::time_point started() const noexcept { return started_; }
    // The lock's keys: its own until it queues, then its queue's.
    lock_keys const& keys() const { return queue_ ? queue_->keys : *own_keys_; }
    // Its decisions: the deadlines, the attempts, what each answer makes next.
    acquisition& acq() noexcept { return acq_; }
    lock_outcome& outcome() noexcept { return out_; }
    // The token it holds the lock with, made when first needed (the first attempt, or a
    // hand-off from a holder of this process); empty until then.
    std::string const& holder_token();
    std::string const& token() const noexcept { return token_; }

    // --- its place: its own keys, then the local queue of its name.
    // On the strand, before anything else: the keys of its lock for the locker `locker_id`.
    void make_keys(std::string const& locker_id);
    // Joined `queue` (it leaves its own keys for the queue's); null while not queued.
    void joined(std::shared_ptr<name_queue> queue);
    std::shared_ptr<name_queue> const& queue() const noexcept { return queue_; }
    // Out of the queue's bookkeeping at its end: the queue it was in, and the baton it held.
    std::shared_ptr<name_queue> leave_queue() noexcept { return std::exchange(queue_, nullptr); }
    std::unique_ptr<lease_baton> take_baton() noexcept { return std::exchange(baton, nullptr); }
    // It has asked the server since it queued (see waiter::asked).
    void mark_asked() noexcept { asked = true; }
    // Whether the head's last answer no longer stands: it asks on its next turn.
    bool needs_attempt() const noexcept { return need_attempt_; }
    void need_attempt(bool again) noexcept { need_attempt_ = again; }
    // Why its last sleep ended.
    wake_reason woken_by() const noexcept { return wake; }

    // --- who runs it: a coroutine, or nobody (parked).
    bool finished() const noexcept { return finished_; }
    bool driving() const noexcept { return driving_; }
    // A coroutine runs for it now, spawned with the slot returned: the caller's cancellation
    // goes there.
    boost::asio::cancellation_slot drive() noexcept;
    // The caller's cancellation, while a coroutine runs for it: false when none does.
    bool forward_cancel(boost::asio::cancellation_type type);
    // A coroutine of it threw.
    void failed(std::exception_ptr e) noexcept { exception_ = std::move(e); }
    // Sleeps with no coroutine until `until` or a wake, then lock_calls::resume: with no end
    // (time_point::max()) no timer, and it holds itself meanwhile (see release_parked_self).
    // With the wait it belongs to, in queue_wait.cpp.
    void park(clock_type::time_point until);
    // Its sleep ended by its timer: nothing to end any more.
    void awake() noexcept { on_wake = nullptr; }
    // Marks it finished, driven by nobody (false when it was already).
    bool mark_finished();
    // Its end: no wake, no timer, no hold on itself.
    void end_sleep();
    // Parked with no timer, the call holds itself: given up when the io_context shuts down.
    std::shared_ptr<lock_operation> release_parked_self() noexcept {
        return std::move(parked_self_);
    }

protected:
    lock_outcome out_;
    std::exception_ptr exception_; // a coroutine of it threw

private:
    std::shared_ptr<lock_calls> const calls_;
    key_space const space_;
    std::string const name_;
    lock_options const opt_;
    bool const wait_;
    // When the call was made: its deadlines count from here, and so does the wait an observer
    // is told of.
    clock_type::time_point const started_ = clock_type::now();
    std::string token_;
    std::unique_ptr<lock_keys> own_keys_;
    std::shared_ptr<name_queue> queue_; // while in the local queue
    acquisition acq_;
    bool need_attempt_ = true;

    // A coroutine runs for it: the caller's cancellation goes to that coroutine (through
    // `signal_`, which each one is spawned with); otherwise it is parked in the queue and a
    // cancellation ends it there.
    bool driving_ = false;
    bool finished_ = false;
    boost::asio::cancellation_signal signal_;
    // Parked: the timer of a sleep with an end (made on first use), or, for one that only a
    // wake ends, itself.
    std::unique_ptr<lock_timer> timer_;
    std::shared_ptr<lock_operation> parked_self_;
};

using pending_operations =
    boost::intrusive::list<lock_operation, boost::intrusive::base_hook<pending_hook>>;

// The call's handler and what turns the outcome into its arguments.
template <class Handler, class Finish>
struct lock_operation_for final : lock_operation {
    lock_operation_for(std::shared_ptr<lock_calls> calls, key_space space, std::string lock_name,
                       lock_options options, bool waits, Handler h, Finish f)
        : lock_operation(std::move(calls), std::move(space), std::move(lock_name),
                         std::move(options), waits)
        , slot(boost::asio::get_associated_cancellation_slot(h))
        , handler(std::move(h))
        , finish(std::move(f))
        , work(work_for(handler, io_executor())) {}

    void deliver() override {
        post_invocation(
            io_executor(), std::move(handler), slot,
            [f = std::move(finish), e = exception_, o = std::move(out_)](Handler h) mutable {
                f(std::move(h), e, std::move(o));
            },
            std::move(work));
    }

    boost::asio::cancellation_slot slot; // the caller's, where it emits
    Handler handler;
    Finish finish;
    decltype(work_for(std::declval<Handler const&>(),
                      std::declval<boost::asio::any_io_executor const&>())) work;
};

} // namespace colock::detail
