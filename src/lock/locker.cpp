// The lock algorithm over a lease store: local FIFO wait queues sharing one subscription per
// name, the renewal coroutine, and the guard's background release.
#include <colock/locker.hpp>

#include "../detail/completion.hpp"
#include "../detail/context_shutdown.hpp"
#include "../detail/spawn.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "lease_store.hpp"
#include "single_connection_store.hpp"
#include "token.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <list>
#include <random>
#include <unordered_map>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace detail {

// -------------------------------------------------------------------- locker state

// One local waiter of a contended co_lock; lives in its coroutine's frame.
enum class wake_reason {
    none,                   // the timer ran out
    woken,                  // a release was published, or the head before it gave up
    promoted_after_acquire, // the head before it took the lock: no point in asking at once
};

struct waiter {
    explicit waiter(asio::any_io_executor const& ex) : timer(ex) {}
    asio::steady_timer timer;
    wake_reason wake = wake_reason::none;
    std::list<waiter*>::iterator position; // in its name_queue
};

// The local FIFO of waiters on one name, sharing one subscription to its wake channel.
struct name_queue {
    std::list<waiter*> waiters; // a list: leaving from the middle is O(1)
    bool subscribed = false;
    // The server refused the subscription (an ACL user without the channel, or BUSY): the
    // waiters poll, by their backoff, for as long as this queue lives.
    bool subscription_refused = false;
    bool wake_pending = false; // a wake arrived while the head was not sleeping
};

class locker_impl : public std::enable_shared_from_this<locker_impl>,
                    public holds_handlers,
                    public lease_events {
public:
    // The guards' wait_lost handlers, which may own the coroutine that owns the guard.
    void drop_handlers_at_shutdown() noexcept override;

    locker_impl(std::shared_ptr<lease_store> store, std::string prefix)
        : store_(std::move(store))
        , strand_(store_->strand())
        , prefix_(std::move(prefix))
        , rng_(std::random_device{}()) {}

    std::shared_ptr<lease_store> const store_;
    asio::strand<asio::any_io_executor> const strand_; // the store's
    std::string const prefix_;
    // On the strand:
    std::unordered_map<std::string, std::shared_ptr<name_queue>> queues_; // by channel
    std::minstd_rand rng_;
    // Guards that hold a lock taken through this locker, so a reconnection can check their
    // leases at once and a server change can mark them lost. Entries leave in guard_state::stop.
    std::list<std::weak_ptr<guard_state>> held_;

    // One acquire. The caller's cancellation and the wait deadline reach it as *total*
    // cancellation, which the store honours only while the request is unsent; once sent, its
    // reply is always read, so a lock it grants is never lost track of.
    asio::awaitable<grant_result> attempt(lock_keys const& keys, std::string const& token,
                                          milliseconds ttl, asio::cancellation_state cs,
                                          clock_type::time_point deadline) {
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
        auto r = co_await store_->grant(keys, token, ttl, stop->slot());
        if (caller_slot.is_connected())
            caller_slot.clear();
        if (deadline_timer)
            deadline_timer->cancel();
        co_return r;
    }

    // ---------------------------------------------------------------- waiting

    std::shared_ptr<name_queue> join(std::string const& channel, waiter& w) {
        auto& q = queues_[channel];
        if (!q)
            q = std::make_shared<name_queue>();
        w.position = q->waiters.insert(q->waiters.end(), &w);
        return q;
    }

    void leave(std::string const& channel, std::shared_ptr<name_queue> const& q, waiter& w,
               bool acquired) {
        bool const was_head = q->waiters.front() == &w;
        q->waiters.erase(w.position);
        if (q->waiters.empty()) {
            if (q->subscribed)
                store_->unsubscribe(channel); // nobody waits here any more
            auto it = queues_.find(channel);
            if (it != queues_.end() && it->second == q)
                queues_.erase(it);
        } else if (was_head) {
            wake(*q->waiters.front(),
                 acquired ? wake_reason::promoted_after_acquire : wake_reason::woken);
        }
    }

    static void wake(waiter& w, wake_reason why = wake_reason::woken) {
        w.wake = why;
        w.timer.cancel();
    }

    void on_wake(std::string const& channel) override {
        auto it = queues_.find(channel);
        if (it == queues_.end())
            return;
        auto& q = *it->second;
        if (q.waiters.empty())
            return;
        // One local waiter, not a herd: the head tries, the rest stay asleep.
        q.wake_pending = true;
        wake(*q.waiters.front());
    }

    void on_reconnect() override;
    void on_server_change() override;

    milliseconds backoff(retry_options const& retry, int attempt) {
        // Capped well inside int64 so the conversion back cannot overflow; 2^62 ms is still
        // "very long" (146 million years), and the caller saturates the sleep's end.
        constexpr double cap = 4611686018427387904.0; // 2^62
        double ceiling = static_cast<double>(retry.initial.count()) *
                         std::pow(retry.multiplier, std::min(attempt, 60));
        ceiling = std::min({ceiling, static_cast<double>(retry.max.count()), cap});
        std::uniform_real_distribution<double> jitter(0.0, ceiling);
        return milliseconds(static_cast<std::int64_t>(jitter(rng_)) + 1);
    }

    // ---------------------------------------------------------------- lock

    struct lock_outcome {
        bool outcome_unknown = false; // an attempt failed after it may have been applied
        error_code ec;
        std::string message; // names the lock; the server's text for server errors
        std::shared_ptr<guard_state> state;
    };

    static void set_failure(lock_outcome& out, std::string const& name, error_code ec,
                            std::string const& detail_text) {
        // Without the source location Asio attaches: the message is about the lock, not
        // about where in Asio the error was noticed.
        out.ec = error_code(ec.value(), ec.category());
        out.message = detail_text.empty() ? fmt::format("colock: lock '{}'", name)
                                          : fmt::format("colock: lock '{}': {}", name, detail_text);
    }

    // When a waiting co_lock stops: wait_timeout, and first_connect_timeout while the
    // connection has never been established.
    struct wait_deadlines {
        clock_type::time_point wait;
        clock_type::time_point first_connect;
    };

    // Whether a waiting co_lock tries again after an attempt that failed with `ec`.
    static bool worth_retrying(error_code ec, std::string const& server_text,
                               wait_deadlines const& deadlines) {
        if (is_connect_failure(ec))
            return !is_lasting_connect_failure(ec) && clock_type::now() < deadlines.first_connect;
        return is_transient(ec, server_text); // the caller checks the wait deadline
    }

    // What a failure reports after the lock's name: the server's text for its errors, and for
    // a connection that could not be established, the connection's account of why (endpoint
    // and cause), which the bare error code lacks.
    std::string failure_text(error_code ec, std::string const& server_text, lock_options const& opt,
                             bool waited) const {
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
        return fmt::format("no connection to the Redis server within {} ms: {}", budget.count(),
                           why);
    }

    // error::timeout's text; names the connection when it is what kept the lock away.
    std::string timeout_text(lock_options const& opt) const {
        std::string text = fmt::format("not acquired within {} ms", opt.wait_timeout->count());
        if (store_->is_connected())
            return text;
        std::string why = store_->last_error_text();
        return why.empty() ? text + "; the connection to the Redis server is not established"
                           : fmt::format("{}; the connection to the Redis server is not "
                                         "established: {}",
                                         text, why);
    }

    asio::awaitable<void> wait_contended(lock_keys const& keys, std::string const& token,
                                         std::string const& name, lock_options const& opt,
                                         asio::cancellation_state cs,
                                         wait_deadlines const& deadlines, milliseconds sleep,
                                         lock_outcome& out);

    static asio::awaitable<void> release_detached(std::shared_ptr<locker_impl> self, lock_keys keys,
                                                  std::string token) {
        co_await self->store_->release(keys, token);
    }

    // `keep_alive` holds the locker for as long as the coroutine runs.
    asio::awaitable<lock_outcome> lock(std::shared_ptr<locker_impl> keep_alive, std::string name,
                                       lock_options opt, bool wait);

    // Runs one attempt; on success builds the guard into `out`. A cancellation that arrived
    // meanwhile wins, and a lock granted to it is given back first.
    asio::awaitable<std::optional<grant_result>>
    try_once(lock_keys const& keys, std::string const& token, std::string const& name,
             lock_options const& opt, asio::cancellation_state cs, clock_type::time_point deadline,
             lock_outcome& out);

    std::shared_ptr<guard_state> make_guard(std::string name, lock_keys keys, std::string token,
                                            std::int64_t fence, lock_options const& opt,
                                            clock_type::time_point attempt_start);
};

