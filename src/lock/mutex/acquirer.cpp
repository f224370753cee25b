// One ask of the lease store for a call, as its acquisition machine directs it, and the guard
// its grant makes.
#include "lock/mutex/acquirer.hpp"

#include "lock/base/request_stop.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/lock_operation.hpp"
#include "lock/mutex/retention.hpp"

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

asio::awaitable<grant_result> acquirer::attempt(lock_keys const& keys, std::string const& token,
                                                milliseconds ttl, queueing queue,
                                                asio::cancellation_state cs,
                                                clock_type::time_point deadline,
                                                replica_wait replicas) {
    request_stop const stop(cs, context_.strand(), deadline);
    auto r = co_await context_.store().grant(keys, token, ttl, queue, stop.slot(), replicas);
    co_return r;
}

std::shared_ptr<guard_state>
acquirer::make_guard(std::string name, lock_keys keys, std::string token, std::int64_t fence,
                     lock_options const& opt, clock_type::time_point attempt_start,
                     clock_type::time_point lease_end, std::uint64_t server_changes,
                     bool others_queued, std::optional<held_value> written) {
    lease_origin origin;
    origin.lease_token = token;
    origin.lease_fence = fence;
    origin.granted_at = clock_type::now();
    // The count the grant was checked against, not a newer one: a change counted since then
    // is one this lease did not survive.
    origin.server_changes = server_changes;
    origin.acquired_at = attempt_start;
    origin.deadline = lease_end;
    origin.others_queued_at_grant = others_queued;
    origin.written = written;
    auto st = std::make_shared<guard_state>(life_.share(owner_), std::move(name), std::move(keys),
                                            std::move(token), fence, opt, std::move(origin));
    st->hold();
    return st;
}

std::shared_ptr<guard_state> acquirer::make_handed_guard(std::string name, lock_keys keys,
                                                         std::string token, lease_baton baton,
                                                         lock_options const& opt,
                                                         bool from_retention) {
    lease_origin origin;
    origin.lease_token = std::move(baton.lease_token);
    origin.lease_fence = baton.lease_fence;
    origin.granted_at = baton.granted_at;
    origin.local_handoffs = baton.local_handoffs;
    origin.server_changes = baton.server_changes;
    origin.acquired_at = clock_type::now();
    origin.deadline = baton.deadline;
    origin.from_retention = from_retention;
    origin.others_queued_at_grant = baton.others_queued;
    origin.written = baton.written;
    auto st = std::make_shared<guard_state>(life_.share(owner_), std::move(name), std::move(keys),
                                            std::move(token), baton.fence, opt, std::move(origin));
    st->hold();
    return st;
}

asio::awaitable<acquisition_action>
acquirer::try_once(lock_keys const& keys, std::string const& token, std::string const& name,
                   lock_options const& opt, queueing queue, asio::cancellation_state cs,
                   acquisition& acq, lock_outcome& out) {
    auto& store = context_.store();
    replica_wait const replicas{opt.wait_replicas, opt.replicas_timeout};
    auto next = acq.begin_attempt(false);
    auto started = clock_type::now();
    auto server_changes = store.server_changes(keys);
    auto lease_end = started;
    while (next.step == acquisition_step::ask) {
        started = clock_type::now();
        server_changes = store.server_changes(keys);
        // How long the lease is known to be ours: from the request, since the server may have
        // applied it at any moment until the reply was read.
        lease_end = started + store.safe_ttl(opt.ttl);
        // (Not in the braces of an initializer: GCC 12 destroys a co_await's result there twice.)
        store_answer answer;
        answer.result = co_await attempt(keys, token, opt.ttl, queue, cs, next.until, replicas);
        answer.lease_end = lease_end;
        answer.server_changed = store.server_changes(keys) != server_changes;
        next = acq.on_answer(answer, clock_type::now(), cancelled(cs));
        while (next.step == acquisition_step::give_back) {
            auto const released =
                co_await store.release(keys, token, handoff_claim(opt.ttl), 0, std::nullopt);
            next = acq.on_given_back(!released.ec, clock_type::now(), cancelled(cs));
        }
    }
    if (acq.outcome_unknown())
        out.outcome_unknown = true; // it may have been applied: release on the way out
    if (next.step == acquisition_step::finish && next.end == acquisition_end::acquired) {
        auto const& r = acq.answer();
        out.state = make_guard(name, keys, token, r.fence, opt, started, lease_end, server_changes,
                               r.others_queued, r.written);
        // A lease that may be kept at its let-go: a locker elsewhere that queues meanwhile is
        // heard.
        if (opt.retain.count() > 0 && !r.others_queued && keys.record_key.empty())
            retained_.watch(keys);
    }
    co_return next;
}

} // namespace colock::detail
