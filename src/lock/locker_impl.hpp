// The locker's state and the acquire orchestration: an attempt through the lease store, the
// uncontended path, the contended wait in the local queue, the guard made on success.
// Private to the library's sources.
#pragma once

#include "../detail/context_shutdown.hpp"
#include "acquire_policy.hpp"
#include "common.hpp"
#include "lease.hpp"
#include "lease_store.hpp"
#include "local_queue.hpp"
#include "lock_operation.hpp"

#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace colock::detail {

class guard_state;

// The fields of a locker's holder record: host, pid, program, client_name, started.
std::vector<std::pair<std::string, std::string>>
holder_record_fields(std::string const& client_name);

class locker_impl : public std::enable_shared_from_this<locker_impl>,
                    public holds_handlers,
                    public lease_events {
public:
    // `client_name`: the connection's, for the holder record.
    locker_impl(std::shared_ptr<lease_store> store, std::string prefix, std::string client_name);

    // The locker object is made: it listens to its store and ends its calls when its
    // io_context shuts down.
    void open();
    // The locker object is gone: its calls end as a terminal cancellation ends them; its
    // guards live on. From any thread.
    void close();
    // From any thread; takes effect on the strand.
    void set_observer(std::shared_ptr<lock_observer> observer);

    lease_store& store() const noexcept { return *store_; }
    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return strand_;
    }
    std::shared_ptr<lease_book> const& book() const noexcept { return book_; }
    std::string const& prefix() const noexcept { return prefix_; }
    // This locker's id in the server's queues and its wake channels: random, 64 bits.
    std::string const& id() const noexcept { return owner_; }
    // `<prefix>locker:`: + a locker's id, its holder record (a hash) and the channel where a
    // forced unlock tells it.
    std::string const& locker_key_prefix() const noexcept { return locker_key_prefix_; }
    // Calls waiting in the local queues; from any thread.
    std::size_t waiting() const noexcept { return queues_.waiting(); }

    // Runs a co_lock or co_try_lock call; its handler is completed once, posted out of the
    // strand. From any thread.
    void start(std::shared_ptr<lock_operation> op);
    // The caller's cancellation of `op`, on the strand: terminal and partial end it (a lock
    // granted meanwhile is given back first); total is ignored, as the call may have asked.
    void cancel(lock_operation& op, boost::asio::cancellation_type type);

    // What the guards tell their locker, on the strand. Cohort hand-off (cohort.cpp): passes
    // the lease of `st`, which is letting go, to the next waiter of this process on its name,
    // if allowed; true when it did.
    bool hand_off_locally(guard_state& st);
    // After a release to Redis that did not hand the lock to a queued locker: the first local
    // waiter on `keys` asks now rather than after its sleep.
    void wake_local_head(lock_keys const& keys);
    // Holder record (status.cpp). Called when a lease of `ttl` is granted or renewed: writes
    // the record when it would not outlive the lease by a minute, and starts listening for
    // forced unlocks the first time.
    void keep_record(std::chrono::milliseconds ttl);
    // The observer's events; each builds its event only when one is installed. note_lost also
    // writes the warning line of the connection's log hook.
    void note_released(guard_state const& st, bool handed_locally) const;
    void note_lost(guard_state const& st, loss_reason why) const;
    void note_renewal(guard_state const& st, clock_type::duration latency, bool extended,
                      boost::system::error_code ec) const;

    // lease_events and holds_handlers.
    void on_message(std::string const& channel, std::string const& payload) override;
    void on_reconnect() override;
    void on_server_change() override;
    // The connection is being closed by its user: see lease_events. From any thread.
    void on_connection_close() noexcept override;
    // The guards' wait_lost handlers, which may own the coroutine that owns the guard.
    void drop_handlers_at_shutdown() noexcept override;

    using lock_outcome = detail::lock_outcome;

