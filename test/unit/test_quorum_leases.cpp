// Which Redlock primaries count for a lease, sans I/O: grants, late grants, confirmations from
// a replaced primary, and a lease that falls below a majority when primaries are replaced.
#include "lock/quorum/quorum_leases.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using colock::detail::redlock::quorum_leases;

namespace {

// Primary i's count of server changes, as a test sets it.
struct server_counts {
    std::vector<std::uint64_t> now;
    auto reader() const {
        return [this](std::size_t i, std::string const&) { return now.at(i); };
    }
};

} // namespace

TEST_CASE("quorum_leases: a lease lost to replaced primaries is counted once per key") {
    quorum_leases leases(3);
    server_counts servers{{5, 7, 9}};
    leases.record("k", "t", {5, 7, std::nullopt}); // granted by primaries 0 and 1
    CHECK(leases.tracked("k") == 1);
    CHECK_FALSE(leases.mark_replaced(servers.reader())); // nothing changed
    CHECK(leases.changes("k") == 0);

    servers.now[2] = 10; // the one that did not grant: the lease keeps its majority
    CHECK_FALSE(leases.mark_replaced(servers.reader()));
    servers.now[1] = 8; // one that granted: 1 of 3 left
    CHECK(leases.mark_replaced(servers.reader()));
    CHECK(leases.changes("k") == 1);
    // Once: a later replacement finds it lost already.
    servers.now[0] = 6;
    CHECK_FALSE(leases.mark_replaced(servers.reader()));
    CHECK(leases.changes("k") == 1);
    CHECK(leases.changes("other") == 0);
}

TEST_CASE("quorum_leases: a confirmation counts from the instance that granted, or a first one") {
    quorum_leases leases(3);
    leases.record("k", "t", {5, 7, std::nullopt});
    CHECK(leases.confirm("k", "t", 0, 5));       // the same instance
    CHECK_FALSE(leases.confirm("k", "t", 1, 8)); // replaced since it granted
    CHECK(leases.confirm("k", "t", 2, 9));       // never counted: a late grant, now counted
    CHECK_FALSE(leases.confirm("k", "t", 2, 10));
    // Untracked leases (released meanwhile) count as they are.
    CHECK(leases.confirm("k", "other-token", 1, 99));
    CHECK(leases.confirm("gone", "t", 0, 1));
}

TEST_CASE("quorum_leases: a late grant keeps a lease's majority through a replacement") {
    quorum_leases leases(3);
    server_counts servers{{1, 1, 1}};
    leases.record("k", "t", {1, 1, std::nullopt});
    leases.count("k", "t", 2, 1); // primary 2's grant came after the decision
    servers.now[0] = 2;
    CHECK_FALSE(leases.mark_replaced(servers.reader())); // 1 and 2 still count
    servers.now[1] = 2;
    CHECK(leases.mark_replaced(servers.reader()));
}

TEST_CASE("quorum_leases: forgotten leases and keys are dropped") {
    quorum_leases leases(3);
    leases.record("k", "a", {1, 1, 1});
    leases.record("k", "b", {1, 1, 1});
    leases.forget("k", "a");
    CHECK(leases.tracked("k") == 1);
    leases.forget("k", "b");
    CHECK(leases.tracked("k") == 0);
    leases.forget("k", "b"); // twice: nothing
    leases.count("k", "b", 0, 3);
    CHECK(leases.tracked("k") == 0);
    // A replacement with nothing tracked loses nothing.
    CHECK_FALSE(leases.mark_replaced([](std::size_t, std::string const&) { return 42; }));
}
