// The lease core: the renewal coroutine and its schedule, extend() in turn with it, loss and
// the wait_lost waiters, and the book of a locker's leases.
#include "lock/core/lease.hpp"

#include "detail/awaitable_tokens.hpp"
#include "detail/completion.hpp"

#include <colock/error.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <utility>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

// ------------------------------------------------------------------ extend_turns

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

namespace {

// Gives the turn back when the sending coroutine is done with it, however it ends.
struct turn_holder {
    extend_turns* turns = nullptr;
    turn_holder() = default;
    turn_holder(turn_holder const&) = delete;
    ~turn_holder() {
        if (turns)
            turns->give();
    }
};

} // namespace

// ------------------------------------------------------------------ the book

lease_book::lease_book(asio::strand<asio::any_io_executor> strand,
                       std::function<milliseconds(milliseconds)> safe_ttl)
    : strand_(std::move(strand)), safe_ttl_(std::move(safe_ttl)), renewal_timer_(strand_) {}

lease_book::held_entry lease_book::add(std::shared_ptr<lease> const& l) {
    std::lock_guard lock(held_mutex_);
    return held_.insert(held_.end(), l);
}

void lease_book::remove(held_entry e) {
    std::lock_guard lock(held_mutex_);
    held_.erase(e);
}

std::vector<std::shared_ptr<lease>> lease_book::leases() const {
    std::vector<std::shared_ptr<lease>> out;
    std::lock_guard lock(held_mutex_);
    out.reserve(held_.size());
    for (auto const& weak : held_)
        if (auto l = weak.lock())
            out.push_back(std::move(l));
    return out;
}

void lease_book::renew_all_now() {
    for (auto const& l : leases())
        l->renew_now();
}

void lease_book::mark_replaced_lost() {
    for (auto const& l : leases())
        if (l->server_generation_ != l->current_server_generation())
            l->mark_lost(loss_reason::server_replaced);
}

void lease_book::mark_forced_lost(std::string_view key, std::string_view token) {
    for (auto const& l : leases())
        if (l->is_lease(key, token))
            l->mark_lost(loss_reason::forced);
}

void lease_book::give_all_back_now() noexcept {
    try {
        for (auto const& l : leases())
            if (l->release_once())
                l->give_back_now();
    } catch (...) {
        // Out of memory: what was not handed to the connection runs out by its ttl.
    }
}

void lease_book::drop_waiters() noexcept {
    std::vector<std::shared_ptr<loss_waiters::call>> dropped; // destroyed last
    try {
        for (auto const& l : leases())
            for (auto& w : l->waiters_->take_all())
                dropped.push_back(std::move(w));
    } catch (...) {
    }
}

lease_book::renewal_entry lease_book::schedule(clock_type::time_point due,
                                               std::shared_ptr<lease> const& l) {
    auto const e = renewals_due_.emplace(due, l);
    if (due < renewal_timer_at_)
        set_renewal_timer(due); // else the timer fires before, and is set again then
    return e;
}

void lease_book::set_renewal_timer(clock_type::time_point at) {
    renewal_timer_at_ = at;
    renewal_timer_.expires_at(at);
    renewal_timer_.async_wait([weak = weak_from_this(), at](error_code) {
        auto self = weak.lock();
        if (self && self->renewal_timer_at_ == at)
            self->start_due_renewals(); // else set again, for another time, meanwhile
    });
}

void lease_book::unschedule(renewal_entry e) {
    renewals_due_.erase(e);
}

void lease_book::cancel_idle_timer() {
    if (renewals_due_.empty() && renewal_timer_at_ != clock_type::time_point::max()) {
        renewal_timer_at_ = clock_type::time_point::max();
        renewal_timer_.cancel();
    }
}

void lease_book::start_due_renewals() {
    renewal_timer_at_ = clock_type::time_point::max();
    auto const now = clock_type::now();
    while (!renewals_due_.empty() && renewals_due_.begin()->first <= now) {
        if (auto l = renewals_due_.begin()->second.lock())
            l->start_watch(); // takes it off the schedule
        else
            renewals_due_.erase(renewals_due_.begin());
    }
    if (!renewals_due_.empty())
        set_renewal_timer(renewals_due_.begin()->first);
}

// ------------------------------------------------------------------ the lease

lease::lease(std::shared_ptr<lease_book> book, lease_terms const& terms,
             clock_type::time_point acquired_at, clock_type::time_point deadline,
             std::uint64_t server_generation)
    : book_(std::move(book))
    , terms_(terms)
    , acquired_at_(acquired_at)
    , server_generation_(server_generation)
    , ttl_(terms.ttl)
    , renew_timer_(book_->strand())
    , turns_(book_->strand())
    , waiters_(std::make_shared<loss_waiters>(book_->strand())) {
    set_deadline(deadline);
}

