// Redlock's decisions without a server: majorities, the validity of a lease after drift, which
// primaries an unsuccessful acquisition releases, when to try again, extensions, and the
// refusal of primaries Redlock cannot work with.
#include "lock/quorum/quorum.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

using namespace colock::detail::quorum;
using std::chrono::milliseconds;
using kind = grant_vote::kind;

namespace {

grant_vote granted(std::int64_t fence) {
    return {kind::granted, fence, milliseconds(0)};
}
grant_vote held(long long ttl_ms) {
    return {kind::held, 0, milliseconds(ttl_ms)};
}
grant_vote refused() {
    return {kind::refused, 0, milliseconds(0)};
}
grant_vote unknown() {
    return {kind::unknown, 0, milliseconds(0)};
}

std::string message_of(std::vector<std::string> const& run_ids) {
    try {
        check_primaries(run_ids);
    } catch (std::invalid_argument const& e) {
        return e.what();
    }
    return {};
}

} // namespace

TEST_CASE("quorum: majorities, drift and validity") {
    CHECK(majority(3) == 2);
    CHECK(majority(5) == 3);
    CHECK(majority(7) == 4);
    CHECK(clock_drift(milliseconds(10000)) == milliseconds(102));
    CHECK(clock_drift(milliseconds(150)) == milliseconds(4)); // 1.5 ms rounds up to 2
    CHECK(clock_drift(milliseconds(0)) == milliseconds(2));
    CHECK(validity(milliseconds(10000), milliseconds(30)) == milliseconds(9868));
    CHECK(validity(milliseconds(100), milliseconds(97)) == milliseconds(0));
    CHECK(validity(milliseconds(100), milliseconds(500)) == milliseconds(0));
    CHECK(validity(milliseconds(100), milliseconds(-5)) == milliseconds(97));
    // Durations up to milliseconds::max() mean "very long": no overflow.
    CHECK(validity(milliseconds::max(), milliseconds(10)) > milliseconds(0));
}

TEST_CASE("quorum: a majority of grants within the lease makes it, with the largest fence") {
    std::vector<grant_vote> const votes{granted(7), refused(), granted(9)};
    auto const d = decide_grant(votes, milliseconds(1000), milliseconds(20));
    CHECK(d.granted);
    CHECK(d.validity == milliseconds(1000 - 20 - 12));
    CHECK(d.fence == 9);
    CHECK(d.release.empty());

    // Five primaries: three grants are enough, two are not.
    std::vector<grant_vote> const three{granted(1), held(50), granted(2), unknown(), granted(3)};
    CHECK(decide_grant(three, milliseconds(1000), milliseconds(5)).granted);
    std::vector<grant_vote> const two{granted(1), held(50), granted(2), unknown(), refused()};
    CHECK_FALSE(decide_grant(two, milliseconds(1000), milliseconds(5)).granted);
}

TEST_CASE("quorum: a majority that took too long is no lease; everything possibly ours goes") {
    std::vector<grant_vote> const votes{granted(4), granted(5), unknown()};
    auto const d = decide_grant(votes, milliseconds(100), milliseconds(98));
    CHECK_FALSE(d.granted);
    CHECK(d.release == std::vector<std::size_t>{0, 1, 2}); // the unanswered one too
    CHECK(d.retry_after == milliseconds(0));               // nobody else holds it
}

TEST_CASE("quorum: held by another: release ours, try again when the holder's majority may "
          "lapse") {
    // Three primaries, held on two (for 300 and 120 ms more), ours on one: the holder loses
    // its majority when the shorter of its two leases ends.
    std::vector<grant_vote> const votes{held(300), granted(8), held(120)};
    auto const d = decide_grant(votes, milliseconds(1000), milliseconds(3));
    CHECK_FALSE(d.granted);
    CHECK(d.release == std::vector<std::size_t>{1});
    CHECK(d.retry_after == milliseconds(120));

    // Five primaries, held on four: two of them must lapse before three are open.
    std::vector<grant_vote> const five{held(400), held(100), held(300), held(200), granted(1)};
    auto const e = decide_grant(five, milliseconds(1000), milliseconds(3));
    CHECK(e.release == std::vector<std::size_t>{4});
    CHECK(e.retry_after == milliseconds(200));

    // Held on one of three, the others unanswered: a majority is open now.
    std::vector<grant_vote> const split{held(500), refused(), unknown()};
    auto const f = decide_grant(split, milliseconds(1000), milliseconds(3));
    CHECK(f.release == std::vector<std::size_t>{2});
    CHECK(f.retry_after == milliseconds(0));

    // Keys without expiry (max) on a majority: retry_after says so, and the caller backs off.
    std::vector<grant_vote> const forever{held(milliseconds::max().count()),
                                          held(milliseconds::max().count()), refused()};
    CHECK(decide_grant(forever, milliseconds(1000), milliseconds(3)).retry_after ==
          milliseconds::max());
    // A holder's ttl below zero (gone as it was read) counts as lapsed.
    std::vector<grant_vote> const lapsed{held(-1), held(500), refused()};
    CHECK(decide_grant(lapsed, milliseconds(1000), milliseconds(3)).retry_after == milliseconds(0));
}

