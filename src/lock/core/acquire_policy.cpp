#include "lock/core/acquire_policy.hpp"

#include "lock/base/errors.hpp"

#include <colock/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace colock::detail {

using std::chrono::milliseconds;

bool worth_retrying(boost::system::error_code ec, std::string_view server_text,
                    wait_deadlines const& deadlines, clock_type::time_point now) {
    if (is_connect_failure(ec))
        return !is_lasting_connect_failure(ec) && now < deadlines.first_connect;
    return is_transient(ec, server_text);
}

void note_attempt(wait_deadlines& d, boost::system::error_code& ec, std::string& server_text,
                  clock_type::time_point now) {
    if (ec == error::timeout && d.connect_failure && now < d.wait) {
        ec = d.connect_failure;
        server_text = d.connect_failure_text;
        return;
    }
    if (is_connect_failure(ec) && !is_lasting_connect_failure(ec)) {
        d.connect_failure = ec;
        d.connect_failure_text = server_text;
    } else {
        d.connect_failure = {};
        d.connect_failure_text.clear();
    }
}

acquire_decision decide_after_attempt(grant_result const& r, attempt_context const& ctx,
                                      bool cancelled, clock_type::time_point now) {
    if (r.granted)
        return {next_step::acquired};
    if (ctx.queued && cancelled) // arrived while the attempt was in flight
        return {next_step::aborted};
    if (r.ec == error::timeout)
        return {next_step::fail_timeout};
    // A passing failure that ended at or after the wait deadline (a connect attempt timing out
    // just as wait_timeout runs out): the caller's bound is what stopped it.
    if (r.ec && ctx.wait && now >= ctx.deadlines.wait &&
        (is_transient(r.ec, r.server_text) ||
         (is_connect_failure(r.ec) && !is_lasting_connect_failure(r.ec))))
        return {next_step::fail_timeout};
    if (r.ec && !(ctx.wait && worth_retrying(r.ec, r.server_text, ctx.deadlines, now)))
        return {next_step::fail};
    if (cancelled) // requested while the attempt was in flight: reported
        return {next_step::aborted};
    if (!ctx.wait)
        return {next_step::not_acquired}; // held by someone else
    // Held, or the connection was lost: a lost connection leaves the attempt's outcome
    // unknown, but the acquire script is idempotent for our token, so asking again is safe.
    return {next_step::wait, r.ec ? ctx.retry_max : r.holder_ttl};
}

bool lease_left_to_pass(clock_type::time_point deadline, clock_type::time_point now) {
    return now + milliseconds{1} < deadline;
}

bool may_hand_off_locally(cohort_facts const& f, clock_type::time_point now) {
    if (f.cohort_limit == 0 || f.lost)
        return false;
    if (!lease_left_to_pass(f.lease_deadline, now))
        return false;
    if (f.others_queued && f.local_handoffs >= f.cohort_limit)
        return false;
    return fence_in_step(f.next_fence, f.lease_fence, f.granted_at, now);
}

bool fence_in_step(std::int64_t next_fence, std::int64_t lease_fence,
                   clock_type::time_point granted_at, clock_type::time_point now) {
    auto const since_grant =
        std::chrono::duration_cast<std::chrono::microseconds>(now - granted_at).count();
    return next_fence - lease_fence <= since_grant;
}

milliseconds backoff(retry_options const& retry, int attempt, std::minstd_rand& rng) {
    // Capped well inside int64 so the conversion back cannot overflow; 2^62 ms is still
    // "very long" (146 million years), and the caller saturates the sleep's end.
    constexpr double cap = 4611686018427387904.0; // 2^62
    double ceiling = static_cast<double>(retry.initial.count()) *
                     std::pow(retry.multiplier, std::min(attempt, 60));
    ceiling = std::min({ceiling, static_cast<double>(retry.max.count()), cap});
    std::uniform_real_distribution<double> jitter(0.0, ceiling);
    return milliseconds(static_cast<std::int64_t>(jitter(rng)) + 1);
}

clock_type::time_point head_wakes_at(clock_type::time_point now,
                                     clock_type::time_point wait_deadline, milliseconds sleep,
                                     milliseconds backoff) {
    auto const nap = std::min(sleep, backoff);
    return std::min(wait_deadline, saturating_add(now, std::max(nap, milliseconds{1})));
}

clock_type::time_point permit_wakes_at(clock_type::time_point now,
                                       clock_type::time_point wait_deadline,
                                       milliseconds first_expiry, bool listening,
                                       milliseconds backoff) {
    auto nap = first_expiry.count() > 0 ? first_expiry : backoff;
    if (!listening)
        nap = std::min(nap, backoff);
    nap = std::clamp(nap, milliseconds{1}, queue_refresh_interval);
    return std::min(wait_deadline, saturating_add(now, nap));
}

} // namespace colock::detail
