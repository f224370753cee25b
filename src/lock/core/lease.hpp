// The lease core that every holding shares (a lock guard's lease now; a permit, a reader's
// lease and a leadership next): its local deadline, its renewal, its loss and the wait_lost
// waiters, and the book of one locker's leases (one timer for the renewals not started yet, the
// live leases a reconnection, a server change or the connection's close goes through). A
// holding derives from `lease` and implements its hooks: what an extension is at the server,
// whether the server that granted it was replaced, how it is given back when the connection
// closes, and what it reports. Private to the library's sources; on the locker's strand, but
// for what says otherwise.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/loss_waiters.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_observer.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

namespace colock::detail {

class lease;

// Renewal and extend() take turns at the server: a renewal with the old ttl that reached it
// after extend() (one sent while extend() was on its way, or retried after NOSCRIPT) would
// shorten the lease extend() has just reported.
class extend_turns {
public:
    explicit extend_turns(boost::asio::strand<boost::asio::any_io_executor> strand)
        : strand_(std::move(strand)) {}

    // Waits for the turn; false when cancelled first, holding nothing. The owner of this
    // object outlives the wait.
    boost::asio::awaitable<bool> take();
    // Passes the turn to the next in line, or frees it.
    void give();

private:
    struct waiter {
        explicit waiter(extend_turns& t) : owner(t), timer(t.strand_) {}
        waiter(waiter const&) = delete;
        ~waiter(); // a frame destroyed unresumed leaves the queue
        extend_turns& owner;
        lock_timer timer;
        bool granted = false;
    };

    boost::asio::strand<boost::asio::any_io_executor> strand_;
    bool taken_ = false;
    std::vector<waiter*> queue_; // rarely more than one: no deque, which allocates when empty
};

// One locker's leases. Owned by the locker and by every lease (leases outlive their locker).
class lease_book : public std::enable_shared_from_this<lease_book> {
public:
    // `safe_ttl`: how long a lease of a ttl is known to be ours from the start of the request
    // that granted or extended it (lease_store::safe_ttl).
    lease_book(boost::asio::strand<boost::asio::any_io_executor> strand,
               std::function<std::chrono::milliseconds(std::chrono::milliseconds)> safe_ttl);

    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return strand_;
    }
    std::chrono::milliseconds safe_ttl(std::chrono::milliseconds ttl) const {
        return safe_ttl_(ttl);
    }

    // The live leases, for a walk that may let some go (a copy). From any thread.
    std::vector<std::shared_ptr<lease>> leases() const;

    // The deployment is reachable again: every renewing lease renews now, so that a loss is
    // known one round trip after reconnecting.
    void renew_all_now();
    // The deployment was replaced: the leases granted on a replaced server are lost.
    void mark_replaced_lost();
    // A forced unlock ended the lease of `token` on `key`.
    void mark_forced_lost(std::string_view key, std::string_view token);
    // The connection closes: every lease not let go yet goes back now, on this thread, so that
    // the close sends it. From any thread; never throws.
    void give_all_back_now() noexcept;
    // The wait_lost handlers, which may own the coroutine that owns the guard, at the
    // io_context's shutdown.
    void drop_waiters() noexcept;
    // Stops the renewal timer when nothing is scheduled: the locker or its connection closes.
    // On the strand.
    void cancel_idle_timer();

private:
    friend class lease;
    using held_entry = std::list<std::weak_ptr<lease>>::iterator;
    using renewal_entry = std::multimap<clock_type::time_point, std::weak_ptr<lease>>::iterator;

    held_entry add(std::shared_ptr<lease> const& l);
    void remove(held_entry e);
    // A lease's renewal coroutine is spawned when its first renewal is due, so a lease held for
    // less than its renew interval costs no coroutine and no timer of its own. One timer
    // serves them all.
    renewal_entry schedule(clock_type::time_point due, std::shared_ptr<lease> const& l);
    // Takes a renewal off the schedule. The timer stays armed, even with nothing left: when it
    // fires it finds nothing due and stops. The next lease (the next cycle of a name locked in a
    // loop, a hand-off here) finds it armed for an earlier time and costs nothing, where stopping
    // and re-arming it cost a system call per cycle (Asio reprograms its timerfd when a timer
    // becomes its clock's earliest). An idle armed timer keeps io_context::run() from returning
    // no longer than the open connection does, and its close stops it (cancel_idle_timer).
    void unschedule(renewal_entry e);
    void start_due_renewals();
    void set_renewal_timer(clock_type::time_point at);

