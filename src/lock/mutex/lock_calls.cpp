// A locker's calls under way: the start of a call, the uncontended path (its first attempt),
// its cancellation and its end. The contended wait is in queue_wait.cpp.
#include "lock/mutex/lock_calls.hpp"

#include "lock/base/errors.hpp"
#include "lock/base/token.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/locker_impl.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <vector>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

// After an attempt whose outcome is unknown, in the background: the connection may be down,
// and the caller should not wait for it. `self` holds the locker meanwhile.
asio::awaitable<void> release_detached(std::shared_ptr<locker_impl> self, lock_keys keys,
                                       std::string token, milliseconds claim,
                                       std::int64_t last_fence) {
    co_await self->store().release(keys, token, claim, last_fence);
}

} // namespace

// ------------------------------------------------------------------ the call

lock_operation::lock_operation(std::shared_ptr<locker_impl> owner, key_space space,
                               std::string lock_name, lock_options options, bool waits)
    : locker_(std::move(owner))
    , space_(std::move(space))
    , name_(std::move(lock_name))
    , opt_(std::move(options))
    , wait_(waits)
    , acq_(acquisition_terms::lock(opt_, space_.kind, wait_), started_) {}

lock_operation::~lock_operation() {
    if (queue_ && !finished_)
        locker_->queues().drop(queue_, *this);
    locker_->calls().forget(*this);
}

asio::any_io_executor lock_operation::io_executor() const {
    return locker_->strand().get_inner_executor();
}

std::string const& lock_operation::holder_token() {
    if (token_.empty())
        token_ = random_token();
    return token_;
}

void lock_calls::start(std::shared_ptr<lock_operation> op) {
    asio::dispatch(locker_.strand(), [op = std::move(op)] { op->locker_->calls().begin(op); });
}

void lock_calls::begin(std::shared_ptr<lock_operation> const& op) {
    if (op->finished_)
        return; // cancelled before it reached the strand
    pending_.push_back(*op);
    op->own_keys_ = std::make_unique<lock_keys>(op->space_, op->name_, locker_.id());
    if (auto kept = locker_.retained().take(*op->own_keys_)) {
        // The locker kept the lease when its last holder let go: no round trip.
        op->out_.state = locker_.asks().make_handed_guard(
            op->name_, *op->own_keys_, op->holder_token(), std::move(*kept), op->opt_, true);
        finish(*op);
        return;
    }
    if (op->wait_ && locker_.queues().busy(*op->own_keys_)) {
        // Others of this process wait on the name, or ask for it now: queue behind them (FIFO,
        // and no attempt that would fail anyway), parked until its turn.
        op->queue_ = locker_.queues().join(*op->own_keys_, *op);
        locker_.notes().queue(op->name_, op->queue_->waiters.size());
        op->own_keys_.reset();
        op->acq_.joined_local_queue();
        op->acq_.wait_for_holder(op->opt_.ttl);
        locker_.waits().park(*op, op->acq_.deadlines().wait);
        return;
    }
    spawn(op);
}

void lock_calls::spawn(std::shared_ptr<lock_operation> const& op) {
    op->driving_ = true;
    asio::co_spawn(locker_.strand(), run(op),
                   asio::bind_cancellation_slot(op->signal_.slot(), [op](std::exception_ptr e) {
                       if (!e || op->finished_)
                           return;
                       op->exception_ = e;
                       op->locker_->calls().finish(*op);
                   }));
}

void lock_calls::cancel(lock_operation& op, asio::cancellation_type type) {
    if (op.finished_ || !acquisition::ends_call(type))
        return;
    if (op.driving_) {
        op.signal_.emit(type);
        return;
    }
    // Parked in the queue: nothing of it is at the server but its share of this locker's
    // entry there, which the last one out takes out.
    end(op, acquisition::aborted());
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
    auto const& store = locker_.store();
    auto failure =
        op.acq_.failure(done, link_facts{store.is_connected(), store.last_error_text()}, op.name_);
    op.out_.ec = failure.ec;
    op.out_.message = std::move(failure.message);
}

void lock_calls::end(lock_operation& op, acquisition_action const& done) {
    settle(op, done);
    finish(op);
}

