// A lock on several names at once (a lock set): the call that takes every name or none, waiting
// in each name's queue (multi_scripts.hpp says why that neither deadlocks nor starves), and the
// lease that holds them. Private to the library's sources; on the locker's strand, but for what
// says otherwise.
#pragma once

#include "detail/failure_report.hpp"
#include "detail/spawn.hpp"
#include "lock/base/common.hpp"
#include "lock/core/lease.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace colock::detail {

class lock_set_state;
class set_queue;

// What users call it in messages.
inline constexpr std::string_view lock_set_kind = "lock on several names";

// How a lock_all call ended.
struct lock_set_outcome {
    boost::system::error_code ec;
    std::string message; // names the set
    std::shared_ptr<lock_set_state> state;
};

// The names of a set as its guard shows them: sorted, each once.
std::vector<std::string> distinct_names(std::vector<std::string> names);
// The set as messages show it: "a, b, c".
std::string shown_names(std::vector<std::string> const& names);

// Takes every name of `names` (distinct_names) for one lease, waiting when `wait` (else one
// attempt: an empty state when any is held). The caller's cancellation (terminal, partial) ends
// a wait at once; a grant that arrives for a cancelled call is given back, and the call's
// entries leave the queues, before it completes.
boost::asio::awaitable<lock_set_outcome> acquire_lock_set(std::shared_ptr<locker_context> locker,
                                                          std::vector<std::string> names,
                                                          lock_options opt, bool wait);

// Where a set's lease came from: what a hand-off inside the process needs.
struct set_lease_origin {
    // The local queue of the call that took it (co_lock_all), whose head a let-go may pass the
    // lease to; none for co_try_lock_all.
    std::shared_ptr<set_queue> queue;
    std::vector<std::int64_t> lease_fences; // the fences Redis gave the lease, by name
    std::int64_t local_handoffs = 0;        // the holder's fences are lease_fences + this
    clock_type::time_point granted_at;      // when Redis's grant came
};

// Takes every name of `names` as acquire_lock_set does, on a store where they fall on several
// shards (Cluster slots): one set per slot, taken one after another in slot order, each held
// while the next is waited for. Every caller takes its slots in that order, so none waits for a
// slot below one it holds (no deadlock across slots; within one, acquire_lock_set's order). The
// first part's state is the caller's; the wait_timeout is spent over the parts; a call that
// does not get every part gives back those it got.
boost::asio::awaitable<lock_set_outcome> acquire_lock_sets(std::shared_ptr<locker_context> locker,
                                                           std::vector<std::string> names,
                                                           lock_options opt, bool wait);

// What the parts of a set over several slots share: every name, sorted, and its fence.
struct set_parts {
    std::vector<std::weak_ptr<lock_set_state>> all; // in slot order
    std::vector<std::string> names;
    std::vector<std::int64_t> fences;
};

// The lease over a set's names (on one slot). Shared by the guard, its renewal and its
// background release. The guard holds the first part of a set over several slots, which keeps
// the others.
class lock_set_state final : public lease {
public:
    lock_set_state(std::shared_ptr<locker_context> locker, std::vector<std::string> names,
                   std::vector<lock_keys> keys, std::string entry, std::string token,
                   set_lease_origin origin, lock_options const& opt,
                   clock_type::time_point acquired_at, clock_type::time_point deadline,
                   std::uint64_t server_generation);

    // Every name of the set (all parts), sorted, and its fence.
    std::vector<std::string> const& names() const noexcept {
        return parts_ ? parts_->names : names_;
    }
    std::vector<std::int64_t> const& fences() const noexcept {
        return parts_ ? parts_->fences : fences_;
    }
    std::string const& token() const noexcept { return token_; }

