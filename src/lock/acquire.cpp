// The acquire orchestration on the locker's strand: an attempt through the lease store, the
// uncontended path, the start and end of a call, its cancellation, and the guard made on
// success. The contended wait is in local_queue.cpp.
#include "locker_impl.hpp"

#include "errors.hpp"
#include "guard.hpp"
#include "token.hpp"

#include <colock/redis/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

asio::awaitable<grant_result> locker_impl::attempt(lock_keys const& keys, std::string const& token,
                                                   milliseconds ttl, queueing queue,
                                                   asio::cancellation_state cs,
                                                   clock_type::time_point deadline,
                                                   replica_wait replicas) {
    auto stop = std::make_shared<asio::cancellation_signal>();
    auto caller_slot = cs.slot();
    if (caller_slot.is_connected())
        caller_slot.assign(
            [stop](asio::cancellation_type) { stop->emit(asio::cancellation_type::total); });
    std::optional<lock_timer> deadline_timer;
    if (deadline != clock_type::time_point::max()) {
        deadline_timer.emplace(strand_);
        deadline_timer->expires_at(deadline);
        deadline_timer->async_wait([stop](error_code ec) {
            if (!ec)
                stop->emit(asio::cancellation_type::total);
        });
    }
    auto r = co_await store_->grant(keys, token, ttl, queue, stop->slot(), replicas);
    if (caller_slot.is_connected())
        caller_slot.clear();
    if (deadline_timer)
        deadline_timer->cancel();
    co_return r;
}

void locker_impl::set_failure(lock_outcome& out, std::string const& name, error_code ec,
                              std::string const& detail_text) {
    // Without the source location Asio attaches: the message is about the lock, not about
    // where in Asio the error was noticed.
    out.ec = error_code(ec.value(), ec.category());
    out.message = detail_text.empty() ? fmt::format("colock: lock '{}'", name)
                                      : fmt::format("colock: lock '{}': {}", name, detail_text);
}

// The server's text for its errors, and for a connection that could not be established, the
// connection's account of why (endpoint and cause), which the bare error code lacks.
std::string locker_impl::failure_text(error_code ec, std::string const& server_text,
                                      lock_options const& opt, bool waited) const {
    if (!is_connect_failure(ec))
        return server_text;
    std::string why = store_->last_error_text();
    if (why.empty())
        why = ec.message();
    if (!waited || is_lasting_connect_failure(ec))
        return fmt::format("no connection to the Redis server: {}", why);
    auto budget = opt.first_connect_timeout;
    if (opt.wait_timeout)
        budget = std::min(budget, *opt.wait_timeout);
    return fmt::format("no connection to the Redis server within {} ms: {}", budget.count(), why);
}

// Names the connection when it is what kept the lock away.
std::string locker_impl::timeout_text(lock_options const& opt) const {
    std::string text = fmt::format("not acquired within {} ms", opt.wait_timeout->count());
    if (store_->is_connected())
        return text;
    std::string why = store_->last_error_text();
    return why.empty() ? text + "; the connection to the Redis server is not established"
                       : fmt::format("{}; the connection to the Redis server is not "
                                     "established: {}",
                                     text, why);
}

std::shared_ptr<guard_state> locker_impl::make_guard(std::string name, lock_keys keys,
                                                     std::string token, std::int64_t fence,
                                                     lock_options const& opt,
                                                     clock_type::time_point attempt_start,
                                                     std::uint64_t server_changes) {
    lease_origin origin;
    origin.lease_token = token;
    origin.lease_fence = fence;
    origin.granted_at = clock_type::now();
    // The count the grant was checked against, not a newer one: a change counted since then
    // is one this lease did not survive.
    origin.server_changes = server_changes;
    origin.acquired_at = attempt_start;
    origin.deadline = attempt_start + store_->safe_ttl(opt.ttl);
    auto st = std::make_shared<guard_state>(shared_from_this(), std::move(name), std::move(keys),
                                            std::move(token), fence, opt, std::move(origin));
    st->hold();
    return st;
}

std::shared_ptr<guard_state> locker_impl::make_handed_guard(std::string name, lock_keys keys,
                                                            std::string token, lease_baton baton,
                                                            lock_options const& opt) {
    lease_origin origin;
    origin.lease_token = std::move(baton.lease_token);
    origin.lease_fence = baton.lease_fence;
    origin.granted_at = baton.granted_at;
    origin.local_handoffs = baton.local_handoffs;
    origin.server_changes = baton.server_changes;
    origin.acquired_at = clock_type::now();
    origin.deadline = baton.deadline;
    auto st = std::make_shared<guard_state>(shared_from_this(), std::move(name), std::move(keys),
                                            std::move(token), baton.fence, opt, std::move(origin));
    st->hold();
    return st;
}

