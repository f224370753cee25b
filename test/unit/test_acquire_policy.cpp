// co_lock's acquire–wait–retry decisions without a server: each kind of attempt outcome, with
// errors injected at every step of a waiting co_lock, and the sleeps between attempts.
#include "lock/core/acquire_policy.hpp"

#include "failed_reply.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/system/errc.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

using namespace colock::detail;
using namespace std::chrono_literals;
using boost::system::error_code;
using std::chrono::milliseconds;
namespace redis = colock::redis;

namespace {

clock_type::time_point const t0 = clock_type::time_point{} + std::chrono::hours{1000};

grant_result granted(std::int64_t fence = 7) {
    grant_result r;
    r.granted = true;
    r.fence = fence;
    return r;
}

grant_result held(milliseconds holder_ttl) {
    grant_result r;
    r.holder_ttl = holder_ttl;
    return r;
}

grant_result failed(error_code ec, std::string server_text = {}) {
    return colock::test::failed_reply<grant_result>(ec, std::move(server_text));
}

grant_result server_said(std::string text) {
    return failed(redis::error::server_error, std::move(text));
}

error_code refused() {
    return make_error_code(boost::system::errc::connection_refused);
}

// A co_lock (wait) or co_try_lock, first attempt or a queue head's, with wait_timeout 10 s and
// first_connect_timeout 2 s from t0, retry.max 1 s.
attempt_context context(bool wait, bool queued = false) {
    return attempt_context{wait, queued, wait_deadlines{t0 + 10s, t0 + 2s}, 1000ms};
}

next_step step(grant_result const& r, attempt_context const& ctx, bool cancelled = false,
               clock_type::time_point now = t0) {
    return decide_after_attempt(r, ctx, cancelled, now).step;
}

} // namespace

TEST_CASE("a granted lease ends every kind of attempt") {
    for (bool wait : {false, true})
        for (bool queued : {false, true})
            CHECK(step(granted(), context(wait, queued)) == next_step::acquired);
}

TEST_CASE("a lease held by another: co_lock sleeps up to the holder's ttl, co_try_lock is empty") {
    auto const d = decide_after_attempt(held(1234ms), context(true), false, t0);
    CHECK(d.step == next_step::wait);
    CHECK(d.sleep == 1234ms);
    // Gone meanwhile: ask again at once; set without expiry: back off only.
    CHECK(decide_after_attempt(held(0ms), context(true), false, t0).sleep == 0ms);
    CHECK(decide_after_attempt(held(milliseconds::max()), context(true, true), false, t0).sleep ==
          milliseconds::max());
    CHECK(step(held(1234ms), context(false)) == next_step::not_acquired);
}

TEST_CASE("passing errors are waited out by co_lock (retry.max) and reported by co_try_lock") {
    std::vector<grant_result> passing;
    passing.push_back(failed(redis::error::connection_lost));
    passing.push_back(failed(redis::error::health_check_timeout));
    for (char const* text :
         {"LOADING Redis is loading the dataset in memory", "BUSY Redis is busy running a script",
          "TRYAGAIN", "MASTERDOWN", "READONLY You can't write against a read only replica.",
          "CLUSTERDOWN The cluster is down"})
        passing.push_back(server_said(text));
    for (auto const& r : passing) {
        CAPTURE(r.ec.message());
        CAPTURE(r.server_text);
        for (bool queued : {false, true}) {
            auto const d = decide_after_attempt(r, context(true, queued), false, t0);
            CHECK(d.step == next_step::wait);
            CHECK(d.sleep == 1000ms);
        }
        CHECK(step(r, context(false)) == next_step::fail);
    }
}

TEST_CASE("refusals and unreadable replies are reported at once") {
    std::vector<grant_result> lasting;
    lasting.push_back(server_said("NOPERM this user has no permissions to run the 'evalsha'"));
    lasting.push_back(server_said("BUSYKEY Target key name already exists."));
    lasting.push_back(failed(colock::error::unexpected_reply, "[1]"));
    lasting.push_back(failed(redis::error::closed));
    lasting.push_back(failed(redis::error::unexpected_reply));
    for (auto const& r : lasting) {
        CAPTURE(r.ec.message());
        for (bool wait : {false, true})
            for (bool queued : {false, true})
                CHECK(step(r, context(wait, queued)) == next_step::fail);
    }
}

TEST_CASE("a connection never established is retried until first_connect_timeout, unless it "
          "cannot mend") {
    for (auto const ec : {refused(), error_code(redis::error::connect_timeout),
                          error_code(boost::asio::error::host_not_found)}) {
        CAPTURE(ec.message());
        auto const before = decide_after_attempt(failed(ec), context(true), false, t0 + 1999ms);
        CHECK(before.step == next_step::wait);
        CHECK(before.sleep == 1000ms);
        CHECK(step(failed(ec), context(true), false, t0 + 2s) == next_step::fail);
        CHECK(step(failed(ec), context(true, true), false, t0 + 3s) == next_step::fail);
        CHECK(step(failed(ec), context(false)) == next_step::fail);
    }
    // A refused handshake or a certificate that does not verify: at once.
    for (auto const ec : {error_code(redis::error::handshake_failed),
                          error_code(1, boost::asio::error::get_ssl_category())}) {
        CAPTURE(ec.message());
        CHECK(step(failed(ec), context(true), false, t0) == next_step::fail);
    }
}