    boost::asio::strand<boost::asio::any_io_executor> const strand_;
    std::function<std::chrono::milliseconds(std::chrono::milliseconds)> const safe_ttl_;
    // Read from any thread (the close), so behind a mutex.
    mutable std::mutex held_mutex_;
    std::list<std::weak_ptr<lease>> held_;
    // On the strand:
    std::multimap<clock_type::time_point, std::weak_ptr<lease>> renewals_due_;
    lock_timer renewal_timer_;
    clock_type::time_point renewal_timer_at_ = clock_type::time_point::max();
};

// How a lease is kept.
struct lease_terms {
    std::chrono::milliseconds ttl;
    std::chrono::milliseconds renew_interval; // as configured; below ttl
    bool auto_renew = true;
    // Renewal stops this long after the lease was taken.
    std::optional<std::chrono::milliseconds> max_hold;
};

class lease : public std::enable_shared_from_this<lease> {
public:
    // A lease granted at `deadline` - its ttl (its local deadline is given), on a server of
    // generation `server_generation` (see current_server_generation).
    lease(std::shared_ptr<lease_book> book, lease_terms const& terms,
          clock_type::time_point acquired_at, clock_type::time_point deadline,
          std::uint64_t server_generation);
    lease(lease const&) = delete;
    lease& operator=(lease const&) = delete;
    virtual ~lease();

    lease_book& book() const noexcept { return *book_; }
    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return book_->strand();
    }

    // --- the local deadline: before it the lease is known to be ours. Never later than the
    // server's expiry, since the server started counting later. Any thread.
    clock_type::time_point deadline() const noexcept {
        return clock_type::time_point(clock_type::duration(deadline_ticks_.load()));
    }
    bool running() const noexcept { return clock_type::now() < deadline(); }
    // When a holder renewing it would renew it next, counted from now (next_renewal).
    clock_type::time_point renewal_due() const { return next_renewal(); }
    // The ttl the lease was last granted or extended with.
    std::chrono::milliseconds ttl() const noexcept { return ttl_; }
    clock_type::time_point acquired_at() const noexcept { return acquired_at_; }
    std::uint64_t server_generation() const noexcept { return server_generation_; }

    // --- loss. Any thread.
    bool lost() const noexcept { return lost_.load(); }
    // Lost, or known to have ended at the server (a forced unlock, a replaced server) after it
    // was let go, while its let-go is on its way to the strand: not to be passed on or kept.
    bool gone() const noexcept { return lost_.load() || gone_after_release_.load(); }
    // Why, once mark_lost ran.
    std::optional<loss_reason> loss() const noexcept;
    // Once: the hook hears of the first loss only; the wait_lost waiters complete, and the
    // renewal (or watcher) looks at the lease now.
    void mark_lost(loss_reason why);
    // Whether it was let go (unlock, destruction, the connection's close). Any thread.
    bool released() const noexcept { return released_.load(); }
    // Marks it let go; false when it was already.
    bool release_once() noexcept { return !released_.exchange(true); }

    // --- wait_lost. From any thread: completes with an empty code when lost, not_held once
    // let go, operation_aborted when cancelled through the handler's slot (installed here, on
    // the caller's thread, where the caller emits).
    void wait_lost(boost::asio::any_completion_handler<void(boost::system::error_code)> handler);

    // --- renewal
    // Starts keeping the lease: its first renewal scheduled (auto_renew). On the strand.
    void start();
    // Renews now rather than at the next interval (a reconnection).
    void renew_now();
    // Stops renewal and wakes wait_lost, and leaves the book. On the strand; before any
    // release is sent, so no renewal can be queued behind the release and revive the lock.
    void stop();
    // An explicit extension of `self`, in turn with the renewal: `ours` false marks it lost.
    // On the strand.
    static boost::asio::awaitable<std::tuple<boost::system::error_code, bool>>
    extend(std::shared_ptr<lease> self, std::chrono::milliseconds ttl);