void lock_calls::finish(lock_operation& op) {
    if (op.finished_)
        return;
    op.finished_ = true;
    op.driving_ = false;
    forget(op);
    auto const keep = op.shared_from_this();
    auto const claim = handoff_claim(op.opt_.ttl);
    // An attempt that failed after it may have been applied could have left our token in the
    // key: release it (the script checks the token, so this is always safe).
    if (op.out_.ec && op.out_.outcome_unknown)
        asio::co_spawn(locker_.strand(),
                       release_detached(locker_.shared_from_this(), op.keys(), op.token_, claim, 0),
                       asio::detached);
    bool const waited = op.queue_ != nullptr;
    if (op.out_.state)
        locker_.notes().acquired(*op.out_.state, op.started_, op.acq_.attempts(), waited);
    if (auto q = std::exchange(op.queue_, nullptr)) {
        auto baton = std::exchange(op.baton, nullptr);
        locker_.queues().leave(q, op, op.out_.state != nullptr, claim);
        locker_.notes().queue(op.name_, q->waiters.size());
        if (baton)
            locker_.pass_on(q->keys, std::move(*baton), claim);
        if (locker_.waiting() == 0)
            locker_.book()->cancel_idle_timer(); // kept for a taker that is gone
    }
    op.on_wake = nullptr;
    op.parked_self_.reset();
    if (op.timer_)
        op.timer_->cancel();
    op.deliver();
}

asio::awaitable<void> lock_calls::run(std::shared_ptr<lock_operation> op) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    if (!op->queue_ && !co_await first_attempt(*op, cs))
        co_return;
    co_await locker_.waits().turns(*op, cs);
}

asio::awaitable<bool> lock_calls::first_attempt(lock_operation& op, asio::cancellation_state cs) {
    auto next = op.acq_.begin_attempt(cancelled(cs));
    if (next.step == acquisition_step::finish) {
        end(op, next);
        co_return false;
    }
    // The uncontended path: one command, no subscription. co_lock calls arriving meanwhile
    // queue behind this one.
    auto const& keys = *op.own_keys_;
    auto const queue_mode = op.wait_ ? queueing::when_held : queueing::never;
    if (op.wait_)
        locker_.queues().begin_first_attempt(keys);
    try {
        next = co_await locker_.asks().try_once(keys, op.holder_token(), op.name_, op.opt_,
                                                queue_mode, cs, op.acq_, op.out_);
    } catch (...) {
        // Calls queued behind this attempt must not wait for it for good.
        if (op.wait_) {
            locker_.queues().end_first_attempt(keys);
            if (auto* q = locker_.queues().find(keys))
                local_queues::wake(q->waiters.front());
        }
        throw;
    }
    if (op.wait_)
        locker_.queues().end_first_attempt(keys);
    // Whether this locker may have an entry in the server's queue that nobody here will
    // take out: a first attempt that found the lock held queued it.
    bool const queued_at_server = op.acq_.queued_by_answer();
    bool const others_queued = !op.acq_.answer().ec && op.acq_.answer().others_queued;
    if (next.step == acquisition_step::wait)
        next = op.acq_.keep_waiting(clock_type::now());
    if (next.step == acquisition_step::wait) {
        // Contended: first in the local queue, ahead of calls that queued behind this attempt.
        auto queue = locker_.queues().join(keys, op, true);
        op.queue_ = queue;
        locker_.notes().queue(op.name_, queue->waiters.size());
        op.own_keys_.reset();
        op.acq_.joined_local_queue();
        op.asked = true;
        op.need_attempt_ = false; // the first attempt's answer still stands
        queue->queued_at_server = queue->queued_at_server || queued_at_server;
        queue->others_queued = queue->others_queued || others_queued;
        co_return true;
    }
    settle(op, next);
    // Calls that queued behind this attempt: their head asks now, or, when this one took the
    // lock, waits for its release. The server-side entry this attempt may have left is theirs.
    if (auto* q = op.wait_ ? locker_.queues().find(keys) : nullptr) {
        q->queued_at_server = q->queued_at_server || queued_at_server;
        local_queues::wake(q->waiters.front(), op.out_.state && q->queued_at_server
                                                   ? wake_reason::promoted_after_acquire
                                                   : wake_reason::woken);
    } else if (queued_at_server) {
        locker_.store().leave_queue(keys, handoff_claim(op.opt_.ttl));
    }
    finish(op);
    co_return false;
}

} // namespace colock::detail
