// The lock scripts' replies read without a server: every shape the scripts answer with, and the
// shapes a broken server or proxy could send instead (test_hostile_server.cpp sends some of them
// over a socket), none of which may read as "granted", "done" or "not ours".
#include "lock/store/lock_replies.hpp"

#include "script_reply_builders.hpp"
#include "value_builders.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

using namespace colock::detail;
using boost::system::error_code;
using colock::resp3::value;
using namespace colock::test; // the reply builders
using namespace std::chrono_literals;

namespace {

script_reply refused(std::string text) {
    return script_reply{colock::redis::error::server_error, error_reply(std::move(text))};
}

value simple(std::string text) {
    value v;
    v.type = colock::resp3::type::simple_string;
    v.text = std::move(text);
    return v;
}

value null_value() {
    return value{};
}

// Replies of a shape none of the scripts answers with, as test_hostile_server.cpp's proxy sends
// them, and a few more.
std::vector<std::pair<std::string, value>> foreign_shapes() {
    return {
        {"a simple string", simple("OK")},
        {"a map", aggregate(colock::resp3::type::map, {simple("acquired"), number(1)})},
        {"a negative number", number(-1)},
        {"a null", null_value()},
        {"an empty array", array({})},
    };
}

// Runs `check(what, value)` for each shape. (A lambda's parameters, not a structured binding:
// Clang 14 lets the CHECK macros' lambdas capture no structured binding.)
template <class Check>
void for_each_shape(std::vector<std::pair<std::string, value>> const& shapes, Check check) {
    for (auto const& shape : shapes)
        check(shape.first, shape.second);
}

} // namespace

TEST_CASE("read_grant: granted, held by another, and what the holder's ttl says") {
    auto r = read_grant(answered(array({number(1), number(1700000000000001), number(0)})));
    CHECK_FALSE(r.ec);
    CHECK(r.granted);
    CHECK(r.fence == 1700000000000001);
    CHECK_FALSE(r.others_queued);
    CHECK_FALSE(r.outcome_unknown);

    r = read_grant(answered(array({number(1), number(7), number(1)})));
    CHECK(r.granted);
    CHECK(r.others_queued);

    r = read_grant(answered(array({number(0), number(2500), number(1)})));
    CHECK_FALSE(r.ec);
    CHECK_FALSE(r.granted);
    CHECK(r.fence == 0);
    CHECK(r.holder_ttl == 2500ms);
    CHECK(r.others_queued);

    // Set without expiry by hand: back off only.
    r = read_grant(answered(array({number(0), number(-1), number(0)})));
    CHECK(r.holder_ttl == std::chrono::milliseconds::max());
    // Gone between the script's GET and its PTTL: try again at once.
    r = read_grant(answered(array({number(0), number(-2), number(0)})));
    CHECK(r.holder_ttl == 0ms);

    // The uncontended grant's bare fence: granted, nobody else queued.
    r = read_grant(answered(number(1700000000000002)));
    CHECK_FALSE(r.ec);
    CHECK(r.granted);
    CHECK(r.fence == 1700000000000002);
    CHECK_FALSE(r.others_queued);
    CHECK_FALSE(r.outcome_unknown);
    r = read_grant(answered(number(1)));
    CHECK(r.granted);
    CHECK(r.fence == 1);
}

TEST_CASE("read_grant: whether a failed request may have granted the lease") {
    // A refusal did not run the script; its words are kept.
    auto r =
        read_grant(refused("NOPERM this user has no permissions to run the 'evalsha' command"));
    CHECK(r.ec == colock::redis::error::server_error);
    CHECK(r.server_text.starts_with("NOPERM"));
    CHECK_FALSE(r.outcome_unknown);
    CHECK_FALSE(r.granted);
    // Stopped before it was sent.
    r = read_grant(script_reply{boost::asio::error::operation_aborted, {}});
    CHECK_FALSE(r.outcome_unknown);
    // Lost with the connection after it was written: it may have run.
    r = read_grant(script_reply{colock::redis::error::connection_lost, {}});
    CHECK(r.ec == colock::redis::error::connection_lost);
    CHECK(r.outcome_unknown);
    CHECK(r.server_text.empty());
}

