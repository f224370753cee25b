// The locker: options and validation at the call, then the acquire orchestration on the
// locker's strand (an attempt through the lease store; the uncontended path; the contended
// wait in the local queue, local_queue.cpp), and the guard made on success.
#include "locker_impl.hpp"

#include "awaited_call.hpp"
#include "errors.hpp"
#include "guard.hpp"
#include "quorum_store.hpp"
#include "single_connection_store.hpp"
#include "token.hpp"

#include <colock/locker.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

namespace detail {

locker_impl::locker_impl(std::shared_ptr<lease_store> store, std::string prefix,
                         std::string client_name)
    : store_(std::move(store))
    , strand_(store_->strand())
    , prefix_(std::move(prefix))
    , owner_(random_token().substr(0, 16))
    , locker_key_prefix_(prefix_ + "locker:")
    , record_key_(locker_key_prefix_ + owner_)
    , record_fields_(holder_record_fields(client_name))
    , queues_(*store_, owner_)
    , rng_(std::random_device{}())
    , renewal_timer_(strand_) {}

void locker_impl::drop_handlers_at_shutdown() noexcept {
    std::vector<std::shared_ptr<guard_state::lost_waiter>> dropped; // destroyed last
    for (auto const& st : held_guards())
        for (auto& w : std::exchange(st->lost_waiters, {}))
            dropped.push_back(std::move(w));
    // Calls parked with no timer hold themselves (and their handlers); destroyed after the
    // walk, as each leaves its queue.
    std::vector<std::shared_ptr<lock_operation>> parked;
    queues_.for_each_waiter([&parked](waiter& w) {
        if (auto& self = static_cast<lock_operation&>(w).parked_self)
            parked.push_back(std::move(self));
    });
}

void locker_impl::note_acquired(lock_operation const& op, guard_state const& st,
                                bool waited) const {
    if (!observer_)
        return;
    auto const how = st.local_handoffs > 0 ? acquired_by::local_handoff
                     : waited              ? acquired_by::server_after_wait
                                           : acquired_by::first_attempt;
    observer_->on_acquired({st.name, st.fence, clock_type::now() - op.started, op.attempts, how});
}

void locker_impl::note_queue(lock_operation const& op, name_queue const& q) const {
    if (observer_)
        observer_->on_queue({op.name, q.waiters.size()});
}

void locker_impl::note_released(guard_state const& st, bool handed_locally) const {
    if (observer_ && !st.lost)
        observer_->on_released(
            {st.name, st.fence, clock_type::now() - st.acquired_at, handed_locally});
}

void locker_impl::note_lost(guard_state const& st, loss_reason why) const {
    if (store_->logs(log_level::warning)) {
        auto const held =
            std::chrono::duration_cast<milliseconds>(clock_type::now() - st.acquired_at);
        store_->log(
            log_level::warning,
            fmt::format(
                "lock '{}' (fence {}) lost after {} ms: {}", st.name, st.fence, held.count(),
                why == loss_reason::not_ours  ? "the server no longer holds it for this holder"
                : why == loss_reason::expired ? "its lease ran out with no renewal confirmed"
                : why == loss_reason::forced  ? "it was ended by a forced unlock"
                                              : "the server instance that held it was replaced"));
    }
    if (observer_)
        observer_->on_lost({st.name, st.fence, why, clock_type::now() - st.acquired_at});
}

void locker_impl::note_renewal(guard_state const& st, clock_type::duration latency, bool extended,
                               error_code ec) const {
    if (observer_)
        observer_->on_renewal({st.name, st.fence, latency, extended, ec});
}

void locker_impl::on_message(std::string const& channel, std::string const& payload) {
    if (channel == record_key_)
        on_forced(payload);
    else
        queues_.on_message(channel, payload);
}

void locker_impl::on_reconnect() {
    if (observer_)
        observer_->on_reconnect({store_->reconnects()});
    // Messages published while the connection was down were missed: let every head look.
    queues_.wake_heads();
    // The outage may have outlasted a lease, or the server may have lost its keys: renew now
    // rather than at the next interval, so a loss is known one round trip after reconnecting.
    for (auto const& st : held_guards())
        if (st->opt.auto_renew) {
            if (st->watching) {
                st->renew_timer.cancel();
            } else {
                st->first_renewal = clock_type::now();
                st->start_watch();
            }
        }
}

locker_impl::held_entry locker_impl::add_held(std::shared_ptr<guard_state> const& st) {
    std::lock_guard lock(held_mutex_);
    return held_.insert(held_.end(), st);
}

void locker_impl::remove_held(held_entry e) {
    std::lock_guard lock(held_mutex_);
    held_.erase(e);
}

std::vector<std::shared_ptr<guard_state>> locker_impl::held_guards() const {
    std::vector<std::shared_ptr<guard_state>> out;
    std::lock_guard lock(held_mutex_);
    out.reserve(held_.size());
    for (auto const& weak : held_)
        if (auto st = weak.lock())
            out.push_back(std::move(st));
    return out;
}

void locker_impl::on_connection_close() noexcept {
    try {
        // Every lease held through the connection goes back now, on this thread, so that the
        // close sends it; a guard let go afterwards has nothing left to send (unlock() answers
        // false, extend() not_held). Not to a waiter here: the calls under way end too.
        for (auto const& st : held_guards())
            if (!st->released.exchange(true))
                release_now(st);
        asio::dispatch(strand_, [self = shared_from_this()] { self->abort_pending(); });
    } catch (...) {
        // Out of memory: what was not handed to the connection runs out by its ttl.
    }
}

void locker_impl::on_server_change() {
    // Another server instance: the locks we held were on the old one. A restart without
    // persistence lost them, so someone else may already hold them; say so at once. The holder
    // record went with them: the next lease writes it again.
    // With Cluster only the guards of the slots whose primary was replaced: the others' servers
    // kept their keys.
    record_expires_ = clock_type::time_point::min();
    for (auto const& st : held_guards())
        if (st->lease_server_changes != store_->server_changes(st->keys)) {
            st->mark_lost(loss_reason::server_replaced);
            st->renew_timer.cancel();
        }
}

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
    std::optional<asio::steady_timer> deadline_timer;
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
    auto st = std::make_shared<guard_state>(shared_from_this(), std::move(name), std::move(keys),
                                            std::move(token), fence, opt);
    st->acquired_at = attempt_start;
    st->set_lease_deadline(attempt_start + store_->safe_ttl(opt.ttl));
    st->lease_granted_at = clock_type::now();
    // The count the grant was checked against, not a newer one: a change counted since then
    // is one this lease did not survive.
    st->lease_server_changes = server_changes;
    hold(st);
    return st;
}

