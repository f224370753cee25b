// An election's channel messages read without a server, beyond test_leader_tracker.cpp: a
// leader's value taken whole, lapsed ttls, and numbers at the edges of their grammar.
#include "lock/election/leader_tracker.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string_view>

namespace election_messages_test {

using colock::detail::election_message;
using colock::detail::parse_election_message;
using namespace std::chrono_literals;

TEST_CASE("election messages: a leader's value is the rest of the message, spaces and all") {
    auto const m = parse_election_message("L 3 2 500  two  spaces ");
    REQUIRE(m.has_value());
    CHECK(m->what == election_message::kind::leader);
    CHECK(m->term == 3);
    CHECK(m->version == 2);
    CHECK(m->ttl == 500ms);
    CHECK(m->value == " two  spaces ");
    // No value at all, not even its separator: an empty value.
    auto const bare = parse_election_message("L 3 2 500");
    REQUIRE(bare.has_value());
    CHECK(bare->value.empty());
}

TEST_CASE("election messages: a ttl of a key gone meanwhile reads as nothing to wait for, for "
          "every kind that has one") {
    CHECK(parse_election_message("R 3 2 -2")->ttl == 0ms);
    CHECK(parse_election_message("E 3 2 -1")->ttl == 0ms);
    CHECK(parse_election_message("L 3 2 -2 v")->ttl == 0ms);
    CHECK(parse_election_message("E 3 2 0")->ttl == 0ms);
}

TEST_CASE("election messages: a term, version or ttl with a sign, a fraction or past 64 bits is "
          "refused") {
    for (std::string_view bad : {"L +3 2 500 v", "L 3 +2 500 v", "L 3 2 +500 v", "L 3 2 5.0 v",
                                 "L 9223372036854775808 2 500 v", "L 3 9223372036854775808 500 v",
                                 "R 3 2 9223372036854775808", "N 3 -2", "E 3 2  100", "R 3 2"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_election_message(bad).has_value());
    }
}

TEST_CASE("election messages: the kind is one capital letter, followed by a space") {
    for (std::string_view bad : {"l 3 2 500 v", "LL 3 2 500 v", "n 3 2", " N 3 2", "N3 2"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_election_message(bad).has_value());
    }
    auto const ended = parse_election_message("N 9223372036854775807 1");
    REQUIRE(ended.has_value());
    CHECK(ended->what == election_message::kind::ended);
    CHECK(ended->term == 9223372036854775807);
}

} // namespace election_messages_test
