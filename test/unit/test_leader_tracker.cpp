// What an election's watch reports, without a server: the read script's reply, the channel's
// messages, and the changes, gaps and looks the tracker decides from them.
#include "lock/election/leader_tracker.hpp"

#include "lock/quorum/quorum_election.hpp"
#include "lock/store/lock_replies.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace colock::detail;
using colock::leader_change;
using colock::detail::redlock::decide_reading;
using colock::test::array;
using colock::test::blob;
using colock::test::number;
using namespace std::chrono_literals;

namespace {

script_reply read_reply(std::string lock, std::string token, std::string term, std::string value,
                        std::string version, std::string owner, std::int64_t pttl) {
    return script_reply{{},
                        array({blob(std::move(lock)), blob(std::move(token)), blob(std::move(term)),
                               blob(std::move(value)), blob(std::move(version)),
                               blob(std::move(owner)), number(pttl)})};
}

// A leader of `term` at `version`.
election_reading leading(std::int64_t term, std::int64_t version, std::string value,
                         std::int64_t ttl = 5000) {
    election_reading r;
    r.leading = true;
    r.record = true;
    r.term = term;
    r.version = version;
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

// The election message `text` reads as; the test stops when it reads as none.
election_message parsed_message(std::string_view text) {
    auto m = parse_election_message(text);
    REQUIRE(m.has_value());
    return *m;
}

} // namespace

TEST_CASE("election reading: a leader, a record whose lease is gone, a hand-over, no record, "
          "and replies of a foreign shape") {
    auto r = read_election(read_reply("H 7 o tok 1 0", "tok", "7", "v a l", "3", "o", 4000));
    CHECK_FALSE(r.ec);
    CHECK(r.leading);
    CHECK(r.record);
    CHECK(r.term == 7);
    CHECK(r.version == 3);
    CHECK(r.value == "v a l");
    CHECK(r.owner == "o");
    CHECK(r.record_ttl == 4000ms);

    // The lock is another lease's (a forced unlock, a grant not yet claimed): nobody leads.
    CHECK_FALSE(
        read_election(read_reply("H 8 p other 1 0", "tok", "7", "v", "3", "o", 10)).leading);
    auto handed = read_election(read_reply("R 7 p", "", "7", "v", "4", "o", 900));
    CHECK_FALSE(handed.leading);
    CHECK(handed.record);
    CHECK_FALSE(read_election(read_reply("F 7", "tok", "7", "v", "3", "o", 10)).leading);

    auto none = read_election(read_reply("", "", "", "", "", "", -2));
    CHECK_FALSE(none.ec);
    CHECK_FALSE(none.leading);
    CHECK_FALSE(none.record);

    auto const garbled = [](script_reply const& reply) {
        CHECK(read_election(reply).ec == colock::error::unexpected_reply);
    };
    garbled(script_reply{{}, number(1)});
    garbled(script_reply{{}, array({blob("x")})});
    garbled(read_reply("H 7 o tok 1 0", "tok", "seven", "v", "3", "o", 10));
    garbled(read_reply("H 7 o tok 1 0", "tok", "7", "v", "0", "o", 10));
    garbled(read_reply("H 7 o tok 1 0", "tok", "7", "v", "-3", "o", 10));
    garbled(read_reply("H 7 o tok 1 0", "tok", "0", "v", "3", "o", 10));
    garbled(read_reply("", "tok", "", "", "", "", -2)); // a token without a record
}

TEST_CASE("election messages: each kind, a value with spaces, and anything else refused") {
    auto const l = parsed_message("L 17 3 4500 node a:80");
    CHECK(l.what == election_message::kind::leader);
    CHECK(l.term == 17);
    CHECK(l.version == 3);
    CHECK(l.ttl == 4500ms);
    CHECK(l.value == "node a:80");
    auto const empty_value = parsed_message("L 17 1 4500 ");
    CHECK(empty_value.value.empty());
    auto const r = parsed_message("R 17 4 1000");
    CHECK(r.what == election_message::kind::handed);
    CHECK(r.ttl == 1000ms);
    auto const n = parsed_message("N 17 5");
    CHECK(n.what == election_message::kind::ended);
    CHECK(n.version == 5);
    auto const e = parsed_message("E 17 5 300");
    CHECK(e.what == election_message::kind::shortened);
    CHECK(e.term == 17);
    CHECK(e.version == 5);
    CHECK(e.ttl == 300ms);
    CHECK(parse_election_message("L 17 1 -2 v")->ttl == 0ms); // the record went meanwhile
    for (auto bad : {"", "X 1 2", "L", "L 1", "L 1 2", "L 2 0 5 v", "L 0 1 5 v", "L a 2 5 v",
                     "R 1 2", "R 1 2 3 4", "N 1 2 3", "N -1 2", "L 1 2 x v", "E 1 2", "E 1 2 3 4",
                     "E 0 1 300", "E 1 2 x"})
        CHECK_MESSAGE(!parse_election_message(bad).has_value(), bad);
}

TEST_CASE("leader tracker: the first reading is reported; then messages in order: a value, a "
          "hand-over reported at the claim, and nobody after the last resign") {
    leader_tracker t;
    CHECK(t.on_message("L 7 1 5000 early").changes.empty()); // before the first reading
    auto s = t.on_reading(leading(7, 1, "a"), false);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "a", 7);
    CHECK(s.look_in == 5000ms);

