// The small readers behind the lock scripts' replies (lock_replies.hpp), beyond
// test_lock_replies.cpp: the fence and token read out of a lock's value, the election's read
// against the shapes a hostile server could send, the odd corners of the other readers, and how a
// script's outcome keeps the server's words and how long a retried request pauses.
#include "lock/store/lock_replies.hpp"

#include "script_reply_builders.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <climits>
#include <string>
#include <vector>

namespace lock_reply_readers_test {

using namespace colock::detail;
using colock::resp3::type;
using colock::resp3::value;
using namespace colock::test;
using namespace std::chrono_literals;

// The election read script's reply: {lock value, record token, term, value, version, owner, pttl}.
value election_reply(std::string lock, std::string token, std::string term, std::string version,
                     std::int64_t pttl = 1000) {
    return array({blob(std::move(lock)), blob(std::move(token)), blob(std::move(term)), blob("v"),
                  blob(std::move(version)), blob("owner"), number(pttl)});
}

TEST_CASE("lock reply readers: the fence of a held, handed and free lock's value") {
    CHECK(replies::fence_of("H 12 owner tok 1700000000000 0") == 12);
    CHECK(replies::fence_of("R 7 owner") == 7);
    CHECK(replies::fence_of("F 9") == 9);
    CHECK(replies::fence_of("F 9007199254740991") == 9007199254740991);
}

TEST_CASE("lock reply readers: a value of another kind, or a fence that is not a plain number, "
          "has fence 0") {
    for (char const* text : {"", "X 5", "h 5", "HH 5", "H", "H -3 o t 1 0", "H 12abc o t 1 0",
                             "H  12 o t 1 0", "H +12 o t 1 0", " H 12", "F 99999999999999999999"}) {
        CAPTURE(text);
        CHECK(replies::fence_of(text) == 0);
    }
}

TEST_CASE("lock reply readers: the token of a holding is its fourth word; others have none") {
    CHECK(replies::holding_token("H 1 owner tok-9 1700000000000 0") == "tok-9");
    CHECK(replies::holding_token("H 1 owner tok") == "tok");
    CHECK(replies::holding_token("H 1 owner").empty());
    CHECK(replies::holding_token("R 7 tok").empty());
    CHECK(replies::holding_token("F 7").empty());
    CHECK(replies::holding_token("").empty());
    CHECK(replies::holding_token("h 1 owner tok 1 0").empty());
}

TEST_CASE("lock reply readers: an election read gives the lock's last fence whatever its kind, "
          "0 when the key is gone") {
    auto const held = read_election(answered(election_reply("H 12 o tok 1 0", "tok", "12", "1")));
    CHECK_FALSE(held.ec);
    CHECK(held.lock_fence == 12);
    CHECK(held.leading);
    CHECK(read_election(answered(election_reply("R 13 p", "", "12", "2"))).lock_fence == 13);
    CHECK(read_election(answered(election_reply("F 14", "", "12", "3"))).lock_fence == 14);
    auto const gone = read_election(answered(election_reply("", "", "", "", -2)));
    CHECK_FALSE(gone.ec);
    CHECK(gone.lock_fence == 0);
    CHECK(gone.record_ttl == -2ms);
}

TEST_CASE("lock reply readers: an empty token never leads, even beside a holding whose token is "
          "empty") {
    // "H 7 o  1 0": the token word is empty; the record's token too.
    auto const r = read_election(answered(election_reply("H 7 o  1 0", "", "7", "1")));
    CHECK_FALSE(r.ec);
    CHECK(r.record);
    CHECK_FALSE(r.leading);
}

TEST_CASE("lock reply readers: an election record with a term but no version, or a version but "
          "no term, is foreign") {
    for (auto const& v :
         {election_reply("H 7 o tok 1 0", "tok", "7", ""),
          election_reply("H 7 o tok 1 0", "", "7", ""),
          election_reply("H 7 o tok 1 0", "tok", "", "3"), election_reply("F 7", "", "x", "3")}) {
        auto const r = read_election(answered(v));
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.leading);
        CHECK_FALSE(r.record);
        CHECK(r.server_text == colock::resp3::to_debug_string(v));
    }
}