TEST_CASE("quorum: an extension holds with a majority of confirmations within the lease") {
    CHECK(extension_holds(2, 3, milliseconds(1000), milliseconds(10)));
    CHECK_FALSE(extension_holds(1, 3, milliseconds(1000), milliseconds(10)));
    CHECK(extension_holds(3, 5, milliseconds(1000), milliseconds(10)));
    CHECK_FALSE(extension_holds(3, 5, milliseconds(100), milliseconds(99)));
    CHECK_FALSE(extension_holds(0, 0, milliseconds(1000), milliseconds(0)));
}

TEST_CASE("quorum: primaries Redlock cannot work with are refused, naming why") {
    CHECK(message_of({"a", "b", "c"}).empty());
    CHECK(message_of({"a", "", "", "d", "e"}).empty()); // unknown run_ids are not compared
    CHECK(message_of({"a", "b"}) ==
          "colock: Redlock needs at least 3 independent primaries; 2 given");
    CHECK(message_of({"a", "b", "c", "d"}) ==
          "colock: Redlock needs an odd number of primaries; 4 given (4 tolerate no more failed "
          "primaries than 3 do)");
    CHECK(message_of({"a", "b", "a"}) == "colock: Redlock primaries 1 and 3 are the same server "
                                         "(run_id a); each must be an independent primary");
}

TEST_CASE("quorum: a round's timeout and when its answers decide it") {
    CHECK(attempt_timeout(milliseconds(30000)) == milliseconds(1000));
    CHECK(attempt_timeout(milliseconds(2000)) == milliseconds(200));
    CHECK(attempt_timeout(milliseconds(100)) == milliseconds(50));
    CHECK(attempt_timeout(milliseconds::max()) == milliseconds(1000));
    // 3 primaries: two in favour decide; one in favour with one pending does not; one in favour
    // with none pending cannot become a majority, which decides too.
    CHECK(round_decided(2, 1, 3));
    CHECK_FALSE(round_decided(1, 1, 3));
    CHECK(round_decided(1, 0, 3));
    CHECK(round_decided(0, 1, 3));
    CHECK_FALSE(round_decided(0, 2, 3));
    // 5 primaries.
    CHECK(round_decided(3, 2, 5));
    CHECK_FALSE(round_decided(2, 1, 5));
    CHECK(round_decided(2, 0, 5));
}

TEST_CASE("quorum: an acquisition's round waits for the answers that can change its report") {
    // 3 primaries: a majority of grants decides; one granted with one pending does not.
    CHECK(grant_round_decided(2, 0, 1, 3));
    CHECK_FALSE(grant_round_decided(1, 0, 1, 3));
    // One refused (down), one held, one pending: no grant majority can come, but the pending
    // answer can make a majority held (no error), so the round waits for it.
    CHECK_FALSE(grant_round_decided(0, 1, 1, 3));
    CHECK(grant_round_decided(0, 2, 1, 3));       // held by a majority
    CHECK_FALSE(grant_round_decided(1, 1, 1, 3)); // a grant majority may still come
    CHECK(grant_round_decided(0, 0, 1, 3));       // two refused: an error whatever comes
    CHECK(grant_round_decided(0, 1, 0, 3));       // all answered
    // 5 primaries: one granted, one held, two refused, one pending: a split or a majority held
    // may come (1 + 1 + 1 = 3).
    CHECK_FALSE(grant_round_decided(1, 1, 1, 5));
    // One granted, two held: split among waiters whatever the rest say.
    CHECK(grant_round_decided(1, 2, 1, 5));
    CHECK(grant_round_decided(0, 1, 1, 5)); // three refused: an error whatever comes
}

TEST_CASE("quorum: an extension's round waits for the answers that can tell lost from unknown") {
    CHECK(extend_round_decided(2, 0, 1, 3));
    CHECK_FALSE(extend_round_decided(1, 0, 1, 3)); // a majority may still confirm
    // One down, one "not ours", one pending: a second "not ours" would make it lost.
    CHECK_FALSE(extend_round_decided(0, 1, 1, 3));
    CHECK(extend_round_decided(0, 2, 1, 3)); // lost whatever comes
    CHECK(extend_round_decided(0, 0, 1, 3)); // two failed: an error whatever comes
    // 5 primaries: two "not ours" are tolerated, a third makes it lost.
    CHECK_FALSE(extend_round_decided(1, 2, 1, 5));
    CHECK(extend_round_decided(0, 3, 1, 5));
    CHECK(extend_round_decided(1, 1, 1, 5)); // two failed: an error whatever comes
}
