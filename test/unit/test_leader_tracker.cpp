// What an election's watch reports, without a server: the read script's reply, the channel's
// messages, and the changes, gaps and looks the tracker decides from them.
#include "lock/leader_tracker.hpp"

#include "value_builders.hpp"

#include <colock/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace colock::detail;
using colock::leader_change;
using colock::test::array;
using colock::test::blob;
using colock::test::number;
using namespace std::chrono_literals;

namespace {

script_reply read_reply(std::string lock, std::string token, std::string term, std::string value,
                        std::string seq, std::string owner, std::int64_t pttl) {
    return script_reply{{},
                        array({blob(std::move(lock)), blob(std::move(token)), blob(std::move(term)),
                               blob(std::move(value)), blob(std::move(seq)), blob(std::move(owner)),
                               number(pttl)})};
}

// The lock held by `token` (fence 7), and the record of its term.
election_reading leading(std::int64_t term, std::int64_t seq, std::string value,
                         std::int64_t ttl = 5000) {
    election_reading r;
    r.leading = true;
    r.term = term;
    r.seq = seq;
    r.value = std::move(value);
    r.owner = "o";
    r.record_ttl = std::chrono::milliseconds(ttl);
    return r;
}

election_reading nobody() {
    return election_reading{};
}

void check_leader(leader_change const& c, std::string const& value, std::int64_t term,
                  bool resynced = false) {
    CHECK(c.leading);
    CHECK(c.value == value);
    CHECK(c.term == term);
    CHECK(c.resynced == resynced);
}

void check_nobody(leader_change const& c, std::int64_t term, bool resynced = false) {
    CHECK_FALSE(c.leading);
    CHECK(c.value.empty());
    CHECK(c.term == term);
    CHECK(c.resynced == resynced);
}

} // namespace

TEST_CASE("election reading: a leader, a record whose lease is gone, a hand-over, no record, "
          "and replies of a foreign shape") {
    auto r = read_election(read_reply("H 7 o tok 1 0", "tok", "7", "v a l", "3", "o", 4000));
    CHECK_FALSE(r.ec);
    CHECK(r.leading);
    CHECK(r.term == 7);
    CHECK(r.seq == 3);
    CHECK(r.value == "v a l");
    CHECK(r.owner == "o");
    CHECK(r.record_ttl == 4000ms);

    // The lock is another lease's (a forced unlock, a grant not yet claimed): nobody leads.
    CHECK_FALSE(
        read_election(read_reply("H 8 p other 1 0", "tok", "7", "v", "3", "o", 10)).leading);
    CHECK_FALSE(read_election(read_reply("R 7 p", "", "7", "v", "4", "o", 900)).leading);
    CHECK_FALSE(read_election(read_reply("F 7", "tok", "7", "v", "3", "o", 10)).leading);

    auto none = read_election(read_reply("", "", "", "", "", "", -2));
    CHECK_FALSE(none.ec);
    CHECK_FALSE(none.leading);
    CHECK(none.seq == 0);

    auto const garbled = [](script_reply const& reply) {
        CHECK(read_election(reply).ec == colock::error::unexpected_reply);
    };
    garbled(script_reply{{}, number(1)});
    garbled(script_reply{{}, array({blob("x")})});
    garbled(read_reply("H 7 o tok 1 0", "tok", "seven", "v", "3", "o", 10));
    garbled(read_reply("H 7 o tok 1 0", "tok", "7", "v", "0", "o", 10));
    garbled(read_reply("H 7 o tok 1 0", "tok", "7", "v", "-3", "o", 10));
    garbled(read_reply("", "tok", "", "", "", "", -2)); // a token without a record
}

