// A lock set's call (one attempt, or a wait in every name's queue woken by the hand-offs'
// messages) and its lease.
#include "lock/multi/lock_set.hpp"

#include "detail/awaitable_tokens.hpp"
#include "lock/base/errors.hpp"
#include "lock/base/request_stop.hpp"
#include "lock/base/token.hpp"
#include "lock/core/acquire_policy.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/multi/set_queue.hpp"

#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <random>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

std::vector<std::string> distinct_names(std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

std::string shown_names(std::vector<std::string> const& names) {
    return fmt::format("{}", fmt::join(names, ", "));
}

namespace {

// Gives the names of `token` back (`last_fences`: the last it gave, as release_names's) and,
// with `leave`, takes `entry` out of their queues, in the background: a passing failure goes on
// with the retrying release on the strand.
void give_back_detached(std::shared_ptr<locker_context> const& locker,
                        std::vector<lock_keys> const& keys, std::string const& entry,
                        std::string const& token, bool leave,
                        std::vector<std::int64_t> const& last_fences = {}) {
    locker->store().release_names_in_background(
        keys, entry, token, leave, last_fences, [locker, keys, entry, token, leave, last_fences] {
            asio::co_spawn(
                locker->strand(),
                [](std::shared_ptr<locker_context> l, std::vector<lock_keys> k, std::string e,
                   std::string t, bool lv, std::vector<std::int64_t> f) -> asio::awaitable<void> {
                    co_await l->store().release_names(k, e, t, lv, f);
                }(locker, keys, entry, token, leave, last_fences),
                asio::detached);
        });
}

// A baton the receiver does not take: to the next waiter of the queue, when it may still take
// it, else back to Redis with the fences it gave; the head then asks.
void pass_on(std::shared_ptr<locker_context> const& locker, set_queue& q, set_baton baton) {
    auto* next = q.head();
    if (next && !next->baton && !q.aborted() &&
        baton.server_changes == locker->store().server_changes(q.keys().front()) &&
        lease_left_to_pass(baton.deadline, clock_type::now())) {
        next->baton = std::move(baton); // the same hand-off: its fences were never used
        set_queue::wake(*next);
        return;
    }
    give_back_detached(locker, q.keys(), q.entry(), baton.lease_token, false,
                       fences_after(baton.lease_fences, baton.local_handoffs));
    q.wake_head();
}

} // namespace

asio::awaitable<lock_set_outcome> acquire_lock_set(std::shared_ptr<locker_context> locker,
                                                   std::vector<std::string> names, lock_options opt,
                                                   bool wait) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& store = locker->store();
    lock_set_outcome out;
    names = distinct_names(std::move(names));
    auto const shown = shown_names(names);
    std::vector<lock_keys> keys;
    keys.reserve(names.size());
    for (auto const& n : names)
        keys.emplace_back(locker->prefix(), n, locker->id());
    if (auto why = store.names_refusal(keys); !why.empty()) {
        out.ec = make_error_code(error::invalid_argument);
        out.message = acquisition_message(lock_set_kind, shown, why);
        co_return out;
    }
    // A waiting call joins this locker's queue for its names, whose entry it asks under; one
    // attempt has an entry of its own and leaves nothing behind.
    auto& queues = locker->synchronizer_state<lock_set_queues>();
    if (!queues.listening) {
        // Both live as long as the locker's context.
        queues.listening = true;
        locker->add_forced_listener(
            [&queues, context = locker.get()](std::string_view key, std::string_view token) {
                queues.on_forced(*context, key, token);
            });
    }
    std::shared_ptr<set_queue> const q = wait ? queues.join(*locker, names, keys) : nullptr;
    auto const entry = q ? q->entry() : next_set_entry(*locker);
    auto const token = random_token();
    set_waiter me(locker->strand());
    auto const call_started = clock_type::now();
    acquisition acq(acquisition_terms::lock(opt, lock_set_kind, wait), call_started);
    if (q) {
        q->add(me);
        acq.joined_local_queue();
    }
    std::minstd_rand rng(std::random_device{}());
    auto const stopping = [&] { return (q && q->aborted()) || cancelled(cs); };
    // The last request's: when it was sent, how long its grant is ours, the server it went to.
    auto sent_at = clock_type::now();
    auto lease_end = sent_at;
    std::uint64_t generation = 0;
    names_grant last;
    names_request request{entry, token, opt.ttl, wait};
    // A lease handed by a holder here ends the wait (a cancelled call passes it on); one that
    // can no longer be taken (its server replaced, too little of it left) goes back to Redis,
    // and the call asks.
    auto const handed = [&] {
        if (!me.baton)
            return false;
        if (stopping() || (me.baton->server_changes == store.server_changes(keys.front()) &&
                           lease_left_to_pass(me.baton->deadline, clock_type::now())))
            return true;
        give_back_detached(locker, keys, entry, me.baton->lease_token, false,
                           fences_after(me.baton->lease_fences, me.baton->local_handoffs));
        me.baton.reset();
        me.woken = true;
        return false;
    };
    auto next = acq.begin_attempt(stopping());
    while (next.step == acquisition_step::ask) {
        // Behind another waiter here, or heading the queue while a holder here has the names:
        // sleep until this call's turn (the holder's let-go wakes it, or hands it the lease;
        // at the latest after a ttl, should that holder have lost its lease).
        while (q && !handed() && (!q->heads(me) || (q->holders > 0 && !me.woken))) {
            auto const now = clock_type::now();
            next = acq.keep_waiting(now);
            if (next.step != acquisition_step::wait)
                break;
            auto until = acq.deadlines().wait;
            bool const behind_holder = q->heads(me);
            if (behind_holder)
                until = std::min(until, saturating_add(now, opt.ttl));
            me.timer.expires_at(until);
            co_await me.timer.async_wait(asio::as_tuple(asio::use_awaitable));
            next = acq.begin_attempt(stopping());
            if (next.step != acquisition_step::ask)
                break;
            if (behind_holder && q->heads(me) && clock_type::now() >= until)
                me.woken = true; // the holder's let-go never came: ask
        }
        if (handed() || next.step != acquisition_step::ask)
            break;
        me.woken = false;
        sent_at = clock_type::now();
        lease_end = sent_at + store.safe_ttl(opt.ttl);
        generation = store.server_changes(keys.front());
        {
            request_stop const stop(cs, locker->strand(), next.until);
            last = co_await store.grant_names(keys, request, stop.slot());
        }
        store_answer answer;
        answer.result = last.result;
        answer.lease_end = lease_end;
        answer.server_changed = store.server_changes(keys.front()) != generation;
        next = acq.on_answer(answer, clock_type::now(), stopping());
        if (q) {
            if (last.result.granted)
                q->queued_at_server = false; // the grant took the entry out of every queue
            else if (acq.queued_by_answer() || last.result.outcome_unknown)
                q->queued_at_server = true;
        }
        while (next.step == acquisition_step::give_back) {
            // A grant for a cancelled call, or read too late: the names go back (the grant took
            // the entry out of the queues: a waiting call enters them again at its next attempt).
            give_back_detached(locker, keys, entry, token, !q);
            next = acq.on_given_back(true, clock_type::now(), stopping());
        }
        if (next.step == acquisition_step::wait)
            next = acq.keep_waiting(clock_type::now());
        if (next.step != acquisition_step::wait || handed())
            break;
        if (q->wants_subscription() && !acq.answer().ec) {
            // Subscribe, then ask again at once: a hand-off published before the subscription
            // was confirmed reached nobody.
            co_await set_queue::subscribe(q);
            next = acq.begin_attempt(stopping());
        } else if (me.woken) {
            next = acq.begin_attempt(stopping()); // told meanwhile: ask now
        } else {
            me.timer.expires_at(acq.wakes_at(clock_type::now(), q->subscribed(), rng));
            co_await me.timer.async_wait(asio::as_tuple(asio::use_awaitable));
            next = acq.on_sleep_end(clock_type::now(), me.woken, stopping());
        }
    }
    std::optional<set_baton> baton = std::exchange(me.baton, std::nullopt);
    if (baton && stopping())
        next = acquisition::aborted(); // passed on below
    if (next.step == acquisition_step::finish && next.end == acquisition_end::acquired) {
        set_lease_origin origin{q, last.fences, 0, clock_type::now()};
        out.state = std::make_shared<lock_set_state>(locker, std::move(names), keys, entry, token,
                                                     std::move(origin), opt, sent_at, lease_end,
                                                     generation);
    } else if (baton && !next.fails()) {
        // Handed the lease by a holder here: the next fence of every name, no round trip.
        auto const deadline = baton->deadline;
        auto const from = baton->server_changes;
        set_lease_origin origin{q, std::move(baton->lease_fences), baton->local_handoffs,
                                baton->granted_at};
        out.state = std::make_shared<lock_set_state>(
            locker, std::move(names), keys, entry, std::move(baton->lease_token), std::move(origin),
            opt, clock_type::now(), deadline, from);
        baton.reset();
    } else if (next.fails()) {
        auto failure =
            acq.failure(next, link_facts{store.is_connected(), store.last_error_text()}, shown);
        out.ec = failure.ec;
        out.message = std::move(failure.message);
    }
    if (out.state) {
        if (q)
            ++q->holders; // before leaving: the next head waits for this holder's let-go
        out.state->hold();
        out.state->note_acquired(call_started, acq.attempts());
    }
    if (q) {
        q->remove(me, out.state != nullptr);
        if (baton && out.state) // Redis granted the names anew: that lease is gone
            give_back_detached(locker, keys, entry, baton->lease_token, false,
                               fences_after(baton->lease_fences, baton->local_handoffs));
        else if (baton)
            pass_on(locker, *q, std::move(*baton)); // the call ended: the next one takes it
        if (!out.state && acq.outcome_unknown() && (q->waiting() > 0 || q->holders > 0))
            give_back_detached(locker, keys, entry, token, false); // a grant never seen
        queues.drop_if_idle(*q, token);
    } else if (!out.state && (acq.queued_at_server() || acq.outcome_unknown())) {
        give_back_detached(locker, keys, entry, token, true);
    }
    co_return out;
}

