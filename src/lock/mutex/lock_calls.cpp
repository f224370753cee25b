// A locker's calls under way: the start of a call, the uncontended path (its first attempt),
// its cancellation and its end. The contended wait is in queue_wait.cpp.
#include "lock/mutex/lock_calls.hpp"

#include "lock/base/errors.hpp"
#include "lock/base/token.hpp"
#include "lock/mutex/acquirer.hpp"
#include "lock/mutex/cohort.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/lock_notes.hpp"
#include "lock/mutex/queue_wait.hpp"
#include "lock/mutex/retention.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <vector>

namespace colock::detail {

namespace asio = boost::asio;

// ------------------------------------------------------------------ the call

lock_operation::lock_operation(std::shared_ptr<lock_calls> calls, key_space space,
                               std::string lock_name, lock_options options, bool waits)
    : calls_(std::move(calls))
    , space_(std::move(space))
    , name_(std::move(lock_name))
    , opt_(std::move(options))
    , wait_(waits)
    , acq_(acquisition_terms::lock(opt_, space_.kind, wait_), started_) {}

lock_operation::~lock_operation() {
    calls_->destroyed(*this);
}

asio::any_io_executor lock_operation::io_executor() const {
    return calls_->strand().get_inner_executor();
}

std::string const& lock_operation::holder_token() {
    if (token_.empty())
        token_ = random_token();
    return token_;
}

void lock_operation::make_keys(std::string const& locker_id) {
    own_keys_ = std::make_unique<lock_keys>(space_, name_, locker_id);
}

void lock_operation::joined(std::shared_ptr<name_queue> queue) {
    queue_ = std::move(queue);
    own_keys_.reset();
    acq_.joined_local_queue();
}

asio::cancellation_slot lock_operation::drive() noexcept {
    driving_ = true;
    return signal_.slot();
}

bool lock_operation::forward_cancel(asio::cancellation_type type) {
    if (!driving_)
        return false;
    signal_.emit(type);
    return true;
}

bool lock_operation::mark_finished() {
    if (finished_)
        return false;
    finished_ = true;
    driving_ = false;
    return true;
}

void lock_operation::end_sleep() {
    on_wake = nullptr;
    parked_self_.reset();
    if (timer_)
        timer_->cancel();
}

// ------------------------------------------------------------------ the calls under way

void lock_calls::start(std::shared_ptr<lock_operation> op) {
    asio::dispatch(strand(), [op = std::move(op)] { op->calls().begin(op); });
}

void lock_calls::begin(std::shared_ptr<lock_operation> const& op) {
    if (op->finished())
        return; // cancelled before it reached the strand
    pending_.push_back(*op);
    op->make_keys(context_.id());
    if (auto kept = retained_.take(op->keys())) {
        // The locker kept the lease when its last holder let go: no round trip.
        op->outcome().state = asks_.make_handed_guard(op->name(), op->keys(), op->holder_token(),
                                                      std::move(*kept), op->options(), true);
        finish(*op);
        return;
    }
    if (op->waits() && queues_.busy(op->keys())) {
        // Others of this process wait on the name, or ask for it now: queue behind them (FIFO,
        // and no attempt that would fail anyway), parked until its turn.
        op->joined(queues_.join(op->keys(), op->node()));
        notes_.queue(op->name(), op->queue()->waiters.size(), op->keys().kind);
        op->acq().wait_for_holder(op->options().ttl);
        op->park(op->acq().deadlines().wait);
        return;
    }
    spawn(op);
}

void lock_calls::spawn(std::shared_ptr<lock_operation> const& op) {
    auto slot = op->drive();
    asio::co_spawn(strand(), run(op),
                   asio::bind_cancellation_slot(slot, [op](std::exception_ptr e) {
                       if (!e || op->finished())
                           return;
                       op->failed(e);
                       op->calls().finish(*op);
                   }));
}

void lock_calls::cancel(lock_operation& op, asio::cancellation_type type) {
    if (op.finished() || !acquisition::ends_call(type))
        return;
    if (op.forward_cancel(type))
        return;
    // Parked in the queue: nothing of it is at the server but its share of this locker's
    // entry there, which the last one out takes out.
    end(op, acquisition::aborted());
}

void lock_calls::resume(lock_operation& op) {
    waits_.resume(op);
}

void lock_calls::destroyed(lock_operation& op) noexcept {
    if (op.queue() && !op.finished())
        queues_.drop(op.queue(), op.node());
    forget(op);
}

void lock_calls::forget(lock_operation& op) noexcept {
    if (static_cast<pending_hook&>(op).is_linked())
        pending_.erase(pending_.iterator_to(op));
}

void lock_calls::abort_pending() {
    std::vector<std::shared_ptr<lock_operation>> calls;
    for (auto& op : pending_)
        calls.push_back(op.shared_from_this());
    for (auto const& op : calls)
        cancel(*op, asio::cancellation_type::terminal);
}

void lock_calls::settle(lock_operation& op, acquisition_action const& done) {
    if (!done.fails())
        return;
    auto const& store = context_.store();
    auto failure = op.acq().failure(done, link_facts{store.is_connected(), store.last_error_text()},
                                    op.name());
    op.outcome().ec = failure.ec;
    op.outcome().message = std::move(failure.message);
}

void lock_calls::end(lock_operation& op, acquisition_action const& done) {
    settle(op, done);
    finish(op);
}

void lock_calls::finish(lock_operation& op) {
    if (!op.mark_finished())
        return;
    forget(op);
    auto const keep = op.shared_from_this();
    auto const claim = handoff_claim(op.options().ttl);
    auto const& out = op.outcome();
    // An attempt that failed after it may have been applied could have left our token in the
    // key: release it.
    if (out.ec && out.outcome_unknown)
        handoffs_.release_unseen(op.keys(), op.token(), claim);
    bool const waited = op.queue() != nullptr;
    if (out.state)
        notes_.acquired(*out.state, op.started(), op.acq().attempts(), waited);
    if (auto q = op.leave_queue()) {
        auto baton = op.take_baton();
        queues_.leave(q, op.node(), out.state != nullptr, claim);
        notes_.queue(op.name(), q->waiters.size(), q->keys.kind);
        if (baton)
            handoffs_.pass_on(q->keys, std::move(*baton), claim);
    }
    op.end_sleep();
    op.deliver();
}

asio::awaitable<void> lock_calls::run(std::shared_ptr<lock_operation> op) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    if (!op->queue() && !co_await first_attempt(*op, cs))
        co_return;
    co_await waits_.turns(*op, cs);
}