TEST_CASE("election messages: each kind, a value with spaces, and anything else refused") {
    auto l = parse_election_message("L 3 17 4500 node a:80");
    REQUIRE(l.has_value());
    CHECK(l->what == election_message::kind::leader);
    CHECK(l->seq == 3);
    CHECK(l->term == 17);
    CHECK(l->ttl == 4500ms);
    CHECK(l->value == "node a:80");
    auto empty_value = parse_election_message("L 1 17 4500 ");
    REQUIRE(empty_value.has_value());
    CHECK(empty_value->value.empty());
    auto r = parse_election_message("R 4 17 1000");
    REQUIRE(r.has_value());
    CHECK(r->what == election_message::kind::handed);
    CHECK(r->ttl == 1000ms);
    auto n = parse_election_message("N 5 17");
    REQUIRE(n.has_value());
    CHECK(n->what == election_message::kind::ended);
    CHECK(parse_election_message("L 1 17 -2 v")->ttl == 0ms); // the record went meanwhile
    for (auto bad : {"", "X 1 2", "L", "L 1", "L 1 2", "L 0 2 5 v", "L a 2 5 v", "R 1 2",
                     "R 1 2 3 4", "N 1 2 3", "N -1 2", "L 1 2 x v"})
        CHECK_MESSAGE(!parse_election_message(bad).has_value(), bad);
}

TEST_CASE("leader tracker: the first reading is reported; then messages in order: a value, a "
          "hand-over reported at the claim, and nobody after the last resign") {
    leader_tracker t;
    CHECK(t.on_message("L 1 7 5000 early").changes.empty()); // before the first reading
    auto s = t.on_reading(leading(7, 1, "a"), false);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "a", 7);
    CHECK(s.look_in == 5000ms);

    s = t.on_message("L 1 7 5000 a"); // already known from the reading
    CHECK(s.changes.empty());
    CHECK_FALSE(s.read_again);
    s = t.on_message("L 2 7 4000 b");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "b", 7);
    CHECK(s.look_in == 4000ms);

    s = t.on_message("R 3 7 1000");
    CHECK(s.changes.empty()); // reported when the next leader claims it
    CHECK(s.look_in == 1000ms);
    s = t.on_message("L 4 9 5000 c");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "c", 9); // straight from one leader to the next

    s = t.on_message("N 5 9");
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 9);
    CHECK(s.stop_looking);
    s = t.on_message("L 1 12 5000 d"); // a new record
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "d", 12);
}

TEST_CASE("leader tracker: a lapse is seen by a look, or by a new record's first message") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a", 300), false);
    auto s = t.on_reading(nobody(), false); // the look at the lease's end
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7);
    CHECK(s.stop_looking);
    CHECK(t.on_reading(nobody(), false).changes.empty()); // nothing new

    leader_tracker u;
    u.on_reading(leading(7, 2, "a"), false);
    s = u.on_message("L 1 9 5000 b"); // a new record while a's was known: a lapsed first
    REQUIRE(s.changes.size() == 2);
    check_nobody(s.changes[0], 7);
    check_leader(s.changes[1], "b", 9);

    leader_tracker v; // a hand-over whose claim lapses
    v.on_reading(leading(7, 2, "a"), false);
    CHECK(v.on_message("R 3 7 1000").changes.empty());
    s = v.on_reading(nobody(), false);
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7);
}

TEST_CASE("leader tracker: a skipped seq or an unreadable message asks for a reading, which is "
          "reported as resynced unless it is the one next change") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    auto s = t.on_message("L 3 7 5000 c"); // seq 2 never came
    CHECK(s.read_again);
    CHECK(s.changes.empty());
    s = t.on_reading(leading(7, 3, "c"), true);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "c", 7, true);

    CHECK(t.on_message("garbage").read_again);
    CHECK(t.on_message("N 9 7").read_again);      // the end of a term, with seqs missed
    CHECK(t.on_message("R 4 8 1000").read_again); // another term's hand-over
    CHECK(t.on_message("L 6 8 5000 x").read_again);

    // After a reconnection: the same state is no change; the next change is not a resync.
    CHECK(t.on_reading(leading(7, 3, "c"), true).changes.empty());
    s = t.on_reading(leading(7, 4, "d"), true);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "d", 7, false);
    s = t.on_reading(nobody(), true); // the term ended while we were away
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7, true);
}

TEST_CASE("leader tracker: a reading older than a message that overtook it is ignored") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    t.on_message("L 2 7 5000 b");
    CHECK(t.on_reading(leading(7, 1, "a"), false).changes.empty());
    leader_tracker u;
    u.on_reading(nobody(), false);
    auto first = u.on_message("L 1 9 5000 n");
    REQUIRE(first.changes.size() == 1);
    CHECK(u.on_reading(leading(8, 4, "old"), false).changes.empty()); // an older term
}
