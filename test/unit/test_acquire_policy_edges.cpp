// The acquire rules' small functions at their edges, beyond test_acquire_policy.cpp: the fence
// step and the lease left to pass on at their boundaries, a backoff whose draws really are spread
// (full jitter, not the ceiling), and the wake-up times with odd inputs.
#include "lock/core/acquire_policy.hpp"

#include <colock/lock_options.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <random>

namespace acquire_policy_edges_test {

using namespace colock::detail;
using namespace std::chrono_literals;
using std::chrono::microseconds;
using std::chrono::milliseconds;

clock_type::time_point const policy_t0 = clock_type::time_point{} + std::chrono::hours{2000};

TEST_CASE("acquire policy edges: the lease's own fence may be given again at the grant, the next "
          "one a microsecond later") {
    CHECK(fence_in_step(40, 40, policy_t0, policy_t0));
    CHECK_FALSE(fence_in_step(41, 40, policy_t0, policy_t0));
    CHECK(fence_in_step(41, 40, policy_t0, policy_t0 + microseconds{1}));
    // Nanoseconds below a microsecond do not count.
    CHECK_FALSE(fence_in_step(41, 40, policy_t0, policy_t0 + std::chrono::nanoseconds{999}));
    // A grant "after" now (a clock read out of order) allows no local fence.
    CHECK_FALSE(fence_in_step(41, 40, policy_t0 + 1ms, policy_t0));
    CHECK(fence_in_step(1040, 40, policy_t0, policy_t0 + 1ms));
    CHECK_FALSE(fence_in_step(1041, 40, policy_t0, policy_t0 + 1ms));
}

TEST_CASE("acquire policy edges: a lease may pass on with more than 1 ms left, not with 1 ms") {
    CHECK_FALSE(lease_left_to_pass(policy_t0 + 1ms, policy_t0));
    CHECK(lease_left_to_pass(policy_t0 + 1ms + microseconds{1}, policy_t0));
    CHECK_FALSE(lease_left_to_pass(policy_t0, policy_t0));
    CHECK_FALSE(lease_left_to_pass(policy_t0 - 1s, policy_t0));
    CHECK(lease_left_to_pass(clock_type::time_point::max(), policy_t0));
}

TEST_CASE("acquire policy edges: a backoff's draws spread over the whole range below the "
          "ceiling") {
    std::minstd_rand rng(7);
    colock::retry_options retry;
    retry.initial = 1000ms;
    retry.max = 1000ms;
    auto low = milliseconds::max();
    auto high = milliseconds::min();
    for (int i = 0; i < 400; ++i) {
        auto const b = backoff(retry, 0, rng);
        low = std::min(low, b);
        high = std::max(high, b);
    }
    CHECK(low >= 1ms);
    CHECK(low < 100ms);
    CHECK(high > 900ms);
    CHECK(high <= 1001ms);
}

TEST_CASE("acquire policy edges: with a multiplier of 1 the ceiling never grows") {
    std::minstd_rand rng(11);
    colock::retry_options retry;
    retry.initial = 20ms;
    retry.max = 10'000ms;
    retry.multiplier = 1.0;
    for (int attempt : {0, 1, 10, 60, 1000})
        for (int i = 0; i < 50; ++i) {
            auto const b = backoff(retry, attempt, rng);
            CHECK(b >= 1ms);
            CHECK(b <= 21ms);
        }
}

TEST_CASE("acquire policy edges: the same seed gives the same backoffs") {
    colock::retry_options const retry;
    std::minstd_rand a(99);
    std::minstd_rand b(99);
    for (int attempt = 0; attempt < 20; ++attempt)
        CHECK(backoff(retry, attempt, a) == backoff(retry, attempt, b));
}

TEST_CASE("acquire policy edges: a head wakes at least 1 ms on even for a negative sleep, and at "
          "a deadline already passed") {
    auto const far = policy_t0 + 1h;
    CHECK(head_wakes_at(policy_t0, far, -5ms, 80ms) == policy_t0 + 1ms);
    CHECK(head_wakes_at(policy_t0, far, 80ms, -5ms) == policy_t0 + 1ms);
    CHECK(head_wakes_at(policy_t0, policy_t0 - 1s, 80ms, 80ms) == policy_t0 - 1s);
    CHECK(head_wakes_at(clock_type::time_point::max() - 1ms, clock_type::time_point::max(), 1h,
                        1h) == clock_type::time_point::max());
}

TEST_CASE("acquire policy edges: a waiting permit call with a negative first expiry looks after "
          "its backoff, at most the queue's refresh interval") {
    auto const far = policy_t0 + 1h;
    CHECK(permit_wakes_at(policy_t0, far, -1ms, true, 30ms) == policy_t0 + 30ms);
    CHECK(permit_wakes_at(policy_t0, far, -1ms, true, 1h) == policy_t0 + queue_refresh_interval);
    CHECK(permit_wakes_at(policy_t0, far, 5000ms, false, 1h) == policy_t0 + queue_refresh_interval);
    CHECK(permit_wakes_at(policy_t0, policy_t0 - 1ms, 200ms, true, 30ms) == policy_t0 - 1ms);
}

} // namespace acquire_policy_edges_test
