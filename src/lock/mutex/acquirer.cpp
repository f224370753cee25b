// One ask of the lease store for a call, and the guard or failure text its answer makes.
#include "lock/mutex/acquirer.hpp"

#include "lock/base/request_stop.hpp"
#include "lock/core/acquire_policy.hpp"

#include "lock/base/errors.hpp"
#include "lock/mutex/guard.hpp"
#include "lock/mutex/locker_impl.hpp"

#include <colock/redis/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

asio::awaitable<grant_result> acquirer::attempt(lock_keys const& keys, std::string const& token,
                                                milliseconds ttl, queueing queue,
                                                asio::cancellation_state cs,
                                                clock_type::time_point deadline,
                                                replica_wait replicas) {
    request_stop const stop(cs, locker_.strand(), deadline);
    auto r = co_await locker_.store().grant(keys, token, ttl, queue, stop.slot(), replicas);
    co_return r;
}

void acquirer::set_failure(lock_outcome& out, std::string_view kind, std::string const& name,
                           error_code ec, std::string const& detail_text) {
    // Without the source location Asio attaches: the message is about the lock, not about
    // where in Asio the error was noticed.
    out.ec = error_code(ec.value(), ec.category());
    out.message = detail_text.empty() ? fmt::format("colock: {} '{}'", kind, name)
                                      : fmt::format("colock: {} '{}': {}", kind, name, detail_text);
}

std::string acquirer::failure_text(error_code ec, std::string const& server_text,
                                   lock_options const& opt, bool waited,
                                   std::string_view kind) const {
    return with_acl_pointer(
        attempt_failure_text(ec, server_text, opt, waited, locker_.store().last_error_text()),
        kind);
}

std::string acquirer::timeout_text(lock_options const& opt) const {
    return wait_timeout_text(opt, locker_.store().is_connected(),
                             locker_.store().last_error_text());
}

std::shared_ptr<guard_state>
acquirer::make_guard(std::string name, lock_keys keys, std::string token, std::int64_t fence,
                     lock_options const& opt, clock_type::time_point attempt_start,
                     clock_type::time_point lease_end, std::uint64_t server_changes,
                     bool others_queued) {
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
    auto st =
        std::make_shared<guard_state>(locker_.shared_from_this(), std::move(name), std::move(keys),
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
    auto st =
        std::make_shared<guard_state>(locker_.shared_from_this(), std::move(name), std::move(keys),
                                      std::move(token), baton.fence, opt, std::move(origin));
    st->hold();
    return st;
}

asio::awaitable<std::optional<grant_result>>
acquirer::try_once(lock_keys const& keys, std::string const& token, std::string const& name,
                   lock_options const& opt, queueing queue, asio::cancellation_state cs,
                   clock_type::time_point deadline, lock_outcome& out) {
    auto started = clock_type::now();
    auto server_changes = locker_.store().server_changes(keys);
    replica_wait const replicas{opt.wait_replicas, opt.replicas_timeout};
    grant_result r = co_await attempt(keys, token, opt.ttl, queue, cs, deadline, replicas);
    // Granted by a server instance that has been replaced since (its keys may be gone, and the
    // guards it granted were marked lost): ask the new one. Same token, so this is idempotent.
    for (int rounds = 0; !r.ec && r.granted && !cancelled(cs) && rounds < 3 &&
                         locker_.store().server_changes(keys) != server_changes;
         ++rounds) {
        started = clock_type::now();
        server_changes = locker_.store().server_changes(keys);
        r = co_await attempt(keys, token, opt.ttl, queue, cs, deadline, replicas);
    }
    if (!r.ec && r.granted && locker_.store().server_changes(keys) != server_changes) {
        // The server keeps changing: give up this attempt, as one whose reply was lost (a
        // passing error, so co_lock tries again), and release on the way out.
        r.ec = redis::error::connection_lost;
        r.granted = false;
        r.outcome_unknown = true;
    }
    if (r.outcome_unknown)
        out.outcome_unknown = true; // it may have been applied: release on the way out
    if (!r.ec && r.granted && cancelled(cs)) {
        auto const released =
            co_await locker_.store().release(keys, token, handoff_claim(opt.ttl), 0);
        if (released.ec)
            out.outcome_unknown = true; // try once more on the way out
        r.granted = false;
        r.ec = asio::error::operation_aborted;
    }
    // How long the lease is known to be ours: from the request, since the server may have
    // applied it at any moment until the reply was read.
    auto const lease_end = started + locker_.store().safe_ttl(opt.ttl);
    if (!r.ec && r.granted && !lease_left_to_pass(lease_end, clock_type::now())) {
        // The reply was read when the lease it granted was over, or all but (a starved process,
        // or a round trip as long as the ttl): its guard would never own the lock. Given back,
        // and answered as a lock held by another that is gone meanwhile: co_lock asks again at
        // once, co_try_lock returns nothing.
        auto const released =
            co_await locker_.store().release(keys, token, handoff_claim(opt.ttl), 0);
        if (released.ec)
            out.outcome_unknown = true; // try once more on the way out
        r.granted = false;
        r.holder_ttl = milliseconds(0);
    }
    if (r.ec == asio::error::operation_aborted && !cancelled(cs))
        r.ec = error::timeout; // stopped by the wait deadline before it was sent
    if (!r.ec && r.granted) {
        out.state = make_guard(name, keys, token, r.fence, opt, started, lease_end, server_changes,
                               r.others_queued);
        // A lease that may be kept at its let-go: a locker elsewhere that queues meanwhile is
        // heard.
        if (opt.retain.count() > 0 && !r.others_queued && keys.record_key.empty())
            locker_.retained().watch(keys);
    }
    co_return r;
}

} // namespace colock::detail
