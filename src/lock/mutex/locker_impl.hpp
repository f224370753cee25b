// A locker's state: its identity and store, the units its calls go through (each given the
// few others it uses), what its guards see of it (guard_owner), and what its connection tells
// it. Private to the library's sources.
#pragma once

#include "detail/context_shutdown.hpp"
#include "lock/base/common.hpp"
#include "lock/core/channel_routes.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/lease.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/acquirer.hpp"
#include "lock/mutex/cohort.hpp"
#include "lock/mutex/guard_owner.hpp"
#include "lock/mutex/lock_calls.hpp"
#include "lock/mutex/lock_notes.hpp"
#include "lock/mutex/lock_operation.hpp"
#include "lock/mutex/locker_life.hpp"
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
                          public channel_events,
                          public guard_owner {
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

    // The calls under way (lock_calls.cpp), held with the locker: a call holds them.
    std::shared_ptr<lock_calls> calls() { return life_.share(calls_); }

    boost::asio::awaitable<lock_guard> co_lock_in(key_space space, std::string name,
                                                  lock_options opt) override;

    // guard_owner: what the guards see of the locker.
    lease_store& store() const noexcept override { return *store_; }
    std::shared_ptr<lease_book> const& book() const noexcept override { return book_; }
    // Calls waiting in the local queues; from any thread.
    std::size_t waiting() const noexcept override { return queues_.waiting(); }
    lock_notes const& notes() const noexcept override { return notes_; }
    retained_leases& retained() noexcept override { return retained_; }
    void keep_record(std::chrono::milliseconds ttl) override;
    void keep_holder_record(std::chrono::milliseconds ttl) override { keep_record(ttl); }
    lock_observer* observer() const noexcept override { return notes_.observer(); }
    bool let_go_locally(guard_state& st) override;
    void wake_local_head(lock_keys const& keys) override;

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
    // from outside.
    void on_forced(std::string const& payload);

    // What the units hold for their background work.
    locker_life const life_;
    std::shared_ptr<holder_record> const record_; // shared with its subscription's coroutine
    // The units, on the strand: the local queues, the observer's events (lock_notes.cpp), the
    // cohort hand-off (cohort.cpp), the kept leases (retention.cpp), the asks of the store
    // (acquirer.cpp), the wait in the local queues (queue_wait.cpp) and the calls under way
    // (lock_calls.cpp). Each is given the few others it uses.
    local_queues queues_;
    lock_notes notes_;
    cohort cohort_;
    retained_leases retained_;
    acquirer acquirer_;
    queue_wait waits_;
    lock_calls calls_;
};

} // namespace colock::detail