    // Makes this, the first of `parts` (one per slot, in slot order), the set's state: it keeps
    // the others, and a loss of any part is every part's. On the strand.
    void join_parts(std::vector<std::shared_ptr<lock_set_state>> const& parts);
    // This and the parts it keeps.
    std::vector<std::shared_ptr<lock_set_state>> parts();
    // The earliest local end of the parts' leases. Any thread.
    clock_type::time_point earliest_deadline() const noexcept;
    lease_store& store() const noexcept;

    // Joins the locker's book and starts renewing; once, when made.
    void hold();
    // Gives every name back, sent again over passing errors until release_timeout.
    boost::asio::awaitable<lease_reply> release();
    // The same, handed to the connection now on the caller's thread (a close() right after
    // still sends it); a passing failure goes on with release() on the strand. Any thread.
    void release_detached();

    // Whether a call of this process waits for the same names: the strand then decides first
    // whether the lease goes to it (hand_off_locally). Any thread.
    bool local_taker_may_come() const noexcept;
    // Passes the lease, which is letting go, to the head of its local queue, if allowed (as the
    // lock's cohort: valid for 1 ms more, not lost, the same server, fences in step, at most
    // cohort_limit in a row); true when it did. Once the release to Redis is sent instead,
    // after_release() wakes that head. On the strand.
    bool hand_off_locally();
    void after_release();
    // Stops the renewal, then passes the lease on (hand_off_locally) or sends its release and
    // wakes the head (after_release). On the strand.
    void let_go_on_strand();

    // The observer hears of a set as of a lock per name: an event per name, with its fence.
    void note_acquired(clock_type::time_point call_started, int attempts) const;
    void note_released(bool handed_locally) const;

    std::shared_ptr<lock_set_state> shared() {
        return std::static_pointer_cast<lock_set_state>(shared_from_this());
    }

private:
    boost::asio::awaitable<lease_reply> extend_at_server(std::chrono::milliseconds ttl,
                                                         bool renewal) override;
    std::uint64_t current_server_generation() const noexcept override;
    bool is_lease(std::string_view key, std::string_view token) const noexcept override;
    void give_back_now() noexcept override;
    void on_lost(loss_reason why) override;
    void on_renewal(clock_type::duration latency, bool extended,
                    boost::system::error_code ec) override;
    void on_confirmed(std::chrono::milliseconds) override {}

    std::shared_ptr<locker_context> const locker_;
    std::vector<std::string> const names_;
    std::vector<lock_keys> const keys_;
    std::string const entry_;
    std::string const token_;
    set_lease_origin const origin_;
    std::vector<std::int64_t> const fences_;
    std::size_t const cohort_limit_;
    bool let_go_ = false; // hand_off_locally or after_release ran
    // Set once, by join_parts, before the guard is made; read-only after.
    std::shared_ptr<set_parts const> parts_;
    std::vector<std::shared_ptr<lock_set_state>> others_; // the first part's
};

// An acquire for an awaiting caller (the co_* forms), whose cancellation reaches it on the
// strand: the outcome of a success, else throws system_error with its code and message.
boost::asio::awaitable<lock_set_outcome> await_lock_set(std::shared_ptr<locker_context> locker,
                                                        std::vector<std::string> names,
                                                        lock_options opt, bool wait);

// An acquire for a completion handler (the async_* forms): `finish(handler, code, outcome)` on
// the handler's executor once it ends (a coroutine that threw: error::unexpected_reply).
template <class Handler, class Finish>
void spawn_lock_set(std::shared_ptr<locker_context> locker, std::vector<std::string> names,
                    lock_options opt, bool wait, Handler handler, Finish finish) {
    auto strand = locker->strand();
    spawn_cancellable(
        strand, acquire_lock_sets(std::move(locker), std::move(names), std::move(opt), wait),
        std::move(handler), [finish](Handler h, std::exception_ptr e, lock_set_outcome o) {
            auto ec = o.ec;
            if (e)
                ec = make_error_code(error::unexpected_reply);
            // with_diagnostics is told what the awaitable form throws.
            finish_reporting(finish, std::move(h), ec, e, std::move(o));
        });
}

} // namespace colock::detail