TEST_CASE("after a connect failure, the next attempt and the sleep before it end at "
          "first_connect_timeout, and an attempt stopped there reports the connect failure") {
    wait_deadlines d{t0 + 10s, t0 + 2s};
    CHECK(d.attempt_limit() == t0 + 10s); // nothing failed yet
    error_code ec = refused();
    std::string text = "connecting to 127.0.0.1:1: Connection refused";
    note_attempt(d, ec, text, t0 + 100ms);
    CHECK(ec == refused());
    CHECK(d.attempt_limit() == t0 + 2s);
    // The sleep after it: a backoff of 1 s from 1.5 s stops at 2 s.
    CHECK(head_wakes_at(t0 + 1500ms, d.attempt_limit(), 1000ms, 1000ms) == t0 + 2s);
    // The next attempt, stopped unsent at that limit: the connect failure stands, and ends the
    // wait.
    ec = colock::error::timeout;
    text.clear();
    note_attempt(d, ec, text, t0 + 2s);
    CHECK(ec == refused());
    CHECK(text == "connecting to 127.0.0.1:1: Connection refused");
    CHECK(step(failed(ec), attempt_context{true, true, d, 1000ms}, false, t0 + 2s) ==
          next_step::fail);
    // An attempt that reached the server forgets the failure; a timeout at the wait deadline
    // itself stays a timeout.
    ec = {};
    note_attempt(d, ec, text, t0 + 2100ms);
    CHECK(d.attempt_limit() == t0 + 10s);
    ec = colock::error::timeout;
    note_attempt(d, ec, text, t0 + 10s);
    CHECK(ec == colock::error::timeout);
    // A refusal that cannot pass is not remembered: it ends the wait by itself.
    ec = redis::error::handshake_failed;
    note_attempt(d, ec, text, t0 + 3s);
    CHECK(d.attempt_limit() == t0 + 10s);
}

TEST_CASE("an attempt stopped by the wait deadline reports error::timeout") {
    for (bool wait : {false, true})
        for (bool queued : {false, true})
            CHECK(step(failed(colock::error::timeout), context(wait, queued)) ==
                  next_step::fail_timeout);
    // A passing failure that ended as the wait deadline passed: the deadline is the cause, even
    // when the connection never worked and its own budget ran out at the same moment.
    auto const at_wait_deadline =
        attempt_context{true, false, wait_deadlines{t0 + 2s, t0 + 2s}, 1000ms};
    for (auto const ec : {error_code(redis::error::connect_timeout),
                          error_code(boost::asio::error::connection_refused),
                          error_code(redis::error::connection_lost)}) {
        CAPTURE(ec.message());
        CHECK(step(failed(ec), at_wait_deadline, false, t0 + 2s) == next_step::fail_timeout);
        CHECK(step(failed(ec), at_wait_deadline, false, t0 + 2s + 5ms) == next_step::fail_timeout);
    }
    // A lasting refusal is reported as itself, deadline or not.
    CHECK(step(failed(redis::error::handshake_failed), at_wait_deadline, false, t0 + 2s) ==
          next_step::fail);
}

TEST_CASE("a cancellation that arrived during the attempt") {
    // Held, or a passing error: reported as operation_aborted.
    for (bool wait : {false, true})
        for (bool queued : {false, true}) {
            CHECK(step(held(10ms), context(wait, queued), true) == next_step::aborted);
            if (wait)
                CHECK(step(failed(redis::error::connection_lost), context(wait, queued), true) ==
                      next_step::aborted);
        }
    // A refusal: the first attempt reports it; a queue's head reports the cancellation.
    auto const nope = server_said("NOPERM no permissions");
    CHECK(step(nope, context(true, false), true) == next_step::fail);
    CHECK(step(nope, context(true, true), true) == next_step::aborted);
    // Stopped before it was sent: the first attempt reports the attempt's own error, which is
    // operation_aborted too.
    CHECK(step(failed(boost::asio::error::operation_aborted), context(true, false), true) ==
          next_step::fail);
    CHECK(step(failed(boost::asio::error::operation_aborted), context(true, true), true) ==
          next_step::aborted);
}