lease::~lease() = default;

std::optional<loss_reason> lease::loss() const noexcept {
    if (auto const why = loss_.load(); why >= 0)
        return static_cast<loss_reason>(why);
    return std::nullopt;
}

void lease::mark_lost(loss_reason why) {
    if (released_) {
        gone_after_release_ = true; // nobody to tell; whoever would take it over must not
        return;
    }
    int none = -1;
    if (loss_.compare_exchange_strong(none, static_cast<int>(why))) {
        lost_ = true;
        on_lost(why);
    }
    finish_waiters();
    renew_timer_.cancel();
}

bool lease::bound_deadline(clock_type::time_point sent_at, milliseconds asked) {
    auto const bound = sent_at + book_->safe_ttl(asked);
    if (bound >= deadline())
        return false;
    set_deadline(bound);
    return true;
}

milliseconds lease::renew_interval() const {
    return terms_.renew_interval < ttl_ ? terms_.renew_interval : ttl_ / 3;
}

clock_type::time_point lease::next_renewal() const {
    auto const now = clock_type::now();
    auto const interval = renew_interval();
    auto const until = deadline();
    auto const by_lease =
        until - now > ttl_ - interval ? now + interval : until - (ttl_ - interval);
    auto const due = std::min(now + interval, by_lease);
    // Down to a multiple of a sixteenth of the interval: a locker's leases of the same terms
    // fall due at the same moments, and their renewals go out together (renewal_batch.hpp).
    // Never later for it; at most a sixteenth sooner.
    auto const grid = std::chrono::duration_cast<clock_type::duration>(interval) / 16;
    if (grid <= clock_type::duration::zero())
        return std::max(now, due);
    auto const since = due.time_since_epoch();
    return std::max(now, clock_type::time_point(since - since % grid));
}

void lease::enter_book() {
    registration_ = book_->add(shared_from_this());
}

void lease::start() {
    if (!terms_.auto_renew)
        return;
    auto const due = next_renewal();
    first_renewal_ = due;
    renewal_scheduled_ = book_->schedule(due, shared_from_this());
}

void lease::renew_now() {
    if (!terms_.auto_renew)
        return;
    if (watching_) {
        renew_timer_.cancel();
    } else {
        first_renewal_ = clock_type::now();
        start_watch();
    }
}

void lease::start_watch() {
    if (watching_)
        return;
    watching_ = true;
    if (renewal_scheduled_)
        book_->unschedule(*std::exchange(renewal_scheduled_, std::nullopt));
    asio::co_spawn(book_->strand(), renew_loop(shared_from_this()),
                   asio::bind_cancellation_slot(renew_stop_.slot(), asio::detached));
}

void lease::stop() {
    renew_stop_.emit(asio::cancellation_type::terminal);
    finish_waiters();
    if (renewal_scheduled_)
        book_->unschedule(*std::exchange(renewal_scheduled_, std::nullopt));
    if (registration_)
        book_->remove(*std::exchange(registration_, std::nullopt));
}

void lease::finish_waiters() {
    waiters_->finish_all(lost_ ? error_code{} : error_code(error::not_held));
}

void lease::wait_lost(asio::any_completion_handler<void(error_code)> handler) {
    auto w = waiters_->make(std::move(handler));
    asio::dispatch(strand(), [self = shared_from_this(), w] {
        if (self->lost_ || self->released_) {
            self->waiters_->finish(w, self->lost_ ? error_code{} : error_code(error::not_held));
            return;
        }
        if (self->waiters_->enroll(w)) // not cancelled already
            self->start_watch();       // without auto_renew, someone must notice the lease's end
    });
}

asio::awaitable<void> lease::renew_loop(std::shared_ptr<lease> self) {
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& timer = self->renew_timer_; // self owns it and outlives this frame
    lock_timer lease_end(self->strand());
    for (;;) {
        // The first renewal is when it was scheduled (see start), which may be now.
        auto next = self->first_renewal_ ? *std::exchange(self->first_renewal_, std::nullopt)
                                         : self->next_renewal();
        if (!self->terms_.auto_renew ||
            (self->terms_.max_hold &&
             next >= saturating_add(self->acquired_at_, *self->terms_.max_hold))) {
            co_await watch_to_end(self, cs);
            co_return;
        }
        timer.expires_at(next);
        co_await timer.async_wait(nothrow_awaitable);
        if (cancelled(cs) || self->released_ || self->lost_)
            co_return;
        if (!co_await renew_now(self, cs, lease_end))
            co_return;
    }
}