// -------------------------------------------------------------------- guard state

struct guard_state : std::enable_shared_from_this<guard_state> {
    guard_state(std::shared_ptr<locker_impl> owner, std::string lock_name, lock_keys lock_keys_,
                std::string lock_token, std::int64_t fence_value, lock_options const& options)
        : locker(std::move(owner))
        , name(std::move(lock_name))
        , keys(std::move(lock_keys_))
        , token(std::move(lock_token))
        , fence(fence_value)
        , opt(options)
        , ttl(options.ttl)
        , renew_timer(locker->strand_) {}

    std::shared_ptr<locker_impl> locker;
    std::string const name;
    lock_keys const keys;
    std::string const token;
    std::int64_t const fence;
    lock_options const opt;
    std::atomic<bool> lost{false};
    std::atomic<bool> released{false};

    // On the locker's strand:
    milliseconds ttl;
    clock_type::time_point acquired_at;
    // Local bound of the lease: start of the last successful acquire or extend + its ttl. The
    // server's expiry is never earlier, since the server started counting later. Atomic so
    // owns_lock() can check it from any thread.
    std::atomic<clock_type::rep> lease_deadline_ticks{0};

    clock_type::time_point lease_deadline() const {
        return clock_type::time_point(clock_type::duration(lease_deadline_ticks.load()));
    }
    void set_lease_deadline(clock_type::time_point t) {
        lease_deadline_ticks = t.time_since_epoch().count();
    }
    bool lease_running() const { return clock_type::now() < lease_deadline(); }
    asio::cancellation_signal renew_stop; // emitted (on the strand) to end the renewal
    // The renewal's sleep; cancelled (not the renewal itself) to make it check the lease now.
    asio::steady_timer renew_timer;
    // This guard's entry in locker->held_, while it holds.
    std::optional<std::list<std::weak_ptr<guard_state>>::iterator> registration;

