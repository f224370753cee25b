// What a lock_guard holds: the lease's identity, its local deadline, the renewal's controls
// and the pending wait_lost handlers. Shared by the guard, its renewal and its background
// release; private to the library's sources.
#pragma once

#include "../detail/completion.hpp"
#include "common.hpp"
#include "lease_store.hpp"
#include "locker_impl.hpp"
#include "renewal.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace colock::detail {

struct guard_state : std::enable_shared_from_this<guard_state> {
    guard_state(std::shared_ptr<locker_impl> owner, std::string lock_name, lock_keys lock_keys_,
                std::string lock_token, std::int64_t fence_value, lock_options const& options)
        : locker(std::move(owner))
        , name(std::move(lock_name))
        , keys(std::move(lock_keys_))
        , token(std::move(lock_token))
        , fence(fence_value)
        , opt(options)
        , lease_token(token)
        , lease_fence(fence_value)
        , ttl(options.ttl)
        , renew_timer(locker->strand_)
        , turns(locker->strand_) {}

    std::shared_ptr<locker_impl> locker;
    std::string const name;
    lock_keys const keys;
    std::string const token;
    std::int64_t const fence;
    lock_options const opt;
    std::atomic<bool> lost{false};
    // Why, as a loss_reason, once mark_lost ran; -1 before. Any thread may read it.
    std::atomic<int> loss{-1};
    std::atomic<bool> released{false};

    // The lease in Redis, which a cohort of this process's holders pass on: the token the
    // key holds (the first holder's), the fence Redis gave it, when its reply came, the
    // local hand-offs so far, and the store's count of server changes then. Set before the
    // guard is shared; renewal, extend and release use lease_token.
    std::string lease_token;
    std::int64_t lease_fence;
    clock_type::time_point lease_granted_at;
    std::size_t local_handoffs = 0;
    std::uint64_t lease_server_changes = 0;

    // On the locker's strand:
    std::chrono::milliseconds ttl;
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
    // Before a request that may set the lease to `asked` from now is sent: the server may apply it
    // (and so shorten the lease) even if its reply is never seen, so the local deadline drops
    // to the send time + ttl where that is earlier. Only a confirmed reply moves it later.
    // True when it dropped.
    bool bound_lease_deadline(clock_type::time_point sent_at, std::chrono::milliseconds asked) {
        auto const bound = sent_at + locker->store_->safe_ttl(asked);
        if (bound >= lease_deadline())
            return false;
        set_lease_deadline(bound);
        return true;
    }
    boost::asio::cancellation_signal renew_stop; // emitted (on the strand) to end the renewal
    // The renewal's sleep; cancelled (not the renewal itself) to make it check the lease now.
    boost::asio::steady_timer renew_timer;
    // This guard's entry among the locker's held guards, while it holds.
    std::optional<locker_impl::held_entry> registration;

    // A pending wait_lost. Its cancellation handler is installed on the caller's thread
    // before anything is posted, so no cancellation can be missed; `done` makes sure exactly
    // one of (lost, let go, cancelled) completes it.
    struct lost_waiter {
        // Move-constructed only: Boost 1.81's any_completion_handler move *assignment*
        // recurses forever (it copies from an lvalue through its converting constructor).
        explicit lost_waiter(boost::asio::any_completion_handler<void(boost::system::error_code)> h)
            : handler(std::move(h)), slot(boost::asio::get_associated_cancellation_slot(handler)) {}

        boost::asio::any_completion_handler<void(boost::system::error_code)> handler;
        boost::asio::cancellation_slot slot;
        bool done = false;
    };
    std::vector<std::shared_ptr<lost_waiter>> lost_waiters;

    void finish_waiter(std::shared_ptr<lost_waiter> const& w, boost::system::error_code ec) {
        if (w->done)
            return;
        w->done = true;
        complete_now(locker->strand_, std::move(w->handler), w->slot, ec);
    }

    void finish_waiters() {
        auto waiters = std::move(lost_waiters);
        lost_waiters.clear();
        for (auto& w : waiters)
            finish_waiter(w, lost ? boost::system::error_code{}
                                  : boost::system::error_code(error::not_held));
    }
    // The renewal (or, without auto_renew, the lease watcher that wait_lost needs) runs.
    bool watching = false;
    // Until it runs: its place in locker->renewals_due_, and when its first renewal is due.
    std::optional<locker_impl::renewal_entry> renewal_scheduled;
    std::optional<clock_type::time_point> first_renewal;
    extend_turns turns;

    // Starts the renewal (renewal.cpp), once.
    void start_watch();

    std::chrono::milliseconds renew_interval() const {
        auto const configured = opt.effective_renew_interval();
        return configured < ttl ? configured : ttl / 3;
    }

    // When to renew next: one interval from now, or sooner for a lease taken over from a
    // holder before (its deadline is older), when as little is left of it as a lease renewed
    // on time would have: ttl - renew_interval.
    clock_type::time_point next_renewal() const {
        auto const now = clock_type::now();
        auto const interval = renew_interval();
        auto const deadline = lease_deadline();
        auto const by_lease =
            deadline - now > ttl - interval ? now + interval : deadline - (ttl - interval);
        return std::max(now, std::min(now + interval, by_lease));
    }

    // Once: the observer hears of the first loss only.
    void mark_lost(loss_reason why) {
        if (released)
            return;
        int none = -1;
        if (loss.compare_exchange_strong(none, static_cast<int>(why))) {
            lost = true;
            locker->note_lost(*this, why);
        }
        finish_waiters();
    }

    // Stops renewal and wakes wait_lost. On the strand; before any release is sent, so no
    // renewal can be queued behind the release and revive the lock.
    void stop() {
        renew_stop.emit(boost::asio::cancellation_type::terminal);
        finish_waiters();
        if (renewal_scheduled)
            locker->unschedule_renewal(*std::exchange(renewal_scheduled, std::nullopt));
        if (registration)
            locker->remove_held(*std::exchange(registration, std::nullopt));
    }
};

// Stops renewal, then releases. On the locker's strand.
boost::asio::awaitable<std::tuple<boost::system::error_code, bool>>
release_held(std::shared_ptr<guard_state> st);

// Releases in the background, for a guard that went away while holding or whose loss is
// known; never blocks.
void release_in_background(std::shared_ptr<guard_state> st);

// Gives the lease back to Redis now, on the caller's thread, never to a waiter of this process
// (the connection is closing); `st` is marked released by the caller. Never blocks.
void release_now(std::shared_ptr<guard_state> st);

} // namespace colock::detail