std::shared_ptr<guard_state> locker_impl::make_handed_guard(std::string name, lock_keys keys,
                                                            std::string token, lease_baton baton,
                                                            lock_options const& opt) {
    auto st = std::make_shared<guard_state>(shared_from_this(), std::move(name), std::move(keys),
                                            std::move(token), baton.fence, opt);
    st->acquired_at = clock_type::now();
    st->set_lease_deadline(baton.deadline);
    st->lease_token = std::move(baton.lease_token);
    st->lease_fence = baton.lease_fence;
    st->lease_granted_at = baton.granted_at;
    st->local_handoffs = baton.local_handoffs;
    st->lease_server_changes = baton.server_changes;
    hold(st);
    return st;
}

void locker_impl::hold(std::shared_ptr<guard_state> const& st) {
    st->registration = add_held(st);
    keep_record(st->ttl);
    if (st->opt.auto_renew)
        schedule_renewal(st);
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
    co_await self->store_->release(keys, token, claim, last_fence);
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

} // namespace detail

// -------------------------------------------------------------------- locker

locker::locker(redis::connection& conn, std::string key_prefix)
    : impl_(std::make_shared<detail::locker_impl>(detail::make_single_connection_store(conn),
                                                  std::move(key_prefix),
                                                  conn.get_config().client_name)) {
    impl_->store_->listen(impl_, impl_->prefix_);
    detail::context_shutdown::watch(impl_->strand_.get_inner_executor(), impl_);
}

locker::locker(std::span<redis::connection* const> primaries, std::string key_prefix)
    : impl_(std::make_shared<detail::locker_impl>(
          detail::make_quorum_store(primaries), std::move(key_prefix),
          primaries.empty() || !primaries[0] ? std::string()
                                             : primaries[0]->get_config().client_name)) {
    impl_->store_->listen(impl_, impl_->prefix_);
    detail::context_shutdown::watch(impl_->strand_.get_inner_executor(), impl_);
}

locker::~locker() {
    impl_->store_->stop_listening();
    asio::dispatch(impl_->strand_, [impl = impl_] {
        impl->closed_ = true;
        impl->abort_pending();
        if (impl->subscribed_for_forced_)
            impl->store_->unsubscribe(impl->record_key_);
    });
}

locker::executor_type locker::get_executor() const noexcept {
    return impl_->strand_.get_inner_executor();
}

std::string const& locker::key_prefix() const noexcept {
    return impl_->prefix_;
}

std::size_t locker::waiting() const noexcept {
    return impl_->queues_.waiting();
}

void locker::set_observer(std::shared_ptr<lock_observer> observer) {
    asio::dispatch(impl_->strand_, [impl = impl_, observer = std::move(observer)]() mutable {
        impl->observer_ = std::move(observer);
    });
}