// ------------------------------------------------------------------ the lease

lock_set_state::lock_set_state(std::shared_ptr<locker_context> locker,
                               std::vector<std::string> names, std::vector<lock_keys> keys,
                               std::string entry, std::string token, set_lease_origin origin,
                               lock_options const& opt, clock_type::time_point acquired_at,
                               clock_type::time_point deadline, std::uint64_t server_generation)
    : lease(locker->book(),
            lease_terms{opt.ttl, opt.effective_renew_interval(), opt.auto_renew, opt.max_hold},
            acquired_at, deadline, server_generation)
    , locker_(std::move(locker))
    , names_(std::move(names))
    , keys_(std::move(keys))
    , entry_(std::move(entry))
    , token_(std::move(token))
    , origin_(std::move(origin))
    , fences_(fences_after(origin_.lease_fences, origin_.local_handoffs))
    , cohort_limit_(opt.cohort_limit) {}

lease_store& lock_set_state::store() const noexcept {
    return locker_->store();
}

void lock_set_state::hold() {
    enter_book();
    start();
    locker_->keep_holder_record(ttl()); // status names the holder; a forced unlock tells it
}

asio::awaitable<lease_reply> lock_set_state::release() {
    return store().release_names(keys_, entry_, token_, false, fences_);
}

void lock_set_state::release_detached() {
    store().release_names_in_background(keys_, entry_, token_, false, fences_, [self = shared()] {
        asio::co_spawn(
            self->strand(),
            [](std::shared_ptr<lock_set_state> st) -> asio::awaitable<void> {
                co_await st->release();
            }(self),
            asio::detached);
    });
}

