// What a lock_guard holds: the lease core (lease.hpp) and the lock's identity. Private to the
// library's sources.
#pragma once

#include "detail/completion.hpp"
#include "lock/base/common.hpp"
#include "lock/core/lease.hpp"
#include "lock/mutex/guard_owner.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/locker.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

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

// Where a guard's lease came from: Redis's grant, or a baton of a holder of this process.
struct lease_origin {
    std::string lease_token;           // the token the lock key holds (the first holder's)
    std::int64_t lease_fence = 0;      // the fence Redis gave the lease
    clock_type::time_point granted_at; // when Redis's grant came
    std::size_t local_handoffs = 0;    // hand-offs within this process so far
    std::uint64_t server_changes = 0;  // the store's count when the grant was checked
    clock_type::time_point acquired_at;
    clock_type::time_point deadline; // the lease's local bound
    // Redis's grant said a locker of another process was queued for the lease: it is not
    // retained (lock_options::retain) when let go.
    bool others_queued_at_grant = false;
    bool from_retention = false; // taken from a lease the locker kept (lock_options::retain)
    // What the lock key holds, when known: the grant wrote it with nobody queued, and nothing
    // this process heard of changed it since (held_value).
    std::optional<held_value> written;
};

// A lock guard's state: the lease core, with the lock's identity (name, keys, this holder's
// token and fence) and the lease in Redis that a cohort of this process's holders pass on.
// Shared by the guard, its renewal and its background release.
class guard_state final : public lease {
public:
    guard_state(std::shared_ptr<guard_owner> owner, std::string name, lock_keys keys,
                std::string token, std::int64_t fence, lock_options const& opt,
                lease_origin origin);

    guard_owner& owner() const noexcept { return *owner_; }
    // The owner, held: background work of the guard keeps the locker's state alive.
    std::shared_ptr<guard_owner> const& shared_owner() const noexcept { return owner_; }
    std::string const& name() const noexcept { return name_; }
    lock_keys const& keys() const noexcept { return keys_; }
    std::string const& token() const noexcept { return token_; }
    std::int64_t fence() const noexcept { return fence_; }
    lock_options const& options() const noexcept { return opt_; }
    // The lease in Redis: renewal, extend and release use its token.
    std::string const& lease_token() const noexcept { return origin_.lease_token; }
    std::int64_t lease_fence() const noexcept { return origin_.lease_fence; }
    clock_type::time_point lease_granted_at() const noexcept { return origin_.granted_at; }
    std::size_t local_handoffs() const noexcept { return origin_.local_handoffs; }
    bool others_queued_at_grant() const noexcept { return origin_.others_queued_at_grant; }
    bool from_retention() const noexcept { return origin_.from_retention; }
    // What the lock key holds now, as far as this process knows (held_value): the release
    // sends it, and a baton passes it on. Any thread.
    std::optional<held_value> written() const noexcept;

    // Joins the locker's book and starts renewing; once, when made.
    void hold();

    // --- the holds: how many lock_guards share this lease (share(), lock_scope). The lease is
    // given back when the last lets go. Any thread.
    std::size_t holds() const noexcept { return holds_.load(); }
    // One more, from a guard that holds one (so never from zero).
    void add_hold() noexcept { holds_.fetch_add(1); }
    // One more unless none is left (a scope's record of a lease whose guards all went): once
    // at zero the lease is being given back and stays so.
    bool try_add_hold() noexcept;
    // One fewer; true when it was the last.
    bool drop_hold() noexcept { return holds_.fetch_sub(1) == 1; }

    std::shared_ptr<guard_state> shared() {
        return std::static_pointer_cast<guard_state>(shared_from_this());
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
    void on_confirmed(std::chrono::milliseconds ttl) override;

    std::shared_ptr<guard_owner> const owner_;
    std::string const name_;
    lock_keys const keys_;
    std::string const token_;
    std::int64_t const fence_;
    lock_options const opt_;
    lease_origin const origin_;
    std::atomic<std::size_t> holds_{1};
    // A renewal of this guard's was confirmed: it stored fence_ in the key (a lease's fences
    // only grow along its holders, so the stored one was no larger).
    std::atomic<bool> renewal_confirmed_{false};
    // A renewal found the key holding another value while the lease was ours (another locker
    // queued behind it): written() no longer knows it.
    std::atomic<bool> value_changed_{false};
};

// What lock_scope (scope.cpp) needs of a lock_guard beyond its public face.
struct guard_access {
    static std::shared_ptr<guard_state> const& state(lock_guard const& g) noexcept {
        return g.state_;
    }
    // A guard with one more hold on `st`, or an empty one when none is left.
    static lock_guard try_share(std::shared_ptr<guard_state> st) noexcept;
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
