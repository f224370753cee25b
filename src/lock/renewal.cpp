// The renewal coroutine, extend(), and the turns they take at the server.
#include "renewal.hpp"

#include "guard.hpp"

#include <colock/error.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

extend_turns::waiter::~waiter() {
    std::erase(owner.queue_, this);
}

asio::awaitable<bool> extend_turns::take() {
    if (!taken_) {
        taken_ = true;
        co_return true;
    }
    auto cs = co_await asio::this_coro::cancellation_state;
    waiter w(*this);
    w.timer.expires_at(clock_type::time_point::max());
    queue_.push_back(&w);
    co_await w.timer.async_wait(nothrow_awaitable);
    if (!w.granted)
        co_return false; // cancelled; the destructor leaves the queue
    if (cancelled(cs)) {
        give();
        co_return false;
    }
    co_return true;
}

void extend_turns::give() {
    if (queue_.empty()) {
        taken_ = false;
        return;
    }
    auto* next = queue_.front();
    queue_.erase(queue_.begin());
    next->granted = true;
    next->timer.cancel();
}

void guard_state::start_watch() {
    if (watching)
        return;
    watching = true;
    if (renewal_scheduled)
        locker->unschedule_renewal(*std::exchange(renewal_scheduled, std::nullopt));
    asio::co_spawn(locker->strand_, renew_loop(shared_from_this()),
                   asio::bind_cancellation_slot(renew_stop.slot(), asio::detached));
}

void locker_impl::schedule_renewal(std::shared_ptr<guard_state> const& st) {
    auto const due = st->next_renewal();
    st->first_renewal = due;
    st->renewal_scheduled = renewals_due_.emplace(due, st);
    if (due < renewal_timer_at_)
        set_renewal_timer(due); // else the timer fires before, and is set again then
}

void locker_impl::set_renewal_timer(clock_type::time_point at) {
    renewal_timer_at_ = at;
    renewal_timer_.expires_at(at);
    renewal_timer_.async_wait([weak = weak_from_this(), at](error_code) {
        auto self = weak.lock();
        if (self && self->renewal_timer_at_ == at)
            self->start_due_renewals(); // else set again, for another time, meanwhile
    });
}

void locker_impl::unschedule_renewal(renewal_entry e) {
    renewals_due_.erase(e);
    if (renewals_due_.empty() && renewal_timer_at_ != clock_type::time_point::max()) {
        renewal_timer_at_ = clock_type::time_point::max();
        renewal_timer_.cancel();
    }
}

void locker_impl::start_due_renewals() {
    renewal_timer_at_ = clock_type::time_point::max();
    auto const now = clock_type::now();
    while (!renewals_due_.empty() && renewals_due_.begin()->first <= now) {
        if (auto st = renewals_due_.begin()->second.lock())
            st->start_watch(); // takes it off the schedule
        else
            renewals_due_.erase(renewals_due_.begin());
    }
    if (!renewals_due_.empty())
        set_renewal_timer(renewals_due_.begin()->first);
}

