// A locker: its identity and store, the units its calls go through, the cohort hand-off
// between its holders and waiters, and what its connection tells it. Private to the library's
// sources.
#pragma once

#include "detail/context_shutdown.hpp"
#include "lock/base/common.hpp"
#include "lock/core/channel_routes.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/lease.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/acquirer.hpp"
#include "lock/mutex/lock_calls.hpp"
#include "lock/mutex/lock_notes.hpp"
#include "lock/mutex/lock_operation.hpp"
#include "lock/mutex/queue_wait.hpp"
#include "lock/mutex/retention.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace colock::detail {

class guard_state;

class locker_impl final : public locker_context,
                          public std::enable_shared_from_this<locker_impl>,
                          public holds_handlers,
                          public channel_events {
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

    // Calls waiting in the local queues; from any thread.
    std::size_t waiting() const noexcept { return queues_.waiting(); }

    // The units of the locker, on the strand: the calls under way (lock_calls.cpp), their
    // wait in the local queues (queue_wait.cpp), the asks of the store (acquirer.cpp), the
    // observer's events (lock_notes.cpp) and the holder record (holder_record.cpp).
    lock_calls& calls() noexcept { return calls_; }
    queue_wait& waits() noexcept { return waits_; }
    acquirer& asks() noexcept { return acquirer_; }
    local_queues& queues() noexcept { return queues_; }
    lock_notes const& notes() const noexcept { return notes_; }
    holder_record& record() noexcept { return *record_; }
    // The leases kept after their holders let go (lock_options::retain).
    retained_leases& retained() noexcept { return retained_; }

    // Cohort hand-off (cohort.cpp), on the strand: passes the lease of `st`, which is letting
    // go, to the next waiter of this process on its name, if allowed; true when it did.
    bool hand_off_locally(guard_state& st);
    // After a release to Redis that did not hand the lock to a queued locker: the first local
    // waiter on `keys` asks now rather than after its sleep.
    void wake_local_head(lock_keys const& keys);
    // A waiter given a baton leaves without taking it: the lease goes to the next local
    // waiter, or back to Redis.
    void pass_on(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);
    // A baton nobody here may take (its server was replaced, its lease was ended or Redis
    // granted the lock anew meanwhile): its lease goes back to Redis, in the background.
    void give_back(lock_keys const& keys, lease_baton baton, std::chrono::milliseconds claim);

    boost::asio::awaitable<lock_guard> co_lock_in(key_space space, std::string name,
                                                  lock_options opt) override;

    // channel_events and holds_handlers.
    void on_message(std::string const& channel, std::string const& payload) override;
    void on_reconnect() override;
    void on_server_change() override;
    // The connection is being closed by its user: see channel_events. From any thread.
    void on_close() noexcept override;
    // The guards' wait_lost handlers, which may own the coroutine that owns the guard.
    void drop_handlers() noexcept override;

private:
    // "f <token> <lock key>" on the holder record's channel: the lease of `token` was ended
    // from outside (cohort.cpp).
    void on_forced(std::string const& payload);

    std::shared_ptr<holder_record> const record_; // shared with its subscription's coroutine
    // On the strand:
    local_queues queues_;
    lock_notes notes_;
    acquirer acquirer_;
    lock_calls calls_;
    queue_wait waits_;
    retained_leases retained_;
};

} // namespace colock::detail