    // A pending wait_lost. Its cancellation handler is installed on the caller's thread
    // before anything is posted, so no cancellation can be missed; `done` makes sure exactly
    // one of (lost, let go, cancelled) completes it.
    struct lost_waiter {
        // Move-constructed only: Boost 1.81's any_completion_handler move *assignment*
        // recurses forever (it copies from an lvalue through its converting constructor).
        explicit lost_waiter(asio::any_completion_handler<void(error_code)> h)
            : handler(std::move(h)), slot(asio::get_associated_cancellation_slot(handler)) {}

        asio::any_completion_handler<void(error_code)> handler;
        asio::cancellation_slot slot;
        bool done = false;
    };
    std::vector<std::shared_ptr<lost_waiter>> lost_waiters;

    void finish_waiter(std::shared_ptr<lost_waiter> const& w, error_code ec) {
        if (w->done)
            return;
        w->done = true;
        complete_later(locker->strand_, std::move(w->handler), w->slot, ec);
    }

    void finish_waiters() {
        auto waiters = std::move(lost_waiters);
        lost_waiters.clear();
        for (auto& w : waiters)
            finish_waiter(w, lost ? error_code{} : error_code(error::not_held));
    }
    // The renewal (or, without auto_renew, the lease watcher that wait_lost needs) runs.
    bool watching = false;

    // Renewal and extend() take turns at the server: a renewal with the old ttl that reached
    // it after extend() (one sent while extend() was on its way, or retried after NOSCRIPT)
    // would shorten the lease extend() has just reported.
    struct turn_waiter {
        turn_waiter(guard_state& st) : owner(st), timer(st.locker->strand_) {}
        turn_waiter(turn_waiter const&) = delete;
        ~turn_waiter() { std::erase(owner.turn_queue, this); } // a frame destroyed unresumed
        guard_state& owner;
        asio::steady_timer timer;
        bool granted = false;
    };
    bool turn_taken = false;
    std::deque<turn_waiter*> turn_queue;

    void give_turn() {
        if (turn_queue.empty()) {
            turn_taken = false;
            return;
        }
        auto* next = turn_queue.front();
        turn_queue.pop_front();
        next->granted = true;
        next->timer.cancel();
    }

    void start_watch();

    milliseconds renew_interval() const {
        auto const configured = opt.effective_renew_interval();
        return configured < ttl ? configured : ttl / 3;
    }

    void mark_lost() {
        if (released)
            return;
        lost = true;
        finish_waiters();
    }

    // Stops renewal and wakes wait_lost. On the strand; before any release is sent, so no
    // renewal can be queued behind the release and revive the lock.
    void stop() {
        renew_stop.emit(asio::cancellation_type::terminal);
        finish_waiters();
        if (registration) {
            locker->held_.erase(*registration);
            registration.reset();
        }
    }
};

namespace {

// Waits for the guard's turn to send an extend (see guard_state::turn_waiter); false when
// cancelled first, holding nothing. On the locker's strand.
asio::awaitable<bool> take_turn(guard_state& st) {
    if (!st.turn_taken) {
        st.turn_taken = true;
        co_return true;
    }
    auto cs = co_await asio::this_coro::cancellation_state;
    guard_state::turn_waiter w(st);
    w.timer.expires_at(clock_type::time_point::max());
    st.turn_queue.push_back(&w);
    co_await w.timer.async_wait(nothrow_awaitable);
    if (!w.granted)
        co_return false; // cancelled; the destructor leaves the queue
    if (cancelled(cs)) {
        st.give_turn();
        co_return false;
    }
    co_return true;
}

// Gives the turn back when the sending coroutine is done with it, however it ends.
struct turn_holder {
    guard_state* st = nullptr;
    turn_holder() = default;
    turn_holder(turn_holder const&) = delete;
    ~turn_holder() {
        if (st)
            st->give_turn();
    }
};

asio::awaitable<void> renew_loop(std::shared_ptr<guard_state> st) {
    using namespace asio::experimental::awaitable_operators;
    auto cs = co_await asio::this_coro::cancellation_state;
    auto& timer = st->renew_timer; // st owns it and outlives this frame
    auto& store = *st->locker->store_;
    asio::steady_timer lease_end(st->locker->strand_);
    for (;;) {
        auto next = clock_type::now() + st->renew_interval();
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
                    st->mark_lost();
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
                st->mark_lost(); // no renewal succeeded before the lease ran out
                co_return;
            }
            turn_holder turn;
            if (!co_await take_turn(*st))
                co_return; // stopped while extend() had the turn
            turn.st = st.get();
            if (st->released || st->lost)
                co_return;
            auto const started = clock_type::now();
            auto const ttl = st->ttl;
            lease_end.expires_at(st->lease_deadline());
            auto outcome = co_await (store.extend(st->keys, st->token, ttl) ||
                                     lease_end.async_wait(nothrow_awaitable));
            turn.st = nullptr;
            st->give_turn();
            if (cancelled(cs) || st->released)
                co_return;
            if (outcome.index() == 1)
                continue; // no answer by the deadline: lost, unless extend() moved it
            auto const reply = std::get<0>(outcome);
            // An unreadable reply (unexpected_reply) is retried as a network error is.
            if (!reply.ec) {
                if (reply.ours) {
                    st->set_lease_deadline(started + ttl);
                    if (st->ttl != ttl)
                        continue; // extend() changed the lease meanwhile: apply it again now
                    break;
                }
                st->mark_lost(); // deleted, expired or taken over
                co_return;
            }
            auto const retry_at =
                clock_type::now() + std::min(st->renew_interval() / 4, milliseconds{250});
            timer.expires_at(std::min(retry_at, st->lease_deadline()));
            co_await timer.async_wait(nothrow_awaitable);
            if (cancelled(cs) || st->released)
                co_return;
        }
    }
}