private:
    // One acquire. The caller's cancellation and the wait deadline reach it as *total*
    // cancellation, which the store honours only while the request is unsent; once sent, its
    // reply is always read, so a lock it grants is never lost track of.
    boost::asio::awaitable<grant_result> attempt(lock_keys const& keys, std::string const& token,
                                                 std::chrono::milliseconds ttl, queueing queue,
                                                 boost::asio::cancellation_state cs,
                                                 clock_type::time_point deadline,
                                                 replica_wait replicas);

    // Runs one attempt; on success builds the guard into `out`. A cancellation that arrived
    // meanwhile wins, and a lock granted to it is given back first.
    boost::asio::awaitable<std::optional<grant_result>>
    try_once(lock_keys const& keys, std::string const& token, std::string const& name,
             lock_options const& opt, queueing queue, boost::asio::cancellation_state cs,
             clock_type::time_point deadline, lock_outcome& out);

    // On the strand: queues `op` behind this process's waiters on its name (or a first attempt
    // in flight), or spawns its first attempt.
    void begin(std::shared_ptr<lock_operation> const& op);
    // Runs a coroutine for `op`: its first attempt, or a turn of its queue's head.
    void spawn(std::shared_ptr<lock_operation> const& op);
    boost::asio::awaitable<void> run(std::shared_ptr<lock_operation> op);
    // The first attempt; true when the call goes on waiting (it has joined the queue).
    boost::asio::awaitable<bool> first_attempt(lock_operation& op,
                                               boost::asio::cancellation_state cs);
    // The contended wait (local_queue.cpp): the head's turns, each ending in finish() or
    // park(); park() sleeps with no coroutine until `until` or a wake, then resume().
    boost::asio::awaitable<void> queue_turns(lock_operation& op,
                                             boost::asio::cancellation_state cs);
    void park(lock_operation& op, clock_type::time_point until);
    // When the head `op` next asks, sleeping from `now`.
    clock_type::time_point head_sleep_end(lock_operation& op, clock_type::time_point now);
    void resume(lock_operation& op);
    // Takes a baton given meanwhile: the lease of a holder of this process, now op's.
    bool take_baton(lock_operation& op);
    void fail(lock_operation& op, boost::system::error_code ec, std::string const& detail_text);
    // Ends the call: out of the queue (passing on a baton it did not take), a lock of unknown
    // outcome released in the background, the handler completed.
    void finish(lock_operation& op);

    static void set_failure(lock_outcome& out, std::string const& name,
                            boost::system::error_code ec, std::string const& detail_text);
    // What a failure reports after the lock's name.
    std::string failure_text(boost::system::error_code ec, std::string const& server_text,
                             lock_options const& opt, bool waited) const;
    // error::timeout's text.
    std::string timeout_text(lock_options const& opt) const;

    std::shared_ptr<guard_state> make_guard(std::string name, lock_keys keys, std::string token,
                                            std::int64_t fence, lock_options const& opt,
                                            clock_type::time_point attempt_start,
                                            std::uint64_t server_changes);
    // The guard of a waiter that took a baton: the lease goes on, with the waiter's token.
    std::shared_ptr<guard_state> make_handed_guard(std::string name, lock_keys keys,
                                                   std::string token, lease_baton baton,
                                                   lock_options const& opt);

    // A call's state reaches into its locker's queues and pending list as it goes.
    friend struct lock_operation;

    // The observer's events of a call.
    void note_acquired(lock_operation const& op, guard_state const& st, bool waited) const;
    void note_queue(lock_operation const& op, name_queue const& q) const;
    // A waiter given a baton leaves without taking it: the lease goes to the next local
    // waiter, or back to Redis.
    void pass_on(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);
    // A baton nobody here may take (its server was replaced, its lease was ended or Redis
    // granted the lock anew meanwhile): its lease goes back to Redis, in the background.
    void give_back(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);
    // Every call under way ends as a terminal cancellation ends it (operation_aborted, a lock
    // granted meanwhile given back, nothing left in the queues).
    void abort_pending();
    // "f <token> <lock key>" on record_key_: the lease of `token` was ended from outside.
    void on_forced(std::string const& payload);
    // Subscribes to record_key_ for forced unlocks (status.cpp).
    static boost::asio::awaitable<void> listen_for_forced(std::shared_ptr<locker_impl> self);

    std::shared_ptr<lease_store> const store_;
    boost::asio::strand<boost::asio::any_io_executor> const strand_; // the store's
    std::string const prefix_;
    std::string const owner_;
    std::string const locker_key_prefix_;
    std::string const record_key_; // this locker's
    // The fields of this locker's holder record (status.cpp).
    std::vector<std::pair<std::string, std::string>> const record_fields_;
    // On the strand:
    local_queues queues_;
    std::shared_ptr<lock_observer> observer_;
    std::minstd_rand rng_;
    // The calls begun and not finished.
    pending_operations pending_;
    clock_type::time_point record_expires_ = clock_type::time_point::min();
    bool listening_for_forced_ = false;  // the subscription was asked for
    bool subscribed_for_forced_ = false; // and confirmed
    bool closed_ = false;                // the locker is gone (its guards may live on)
    // The leases of the guards taken through this locker: their renewal schedule, and the
    // book a reconnection, a server change and the connection's close go through.
    std::shared_ptr<lease_book> const book_;
};

} // namespace colock::detail
