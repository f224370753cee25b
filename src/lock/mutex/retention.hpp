// Lease retention (lock_options::retain): a lease whose holder lets go with nobody else wanting
// it stays with its locker for a while, so that the next co_lock of the name through that
// locker takes it with no round trip, as cohort hand-off passes a lease between the holders of
// one process. From a grant Redis made with nobody else queued until the lease goes back, the
// locker listens on its wake channel for the name: another process's attempt publishes "q"
// there, and the lease goes back to Redis at once (or at the let-go, when a guard holds it).
// Private to the library's sources; on the locker's strand, but for what says otherwise.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/locker_life.hpp"
#include "lock/store/lease_store.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace colock::detail {

class cohort;
class guard_state;

class retained_leases {
public:
    // The locker's `context`, `queues`, `handoffs` (which gives the leases back) and `life`
    // outlive this.
    retained_leases(locker_context& context, local_queues& queues, cohort& handoffs,
                    locker_life const& life)
        : context_(context), queues_(queues), handoffs_(handoffs), life_(life) {}
    // Kept leases still here (the io_context went before the locker's close ran) go back.
    ~retained_leases();
    retained_leases(retained_leases const&) = delete;
    retained_leases& operator=(retained_leases const&) = delete;

    // Redis granted the lease of `keys` to a holder that may keep it, with nobody else
    // queued: the locker listens for "q" from now on.
    void watch(lock_keys const& keys);
    // The let-go of `st` (retain set) is on its way to the strand; from any thread. The close
    // of the connection gives such leases back itself, on its thread.
    void let_go_pending(std::shared_ptr<guard_state> const& st);
    // On the strand: whether the let-go of `st` is still to be done here (false when the
    // connection's close gave it back meanwhile).
    bool let_go_arrived(guard_state const& st);
    // `st` lets go, stopped, with no waiter of this process to take its lease: kept when its
    // options ask for it and nothing stands against it (true). The caller sends the release
    // otherwise, and says so with forget().
    bool keep(guard_state& st);
    // The lease kept for `keys`, for a new holder (its fence is the next one), or nothing. One
    // that may no longer be taken goes back to Redis.
    std::optional<lease_baton> take(lock_keys const& keys);
    // The name's lease goes back to Redis (or was lost): the locker stops listening for it.
    void forget(lock_keys const& keys);
    // "q" on `channel`: a locker of another process waits for the name.
    void on_queued(std::string const& channel);
    // Every kept lease goes back to Redis, and a lease a guard took from here goes back at its
    // let-go: messages may have been missed (a reconnection), or the server was replaced.
    void give_all_back();
    // The locker goes: as give_all_back, and nothing is kept any more.
    void close();
    // A forced unlock ended the lease of `token` on `key`: not to be taken.
    void on_forced(std::string_view key, std::string_view token);
    // The connection is being closed by its user: the kept leases, and those whose let-go is
    // on its way to the strand, go back now, on this thread, so that the close sends them;
    // nothing is kept until Redis grants a lease again. From any thread; never throws.
    void give_all_back_now() noexcept;
    // After that, on the strand: the channels are no longer listened to, the timers stop.
    void drop_all();

private:
    struct name_entry {
        name_entry(lock_keys k, lock_timer t) : keys(std::move(k)), timer(std::move(t)) {}
        lock_keys const keys;
        // Under the mutex (the connection's close takes them from any thread):
        std::optional<lease_baton> kept;   // kept, with no guard holding it
        bool others_queued = false;        // a locker of another process waits for the name
        std::chrono::milliseconds claim{}; // of the kept lease's release
        // On the strand:
        clock_type::time_point until; // when the kept lease goes back
        lock_timer timer;             // armed for `armed_at` when `armed`
        bool armed = false;
        clock_type::time_point armed_at;
        bool subscribed = false; // counted on the store's subscription for the channel
    };
    using entry_ptr = std::shared_ptr<name_entry>;

    entry_ptr entry_for(lock_keys const& keys);
    entry_ptr find(std::string const& channel) const;
    void arm(entry_ptr const& e);
    void expire(entry_ptr const& e);
    void subscribe(entry_ptr const& e);
    // Takes the entry out (and its subscription); its kept lease, if any, goes back to Redis.
    void drop(entry_ptr const& e);

    locker_context& context_;
    local_queues& queues_;
    cohort& handoffs_;
    locker_life const& life_;
    mutable std::mutex mutex_;
    std::unordered_map<std::string, entry_ptr> names_; // by wake channel
    std::atomic<std::size_t> entries_{0};              // names_.size(), read without the mutex
    // Let-gos on their way to the strand (weak: one destroyed unrun holds nothing here).
    std::vector<std::weak_ptr<guard_state>> pending_;
    // The connection was closed by its user: nothing is kept until the next grant.
    bool closing_ = false;
    // On the strand: the locker went, or the server refused a subscription (an ACL user
    // without the channels): nothing is kept any more, since a waiter elsewhere would not be
    // heard.
    bool closed_ = false;
    bool refused_ = false;
};

} // namespace colock::detail