// Coroutines take what they use by value: lambdas with captures that outlive their first
// suspension are a classic source of dangling references.

// Stops renewal, then releases. On the locker's strand.
asio::awaitable<std::tuple<error_code, bool>> release_held(std::shared_ptr<guard_state> st) {
    st->stop();
    auto const reply = co_await st->locker->store_->release(st->keys, st->token);
    co_return std::tuple{reply.ec, reply.ours};
}

asio::awaitable<std::tuple<error_code, bool>> extend_held(std::shared_ptr<guard_state> st,
                                                          milliseconds ttl) {
    turn_holder turn;
    if (!co_await take_turn(*st))
        co_return std::tuple{error_code(asio::error::operation_aborted), false};
    turn.st = st.get();
    auto const started = clock_type::now();
    auto const reply = co_await st->locker->store_->extend(st->keys, st->token, ttl);
    if (reply.ec)
        co_return std::tuple{reply.ec, false};
    if (reply.ours) {
        st->ttl = ttl;
        st->set_lease_deadline(started + ttl);
    } else {
        st->mark_lost();
    }
    co_return std::tuple{error_code{}, reply.ours};
}

// Releases in the background, for a guard that went away while holding or whose loss is known.
// The first attempt is handed to the store here, on the caller's thread, so that it is queued
// before anything the caller does next: a close() right after still sends it, and nothing
// reopens the connection later. A passing error (a lost connection, BUSY, LOADING) hands the
// release to the retrying one on the strand.
void release_in_background(std::shared_ptr<guard_state> st) {
    asio::dispatch(st->locker->strand_, [st] { st->stop(); });
    auto const store = st->locker->store_;
    auto const& keys = st->keys;
    auto const& token = st->token;
    store->release_in_background(keys, token, [st = std::move(st)] {
        asio::co_spawn(st->locker->strand_, release_held(st), asio::detached);
    });
}

} // namespace

void locker_impl::drop_handlers_at_shutdown() noexcept {
    std::vector<std::shared_ptr<guard_state::lost_waiter>> dropped; // destroyed last
    for (auto const& weak : held_)
        if (auto st = weak.lock())
            for (auto& w : std::exchange(st->lost_waiters, {}))
                dropped.push_back(std::move(w));
}

void guard_state::start_watch() {
    if (watching)
        return;
    watching = true;
    asio::co_spawn(locker->strand_, renew_loop(shared_from_this()),
                   asio::bind_cancellation_slot(renew_stop.slot(), asio::detached));
}

std::shared_ptr<guard_state> locker_impl::make_guard(std::string name, lock_keys keys,
                                                     std::string token, std::int64_t fence,
                                                     lock_options const& opt,
                                                     clock_type::time_point attempt_start) {
    auto st = std::make_shared<guard_state>(shared_from_this(), std::move(name), std::move(keys),
                                            std::move(token), fence, opt);
    st->acquired_at = attempt_start;
    st->set_lease_deadline(attempt_start + opt.ttl);
    st->registration = held_.insert(held_.end(), st);
    if (opt.auto_renew)
        st->start_watch();
    return st;
}

asio::awaitable<std::optional<grant_result>>
locker_impl::try_once(lock_keys const& keys, std::string const& token, std::string const& name,
                      lock_options const& opt, asio::cancellation_state cs,
                      clock_type::time_point deadline, lock_outcome& out) {
    auto started = clock_type::now();
    auto server_changes = store_->server_changes();
    grant_result r = co_await attempt(keys, token, opt.ttl, cs, deadline);
    // Granted by a server instance that has been replaced since (its keys may be gone, and the
    // guards it granted were marked lost): ask the new one. Same token, so this is idempotent.
    for (int rounds = 0; !r.ec && r.granted && !cancelled(cs) && rounds < 3 &&
                         store_->server_changes() != server_changes;
         ++rounds) {
        started = clock_type::now();
        server_changes = store_->server_changes();
        r = co_await attempt(keys, token, opt.ttl, cs, deadline);
    }
    if (!r.ec && r.granted && store_->server_changes() != server_changes) {
        r.ec = redis::error::connection_lost; // the server keeps changing: give up this attempt
        r.outcome_unknown = true;
    }
    if (r.outcome_unknown)
        out.outcome_unknown = true; // it may have been applied: release on the way out
    if (!r.ec && r.granted && cancelled(cs)) {
        auto const released = co_await store_->release(keys, token);
        if (released.ec)
            out.outcome_unknown = true; // try once more on the way out
        r.granted = false;
        r.ec = asio::error::operation_aborted;
    }
    if (r.ec == asio::error::operation_aborted && !cancelled(cs))
        r.ec = error::timeout; // stopped by the wait deadline before it was sent
    if (!r.ec && r.granted)
        out.state = make_guard(name, keys, token, r.fence, opt, started);
    co_return r;
}