TEST_CASE("lock reply readers: an election read of another arity, or with a number where text "
          "is due, is foreign") {
    value eight = election_reply("F 1", "", "", "");
    eight.elements.push_back(blob("extra"));
    value ttl_as_text = election_reply("F 1", "", "", "");
    ttl_as_text.elements[6] = blob("1000");
    value term_as_number = election_reply("F 1", "", "", "");
    term_as_number.elements[2] = number(7);
    value as_set = election_reply("F 1", "", "", "");
    as_set.type = type::set;
    for (auto const& v : {eight, ttl_as_text, term_as_number, as_set, value{}}) {
        auto const r = read_election(answered(v));
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.record);
    }
}

TEST_CASE("lock reply readers: an election read refused or lost keeps the failure") {
    auto const refused = read_election(
        script_reply{colock::redis::error::server_error, error_reply("NOPERM election")});
    CHECK(refused.ec == colock::redis::error::server_error);
    CHECK(refused.server_text == "NOPERM election");
    CHECK_FALSE(refused.record);
    auto const lost = read_election(script_reply{colock::redis::error::connection_lost, {}});
    CHECK(lost.ec == colock::redis::error::connection_lost);
    CHECK(lost.server_text.empty());
}

TEST_CASE("lock reply readers: a status read takes a simple string for the value, and passes "
          "a PTTL of -1 and a long queue through") {
    auto const r =
        read_lock(answered(array({simple_text("F 3"), number(-1), number(1'000'000), number(1)})));
    CHECK_FALSE(r.ec);
    CHECK(r.value == "F 3");
    CHECK(r.pttl == -1);
    CHECK(r.queued == 1'000'000);
    // A null where the value is due is no string.
    CHECK(read_lock(answered(array({value{}, number(-2), number(0), number(1)}))).ec ==
          colock::error::unexpected_reply);
}

TEST_CASE("lock reply readers: a record of simple strings reads; a null value is foreign and "
          "nothing of it is kept") {
    auto const r = read_record(
        answered(array({simple_text("host"), simple_text("h"), blob("pid"), blob("")})));
    CHECK_FALSE(r.ec);
    REQUIRE(r.fields.size() == 2);
    CHECK(r.fields[0].first == "host");
    CHECK(r.fields[1].second.empty());
    auto const bad = read_record(answered(array({blob("host"), blob("h"), blob("pid"), value{}})));
    CHECK(bad.ec == colock::error::unexpected_reply);
    CHECK(bad.fields.empty());
}

TEST_CASE("lock reply readers: a forced unlock that ended a lease names both its owner and "
          "token, no fewer and no more") {
    auto const ok =
        read_forced_unlock(answered(array({number(1), simple_text("owner"), simple_text("tok")})));
    CHECK(ok.ended);
    CHECK(ok.owner == "owner");
    CHECK(ok.token == "tok");
    for (auto const& v : {array({number(1), blob("owner"), number(5)}),
                          array({number(1), blob("owner"), blob("tok"), blob("x")}),
                          array({number(1), blob("owner")}),
                          array({blob("1"), blob("o"), blob("t")}), array({number(-1)})}) {
        auto const r = read_forced_unlock(answered(v));
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.ended);
        CHECK(r.owner.empty());
    }
}

TEST_CASE("lock reply readers: a grant whose flags come as text or out of range is foreign, "
          "never granted") {
    for (auto const& v :
         {array({number(1), number(5), blob("0")}), array({number(-1), number(5), number(0)}),
          array({number(0), blob("100"), number(0)}),
          array({number(1), number(5), number(0), number(0)})}) {
        auto const r = read_grant(answered(v));
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.granted);
        CHECK(r.outcome_unknown);
        CHECK(r.fence == 0);
    }
}

TEST_CASE("lock reply readers: a grant held by another whose PTTL is far below -2 is read as gone, "
          "try again at once") {
    auto const r = read_grant(answered(array({number(0), number(-1000), number(0)})));
    CHECK_FALSE(r.ec);
    CHECK_FALSE(r.granted);
    CHECK(r.holder_ttl == 0ms);
}

TEST_CASE("lock reply readers: the server's words are a refusal's only") {
    CHECK(script_reply{colock::redis::error::server_error, error_reply("ERR x")}.server_text() ==
          "ERR x");
    // Another failure with a value beside it has no server words.
    CHECK(script_reply{colock::error::unexpected_reply, blob("junk")}.server_text().empty());
    CHECK(script_reply{{}, blob("fine")}.server_text().empty());
}