TEST_CASE("a waiting co_lock with an error injected at each attempt goes on until granted") {
    // The uncontended attempt, then the queue's head, attempt after attempt.
    std::vector<grant_result> attempts;
    attempts.push_back(failed(refused()));
    attempts.push_back(failed(redis::error::connection_lost));
    attempts.push_back(server_said("LOADING Redis is loading the dataset in memory"));
    attempts.push_back(held(300ms));
    attempts.push_back(server_said("BUSY Redis is busy running a script"));
    attempts.push_back(held(0ms));
    attempts.push_back(granted(42));
    std::vector<milliseconds> const sleeps{1000ms, 1000ms, 1000ms, 300ms, 1000ms, 0ms};
    auto now = t0;
    for (std::size_t i = 0; i < attempts.size(); ++i) {
        CAPTURE(i);
        auto const d = decide_after_attempt(attempts[i], context(true, i > 0), false, now);
        if (i + 1 == attempts.size()) {
            CHECK(d.step == next_step::acquired);
        } else {
            CHECK(d.step == next_step::wait);
            CHECK(d.sleep == sleeps[i]);
        }
        now += 100ms;
    }
    // The same, with the connection still refused past first_connect_timeout: it fails there.
    CHECK(step(failed(refused()), context(true, true), false, t0 + 2s) == next_step::fail);
}

TEST_CASE("backoff: full jitter under the growing ceiling, never zero, never overflowing") {
    std::minstd_rand rng(12345);
    colock::retry_options retry; // 50 ms, x2, up to 1 s
    for (int attempt = 0; attempt < 100; ++attempt) {
        auto const ceiling = std::min<std::int64_t>(50LL << std::min(attempt, 10), 1000);
        for (int i = 0; i < 20; ++i) {
            auto const b = backoff(retry, attempt, rng);
            CHECK(b >= 1ms);
            CHECK(b.count() <= ceiling + 1);
        }
    }
    colock::retry_options huge;
    huge.initial = milliseconds::max() / 2;
    huge.max = milliseconds::max();
    huge.multiplier = 1e300;
    for (int attempt : {0, 1, 60, 1000}) {
        auto const b = backoff(huge, attempt, rng);
        CHECK(b >= 1ms);
        CHECK(b.count() <= (std::int64_t{1} << 62) + 1);
    }
}

TEST_CASE("a queue's head wakes after the shorter of sleep and backoff, within the deadline") {
    auto const deadline = t0 + 10s;
    CHECK(head_wakes_at(t0, deadline, 300ms, 80ms) == t0 + 80ms);
    CHECK(head_wakes_at(t0, deadline, 30ms, 80ms) == t0 + 30ms);
    CHECK(head_wakes_at(t0, deadline, 0ms, 80ms) == t0 + 1ms); // at least 1 ms
    CHECK(head_wakes_at(t0, deadline, 20s, 15s) == deadline);
    CHECK(head_wakes_at(t0, clock_type::time_point::max(), milliseconds::max(),
                        milliseconds::max()) == clock_type::time_point::max());
}

TEST_CASE("cohort hand-off: allowed while the lease is valid, up to cohort_limit in a row while "
          "another process waits, and at most one local fence per microsecond") {
    cohort_facts f{};
    f.cohort_limit = 3;
    f.local_handoffs = 0;
    f.others_queued = false;
    f.lost = false;
    f.lease_deadline = t0 + 10s;
    f.lease_fence = 1000;
    f.next_fence = 1001;
    f.granted_at = t0 - 1s;
    CHECK(may_hand_off_locally(f, t0));

    // Nobody else waits: no limit.
    f.local_handoffs = 500;
    f.next_fence = 1501;
    CHECK(may_hand_off_locally(f, t0));
    // Another process queued: at most cohort_limit in a row.
    f.others_queued = true;
    CHECK_FALSE(may_hand_off_locally(f, t0));
    f.local_handoffs = 2;
    CHECK(may_hand_off_locally(f, t0));
    f.local_handoffs = 3;
    CHECK_FALSE(may_hand_off_locally(f, t0));
    f.local_handoffs = 0;

    // Off.
    f.cohort_limit = 0;
    CHECK_FALSE(may_hand_off_locally(f, t0));
    f.cohort_limit = 3;

    // A lost lease, or one with less than 1 ms left, goes back to Redis.
    f.lost = true;
    CHECK_FALSE(may_hand_off_locally(f, t0));
    f.lost = false;
    CHECK_FALSE(may_hand_off_locally(f, f.lease_deadline));
    CHECK_FALSE(may_hand_off_locally(f, f.lease_deadline - 1ms));
    CHECK(may_hand_off_locally(f, f.lease_deadline - 2ms));

    // Fences: the n-th local one needs n microseconds since the grant.
    f.granted_at = t0;
    f.next_fence = 1001;
    CHECK_FALSE(may_hand_off_locally(f, t0));
    CHECK(may_hand_off_locally(f, t0 + std::chrono::microseconds{1}));
    f.next_fence = 1050;
    CHECK_FALSE(may_hand_off_locally(f, t0 + std::chrono::microseconds{49}));
    CHECK(may_hand_off_locally(f, t0 + std::chrono::microseconds{50}));
}