asio::awaitable<locker_impl::lock_outcome>
locker_impl::lock(std::shared_ptr<locker_impl> keep_alive, std::string name, lock_options opt,
                  bool wait) {
    co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    auto cs = co_await asio::this_coro::cancellation_state;

    lock_keys keys(prefix_, name);
    std::string const token = random_token();
    auto const start = clock_type::now();
    wait_deadlines deadlines;
    deadlines.wait =
        opt.wait_timeout ? saturating_add(start, *opt.wait_timeout) : clock_type::time_point::max();
    deadlines.first_connect =
        std::min(deadlines.wait, saturating_add(start, opt.first_connect_timeout));
    auto const wait_deadline = deadlines.wait;
    lock_outcome out;

    auto fail = [&](error_code ec, std::string const& detail_text) {
        set_failure(out, name, ec, detail_text);
    };

    bool finished = false;
    if (cancelled(cs)) {
        fail(asio::error::operation_aborted, {});
        finished = true;
    }

    // The uncontended path: one command, no subscription. A co_lock that finds others of
    // this process already waiting on the name queues behind them instead: FIFO, and no
    // attempt that would fail anyway.
    auto const queued = queues_.find(keys.channel);
    bool const others_waiting = wait && queued != queues_.end() && !queued->second->waiters.empty();
    milliseconds sleep = opt.ttl;
    if (!finished && !others_waiting) {
        auto first = co_await try_once(keys, token, name, opt, cs, wait_deadline, out);
        if (first->granted)
            co_return out;
        if (first->ec == error::timeout) {
            fail(first->ec, timeout_text(opt));
            finished = true;
        } else if (first->ec &&
                   !(wait && worth_retrying(first->ec, first->server_text, deadlines))) {
            fail(first->ec, failure_text(first->ec, first->server_text, opt, wait));
            finished = true;
        } else if (cancelled(cs)) { // requested while the attempt was in flight: reported
            fail(asio::error::operation_aborted, {});
            finished = true;
        } else if (!wait) {
            co_return out; // held by someone else: an empty result
        } else {
            // Held, or the connection was lost (then try again after a backoff).
            sleep = first->ec ? opt.retry.max : first->holder_ttl;
        }
    }
    if (!finished && clock_type::now() >= wait_deadline) {
        fail(error::timeout, timeout_text(opt));
        finished = true;
    }

    // Contended: its own coroutine, so the uncontended call above keeps a small frame.
    if (!finished)
        co_await wait_contended(keys, token, name, opt, cs, deadlines, sleep, out);

    // An attempt that failed after it may have been applied could have left our token in the
    // key: release it (the script checks the token, so this is always safe).
    // In the background: the connection may be down, and the caller should not wait for it.
    if (out.ec && out.outcome_unknown)
        asio::co_spawn(strand_, release_detached(keep_alive, keys, token), asio::detached);
    co_return out;
}

