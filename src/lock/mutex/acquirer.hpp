// One ask of the lease store for a call, as its acquisition machine directs it, and the guard
// its grant makes (or a lease handed on by a holder of this process makes). Private to the
// library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/local_queue.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/mutex/guard_owner.hpp"
#include "lock/mutex/locker_life.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_options.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace colock::detail {

class guard_state;
class retained_leases;
struct lock_outcome;

class acquirer {
public:
    // The guards it makes belong to `owner`, held through `life`; they, `context` and
    // `retained` outlive this.
    acquirer(locker_context& context, retained_leases& retained, guard_owner& owner,
             locker_life const& life)
        : context_(context), retained_(retained), owner_(owner), life_(life) {}

    // Runs one attempt of `acq` (asked for again over a replaced server; a grant read for a
    // cancelled call, or too late to hold, given back); on a grant builds the guard into `out`,
    // and marks `out` when an attempt may have been applied unseen. What `acq` does next:
    // finish, or wait.
    boost::asio::awaitable<acquisition_action>
    try_once(lock_keys const& keys, std::string const& token, std::string const& name,
             lock_options const& opt, queueing queue, boost::asio::cancellation_state cs,
             acquisition& acq, lock_outcome& out);

    // The guard of a waiter that took a baton, or of a call that took a kept lease
    // (`from_retention`): the lease goes on, with the new holder's token.
    std::shared_ptr<guard_state> make_handed_guard(std::string name, lock_keys keys,
                                                   std::string token, lease_baton baton,
                                                   lock_options const& opt,
                                                   bool from_retention = false);

private:
    // One acquire. The caller's cancellation and the wait deadline reach it as *total*
    // cancellation, which the store honours only while the request is unsent; once sent, its
    // reply is always read, so a lock it grants is never lost track of.
    boost::asio::awaitable<grant_result> attempt(lock_keys const& keys, std::string const& token,
                                                 std::chrono::milliseconds ttl, queueing queue,
                                                 boost::asio::cancellation_state cs,
                                                 clock_type::time_point deadline,
                                                 replica_wait replicas);

    std::shared_ptr<guard_state> make_guard(std::string name, lock_keys keys, std::string token,
                                            std::int64_t fence, lock_options const& opt,
                                            clock_type::time_point attempt_start,
                                            clock_type::time_point lease_end,
                                            std::uint64_t server_changes, bool others_queued,
                                            std::optional<held_value> written);

    locker_context& context_;
    retained_leases& retained_;
    guard_owner& owner_;
    locker_life const& life_;
};

} // namespace colock::detail
