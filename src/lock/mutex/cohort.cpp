// Cohort hand-off: the lock key keeps the lease's token; each holder gets its own guard, token
// and the next fence; the release to Redis stores the last fence given. A waiter that leaves
// with a baton passes it on. A forced unlock takes a baton of its lease back. On the locker's
// strand.
#include "lock/mutex/cohort.hpp"

#include "lock/core/acquire_policy.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/lock_operation.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

bool cohort::hand_off_locally(guard_state& st) {
    auto* q = queues_.find(st.keys());
    if (!q)
        return false;
    waiter& next = q->waiters.front();
    if (next.baton || st.server_generation() != context_.store().server_changes(st.keys()))
        return false;
    cohort_facts const facts{st.options().cohort_limit,
                             st.local_handoffs(),
                             q->others_queued,
                             st.gone(),
                             st.deadline(),
                             st.fence() + 1,
                             st.lease_fence(),
                             st.lease_granted_at()};
    if (!may_hand_off_locally(facts, clock_type::now()))
        return false;
    next.baton = std::make_unique<lease_baton>(
        lease_baton{st.lease_token(), st.lease_fence(), st.fence() + 1, st.lease_granted_at(),
                    st.deadline(), st.local_handoffs() + 1, st.server_generation(),
                    q->others_queued || st.others_queued_at_grant(),
                    q->others_queued ? std::nullopt : st.written()});
    local_queues::wake(next, wake_reason::handed);
    return true;
}

void cohort::pass_on(lock_keys const& keys, lease_baton baton, milliseconds claim) {
    auto* q = queues_.find(keys);
    if (q && !q->waiters.front().baton &&
        baton.server_changes == context_.store().server_changes(keys) &&
        lease_left_to_pass(baton.deadline, clock_type::now())) {
        // The same hand-off, to the next in line: its fence was never used.
        waiter& next = q->waiters.front();
        next.baton = std::make_unique<lease_baton>(std::move(baton));
        local_queues::wake(next, wake_reason::handed);
        return;
    }
    give_back(keys, std::move(baton), claim);
}

void cohort::give_back(lock_keys const& keys, lease_baton baton, milliseconds claim) {
    // The script checks the token: a lease that is gone already (a replaced server, a forced
    // unlock, a lock Redis granted anew) is left as it is, and with Redlock the store forgets it.
    release_in_background(keys, std::move(baton.lease_token), claim, baton.fence, baton.written,
                          true);
}

void cohort::release_unseen(lock_keys const& keys, std::string token, milliseconds claim) {
    release_in_background(keys, std::move(token), claim, 0, std::nullopt, false);
}

void cohort::release_in_background(lock_keys const& keys, std::string token, milliseconds claim,
                                   std::int64_t last_fence, std::optional<held_value> written,
                                   bool wake_head) {
    auto self = life_.hold(*this);
    if (!self)
        return; // the locker is going: the lease runs out by its ttl
    asio::co_spawn(
        context_.strand(),
        release(std::move(self), keys, std::move(token), claim, last_fence, written, wake_head),
        asio::detached);
}

asio::awaitable<void> cohort::release(std::shared_ptr<cohort> self, lock_keys keys,
                                      std::string token, milliseconds claim,
                                      std::int64_t last_fence, std::optional<held_value> written,
                                      bool wake_head) {
    auto const reply =
        co_await self->context_.store().release(keys, token, claim, last_fence, written);
    if (wake_head && (reply.ec || !reply.handed))
        self->wake_local_head(keys);
}

void cohort::wake_local_head(lock_keys const& keys) {
    if (auto* q = queues_.find(keys)) {
        q->wake_pending = true; // seen even if the head is busy asking
        local_queues::wake(q->waiters.front());
    }
}

void cohort::on_forced(std::string_view key, std::string_view token) {
    // The key no longer holds the lease (the script made it "R <fence> -"), so the give-back
    // changes nothing there; with Redlock the store forgets the lease.
    if (auto* q = queues_.find(lock_keys(std::string(key), context_.id())))
        for (auto& w : q->waiters)
            if (w.baton && w.baton->lease_token == token)
                give_back(q->keys, std::move(*std::exchange(w.baton, nullptr)),
                          handoff_claim(lock_operation::of(w).options().ttl));
}

} // namespace colock::detail