TEST_CASE("read_grant: a reply of any other shape is unexpected_reply of unknown outcome") {
    auto shapes = foreign_shapes();
    shapes.emplace_back("two elements", array({number(1), number(5)}));
    shapes.emplace_back("a granted flag of 2", array({number(2), number(5), number(0)}));
    shapes.emplace_back("numbers as strings", array({blob("1"), blob("5"), blob("0")}));
    shapes.emplace_back("a fence of 0", array({number(1), number(0), number(0)}));
    shapes.emplace_back("a negative fence", array({number(1), number(-4), number(0)}));
    shapes.emplace_back("a bare fence of 0", number(0));
    shapes.emplace_back("a bare negative fence", number(-7));
    shapes.emplace_back("an others flag of 3", array({number(0), number(10), number(3)}));
    shapes.emplace_back("a set, not an array",
                        aggregate(colock::resp3::type::set, {number(1), number(5), number(0)}));
    for_each_shape(shapes, [](std::string const& what, value const& v) {
        auto const r = read_grant(answered(v));
        CHECK_MESSAGE(r.ec == colock::error::unexpected_reply, what);
        CHECK_FALSE_MESSAGE(r.granted, what);
        CHECK_MESSAGE(r.outcome_unknown, what); // the script ran: release with the token
        CHECK_MESSAGE(r.server_text == colock::resp3::to_debug_string(v), what);
    });
}

TEST_CASE("replicas_failure_text says how many acknowledged, and why WAIT was refused") {
    replica_wait const wanted{2, 150ms};
    CHECK(replicas_failure_text(wait_reply{1, {}}, wanted) ==
          "1 of 2 replicas acknowledged the lock within 150 ms (WAIT); it was released");
    CHECK(replicas_failure_text(wait_reply{0, "NOPERM no WAIT for you"}, wanted) ==
          "0 of 2 replicas acknowledged the lock within 150 ms (WAIT): WAIT refused: NOPERM no "
          "WAIT for you; it was released");
}

TEST_CASE("read_extend and read_release: the scripts' numbers, and nothing else") {
    CHECK(read_extend(answered(number(1))).ours);
    CHECK_FALSE(read_extend(answered(number(1))).ec);
    CHECK_FALSE(read_extend(answered(number(0))).ours);
    CHECK_FALSE(read_extend(answered(number(0))).ec);

    auto r = read_release(answered(number(2)));
    CHECK((r.ours && r.handed && !r.ec));
    r = read_release(answered(number(1)));
    CHECK((r.ours && !r.handed && !r.ec));
    r = read_release(answered(number(0)));
    CHECK((!r.ours && !r.handed && !r.ec));

    auto shapes = foreign_shapes();
    shapes.emplace_back("a number as a string", blob("1"));
    shapes.emplace_back("a 3", number(3));
    shapes.emplace_back("an array of a 1", array({number(1)}));
    for_each_shape(shapes, [](std::string const& what, value const& v) {
        auto const e = read_extend(answered(v));
        CHECK_MESSAGE(e.ec == colock::error::unexpected_reply, what);
        CHECK_FALSE_MESSAGE(e.ours, what);
        auto const rel = read_release(answered(v));
        CHECK_MESSAGE(rel.ec == colock::error::unexpected_reply, what);
        CHECK_FALSE_MESSAGE(rel.ours, what);
        CHECK_FALSE_MESSAGE(rel.handed, what);
    });
    // extend's 2 is as foreign as release's 3.
    CHECK(read_extend(answered(number(2))).ec == colock::error::unexpected_reply);

    // A failure stays the failure, never "not ours".
    CHECK(read_release(refused("BUSY")).ec == colock::redis::error::server_error);
    CHECK(read_extend(script_reply{colock::error::timeout, {}}).ec == colock::error::timeout);
}

TEST_CASE("read_lock: the status script's reading") {
    auto r = read_lock(answered(array(
        {blob("H 12 abc tok 1700000000000 0"), number(2900), number(3), number(1700000000123)})));
    CHECK_FALSE(r.ec);
    CHECK(r.value == "H 12 abc tok 1700000000000 0");
    CHECK(r.pttl == 2900);
    CHECK(r.queued == 3);
    r = read_lock(answered(array({blob(""), number(-2), number(0), number(1)})));
    CHECK_FALSE(r.ec);
    CHECK(r.value.empty());
    CHECK(r.pttl == -2);

    r = read_lock(refused("NOPERM status"));
    CHECK(r.ec == colock::redis::error::server_error);
    CHECK(r.server_text == "NOPERM status");

    auto shapes = foreign_shapes();
    shapes.emplace_back("three elements", array({blob(""), number(-2), number(0)}));
    shapes.emplace_back("a number for the value",
                        array({number(5), number(-2), number(0), number(1)}));
    shapes.emplace_back("a string for the pttl",
                        array({blob(""), blob("x"), number(0), number(1)}));
    shapes.emplace_back("a negative queue", array({blob(""), number(-2), number(-1), number(1)}));
    for_each_shape(shapes, [](std::string const& what, value const& v) {
        auto const bad = read_lock(answered(v));
        CHECK_MESSAGE(bad.ec == colock::error::unexpected_reply, what);
        CHECK_MESSAGE(bad.server_text == colock::resp3::to_debug_string(v), what);
    });
}