TEST_CASE("lock reply readers: a retried request's pause doubles at most four times, even below "
          "a larger cap, and a negative round is the first") {
    retry_schedule const s{10, 20ms, 10'000ms, 5000ms};
    CHECK(s.pause(-5) == 20ms);
    CHECK(s.pause(0) == 20ms);
    CHECK(s.pause(3) == 160ms);
    CHECK(s.pause(4) == 320ms);
    CHECK(s.pause(5) == 320ms);
    CHECK(s.pause(INT_MAX) == 320ms);
    CHECK(release_retries.pause(0) == 20ms);
    CHECK(release_retries.pause(100) == 250ms);
}

TEST_CASE("lock reply readers: the one-key calls' replies, and the uncontended grant's fence as "
          "text") {
    held_value const written{42, 7};
    // acquire_known: 1 granted the value the store knew, 0 asks the general acquire.
    auto granted = read_known_grant(answered(number(1)), written);
    REQUIRE(granted);
    CHECK(granted->granted);
    CHECK(granted->fence == 42);
    REQUIRE(granted->written);
    CHECK(granted->written->fence == 42);
    CHECK_FALSE(read_known_grant(answered(number(0)), written));
    // Anything else is garbled, of unknown outcome (the script ran); a lost reply too.
    for (auto const& v : {number(2), number(-1), blob("1"), simple_text("OK")}) {
        auto const r = read_known_grant(answered(v), written);
        REQUIRE(r);
        CHECK(r->ec == colock::error::unexpected_reply);
        CHECK_FALSE(r->granted);
        CHECK(r->outcome_unknown);
    }
    auto const lost =
        read_known_grant(script_reply{colock::redis::error::connection_lost, {}}, written);
    REQUIRE(lost);
    CHECK(lost->outcome_unknown);
    // release_known: 1 released, 0 asks the general release, anything else is no success.
    auto const released = read_known_release(answered(number(1)));
    REQUIRE(released);
    CHECK(released->ours);
    CHECK_FALSE(released->handed);
    CHECK_FALSE(read_known_release(answered(number(0))));
    for (auto const& v : {number(2), number(-1), blob("1"), simple_text("OK")}) {
        auto const r = read_known_release(answered(v));
        REQUIRE(r);
        CHECK(r->ec == colock::error::unexpected_reply);
        CHECK_FALSE(r->ours);
    }
    // The general acquire's uncontended path answers the fence as its decimal text.
    auto const text = read_grant(answered(blob("1764738211234568")));
    CHECK(text.granted);
    CHECK(text.fence == 1764738211234568);
    for (auto const& bad : {"0", "-3", "12x", ""}) {
        auto const r = read_grant(answered(blob(bad)));
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK_FALSE(r.granted);
    }
}

TEST_CASE("lock reply readers: a batch of renewals answers one flag per lease; a refusal sends "
          "each alone, anything else fails them all") {
    auto const read = read_known_extensions(answered(array({number(1), number(0), number(1)})), 3);
    CHECK_FALSE(read.ec);
    CHECK(read.extended == std::vector<bool>{true, false, true});
    // A refusal (an ACL without the function, a proxy): no answers and no error, so that each
    // lease asks alone and hears it.
    auto const refused = read_known_extensions(
        script_reply{colock::redis::error::server_error, error_reply("NOPERM")}, 2);
    CHECK_FALSE(refused.ec);
    CHECK(refused.extended.empty());
    auto const lost =
        read_known_extensions(script_reply{colock::redis::error::connection_lost, {}}, 2);
    CHECK(lost.ec == colock::redis::error::connection_lost);
    CHECK(lost.extended.empty());
    // Too few or too many answers, a flag out of range or of another type, not an array.
    for (auto const& v :
         {array({number(1)}), array({number(1), number(0), number(1)}),
          array({number(1), number(2)}), array({number(1), blob("1")}), number(1)}) {
        auto const r = read_known_extensions(answered(v), 2);
        CHECK(r.ec == colock::error::unexpected_reply);
        CHECK(r.extended.empty());
    }
}

} // namespace lock_reply_readers_test
