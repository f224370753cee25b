// base/common.hpp's wait_budget: one wait_timeout spent over several calls (a campaign's
// rounds, a scope's turn behind another call and then its own), on the lock clock.
#include "lock/base/common.hpp"

#include <doctest/doctest.h>

#include <chrono>

namespace {

using colock::detail::clock_type;
using colock::detail::wait_budget;
using std::chrono::milliseconds;

} // namespace

TEST_CASE("wait budget: no wait_timeout, no end: every call waits as long as it must") {
    auto const t0 = clock_type::now();
    wait_budget const budget(std::nullopt, t0);
    CHECK_FALSE(budget.deadline());
    CHECK_FALSE(budget.left(t0));
    CHECK_FALSE(budget.left(t0 + std::chrono::hours(1000)));
}

TEST_CASE("wait budget: what is left shrinks with time, rounded up, and never goes below 0") {
    auto const t0 = clock_type::now();
    wait_budget const budget(milliseconds(100), t0);
    REQUIRE(budget.deadline());
    CHECK(*budget.deadline() == t0 + milliseconds(100));
    CHECK(budget.left(t0) == milliseconds(100));
    CHECK(budget.left(t0 + milliseconds(30)) == milliseconds(70));
    // 0.4 ms left is 1 ms: a next call still tries once rather than none at all.
    CHECK(budget.left(t0 + std::chrono::microseconds(99'600)) == milliseconds(1));
    CHECK(budget.left(t0 + milliseconds(100)) == milliseconds(0));
    CHECK(budget.left(t0 + milliseconds(250)) == milliseconds(0));
}

TEST_CASE("wait budget: a wait_timeout of 0 is one try; a huge one saturates at the clock's end") {
    auto const t0 = clock_type::now();
    wait_budget const once(milliseconds(0), t0);
    CHECK(once.left(t0) == milliseconds(0));
    wait_budget const endless(milliseconds::max(), t0);
    REQUIRE(endless.deadline());
    CHECK(*endless.deadline() == clock_type::time_point::max());
    auto const left = endless.left(t0);
    REQUIRE(left);
    CHECK(*left > std::chrono::hours(24 * 365 * 100)); // no wrap into the past
}