asio::awaitable<std::optional<grant_result>>
locker_impl::try_once(lock_keys const& keys, std::string const& token, std::string const& name,
                      lock_options const& opt, queueing queue, asio::cancellation_state cs,
                      clock_type::time_point deadline, lock_outcome& out) {
    auto started = clock_type::now();
    auto server_changes = store_->server_changes(keys);
    replica_wait const replicas{opt.wait_replicas, opt.replicas_timeout};
    grant_result r = co_await attempt(keys, token, opt.ttl, queue, cs, deadline, replicas);
    // Granted by a server instance that has been replaced since (its keys may be gone, and the
    // guards it granted were marked lost): ask the new one. Same token, so this is idempotent.
    for (int rounds = 0; !r.ec && r.granted && !cancelled(cs) && rounds < 3 &&
                         store_->server_changes(keys) != server_changes;
         ++rounds) {
        started = clock_type::now();
        server_changes = store_->server_changes(keys);
        r = co_await attempt(keys, token, opt.ttl, queue, cs, deadline, replicas);
    }
    if (!r.ec && r.granted && store_->server_changes(keys) != server_changes) {
        // The server keeps changing: give up this attempt, as one whose reply was lost (a
        // passing error, so co_lock tries again), and release on the way out.
        r.ec = redis::error::connection_lost;
        r.granted = false;
        r.outcome_unknown = true;
    }
    if (r.outcome_unknown)
        out.outcome_unknown = true; // it may have been applied: release on the way out
    if (!r.ec && r.granted && cancelled(cs)) {
        auto const released = co_await store_->release(keys, token, handoff_claim(opt.ttl), 0);
        if (released.ec)
            out.outcome_unknown = true; // try once more on the way out
        r.granted = false;
        r.ec = asio::error::operation_aborted;
    }
    if (r.ec == asio::error::operation_aborted && !cancelled(cs))
        r.ec = error::timeout; // stopped by the wait deadline before it was sent
    if (!r.ec && r.granted)
        out.state = make_guard(name, keys, token, r.fence, opt, started, server_changes);
    co_return r;
}

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

lock_operation::lock_operation(std::shared_ptr<locker_impl> owner, std::string lock_name,
                               lock_options options, bool waits)
    : locker(std::move(owner)), name(std::move(lock_name)), opt(std::move(options)), wait(waits) {}

lock_operation::~lock_operation() {
    if (queue && !finished)
        locker->queues_.drop(queue, *this);
    if (pending_hook.is_linked())
        locker->pending_.erase(locker->pending_.iterator_to(*this));
}

asio::any_io_executor lock_operation::io_executor() const {
    return locker->strand_.get_inner_executor();
}

std::string const& lock_operation::holder_token() {
    if (token.empty())
        token = random_token();
    return token;
}

void locker_impl::start(std::shared_ptr<lock_operation> op) {
    asio::dispatch(strand_, [op = std::move(op)] { op->locker->begin(op); });
}

void locker_impl::begin(std::shared_ptr<lock_operation> const& op) {
    if (op->finished)
        return; // cancelled before it reached the strand
    pending_.push_back(*op);
    auto const start = op->started; // the deadlines count from the call
    op->deadlines.wait = op->opt.wait_timeout ? saturating_add(start, *op->opt.wait_timeout)
                                              : clock_type::time_point::max();
    op->deadlines.first_connect =
        std::min(op->deadlines.wait, saturating_add(start, op->opt.first_connect_timeout));
    op->own_keys = std::make_unique<lock_keys>(prefix_, op->name, owner_);
    if (op->wait && queues_.busy(*op->own_keys)) {
        // Others of this process wait on the name, or ask for it now: queue behind them (FIFO,
        // and no attempt that would fail anyway), parked until its turn.
        op->queue = queues_.join(*op->own_keys, *op);
        note_queue(*op, *op->queue);
        op->own_keys.reset();
        op->sleep = op->opt.ttl;
        park(*op, op->deadlines.wait);
        return;
    }
    spawn(op);
}

void locker_impl::spawn(std::shared_ptr<lock_operation> const& op) {
    op->driving = true;
    asio::co_spawn(strand_, run(op),
                   asio::bind_cancellation_slot(op->signal.slot(), [op](std::exception_ptr e) {
                       if (!e || op->finished)
                           return;
                       op->exception = e;
                       op->locker->finish(*op);
                   }));
}

void locker_impl::cancel(lock_operation& op, asio::cancellation_type type) {
    if (op.finished || (type & (asio::cancellation_type::terminal |
                                asio::cancellation_type::partial)) == asio::cancellation_type::none)
        return;
    if (op.driving) {
        op.signal.emit(type);
        return;
    }
    // Parked in the queue: nothing of it is at the server but its share of this locker's
    // entry there, which the last one out takes out.
    fail(op, asio::error::operation_aborted, {});
    finish(op);
}

void locker_impl::abort_pending() {
    std::vector<std::shared_ptr<lock_operation>> calls;
    for (auto& op : pending_)
        calls.push_back(op.shared_from_this());
    for (auto const& op : calls)
        cancel(*op, asio::cancellation_type::terminal);
}

