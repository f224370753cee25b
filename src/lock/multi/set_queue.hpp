// This locker's calls waiting for one set of names (co_lock_all of the same names), as the
// lock's local queue is for one name: a FIFO sharing one entry in the names' server queues and
// one subscription to its wake channels, where only the head asks the server. A holder of the
// set letting go passes its lease to the head without a round trip (cohort hand-off, as the
// lock's: a new guard, the next fence of every name, at most cohort_limit in a row). Private to
// the library's sources; on the locker's strand, but for what says otherwise.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/channel_routes.hpp"
#include "lock/core/locker_context.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace colock::detail {

// A set's lease passed from a holder of this process to the next local waiter.
struct set_baton {
    std::string lease_token;                // the token the lock keys hold
    std::vector<std::int64_t> lease_fences; // the fences Redis gave the lease
    std::int64_t local_handoffs = 0;        // this one included: the receiver's fences are
                                            // lease_fences + local_handoffs
    clock_type::time_point granted_at;      // when Redis's grant came
    clock_type::time_point deadline;        // the lease's local bound
    std::uint64_t server_changes = 0;       // the store's count when the lease was granted
};

// The fences of a lease's holder after `handoffs` hand-offs inside the process: what its
// release stores, so that the next holder's are larger.
std::vector<std::int64_t> fences_after(std::vector<std::int64_t> lease_fences,
                                       std::int64_t handoffs);

class set_queue;

// One call waiting in a set_queue: its sleep, and what ends it.
struct set_waiter {
    explicit set_waiter(boost::asio::strand<boost::asio::any_io_executor> const& strand)
        : timer(strand) {}
    set_waiter(set_waiter const&) = delete;
    // A frame destroyed unresumed (the io_context's shutdown) leaves the queue.
    ~set_waiter();

    set_queue* queue = nullptr; // while in one
    lock_timer timer;
    bool woken = false;             // ask now: a hand-off's message, a reconnection, a turn
    std::optional<set_baton> baton; // given by a local holder; taken or passed on
};

class set_queue final : public channel_listener, public std::enable_shared_from_this<set_queue> {
public:
    // `locker` outlives this while anyone waits in it or holds through it.
    set_queue(locker_context& locker, std::string id, std::vector<lock_keys> keys,
              std::string entry);

    std::string const& id() const noexcept { return id_; }
    std::vector<lock_keys> const& keys() const noexcept { return keys_; }
    // The queue's entry in the names' server queues, and the holder the lock keys show.
    std::string const& entry() const noexcept { return entry_; }

    void add(set_waiter& w);
    // `w` leaves; when it was the head, the next one heads the queue: told to ask now unless
    // `took_lease` (then it waits for that holder's let-go).
    void remove(set_waiter& w, bool took_lease);
    // `w` leaves, telling nobody.
    void forget(set_waiter& w) noexcept;
    bool heads(set_waiter const& w) const noexcept {
        return !waiters_.empty() && waiters_.front() == &w;
    }
    // How many wait; any thread (a let-go asks the strand first only when some do).
    std::size_t waiting() const noexcept { return waiting_.load(); }
    set_waiter* head() noexcept { return waiters_.empty() ? nullptr : waiters_.front(); }
    std::list<set_waiter*> const& waiters() const noexcept { return waiters_; }
    // The head asks now (a holder here let go to Redis, or a message).
    void wake_head();
    static void wake(set_waiter& w);

    // The leases of the set held through this queue (their let-go wakes the head).
    std::size_t holders = 0;
    // The server's queues may hold the entry: an answer queued it, and no grant took it out.
    bool queued_at_server = false;
    // The locker, or its connection, closed: every waiter ends.
    bool aborted() const noexcept { return aborted_; }

    // The wake channels: routed while the queue lives, subscribed once a head must sleep.
    bool wants_subscription() const noexcept { return !subscribed_ && !refused_ && !aborted_; }
    bool subscribed() const noexcept { return subscribed_; }
    // Subscribes every channel; a refusal (an ACL user without the channels) or a failure to
    // reach the server leaves the waiters polling by their backoff.
    static boost::asio::awaitable<void> subscribe(std::shared_ptr<set_queue> self);
    // Nobody waits or holds any more: the channels are let go, and the entry leaves the names'
    // queues (with `token`, whose grant may have been unseen: it goes back too).
    void end(std::string const& token);

    void on_message(std::string const& payload) override;
    void on_reconnect() override { wake_head(); }
    void on_close() override;
    void drop_handlers() noexcept override {}

private:
    void route();

    locker_context& locker_;
    std::string const id_;
    std::vector<lock_keys> const keys_;
    std::string const entry_;
    std::vector<std::string> channels_;
    std::list<set_waiter*> waiters_; // the head first
    std::atomic<std::size_t> waiting_{0};
    std::size_t subscribed_count_ = 0; // the channels subscribed, in order
    bool routed_ = false;
    bool subscribed_ = false;
    bool refused_ = false;
    bool aborted_ = false;
};

// A locker's set queues, by their sorted names.
class lock_set_queues {
public:
    // The queue for `names` (sorted, distinct; their `keys`), made when none lives.
    std::shared_ptr<set_queue> join(locker_context& locker, std::vector<std::string> const& names,
                                    std::vector<lock_keys> const& keys);
    // Drops `q` once nobody waits in it or holds through it (end()).
    void drop_if_idle(set_queue& q, std::string const& token);
    // A forced unlock ended the lease of `token` on `key`: a waiter handed that lease does not
    // take it (its other names go back) and asks Redis instead.
    void on_forced(locker_context& locker, std::string_view key, std::string_view token);
    // Listening to the locker's forced unlocks (once).
    bool listening = false;

private:
    std::map<std::string, std::shared_ptr<set_queue>> queues_;
};

// A queue entry's name for a locker's call or queue: "<locker>/<n>", distinct in the process.
std::string next_set_entry(locker_context const& locker);

} // namespace colock::detail