    s = t.on_message("L 7 1 5000 a"); // already known from the reading
    CHECK(s.changes.empty());
    CHECK_FALSE(s.read_again);
    s = t.on_message("L 7 2 4000 b");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "b", 7);
    CHECK(s.look_in == 4000ms);
    CHECK(t.on_message("L 7 2 4000 b").changes.empty()); // the same, from another primary

    s = t.on_message("R 7 2 1000");
    CHECK(s.changes.empty()); // reported when the next leader claims it
    CHECK(s.look_in == 1000ms);
    CHECK_FALSE(t.on_message("R 7 2 1000").read_again); // again, from another primary
    s = t.on_message("L 9 1 5000 c");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "c", 9); // straight from one leader to the next

    s = t.on_message("N 9 1");
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 9);
    CHECK(s.stop_looking);
    CHECK(t.on_message("N 9 1").changes.empty());
    s = t.on_message("L 12 1 5000 d");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "d", 12);
}

TEST_CASE("leader tracker: a lapse is seen by a look, or by the next term's first message") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a", 300), false);
    auto s = t.on_reading(nobody(), false); // the look at the lease's end
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7);
    CHECK(s.stop_looking);
    CHECK(t.on_reading(nobody(), false).changes.empty()); // nothing new

    leader_tracker u;
    u.on_reading(leading(7, 2, "a"), false);
    s = u.on_message("L 9 1 5000 b"); // a new term while a's was not seen to end: it lapsed
    REQUIRE(s.changes.size() == 2);
    check_nobody(s.changes[0], 7);
    check_leader(s.changes[1], "b", 9);

    leader_tracker v; // a hand-over whose claim lapses
    v.on_reading(leading(7, 2, "a"), false);
    CHECK(v.on_message("R 7 2 1000").changes.empty());
    s = v.on_reading(nobody(), false);
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7);
}

TEST_CASE("leader tracker: a shortened lease is looked at when it would lapse, not at its old "
          "end") {
    leader_tracker t;
    auto s = t.on_reading(leading(7, 2, "a", 30000), false);
    CHECK(s.look_in == 30000ms);
    s = t.on_message("E 7 2 300");
    CHECK(s.changes.empty());
    CHECK_FALSE(s.read_again);
    REQUIRE(s.look_in.has_value());
    CHECK(*s.look_in == 300ms);
    s = t.on_reading(nobody(), false); // that look: the lease lapsed
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7);
    // Of a term already seen to end, or an older one: nothing to do.
    CHECK_FALSE(t.on_message("E 7 2 300").look_in.has_value());
    CHECK_FALSE(t.on_message("E 6 9 300").look_in.has_value());

    leader_tracker u; // of a version not seen yet: read
    u.on_reading(leading(7, 2, "a"), false);
    s = u.on_message("E 7 3 300");
    CHECK(s.read_again);
    CHECK(s.changes.empty());
}

