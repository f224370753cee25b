// The request builder at the edges test_resp3_request.cpp leaves: taking the payload, what
// clear() forgets of a MULTI, commands that stay unmatchable inside one, CLIENT REPLY without its
// mode, and empty arguments.
#include <colock/resp3/request.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace resp3_request_edges_test {

using colock::resp3::reply_kind;
using colock::resp3::reply_shape;
using colock::resp3::request;

TEST_CASE("request edges: take_payload hands the bytes over and leaves an empty request") {
    request r;
    r.push("SUBSCRIBE", "a");
    r.push("CLIENT", "REPLY", "OFF");
    std::string const bytes = r.take_payload();
    CHECK(bytes == "*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n"
                   "*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n");
    CHECK(r.empty());
    CHECK(r.payload().empty());
    CHECK(r.commands() == 0);
    CHECK(r.expected_replies() == 0);
    CHECK(r.expected_confirmations() == 0);
    CHECK(r.shapes().empty());
    CHECK(r.unmatchable_command().empty());
}

TEST_CASE("request edges: clear() ends a MULTI left open, so the next SUBSCRIBE waits for its "
          "confirmation again") {
    request r;
    r.push("MULTI");
    r.clear();
    r.push("SUBSCRIBE", "a");
    CHECK(r.shape(0) == reply_shape{reply_kind::subscribe, 1});
    CHECK(r.expected_confirmations() == 1);
    CHECK(r.expected_replies() == 0);

    request taken;
    taken.push("MULTI");
    (void)taken.take_payload();
    taken.push("PSUBSCRIBE", "p*");
    CHECK(taken.shape(0).kind == reply_kind::psubscribe);
}

TEST_CASE("request edges: inside a MULTI, HELLO, MONITOR and RESET stay unmatchable") {
    request r;
    r.push("MULTI");
    r.push("HELLO", "2");
    r.push("monitor");
    r.push("EXEC");
    CHECK(r.shape(1).kind == reply_kind::unmatchable);
    CHECK(r.shape(2).kind == reply_kind::unmatchable);
    CHECK(r.shape(3).kind == reply_kind::ordinary);
    CHECK(r.unmatchable_command() == "HELLO");
    CHECK(r.expected_replies() == 4);
}

TEST_CASE("request edges: CLIENT REPLY without its mode, or with ON, is ordinary") {
    request r;
    r.push("CLIENT", "REPLY");
    r.push("CLIENT", "reply", "on");
    r.push("CLIENT", "NOREPLY", "OFF");
    r.push("CLIENT", "OFF", "REPLY");
    CHECK(r.shapes().empty());
    CHECK(r.unmatchable_command().empty());
    CHECK(r.expected_replies() == 4);
}

TEST_CASE("request edges: empty arguments are written as empty bulk strings and counted") {
    request r;
    r.push("SET", "", "");
    CHECK(r.payload() == "*3\r\n$3\r\nSET\r\n$0\r\n\r\n$0\r\n\r\n");
    r.push_range("SUBSCRIBE", std::vector<std::string>{""});
    CHECK(r.shape(1) == reply_shape{reply_kind::subscribe, 1});
    CHECK(r.expected_confirmations() == 1);
    CHECK(r.commands() == 2);
}

TEST_CASE("request edges: shapes recorded from the first command that is not ordinary keep the "
          "ones before it ordinary") {
    request r;
    r.push("GET", "a");
    r.push("GET", "b");
    r.push("RESET");
    r.push("GET", "c");
    REQUIRE(r.shapes().size() == 4);
    CHECK(r.shape(0) == reply_shape{});
    CHECK(r.shape(1) == reply_shape{});
    CHECK(r.shape(2) == reply_shape{reply_kind::unmatchable, 0});
    CHECK(r.shape(3) == reply_shape{});
    CHECK(r.unmatchable_command() == "RESET");
}

} // namespace resp3_request_edges_test