namespace {

using outcome_type = detail::lock_outcome;

// Starts a call whose handler `finish(handler, exception, outcome)` completes. The caller's
// cancellation goes to the strand, and to the call only while it has not finished (the slot
// holds the call weakly: a call that is done is not kept alive by its caller's slot).
template <class Handler, class Finish>
void start_operation(std::shared_ptr<detail::locker_impl> const& impl, std::string name,
                     lock_options opt, bool wait, Handler handler, Finish finish) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto op = std::make_shared<detail::lock_operation_for<Handler, Finish>>(
        impl, std::move(name), std::move(opt), wait, std::move(handler), std::move(finish));
    if (slot.is_connected()) {
        // Installed here, on the caller's thread, where the caller emits.
        slot.assign(
            [weak = std::weak_ptr<detail::lock_operation>(op)](asio::cancellation_type type) {
                if (auto target = weak.lock()) {
                    auto const& strand = target->locker->strand_;
                    asio::dispatch(strand, [target = std::move(target), type] {
                        target->locker->cancel(*target, type);
                    });
                }
            });
    }
    impl->start(std::move(op));
}

// co_lock and co_try_lock are not coroutines of their own: each is asio's awaitable of one
// initiation, so a waiting call costs the caller's frame, that awaitable's and its
// lock_operation (100,000 waiters: 1.9 KB each, with 1.5 KB of it the callers' own coroutines).
// The arguments are checked when the call is awaited, as a coroutine's would be; a refusal, or
// an outcome with an error, is the exception of the awaited operation, whose message names the
// lock. `finish(outcome)` makes the result of a good outcome. `impl` is a raw pointer: the
// caller's locker outlives the operation, as it does any of its operations.
template <class Result, class Finish>
auto await_lock(detail::locker_impl* impl, std::string name, lock_options opt, bool wait,
                Finish finish) {
    // The arguments travel on the heap until the call starts, not as the initiation's
    // arguments: asio's awaitable keeps those in its frame for as long as the call waits.
    struct call_arguments {
        std::string name;
        lock_options opt;
    };
    auto args = std::make_unique<call_arguments>();
    args->name = std::move(name);
    args->opt = std::move(opt);
    auto initiation = [impl, wait, finish, args = std::move(args)](auto handler) mutable {
        auto [n, o] = std::move(*args);
        args.reset();
        try {
            validate(n, o);
        } catch (...) {
            detail::refuse_awaited<Result>(std::move(handler), impl->strand_.get_inner_executor());
            return;
        }
        start_operation(
            impl->shared_from_this(), std::move(n), std::move(o), wait, std::move(handler),
            [finish](auto h, std::exception_ptr e, outcome_type out) {
                detail::complete_awaited<Result>(std::move(h), e, std::move(out), finish);
            });
    };
    return asio::async_initiate<asio::use_awaitable_t<> const, void(std::exception_ptr, Result)>(
        std::move(initiation), asio::use_awaitable);
}

} // namespace

void locker::start_lock(std::string name, lock_options opt, lock_handler handler) {
    start_operation(impl_, std::move(name), std::move(opt), true, std::move(handler),
                    [](lock_handler h, std::exception_ptr e, outcome_type out) {
                        if (e) {
                            std::move(h)(make_error_code(error::unexpected_reply), lock_guard{});
                            return;
                        }
                        std::move(h)(out.ec, lock_guard(std::move(out.state)));
                    });
}

void locker::start_try_lock(std::string name, lock_options opt, try_lock_handler handler) {
    start_operation(impl_, std::move(name), std::move(opt), false, std::move(handler),
                    [](try_lock_handler h, std::exception_ptr e, outcome_type out) {
                        if (e) {
                            std::move(h)(make_error_code(error::unexpected_reply), std::nullopt);
                            return;
                        }
                        std::optional<lock_guard> g;
                        if (out.state)
                            g.emplace(lock_guard(std::move(out.state)));
                        std::move(h)(out.ec, std::move(g));
                    });
}

asio::awaitable<lock_guard> locker::co_lock(std::string name, lock_options opt) {
    return await_lock<lock_guard>(
        impl_.get(), std::move(name), std::move(opt), true,
        [](outcome_type out) { return lock_guard(std::move(out.state)); });
}

asio::awaitable<std::optional<lock_guard>> locker::co_try_lock(std::string name, lock_options opt) {
    return await_lock<std::optional<lock_guard>>(
        impl_.get(), std::move(name), std::move(opt), false, [](outcome_type out) {
            std::optional<lock_guard> g;
            if (out.state)
                g.emplace(lock_guard(std::move(out.state)));
            return g;
        });
}

} // namespace colock