bool lock_set_state::local_taker_may_come() const noexcept {
    return origin_.queue && origin_.queue->waiting() > 0;
}

bool lock_set_state::hand_off_locally() {
    auto& q = origin_.queue;
    if (let_go_ || !q)
        return false;
    auto* next = q->head();
    if (!next || next->baton || q->aborted() ||
        server_generation() != store().server_changes(keys_.front()))
        return false;
    // Another process may be queued for any of the names: the set's holder is not told, so
    // the limit always holds.
    cohort_facts const facts{cohort_limit_,
                             static_cast<std::size_t>(origin_.local_handoffs),
                             true,
                             gone(),
                             deadline(),
                             fences_.front() + 1,
                             origin_.lease_fences.front(),
                             origin_.granted_at};
    if (!may_hand_off_locally(facts, clock_type::now()))
        return false;
    next->baton =
        set_baton{token_,     origin_.lease_fences, origin_.local_handoffs + 1, origin_.granted_at,
                  deadline(), server_generation()};
    set_queue::wake(*next);
    let_go_ = true;
    --q->holders;
    note_released(true);
    return true;
}

void lock_set_state::let_go_on_strand() {
    stop();
    if (hand_off_locally())
        return;
    release_detached();
    after_release();
}

void lock_set_state::after_release() {
    if (let_go_)
        return;
    let_go_ = true;
    note_released(false);
    auto& q = origin_.queue;
    if (!q)
        return;
    --q->holders;
    q->wake_head(); // behind this holder: asks now, after the release
    locker_->synchronizer_state<lock_set_queues>().drop_if_idle(*q, token_);
}

asio::awaitable<lease_reply> lock_set_state::extend_at_server(milliseconds ttl, bool /*renewal*/) {
    auto const reply = co_await store().extend_names(keys_, token_, ttl);
    if (!reply.ec && reply.ours)
        locker_->keep_holder_record(ttl);
    co_return reply;
}

std::uint64_t lock_set_state::current_server_generation() const noexcept {
    return store().server_changes(keys_.front());
}

bool lock_set_state::is_lease(std::string_view key, std::string_view token) const noexcept {
    return token == token_ && std::any_of(keys_.begin(), keys_.end(),
                                          [&](lock_keys const& k) { return k.key == key; });
}