void locker_impl::fail(lock_operation& op, error_code ec, std::string const& detail_text) {
    set_failure(op.out, op.name, ec, detail_text);
}

void locker_impl::finish(lock_operation& op) {
    if (op.finished)
        return;
    op.finished = true;
    op.driving = false;
    if (op.pending_hook.is_linked())
        pending_.erase(pending_.iterator_to(op));
    auto const keep = op.shared_from_this();
    auto const claim = handoff_claim(op.opt.ttl);
    // An attempt that failed after it may have been applied could have left our token in the
    // key: release it (the script checks the token, so this is always safe).
    if (op.out.ec && op.out.outcome_unknown)
        asio::co_spawn(strand_, release_detached(shared_from_this(), op.keys(), op.token, claim, 0),
                       asio::detached);
    bool const waited = op.queue != nullptr;
    if (op.out.state)
        note_acquired(op, *op.out.state, waited);
    if (auto q = std::exchange(op.queue, nullptr)) {
        auto baton = std::exchange(op.baton, nullptr);
        queues_.leave(q, op, op.out.state != nullptr, claim);
        note_queue(op, *q);
        if (baton)
            pass_on(q->keys, std::move(*baton), claim);
    }
    op.on_wake = nullptr;
    op.parked_self.reset();
    if (op.timer)
        op.timer->cancel();
    op.deliver();
}

asio::awaitable<void> locker_impl::run(std::shared_ptr<lock_operation> op) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    if (!op->queue && !co_await first_attempt(*op, cs))
        co_return;
    co_await queue_turns(*op, cs);
}

asio::awaitable<bool> locker_impl::first_attempt(lock_operation& op, asio::cancellation_state cs) {
    if (cancelled(cs)) {
        fail(op, asio::error::operation_aborted, {});
        finish(op);
        co_return false;
    }
    // The uncontended path: one command, no subscription. co_lock calls arriving meanwhile
    // queue behind this one.
    auto const& keys = *op.own_keys;
    auto const wait_deadline = op.deadlines.wait;
    auto const queue_mode = op.wait ? queueing::when_held : queueing::never;
    if (op.wait)
        queues_.begin_first_attempt(keys);
    std::optional<grant_result> first;
    try {
        first = co_await try_once(keys, op.holder_token(), op.name, op.opt, queue_mode, cs,
                                  wait_deadline, op.out);
    } catch (...) {
        // Calls queued behind this attempt must not wait for it for good.
        if (op.wait) {
            queues_.end_first_attempt(keys);
            if (auto* q = queues_.find(keys))
                local_queues::wake(q->waiters.front());
        }
        throw;
    }
    if (op.wait)
        queues_.end_first_attempt(keys);
    ++op.attempts;
    // Whether this locker may have an entry in the server's queue that nobody here will
    // take out: a first attempt that found the lock held queued it.
    bool const queued_at_server =
        op.wait && !first->granted && (!first->ec || first->outcome_unknown);
    bool const others_queued = !first->ec && first->others_queued;
    attempt_context const context{op.wait, false, op.deadlines, op.opt.retry.max};
    auto const next = decide_after_attempt(*first, context, cancelled(cs), clock_type::now());
    bool goes_on = false;
    switch (next.step) {
    case next_step::acquired:
    case next_step::not_acquired: // held by someone else: an empty result
        break;
    case next_step::fail_timeout:
        fail(op, error::timeout, timeout_text(op.opt));
        break;
    case next_step::fail:
        fail(op, first->ec, failure_text(first->ec, first->server_text, op.opt, op.wait));
        break;
    case next_step::aborted:
        fail(op, asio::error::operation_aborted, {});
        break;
    case next_step::wait:
        op.sleep = next.sleep;
        goes_on = true;
        if (clock_type::now() >= wait_deadline) {
            fail(op, error::timeout, timeout_text(op.opt));
            goes_on = false;
        }
        break;
    }
    if (goes_on) {
        // Contended: first in the local queue, ahead of calls that queued behind this attempt.
        auto queue = queues_.join(keys, op, true);
        op.queue = queue;
        note_queue(op, *queue);
        op.own_keys.reset();
        op.asked = true;
        op.need_attempt = false; // the first attempt's answer still stands
        queue->queued_at_server = queue->queued_at_server || queued_at_server;
        queue->others_queued = queue->others_queued || others_queued;
        co_return true;
    }
    // Calls that queued behind this attempt: their head asks now, or, when this one took the
    // lock, waits for its release. The server-side entry this attempt may have left is theirs.
    if (auto* q = op.wait ? queues_.find(keys) : nullptr) {
        q->queued_at_server = q->queued_at_server || queued_at_server;
        local_queues::wake(q->waiters.front(), op.out.state && q->queued_at_server
                                                   ? wake_reason::promoted_after_acquire
                                                   : wake_reason::woken);
    } else if (queued_at_server) {
        store_->leave_queue(keys, handoff_claim(op.opt.ttl));
    }
    finish(op);
    co_return false;
}

} // namespace colock::detail