TEST_CASE("leader tracker: a skipped version or an unreadable message asks for a reading, which "
          "is reported as resynced unless it is the one next change") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    auto s = t.on_message("L 7 3 5000 c"); // version 2 never came
    CHECK(s.read_again);
    CHECK(s.changes.empty());
    s = t.on_reading(leading(7, 3, "c"), true);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "c", 7, true);

    CHECK(t.on_message("garbage").read_again);
    CHECK(t.on_message("N 7 9").read_again);        // the end of the term, with versions missed
    CHECK(t.on_message("R 8 1 1000").read_again);   // another term's hand-over
    CHECK(t.on_message("L 8 2 5000 x").read_again); // another term, its claim missed

    // After a reconnection: the same state is no change; the next change is not a resync.
    CHECK(t.on_reading(leading(7, 3, "c"), true).changes.empty());
    s = t.on_reading(leading(7, 4, "d"), true);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "d", 7, false);
    s = t.on_reading(nobody(), true); // the term ended while we were away
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 7, true);
}

TEST_CASE("leader tracker: after a gap, or a message out of step, a new term's first message "
          "is reported as resynced: whole terms may have come and gone unseen") {
    // A reconnection: the first message on the new subscription names a later term.
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    t.on_gap();
    auto s = t.on_message("L 9 1 5000 b");
    REQUIRE(s.changes.size() == 2);
    check_nobody(s.changes[0], 7, true);
    check_leader(s.changes[1], "b", 9, true);
    // What follows is in step with that message.
    s = t.on_message("L 9 2 5000 c");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "c", 9);
    // The reading after the gap finds nothing new, and says so quietly.
    CHECK(t.on_reading(leading(9, 2, "c"), true).changes.empty());

    // Nobody led before the gap.
    leader_tracker u;
    u.on_reading(leading(7, 1, "a"), false);
    REQUIRE(u.on_message("N 7 1").changes.size() == 1);
    u.on_gap();
    s = u.on_message("L 9 1 5000 b");
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "b", 9, true);

    // A message out of step (versions 2 and 3 missed): the next term's claim cannot show
    // that nothing else was missed, before the reading asked for comes.
    leader_tracker v;
    v.on_reading(leading(7, 1, "a"), false);
    CHECK(v.on_message("L 7 4 5000 d").read_again);
    s = v.on_message("L 9 1 5000 b");
    REQUIRE(s.changes.size() == 2);
    check_nobody(s.changes[0], 7, true);
    check_leader(s.changes[1], "b", 9, true);
    CHECK(v.on_reading(leading(9, 1, "b"), true).changes.empty());
    s = v.on_message("N 9 1");
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 9);

    // Out of step, then a look (no gap the watch knew of) that finds a later term.
    leader_tracker w;
    w.on_reading(leading(7, 1, "a"), false);
    CHECK(w.on_message("L 7 3 5000 c").read_again);
    s = w.on_reading(leading(9, 1, "b"), false);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "b", 9, true);
    s = w.on_message("L 9 2 5000 e"); // in step again
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "e", 9);

    // A gap before the first reading: the first reading is the state, not a resync.
    leader_tracker x;
    x.on_gap();
    s = x.on_reading(leading(7, 1, "a"), true);
    REQUIRE(s.changes.size() == 1);
    check_leader(s.changes[0], "a", 7);
    s = x.on_message("L 9 1 5000 b");
    REQUIRE(s.changes.size() == 2);
    check_leader(s.changes[1], "b", 9);
}