asio::awaitable<void> locker_impl::wait_contended(lock_keys const& keys, std::string const& token,
                                                  std::string const& name, lock_options const& opt,
                                                  asio::cancellation_state cs,
                                                  wait_deadlines const& deadlines,
                                                  milliseconds sleep, lock_outcome& out) {
    auto const wait_deadline = deadlines.wait;
    auto fail = [&](error_code ec, std::string const& detail_text) {
        set_failure(out, name, ec, detail_text);
    };
    // Contended: queue locally. The head subscribes (once per name) and retries; the others
    // sleep until they become the head.
    waiter self_waiter(strand_);
    auto queue = join(keys.channel, self_waiter);
    struct leave_on_exit {
        locker_impl* impl;
        std::string const& channel;
        std::shared_ptr<name_queue> const& q;
        waiter& w;
        bool acquired = false;
        ~leave_on_exit() { impl->leave(channel, q, w, acquired); }
    } leave_guard{this, keys.channel, queue, self_waiter};

    int attempts = 1;
    bool need_attempt = false; // the first attempt's answer still stands
    for (;;) {
        bool const head = queue->waiters.front() == &self_waiter;
        if (head && !queue->subscribed && !queue->subscription_refused) {
            // Subscribe, then try: a release published after this attempt reaches us.
            queue->subscribed = true;
            auto [sec, refusal] = co_await store_->subscribe(keys.channel);
            if (sec) {
                // Not subscribed (nothing to undo on leaving): poll by the backoff instead. A
                // refusal (an ACL user without the channel: NOPERM) stands for this queue; the
                // connection's last_error_text() keeps the server's words.
                queue->subscribed = false;
                queue->subscription_refused = sec == redis::error::server_error;
            }
            need_attempt = true;
            if (cancelled(cs)) {
                fail(asio::error::operation_aborted, {});
                co_return;
            }
        }
        if (head && need_attempt) {
            queue->wake_pending = false;
            auto r = co_await try_once(keys, token, name, opt, cs, wait_deadline, out);
            ++attempts;
            if (r->granted) {
                leave_guard.acquired = true;
                co_return;
            }
            if (cancelled(cs)) { // arrived while the attempt was in flight
                fail(asio::error::operation_aborted, {});
                co_return;
            }
            if (r->ec == error::timeout) {
                fail(r->ec, timeout_text(opt));
                co_return;
            }
            if (r->ec) {
                // A lost connection leaves the attempt's outcome unknown; the acquire script
                // is idempotent for our token, so trying again later is safe.
                if (!worth_retrying(r->ec, r->server_text, deadlines)) {
                    fail(r->ec, failure_text(r->ec, r->server_text, opt, true));
                    co_return;
                }
                sleep = opt.retry.max;
            } else {
                sleep = r->holder_ttl;
            }
        }
        need_attempt = true;

        auto const now = clock_type::now();
        if (now >= wait_deadline) {
            fail(error::timeout, timeout_text(opt));
            co_return;
        }
        if (head && queue->wake_pending)
            continue; // released while we were busy: try again at once
        auto until = wait_deadline;
        if (head) {
            auto const nap = std::min(sleep, backoff(opt.retry, attempts - 1));
            until = std::min(until, saturating_add(now, std::max(nap, milliseconds{1})));
        }
        self_waiter.wake = wake_reason::none;
        self_waiter.timer.expires_at(until);
        co_await self_waiter.timer.async_wait(nothrow_awaitable);
        if (cancelled(cs)) {
            fail(asio::error::operation_aborted, {});
            co_return;
        }
        if (self_waiter.wake == wake_reason::promoted_after_acquire) {
            // The previous head took the lock: wait for its release rather than ask now.
            need_attempt = false;
            sleep = opt.ttl;
        } else if (!head && self_waiter.wake == wake_reason::none) {
            need_attempt = false; // woken by the wait deadline only; checked above
        }
    }
}

} // namespace detail

void detail::locker_impl::on_reconnect() {
    // Messages published while the connection was down were missed: let every head look.
    for (auto& [channel, q] : queues_)
        if (!q->waiters.empty()) {
            q->wake_pending = true;
            wake(*q->waiters.front());
        }
    // The outage may have outlasted a lease, or the server may have lost its keys: renew now
    // rather than at the next interval, so a loss is known one round trip after reconnecting.
    for (auto const& weak : held_)
        if (auto st = weak.lock(); st && st->opt.auto_renew)
            st->renew_timer.cancel();
}

void detail::locker_impl::on_server_change() {
    // Another server instance: the locks we held were on the old one. A restart without
    // persistence lost them, so someone else may already hold them; say so at once.
    for (auto const& weak : held_)
        if (auto st = weak.lock()) {
            st->mark_lost();
            st->renew_timer.cancel();
        }
}

// -------------------------------------------------------------------- lock_guard

lock_guard::lock_guard() noexcept = default;
lock_guard::lock_guard(std::shared_ptr<detail::guard_state> state) noexcept
    : state_(std::move(state)) {}
lock_guard::lock_guard(lock_guard&& other) noexcept : state_(std::move(other.state_)) {}

lock_guard& lock_guard::operator=(lock_guard&& other) noexcept {
    if (this != &other) {
        abandon();
        state_ = std::move(other.state_);
    }
    return *this;
}

lock_guard::~lock_guard() {
    abandon();
}

void lock_guard::abandon() noexcept {
    if (!state_)
        return;
    auto st = std::move(state_);
    if (st->released.exchange(true))
        return;
    try {
        detail::release_in_background(std::move(st));
    } catch (...) {
        // Out of memory while posting: the lease runs out by its TTL.
    }
}

namespace {
std::string const empty_string;
}

std::string const& lock_guard::name() const noexcept {
    return state_ ? state_->name : empty_string;
}
std::string const& lock_guard::token() const noexcept {
    return state_ ? state_->token : empty_string;
}
std::int64_t lock_guard::fence() const noexcept {
    return state_ ? state_->fence : 0;
}
bool lock_guard::owns_lock() const noexcept {
    return state_ && !state_->lost && !state_->released && state_->lease_running();
}
std::chrono::steady_clock::time_point lock_guard::lease_expiry() const noexcept {
    return state_ ? state_->lease_deadline() : std::chrono::steady_clock::time_point{};
}
bool lock_guard::lost() const noexcept {
    // Without renewal nobody marks the end of the lease: it is lost when it runs out.
    return state_ && (state_->lost || (!state_->released && !state_->lease_running()));
}

