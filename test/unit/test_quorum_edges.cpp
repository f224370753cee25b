// Redlock's decisions at their edges, beyond test_quorum.cpp: a lease whose validity is exactly
// used up, fences that only granted votes may give, what an unsuccessful round releases and when
// it tries again, and the primaries' checks in their order.
#include "lock/quorum/quorum.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace quorum_edges_test {

using namespace colock::detail::quorum;
using std::chrono::milliseconds;
using vote = grant_vote::kind;

grant_vote cast(vote what, std::int64_t fence = 0, long long ttl_ms = 0) {
    return {what, fence, milliseconds(ttl_ms)};
}

std::string refusal_of(std::vector<std::string> const& run_ids) {
    try {
        check_primaries(run_ids);
    } catch (std::invalid_argument const& e) {
        return e.what();
    }
    return "accepted";
}

TEST_CASE("quorum edges: majorities of small and even counts") {
    CHECK(majority(1) == 1);
    CHECK(majority(2) == 2);
    CHECK(majority(4) == 3);
    CHECK(majority(6) == 4);
    static_assert(majority(9) == 5);
}

TEST_CASE("quorum edges: drift is a hundredth of the ttl rounded up, plus 2 ms, even near the "
          "largest ttl") {
    CHECK(clock_drift(milliseconds(100)) == milliseconds(3));
    CHECK(clock_drift(milliseconds(101)) == milliseconds(4));
    CHECK(clock_drift(milliseconds(199)) == milliseconds(4));
    CHECK(clock_drift(milliseconds(200)) == milliseconds(4));
    CHECK(clock_drift(milliseconds::max()) ==
          milliseconds(milliseconds::max().count() / 100 + 1 + 2));
}

TEST_CASE("quorum edges: a round's timeout is a tenth of the ttl between 50 ms and 1 s") {
    CHECK(attempt_timeout(milliseconds(500)) == milliseconds(50));
    CHECK(attempt_timeout(milliseconds(499)) == milliseconds(50));
    CHECK(attempt_timeout(milliseconds(5000)) == milliseconds(500));
    CHECK(attempt_timeout(milliseconds(10000)) == milliseconds(1000));
    CHECK(attempt_timeout(milliseconds(10010)) == milliseconds(1000));
}

TEST_CASE("quorum edges: a majority whose validity is exactly used up is no lease; one "
          "millisecond more is") {
    std::vector<grant_vote> const votes{cast(vote::granted, 3), cast(vote::granted, 4),
                                        cast(vote::refused)};
    // ttl 100: drift 3, so 97 ms elapsed leave nothing.
    auto const none = decide_grant(votes, milliseconds(100), milliseconds(97));
    CHECK_FALSE(none.granted);
    CHECK(none.validity == milliseconds(0));
    CHECK(none.release == std::vector<std::size_t>{0, 1});
    auto const one = decide_grant(votes, milliseconds(100), milliseconds(96));
    CHECK(one.granted);
    CHECK(one.validity == milliseconds(1));
    CHECK(one.fence == 4);
    CHECK(extension_holds(2, 3, milliseconds(100), milliseconds(96)));
    CHECK_FALSE(extension_holds(2, 3, milliseconds(100), milliseconds(97)));
}

TEST_CASE("quorum edges: the fence is the largest of the granted votes only") {
    std::vector<grant_vote> const votes{cast(vote::granted, 5), cast(vote::held, 99, 100),
                                        cast(vote::unknown, 98), cast(vote::granted, 7),
                                        cast(vote::granted, 6)};
    auto const d = decide_grant(votes, milliseconds(1000), milliseconds(1));
    CHECK(d.granted);
    CHECK(d.fence == 7);
    CHECK(d.release.empty());
}

TEST_CASE("quorum edges: no votes decide nothing: no lease, nothing to release, no wait") {
    auto const d = decide_grant({}, milliseconds(1000), milliseconds(0));
    CHECK_FALSE(d.granted);
    CHECK(d.release.empty());
    CHECK(d.retry_after == milliseconds(0));
    CHECK(d.fence == 0);
    CHECK_FALSE(extension_holds(0, 0, milliseconds(1000), milliseconds(0)));
}

TEST_CASE("quorum edges: refusals release nothing; unanswered requests are released, as they may "
          "have been applied") {
    std::vector<grant_vote> const refused(3, cast(vote::refused));
    auto const r = decide_grant(refused, milliseconds(1000), milliseconds(1));
    CHECK_FALSE(r.granted);
    CHECK(r.release.empty());
    CHECK(r.retry_after == milliseconds(0));
    std::vector<grant_vote> const unknown(3, cast(vote::unknown));
    auto const u = decide_grant(unknown, milliseconds(1000), milliseconds(1));
    CHECK_FALSE(u.granted);
    CHECK(u.release == std::vector<std::size_t>{0, 1, 2});
    CHECK(u.retry_after == milliseconds(0));
}

TEST_CASE("quorum edges: held everywhere, the next try waits for the majority's shortest lease "
          "to lapse") {
    std::vector<grant_vote> const votes{cast(vote::held, 0, 50), cast(vote::held, 0, 10),
                                        cast(vote::held, 0, 30)};
    // Two of three must lapse: the second shortest.
    auto const d = decide_grant(votes, milliseconds(1000), milliseconds(1));
    CHECK(d.retry_after == milliseconds(30));
    CHECK(d.release.empty());
    // One of five held leaves a majority open: try again at once.
    std::vector<grant_vote> const mostly_open{cast(vote::refused), cast(vote::held, 0, 900),
                                              cast(vote::refused), cast(vote::granted, 1),
                                              cast(vote::unknown)};
    auto const e = decide_grant(mostly_open, milliseconds(1000), milliseconds(1));
    CHECK_FALSE(e.granted);
    CHECK(e.retry_after == milliseconds(0));
    CHECK(e.release == std::vector<std::size_t>{3, 4});
}

TEST_CASE("quorum edges: one primary, where a single answer decides every round") {
    CHECK(round_decided(1, 0, 1));
    CHECK(round_decided(0, 0, 1));
    CHECK_FALSE(round_decided(0, 1, 1));
    CHECK(grant_round_decided(1, 0, 0, 1));
    CHECK(grant_round_decided(0, 1, 0, 1));
    CHECK_FALSE(grant_round_decided(0, 0, 1, 1));
    // No "not ours" is tolerated by a majority of one.
    CHECK(extend_round_decided(0, 1, 0, 1));
    CHECK_FALSE(extend_round_decided(0, 0, 1, 1));
}

TEST_CASE("quorum edges: the primaries' count is checked before their run ids, and duplicates "
          "are named by position") {
    CHECK(refusal_of({"a", "a"}) ==
          "colock: Redlock needs at least 3 independent primaries; 2 given");
    CHECK(refusal_of({}) == "colock: Redlock needs at least 3 independent primaries; 0 given");
    CHECK(refusal_of({"a", "a", "b", "b"}).find("odd number") != std::string::npos);
    CHECK(refusal_of({"a", "b", "c", "d", "b"}) ==
          "colock: Redlock primaries 2 and 5 are the same server (run_id b); each must be an "
          "independent primary");
    CHECK(refusal_of({"", "", ""}) == "accepted");
    CHECK(refusal_of({"a", "b", "c", "d", "e", "f", "g"}) == "accepted");
}

} // namespace quorum_edges_test