TEST_CASE("leader tracker: a reading older than a message that overtook it is ignored") {
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    t.on_message("L 7 2 5000 b");
    CHECK(t.on_reading(leading(7, 1, "a"), false).changes.empty());
    leader_tracker u;
    u.on_reading(nobody(), false);
    auto first = u.on_message("L 9 1 5000 n");
    REQUIRE(first.changes.size() == 1);
    CHECK(u.on_reading(leading(8, 4, "old"), false).changes.empty()); // an older term
}

TEST_CASE("leader tracker: nobody leads before and after a gap: quiet only when the lock's fence "
          "proves that no term came and went") {
    auto const free_at = [](std::int64_t fence) {
        election_reading r;
        r.lock_fence = fence;
        return r;
    };
    leader_tracker t;
    t.on_reading(leading(7, 1, "a"), false);
    CHECK(t.on_message("N 7 1").changes.size() == 1);
    // The lock is still free at the last term's fence: nothing happened while away.
    CHECK(t.on_reading(free_at(7), true).changes.empty());
    // A fence above it: a term came and went unseen.
    auto s = t.on_reading(free_at(12), true);
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 12, true);
    CHECK(t.on_reading(free_at(12), true).changes.empty());
    // The key lapsed: nothing proves that nothing happened.
    s = t.on_reading(free_at(0), true);
    REQUIRE(s.changes.size() == 1);
    check_nobody(s.changes[0], 12, true);
    // Without a gap (a look), a free lock is no news.
    CHECK(t.on_reading(free_at(0), false).changes.empty());
    // The lock's fence is read from every state of its key.
    CHECK(read_election(read_reply("F 41", "", "", "", "", "", -2)).lock_fence == 41);
    CHECK(read_election(read_reply("R 42 o", "", "", "", "", "", -2)).lock_fence == 42);
    CHECK(read_election(read_reply("H 43 o t 1 0", "", "", "", "", "", -2)).lock_fence == 43);
    CHECK(read_election(read_reply("", "", "", "", "", "", -2)).lock_fence == 0);
}

TEST_CASE("quorum reading: a majority's leader with the newest version a majority has, nobody "
          "by majority, else no_quorum; messages counted until a majority told them") {
    auto failed = [] {
        election_reading r;
        r.ec = colock::error::timeout;
        return r;
    };
    auto r = decide_reading({leading(7, 3, "c"), leading(7, 2, "b"), failed()}, 2);
    CHECK_FALSE(r.ec);
    CHECK(r.leading);
    CHECK(r.version == 2); // the newest that two primaries have
    CHECK(r.value == "b");
    r = decide_reading({leading(7, 3, "c"), leading(7, 3, "c"), nobody()}, 2);
    CHECK(r.version == 3);
    r = decide_reading({nobody(), nobody(), leading(7, 1, "a")}, 2);
    CHECK_FALSE(r.ec);
    CHECK_FALSE(r.leading);
    r = decide_reading({nobody(), leading(7, 1, "a"), failed()}, 2);
    CHECK(r.ec == colock::error::no_quorum);
    CHECK(r.server_text.find("2 of 3 primaries answered") != std::string::npos);
    r = decide_reading({leading(7, 1, "a"), leading(8, 1, "b"), leading(9, 1, "c")}, 2);
    CHECK(r.ec == colock::error::no_quorum);

    majority_messages m{2};
    CHECK_FALSE(m.told("L 7 1 5000 a"));
    CHECK(m.told("L 7 1 4999 a"));       // each primary's own ttl: the same change
    CHECK_FALSE(m.told("L 7 1 5000 a")); // a third copy: passed on once
    CHECK(m.told("garbage"));            // unreadable: the tracker asks for a reading
    CHECK_FALSE(m.told("R 7 1 1000"));   // another kind of change of the same version
    CHECK_FALSE(m.told("L 8 1 5000 b"));
    m.forget_before(8);
    CHECK(m.told("L 8 1 5000 b"));       // kept
    CHECK_FALSE(m.told("L 7 1 5000 a")); // forgotten: counted anew
}