void lock_guard::start_wait_lost(
    boost::asio::any_completion_handler<void(boost::system::error_code)> handler) {
    auto st = state_;
    if (!st) {
        auto ex = asio::get_associated_executor(handler);
        asio::dispatch(ex, [h = std::move(handler)]() mutable {
            std::move(h)(make_error_code(error::not_held));
        });
        return;
    }
    using waiter_type = detail::guard_state::lost_waiter;
    auto w = std::make_shared<waiter_type>(std::move(handler));
    if (w->slot.is_connected()) {
        // Installed here, on the caller's thread, where the caller emits.
        w->slot.assign([weak_w = std::weak_ptr<waiter_type>(w),
                        weak_st = std::weak_ptr<detail::guard_state>(st)](asio::cancellation_type) {
            auto cw = weak_w.lock();
            auto cst = weak_st.lock();
            if (!cw || !cst)
                return;
            asio::dispatch(cst->locker->strand_, [cw, cst] {
                std::erase(cst->lost_waiters, cw);
                cst->finish_waiter(cw, asio::error::operation_aborted);
            });
        });
    }
    asio::dispatch(st->locker->strand_, [st, w] {
        if (w->done)
            return; // cancelled already
        if (st->lost || st->released) {
            st->finish_waiter(w, st->lost ? error_code{} : error_code(error::not_held));
            return;
        }
        st->start_watch(); // without auto_renew, someone must notice the lease's end
        st->lost_waiters.push_back(w);
    });
}

asio::awaitable<void> lock_guard::wait_lost() {
    auto [ec] = co_await async_wait_lost(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted)
        throw system_error(ec, "colock: wait_lost");
}

asio::awaitable<bool> lock_guard::extend(std::chrono::milliseconds ttl) {
    auto st = state_;
    if (!st || st->released)
        throw system_error(make_error_code(error::not_held), "colock: extend");
    if (ttl.count() <= 0 || ttl > max_lock_ttl)
        throw system_error(make_error_code(error::invalid_argument),
                           fmt::format("colock: extend of lock '{}': ttl must be positive and at "
                                       "most max_lock_ttl ({} ms), got {} ms",
                                       st->name, max_lock_ttl.count(), ttl.count()));
    if (st->lost)
        co_return false;
    // On the locker's strand, where the renewal reads ttl and lease_deadline.
    using extend_result = std::tuple<error_code, bool>;
    // Named, capturing no destructor (see run_lock); `st` keeps the state alive meanwhile.
    auto initiation = [raw = st.get(), ttl](auto handler) {
        auto state = raw->shared_from_this();
        auto strand = state->locker->strand_;
        detail::spawn_cancellable(
            strand, detail::extend_held(std::move(state), ttl), std::move(handler),
            [](auto h, std::exception_ptr e, extend_result r) { std::move(h)(e, std::move(r)); });
    };
    auto [ex, result] = co_await asio::async_initiate<decltype(detail::nothrow_awaitable) const,
                                                      void(std::exception_ptr, extend_result)>(
        std::move(initiation), detail::nothrow_awaitable);
    if (ex)
        std::rethrow_exception(ex);
    auto [ec, ours] = result;
    if (ec)
        throw system_error(ec, fmt::format("colock: extend of lock '{}'", st->name));
    co_return ours;
}

namespace {

// Completes an operation decided at its initiation: never inside the initiating call, on the
// handler's executor (or `fallback`'s, for a guard that has no locker).
template <class Handler, class Executor, class... Args>
void complete_soon(Handler handler, Executor const& fallback, Args... args) {
    asio::post(fallback, [handler = std::move(handler), fallback,
                          ... args = std::move(args)]() mutable {
        auto ex = asio::get_associated_executor(handler, fallback);
        asio::dispatch(ex, [handler = std::move(handler), ... args = std::move(args)]() mutable {
            std::move(handler)(std::move(args)...);
        });
    });
}

} // namespace

void lock_guard::validate_extend(std::chrono::milliseconds ttl) {
    if (ttl.count() <= 0 || ttl > max_lock_ttl)
        throw system_error(make_error_code(error::invalid_argument),
                           fmt::format("colock: extend: ttl must be positive and at most "
                                       "max_lock_ttl ({} ms), got {} ms",
                                       max_lock_ttl.count(), ttl.count()));
}

void lock_guard::start_unlock(std::shared_ptr<detail::guard_state> st, result_handler handler) {
    if (!st || st->released.exchange(true)) {
        auto fallback = st ? st->locker->strand_.get_inner_executor()
                           : asio::any_io_executor(asio::system_executor());
        complete_soon(std::move(handler), fallback, error_code{}, false);
        return;
    }
    auto const io_executor = st->locker->strand_.get_inner_executor();
    if (st->lost) {
        detail::release_in_background(std::move(st)); // as unlock(): false at once
        complete_soon(std::move(handler), io_executor, error_code{}, false);
        return;
    }
    auto strand = st->locker->strand_;
    asio::co_spawn(strand, detail::release_held(std::move(st)),
                   asio::bind_cancellation_slot(
                       asio::cancellation_slot(),
                       [handler = std::move(handler),
                        io_executor](std::exception_ptr e, std::tuple<error_code, bool> r) mutable {
                           auto [ec, ours] = r;
                           if (e)
                               ec = error::unexpected_reply;
                           complete_soon(std::move(handler), io_executor,
                                         error_code(ec.value(), ec.category()), ours);
                       }));
}