asio::awaitable<bool> lock_calls::first_attempt(lock_operation& op, asio::cancellation_state cs) {
    auto& acq = op.acq();
    auto next = acq.begin_attempt(cancelled(cs));
    if (next.step == acquisition_step::finish) {
        end(op, next);
        co_return false;
    }
    // The uncontended path: one command, no subscription. co_lock calls arriving meanwhile
    // queue behind this one.
    auto const& keys = op.keys();
    auto const queue_mode = op.waits() ? queueing::when_held : queueing::never;
    if (op.waits())
        queues_.begin_first_attempt(keys);
    try {
        next = co_await asks_.try_once(keys, op.holder_token(), op.name(), op.options(), queue_mode,
                                       cs, acq, op.outcome());
    } catch (...) {
        // Calls queued behind this attempt must not wait for it for good.
        if (op.waits()) {
            queues_.end_first_attempt(keys);
            if (auto* q = queues_.find(keys))
                local_queues::wake(q->waiters.front());
        }
        throw;
    }
    if (op.waits())
        queues_.end_first_attempt(keys);
    // Whether this locker may have an entry in the server's queue that nobody here will
    // take out: a first attempt that found the lock held queued it.
    bool const queued_at_server = acq.queued_by_answer();
    bool const others_queued = !acq.answer().ec && acq.answer().others_queued;
    if (next.step == acquisition_step::wait)
        next = acq.keep_waiting(clock_type::now());
    if (next.step == acquisition_step::wait) {
        // Contended: first in the local queue, ahead of calls that queued behind this attempt.
        auto queue = queues_.join(keys, op.node(), true);
        op.joined(queue);
        // The queue's keys: `keys`, the operation's own, went with op.joined.
        notes_.queue(op.name(), queue->waiters.size(), queue->keys.kind);
        op.mark_asked();
        op.need_attempt(false); // the first attempt's answer still stands
        queue->queued_at_server = queue->queued_at_server || queued_at_server;
        queue->others_queued = queue->others_queued || others_queued;
        co_return true;
    }
    settle(op, next);
    // Calls that queued behind this attempt: their head asks now, or, when this one took the
    // lock, waits for its release. The server-side entry this attempt may have left is theirs.
    if (auto* q = op.waits() ? queues_.find(keys) : nullptr) {
        q->queued_at_server = q->queued_at_server || queued_at_server;
        local_queues::wake(q->waiters.front(), op.outcome().state && q->queued_at_server
                                                   ? wake_reason::promoted_after_acquire
                                                   : wake_reason::woken);
    } else if (queued_at_server) {
        context_.store().leave_queue(keys, handoff_claim(op.options().ttl));
    }
    finish(op);
    co_return false;
}

} // namespace colock::detail
