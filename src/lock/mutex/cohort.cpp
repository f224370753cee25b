// Cohort hand-off: a holder letting go passes the lease to the next waiter of this process on
// its name, without a round trip to Redis (lock cohorting, Dice, Marathe and Shavit, PPoPP
// 2012). The lock key keeps the lease's token; each holder gets its own guard, token and the
// next fence; the release to Redis stores the last fence given. A waiter that leaves with a
// baton passes it on. A forced unlock takes a baton of its lease back. On the locker's strand.
#include "lock/mutex/guard.hpp"
#include "lock/mutex/locker_impl.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <string_view>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

// Gives a lease nobody here takes back to Redis; a waiter here asks at once if the lock ends
// up free.
asio::awaitable<void> return_lease(std::shared_ptr<locker_impl> self, lock_keys keys,
                                   std::string lease_token, milliseconds claim,
                                   std::int64_t last_fence) {
    auto const reply = co_await self->store().release(keys, lease_token, claim, last_fence);
    if (reply.ec || !reply.handed)
        self->wake_local_head(keys);
}

} // namespace

bool locker_impl::hand_off_locally(guard_state& st) {
    auto* q = queues_.find(st.keys());
    if (!q)
        return false;
    waiter& next = q->waiters.front();
    if (next.baton || st.server_generation() != store_->server_changes(st.keys()))
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
                    q->others_queued || st.others_queued_at_grant()});
    local_queues::wake(next, wake_reason::handed);
    return true;
}

void locker_impl::pass_on(lock_keys const& keys, lease_baton baton, milliseconds claim) {
    auto* q = queues_.find(keys);
    if (q && !q->waiters.front().baton && baton.server_changes == store_->server_changes(keys) &&
        lease_left_to_pass(baton.deadline, clock_type::now())) {
        // The same hand-off, to the next in line: its fence was never used.
        waiter& next = q->waiters.front();
        next.baton = std::make_unique<lease_baton>(std::move(baton));
        local_queues::wake(next, wake_reason::handed);
        return;
    }
    give_back(keys, std::move(baton), claim);
}

void locker_impl::give_back(lock_keys const& keys, lease_baton baton, milliseconds claim) {
    auto self = weak_from_this().lock();
    if (!self)
        return; // the locker is going: the lease runs out by its ttl
    // The script checks the token: a lease that is gone already (a replaced server, a forced
    // unlock, a lock Redis granted anew) is left as it is, and with Redlock the store forgets it.
    asio::co_spawn(
        strand_,
        return_lease(std::move(self), keys, std::move(baton.lease_token), claim, baton.fence),
        asio::detached);
}

void locker_impl::wake_local_head(lock_keys const& keys) {
    if (auto* q = queues_.find(keys)) {
        q->wake_pending = true; // seen even if the head is busy asking
        local_queues::wake(q->waiters.front());
    }
}

void locker_impl::on_forced(std::string const& payload) {
    // "f <token> <lock key>"
    std::string_view rest(payload);
    if (!rest.starts_with("f "))
        return;
    rest.remove_prefix(2);
    auto const space = rest.find(' ');
    if (space == std::string_view::npos)
        return;
    auto const token = rest.substr(0, space);
    auto const key = rest.substr(space + 1);
    book_->mark_forced_lost(key, token);
    retained_.on_forced(key, token);
    // A waiter here that a holder of this process handed the lease to must not take it now.
    // The key no longer holds the lease (the script made it "R <fence> -"), so the give-back
    // changes nothing there; with Redlock the store forgets the lease.
    if (auto* q = queues_.find(lock_keys(std::string(key), owner_)))
        for (auto& w : q->waiters)
            if (w.baton && w.baton->lease_token == token)
                give_back(q->keys, std::move(*std::exchange(w.baton, nullptr)),
                          handoff_claim(static_cast<lock_operation&>(w).options().ttl));
}

} // namespace colock::detail