void lock_guard::start_extend(std::shared_ptr<detail::guard_state> st,
                              std::chrono::milliseconds ttl, result_handler handler) {
    if (!st || st->released) {
        auto fallback = st ? st->locker->strand_.get_inner_executor()
                           : asio::any_io_executor(asio::system_executor());
        complete_soon(std::move(handler), fallback, error_code(error::not_held), false);
        return;
    }
    if (st->lost) {
        complete_soon(std::move(handler), st->locker->strand_.get_inner_executor(), error_code{},
                      false);
        return;
    }
    auto strand = st->locker->strand_;
    using extend_result = std::tuple<error_code, bool>;
    detail::spawn_cancellable(strand, detail::extend_held(std::move(st), ttl), std::move(handler),
                              [](result_handler h, std::exception_ptr e, extend_result r) {
                                  auto [ec, ours] = r;
                                  if (e)
                                      ec = error::unexpected_reply;
                                  std::move(h)(error_code(ec.value(), ec.category()), ours);
                              });
}

asio::awaitable<bool> lock_guard::unlock() {
    auto st = state_;
    if (!st || st->released.exchange(true))
        co_return false;
    if (st->lost) {
        // Known lost: the answer is false whatever the server says, so do not wait for it
        // (it may be down). The release still goes out in the background, in case the key
        // is still ours there.
        detail::release_in_background(std::move(st));
        co_return false;
    }
    // Its own coroutine on the locker's strand, not reachable by our caller's cancellation:
    // a cancelled caller still gives the lock back.
    auto [ex, result] =
        co_await asio::co_spawn(st->locker->strand_, detail::release_held(st),
                                asio::bind_cancellation_slot(asio::cancellation_slot(),
                                                             asio::as_tuple(asio::use_awaitable)));
    if (ex)
        std::rethrow_exception(ex);
    auto [ec, ours] = result;
    if (ec)
        throw system_error(
            error_code(ec.value(), ec.category()),
            ec == error::timeout
                ? fmt::format("colock: unlock of lock '{}': the release was not confirmed within "
                              "{} ms; the lease ends by its ttl",
                              st->name, detail::release_timeout.count())
                : fmt::format("colock: unlock of lock '{}'", st->name));
    co_return ours;
}

// -------------------------------------------------------------------- locker

locker::locker(redis::connection& conn, std::string key_prefix)
    : impl_(std::make_shared<detail::locker_impl>(detail::make_single_connection_store(conn),
                                                  std::move(key_prefix))) {
    impl_->store_->listen(impl_, impl_->prefix_);
    detail::context_shutdown::watch(impl_->strand_.get_inner_executor(), impl_);
}

locker::~locker() {
    impl_->store_->stop_listening();
}

std::string const& locker::key_prefix() const noexcept {
    return impl_->prefix_;
}

namespace {

using outcome_type = detail::locker_impl::lock_outcome;

// co_lock and co_try_lock complete with the whole outcome, whose message names the lock.
constexpr auto outcome_awaitable = asio::as_tuple(asio::use_awaitable);

asio::awaitable<outcome_type> run_lock(detail::locker_impl* impl, std::string name,
                                       lock_options opt, bool wait) {
    // A named initiation that captures nothing with a destructor: GCC 12 may destroy a
    // temporary of a co_await expression twice, which for a captured shared_ptr would drop a
    // reference that was never taken. The caller's locker keeps `impl` alive meanwhile.
    auto initiation = [impl, wait](auto handler, std::string n, lock_options o) {
        auto self = impl->shared_from_this();
        detail::spawn_cancellable(self->strand_, self->lock(self, std::move(n), std::move(o), wait),
                                  std::move(handler),
                                  [](auto h, std::exception_ptr ex, outcome_type result) {
                                      std::move(h)(ex, std::move(result));
                                  });
    };
    auto [e, out] = co_await asio::async_initiate<decltype(outcome_awaitable) const,
                                                  void(std::exception_ptr, outcome_type)>(
        std::move(initiation), outcome_awaitable, std::move(name), std::move(opt));
    if (e)
        std::rethrow_exception(e);
    if (out.ec)
        throw system_error(out.ec, out.message);
    co_return std::move(out);
}

} // namespace

void locker::start_lock(std::string name, lock_options opt, lock_handler handler) {
    detail::spawn_cancellable(
        impl_->strand_, impl_->lock(impl_, std::move(name), std::move(opt), true),
        std::move(handler), [](lock_handler h, std::exception_ptr e, outcome_type out) {
            if (e) {
                std::move(h)(make_error_code(error::unexpected_reply), lock_guard{});
                return;
            }
            std::move(h)(out.ec, lock_guard(std::move(out.state)));
        });
}

void locker::start_try_lock(std::string name, lock_options opt, try_lock_handler handler) {
    detail::spawn_cancellable(
        impl_->strand_, impl_->lock(impl_, std::move(name), std::move(opt), false),
        std::move(handler), [](try_lock_handler h, std::exception_ptr e, outcome_type out) {
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
    validate(name, opt);
    auto out = co_await run_lock(impl_.get(), std::move(name), std::move(opt), true);
    co_return lock_guard(std::move(out.state));
}

asio::awaitable<std::optional<lock_guard>> locker::co_try_lock(std::string name, lock_options opt) {
    validate(name, opt);
    auto out = co_await run_lock(impl_.get(), std::move(name), std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return lock_guard(std::move(out.state));
}

} // namespace colock