asio::awaitable<void> renew_loop(std::shared_ptr<guard_state> st) {
    using namespace asio::experimental::awaitable_operators;
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& timer = st->renew_timer; // st owns it and outlives this frame
    auto& store = *st->locker->store_;
    asio::steady_timer lease_end(st->locker->strand_);
    for (;;) {
        // The first renewal is when it was scheduled (see schedule_renewal), which may be now.
        auto next = st->first_renewal ? *std::exchange(st->first_renewal, std::nullopt)
                                      : st->next_renewal();
        if (!st->opt.auto_renew ||
            (st->opt.max_hold && next >= saturating_add(st->acquired_at, *st->opt.max_hold))) {
            // Not (or no longer) renewing, only watching for wait_lost: the lease ends at its
            // deadline, which an explicit extend() may still move.
            for (;;) {
                timer.expires_at(st->lease_deadline());
                co_await timer.async_wait(nothrow_awaitable);
                if (cancelled(cs) || st->released || st->lost)
                    co_return;
                if (!st->lease_running()) {
                    st->mark_lost(loss_reason::expired);
                    co_return;
                }
            }
        }
        timer.expires_at(next);
        co_await timer.async_wait(nothrow_awaitable);
        if (cancelled(cs) || st->released || st->lost)
            co_return;

        // Extend; on an error retry quickly. Either way the lease is ours only until its local
        // deadline: a stalled connection must not let us believe otherwise. That deadline is
        // read afresh each time, since extend() may move it; and a wake-up before it (a
        // reconnection cancels the timer) means "try now", never "give up".
        for (;;) {
            if (st->lost)
                co_return; // marked from outside (server change)
            if (!st->lease_running()) {
                st->mark_lost(loss_reason::expired); // no renewal succeeded in time
                co_return;
            }
            turn_holder turn;
            if (!co_await st->turns.take())
                co_return; // stopped while extend() had the turn
            turn.turns = &st->turns;
            if (st->released || st->lost)
                co_return;
            auto const started = clock_type::now();
            auto const ttl = st->ttl;
            st->bound_lease_deadline(started, ttl);
            lease_end.expires_at(st->lease_deadline());
            auto outcome = co_await (store.extend(st->keys, st->lease_token, ttl, st->fence) ||
                                     lease_end.async_wait(nothrow_awaitable));
            turn.turns = nullptr;
            st->turns.give();
            if (cancelled(cs) || st->released)
                co_return;
            if (outcome.index() == 1) {
                st->locker->note_renewal(*st, clock_type::now() - started, false, error::timeout);
                continue; // no answer by the deadline: lost, unless extend() moved it
            }
            auto const reply = std::get<0>(outcome);
            st->locker->note_renewal(*st, clock_type::now() - started, !reply.ec && reply.ours,
                                     reply.ec);
            // An unreadable reply (unexpected_reply) is retried as a network error is.
            if (!reply.ec) {
                if (reply.ours) {
                    st->set_lease_deadline(started + store.safe_ttl(ttl));
                    st->locker->keep_record(ttl);
                    if (st->ttl != ttl)
                        continue; // extend() changed the lease meanwhile: apply it again now
                    break;
                }
                st->mark_lost(loss_reason::not_ours); // deleted, expired or taken over
                co_return;
            }
            if (store.logs(log_level::debug))
                store.log(log_level::debug,
                          fmt::format("renewal of lock '{}' (fence {}) failed: {}; retrying",
                                      st->name, st->fence, reply.ec.message()));
            auto const retry_at =
                clock_type::now() + std::min(st->renew_interval() / 4, milliseconds{250});
            timer.expires_at(std::min(retry_at, st->lease_deadline()));
            co_await timer.async_wait(nothrow_awaitable);
            if (cancelled(cs) || st->released)
                co_return;
        }
    }
}

asio::awaitable<std::tuple<error_code, bool>> extend_held(std::shared_ptr<guard_state> st,
                                                          milliseconds ttl) {
    turn_holder turn;
    if (!co_await st->turns.take())
        co_return std::tuple{error_code(asio::error::operation_aborted), false};
    turn.turns = &st->turns;
    // Let go while it waited for the turn: the lease may be a local waiter's now, and this
    // ttl is not its to set.
    if (st->released)
        co_return std::tuple{error_code(error::not_held), false};
    if (st->lost)
        co_return std::tuple{error_code{}, false};
    auto const started = clock_type::now();
    auto const& store = *st->locker->store_;
    // The watcher (or the renewal's sleep) looks again at the earlier deadline.
    if (st->bound_lease_deadline(started, ttl))
        st->renew_timer.cancel();
    auto const reply =
        co_await st->locker->store_->extend(st->keys, st->lease_token, ttl, st->fence);
    if (reply.ec)
        co_return std::tuple{reply.ec, false};
    if (reply.ours) {
        st->ttl = ttl;
        st->set_lease_deadline(started + store.safe_ttl(ttl));
        st->locker->keep_record(ttl); // a longer lease than the record was written for
    } else {
        st->mark_lost(loss_reason::not_ours);
    }
    co_return std::tuple{error_code{}, reply.ours};
}

} // namespace colock::detail