asio::awaitable<void> lease::watch_to_end(std::shared_ptr<lease> self,
                                          asio::cancellation_state cs) {
    // Not (or no longer) renewing, only watching for wait_lost: the lease ends at its deadline,
    // which an explicit extend() may still move.
    auto& timer = self->renew_timer_;
    for (;;) {
        timer.expires_at(self->deadline());
        co_await timer.async_wait(nothrow_awaitable);
        if (cancelled(cs) || self->released_ || self->lost_)
            co_return;
        if (!self->running()) {
            self->mark_lost(loss_reason::expired);
            co_return;
        }
    }
}

asio::awaitable<bool> lease::renew_now(std::shared_ptr<lease> self, asio::cancellation_state cs,
                                       lock_timer& lease_end) {
    using namespace asio::experimental::awaitable_operators;
    auto& timer = self->renew_timer_;
    // Extend; on an error retry quickly. Either way the lease is ours only until its local
    // deadline: a stalled connection must not let us believe otherwise. That deadline is read
    // afresh each time, since extend() may move it; and a wake-up before it (a reconnection
    // cancels the timer) means "try now", never "give up".
    for (;;) {
        if (self->lost_)
            co_return false; // marked from outside (server change)
        if (!self->running()) {
            self->mark_lost(loss_reason::expired); // no renewal succeeded in time
            co_return false;
        }
        turn_holder turn;
        if (!co_await self->turns_.take())
            co_return false; // stopped while extend() had the turn
        turn.turns = &self->turns_;
        if (self->released_ || self->lost_)
            co_return false;
        auto const started = clock_type::now();
        auto const ttl = self->ttl_;
        self->bound_deadline(started, ttl);
        lease_end.expires_at(self->deadline());
        auto outcome =
            co_await (self->extend_at_server(ttl, true) || lease_end.async_wait(nothrow_awaitable));
        turn.turns = nullptr;
        self->turns_.give();
        if (cancelled(cs) || self->released_)
            co_return false;
        if (outcome.index() == 1) {
            self->on_renewal(clock_type::now() - started, false, error::timeout);
            continue; // no answer by the deadline: lost, unless extend() moved it
        }
        auto const reply = std::get<0>(outcome);
        self->on_renewal(clock_type::now() - started, !reply.ec && reply.ours, reply.ec);
        // An unreadable reply (unexpected_reply) is retried as a network error is.
        if (!reply.ec) {
            if (reply.ours) {
                self->set_deadline(started + self->book_->safe_ttl(ttl));
                self->on_confirmed(ttl);
                if (self->ttl_ != ttl)
                    continue; // extend() changed the lease meanwhile: apply it again now
                co_return true;
            }
            self->mark_lost(loss_reason::not_ours); // deleted, expired or taken over
            co_return false;
        }
        auto const retry_at =
            clock_type::now() + std::min(self->renew_interval() / 4, milliseconds{250});
        timer.expires_at(std::min(retry_at, self->deadline()));
        co_await timer.async_wait(nothrow_awaitable);
        if (cancelled(cs) || self->released_)
            co_return false;
    }
}

asio::awaitable<std::tuple<error_code, bool>> lease::extend(std::shared_ptr<lease> self,
                                                            milliseconds ttl) {
    turn_holder turn;
    if (!co_await self->turns_.take())
        co_return std::tuple{error_code(asio::error::operation_aborted), false};
    turn.turns = &self->turns_;
    // Let go while it waited for the turn: the lease may be a local waiter's now, and this
    // ttl is not its to set.
    if (self->released_)
        co_return std::tuple{error_code(error::not_held), false};
    if (self->lost_)
        co_return std::tuple{error_code{}, false};
    auto const started = clock_type::now();
    // The watcher (or the renewal's sleep) looks again at the earlier deadline.
    if (self->bound_deadline(started, ttl))
        self->renew_timer_.cancel();
    auto const reply = co_await self->extend_at_server(ttl, false);
    if (reply.ec)
        co_return std::tuple{reply.ec, false};
    if (reply.ours) {
        self->ttl_ = ttl;
        self->set_deadline(started + self->book_->safe_ttl(ttl));
        self->on_confirmed(ttl); // a longer lease than the record was written for
    } else {
        self->mark_lost(loss_reason::not_ours);
    }
    co_return std::tuple{error_code{}, reply.ours};
}

} // namespace colock::detail