void lock_set_state::give_back_now() noexcept {
    try {
        release_detached();
    } catch (...) {
        // Out of memory: the lease runs out by its ttl.
    }
}

void lock_set_state::join_parts(std::vector<std::shared_ptr<lock_set_state>> const& parts) {
    auto shared = std::make_shared<set_parts>();
    std::vector<std::pair<std::string, std::int64_t>> fenced;
    for (auto const& p : parts) {
        shared->all.push_back(p);
        for (std::size_t i = 0; i < p->names_.size(); ++i)
            fenced.emplace_back(p->names_[i], p->fences_[i]);
    }
    std::sort(fenced.begin(), fenced.end());
    for (auto& [n, f] : fenced) {
        shared->names.push_back(std::move(n));
        shared->fences.push_back(f);
    }
    for (auto const& p : parts)
        p->parts_ = shared;
    others_.assign(parts.begin() + 1, parts.end());
}

std::vector<std::shared_ptr<lock_set_state>> lock_set_state::parts() {
    std::vector<std::shared_ptr<lock_set_state>> all{shared()};
    all.insert(all.end(), others_.begin(), others_.end());
    return all;
}

clock_type::time_point lock_set_state::earliest_deadline() const noexcept {
    auto earliest = deadline();
    for (auto const& p : others_)
        earliest = std::min(earliest, p->deadline());
    return earliest;
}

void lock_set_state::on_lost(loss_reason why) {
    if (parts_)
        for (auto const& weak : parts_->all)
            if (auto p = weak.lock(); p && p.get() != this)
                p->mark_lost(why); // one name's loss is the set's
    if (auto* o = locker_->observer())
        for (std::size_t i = 0; i < names_.size(); ++i)
            o->on_lost({names_[i], fences_[i], why, clock_type::now() - acquired_at()});
    if (!store().logs(log_level::warning))
        return;
    auto const held =
        std::chrono::duration_cast<milliseconds>(clock_type::now() - acquired_at()).count();
    store().log(log_level::warning, fmt::format("the {} '{}' lost after {} ms: {}", lock_set_kind,
                                                shown_names(names_), held, to_string(why)));
}

void lock_set_state::on_renewal(clock_type::duration latency, bool extended, error_code ec) {
    if (auto* o = locker_->observer())
        for (std::size_t i = 0; i < names_.size(); ++i)
            o->on_renewal({names_[i], fences_[i], latency, extended, ec});
    if (ec && ec != error::timeout && store().logs(log_level::debug))
        store().log(log_level::debug,
                    fmt::format("renewal of the {} '{}' failed: {}; retrying", lock_set_kind,
                                shown_names(names_), ec.message()));
}

void lock_set_state::note_acquired(clock_type::time_point call_started, int attempts) const {
    auto* o = locker_->observer();
    if (!o)
        return;
    auto const how = origin_.local_handoffs > 0 ? acquired_by::local_handoff
                     : attempts > 1             ? acquired_by::server_after_wait
                                                : acquired_by::first_attempt;
    for (std::size_t i = 0; i < names_.size(); ++i)
        o->on_acquired({names_[i], fences_[i], clock_type::now() - call_started, attempts, how});
}

void lock_set_state::note_released(bool handed_locally) const {
    auto* o = locker_->observer();
    if (!o || lost())
        return;
    for (std::size_t i = 0; i < names_.size(); ++i)
        o->on_released(
            {names_[i], fences_[i], clock_type::now() - acquired_at(), handed_locally, false});
}

// ------------------------------------------------------------------ for awaiting callers

asio::awaitable<lock_set_outcome> await_lock_set(std::shared_ptr<locker_context> locker,
                                                 std::vector<std::string> names, lock_options opt,
                                                 bool wait) {
    auto strand = locker->strand();
    auto initiation = [strand, op = acquire_lock_sets(std::move(locker), std::move(names),
                                                      std::move(opt), wait)](auto handler) mutable {
        spawn_cancellable(strand, std::move(op), std::move(handler),
                          [](auto h, std::exception_ptr e, lock_set_outcome o) {
                              std::move(h)(e, std::move(o));
                          });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(nothrow_awaitable) const,
                                                  void(std::exception_ptr, lock_set_outcome)>(
        std::move(initiation), nothrow_awaitable);
    if (e)
        std::rethrow_exception(e);
    if (out.ec) {
        // As the lock's: a connection never established throws redis::connect_error.
        if (is_connect_failure(out.ec))
            throw redis::connect_error(out.ec, out.message);
        throw system_error(out.ec, out.message);
    }
    co_return std::move(out);
}

} // namespace colock::detail