protected:
    // Sets the lease to `ttl` from now at the server, if it is still ours: for the renewal
    // (`renewal`, which a store may send with others' a moment later) or an extend().
    virtual boost::asio::awaitable<lease_reply> extend_at_server(std::chrono::milliseconds ttl,
                                                                 bool renewal) = 0;
    // The current generation of the server that holds the lease: one other than at the grant
    // means it was replaced, and the lease with it.
    virtual std::uint64_t current_server_generation() const noexcept = 0;
    // Whether this is the lease of `token` (the one the server holds) on `key`.
    virtual bool is_lease(std::string_view key, std::string_view token) const noexcept = 0;
    // Gives the lease back now, on the caller's thread (the connection closes); it is marked
    // released already. Never throws.
    virtual void give_back_now() noexcept = 0;
    // Reports: the first loss; each renewal's answer (extended, or the error; a timeout when
    // none came by the deadline); a grant or extension of `ttl` confirmed.
    virtual void on_lost(loss_reason why) = 0;
    virtual void on_renewal(clock_type::duration latency, bool extended,
                            boost::system::error_code ec) = 0;
    virtual void on_confirmed(std::chrono::milliseconds ttl) = 0;

    // Joins the book (after construction, once shared).
    void enter_book();

private:
    friend class lease_book;

    void set_deadline(clock_type::time_point t) noexcept {
        deadline_ticks_ = t.time_since_epoch().count();
    }
    // Before a request that may set the lease to `asked` from now is sent: the server may apply
    // it (and so shorten the lease) even if its reply is never seen, so the local deadline
    // drops to the send time + ttl where that is earlier. Only a confirmed reply moves it
    // later. True when it dropped.
    bool bound_deadline(clock_type::time_point sent_at, std::chrono::milliseconds asked);
    std::chrono::milliseconds renew_interval() const;
    // When to renew next: one interval from now, or sooner for a lease taken over from a
    // holder before (its deadline is older), when as little is left of it as a lease renewed
    // on time would have: ttl - renew_interval; aligned down to a sixteenth of the interval.
    clock_type::time_point next_renewal() const;
    void start_watch();
    void finish_waiters();
    static boost::asio::awaitable<void> renew_loop(std::shared_ptr<lease> self);
    // The loop's parts: the watch of a lease not renewed (to its end), and one renewal with its
    // retries (true: confirmed; false: the loop ends).
    static boost::asio::awaitable<void> watch_to_end(std::shared_ptr<lease> self,
                                                     boost::asio::cancellation_state cs);
    static boost::asio::awaitable<bool> renew_now(std::shared_ptr<lease> self,
                                                  boost::asio::cancellation_state cs,
                                                  lock_timer& lease_end);

    std::shared_ptr<lease_book> const book_;
    lease_terms const terms_;
    clock_type::time_point const acquired_at_;
    std::uint64_t const server_generation_;
    std::atomic<bool> lost_{false};
    std::atomic<bool> gone_after_release_{false};
    std::atomic<int> loss_{-1}; // a loss_reason once marked
    std::atomic<bool> released_{false};
    std::atomic<clock_type::rep> deadline_ticks_{0};
    // On the strand:
    std::chrono::milliseconds ttl_;
    boost::asio::cancellation_signal renew_stop_; // emitted to end the renewal
    // The renewal's sleep; cancelled (not the renewal itself) to make it check the lease now.
    lock_timer renew_timer_;
    extend_turns turns_;
    // The renewal (or, without auto_renew, the watcher that wait_lost needs) runs.
    bool watching_ = false;
    // Until it runs: its place on the book's schedule, and when its first renewal is due.
    std::optional<lease_book::renewal_entry> renewal_scheduled_;
    std::optional<clock_type::time_point> first_renewal_;
    std::optional<lease_book::held_entry> registration_;
    std::shared_ptr<loss_waiters> const waiters_; // shared with their cancellation handlers
};

} // namespace colock::detail
