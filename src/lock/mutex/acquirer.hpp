// One ask of the lease store for a call, and what its answer makes: the guard of a grant (or
// of a lease handed on by a holder of this process), or the text of a failure. Private to the
// library's sources; on the locker's strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/acquire_policy.hpp"
#include "lock/core/local_queue.hpp"
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
class locker_impl;
struct lock_outcome;

class acquirer {
public:
    // `locker` owns this and makes the guards' owner.
    explicit acquirer(locker_impl& locker) : locker_(locker) {}

    // Runs one attempt; on success builds the guard into `out`. A cancellation that arrived
    // meanwhile wins, and a lock granted to it is given back first.
    boost::asio::awaitable<std::optional<grant_result>>
    try_once(lock_keys const& keys, std::string const& token, std::string const& name,
             lock_options const& opt, queueing queue, boost::asio::cancellation_state cs,
             clock_type::time_point deadline, lock_outcome& out);

    // The guard of a waiter that took a baton, or of a call that took a kept lease
    // (`from_retention`): the lease goes on, with the new holder's token.
    std::shared_ptr<guard_state> make_handed_guard(std::string name, lock_keys keys,
                                                   std::string token, lease_baton baton,
                                                   lock_options const& opt,
                                                   bool from_retention = false);

    // The message names `kind` ("lock", "election") and `name`, as the user called them.
    static void set_failure(lock_outcome& out, std::string_view kind, std::string const& name,
                            boost::system::error_code ec, std::string const& detail_text);
    // What a failure reports after the lock's name; an ACL refusal names where the list of
    // what a `kind` needs is.
    std::string failure_text(boost::system::error_code ec, std::string const& server_text,
                             lock_options const& opt, bool waited, std::string_view kind) const;
    // error::timeout's text.
    std::string timeout_text(lock_options const& opt) const;

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
                                            std::uint64_t server_changes, bool others_queued);

    locker_impl& locker_;
};

} // namespace colock::detail