TEST_CASE("read_record: a map (RESP3) or a flat array (RESP2) of strings") {
    auto r = read_record(answered(aggregate(
        colock::resp3::type::map, {blob("host"), blob("web-1"), blob("pid"), blob("42")})));
    CHECK_FALSE(r.ec);
    REQUIRE(r.fields.size() == 2);
    CHECK(r.fields[0] == std::pair<std::string, std::string>{"host", "web-1"});
    CHECK(r.fields[1] == std::pair<std::string, std::string>{"pid", "42"});
    r = read_record(answered(array({blob("host"), blob("web-2")})));
    CHECK(r.fields.size() == 1);
    r = read_record(answered(aggregate(colock::resp3::type::map, {})));
    CHECK_FALSE(r.ec);
    CHECK(r.fields.empty());

    for (auto const& shape : std::vector<std::pair<std::string, value>>{
             {"an odd count", array({blob("host")})},
             {"a number for a field", array({number(1), blob("x")})},
             {"a nested array", array({blob("host"), array({})})},
             {"a simple string", simple("OK")},
             {"a null", null_value()}}) {
        auto const& what = shape.first;
        auto const bad = read_record(answered(shape.second));
        CHECK_MESSAGE(bad.ec == colock::error::unexpected_reply, what);
        CHECK_MESSAGE(bad.fields.empty(), what);
    }
    r = read_record(refused("NOPERM hgetall"));
    CHECK(r.ec == colock::redis::error::server_error);
    CHECK(r.server_text == "NOPERM hgetall");
}

TEST_CASE("read_forced_unlock: whose lease was ended, or that none was") {
    auto r = read_forced_unlock(answered(array({number(1), blob("owner-1"), blob("tok-1")})));
    CHECK_FALSE(r.ec);
    CHECK(r.ended);
    CHECK(r.owner == "owner-1");
    CHECK(r.token == "tok-1");
    r = read_forced_unlock(answered(array({number(0)})));
    CHECK_FALSE(r.ec);
    CHECK_FALSE(r.ended);

    auto shapes = foreign_shapes();
    shapes.emplace_back("ended without a holder", array({number(1)}));
    shapes.emplace_back("ended with a number for the owner",
                        array({number(1), number(5), blob("tok")}));
    shapes.emplace_back("a 2", array({number(2)}));
    for_each_shape(shapes, [](std::string const& what, value const& v) {
        auto const bad = read_forced_unlock(answered(v));
        CHECK_MESSAGE(bad.ec == colock::error::unexpected_reply, what);
        CHECK_FALSE_MESSAGE(bad.ended, what);
    });
}

TEST_CASE("last_reply: a request's outcome as one reply") {
    colock::redis::response resp;
    resp.push_back(number(1));
    resp.push_back(number(2));
    auto r = last_reply({}, std::move(resp));
    CHECK_FALSE(r.ec);
    CHECK(r.value == number(2));
    CHECK(r.server_text().empty());
    // Nothing answered: never read as a success.
    CHECK(last_reply({}, {}).ec == colock::error::unexpected_reply);
    colock::redis::response refusal;
    refusal.push_back(error_reply("NOPERM no"));
    r = last_reply(colock::redis::error::server_error, std::move(refusal));
    CHECK(r.ec == colock::redis::error::server_error);
    CHECK(r.server_text() == "NOPERM no");
    // Another failure drops what came with it.
    colock::redis::response partial;
    partial.push_back(number(1));
    r = last_reply(colock::redis::error::connection_lost, std::move(partial));
    CHECK(r.ec == colock::redis::error::connection_lost);
    CHECK(r.value == value{});
}

TEST_CASE("retry_schedule: pauses double up to the cap") {
    retry_schedule const release{100, 20ms, 250ms, 5000ms};
    std::vector<std::chrono::milliseconds> pauses;
    for (int round = 0; round < 7; ++round)
        pauses.push_back(release.pause(round));
    CHECK(pauses ==
          std::vector<std::chrono::milliseconds>{20ms, 40ms, 80ms, 160ms, 250ms, 250ms, 250ms});
    retry_schedule const leave{3, 50ms, 200ms, 5000ms};
    CHECK(leave.pause(0) == 50ms);
    CHECK(leave.pause(1) == 100ms);
    CHECK(leave.pause(2) == 200ms);
    CHECK(leave.pause(1000000) == 200ms);
}
